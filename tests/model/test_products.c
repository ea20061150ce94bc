/* test_products.c: model_products lists exactly the oneDNN primitives a run
 * creates. For LoRA (every projection, f32), LoRA with dropout on bf16
 * weights, DoRA, full fine-tuning of the last two blocks, and a qwen-style
 * model (biases, q/k norms) training only its last block, a tiny model runs
 * two training batches of different shapes and one evaluation batch; the
 * shapes of the primitives alive in matmul.c's cache afterwards must be the
 * set model_products gives for the same batches, element for element; and
 * for a 4-bit MLX-quantized base (QLoRA), whose frozen products run on
 * expanded panels with strided operands. Also
 * the FLOPs it reports add up: the recompute products of a block are its
 * forward ones without the down projection's base product. */
#include "check.h"
#include "model_testutil.h"
#include "data/batching.h"
#include "kernels/matmul.h"
#include "model/convert.h"
#include <math.h>
#include <unistd.h>

typedef struct {
    MatmulShape s[1024];
    size_t n;
    double recompute_flops[8], forward_flops[8];
} Listed;

static bool same(const MatmulShape *a, const MatmulShape *b) {
    return a->M == b->M && a->N == b->N && a->K == b->K && a->transA == b->transA && a->transB == b->transB &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->a_type == b->a_type &&
           a->b_type == b->b_type && a->alpha == b->alpha && a->beta == b->beta && a->has_bias == b->has_bias;
}

static void sink(void *ctx, const MatmulShape *s, int block, ProductPhase phase) {
    Listed *l = ctx;
    double flops = 2.0 * (double)s->M * (double)s->N * (double)s->K;
    if (block >= 0 && block < 8 && phase == PRODUCT_RECOMPUTE) l->recompute_flops[block] += flops;
    if (block >= 0 && block < 8 && phase == PRODUCT_FORWARD) l->forward_flops[block] += flops;
    for (size_t i = 0; i < l->n; i++)
        if (same(&l->s[i], s)) return;
    if (l->n < 1024) l->s[l->n++] = *s;
}

static void describe(const MatmulShape *s, char *buf, size_t n) {
    snprintf(buf, n, "(%lld x %lld x %lld, tA %d tB %d, ld %lld/%lld/%lld, %s, alpha %g beta %g bias %d)",
             (long long)s->M, (long long)s->N, (long long)s->K, s->transA, s->transB, (long long)s->lda,
             (long long)s->ldb, (long long)s->ldc, s->a_type == DTYPE_BF16 ? "bf16" : "f32", s->alpha, s->beta,
             s->has_bias);
}

static long counted(const int32_t *lengths, const int32_t *offsets, int B) {
    long n = 0;
    for (int b = 0; b < B; b++) n += batch_row_loss_tokens(offsets[b], lengths[b]);
    return n;
}

/* quantize: the model is converted to MLX's 4-bit affine format first (QLoRA). */
static void run_case_q(const char *what, const ModelConfig *cfg, DType file_dtype, ModelSpec spec, bool quantize) {
    char dir[128], src[160];
    snprintf(dir, sizeof dir, "/tmp/lmtune_products_%d", (int)getpid());
    snprintf(src, sizeof src, "%s_src", dir);
    CHECK(model_init_random(quantize ? src : dir, cfg, file_dtype, 5) == 0);
    if (quantize) {
        ConvertOptions co = {src, dir, true, false, 32, 4, "affine", NULL, "bfloat16", 0};
        FILE *devnull = fopen("/dev/null", "w");
        CHECK(convert_model(&co, devnull) == 0);
        fclose(devnull);
    }
    spec.max_rows = 2;
    spec.max_tokens = 16;
    spec.training = true;
    spec.lmhead_chunk = 8;
    /* the batches: 2 x 17 and 1 x 9 trained, 2 x 9 evaluated */
    int32_t tokens[2 * 17], lengths[2], offsets[2];
    for (int i = 0; i < 2 * 17; i++) tokens[i] = (i * 29 + 3) % cfg->vocab_size;
    ProductBatch pb[3];
    memset(pb, 0, sizeof pb);
    /* first, list the products and plan the scratchpad from them */
    lengths[0] = 17; lengths[1] = 12; offsets[0] = 0; offsets[1] = 3;
    pb[0] = (ProductBatch){2, 16, counted(lengths, offsets, 2), true, false};
    int32_t l1[1] = {9}, o1[1] = {2};
    pb[1] = (ProductBatch){1, 8, counted(l1, o1, 1), true, false};
    int32_t l2[2] = {9, 5}, o2[2] = {0, 0};
    pb[2] = (ProductBatch){2, 8, counted(l2, o2, 2), false, false};
    Listed *want = calloc(1, sizeof *want);
    WeightsSummary ws;
    CHECK(model_weights_summary(dir, cfg, &ws) == 0);
    CHECK(ws.quantized == quantize);
    FrozenWeight *views = NULL;
    int n_views = 0;
    if (quantize) CHECK(model_frozen_views(dir, cfg, spec.weight_dtype, &views, &n_views) == 0);
    CHECK(model_products(cfg, &spec, &ws, views, pb, 3, sink, want) == 0);
    mem_free(views);
    MatmulPlan mp;
    CHECK(matmul_plan(want->s, want->n, &mp) == 0);
    spec.library_scratchpad = mp.scratchpad_bytes;

    Model *m = NULL;
    Arena arena = {0};
    MemPlan lp = {0};
    Carver lcv = {NULL, &lp};
    int lrc = model_layout_summary(cfg, &spec, &ws, &lcv);
    if (lrc == 0) lrc = arena_init(&arena, plan_arena_bytes(&lp));
    plan_free(&lp);
    if (lrc == 0) lrc = model_load(&m, dir, &spec, &arena);
    if (lrc < 0) {
        CHECK_MSG(0, "%s: %s", what, error_message());
        free(want);
        return;
    }
    matmul_release_all();
    size_t unplanned0 = matmul_unplanned_scratchpad_bytes();
    Rng rng;
    rng_seed(&rng, 1);
    CHECK(model_init_trainables(m, &rng) == 0);
    double loss;
    long nt;
    CHECK(model_forward_backward(m, tokens, 2, 17, lengths, offsets, 1.0f, &rng, &loss, &nt) == 0);
    CHECK(nt == pb[0].lm_rows);
    CHECK(model_forward_backward(m, tokens, 1, 9, l1, o1, 1.0f, &rng, &loss, &nt) == 0);
    CHECK(nt == pb[1].lm_rows);
    double sum;
    int32_t t2[2 * 9];
    for (int i = 0; i < 2 * 9; i++) t2[i] = tokens[i];
    CHECK(model_loss(m, t2, 2, 9, l2, o2, &sum, &nt) == 0);
    CHECK(nt == pb[2].lm_rows);

    MatmulShape got[1024];
    size_t n = matmul_alive_shapes(got, 1024);
    CHECK_MSG(n == want->n, "%s: %zu primitives alive, %zu listed", what, n, want->n);
    char buf[200];
    for (size_t i = 0; i < n && i < 1024; i++) {
        bool found = false;
        for (size_t j = 0; j < want->n && !found; j++) found = same(&got[i], &want->s[j]);
        describe(&got[i], buf, sizeof buf);
        CHECK_MSG(found, "%s: created but not listed: %s", what, buf);
    }
    for (size_t j = 0; j < want->n; j++) {
        bool found = false;
        for (size_t i = 0; i < n && i < 1024 && !found; i++) found = same(&got[i], &want->s[j]);
        describe(&want->s[j], buf, sizeof buf);
        CHECK_MSG(found, "%s: listed but not created: %s", what, buf);
    }
    /* the planned scratchpad served every product */
    CHECK_MSG(matmul_unplanned_scratchpad_bytes() == unplanned0, "%s: a product needed more scratchpad (%zu) "
              "than planned (%zu)", what, matmul_unplanned_scratchpad_bytes(), mp.scratchpad_bytes);
    /* a block's recompute is its forward without the down projection's
     * output: its base product (in = F, out = C) and, when adapted, its
     * LoRA B product (in = r, out = C), over the 40 trained positions */
    int lo = cfg->num_hidden_layers - (spec.num_layers > 0 ? spec.num_layers : cfg->num_hidden_layers);
    bool down_adapted = spec.type != TUNE_FULL && (spec.lora_keys >> PROJ_DOWN & 1u);
    double down = 2.0 * cfg->hidden_size * (cfg->intermediate_size + (down_adapted ? spec.lora_rank : 0)) * 40;
    for (int l = lo; l < cfg->num_hidden_layers && l < 8; l++) {
        /* every forward product of a block is linear in its rows N: the
         * forward FLOPs per position, times the trained positions */
        double per_token = want->forward_flops[l] / (2 * 16 + 1 * 8 + 2 * 8);
        double train_fwd = per_token * (2 * 16 + 1 * 8);
        CHECK_MSG(fabs(want->recompute_flops[l] - (train_fwd - down)) <= 1e-9 * train_fwd,
                  "%s: block %d recompute %.0f FLOPs, forward %.0f, down %.0f", what, l, want->recompute_flops[l],
                  train_fwd, down);
    }
    printf("%s: %zu primitives, as listed; scratchpad %zu bytes\n", what, n, mp.scratchpad_bytes);
    model_free(m);
    arena_free(&arena);
    free(want);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, src);
    CHECK(system(cmd) == 0);
}

static void run_case(const char *what, const ModelConfig *cfg, DType file_dtype, ModelSpec spec) {
    run_case_q(what, cfg, file_dtype, spec, false);
}

int main(void) {
    ModelConfig cfg;
    CHECK(model_preset("tiny", &cfg) == 0);
    cfg.num_hidden_layers = 3;
    cfg.vocab_size = 300;
    ModelSpec lora = {.type = TUNE_LORA, .num_layers = -1, .lora_rank = 4, .lora_scale = 2.0f,
                      .lora_keys = PROJ_ALL, .weight_dtype = DTYPE_F32};
    run_case("LoRA, every projection, f32", &cfg, DTYPE_F32, lora);

    ModelSpec drop = lora;
    drop.lora_dropout = 0.1f;
    drop.lora_keys = (1u << PROJ_Q) | (1u << PROJ_V) | (1u << PROJ_DOWN);
    drop.num_layers = 2;
    run_case("LoRA q,v,down with dropout, bf16 file", &cfg, DTYPE_BF16, drop);

    ModelSpec dora = lora;
    dora.type = TUNE_DORA;
    dora.num_layers = 2;
    dora.weight_dtype = DTYPE_BF16;
    run_case("DoRA, f32 file used as bf16", &cfg, DTYPE_F32, dora);

    ModelSpec full = {.type = TUNE_FULL, .num_layers = 2, .weight_dtype = DTYPE_F32};
    run_case("full fine-tuning of 2 blocks", &cfg, DTYPE_F32, full);

    ModelConfig qwen = cfg;
    qwen.attention_bias = true;
    qwen.qk_norm = true;
    snprintf(qwen.model_type, sizeof qwen.model_type, "qwen3");
    ModelSpec last = lora;
    last.num_layers = 1;
    run_case("qwen-style (biases, q/k norms), LoRA on the last block", &qwen, DTYPE_F32, last);
    /* QLoRA: 4-bit MLX affine weights with bf16 scales; the frozen products
     * expand panels (frozen_weight.c), the decoding GEMV takes no primitive */
    run_case_q("QLoRA, 4-bit base, every projection", &cfg, DTYPE_F32, lora, true);
    matmul_release_all();
    return check_finish("model/products");
}

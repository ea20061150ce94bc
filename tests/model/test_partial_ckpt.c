/* test_partial_ckpt.c: checkpointing block by block gives the same bits.
 * On a 4-block model whose last 3 blocks train (the first stays frozen, so
 * the frozen forward's workspace is exercised too), every one of the 8 sets
 * of checkpointed blocks is loaded into an arena of exactly its plan and
 * runs the same micro-batch twice (gradients accumulate): the loss and every
 * gradient must equal, bit for bit, those of the run without checkpointing,
 * for LoRA with dropout, DoRA (bf16 weights) and full fine-tuning. The plan
 * of each set is also checked: each checkpointed block trades its saved
 * activations for its input, and the recompute workspace exists iff some
 * block is checkpointed. */
#include "check.h"
#include "model_testutil.h"
#include <unistd.h>

typedef struct {
    float *grads;
    size_t n;
    double loss[2];
} Result;

static int run(Result *out, const char *dir, const ModelConfig *cfg, ModelSpec spec, DType ft) {
    Model *m;
    Arena arena;
    size_t planned;
    if (load_planned(&m, &arena, &planned, dir, cfg, &spec, ft) < 0) return -1;
    int rc = 0;
    CHECK_MSG(arena.used == planned, "arena used %zu, plan %zu", arena.used, planned);
    Rng rng;
    rng_seed(&rng, 11);
    rc = model_init_trainables(m, &rng);
    int B = spec.max_rows, W = spec.max_tokens + 1;
    int32_t tokens[3 * 20], lengths[3] = {W, W - 5, W - 2}, offsets[3] = {0, 2, 1};
    for (int i = 0; i < B * W; i++) tokens[i] = (i * 53 + 7) % cfg->vocab_size;
    model_zero_grad(m);
    Rng drop;
    rng_seed(&drop, 5);
    for (int k = 0; k < 2 && rc == 0; k++) {
        long nt;
        rc = model_forward_backward(m, tokens, B, W, lengths, offsets, 0.5f, &drop, &out->loss[k], &nt);
    }
    TrainableTensor *t;
    size_t nt = model_trainables(m, &t);
    out->n = 0;
    for (size_t i = 0; i < nt; i++) out->n += t[i].numel;
    out->grads = malloc(out->n * sizeof(float));
    size_t at = 0;
    for (size_t i = 0; i < nt; i++) {
        memcpy(out->grads + at, t[i].grad, t[i].numel * sizeof(float));
        at += t[i].numel;
    }
    model_free(m);
    arena_free(&arena);
    return rc;
}

static size_t plan_of(const ModelConfig *cfg, const ModelSpec *spec, DType ft, MemClass c) {
    MemPlan plan = {0};
    Carver cv = {NULL, &plan};
    CHECK(model_layout_dtype(cfg, spec, ft, &cv) == 0);
    size_t b = c == MEM_CLASS_COUNT ? plan_arena_bytes(&plan) : plan_class_bytes(&plan, c);
    plan_free(&plan);
    return b;
}

static void all_sets(const char *what, const char *dir, const ModelConfig *cfg, ModelSpec spec, DType ft) {
    CHECK(model_init_random(dir, cfg, ft, 3) == 0);
    spec.max_rows = 3;
    spec.max_tokens = 19;
    spec.training = true;
    spec.lmhead_chunk = 16;
    Result base;
    if (run(&base, dir, cfg, spec, ft) < 0) {
        CHECK_MSG(0, "%s: %s", what, error_message());
        return;
    }
    size_t act0 = plan_of(cfg, &spec, ft, MEM_ACTIVATIONS);
    int lo = cfg->num_hidden_layers - spec.num_layers;
    for (unsigned set = 1; set < 8; set++) {
        ModelSpec s = spec;
        for (int i = 0; i < 3; i++)
            if (set >> i & 1u) block_set_add(&s.ckpt_blocks, lo + i);
        Result r;
        if (run(&r, dir, cfg, s, ft) < 0) {
            CHECK_MSG(0, "%s, set %u: %s", what, set, error_message());
            continue;
        }
        CHECK_MSG(r.n == base.n && !memcmp(r.grads, base.grads, base.n * sizeof(float)),
                  "%s: gradients with blocks set %u checkpointed differ from none", what, set);
        CHECK_MSG(!memcmp(r.loss, base.loss, sizeof r.loss), "%s: loss with set %u: %.17g vs %.17g", what, set,
                  r.loss[0], base.loss[0]);
        /* plan: checkpoints are one (N, C) input per checkpointed block */
        int k = __builtin_popcount(set);
        size_t N = (size_t)spec.max_rows * spec.max_tokens;
        size_t in = (N * cfg->hidden_size * 4 + 63) / 64 * 64;
        CHECK(plan_of(cfg, &s, ft, MEM_CHECKPOINTS) == (size_t)k * in);
        CHECK(plan_of(cfg, &s, ft, MEM_RECOMPUTE) > 0);
        CHECK(plan_of(cfg, &s, ft, MEM_ACTIVATIONS) < act0);
        free(r.grads);
    }
    CHECK(plan_of(cfg, &spec, ft, MEM_RECOMPUTE) == 0);
    printf("%s: 7 sets of checkpointed blocks, gradients (%zu floats) and losses bit-identical to none\n", what,
           base.n);
    free(base.grads);
}

int main(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/lmtune_partial_ckpt_%d", (int)getpid());
    ModelConfig cfg;
    CHECK(model_preset("tiny", &cfg) == 0);
    cfg.num_hidden_layers = 4;
    cfg.vocab_size = 300;
    ModelSpec lora = {.type = TUNE_LORA, .num_layers = 3, .lora_rank = 4, .lora_scale = 2.0f, .lora_dropout = 0.1f,
                      .lora_keys = PROJ_ALL, .weight_dtype = DTYPE_F32};
    all_sets("LoRA with dropout", dir, &cfg, lora, DTYPE_F32);
    ModelSpec dora = lora;
    dora.type = TUNE_DORA;
    dora.lora_dropout = 0;
    dora.weight_dtype = DTYPE_BF16;
    all_sets("DoRA, bf16 weights", dir, &cfg, dora, DTYPE_BF16);
    ModelSpec full = {.type = TUNE_FULL, .num_layers = 3, .weight_dtype = DTYPE_F32};
    all_sets("full fine-tuning", dir, &cfg, full, DTYPE_F32);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return check_finish("model/partial_ckpt");
}

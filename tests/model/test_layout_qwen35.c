/* test_layout_qwen35.c: the memory plan of a Qwen3.5 model (Gated DeltaNet
 * and gated attention blocks) is the real layout:
 *  - model_layout_dtype in planning mode gives exactly the arena bytes model_load
 *    consumes, for LoRA (only the attention block trained, both kinds, chunk
 *    sizes 64 and 5), DoRA, full, with and without checkpointing, and
 *    decoding (KV cache + conv and recurrent states), f32 and bf16 files, and
 *    a training step runs inside it;
 *  - the Gated DeltaNet buffers are plan entries of the sizes the shapes give
 *    (counted by hand here);
 *  - the arena grows linearly with the sequence length (no T x T term): on
 *    the tiny model and on the published Qwen3.5-0.8B shape, the arena at 4T
 *    minus the arena at 2T is exactly twice the arena at 2T minus the arena
 *    at T, for LoRA with and without checkpointing and for full tuning. */
#include "check.h"
#include "model_testutil.h"
#include "base/dtype.h"
#include <unistd.h>

static size_t r64(size_t b) { return (b + 63) / 64 * 64; }

static size_t entry_bytes(const MemPlan *p, const char *prefix) {
    size_t b = 0;
    for (size_t i = 0; i < p->n; i++)
        if (!strncmp(p->entries[i].name, prefix, strlen(prefix))) b += p->entries[i].bytes;
    return b;
}

static size_t arena_of(const ModelConfig *cfg, const ModelSpec *spec) {
    MemPlan plan = {0};
    Carver cv = {NULL, &plan};
    CHECK(model_layout_dtype(cfg, spec, cfg->torch_dtype, &cv) == 0);
    size_t b = plan_arena_bytes(&plan);
    plan_free(&plan);
    return b;
}

static void check_load(const char *dir, const ModelConfig *cfg, const ModelSpec *spec, DType ft, const char *what) {
    Model *m;
    Arena arena;
    size_t planned;
    if (load_planned(&m, &arena, &planned, dir, cfg, spec, ft) < 0) {
        CHECK_MSG(0, "%s: %s", what, error_message());
        return;
    }
    CHECK_MSG(arena.used == planned, "%s: arena used %zu, plan %zu", what, arena.used, planned);
    if (spec->training) {
        int B = spec->max_rows;
        int W = spec->max_tokens + 1;
        int32_t tokens[64];
        int32_t lengths[8];
        int32_t offsets[8];
        for (int i = 0; i < B * W; i++) tokens[i] = (i * 37 + 11) % cfg->vocab_size;
        for (int b = 0; b < B; b++) {
            lengths[b] = W - b;
            offsets[b] = b;
        }
        Rng rng;
        rng_seed(&rng, 3);
        CHECK(model_init_trainables(m, &rng) == 0);
        double loss;
        long nt;
        CHECK(model_forward_backward(m, tokens, B, W, lengths, offsets, 1.0f, &rng, &loss, &nt) == 0);
        CHECK_MSG(isfinite(loss) && nt > 0, "%s: loss %g", what, loss);
        CHECK_MSG(arena.used == planned, "%s: arena used %zu after a step, plan %zu", what, arena.used, planned);
    }
    model_free(m);
    arena_free(&arena);
}

/* f(4T) - f(2T) == 2 (f(2T) - f(T)) for the arena of spec at B rows. */
static void check_linear(const ModelConfig *cfg, ModelSpec spec, int T, const char *what) {
    size_t f[3];
    for (int i = 0; i < 3; i++) {
        spec.max_tokens = T << i;
        f[i] = arena_of(cfg, &spec);
    }
    CHECK_MSG(f[1] > f[0] && f[2] - f[1] == 2 * (f[1] - f[0]),
              "%s: arena at T=%d, %d, %d: %zu, %zu, %zu (not linear)", what, T, 2 * T, 4 * T, f[0], f[1], f[2]);
    printf("%-28s T=%d..%d: %.2f MiB + %.1f KiB per token\n", what, T, 4 * T,
           (double)(2 * f[0] - f[1]) / (1 << 20), (double)(f[1] - f[0]) / T / 1024);
}

int main(void) {
    ModelConfig cfg;
    CHECK(model_preset("tiny-qwen3.5", &cfg) == 0);
    /* 4 layers: 0, 1, 2 Gated DeltaNet, 3 gated attention */
    CHECK(cfg.q35.on && cfg.num_hidden_layers == 4 && cfg.q35.linear[2] && !cfg.q35.linear[3]);

    char dir[] = "/tmp/lmtune_layout_q35_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char d32[600];
    char d16[600];
    snprintf(d32, sizeof d32, "%s/f32", dir);
    snprintf(d16, sizeof d16, "%s/bf16", dir);
    CHECK(model_init_random(d32, &cfg, DTYPE_F32, 7) == 0);
    CHECK(model_init_random(d16, &cfg, DTYPE_BF16, 7) == 0);
    ModelConfig back;
    char cp[700];
    snprintf(cp, sizeof cp, "%s/config.json", d32);
    CHECK(hf_config_load(&back, cp) == 0);
    CHECK(back.q35.on && back.q35.n_linear == 3);

    ModelSpec lora = {.type = TUNE_LORA, .num_layers = 2, .lora_rank = 4, .lora_scale = 2.0f,
                      .lora_keys = PROJ_ALL, .max_rows = 2, .max_tokens = 7, .weight_dtype = DTYPE_F32,
                      .training = true};
    enum { NS = 10 };
    ModelSpec specs[NS];
    const char *names[NS] = {"lora", "lora+ckpt", "lora chunk 5", "lora attention block only", "dora",
                             "dora+ckpt", "full", "full+ckpt", "inference+kv", "lora dropout"};
    specs[0] = lora;
    specs[1] = lora;
    specs[1].grad_checkpoint = true;
    specs[2] = lora;
    specs[2].gdn_chunk = 5;
    specs[3] = lora;
    specs[3].num_layers = 1;
    specs[4] = lora;
    specs[4].type = TUNE_DORA;
    specs[5] = specs[4];
    specs[5].grad_checkpoint = true;
    specs[6] = lora;
    specs[6].type = TUNE_FULL;
    specs[7] = specs[6];
    specs[7].grad_checkpoint = true;
    specs[8] = (ModelSpec){.type = TUNE_NONE, .max_rows = 1, .max_tokens = 8, .weight_dtype = DTYPE_F32,
                           .kv_cache_tokens = 32};
    specs[9] = lora;
    specs[9].lora_dropout = 0.1f;
    for (int i = 0; i < NS; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s f32 file", names[i]);
        check_load(d32, &cfg, &specs[i], DTYPE_F32, what);
        snprintf(what, sizeof what, "%s bf16 file", names[i]);
        check_load(d16, &cfg, &specs[i], DTYPE_BF16, what);
        ModelSpec s = specs[i];
        s.weight_dtype = DTYPE_BF16;
        snprintf(what, sizeof what, "%s f32 file as bf16", names[i]);
        check_load(d32, &cfg, &s, DTYPE_F32, what);
    }

    /* the Gated DeltaNet buffers, counted by hand: Hk 2, Hv 4, Dk = Dv = 16,
     * conv channels 2*2*16 + 4*16 = 128, kernel 4 */
    {
        const size_t Hv = 4;
        const size_t Dk = 16;
        const size_t Dv = 16;
        const size_t CC = 128;
        const size_t K = 4;
        MemPlan p = {0};
        Carver cv = {NULL, &p};
        CHECK(model_layout_dtype(&cfg, &specs[8], cfg.torch_dtype, &cv) == 0);
        CHECK(entry_bytes(&p, "Gated DeltaNet recurrent states") == r64(3 * Hv * Dk * Dv * 4));
        CHECK(entry_bytes(&p, "Gated DeltaNet conv states") == r64(3 * (K - 1) * CC * 4));
        CHECK(entry_bytes(&p, "KV cache") == 2 * r64(32 * 2 * 16 * 4));
        plan_free(&p);
        /* training, no checkpointing: the per-chunk states of each trained
         * GDN block are part of its saved activations; the chunk workspace is
         * independent of T and grows with the chunk */
        ModelSpec a = lora;
        ModelSpec b = lora;
        b.max_tokens = 64;
        a.max_tokens = 64;
        a.gdn_chunk = 16;
        b.gdn_chunk = 32;
        MemPlan pa = {0};
        MemPlan pb = {0};
        Carver ca = {NULL, &pa};
        Carver cb = {NULL, &pb};
        CHECK(model_layout_dtype(&cfg, &a, cfg.torch_dtype, &ca) == 0);
        CHECK(model_layout_dtype(&cfg, &b, cfg.torch_dtype, &cb) == 0);
        size_t wa = entry_bytes(&pa, "Gated DeltaNet chunk workspace");
        size_t wb = entry_bytes(&pb, "Gated DeltaNet chunk workspace");
        CHECK(wa > 0 && wb > wa);
        /* 4 chunks of 16 vs 2 chunks of 32: states per chunk (B*Hv*Dk*Dv floats each) halve */
        size_t sa = entry_bytes(&pa, "block 2 saved activations (Gated DeltaNet)");
        size_t sb = entry_bytes(&pb, "block 2 saved activations (Gated DeltaNet)");
        CHECK_MSG(sa - sb == 2 * 2 * Hv * Dk * Dv * 4, "saved activations %zu vs %zu", sa, sb);
        plan_free(&pa);
        plan_free(&pb);
    }

    /* linear growth with the sequence length */
    {
        ModelSpec s = lora;
        s.max_rows = 1;
        check_linear(&cfg, s, 64, "tiny lora");
        s.grad_checkpoint = true;
        check_linear(&cfg, s, 64, "tiny lora+ckpt");
        ModelConfig big;
        CHECK(model_preset("qwen3.5-0.8b", &big) == 0);
        /* LM-head chunk pinned at 8 rows: two buffers are the larger of a chunk term and a term that
         * grows with the tokens, kinks that are not the blocks' growth. The bf16 matmul scratch holds
         * a (chunk, V) or an (N, widest projection) operand; the LM-head chunk shares the bytes of
         * one block's workspace (the recompute set, or the shared norm / GLU outputs), which is
         * made at least as long as the chunk. With the default chunk of a 248k vocabulary (67
         * rows, 64 MiB) the chunk terms win at 1024 tokens and lose at 4096; at 8 rows they lose
         * from 1024 on */
        ModelSpec bs = {.type = TUNE_LORA, .num_layers = 16, .lora_rank = 8, .lora_scale = 20.0f,
                        .lora_keys = PROJ_ALL, .max_rows = 1, .weight_dtype = DTYPE_BF16, .training = true,
                        .lmhead_chunk = 8};
        check_linear(&big, bs, 1024, "qwen3.5-0.8b lora");
        bs.grad_checkpoint = true;
        check_linear(&big, bs, 1024, "qwen3.5-0.8b lora+ckpt");
        bs.type = TUNE_FULL;
        check_linear(&big, bs, 1024, "qwen3.5-0.8b full+ckpt");
    }

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return check_finish("model/layout_qwen35");
}

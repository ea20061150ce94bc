/* test_layout.c: the memory plan is the real layout. model_layout in
 * planning mode must give exactly the arena bytes model_load consumes, for
 * LoRA / DoRA / full, checkpointing on and off, a KV cache, and the bf16
 * conversion of an F32 file; some class totals are checked against byte
 * counts computed by hand here; also the error paths of a batch. */
#include "check.h"
#include "model_testutil.h"
#include "base/dtype.h"
#include "kernels/frozen_weight.h"
#include "kernels/ops.h"
#include <unistd.h>

static size_t r64(size_t b) { return (b + 63) / 64 * 64; }

static size_t plan_class(const ModelConfig *cfg, const ModelSpec *spec, DType ft, MemClass c) {
    MemPlan plan = {0};
    Carver cv = {NULL, &plan};
    CHECK(model_layout_dtype(cfg, spec, ft, &cv) == 0);
    size_t b = plan_class_bytes(&plan, c);
    plan_free(&plan);
    return b;
}

static void check_load(const char *dir, const ModelConfig *cfg, const ModelSpec *spec, DType ft, const char *what) {
    Model *m; Arena arena; size_t planned;
    if (load_planned(&m, &arena, &planned, dir, cfg, spec, ft) < 0) {
        CHECK_MSG(0, "%s: %s", what, error_message());
        return;
    }
    CHECK_MSG(arena.used == planned, "%s: arena used %zu, plan %zu", what, arena.used, planned);
    /* a step runs inside the planned arena (bf16 products only where the CPU has them) */
    if (spec->training && (spec->weight_dtype != DTYPE_BF16 || matmul_bf16_supported())) {
        int B = spec->max_rows, W = spec->max_tokens + 1;
        int32_t tokens[64], lengths[8], offsets[8];
        for (int i = 0; i < B * W; i++) tokens[i] = (i * 37 + 11) % cfg->vocab_size;
        for (int b = 0; b < B; b++) { lengths[b] = W - b; offsets[b] = b; }
        Rng rng; rng_seed(&rng, 3);
        CHECK(model_init_trainables(m, &rng) == 0);
        double loss; long nt;
        CHECK(model_forward_backward(m, tokens, B, W, lengths, offsets, 1.0f, &rng, &loss, &nt) == 0);
        CHECK(isfinite(loss) && nt > 0);
        CHECK(arena.used == planned);
        /* token ids are checked before any compute */
        tokens[W + 2] = cfg->vocab_size + 44;
        CHECK(model_forward_backward(m, tokens, B, W, lengths, offsets, 1.0f, &rng, &loss, &nt) < 0);
        char want[96];
        snprintf(want, sizeof want, "token id %d >= vocab size %d in batch row 1", cfg->vocab_size + 44, cfg->vocab_size);
        CHECK_ERROR_CONTAINS(want);
        tokens[W + 2] = 1;
        CHECK(model_forward_backward(m, tokens, B + 1, W, lengths, offsets, 1.0f, &rng, &loss, &nt) < 0);
        CHECK_ERROR_CONTAINS("exceeds the planned");
    }
    model_free(m);
    arena_free(&arena);
}

int main(void) {
    ModelConfig cfg;
    CHECK(model_preset("tiny", &cfg) == 0);
    CHECK(model_preset("nope", &cfg) < 0);
    CHECK_ERROR_CONTAINS("unknown model preset");
    CHECK(model_preset("tiny", &cfg) == 0);
    cfg.num_hidden_layers = 3;
    int C = cfg.hidden_size, F = cfg.intermediate_size, D = cfg.head_dim;
    int QD = cfg.num_attention_heads * D, KVD = cfg.num_key_value_heads * D;
    int in[PROJ_COUNT] = {C, C, C, QD, C, C, F}, out[PROJ_COUNT] = {QD, KVD, KVD, C, F, F, C};

    ModelSpec lora = {.type = TUNE_LORA, .num_layers = 2, .lora_rank = 4, .lora_scale = 2.0f,
                      .lora_keys = PROJ_ALL, .max_rows = 2, .max_tokens = 7, .weight_dtype = DTYPE_F32,
                      .training = true};
    size_t N = 14, r = 4;
    /* hand counts: LoRA parameters 4*(in*r + r*out) per projection, each tensor 64-byte aligned */
    size_t want = 0;
    for (int p = 0; p < PROJ_COUNT; p++) want += r64(4 * in[p] * r) + r64(4 * r * out[p]);
    want *= 2;
    CHECK(plan_class(&cfg, &lora, DTYPE_F32, MEM_TRAINABLE) == want);
    CHECK(plan_class(&cfg, &lora, DTYPE_F32, MEM_GRADIENTS) == want);
    ModelSpec ck = lora; ck.grad_checkpoint = true;
    CHECK(plan_class(&cfg, &ck, DTYPE_F32, MEM_CHECKPOINTS) == 2 * r64(N * C * 4));
    CHECK(plan_class(&cfg, &lora, DTYPE_F32, MEM_CHECKPOINTS) == 0);
    CHECK(plan_class(&cfg, &ck, DTYPE_F32, MEM_RECOMPUTE) > 0);
    CHECK(plan_class(&cfg, &ck, DTYPE_F32, MEM_ACTIVATIONS) < plan_class(&cfg, &lora, DTYPE_F32, MEM_ACTIVATIONS));
    /* training: the LM-head chunk (N rows here) shares the bytes of a block
     * workspace that is dead while it runs (the recompute set, else the
     * shared norm / GLU outputs); the class keeps the targets and row
     * weights. A forward-only run carves it on its own. */
    size_t lm_chunk = r64(lmhead_scratch_floats((int)N, C, cfg.vocab_size) * 4), lm_small = 2 * r64(N * 4);
    CHECK(plan_class(&cfg, &lora, DTYPE_F32, MEM_LMHEAD) == lm_small);
    CHECK(plan_class(&cfg, &ck, DTYPE_F32, MEM_LMHEAD) == lm_small);
    CHECK(plan_class(&cfg, &ck, DTYPE_F32, MEM_RECOMPUTE) >= lm_chunk);
    CHECK(plan_class(&cfg, &lora, DTYPE_F32, MEM_ACTIVATIONS) >= lm_chunk);
    ModelSpec fwd_only = lora; fwd_only.training = false;
    CHECK(plan_class(&cfg, &fwd_only, DTYPE_F32, MEM_LMHEAD) == lm_small + lm_chunk);
    /* the backward scratch by hand: the residual and norm-input gradients;
     * attention's gradients and the MLP's dact in one shared span (no (N, F)
     * pair for gate and up: the GLU backward writes over its inputs); the
     * LoRA pieces (dxa, dA^T, the merged q/k/v group's x@A and its A's) */
    size_t mixer = 2 * r64(N * QD * 4) + 2 * r64(N * KVD * 4), dact = r64(N * F * 4);
    size_t widest_io = (size_t)(F > C ? F : C), dat_cols = widest_io > 3 * (size_t)C ? widest_io : 3 * (size_t)C;
    size_t scratch = 2 * r64(N * C * 4) + (mixer > dact ? mixer : dact) + r64(N * r * 4) + r64(r * dat_cols * 4) +
                     r64(N * 3 * r * 4) + r64((size_t)C * 3 * r * 4);
    CHECK_MSG(plan_class(&cfg, &lora, DTYPE_F32, MEM_BACKWARD_SCRATCH) == scratch, "backward scratch %zu, by hand %zu",
              plan_class(&cfg, &lora, DTYPE_F32, MEM_BACKWARD_SCRATCH), scratch);
    /* F32 file used in place: nothing converted into the arena; BF16 run converts every matrix */
    CHECK(plan_class(&cfg, &lora, DTYPE_F32, MEM_FROZEN_WEIGHTS) == 0);
    ModelSpec bf = lora; bf.weight_dtype = DTYPE_BF16;
    size_t mats = r64((size_t)cfg.vocab_size * C * 2);
    for (int l = 0; l < 3; l++) for (int p = 0; p < PROJ_COUNT; p++) mats += r64((size_t)in[p] * out[p] * 2);
    CHECK(plan_class(&cfg, &bf, DTYPE_F32, MEM_FROZEN_WEIGHTS) == mats);
    /* a BF16 file in fp32 products stays bf16 in place: nothing converted,
     * one expansion panel as wide as the widest input in the library class */
    CHECK(plan_class(&cfg, &lora, DTYPE_BF16, MEM_FROZEN_WEIGHTS) == 0);
    int widest = F > C ? F : C;
    if (QD > widest) widest = QD;
    size_t panel = r64(fw_panel_scratch_bytes(widest));
    CHECK(plan_class(&cfg, &lora, DTYPE_BF16, MEM_LIBRARY) == plan_class(&cfg, &lora, DTYPE_F32, MEM_LIBRARY) + panel);
    CHECK(plan_class(&cfg, &bf, DTYPE_BF16, MEM_FROZEN_WEIGHTS) == 0);
    /* full fine-tuning of the last 2 blocks: the fp32 masters; only block 0 stays frozen */
    ModelSpec full = lora; full.type = TUNE_FULL;
    size_t fw = 0;
    for (int p = 0; p < PROJ_COUNT; p++) fw += r64(4 * (size_t)in[p] * out[p]);
    fw += 2 * r64(4 * (size_t)C);
    CHECK(plan_class(&cfg, &full, DTYPE_F32, MEM_TRAINABLE) == 2 * fw);
    size_t fwb = 0;
    fwb += r64((size_t)cfg.vocab_size * C * 2);
    for (int p = 0; p < PROJ_COUNT; p++) fwb += r64((size_t)in[p] * out[p] * 2);
    ModelSpec fullbf = full; fullbf.weight_dtype = DTYPE_BF16;
    CHECK(plan_class(&cfg, &fullbf, DTYPE_F32, MEM_FROZEN_WEIGHTS) == fwb);

    /* plan == reality on real files */
    char dir[] = "/tmp/lmtune_layout_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char d32[600], d16[600], dh[600];
    snprintf(d32, sizeof d32, "%s/f32", dir);
    snprintf(d16, sizeof d16, "%s/bf16", dir);
    snprintf(dh, sizeof dh, "%s/f16", dir);
    CHECK(model_init_random(d32, &cfg, DTYPE_F32, 7) == 0);
    CHECK(model_init_random(d16, &cfg, DTYPE_BF16, 7) == 0);
    CHECK(model_init_random(dh, &cfg, DTYPE_F16, 7) == 0);
    CHECK(model_init_random(dh, &cfg, DTYPE_I32, 7) < 0);
    ModelConfig back;
    char cp[700];
    snprintf(cp, sizeof cp, "%s/config.json", d32);
    CHECK(hf_config_load(&back, cp) == 0);
    CHECK(back.hidden_size == C && back.num_hidden_layers == 3 && back.vocab_size == cfg.vocab_size);

    ModelSpec specs[8];
    const char *names[8] = {"lora", "lora+ckpt", "dora", "dora+ckpt", "full", "full+ckpt", "inference+kv", "lora dropout+ckpt"};
    specs[0] = lora; specs[1] = ck;
    specs[2] = lora; specs[2].type = TUNE_DORA;
    specs[3] = specs[2]; specs[3].grad_checkpoint = true;
    specs[4] = full; specs[5] = full; specs[5].grad_checkpoint = true;
    specs[6] = (ModelSpec){.type = TUNE_NONE, .max_rows = 1, .max_tokens = 8, .weight_dtype = DTYPE_F32, .kv_cache_tokens = 32};
    specs[7] = ck; specs[7].lora_dropout = 0.1f;
    for (int i = 0; i < 8; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s f32 file", names[i]);
        check_load(d32, &cfg, &specs[i], DTYPE_F32, what);
        snprintf(what, sizeof what, "%s bf16 file as f32", names[i]);
        check_load(d16, &cfg, &specs[i], DTYPE_BF16, what);
        ModelSpec s = specs[i]; s.weight_dtype = DTYPE_BF16;
        snprintf(what, sizeof what, "%s bf16 file as stored", names[i]);
        check_load(d16, &cfg, &s, DTYPE_BF16, what);
        snprintf(what, sizeof what, "%s f32 file as bf16", names[i]);
        check_load(d32, &cfg, &s, DTYPE_F32, what);
        snprintf(what, sizeof what, "%s f16 file as bf16", names[i]);
        check_load(dh, &cfg, &s, DTYPE_F16, what);
        snprintf(what, sizeof what, "%s f16 file as f32", names[i]);
        check_load(dh, &cfg, &specs[i], DTYPE_F16, what);
    }
    /* the new families' blocks: sandwich norms, q/k norms (gemma3), fused
     * projections (phi3), NoPE (smollm3); a KV cache whose sliding layers
     * hold a ring of window + decode chunk positions */
    static const char *fams[3] = {
        "{\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":3,"
        "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":32,\"vocab_size\":256,\"sliding_window\":4,"
        "\"sliding_window_pattern\":3}",
        "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":3,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":256,\"rms_norm_eps\":1e-05,"
        "\"partial_rotary_factor\":0.5,\"original_max_position_embeddings\":4,\"max_position_embeddings\":64,"
        "\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1,1,1],\"long_factor\":[1,2,3,4]}}",
        "{\"model_type\":\"smollm3\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":3,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":256,\"no_rope_layer_interval\":2}",
    };
    for (int f = 0; f < 3; f++) {
        ModelConfig fc;
        CHECK(hf_config_parse(&fc, fams[f], "config.json") == 0);
        char fd[700], fd16[700];
        snprintf(fd, sizeof fd, "%s/fam%d", dir, f);
        snprintf(fd16, sizeof fd16, "%s/fam%d_bf16", dir, f);
        CHECK(model_init_random(fd, &fc, DTYPE_F32, 3) == 0);
        CHECK(model_init_random(fd16, &fc, DTYPE_BF16, 3) == 0);
        for (int i = 0; i < 8; i++) {
            char what[128];
            snprintf(what, sizeof what, "%s %s f32 file", fc.model_type, names[i]);
            check_load(fd, &fc, &specs[i], DTYPE_F32, what);
            snprintf(what, sizeof what, "%s %s bf16 file", fc.model_type, names[i]);
            check_load(fd16, &fc, &specs[i], DTYPE_BF16, what);
            ModelSpec sb = specs[i];
            sb.weight_dtype = DTYPE_BF16;
            snprintf(what, sizeof what, "%s %s f32 file as bf16", fc.model_type, names[i]);
            check_load(fd, &fc, &sb, DTYPE_F32, what);
        }
    }
    {
        /* gemma3: layers 0, 1 slide (window 4), layer 2 is global; 300 cache
         * positions, decode chunks of 128: the sliding layers keep 4 + 127 */
        ModelConfig gc;
        CHECK(hf_config_parse(&gc, fams[0], "config.json") == 0);
        ModelSpec kv = {.type = TUNE_NONE, .max_rows = 1, .max_tokens = 8, .weight_dtype = DTYPE_F32,
                        .kv_cache_tokens = 300};
        size_t kvd = (size_t)gc.num_key_value_heads * gc.head_dim;
        for (int run = 0; run < 2; run++) {
            /* 100 positions: shorter than window + chunk, no ring */
            if (run) kv.kv_cache_tokens = 100;
            size_t want = (run ? 3 * 100 : 2 * 131 + 300) * kvd * 4;
            MemPlan kp = {0};
            Carver kc = {NULL, &kp};
            CHECK(model_layout_dtype(&gc, &kv, DTYPE_F32, &kc) == 0);
            size_t keys = 0;
            for (size_t e = 0; e < kp.n; e++)
                if (!strcmp(kp.entries[e].name, "KV cache keys")) keys = kp.entries[e].bytes;
            plan_free(&kp);
            CHECK_MSG(keys == r64(want), "KV cache keys %zu bytes, want %zu", keys, r64(want));
        }
    }

    /* weights used from the mapped file are notes outside the arena */
    MemPlan plan = {0};
    CHECK(model_plan_weights(d32, &cfg, &lora, &plan) == 0);
    CHECK(plan_arena_bytes(&plan) == 0 && plan_total(&plan) > mats);
    plan_free(&plan);
    CHECK(model_plan_weights(d32, &cfg, &bf, &plan) == 0);
    CHECK(plan_total(&plan) == 0);
    plan_free(&plan);

    /* weights that do not match config.json are refused before the arena is used */
    {
        ModelConfig wrong = cfg;
        wrong.intermediate_size = 96;
        CHECK(hf_config_write(&wrong, cp) == 0);
        Model *m; Arena arena; size_t planned;
        CHECK(load_planned(&m, &arena, &planned, d32, &wrong, &lora, DTYPE_F32) < 0);
        CHECK_ERROR_CONTAINS("mlp.gate_proj.weight");
        CHECK(hf_config_write(&cfg, cp) == 0);
        Arena small;
        CHECK(arena_init(&small, 4096) == 0);
        CHECK(model_load(&m, d32, &lora, &small) < 0);   /* an arena smaller than the plan: an error, not a crash */
        arena_free(&small);
        CHECK(model_load(&m, "/nonexistent/model", &lora, &small) < 0);
        CHECK_ERROR_CONTAINS("/nonexistent/model");
    }

    /* every allocation of model_load failing in turn: a clean error, never a crash */
    {
        int failures = 0, n;
        for (n = 1; n < 200; n++) {
            MemPlan pl = {0}; Carver pc = {NULL, &pl};
            CHECK(model_layout_dtype(&cfg, &ck, DTYPE_F32, &pc) == 0);
            Arena a;
            CHECK(arena_init(&a, plan_arena_bytes(&pl)) == 0);
            plan_free(&pl);
            Model *m = NULL;
            mem_fail_at(n);
            int rc = model_load(&m, d32, &ck, &a);
            mem_fail_at(0);
            arena_free(&a);
            if (rc == 0) { model_free(m); break; }
            failures++;
            CHECK(error_message()[0] != 0);
        }
        printf("model_load: %d injected allocation failures handled\n", failures);
        CHECK(failures > 0 && n < 200);
    }

    /* bad specs */
    ModelSpec bad = lora; bad.num_layers = 9;
    MemPlan p2 = {0}; Carver cv = {NULL, &p2};
    CHECK(model_layout_dtype(&cfg, &bad, DTYPE_F32, &cv) < 0);
    CHECK_ERROR_CONTAINS("--num-layers 9 is more than the model's 3 layers");
    bad = lora; bad.lora_rank = 0;
    CHECK(model_layout_dtype(&cfg, &bad, DTYPE_F32, &cv) < 0);
    CHECK_ERROR_CONTAINS("rank");
    plan_free(&p2);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return check_finish("model/layout");
}

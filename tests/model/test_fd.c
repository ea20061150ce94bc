/* test_fd.c: gradients against central finite differences of model_loss,
 * for what the PyTorch references do not cover (DoRA) and a second look at
 * what they do (LoRA on qwen3 q/k norms, full fine-tuning with biases and
 * untied head, GQA; gemma3, gemma2 and phi3 blocks). Uses the small fp32 base models of tests/ref/data.
 * Also: LoRA dropout is deterministic per step seed and identical with
 * checkpointing; and KV-cache decoding matches full-sequence logits. */
#include "check.h"
#include "model_testutil.h"
#include <math.h>

static const int32_t TOK[2 * 13] = {5, 17, 33, 2, 9, 71, 44, 3, 12, 90, 31, 8, 1,
                                   7, 66, 21, 14, 94, 5, 40, 26, 11, 0, 0, 0};
static const int32_t LEN[2] = {13, 10}, OFF[2] = {0, 4};
enum { FB = 2, FW = 13 };

static double mean_loss(Model *m) {
    double s; long n;
    CHECK(model_loss(m, TOK, FB, FW, LEN, OFF, &s, &n) == 0);
    return s / (double)n;
}

/* The central difference of the mean loss in entry k of t at step h, or with
 * Richardson extrapolation, (4 D(h/2) - D(h)) / 3, which cancels its h^2 term. */
static double fd_at(Model *m, TrainableTensor *t, size_t k, float h, bool richardson) {
    float v = t->value[k];
    t->value[k] = v + h;
    double lp = mean_loss(m);
    t->value[k] = v - h;
    double lm = mean_loss(m);
    t->value[k] = v;
    double fd = (lp - lm) / ((double)(v + h) - (double)(v - h));
    if (!richardson) return fd;
    float h2 = h / 2;
    t->value[k] = v + h2;
    double lp2 = mean_loss(m);
    t->value[k] = v - h2;
    double lm2 = mean_loss(m);
    t->value[k] = v;
    return (4 * (lp2 - lm2) / ((double)(v + h2) - (double)(v - h2)) - fd) / 3;
}

/* hrel: the finite-difference step, relative to max(|value|, 1); negative:
 * that step with Richardson extrapolation. */
static void fd_case_h(const char *dir, ModelSpec spec, const char *what, float hrel) {
    RefCase rc;
    if (refcase_read(&rc, dir, what) < 0) {
        CHECK_MSG(0, "%s: %s (the committed reference case is missing)", what, error_message());
        return;
    }
    spec.max_rows = FB; spec.max_tokens = FW - 1; spec.weight_dtype = DTYPE_F32; spec.training = true;
    spec.lmhead_chunk = 5;
    Model *m; Arena arena; size_t planned;
    if (load_planned(&m, &arena, &planned, dir, &rc.cfg, &spec, DTYPE_F32) < 0) { CHECK_MSG(0, "%s: %s", what, error_message()); return; }
    Rng rng; rng_seed(&rng, 11);
    CHECK(model_init_trainables(m, &rng) == 0);
    TrainableTensor *tl;
    size_t nt = model_trainables(m, &tl);
    /* move away from the init point so every path carries gradient */
    for (size_t i = 0; i < nt; i++) {
        const char *nm = tl[i].name;
        size_t L = strlen(nm);
        bool is_b = L > 6 && !strcmp(nm + L - 6, "lora_b"), is_m = L > 2 && !strcmp(nm + L - 2, ".m");
        for (size_t k = 0; k < tl[i].numel; k++) {
            if (is_b) tl[i].value[k] = 0.05f * rng_normal(&rng);
            else if (is_m) tl[i].value[k] *= 1.0f + 0.2f * rng_normal(&rng);
            else if (spec.type == TUNE_FULL) tl[i].value[k] += 0.02f * rng_normal(&rng);
        }
    }
    model_zero_grad(m);
    double loss; long ntok;
    CHECK(model_forward_backward(m, TOK, FB, FW, LEN, OFF, 1.0f, NULL, &loss, &ntok) == 0);
    CHECK_NEAR(loss, mean_loss(m), 1e-5 * fabs(loss));
    model_freeze_dora_norms(m, true);   /* DoRA's norms are a stop-gradient */
    double worst = 0;
    int wide = 0;
    for (size_t i = 0; i < nt; i++) {
        TrainableTensor *t = &tl[i];
        size_t kmax = 0;
        double gmax = 0;
        for (size_t k = 0; k < t->numel; k++) if (fabs(t->grad[k]) > gmax) { gmax = fabs(t->grad[k]); kmax = k; }
        size_t picks[2] = {kmax, rng_below(&rng, t->numel)};
        for (int j = 0; j < (i % 2 ? 1 : 2); j++) {   /* the largest entry, plus a random one every other tensor */
            size_t k = picks[j];
            float v = t->value[k];
            double fd = fd_at(m, t, k, fabsf(hrel) * (fabsf(v) > 1 ? fabsf(v) : 1), hrel < 0);
            double err = fabs(fd - t->grad[k]) / (gmax + 1e-3);
            if (hrel < 0 && err >= 5e-3) {
                /* a path with a small gradient and little curvature (Qwen3.5's decay gate
                 * a): at h the fp32 rounding of the loss (~3e-7) is ~1e-2 of its
                 * derivative; a 4x step cuts that noise 4x */
                double fd4 = fd_at(m, t, k, 4 * fabsf(hrel) * (fabsf(v) > 1 ? fabsf(v) : 1), true);
                double err4 = fabs(fd4 - t->grad[k]) / (gmax + 1e-3);
                if (err4 < err) {
                    err = err4;
                    fd = fd4;
                    wide++;
                }
            }
            if (err > worst) worst = err;
            CHECK_MSG(err < 5e-3, "%s %s[%zu]: grad %.6g fd %.6g", what, t->name, k, t->grad[k], fd);
        }
    }
    printf("%-34s loss %.5f  %zu tensors  worst fd error %.2e (relative to the tensor's max |grad|)", what, loss, nt,
           worst);
    printf(hrel < 0 ? "; %d entries at the 4x step\n" : "\n", wide);
    model_free(m);
    arena_free(&arena);
}

static void fd_case(const char *dir, ModelSpec spec, const char *what) { fd_case_h(dir, spec, what, 1e-2f); }

/* Dropout: same seed, same gradients; checkpointing changes nothing; p > 0 changes them. */
static void dropout_case(const char *dir) {
    RefCase rc;
    if (refcase_read(&rc, dir, "dropout") < 0) {
        CHECK_MSG(0, "dropout: %s (the committed reference case is missing)", error_message());
        return;
    }
    float *g[3] = {0};
    size_t n = 0;
    for (int run = 0; run < 4; run++) {
        ModelSpec s = {.type = TUNE_LORA, .num_layers = -1, .lora_rank = 4, .lora_scale = 2.0f,
                       .lora_dropout = run == 3 ? 0.0f : 0.3f, .lora_keys = PROJ_ALL, .max_rows = FB,
                       .max_tokens = FW - 1, .weight_dtype = DTYPE_F32, .training = true,
                       .grad_checkpoint = run == 1};
        Model *m; Arena arena; size_t planned;
        if (load_planned(&m, &arena, &planned, dir, &rc.cfg, &s, DTYPE_F32) < 0) { CHECK_MSG(0, "%s", error_message()); return; }
        Rng rng; rng_seed(&rng, 5);
        CHECK(model_init_trainables(m, &rng) == 0);
        TrainableTensor *tl; size_t nt = model_trainables(m, &tl);
        for (size_t i = 0; i < nt; i++) for (size_t k = 0; k < tl[i].numel; k++) if (strstr(tl[i].name, "lora_b")) tl[i].value[k] = 0.05f * rng_normal(&rng);
        Rng drng; rng_seed(&drng, run == 2 ? 99 : 42);
        model_zero_grad(m);
        double loss; long ntok;
        CHECK(model_forward_backward(m, TOK, FB, FW, LEN, OFF, 1.0f, &drng, &loss, &ntok) == 0);
        n = 0; for (size_t i = 0; i < nt; i++) n += tl[i].numel;
        float *cur = mem_alloc(n * sizeof(float));
        size_t off = 0;
        for (size_t i = 0; i < nt; i++) { memcpy(cur + off, tl[i].grad, tl[i].numel * 4); off += tl[i].numel; }
        if (run == 0) g[0] = cur;
        else {
            bool same = memcmp(cur, g[0], n * 4) == 0;
            if (run == 1) CHECK_MSG(same, "dropout gradients differ with checkpointing");
            else CHECK_MSG(!same, "dropout run %d should differ", run);
            mem_free(cur);
        }
        model_free(m);
        arena_free(&arena);
    }
    mem_free(g[0]);
}

/* Gradients accumulate: two half-scaled calls add up to one full call. */
static void accumulate_case(const char *dir) {
    RefCase rc;
    if (refcase_read(&rc, dir, "accumulate") < 0) {
        CHECK_MSG(0, "accumulate: %s (the committed reference case is missing)", error_message());
        return;
    }
    ModelSpec s = {.type = TUNE_LORA, .num_layers = 1, .lora_rank = 2, .lora_scale = 2.0f, .lora_keys = PROJ_ALL,
                   .max_rows = FB, .max_tokens = FW - 1, .weight_dtype = DTYPE_F32, .training = true};
    Model *m; Arena arena; size_t planned;
    if (load_planned(&m, &arena, &planned, dir, &rc.cfg, &s, DTYPE_F32) < 0) { CHECK_MSG(0, "%s", error_message()); return; }
    Rng rng; rng_seed(&rng, 2);
    CHECK(model_init_trainables(m, &rng) == 0);
    TrainableTensor *tl; size_t nt = model_trainables(m, &tl);
    for (size_t i = 0; i < nt; i++) if (strstr(tl[i].name, "lora_b")) for (size_t k = 0; k < tl[i].numel; k++) tl[i].value[k] = 0.05f * rng_normal(&rng);
    double l1, l2; long n1, n2;
    model_zero_grad(m);
    CHECK(model_forward_backward(m, TOK, FB, FW, LEN, OFF, 1.0f, NULL, &l1, &n1) == 0);
    size_t n = 0; for (size_t i = 0; i < nt; i++) n += tl[i].numel;
    float *g1 = mem_alloc(n * 4), *g2 = mem_alloc(n * 4);
    size_t off = 0;
    for (size_t i = 0; i < nt; i++) { memcpy(g1 + off, tl[i].grad, tl[i].numel * 4); off += tl[i].numel; }
    model_zero_grad(m);
    CHECK(model_forward_backward(m, TOK, FB, FW, LEN, OFF, 0.5f, NULL, &l2, &n2) == 0);
    CHECK(model_forward_backward(m, TOK, FB, FW, LEN, OFF, 0.5f, NULL, &l2, &n2) == 0);
    off = 0;
    for (size_t i = 0; i < nt; i++) { memcpy(g2 + off, tl[i].grad, tl[i].numel * 4); off += tl[i].numel; }
    CHECK_NEAR(l1, l2, 1e-6 * fabs(l1));
    CHECK(n1 == n2 && n1 == 12 + 6);   /* row 0: s = 1..12; row 1: s = 4..9 */
    CHECK(rel_error(g2, g1, n) < 1e-6);
    /* a batch with no counted target: loss 0, no gradient, no error */
    int32_t zl[2] = {1, 1};
    model_zero_grad(m);
    CHECK(model_forward_backward(m, TOK, FB, FW, zl, OFF, 1.0f, NULL, &l1, &n1) == 0);
    CHECK(n1 == 0 && l1 == 0 && max_abs(tl[0].grad, tl[0].numel) == 0);
    mem_free(g1); mem_free(g2);
    model_free(m);
    arena_free(&arena);
}

/* KV cache (and Qwen3.5's conv and recurrent states): decoding a prefix,
 * then token by token, gives the logits of model_logits. gdn_chunk: the
 * Gated DeltaNet chunk (the 5-token prefix runs chunked from a zero state,
 * then each token through the plain recurrence). */
static void decode_case(const char *dir, TuneType type, int gdn_chunk) {
    RefCase rc;
    if (refcase_read(&rc, dir, "decode") < 0) {
        CHECK_MSG(0, "decode: %s (the committed reference case is missing)", error_message());
        return;
    }
    int T = 12;
    ModelSpec s = {.type = type, .num_layers = -1, .lora_rank = 4, .lora_scale = 2.0f, .lora_keys = PROJ_ALL,
                   .max_rows = 1, .max_tokens = T, .weight_dtype = DTYPE_F32, .kv_cache_tokens = 16,
                   .gdn_chunk = gdn_chunk};
    Model *m; Arena arena; size_t planned;
    if (load_planned(&m, &arena, &planned, dir, &rc.cfg, &s, DTYPE_F32) < 0) { CHECK_MSG(0, "%s", error_message()); return; }
    CHECK(arena.used == planned);
    Rng rng; rng_seed(&rng, 8);
    if (type != TUNE_NONE) {
        CHECK(model_init_trainables(m, &rng) == 0);
        TrainableTensor *tl; size_t nt = model_trainables(m, &tl);
        for (size_t i = 0; i < nt; i++) for (size_t k = 0; k < tl[i].numel; k++) if (strstr(tl[i].name, "lora_b")) tl[i].value[k] = 0.05f * rng_normal(&rng);
    }
    int V = rc.cfg.vocab_size;
    float *full = mem_alloc((size_t)T * V * 4), *dec = mem_alloc((size_t)V * 4);
    CHECK(model_logits(m, TOK, 1, T, full) == 0);
    double worst = 0;
    CHECK(model_decode(m, TOK, 5, 0, dec) == 0);
    worst = fmax(worst, rel_error(dec, full + 4 * (size_t)V, V));
    for (int p = 5; p < T; p++) {
        CHECK(model_decode(m, TOK + p, 1, p, dec) == 0);
        worst = fmax(worst, rel_error(dec, full + (size_t)p * V, V));
    }
    printf("decode (%s, %s): worst relative error vs full logits %.2e\n", type == TUNE_NONE ? "base" : "LoRA",
           dir + strlen("tests/ref/data/"), worst);
    CHECK(worst < 1e-5);
    CHECK(model_decode(m, TOK, 1, 3, dec) < 0);
    CHECK_ERROR_CONTAINS("cache holds");
    int32_t big = V;
    CHECK(model_decode(m, &big, 1, 0, dec) < 0);
    CHECK_ERROR_CONTAINS(">= vocab size");
    mem_free(full); mem_free(dec);
    model_free(m);
    arena_free(&arena);
}

/* DoRA with m set to the adapted row norms ||W + s (AB)^T|| (computed here
 * directly from the file) is exactly LoRA: this checks the engine's norm
 * identity without building (out x in) matrices. */
static void dora_identity_case(const char *dir) {
    RefCase rc;
    if (refcase_read(&rc, dir, "dora identity") < 0) {
        CHECK_MSG(0, "dora identity: %s (the committed reference case is missing)", error_message());
        return;
    }
    int T = 12, V;
    float *lg[2];
    float s = 1.7f;
    for (int run = 0; run < 2; run++) {
        ModelSpec sp = {.type = run ? TUNE_DORA : TUNE_LORA, .num_layers = -1, .lora_rank = 3, .lora_scale = s,
                        .lora_keys = PROJ_ALL, .max_rows = 1, .max_tokens = T, .weight_dtype = DTYPE_F32};
        Model *m; Arena arena; size_t planned;
        if (load_planned(&m, &arena, &planned, dir, &rc.cfg, &sp, DTYPE_F32) < 0) { CHECK_MSG(0, "%s", error_message()); return; }
        Rng rng; rng_seed(&rng, 21);
        CHECK(model_init_trainables(m, &rng) == 0);
        TrainableTensor *tl; size_t nt = model_trainables(m, &tl);
        StModel st;
        CHECK(st_model_open(&st, dir, false) == 0);
        for (size_t i = 0; i < nt; i++) {
            if (strstr(tl[i].name, "lora_b")) for (size_t k = 0; k < tl[i].numel; k++) tl[i].value[k] = 0.1f * rng_normal(&rng);
            if (run && !strcmp(tl[i].name + strlen(tl[i].name) - 2, ".m")) {
                const TrainableTensor *A = &tl[i - 2], *Bm = &tl[i - 1];
                char wn[128];
                snprintf(wn, sizeof wn, "%.*sweight", (int)strlen(tl[i].name) - 1, tl[i].name);
                const StTensor *w = st_model_find(&st, wn);
                CHECK(w && w->dtype == DTYPE_F32);
                if (!w) continue;
                int out = (int)w->shape[0], in = (int)w->shape[1], r = 3;
                for (int o = 0; o < out; o++) {
                    double n2 = 0;
                    for (int c = 0; c < in; c++) {
                        double ab = 0;
                        for (int k = 0; k < r; k++) ab += (double)A->value[c * r + k] * Bm->value[k * out + o];
                        double v = ((const float *)w->data)[(size_t)o * in + c] + s * ab;
                        n2 += v * v;
                    }
                    tl[i].value[o] = (float)sqrt(n2);
                }
            }
        }
        st_model_close(&st);
        V = rc.cfg.vocab_size;
        lg[run] = mem_alloc((size_t)T * V * 4);
        CHECK(model_logits(m, TOK, 1, T, lg[run]) == 0);
        model_free(m);
        arena_free(&arena);
    }
    double e = rel_error(lg[1], lg[0], (size_t)T * V);
    printf("DoRA with m = adapted row norms vs LoRA: logits rel error %.2e\n", e);
    CHECK(e < 1e-5);
    mem_free(lg[0]); mem_free(lg[1]);
}

int main(void) {
    const char *qwen3 = "tests/ref/data/qwen3_qknorm_lora", *llama = "tests/ref/data/llama_gqa_tied_lora",
               *qwen2 = "tests/ref/data/qwen2_bias_untied_full";
    ModelSpec lora = {.type = TUNE_LORA, .num_layers = -1, .lora_rank = 3, .lora_scale = 1.5f, .lora_keys = PROJ_ALL};
    ModelSpec dora = lora; dora.type = TUNE_DORA;
    ModelSpec full = {.type = TUNE_FULL, .num_layers = 1};
    fd_case(qwen3, lora, "qwen3 LoRA all keys");
    fd_case(qwen3, dora, "qwen3 DoRA all keys");
    ModelSpec dora_ck = dora; dora_ck.grad_checkpoint = true;
    fd_case(llama, dora_ck, "llama GQA DoRA all keys, ckpt");
    fd_case(qwen2, dora, "qwen2 DoRA (biases), untied");
    fd_case(qwen3, full, "qwen3 full, last block");
    ModelSpec full2 = full; full2.num_layers = 2; full2.grad_checkpoint = true;
    fd_case(qwen2, full2, "qwen2 full, all blocks, ckpt");
    /* the new families: sliding windows shorter than the 12 positions, 1 + w
     * and sandwich norms, GeGLU, soft-caps, fused projections, longrope */
    const char *gemma3 = "tests/ref/data/gemma3_text_lora", *gemma2 = "tests/ref/data/gemma2_softcap_lora",
               *phi3 = "tests/ref/data/phi3_longrope_lora";
    fd_case(gemma3, dora_ck, "gemma3 DoRA all keys, ckpt");
    ModelSpec full3 = full;
    full3.num_layers = 3;
    full3.grad_checkpoint = true;
    fd_case(gemma2, full3, "gemma2 full, 3 blocks, ckpt");
    fd_case(phi3, dora, "phi3 DoRA qkv/o/gate_up/down");
    dropout_case(qwen3);
    accumulate_case(llama);
    dora_identity_case(qwen2);
    decode_case(qwen3, TUNE_NONE, 0);
    decode_case(llama, TUNE_LORA, 0);
    /* Qwen3.5: gated attention and Gated DeltaNet blocks */
    const char *q35n = "tests/ref/data/qwen35_nested_tied_lora", *q35f = "tests/ref/data/qwen35_flat_untied_full",
               *q35d = "tests/ref/data/qwen35_nested_dora";
    ModelSpec q35_lora = lora;
    q35_lora.gdn_chunk = 4;
    /* the Gated DeltaNet (L2 norms, gates, gated norm) curves more than attention
     * does: the h^2 term of a 1e-2 step is ~1%, so it is extrapolated away */
    fd_case_h(q35n, q35_lora, "qwen3.5 LoRA every linear, chunk 4", -1e-2f);
    ModelSpec q35_dora = dora;
    q35_dora.grad_checkpoint = true;
    /* this draw curves sharply within 1e-2 of its values: in layer 0's
     * in_proj_qkv.lora_b[29] central differences are -0.41 at a 1.1e-2 step,
     * -0.678 at 3.7e-3 and -0.669 from 1.2e-3 down to 1.4e-4 (the gradient:
     * -0.6686); a 2e-3 step, extrapolated, is inside that plateau */
    fd_case_h(q35d, q35_dora, "qwen3.5 DoRA every linear, ckpt", -2e-3f);
    ModelSpec q35_full = {.type = TUNE_FULL, .num_layers = 2, .gdn_chunk = 5};
    fd_case_h(q35f, q35_full, "qwen3.5 full, last 2 blocks, chunk 5", -1e-2f);
    decode_case(q35n, TUNE_NONE, 0);
    decode_case(q35n, TUNE_LORA, 3);
    decode_case(q35f, TUNE_NONE, 0);
    return check_finish("model/fd");
}

/* test_decode.c: KV-cache decoding equals recomputation, for every new
 * family's reference model of tests/ref/data: a sequence fed in calls of
 * several tokens, then one token at a time, gives after every call the
 * logits of a full forward pass (model_logits) over the sequence so far. Covers the rolling window cache of
 * sliding layers (sequences longer than window + one decode chunk, so the
 * ring wraps), gemma's soft-capping and embedding scale, NoPE layers, the
 * multimodal gemma3 prefix, and longrope crossing
 * original_max_position_embeddings (the cached prefix is recomputed with the
 * long factors, and every logit must match a recomputation of that length). */
#include "check.h"
#include "model_testutil.h"
#include <math.h>

/* The sequence is fed in calls of calls[0], calls[1], ... tokens (0 ends the
 * list), then one token at a time up to T. After every call its last logits
 * are compared with a full forward pass over the sequence so far. */
static void decode_case(const char *name, int T, const int *calls, TuneType type) {
    char dir[300];
    snprintf(dir, sizeof dir, "tests/ref/data/%s", name);
    RefCase rc;
    if (refcase_read(&rc, dir, name) < 0) {
        CHECK_MSG(0, "%s: %s", name, error_message());
        return;
    }
    ModelSpec s = {.type = type, .num_layers = -1, .lora_rank = 4, .lora_scale = 2.0f,
                   .lora_keys = PROJ_ALL, .max_rows = 1, .max_tokens = T, .weight_dtype = DTYPE_F32,
                   .kv_cache_tokens = T};
    Model *m;
    Arena arena;
    size_t planned;
    if (load_planned(&m, &arena, &planned, dir, &rc.cfg, &s, DTYPE_F32) < 0) {
        CHECK_MSG(0, "%s: %s", name, error_message());
        return;
    }
    CHECK(arena.used == planned);
    Rng rng;
    rng_seed(&rng, 31);
    if (type != TUNE_NONE) {
        CHECK(model_init_trainables(m, &rng) == 0);
        TrainableTensor *tl;
        size_t nt = model_trainables(m, &tl);
        for (size_t i = 0; i < nt; i++)
            if (strstr(tl[i].name, "lora_b"))
                for (size_t k = 0; k < tl[i].numel; k++) tl[i].value[k] = 0.05f * rng_normal(&rng);
    }
    int V = rc.cfg.vocab_size;
    int32_t *tok = mem_alloc((size_t)T * sizeof *tok);
    for (int i = 0; i < T; i++) tok[i] = 1 + (int32_t)rng_below(&rng, (uint64_t)(V - 1));
    float *full = mem_alloc((size_t)T * V * 4), *dec = mem_alloc((size_t)V * 4);
    double worst = 0;
    int compared = 0, pos = 0, k = 0;
    while (pos < T) {
        int n = calls[k] ? calls[k++] : 1;
        if (pos + n > T) n = T - pos;
        CHECK(model_decode(m, tok + pos, n, pos, dec) == 0);
        pos += n;
        CHECK(model_logits(m, tok, 1, pos, full) == 0);
        worst = fmax(worst, rel_error(dec, full + (size_t)(pos - 1) * V, V));
        compared++;
    }
    printf("decode %-22s %-4s T=%d: %d calls, worst relative error vs recomputation %.2e\n", name,
           type == TUNE_NONE ? "base" : "LoRA", T, compared, worst);
    CHECK_MSG(worst < 1e-5, "%s: decode differs from recomputation by %.2e", name, worst);
    mem_free(tok);
    mem_free(full);
    mem_free(dec);
    model_free(m);
    arena_free(&arena);
}

int main(void) {
    /* windows 4-5 with decode chunks of 128 rows: a sliding layer's ring holds
     * window + 127 positions. A 100-token prompt, then a 150-token call (a
     * full chunk whose writes wrap the ring while its first rows still read
     * the oldest keys it keeps), then single tokens */
    static const int wrap[] = {100, 150, 0};
    decode_case("gemma3_text_lora", 262, wrap, TUNE_LORA);
    decode_case("gemma3_mm_lora", 256, wrap, TUNE_NONE);
    decode_case("gemma2_softcap_lora", 258, wrap, TUNE_LORA);
    /* longrope: original_max_position_embeddings 8, crossed by a call (5 + 6)
     * and, in the second run, by a single step (5 + 3, then 9th token) */
    static const int cross[] = {5, 6, 0}, step[] = {5, 3, 0};
    decode_case("phi3_longrope_lora", 20, cross, TUNE_LORA);
    decode_case("phi3_longrope_lora", 14, step, TUNE_NONE);
    static const int small[] = {7, 4, 0};
    decode_case("phi3_short_dora", 40, small, TUNE_NONE);   /* window 12, chunk rows 40: no ring */
    decode_case("smollm3_nope_lora", 30, small, TUNE_LORA);
    return check_finish("model/decode");
}

/* test_kv_rotating.c: generation with a rotating KV cache (mlx_lm.generate
 * --max-kv-size: the first 4 positions stay, the oldest others are
 * overwritten) against tests/ref/kv_rotating, an independent PyTorch forward
 * pass in float64 with the attention mask that cache implies
 * (tests/ref/gen_kv_rotating.py): token by token; with a prompt chunk that
 * wraps the cache inside one call; and, with a cache that never rotates,
 * the causal logits. */
#include <math.h>
#include <stdio.h>
#include "base/alloc.h"
#include "base/error.h"
#include "check.h"
#include "formats/safetensors.h"
#include "model/adapter_io.h"
#include "model/model.h"

#define DIR "tests/ref/kv_rotating"

/* Largest |logits - want row p| over the vocabulary. */
static double row_error(const float *logits, const StTensor *want, int p, int V) {
    float ref[512];
    dtype_to_f32(ref, (const char *)want->data + (size_t)p * V * 4, DTYPE_F32, (size_t)V);
    double e = 0;
    for (int i = 0; i < V; i++) if (fabs(logits[i] - ref[i]) > e) e = fabs(logits[i] - ref[i]);
    return e;
}

/* Decodes the tokens in chunks of `first` then 1 with a cache of kv
 * positions; returns the worst row error against `want` (rows first-1..). */
static double run(const int32_t *tokens, int T, int kv, int first, const StTensor *want, int V) {
    Model *m;
    Arena arena;
    if (model_open_inference(&m, &arena, DIR, NULL, 1, first, kv, T) < 0) {
        CHECK_MSG(0, "%s", error_message());
        return INFINITY;
    }
    float logits[512];
    double worst = 0;
    CHECK(model_decode(m, tokens, first, 0, logits) == 0);
    worst = row_error(logits, want, first - 1, V);
    for (int p = first; p < T; p++) {
        CHECK(model_decode(m, tokens + p, 1, p, logits) == 0);
        double e = row_error(logits, want, p, V);
        if (e > worst) worst = e;
    }
    /* one more position than it was made for is an error, not an overflow */
    CHECK(model_decode(m, tokens, 1, T, logits) < 0);
    model_free(m);
    arena_free(&arena);
    return worst;
}

int main(void) {
    StFile in, ex;
    CHECK(st_open(&in, DIR "/inputs.safetensors") == 0);
    CHECK(st_open(&ex, DIR "/expected.safetensors") == 0);
    const StTensor *tok = st_find(&in, "tokens"), *rot = st_find(&ex, "logits"), *full = st_find(&ex, "logits_full");
    CHECK(tok && rot && full && rot->ndim == 2 && rot->shape[1] <= 512);
    if (!tok || !rot || !full) return check_finish("model/kv_rotating");
    const int T = (int)tok->shape[0], V = (int)rot->shape[1], N = 10;
    const int32_t *tokens = tok->data;
    double one = run(tokens, T, N, 1, rot, V);
    double wrap = run(tokens, T, N, 20, rot, V);   /* a prompt of 20 wraps the 10 positions twice */
    double never = run(tokens, T, T, 1, full, V);
    double causal_off = run(tokens, T, N, 1, full, V);
    printf("rotating KV cache of %d, %d positions vs PyTorch: token by token max abs %.3g, "
           "prompt of 20 then tokens %.3g; a cache of %d (no rotation) vs the causal logits %.3g\n",
           N, T, one, wrap, T, never);
    CHECK(one < 2e-5 && wrap < 2e-5 && never < 2e-5);
    CHECK(causal_off > 1e-2);   /* the rotation does change the logits: the check can fail */
    st_close(&in);
    st_close(&ex);
    return check_finish("model/kv_rotating");
}

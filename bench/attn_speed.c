/* attn_speed.c: GFLOP/s of the flash-style attention kernel, forward and
 * backward, causal, one row of T tokens, for the head shapes of SmolLM2-135M
 * (9 query heads, 3 kv heads, D 64), Llama-3.2-1B (32 / 8 / 64) and a D 128
 * one (32 / 8 / 128), in fp32 products and (where the CPU has AVX512_BF16)
 * bf16 tile products. Median of `reps` calls after one warm-up call.
 *
 * FLOPs counted: the causal half exactly, 2 T (T + 1) / 2 D per head and
 * product; the forward has 2 products (q k^T, p v), the backward 5 (the
 * recomputed q k^T, dO v^T, p^T dO, dS k, dS^T q). The exponentials and the
 * softmax passes are not counted: they are the kernel's overhead.
 *
 * Times: wall clock (CLOCK_MONOTONIC) and the process's CPU time (all
 * threads). GF/s by CPU time is FLOPs over CPU seconds, exactly as
 * `GEMM_PEAK_CPU=1 bench/gemm_peak` computes its figures, so the two compare
 * directly, and it stays steady when the chip is shared (wall GF/s then
 * says how much of the chip the run got).
 *
 * Usage: build/rel/bench/attn_speed [reps [T ...]]  (default 3 reps, T = 512 1024 2048 4096)
 * ATTN_SPEED_SHAPES=smollm2,llama1b,d128 picks shapes; ATTN_SPEED_FP32_ONLY=1 skips the bf16 rows;
 * ATTN_SPEED_NO_SPLIT=1 runs the backward without key segments (attention_key_splits: a training run on
 * these threads cuts a kv head's keys when 1 x KVH leaves threads idle). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ops.h"

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *filled(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "attn_speed: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const char *name;
    int H, KVH, D;
} Shape;

/* median wall and CPU seconds of forward (which = 0) or backward (1) */
static void time_pass(int which, int reps, int T, const Shape *s, bool bf16, double *wall, double *cpu) {
    int H = s->H, KVH = s->KVH, D = s->D;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * KVH * D;
    float *q = filled(nq, 1), *k = filled(nk, 2), *v = filled(nk, 3), *dout = filled(nq, 4);
    float *out = calloc(nq, sizeof(float)), *lse = calloc((size_t)H * T, sizeof(float));
    float *dq = calloc(nq, sizeof(float)), *dk = calloc(nk, sizeof(float)), *dv = calloc(nk, sizeof(float));
    /* the backward's key segments as a training run on these threads takes
     * them (ATTN_SPEED_NO_SPLIT=1: none, one task per kv head) */
    const char *nosplit = getenv("ATTN_SPEED_NO_SPLIT");
    int splits = nosplit && *nosplit == '1' ? 1 : attention_key_splits(1, KVH, omp_get_max_threads());
    float *ws = calloc(attention_workspace_floats(1, T, H, KVH, D, splits), sizeof(float));
    AttnParams ap = {.scale = 1.0f / 8.0f, .window = 0, .softcap = 0.0f, .bf16 = bf16, .key_splits = splits};
    double w[64], c[64];
    if (reps > 64) reps = 64;
    attention_forward(out, lse, q, k, v, 1, T, H, KVH, D, &ap);
    for (int r = -1; r < reps; r++) { /* r = -1 warms up */
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        if (which == 0)
            attention_forward(out, lse, q, k, v, 1, T, H, KVH, D, &ap);
        else
            attention_backward(dq, dk, dv, dout, q, k, v, out, lse, ws, 1, T, H, KVH, D, &ap);
        double w1 = clock_s(CLOCK_MONOTONIC), c1 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        if (r >= 0) {
            w[r] = w1 - w0;
            c[r] = c1 - c0;
        }
    }
    qsort(w, (size_t)reps, sizeof *w, cmp_double);
    qsort(c, (size_t)reps, sizeof *c, cmp_double);
    *wall = w[reps / 2];
    *cpu = c[reps / 2];
    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(ws);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    if (reps < 1) reps = 1;
    int Ts[16] = {512, 1024, 2048, 4096}, nT = 4;
    if (argc > 2) {
        nT = 0;
        for (int i = 2; i < argc && nT < 16; i++) Ts[nT++] = atoi(argv[i]);
    }
    const Shape all[] = {{"smollm2", 9, 3, 64}, {"llama1b", 32, 8, 64}, {"d128", 32, 8, 128}};
    const char *pick = getenv("ATTN_SPEED_SHAPES");
    int threads = omp_get_max_threads();
    const char *only = getenv("ATTN_SPEED_FP32_ONLY");
    bool has_bf16 = attention_bf16_supported() && !(only && *only && strcmp(only, "0") != 0);
    printf("attention, causal, 1 x T tokens, %d threads, median of %d; bf16 tile products: %s\n", threads, reps,
           has_bf16 ? "AVX512_BF16" : "not on this CPU (fp32 only)");
    printf("| shape (H/KV/D) | T | products | fwd ms | fwd GF/s | fwd GF/s (CPU) | bwd ms | bwd GF/s | bwd GF/s (CPU) |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < sizeof all / sizeof *all; si++) {
        const Shape *s = &all[si];
        if (pick && !strstr(pick, s->name)) continue;
        for (int ti = 0; ti < nT; ti++) {
            int T = Ts[ti];
            /* one causal product: sum over rows i of (i + 1) keys x D x 2 */
            double prod = (double)T * (T + 1) / 2.0 * s->D * 2.0 * s->H;
            for (int bf = 0; bf <= (has_bf16 ? 1 : 0); bf++) {
                double fw, fc, bw, bc;
                time_pass(0, reps, T, s, bf, &fw, &fc);
                time_pass(1, reps, T, s, bf, &bw, &bc);
                printf("| %s (%d/%d/%d) | %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", s->name, s->H,
                       s->KVH, s->D, T, bf ? "bf16" : "fp32", 1e3 * fw, 2 * prod / fw * 1e-9,
                       2 * prod / fc * 1e-9, 1e3 * bw, 5 * prod / bw * 1e-9, 5 * prod / bc * 1e-9);
                fflush(stdout);
            }
        }
    }
    return 0;
}

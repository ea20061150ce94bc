/* attn_window.c: the cost of a sliding-window attention layer against a
 * global one: forward and backward of the flash-style kernel on one row of
 * T tokens (Gemma 3 1B's heads: 4 query heads of 256, one kv head), full
 * causal vs windows of 512 and 1024, best of 3 runs each. A sliding layer
 * should cost O(T x window): the ratio falls like window / (T / 2).
 * Usage: build/rel/bench/attn_window [T ...]   (default 2048 4096 8192) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>
#include "kernels/ops.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *filled(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    if (!p) exit(1);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) * (1.0 / 16777216.0)) - 0.5f;
    }
    return p;
}

/* best of 3 of forward + backward, seconds */
static double time_layer(int T, int window, int H, int KVH, int D, float *q, float *k, float *v, float *dout) {
    size_t nq = (size_t)T * H * D, nk = (size_t)T * KVH * D;
    float *out = calloc(nq, sizeof(float)), *lse = calloc((size_t)H * T, sizeof(float));
    float *dq = calloc(nq, sizeof(float)), *dk = calloc(nk, sizeof(float)), *dv = calloc(nk, sizeof(float));
    /* key segments as a training run on these threads would take them */
    int splits = attention_key_splits(1, KVH, omp_get_max_threads());
    float *ws = calloc(attention_workspace_floats(1, T, H, KVH, D, splits), sizeof(float));
    AttnParams ap = {.scale = 1.0f / 16.0f, .window = window, .softcap = 0.0f, .key_splits = splits};
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        attention_forward(out, lse, q, k, v, 1, T, H, KVH, D, &ap);
        attention_backward(dq, dk, dv, dout, q, k, v, out, lse, ws, 1, T, H, KVH, D, &ap);
        double dt = now() - t0;
        if (dt < best)
            best = dt;
    }
    free(out);
    free(lse);
    free(dq);
    free(dk);
    free(dv);
    free(ws);
    return best;
}

int main(int argc, char **argv) {
    int Ts[8] = {2048, 4096, 8192}, nT = 3;
    if (argc > 1) {
        nT = 0;
        for (int i = 1; i < argc && nT < 8; i++) Ts[nT++] = atoi(argv[i]);
    }
    const int H = 4, KVH = 1, D = 256;
    printf("| T | global ms | window 512 ms | ratio | window 1024 ms | ratio |\n|---|---|---|---|---|---|\n");
    for (int i = 0; i < nT; i++) {
        int T = Ts[i];
        size_t nq = (size_t)T * H * D, nk = (size_t)T * KVH * D;
        float *q = filled(nq, 1), *k = filled(nk, 2), *v = filled(nk, 3), *dout = filled(nq, 4);
        double g = time_layer(T, 0, H, KVH, D, q, k, v, dout);
        double w5 = time_layer(T, 512, H, KVH, D, q, k, v, dout);
        double w10 = time_layer(T, 1024, H, KVH, D, q, k, v, dout);
        printf("| %d | %.1f | %.1f | %.2f | %.1f | %.2f |\n", T, 1e3 * g, 1e3 * w5, w5 / g, 1e3 * w10, w10 / g);
        fflush(stdout);
        free(q);
        free(k);
        free(v);
        free(dout);
    }
    return 0;
}

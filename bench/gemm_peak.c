/* gemm_peak.c: GFLOP/s of the matrix products of a training step through
 * kernels/matmul (fp32 and bf16 weights), for SmolLM2-135M-like shapes:
 * N=2048 rows, C=576, OC in {576, 192, 1536} and the 49152-row LM head.
 * Forward (out = inp W^T), backward dinp (dout W) and dweight (dout^T inp).
 * Usage: gemm_peak [reps [threads...]]   (default: 5 reps, 1 and 2 threads)
 * GEMM_PEAK_CPU=1: GFLOP/s per CPU-second (per busy core), see now(). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dtype.h"
#include "kernels/matmul.h"

/* Wall time by default (bench/run.py divides wall-clock tokens/s by this
 * peak). GEMM_PEAK_CPU=1 measures CPU seconds of the whole process instead:
 * GFLOP/s per busy core, far steadier on a shared, loaded machine, and what
 * a CPU-time profile of a step (LMTUNE_MATMUL_PROFILE) compares against. */
static double now(void) {
    struct timespec t;
    clock_gettime(getenv("GEMM_PEAK_CPU") ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static float *filled(size_t n) {
    float *p = malloc(n * sizeof *p);
    if (!p) { fprintf(stderr, "gemm_peak: out of memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) reps = 1;
    const int shapes[][3] = {{2048, 576, 576}, {2048, 576, 192}, {2048, 576, 1536}, {2048, 1536, 576}, {512, 576, 49152}};
    size_t max_in = 0, max_w = 0, max_out = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        size_t n = shapes[s][0], c = shapes[s][1], oc = shapes[s][2];
        if (n * c > max_in) max_in = n * c;
        if (oc * c > max_w) max_w = oc * c;
        if (n * oc > max_out) max_out = n * oc;
    }
    float *inp = filled(max_in), *w = filled(max_w), *out = filled(max_out), *dinp = filled(max_in), *dw = filled(max_w);
    uint16_t *w16 = malloc(max_w * 2);
    for (size_t i = 0; i < max_w; i++) w16[i] = f32_to_bf16(w[i]);
    size_t scratch_bytes = matmul_scratch_bytes(max_out > max_in ? max_out : max_in, 1);
    void *scratch = malloc(scratch_bytes);
    matmul_set_scratch(scratch, scratch_bytes);
    int thread_counts[16] = {1, 2}, nthreads = 2;
    if (argc > 2) {
        nthreads = 0;
        for (int a = 2; a < argc && nthreads < 16; a++) thread_counts[nthreads++] = atoi(argv[a]) > 0 ? atoi(argv[a]) : 1;
    }
    for (int tc = 0; tc < nthreads; tc++) {
    omp_set_num_threads(thread_counts[tc]);
    printf("threads %d\n", omp_get_max_threads());
    printf("%-22s %-5s %10s %10s %10s\n", "N x C -> OC", "dtype", "fwd GF/s", "dinp GF/s", "dW GF/s");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        double flops = 2.0 * N * C * OC;
        for (int bf = 0; bf < 2; bf++) {
            DType wt = bf ? DTYPE_BF16 : DTYPE_F32;
            const void *W = bf ? (const void *)w16 : (const void *)w;
            double g[3];
            for (int which = 0; which < 3; which++) {
                if (bf && which == 2) { g[2] = 0; continue; } /* dweight is always fp32 */
                double best = 1e30;
                for (int r = 0; r <= reps; r++) { /* r = 0 warms the cache */
                    double t0 = now();
                    if (which == 0) linear_forward(out, inp, W, wt, NULL, N, C, OC);
                    else if (which == 1) linear_backward(dinp, NULL, NULL, out, inp, W, wt, N, C, OC);
                    else linear_backward(NULL, dw, NULL, out, inp, W, wt, N, C, OC);
                    double t = now() - t0;
                    if (r > 0 && t < best) best = t;
                }
                g[which] = flops / best * 1e-9;
            }
            char name[64];
            snprintf(name, sizeof name, "%dx%d->%d", N, C, OC);
            if (bf) printf("%-22s %-5s %10.1f %10.1f %10s\n", name, "bf16", g[0], g[1], "-");
            else printf("%-22s %-5s %10.1f %10.1f %10.1f\n", name, "f32", g[0], g[1], g[2]);
        }
    }
    }
    printf("oneDNN library scratchpad: %zu bytes\n", matmul_library_scratch_bytes());
    matmul_release_all();
    free(inp); free(w); free(out); free(dinp); free(dw); free(w16); free(scratch);
    return 0;
}

/* frozen_product.c: the frozen-weight products side by side: for a few
 * (N, out, in) shapes, the forward product out = x W^T and the input
 * gradient dx = dout W with W stored bf16 (oneDNN in place) and MLX-affine
 * 4-bit and 8-bit (expanded panel by panel into bf16, then oneDNN), and in
 * fp32 products: W stored f32 (in place), bf16 and 4-bit expanded into f32
 * panels; plus the expansion alone (weights per second) and the fused GEMV
 * of decoding against oneDNN's product for one row. Usage: frozen_product
 * [reps] [threads] [max_weights]: shapes with more weights than max_weights
 * are left out. Prints a table; median of reps after one warm-up.
 * BENCH_CPU_TIME=1: CPU seconds instead of wall seconds. */
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/dtype.h"
#include "kernels/dequant.h"
#include "kernels/frozen_weight.h"
#include "kernels/matmul.h"

/* Wall time, or with BENCH_CPU_TIME=1 the process's CPU time (steadier on
 * a loaded, shared machine; run it with one thread then). */
static double now(void) {
    struct timespec ts;
    clock_gettime(getenv("BENCH_CPU_TIME") ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef void (*Op)(void *ctx);
static double median_time(Op op, void *ctx, int reps) {
    double t[64];
    op(ctx);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        op(ctx);
        t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp);
    return t[reps / 2];
}

typedef struct { float *out, *x, *dx; const FrozenWeight *w; int N; uint16_t *panel; } Ctx;
static void fwd(void *p) { Ctx *c = p; fw_linear_forward(c->out, c->x, NULL, c->w, NULL, c->N); }
static void bwd(void *p) { Ctx *c = p; fw_linear_backward_dinp(c->dx, 0.0f, c->out, NULL, 0, c->w, c->N); }
static void expand(void *p) {
    Ctx *c = p;
    const FrozenWeight *w = c->w;
    size_t es = w->compute == DTYPE_F32 ? 4 : 2;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < w->rows; r++)
        fw_expand(w, r, 1, 0, w->cols, w->compute, (char *)c->panel + (size_t)r * w->cols * es,
                  (size_t)w->cols);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5, threads = argc > 2 ? atoi(argv[2]) : 2;
    double max_weights = argc > 3 ? atof(argv[3]) : 1e30;
    if (reps < 1 || reps > 64) reps = 5;
    omp_set_num_threads(threads);
    static const int shapes[][3] = {{256, 49152, 576}, {2048, 576, 576}, {2048, 1536, 576}, {2048, 576, 1536},
                                    {2048, 4864, 896}, {1024, 4096, 4096}, {1024, 14336, 4096},
                                    {1, 4096, 4096}, {1, 14336, 4096}};
    size_t maxw = (size_t)14336 * 4096, maxn = (size_t)2048 * 14336;
    float *wf = malloc(maxw * 4), *x = malloc(maxn * 4), *out = malloc(maxn * 4), *dx = malloc(maxn * 4);
    uint16_t *wb = malloc(maxw * 2), *panel = malloc(maxw * 4);
    uint8_t *codes = malloc(maxw);
    void *sc = malloc(maxw / 32 * 2), *bi = malloc(maxw / 32 * 2);
    for (size_t i = 0; i < maxw; i++) wf[i] = (float)((i * 2654435761u) % 1000) * 1e-4f - 0.05f;
    for (size_t i = 0; i < maxn; i++) x[i] = (float)((i * 40503u) % 997) * 1e-3f - 0.5f;
    size_t pb = fw_panel_scratch_bytes(14336);
    void *ps = malloc(pb);
    fw_set_panel_scratch(ps, pb);
    size_t mb = matmul_scratch_bytes(2048, 14336);
    void *ms = malloc(mb);
    matmul_set_scratch(ms, mb);
    printf("| N | out | in | weights | forward ms | dx ms | expansion ms (Gweights/s) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s][0], O = shapes[s][1], I = shapes[s][2];
        size_t n = (size_t)O * I;
        if ((double)n > max_weights) continue;
        matmul_f32_to_bf16(wb, wf, n);
        for (int k = 0; k < 6; k++) {
            FrozenWeight w;
            const char *name;
            if (k == 0) {
                w = fw_plain(wb, DTYPE_BF16, O, I, DTYPE_BF16);
                name = "bf16";
            } else if (k <= 2) {
                int bits = k == 1 ? 4 : 8;
                affine_quantize(codes, sc, bi, wb, DTYPE_BF16, bits, 64, O, I);
                w = fw_affine(codes, sc, bi, DTYPE_BF16, bits, 64, O, I);
                name = bits == 4 ? "4-bit" : "8-bit";
            } else if (k == 3) {
                w = fw_plain(wf, DTYPE_F32, O, I, DTYPE_F32);
                name = "f32";
            } else if (k == 4) {
                w = fw_plain(wb, DTYPE_BF16, O, I, DTYPE_F32);
                name = "bf16 as f32 (panels)";
            } else {
                affine_quantize(codes, sc, bi, wb, DTYPE_BF16, 4, 64, O, I);
                w = fw_affine(codes, sc, bi, DTYPE_BF16, 4, 64, O, I);
                w.compute = DTYPE_F32;
                name = "4-bit as f32 (panels)";
            }
            Ctx c = {out, x, dx, &w, N, panel};
            double tf = median_time(fwd, &c, reps), tb = N > 1 ? median_time(bwd, &c, reps) : 0.0;
            bool expands = !fw_is_direct(&w);
            double te = expands ? median_time(expand, &c, reps) : 0.0;
            printf("| %d | %d | %d | %s | %.2f | ", N, O, I, name, tf * 1e3);
            if (N > 1) printf("%.2f | ", tb * 1e3);
            else printf("- | ");
            if (expands) printf("%.2f (%.2f) |\n", te * 1e3, n / te * 1e-9);
            else printf("- |\n");
            fflush(stdout);
        }
    }
    matmul_release_all();
    return 0;
}

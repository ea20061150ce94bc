/* rmsnorm.c: RMSNorm in fp32 throughout: out = x * rstd * (weight + w_off),
 * rstd = 1/sqrt(mean(x^2) + eps). w_off is 0 for HF LlamaRMSNorm and 1 for
 * the Gemma norms, whose stored weights are zero-centred (the layer uses
 * 1 + w, added in fp32 as Gemma3RMSNorm does). */
#include <math.h>

#include "kernels/ops.h"

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, float w_off, float eps,
                     int N, int C) {
    #pragma omp parallel for schedule(static) if ((size_t)N * C > 32768)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float ss = 0.0f;
        #pragma omp simd reduction(+:ss)
        for (int i = 0; i < C; i++) ss += x[i] * x[i];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        #pragma omp simd
        for (int i = 0; i < C; i++) y[i] = x[i] * r * (weight[i] + w_off);
        if (rstd) rstd[n] = r;
    }
}

/* y_j = x_j r w_j with w_j = weight_j + w_off and r = (mean x^2 + eps)^-1/2, so
 * dx_j = r w_j g_j - x_j r^3 / C * sum_k g_k w_k x_k, dweight_j = sum_rows g_j x_j r. */
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, float w_off, const float *rstd, int N, int C) {
    #pragma omp parallel for schedule(static) if ((size_t)N * C > 32768)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float r = rstd[n], dot = 0.0f;
        #pragma omp simd reduction(+:dot)
        for (int i = 0; i < C; i++) dot += g[i] * (weight[i] + w_off) * x[i];
        float k = dot * r * r * r / (float)C;
        #pragma omp simd
        for (int i = 0; i < C; i++) dx[i] += r * (weight[i] + w_off) * g[i] - k * x[i];
    }
    if (!dweight) return;
    /* Threads split columns; rows are summed in order (deterministic). */
    enum { COLS = 64 };
    int blocks = (C + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static) if ((size_t)N * C > 32768)
    for (int b = 0; b < blocks; b++) {
        int c0 = b * COLS, width = C - c0 < COLS ? C - c0 : COLS;
        float acc[COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C + c0, *g = dout + (size_t)n * C + c0;
            float r = rstd[n];
            #pragma omp simd
            for (int j = 0; j < width; j++) acc[j] += g[j] * x[j] * r;
        }
        for (int j = 0; j < width; j++) dweight[c0 + j] += acc[j];
    }
}

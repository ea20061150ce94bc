/* gdn_ops.c: the element-wise and per-head kernels around the gated delta
 * rule in a Gated DeltaNet layer (gated_delta.h): the depthwise causal
 * conv1d with SiLU, the per-head L2 normalisation of q and k, the beta and
 * decay gates, and the gated RMSNorm of the output. Formulas and where they
 * were verified: gated_delta.h. fp32 throughout; sums over rows for weight
 * gradients run in a fixed order (deterministic). */
#include <math.h>

#include "kernels/gated_delta.h"
#include "base/error.h"

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ------------------------------------------------------------------ conv1d */

void conv1d_silu_forward(float *out, const float *inp, const float *weight, const float *state, float *state_out,
                         int B, int T, int C, int K) {
    int rows = B * T;
    #pragma omp parallel for schedule(static) if ((size_t)rows * C > 32768)
    for (int r = 0; r < rows; r++) {
        int b = r / T;
        int t = r % T;
        float *o = out + (size_t)r * C;
        for (int c = 0; c < C; c++) o[c] = 0.0f;
        for (int j = 0; j < K; j++) {
            int src = t - (K - 1) + j;
            const float *x;
            if (src >= 0) x = inp + ((size_t)b * T + src) * C;
            else if (state) x = state + ((size_t)b * (K - 1) + (K - 1) + src) * C;
            else continue;
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] += weight[(size_t)c * K + j] * x[c];
        }
        #pragma omp simd
        for (int c = 0; c < C; c++) o[c] = o[c] * sigmoidf(o[c]);
    }
    if (!state_out) return;
    /* the last K-1 inputs of (state, inp); ascending i reads old entries i + T > i
     * before they are overwritten, so state_out may be state */
    for (int b = 0; b < B; b++)
        for (int i = 0; i < K - 1; i++) {
            int src = T - (K - 1) + i;
            float *dst = state_out + ((size_t)b * (K - 1) + i) * C;
            if (src >= 0) {
                const float *x = inp + ((size_t)b * T + src) * C;
                for (int c = 0; c < C; c++) dst[c] = x[c];
            } else if (state) {
                const float *x = state + ((size_t)b * (K - 1) + (K - 1) + src) * C;
                for (int c = 0; c < C; c++) dst[c] = x[c];
            } else {
                for (int c = 0; c < C; c++) dst[c] = 0.0f;
            }
        }
}

/* pre = conv(x); out = silu(pre): dpre = dout * sigmoid(pre) (1 + pre (1 - sigmoid(pre))).
 * Tasks own blocks of channels (so dinp and dweight have one writer each) and
 * walk the positions in order, recomputing pre. */
void conv1d_silu_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          int B, int T, int C, int K) {
    enum { CB = 64, KMAX = 16 };
    if (K > KMAX) die("conv1d_silu_backward: kernel size %d > %d", K, KMAX);
    int blocks = (C + CB - 1) / CB;
    #pragma omp parallel for schedule(static) if ((size_t)B * T * C > 32768)
    for (int blk = 0; blk < blocks; blk++) {
        int c0 = blk * CB;
        int c1 = c0 + CB < C ? c0 + CB : C;
        float dw[CB * KMAX];
        for (int i = 0; i < (c1 - c0) * K; i++) dw[i] = 0.0f;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                size_t r = (size_t)b * T + t;
                float dpre[CB];
                for (int c = c0; c < c1; c++) {
                    float p = 0.0f;
                    for (int j = 0; j < K; j++) {
                        int src = t - (K - 1) + j;
                        if (src >= 0) p += weight[(size_t)c * K + j] * inp[((size_t)b * T + src) * C + c];
                    }
                    float sg = sigmoidf(p);
                    dpre[c - c0] = dout[r * C + c] * sg * (1.0f + p * (1.0f - sg));
                }
                for (int j = 0; j < K; j++) {
                    int src = t - (K - 1) + j;
                    if (src < 0) continue;
                    size_t rs = ((size_t)b * T + src) * C;
                    for (int c = c0; c < c1; c++) {
                        dinp[rs + c] += weight[(size_t)c * K + j] * dpre[c - c0];
                        dw[(c - c0) * K + j] += dpre[c - c0] * inp[rs + c];
                    }
                }
            }
        if (dweight)
            for (int c = c0; c < c1; c++)
                for (int j = 0; j < K; j++) dweight[(size_t)c * K + j] += dw[(c - c0) * K + j];
    }
}

/* ------------------------------------------------------------------ l2norm */

void l2norm_forward(float *out, float *rnorm, const float *inp, int ld_in, float scale, float eps,
                    int N, int H, int D) {
    #pragma omp parallel for schedule(static) if ((size_t)N * H * D > 32768)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const float *x = inp + (size_t)n * ld_in + (size_t)h * D;
            float *y = out + ((size_t)n * H + h) * D;
            double ss = 0.0;
            #pragma omp simd reduction(+:ss)
            for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
            float r = (float)(1.0 / sqrt(ss + eps));
            rnorm[(size_t)n * H + h] = r;
            float f = r * scale;
            #pragma omp simd
            for (int i = 0; i < D; i++) y[i] = x[i] * f;
        }
}

/* y = s x r, r = (x.x + eps)^-1/2: dx = s r dy - s r^3 x (x.dy). */
void l2norm_backward(float *dinp, const float *dout, const float *inp, int ld_in, const float *rnorm, float scale,
                     int N, int H, int D) {
    #pragma omp parallel for schedule(static) if ((size_t)N * H * D > 32768)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const float *x = inp + (size_t)n * ld_in + (size_t)h * D;
            const float *dy = dout + ((size_t)n * H + h) * D;
            float *dx = dinp + (size_t)n * ld_in + (size_t)h * D;
            float r = rnorm[(size_t)n * H + h];
            double xd = 0.0;
            #pragma omp simd reduction(+:xd)
            for (int i = 0; i < D; i++) xd += (double)x[i] * dy[i];
            float a = scale * r;
            float c = scale * r * r * r * xd;
            #pragma omp simd
            for (int i = 0; i < D; i++) dx[i] += a * dy[i] - c * x[i];
        }
}

/* ------------------------------------------------------------------- gates */

/* torch.nn.functional.softplus (beta 1, threshold 20). */
static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void gdn_gates_forward(float *g, float *beta, const float *a, const float *b,
                       const float *A_log, const float *dt_bias, int N, int H) {
    #pragma omp parallel for schedule(static) if ((size_t)N * H > 65536)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            size_t i = (size_t)n * H + h;
            g[i] = -expf(A_log[h]) * softplusf(a[i] + dt_bias[h]);
            beta[i] = sigmoidf(b[i]);
        }
}

/* g = -e^A softplus(a + dt): dg/da = dg/ddt = -e^A sigmoid(a + dt) (softplus'
 * is the sigmoid; above the threshold it is 1, as torch's), dg/dA = g. */
void gdn_gates_backward(float *da, float *db, float *dA_log, float *ddt_bias, const float *dg, const float *dbeta,
                        const float *a, const float *b, const float *A_log, const float *dt_bias, int N, int H) {
    #pragma omp parallel for schedule(static) if ((size_t)N * H > 65536)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            size_t i = (size_t)n * H + h;
            float x = a[i] + dt_bias[h];
            float sp = x > 20.0f ? 1.0f : sigmoidf(x);
            da[i] += dg[i] * -expf(A_log[h]) * sp;
            float bt = sigmoidf(b[i]);
            db[i] += dbeta[i] * bt * (1.0f - bt);
        }
    if (!dA_log && !ddt_bias) return;
    for (int h = 0; h < H; h++) {
        double sa = 0.0;
        double sd = 0.0;
        float eA = expf(A_log[h]);
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * H + h;
            float x = a[i] + dt_bias[h];
            float sp = x > 20.0f ? 1.0f : sigmoidf(x);
            sa += (double)dg[i] * (-eA * softplusf(x));
            sd += (double)dg[i] * -eA * sp;
        }
        if (dA_log) dA_log[h] += (float)sa;
        if (ddt_bias) ddt_bias[h] += (float)sd;
    }
}

/* ------------------------------------------------------------ gated RMSNorm */

void gated_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *z, const float *weight,
                           float eps, int N, int D) {
    #pragma omp parallel for schedule(static) if ((size_t)N * D > 32768)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * D;
        const float *zz = z + (size_t)n * D;
        float *y = out + (size_t)n * D;
        double ss = 0.0;
        #pragma omp simd reduction(+:ss)
        for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
        float r = (float)(1.0 / sqrt(ss / D + eps));
        rstd[n] = r;
        #pragma omp simd
        for (int i = 0; i < D; i++) y[i] = weight[i] * (x[i] * r) * (zz[i] * sigmoidf(zz[i]));
    }
}

/* y = w (x r) silu(z): with gn = dy w silu(z) the gradient of the normed x,
 * dx = r gn - x r^3 / D * sum(gn x); dz = dy w (x r) silu'(z);
 * dw = sum over rows of dy (x r) silu(z). */
void gated_rmsnorm_backward(float *dinp, float *dz, float *dweight, const float *dout, const float *inp,
                            const float *z, const float *weight, const float *rstd, int N, int D) {
    #pragma omp parallel for schedule(static) if ((size_t)N * D > 32768)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * D;
        const float *zz = z + (size_t)n * D;
        const float *dy = dout + (size_t)n * D;
        float *dx = dinp + (size_t)n * D;
        float *dzz = dz + (size_t)n * D;
        float r = rstd[n];
        double dot = 0.0;
        for (int i = 0; i < D; i++) {
            float sg = sigmoidf(zz[i]);
            float gn = dy[i] * weight[i] * zz[i] * sg;
            dot += (double)gn * x[i];
            dzz[i] += dy[i] * weight[i] * x[i] * r * sg * (1.0f + zz[i] * (1.0f - sg));
        }
        float k = dot * r * r * r / (float)D;
        for (int i = 0; i < D; i++) {
            float gn = dy[i] * weight[i] * zz[i] * sigmoidf(zz[i]);
            dx[i] += r * gn - k * x[i];
        }
    }
    if (!dweight) return;
    enum { COLS = 64 };
    int blocks = (D + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static) if ((size_t)N * D > 32768)
    for (int blk = 0; blk < blocks; blk++) {
        int c0 = blk * COLS;
        int width = D - c0 < COLS ? D - c0 : COLS;
        float acc[COLS] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * D + c0;
            const float *zz = z + (size_t)n * D + c0;
            const float *dy = dout + (size_t)n * D + c0;
            float r = rstd[n];
            for (int j = 0; j < width; j++) acc[j] += dy[j] * x[j] * r * zz[j] * sigmoidf(zz[j]);
        }
        for (int j = 0; j < width; j++) dweight[c0 + j] += acc[j];
    }
}

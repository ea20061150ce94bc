/* gemv_affine.c: the GEMVs of decoding: y = x W^T for a few rows of x with
 * W plain bf16 (bf16_gemv), or MLX affine-quantized, reading each packed code once
 * and never writing a dequantized weight. Per output feature and group:
 *     y += s * sum_j x_j q_j + b * sum_j x_j
 * (the sums of x per group are computed once per call). Decoding reads every
 * weight of the model once per token, so this is memory-bound: 4-bit codes
 * move a quarter of the bytes of bf16 weights. Threads split the output
 * features. The result equals x times the dequantized weights up to float
 * rounding (MLX's qmv computes the same sums). Compiled twice in the
 * portable build (kernels/isa.h), like the expansion; same bits. */
#include "kernels/dequant.h"
#include "kernels/affine_codes.h"
#include "kernels/isa.h"

static inline float hsum16(v16 v) {
    float s = 0.0f;
    for (int i = 0; i < 16; i++) s += v[i];
    return s;
}

/* One output feature for one row of x; xs: that row's per-group sums. */
static float dot_row(const float *x, const float *xs, const uint8_t *row, size_t row_bytes, const void *scales,
                     const void *biases, size_t g0, DType t, int bits, int group, int cols) {
    int gpr = cols / group;
    bool vec = bits == 4 || bits == 8;
    v16 accv = splat16(0.0f);
    float acc = 0.0f;
    for (int g = 0; g < gpr; g++) {
        float s = scalar_of(scales, g0 + (size_t)g, t), b = scalar_of(biases, g0 + (size_t)g, t);
        size_t c = (size_t)g * (size_t)group;
        if (vec) {
            v16 d = splat16(0.0f);
            for (int j = 0; j < group; j += 16)
                d += __builtin_convertvector(codes16(row, bits, c + (size_t)j), v16) * load16(x + c + j);
            accv += d * splat16(s);
        } else {
            float d = 0.0f;
            for (int j = 0; j < group; j++) d += (float)code_at(row, row_bytes, bits, c + (size_t)j) * x[c + (size_t)j];
            acc += s * d;
        }
        acc += b * xs[g];
    }
    return acc + hsum16(accv);
}

void ISA_FN(affine_gemv)(float *y, size_t ldy, const float *x, const uint8_t *packed, size_t row_bytes,
                 const void *scales, const void *biases, DType t, int bits, int group,
                 int rows, int cols, const float *bias, int N) {
    int gpr = cols / group;
    float xs[N > 0 ? (size_t)N * (size_t)gpr : 1];
    for (int n = 0; n < N; n++)
        for (int g = 0; g < gpr; g++) {
            float s = 0.0f;
            const float *xg = x + (size_t)n * cols + (size_t)g * group;
            for (int j = 0; j < group; j++) s += xg[j];
            xs[(size_t)n * gpr + g] = s;
        }
    #pragma omp parallel for schedule(static) if ((size_t)rows * cols > 65536)
    for (int o = 0; o < rows; o++) {
        const uint8_t *row = packed + (size_t)o * row_bytes;
        for (int n = 0; n < N; n++) {
            float v = dot_row(x + (size_t)n * cols, xs + (size_t)n * gpr, row, row_bytes, scales, biases,
                              (size_t)o * gpr, t, bits, group, cols);
            y[(size_t)n * ldy + o] = v + (bias ? bias[o] : 0.0f);
        }
    }
}

/* Four output features at a time: four independent accumulator chains per
 * row of x, and the loads of x shared by the four weight rows. */
void ISA_FN(bf16_gemv)(float *y, size_t ldy, const float *x, const uint16_t *x16, const void *w, int rows, int cols,
                       const float *bias, int N) {
    const uint16_t *W = w;
    int blocks = (rows + 3) / 4;
    #pragma omp parallel for schedule(static) if ((size_t)rows * cols > 65536)
    for (int ob = 0; ob < blocks; ob++) {
        int o0 = ob * 4, no = rows - o0 < 4 ? rows - o0 : 4;
        const uint16_t *wr[4];
        for (int i = 0; i < 4; i++) wr[i] = W + (size_t)(o0 + (i < no ? i : 0)) * cols;
        for (int n = 0; n < N; n++) {
            const float *xr = x ? x + (size_t)n * cols : NULL;
            const uint16_t *xr16 = x16 ? x16 + (size_t)n * cols : NULL;
            v16 acc[4] = {splat16(0.0f), splat16(0.0f), splat16(0.0f), splat16(0.0f)};
            int c = 0;
            for (; c + 16 <= cols; c += 16) {
                v16 xv = xr16 ? (v16)(__builtin_convertvector(*(const v16hu *)(xr16 + c), v16w) << 16)
                              : load16(xr + c);
                for (int i = 0; i < 4; i++) {
                    __builtin_prefetch(wr[i] + c + 1024);
                    acc[i] += (v16)(__builtin_convertvector(*(const v16hu *)(wr[i] + c), v16w) << 16) * xv;
                }
            }
            for (int i = 0; i < no; i++) {
                float sum = hsum16(acc[i]);
                for (int cc = c; cc < cols; cc++)
                    sum += bf16_to_f32(wr[i][cc]) * (xr16 ? bf16_to_f32(xr16[cc]) : xr[cc]);
                y[(size_t)n * ldy + o0 + i] = sum + (bias ? bias[o0 + i] : 0.0f);
            }
        }
    }
}

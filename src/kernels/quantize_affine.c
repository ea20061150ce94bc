/* quantize_affine.c: MLX's affine quantization of a matrix (see dequant.h
 * for the rule, read from mlx/backend/metal/kernels/quantized.h
 * affine_quantize, whose CUDA twin computes the same): group statistics,
 * scale and bias, codes, and the bit packing. Used by `lmtune convert -q`
 * and by fuse's re-quantization. Groups are independent, so rows are split
 * among threads. */
#include "kernels/dequant.h"
#include <float.h>
#include <math.h>
#include <string.h>

static float load_elem(const void *src, DType t, size_t i) {
    if (t == DTYPE_F32) return ((const float *)src)[i];
    uint16_t h = ((const uint16_t *)src)[i];
    return t == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

static void store_elem(void *dst, DType t, size_t i, float v) {
    if (t == DTYPE_F32) ((float *)dst)[i] = v;
    else if (t == DTYPE_BF16) ((uint16_t *)dst)[i] = f32_to_bf16(v);
    else ((uint16_t *)dst)[i] = f32_to_f16(v);
}

/* Limits<T>::max, the kernel's starting minimum. */
static float type_max(DType t) {
    if (t == DTYPE_BF16) return bf16_to_f32(0x7f7f);
    if (t == DTYPE_F16) return 65504.0f;
    return FLT_MAX;
}

/* One group: scale and bias as floats (before rounding to T). */
static void group_params(const float *w, int group, float n_bins, float tmax, float *scale_out, float *bias_out) {
    const float eps = 1e-7f;
    float w_min = tmax, w_max = 0.0f;
    for (int j = 0; j < group; j++) {
        w_min = fminf(w_min, w[j]);
        w_max = fmaxf(w_max, w[j]);
    }
    float scale = fmaxf((w_max - w_min) / n_bins, eps);
    bool side = fabsf(w_min) > fabsf(w_max);
    scale = side ? scale : -scale;
    float edge = side ? w_min : w_max;
    float q0 = roundf(edge / scale);
    bool at_zero = q0 == 0.0f;
    *scale_out = at_zero ? scale : edge / q0;
    *bias_out = at_zero ? 0.0f : edge;
}

void affine_quantize(uint8_t *packed, void *scales, void *biases, const void *src, DType t,
                     int bits, int group, int rows, int cols) {
    float n_bins = (float)((1 << bits) - 1), tmax = type_max(t);
    size_t row_bytes = (size_t)cols * (size_t)bits / 8, gpr = (size_t)cols / (size_t)group;
    #pragma omp parallel for schedule(static) if ((size_t)rows * cols > 65536)
    for (int r = 0; r < rows; r++) {
        float w[128];
        uint8_t *row = packed + (size_t)r * row_bytes;
        memset(row, 0, row_bytes);
        uint64_t acc = 0;
        int acc_bits = 0;
        size_t out = 0;
        for (size_t g = 0; g < gpr; g++) {
            size_t base = (size_t)r * (size_t)cols + g * (size_t)group;
            for (int j = 0; j < group; j++) w[j] = load_elem(src, t, base + (size_t)j);
            float scale, bias;
            group_params(w, group, n_bins, tmax, &scale, &bias);
            store_elem(scales, t, (size_t)r * gpr + g, scale);
            store_elem(biases, t, (size_t)r * gpr + g, bias);
            for (int j = 0; j < group; j++) {
                float q = fminf(roundf((w[j] - bias) / scale), n_bins);
                unsigned code = q > 0.0f ? (unsigned)q : 0u;
                acc |= (uint64_t)code << acc_bits;
                acc_bits += bits;
                while (acc_bits >= 8) {
                    row[out++] = (uint8_t)acc;
                    acc >>= 8;
                    acc_bits -= 8;
                }
            }
        }
    }
}

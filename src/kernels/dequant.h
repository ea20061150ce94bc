/* dequant.h: the kernels of the quantized formats a FrozenWeight can hold
 * (kernels/frozen_weight.h): expanding a tile to F32 or BF16, the fused
 * dequantize-and-dot for decoding, and quantizing (for `lmtune convert` and
 * fuse). Internal to src/kernels and the few callers that write formats.
 *
 * MLX affine (ml-explore/mlx: mlx/ops.cpp affine_quantize/dequantize,
 * mlx/backend/metal/kernels/quantized.h, mlx/backend/cpu/quantized.cpp):
 * a row of `cols` weights is cut into groups of `group` consecutive
 * weights; each group has a scale s and a bias b (stored in the model dtype
 * T) and each weight a code q in [0, 2^bits). The codes of a row form one
 * little-endian bit stream: code i occupies bits [i*bits, (i+1)*bits) of the
 * row's bytes (for 2/4/8 bits this is 32/bits codes per uint32, lowest
 * first; for 3 and 6 bits 8 and 4 codes per 3 bytes; for 5 bits 8 codes per
 * 5 bytes). Row r starts at byte r * cols * bits / 8.
 *
 * The dequantized weight is the value MLX's quantized matrix products use
 * (Metal qmm/qmv, `dequantize` in quantized.h):
 *     T = BF16 or F16:  w = (T)((float)s * q + (float)b)
 *     T = F32:          w = ((float)s * q) + (float)b, each operation rounded
 * (float)s * q is exact for a 16-bit T, so the first line rounds once to
 * float and once to T. MLX's CPU `mx.dequantize` rounds s * q to T before
 * adding b; the two differ in the last bit of a few weights. */
#ifndef LT_DEQUANT_H
#define LT_DEQUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"

/* The dequantized weight of code q with scale s and bias b of dtype t, as a
 * float (exact: the value is a T number). The scalar definition every
 * vector path must equal. */
float affine_value(float s, float b, unsigned q, DType t);

/* dst (nr, nc), rows ld elements apart, of type out (F32 or BF16) = the
 * dequantized weights of rows r0.. and columns c0.. of an affine matrix
 * (rows of row_bytes bytes; scales/biases rows of cols/group entries).
 * c0 and nc are multiples of group. */
void affine_expand(const uint8_t *packed, size_t row_bytes, const void *scales, const void *biases, DType t,
                   int bits, int group, int cols, int r0, int nr, int c0, int nc, DType out, void *dst, size_t ld);

/* y (N, rows) = x (N, cols) W^T (+ bias) for a few rows of x, reading the
 * packed codes once: per group, s * sum(x q) + b * sum(x). y rows are
 * ldy apart. Threads split the output features. */
void affine_gemv(float *y, size_t ldy, const float *x, const uint8_t *packed, size_t row_bytes,
                 const void *scales, const void *biases, DType t, int bits, int group,
                 int rows, int cols, const float *bias, int N);

/* y (N, rows) = x (N, cols) W^T (+ bias) for a few rows of x and W plain
 * bf16 (rows, cols), widening each weight in registers: decoding reads
 * every weight once per token, so this runs at memory speed (oneDNN's bf16
 * product of one row by the matrix ran at 3-4 GB/s). The input is x (fp32)
 * or, for a bf16 product, x16 (the input rounded to bf16): exactly one of
 * the two. y rows are ldy apart. Sums in a fixed order. */
void bf16_gemv(float *y, size_t ldy, const float *x, const uint16_t *x16, const void *w, int rows, int cols,
               const float *bias, int N);

/* MLX's affine_quantize of rows (rows, cols) of src (dtype t: F32, BF16 or
 * F16) into packed codes (rows * cols * bits / 8 bytes) and scales and
 * biases (rows, cols / group) of dtype t, as MLX's GPU kernels (Metal and
 * CUDA) compute them: per group w_min = min(values, max of T),
 * w_max = max(values, 0); scale = max((w_max - w_min) / (2^bits - 1), 1e-7),
 * negated unless |w_min| > |w_max|; edge = the larger-magnitude end;
 * q0 = round(edge / scale) (halves away from zero); when q0 != 0,
 * scale = edge / q0 and bias = edge, else bias = 0; each code is
 * min(round((w - bias) / scale), 2^bits - 1). Scale and bias are stored
 * rounded to T (nearest even). bits 2..8 except 7, group 32, 64 or 128,
 * cols % group == 0. */
void affine_quantize(uint8_t *packed, void *scales, void *biases, const void *src, DType t,
                     int bits, int group, int rows, int cols);
#endif

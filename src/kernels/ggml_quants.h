/* ggml_quants.h: the exact conversions lmtune needs for ggml's tensor
 * types (llama.cpp's tensor library): dequantization of every supported
 * block type to fp32 and the reference Q8_0 quantization (ggml-quants.c's
 * quantize_row_q8_0_ref), both bit-identical to ggml's reference C
 * functions (same operations, same order, no fused multiply-add: this file
 * is compiled with -ffp-contract=off, see the Makefile). The types and
 * their block layouts are base/ggml_types.h. */
#ifndef LT_GGML_QUANTS_H
#define LT_GGML_QUANTS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "base/ggml_types.h"

/* Dequantizes n elements (a multiple of the block size) of a row of `type`
 * into dst, as ggml's dequantize_row_* (and its F16/BF16/F32 conversions). */
void ggml_dequantize_row(int type, const void *src, float *dst, int64_t n);

/* A tile of a ggml matrix, for the frozen-weight products (the expand
 * kernel of a FrozenWeight of ggml blocks): dst (nr, nc), rows ld elements
 * apart, of type out (F32, or BF16 rounded to nearest even from the exact
 * dequantized float) = rows r0.. and columns c0.. of a (rows, cols) matrix
 * of `type` whose row r starts at data + r * row_bytes. c0 and nc are
 * multiples of the type's block size (nc may end at the last column). */
void ggml_expand(int type, const uint8_t *data, size_t row_bytes, int r0, int nr, int c0, int nc, DType out,
                 void *dst, size_t ld);

/* ggml's quantize_row_q8_0_ref: n (a multiple of 32) floats to n / 32
 * blocks of 34 bytes (fp16 scale amax / 127, then 32 int8 = roundf(x / d)). */
void ggml_quantize_row_q8_0(const float *src, void *dst, int64_t n);
#endif

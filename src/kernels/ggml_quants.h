/* ggml_quants.h: the tensor element types of ggml (llama.cpp's tensor
 * library) that a GGUF file may hold, their block layouts, and the exact
 * conversions lmtune needs: dequantization of every supported block type to
 * fp32 and the reference Q8_0 quantization (ggml-quants.c's
 * quantize_row_q8_0_ref), both bit-identical to ggml's reference C
 * functions (same operations, same order, no fused multiply-add: this file
 * is compiled with -ffp-contract=off, see the Makefile).
 *
 * A quantized row of n elements is n / block_size blocks of block_bytes
 * bytes each, laid out one after the other (ggml-common.h). */
#ifndef LT_GGML_QUANTS_H
#define LT_GGML_QUANTS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Numbers as in ggml.h's enum ggml_type (they are written in GGUF files). */
typedef enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_LIMIT = 64   /* larger numbers are never valid */
} GgmlType;

#define GGML_QK_K 256      /* elements of a K-quant super-block */

/* Name ("Q4_K"), or NULL when lmtune does not know the type. */
const char *ggml_type_name(int type);
/* True for the types of the enum above (those lmtune can read). */
bool ggml_type_supported(int type);
/* Elements per block (1 for F32/F16/BF16) and bytes per block; 0 when unknown. */
int ggml_block_size(int type);
int ggml_block_bytes(int type);
/* Bytes of a row of n elements (n a multiple of the block size); 0 when
 * unknown or not a multiple. */
size_t ggml_row_bytes(int type, int64_t n);
/* True when the type packs several elements per block (Q*). */
bool ggml_type_is_quantized(int type);

/* Dequantizes n elements (a multiple of the block size) of a row of `type`
 * into dst, as ggml's dequantize_row_* (and its F16/BF16/F32 conversions). */
void ggml_dequantize_row(int type, const void *src, float *dst, int64_t n);

/* ggml's quantize_row_q8_0_ref: n (a multiple of 32) floats to n / 32
 * blocks of 34 bytes (fp16 scale amax / 127, then 32 int8 = roundf(x / d)). */
void ggml_quantize_row_q8_0(const float *src, void *dst, int64_t n);
#endif

/* ggml_types.h: the tensor element types of ggml (llama.cpp's tensor
 * library) that a GGUF file may hold and lmtune can read, with their block
 * layouts (ggml-common.h): a row of n elements is n / block_size blocks of
 * block_bytes bytes, one after the other. The conversions are in
 * kernels/ggml_quants.h. */
#ifndef LT_GGML_TYPES_H
#define LT_GGML_TYPES_H
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
#endif

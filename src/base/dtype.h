/* dtype.h: element types of tensors in files and in memory, and the bf16/f16
 * conversions every layer shares. */
#ifndef LT_DTYPE_H
#define LT_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    DTYPE_F32 = 0, DTYPE_BF16, DTYPE_F16, DTYPE_F64, DTYPE_I64, DTYPE_I32, DTYPE_I16, DTYPE_I8,
    DTYPE_U64, DTYPE_U32, DTYPE_U16, DTYPE_U8, DTYPE_BOOL, DTYPE_C64,
    DTYPE_F8_E5M2, DTYPE_F8_E4M3, DTYPE_F8_E8M0, DTYPE_F8_E4M3FNUZ, DTYPE_F8_E5M2FNUZ,
    DTYPE_F4, DTYPE_F6_E2M3, DTYPE_F6_E3M2,
    DTYPE_COUNT
} DType;

/* Name as written in safetensors headers ("F32", "BF16", ...). */
const char *dtype_name(DType t);
/* Parses an exact (case-sensitive) safetensors name; -1 when unknown. */
int dtype_from_name(const char *name, DType *out);
/* Size in bits of one element (4 for F4, 6 for F6_*). */
int dtype_bits(DType t);

static inline float bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t f32_to_bf16(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

/* Converts `n` elements of F32/BF16/F16 `src` to float. */
void dtype_to_f32(float *dst, const void *src, DType t, size_t n);
/* Converts `n` floats to F32/BF16/F16 `dst`. */
void dtype_from_f32(void *dst, DType t, const float *src, size_t n);
#endif

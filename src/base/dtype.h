/* dtype.h: element types of tensors in files and in memory, and the bf16/f16
 * conversions every layer shares. */
#ifndef LT_DTYPE_H
#define LT_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    DTYPE_F32 = 0,
    DTYPE_BF16,
    DTYPE_F16,
    DTYPE_F64,
    DTYPE_I64,
    DTYPE_I32,
    DTYPE_I16,
    DTYPE_I8,
    DTYPE_U64,
    DTYPE_U32,
    DTYPE_U16,
    DTYPE_U8,
    DTYPE_BOOL,
    DTYPE_C64,
    DTYPE_F8_E5M2,
    DTYPE_F8_E4M3,
    DTYPE_F8_E8M0,
    DTYPE_F8_E4M3FNUZ,
    DTYPE_F8_E5M2FNUZ,
    DTYPE_F4,
    DTYPE_F6_E2M3,
    DTYPE_F6_E3M2,
    DTYPE_COUNT
} DType;

/* Name as written in safetensors headers ("F32", "BF16", ...). */
const char *dtype_name(DType t);
/* Parses an exact (case-sensitive) safetensors name; -1 when unknown. */
int dtype_from_name(const char *name, DType *out);
/* Size in bits of one element (4 for F4, 6 for F6_*). */
int dtype_bits(DType t);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The one bf16 rounding rule of lmtune, on the bits u of a float: round to
 * nearest, ties to even (adding 0x7fff plus the lowest kept bit carries
 * into the kept bits exactly when the dropped half is above one half, or
 * is one half and the kept value odd; a carry out of the largest finite
 * value gives infinity); subnormals are rounded like any number, never
 * flushed; a NaN keeps its sign and top payload bits and becomes quiet
 * (0x40), so it never rounds into an infinity. `nan` is all ones where u is
 * a NaN, else 0. Written with operators only, so the same text serves a
 * uint32_t (f32_to_bf16 below) and a GCC vector of uint32 lanes
 * (store16_bf16 in kernels/vec.h); the result is in the low 16 bits. */
#define LT_BF16_ROUND(u, nan) \
    (((((u) + 0x7fffu + (((u) >> 16) & 1u)) >> 16) & ~(nan)) | ((((u) >> 16) | 0x40u) & (nan)))

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u ? 0xffffffffu : 0u;
    return (uint16_t)LT_BF16_ROUND(u, nan);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

/* Converts `n` elements of F32/BF16/F16 `src` to float. */
void dtype_to_f32(float *dst, const void *src, DType t, size_t n);
/* Converts `n` floats to F32/BF16/F16 `dst`. */
void dtype_from_f32(void *dst, DType t, const float *src, size_t n);
#endif

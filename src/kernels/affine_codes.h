/* affine_codes.h: reading the codes and scales of MLX affine-quantized
 * rows (layout in dequant.h), shared by the expansion (dequant_affine.c)
 * and the fused GEMV (gemv_affine.c). Internal to src/kernels. */
#ifndef LT_AFFINE_CODES_H
#define LT_AFFINE_CODES_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "base/dtype.h"
#include "kernels/vec.h"
#ifdef __AVX512F__
#include <immintrin.h>
#endif

static inline float scalar_of(const void *p, size_t i, DType t) {
    if (t == DTYPE_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

/* s * q + b, each operation rounded to float; the barrier keeps the
 * compiler (-ffp-contract=fast) from fusing them into one rounding. */
static inline float mul_add_f32(float s, float q, float b) {
    float t = s * q;
    __asm__("" : "+m"(t));
    return t + b;
}

/* Code i of a row's bit stream, for any width 2..8. */
static inline unsigned code_at(const uint8_t *row, size_t row_bytes, int bits, size_t i) {
    size_t bit = i * (size_t)bits, byte = bit >> 3;
    unsigned shift = (unsigned)(bit & 7);
    unsigned window = row[byte];
    if (shift + (unsigned)bits > 8 && byte + 1 < row_bytes) window |= (unsigned)row[byte + 1] << 8;
    return (window >> shift) & ((1u << bits) - 1u);
}

/* 16 codes starting at code i (i % 16 == 0) of a 4- or 8-bit row, as ints.
 * With AVX-512: one zero-extending load; 4-bit codes are the bytes doubled
 * (b0 b0 b1 b1 ...) and shifted right by 0 / 4 per lane. */
static inline v16i codes16(const uint8_t *row, int bits, size_t i) {
#ifdef __AVX512F__
    if (bits == 8) return (v16i)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + i)));
    __m128i raw = _mm_loadl_epi64((const __m128i *)(row + i / 2));
    __m512i v = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(raw, raw));
    const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    return (v16i)_mm512_and_si512(_mm512_srlv_epi32(v, shifts), _mm512_set1_epi32(15));
#else
    v16i out;
    for (int k = 0; k < 16; k++) {
        size_t j = i + (size_t)k;
        out[k] = bits == 8 ? row[j] : (row[j / 2] >> (4 * (j & 1))) & 15;
    }
    return out;
#endif
}

/* 16 floats rounded to bf16 by the rule of f32_to_bf16 (base/dtype.h,
 * LT_BF16_ROUND), kept as floats: the bf16 bits moved back to the top half. */
static inline v16 round16_bf16(v16 x) {
    v16w u = (v16w)x;
    v16w nan = (v16w)((u & 0x7fffffffu) > 0x7f800000u);
    return (v16)(LT_BF16_ROUND(u, nan) << 16);
}

#endif

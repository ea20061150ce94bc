/* dequant_affine.c: expanding MLX affine-quantized weights (packed codes,
 * per-group scales and biases; see dequant.h for the layout and the exact
 * value) into F32 or BF16 tiles. 4- and 8-bit codes, the common ones, are
 * unpacked 16 at a time with vector shuffles and variable shifts; 2, 3, 5
 * and 6 bits read each code through a 16-bit window of the bit stream.
 * Compiled twice in the portable build (kernels/isa.h): the AVX-512 compile
 * unpacks 16 codes with one zero-extending load and variable shifts
 * (affine_codes.h); both give the same bits. */
#include "kernels/dequant.h"
#include "kernels/affine_codes.h"
#include "kernels/isa.h"

#ifndef LT_ISA_AVX512 /* once, in the baseline object */
float affine_value(float s, float b, unsigned q, DType t) {
    if (t == DTYPE_F32) return mul_add_f32(s, (float)q, b);
    float v = s * (float)q + b;  /* s * q is exact for a 16-bit s: one rounding */
    if (t == DTYPE_BF16) return bf16_to_f32(f32_to_bf16(v));
    return f16_to_f32(f32_to_f16(v));
}
#endif

/* One group of `group` codes of a row into dst (type out), vectorised:
 * 4/8 bits, T = BF16 or F32 with an F32 destination or BF16 (T = BF16). */
static void group_vec(const uint8_t *row, int bits, size_t c, int group, float s, float b, DType t,
                      DType out, void *dst) {
    v16 sv = splat16(s), bv = splat16(b);
    for (int j = 0; j < group; j += 16) {
        v16 q = __builtin_convertvector(codes16(row, bits, c + (size_t)j), v16);
        v16 v;
        if (t == DTYPE_F32) {
            v16 p = q * sv;
            __asm__("" : "+m"(p));   /* two roundings, as affine_value */
            v = p + bv;
        } else {
            v = round16_bf16(q * sv + bv);
        }
        if (out == DTYPE_F32) store16((float *)dst + j, v);
#ifdef __AVX512F__
        else if (t == DTYPE_BF16) {   /* v is a bf16 number already: its high halves */
            __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32((__m512i)v, 16));
            _mm256_storeu_si256((__m256i *)((uint16_t *)dst + j), h);
        }
#endif
        else store16_bf16((uint16_t *)dst + j, v);
    }
}

void ISA_FN(affine_expand)(const uint8_t *packed, size_t row_bytes, const void *scales, const void *biases, DType t,
                   int bits, int group, int cols, int r0, int nr, int c0, int nc, DType out, void *dst, size_t ld) {
    size_t groups_per_row = (size_t)cols / (size_t)group;
    size_t esize = out == DTYPE_F32 ? 4 : 2;
    bool vec = (bits == 4 || bits == 8) && t != DTYPE_F16;
    for (int r = 0; r < nr; r++) {
        size_t row_i = (size_t)r0 + (size_t)r;
        const uint8_t *row = packed + row_i * row_bytes;
        char *drow = (char *)dst + (size_t)r * ld * esize;
        for (int c = c0; c < c0 + nc; c += group) {
            size_t g = row_i * groups_per_row + (size_t)c / (size_t)group;
            float s = scalar_of(scales, g, t), b = scalar_of(biases, g, t);
            void *gdst = drow + (size_t)(c - c0) * esize;
            if (vec) {
                group_vec(row, bits, (size_t)c, group, s, b, t, out, gdst);
                continue;
            }
            for (int j = 0; j < group; j++) {
                float v = affine_value(s, b, code_at(row, row_bytes, bits, (size_t)c + (size_t)j), t);
                if (out == DTYPE_F32) ((float *)gdst)[j] = v;
                else ((uint16_t *)gdst)[j] = f32_to_bf16(v);
            }
        }
    }
}

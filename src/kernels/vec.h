/* vec.h: 16-float vectors (GCC vector extensions; one AVX-512 register, two
 * AVX2 ones) and a vectorised exp, shared by the kernels that need
 * register blocking or many exponentials (attention, LM head). Internal to
 * src/kernels. */
#ifndef LT_KERNELS_VEC_H
#define LT_KERNELS_VEC_H
#include "base/dtype.h"

/* Without AVX-512 (the portable baseline) a 64-byte vector is two AVX2
 * registers, and GCC notes that passing one to a function has another ABI
 * there (-Wpsabi, off in the Makefile). These are always inlined, so no
 * such call exists, also at -O1 (the sanitizer builds). */
#define VEC_INLINE static inline __attribute__((always_inline))

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4))); /* unaligned access */
typedef int v16i __attribute__((vector_size(64)));
typedef unsigned v16w __attribute__((vector_size(64)));
typedef unsigned short v16h __attribute__((vector_size(32)));
typedef unsigned short v16hu __attribute__((vector_size(32), aligned(2)));

VEC_INLINE v16 load16(const float *p) { return *(const v16u *)p; }
VEC_INLINE void store16(float *p, v16 v) { *(v16u *)p = v; }
VEC_INLINE v16 splat16(float x) { return (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

/* e^x for 16 lanes: Cody-Waite reduction x = n ln2 + r, Cephes polynomial
 * for e^r, 2^n through the exponent bits; relative error ~2e-7. Inputs are
 * clamped to [-87.3, 88] (so -inf gives ~1e-38, not 0: callers zero masked
 * entries themselves, and +inf gives 1.65e38); NaN stays NaN. */
VEC_INLINE v16 exp16(v16 x) {
    const v16 hi = splat16(88.0f), lo = splat16(-87.3365447504f); /* 2^n stays finite */
    v16i too_hi = x > hi, too_lo = x < lo;
    x = (v16)(((v16i)x & ~too_hi) | ((v16i)hi & too_hi));
    x = (v16)(((v16i)x & ~too_lo) | ((v16i)lo & too_lo));
    v16 t = x * splat16(1.44269504088896341f) + splat16(12582912.0f); /* round to nearest via 1.5*2^23 */
    v16 n = t - splat16(12582912.0f);
    v16 r = x - n * splat16(0.693359375f) + n * splat16(2.12194440e-4f);
    v16 p = splat16(1.9875691500e-4f);
    p = p * r + splat16(1.3981999507e-3f);
    p = p * r + splat16(8.3334519073e-3f);
    p = p * r + splat16(4.1665795894e-2f);
    p = p * r + splat16(1.6666665459e-1f);
    p = p * r + splat16(5.0000001201e-1f);
    p = p * r * r + r + splat16(1.0f);
    v16i e = (__builtin_convertvector(n, v16i) + 127) << 23;
    return p * (v16)e;
}

/* Horizontal sum and maximum of 16 lanes as a tree (8 + 8, 4 + 4, 2 + 2,
 * 1 + 1): the same order in the AVX-512 and the AVX2 compile, hence the same
 * bits, and 4 dependent steps instead of a 16-step scalar chain. */
VEC_INLINE float reduce_add16(v16 v) {
    v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    return v[0];
}
VEC_INLINE v16 max16(v16 a, v16 b) {
    v16i gt = a > b;
    return (v16)(((v16i)a & gt) | ((v16i)b & ~gt));
}
VEC_INLINE float reduce_max16(v16 v) {
    v = max16(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    v = max16(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    v = max16(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    v = max16(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
    return v[0];
}

/* tanh for 16 lanes: 1 - 2 / (e^2y + 1), exact at the saturated ends
 * (soft-capping of attention scores and of the final logits). */
VEC_INLINE v16 tanh16(v16 y) {
    return splat16(1.0f) - splat16(2.0f) / (exp16(y + y) + splat16(1.0f));
}

/* 16 floats rounded to bf16 by the rule of f32_to_bf16 (base/dtype.h,
 * LT_BF16_ROUND): the same expression, lane by lane. */
VEC_INLINE void store16_bf16(unsigned short *dst, v16 x) {
    v16w u = (v16w)x;
    v16w nan = (v16w)((u & 0x7fffffffu) > 0x7f800000u);
    *(v16hu *)dst = __builtin_convertvector(LT_BF16_ROUND(u, nan), v16h);
}

#endif

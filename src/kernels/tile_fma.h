/* tile_fma.h: the register-blocked FMA micro-kernel shared by the tile
 * products of attention.c (flash attention) and gated_delta.c (the chunked
 * gated delta rule): 4 rows of C times 64 columns (AVX-512: 16 zmm
 * accumulators plus a row of B in 4) or times 16 columns (any ISA), summed
 * over k in order, one fused multiply-add per term. Both callers keep their
 * own loads, stores and triangle bounds around it; the sums, and so the
 * bits, are the same in every variant (tests/kernels/test_isa).
 *
 * Include after `#pragma GCC optimize("fp-contract=fast")`: under -std=c11
 * the a * b + c below is only fused into an FMA with contraction on.
 * Internal to src/kernels. */
#ifndef LT_KERNELS_TILE_FMA_H
#define LT_KERNELS_TILE_FMA_H
#include <stddef.h>

#include "kernels/vec.h"

#ifdef __AVX512F__
/* r[x][y] += sum over k in [k0, k1) of a_x[k * ak] * B[k * ldb + 16 y .. 16 y + 15],
 * x, y in 0..3. */
VEC_INLINE void tile_fma_4x64(v16 r[4][4], const float *a0, const float *a1, const float *a2, const float *a3,
                              size_t ak, const float *B, size_t ldb, int k0, int k1) {
    v16 r00 = r[0][0], r01 = r[0][1], r02 = r[0][2], r03 = r[0][3];
    v16 r10 = r[1][0], r11 = r[1][1], r12 = r[1][2], r13 = r[1][3];
    v16 r20 = r[2][0], r21 = r[2][1], r22 = r[2][2], r23 = r[2][3];
    v16 r30 = r[3][0], r31 = r[3][1], r32 = r[3][2], r33 = r[3][3];
    for (int k = k0; k < k1; k++) {
        const float *b = B + (size_t)k * ldb;
        size_t ka = (size_t)k * ak;
        v16 b0 = load16(b), b1 = load16(b + 16), b2 = load16(b + 32), b3 = load16(b + 48);
        /* keep the B row in registers: without this GCC folds the loads
         * into every FMA, 16 loads instead of 4 per k */
        __asm__("" : "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3));
        v16 x = splat16(a0[ka]);
        r00 += x * b0;
        r01 += x * b1;
        r02 += x * b2;
        r03 += x * b3;
        x = splat16(a1[ka]);
        r10 += x * b0;
        r11 += x * b1;
        r12 += x * b2;
        r13 += x * b3;
        x = splat16(a2[ka]);
        r20 += x * b0;
        r21 += x * b1;
        r22 += x * b2;
        r23 += x * b3;
        x = splat16(a3[ka]);
        r30 += x * b0;
        r31 += x * b1;
        r32 += x * b2;
        r33 += x * b3;
    }
    r[0][0] = r00, r[0][1] = r01, r[0][2] = r02, r[0][3] = r03;
    r[1][0] = r10, r[1][1] = r11, r[1][2] = r12, r[1][3] = r13;
    r[2][0] = r20, r[2][1] = r21, r[2][2] = r22, r[2][3] = r23;
    r[3][0] = r30, r[3][1] = r31, r[3][2] = r32, r[3][3] = r33;
}

/* r[x][y] += sum over k in [k0, k1) of a[x][k * ak] * B[k * ldb + 16 y .. 16 y + 15],
 * x in 0..7, y in 0..1: the same sums as tile_fma_4x64 on the same elements,
 * with 8 rows sharing each row of B (2 loads of B per 16 FMAs instead of 4).
 * Where B streams from L2 (attention's backward keeps ~160 KB of tiles live)
 * that is what the 4 x 64 tile loses: 137 against 152 GFLOP/s per core in
 * situ (Intel Xeon, family 6 model 207). */
VEC_INLINE void tile_fma_8x32(v16 r[8][2], const float *const a[8], size_t ak, const float *B, size_t ldb, int k0,
                              int k1) {
    v16 acc[8][2]; /* kept in registers: the loops below are unrolled whole */
    #pragma GCC unroll 8
    for (int x = 0; x < 8; x++) acc[x][0] = r[x][0], acc[x][1] = r[x][1];
    for (int k = k0; k < k1; k++) {
        const float *b = B + (size_t)k * ldb;
        size_t ka = (size_t)k * ak;
        v16 b0 = load16(b), b1 = load16(b + 16);
        __asm__("" : "+v"(b0), "+v"(b1)); /* as in tile_fma_4x64 */
        #pragma GCC unroll 8
        for (int x = 0; x < 8; x++) {
            v16 s = splat16(a[x][ka]);
            acc[x][0] += s * b0;
            acc[x][1] += s * b1;
        }
    }
    #pragma GCC unroll 8
    for (int x = 0; x < 8; x++) r[x][0] = acc[x][0], r[x][1] = acc[x][1];
}
#endif

/* r[x] += sum over k in [k0, k1) of a_x[k * ak] * B[k * ldb .. k * ldb + 15], x in 0..3. */
VEC_INLINE void tile_fma_4x16(v16 r[4], const float *a0, const float *a1, const float *a2, const float *a3,
                              size_t ak, const float *B, size_t ldb, int k0, int k1) {
    v16 r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
    for (int k = k0; k < k1; k++) {
        v16 b = load16(B + (size_t)k * ldb);
        size_t ka = (size_t)k * ak;
        r0 += splat16(a0[ka]) * b;
        r1 += splat16(a1[ka]) * b;
        r2 += splat16(a2[ka]) * b;
        r3 += splat16(a3[ka]) * b;
    }
    r[0] = r0, r[1] = r1, r[2] = r2, r[3] = r3;
}
#endif

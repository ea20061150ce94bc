/* attention_tiles.h: the tile products of attention.c (flash attention),
 * included by it alone: tile_gemm, C (+)= A B on 64 x 64 tiles through the
 * register-blocked FMA micro-kernels of kernels/tile_fma.h, with the
 * triangle modes that skip a diagonal tile's known-zero half; and the bf16
 * tile products (vdpbf16ps, AVX512_BF16) with the packings of their
 * operands. attention.c keeps the softmax, the tiling of the sequence and
 * the tasks. Static functions: each ISA variant of attention.c compiles its
 * own (kernels/isa.h). Include after `#pragma GCC optimize("fp-contract=fast")`
 * (see tile_fma.h). Internal to src/kernels. */
#ifndef LT_KERNELS_ATTENTION_TILES_H
#define LT_KERNELS_ATTENTION_TILES_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/tile_fma.h"
#include "kernels/vec.h"

/* On a diagonal tile (query block == key block) half of each product is
 * known zero or unneeded; tri says which half to skip, per group of 4 rows
 * starting at row i:
 *   TRI_C_LOWER  only columns n < i + 4 of C are needed (scores, j <= i)
 *   TRI_A_LOWER  A(i, k) = 0 for k > i (probabilities times values)
 *   TRI_A_UPPER  A(i, k) = 0 for k < i (transposed probabilities) */
enum { TRI_NONE = 0, TRI_C_LOWER, TRI_A_LOWER, TRI_A_UPPER };

/* C (M, N) += A (M, K) B (K, N), or C = A B when set (C is not read: no
 * clearing beforehand; with TRI_C_LOWER the skipped columns are written as
 * zeros); element (i, k) of A at A[i*ai + k*ak] (so A may be a transposed
 * view), B and C row-major with leading dims; M a multiple of 4, N a
 * multiple of 16. 4 rows x 64 columns of C (untriangled tiles with AVX-512:
 * 8 x 32) live in registers while k runs. */
static void tile_gemm(float *C, int ldc, const float *A, int ai, int ak, const float *Bm, int ldb,
                      int M, int K, int N, int tri, int set) {
    int i0 = 0;
#ifdef __AVX512F__
    /* Untriangled tiles with whole 8 x 32 blocks: 8 rows share each row of B
     * (tile_fma_8x32). Every element's sum runs over the same k in the same
     * order as in the 4-row loop below, so the bits do not change. */
    if (tri == TRI_NONE && M % 8 == 0 && N % 32 == 0) {
        for (int i = 0; i < M; i += 8) {
            const float *a[8];
            float *c[8];
            for (int x = 0; x < 8; x++) a[x] = A + (size_t)(i + x) * ai, c[x] = C + (size_t)(i + x) * ldc;
            for (int n = 0; n < N; n += 32) {
                v16 r[8][2];
                for (int x = 0; x < 8; x++)
                    for (int y = 0; y < 2; y++) r[x][y] = set ? splat16(0.0f) : load16(c[x] + n + 16 * y);
                tile_fma_8x32(r, a, (size_t)ak, Bm + n, (size_t)ldb, 0, K);
                for (int x = 0; x < 8; x++)
                    for (int y = 0; y < 2; y++) store16(c[x] + n + 16 * y, r[x][y]);
            }
        }
        i0 = M;
    }
#endif
    for (int i = i0; i < M; i += 4) {
        const float *a0 = A + (size_t)i * ai, *a1 = a0 + ai, *a2 = a1 + ai, *a3 = a2 + ai;
        float *c0 = C + (size_t)i * ldc, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
        int n_end = N, k_begin = 0, k_end = K;
        if (tri == TRI_C_LOWER && ((i + 4 + 15) & ~15) < N) n_end = (i + 4 + 15) & ~15;
        if (tri == TRI_A_LOWER && i + 4 < K) k_end = i + 4;
        if (tri == TRI_A_UPPER) k_begin = i < K ? i : K;
        int n = 0;
        const v16 zero = splat16(0.0f);
        #define LOAD_C(p) (set ? zero : load16(p))
#ifdef __AVX512F__
        /* 4 x 64 of C and a row of B: 20 of the 32 zmm registers. Without
         * AVX-512 (16 ymm registers) only the 4 x 16 loop below is used: the
         * same sums in the same order, so the same bits. */
        for (; n + 64 <= n_end; n += 64) {
            float *c[4] = {c0 + n, c1 + n, c2 + n, c3 + n};
            v16 r[4][4];
            for (int x = 0; x < 4; x++)
                for (int y = 0; y < 4; y++) r[x][y] = LOAD_C(c[x] + 16 * y);
            tile_fma_4x64(r, a0, a1, a2, a3, (size_t)ak, Bm + n, (size_t)ldb, k_begin, k_end);
            for (int x = 0; x < 4; x++)
                for (int y = 0; y < 4; y++) store16(c[x] + 16 * y, r[x][y]);
        }
#endif
        for (; n < n_end; n += 16) {
            v16 r[4] = {LOAD_C(c0 + n), LOAD_C(c1 + n), LOAD_C(c2 + n), LOAD_C(c3 + n)};
            tile_fma_4x16(r, a0, a1, a2, a3, (size_t)ak, Bm + n, (size_t)ldb, k_begin, k_end);
            store16(c0 + n, r[0]);
            store16(c1 + n, r[1]);
            store16(c2 + n, r[2]);
            store16(c3 + n, r[3]);
        }
        #undef LOAD_C
        if (set)
            for (; n < N; n += 16) {
                store16(c0 + n, zero);
                store16(c1 + n, zero);
                store16(c2 + n, zero);
                store16(c3 + n, zero);
            }
    }
}
static void tile_gemm_acc(float *C, int ldc, const float *A, int ai, int ak, const float *Bm, int ldb,
                          int M, int K, int N, int tri) {
    tile_gemm(C, ldc, A, ai, ak, Bm, ldb, M, K, N, tri, 0);
}

/* ------------------------------------------------ bf16 tile products
 * With AVX512_BF16 and AttnParams.bf16 (the run's frozen products are bf16)
 * every product runs as vdpbf16ps: operands rounded to bf16 (to nearest
 * even), pairs of terms multiplied and summed in fp32, twice the FMA's
 * throughput. Scores, softmax, log-sum-exp and every accumulator stay fp32.
 * Operands are 32-bit words holding two bf16 of consecutive k (low half the
 * even k). Two packings serve every product:
 *   bf16_rows:  a row-major fp32 matrix, pairs along its rows (an A operand
 *               with k along the row: word (i, kp) at i * (K / 2) + kp);
 *   bf16_pairs: rows 2 kp and 2 kp + 1 interleaved column by column (a B
 *               operand, word (kp, n) at kp * N + n, and also a transposed
 *               A operand: element (i, kp) at kp * N + i, ai = 1).
 * Compiled in the AVX-512 variant only, with the avx512bf16 target on these
 * functions alone; attention_bf16_supported() is the CPUID check. Head dims
 * that are not a multiple of 32 keep fp32 products. */
#if defined(__AVX512F__) && defined(__x86_64__)
#include <immintrin.h>
#define LT_ATTN_BF16 1
#define BF16_FN static __attribute__((target("avx512bf16")))

/* dst (rows, cols / 2 words, row stride ldd words) = src rounded to bf16;
 * cols a multiple of 32 */
BF16_FN void bf16_rows(uint32_t *dst, int ldd, const float *src, size_t lds, int rows, int cols) {
    for (int i = 0; i < rows; i++) {
        const float *sr = src + (size_t)i * lds;
        uint32_t *d = dst + (size_t)i * ldd;
        for (int j = 0; j < cols; j += 32) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(sr + j + 16), _mm512_loadu_ps(sr + j));
            _mm512_storeu_si512(d + j / 2, (__m512i)v);
        }
    }
}

/* dst (K / 2, n words, row stride ldd) = rows 2 kp, 2 kp + 1 of src (K rows,
 * stride lds) rounded to bf16 and interleaved; K even, n a multiple of 16 */
BF16_FN void bf16_pairs(uint32_t *dst, int ldd, const float *src, size_t lds, int K, int n) {
    const __m512i mix = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int kp = 0; kp < K / 2; kp++) {
        const float *r0 = src + (size_t)(2 * kp) * lds, *r1 = r0 + lds;
        uint32_t *d = dst + (size_t)kp * ldd;
        for (int j = 0; j < n; j += 16) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(r1 + j), _mm512_loadu_ps(r0 + j));
            _mm512_storeu_si512(d + j, _mm512_permutexvar_epi16(mix, (__m512i)v));
        }
    }
}

/* sum_d round_bf16(g[d]) o[d] over a row of D floats (D a multiple of 16),
 * g rounded as bf16_rows rounds the backward's dO operand (see
 * attention_backward's D_i) */
BF16_FN float rowdot_bf16(const float *g, const float *o, int D) {
    __m512 s = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 16) {
        __m256i gb = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(g + d));
        __m512 gr = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(gb), 16));
        s = _mm512_fmadd_ps(gr, _mm512_loadu_ps(o + d), s);
    }
    return _mm512_reduce_add_ps(s);
}

/* tile_gemm in bf16: C (M, N) (+)= A (M, K) B (K, N), K = 2 K2; word (i, kp)
 * of A at A[i*ai + kp*ak], word (kp, n) of B at Bp[kp*ldb + n]; tri and set
 * as tile_gemm's (the triangle bounds fall on even k: rows come in fours). */
static __attribute__((target("avx512bf16"))) void tile_gemm_bf16(float *C, int ldc, const uint32_t *A, int ai,
                                                                   int ak, const uint32_t *Bp, int ldb, int M,
                                                                   int K2, int N, int tri, int set) {
    for (int i = 0; i < M; i += 4) {
        const uint32_t *a0 = A + (size_t)i * ai, *a1 = a0 + ai, *a2 = a1 + ai, *a3 = a2 + ai;
        float *c0 = C + (size_t)i * ldc;
        int n_end = N, k_begin = 0, k_end = K2;
        if (tri == TRI_C_LOWER && ((i + 4 + 15) & ~15) < N) n_end = (i + 4 + 15) & ~15;
        if (tri == TRI_A_LOWER && (i + 4) / 2 < K2) k_end = (i + 4) / 2;
        if (tri == TRI_A_UPPER) k_begin = i / 2 < K2 ? i / 2 : K2;
        int n = 0;
        for (; n + 64 <= n_end; n += 64) {
            __m512 r[4][4];
            for (int x = 0; x < 4; x++)
                for (int y = 0; y < 4; y++)
                    r[x][y] = set ? _mm512_setzero_ps() : _mm512_loadu_ps(c0 + (size_t)x * ldc + n + 16 * y);
            __m512 r00 = r[0][0], r01 = r[0][1], r02 = r[0][2], r03 = r[0][3];
            __m512 r10 = r[1][0], r11 = r[1][1], r12 = r[1][2], r13 = r[1][3];
            __m512 r20 = r[2][0], r21 = r[2][1], r22 = r[2][2], r23 = r[2][3];
            __m512 r30 = r[3][0], r31 = r[3][1], r32 = r[3][2], r33 = r[3][3];
            for (int kp = k_begin; kp < k_end; kp++) {
                const uint32_t *b = Bp + (size_t)kp * ldb + n;
                size_t ka = (size_t)kp * ak;
                __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 16);
                __m512i b2 = _mm512_loadu_si512(b + 32), b3 = _mm512_loadu_si512(b + 48);
                __asm__("" : "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3)); /* as in tile_fma_4x64 */
                __m512bh x = (__m512bh)_mm512_set1_epi32((int)a0[ka]);
                r00 = _mm512_dpbf16_ps(r00, x, (__m512bh)b0);
                r01 = _mm512_dpbf16_ps(r01, x, (__m512bh)b1);
                r02 = _mm512_dpbf16_ps(r02, x, (__m512bh)b2);
                r03 = _mm512_dpbf16_ps(r03, x, (__m512bh)b3);
                x = (__m512bh)_mm512_set1_epi32((int)a1[ka]);
                r10 = _mm512_dpbf16_ps(r10, x, (__m512bh)b0);
                r11 = _mm512_dpbf16_ps(r11, x, (__m512bh)b1);
                r12 = _mm512_dpbf16_ps(r12, x, (__m512bh)b2);
                r13 = _mm512_dpbf16_ps(r13, x, (__m512bh)b3);
                x = (__m512bh)_mm512_set1_epi32((int)a2[ka]);
                r20 = _mm512_dpbf16_ps(r20, x, (__m512bh)b0);
                r21 = _mm512_dpbf16_ps(r21, x, (__m512bh)b1);
                r22 = _mm512_dpbf16_ps(r22, x, (__m512bh)b2);
                r23 = _mm512_dpbf16_ps(r23, x, (__m512bh)b3);
                x = (__m512bh)_mm512_set1_epi32((int)a3[ka]);
                r30 = _mm512_dpbf16_ps(r30, x, (__m512bh)b0);
                r31 = _mm512_dpbf16_ps(r31, x, (__m512bh)b1);
                r32 = _mm512_dpbf16_ps(r32, x, (__m512bh)b2);
                r33 = _mm512_dpbf16_ps(r33, x, (__m512bh)b3);
            }
            __m512 o[4][4] = {{r00, r01, r02, r03}, {r10, r11, r12, r13}, {r20, r21, r22, r23},
                              {r30, r31, r32, r33}};
            for (int x = 0; x < 4; x++)
                for (int y = 0; y < 4; y++) _mm512_storeu_ps(c0 + (size_t)x * ldc + n + 16 * y, o[x][y]);
        }
        for (; n < n_end; n += 16) {
            __m512 r0 = set ? _mm512_setzero_ps() : _mm512_loadu_ps(c0 + n);
            __m512 r1 = set ? _mm512_setzero_ps() : _mm512_loadu_ps(c0 + ldc + n);
            __m512 r2 = set ? _mm512_setzero_ps() : _mm512_loadu_ps(c0 + 2 * (size_t)ldc + n);
            __m512 r3 = set ? _mm512_setzero_ps() : _mm512_loadu_ps(c0 + 3 * (size_t)ldc + n);
            for (int kp = k_begin; kp < k_end; kp++) {
                __m512bh b = (__m512bh)_mm512_loadu_si512(Bp + (size_t)kp * ldb + n);
                size_t ka = (size_t)kp * ak;
                r0 = _mm512_dpbf16_ps(r0, (__m512bh)_mm512_set1_epi32((int)a0[ka]), b);
                r1 = _mm512_dpbf16_ps(r1, (__m512bh)_mm512_set1_epi32((int)a1[ka]), b);
                r2 = _mm512_dpbf16_ps(r2, (__m512bh)_mm512_set1_epi32((int)a2[ka]), b);
                r3 = _mm512_dpbf16_ps(r3, (__m512bh)_mm512_set1_epi32((int)a3[ka]), b);
            }
            _mm512_storeu_ps(c0 + n, r0);
            _mm512_storeu_ps(c0 + ldc + n, r1);
            _mm512_storeu_ps(c0 + 2 * (size_t)ldc + n, r2);
            _mm512_storeu_ps(c0 + 3 * (size_t)ldc + n, r3);
        }
        if (set)
            for (; n < N; n += 16)
                for (int x = 0; x < 4; x++) _mm512_storeu_ps(c0 + (size_t)x * ldc + n, _mm512_setzero_ps());
    }
}
#else
#define LT_ATTN_BF16 0
/* never called: the portable variant has no bf16 products */
static void bf16_rows(uint32_t *dst, int ldd, const float *src, size_t lds, int rows, int cols) {
    (void)dst, (void)ldd, (void)src, (void)lds, (void)rows, (void)cols;
}
static void bf16_pairs(uint32_t *dst, int ldd, const float *src, size_t lds, int K, int n) {
    (void)dst, (void)ldd, (void)src, (void)lds, (void)K, (void)n;
}
static float rowdot_bf16(const float *g, const float *o, int D) {
    (void)g, (void)o, (void)D;
    return 0.0f;
}
static void tile_gemm_bf16(float *C, int ldc, const uint32_t *A, int ai, int ak, const uint32_t *Bp, int ldb, int M,
                           int K2, int N, int tri, int set) {
    (void)C, (void)ldc, (void)A, (void)ai, (void)ak, (void)Bp, (void)ldb, (void)M, (void)K2, (void)N, (void)tri,
        (void)set;
}
#endif

#endif

/* attention.c: causal grouped-query attention, flash style. No (T x T)
 * matrix exists: the forward walks key blocks with an online softmax and
 * saves each query row's log-sum-exp; the backward recomputes the
 * probabilities block by block from q, k and that lse (FlashAttention-2).
 * A sliding window (query i sees keys i-window+1..i) only changes which key
 * tiles a query tile visits (forward) and which query tiles a key tile
 * visits (backward), plus a mask on the tiles the window's edge crosses: a
 * sliding layer costs O(T x window). Soft-capped scores (Gemma 2:
 * cap * tanh(score / cap)) keep tanh per element in the backward tile to
 * form d score / d raw score = 1 - tanh^2.
 *
 * Work is cut in 64 x 64 tiles: full tiles with a head dim that is a
 * multiple of 16 are read in place, others are copied into zero-padded
 * local buffers (head dim padded to a multiple of 16, rows to 64), and keys
 * and values are transposed into local tiles where a product needs them so.
 * Every product is then one register-blocked FMA micro-kernel
 * (tile_gemm_acc) whose inner loops are 16-float vectors, whatever T and D
 * are. The exponentials go through the vectorised exp16 (vec.h).
 *
 * Parallelism: the forward over (batch, query block, kv head, up to 4 of
 * its query heads, which share each transposed key tile); the backward over
 * (batch, kv head), since a kv head's dk/dv gather all its query heads and
 * every dq row of those heads is written by that task alone: no races, no
 * atomics, and a fixed summation order (same bits for any thread count).
 * The workspace holds D_i = rowsum(dout * out) for every query row.
 *
 * Compiled twice in the portable build (kernels/isa.h): the AVX-512 compile
 * adds the 4 x 64 register tile of tile_gemm. */
/* -std=c11 turns off contraction of a*b+c into FMA; the micro-kernels
 * need it (twice the throughput), so this file opts back in. */
#pragma GCC optimize("fp-contract=fast")
#include <math.h>
#include <string.h>

#include "kernels/ops.h"
#include "base/error.h"
#include "kernels/isa.h"
#include "kernels/vec.h"

enum { TILE = 64, MAX_HEAD_DIM = 256 };

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
 * multiple of 16. 4 rows x 64 columns of C live in registers while k runs. */
static void tile_gemm(float *C, int ldc, const float *A, int ai, int ak, const float *Bm, int ldb,
                      int M, int K, int N, int tri, int set) {
    for (int i = 0; i < M; i += 4) {
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
            v16 r00 = LOAD_C(c0 + n), r01 = LOAD_C(c0 + n + 16), r02 = LOAD_C(c0 + n + 32), r03 = LOAD_C(c0 + n + 48);
            v16 r10 = LOAD_C(c1 + n), r11 = LOAD_C(c1 + n + 16), r12 = LOAD_C(c1 + n + 32), r13 = LOAD_C(c1 + n + 48);
            v16 r20 = LOAD_C(c2 + n), r21 = LOAD_C(c2 + n + 16), r22 = LOAD_C(c2 + n + 32), r23 = LOAD_C(c2 + n + 48);
            v16 r30 = LOAD_C(c3 + n), r31 = LOAD_C(c3 + n + 16), r32 = LOAD_C(c3 + n + 32), r33 = LOAD_C(c3 + n + 48);
            for (int k = k_begin; k < k_end; k++) {
                const float *b = Bm + (size_t)k * ldb + n;
                size_t ka = (size_t)k * ak;
                v16 b0 = load16(b), b1 = load16(b + 16), b2 = load16(b + 32), b3 = load16(b + 48);
                /* keep the B row in registers: without this GCC folds the
                 * loads into every FMA, 16 loads instead of 4 per k */
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
            store16(c0 + n, r00);
            store16(c0 + n + 16, r01);
            store16(c0 + n + 32, r02);
            store16(c0 + n + 48, r03);
            store16(c1 + n, r10);
            store16(c1 + n + 16, r11);
            store16(c1 + n + 32, r12);
            store16(c1 + n + 48, r13);
            store16(c2 + n, r20);
            store16(c2 + n + 16, r21);
            store16(c2 + n + 32, r22);
            store16(c2 + n + 48, r23);
            store16(c3 + n, r30);
            store16(c3 + n + 16, r31);
            store16(c3 + n + 32, r32);
            store16(c3 + n + 48, r33);
        }
#endif
        for (; n < n_end; n += 16) {
            v16 r0 = LOAD_C(c0 + n), r1 = LOAD_C(c1 + n), r2 = LOAD_C(c2 + n), r3 = LOAD_C(c3 + n);
            for (int k = k_begin; k < k_end; k++) {
                v16 b = load16(Bm + (size_t)k * ldb + n);
                size_t ka = (size_t)k * ak;
                r0 += splat16(a0[ka]) * b;
                r1 += splat16(a1[ka]) * b;
                r2 += splat16(a2[ka]) * b;
                r3 += splat16(a3[ka]) * b;
            }
            store16(c0 + n, r0);
            store16(c1 + n, r1);
            store16(c2 + n, r2);
            store16(c3 + n, r3);
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

/* Local copies of tiles: rows [r0, r0+rows) of a (T, heads, D) tensor's
 * head h, zero-padded to TILE rows and Dp columns. */
static void load_tile(float *dst, int Dp, const float *src, int b, int r0, int rows, int T, int heads, int h, int D) {
    for (int i = 0; i < TILE; i++) {
        float *d = dst + (size_t)i * Dp;
        if (i < rows) {
            memcpy(d, src + (((size_t)b * T + r0 + i) * heads + h) * D, (size_t)D * sizeof(float));
            for (int j = D; j < Dp; j++) d[j] = 0.0f;
        } else {
            memset(d, 0, (size_t)Dp * sizeof(float));
        }
    }
}

/* dst (16 rows, stride ldd) = transpose of src (16 rows, stride lds): four
 * rounds of interleaving row k with row k + 8 (a perfect shuffle) transpose
 * a 16 x 16 block. */
static void transpose16(float *dst, int ldd, const float *src, size_t lds) {
    typedef int v16idx __attribute__((vector_size(64)));
    const v16idx lo = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
    const v16idx hi = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    (void)lo;
    (void)hi;
    v16 r[16], t[16];
    #pragma GCC unroll 16
    for (int k = 0; k < 16; k++) r[k] = load16(src + (size_t)k * lds);
    #pragma GCC unroll 4
    for (int round = 0; round < 4; round++) {
        #pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
#ifdef __clang__ /* clang spells GCC's __builtin_shuffle with constant indices */
            t[2 * k] = __builtin_shufflevector(r[k], r[k + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            t[2 * k + 1] =
                __builtin_shufflevector(r[k], r[k + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
#else
            t[2 * k] = __builtin_shuffle(r[k], r[k + 8], lo);
            t[2 * k + 1] = __builtin_shuffle(r[k], r[k + 8], hi);
#endif
        }
        memcpy(r, t, sizeof r);
    }
    #pragma GCC unroll 16
    for (int k = 0; k < 16; k++) store16(dst + (size_t)k * ldd, r[k]);
}

/* Same, transposed: dst (Dp, TILE). */
static void load_tile_t(float *dst, int Dp, const float *src, int b, int r0, int rows, int T, int heads, int h, int D) {
    if (rows == TILE && D == Dp) { /* full tile: 16 x 16 blocks */
        const float *base = src + (((size_t)b * T + r0) * heads + h) * D;
        size_t ld = (size_t)heads * D;
        for (int i = 0; i < TILE; i += 16)
            for (int j = 0; j < D; j += 16)
                transpose16(dst + (size_t)j * TILE + i, TILE, base + (size_t)i * ld + j, ld);
        return;
    }
    memset(dst, 0, (size_t)Dp * TILE * sizeof(float));
    for (int i = 0; i < rows; i++) {
        const float *s = src + (((size_t)b * T + r0 + i) * heads + h) * D;
        for (int j = 0; j < D; j++) dst[(size_t)j * TILE + i] = s[j];
    }
}

/* Rows [r0, r0+TILE) of head h of a (B, T, heads, D) tensor as a (TILE, Dp)
 * operand: the tensor itself (row stride heads*D) when the tile is full and
 * D a multiple of 16, else a zero-padded copy in buf (row stride Dp). */
static const float *tile_view(float *buf, int *ld, int Dp, const float *src, int b, int r0, int rows,
                              int T, int heads, int h, int D) {
    if (rows == TILE && D == Dp) {
        *ld = heads * D;
        return src + (((size_t)b * T + r0) * heads + h) * D;
    }
    load_tile(buf, Dp, src, b, r0, rows, T, heads, h, D);
    *ld = Dp;
    return buf;
}

VEC_INLINE v16 lane_index16(void) { return (v16){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; }
/* x where lo <= lane j + t < hi, else fill */
VEC_INLINE v16 keep_range16(v16 x, int j, int lo, int hi, float fill) {
    v16 col = lane_index16() + splat16((float)j);
    v16i keep = (col < splat16((float)hi)) & (col >= splat16((float)lo));
    return (v16)(((v16i)x & keep) | ((v16i)splat16(fill) & ~keep));
}
/* Keys [lo, hi) of the tile starting at key k0 (krows keys) that query qi
 * sees: every key <= qi, and with a window only those > qi - window. */
static inline void visible_range(int qi, int k0, int krows, int window, int *lo, int *hi) {
    int h = qi - k0 + 1, l = window > 0 ? qi - window + 1 - k0 : 0;
    *hi = h < krows ? h : krows;
    *lo = l > 0 ? l : 0;
}
VEC_INLINE v16 max16(v16 a, v16 b) {
    v16i gt = a > b;
    return (v16)(((v16i)a & gt) | ((v16i)b & ~gt));
}

static int pad16(int D) { return (D + 15) & ~15; }

static void check_dims(int H, int KVH, int D, const char *who) {
    if (KVH <= 0 || H % KVH != 0) die("attention.c: %s: %d heads not a multiple of %d kv heads", who, H, KVH);
    if (D <= 0 || D > MAX_HEAD_DIM) die("attention.c: %s: head dim %d outside 1..%d", who, D, MAX_HEAD_DIM);
}

/* A task is (batch, query block, kv head, up to HEADS_PER_TASK of its query
 * heads): each transposed key tile is then shared by those heads. */
enum { HEADS_PER_TASK = 4 };

/* First key tile a query tile starting at q0 needs. */
static int first_key_block(int q0, int window) {
    int k = window > 0 ? q0 - window + 1 : 0;
    return k > 0 ? k / TILE : 0;
}

void ISA_FN(attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int H, int KVH, int D, const AttnParams *ap) {
    check_dims(H, KVH, D, "attention_forward");
    const int Dp = pad16(D), group = H / KVH, qblocks = (T + TILE - 1) / TILE;
    const int hgroups = (group + HEADS_PER_TASK - 1) / HEADS_PER_TASK;
    const float scale = ap->scale, cap = ap->softcap;
    const int window = ap->window;
    #pragma omp parallel
    {
        float Kt[Dp * TILE], Vbuf[TILE * Dp], Qbuf[HEADS_PER_TASK][TILE * Dp], O[HEADS_PER_TASK][TILE * Dp];
        float S[TILE * TILE] __attribute__((aligned(64)));
        float m[HEADS_PER_TASK][TILE], l[HEADS_PER_TASK][TILE];
        #pragma omp for collapse(3) schedule(dynamic, 1)
        for (int qbr = 0; qbr < qblocks; qbr++)
            for (int b = 0; b < B; b++)
                for (int kh = 0; kh < KVH * hgroups; kh++) {
                    int qb = qblocks - 1 - qbr; /* longest rows first, for balance */
                    int q0 = qb * TILE, qrows = T - q0 < TILE ? T - q0 : TILE;
                    int kvh = kh / hgroups, h0 = kvh * group + (kh % hgroups) * HEADS_PER_TASK;
                    int nh = kvh * group + group - h0 < HEADS_PER_TASK ? kvh * group + group - h0 : HEADS_PER_TASK;
                    const float *qv[HEADS_PER_TASK];
                    int ldq[HEADS_PER_TASK];
                    for (int x = 0; x < nh; x++) {
                        qv[x] = tile_view(Qbuf[x], &ldq[x], Dp, q, b, q0, qrows, T, H, h0 + x, D);
                        memset(O[x], 0, sizeof O[x]);
                        for (int i = 0; i < TILE; i++) {
                            m[x][i] = -INFINITY;
                            l[x][i] = 0.0f;
                        }
                    }
                    for (int kb = first_key_block(q0, window); kb <= qb; kb++) {
                        int k0 = kb * TILE, krows = T - k0 < TILE ? T - k0 : TILE, ldv, diag = kb == qb;
                        load_tile_t(Kt, Dp, k, b, k0, krows, T, KVH, kvh, D);
                        const float *vv = tile_view(Vbuf, &ldv, Dp, v, b, k0, krows, T, KVH, kvh, D);
                        for (int x = 0; x < nh; x++) {
                            tile_gemm(S, TILE, qv[x], ldq[x], 1, Kt, TILE, TILE, Dp, TILE,
                                      diag ? TRI_C_LOWER : TRI_NONE, 1);
                            for (int i = 0; i < qrows; i++) {
                                float *s = S + (size_t)i * TILE;
                                int lo, hi;
                                visible_range(q0 + i, k0, krows, window, &lo, &hi);
                                v16 mv = splat16(-INFINITY), sc = splat16(scale);
                                for (int j = 0; j < TILE; j += 16) {
                                    v16 z = load16(s + j) * sc;
                                    if (cap > 0.0f) z = splat16(cap) * tanh16(z / splat16(cap));
                                    if (j < lo || j + 16 > hi) z = keep_range16(z, j, lo, hi, -INFINITY);
                                    store16(s + j, z);
                                    mv = max16(mv, z);
                                }
                                float mx = m[x][i];
                                for (int t = 0; t < 16; t++) mx = mv[t] > mx ? mv[t] : mx;
                                if (mx == -INFINITY) {
                                    /* the window starts after this tile for this row, and no
                                     * earlier tile had a key for it: nothing to add */
                                    memset(s, 0, TILE * sizeof(float));
                                    continue;
                                }
                                float corr = expf(m[x][i] - mx); /* 0 on the row's first visible tile */
                                v16 sum = splat16(0.0f), m16 = splat16(mx);
                                for (int j = 0; j < TILE; j += 16) {
                                    v16 p = exp16(load16(s + j) - m16);
                                    if (j < lo || j + 16 > hi) p = keep_range16(p, j, lo, hi, 0.0f);
                                    store16(s + j, p);
                                    sum += p;
                                }
                                float ssum = 0.0f;
                                for (int t = 0; t < 16; t++) ssum += sum[t];
                                l[x][i] = l[x][i] * corr + ssum;
                                m[x][i] = mx;
                                float *o = O[x] + (size_t)i * Dp;
                                v16 c16 = splat16(corr);
                                for (int d = 0; d < Dp; d += 16) store16(o + d, load16(o + d) * c16);
                            }
                            for (int i = qrows; i < TILE; i++) memset(S + (size_t)i * TILE, 0, TILE * sizeof(float));
                            tile_gemm_acc(O[x], Dp, S, TILE, 1, vv, ldv, TILE, TILE, Dp, diag ? TRI_A_LOWER : TRI_NONE);
                        }
                    }
                    for (int x = 0; x < nh; x++)
                        for (int i = 0; i < qrows; i++) {
                            float inv = 1.0f / l[x][i];
                            float *dst = out + (((size_t)b * T + q0 + i) * H + h0 + x) * D;
                            for (int d = 0; d < D; d++) dst[d] = O[x][(size_t)i * Dp + d] * inv;
                            lse[((size_t)b * H + h0 + x) * T + q0 + i] = m[x][i] + logf(l[x][i]);
                        }
                }
    }
}

#ifndef LT_ISA_AVX512 /* once, in the baseline object */
size_t attention_stack_bytes(int D) {
    /* the tile arrays of attention_forward's and attention_backward's tasks */
    size_t Dp = (size_t)pad16(D);
    size_t fwd = 2 * TILE * Dp + 2 * HEADS_PER_TASK * TILE * Dp + TILE * TILE + 2 * HEADS_PER_TASK * TILE;
    size_t bwd = 8 * TILE * Dp + 2 * TILE * TILE;
    return (fwd > bwd ? fwd : bwd) * sizeof(float);
}

size_t attention_workspace_floats(int B, int T, int H, int KVH, int D) {
    (void)KVH;
    (void)D;
    return (size_t)B * H * T; /* D_i per query row */
}
#endif

void ISA_FN(attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *out, const float *lse, float *workspace,
                        int B, int T, int H, int KVH, int D, const AttnParams *ap) {
    check_dims(H, KVH, D, "attention_backward");
    const int Dp = pad16(D), group = H / KVH, blocks = (T + TILE - 1) / TILE;
    const float scale = ap->scale, cap = ap->softcap;
    const int window = ap->window;
    float *rowdot = workspace; /* (B, H, T): D_i = sum_d dout_i * out_i */
    #pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T * H * D > 32768)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const float *g = dout + (((size_t)b * T + t) * H + h) * D, *o = out + (((size_t)b * T + t) * H + h) * D;
                float s = 0.0f;
                for (int d = 0; d < D; d++) s += g[d] * o[d];
                rowdot[((size_t)b * H + h) * T + t] = s;
            }

    #pragma omp parallel
    {
        float Kbuf[TILE * Dp], Kt[Dp * TILE], Vt[Dp * TILE], Qbuf[TILE * Dp], dObuf[TILE * Dp];
        float dKs[TILE * Dp], dVs[TILE * Dp], dQs[TILE * Dp];
        float P[TILE * TILE] __attribute__((aligned(64))), dS[TILE * TILE] __attribute__((aligned(64)));
        float Th[cap > 0.0f ? TILE * TILE : 1] __attribute__((aligned(64))); /* tanh of the capped scores */
        #pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int kvh = 0; kvh < KVH; kvh++)
                for (int kb = 0; kb < blocks; kb++) {
                    int k0 = kb * TILE, krows = T - k0 < TILE ? T - k0 : TILE;
                    int ldk, ldq, ldo;
                    const float *Ks = tile_view(Kbuf, &ldk, Dp, k, b, k0, krows, T, KVH, kvh, D);
                    load_tile_t(Kt, Dp, k, b, k0, krows, T, KVH, kvh, D);
                    load_tile_t(Vt, Dp, v, b, k0, krows, T, KVH, kvh, D);
                    memset(dKs, 0, sizeof dKs);
                    memset(dVs, 0, sizeof dVs);
                    /* the last query that sees a key of this tile */
                    int q_last = window > 0 ? k0 + krows - 1 + window - 1 : T - 1;
                    int qb_end = q_last / TILE + 1 < blocks ? q_last / TILE + 1 : blocks;
                    for (int h = kvh * group; h < (kvh + 1) * group; h++)
                        for (int qb = kb; qb < qb_end; qb++) {
                            int q0 = qb * TILE, qrows = T - q0 < TILE ? T - q0 : TILE, diag = kb == qb;
                            const float *Qs = tile_view(Qbuf, &ldq, Dp, q, b, q0, qrows, T, H, h, D);
                            const float *dOs = tile_view(dObuf, &ldo, Dp, dout, b, q0, qrows, T, H, h, D);
                            const float *lse_row = lse + ((size_t)b * H + h) * T + q0;
                            const float *dot_row = rowdot + ((size_t)b * H + h) * T + q0;
                            /* P = exp(scale q k^T - lse), zero where hidden or padded */
                            tile_gemm(P, TILE, Qs, ldq, 1, Kt, TILE, TILE, Dp, TILE, diag ? TRI_C_LOWER : TRI_NONE, 1);
                            for (int i = 0; i < TILE; i++) {
                                float *p = P + (size_t)i * TILE;
                                int lo = 0, hi = 0;
                                if (i < qrows) visible_range(q0 + i, k0, krows, window, &lo, &hi);
                                v16 sv = splat16(scale), lv = splat16(i < qrows ? lse_row[i] : 0.0f);
                                for (int j = 0; j < TILE; j += 16) {
                                    v16 z = load16(p + j) * sv;
                                    if (cap > 0.0f) {
                                        v16 t = tanh16(z / splat16(cap));
                                        store16(Th + (size_t)i * TILE + j, t);
                                        z = splat16(cap) * t;
                                    }
                                    v16 e = exp16(z - lv);
                                    if (j < lo || j + 16 > hi) e = keep_range16(e, j, lo, hi, 0.0f);
                                    store16(p + j, e);
                                }
                            }
                            /* dV += P^T dO */
                            tile_gemm_acc(dVs, Dp, P, 1, TILE, dOs, ldo, TILE, TILE, Dp, diag ? TRI_A_UPPER : TRI_NONE);
                            /* dP = dO V^T; dS = P (dP - D_i) * scale */
                            tile_gemm(dS, TILE, dOs, ldo, 1, Vt, TILE, TILE, Dp, TILE,
                                      diag ? TRI_C_LOWER : TRI_NONE, 1);
                            for (int i = 0; i < TILE; i++) {
                                float *ds = dS + (size_t)i * TILE;
                                const float *p = P + (size_t)i * TILE;
                                v16 di = splat16(i < qrows ? dot_row[i] : 0.0f), sv = splat16(scale);
                                if (cap > 0.0f) {
                                    const float *th = Th + (size_t)i * TILE;
                                    for (int j = 0; j < TILE; j += 16) {
                                        v16 t = load16(th + j);
                                        v16 dcap = splat16(1.0f) - t * t;
                                        store16(ds + j, load16(p + j) * (load16(ds + j) - di) * dcap * sv);
                                    }
                                    continue;
                                }
                                for (int j = 0; j < TILE; j += 16)
                                    store16(ds + j, load16(p + j) * (load16(ds + j) - di) * sv);
                            }
                            /* dQ += dS K, added to this head's rows (only this task writes them) */
                            float *dq_tile = dq + (((size_t)b * T + q0) * H + h) * D;
                            if (qrows == TILE && D == Dp) {
                                tile_gemm_acc(dq_tile, H * D, dS, TILE, 1, Ks, ldk, TILE, TILE, Dp,
                                              diag ? TRI_A_LOWER : TRI_NONE);
                            } else {
                                memset(dQs, 0, sizeof dQs);
                                tile_gemm_acc(dQs, Dp, dS, TILE, 1, Ks, ldk, TILE, TILE, Dp,
                                              diag ? TRI_A_LOWER : TRI_NONE);
                                for (int i = 0; i < qrows; i++)
                                    for (int d = 0; d < D; d++)
                                        dq_tile[(size_t)i * H * D + d] += dQs[(size_t)i * Dp + d];
                            }
                            /* dK += dS^T Q */
                            tile_gemm_acc(dKs, Dp, dS, 1, TILE, Qs, ldq, TILE, TILE, Dp, diag ? TRI_A_UPPER : TRI_NONE);
                        }
                    for (int j = 0; j < krows; j++) {
                        float *dkr = dk + (((size_t)b * T + k0 + j) * KVH + kvh) * D;
                        float *dvr = dv + (((size_t)b * T + k0 + j) * KVH + kvh) * D;
                        for (int d = 0; d < D; d++) {
                            dkr[d] += dKs[(size_t)j * Dp + d];
                            dvr[d] += dVs[(size_t)j * Dp + d];
                        }
                    }
                }
    }
}

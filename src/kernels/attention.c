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
 * Work is cut in 64 x 64 tiles, copied into contiguous zero-padded local
 * buffers (head dim padded to a multiple of 16, rows to 64; the bf16 path
 * reads full tiles in place once, into its bf16 operands: tile_view), and
 * keys and values are transposed into local tiles where a product needs
 * them so.
 * Every product is then one register-blocked FMA micro-kernel (tile_gemm
 * in kernels/attention_tiles.h, over kernels/tile_fma.h, which
 * gated_delta.c shares) whose inner loops are 16-float vectors, whatever T
 * and D are. The exponentials go through the vectorised exp16 (vec.h).
 *
 * Parallelism: the forward over (batch, query block, kv head, up to 4 of
 * its query heads, which share each transposed key tile); the backward over
 * (key segment, batch, kv head), since a kv head's dk/dv gather all its
 * query heads: every dk/dv row is written by one task, and every dq row by
 * one task per key segment (segment 0 into dq, the others into partials
 * summed in segment order at the end): no races, no atomics, and a fixed
 * summation order (same bits for any thread count). Key segments
 * (AttnParams.key_splits, attention_key_splits) exist only where batch x kv
 * heads would leave threads idle: SmolLM2 at batch 1 has 3 kv heads.
 * The workspace holds D_i = rowsum(dout * out) for every query row (with
 * bf16 products, dout rounded to bf16 as dP = dO V^T sees it), then the
 * partials.
 *
 * Compiled twice in the portable build (kernels/isa.h): the AVX-512 compile
 * adds the 4 x 64 and 8 x 32 register tiles of tile_gemm. */
/* -std=c11 turns off contraction of a*b+c into FMA; the micro-kernels
 * need it (twice the throughput), so this file opts back in. */
#pragma GCC optimize("fp-contract=fast")
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/ops.h"
#include "base/error.h"
#include "kernels/isa.h"
#include "kernels/attention_tiles.h"
#include "kernels/vec.h"

/* MAX_KEY_SPLITS bounds the dq partials (B, T, H, D) the backward's
 * workspace holds (attention_key_splits) to 7 */
enum { TILE = 64, MAX_HEAD_DIM = 256, MAX_KEY_SPLITS = 8 };
_Static_assert(ATTN_PREFILL_ALIGN % TILE == 0, "a prefill chunk must start on a tile boundary");

/* Whether this call's products run in bf16. */
static bool use_bf16(const AttnParams *ap, int D) {
    return LT_ATTN_BF16 && ap->bf16 && D % 32 == 0 && attention_bf16_supported();
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
 * operand: with in_place, the tensor itself (row stride heads*D) when the
 * tile is full and D a multiple of 16; else a zero-padded copy in buf (row
 * stride Dp). The fp32 products take the copy: read in place, a tile's 64
 * rows lie heads*D floats apart, and where that stride is a multiple of 1 KB
 * (Llama-3.2-1B: q 8 KB, k and v 2 KB) they fall into a few sets of the L1
 * cache and evict each other while a product streams them; a contiguous
 * 16 KB copy does not (bench/attn_speed, Llama-3.2-1B heads, T 2048, 1
 * thread: backward 410 -> 377 ms). The bf16 path reads a view once, into
 * its bf16 operands, so it keeps the view. */
static const float *tile_view(float *buf, int *ld, int Dp, const float *src, int b, int r0, int rows,
                              int T, int heads, int h, int D, bool in_place) {
    if (in_place && rows == TILE && D == Dp) {
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

/* Row i of a forward score tile s as z[] (scaled, soft-capped, -inf outside
 * the keys the row sees, [lo, hi)) and the row's running maximum with m. */
VEC_INLINE float score_row(v16 z[TILE / 16], const float *s, int lo, int hi, float scale, float cap, float m) {
    v16 mv = splat16(-INFINITY), sc = splat16(scale);
    for (int j = 0; j < TILE / 16; j++) {
        v16 t = load16(s + 16 * j) * sc;
        if (cap > 0.0f) t = splat16(cap) * tanh16(t / splat16(cap));
        if (16 * j < lo || 16 * j + 16 > hi) t = keep_range16(t, 16 * j, lo, hi, -INFINITY);
        z[j] = t;
        mv = max16(mv, t);
    }
    float mx = reduce_max16(mv);
    return mx > m ? mx : m;
}

/* The online softmax's update of one row once its exponentials (relative to
 * the new maximum mx, summed to ssum) are out: l and m, and the row of O
 * rescaled when the maximum moved (a factor of exactly 1 otherwise, so
 * skipping it changes no bit). */
VEC_INLINE void online_update(float *l, float *m, float *o, int Dp, float mx, float ssum) {
    if (mx != *m) {
        float corr = expf(*m - mx); /* 0 on the row's first visible tile */
        *l = *l * corr + ssum;
        v16 c16 = splat16(corr);
        for (int d = 0; d < Dp; d += 16) store16(o + d, load16(o + d) * c16);
    } else {
        *l += ssum;
    }
    *m = mx;
}

/* The forward's online softmax of one (TILE, TILE) score tile in the fp32
 * path, in place: S becomes P = exp(scale S - m) (rows past qrows zeroed,
 * the next product's A operand), m and l updated, O's rows rescaled when
 * their maximum moved. A row's scores stay in registers between the max and
 * the exp pass; the lane reductions are trees (vec.h), not a 16-step scalar
 * chain per row, which cost as much as the tile's two products. */
static void softmax_tile_f32(float *S, float *m, float *l, float *O, int Dp, int qrows, int q0, int k0, int krows,
                             int window, float scale, float cap) {
    for (int i = 0; i < qrows; i++) {
        float *s = S + (size_t)i * TILE;
        int lo, hi;
        visible_range(q0 + i, k0, krows, window, &lo, &hi);
        v16 z[TILE / 16];
        float mx = score_row(z, s, lo, hi, scale, cap, m[i]);
        if (mx == -INFINITY) {
            /* the window starts after this tile for this row, and no
             * earlier tile had a key for it: nothing to add */
            memset(s, 0, TILE * sizeof(float));
            continue;
        }
        v16 sum = splat16(0.0f), m16 = splat16(mx);
        for (int j = 0; j < TILE / 16; j++) {
            v16 p = exp16(z[j] - m16);
            if (16 * j < lo || 16 * j + 16 > hi) p = keep_range16(p, 16 * j, lo, hi, 0.0f);
            store16(s + 16 * j, p);
            sum += p;
        }
        online_update(&l[i], &m[i], O + (size_t)i * Dp, Dp, mx, reduce_add16(sum));
    }
    for (int i = qrows; i < TILE; i++) memset(S + (size_t)i * TILE, 0, TILE * sizeof(float));
}

/* The forward's online softmax of one (TILE, TILE) score tile S in the bf16
 * path: P = exp(scale S - m) into Pb as bf16 rows (the next product's A
 * operand), m and l updated, O's rows rescaled when their maximum moved.
 * softmax_tile_f32 does the same with P kept in fp32, exp16 and its own
 * summation order. */
#if LT_ATTN_BF16
/* 2^t for 16 lanes, relative error < 3e-6 (degree-5 Taylor series of 2^f on
 * [-1/2, 1/2], f = t - round(t), and vscalefps for 2^round(t)): far inside
 * the bf16 rounding of the probabilities it feeds (2^-9), at half the
 * operations of exp16. -inf gives a subnormal, masked by the caller. */
BF16_FN __m512 exp2_bf16path(__m512 t) {
    t = _mm512_max_ps(t, _mm512_set1_ps(-127.0f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(1.3333558e-3f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

BF16_FN void softmax_tile_bf16(uint32_t *Pb, const float *S, float *m, float *l, float *O, int Dp, int qrows, int q0,
                               int k0, int krows, int window, float scale, float cap) {
    for (int i = 0; i < qrows; i++) {
        const float *s = S + (size_t)i * TILE;
        uint32_t *pb = Pb + (size_t)i * (TILE / 2);
        int lo, hi;
        visible_range(q0 + i, k0, krows, window, &lo, &hi);
        v16 z[TILE / 16];
        float mx = score_row(z, s, lo, hi, scale, cap, m[i]);
        if (mx == -INFINITY) { /* no visible key for this row yet */
            memset(pb, 0, TILE / 2 * sizeof *pb);
            continue;
        }
        const __m512 l2e = _mm512_set1_ps(1.44269504f), ml2e = _mm512_set1_ps(-mx * 1.44269504f);
        v16 sum = splat16(0.0f);
        for (int j = 0; j < TILE / 16; j += 2) { /* e^(z - mx) = 2^(z log2 e - mx log2 e) */
            v16 p0 = (v16)exp2_bf16path(_mm512_fmadd_ps((__m512)z[j], l2e, ml2e));
            v16 p1 = (v16)exp2_bf16path(_mm512_fmadd_ps((__m512)z[j + 1], l2e, ml2e));
            if (16 * j < lo || 16 * j + 16 > hi) p0 = keep_range16(p0, 16 * j, lo, hi, 0.0f);
            if (16 * j + 16 < lo || 16 * j + 32 > hi) p1 = keep_range16(p1, 16 * j + 16, lo, hi, 0.0f);
            sum += p0 + p1;
            _mm512_storeu_si512(pb + 8 * j, (__m512i)_mm512_cvtne2ps_pbh((__m512)p1, (__m512)p0));
        }
        online_update(&l[i], &m[i], O + (size_t)i * Dp, Dp, mx, _mm512_reduce_add_ps((__m512)sum));
    }
    memset(Pb + (size_t)qrows * (TILE / 2), 0, (size_t)(TILE - qrows) * (TILE / 2) * sizeof *Pb);
}

/* Kp (Dp / 2 words, TILE) = k^T as pairs along the head dim: the bf16 rows
 * of the key tile (rows, stride lds) transposed as 32-bit words; Kw is
 * (TILE, Dp / 2) words of scratch. */
static void pack_kt_bf16(uint32_t *Kp, uint32_t *Kw, const float *K, size_t lds, int Dp) {
    int Dw = Dp / 2;
    bf16_rows(Kw, Dw, K, lds, TILE, Dp);
    for (int i = 0; i < TILE; i += 16)
        for (int j = 0; j < Dw; j += 16)
            transpose16((float *)Kp + (size_t)j * TILE + i, TILE, (const float *)Kw + (size_t)i * Dw + j, (size_t)Dw);
}
#endif

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

/* The forward for T query rows per batch row at positions p0 .. p0 + T - 1
 * over keys and values at positions 0 .. p0 + T - 1 (Tk rows per batch
 * row): p0 = 0 in training; a decode chunk's queries over the KV cache
 * otherwise. p0 is a multiple of TILE, so each query tile's last key tile
 * is its diagonal one, aligned as in training. */
static void forward_tiles(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                          int p0, int H, int KVH, int D, const AttnParams *ap) {
    const int Tk = p0 + T;
    const int Dp = pad16(D), group = H / KVH, qblocks = (T + TILE - 1) / TILE;
    const int hgroups = (group + HEADS_PER_TASK - 1) / HEADS_PER_TASK;
    const float scale = ap->scale, cap = ap->softcap;
    const int window = ap->window;
    const bool bf = use_bf16(ap, D);
    const int Dw = Dp / 2; /* 32-bit words of a bf16 row of head dim */
    #pragma omp parallel
    {
        float Kt[Dp * TILE], Vbuf[TILE * Dp], Qbuf[bf ? 1 : HEADS_PER_TASK][TILE * Dp], O[HEADS_PER_TASK][TILE * Dp];
        float S[TILE * TILE] __attribute__((aligned(64)));
        float m[HEADS_PER_TASK][TILE], l[HEADS_PER_TASK][TILE];
        /* bf16 operands: q rows, k^T and v as pairs, the probabilities */
        uint32_t Qb[bf ? HEADS_PER_TASK : 1][bf ? TILE * Dw : 1], Kp[bf ? Dw * TILE : 1], Vp[bf ? TILE / 2 * Dp : 1];
        uint32_t Pb[bf ? TILE * TILE / 2 : 1], Kw[bf ? TILE * Dw : 1];
        (void)Kp, (void)Vp, (void)Pb, (void)Kw; /* unused in the portable variant */
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
                        qv[x] = tile_view(Qbuf[bf ? 0 : x], &ldq[x], Dp, q, b, q0, qrows, T, H, h0 + x, D, bf);
                        if (bf) bf16_rows(Qb[x], Dw, qv[x], (size_t)ldq[x], TILE, Dp);
                        memset(O[x], 0, sizeof O[x]);
                        for (int i = 0; i < TILE; i++) {
                            m[x][i] = -INFINITY;
                            l[x][i] = 0.0f;
                        }
                    }
                    const int qa0 = p0 + q0, kb_diag = qa0 / TILE; /* the tile's first query position */
                    for (int kb = first_key_block(qa0, window); kb <= kb_diag; kb++) {
                        int k0 = kb * TILE, krows = Tk - k0 < TILE ? Tk - k0 : TILE, ldv, diag = kb == kb_diag;
                        const float *vv = tile_view(Vbuf, &ldv, Dp, v, b, k0, krows, Tk, KVH, kvh, D, bf);
                        if (bf) {
#if LT_ATTN_BF16
                            int ldk;
                            const float *ks = tile_view(Kt, &ldk, Dp, k, b, k0, krows, Tk, KVH, kvh, D, true);
                            pack_kt_bf16(Kp, Kw, ks, (size_t)ldk, Dp);
                            bf16_pairs(Vp, Dp, vv, (size_t)ldv, TILE, Dp);
#endif
                        } else {
                            load_tile_t(Kt, Dp, k, b, k0, krows, Tk, KVH, kvh, D);
                        }
                        for (int x = 0; x < nh; x++) {
                            if (bf) {
#if LT_ATTN_BF16
                                tile_gemm_bf16(S, TILE, Qb[x], Dw, 1, Kp, TILE, TILE, Dw, TILE,
                                               diag ? TRI_C_LOWER : TRI_NONE, 1);
                                softmax_tile_bf16(Pb, S, m[x], l[x], O[x], Dp, qrows, qa0, k0, krows, window, scale,
                                                  cap);
                                tile_gemm_bf16(O[x], Dp, Pb, TILE / 2, 1, Vp, Dp, TILE, TILE / 2, Dp,
                                               diag ? TRI_A_LOWER : TRI_NONE, 0);
#endif
                                continue;
                            }
                            tile_gemm(S, TILE, qv[x], ldq[x], 1, Kt, TILE, TILE, Dp, TILE,
                                      diag ? TRI_C_LOWER : TRI_NONE, 1);
                            softmax_tile_f32(S, m[x], l[x], O[x], Dp, qrows, qa0, k0, krows, window, scale, cap);
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

void ISA_FN(attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int H, int KVH, int D, const AttnParams *ap) {
    check_dims(H, KVH, D, "attention_forward");
    forward_tiles(out, lse, q, k, v, B, T, 0, H, KVH, D, ap);
}

void ISA_FN(attention_prefill)(float *out, float *lse, const float *q, const float *kc, const float *vc, int rows,
                               int p0, int H, int KVH, int D, const AttnParams *ap) {
    check_dims(H, KVH, D, "attention_prefill");
    if (p0 < 0 || p0 % ATTN_PREFILL_ALIGN != 0)
        die("attention.c: attention_prefill: position %d is not a multiple of %d", p0, ATTN_PREFILL_ALIGN);
    forward_tiles(out, lse, q, kc, vc, 1, rows, p0, H, KVH, D, ap);
}

#ifndef LT_ISA_AVX512 /* once, in the baseline object */
size_t attention_stack_bytes(int D, bool bf16) {
    /* the tile arrays of attention_forward's and attention_backward's tasks
     * (4-byte floats and words); bf16 products (head dims a multiple of 32)
     * keep one q tile in fp32 and add their bf16 operands */
    size_t Dp = (size_t)pad16(D);
    size_t fwd = 2 * TILE * Dp + 2 * HEADS_PER_TASK * TILE * Dp + TILE * TILE + 2 * HEADS_PER_TASK * TILE;
    size_t bwd = 8 * TILE * Dp + 2 * TILE * TILE;
    if (bf16 && D % 32 == 0) {
        fwd = 3 * TILE * Dp + HEADS_PER_TASK * TILE * Dp + TILE * TILE + 2 * HEADS_PER_TASK * TILE +
              HEADS_PER_TASK * TILE * Dp / 2 + TILE * Dp + TILE * TILE / 2 + TILE * Dp / 2;
        bwd += 7 * TILE * Dp / 2 + 3 * TILE * TILE / 2;
    }
    return (fwd > bwd ? fwd : bwd) * sizeof(float);
}

size_t attention_workspace_floats(int B, int T, int H, int KVH, int D, int key_splits) {
    (void)KVH;
    /* D_i per query row, then one dq partial (B, T, H, D) per key segment
     * after the first */
    size_t parts = key_splits > 1 ? (size_t)key_splits - 1 : 0;
    return (size_t)B * H * T + parts * B * T * H * D;
}

int attention_key_splits(int B, int KVH, int threads) {
    int tasks = B * KVH;
    if (tasks <= 0 || threads <= 1 || tasks >= 2 * threads) return 1; /* tasks 0: no training batch */
    int s = (2 * threads + tasks - 1) / tasks;
    return s < MAX_KEY_SPLITS ? s : MAX_KEY_SPLITS;
}
#endif

/* One past the last query block that sees a key of block kb. */
static int query_block_end(int kb, int T, int blocks, int window) {
    int k0 = kb * TILE, krows = T - k0 < TILE ? T - k0 : TILE;
    int q_last = window > 0 ? k0 + krows - 1 + window - 1 : T - 1;
    return q_last / TILE + 1 < blocks ? q_last / TILE + 1 : blocks;
}

/* Cuts the key blocks into at most `splits` contiguous segments of about
 * equal work (a key block's work: the query blocks that see it, so a causal
 * layer's first segments are short): segment s is blocks bound[s] ..
 * bound[s + 1] - 1. Returns the number of segments. */
static int key_segments(int *bound, int splits, int T, int blocks, int window) {
    long total = 0, cum = 0;
    for (int kb = 0; kb < blocks; kb++) total += query_block_end(kb, T, blocks, window) - kb;
    int n = 0;
    bound[0] = 0;
    for (int kb = 0; kb < blocks; kb++) {
        if (n + 1 < splits && kb > bound[n] && cum * splits >= total * (n + 1)) bound[++n] = kb;
        cum += query_block_end(kb, T, blocks, window) - kb;
    }
    bound[++n] = blocks;
    return n;
}

void ISA_FN(attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *out, const float *lse, float *workspace,
                        int B, int T, int H, int KVH, int D, const AttnParams *ap) {
    check_dims(H, KVH, D, "attention_backward");
    const int Dp = pad16(D), group = H / KVH, blocks = (T + TILE - 1) / TILE;
    const float scale = ap->scale, cap = ap->softcap;
    const int window = ap->window;
    const bool bf = use_bf16(ap, D);
    const int Dw = Dp / 2, Tb = bf ? TILE * Dp / 2 : 1, Pw = bf ? TILE * TILE / 2 : 1;
    /* (B, H, T): D_i = sum_d dout_i * out_i. With bf16 products dout is
     * rounded here as dO's operand is: dP_ij = dO~_i . V~_j comes from that
     * rounded dO, and out (the forward's, from the same rounded P and V) is
     * sum_j P_ij V~_j up to the rounding of P, so sum_j P_ij dP_ij - D_i
     * cancels as in exact arithmetic (FlashAttention-2 gets the same from
     * keeping O and dO in bf16). D_i from the exact dout instead leaves
     * (dO - dO~) . out in every dP_ij - D_i of the row, amplified by the
     * cancellation. O(T D) per head, like the fp32 path's loop. */
    float *rowdot = workspace, *dq_part = workspace + (size_t)B * H * T;
    /* Tasks: (key segment, batch, kv head). A kv head's dk/dv rows belong to
     * one key block, hence one task; its query heads' dq rows gather every
     * key block, so a segment after the first adds its share to a partial of
     * its own, summed into dq at the end in segment order: no races, no
     * atomics, and the same bits for any thread count (the number of
     * segments is ap->key_splits, not the thread count). */
    int bound[MAX_KEY_SPLITS + 1];
    int splits = ap->key_splits > 1 ? ap->key_splits : 1;
    if (splits > MAX_KEY_SPLITS)
        die("attention.c: attention_backward: %d key splits (at most %d)", splits, MAX_KEY_SPLITS);
    const int segs = key_segments(bound, splits, T, blocks, window); /* fewer when T has fewer key blocks */
    #pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T * H * D > 32768)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const float *g = dout + (((size_t)b * T + t) * H + h) * D, *o = out + (((size_t)b * T + t) * H + h) * D;
                if (bf) {
                    rowdot[((size_t)b * H + h) * T + t] = rowdot_bf16(g, o, D);
                    continue;
                }
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
        /* bf16 operands (Tb, Pw words each): k^T, k, v^T as pairs; q and dO as rows and as pairs; P^T, dS and
         * dS^T */
        uint32_t Kp[Tb], Kpk[Tb], Vtp[Tb], Qb[Tb], Qp[Tb], dOb[Tb], dOp[Tb], Pp[Pw], dSb[Pw], dSp[Pw];
        #pragma omp for collapse(3) schedule(dynamic, 1)
        for (int seg = 0; seg < segs; seg++)
        for (int b = 0; b < B; b++)
            for (int kvh = 0; kvh < KVH; kvh++) {
                /* segment 0 adds to dq itself, segment s > 0 to its partial
                 * (rows from its first key on: no earlier query sees them) */
                float *dqs = seg == 0 ? dq : dq_part + (size_t)(seg - 1) * B * T * H * D;
                if (seg > 0)
                    for (int t = bound[seg] * TILE; t < T; t++)
                        memset(dqs + (((size_t)b * T + t) * H + kvh * group) * D, 0, (size_t)group * D * sizeof(float));
                for (int kb = bound[seg]; kb < bound[seg + 1]; kb++) {
                    int k0 = kb * TILE, krows = T - k0 < TILE ? T - k0 : TILE;
                    int ldk, ldq, ldo;
                    const float *Ks = tile_view(Kbuf, &ldk, Dp, k, b, k0, krows, T, KVH, kvh, D, bf);
                    load_tile_t(Kt, Dp, k, b, k0, krows, T, KVH, kvh, D);
                    load_tile_t(Vt, Dp, v, b, k0, krows, T, KVH, kvh, D);
                    if (bf) {
                        bf16_pairs(Kp, TILE, Kt, TILE, Dp, TILE);
                        bf16_pairs(Kpk, Dp, Ks, (size_t)ldk, TILE, Dp);
                        bf16_pairs(Vtp, TILE, Vt, TILE, Dp, TILE);
                    }
                    memset(dKs, 0, sizeof dKs);
                    memset(dVs, 0, sizeof dVs);
                    int qb_end = query_block_end(kb, T, blocks, window);
                    for (int h = kvh * group; h < (kvh + 1) * group; h++)
                        for (int qb = kb; qb < qb_end; qb++) {
                            int q0 = qb * TILE, qrows = T - q0 < TILE ? T - q0 : TILE, diag = kb == qb;
                            const float *Qs = tile_view(Qbuf, &ldq, Dp, q, b, q0, qrows, T, H, h, D, bf);
                            const float *dOs = tile_view(dObuf, &ldo, Dp, dout, b, q0, qrows, T, H, h, D, bf);
                            const float *lse_row = lse + ((size_t)b * H + h) * T + q0;
                            const float *dot_row = rowdot + ((size_t)b * H + h) * T + q0;
                            /* P = exp(scale q k^T - lse), zero where hidden or padded */
                            if (bf) {
                                bf16_rows(Qb, Dw, Qs, (size_t)ldq, TILE, Dp);
                                bf16_pairs(Qp, Dp, Qs, (size_t)ldq, TILE, Dp);
                                bf16_rows(dOb, Dw, dOs, (size_t)ldo, TILE, Dp);
                                bf16_pairs(dOp, Dp, dOs, (size_t)ldo, TILE, Dp);
                                tile_gemm_bf16(P, TILE, Qb, Dw, 1, Kp, TILE, TILE, Dw, TILE,
                                               diag ? TRI_C_LOWER : TRI_NONE, 1);
                            } else {
                                tile_gemm(P, TILE, Qs, ldq, 1, Kt, TILE, TILE, Dp, TILE, diag ? TRI_C_LOWER : TRI_NONE,
                                          1);
                            }
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
                            /* dV += P^T dO; dP = dO V^T */
                            if (bf) {
                                bf16_pairs(Pp, TILE, P, TILE, TILE, TILE);
                                tile_gemm_bf16(dVs, Dp, Pp, 1, TILE, dOp, Dp, TILE, TILE / 2, Dp,
                                               diag ? TRI_A_UPPER : TRI_NONE, 0);
                                tile_gemm_bf16(dS, TILE, dOb, Dw, 1, Vtp, TILE, TILE, Dw, TILE,
                                               diag ? TRI_C_LOWER : TRI_NONE, 1);
                            } else {
                                tile_gemm_acc(dVs, Dp, P, 1, TILE, dOs, ldo, TILE, TILE, Dp,
                                              diag ? TRI_A_UPPER : TRI_NONE);
                                tile_gemm(dS, TILE, dOs, ldo, 1, Vt, TILE, TILE, Dp, TILE,
                                          diag ? TRI_C_LOWER : TRI_NONE, 1);
                            }
                            /* dS = P (dP - D_i) * scale */
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
                            float *dq_tile = dqs + (((size_t)b * T + q0) * H + h) * D;
                            if (bf) {
                                bf16_rows(dSb, TILE / 2, dS, TILE, TILE, TILE);
                                bf16_pairs(dSp, TILE, dS, TILE, TILE, TILE);
                                float *dst = dq_tile;
                                int ldd = H * D;
                                if (qrows < TILE) { /* D == Dp here */
                                    memset(dQs, 0, sizeof dQs);
                                    dst = dQs, ldd = Dp;
                                }
                                tile_gemm_bf16(dst, ldd, dSb, TILE / 2, 1, Kpk, Dp, TILE, TILE / 2, Dp,
                                               diag ? TRI_A_LOWER : TRI_NONE, 0);
                                if (dst == dQs)
                                    for (int i = 0; i < qrows; i++)
                                        for (int d = 0; d < D; d++)
                                            dq_tile[(size_t)i * H * D + d] += dQs[(size_t)i * Dp + d];
                                /* dK += dS^T Q */
                                tile_gemm_bf16(dKs, Dp, dSp, 1, TILE, Qp, Dp, TILE, TILE / 2, Dp,
                                               diag ? TRI_A_UPPER : TRI_NONE, 0);
                                continue;
                            }
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
        /* the partials added to dq in segment order: a fixed sum */
        if (segs > 1) {
            #pragma omp for collapse(2) schedule(static)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    float *dst = dq + ((size_t)b * T + t) * H * D;
                    for (int seg = 1; seg < segs && bound[seg] * TILE <= t; seg++) {
                        const float *src = dq_part + (size_t)(seg - 1) * B * T * H * D + ((size_t)b * T + t) * H * D;
                        for (int x = 0; x < H * D; x++) dst[x] += src[x];
                    }
                }
        }
    }
}

/* gated_delta.c: the gated delta rule of Qwen3.5's Gated DeltaNet layers,
 * chunked, forward and backward (see gated_delta.h for the layer around it).
 *
 * Per (row, value head), with S the (Dk, Dv) state, the recurrence is
 *   S_t = e^{g_t} S_{t-1} + k_t u_t^T,  u_t = beta_t (v_t - e^{g_t} S_{t-1}^T k_t),  o_t = S_t^T q_t.
 * Within a chunk of positions 1..L starting from state S0, with
 * gam_i = g_1 + ... + g_i (the log decay so far) and D_ij = e^{gam_i - gam_j}:
 *   A   = strictly-lower((diag(beta) K K^T) * D)            (L, L)
 *   T   = (I + A)^-1                                          unit lower triangular
 *   W   = T diag(e^gam) diag(beta) K,  U0 = T diag(beta) V   (L, Dk), (L, Dv)
 *   U   = U0 - W S0                                           rows are the u_t
 *   P   = lower-with-diagonal((Q K^T) * D)                    (L, L)
 *   O   = diag(e^gam) Q S0 + P U
 *   S_L = e^{gam_L} S0 + (diag(e^{gam_L - gam}) K)^T U
 * (HF torch_chunk_gated_delta_rule computes the same: its new_values is U0,
 * k_cumdecay W, v_new U.) Every (L x L) and (L x D) step is a small matrix
 * product, done by the register-blocked micro-kernel mm() below; only the
 * state at each chunk's start is kept for the backward, which walks the
 * chunks in reverse, rebuilds a chunk's A, T, W, U0, U, P from that state and
 * applies the chain rule to the equations above (dS is carried backwards
 * across chunks: dS0 = e^{gam_L} dS_L + (diag(e^gam) Q)^T dO - W^T dU).
 *
 * The decays are always formed as e^{gam_i - gam_j} with j <= i (never as a
 * ratio of two exponentials), so strong decay underflows to 0 cleanly.
 *
 * Parallelism: forward tasks are (row, value head); backward tasks are
 * (row, key head), which owns the dq/dk rows of its key head and loops over
 * the value heads that read it (GQA) in order: no races, fixed summation
 * order, the same bits for any thread count. Each thread works in its own
 * slice of the caller's workspace (a plan entry, gdn_workspace_floats). */
#pragma GCC optimize("fp-contract=fast")
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/gated_delta.h"
#include "kernels/isa.h"
#include "kernels/tile_fma.h"
#include "kernels/vec.h"
#include "base/error.h"

/* ---------------------------------------------------------------- products */

enum { TRI_NONE = 0, TRI_A_LOWER, TRI_A_UPPER, TRI_C_LOWER };

/* C (M, N) = alpha A B, or C += alpha A B when acc. A(i, k) is at
 * A[i*ai + k*ak] (so A may be a transposed view); B (K, N) row-major, ldb;
 * C row-major, ldc. tri skips known zeros: TRI_A_LOWER A(i, k) = 0 for k > i,
 * TRI_A_UPPER A(i, k) = 0 for k < i, TRI_C_LOWER only C(i, n <= i) is needed
 * (computed up to the next multiple of 16 columns; entries above that may
 * hold anything afterwards). With AVX-512, 4 rows x 64 columns of
 * accumulators stay in registers while k runs (20 of the 32 zmm registers);
 * without (16 ymm registers) only the 4 x 16 loop runs: the same sums in the
 * same order, so the same bits (tests/kernels/test_isa). The micro-kernels
 * are attention.c's (kernels/tile_fma.h). */
static void mm(float *C, int ldc, const float *A, int ai, int ak, const float *B, int ldb,
               int M, int N, int K, float alpha, int acc, int tri) {
    const v16 va = splat16(alpha);
    for (int i = 0; i < M; i += 4) {
        int rows = M - i < 4 ? M - i : 4;
        int k0 = 0;
        int k1 = K;
        int n1 = N;
        if (tri == TRI_A_LOWER && i + rows < K) k1 = i + rows;
        if (tri == TRI_A_UPPER) k0 = i < K ? i : K;
        if (tri == TRI_C_LOWER && ((i + rows + 15) & ~15) < N) n1 = (i + rows + 15) & ~15;
        const float *a0 = A + (size_t)i * ai;
        const float *a1 = a0 + (rows > 1 ? ai : 0);
        const float *a2 = a0 + (rows > 2 ? 2 * ai : 0);
        const float *a3 = a0 + (rows > 3 ? 3 * ai : 0);
        float *c[4];
        for (int r = 0; r < 4; r++) c[r] = C + (size_t)(i + (r < rows ? r : 0)) * ldc;
        int n = 0;
#ifdef __AVX512F__
        for (; n + 64 <= n1; n += 64) {
            v16 rr[4][4];
            for (int x = 0; x < 4; x++)
                for (int y = 0; y < 4; y++) rr[x][y] = splat16(0.0f);
            tile_fma_4x64(rr, a0, a1, a2, a3, (size_t)ak, B + n, (size_t)ldb, k0, k1);
            for (int x = rows - 1; x >= 0; x--)
                for (int y = 0; y < 4; y++) {
                    float *p = c[x] + n + 16 * y;
                    store16(p, (acc ? load16(p) : splat16(0.0f)) + va * rr[x][y]);
                }
        }
#endif
        for (; n + 16 <= n1; n += 16) {
            v16 rr[4] = {splat16(0.0f), splat16(0.0f), splat16(0.0f), splat16(0.0f)};
            tile_fma_4x16(rr, a0, a1, a2, a3, (size_t)ak, B + n, (size_t)ldb, k0, k1);
            for (int x = rows - 1; x >= 0; x--) {
                float *p = c[x] + n;
                store16(p, (acc ? load16(p) : splat16(0.0f)) + va * rr[x]);
            }
        }
        for (; n < n1; n++)
            for (int x = 0; x < rows; x++) {
                const float *ax = A + (size_t)(i + x) * ai;
                float s = 0.0f;
                for (int k = k0; k < k1; k++) s += ax[(size_t)k * ak] * B[(size_t)k * ldb + n];
                float *p = C + (size_t)(i + x) * ldc + n;
                *p = (acc ? *p : 0.0f) + alpha * s;
            }
    }
}

/* dst (cols, rows) = src (rows, cols)^T, src rows lds apart. */
static void transpose(float *restrict dst, int ldd, const float *restrict src, int lds, int rows, int cols) {
    enum { BLK = 16 };
    for (int i0 = 0; i0 < rows; i0 += BLK)
        for (int j0 = 0; j0 < cols; j0 += BLK) {
            int i1 = i0 + BLK < rows ? i0 + BLK : rows;
            int j1 = j0 + BLK < cols ? j0 + BLK : cols;
            for (int j = j0; j < j1; j++)
                for (int i = i0; i < i1; i++) dst[(size_t)j * ldd + i] = src[(size_t)i * lds + j];
        }
}

/* row[j] *= e^{gi - gam[j]} for j < n (all exponents <= 0 here; below
 * float's range the factor is 0, as expf gives). The difference is taken in
 * double: gam reaches -chunk * |g|, where a float's spacing would be a
 * visible relative error of e^{gi - gam[j]} (and so of dg). */
static void scale_by_decay(float *row, const double *gam, double gi, int n) {
    int j = 0;
    const v16 lo = splat16(-87.0f);
    for (; j + 16 <= n; j += 16) {
        float xs[16];
        for (int m = 0; m < 16; m++) xs[m] = (float)(gi - gam[j + m]);
        v16 x = load16(xs);
        v16i keep = x >= lo;
        v16 e = (v16)((v16i)exp16(x) & keep);
        store16(row + j, load16(row + j) * e);
    }
    for (; j < n; j++) row[j] *= expf((float)(gi - gam[j]));
}

/* sum a[i] b[i]: 16 partial sums, then their lanes in order, then the tail.
 * Written out rather than left to `omp simd reduction`, whose partial sums
 * follow the vector width (8 lanes in the baseline, 16 with AVX-512) and so
 * would give the two variants different bits. */
static float dotf(const float *a, const float *b, int n) {
    v16 acc = splat16(0.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) acc += load16(a + i) * load16(b + i);
    float s = 0.0f;
    for (int m = 0; m < 16; m++) s += acc[m];
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* --------------------------------------------------------------- workspace */

#ifndef LT_ISA_AVX512   /* once, in the baseline object */
int gdn_num_chunks(const GdnShape *s) { return (s->T + s->chunk - 1) / s->chunk; }

size_t gdn_chunk_states_floats(const GdnShape *s) {
    return (size_t)s->B * s->Hv * gdn_num_chunks(s) * s->Dk * s->Dv;
}
#endif

/* One thread's buffers. Forward: the first group; backward adds the rest. */
typedef struct {
    double *gam;                 /* (C) log decay so far (double: see scale_by_decay) */
    float *egam;                 /* (C) its exponential */
    float *kt;                   /* (Dk, C) K^T of the chunk */
    float *kb;                   /* (C, Dk) diag(beta) K */
    float *gk;                   /* (C, Dk) diag(e^gam) Kb, then reused for diag(e^{gam_L - gam}) K */
    float *w;                    /* (C, Dk) W */
    float *u0, *u;               /* (C, Dv) U0 (first diag(beta) V), U */
    float *a, *t, *p;            /* (C, C) A, T, P */
    float *s;                    /* (Dk, Dv) state */
    /* backward */
    double *dgam;                /* (C) gradient of gam: sums of +r and -r terms, in double */
    float *ds;                   /* (Dk, Dv) gradient of the state after the chunk */
    float *dst, *s0t;            /* (Dv, Dk) dS^T, S0^T */
    float *qg;                   /* (C, Dk) diag(e^gam) Q */
    float *du, *dvb;             /* (C, Dv) */
    float *ut, *u0t;             /* (Dv, C) U^T, U0^T */
    float *wt;                   /* (Dk, C) W^T */
    float *dx;                   /* (C, Dk) scratch: dK~, dQg, dW, ... */
    float *dgk, *dkb;            /* (C, Dk) */
    float *dp, *da;              /* (C, C) */
} Ws;

/* Splits (or, with base NULL, sizes) one thread's slice. */
static size_t ws_split(Ws *w, float *base, const GdnShape *s, int backward) {
    size_t C = (size_t)s->chunk, Dk = (size_t)s->Dk, Dv = (size_t)s->Dv, off = 0;
#define TAKE(ptr, n) do {                     \
        (ptr) = base ? base + off : NULL;         \
        off += ((n) + 15) / 16 * 16;              \
    } while (0)
#define TAKE_D(ptr, n) do {                   \
        (ptr) = base ? (double *)(base + off) : NULL; \
        off += (2 * (n) + 15) / 16 * 16;          \
    } while (0)
    TAKE_D(w->gam, C);
    TAKE(w->egam, C);
    TAKE(w->kt, Dk * C);
    TAKE(w->kb, C * Dk);
    TAKE(w->gk, C * Dk);
    TAKE(w->w, C * Dk);
    TAKE(w->u0, C * Dv);
    TAKE(w->u, C * Dv);
    TAKE(w->a, C * C);
    TAKE(w->t, C * C);
    TAKE(w->p, C * C);
    TAKE(w->s, Dk * Dv);
    if (backward) {
        TAKE_D(w->dgam, C);
        TAKE(w->ds, Dk * Dv);
        TAKE(w->dst, Dv * Dk);
        TAKE(w->s0t, Dv * Dk);
        TAKE(w->qg, C * Dk);
        TAKE(w->du, C * Dv);
        TAKE(w->dvb, C * Dv);
        TAKE(w->ut, Dv * C);
        TAKE(w->u0t, Dv * C);
        TAKE(w->wt, Dk * C);
        TAKE(w->dx, C * Dk);
        TAKE(w->dgk, C * Dk);
        TAKE(w->dkb, C * Dk);
        TAKE(w->dp, C * C);
        TAKE(w->da, C * C);
    }
#undef TAKE
#undef TAKE_D
    return off;
}

#ifndef LT_ISA_AVX512
size_t gdn_workspace_floats(const GdnShape *s, int threads, int backward) {
    Ws w;
    return ws_split(&w, NULL, s, backward) * (size_t)(threads > 0 ? threads : 1);
}
#endif

static Ws thread_ws(float *workspace, int threads, const GdnShape *s, int backward) {
    Ws w;
    int id = omp_get_thread_num();
    if (id >= threads)
        die("gated_delta: OpenMP thread %d but the workspace was planned for %d threads", id, threads);
    size_t per = ws_split(&w, NULL, s, backward);
    ws_split(&w, workspace + per * (size_t)id, s, backward);
    return w;
}

/* ------------------------------------------------------------ chunk pieces */

/* Where the operands of one (row b, value head h) chunk live. */
typedef struct {
    const float *q, *k, *v;      /* first row of the chunk, head offset applied */
    int ldq, ldk, ldv;
    const float *g, *beta;       /* first position, head offset applied; stride Hv */
    int ldg;
    float *o;                    /* output rows, stride ldo */
    int ldo;
    int L;                       /* positions in this chunk */
} Chunk;

/* gam, egam, kt, kb, A, T, W (into w), U0 (into u0), P. S0 not needed. */
static void chunk_intra(Ws *w, const Chunk *c, const GdnShape *s) {
    int L = c->L, C = s->chunk, Dk = s->Dk, Dv = s->Dv;
    double acc = 0.0;
    for (int i = 0; i < L; i++) {
        acc += c->g[(size_t)i * c->ldg];
        w->gam[i] = acc;
        w->egam[i] = (float)exp(acc);
    }
    transpose(w->kt, C, c->k, c->ldk, L, Dk);
    for (int i = 0; i < L; i++) {
        float bi = c->beta[(size_t)i * c->ldg];
        const float *ki = c->k + (size_t)i * c->ldk;
        const float *vi = c->v + (size_t)i * c->ldv;
        #pragma omp simd
        for (int d = 0; d < Dk; d++) w->kb[(size_t)i * Dk + d] = bi * ki[d];
        #pragma omp simd
        for (int d = 0; d < Dk; d++) w->gk[(size_t)i * Dk + d] = w->egam[i] * w->kb[(size_t)i * Dk + d];
        #pragma omp simd
        for (int d = 0; d < Dv; d++) w->u[(size_t)i * Dv + d] = bi * vi[d];
    }
    /* A = strictly-lower(Kb K^T * D) */
    mm(w->a, C, w->kb, Dk, 1, w->kt, C, L, L, Dk, 1.0f, 0, TRI_C_LOWER);
    for (int i = 0; i < L; i++) {
        float *ai = w->a + (size_t)i * C;
        scale_by_decay(ai, w->gam, w->gam[i], i);
        for (int j = i; j < L; j++) ai[j] = 0.0f;
    }
    /* T = (I + A)^-1 by forward substitution: row i of T is e_i - sum_{j<i} A_ij T_j */
    for (int i = 0; i < L; i++) {
        float *restrict ti = w->t + (size_t)i * C;
        const float *ai = w->a + (size_t)i * C;
        #pragma omp simd
        for (int m = 0; m < L; m++) ti[m] = 0.0f;
        for (int j = 0; j < i; j++) {
            float aij = ai[j];
            const float *restrict tj = w->t + (size_t)j * C;
            #pragma omp simd
            for (int m = 0; m <= j; m++) ti[m] -= aij * tj[m];
        }
        ti[i] = 1.0f;
    }
    /* W = T Gk, U0 = T diag(beta) V */
    mm(w->w, Dk, w->t, C, 1, w->gk, Dk, L, Dk, L, 1.0f, 0, TRI_A_LOWER);
    mm(w->u0, Dv, w->t, C, 1, w->u, Dv, L, Dv, L, 1.0f, 0, TRI_A_LOWER);
    /* P = lower-with-diagonal(Q K^T * D) */
    mm(w->p, C, c->q, c->ldq, 1, w->kt, C, L, L, Dk, 1.0f, 0, TRI_C_LOWER);
    for (int i = 0; i < L; i++) {
        float *pi = w->p + (size_t)i * C;
        scale_by_decay(pi, w->gam, w->gam[i], i + 1);
        for (int j = i + 1; j < L; j++) pi[j] = 0.0f;
    }
}

/* U = U0 - W S0 (S0 in w->s; zero_state: S0 = 0). */
static void chunk_u(Ws *w, const Chunk *c, const GdnShape *s, int zero_state) {
    memcpy(w->u, w->u0, (size_t)c->L * s->Dv * sizeof(float));
    if (!zero_state) mm(w->u, s->Dv, w->w, s->Dk, 1, w->s, s->Dv, c->L, s->Dv, s->Dk, -1.0f, 1, TRI_NONE);
}

/* gk <- diag(e^{gam_L - gam}) K (the keys as they reach the chunk's end). */
static void chunk_kdecay(Ws *w, const Chunk *c, const GdnShape *s) {
    int L = c->L, Dk = s->Dk;
    for (int i = 0; i < L; i++) {
        float e = (float)exp(w->gam[L - 1] - w->gam[i]);
        const float *ki = c->k + (size_t)i * c->ldk;
        #pragma omp simd
        for (int d = 0; d < Dk; d++) w->gk[(size_t)i * Dk + d] = e * ki[d];
    }
}

/* ------------------------------------------------------------------ forward */

static void chunk_at(Chunk *c, const GdnShape *s, int b, int h, int t0,
                     const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                     const float *g, const float *beta, float *out) {
    int kh = h / (s->Hv / s->Hk);
    size_t row = (size_t)b * s->T + t0;
    c->q = q + row * ldq + (size_t)kh * s->Dk;
    c->k = k + row * ldk + (size_t)kh * s->Dk;
    c->v = v + row * ldv + (size_t)h * s->Dv;
    c->ldq = ldq;
    c->ldk = ldk;
    c->ldv = ldv;
    c->g = g + row * s->Hv + h;
    c->beta = beta + row * s->Hv + h;
    c->ldg = s->Hv;
    c->ldo = s->Hv * s->Dv;
    c->o = out ? out + row * c->ldo + (size_t)h * s->Dv : NULL;
    c->L = s->T - t0 < s->chunk ? s->T - t0 : s->chunk;
}

void ISA_FN(gated_delta_forward)(float *out, float *chunk_states, float *state,
                         const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                         const float *g, const float *beta, float *workspace, int threads, const GdnShape *s) {
    int nc = gdn_num_chunks(s);
    int tasks = s->B * s->Hv;
    size_t SS = (size_t)s->Dk * s->Dv;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < tasks; task++) {
        int b = task / s->Hv;
        int h = task % s->Hv;
        Ws w = thread_ws(workspace, threads, s, 0);
        float *st = state ? state + (size_t)task * SS : NULL;
        int zero = st == NULL;
        if (st) memcpy(w.s, st, SS * sizeof(float));
        else memset(w.s, 0, SS * sizeof(float));
        for (int ci = 0; ci < nc; ci++) {
            Chunk c;
            chunk_at(&c, s, b, h, ci * s->chunk, q, ldq, k, ldk, v, ldv, g, beta, out);
            if (chunk_states) memcpy(chunk_states + ((size_t)task * nc + ci) * SS, w.s, SS * sizeof(float));
            chunk_intra(&w, &c, s);
            chunk_u(&w, &c, s, zero);
            int L = c.L, Dk = s->Dk, Dv = s->Dv;
            /* O = diag(e^gam) Q S0 + P U */
            if (zero) {
                mm(c.o, c.ldo, w.p, s->chunk, 1, w.u, Dv, L, Dv, L, 1.0f, 0, TRI_A_LOWER);
            } else {
                mm(c.o, c.ldo, c.q, c.ldq, 1, w.s, Dv, L, Dv, Dk, 1.0f, 0, TRI_NONE);
                for (int i = 0; i < L; i++) {
                    float *oi = c.o + (size_t)i * c.ldo;
                    #pragma omp simd
                    for (int d = 0; d < Dv; d++) oi[d] *= w.egam[i];
                }
                mm(c.o, c.ldo, w.p, s->chunk, 1, w.u, Dv, L, Dv, L, 1.0f, 1, TRI_A_LOWER);
            }
            /* S <- e^{gam_L} S + (diag(e^{gam_L - gam}) K)^T U */
            float eL = w.egam[L - 1];
            for (size_t e = 0; e < SS; e++) w.s[e] *= eL;
            chunk_kdecay(&w, &c, s);
            mm(w.s, Dv, w.gk, 1, Dk, w.u, Dv, Dk, Dv, L, 1.0f, 1, TRI_NONE);
            zero = 0;
        }
        if (st) memcpy(st, w.s, SS * sizeof(float));
    }
}

/* ----------------------------------------------------------------- backward */

/* The backward of one chunk: dS (w->ds) is the gradient of the state after
 * the chunk on entry, of the state at its start on return; S0 in w->s. */
static void chunk_backward(Ws *w, const Chunk *c, const GdnShape *s, const float *dout,
                           float *dq, float *dk, float *dv, int lddq, int lddk, int lddv,
                           float *dg, float *dbeta) {
    int L = c->L, C = s->chunk, Dk = s->Dk, Dv = s->Dv;
    size_t SS = (size_t)Dk * Dv;
    int ldo = c->ldo;
    chunk_intra(w, c, s);
    chunk_u(w, c, s, 0);
    chunk_kdecay(w, c, s);                       /* gk = K~ = diag(e^{gam_L - gam}) K */
    for (int i = 0; i < L; i++) w->dgam[i] = 0.0;
    float eL = w->egam[L - 1];

    /* S_L = e^{gam_L} S0 + K~^T U */
    mm(w->du, Dv, w->gk, Dk, 1, w->ds, Dv, L, Dv, Dk, 1.0f, 0, TRI_NONE);          /* dU = K~ dS */
    transpose(w->dst, Dk, w->ds, Dv, Dk, Dv);
    mm(w->dx, Dk, w->u, Dv, 1, w->dst, Dk, L, Dk, Dv, 1.0f, 0, TRI_NONE);           /* dK~ = U dS^T */
    for (int i = 0; i < L; i++) {
        const float *dki = w->dx + (size_t)i * Dk;
        float e = (float)exp(w->gam[L - 1] - w->gam[i]);
        float *dkrow = dk + (size_t)i * lddk;
        #pragma omp simd
        for (int d = 0; d < Dk; d++) dkrow[d] += e * dki[d];
        if (i == L - 1) continue;      /* e^{gam_L - gam_L} = 1: no decay term (and no +r - r rounding) */
        float r = dotf(dki, w->gk + (size_t)i * Dk, Dk);
        w->dgam[L - 1] += r;
        w->dgam[i] -= r;
    }
    w->dgam[L - 1] += (double)eL * dotf(w->ds, w->s, (int)SS);
    /* O = diag(e^gam) Q S0 + P U */
    mm(w->du, Dv, w->p, 1, C, dout, ldo, L, Dv, L, 1.0f, 1, TRI_A_UPPER);           /* dU += P^T dO */
    transpose(w->s0t, Dk, w->s, Dv, Dk, Dv);
    mm(w->dx, Dk, dout, ldo, 1, w->s0t, Dk, L, Dk, Dv, 1.0f, 0, TRI_NONE);          /* dQg = dO S0^T */
    for (int i = 0; i < L; i++) {
        const float *dqi = w->dx + (size_t)i * Dk;
        const float *qi = c->q + (size_t)i * c->ldq;
        float e = w->egam[i];
        float *dqrow = dq + (size_t)i * lddq;
        #pragma omp simd
        for (int d = 0; d < Dk; d++) {
            dqrow[d] += e * dqi[d];
            w->qg[(size_t)i * Dk + d] = e * qi[d];
        }
        w->dgam[i] += (double)e * dotf(dqi, qi, Dk);
    }
    transpose(w->ut, C, w->u, Dv, L, Dv);
    mm(w->dp, C, dout, ldo, 1, w->ut, C, L, L, Dv, 1.0f, 0, TRI_C_LOWER);           /* dP = dO U^T */
    for (int i = 0; i < L; i++) {
        float *dpi = w->dp + (size_t)i * C;
        const float *pi = w->p + (size_t)i * C;
        for (int j = 0; j < i; j++) {  /* the diagonal's D_ii = 1 has no gradient */
            float r = dpi[j] * pi[j];
            w->dgam[i] += r;
            w->dgam[j] -= r;
            dpi[j] *= expf((float)(w->gam[i] - w->gam[j]));
        }
        for (int j = i + 1; j < L; j++) dpi[j] = 0.0f;
    }
    mm(dq, lddq, w->dp, C, 1, c->k, c->ldk, L, Dk, L, 1.0f, 1, TRI_A_LOWER);        /* dQ += dP~ K */
    mm(dk, lddk, w->dp, 1, C, c->q, c->ldq, L, Dk, L, 1.0f, 1, TRI_A_UPPER);        /* dK += dP~^T Q */

    /* the state before the chunk: dS0 = e^{gam_L} dS + Qg^T dO - W^T dU */
    for (size_t e = 0; e < SS; e++) w->ds[e] *= eL;
    mm(w->ds, Dv, w->qg, 1, Dk, dout, ldo, Dk, Dv, L, 1.0f, 1, TRI_NONE);
    mm(w->ds, Dv, w->w, 1, Dk, w->du, Dv, Dk, Dv, L, -1.0f, 1, TRI_NONE);

    /* U = U0 - W S0: dU0 = dU, dW = -dU S0^T */
    mm(w->dx, Dk, w->du, Dv, 1, w->s0t, Dk, L, Dk, Dv, -1.0f, 0, TRI_NONE);         /* dW */
    /* U0 = T Vb, W = T Gk: dVb = T^T dU0, dGk = T^T dW */
    mm(w->dvb, Dv, w->t, 1, C, w->du, Dv, L, Dv, L, 1.0f, 0, TRI_A_UPPER);
    mm(w->dgk, Dk, w->t, 1, C, w->dx, Dk, L, Dk, L, 1.0f, 0, TRI_A_UPPER);
    /* T = (I + A)^-1: dA = -T^T dT T^T = -(dVb U0^T + dGk W^T) */
    transpose(w->u0t, C, w->u0, Dv, L, Dv);
    transpose(w->wt, C, w->w, Dk, L, Dk);
    mm(w->da, C, w->dvb, Dv, 1, w->u0t, C, L, L, Dv, -1.0f, 0, TRI_C_LOWER);
    mm(w->da, C, w->dgk, Dk, 1, w->wt, C, L, L, Dk, -1.0f, 1, TRI_C_LOWER);
    /* A = strictly-lower(Kb K^T * D) */
    for (int i = 0; i < L; i++) {
        float *dai = w->da + (size_t)i * C;
        const float *ai = w->a + (size_t)i * C;
        for (int j = 0; j < i; j++) {
            float r = dai[j] * ai[j];
            w->dgam[i] += r;
            w->dgam[j] -= r;
            dai[j] *= expf((float)(w->gam[i] - w->gam[j]));
        }
        for (int j = i; j < L; j++) dai[j] = 0.0f;
    }
    mm(w->dkb, Dk, w->da, C, 1, c->k, c->ldk, L, Dk, L, 1.0f, 0, TRI_A_LOWER);      /* dKb = dA~ K */
    mm(dk, lddk, w->da, 1, C, w->kb, Dk, L, Dk, L, 1.0f, 1, TRI_A_UPPER);           /* dK += dA~^T Kb */
    /* Gk = diag(e^gam) Kb; Kb = diag(beta) K; Vb = diag(beta) V */
    for (int i = 0; i < L; i++) {
        float e = w->egam[i];
        float bi = c->beta[(size_t)i * c->ldg];
        float *dkbi = w->dkb + (size_t)i * Dk;
        const float *dgki = w->dgk + (size_t)i * Dk;
        w->dgam[i] += (double)e * dotf(dgki, w->kb + (size_t)i * Dk, Dk);
        #pragma omp simd
        for (int d = 0; d < Dk; d++) dkbi[d] += e * dgki[d];
        const float *ki = c->k + (size_t)i * c->ldk;
        const float *vi = c->v + (size_t)i * c->ldv;
        const float *dvbi = w->dvb + (size_t)i * Dv;
        float *dkrow = dk + (size_t)i * lddk;
        float *dvrow = dv + (size_t)i * lddv;
        #pragma omp simd
        for (int d = 0; d < Dk; d++) dkrow[d] += bi * dkbi[d];
        #pragma omp simd
        for (int d = 0; d < Dv; d++) dvrow[d] += bi * dvbi[d];
        dbeta[(size_t)i * c->ldg] += dotf(dkbi, ki, Dk) + dotf(dvbi, vi, Dv);
    }
    /* gam = cumsum(g): dg_i = sum_{j >= i} dgam_j */
    double acc = 0.0;
    for (int i = L - 1; i >= 0; i--) {
        acc += w->dgam[i];
        dg[(size_t)i * c->ldg] += (float)acc;
    }
}

void ISA_FN(gated_delta_backward)(float *dq, float *dk, float *dv, float *dg, float *dbeta, const float *dout,
                          const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                          const float *g, const float *beta, const float *chunk_states,
                          float *workspace, int threads, const GdnShape *s) {
    int nc = gdn_num_chunks(s);
    int group = s->Hv / s->Hk;
    int tasks = s->B * s->Hk;
    size_t SS = (size_t)s->Dk * s->Dv;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < tasks; task++) {
        int b = task / s->Hk;
        int kh = task % s->Hk;
        Ws w = thread_ws(workspace, threads, s, 1);
        for (int h = kh * group; h < (kh + 1) * group; h++) {
            memset(w.ds, 0, SS * sizeof(float));
            for (int ci = nc - 1; ci >= 0; ci--) {
                Chunk c;
                int t0 = ci * s->chunk;
                chunk_at(&c, s, b, h, t0, q, ldq, k, ldk, v, ldv, g, beta, NULL);
                size_t row = (size_t)b * s->T + t0;
                memcpy(w.s, chunk_states + (((size_t)b * s->Hv + h) * nc + ci) * SS, SS * sizeof(float));
                chunk_backward(&w, &c, s, dout + row * c.ldo + (size_t)h * s->Dv,
                               dq + row * ldq + (size_t)kh * s->Dk, dk + row * ldk + (size_t)kh * s->Dk,
                               dv + row * ldv + (size_t)h * s->Dv, ldq, ldk, ldv,
                               dg + row * s->Hv + h, dbeta + row * s->Hv + h);
            }
        }
    }
}

/* ---------------------------------------------------------------- recurrent */

#ifndef LT_ISA_AVX512

void gated_delta_recurrent_forward(float *out, float *state,
                                   const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                                   const float *g, const float *beta, const GdnShape *s) {
    int Dk = s->Dk, Dv = s->Dv, group = s->Hv / s->Hk;
    int tasks = s->B * s->Hv;
    size_t SS = (size_t)Dk * Dv;
    #pragma omp parallel for schedule(static) if (tasks > 1 && (size_t)s->T * SS > 16384)
    for (int task = 0; task < tasks; task++) {
        int b = task / s->Hv;
        int h = task % s->Hv;
        int kh = h / group;
        float *st = state + (size_t)task * SS;
        for (int t = 0; t < s->T; t++) {
            size_t row = (size_t)b * s->T + t;
            const float *qt = q + row * ldq + (size_t)kh * Dk;
            const float *kt = k + row * ldk + (size_t)kh * Dk;
            const float *vt = v + row * ldv + (size_t)h * Dv;
            float decay = expf(g[row * s->Hv + h]);
            float bt = beta[row * s->Hv + h];
            float *ot = out + row * (size_t)s->Hv * Dv + (size_t)h * Dv;
            /* S <- e^g S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q */
            for (size_t e = 0; e < SS; e++) st[e] *= decay;
            for (int j = 0; j < Dv; j++) ot[j] = 0.0f;
            for (int i = 0; i < Dk; i++) {
                const float *si = st + (size_t)i * Dv;
                for (int j = 0; j < Dv; j++) ot[j] += kt[i] * si[j];
            }
            for (int j = 0; j < Dv; j++) ot[j] = bt * (vt[j] - ot[j]);      /* ot holds u */
            for (int i = 0; i < Dk; i++) {
                float *si = st + (size_t)i * Dv;
                for (int j = 0; j < Dv; j++) si[j] += kt[i] * ot[j];
            }
            for (int j = 0; j < Dv; j++) ot[j] = 0.0f;
            for (int i = 0; i < Dk; i++) {
                const float *si = st + (size_t)i * Dv;
                for (int j = 0; j < Dv; j++) ot[j] += qt[i] * si[j];
            }
        }
    }
}
#endif

/* test_ops_fd.c: every backward of the kernels against central finite
 * differences of a scalar objective L = sum(out * probe) (forward in float,
 * L in double), and every forward against a naive reference: attention with
 * the full (T x T) softmax (with a sliding window, a score scale and tanh
 * soft-capping too), RoPE against the direct formula (llama3 scaling
 * against inv_freq values computed with HF's formula in PyTorch; partial
 * rotary and longrope tables against their definitions), RMSNorm with the
 * Gemma 1 + w weights, SwiGLU and GeGLU (tanh GELU) on strided rows, LM
 * head + cross-entropy (also soft-capped) against plain logits, bf16 paths
 * against bf16-rounded references. Prints one `worst` line per kernel. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "base/dtype.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/vec.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static int irand(int n) { rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull; return (int)((rng_state >> 33) % (uint64_t)n); }
static float *rand_vec(size_t n, float s) { float *p = malloc(n * sizeof *p); for (size_t i = 0; i < n; i++) p[i] = s * frand(); return p; }
static float *zeros(size_t n) { return calloc(n, sizeof(float)); }
static double dot(const float *a, const float *b, size_t n) { double s = 0; for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i]; return s; }
static float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

/* The objective as a closure: recomputes L from the current parameters. */
typedef double (*Objective)(void *ctx);

/* Central differences of L on `samples` entries of param (all when samples
 * >= n) against grad; returns max |fd - grad| / max |grad|. */
static double fd_check(const char *name, float *param, size_t n, const float *grad, Objective f, void *ctx,
                       double eps, size_t samples) {
    double scale = max_abs(grad, n), worst = 0;
    if (scale < 1e-12) scale = 1e-12;
    size_t count = samples >= n ? n : samples;
    for (size_t s = 0; s < count; s++) {
        size_t i = samples >= n ? s : (size_t)irand((int)n);
        float keep = param[i];
        param[i] = (float)(keep + eps); double lp = f(ctx);
        param[i] = (float)(keep - eps); double lm = f(ctx);
        double h = (double)(float)(keep + eps) - (double)(float)(keep - eps);
        param[i] = keep;
        double fd = (lp - lm) / h, e = fabs(fd - grad[i]) / scale;
        if (e > worst) worst = e;
    }
    CHECK_MSG(worst < 1e-2, "%s: finite differences disagree, worst rel err %.3g", name, worst);
    return worst;
}

static double max2(double a, double b) { return a > b ? a : b; }

/* ---------------- vectorised exp (kernels/vec.h) ---------------- */
static void test_exp16(void) {
    double worst = 0;
    for (int i = 0; i < 4000; i++) {
        v16 x;
        for (int t = 0; t < 16; t++) x[t] = -87.0f + 175.0f * (float)(i * 16 + t) / 64000.0f;
        v16 y = exp16(x);
        for (int t = 0; t < 16; t++) worst = max2(worst, fabs(y[t] - exp((double)x[t])) / exp((double)x[t]));
    }
    CHECK_MSG(worst < 1e-6, "exp16 rel err %.3g", worst);
    v16 special = splat16(0.0f);
    special[0] = NAN; special[1] = -INFINITY; special[2] = INFINITY; special[3] = -1000.0f;
    v16 y = exp16(special);
    CHECK(isnan(y[0]) && y[1] >= 0 && y[1] < 1e-37 && isfinite(y[2]) && y[2] > 1e38 && y[3] < 1e-37 && y[4] == 1.0f);
    printf("worst exp16 rel err %.3g\n", worst);
}

/* ---------------- embedding ---------------- */
typedef struct { float *out, *table, *probe; int *tokens; int N, C; } EmbCtx;
static double emb_obj(void *p) { EmbCtx *c = p; embedding_forward(c->out, c->tokens, c->table, DTYPE_F32, c->N, c->C); return dot(c->out, c->probe, (size_t)c->N * c->C); }
static void test_embedding(void) {
    EmbCtx c = {.N = 9, .C = 70};
    int V = 5, tokens[9] = {0, 3, 3, 1, 4, 3, 0, 2, 4};
    c.tokens = tokens; c.table = rand_vec((size_t)V * c.C, 1); c.out = zeros((size_t)c.N * c.C); c.probe = rand_vec((size_t)c.N * c.C, 1);
    float *dtable = zeros((size_t)V * c.C), *ref = zeros((size_t)V * c.C);
    embedding_backward(dtable, c.probe, tokens, c.N, c.C);
    for (int n = 0; n < c.N; n++) for (int j = 0; j < c.C; j++) ref[(size_t)tokens[n] * c.C + j] += c.probe[(size_t)n * c.C + j];
    double e = rel_error(dtable, ref, (size_t)V * c.C);
    CHECK(e < 1e-6);
    e = max2(e, fd_check("embedding dtable", c.table, (size_t)V * c.C, dtable, emb_obj, &c, 1e-2, 200));
    /* bf16 table */
    uint16_t *t16 = malloc((size_t)V * c.C * 2);
    for (size_t i = 0; i < (size_t)V * c.C; i++) t16[i] = f32_to_bf16(c.table[i]);
    embedding_forward(c.out, tokens, t16, DTYPE_BF16, c.N, c.C);
    double eb = 0;
    for (int n = 0; n < c.N; n++) for (int j = 0; j < c.C; j++)
        eb = max2(eb, fabs(c.out[(size_t)n * c.C + j] - bf16_to_f32(t16[(size_t)tokens[n] * c.C + j])));
    CHECK(eb == 0);
    printf("worst embedding rel err %.3g (bf16 table abs err %.3g)\n", e, eb);
    free(c.table); free(c.out); free(c.probe); free(dtable); free(ref); free(t16);
}

/* ---------------- rmsnorm ---------------- */
typedef struct { float *out, *rstd, *inp, *w, *probe; int N, C; float eps, off; } RmsCtx;
static double rms_obj(void *p) {
    RmsCtx *c = p;
    rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->off, c->eps, c->N, c->C);
    return dot(c->out, c->probe, (size_t)c->N * c->C);
}
/* w_off 0 (llama) and 1 (gemma: the weight is used as 1 + w) */
static void test_rmsnorm(float off) {
    RmsCtx c = {.N = 6, .C = 37, .eps = 1e-5f, .off = off};
    size_t n = (size_t)c.N * c.C;
    c.inp = rand_vec(n, 1); c.w = rand_vec(c.C, 1); c.probe = rand_vec(n, 1); c.out = zeros(n); c.rstd = zeros(c.N);
    rms_obj(&c);
    double ef = 0;
    for (int r = 0; r < c.N; r++) {
        double ss = 0;
        for (int j = 0; j < c.C; j++) ss += (double)c.inp[r * c.C + j] * c.inp[r * c.C + j];
        double rs = 1.0 / sqrt(ss / c.C + c.eps);
        for (int j = 0; j < c.C; j++)
            ef = max2(ef, fabs(c.out[r * c.C + j] - c.inp[r * c.C + j] * rs * ((double)c.w[j] + off)));
    }
    CHECK(ef < 1e-5);
    float *dinp = zeros(n), *dw = zeros(c.C);
    rmsnorm_backward(dinp, dw, c.probe, c.inp, c.w, c.off, c.rstd, c.N, c.C);
    double e = fd_check("rmsnorm dinp", c.inp, n, dinp, rms_obj, &c, 1e-3, n);
    e = max2(e, fd_check("rmsnorm dweight", c.w, c.C, dw, rms_obj, &c, 1e-3, c.C));
    /* dweight NULL (frozen) leaves dinp the same */
    float *dinp2 = zeros(n);
    rmsnorm_backward(dinp2, NULL, c.probe, c.inp, c.w, c.off, c.rstd, c.N, c.C);
    CHECK(max_abs_diff(dinp, dinp2, n) == 0);
    printf("worst rmsnorm (weight + %g) rel err %.3g (forward abs err %.3g)\n", off, e, ef);
    free(c.inp); free(c.w); free(c.probe); free(c.out); free(c.rstd); free(dinp); free(dw); free(dinp2);
}

/* ---------------- rope ---------------- */
typedef struct { float *x, *work, *cos_t, *sin_t, *probe; int B, T, H, D, rd; } RopeCtx;
static double rope_obj(void *p) {
    RopeCtx *c = p; size_t n = (size_t)c->B * c->T * c->H * c->D;
    memcpy(c->work, c->x, n * sizeof(float));
    rope_forward(c->work, c->cos_t, c->sin_t, c->B, c->T, c->H, c->D, c->rd);
    return dot(c->work, c->probe, n);
}
/* One RoPE case: rd rotary dims of D (partial rotary when rd < D). The
 * forward against the direct formula (rotate_half on dims [0, rd), the rest
 * unchanged), the backward by finite differences. */
static double rope_case(int D, int rd, const RopeScaling *sc, bool long_factors, double *tables_err) {
    RopeCtx c = {.B = 2, .T = 5, .H = 3, .D = D, .rd = rd};
    size_t n = (size_t)c.B * c.T * c.H * c.D;
    int half = rd / 2;
    double theta = 10000.0;
    c.cos_t = zeros((size_t)c.T * half); c.sin_t = zeros((size_t)c.T * half);
    rope_tables(c.cos_t, c.sin_t, c.T, rd, theta, sc, long_factors);
    double et = 0;
    for (int t = 0; t < c.T; t++) for (int i = 0; i < half; i++) {
        /* the definitions: HF's default, linear and longrope inv_freq over rd dims */
        double inv = 1.0 / pow(theta, 2.0 * i / rd), amp = 1.0, pos = t;
        if (sc && sc->type == ROPE_SCALING_LINEAR) pos = t / sc->factor;
        if (sc && sc->type == ROPE_SCALING_LONGROPE) {
            inv /= long_factors ? sc->long_factor[i] : sc->short_factor[i];
            amp = sc->attention_factor;
        }
        double ang = pos * inv;
        et = max2(et, fabs(c.cos_t[t * half + i] - amp * cos(ang)) + fabs(c.sin_t[t * half + i] - amp * sin(ang)));
    }
    CHECK_MSG(et < 1e-5, "rope tables D=%d rd=%d: abs err %.3g", D, rd, et);
    *tables_err = max2(*tables_err, et);
    c.x = rand_vec(n, 1); c.work = zeros(n); c.probe = rand_vec(n, 1);
    rope_obj(&c);
    double ef = 0;
    for (size_t row = 0; row < (size_t)c.B * c.T * c.H; row++) {
        int t = (int)(row / c.H % c.T);
        size_t base = row * c.D;
        for (int i = 0; i < c.D; i++) {
            double want = c.x[base + i];   /* pass-through dims */
            if (i < rd) {
                int j = i % half;
                double co = c.cos_t[t * half + j], si = c.sin_t[t * half + j];
                double rot = i < half ? -c.x[base + i + half] : c.x[base + i - half];
                want = c.x[base + i] * co + rot * si;
            }
            ef = max2(ef, fabs(c.work[base + i] - want));
        }
    }
    CHECK_MSG(ef < 1e-6, "rope forward D=%d rd=%d: abs err %.3g", D, rd, ef);
    float *dx = malloc(n * sizeof(float));
    memcpy(dx, c.probe, n * sizeof(float));
    rope_backward(dx, c.cos_t, c.sin_t, c.B, c.T, c.H, c.D, c.rd);
    double e = fd_check("rope dx", c.x, n, dx, rope_obj, &c, 1e-2, n);
    free(c.cos_t); free(c.sin_t); free(c.x); free(c.work); free(c.probe); free(dx);
    return max2(e, ef);
}
static void test_rope(void) {
    /* llama3 inv_freq against HF's formula evaluated in PyTorch (float32):
     * theta 500000, D 64, factor 8, low 1, high 4, original 8192. */
    const int idx[] = {0, 5, 10, 16, 18, 20, 24, 31};
    const double hf[] = {1.0, 0.12868738174438477, 0.016560440883040428, 0.0005248460220173001,
                         7.784655463183299e-05, 3.428102354519069e-05, 6.647869668086059e-06, 3.76732259610435e-07};
    RopeScaling l3 = {.type = ROPE_SCALING_LLAMA3, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position = 8192};
    float cos_t[2 * 32], sin_t[2 * 32];
    rope_tables(cos_t, sin_t, 2, 64, 500000.0, &l3, false);
    double et = 0;
    for (int k = 0; k < 8; k++) { /* position 1: angle = inv_freq */
        double ang = atan2(sin_t[32 + idx[k]], cos_t[32 + idx[k]]);
        et = max2(et, fabs(ang - hf[k]) / hf[k]);
    }
    CHECK_MSG(et < 1e-5, "llama3 inv_freq rel err %.3g", et);
    RopeScaling lin = {.type = ROPE_SCALING_LINEAR, .factor = 2};
    RopeScaling lr = {.type = ROPE_SCALING_LONGROPE, .original_max_position = 4, .n_factors = 3,
                      .attention_factor = 1.19};
    for (int i = 0; i < 3; i++) {
        lr.short_factor[i] = 1.0f + 0.5f * (float)i;
        lr.long_factor[i] = 2.0f + 3.0f * (float)i;
    }
    double e = rope_case(8, 8, NULL, false, &et);
    e = max2(e, rope_case(8, 8, &lin, false, &et));
    e = max2(e, rope_case(10, 6, NULL, false, &et));      /* partial rotary: 6 of 10 dims */
    e = max2(e, rope_case(10, 6, &lr, false, &et));       /* longrope, short factors */
    e = max2(e, rope_case(10, 6, &lr, true, &et));        /* longrope, long factors */
    printf("worst rope rel err %.3g (tables %.3g)\n", e, et);
}

/* ---------------- attention ---------------- */
static void naive_attention(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                            int H, int KVH, int D, const AttnParams *ap) {
    double *s = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++) for (int h = 0; h < H; h++) for (int i = 0; i < T; i++) {
        int g = h / (H / KVH);
        int j0 = ap->window > 0 && i - ap->window + 1 > 0 ? i - ap->window + 1 : 0;
        const float *qi = q + (((size_t)b * T + i) * H + h) * D;
        double mx = -INFINITY;
        for (int j = j0; j <= i; j++) {
            const float *kj = k + (((size_t)b * T + j) * KVH + g) * D;
            double d = 0; for (int x = 0; x < D; x++) d += (double)qi[x] * kj[x];
            s[j] = d * ap->scale;
            if (ap->softcap > 0) s[j] = ap->softcap * tanh(s[j] / ap->softcap);
            if (s[j] > mx) mx = s[j];
        }
        double sum = 0; for (int j = j0; j <= i; j++) sum += exp(s[j] - mx);
        for (int x = 0; x < D; x++) {
            double o = 0;
            for (int j = j0; j <= i; j++) o += exp(s[j] - mx) / sum * v[(((size_t)b * T + j) * KVH + g) * D + x];
            out[(((size_t)b * T + i) * H + h) * D + x] = (float)o;
        }
        lse[((size_t)b * H + h) * T + i] = (float)(mx + log(sum));
    }
    free(s);
}

typedef struct { float *out, *lse, *q, *k, *v, *probe; int B, T, H, KVH, D; AttnParams ap; } AttCtx;
static double att_obj(void *p) {
    AttCtx *c = p;
    attention_forward(c->out, c->lse, c->q, c->k, c->v, c->B, c->T, c->H, c->KVH, c->D, &c->ap);
    return dot(c->out, c->probe, (size_t)c->B * c->T * c->H * c->D);
}
/* The backward's key segments (AttnParams.key_splits) of test_attention's
 * cases: 1, or several where a case cuts a kv head's keys. */
static int att_splits = 1;

/* window 0: full causal; scale 0: 1/sqrt(D). The gradients are checked by
 * central differences on fd_samples random entries of q, k and v each. */
static double test_attention(int B, int T, int H, int KVH, int D, int window, float scale, float softcap,
                             int fd_samples) {
    AttCtx c = {.B = B, .T = T, .H = H, .KVH = KVH, .D = D};
    c.ap = (AttnParams){.scale = scale > 0 ? scale : 1.0f / sqrtf((float)D), .window = window, .softcap = softcap,
                        .key_splits = att_splits};
    size_t nq = (size_t)c.B * c.T * c.H * c.D, nk = (size_t)c.B * c.T * c.KVH * c.D, nl = (size_t)c.B * c.H * c.T;
    c.q = rand_vec(nq, 1.5f); c.k = rand_vec(nk, 1.5f); c.v = rand_vec(nk, 1); c.probe = rand_vec(nq, 1);
    c.out = zeros(nq); c.lse = zeros(nl);
    float *rout = zeros(nq), *rlse = zeros(nl);
    att_obj(&c);
    naive_attention(rout, rlse, c.q, c.k, c.v, c.B, c.T, c.H, c.KVH, c.D, &c.ap);
    double ef = rel_error(c.out, rout, nq), el = rel_error(c.lse, rlse, nl);
    CHECK_MSG(ef < 1e-5 && el < 1e-5, "attention forward rel err out %.3g lse %.3g", ef, el);
    float *dq = zeros(nq), *dk = zeros(nk), *dv = zeros(nk);
    float *ws = zeros(attention_workspace_floats(c.B, c.T, c.H, c.KVH, c.D, att_splits));
    attention_backward(dq, dk, dv, c.probe, c.q, c.k, c.v, c.out, c.lse, ws, c.B, c.T, c.H, c.KVH, c.D, &c.ap);
    double e = fd_check("attention dq", c.q, nq, dq, att_obj, &c, 1e-2, (size_t)fd_samples);
    e = max2(e, fd_check("attention dk", c.k, nk, dk, att_obj, &c, 1e-2, (size_t)fd_samples));
    e = max2(e, fd_check("attention dv", c.v, nk, dv, att_obj, &c, 1e-2, (size_t)fd_samples));
    /* accumulation: a second backward doubles the gradients */
    float *dq2 = malloc(nq * sizeof(float)); memcpy(dq2, dq, nq * sizeof(float));
    for (size_t i = 0; i < nq; i++) dq2[i] *= 2;
    att_obj(&c); /* out and lse of the unperturbed inputs again */
    attention_backward(dq, dk, dv, c.probe, c.q, c.k, c.v, c.out, c.lse, ws, c.B, c.T, c.H, c.KVH, c.D, &c.ap);
    CHECK_MSG(rel_error(dq, dq2, nq) < 1e-6, "attention accumulation rel err %.3g", rel_error(dq, dq2, nq));
    /* same bits with 1 thread as with several (fixed summation order) */
    {
        float *o1 = zeros(nq), *l1 = zeros(nl), *q1 = zeros(nq), *k1 = zeros(nk), *v1 = zeros(nk);
        float *o2 = zeros(nq), *l2 = zeros(nl), *q2 = zeros(nq), *k2 = zeros(nk), *v2 = zeros(nk);
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        attention_forward(o1, l1, c.q, c.k, c.v, c.B, c.T, c.H, c.KVH, c.D, &c.ap);
        attention_backward(q1, k1, v1, c.probe, c.q, c.k, c.v, o1, l1, ws, c.B, c.T, c.H, c.KVH, c.D, &c.ap);
        omp_set_num_threads(threads > 1 ? threads : 2);
        attention_forward(o2, l2, c.q, c.k, c.v, c.B, c.T, c.H, c.KVH, c.D, &c.ap);
        attention_backward(q2, k2, v2, c.probe, c.q, c.k, c.v, o2, l2, ws, c.B, c.T, c.H, c.KVH, c.D, &c.ap);
        omp_set_num_threads(threads);
        CHECK(!memcmp(o1, o2, nq * 4) && !memcmp(l1, l2, nl * 4) && !memcmp(q1, q2, nq * 4) &&
              !memcmp(k1, k2, nk * 4) && !memcmp(v1, v2, nk * 4));
        free(o1); free(l1); free(q1); free(k1); free(v1); free(o2); free(l2); free(q2); free(k2); free(v2);
    }
    printf("attention B=%d T=%d H=%d KVH=%d D=%d window=%d scale=%.3g softcap=%g key splits %d: backward rel err "
           "%.3g (forward out %.3g, lse %.3g)\n", B, T, H, KVH, D, window, c.ap.scale, softcap, att_splits, e, ef, el);
    free(c.q); free(c.k); free(c.v); free(c.probe); free(c.out); free(c.lse); free(rout); free(rlse);
    free(dq); free(dk); free(dv); free(ws); free(dq2);
    return max2(e, max2(ef, el));
}

/* Key segments against none: a segment owns its key blocks, so dk and dv
 * keep their bits; dq sums the segments' partials in another order: within
 * 1e-5 relative (fp32 sums of up to T terms with cancellation, measured
 * 5e-7 to 1.7e-6; a lost or doubled partial is of order 1). And the number of segments a run takes: none where batch x kv
 * heads gives every thread two tasks, at most one per 64-key block. */
static void test_attention_splits(int B, int T, int H, int KVH, int D, int window, int splits) {
    AttnParams a1 = {.scale = 1.0f / sqrtf((float)D), .window = window, .key_splits = 1}, as = a1;
    as.key_splits = splits;
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KVH * D, nl = (size_t)B * H * T;
    float *q = rand_vec(nq, 1.5f), *k = rand_vec(nk, 1.5f), *v = rand_vec(nk, 1), *g = rand_vec(nq, 1);
    float *out = zeros(nq), *lse = zeros(nl), *ws = zeros(attention_workspace_floats(B, T, H, KVH, D, splits));
    float *dq[2] = {zeros(nq), zeros(nq)}, *dk[2] = {zeros(nk), zeros(nk)}, *dv[2] = {zeros(nk), zeros(nk)};
    attention_forward(out, lse, q, k, v, B, T, H, KVH, D, &a1);
    for (int i = 0; i < 2; i++) /* the second run adds to non-zero gradients, as a block's backward does */
        for (size_t j = 0; j < nq; j++) dq[i][j] = 0.25f;
    attention_backward(dq[0], dk[0], dv[0], g, q, k, v, out, lse, ws, B, T, H, KVH, D, &a1);
    attention_backward(dq[1], dk[1], dv[1], g, q, k, v, out, lse, ws, B, T, H, KVH, D, &as);
    double eq = rel_error(dq[1], dq[0], nq);
    CHECK_MSG(!memcmp(dk[0], dk[1], nk * 4) && !memcmp(dv[0], dv[1], nk * 4),
              "attention key splits %d (T %d window %d): dk/dv differ from the unsplit backward", splits, T, window);
    CHECK_MSG(eq < 1e-5, "attention key splits %d (T %d window %d): dq rel err %.3g", splits, T, window, eq);
    printf("attention B=%d T=%d H=%d KVH=%d window=%d: %d key splits against none: dk, dv same bits, dq rel %.3g\n",
           B, T, H, KVH, window, splits, eq);
    free(q); free(k); free(v); free(g); free(out); free(lse); free(ws);
    for (int i = 0; i < 2; i++) { free(dq[i]); free(dk[i]); free(dv[i]); }
}

static void test_attention_key_splits(void) {
    CHECK(attention_key_splits(1, 3, 2) == 2);   /* SmolLM2 at batch 1 on 2 threads: 3 tasks -> 6 */
    CHECK(attention_key_splits(4, 3, 2) == 1);   /* 12 tasks for 2 threads: none */
    CHECK(attention_key_splits(1, 2, 4) == 4);   /* Qwen2.5-0.5B at batch 1 on 4 threads */
    CHECK(attention_key_splits(1, 2, 16) == 8);  /* at most 8 (the dq partials' memory) */
    CHECK(attention_key_splits(1, 1, 1) == 1);   /* one thread: none */
    CHECK(attention_key_splits(0, 3, 2) == 1);   /* a model without a training batch (generate) */
}

/* ---------------- gated activations (SwiGLU, GeGLU) ---------------- */
typedef struct { float *out, *gu, *probe; size_t rows, F, ld; int act; } GluCtx;
static double glu_obj(void *p) {
    GluCtx *c = p;
    glu_forward(c->out, c->gu, c->gu + (c->ld == c->F ? c->rows * c->F : c->F), c->rows, c->F, c->ld, c->act);
    return dot(c->out, c->probe, c->rows * c->F);
}
/* ld == F: gate and up separate (up after gate); ld == 2F: fused gate_up rows */
static double test_glu(int act, bool fused) {
    GluCtx c = {.rows = 7, .F = 29, .act = act};
    c.ld = fused ? 2 * c.F : c.F;
    size_t n = c.rows * c.F;
    c.gu = rand_vec(2 * n, 4); c.probe = rand_vec(n, 1); c.out = zeros(n);
    const float *g = c.gu, *u = c.gu + (fused ? c.F : n);
    glu_obj(&c);
    double ef = 0;
    for (size_t r = 0; r < c.rows; r++) for (size_t j = 0; j < c.F; j++) {
        double x = g[r * c.ld + j], a;
        if (act == GLU_SILU) a = x / (1 + exp(-x));
        else a = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));   /* gelu_pytorch_tanh */
        ef = max2(ef, fabs(c.out[r * c.F + j] - a * u[r * c.ld + j]));
    }
    CHECK_MSG(ef < 1e-5, "glu act %d forward abs err %.3g", act, ef);
    float *dgu = zeros(2 * n);
    float *dg = dgu, *du = dgu + (fused ? c.F : n);
    glu_backward(dg, du, c.probe, g, u, c.rows, c.F, c.ld, act);
    double e = fd_check(act == GLU_SILU ? "swiglu dgate/dup" : "geglu dgate/dup", c.gu, 2 * n, dgu, glu_obj, &c,
                        1e-3, 2 * n);
    /* glu_backward_set overwrites: the same values as accumulating into zeros, whatever was there */
    float *dgu2 = rand_vec(2 * n, 9);
    glu_backward_set(dgu2, dgu2 + (fused ? c.F : n), c.probe, g, u, c.rows, c.F, c.ld, act);
    size_t diff = 0;
    for (size_t r = 0; r < c.rows; r++)
        for (size_t j = 0; j < c.F; j++) {
            size_t ig = fused ? r * c.ld + j : r * c.F + j, iu = fused ? ig + c.F : ig + n;
            diff += dgu2[ig] != dgu[ig] || dgu2[iu] != dgu[iu];
        }
    CHECK_MSG(diff == 0, "glu act %d: glu_backward_set differs from glu_backward into zeros at %zu elements", act,
              diff);
    free(dgu2);
    printf("glu %s%s: rel err %.3g (forward abs err %.3g)\n", act == GLU_SILU ? "silu" : "gelu_tanh",
           fused ? " fused rows" : "", e, ef);
    free(c.gu); free(c.probe); free(c.out); free(dgu);
    return e;
}

/* ---------------- lm head + cross-entropy ---------------- */
typedef struct {
    float *inp, *w, *rw, *scratch;
    int *targets;
    int chunk, N, C, V;
    float cap;
    FrozenWeight fw;
} XentCtx;
static double xent_obj(void *p) {
    XentCtx *c = p;
    return lmhead_xent(NULL, NULL, c->inp, &c->fw, c->targets, c->rw, c->scratch, c->cap, c->chunk, c->N);
}
/* Loss and gradient in double from (possibly bf16-rounded) inputs; dlogits
 * rounded to bf16 when round_dlogits (as the bf16 path does). */
static double naive_xent(float *dinp, float *row_loss, const float *inp, const float *w, const int *targets, const float *rw,
                         int N, int C, int V, int round_dlogits, double cap) {
    double total = 0, *z = malloc((size_t)V * sizeof(double));
    for (int i = 0; i < N; i++) {
        row_loss[i] = 0;
        if (rw[i] == 0) continue;
        double mx = -INFINITY;
        for (int j = 0; j < V; j++) {
            double s = 0;
            for (int x = 0; x < C; x++) s += (double)inp[i * C + x] * w[(size_t)j * C + x];
            if (cap > 0) s = cap * tanh(s / cap);
            z[j] = s;
            if (s > mx) mx = s;
        }
        double sum = 0; for (int j = 0; j < V; j++) sum += exp(z[j] - mx);
        double lse = mx + log(sum);
        row_loss[i] = (float)(lse - z[targets[i]]);
        total += rw[i] * (lse - z[targets[i]]);
        for (int j = 0; j < V; j++) {
            double d = rw[i] * (exp(z[j] - lse) - (j == targets[i]));
            if (cap > 0) d *= 1 - (z[j] / cap) * (z[j] / cap);
            if (round_dlogits) d = round_bf16((float)d);
            for (int x = 0; x < C; x++) dinp[i * C + x] += (float)(d * w[(size_t)j * C + x]);
        }
    }
    free(z);
    return total;
}
static void test_lmhead(float cap) {
    XentCtx c = {.chunk = 3, .N = 10, .C = 24, .V = 53, .cap = cap};
    float rw[10] = {1, 0, 0.5f, 1, 1, 0, 2, 1, 0, 1};
    int targets[10];
    for (int i = 0; i < c.N; i++) targets[i] = irand(c.V);
    c.rw = rw; c.targets = targets;
    c.inp = rand_vec((size_t)c.N * c.C, 1); c.w = rand_vec((size_t)c.V * c.C, 0.5f);
    c.fw = fw_plain(c.w, DTYPE_F32, c.V, c.C, DTYPE_F32);
    c.scratch = zeros(lmhead_scratch_floats(c.chunk, c.C, c.V));
    float *dinp = zeros((size_t)c.N * c.C), *ref = zeros((size_t)c.N * c.C), *rl = zeros(c.N), *rl_ref = zeros(c.N);
    if (cap > 0) for (size_t i = 0; i < (size_t)c.N * c.C; i++) c.inp[i] *= 4;   /* logits where the cap bends */
    double loss = lmhead_xent(dinp, rl, c.inp, &c.fw, targets, rw, c.scratch, cap, c.chunk, c.N);
    double loss_ref = naive_xent(ref, rl_ref, c.inp, c.w, targets, rw, c.N, c.C, c.V, 0, cap);
    double el = fabs(loss - loss_ref) / fabs(loss_ref);
    CHECK_MSG(el < 1e-5, "lmhead loss %.9g vs %.9g", loss, loss_ref);
    CHECK(rel_error(rl, rl_ref, c.N) < 1e-5);
    double eg = rel_error(dinp, ref, (size_t)c.N * c.C);
    CHECK_MSG(eg < 1e-5, "lmhead dinp vs naive rel err %.3g", eg);
    for (int x = 0; x < c.C; x++) CHECK(dinp[1 * c.C + x] == 0 && dinp[5 * c.C + x] == 0); /* weight-0 rows */
    double e = fd_check("lmhead_xent dinp", c.inp, (size_t)c.N * c.C, dinp, xent_obj, &c, 1e-2, (size_t)c.N * c.C);
    /* eval (dinp NULL) gives the same loss */
    CHECK_NEAR(lmhead_xent(NULL, NULL, c.inp, &c.fw, targets, rw, c.scratch, cap, c.chunk, c.N), loss,
               1e-9 * fabs(loss));

    /* bf16 weight: against the naive loss/gradient of bf16-rounded inputs and weights */
    uint16_t *w16 = malloc((size_t)c.V * c.C * 2);
    float *wr = zeros((size_t)c.V * c.C), *inr = zeros((size_t)c.N * c.C);
    for (size_t i = 0; i < (size_t)c.V * c.C; i++) { w16[i] = f32_to_bf16(c.w[i]); wr[i] = bf16_to_f32(w16[i]); }
    FrozenWeight fw16 = fw_plain(w16, DTYPE_BF16, c.V, c.C, DTYPE_BF16);
    for (size_t i = 0; i < (size_t)c.N * c.C; i++) inr[i] = round_bf16(c.inp[i]);
    memset(dinp, 0, (size_t)c.N * c.C * sizeof(float)); memset(ref, 0, (size_t)c.N * c.C * sizeof(float));
    double lb = lmhead_xent(dinp, rl, c.inp, &fw16, targets, rw, c.scratch, cap, c.chunk, c.N);
    double lb_ref = naive_xent(ref, rl_ref, inr, wr, targets, rw, c.N, c.C, c.V, 1, cap);
    double elb = fabs(lb - lb_ref) / fabs(lb_ref), egb = rel_error(dinp, ref, (size_t)c.N * c.C);
    CHECK_MSG(elb < 1e-5 && egb < 1e-4, "lmhead bf16: loss rel err %.3g, dinp rel err %.3g", elb, egb);
    /* logits for generation */
    float *logits = zeros((size_t)c.N * c.V);
    lmhead_logits(logits, c.inp, &c.fw, cap, c.N);
    double z0 = 0; for (int x = 0; x < c.C; x++) z0 += (double)c.inp[2 * c.C + x] * c.w[7 * c.C + x];
    if (cap > 0) z0 = cap * tanh(z0 / cap);
    CHECK_NEAR(logits[2 * c.V + 7], z0, 1e-5);
    printf("worst lmhead_xent (softcap %g) rel err %.3g (f32 loss %.3g, dinp %.3g; bf16 loss %.3g, dinp %.3g)\n",
           cap, e, el, eg, elb, egb);
    free(c.inp); free(c.w); free(c.scratch); free(dinp); free(ref); free(rl); free(rl_ref); free(w16); free(wr); free(inr); free(logits);
}

/* ---------------- linear ---------------- */
typedef struct { float *out, *inp, *w, *b, *probe; int N, C, OC; } LinCtx;
static double lin_obj(void *p) { LinCtx *c = p; linear_forward(c->out, c->inp, c->w, DTYPE_F32, c->b, c->N, c->C, c->OC); return dot(c->out, c->probe, (size_t)c->N * c->OC); }
static void test_linear(void) {
    LinCtx c = {.N = 7, .C = 13, .OC = 5};
    c.inp = rand_vec((size_t)c.N * c.C, 1); c.w = rand_vec((size_t)c.OC * c.C, 1); c.b = rand_vec(c.OC, 1);
    c.probe = rand_vec((size_t)c.N * c.OC, 1); c.out = zeros((size_t)c.N * c.OC);
    float *dinp = zeros((size_t)c.N * c.C), *dw = zeros((size_t)c.OC * c.C), *db = zeros(c.OC);
    linear_backward(dinp, dw, db, c.probe, c.inp, c.w, DTYPE_F32, c.N, c.C, c.OC);
    double e = fd_check("linear dinp", c.inp, (size_t)c.N * c.C, dinp, lin_obj, &c, 1e-2, (size_t)c.N * c.C);
    e = max2(e, fd_check("linear dweight", c.w, (size_t)c.OC * c.C, dw, lin_obj, &c, 1e-2, (size_t)c.OC * c.C));
    e = max2(e, fd_check("linear dbias", c.b, c.OC, db, lin_obj, &c, 1e-2, c.OC));
    printf("worst linear rel err %.3g\n", e);
    free(c.inp); free(c.w); free(c.b); free(c.probe); free(c.out); free(dinp); free(dw); free(db);
}

int main(void) {
    static uint16_t scratch[1 << 16];
    matmul_set_scratch(scratch, sizeof scratch);
    test_exp16();
    test_embedding();
    test_rmsnorm(0.0f);
    test_rmsnorm(1.0f);
    test_rope();
    double ea = test_attention(2, 131, 4, 2, 20, 0, 0, 0, 300);      /* T, D not multiples of the tiles */
    ea = max2(ea, test_attention(1, 150, 6, 2, 32, 0, 0, 0, 300));  /* full tiles read in place, 3 heads per kv head */
    ea = max2(ea, test_attention(1, 64, 10, 2, 16, 0, 0, 0, 300));  /* 5 heads per kv head: split over two tasks */
    /* sliding windows: shorter than a tile (whole tiles skipped on both
     * sides, rows whose window starts past a tile), longer than one, and
     * wider than the sequence; a Gemma-style scale */
    ea = max2(ea, test_attention(1, 200, 2, 1, 20, 37, 0, 0, 80));
    ea = max2(ea, test_attention(1, 200, 2, 1, 32, 70, 0.11f, 0, 80));
    ea = max2(ea, test_attention(1, 70, 2, 2, 16, 300, 0, 0, 80));
    ea = max2(ea, test_attention(1, 130, 1, 1, 16, 2, 0, 0, 80));   /* each query sees itself and one key */
    /* Gemma 2: tanh soft-capping of the scores, alone and with a window */
    ea = max2(ea, test_attention(1, 100, 2, 1, 20, 0, 0.3f, 2.0f, 80));
    ea = max2(ea, test_attention(1, 150, 2, 1, 32, 50, 0.25f, 5.0f, 80));
    /* the backward's keys cut in segments: finite differences and the thread count as above */
    att_splits = 3;
    ea = max2(ea, test_attention(1, 300, 6, 2, 32, 0, 0, 0, 200));
    ea = max2(ea, test_attention(2, 200, 2, 1, 20, 37, 0, 0, 80));
    ea = max2(ea, test_attention(1, 150, 2, 1, 32, 50, 0.25f, 5.0f, 80));
    att_splits = 1;
    printf("worst attention rel err %.3g\n", ea);
    test_attention_splits(1, 300, 6, 2, 32, 0, 3);
    test_attention_splits(1, 1000, 4, 1, 64, 0, 5);
    test_attention_splits(1, 100, 2, 1, 16, 0, 8);   /* more splits than key blocks: 2 segments */
    test_attention_splits(2, 400, 4, 2, 16, 100, 4);
    test_attention_key_splits();
    double eg = test_glu(GLU_SILU, false);
    eg = max2(eg, test_glu(GLU_SILU, true));
    eg = max2(eg, test_glu(GLU_GELU_TANH, false));
    eg = max2(eg, test_glu(GLU_GELU_TANH, true));
    printf("worst glu rel err %.3g\n", eg);
    test_lmhead(0.0f);
    test_lmhead(3.0f);
    test_linear();
    matmul_release_all();
    return check_finish("kernels/ops_fd");
}

/* test_isa.c: the kernels compiled twice (kernels/isa.h) against each other
 * and against the scalar rules they share:
 *   - the bf16 rounding of arrays (matmul_f32_to_bf16, store16_bf16) equals
 *     the scalar f32_to_bf16 (itself checked on all 2^32 inputs by
 *     tests/base/test_dtype.c) on 1M random bit patterns and the special
 *     cases (ties, overflow to infinity, subnormals, NaN payloads), in every
 *     variant this CPU can run;
 *   - attention forward and backward, the LM head + cross-entropy and the
 *     chunked gated delta rule (Gated DeltaNet) forward and backward give
 *     the same bits in the baseline and the AVX-512 variant (same sums in the
 *     same order, fused multiply-adds in both), on shapes with partial tiles,
 *     head dims that are not multiples of 16 and grouped kv heads;
 *   - the MLX affine expansion (every bits, group, scale dtype, F32 and BF16
 *     tiles, column ranges) and the fused GEMV of decoding give the same bits
 *     in both variants;
 *   - attention's bf16 tile products (AttnParams.bf16, AVX512_BF16) against
 *     the fp32 kernel within bf16 bounds, also where values share a common
 *     offset (the backward's D_i from the same rounded dO as dP), and the
 *     fp32 bits wherever bf16 does not apply (portable variant, head dims
 *     not a multiple of 32);
 *   - LMTUNE_NO_AVX512=1 turns the AVX-512 variants, oneDNN's bf16
 *     products and attention's bf16 products off (checked in a child process: the choice is made once).
 * A build without the choice (make NATIVE=1, non-x86) has one variant: only
 * the scalar comparisons run, and the test says so. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/dtype.h"
#include "kernels/dequant.h"
#include "kernels/frozen_weight.h"
#include "kernels/gated_delta.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/vec.h"

#if defined(LT_ISA_DISPATCH)
extern __typeof__(attention_forward) attention_forward_base, attention_forward_avx512;
extern __typeof__(attention_cached) attention_cached_base, attention_cached_avx512;
extern __typeof__(attention_backward) attention_backward_base, attention_backward_avx512;
extern __typeof__(attention_prefill) attention_prefill_base, attention_prefill_avx512;
extern __typeof__(lmhead_xent) lmhead_xent_base, lmhead_xent_avx512;
extern __typeof__(matmul_f32_to_bf16) matmul_f32_to_bf16_base, matmul_f32_to_bf16_avx512;
extern __typeof__(affine_expand) affine_expand_base, affine_expand_avx512;
extern __typeof__(affine_gemv) affine_gemv_base, affine_gemv_avx512;
extern __typeof__(bf16_gemv) bf16_gemv_base, bf16_gemv_avx512;
extern __typeof__(gated_delta_forward) gated_delta_forward_base, gated_delta_forward_avx512;
extern __typeof__(gated_delta_backward) gated_delta_backward_base, gated_delta_backward_avx512;
extern __typeof__(glu_forward) glu_forward_base, glu_forward_avx512;
extern __typeof__(glu_backward) glu_backward_base, glu_backward_avx512;
extern __typeof__(glu_backward_set) glu_backward_set_base, glu_backward_set_avx512;
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rand32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}
static float frand(void) { /* uniform in [-1, 1) */
    return (float)((rand32() >> 8) * (1.0 / 8388608.0)) - 1.0f;
}
static float *rand_vec(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        p[i] = scale * frand();
    }
    return p;
}

typedef void (*ToBf16)(uint16_t *dst, const float *src, size_t n);

/* n floats: the special cases first, then random bit patterns. */
static float *bf16_inputs(size_t n) {
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f817fffu,
        0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
        0x7fbfffffu, 0x7fc00000u, 0xffffffffu, 0xff800001u, 0x00008000u, 0x00018000u, 0x0000ffffu,
        0x80008000u, 0x807fffffu, 0x00800000u, 0x007fffffu, 0x33800000u, 0x47efffffu,
    };
    float *x = malloc(n * sizeof *x);
    size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < n; i++) {
        uint32_t u = i < ns ? special[i] : rand32();
        memcpy(&x[i], &u, 4);
    }
    return x;
}

static void check_to_bf16(const char *name, ToBf16 f, const float *x, size_t n) {
    uint16_t *got = malloc(n * sizeof *got);
    f(got, x, n);
    size_t bad = 0;
    size_t first = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] != f32_to_bf16(x[i])) {
            if (!bad) {
                first = i;
            }
            bad++;
        }
    }
    uint32_t u;
    memcpy(&u, &x[first], 4);
    CHECK_MSG(bad == 0, "%s: %zu of %zu differ from f32_to_bf16, first 0x%08x -> 0x%04x (want 0x%04x)", name, bad, n,
              u, got[first], f32_to_bf16(x[first]));
    printf("%-34s %zu values, %zu differ from f32_to_bf16\n", name, n, bad);
    free(got);
}

/* store16_bf16 itself (the test's own compile), 16 at a time. */
static void store16_array(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        store16_bf16(dst + i, load16(src + i));
    }
    for (; i < n; i++) {
        dst[i] = f32_to_bf16(src[i]);
    }
}

static void test_bf16_vectors(void) {
    size_t n = (1u << 20) + 13; /* a tail that is not a whole vector */
    float *x = bf16_inputs(n);
    check_to_bf16("store16_bf16", store16_array, x, n);
    check_to_bf16("matmul_f32_to_bf16 (dispatched)", matmul_f32_to_bf16, x, n);
#if defined(LT_ISA_DISPATCH)
    check_to_bf16("matmul_f32_to_bf16_base", matmul_f32_to_bf16_base, x, n);
    if (isa_avx512()) {
        check_to_bf16("matmul_f32_to_bf16_avx512", matmul_f32_to_bf16_avx512, x, n);
    }
#endif
    free(x);
}

#if defined(LT_ISA_DISPATCH)
static bool same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof *a) == 0;
}

static double rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* An attention case: its shape, its random inputs (q, k, v and the
 * output's gradient) and the backward's workspace. */
typedef struct {
    int B, T, H, KVH, D;
    size_t nq, nk, nl; /* floats of q (and out, dq), of k (v, dk, dv), of lse */
    float *q, *k, *v, *dout, *ws;
} AttnCase;

/* What one run of attention forward and backward writes, zeroed at first
 * (the backward adds its gradients). */
typedef struct {
    float *out, *lse, *dq, *dk, *dv;
} AttnRun;

/* The backward's key segments (AttnParams.key_splits) of the attention
 * cases below: 1, or several for the cases that cut a kv head's keys. */
static int attn_splits = 1;

static AttnCase attn_case(int B, int T, int H, int KVH, int D) {
    AttnCase c = {.B = B, .T = T, .H = H, .KVH = KVH, .D = D};
    c.nq = (size_t)B * T * H * D;
    c.nk = (size_t)B * T * KVH * D;
    c.nl = (size_t)B * H * T;
    c.q = rand_vec(c.nq, 1.5f);
    c.k = rand_vec(c.nk, 1.5f);
    c.v = rand_vec(c.nk, 1.0f);
    c.dout = rand_vec(c.nq, 1.0f);
    c.ws = malloc(attention_workspace_floats(B, T, H, KVH, D, attn_splits) * sizeof(float));
    return c;
}

static void attn_case_free(AttnCase *c) {
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->dout);
    free(c->ws);
}

static AttnRun attn_run_new(const AttnCase *c) {
    AttnRun r = {
        .out = calloc(c->nq, sizeof(float)),
        .lse = calloc(c->nl, sizeof(float)),
        .dq = calloc(c->nq, sizeof(float)),
        .dk = calloc(c->nk, sizeof(float)),
        .dv = calloc(c->nk, sizeof(float)),
    };
    return r;
}

static void attn_run_free(AttnRun *r) {
    free(r->out);
    free(r->lse);
    free(r->dq);
    free(r->dk);
    free(r->dv);
}

static void attn_zero_grads(AttnRun *r, const AttnCase *c) {
    memset(r->dq, 0, c->nq * sizeof(float));
    memset(r->dk, 0, c->nk * sizeof(float));
    memset(r->dv, 0, c->nk * sizeof(float));
}

/* r's out and lse from forward f */
static void attn_fwd(__typeof__(attention_forward) *f, AttnRun *r, const AttnCase *c, const AttnParams *ap) {
    f(r->out, r->lse, c->q, c->k, c->v, c->B, c->T, c->H, c->KVH, c->D, ap);
}

/* r's gradients from backward f, given the forward's out and lse of `from` */
static void attn_bwd(__typeof__(attention_backward) *f, AttnRun *r, const AttnRun *from, const AttnCase *c,
                     const AttnParams *ap) {
    f(r->dq, r->dk, r->dv, c->dout, c->q, c->k, c->v, from->out, from->lse, c->ws, c->B, c->T, c->H, c->KVH, c->D,
      ap);
}

static bool attn_same_fwd(const AttnRun *a, const AttnRun *b, const AttnCase *c) {
    return same_bits(a->out, b->out, c->nq) && same_bits(a->lse, b->lse, c->nl);
}

static bool attn_same_bwd(const AttnRun *a, const AttnRun *b, const AttnCase *c) {
    return same_bits(a->dq, b->dq, c->nq) && same_bits(a->dk, b->dk, c->nk) && same_bits(a->dv, b->dv, c->nk);
}

static bool attn_same(const AttnRun *a, const AttnRun *b, const AttnCase *c) {
    return attn_same_fwd(a, b, c) && attn_same_bwd(a, b, c);
}

/* AttnParams.bf16: the tile products in bf16 (AVX512_BF16) against the fp32
 * kernel. Rounding the operands of each product to bf16 (8 significant
 * bits, relative error <= 2^-9) gives errors of a few 2^-9 relative, in
 * the outputs and gradients alike; the bounds are 1e-2 relative (L2 over
 * the tensor; about 5 x 2^-9) and 2e-2 absolute on the log-sum-exp.
 * Where bf16 does not apply (the portable variant, head dims not a multiple
 * of 32, a CPU without AVX512_BF16) the bits are the fp32 kernel's. */
static void test_attention_bf16(int B, int T, int H, int KVH, int D, int window, float softcap) {
    AttnParams ap = {.scale = 1.0f / sqrtf((float)D), .window = window, .softcap = softcap,
                     .key_splits = attn_splits};
    AttnParams ab = ap;
    ab.bf16 = true;
    AttnCase c = attn_case(B, T, H, KVH, D);
    size_t nq = c.nq, nk = c.nk, nl = c.nl;
    /* 0: fp32; 1: bf16 requested (public entry point); 2: bf16 requested of the portable variant */
    AttnRun r[3] = {attn_run_new(&c), attn_run_new(&c), attn_run_new(&c)};
    attn_fwd(attention_forward, &r[0], &c, &ap);
    attn_bwd(attention_backward, &r[0], &r[0], &c, &ap);
    attn_fwd(attention_forward, &r[1], &c, &ab);
    /* the backward from the fp32 forward's out and lse: the gradients' own error */
    attn_bwd(attention_backward, &r[1], &r[0], &c, &ab);
    bool applies = attention_bf16_supported() && D % 32 == 0;
    if (applies) {
        double eo = rel_l2(r[1].out, r[0].out, nq), el = max_abs_diff(r[1].lse, r[0].lse, nl);
        double eq = rel_l2(r[1].dq, r[0].dq, nq), ek = rel_l2(r[1].dk, r[0].dk, nk), ev = rel_l2(r[1].dv, r[0].dv, nk);
        CHECK_MSG(eo < 1e-2 && el < 2e-2, "attention bf16 forward (T %d H %d KVH %d D %d window %d cap %g): "
                  "out rel %.3g, lse abs %.3g", T, H, KVH, D, window, softcap, eo, el);
        CHECK_MSG(eq < 1e-2 && ek < 1e-2 && ev < 1e-2, "attention bf16 backward (T %d H %d KVH %d D %d window %d "
                  "cap %g): dq %.3g dk %.3g dv %.3g", T, H, KVH, D, window, softcap, eq, ek, ev);
        /* not fp32 by accident: bf16 rounding leaves a visible difference */
        CHECK_MSG(eo > 1e-5 && eq > 1e-5, "attention bf16 (D %d): the same as fp32 (%.3g, %.3g)", D, eo, eq);
        /* the same bits on one thread (a fixed summation order, as the fp32 kernel) */
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        attn_fwd(attention_forward, &r[2], &c, &ab);
        attn_zero_grads(&r[2], &c);
        attn_bwd(attention_backward, &r[2], &r[0], &c, &ab);
        omp_set_num_threads(threads);
        bool same_t = attn_same(&r[1], &r[2], &c);
        CHECK_MSG(same_t, "attention bf16 (D %d): 1 thread and %d threads differ", D, threads);
        attn_zero_grads(&r[2], &c);
        printf("attention bf16 B %d T %3d H %d KVH %d D %3d window %3d cap %4g: rel err out %.2e lse %.2e "
               "dq %.2e dk %.2e dv %.2e\n", B, T, H, KVH, D, window, softcap, eo, el, eq, ek, ev);
    } else {
        bool same = attn_same(&r[0], &r[1], &c);
        CHECK_MSG(same, "attention bf16 requested, D %d, not applicable here: not the fp32 bits", D);
        printf("attention bf16 requested, D %3d: fp32 products here (%s), same bits\n", D,
               attention_bf16_supported() ? "head dim not a multiple of 32" : "no AVX512_BF16");
    }
#if defined(LT_ISA_DISPATCH)
    attn_fwd(attention_forward_base, &r[2], &c, &ab);
    attn_bwd(attention_backward_base, &r[2], &r[0], &c, &ab);
    bool base_same = attn_same(&r[0], &r[2], &c);
    CHECK_MSG(base_same, "attention bf16 requested of the portable variant: not the fp32 bits (D %d)", D);
#endif
    for (int i = 0; i < 3; i++) {
        attn_run_free(&r[i]);
    }
    attn_case_free(&c);
}

/* The backward's D_i = rowsum(dout * out) and its dP = dO V^T must see the
 * same dO: dS = P (dP - D_i) is a cancellation, sum_j P_ij dP_ij = D_i, and
 * any mismatch between the two is added to every dS_ij of the row. With bf16
 * products dP comes from dO rounded to bf16, so D_i does too. Values sharing
 * a common offset (4 + uniform noise) make the cancellation deep; they are
 * bf16 numbers here, so that dO is the only operand of dP whose rounding
 * could mismatch. The backward runs from the bf16 forward's out and lse, as
 * in training, and must meet test_attention_bf16's bounds: with D_i from the
 * unrounded dout dq and dk were 1.2e-2 to 1.7e-2 off in these cases, with
 * it 4.0e-3 to 5.7e-3. */
static void test_attention_bf16_offset(int B, int T, int H, int KVH, int D, int window, float softcap) {
    if (!attention_bf16_supported() || D % 32 != 0) return; /* test_attention_bf16 checks the fp32 bits there */
    AttnParams ap = {.scale = 1.0f / sqrtf((float)D), .window = window, .softcap = softcap};
    AttnParams ab = ap;
    ab.bf16 = true;
    AttnCase c = attn_case(B, T, H, KVH, D);
    for (size_t i = 0; i < c.nk; i++) c.v[i] = bf16_to_f32(f32_to_bf16(4.0f + c.v[i]));
    AttnRun r[2] = {attn_run_new(&c), attn_run_new(&c)};
    attn_fwd(attention_forward, &r[0], &c, &ap);
    attn_bwd(attention_backward, &r[0], &r[0], &c, &ap);
    attn_fwd(attention_forward, &r[1], &c, &ab);
    attn_bwd(attention_backward, &r[1], &r[1], &c, &ab);
    double eq = rel_l2(r[1].dq, r[0].dq, c.nq), ek = rel_l2(r[1].dk, r[0].dk, c.nk), ev = rel_l2(r[1].dv, r[0].dv, c.nk);
    CHECK_MSG(eq < 1e-2 && ek < 1e-2 && ev < 1e-2, "attention bf16 backward, values offset by 4 (T %d H %d KVH %d "
              "D %d window %d cap %g): dq %.3g dk %.3g dv %.3g", T, H, KVH, D, window, softcap, eq, ek, ev);
    printf("attention bf16 B %d T %3d H %d KVH %d D %3d window %3d cap %4g, values offset by 4: rel err dq %.2e "
           "dk %.2e dv %.2e\n", B, T, H, KVH, D, window, softcap, eq, ek, ev);
    attn_run_free(&r[0]);
    attn_run_free(&r[1]);
    attn_case_free(&c);
}

/* ap: the plain causal case, or a sliding window and soft-capped scores
 * (Gemma 2 / 3), whose tile skipping and tanh run in both variants too. */
static void test_attention_variants(int B, int T, int H, int KVH, int D, int window, float softcap) {
    AttnParams ap = {.scale = 1.0f / sqrtf((float)D), .window = window, .softcap = softcap,
                     .key_splits = attn_splits};
    AttnCase c = attn_case(B, T, H, KVH, D);
    AttnRun r[2] = {attn_run_new(&c), attn_run_new(&c)};
    attn_fwd(attention_forward_base, &r[0], &c, &ap);
    attn_fwd(attention_forward_avx512, &r[1], &c, &ap);
    attn_bwd(attention_backward_base, &r[0], &r[0], &c, &ap);
    attn_bwd(attention_backward_avx512, &r[1], &r[0], &c, &ap);
    bool fwd = attn_same_fwd(&r[0], &r[1], &c);
    bool bwd = attn_same_bwd(&r[0], &r[1], &c);
    CHECK_MSG(fwd, "attention forward (B %d T %d H %d KVH %d D %d window %d cap %g): variants differ, "
              "max |diff| %.3g", B, T, H, KVH, D, window, softcap, max_abs_diff(r[0].out, r[1].out, c.nq));
    CHECK_MSG(bwd, "attention backward (B %d T %d H %d KVH %d D %d window %d cap %g): variants differ, "
              "max |diff| %.3g", B, T, H, KVH, D, window, softcap, max_abs_diff(r[0].dq, r[1].dq, c.nq));
    printf("attention B %d T %3d H %d KVH %d D %3d window %3d cap %4g key splits %d: forward %s, backward %s\n", B,
           T, H, KVH, D, window, softcap, attn_splits, fwd ? "same bits" : "DIFFERENT",
           bwd ? "same bits" : "DIFFERENT");
    for (int i = 0; i < 2; i++) {
        attn_run_free(&r[i]);
    }
    attn_case_free(&c);
}

static void test_lmhead_variants(DType wtype, float softcap) {
    int N = 37;
    int C = 72;
    int V = 301;
    int chunk = 16;
    float *inp = rand_vec((size_t)N * C, 1.0f);
    float *w = rand_vec((size_t)V * C, 0.5f);
    uint16_t *w16 = malloc((size_t)V * C * sizeof *w16);
    for (size_t i = 0; i < (size_t)V * C; i++) {
        w16[i] = f32_to_bf16(w[i]);
    }
    const void *weight = wtype == DTYPE_BF16 ? (const void *)w16 : (const void *)w;
    int targets[37];
    float rw[37];
    for (int i = 0; i < N; i++) {
        targets[i] = (int)(rand32() % (uint32_t)V);
        rw[i] = i % 5 == 0 ? 0.0f : 1.0f / (float)N;
    }
    float *scratch = malloc(lmhead_scratch_floats(chunk, C, V) * sizeof(float));
    static uint16_t bf16_scratch[64 * 1024];
    matmul_set_scratch(bf16_scratch, sizeof bf16_scratch);
    float *dinp[2];
    float *row_loss[2];
    double loss[2];
    for (int i = 0; i < 2; i++) {
        dinp[i] = calloc((size_t)N * C, sizeof(float));
        row_loss[i] = calloc((size_t)N, sizeof(float));
    }
    FrozenWeight fw = fw_plain(weight, wtype, V, C, wtype);
    loss[0] = lmhead_xent_base(dinp[0], row_loss[0], inp, &fw, targets, rw, scratch, softcap, chunk, N);
    loss[1] = lmhead_xent_avx512(dinp[1], row_loss[1], inp, &fw, targets, rw, scratch, softcap, chunk, N);
    bool same = loss[0] == loss[1] && same_bits(dinp[0], dinp[1], (size_t)N * C) &&
                same_bits(row_loss[0], row_loss[1], (size_t)N);
    CHECK_MSG(same, "lmhead_xent %s softcap %g: variants differ (loss %.17g vs %.17g)", dtype_name(wtype), softcap,
              loss[0], loss[1]);
    printf("lmhead_xent %-4s N %d C %d V %d softcap %g: %s\n", dtype_name(wtype), N, C, V, softcap,
           same ? "same bits" : "DIFFERENT");
    for (int i = 0; i < 2; i++) {
        free(dinp[i]);
        free(row_loss[i]);
    }
    free(inp);
    free(w);
    free(w16);
    free(scratch);
}

/* MLX affine weights (rows, cols) quantized from random values: expansion of
 * a column range into F32 and BF16 tiles, and the GEMV of 3 rows, in both
 * variants. */
static void test_affine_variants(int bits, int group, DType t) {
    int rows = 19;
    int cols = 4 * group;
    size_t n = (size_t)rows * cols;
    size_t ng = n / (size_t)group;
    size_t es = t == DTYPE_F32 ? 4 : 2;
    float *w = rand_vec(n, 0.2f);
    void *src = malloc(n * es);
    dtype_from_f32(src, t, w, n);
    size_t row_bytes = (size_t)cols * (size_t)bits / 8;
    uint8_t *packed = malloc((size_t)rows * row_bytes);
    void *scales = malloc(ng * es);
    void *biases = malloc(ng * es);
    affine_quantize(packed, scales, biases, src, t, bits, group, rows, cols);
    bool same = true;
    int c0 = group;
    int nc = 2 * group;
    for (int o = 0; o < 2; o++) {
        DType out = o ? DTYPE_BF16 : DTYPE_F32;
        size_t eo = o ? 2 : 4;
        char *tile[2];
        for (int v = 0; v < 2; v++) {
            tile[v] = calloc((size_t)rows * nc, eo);
        }
        affine_expand_base(packed, row_bytes, scales, biases, t, bits, group, cols, 1, rows - 1, c0, nc, out,
                           tile[0], (size_t)nc);
        affine_expand_avx512(packed, row_bytes, scales, biases, t, bits, group, cols, 1, rows - 1, c0, nc, out,
                             tile[1], (size_t)nc);
        same = same && memcmp(tile[0], tile[1], (size_t)(rows - 1) * nc * eo) == 0;
        for (int v = 0; v < 2; v++) {
            free(tile[v]);
        }
    }
    int N = 3;
    float *x = rand_vec((size_t)N * cols, 1.0f);
    float *bias = rand_vec((size_t)rows, 0.1f);
    float *y[2];
    for (int v = 0; v < 2; v++) {
        y[v] = calloc((size_t)N * rows, sizeof(float));
    }
    affine_gemv_base(y[0], (size_t)rows, x, packed, row_bytes, scales, biases, t, bits, group, rows, cols, bias, N);
    affine_gemv_avx512(y[1], (size_t)rows, x, packed, row_bytes, scales, biases, t, bits, group, rows, cols, bias, N);
    bool gemv = same_bits(y[0], y[1], (size_t)N * rows);
    CHECK_MSG(same && gemv, "affine %d-bit g%d %s: expansion %s, GEMV %s", bits, group, dtype_name(t),
              same ? "same" : "DIFFERENT", gemv ? "same" : "DIFFERENT");
    for (int v = 0; v < 2; v++) {
        free(y[v]);
    }
    free(x);
    free(bias);
    free(w);
    free(src);
    free(packed);
    free(scales);
    free(biases);
}

/* The bf16 GEMV of decoding: both compiles give the same bits, for an fp32
 * input and a bf16 one, rows not a multiple of 4 and columns not of 16;
 * and the result is x W^T within fp32 rounding of a float64 sum. */
static void test_bf16_gemv_variants(int rows, int cols, int N) {
    float *wf = rand_vec((size_t)rows * cols, 1.0f);
    uint16_t *w = malloc((size_t)rows * cols * sizeof *w);
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = f32_to_bf16(wf[i]);
    float *x = rand_vec((size_t)N * cols, 1.0f);
    uint16_t *x16 = malloc((size_t)N * cols * sizeof *x16);
    for (size_t i = 0; i < (size_t)N * cols; i++) x16[i] = f32_to_bf16(x[i]);
    float *bias = rand_vec((size_t)rows, 0.1f);
    for (int in16 = 0; in16 < 2; in16++) {
        float *y[2];
        for (int v = 0; v < 2; v++) y[v] = calloc((size_t)N * rows, sizeof(float));
        bf16_gemv_base(y[0], (size_t)rows, in16 ? NULL : x, in16 ? x16 : NULL, w, rows, cols, bias, N);
        bf16_gemv_avx512(y[1], (size_t)rows, in16 ? NULL : x, in16 ? x16 : NULL, w, rows, cols, bias, N);
        double worst = 0.0;
        for (int n = 0; n < N; n++) {
            for (int o = 0; o < rows; o++) {
                double ref = bias[o], mag = fabs(bias[o]);
                for (int c = 0; c < cols; c++) {
                    double xv = in16 ? bf16_to_f32(x16[(size_t)n * cols + c]) : x[(size_t)n * cols + c];
                    ref += (double)bf16_to_f32(w[(size_t)o * cols + c]) * xv;
                    mag += fabs((double)bf16_to_f32(w[(size_t)o * cols + c]) * xv);
                }
                double e = fabs(y[0][(size_t)n * rows + o] - ref) / mag;
                if (e > worst) worst = e;
            }
        }
        bool same = same_bits(y[0], y[1], (size_t)N * rows);
        CHECK_MSG(same && worst < 1e-6, "bf16 GEMV %d x %d, %d rows of %s input: variants %s, error %.2e",
                  rows, cols, N, in16 ? "bf16" : "fp32", same ? "same" : "DIFFERENT", worst);
        for (int v = 0; v < 2; v++) free(y[v]);
    }
    free(wf);
    free(w);
    free(x);
    free(x16);
    free(bias);
}

static void test_affine_all(void) {
    static const int bits[] = {2, 3, 4, 5, 6, 8};
    static const int groups[] = {32, 64, 128};
    static const DType types[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
    int cases = 0;
    for (int b = 0; b < 6; b++) {
        for (int g = 0; g < 3; g++) {
            for (int t = 0; t < 3; t++) {
                test_affine_variants(bits[b], groups[g], types[t]);
                cases++;
            }
        }
    }
    printf("affine expansion (F32 and BF16 tiles) and GEMV: %d cases of bits x group x dtype compared\n", cases);
}

/* The chunked gated delta rule, both variants, from a given start state (the
 * generation path) and from zero with chunk states saved (training), then the
 * backward. Dv of 64 and more runs the 64-column register tiles of the
 * AVX-512 variant; a partial last chunk and Dv % 16 != 0 run the tails. */
static void test_gated_delta_variants(int B, int T, int Hk, int Hv, int Dk, int Dv, int chunk) {
    GdnShape s = {.B = B, .T = T, .Hk = Hk, .Hv = Hv, .Dk = Dk, .Dv = Dv, .chunk = chunk};
    int threads = 2;
    size_t N = (size_t)B * T;
    size_t nqk = N * Hk * Dk;
    size_t nv = N * Hv * Dv;
    size_t ng = N * Hv;
    size_t nst = (size_t)B * Hv * Dk * Dv;
    size_t ncs = gdn_chunk_states_floats(&s);
    /* q, k of unit-ish norm per head and decays in (-1, 0], as the layer gives them */
    float *q = rand_vec(nqk, 0.3f);
    float *k = rand_vec(nqk, 0.3f);
    float *v = rand_vec(nv, 1.0f);
    float *g = rand_vec(ng, 0.5f);
    float *beta = rand_vec(ng, 0.5f);
    for (size_t i = 0; i < ng; i++) {
        g[i] = -fabsf(g[i]);
        beta[i] = 0.5f + beta[i];
    }
    float *dout = rand_vec(nv, 1.0f);
    float *state0 = rand_vec(nst, 0.2f);
    size_t nws = gdn_workspace_floats(&s, threads, 1);
    float *ws = malloc(nws * sizeof(float));
    float *out[2], *cs[2], *st[2], *dq[2], *dk[2], *dv[2], *dg[2], *db[2];
    for (int i = 0; i < 2; i++) {
        out[i] = calloc(nv, sizeof(float));
        cs[i] = calloc(ncs, sizeof(float));
        st[i] = malloc(nst * sizeof(float));
        memcpy(st[i], state0, nst * sizeof(float));
        dq[i] = calloc(nqk, sizeof(float));
        dk[i] = calloc(nqk, sizeof(float));
        dv[i] = calloc(nv, sizeof(float));
        dg[i] = calloc(ng, sizeof(float));
        db[i] = calloc(ng, sizeof(float));
    }
    omp_set_num_threads(threads);
    /* from a start state, final state out */
    gated_delta_forward_base(out[0], NULL, st[0], q, Hk * Dk, k, Hk * Dk, v, Hv * Dv, g, beta, ws, threads, &s);
    gated_delta_forward_avx512(out[1], NULL, st[1], q, Hk * Dk, k, Hk * Dk, v, Hv * Dv, g, beta, ws, threads, &s);
    bool dec = same_bits(out[0], out[1], nv) && same_bits(st[0], st[1], nst);
    /* from zero, chunk states saved, then the backward */
    gated_delta_forward_base(out[0], cs[0], NULL, q, Hk * Dk, k, Hk * Dk, v, Hv * Dv, g, beta, ws, threads, &s);
    gated_delta_forward_avx512(out[1], cs[1], NULL, q, Hk * Dk, k, Hk * Dk, v, Hv * Dv, g, beta, ws, threads, &s);
    bool fwd = same_bits(out[0], out[1], nv) && same_bits(cs[0], cs[1], ncs);
    gated_delta_backward_base(dq[0], dk[0], dv[0], dg[0], db[0], dout, q, Hk * Dk, k, Hk * Dk, v, Hv * Dv, g, beta,
                              cs[0], ws, threads, &s);
    gated_delta_backward_avx512(dq[1], dk[1], dv[1], dg[1], db[1], dout, q, Hk * Dk, k, Hk * Dk, v, Hv * Dv, g,
                                beta, cs[0], ws, threads, &s);
    bool bwd = same_bits(dq[0], dq[1], nqk) && same_bits(dk[0], dk[1], nqk) && same_bits(dv[0], dv[1], nv) &&
               same_bits(dg[0], dg[1], ng) && same_bits(db[0], db[1], ng);
    /* the comparison means something only if the outputs are not all zero */
    CHECK(max_abs(out[0], nv) > 0 && max_abs(dq[0], nqk) > 0 && max_abs(dg[0], ng) > 0);
    CHECK_MSG(dec, "gated delta from a state (B %d T %d Hk %d Hv %d Dk %d Dv %d chunk %d): variants differ, "
                   "max |diff| %.3g", B, T, Hk, Hv, Dk, Dv, chunk, max_abs_diff(st[0], st[1], nst));
    CHECK_MSG(fwd, "gated delta forward (B %d T %d Hk %d Hv %d Dk %d Dv %d chunk %d): variants differ, "
                   "max |diff| %.3g", B, T, Hk, Hv, Dk, Dv, chunk, max_abs_diff(out[0], out[1], nv));
    CHECK_MSG(bwd, "gated delta backward (B %d T %d Hk %d Hv %d Dk %d Dv %d chunk %d): variants differ, "
                   "max |diff| %.3g", B, T, Hk, Hv, Dk, Dv, chunk, max_abs_diff(dq[0], dq[1], nqk));
    printf("gated delta B %d T %3d Hk %d Hv %d Dk %3d Dv %3d chunk %2d: from a state %s, forward %s, backward %s\n",
           B, T, Hk, Hv, Dk, Dv, chunk, dec ? "same bits" : "DIFFERENT", fwd ? "same bits" : "DIFFERENT",
           bwd ? "same bits" : "DIFFERENT");
    for (int i = 0; i < 2; i++) {
        free(out[i]);
        free(cs[i]);
        free(st[i]);
        free(dq[i]);
        free(dk[i]);
        free(dv[i]);
        free(dg[i]);
        free(db[i]);
    }
    free(q);
    free(k);
    free(v);
    free(g);
    free(beta);
    free(dout);
    free(state0);
    free(ws);
}
#endif

#if defined(LT_ISA_DISPATCH)
/* GLU forward, backward (accumulating and set), rows of stride ld (fused gate_up: 2F) */
static void test_glu_variants(int act, size_t rows, size_t F, bool fused) {
    size_t ld = fused ? 2 * F : F, n = rows * ld;
    float *gu = rand_vec(2 * n, 6.0f), *dout = rand_vec(rows * F, 1.0f);
    const float *g = gu, *u = fused ? gu + F : gu + n;
    float *out[2], *dgu[2], *dgs[2];
    for (int i = 0; i < 2; i++) {
        out[i] = calloc(rows * F, sizeof(float));
        dgu[i] = rand_vec(2 * n, 1.0f);
        dgs[i] = calloc(2 * n, sizeof(float));
    }
    memcpy(dgu[1], dgu[0], 2 * n * sizeof(float));
    glu_forward_base(out[0], g, u, rows, F, ld, act);
    glu_forward_avx512(out[1], g, u, rows, F, ld, act);
    glu_backward_base(dgu[0], dgu[0] + (fused ? F : n), dout, g, u, rows, F, ld, act);
    glu_backward_avx512(dgu[1], dgu[1] + (fused ? F : n), dout, g, u, rows, F, ld, act);
    glu_backward_set_base(dgs[0], dgs[0] + (fused ? F : n), dout, g, u, rows, F, ld, act);
    glu_backward_set_avx512(dgs[1], dgs[1] + (fused ? F : n), dout, g, u, rows, F, ld, act);
    bool fwd = same_bits(out[0], out[1], rows * F), bwd = same_bits(dgu[0], dgu[1], 2 * n),
         set = same_bits(dgs[0], dgs[1], 2 * n);
    CHECK_MSG(fwd && bwd && set, "glu act %d rows %zu F %zu%s: variants differ (forward %d, backward %d, set %d)", act,
              rows, F, fused ? " fused" : "", fwd, bwd, set);
    printf("glu act %d rows %zu F %zu%s: %s\n", act, rows, F, fused ? " fused" : "",
           fwd && bwd && set ? "same bits" : "DIFFERENT");
    for (int i = 0; i < 2; i++) {
        free(out[i]);
        free(dgu[i]);
        free(dgs[i]);
    }
    free(gu);
    free(dout);
}
#endif

/* The choice under LMTUNE_NO_AVX512=1, from a child process. */
static void test_switch(const char *self) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "LMTUNE_NO_AVX512=1 '%s' --describe", self);
    FILE *p = popen(cmd, "r");
    char line[256] = "";
    CHECK(p && fgets(line, sizeof line, p));
    if (p) {
        CHECK(pclose(p) == 0);
    }
    printf("with LMTUNE_NO_AVX512=1: %s", line);
#if defined(__x86_64__)
    CHECK_MSG(strstr(line, "avx512 0 bf16 0 attention-bf16 0") != NULL, "LMTUNE_NO_AVX512=1 left something on: %s",
              line);
#endif
#if defined(LT_ISA_DISPATCH)
    CHECK_MSG(strstr(line, "disabled by LMTUNE_NO_AVX512") || strstr(line, "no AVX-512 on this CPU"), "%s", line);
#endif
}

/* Decoding's attention over a KV cache (attention_cached): the T positions
 * of one sequence fed in chunks of `chunk` rows, each chunk over the cache
 * filled so far. Both variants give the same bits, and the rows equal the
 * flash kernel's causal (or windowed, soft-capped) output on the same q, k,
 * v, within float rounding: two implementations, one reference. */
static void test_attention_cached(int T, int H, int KVH, int D, int chunk, int window, float cap) {
    AttnCase c = attn_case(1, T, H, KVH, D);
    AttnParams ap = {.scale = 1.0f / sqrtf((float)D), .window = window, .softcap = cap};
    AttnRun flash = attn_run_new(&c);
    attention_forward(flash.out, flash.lse, c.q, c.k, c.v, 1, T, H, KVH, D, &ap);
    float *ob = calloc(c.nq, sizeof(float)), *oa = calloc(c.nq, sizeof(float));
    float *scores = malloc((size_t)H * T * sizeof(float));
    int QD = H * D;
    for (int p0 = 0; p0 < T; p0 += chunk) {   /* the cache holds every position: slot p is position p */
        int rows = T - p0 < chunk ? T - p0 : chunk;
        attention_cached_base(ob + (size_t)p0 * QD, c.q + (size_t)p0 * QD, c.k, c.v, scores, (size_t)T, rows, p0, T,
                              H, KVH, D, &ap);
        attention_cached_avx512(oa + (size_t)p0 * QD, c.q + (size_t)p0 * QD, c.k, c.v, scores, (size_t)T, rows, p0,
                                T, H, KVH, D, &ap);
    }
    char what[160];
    snprintf(what, sizeof what, "attention_cached T=%d H=%d KVH=%d D=%d chunk=%d window=%d cap=%g", T, H, KVH, D,
             chunk, window, cap);
    CHECK_MSG(same_bits(ob, oa, c.nq), "%s: the AVX-512 variant's bits differ", what);
    double err = rel_l2(oa, flash.out, c.nq);
    CHECK_MSG(err < 1e-6, "%s: relative L2 %.2e from the flash kernel", what, err);
    printf("%s: same bits in both variants, %.2e from the flash kernel\n", what, err);
    free(ob);
    free(oa);
    free(scores);
    attn_run_free(&flash);
    attn_case_free(&c);
}

/* A prompt through attention_prefill in chunks (p0 multiples of 64): each
 * chunk's output and log-sum-exp are the rows of the training forward over
 * the whole sequence, bit for bit (the same tiles, in the same order), in
 * each variant; with bf16 tile products too where they apply. */
static void test_attention_prefill(int T, int H, int KVH, int D, int chunk, int window, float cap, bool bf16) {
    AttnCase c = attn_case(1, T, H, KVH, D);
    AttnParams ap = {.scale = 1.0f / sqrtf((float)D), .window = window, .softcap = cap, .bf16 = bf16};
    int QD = H * D;
    __typeof__(attention_forward) *fwd[2] = {attention_forward_base, attention_forward_avx512};
    __typeof__(attention_prefill) *pre[2] = {attention_prefill_base, attention_prefill_avx512};
    char what[160];
    snprintf(what, sizeof what, "attention_prefill T=%d H=%d KVH=%d D=%d chunk=%d window=%d cap=%g bf16=%d", T, H,
             KVH, D, chunk, window, cap, bf16);
    for (int variant = 0; variant < 2; variant++) {
        AttnRun whole = attn_run_new(&c);
        fwd[variant](whole.out, whole.lse, c.q, c.k, c.v, 1, T, H, KVH, D, &ap);
        float *out = calloc(c.nq, sizeof(float)), *lse = calloc((size_t)H * chunk, sizeof(float));
        bool same_lse = true;
        for (int p0 = 0; p0 < T; p0 += chunk) {
            int rows = T - p0 < chunk ? T - p0 : chunk;
            pre[variant](out + (size_t)p0 * QD, lse, c.q + (size_t)p0 * QD, c.k, c.v, rows, p0, H, KVH, D, &ap);
            for (int h = 0; h < H; h++)
                same_lse &= same_bits(lse + (size_t)h * rows, whole.lse + (size_t)h * T + p0, (size_t)rows);
        }
        CHECK_MSG(same_bits(out, whole.out, c.nq) && same_lse, "%s (%s): not the bits of the whole forward, "
                  "max |diff| %.3g", what, variant ? "AVX-512" : "portable", max_abs_diff(out, whole.out, c.nq));
        free(out);
        free(lse);
        attn_run_free(&whole);
    }
    printf("%s: the whole forward's bits in both variants\n", what);
    attn_case_free(&c);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--describe")) {
        printf("%s: avx512 %d bf16 %d attention-bf16 %d\n", isa_describe(), isa_avx512(), matmul_bf16_supported(),
               attention_bf16_supported());
        return 0;
    }
    printf("kernels: %s; bf16 products: %s\n", isa_describe(), matmul_bf16_supported() ? "yes" : "no");
    test_bf16_vectors();
#if defined(LT_ISA_DISPATCH)
    if (isa_avx512()) {
        test_attention_variants(2, 100, 4, 2, 24, 0, 0.0f);
        test_attention_variants(1, 128, 2, 2, 64, 0, 0.0f);
        test_attention_variants(1, 70, 6, 3, 80, 0, 0.0f);
        /* windows shorter than a tile and across tiles (tiles skipped), soft-capping, both */
        test_attention_variants(1, 200, 4, 2, 64, 37, 0.0f);
        test_attention_variants(2, 150, 2, 1, 24, 5, 0.0f);
        test_attention_variants(1, 130, 4, 2, 32, 0, 2.5f);
        test_attention_variants(1, 190, 2, 1, 256, 70, 3.0f);
        /* bf16 tile products: SmolLM2's and Llama's heads, D 128 and 256, partial tiles, windows, soft-capping,
         * and a head dim that keeps fp32 */
        test_attention_bf16(2, 300, 9, 3, 64, 0, 0.0f);
        test_attention_bf16(1, 256, 4, 1, 128, 0, 0.0f);
        test_attention_bf16(1, 200, 4, 2, 64, 37, 0.0f);
        test_attention_bf16(1, 130, 4, 2, 32, 0, 2.5f);
        test_attention_bf16(1, 190, 2, 1, 256, 70, 3.0f);
        test_attention_bf16(1, 70, 6, 3, 80, 0, 0.0f);
        /* the backward's keys cut in segments (dq partials summed at the end): both variants, one thread and
         * two, causal (uneven segments), a window, soft-capping, a partial last tile */
        attn_splits = 3;
        test_attention_variants(1, 300, 9, 3, 64, 0, 0.0f);
        test_attention_variants(2, 200, 4, 2, 64, 37, 0.0f);
        test_attention_variants(1, 190, 2, 1, 24, 0, 2.5f);
        test_attention_bf16(1, 300, 9, 3, 64, 0, 0.0f);
        test_attention_bf16(1, 200, 4, 2, 64, 37, 0.0f);
        attn_splits = 1;
        /* D_i from the rounded dO (a deep cancellation: values with a common offset) */
        test_attention_bf16_offset(2, 300, 9, 3, 64, 0, 0.0f);
        test_attention_bf16_offset(1, 256, 4, 1, 128, 0, 0.0f);
        test_attention_bf16_offset(1, 130, 4, 2, 32, 0, 2.5f);
        test_attention_bf16_offset(1, 190, 2, 1, 256, 70, 3.0f);
        /* decoding: the prompt in chunks (128 rows, as decode.c), one token at a time, a head dim not a
         * multiple of 16, a sliding window, soft-capping */
        /* the prompt's chunks through the training forward's tiles */
        test_attention_prefill(300, 9, 3, 64, 128, 0, 0.0f, false);
        test_attention_prefill(200, 4, 2, 24, 64, 37, 0.0f, false);
        test_attention_prefill(150, 2, 1, 80, 64, 0, 2.5f, false);
        test_attention_prefill(300, 9, 3, 64, 128, 0, 0.0f, true);
        test_attention_prefill(260, 4, 1, 128, 192, 70, 0.0f, true);
        test_attention_cached(300, 9, 3, 64, 128, 0, 0.0f);
        test_attention_cached(40, 4, 2, 128, 1, 0, 0.0f);
        test_attention_cached(70, 6, 3, 80, 16, 0, 0.0f);
        test_attention_cached(150, 4, 2, 24, 32, 37, 0.0f);
        test_attention_cached(130, 4, 2, 256, 64, 0, 2.5f);
        test_lmhead_variants(DTYPE_F32, 0.0f);
        test_lmhead_variants(DTYPE_F32, 4.0f);
        if (matmul_bf16_supported()) {
            test_lmhead_variants(DTYPE_BF16, 0.0f);
            test_lmhead_variants(DTYPE_BF16, 4.0f);
        }
        test_affine_all();
        test_bf16_gemv_variants(37, 200, 1);
        test_bf16_gemv_variants(64, 896, 4);
        test_gated_delta_variants(2, 100, 2, 4, 32, 64, 16);
        test_gated_delta_variants(1, 70, 1, 2, 24, 40, 64);
        test_gated_delta_variants(1, 130, 2, 2, 128, 128, 64);
        for (int act = 0; act < 2; act++) {
            test_glu_variants(act, 37, 29, false);   /* a vector and a scalar tail per row */
            test_glu_variants(act, 5, 4100, true);   /* rows split across work items */
        }
    } else {
        printf("no AVX-512 variant runs here: the variants are not compared\n");
    }
#else
    printf("a build without the start-up choice: one variant, nothing to compare\n");
#endif
    char self[1024];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    self[len > 0 ? len : 0] = 0;
    test_switch(self);
    return check_finish("kernels/isa");
}

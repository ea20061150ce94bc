/* lora.c: one linear projection of a block as training sees it: the frozen
 * or fully trainable base (W x + b), plus MLX-LM's LoRA branch
 * scale * ((dropout(x) @ A) @ B), or DoRA's magnitude rescaling
 * (m / stop_grad(||W + scale (AB)^T||_row)) * (W x + scale (x A) B) + b.
 * Dropout masks are regenerated from a counter-based hash of
 * (step seed, layer, projection, element), never stored. DoRA's adapted row
 * norms are computed without the (out x in) matrix:
 *   ||w_o + s (AB)[:,o]||^2 = ||w_o||^2 + 2 s ((W A) B)[o,o] + s^2 B[:,o]^T (A^T A) B[:,o]. */
#include "model/model_internal.h"
#include "kernels/matmul.h"
#include "base/profile.h"
#include <math.h>
#include <string.h>

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* 1/(1-p) where the element is kept, 0 where dropped. */
static inline float drop_factor(uint64_t stream, size_t i, float p, float keep_scale) {
    uint64_t h = mix64(stream + (uint64_t)i * 0x9e3779b97f4a7c15ull);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f);
    return u < p ? 0.0f : keep_scale;
}

static uint64_t drop_stream(const Model *m, int layer, int p) {
    return mix64(m->dropout_seed ^ mix64(((uint64_t)layer << 8) + (uint64_t)p + 1));
}

/* dst = src * mask (elementwise), or dst += src * mask when accumulate. */
static void apply_dropout(const Model *m, int layer, int p, float *dst, const float *src, size_t n, bool accumulate) {
    float pr = m->spec.lora_dropout, ks = 1.0f / (1.0f - pr);
    uint64_t st = drop_stream(m, layer, p);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float f = drop_factor(st, i, pr, ks);
        if (accumulate)
            dst[i] += src[i] * f;
        else
            dst[i] = src[i] * f;
    }
}

static const float *proj_bias(const BlockParams *bp, int p) { return p <= PROJ_V ? bp->bias[p] : NULL; }

static void lora_forward(Model *m, const BlockParams *bp, int layer, int p,
                         float *out, const float *x, float *xa, int N, bool skip_base);

const uint16_t *proj_shared_input(const BlockParams *bp, unsigned mask, const float *x, int N, int in) {
    FOR_EACH_PROJ(p, mask)
        if (bp->w[p].compute == DTYPE_BF16) {
            double t0 = prof_begin();
            const uint16_t *x16 = matmul_bf16_input(x, (size_t)N, (size_t)in);
            prof_end(PROF_PROJ, t0);
            return x16;
        }
    return NULL;
}

/* The base product of p alone (a member of a merged group: its LoRA branch
 * follows in lora_group_forward). */
void proj_forward_base(Model *m, const BlockParams *bp, int p, float *out, const float *x, const uint16_t *x16,
                       int N) {
    (void)m;
    bool dora = (bp->adapted >> p & 1u) && bp->dm[p];
    double t0 = prof_begin();
    fw_linear_forward(out, x, x16, &bp->w[p], dora ? NULL : proj_bias(bp, p), N);
    prof_end(PROF_PROJ, t0);
}

void proj_forward(Model *m, const BlockParams *bp, int layer, int p,
                  float *out, const float *x, const uint16_t *x16, float *xa, int N, bool skip_base) {
    int in, od;
    proj_shape(&m->d, p, &in, &od);
    bool adapted = bp->adapted >> p & 1u;
    bool dora = adapted && bp->dm[p];
    const float *bias = dora ? NULL : proj_bias(bp, p);
    if (!skip_base) {
        double t0 = prof_begin();
        fw_linear_forward(out, x, x16, &bp->w[p], bias, N);
        prof_end(PROF_PROJ, t0);
    }
    if (!adapted) return;
    double t0 = prof_begin();
    lora_forward(m, bp, layer, p, out, x, xa, N, skip_base);
    prof_end(PROF_LORA, t0);
}

/* out += scale (x A) B, then DoRA's rescaling (and the bias it defers). */
static void lora_forward_b(Model *m, const BlockParams *bp, int p, float *out, const float *xa, int N) {
    int in, od;
    proj_shape(&m->d, p, &in, &od);
    const float *bias = proj_bias(bp, p);
    gemm_f32(out, xa, bp->lb[p], N, od, m->d.r, false, false, m->spec.lora_scale, 1.0f);
    if (bp->dm[p]) {
        const float *mg = bp->dm[p], *nr = bp->dnorm[p];
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *row = out + (size_t)n * od;
            for (int o = 0; o < od; o++) row[o] = row[o] * (mg[o] / nr[o]) + (bias ? bias[o] : 0.0f);
        }
    }
}

static void lora_forward(Model *m, const BlockParams *bp, int layer, int p,
                         float *out, const float *x, float *xa, int N, bool skip_base) {
    int in, od;
    proj_shape(&m->d, p, &in, &od);
    int r = m->d.r;
    const float *xs = x;
    if (m->d.dropout) {
        apply_dropout(m, layer, p, m->ls.drop_x, x, (size_t)N * in, false);
        xs = m->ls.drop_x;
    }
    gemm_f32(xa, xs, bp->la[p], N, r, in, false, false, 1.0f, 0.0f);
    if (skip_base) return;
    lora_forward_b(m, bp, p, out, xa, N);
}

/* ------------------------------------------------ LoRA A products merged
 * q/k/v read one input (ln1) and gate/up another (ln2). Without dropout
 * (MLX-LM draws one mask per projection, so with dropout the inputs differ)
 * the A products of the adapted ones among them are one product,
 * x (N, in) @ [A_p | A_q | ...] (in, g r): x is read once instead of g
 * times; backward, dA^T of all of them is one product (dxa_cat^T x) and
 * the input gradient one (dx += dxa_cat [A_p | ...]^T) instead of g
 * read-modify-write passes over dx. The B side stays per projection. Each
 * x@A and its gradient are the same sums as unmerged (rounding aside). */
bool lora_merge_ok(const Dims *d, int N) {
    return d->train && d->r > 0 && !d->dropout && N <= d->N;
}

unsigned lora_group(const Model *m, const BlockParams *bp, unsigned mask, int N) {
    if (!lora_merge_ok(&m->d, N) || !m->sc.xa_grp) return 0;
    unsigned g = bp->adapted & mask;
    return __builtin_popcount(g) >= 2 ? g : 0;
}

/* [A_p | A_q | ...] (in, g r) into m->sc.a_cat; returns g r. */
static int pack_a(Model *m, const BlockParams *bp, unsigned grp, int in) {
    int r = m->d.r, gr = r * __builtin_popcount(grp), k = 0;
    float *ac = m->sc.a_cat;
    FOR_EACH_PROJ(p, grp) {
        const float *A = bp->la[p];
        for (int i = 0; i < in; i++) memcpy(ac + (size_t)i * gr + (size_t)k * r, A + (size_t)i * r, (size_t)r * 4);
        k++;
    }
    return gr;
}

/* columns [k r, (k + 1) r) of src (N, g r) <-> dst (N, r) */
static void slot_copy(float *dst, size_t ldd, const float *src, size_t lds, int N, int r) {
    for (int n = 0; n < N; n++) memcpy(dst + (size_t)n * ldd, src + (size_t)n * lds, (size_t)r * 4);
}

void lora_group_forward(Model *m, const BlockParams *bp, unsigned grp, float *const outs[PROJ_COUNT],
                        float *const xa[PROJ_COUNT], const float *x, int N) {
    double t0 = prof_begin();
    int in, od, r = m->d.r, k = 0;
    proj_shape(&m->d, __builtin_ctz(grp), &in, &od);
    int gr = pack_a(m, bp, grp, in);
    float *cat = m->sc.xa_grp;
    gemm_f32(cat, x, m->sc.a_cat, N, gr, in, false, false, 1.0f, 0.0f);
    FOR_EACH_PROJ(p, grp) {
        /* one xa scratch may serve every projection (forward workspace): each B product follows its copy */
        slot_copy(xa[p], (size_t)r, cat + (size_t)k * r, (size_t)gr, N, r);
        if (outs[p]) lora_forward_b(m, bp, p, outs[p], xa[p], N);
        k++;
    }
    prof_end(PROF_LORA, t0);
}

/* dx may be NULL when the input gradient is not needed. */
static void lora_backward(Model *m, const BlockParams *bp, int layer, int p,
                          float *dx, const float *dy, const float *x, const float *xa, int N);

static void proj_backward_impl(Model *m, const BlockParams *bp, int layer, int p, float *dx, bool dx_set,
                               const float *dout, const float *x, const float *xa, int N, int grp);

void proj_backward(Model *m, const BlockParams *bp, int layer, int p,
                   float *dx, bool dx_set, const float *dout, const float *x, const float *xa, int N) {
    proj_backward_impl(m, bp, layer, p, dx, dx_set, dout, x, xa, N, -1);
}

/* proj_backward of p, a member of the merged group grp (lora_group): its
 * dxa goes into its columns of m->sc.xa_grp (N, g r) (members in PROJ_*
 * order); its dA and its LoRA part of dx are left to lora_group_backward. */
void proj_backward_grouped(Model *m, const BlockParams *bp, int layer, int p, float *dx, bool dx_set,
                           const float *dout, const float *x, const float *xa, int N, unsigned grp) {
    proj_backward_impl(m, bp, layer, p, dx, dx_set, dout, x, xa, N, (int)grp);
}

static void proj_backward_impl(Model *m, const BlockParams *bp, int layer, int p, float *dx, bool dx_set,
                               const float *dout, const float *x, const float *xa, int N, int grp) {
    int in, od;
    proj_shape(&m->d, p, &in, &od);
    bool adapted = bp->adapted >> p & 1u;
    bool dora = adapted && bp->dm[p];
    int r = m->d.r;
    float scale = m->spec.lora_scale;
    const float *dy = dout;
    double t0 = prof_begin();   /* DoRA's rescaling counts as LoRA work */
    if (dora) {
        /* rebuild the unscaled output y = W x + s (xA) B, then
         * dm[o] += sum_n dout[n,o] y[n,o] / norm[o], dy = dout * m / norm */
        float *y = m->sc.ylin;
        fw_linear_forward(y, x, NULL, &bp->w[p], NULL, N);
        gemm_f32(y, xa, bp->lb[p], N, od, r, false, false, scale, 1.0f);
        const float *mg = bp->dm[p], *nr = bp->dnorm[p];
        float *ddm = bp->ddm[p];
        /* column sums in blocks of 16 columns: row-contiguous reads, fixed order */
        int nb = (od + 15) / 16;
        #pragma omp parallel for schedule(static)
        for (int ob = 0; ob < nb; ob++) {
            int o0 = ob * 16, w = od - o0 < 16 ? od - o0 : 16;
            double acc[16] = {0};
            for (int n = 0; n < N; n++) {
                const float *dr = dout + (size_t)n * od + o0, *yr = y + (size_t)n * od + o0;
                for (int j = 0; j < w; j++) acc[j] += (double)dr[j] * yr[j];
            }
            for (int j = 0; j < w; j++) ddm[o0 + j] += (float)(acc[j] / nr[o0 + j]);
        }
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < od; o++) y[(size_t)n * od + o] = dout[(size_t)n * od + o] * (mg[o] / nr[o]);
        dy = y;
    }
    float *dbias = p <= PROJ_V ? bp->dbias[p] : NULL;
    prof_end(PROF_LORA, t0);
    t0 = prof_begin();
    if (bp->dw[p] || dbias) {
        /* trainable weight or bias: one call computes dx and accumulates dW, db (plain F32 weights) */
        const FrozenWeight *w = &bp->w[p];
        if (dx_set) linear_backward_set_dinp(dx, bp->dw[p], dbias, dy, x, w->data, w->dtype, N, in, od);
        else linear_backward(dx, bp->dw[p], dbias, dy, x, w->data, w->dtype, N, in, od);
    } else if (dx) {
        fw_linear_backward_dinp(dx, dx_set ? 0.0f : 1.0f, dy, NULL, 0, &bp->w[p], N);
    }
    prof_end(PROF_PROJ, t0);
    if (!adapted) return;
    t0 = prof_begin();
    if (grp > 0) {
        float *dxa = m->sc.dxa;
        gemm_f32(bp->dlb[p], xa, dy, r, od, N, true, false, scale, 1.0f);   /* dB += s xa^T dy */
        gemm_f32(dxa, dy, bp->lb[p], N, r, od, false, true, scale, 0.0f);  /* dxa = s dy B^T */
        int g = __builtin_popcount((unsigned)grp), slot = __builtin_popcount((unsigned)grp & ((1u << p) - 1u));
        slot_copy(m->sc.xa_grp + (size_t)slot * r, (size_t)g * r, dxa, (size_t)r, N, r);
    } else {
        lora_backward(m, bp, layer, p, dx, dy, x, xa, N);
    }
    prof_end(PROF_LORA, t0);
}

/* After every member's proj_backward_grouped: dA of each (one product for
 * all) and dx += dxa_cat [A_p | ...]^T (one product; dx NULL: not needed). */
void lora_group_backward(Model *m, const BlockParams *bp, unsigned grp, float *dx, const float *x, int N) {
    double t0 = prof_begin();
    int in, od, r = m->d.r, k = 0;
    proj_shape(&m->d, __builtin_ctz(grp), &in, &od);
    int gr = pack_a(m, bp, grp, in);
    const float *dcat = m->sc.xa_grp;
    float *dat = m->sc.dat;
    gemm_f32(dat, dcat, x, gr, in, N, true, false, 1.0f, 0.0f);            /* dA_cat^T = dxa_cat^T x */
    FOR_EACH_PROJ(p, grp) {
        float *dla = bp->dla[p];
        const float *src = dat + (size_t)k * r * in;
        for (int i = 0; i < in; i++)
            for (int j = 0; j < r; j++) dla[(size_t)i * r + j] += src[(size_t)j * in + i];
        k++;
    }
    if (dx) gemm_f32(dx, dcat, m->sc.a_cat, N, in, gr, false, true, 1.0f, 1.0f);  /* dx += dxa_cat A_cat^T */
    prof_end(PROF_LORA, t0);
}

static void lora_backward(Model *m, const BlockParams *bp, int layer, int p,
                          float *dx, const float *dy, const float *x, const float *xa, int N) {
    int in, od;
    proj_shape(&m->d, p, &in, &od);
    int r = m->d.r;
    float scale = m->spec.lora_scale;
    float *dxa = m->sc.dxa;
    gemm_f32(bp->dlb[p], xa, dy, r, od, N, true, false, scale, 1.0f);   /* dB += s xa^T dy */
    gemm_f32(dxa, dy, bp->lb[p], N, r, od, false, true, scale, 0.0f);  /* dxa = s dy B^T */
    const float *xs = x;
    if (m->d.dropout) {
        apply_dropout(m, layer, p, m->ls.drop_x, x, (size_t)N * in, false);
        xs = m->ls.drop_x;
    }
    /* dA (in, r) += xs^T dxa, computed transposed: oneDNN runs the (r, N) x
     * (N, in) product about twice as fast as the (in, N) x (N, r) one */
    float *dat = m->sc.dat;
    gemm_f32(dat, dxa, xs, r, in, N, true, false, 1.0f, 0.0f);          /* dA^T = dxa^T xs */
    float *dla = bp->dla[p];
    for (int i = 0; i < in; i++)
        for (int j = 0; j < r; j++) dla[(size_t)i * r + j] += dat[(size_t)j * in + i];
    if (!dx) return;
    if (m->d.dropout) {
        gemm_f32(m->ls.drop_x, dxa, bp->la[p], N, in, r, false, true, 1.0f, 0.0f);
        apply_dropout(m, layer, p, dx, m->ls.drop_x, (size_t)N * in, true);
    } else {
        gemm_f32(dx, dxa, bp->la[p], N, in, r, false, true, 1.0f, 1.0f); /* dx += dxa A^T */
    }
}

void dora_update_norms(Model *m) {
    if (m->spec.type != TUNE_DORA || m->dora_frozen) return;
    const Dims *d = &m->d;
    int r = d->r;
    float s = m->spec.lora_scale;
    LoraScratch *ls = &m->ls;
    for (int l = d->lo; l < d->L; l++) {
        BlockParams *bp = &m->blocks[l];
        FOR_EACH_PROJ(p, bp->adapted) {
            int in, od;
            proj_shape(d, p, &in, &od);
            const float *A = bp->la[p], *B = bp->lb[p];
            for (int i = 0; i < in; i++)
                for (int k = 0; k < r; k++) ls->at[(size_t)k * in + i] = A[(size_t)i * r + k];
            fw_linear_forward(ls->wa, ls->at, NULL, &bp->w[p], NULL, r);  /* (W A)^T (r, out) */
            gemm_f32(ls->g, A, A, r, r, in, true, false, 1.0f, 0.0f);           /* A^T A */
            gemm_f32(ls->gb, ls->g, B, r, od, r, false, false, 1.0f, 0.0f);      /* (A^T A) B */
            const float *w2 = bp->wnorm2[p];
            float *nr = bp->dnorm[p];
            #pragma omp parallel for schedule(static)
            for (int o = 0; o < od; o++) {
                double cross = 0, quad = 0;
                for (int k = 0; k < r; k++) {
                    double b = B[(size_t)k * od + o];
                    cross += (double)ls->wa[(size_t)k * od + o] * b;
                    quad += (double)ls->gb[(size_t)k * od + o] * b;
                }
                double n2 = (double)w2[o] + 2.0 * s * cross + (double)s * s * quad;
                nr[o] = (float)sqrt(n2 > 0 ? n2 : 0);
            }
        }
    }
    m->dora_fresh = true;
}

void model_freeze_dora_norms(Model *m, bool frozen) { m->dora_frozen = frozen; }

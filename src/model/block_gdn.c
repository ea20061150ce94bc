/* block_gdn.c: the token mixer of Qwen3.5's linear-attention blocks, the
 * Gated DeltaNet, as a block half (the MLP half is block.c's):
 *   ln1 = rmsnorm(x_in)
 *   qkv, z, b, a = in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (ln1)
 *   conv = silu(causal depthwise conv1d(qkv)); q, k, v = split(conv)
 *   qn = l2norm(q) / sqrt(Dk), kn = l2norm(k); g, beta = gates(a, b)
 *   core = gated delta rule (qn, kn, v, g, beta), chunked
 *   gy = gated_rmsnorm(core, z); x_mid = x_in + out_proj(gy)
 * (kernels/gated_delta.h has the equations and where they were verified).
 * A trainable block keeps the projections' outputs (qkv, z, a, b), the
 * rule's output, the gated norm's rstd and the state at each chunk's start;
 * conv, qn, kn, g, beta and gy are rebuilt in the backward pass from those
 * (a few element-wise passes), in a region all blocks share. Generation
 * carries per layer the last K-1 conv inputs and the (Hv, Dk, Dv) state. */
#include "model/model_internal.h"
#include "kernels/gated_delta.h"
#include "kernels/ops.h"
#include "base/profile.h"
#include <math.h>
#include <string.h>

/* the four input projections, which read the same ln1 */
#define GDN_IN_PROJS (1u << PROJ_LQKV | 1u << PROJ_LZ | 1u << PROJ_LB | 1u << PROJ_LA)

static const float L2_EPS = 1e-6f;   /* transformers' l2norm (and FLA's) */

static void zero(float *p, size_t n) {
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) p[i] = 0.0f;
}

static GdnShape shape(const Dims *d, int B, int T) {
    GdnShape s = {B, T, d->g.Hk, d->g.Hv, d->g.Dk, d->g.Dv, d->g.chunk};
    return s;
}

/* conv, qn, kn, g, beta from the saved projections (N = B * T rows). */
static void rebuild_inputs(Model *m, const BlockParams *bp, const BlockActs *a, int B, int T) {
    const GdnDims *g = &m->d.g;
    int N = B * T;
    PROF(PROF_GDN, conv1d_silu_forward(a->conv, a->qkv, bp->conv_w, NULL, NULL, B, T, g->CC, g->K));
    PROF(PROF_GDN, l2norm_forward(a->qn, a->qr, a->conv, g->CC, 1.0f / sqrtf((float)g->Dk), L2_EPS, N, g->Hk, g->Dk));
    PROF(PROF_GDN, l2norm_forward(a->kn, a->kr, a->conv + g->Kd, g->CC, 1.0f, L2_EPS, N, g->Hk, g->Dk));
    PROF(PROF_GDN, gdn_gates_forward(a->g, a->beta, a->ga, a->gb, bp->A_log, bp->dt_bias, N, g->Hv));
}

void gdn_mixer_forward(Model *m, int layer, const BlockActs *a, int B, int T) {
    const Dims *d = &m->d;
    const GdnDims *g = &d->g;
    const BlockParams *bp = &m->blocks[layer];
    int N = B * T, C = d->C;
    float eps = m->cfg.rms_norm_eps;
    PROF(PROF_NORM, rmsnorm_forward(a->ln1, a->rstd1, a->x_in, bp->ln1, d->norm_off, eps, N, C));
    const uint16_t *ln1_16 = proj_shared_input(bp, GDN_IN_PROJS, a->ln1, N, C);
    proj_forward(m, bp, layer, PROJ_LQKV, a->qkv, a->ln1, ln1_16, a->xa[PROJ_LQKV], N, false);
    proj_forward(m, bp, layer, PROJ_LZ, a->z, a->ln1, ln1_16, a->xa[PROJ_LZ], N, false);
    proj_forward(m, bp, layer, PROJ_LB, a->gb, a->ln1, ln1_16, a->xa[PROJ_LB], N, false);
    proj_forward(m, bp, layer, PROJ_LA, a->ga, a->ln1, ln1_16, a->xa[PROJ_LA], N, false);
    rebuild_inputs(m, bp, a, B, T);
    GdnShape s = shape(d, B, T);
    PROF(PROF_GDN, gated_delta_forward(a->core, a->states, NULL, a->qn, g->Kd, a->kn, g->Kd, a->conv + 2 * g->Kd,
                                       g->CC, a->g, a->beta, m->sc.gdn_ws, g->threads, &s));
    PROF(PROF_GDN, gated_rmsnorm_forward(a->gy, a->grstd, a->core, a->z, bp->gnorm, eps, N * g->Hv, g->Dv));
    proj_forward(m, bp, layer, PROJ_LOUT, a->x_mid, a->gy, NULL, a->xa[PROJ_LOUT], N, false);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < (size_t)N * C; i++) a->x_mid[i] += a->x_in[i];
}

void gdn_mixer_backward(Model *m, int layer, const BlockActs *a, int B, int T) {
    const Dims *d = &m->d;
    const GdnDims *g = &d->g;
    const BlockParams *bp = &m->blocks[layer];
    Scratch *sc = &m->sc;
    int N = B * T, C = d->C;
    size_t NV = (size_t)N * g->Vd, NH = (size_t)N * g->Hv;
    float eps = m->cfg.rms_norm_eps;
    /* the shared intermediates are rebuilt (another block used them since) */
    rebuild_inputs(m, bp, a, B, T);
    PROF(PROF_GDN, gated_rmsnorm_forward(a->gy, a->grstd, a->core, a->z, bp->gnorm, eps, N * g->Hv, g->Dv));

    /* x_mid = x_in + out_proj(gy): d(x_in) starts as d(x_mid) (sc->dres) */
    proj_backward(m, bp, layer, PROJ_LOUT, sc->dgy, true, sc->dres, a->gy, a->xa[PROJ_LOUT], N);
    PROF(PROF_ELEMENT, zero(sc->dcore, NV));
    PROF(PROF_ELEMENT, zero(sc->dz, NV));
    PROF(PROF_GDN, gated_rmsnorm_backward(sc->dcore, sc->dz, bp->dgnorm, sc->dgy, a->core, a->z, bp->gnorm,
                                          a->grstd, N * g->Hv, g->Dv));
    PROF(PROF_ELEMENT, zero(sc->dqn, (size_t)N * g->Kd));
    PROF(PROF_ELEMENT, zero(sc->dkn, (size_t)N * g->Kd));
    PROF(PROF_ELEMENT, zero(sc->dconv, (size_t)N * g->CC));
    PROF(PROF_ELEMENT, zero(sc->dg, NH));
    PROF(PROF_ELEMENT, zero(sc->dbeta, NH));
    GdnShape s = shape(d, B, T);
    PROF(PROF_GDN, gated_delta_backward(sc->dqn, sc->dkn, sc->dconv + 2 * g->Kd, sc->dg, sc->dbeta, sc->dcore,
                                        a->qn, g->Kd, a->kn, g->Kd, a->conv + 2 * g->Kd, g->CC, a->g, a->beta,
                                        a->states, sc->gdn_ws, g->threads, &s));
    PROF(PROF_GDN, l2norm_backward(sc->dconv, sc->dqn, a->conv, g->CC, a->qr, 1.0f / sqrtf((float)g->Dk), N,
                                   g->Hk, g->Dk));
    PROF(PROF_GDN, l2norm_backward(sc->dconv + g->Kd, sc->dkn, a->conv + g->Kd, g->CC, a->kr, 1.0f, N, g->Hk, g->Dk));
    PROF(PROF_ELEMENT, zero(sc->dga, NH));
    PROF(PROF_ELEMENT, zero(sc->dgb, NH));
    PROF(PROF_GDN, gdn_gates_backward(sc->dga, sc->dgb, bp->dA_log, bp->ddt_bias, sc->dg, sc->dbeta, a->ga, a->gb,
                                      bp->A_log, bp->dt_bias, N, g->Hv));
    PROF(PROF_ELEMENT, zero(sc->dqkv, (size_t)N * g->CC));
    PROF(PROF_GDN, conv1d_silu_backward(sc->dqkv, bp->dconv_w, sc->dconv, a->qkv, bp->conv_w, B, T, g->CC, g->K));

    if (a->transient) PROF(PROF_NORM, rmsnorm_forward(a->ln1, a->rstd1, a->x_in, bp->ln1, d->norm_off, eps, N, C));
    bool need_dx = layer > d->lo || bp->dln1 != NULL;
    float *dln = need_dx ? sc->dln : NULL;
    proj_backward(m, bp, layer, PROJ_LQKV, dln, true, sc->dqkv, a->ln1, a->xa[PROJ_LQKV], N);
    proj_backward(m, bp, layer, PROJ_LZ, dln, false, sc->dz, a->ln1, a->xa[PROJ_LZ], N);
    proj_backward(m, bp, layer, PROJ_LB, dln, false, sc->dgb, a->ln1, a->xa[PROJ_LB], N);
    proj_backward(m, bp, layer, PROJ_LA, dln, false, sc->dga, a->ln1, a->xa[PROJ_LA], N);
    if (need_dx)
        PROF(PROF_NORM, rmsnorm_backward(sc->dres, bp->dln1, sc->dln, a->x_in, bp->ln1, d->norm_off, a->rstd1, N, C));
}

void gdn_mixer_decode(Model *m, int layer, const BlockActs *a, const float *x, int rows) {
    const Dims *d = &m->d;
    const GdnDims *g = &d->g;
    const BlockParams *bp = &m->blocks[layer];
    int C = d->C;
    float eps = m->cfg.rms_norm_eps;
    int slot = m->cache_slot[layer];
    float *cstate = m->conv_state + (size_t)slot * (g->K - 1) * g->CC;
    float *rstate = m->rec_state + (size_t)slot * g->Hv * g->Dk * g->Dv;
    rmsnorm_forward(a->ln1, a->rstd1, x, bp->ln1, d->norm_off, eps, rows, C);
    const uint16_t *ln1_16 = proj_shared_input(bp, GDN_IN_PROJS, a->ln1, rows, C);
    proj_forward(m, bp, layer, PROJ_LQKV, a->qkv, a->ln1, ln1_16, a->xa[PROJ_LQKV], rows, false);
    proj_forward(m, bp, layer, PROJ_LZ, a->z, a->ln1, ln1_16, a->xa[PROJ_LZ], rows, false);
    proj_forward(m, bp, layer, PROJ_LB, a->gb, a->ln1, ln1_16, a->xa[PROJ_LB], rows, false);
    proj_forward(m, bp, layer, PROJ_LA, a->ga, a->ln1, ln1_16, a->xa[PROJ_LA], rows, false);
    conv1d_silu_forward(a->conv, a->qkv, bp->conv_w, cstate, cstate, 1, rows, g->CC, g->K);
    l2norm_forward(a->qn, a->qr, a->conv, g->CC, 1.0f / sqrtf((float)g->Dk), L2_EPS, rows, g->Hk, g->Dk);
    l2norm_forward(a->kn, a->kr, a->conv + g->Kd, g->CC, 1.0f, L2_EPS, rows, g->Hk, g->Dk);
    gdn_gates_forward(a->g, a->beta, a->ga, a->gb, bp->A_log, bp->dt_bias, rows, g->Hv);
    GdnShape s = shape(d, 1, rows);
    /* a prompt goes through the chunked form, single tokens through the recurrence */
    if (rows > 1)
        gated_delta_forward(a->core, NULL, rstate, a->qn, g->Kd, a->kn, g->Kd, a->conv + 2 * g->Kd, g->CC, a->g,
                            a->beta, m->dec_gdn_ws, g->threads, &s);
    else
        gated_delta_recurrent_forward(a->core, rstate, a->qn, g->Kd, a->kn, g->Kd, a->conv + 2 * g->Kd, g->CC,
                                      a->g, a->beta, &s);
    gated_rmsnorm_forward(a->gy, a->grstd, a->core, a->z, bp->gnorm, eps, rows * g->Hv, g->Dv);
    proj_forward(m, bp, layer, PROJ_LOUT, a->x_mid, a->gy, NULL, a->xa[PROJ_LOUT], rows, false);
    for (size_t i = 0; i < (size_t)rows * C; i++) a->x_mid[i] += x[i];
}

/* block.c: forward and backward of one decoder block: a token mixer, then
 * the MLP, each pre-norm with a residual add. The mixer is attention (GQA,
 * optional qwen3 q/k norms and qwen2 biases, RoPE; for Qwen3.5 the gated
 * attention: q_proj also yields a per-head output gate, RoPE on the first rd
 * dims of each head, o_proj(att * sigmoid(gate))) or, in Qwen3.5's linear
 * blocks, the Gated DeltaNet (block_gdn.c). The forward writes every
 * activation the backward reads into a BlockActs set; the backward turns
 * m->sc.dres from d(block output) into d(block input), accumulating
 * parameter gradients on the way. */
#include "model/model_internal.h"
#include "kernels/ops.h"
#include "kernels/rope_partial.h"
#include "base/profile.h"
#include <math.h>
#include <string.h>

static void add_inplace(float *y, const float *x, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* Kernels accumulate (+=) into activation gradients, so they start at zero;
 * these buffers are tens of MB per block, so the clearing is parallel too. */
static void zero(float *p, size_t n) {
    enum { CH = 1 << 16 };
    long nch = (long)((n + CH - 1) / CH);
    #pragma omp parallel for schedule(static)
    for (long c = 0; c < nch; c++) {
        size_t b = (size_t)c * CH, k = n - b < CH ? n - b : CH;
        memset(p + b, 0, k * sizeof *p);
    }
}

/* ------------------------------------------------------- Qwen3.5's gate */

/* qg (N, H, 2D): per head the query, then its gate -> q (N, H, D), gate (N, H, D). */
static void split_query_gate(float *q, float *gate, const float *qg, int NH, int D) {
    #pragma omp parallel for schedule(static) if ((size_t)NH * D > 32768)
    for (int i = 0; i < NH; i++) {
        memcpy(q + (size_t)i * D, qg + (size_t)i * 2 * D, (size_t)D * sizeof(float));
        memcpy(gate + (size_t)i * D, qg + (size_t)i * 2 * D + D, (size_t)D * sizeof(float));
    }
}

static void join_query_gate(float *dqg, const float *dq, const float *dgate, int NH, int D) {
    #pragma omp parallel for schedule(static) if ((size_t)NH * D > 32768)
    for (int i = 0; i < NH; i++) {
        memcpy(dqg + (size_t)i * 2 * D, dq + (size_t)i * D, (size_t)D * sizeof(float));
        memcpy(dqg + (size_t)i * 2 * D + D, dgate + (size_t)i * D, (size_t)D * sizeof(float));
    }
}

/* out = att * sigmoid(gate) */
static void gate_forward(float *out, const float *att, const float *gate, size_t n) {
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = att[i] / (1.0f + expf(-gate[i]));
}

/* datt (in place on dout) = dout sigmoid(gate); dgate = dout att sigmoid' (gate) */
static void gate_backward(float *dout_datt, float *dgate, const float *att, const float *gate, size_t n) {
    #pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-gate[i]));
        float g = dout_datt[i];
        dgate[i] = g * att[i] * s * (1.0f - s);
        dout_datt[i] = g * s;
    }
}

/* ------------------------------------------------------------ attention */

static void rope_fwd(const Model *m, float *x, int B, int T, int H) {
    const Dims *d = &m->d;
    if (d->rd == d->D) rope_forward(x, m->rope_cos, m->rope_sin, B, T, H, d->D);
    else rope_partial_forward(x, m->rope_cos, m->rope_sin, B, T, H, d->D, d->rd);
}

static void rope_bwd(const Model *m, float *x, int B, int T, int H) {
    const Dims *d = &m->d;
    if (d->rd == d->D) rope_backward(x, m->rope_cos, m->rope_sin, B, T, H, d->D);
    else rope_partial_backward(x, m->rope_cos, m->rope_sin, B, T, H, d->D, d->rd);
}

/* x_mid = x_in + o(attn(rope(q), rope(k), v)) [* sigmoid(gate) for Qwen3.5] */
static void attention_mixer_forward(Model *m, int layer, const BlockActs *a, int B, int T) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    int N = B * T, C = d->C;
    float eps = m->cfg.rms_norm_eps;
    PROF(PROF_NORM, rmsnorm_forward(a->ln1, a->rstd1, a->x_in, bp->ln1, eps, N, C));
    const uint16_t *ln1_16 = proj_shared_input(bp, PROJ_Q, PROJ_V, a->ln1, N, C);
    float *q = d->qk_norm ? a->q_pre : a->q, *k = d->qk_norm ? a->k_pre : a->k;
    if (d->attn_gate) {
        proj_forward(m, bp, layer, PROJ_Q, a->qg, a->ln1, ln1_16, a->xa[PROJ_Q], N, false);
        PROF(PROF_ELEMENT, split_query_gate(q, a->agate, a->qg, N * d->H, d->D));
    } else {
        proj_forward(m, bp, layer, PROJ_Q, q, a->ln1, ln1_16, a->xa[PROJ_Q], N, false);
    }
    proj_forward(m, bp, layer, PROJ_K, k, a->ln1, ln1_16, a->xa[PROJ_K], N, false);
    proj_forward(m, bp, layer, PROJ_V, a->v, a->ln1, ln1_16, a->xa[PROJ_V], N, false);
    if (d->qk_norm) {
        PROF(PROF_NORM, rmsnorm_forward(a->q, a->q_rstd, a->q_pre, bp->qn, eps, N * d->H, d->D));
        PROF(PROF_NORM, rmsnorm_forward(a->k, a->k_rstd, a->k_pre, bp->kn, eps, N * d->KVH, d->D));
    }
    PROF(PROF_ROPE, rope_fwd(m, a->q, B, T, d->H));
    PROF(PROF_ROPE, rope_fwd(m, a->k, B, T, d->KVH));
    PROF(PROF_ATTN_FWD, attention_forward(a->att, a->lse, a->q, a->k, a->v, B, T, d->H, d->KVH, d->D));
    const float *o_in = a->att;
    if (d->attn_gate) {
        PROF(PROF_ELEMENT, gate_forward(a->ag, a->att, a->agate, (size_t)N * d->QD));
        o_in = a->ag;
    }
    proj_forward(m, bp, layer, PROJ_O, a->x_mid, o_in, NULL, a->xa[PROJ_O], N, false);
    PROF(PROF_ELEMENT, add_inplace(a->x_mid, a->x_in, (size_t)N * C));
}

static void attention_mixer_backward(Model *m, int layer, const BlockActs *a, int B, int T) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    Scratch *sc = &m->sc;
    int N = B * T, C = d->C;
    float eps = m->cfg.rms_norm_eps;
    const float *o_in = a->att;
    if (d->attn_gate) {
        /* o_proj's input is rebuilt: it is shared by the blocks */
        PROF(PROF_ELEMENT, gate_forward(a->ag, a->att, a->agate, (size_t)N * d->QD));
        o_in = a->ag;
    }
    proj_backward(m, bp, layer, PROJ_O, sc->datt, true, sc->dres, o_in, a->xa[PROJ_O], N);
    if (d->attn_gate) PROF(PROF_ELEMENT, gate_backward(sc->datt, sc->dagate, a->att, a->agate, (size_t)N * d->QD));
    PROF(PROF_ELEMENT, zero(sc->dq, (size_t)N * d->QD));
    PROF(PROF_ELEMENT, zero(sc->dk, (size_t)N * d->KVD));
    PROF(PROF_ELEMENT, zero(sc->dv, (size_t)N * d->KVD));
    PROF(PROF_ATTN_BWD, attention_backward(sc->dq, sc->dk, sc->dv, sc->datt, a->q, a->k, a->v, a->att, a->lse,
                       sc->attn_ws, B, T, d->H, d->KVH, d->D));
    PROF(PROF_ROPE, rope_bwd(m, sc->dq, B, T, d->H));
    PROF(PROF_ROPE, rope_bwd(m, sc->dk, B, T, d->KVH));
    float *dq = sc->dq, *dk = sc->dk;
    if (d->qk_norm) {
        PROF(PROF_ELEMENT, zero(sc->dq_pre, (size_t)N * d->QD));
        PROF(PROF_ELEMENT, zero(sc->dk_pre, (size_t)N * d->KVD));
        PROF(PROF_NORM, rmsnorm_backward(sc->dq_pre, bp->dqn, sc->dq, a->q_pre, bp->qn, a->q_rstd, N * d->H, d->D));
        PROF(PROF_NORM, rmsnorm_backward(sc->dk_pre, bp->dkn, sc->dk, a->k_pre, bp->kn, a->k_rstd, N * d->KVH, d->D));
        dq = sc->dq_pre;
        dk = sc->dk_pre;
    }
    if (d->attn_gate) {
        PROF(PROF_ELEMENT, join_query_gate(sc->dqg, dq, sc->dagate, N * d->H, d->D));
        dq = sc->dqg;
    }
    if (a->transient) PROF(PROF_NORM, rmsnorm_forward(a->ln1, a->rstd1, a->x_in, bp->ln1, eps, N, C));
    /* the lowest trainable block's input gradient goes nowhere: unless its
     * input norm is trainable, the q/k/v input products are skipped */
    bool need_dx = layer > d->lo || bp->dln1 != NULL;
    float *dln = need_dx ? sc->dln : NULL;
    proj_backward(m, bp, layer, PROJ_Q, dln, true, dq, a->ln1, a->xa[PROJ_Q], N);
    proj_backward(m, bp, layer, PROJ_K, dln, false, dk, a->ln1, a->xa[PROJ_K], N);
    proj_backward(m, bp, layer, PROJ_V, dln, false, sc->dv, a->ln1, a->xa[PROJ_V], N);
    if (need_dx) PROF(PROF_NORM, rmsnorm_backward(sc->dres, bp->dln1, sc->dln, a->x_in, bp->ln1, a->rstd1, N, C));
}

/* ------------------------------------------------------------------ MLP */

/* recompute: rebuilding a checkpointed block for its backward pass; the
 * down projection's base product (only needed for the block output) is
 * skipped, its x@A is still computed. */
void block_mlp_forward(Model *m, int layer, const BlockActs *a, float *x_out, int N, bool recompute) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    int C = d->C;
    float eps = m->cfg.rms_norm_eps;
    PROF(PROF_NORM, rmsnorm_forward(a->ln2, a->rstd2, a->x_mid, bp->ln2, eps, N, C));
    const uint16_t *ln2_16 = proj_shared_input(bp, PROJ_GATE, PROJ_UP, a->ln2, N, C);
    proj_forward(m, bp, layer, PROJ_GATE, a->gate, a->ln2, ln2_16, a->xa[PROJ_GATE], N, false);
    proj_forward(m, bp, layer, PROJ_UP, a->up, a->ln2, ln2_16, a->xa[PROJ_UP], N, false);
    PROF(PROF_SWIGLU, swiglu_forward(a->act, a->gate, a->up, (size_t)N * d->F));
    if (recompute) {
        if (bp->adapted >> PROJ_DOWN & 1u)
            proj_forward(m, bp, layer, PROJ_DOWN, NULL, a->act, NULL, a->xa[PROJ_DOWN], N, true);
        return;
    }
    proj_forward(m, bp, layer, PROJ_DOWN, x_out, a->act, NULL, a->xa[PROJ_DOWN], N, false);
    PROF(PROF_ELEMENT, add_inplace(x_out, a->x_mid, (size_t)N * C));
}

void block_mlp_backward(Model *m, int layer, const BlockActs *a, int N) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    Scratch *sc = &m->sc;
    int C = d->C;
    size_t NF = (size_t)N * d->F;
    float eps = m->cfg.rms_norm_eps;
    if (a->transient) {
        /* rebuilt exactly as the forward computed them (same kernels, same inputs) */
        PROF(PROF_NORM, rmsnorm_forward(a->ln2, a->rstd2, a->x_mid, bp->ln2, eps, N, C));
        PROF(PROF_SWIGLU, swiglu_forward(a->act, a->gate, a->up, NF));
    }
    /* each gradient buffer's first product overwrites it (dx_set): no zeroing */
    proj_backward(m, bp, layer, PROJ_DOWN, sc->dact, true, sc->dres, a->act, a->xa[PROJ_DOWN], N);
    PROF(PROF_ELEMENT, zero(sc->dgate, NF));
    PROF(PROF_ELEMENT, zero(sc->dup, NF));
    PROF(PROF_SWIGLU, swiglu_backward(sc->dgate, sc->dup, sc->dact, a->gate, a->up, NF));
    proj_backward(m, bp, layer, PROJ_GATE, sc->dln, true, sc->dgate, a->ln2, a->xa[PROJ_GATE], N);
    proj_backward(m, bp, layer, PROJ_UP, sc->dln, false, sc->dup, a->ln2, a->xa[PROJ_UP], N);
    PROF(PROF_NORM, rmsnorm_backward(sc->dres, bp->dln2, sc->dln, a->x_mid, bp->ln2, a->rstd2, N, C));
}

/* ---------------------------------------------------------------- block */

void block_forward(Model *m, int layer, const BlockActs *a, float *x_out, int B, int T, bool recompute) {
    if (m->blocks[layer].gdn) gdn_mixer_forward(m, layer, a, B, T);
    else attention_mixer_forward(m, layer, a, B, T);
    block_mlp_forward(m, layer, a, x_out, B * T, recompute);
}

void block_backward(Model *m, int layer, const BlockActs *a, int B, int T) {
    block_mlp_backward(m, layer, a, B * T);
    if (m->blocks[layer].gdn) gdn_mixer_backward(m, layer, a, B, T);
    else attention_mixer_backward(m, layer, a, B, T);
}

/* w + 1 of the trainable zero-centred norms (their gradient is w's). */
void norms_refresh(Model *m) {
    if (!m->norm_eff) return;
    const Dims *d = &m->d;
    for (int l = d->lo; l < d->L; l++) {
        BlockParams *bp = &m->blocks[l];
        const float *src[4] = {bp->ln1_w, bp->ln2_w, bp->qn_w, bp->kn_w};
        float *dst[4] = {bp->ln1, bp->ln2, bp->qn, bp->kn};
        int n[4] = {d->C, d->C, d->D, d->D};
        for (int i = 0; i < 4; i++) {
            if (!src[i]) continue;
            for (int j = 0; j < n[i]; j++) dst[i][j] = src[i][j] + d->norm_off;
        }
    }
}

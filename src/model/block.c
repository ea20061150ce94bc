/* block.c: forward and backward of one decoder block:
 *   h   = x + post1(o(attn(rope(qnorm(q(n1(x)))), rope(knorm(k(n1(x)))), v(n1(x)))))
 *   out = h + post2(down(act(gate(n2(h))) * up(n2(h))))
 * with the family's properties (model_internal.h): the norms n1, n2 (and
 * the sandwich norms post1, post2 of gemma, identity otherwise) use weights
 * w or 1 + w; q/k norms and q/k/v biases are optional; q/k/v and gate/up
 * are separate projections or one fused projection each (phi3); act is silu
 * or tanh-GELU; RoPE covers the first rd dims of a head with the layer's
 * table set, or is skipped on NoPE layers; attention has the layer's scale,
 * sliding window and soft-cap. Qwen3.5's attention is gated: q_proj also
 * yields a per-head output gate and o_proj reads att * sigmoid(gate); its
 * linear blocks replace the attention by the Gated DeltaNet (block_gdn.c).
 * The forward writes every activation the backward reads into a BlockActs
 * set; the backward turns m->sc.dres from d(block output) into d(block
 * input), accumulating parameter gradients on the way. */
#include "model/model_internal.h"
#include "kernels/ops.h"
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

const float *block_attn_out_input(Model *m, const BlockActs *a, int N) {
    if (!m->d.attn_gate) return a->att;
    PROF(PROF_ELEMENT, gate_forward(a->ag, a->att, a->agate, (size_t)N * m->d.QD));
    return a->ag;
}

/* ------------------------------------------------------------ attention */

/* A fused qkv_proj row is [q (QD) | k (KVD) | v (KVD)]: split into the three
 * tensors, or (gather) put their gradients back into one row. */
static void qkv_split(const Dims *d, float *q, float *k, float *v, float *qkv, int N, bool gather) {
    size_t qb = (size_t)d->QD * sizeof(float), kb = (size_t)d->KVD * sizeof(float);
    #pragma omp parallel for schedule(static) if ((size_t)N * d->QKVD > 32768)
    for (int n = 0; n < N; n++) {
        float *row = qkv + (size_t)n * d->QKVD;
        float *qr = q + (size_t)n * d->QD, *kr = k + (size_t)n * d->KVD, *vr = v + (size_t)n * d->KVD;
        if (gather) {
            memcpy(row, qr, qb);
            memcpy(row + d->QD, kr, kb);
            memcpy(row + d->QD + d->KVD, vr, kb);
        } else {
            memcpy(qr, row, qb);
            memcpy(kr, row + d->QD, kb);
            memcpy(vr, row + d->QD + d->KVD, kb);
        }
    }
}

static unsigned qkv_mask(const Dims *d) {
    return d->fused_qkv ? 1u << PROJ_QKV : (1u << PROJ_Q | 1u << PROJ_K | 1u << PROJ_V);
}
static unsigned gate_up_mask(const Dims *d) {
    return d->gu_ld != d->F ? 1u << PROJ_GATE_UP : (1u << PROJ_GATE | 1u << PROJ_UP);
}

/* The projections of mask (separate q/k/v, or gate/up) on their shared
 * input x (x16: its bf16 copy, or NULL): the members of the LoRA group
 * (lora_group) by their base products and one merged A product, the others
 * each on its own. outs and xa are indexed by PROJ_*. */
static void proj_group_forward(Model *m, const BlockParams *bp, int layer, unsigned mask,
                               float *const outs[PROJ_COUNT], const float *x, const uint16_t *x16,
                               float *const xa[PROJ_COUNT], int N) {
    unsigned grp = lora_group(m, bp, mask, N);
    FOR_EACH_PROJ(p, mask) {
        if (grp >> p & 1u) proj_forward_base(m, bp, p, outs[p], x, x16, N);
        else proj_forward(m, bp, layer, p, outs[p], x, x16, xa[p], N, false);
    }
    if (grp) lora_group_forward(m, bp, grp, outs, xa, x, N);
}

/* Its backward: dx (N, in) = the sum of the members' input gradients (the
 * first one sets it; dx NULL: not wanted). */
static void proj_group_backward(Model *m, const BlockParams *bp, int layer, unsigned mask, float *dx,
                                const float *const douts[PROJ_COUNT], const float *x,
                                float *const xa[PROJ_COUNT], int N) {
    unsigned grp = lora_group(m, bp, mask, N);
    int first = __builtin_ctz(mask);
    FOR_EACH_PROJ(p, mask) {
        if (grp >> p & 1u) proj_backward_grouped(m, bp, layer, p, dx, p == first, douts[p], x, xa[p], N, grp);
        else proj_backward(m, bp, layer, p, dx, p == first, douts[p], x, xa[p], N);
    }
    if (grp) lora_group_backward(m, bp, grp, dx, x, N);
}

void block_qkv_forward(Model *m, int layer, const BlockActs *a, int N) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    float eps = m->cfg.rms_norm_eps;
    const uint16_t *x16 = proj_shared_input(bp, qkv_mask(d), a->ln1, N, d->C);
    float *q = d->qk_norm ? a->q_pre : a->q, *k = d->qk_norm ? a->k_pre : a->k;
    if (d->fused_qkv) {
        proj_forward(m, bp, layer, PROJ_QKV, m->qkv_tmp, a->ln1, x16, a->xa[PROJ_QKV], N, false);
        PROF(PROF_ELEMENT, qkv_split(d, q, k, a->v, m->qkv_tmp, N, false));
    } else {
        float *outs[PROJ_COUNT] = {0};
        outs[PROJ_Q] = d->attn_gate ? a->qg : q;
        outs[PROJ_K] = k;
        outs[PROJ_V] = a->v;
        proj_group_forward(m, bp, layer, qkv_mask(d), outs, a->ln1, x16, a->xa, N);
        if (d->attn_gate) PROF(PROF_ELEMENT, split_query_gate(q, a->agate, a->qg, N * d->H, d->D));
    }
    if (d->qk_norm) {
        PROF(PROF_NORM, rmsnorm_forward(a->q, a->q_rstd, a->q_pre, bp->qn, d->norm_off, eps, N * d->H, d->D));
        PROF(PROF_NORM, rmsnorm_forward(a->k, a->k_rstd, a->k_pre, bp->kn, d->norm_off, eps, N * d->KVH, d->D));
    }
}

void block_glu_forward(Model *m, int layer, const BlockActs *a, int N) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    const uint16_t *x16 = proj_shared_input(bp, gate_up_mask(d), a->ln2, N, d->C);
    if (d->gu_ld != d->F) {
        proj_forward(m, bp, layer, PROJ_GATE_UP, a->gate, a->ln2, x16, a->xa[PROJ_GATE_UP], N, false);
    } else {
        float *outs[PROJ_COUNT] = {0};
        outs[PROJ_GATE] = a->gate;
        outs[PROJ_UP] = a->up;
        proj_group_forward(m, bp, layer, gate_up_mask(d), outs, a->ln2, x16, a->xa, N);
    }
    PROF(PROF_SWIGLU, glu_forward(a->act, a->gate, a->up, (size_t)N, (size_t)d->F, (size_t)d->gu_ld, d->act));
}

/* x_mid = x_in + post1(o(attn(rope(q), rope(k), v) [* sigmoid(gate)])) */
static void attention_mixer_forward(Model *m, int layer, const BlockActs *a, int B, int T) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    int N = B * T, C = d->C;
    float eps = m->cfg.rms_norm_eps, off = d->norm_off;
    PROF(PROF_NORM, rmsnorm_forward(a->ln1, a->rstd1, a->x_in, bp->ln1, off, eps, N, C));
    block_qkv_forward(m, layer, a, N);
    const float *sin_t, *cos_t = layer_rope(m, layer, T, &sin_t);
    if (cos_t) {
        PROF(PROF_ROPE, rope_forward(a->q, cos_t, sin_t, B, T, d->H, d->D, d->rd));
        PROF(PROF_ROPE, rope_forward(a->k, cos_t, sin_t, B, T, d->KVH, d->D, d->rd));
    }
    PROF(PROF_ATTN_FWD, attention_forward(a->att, a->lse, a->q, a->k, a->v, B, T, d->H, d->KVH, d->D,
                                          &m->attn[layer]));
    const float *o_in = block_attn_out_input(m, a, N);
    if (d->sandwich) {
        proj_forward(m, bp, layer, PROJ_O, a->o, o_in, NULL, a->xa[PROJ_O], N, false);
        PROF(PROF_NORM, rmsnorm_forward(a->x_mid, a->prstd1, a->o, bp->pn1, off, eps, N, C));
    } else {
        proj_forward(m, bp, layer, PROJ_O, a->x_mid, o_in, NULL, a->xa[PROJ_O], N, false);
    }
    PROF(PROF_ELEMENT, add_inplace(a->x_mid, a->x_in, (size_t)N * C));
}

/* ------------------------------------------------------------------ MLP */

/* recompute: rebuilding a checkpointed block for its backward pass; the
 * down projection's base product (only needed for the block output) is
 * skipped, its x@A is still computed, unless a sandwich norm follows it
 * (its backward reads the product). */
void block_mlp_forward(Model *m, int layer, const BlockActs *a, float *x_out, int N, bool recompute) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    int C = d->C;
    float eps = m->cfg.rms_norm_eps, off = d->norm_off;
    PROF(PROF_NORM, rmsnorm_forward(a->ln2, a->rstd2, a->x_mid, bp->ln2, off, eps, N, C));
    block_glu_forward(m, layer, a, N);
    if (d->sandwich) {
        proj_forward(m, bp, layer, PROJ_DOWN, a->mlp, a->act, NULL, a->xa[PROJ_DOWN], N, false);
        /* recompute: only the rstd is needed; the normed output goes to scratch */
        float *y = recompute ? m->sc.dpost : x_out;
        PROF(PROF_NORM, rmsnorm_forward(y, a->prstd2, a->mlp, bp->pn2, off, eps, N, C));
        if (recompute) return;
    } else {
        if (recompute) {
            if (bp->adapted >> PROJ_DOWN & 1u)
                proj_forward(m, bp, layer, PROJ_DOWN, NULL, a->act, NULL, a->xa[PROJ_DOWN], N, true);
            return;
        }
        proj_forward(m, bp, layer, PROJ_DOWN, x_out, a->act, NULL, a->xa[PROJ_DOWN], N, false);
    }
    PROF(PROF_ELEMENT, add_inplace(x_out, a->x_mid, (size_t)N * C));
}

/* d(out) = dres through a sandwich norm: returns the gradient of the norm's
 * input (in dpost), adding the weight's gradient. */
static const float *post_norm_backward(Model *m, float *dw, const float *x, const float *w, const float *rstd, int N) {
    Scratch *sc = &m->sc;
    PROF(PROF_ELEMENT, zero(sc->dpost, (size_t)N * m->d.C));
    PROF(PROF_NORM, rmsnorm_backward(sc->dpost, dw, sc->dres, x, w, m->d.norm_off, rstd, N, m->d.C));
    return sc->dpost;
}

void block_mlp_backward(Model *m, int layer, const BlockActs *a, int N) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    Scratch *sc = &m->sc;
    int C = d->C;
    float eps = m->cfg.rms_norm_eps, off = d->norm_off;
    if (a->transient) {
        /* rebuilt exactly as the forward computed them (same kernels, same inputs) */
        PROF(PROF_NORM, rmsnorm_forward(a->ln2, a->rstd2, a->x_mid, bp->ln2, off, eps, N, C));
        PROF(PROF_SWIGLU, glu_forward(a->act, a->gate, a->up, (size_t)N, (size_t)d->F, (size_t)d->gu_ld, d->act));
    }

    /* MLP: x_out = x_mid + post2(down(act(gate(ln2)) * up(ln2))) */
    /* each gradient buffer's first product overwrites it (dx_set): no zeroing */
    const float *dmlp = sc->dres;
    if (d->sandwich) dmlp = post_norm_backward(m, bp->dpn2, a->mlp, bp->pn2, a->prstd2, N);
    proj_backward(m, bp, layer, PROJ_DOWN, sc->dact, true, dmlp, a->act, a->xa[PROJ_DOWN], N);
    /* dgate and dup overwrite the gate and up outputs they are computed from
     * (element by element, each read before its write): nothing reads those
     * outputs after this block's backward, and the scratch holds no (N, F)
     * pair for them. Fused gate_up: the two halves of one (N, 2F) region. */
    float *dgate = a->gate, *dup = a->up;
    PROF(PROF_SWIGLU, glu_backward_set(dgate, dup, sc->dact, a->gate, a->up, (size_t)N, (size_t)d->F,
                                       (size_t)d->gu_ld, d->act));
    if (d->gu_ld != d->F) {
        proj_backward(m, bp, layer, PROJ_GATE_UP, sc->dln, true, dgate, a->ln2, a->xa[PROJ_GATE_UP], N);
    } else {
        const float *douts[PROJ_COUNT] = {0};
        douts[PROJ_GATE] = dgate;
        douts[PROJ_UP] = dup;
        proj_group_backward(m, bp, layer, gate_up_mask(d), sc->dln, douts, a->ln2, a->xa, N);
    }
    PROF(PROF_NORM, rmsnorm_backward(sc->dres, bp->dln2, sc->dln, a->x_mid, bp->ln2, off, a->rstd2, N, C));
}

static void attention_mixer_backward(Model *m, int layer, const BlockActs *a, int B, int T) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[layer];
    Scratch *sc = &m->sc;
    int N = B * T, C = d->C;
    float eps = m->cfg.rms_norm_eps, off = d->norm_off;
    /* attention: x_mid = x_in + post1(o(attn(rope(q), rope(k), v))) */
    const float *datt_out = sc->dres;
    if (d->sandwich) datt_out = post_norm_backward(m, bp->dpn1, a->o, bp->pn1, a->prstd1, N);
    /* o_proj's gated input is rebuilt: it is shared by the blocks */
    const float *o_in = block_attn_out_input(m, a, N);
    proj_backward(m, bp, layer, PROJ_O, sc->datt, true, datt_out, o_in, a->xa[PROJ_O], N);
    if (d->attn_gate) PROF(PROF_ELEMENT, gate_backward(sc->datt, sc->dagate, a->att, a->agate, (size_t)N * d->QD));
    PROF(PROF_ELEMENT, zero(sc->dq, (size_t)N * d->QD); zero(sc->dk, (size_t)N * d->KVD);
         zero(sc->dv, (size_t)N * d->KVD));
    PROF(PROF_ATTN_BWD, attention_backward(sc->dq, sc->dk, sc->dv, sc->datt, a->q, a->k, a->v, a->att, a->lse,
                                           sc->attn_ws, B, T, d->H, d->KVH, d->D, &m->attn[layer]));
    const float *sin_t, *cos_t = layer_rope(m, layer, T, &sin_t);
    if (cos_t) {
        PROF(PROF_ROPE, rope_backward(sc->dq, cos_t, sin_t, B, T, d->H, d->D, d->rd));
        PROF(PROF_ROPE, rope_backward(sc->dk, cos_t, sin_t, B, T, d->KVH, d->D, d->rd));
    }
    float *dq = sc->dq, *dk = sc->dk;
    if (d->qk_norm) {
        PROF(PROF_ELEMENT, zero(sc->dq_pre, (size_t)N * d->QD); zero(sc->dk_pre, (size_t)N * d->KVD));
        PROF(PROF_NORM, rmsnorm_backward(sc->dq_pre, bp->dqn, sc->dq, a->q_pre, bp->qn, off, a->q_rstd,
                                         N * d->H, d->D));
        PROF(PROF_NORM, rmsnorm_backward(sc->dk_pre, bp->dkn, sc->dk, a->k_pre, bp->kn, off, a->k_rstd,
                                         N * d->KVH, d->D));
        dq = sc->dq_pre;
        dk = sc->dk_pre;
    }
    if (d->attn_gate) {
        PROF(PROF_ELEMENT, join_query_gate(sc->dqg, dq, sc->dagate, N * d->H, d->D));
        dq = sc->dqg;
    }
    if (a->transient) PROF(PROF_NORM, rmsnorm_forward(a->ln1, a->rstd1, a->x_in, bp->ln1, off, eps, N, C));
    /* the lowest trainable block's input gradient goes nowhere: unless its
     * input norm is trainable, the q/k/v input products are skipped */
    bool need_dx = layer > d->lo || bp->dln1 != NULL;
    float *dln = need_dx ? sc->dln : NULL;
    if (d->fused_qkv) {
        PROF(PROF_ELEMENT, qkv_split(d, dq, dk, sc->dv, m->qkv_tmp, N, true));
        proj_backward(m, bp, layer, PROJ_QKV, dln, true, m->qkv_tmp, a->ln1, a->xa[PROJ_QKV], N);
    } else {
        const float *douts[PROJ_COUNT] = {0};
        douts[PROJ_Q] = dq;
        douts[PROJ_K] = dk;
        douts[PROJ_V] = sc->dv;
        proj_group_backward(m, bp, layer, qkv_mask(d), dln, douts, a->ln1, a->xa, N);
    }
    if (need_dx)
        PROF(PROF_NORM, rmsnorm_backward(sc->dres, bp->dln1, sc->dln, a->x_in, bp->ln1, off, a->rstd1, N, C));
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

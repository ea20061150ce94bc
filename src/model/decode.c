/* decode.c: incremental generation for one sequence. New tokens at
 * positions pos.. are run through the blocks in chunks of dec_rows rows. An
 * attention block appends their keys and values to its KV cache and lets
 * their queries attend to every cached position up to their own (causal),
 * so the prefix is never recomputed. A rotating cache (mlx_lm --max-kv-size)
 * keeps the first KV_KEEP positions and overwrites the oldest of the others:
 * keys are cached after RoPE at their absolute positions, so attention over
 * the slots needs no order. A Gated DeltaNet block (Qwen3.5) carries its
 * last K-1 conv inputs and its recurrent state instead: a multi-token chunk
 * goes through the chunked rule from that state, a single token through the
 * plain recurrence (block_gdn.c). */
#include "model/model_internal.h"
#include "kernels/ops.h"
#include "kernels/rope_partial.h"
#include "base/error.h"
#include <math.h>
#include <string.h>

/* out (rows, H*D): query row i (absolute position p0 + i) over cache slots
 * 0..min(p0+i, kv_T-1) (every slot of a full rotating cache). */
static void cached_attention(Model *m, float *out, const float *q, const float *kc, const float *vc, int rows, int p0) {
    const Dims *d = &m->d;
    int H = d->H, D = d->D, KVD = d->KVD, grp = d->H / d->KVH;
    float sc = 1.0f / sqrtf((float)D);
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float *s = m->dec_scores + (size_t)h * d->kv_T;
        int kh = h / grp;
        for (int i = 0; i < rows; i++) {
            int n = p0 + i + 1 < d->kv_T ? p0 + i + 1 : d->kv_T;
            const float *qi = q + (size_t)i * d->QD + (size_t)h * D;
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                const float *kj = kc + (size_t)j * KVD + (size_t)kh * D;
                float dot = 0;
                for (int e = 0; e < D; e++) dot += qi[e] * kj[e];
                s[j] = dot * sc;
                if (s[j] > mx) mx = s[j];
            }
            double sum = 0;
            for (int j = 0; j < n; j++) {
                s[j] = expf(s[j] - mx);
                sum += s[j];
            }
            float inv = (float)(1.0 / sum);
            float *o = out + (size_t)i * d->QD + (size_t)h * D;
            for (int e = 0; e < D; e++) o[e] = 0;
            for (int j = 0; j < n; j++) {
                const float *vj = vc + (size_t)j * KVD + (size_t)kh * D;
                float w = s[j] * inv;
                for (int e = 0; e < D; e++) o[e] += w * vj[e];
            }
        }
    }
}

/* The slot of absolute position p: p itself until the cache is full, then
 * a ring over the slots after the first KV_KEEP. */
static int kv_slot(const Dims *d, int p) {
    if (p < d->kv_T) return p;
    return KV_KEEP + (p - KV_KEEP) % (d->kv_T - KV_KEEP);
}

static void add_inplace(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static void rope_rows(const Model *m, float *x, int rows, int H, int p0) {
    const Dims *d = &m->d;
    size_t half = (size_t)d->rd / 2;
    const float *c = m->rope_cos + (size_t)p0 * half, *s = m->rope_sin + (size_t)p0 * half;
    if (d->rd == d->D) rope_forward(x, c, s, 1, rows, H, d->D);
    else rope_partial_forward(x, c, s, 1, rows, H, d->D, d->rd);
}

/* The attention half of block l for rows new positions from p0: x -> a->x_mid. */
static void decode_attention(Model *m, int l, const float *x, int rows, int p0) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[l];
    const BlockActs *a = &m->dec;
    float eps = m->cfg.rms_norm_eps;
    rmsnorm_forward(a->ln1, a->rstd1, x, bp->ln1, eps, rows, d->C);
    const uint16_t *ln1_16 = proj_shared_input(bp, PROJ_Q, PROJ_V, a->ln1, rows, d->C);
    float *q = d->qk_norm ? a->q_pre : a->q, *k = d->qk_norm ? a->k_pre : a->k;
    if (d->attn_gate) {
        proj_forward(m, bp, l, PROJ_Q, a->qg, a->ln1, ln1_16, a->xa[PROJ_Q], rows, false);
        for (int i = 0; i < rows * d->H; i++) {
            memcpy(q + (size_t)i * d->D, a->qg + (size_t)i * 2 * d->D, (size_t)d->D * sizeof(float));
            memcpy(a->agate + (size_t)i * d->D, a->qg + (size_t)i * 2 * d->D + d->D, (size_t)d->D * sizeof(float));
        }
    } else {
        proj_forward(m, bp, l, PROJ_Q, q, a->ln1, ln1_16, a->xa[PROJ_Q], rows, false);
    }
    proj_forward(m, bp, l, PROJ_K, k, a->ln1, ln1_16, a->xa[PROJ_K], rows, false);
    proj_forward(m, bp, l, PROJ_V, a->v, a->ln1, ln1_16, a->xa[PROJ_V], rows, false);
    if (d->qk_norm) {
        rmsnorm_forward(a->q, a->q_rstd, a->q_pre, bp->qn, eps, rows * d->H, d->D);
        rmsnorm_forward(a->k, a->k_rstd, a->k_pre, bp->kn, eps, rows * d->KVH, d->D);
    }
    rope_rows(m, a->q, rows, d->H, p0);
    rope_rows(m, a->k, rows, d->KVH, p0);
    size_t cs = (size_t)m->cache_slot[l];
    float *kc = m->kcache + cs * d->kv_T * d->KVD, *vc = m->vcache + cs * d->kv_T * d->KVD;
    if (p0 + rows <= d->kv_T) {
        memcpy(kc + (size_t)p0 * d->KVD, a->k, (size_t)rows * d->KVD * sizeof(float));
        memcpy(vc + (size_t)p0 * d->KVD, a->v, (size_t)rows * d->KVD * sizeof(float));
        cached_attention(m, a->att, a->q, kc, vc, rows, p0);
    } else {
        /* the cache rotates: each row's key and value replace the oldest
         * overwritable slot, then the row attends, so no row loses a position
         * it should see to a later row of the chunk */
        for (int i = 0; i < rows; i++) {
            size_t slot = (size_t)kv_slot(d, p0 + i);
            memcpy(kc + slot * d->KVD, a->k + (size_t)i * d->KVD, (size_t)d->KVD * sizeof(float));
            memcpy(vc + slot * d->KVD, a->v + (size_t)i * d->KVD, (size_t)d->KVD * sizeof(float));
            cached_attention(m, a->att + (size_t)i * d->QD, a->q + (size_t)i * d->QD, kc, vc, 1, p0 + i);
        }
    }
    const float *o_in = a->att;
    if (d->attn_gate) {
        for (size_t i = 0; i < (size_t)rows * d->QD; i++) a->ag[i] = a->att[i] / (1.0f + expf(-a->agate[i]));
        o_in = a->ag;
    }
    proj_forward(m, bp, l, PROJ_O, a->x_mid, o_in, NULL, a->xa[PROJ_O], rows, false);
    add_inplace(a->x_mid, x, (size_t)rows * d->C);
}

static void decode_block(Model *m, int l, const float *x, float *x_out, int rows, int p0) {
    if (m->blocks[l].gdn) gdn_mixer_decode(m, l, &m->dec, x, rows);
    else decode_attention(m, l, x, rows, p0);
    block_mlp_forward(m, l, &m->dec, x_out, rows, false);
}

int model_decode(Model *m, const int32_t *tokens, int n, int pos, float *logits) {
    const Dims *d = &m->d;
    if (d->kv_T <= 0) return error_set("model: loaded without a KV cache (kv_cache_tokens = 0)");
    if (n <= 0) return error_set("model: decode needs at least one token");
    if (pos < 0 || pos != (pos == 0 ? 0 : m->dec_len))
        return error_set("model: decode at position %d but the cache holds %d positions", pos, m->dec_len);
    if ((long)pos + n > d->max_pos)
        return error_set("model: %d positions exceed the %d the KV cache was made for", pos + n, d->max_pos);
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0) return error_set("token id %d is negative at position %d", tokens[i], pos + i);
        if (tokens[i] >= d->V)
            return error_set("token id %d >= vocab size %d at position %d", tokens[i], d->V, pos + i);
    }
    model_bind_scratch(m);
    bool drop = m->d.dropout;
    m->d.dropout = false;
    if (pos == 0 || !m->dora_fresh) dora_update_norms(m);
    if (pos == 0) norms_refresh(m);
    if (pos == 0 && d->n_gdn) {
        /* a new sequence: Gated DeltaNet layers start from zero states */
        const GdnDims *g = &d->g;
        memset(m->conv_state, 0, (size_t)d->n_gdn * (g->K - 1) * g->CC * sizeof(float));
        memset(m->rec_state, 0, (size_t)d->n_gdn * g->Hv * g->Dk * g->Dv * sizeof(float));
    }
    float *x = m->dec_x, *y = m->dec_x2;
    int rows = 0;
    for (int c0 = 0; c0 < n; c0 += d->dec_rows) {
        rows = n - c0 < d->dec_rows ? n - c0 : d->dec_rows;
        fw_gather_rows(x, (const int *)tokens + c0, rows, &m->embed);
        for (int l = 0; l < d->L; l++) {
            decode_block(m, l, x, y, rows, pos + c0);
            float *t = x;
            x = y;
            y = t;
        }
    }
    m->dec_len = pos + n;
    /* final norm and logits of the last position only */
    const float *last = x + (size_t)(rows - 1) * d->C;
    rmsnorm_forward(m->dec.ln1, m->dec.rstd1, last, m->final_norm, m->cfg.rms_norm_eps, 1, d->C);
    lmhead_logits(logits, m->dec.ln1, &m->lm_head, 1);
    m->d.dropout = drop;
    return 0;
}

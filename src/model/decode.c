/* decode.c: incremental generation with a KV cache for one sequence. New
 * tokens at positions pos.. are run through the blocks in chunks of
 * dec_rows rows; their keys and values are appended to the cache and their
 * queries attend to every cached position up to their own (causal), so the
 * prefix is never recomputed. */
#include "model/model_internal.h"
#include "kernels/ops.h"
#include "base/error.h"
#include <math.h>
#include <string.h>

/* out (rows, H*D): query row i (absolute position p0 + i) over cache 0..p0+i. */
static void cached_attention(Model *m, float *out, const float *q, const float *kc, const float *vc, int rows, int p0) {
    const Dims *d = &m->d;
    int H = d->H, D = d->D, KVD = d->KVD, grp = d->H / d->KVH;
    float sc = 1.0f / sqrtf((float)D);
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float *s = m->dec_scores + (size_t)h * d->kv_T;
        int kh = h / grp;
        for (int i = 0; i < rows; i++) {
            int n = p0 + i + 1;
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
            for (int j = 0; j < n; j++) { s[j] = expf(s[j] - mx); sum += s[j]; }
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

static void add_inplace(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static void decode_block(Model *m, int l, const float *x, float *x_out, int rows, int p0) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[l];
    const BlockActs *a = &m->dec;
    float eps = m->cfg.rms_norm_eps;
    rmsnorm_forward(a->ln1, a->rstd1, x, bp->ln1, eps, rows, d->C);
    const uint16_t *ln1_16 = proj_shared_input(bp, PROJ_Q, PROJ_V, a->ln1, rows, d->C);
    float *q = d->qk_norm ? a->q_pre : a->q, *k = d->qk_norm ? a->k_pre : a->k;
    proj_forward(m, bp, l, PROJ_Q, q, a->ln1, ln1_16, a->xa[PROJ_Q], rows, false);
    proj_forward(m, bp, l, PROJ_K, k, a->ln1, ln1_16, a->xa[PROJ_K], rows, false);
    proj_forward(m, bp, l, PROJ_V, a->v, a->ln1, ln1_16, a->xa[PROJ_V], rows, false);
    if (d->qk_norm) {
        rmsnorm_forward(a->q, a->q_rstd, a->q_pre, bp->qn, eps, rows * d->H, d->D);
        rmsnorm_forward(a->k, a->k_rstd, a->k_pre, bp->kn, eps, rows * d->KVH, d->D);
    }
    size_t half = (size_t)d->D / 2;
    rope_forward(a->q, m->rope_cos + (size_t)p0 * half, m->rope_sin + (size_t)p0 * half, 1, rows, d->H, d->D);
    rope_forward(a->k, m->rope_cos + (size_t)p0 * half, m->rope_sin + (size_t)p0 * half, 1, rows, d->KVH, d->D);
    float *kc = m->kcache + (size_t)l * d->kv_T * d->KVD, *vc = m->vcache + (size_t)l * d->kv_T * d->KVD;
    memcpy(kc + (size_t)p0 * d->KVD, a->k, (size_t)rows * d->KVD * sizeof(float));
    memcpy(vc + (size_t)p0 * d->KVD, a->v, (size_t)rows * d->KVD * sizeof(float));
    cached_attention(m, a->att, a->q, kc, vc, rows, p0);
    proj_forward(m, bp, l, PROJ_O, a->x_mid, a->att, NULL, a->xa[PROJ_O], rows, false);
    add_inplace(a->x_mid, x, (size_t)rows * d->C);
    rmsnorm_forward(a->ln2, a->rstd2, a->x_mid, bp->ln2, eps, rows, d->C);
    const uint16_t *ln2_16 = proj_shared_input(bp, PROJ_GATE, PROJ_UP, a->ln2, rows, d->C);
    proj_forward(m, bp, l, PROJ_GATE, a->gate, a->ln2, ln2_16, a->xa[PROJ_GATE], rows, false);
    proj_forward(m, bp, l, PROJ_UP, a->up, a->ln2, ln2_16, a->xa[PROJ_UP], rows, false);
    swiglu_forward(a->act, a->gate, a->up, (size_t)rows * d->F);
    proj_forward(m, bp, l, PROJ_DOWN, x_out, a->act, NULL, a->xa[PROJ_DOWN], rows, false);
    add_inplace(x_out, a->x_mid, (size_t)rows * d->C);
}

int model_decode(Model *m, const int32_t *tokens, int n, int pos, float *logits) {
    const Dims *d = &m->d;
    if (d->kv_T <= 0) return error_set("model: loaded without a KV cache (kv_cache_tokens = 0)");
    if (n <= 0) return error_set("model: decode needs at least one token");
    if (pos < 0 || pos != (pos == 0 ? 0 : m->dec_len))
        return error_set("model: decode at position %d but the cache holds %d positions", pos, m->dec_len);
    if ((long)pos + n > d->kv_T)
        return error_set("model: %d positions exceed the KV cache of %d tokens", pos + n, d->kv_T);
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0) return error_set("token id %d is negative at position %d", tokens[i], pos + i);
        if (tokens[i] >= d->V) return error_set("token id %d >= vocab size %d at position %d", tokens[i], d->V, pos + i);
    }
    model_bind_scratch(m);
    bool drop = m->d.dropout;
    m->d.dropout = false;
    if (pos == 0 || !m->dora_fresh) dora_update_norms(m);
    float *x = m->dec_x, *y = m->dec_x2;
    int rows = 0;
    for (int c0 = 0; c0 < n; c0 += d->dec_rows) {
        rows = n - c0 < d->dec_rows ? n - c0 : d->dec_rows;
        fw_gather_rows(x, (const int *)tokens + c0, rows, &m->embed);
        for (int l = 0; l < d->L; l++) {
            decode_block(m, l, x, y, rows, pos + c0);
            float *t = x; x = y; y = t;
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

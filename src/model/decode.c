/* decode.c: incremental generation with a KV cache for one sequence. New
 * tokens at positions pos.. are run through the blocks in chunks of
 * dec_rows rows; an attention block writes their keys and values to its
 * cache and their queries attend to the cached positions they see (causal,
 * and within the window on sliding layers), so the prefix is never
 * recomputed. A sliding layer's cache is a ring of window + dec_rows - 1
 * positions (position p in slot p mod its length): the rolling window cache.
 * Longrope (phi3) picks its factors by the sequence's length; like
 * transformers' Phi3, the cached prefix is recomputed once with the long
 * factors when the sequence grows past original_max_position_embeddings, so
 * every logit equals a full recomputation of the sequence so far. A full
 * layer's cache holds kv_T positions; generation may go past them
 * (mlx_lm --max-kv-size): the cache then rotates, keeping the first KV_KEEP
 * positions and overwriting the oldest of the others (MLX-LM's
 * RotatingKVCache); keys are cached after RoPE at their absolute positions,
 * so attention over the slots needs no order. A Gated
 * DeltaNet block (Qwen3.5) carries its last K-1 conv inputs and its
 * recurrent state instead of a KV cache: a multi-token chunk goes through
 * the chunked rule from that state, a single token through the plain
 * recurrence (block_gdn.c). */
#include "model/model_internal.h"
#include "kernels/ops.h"
#include "base/error.h"
#include <limits.h>
#include <math.h>
#include <string.h>

/* out (rows, H*D): query row i (absolute position p0 + i) over the cached
 * positions it sees (kernels/attention_cache.c). */
static void cached_attention(Model *m, int l, float *out, const float *q, int rows, int p0) {
    const Dims *d = &m->d;
    attention_cached(out, q, m->kcache + m->kv_off[l] * d->KVD, m->vcache + m->kv_off[l] * d->KVD, m->dec_scores,
                     (size_t)d->kv_T, rows, p0, m->kv_len[l], d->H, d->KVH, d->D, &m->attn[l]);
}

/* Chunks of at least this many rows go through the tiles (attention_prefill)
 * where they can: a prompt's chunks. Single tokens stay on attention_cached. */
enum { PREFILL_MIN_ROWS = 16 };

/* out (rows, H*D) through the training forward's tiles when the cache holds
 * positions 0 .. p0 + rows - 1 in slots 0 .. p0 + rows - 1 (a full layer's
 * before it rotates, a sliding layer's ring before it wraps) and p0 is on a
 * tile boundary (the prompt's chunks from position 0); else row by row.
 * dec_scores holds the tiles' log-sum-exp ((H, rows) floats). */
static void chunk_attention(Model *m, int l, float *out, const float *q, int rows, int p0) {
    const Dims *d = &m->d;
    if (rows >= PREFILL_MIN_ROWS && p0 % ATTN_PREFILL_ALIGN == 0 && p0 + rows <= m->kv_len[l] && rows <= d->kv_T) {
        attention_prefill(out, m->dec_scores, q, m->kcache + m->kv_off[l] * d->KVD,
                          m->vcache + m->kv_off[l] * d->KVD, rows, p0, d->H, d->KVH, d->D, &m->attn[l]);
        return;
    }
    cached_attention(m, l, out, q, rows, p0);
}

/* The slot of absolute position p in layer l's cache: p modulo the ring of
 * a sliding layer; on a full layer p itself until the cache is full, then a
 * ring over the slots after the first KV_KEEP (the rotating cache). */
static int kv_slot(const Model *m, int l, int p) {
    int len = m->kv_len[l];
    if (m->attn[l].window > 0) return p % len;
    if (p < len) return p;
    return KV_KEEP + (p - KV_KEEP) % (len - KV_KEEP);
}

static void add_inplace(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* The attention half of block l for rows new positions from p0: x -> a->x_mid;
 * seq_len picks longrope's factors. */
static void decode_attention(Model *m, int l, BlockActs *a, const float *x, int rows, int p0, int seq_len) {
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[l];
    float eps = m->cfg.rms_norm_eps, off = d->norm_off;
    rmsnorm_forward(a->ln1, a->rstd1, x, bp->ln1, off, eps, rows, d->C);
    block_qkv_forward(m, l, a, rows);
    const float *sin_t, *cos_t = layer_rope(m, l, seq_len, &sin_t);
    if (cos_t) {
        size_t half = (size_t)d->rd / 2;
        rope_forward(a->q, cos_t + (size_t)p0 * half, sin_t + (size_t)p0 * half, 1, rows, d->H, d->D, d->rd);
        rope_forward(a->k, cos_t + (size_t)p0 * half, sin_t + (size_t)p0 * half, 1, rows, d->KVH, d->D, d->rd);
    }
    float *kc = m->kcache + m->kv_off[l] * d->KVD, *vc = m->vcache + m->kv_off[l] * d->KVD;
    /* a full layer's cache that rotates within this chunk: each row's key and
     * value replace the oldest overwritable slot, then the row attends, so no
     * row loses a position it should see to a later row of the chunk */
    bool rotates = m->attn[l].window == 0 && p0 + rows > m->kv_len[l];
    for (int i = 0; i < rows; i++) {
        size_t slot = (size_t)kv_slot(m, l, p0 + i);
        memcpy(kc + slot * d->KVD, a->k + (size_t)i * d->KVD, (size_t)d->KVD * sizeof(float));
        memcpy(vc + slot * d->KVD, a->v + (size_t)i * d->KVD, (size_t)d->KVD * sizeof(float));
        if (rotates)
            cached_attention(m, l, a->att + (size_t)i * d->QD, a->q + (size_t)i * d->QD, 1, p0 + i);
    }
    if (!rotates) chunk_attention(m, l, a->att, a->q, rows, p0);
    const float *o_in = block_attn_out_input(m, a, rows);
    if (d->sandwich) {
        proj_forward(m, bp, l, PROJ_O, a->o, o_in, NULL, a->xa[PROJ_O], rows, false);
        rmsnorm_forward(a->x_mid, a->prstd1, a->o, bp->pn1, off, eps, rows, d->C);
    } else {
        proj_forward(m, bp, l, PROJ_O, a->x_mid, o_in, NULL, a->xa[PROJ_O], rows, false);
    }
    add_inplace(a->x_mid, x, (size_t)rows * d->C);
}

/* One block on `rows` new positions starting at p0. */
static void decode_block(Model *m, int l, const float *x, float *x_out, int rows, int p0, int seq_len) {
    BlockActs a = m->dec;
    a.x_in = (float *)x;
    if (m->blocks[l].gdn) gdn_mixer_decode(m, l, &a, x, rows);
    else decode_attention(m, l, &a, x, rows, p0, seq_len);
    block_mlp_forward(m, l, &a, x_out, rows, false);
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
    memcpy(m->dec_tokens + pos, tokens, (size_t)n * sizeof *tokens);
    const RopeScaling *rs = &m->cfg.rope_scaling;
    bool want_long = rs->type == ROPE_SCALING_LONGROPE && (long)pos + n > rs->original_max_position;
    int start = pos;
    if (pos == 0) {
        m->dec_long = want_long;
    } else if (want_long && !m->dec_long) {
        m->dec_long = true;
        start = 0;   /* the cached prefix was rotated with the short factors: recompute it */
    }
    int seq_len = m->dec_long ? INT_MAX : 0;
    if (start == 0 && d->n_gdn) {
        /* a new sequence: Gated DeltaNet layers start from zero states */
        const GdnDims *g = &d->g;
        memset(m->conv_state, 0, (size_t)d->n_gdn * (g->K - 1) * g->CC * sizeof(float));
        memset(m->rec_state, 0, (size_t)d->n_gdn * g->Hv * g->Dk * g->Dv * sizeof(float));
    }
    float *x = m->dec_x, *y = m->dec_x2;
    int rows = 0, end = pos + n;
    for (int c0 = start; c0 < end; c0 += d->dec_rows) {
        rows = end - c0 < d->dec_rows ? end - c0 : d->dec_rows;
        embed_rows(m, x, (const int *)m->dec_tokens + c0, rows);
        for (int l = 0; l < d->L; l++) {
            decode_block(m, l, x, y, rows, c0, seq_len);
            float *t = x;
            x = y;
            y = t;
        }
    }
    m->dec_len = end;
    /* final norm and logits of the last position only */
    const float *last = x + (size_t)(rows - 1) * d->C;
    rmsnorm_forward(m->dec.ln1, m->dec.rstd1, last, m->final_norm, d->norm_off, m->cfg.rms_norm_eps, 1, d->C);
    lmhead_logits(logits, m->dec.ln1, &m->lm_head, (float)m->cfg.final_softcap, 1);
    m->d.dropout = drop;
    return 0;
}

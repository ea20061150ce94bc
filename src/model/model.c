/* model.c: the whole decoder on one micro-batch: token checks, embedding
 * (times gemma's scale),
 * the blocks (frozen ones forward only through two ping-pong residual
 * buffers; trainable ones saving their activations, or only their input
 * with gradient checkpointing), final norm, the chunked LM head with
 * cross-entropy, and the backward pass down to the lowest trainable block.
 * Also model_loss (eval) and model_logits. */
#include "model/model_internal.h"
#include "kernels/ops.h"
#include "kernels/matmul.h"
#include "base/error.h"
#include "base/profile.h"
#include <string.h>

static int check_batch(const Model *m, const int32_t *tokens, int B, int W, bool shifted) {
    const Dims *d = &m->d;
    int T = shifted ? W - 1 : W;
    if (B <= 0 || T <= 0) return error_set("model: empty batch (%d rows x %d tokens)", B, W);
    if ((size_t)B * (size_t)T > (size_t)d->N || T > d->T)
        return error_set("model: batch of %d x %d positions exceeds the planned %d x %d", B, T, d->B, d->T);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < W; j++) {
            int32_t t = tokens[(size_t)b * W + j];
            if (t < 0) return error_set("token id %d is negative in batch row %d", t, b);
            if (t >= d->V) return error_set("token id %d >= vocab size %d in batch row %d", t, d->V, b);
        }
    return 0;
}

const float *layer_rope(const Model *m, int l, int len, const float **sin_t) {
    const ModelConfig *c = &m->cfg;
    if (c->layer_flags[l] & LAYER_NOPE) {
        *sin_t = NULL;
        return NULL;
    }
    int set = 0;
    if (c->rope_scaling.type == ROPE_SCALING_LONGROPE) set = len > c->rope_scaling.original_max_position;
    else if (m->d.n_rope > 1) set = (c->layer_flags[l] & LAYER_SLIDING) != 0;
    *sin_t = m->rope_sin[set];
    return m->rope_cos[set];
}

void embed_rows(Model *m, float *out, const int *ids, int n) {
    int C = m->d.C;
    fw_gather_rows(out, ids, n, &m->embed);
    if (m->embed_scale == 0.0f) return;
    float s = m->embed_scale;
    size_t total = (size_t)n * C;
    #pragma omp parallel for schedule(static) if (total > 32768)
    for (size_t i = 0; i < total; i++) out[i] *= s;
}

/* Input buffer of trainable block l in training mode. */
static float *train_input(Model *m, int l) {
    int i = l - m->d.lo;
    return block_ckpt(m, l) ? m->ckpt[i] : m->acts[i].x_in;
}

/* Embedding and every block on m->ids (B, T). Returns the final residual. */
static float *forward_blocks(Model *m, int B, int T) {
    const Dims *d = &m->d;
    int N = B * T;
    bool train = d->train;
    /* frozen blocks run in the recompute set when there is one, else in the
     * lowest trainable block's saved set (overwritten when that block runs);
     * Qwen3.5: in their own workspace, the kinds may differ */
    BlockActs *ws = (train && !m->any_ckpt && !d->q35) ? &m->acts[0] : &m->work;
    float *x = (train && d->lo == 0) ? train_input(m, 0) : m->resid[0];
    PROF(PROF_ELEMENT, embed_rows(m, x, m->ids, N));
    for (int l = 0; l < d->L; l++) {
        bool tr = train && l >= d->lo;
        BlockActs a = (tr && !block_ckpt(m, l)) ? m->acts[l - d->lo] : *ws;
        a.x_in = x;
        float *out;
        if (train && l + 1 < d->L && l + 1 >= d->lo) out = train_input(m, l + 1);
        else out = x == m->resid[0] ? m->resid[1] : m->resid[0];
        block_forward(m, l, &a, out, B, T, false);
        x = out;
    }
    return x;
}

/* ids, targets and row weights; returns the number of counted targets. */
static long prepare_targets(Model *m, const int32_t *tokens, int B, int W,
                            const int32_t *lengths, const int32_t *offsets) {
    int T = W - 1;
    long count = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++) {
            size_t i = (size_t)b * T + j;
            m->ids[i] = tokens[(size_t)b * W + j];
            m->targets[i] = tokens[(size_t)b * W + j + 1];
            int s = j + 1;
            bool counted = offsets[b] <= s && s < lengths[b];
            m->row_weight[i] = counted ? 1.0f : 0.0f;
            count += counted;
        }
    return count;
}

static int check_common(Model *m) {
    if (m->d.N == 0) return error_set("model: loaded without batch buffers (max_rows x max_tokens = 0)");
    model_bind_scratch(m);
    return 0;
}

/* The bf16 conversion scratch, oneDNN's scratchpad and the panel scratch
 * are library globals: point them at this model's before computing
 * (another model may have been loaded since). */
void model_bind_scratch(Model *m) {
    if (m->mm_scratch) matmul_set_scratch(m->mm_scratch, m->mm_scratch_bytes);
    if (m->mm_pad) matmul_set_scratchpad(m->mm_pad, m->mm_pad_bytes);
    if (m->panel_scratch) fw_set_panel_scratch(m->panel_scratch, m->panel_scratch_bytes);
}

int model_loss(Model *m, const int32_t *tokens, int B, int W,
               const int32_t *lengths, const int32_t *offsets,
               double *loss_sum, long *n_tokens) {
    TRY(check_common(m));
    TRY(check_batch(m, tokens, B, W, true));
    int T = W - 1, N = B * T;
    long cnt = prepare_targets(m, tokens, B, W, lengths, offsets);
    *loss_sum = 0;
    *n_tokens = cnt;
    if (cnt == 0) return 0;
    bool drop = m->d.dropout;
    m->d.dropout = false;
    dora_update_norms(m);
    float *x = forward_blocks(m, B, T);
    rmsnorm_forward(m->final_out, m->final_rstd, x, m->final_norm, m->d.norm_off, m->cfg.rms_norm_eps, N, m->d.C);
    *loss_sum = lmhead_xent(NULL, NULL, m->final_out, &m->lm_head, m->targets, m->row_weight,
                            m->lmhead_scratch, (float)m->cfg.final_softcap, m->d.chunk, N);
    m->d.dropout = drop;
    return 0;
}

int model_forward_backward(Model *m, const int32_t *tokens, int B, int W,
                           const int32_t *lengths, const int32_t *offsets,
                           float grad_scale, Rng *dropout_rng,
                           double *loss, long *n_tokens) {
    const Dims *d = &m->d;
    if (!d->train) return error_set("model: loaded without training buffers");
    TRY(check_common(m));
    TRY(check_batch(m, tokens, B, W, true));
    if (d->dropout && !dropout_rng) return error_set("model: LoRA dropout needs a random generator");
    int T = W - 1, N = B * T;
    long cnt = prepare_targets(m, tokens, B, W, lengths, offsets);
    *loss = 0;
    *n_tokens = cnt;
    if (cnt == 0) return 0;
    if (grad_scale == 0.0f) {
        double s;
        long c;
        TRY(model_loss(m, tokens, B, W, lengths, offsets, &s, &c));
        *loss = s / (double)c;
        return 0;
    }
    float w = grad_scale / (float)cnt;
    for (int i = 0; i < N; i++) m->row_weight[i] *= w;
    if (d->dropout) m->dropout_seed = rng_next(dropout_rng);
    dora_update_norms(m);

    float *x = forward_blocks(m, B, T);
    PROF(PROF_NORM, rmsnorm_forward(m->final_out, m->final_rstd, x, m->final_norm, d->norm_off, m->cfg.rms_norm_eps,
                                    N, d->C));
    Scratch *sc = &m->sc;
    double t0 = prof_begin();
    memset(sc->dres, 0, (size_t)N * d->C * sizeof(float));
    memset(sc->dln, 0, (size_t)N * d->C * sizeof(float));
    prof_end(PROF_ELEMENT, t0);
    t0 = prof_begin();
    double sum = lmhead_xent(sc->dln, NULL, m->final_out, &m->lm_head, m->targets, m->row_weight,
                             m->lmhead_scratch, (float)m->cfg.final_softcap, d->chunk, N);
    prof_end(PROF_LMHEAD, t0);
    *loss = sum / (double)grad_scale;
    PROF(PROF_NORM, rmsnorm_backward(sc->dres, NULL, sc->dln, x, m->final_norm, d->norm_off, m->final_rstd, N, d->C));
    for (int l = d->L - 1; l >= d->lo; l--) {
        BlockActs a;
        if (block_ckpt(m, l)) {
            a = m->work;
            a.x_in = m->ckpt[l - d->lo];
            block_forward(m, l, &a, NULL, B, T, true);
        } else {
            a = m->acts[l - d->lo];
        }
        block_backward(m, l, &a, B, T);
    }
    return 0;
}

int model_logits(Model *m, const int32_t *tokens, int B, int T, float *logits) {
    TRY(check_common(m));
    TRY(check_batch(m, tokens, B, T, false));
    int N = B * T;
    for (int i = 0; i < N; i++) m->ids[i] = tokens[i];
    bool drop = m->d.dropout;
    m->d.dropout = false;
    dora_update_norms(m);
    float *x = forward_blocks(m, B, T);
    rmsnorm_forward(m->final_out, m->final_rstd, x, m->final_norm, m->d.norm_off, m->cfg.rms_norm_eps, N, m->d.C);
    lmhead_logits(logits, m->final_out, &m->lm_head, (float)m->cfg.final_softcap, N);
    m->d.dropout = drop;
    return 0;
}

/* model_layout.c: the one walk over every buffer the model holds. In
 * planning mode (Carver without arena) it records sizes; model_load runs the
 * very same walk on the arena and gets the pointers. Groups of buffers that
 * always live together (one block's activations, the backward scratch) are
 * one carve each, split into 64-byte aligned pieces, so the plan stays short
 * and readable. (The weights used in place from the mapped files are
 * noted outside the arena by model_residency.c.) */
#include "model/model_internal.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdio.h>
#include <string.h>

const char *const PROJ_KEYS[PROJ_COUNT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
};

static int imax(int a, int b) { return a > b ? a : b; }

int dims_init(Dims *d, const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype) {
    memset(d, 0, sizeof *d);
    d->C = cfg->hidden_size; d->F = cfg->intermediate_size; d->L = cfg->num_hidden_layers;
    d->H = cfg->num_attention_heads; d->KVH = cfg->num_key_value_heads; d->D = cfg->head_dim;
    d->V = cfg->vocab_size;
    if (d->C <= 0 || d->F <= 0 || d->L <= 0 || d->H <= 0 || d->KVH <= 0 || d->D <= 0 || d->V <= 0)
        return error_set("model: config has a non-positive dimension");
    if (d->H % d->KVH) return error_set("model: num_attention_heads %d is not a multiple of num_key_value_heads %d", d->H, d->KVH);
    if (d->D % 2) return error_set("model: head_dim %d is odd (RoPE needs pairs)", d->D);
    d->QD = d->H * d->D; d->KVD = d->KVH * d->D;
    d->qk_norm = cfg->qk_norm; d->bias = cfg->attention_bias;
    if (spec->max_rows < 0 || spec->max_tokens < 0 || spec->kv_cache_tokens < 0)
        return error_set("model: negative batch shape");
    d->B = spec->max_rows; d->T = spec->max_tokens;
    size_t n = (size_t)d->B * (size_t)d->T;
    if (n > (1u << 30)) return error_set("model: batch of %zu tokens is too large", n);
    d->N = (int)n;
    bool tuned = spec->type != TUNE_NONE;
    int nl = spec->num_layers;
    if (tuned) {
        if (nl > d->L) return error_set("model: --num-layers %d is more than the model's %d layers", nl, d->L);
        if (nl <= 0) nl = d->L;
        d->lo = d->L - nl;
    } else {
        d->lo = d->L;
    }
    d->n_train = d->L - d->lo;
    if (spec->type == TUNE_LORA || spec->type == TUNE_DORA) {
        if (spec->lora_rank <= 0) return error_set("model: LoRA rank must be positive (got %d)", spec->lora_rank);
        if ((spec->lora_keys & PROJ_ALL) == 0) return error_set("model: no LoRA keys selected");
        d->r = spec->lora_rank;
    }
    d->train = tuned && spec->training;
    if (d->train && d->N == 0) return error_set("model: training needs max_rows and max_tokens > 0");
    if (spec->lora_dropout < 0 || spec->lora_dropout >= 1) return error_set("model: lora dropout %g not in [0, 1)", spec->lora_dropout);
    d->dropout = d->train && d->r > 0 && spec->lora_dropout > 0;
    /* 256 rows: oneDNN reaches ~97 (forward) and ~89 (dinp, K = V) GFLOP/s per
     * core there, against ~91 and ~77 at 128 rows (-0.28 s CPU a SmolLM2 step),
     * for (256 - 128) x V more floats of scratch (25 MB at V = 49152). */
    d->chunk = spec->lmhead_chunk > 0 ? spec->lmhead_chunk : 256;
    if (d->N > 0 && d->chunk > d->N) d->chunk = d->N;
    if (d->chunk < 1) d->chunk = 1;
    d->kv_T = spec->kv_cache_tokens;
    d->dec_rows = d->kv_T > 0 ? (d->kv_T < 128 ? d->kv_T : 128) : 0;
    d->rope_T = imax(d->T, d->kv_T);
    if (spec->weight_dtype != DTYPE_F32 && spec->weight_dtype != DTYPE_BF16)
        return error_set("model: weight dtype must be F32 or BF16 (got %s)", dtype_name(spec->weight_dtype));
    if (file_dtype != DTYPE_F32 && file_dtype != DTYPE_BF16 && file_dtype != DTYPE_F16)
        return error_set("model: weights of dtype %s are not supported (F32, BF16, F16)", dtype_name(file_dtype));
    d->file_dtype = file_dtype;
    if (file_dtype != spec->weight_dtype) { /* F16 always; BF16 -> F32 where bf16 products do not exist */
        d->convert = true; d->run_dtype = spec->weight_dtype;
    } else {
        d->convert = false; d->run_dtype = file_dtype;
    }
    return 0;
}

int dims_apply_summary(Dims *d, const ModelSpec *spec, const WeightsSummary *ws) {
    if (!ws->quantized) {
        d->bf16_compute = d->run_dtype == DTYPE_BF16;
        d->panel_cols = 0;
        return 0;
    }
    if (spec->type == TUNE_FULL && ws->gguf)
        return error_set("--fine-tune-type full: a GGUF base's matrices are used as the file stores them; use lora "
                         "or dora, or a Hugging Face model directory");
    if (spec->type == TUNE_FULL)
        return error_set("--fine-tune-type full: the model is quantized and its packed weights cannot be trained "
                         "(MLX-LM would train only the norms and biases); use lora or dora, or a full-precision "
                         "model (lmtune convert -d)");
    d->quantized = true;
    d->convert = false;
    d->run_dtype = d->file_dtype;
    d->bf16_compute = ws->bf16_compute;
    d->panel_cols = ws->panel_cols;
    if (ws->gguf) {
        /* a GGUF's blocks expand to the compute type the run asks for */
        d->run_dtype = spec->weight_dtype == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32;
        d->bf16_compute = d->run_dtype == DTYPE_BF16;
    }
    return 0;
}

void proj_shape(const Dims *d, int p, int *in, int *out) {
    switch (p) {
    case PROJ_Q: *in = d->C; *out = d->QD; break;
    case PROJ_K: case PROJ_V: *in = d->C; *out = d->KVD; break;
    case PROJ_O: *in = d->QD; *out = d->C; break;
    case PROJ_GATE: case PROJ_UP: *in = d->C; *out = d->F; break;
    default: *in = d->F; *out = d->C; break;
    }
}

/* Bump allocation inside one carved block: pass 1 (base NULL) sizes it. */
typedef struct { char *base; size_t off; } Sub;
static float *sub_f(Sub *s, size_t count) {
    float *p = s->base ? (float *)(s->base + s->off) : NULL;
    s->off += arena_block_size(count * sizeof(float));
    return p;
}

static bool block_full(const Model *m, int l) { return block_is_full(m, l); }
static unsigned block_adapted(const Model *m, int l) { return block_adapted_mask(m, l); }

/* One block's activation set. full: a training set (x_in is not carved here;
 * every adapted projection keeps its own x@A); otherwise a forward workspace
 * whose projections share one x@A scratch. */
static void acts_split(const Dims *d, Sub *s, BlockActs *a, unsigned adapted, bool own_xa, int rows, int B,
                       bool transient) {
    size_t N = (size_t)rows;
    a->transient = transient;
    if (!transient) a->ln1 = sub_f(s, N * d->C);
    a->rstd1 = sub_f(s, N);
    if (d->qk_norm) {
        a->q_pre = sub_f(s, N * d->QD); a->k_pre = sub_f(s, N * d->KVD);
        a->q_rstd = sub_f(s, N * d->H); a->k_rstd = sub_f(s, N * d->KVH);
    }
    a->q = sub_f(s, N * d->QD); a->k = sub_f(s, N * d->KVD); a->v = sub_f(s, N * d->KVD);
    a->att = sub_f(s, N * d->QD);
    a->lse = sub_f(s, B > 0 ? N * d->H : 0);   /* decode (B = 0) keeps no log-sum-exp */
    a->x_mid = sub_f(s, N * d->C);
    if (!transient) a->ln2 = sub_f(s, N * d->C);
    a->rstd2 = sub_f(s, N);
    a->gate = sub_f(s, N * d->F); a->up = sub_f(s, N * d->F);
    if (!transient) a->act = sub_f(s, N * d->F);
    float *shared = NULL;
    if (adapted && !own_xa) shared = sub_f(s, N * d->r);
    for (int p = 0; p < PROJ_COUNT; p++)
        a->xa[p] = (adapted >> p & 1u) ? (own_xa ? sub_f(s, N * d->r) : shared) : NULL;
}

/* transient: ln1, ln2 and the SwiGLU output are not kept (they are cheap to
 * rebuild from the saved block input, mid residual, rstd, gate and up); they
 * point into `shared`, one (N, 2C + F) region all trainable blocks reuse. */
static int carve_acts(Carver *cv, MemClass cls, const char *name, const Dims *d, BlockActs *a,
                      unsigned adapted, bool own_xa, int rows, int B, bool transient, float *shared) {
    Sub s = {0};
    BlockActs tmp;
    acts_split(d, &s, &tmp, adapted, own_xa, rows, B, transient);
    void *base;
    TRY(carve(cv, cls, name, s.off, &base));
    memset(a, 0, sizeof *a);
    if (base) { Sub s2 = {base, 0}; acts_split(d, &s2, a, adapted, own_xa, rows, B, transient); }
    if (transient && shared) {
        size_t N = (size_t)rows;
        a->transient = true;
        a->ln1 = shared; a->ln2 = shared + N * d->C; a->act = shared + 2 * N * d->C;
    }
    return 0;
}

/* Trainable tensors in their fixed order; list may be NULL (count only). */
static size_t add_t(TrainableTensor *list, size_t i, size_t *floats, const char *name, int ndim, int64_t a, int64_t b) {
    if (list) {
        TrainableTensor *t = &list[i];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->ndim = ndim; t->shape[0] = a; t->shape[1] = ndim == 2 ? b : 0;
        t->numel = (size_t)a * (ndim == 2 ? (size_t)b : 1);
        /* value/grad hold offsets until the block is carved */
        t->value = (float *)(uintptr_t)(*floats);
    }
    size_t numel = (size_t)a * (ndim == 2 ? (size_t)b : 1);
    *floats += (numel + 15) / 16 * 16;
    return i + 1;
}

size_t trainables_enumerate(const Model *m, TrainableTensor *list, size_t *floats) {
    const Dims *d = &m->d;
    size_t i = 0; *floats = 0;
    char nm[128];
    for (int l = d->lo; l < d->L; l++) {
        if (block_full(m, l)) {
#define T1(suffix, n) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), i = add_t(list, i, floats, nm, 1, (n), 0))
#define T2(suffix, a, b) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), i = add_t(list, i, floats, nm, 2, (a), (b)))
            T1("input_layernorm.weight", d->C);
            for (int p = 0; p < PROJ_COUNT; p++) {
                int in, out; proj_shape(d, p, &in, &out);
                char s2[64];
                snprintf(s2, sizeof s2, "%s.weight", PROJ_KEYS[p]); T2(s2, out, in);
                if (d->bias && p <= PROJ_V) { snprintf(s2, sizeof s2, "%s.bias", PROJ_KEYS[p]); T1(s2, out); }
                if (p == PROJ_V && d->qk_norm) { T1("self_attn.q_norm.weight", d->D); T1("self_attn.k_norm.weight", d->D); }
                if (p == PROJ_O) T1("post_attention_layernorm.weight", d->C);
            }
#undef T1
#undef T2
        } else {
            unsigned ad = block_adapted(m, l);
            for (int p = 0; p < PROJ_COUNT; p++) {
                if (!(ad >> p & 1u)) continue;
                int in, out; proj_shape(d, p, &in, &out);
                snprintf(nm, sizeof nm, "model.layers.%d.%s.lora_a", l, PROJ_KEYS[p]);
                i = add_t(list, i, floats, nm, 2, in, d->r);
                snprintf(nm, sizeof nm, "model.layers.%d.%s.lora_b", l, PROJ_KEYS[p]);
                i = add_t(list, i, floats, nm, 2, d->r, out);
                if (m->spec.type == TUNE_DORA) {
                    snprintf(nm, sizeof nm, "model.layers.%d.%s.m", l, PROJ_KEYS[p]);
                    i = add_t(list, i, floats, nm, 1, out, 0);
                }
            }
        }
    }
    return i;
}

/* Points the block parameters at the trainable tensors (allocation mode). */
static void bind_trainables(Model *m) {
    size_t i = 0;
    const Dims *d = &m->d;
    for (int l = d->lo; l < d->L; l++) {
        BlockParams *bp = &m->blocks[l];
#define NEXT(v, g) do { v = m->trainables[i].value; g = m->trainables[i].grad; i++; } while (0)
        if (block_full(m, l)) {
            NEXT(bp->ln1, bp->dln1);
            for (int p = 0; p < PROJ_COUNT; p++) {
                float *w; NEXT(w, bp->dw[p]);
                int in, out;
                proj_shape(d, p, &in, &out);
                bp->w[p] = fw_plain(w, DTYPE_F32, out, in, DTYPE_F32);
                if (d->bias && p <= PROJ_V) NEXT(bp->bias[p], bp->dbias[p]);
                if (p == PROJ_V && d->qk_norm) { NEXT(bp->qn, bp->dqn); NEXT(bp->kn, bp->dkn); }
                if (p == PROJ_O) NEXT(bp->ln2, bp->dln2);
            }
        } else {
            for (int p = 0; p < PROJ_COUNT; p++) {
                if (!(bp->adapted >> p & 1u)) continue;
                NEXT(bp->la[p], bp->dla[p]);
                NEXT(bp->lb[p], bp->dlb[p]);
                if (m->spec.type == TUNE_DORA) NEXT(bp->dm[p], bp->ddm[p]);
            }
        }
#undef NEXT
    }
}

static size_t max_in_out(const Dims *d);

static void scratch_split(const Dims *d, Sub *s, Scratch *sc, bool dora) {
    size_t N = (size_t)d->N;
    sc->dres = sub_f(s, N * d->C); sc->dln = sub_f(s, N * d->C);
    sc->datt = sub_f(s, N * d->QD); sc->dq = sub_f(s, N * d->QD);
    sc->dk = sub_f(s, N * d->KVD); sc->dv = sub_f(s, N * d->KVD);
    if (d->qk_norm) { sc->dq_pre = sub_f(s, N * d->QD); sc->dk_pre = sub_f(s, N * d->KVD); }
    sc->dgate = sub_f(s, N * d->F); sc->dup = sub_f(s, N * d->F); sc->dact = sub_f(s, N * d->F);
    if (d->r) sc->dxa = sub_f(s, N * d->r);
    if (d->r) sc->dat = sub_f(s, (size_t)d->r * max_in_out(d));
    if (dora) sc->ylin = sub_f(s, N * (size_t)imax(imax(d->C, d->F), d->QD));
}

static size_t max_in_out(const Dims *d) { return (size_t)imax(imax(d->C, d->F), imax(d->QD, d->KVD)); }

static void lora_split(const Dims *d, Sub *s, LoraScratch *ls, bool dora) {
    if (d->dropout) ls->drop_x = sub_f(s, (size_t)d->N * max_in_out(d));
    if (dora) {
        size_t mx = max_in_out(d);
        ls->at = sub_f(s, (size_t)d->r * mx); ls->wa = sub_f(s, (size_t)d->r * mx);
        ls->g = sub_f(s, (size_t)d->r * d->r); ls->gb = sub_f(s, (size_t)d->r * mx);
    }
}

int layout_walk(Model *m, const ModelSpec *spec, Carver *cv) {
    const Dims *d = &m->d;
    const ModelConfig *cfg = &m->cfg;
    bool dora = spec->type == TUNE_DORA;
    char nm[160];
    size_t wsz = m->d.run_dtype == DTYPE_F32 ? 4 : 2;

    /* Block parameter slots (heap, not arena) */
    for (int l = 0; l < d->L; l++) m->blocks[l].adapted = block_adapted(m, l);

    /* 1. frozen matrices converted from the file's dtype */
    if (d->convert) {
        void *p;
        CARVE(cv, MEM_FROZEN_WEIGHTS, "model.embed_tokens.weight", (size_t)d->V * d->C * wsz, p);
        m->embed.data = p;
        if (!cfg->tie_word_embeddings) {
            CARVE(cv, MEM_FROZEN_WEIGHTS, "lm_head.weight", (size_t)d->V * d->C * wsz, p);
            m->lm_head.data = p;
        }
        for (int l = 0; l < d->L; l++) {
            if (block_full(m, l)) continue;
            for (int pj = 0; pj < PROJ_COUNT; pj++) {
                int in, out; proj_shape(d, pj, &in, &out);
                snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, PROJ_KEYS[pj]);
                CARVE(cv, MEM_FROZEN_WEIGHTS, nm, (size_t)in * out * wsz, p);
                m->blocks[l].w[pj].data = p;
            }
        }
    }

    /* 2. frozen norms and biases as fp32, DoRA base row norms, RoPE tables */
    CARVE(cv, MEM_FROZEN_SMALL, "model.norm.weight", (size_t)d->C * 4, m->final_norm);
    for (int l = 0; l < d->L; l++) {
        if (block_full(m, l)) continue;
        BlockParams *bp = &m->blocks[l];
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)d->C * 4, bp->ln1);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)d->C * 4, bp->ln2);
        if (d->qk_norm) {
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", l);
            CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)d->D * 4, bp->qn);
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", l);
            CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)d->D * 4, bp->kn);
        }
        if (d->bias) for (int pj = 0; pj <= PROJ_V; pj++) {
            int in, out; proj_shape(d, pj, &in, &out);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.bias", l, PROJ_KEYS[pj]);
            CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)out * 4, bp->bias[pj]);
        }
        if (dora) for (int pj = 0; pj < PROJ_COUNT; pj++) {
            if (!(bp->adapted >> pj & 1u)) continue;
            int in, out; proj_shape(d, pj, &in, &out);
            snprintf(nm, sizeof nm, "model.layers.%d.%s: DoRA base row norms", l, PROJ_KEYS[pj]);
            CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)out * 4, bp->wnorm2[pj]);
        }
    }
    if (d->rope_T > 0) {
        CARVE(cv, MEM_FROZEN_SMALL, "RoPE cos table", (size_t)d->rope_T * (d->D / 2) * 4, m->rope_cos);
        CARVE(cv, MEM_FROZEN_SMALL, "RoPE sin table", (size_t)d->rope_T * (d->D / 2) * 4, m->rope_sin);
    }

    /* 3. trainable parameters and gradients, one block each */
    size_t floats = 0;
    size_t nt = trainables_enumerate(m, NULL, &floats);
    if (nt) {
        bool alloc = cv->arena != NULL;
        if (alloc) {
            m->trainables = mem_calloc(nt, sizeof *m->trainables);
            if (!m->trainables) return -1;
            trainables_enumerate(m, m->trainables, &floats);
            m->n_trainables = nt;
        }
        m->train_floats = floats;
        snprintf(nm, sizeof nm, "%s parameters (%zu tensors)", spec->type == TUNE_FULL ? "full fine-tuning" :
                 dora ? "DoRA" : "LoRA", nt);
        CARVE(cv, MEM_TRAINABLE, nm, floats * 4, m->train_values);
        if (d->train) {
            snprintf(nm, sizeof nm, "gradients (%zu tensors)", nt);
            CARVE(cv, MEM_GRADIENTS, nm, floats * 4, m->train_grads);
        }
        if (alloc) {
            for (size_t i = 0; i < nt; i++) {
                size_t off = (size_t)(uintptr_t)m->trainables[i].value;
                m->trainables[i].value = m->train_values + off;
                m->trainables[i].grad = m->train_grads ? m->train_grads + off : NULL;
            }
            bind_trainables(m);
        }
    }
    if (dora) for (int l = d->lo; l < d->L; l++) for (int pj = 0; pj < PROJ_COUNT; pj++) {
        if (!(m->blocks[l].adapted >> pj & 1u)) continue;
        int in, out; proj_shape(d, pj, &in, &out);
        snprintf(nm, sizeof nm, "model.layers.%d.%s: DoRA adapted row norms", l, PROJ_KEYS[pj]);
        CARVE(cv, MEM_ACTIVATIONS, nm, (size_t)out * 4, m->blocks[l].dnorm[pj]);
    }

    /* 4. activations */
    if (d->N > 0) {
        size_t N = (size_t)d->N;
        CARVE(cv, MEM_ACTIVATIONS, "token ids", N * sizeof(int), m->ids);
        CARVE(cv, MEM_ACTIVATIONS, "residual stream (ping)", N * d->C * 4, m->resid[0]);
        CARVE(cv, MEM_ACTIVATIONS, "residual stream (pong)", N * d->C * 4, m->resid[1]);
        CARVE(cv, MEM_ACTIVATIONS, "final norm output", N * d->C * 4, m->final_out);
        CARVE(cv, MEM_ACTIVATIONS, "final norm rstd", N * 4, m->final_rstd);
        bool any_ckpt = false, any_saved = false;
        for (int l = d->lo; l < d->L; l++) {
            if (spec_block_ckpt(spec, l)) any_ckpt = true;
            else any_saved = true;
        }
        if (d->train) {
            /* each trainable block either saves its activations or keeps
             * only its input (checkpointed: rebuilt in the recompute
             * workspace before its backward pass) */
            if (cv->arena) {
                m->acts = mem_calloc((size_t)d->n_train, sizeof *m->acts);
                m->ckpt = mem_calloc((size_t)d->n_train, sizeof *m->ckpt);
                if (!m->acts || !m->ckpt) return -1;
            }
            m->any_ckpt = any_ckpt;
            float *shared = NULL;
            if (any_saved)
                CARVE(cv, MEM_ACTIVATIONS, "norm outputs and SwiGLU output (one block, rebuilt in backward)",
                      N * (2 * (size_t)d->C + d->F) * 4, shared);
            for (int i = 0; i < d->n_train; i++) {
                int l = d->lo + i;
                if (spec_block_ckpt(spec, l)) {
                    float *tmp, **p = m->ckpt ? &m->ckpt[i] : &tmp;
                    snprintf(nm, sizeof nm, "block %d input (checkpoint)", l);
                    CARVE(cv, MEM_CHECKPOINTS, nm, N * d->C * 4, *p);
                    continue;
                }
                BlockActs tmp, *a = m->acts ? &m->acts[i] : &tmp;
                snprintf(nm, sizeof nm, "block %d input", l);
                CARVE(cv, MEM_ACTIVATIONS, nm, N * d->C * 4, a->x_in);
                float *xin = a->x_in;
                snprintf(nm, sizeof nm, "block %d saved activations", l);
                TRY(carve_acts(cv, MEM_ACTIVATIONS, nm, d, a, m->blocks[l].adapted, true, d->N, d->B, true, shared));
                a->x_in = xin;
            }
            if (any_ckpt) {
                unsigned ad = d->r ? (spec->lora_keys & PROJ_ALL) : 0;
                TRY(carve_acts(cv, MEM_RECOMPUTE, "one block's activations (recompute)", d, &m->work, ad, true, d->N,
                               d->B, false, NULL));
            }
        } else {
            unsigned ad = d->r ? (spec->lora_keys & PROJ_ALL) : 0;
            TRY(carve_acts(cv, MEM_ACTIVATIONS, "one block's activations (forward workspace)", d, &m->work, ad, false, d->N, d->B, false, NULL));
        }
        if (d->train) {
            Sub s = {0}; Scratch tmp;
            scratch_split(d, &s, &tmp, dora);
            void *base;
            TRY(carve(cv, MEM_BACKWARD_SCRATCH, "activation gradients (one block)", s.off, &base));
            if (base) { Sub s2 = {base, 0}; scratch_split(d, &s2, &m->sc, dora); }
            CARVE(cv, MEM_LMHEAD, "LM-head targets", N * sizeof(int), m->targets);
            CARVE(cv, MEM_LMHEAD, "LM-head row weights", N * 4, m->row_weight);
            CARVE(cv, MEM_ATTENTION, "attention backward workspace",
                  attention_workspace_floats(d->B, d->T, d->H, d->KVH, d->D) * 4, m->sc.attn_ws);
        } else {
            CARVE(cv, MEM_LMHEAD, "LM-head targets", N * sizeof(int), m->targets);
            CARVE(cv, MEM_LMHEAD, "LM-head row weights", N * 4, m->row_weight);
        }
        {
            Sub s = {0}; LoraScratch tmp;
            lora_split(d, &s, &tmp, dora);
            if (s.off) {
                void *base;
                TRY(carve(cv, d->train ? MEM_BACKWARD_SCRATCH : MEM_ACTIVATIONS, "LoRA dropout / DoRA norm scratch", s.off, &base));
                if (base) { Sub s2 = {base, 0}; lora_split(d, &s2, &m->ls, dora); }
            }
        }
        CARVE(cv, MEM_LMHEAD, "LM-head + cross-entropy chunk", lmhead_scratch_floats(d->chunk, d->C, d->V) * 4, m->lmhead_scratch);
    } else if (dora) {
        Sub s = {0}; LoraScratch tmp;
        lora_split(d, &s, &tmp, dora);
        void *base;
        TRY(carve(cv, MEM_ACTIVATIONS, "DoRA norm scratch", s.off, &base));
        if (base) { Sub s2 = {base, 0}; lora_split(d, &s2, &m->ls, dora); }
    }

    /* 5. KV cache and decode workspace */
    if (d->kv_T > 0) {
        size_t kv = (size_t)d->L * d->kv_T * d->KVD * 4;
        CARVE(cv, MEM_KV_CACHE, "KV cache keys", kv, m->kcache);
        CARVE(cv, MEM_KV_CACHE, "KV cache values", kv, m->vcache);
        unsigned ad = d->r ? (spec->lora_keys & PROJ_ALL) : 0;
        TRY(carve_acts(cv, MEM_KV_CACHE, "decode workspace (one block)", d, &m->dec, ad, false, d->dec_rows, 0, false, NULL));
        CARVE(cv, MEM_KV_CACHE, "decode residual", (size_t)d->dec_rows * d->C * 4, m->dec_x);
        CARVE(cv, MEM_KV_CACHE, "decode residual 2", (size_t)d->dec_rows * d->C * 4, m->dec_x2);
        CARVE(cv, MEM_KV_CACHE, "decode scores", (size_t)d->H * d->kv_T * 4, m->dec_scores);
    }

    /* 6. bf16 conversion scratch of the matrix products */
    if (d->run_dtype == DTYPE_BF16 || d->bf16_compute) {
        size_t rows = (size_t)imax(imax(d->N, d->chunk), imax(d->dec_rows, d->r));
        size_t cols = max_in_out(d);
        size_t b = matmul_scratch_bytes(rows, cols);
        size_t b2 = matmul_scratch_bytes((size_t)d->chunk, (size_t)d->V);
        if (b2 > b) b = b2;
        m->mm_scratch_bytes = b;
        CARVE(cv, MEM_LIBRARY, "bf16 conversion scratch (matmul)", b, m->mm_scratch);
    }

    /* 7. the panel the products with packed (or converted-on-the-fly) weights expand into */
    if (d->panel_cols > 0) {
        m->panel_scratch_bytes = fw_panel_scratch_bytes(d->panel_cols);
        CARVE(cv, MEM_LIBRARY, "dequantization panel (frozen products)", m->panel_scratch_bytes, m->panel_scratch);
    }

    /* 8. oneDNN's scratchpad, shared by every primitive (sized by the planner
     * from the products the run will create, kernels/matmul.h) */
    if (spec->library_scratchpad > 0) {
        m->mm_pad_bytes = spec->library_scratchpad;
        CARVE(cv, MEM_LIBRARY, "oneDNN scratchpad (largest need of the run's products)", m->mm_pad_bytes,
              m->mm_pad);
    }
    return 0;
}

/* Planning entry point for a plain model whose matrices are of file_dtype. */
int model_layout_dtype(const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype, Carver *cv) {
    WeightsSummary ws;
    weights_summary_plain(&ws, file_dtype);
    return model_layout_summary(cfg, spec, &ws, cv);
}

int model_layout_summary(const ModelConfig *cfg, const ModelSpec *spec, const WeightsSummary *ws, Carver *cv) {
    Model *m = mem_calloc(1, sizeof *m);
    if (!m) return -1;
    m->cfg = *cfg; m->spec = *spec;
    int rc = dims_init(&m->d, cfg, spec, ws->file_dtype);
    if (rc == 0) rc = dims_apply_summary(&m->d, spec, ws);
    if (rc == 0) {
        m->blocks = mem_calloc((size_t)m->d.L, sizeof *m->blocks);
        if (!m->blocks) rc = -1;
    }
    if (rc == 0) {
        Carver plan_only = {NULL, cv->plan};
        rc = layout_walk(m, spec, &plan_only);
    }
    mem_free(m->blocks);
    mem_free(m);
    return rc;
}

int model_layout(const ModelConfig *cfg, const ModelSpec *spec, Carver *cv) {
    DType t = cfg->torch_dtype;
    if (t != DTYPE_F32 && t != DTYPE_BF16 && t != DTYPE_F16) t = DTYPE_F32;
    return model_layout_dtype(cfg, spec, t, cv);
}

int model_trainable_list(const ModelConfig *cfg, const ModelSpec *spec, TrainableTensor **out, size_t *n) {
    *out = NULL; *n = 0;
    Model *m = mem_calloc(1, sizeof *m);
    if (!m) return -1;
    m->cfg = *cfg; m->spec = *spec;
    DType t = cfg->torch_dtype;
    if (t != DTYPE_F32 && t != DTYPE_BF16 && t != DTYPE_F16) t = DTYPE_F32;
    int rc = dims_init(&m->d, cfg, spec, t);
    if (rc == 0) {
        m->blocks = mem_calloc((size_t)m->d.L, sizeof *m->blocks);
        if (!m->blocks) rc = -1;
    }
    if (rc == 0) {
        /* The walk decides which projections each block adapts; run it in
         * planning mode into a throwaway plan first. */
        MemPlan scratch = {0};
        Carver plan_only = {NULL, &scratch};
        rc = layout_walk(m, spec, &plan_only);
        plan_free(&scratch);
    }
    if (rc == 0) {
        size_t floats = 0, nt = trainables_enumerate(m, NULL, &floats);
        TrainableTensor *list = nt ? mem_calloc(nt, sizeof *list) : NULL;
        if (nt && !list) rc = -1;
        else {
            if (nt) trainables_enumerate(m, list, &floats);
            for (size_t i = 0; i < nt; i++) list[i].value = list[i].grad = NULL;
            *out = list; *n = nt;
        }
    }
    mem_free(m->trainables);
    mem_free(m->blocks);
    mem_free(m);
    return rc;
}

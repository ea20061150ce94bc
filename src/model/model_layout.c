/* model_layout.c: the one walk over every buffer the model holds. In
 * planning mode (Carver without arena) it records sizes; model_load runs the
 * very same walk on the arena and gets the pointers. Groups of buffers that
 * always live together (one block's activations, the backward scratch) are
 * one carve each, split into 64-byte aligned pieces, so the plan stays short
 * and readable. What a block holds comes from the family's block-tensor
 * table (formats/model_tensors.h). Also model_plan_weights: the weights
 * used in place from the mapped file, noted outside the arena. */
#include "model/model_internal.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdio.h>
#include <string.h>

static int imax(int a, int b) { return a > b ? a : b; }

/* 256 rows: oneDNN reaches ~97 (forward) and ~89 (dinp, K = V) GFLOP/s per
 * core there, against ~91 and ~77 at 128 rows. Large vocabularies hold the
 * (chunk, V) logits to 64 MiB instead (gemma's 262k tokens: 64 rows, 64 MiB
 * rather than 256 MiB), at least 64 rows. */
static int lmhead_rows(int V) {
    const size_t budget = (size_t)16 << 20; /* floats */
    int rows = 256;
    if ((size_t)rows * (size_t)V > budget) rows = (int)(budget / (size_t)V);
    return rows < 64 ? 64 : rows;
}

int dims_init(Dims *d, const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype) {
    memset(d, 0, sizeof *d);
    d->C = cfg->hidden_size;
    d->F = cfg->intermediate_size;
    d->L = cfg->num_hidden_layers;
    d->H = cfg->num_attention_heads;
    d->KVH = cfg->num_key_value_heads;
    d->D = cfg->head_dim;
    d->V = cfg->vocab_size;
    if (d->C <= 0 || d->F <= 0 || d->L <= 0 || d->H <= 0 || d->KVH <= 0 || d->D <= 0 || d->V <= 0)
        return error_set("model: config has a non-positive dimension");
    if (d->L > HF_MAX_LAYERS) return error_set("model: %d layers (at most %d)", d->L, HF_MAX_LAYERS);
    if (d->H % d->KVH)
        return error_set("model: num_attention_heads %d is not a multiple of num_key_value_heads %d", d->H, d->KVH);
    if (d->D % 2) return error_set("model: head_dim %d is odd (RoPE needs pairs)", d->D);
    d->rd = cfg->rotary_dim > 0 ? cfg->rotary_dim : d->D;
    if (d->rd % 2 || d->rd > d->D) return error_set("model: %d rotary dims of a %d-dim head", d->rd, d->D);
    d->QD = d->H * d->D;
    d->KVD = d->KVH * d->D;
    d->QKVD = d->QD + 2 * d->KVD;
    d->qk_norm = cfg->qk_norm;
    d->bias = cfg->attention_bias;
    d->sandwich = cfg->sandwich_norms;
    d->fused_qkv = cfg->fused_qkv;
    d->gu_ld = cfg->fused_gate_up ? 2 * d->F : d->F;
    d->act = cfg->hidden_act == HIDDEN_ACT_GELU_TANH ? GLU_GELU_TANH : GLU_SILU;
    d->norm_off = cfg->norm_plus_one ? 1.0f : 0.0f;
    d->projs = hf_block_projections(cfg);
    d->n_rope = cfg->rope_local_theta > 0 || cfg->rope_scaling.type == ROPE_SCALING_LONGROPE ? 2 : 1;
    if (spec->max_rows < 0 || spec->max_tokens < 0 || spec->kv_cache_tokens < 0)
        return error_set("model: negative batch shape");
    d->B = spec->max_rows;
    d->T = spec->max_tokens;
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
        if ((spec->lora_keys & d->projs) == 0) {
            char have[160] = "";
            FOR_EACH_PROJ(p, d->projs)
                snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", have[0] ? ", " : "", PROJ_KEYS[p]);
            return error_set("model: none of the LoRA keys is a projection of a %s block (its keys: %s)",
                             cfg->model_type, have);
        }
        d->r = spec->lora_rank;
    }
    d->train = tuned && spec->training;
    if (d->train && d->N == 0) return error_set("model: training needs max_rows and max_tokens > 0");
    if (spec->lora_dropout < 0 || spec->lora_dropout >= 1)
        return error_set("model: lora dropout %g not in [0, 1)", spec->lora_dropout);
    d->dropout = d->train && d->r > 0 && spec->lora_dropout > 0;
    d->chunk = spec->lmhead_chunk > 0 ? spec->lmhead_chunk : lmhead_rows(d->V);
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
        d->convert = true;
        d->run_dtype = spec->weight_dtype;
    } else {
        d->convert = false;
        d->run_dtype = file_dtype;
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
    case PROJ_QKV: *in = d->C; *out = d->QKVD; break;
    case PROJ_GATE_UP: *in = d->C; *out = 2 * d->F; break;
    default: *in = d->F; *out = d->C; break;
    }
}

float **block_slot(BlockParams *bp, const BlockTensor *t, float ***grad) {
    switch (t->role) {
    case BT_NORM_ATTN_IN: *grad = &bp->dln1; return &bp->ln1;
    case BT_NORM_ATTN_OUT: *grad = &bp->dpn1; return &bp->pn1;
    case BT_NORM_MLP_IN: *grad = &bp->dln2; return &bp->ln2;
    case BT_NORM_MLP_OUT: *grad = &bp->dpn2; return &bp->pn2;
    case BT_Q_NORM: *grad = &bp->dqn; return &bp->qn;
    case BT_K_NORM: *grad = &bp->dkn; return &bp->kn;
    case BT_PROJ_BIAS: *grad = &bp->dbias[t->proj]; return &bp->bias[t->proj];
    default: *grad = NULL; return NULL;
    }
}

/* Bump allocation inside one carved block: pass 1 (base NULL) sizes it. */
typedef struct { char *base; size_t off; } Sub;
static float *sub_f(Sub *s, size_t count) {
    float *p = s->base ? (float *)(s->base + s->off) : NULL;
    s->off += arena_block_size(count * sizeof(float));
    return p;
}

static bool block_full(const Model *m, int l) { return m->spec.type == TUNE_FULL && l >= m->d.lo; }
static unsigned block_adapted(const Model *m, int l) {
    if ((m->spec.type != TUNE_LORA && m->spec.type != TUNE_DORA) || l < m->d.lo) return 0;
    return m->spec.lora_keys & m->d.projs;
}

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
        a->q_pre = sub_f(s, N * d->QD);
        a->k_pre = sub_f(s, N * d->KVD);
        a->q_rstd = sub_f(s, N * d->H);
        a->k_rstd = sub_f(s, N * d->KVH);
    }
    a->q = sub_f(s, N * d->QD);
    a->k = sub_f(s, N * d->KVD);
    a->v = sub_f(s, N * d->KVD);
    a->att = sub_f(s, N * d->QD);
    a->lse = sub_f(s, B > 0 ? N * d->H : 0);   /* decode (B = 0) keeps no log-sum-exp */
    if (d->sandwich) {
        a->o = sub_f(s, N * d->C);
        a->prstd1 = sub_f(s, N);
    }
    a->x_mid = sub_f(s, N * d->C);
    if (!transient) a->ln2 = sub_f(s, N * d->C);
    a->rstd2 = sub_f(s, N);
    if (d->gu_ld != d->F) {
        a->gate = sub_f(s, N * d->gu_ld);   /* fused gate_up rows: [gate | up] */
        a->up = a->gate ? a->gate + d->F : NULL;
    } else {
        a->gate = sub_f(s, N * d->F);
        a->up = sub_f(s, N * d->F);
    }
    if (!transient) a->act = sub_f(s, N * d->F);
    if (d->sandwich) {
        a->mlp = sub_f(s, N * d->C);
        a->prstd2 = sub_f(s, N);
    }
    float *shared = NULL;
    if (adapted && !own_xa) shared = sub_f(s, N * d->r);
    for (int p = 0; p < PROJ_COUNT; p++)
        a->xa[p] = (adapted >> p & 1u) ? (own_xa ? sub_f(s, N * d->r) : shared) : NULL;
}

/* transient: ln1, ln2 and the GLU output are not kept (they are cheap to
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
    if (base) {
        Sub s2 = {base, 0};
        acts_split(d, &s2, a, adapted, own_xa, rows, B, transient);
    }
    if (transient && shared) {
        size_t N = (size_t)rows;
        a->transient = true;
        a->ln1 = shared;
        a->ln2 = shared + N * d->C;
        a->act = shared + 2 * N * d->C;
    }
    return 0;
}

/* Trainable tensors in their fixed order; list may be NULL (count only). */
static size_t add_t(TrainableTensor *list, size_t i, size_t *floats, const char *name, int ndim, int64_t a, int64_t b) {
    if (list) {
        TrainableTensor *t = &list[i];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->ndim = ndim;
        t->shape[0] = a;
        t->shape[1] = ndim == 2 ? b : 0;
        t->numel = (size_t)a * (ndim == 2 ? (size_t)b : 1);
        /* value/grad hold offsets until the block is carved */
        t->value = (float *)(uintptr_t)(*floats);
    }
    size_t numel = (size_t)a * (ndim == 2 ? (size_t)b : 1);
    *floats += (numel + 15) / 16 * 16;
    return i + 1;
}

static size_t trainables_enumerate(const Model *m, TrainableTensor *list, size_t *floats) {
    const Dims *d = &m->d;
    const ModelConfig *c = &m->cfg;
    BlockTensor bt[BLOCK_TENSORS_MAX];
    int nbt = block_tensors(c, bt);
    size_t i = 0;
    *floats = 0;
    char nm[160];
    for (int l = d->lo; l < d->L; l++) {
        if (block_full(m, l)) {
            /* every tensor of the block, under its HF name */
            for (int j = 0; j < nbt; j++) {
                layer_name(nm, sizeof nm, c->prefix, l, bt[j].suffix);
                i = add_t(list, i, floats, nm, bt[j].ndim, bt[j].shape[0], bt[j].shape[1]);
            }
            continue;
        }
        FOR_EACH_PROJ(p, block_adapted(m, l)) {
            int in, out;
            proj_shape(d, p, &in, &out);
            snprintf(nm, sizeof nm, "%slayers.%d.%s.lora_a", c->adapter_prefix, l, PROJ_KEYS[p]);
            i = add_t(list, i, floats, nm, 2, in, d->r);
            snprintf(nm, sizeof nm, "%slayers.%d.%s.lora_b", c->adapter_prefix, l, PROJ_KEYS[p]);
            i = add_t(list, i, floats, nm, 2, d->r, out);
            if (m->spec.type == TUNE_DORA) {
                snprintf(nm, sizeof nm, "%slayers.%d.%s.m", c->adapter_prefix, l, PROJ_KEYS[p]);
                i = add_t(list, i, floats, nm, 1, out, 0);
            }
        }
    }
    return i;
}

/* Points the block parameters at the trainable tensors (allocation mode). */
static void bind_trainables(Model *m) {
    size_t i = 0;
    const Dims *d = &m->d;
    BlockTensor bt[BLOCK_TENSORS_MAX];
    int nbt = block_tensors(&m->cfg, bt);
    for (int l = d->lo; l < d->L; l++) {
        BlockParams *bp = &m->blocks[l];
        if (block_full(m, l)) {
            for (int j = 0; j < nbt; j++, i++) {
                TrainableTensor *t = &m->trainables[i];
                if (bt[j].role == BT_PROJ_WEIGHT) {
                    int p = bt[j].proj;
                    bp->w[p] = fw_plain(t->value, DTYPE_F32, (int)bt[j].shape[0], (int)bt[j].shape[1], DTYPE_F32);
                    bp->dw[p] = t->grad;
                    continue;
                }
                float **g, **v = block_slot(bp, &bt[j], &g);
                *v = t->value;
                *g = t->grad;
            }
            continue;
        }
        FOR_EACH_PROJ(p, bp->adapted) {
            bp->la[p] = m->trainables[i].value;
            bp->dla[p] = m->trainables[i].grad;
            i++;
            bp->lb[p] = m->trainables[i].value;
            bp->dlb[p] = m->trainables[i].grad;
            i++;
            if (m->spec.type == TUNE_DORA) {
                bp->dm[p] = m->trainables[i].value;
                bp->ddm[p] = m->trainables[i].grad;
                i++;
            }
        }
    }
}

static size_t max_in_out(const Dims *d) {
    size_t m = (size_t)imax(imax(d->C, d->F), imax(d->QD, d->KVD));
    if (d->fused_qkv && (size_t)d->QKVD > m) m = (size_t)d->QKVD;
    if (d->gu_ld > (int)m) m = (size_t)d->gu_ld;
    return m;
}

static void scratch_split(const Dims *d, Sub *s, Scratch *sc, bool dora) {
    size_t N = (size_t)d->N;
    sc->dres = sub_f(s, N * d->C);
    sc->dln = sub_f(s, N * d->C);
    if (d->sandwich) sc->dpost = sub_f(s, N * d->C);
    sc->datt = sub_f(s, N * d->QD);
    sc->dq = sub_f(s, N * d->QD);
    sc->dk = sub_f(s, N * d->KVD);
    sc->dv = sub_f(s, N * d->KVD);
    if (d->qk_norm) {
        sc->dq_pre = sub_f(s, N * d->QD);
        sc->dk_pre = sub_f(s, N * d->KVD);
    }
    if (d->gu_ld != d->F) {
        sc->dgate = sub_f(s, N * d->gu_ld);
        sc->dup = sc->dgate ? sc->dgate + d->F : NULL;
    } else {
        sc->dgate = sub_f(s, N * d->F);
        sc->dup = sub_f(s, N * d->F);
    }
    sc->dact = sub_f(s, N * d->F);
    if (d->r) sc->dxa = sub_f(s, N * d->r);
    if (d->r) sc->dat = sub_f(s, (size_t)d->r * max_in_out(d));
    if (dora) sc->ylin = sub_f(s, N * max_in_out(d));
}

static void lora_split(const Dims *d, Sub *s, LoraScratch *ls, bool dora) {
    if (d->dropout) ls->drop_x = sub_f(s, (size_t)d->N * max_in_out(d));
    if (dora) {
        size_t mx = max_in_out(d);
        ls->at = sub_f(s, (size_t)d->r * mx);
        ls->wa = sub_f(s, (size_t)d->r * mx);
        ls->g = sub_f(s, (size_t)d->r * d->r);
        ls->gb = sub_f(s, (size_t)d->r * mx);
    }
}

/* Positions of layer l's KV cache: a sliding layer keeps a ring of the
 * window plus the rows of one decode chunk (every row of a chunk still sees
 * its whole window after the chunk's keys are written). */
static int kv_layer_len(const Model *m, int l) {
    const Dims *d = &m->d;
    int w = m->cfg.layer_flags[l] & LAYER_SLIDING ? m->cfg.sliding_window : 0;
    if (w <= 0 || (long)w + d->dec_rows - 1 >= d->kv_T) return d->kv_T;
    return w + d->dec_rows - 1;
}

/* 1. frozen matrices converted from the file's dtype */
static int walk_frozen_matrices(Model *m, Carver *cv) {
    const Dims *d = &m->d;
    const ModelConfig *cfg = &m->cfg;
    size_t wsz = d->run_dtype == DTYPE_F32 ? 4 : 2;
    char nm[160];
    void *p;
    snprintf(nm, sizeof nm, "%sembed_tokens.weight", cfg->prefix);
    CARVE(cv, MEM_FROZEN_WEIGHTS, nm, (size_t)d->V * d->C * wsz, p);
    m->embed.data = p;
    if (!cfg->tie_word_embeddings) {
        CARVE(cv, MEM_FROZEN_WEIGHTS, cfg->head_name, (size_t)d->V * d->C * wsz, p);
        m->lm_head.data = p;
    }
    for (int l = 0; l < d->L; l++) {
        if (block_full(m, l)) continue;
        FOR_EACH_PROJ(pj, d->projs) {
            int in, out;
            proj_shape(d, pj, &in, &out);
            snprintf(nm, sizeof nm, "%slayers.%d.%s.weight", cfg->prefix, l, PROJ_KEYS[pj]);
            CARVE(cv, MEM_FROZEN_WEIGHTS, nm, (size_t)in * out * wsz, p);
            m->blocks[l].w[pj].data = p;
        }
    }
    return 0;
}

/* 2. frozen norms and biases as fp32, DoRA base row norms, RoPE tables */
static int walk_frozen_small(Model *m, const ModelSpec *spec, Carver *cv) {
    const Dims *d = &m->d;
    const ModelConfig *cfg = &m->cfg;
    char nm[160];
    snprintf(nm, sizeof nm, "%snorm.weight", cfg->prefix);
    CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)d->C * 4, m->final_norm);
    BlockTensor bt[BLOCK_TENSORS_MAX];
    int nbt = block_tensors(cfg, bt);
    for (int l = 0; l < d->L; l++) {
        if (block_full(m, l)) continue;
        BlockParams *bp = &m->blocks[l];
        for (int j = 0; j < nbt; j++) {
            if (bt[j].ndim != 1) continue;
            float **g, **v = block_slot(bp, &bt[j], &g);
            layer_name(nm, sizeof nm, cfg->prefix, l, bt[j].suffix);
            CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)bt[j].shape[0] * 4, *v);
        }
        if (spec->type != TUNE_DORA) continue;
        FOR_EACH_PROJ(pj, bp->adapted) {
            int in, out;
            proj_shape(d, pj, &in, &out);
            snprintf(nm, sizeof nm, "%slayers.%d.%s: DoRA base row norms", cfg->prefix, l, PROJ_KEYS[pj]);
            CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)out * 4, bp->wnorm2[pj]);
        }
    }
    if (d->rope_T <= 0) return 0;
    static const char *set_names[2][ROPE_SETS] = {{"RoPE", "RoPE (sliding layers)"},
                                                  {"RoPE (longrope short factors)", "RoPE (longrope long factors)"}};
    bool lr = cfg->rope_scaling.type == ROPE_SCALING_LONGROPE;
    for (int s = 0; s < d->n_rope; s++) {
        size_t bytes = (size_t)d->rope_T * (d->rd / 2) * 4;
        snprintf(nm, sizeof nm, "%s cos table", set_names[lr][s]);
        CARVE(cv, MEM_FROZEN_SMALL, nm, bytes, m->rope_cos[s]);
        snprintf(nm, sizeof nm, "%s sin table", set_names[lr][s]);
        CARVE(cv, MEM_FROZEN_SMALL, nm, bytes, m->rope_sin[s]);
    }
    return 0;
}

/* 3. trainable parameters and gradients, one block each */
static int walk_trainables(Model *m, const ModelSpec *spec, Carver *cv) {
    const Dims *d = &m->d;
    bool dora = spec->type == TUNE_DORA;
    char nm[160];
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
    if (!dora) return 0;
    for (int l = d->lo; l < d->L; l++) {
        FOR_EACH_PROJ(pj, m->blocks[l].adapted) {
            int in, out;
            proj_shape(d, pj, &in, &out);
            snprintf(nm, sizeof nm, "%slayers.%d.%s: DoRA adapted row norms", m->cfg.adapter_prefix, l, PROJ_KEYS[pj]);
            CARVE(cv, MEM_ACTIVATIONS, nm, (size_t)out * 4, m->blocks[l].dnorm[pj]);
        }
    }
    return 0;
}

/* 4. activations, checkpoints, backward scratch, LM head */
static int walk_activations(Model *m, const ModelSpec *spec, Carver *cv) {
    const Dims *d = &m->d;
    bool dora = spec->type == TUNE_DORA;
    char nm[160];
    size_t N = (size_t)d->N;
    CARVE(cv, MEM_ACTIVATIONS, "token ids", N * sizeof(int), m->ids);
    CARVE(cv, MEM_ACTIVATIONS, "residual stream (ping)", N * d->C * 4, m->resid[0]);
    CARVE(cv, MEM_ACTIVATIONS, "residual stream (pong)", N * d->C * 4, m->resid[1]);
    CARVE(cv, MEM_ACTIVATIONS, "final norm output", N * d->C * 4, m->final_out);
    CARVE(cv, MEM_ACTIVATIONS, "final norm rstd", N * 4, m->final_rstd);
    if (d->train && !spec->grad_checkpoint) {
        if (cv->arena) {
            m->acts = mem_calloc((size_t)d->n_train, sizeof *m->acts);
            if (!m->acts) return -1;
        }
        float *shared;
        CARVE(cv, MEM_ACTIVATIONS, "norm outputs and GLU output (one block, rebuilt in backward)",
              N * (2 * (size_t)d->C + d->F) * 4, shared);
        for (int i = 0; i < d->n_train; i++) {
            int l = d->lo + i;
            BlockActs tmp, *a = m->acts ? &m->acts[i] : &tmp;
            snprintf(nm, sizeof nm, "block %d input", l);
            CARVE(cv, MEM_ACTIVATIONS, nm, N * d->C * 4, a->x_in);
            float *xin = a->x_in;
            snprintf(nm, sizeof nm, "block %d saved activations", l);
            TRY(carve_acts(cv, MEM_ACTIVATIONS, nm, d, a, m->blocks[l].adapted, true, d->N, d->B, true, shared));
            a->x_in = xin;
        }
    } else if (d->train) {
        if (cv->arena) {
            m->ckpt = mem_calloc((size_t)d->n_train, sizeof *m->ckpt);
            if (!m->ckpt) return -1;
        }
        for (int i = 0; i < d->n_train; i++) {
            float *tmp, **p = m->ckpt ? &m->ckpt[i] : &tmp;
            snprintf(nm, sizeof nm, "block %d input (checkpoint)", d->lo + i);
            CARVE(cv, MEM_CHECKPOINTS, nm, N * d->C * 4, *p);
        }
        unsigned ad = d->r ? (spec->lora_keys & d->projs) : 0;
        TRY(carve_acts(cv, MEM_RECOMPUTE, "one block's activations (recompute)", d, &m->work, ad, true, d->N, d->B,
                       false, NULL));
    } else {
        unsigned ad = d->r ? (spec->lora_keys & d->projs) : 0;
        TRY(carve_acts(cv, MEM_ACTIVATIONS, "one block's activations (forward workspace)", d, &m->work, ad, false,
                       d->N, d->B, false, NULL));
    }
    if (d->train) {
        Sub s = {0};
        Scratch tmp;
        scratch_split(d, &s, &tmp, dora);
        void *base;
        TRY(carve(cv, MEM_BACKWARD_SCRATCH, "activation gradients (one block)", s.off, &base));
        if (base) {
            Sub s2 = {base, 0};
            scratch_split(d, &s2, &m->sc, dora);
        }
        CARVE(cv, MEM_ATTENTION, "attention backward workspace",
              attention_workspace_floats(d->B, d->T, d->H, d->KVH, d->D) * 4, m->sc.attn_ws);
    }
    CARVE(cv, MEM_LMHEAD, "LM-head targets", N * sizeof(int), m->targets);
    CARVE(cv, MEM_LMHEAD, "LM-head row weights", N * 4, m->row_weight);
    Sub s = {0};
    LoraScratch tmp;
    lora_split(d, &s, &tmp, dora);
    if (s.off) {
        void *base;
        TRY(carve(cv, d->train ? MEM_BACKWARD_SCRATCH : MEM_ACTIVATIONS, "LoRA dropout / DoRA norm scratch", s.off,
                  &base));
        if (base) {
            Sub s2 = {base, 0};
            lora_split(d, &s2, &m->ls, dora);
        }
    }
    CARVE(cv, MEM_LMHEAD, "LM-head + cross-entropy chunk", lmhead_scratch_floats(d->chunk, d->C, d->V) * 4,
          m->lmhead_scratch);
    return 0;
}

/* 5. KV cache and decode workspace */
static int walk_kv_cache(Model *m, const ModelSpec *spec, Carver *cv) {
    const Dims *d = &m->d;
    size_t rows = 0;
    for (int l = 0; l < d->L; l++) {
        if (m->kv_off) {
            m->kv_off[l] = rows;
            m->kv_len[l] = kv_layer_len(m, l);
        }
        rows += (size_t)kv_layer_len(m, l);
    }
    size_t kv = rows * d->KVD * 4;
    CARVE(cv, MEM_KV_CACHE, "KV cache keys", kv, m->kcache);
    CARVE(cv, MEM_KV_CACHE, "KV cache values", kv, m->vcache);
    unsigned ad = d->r ? (spec->lora_keys & d->projs) : 0;
    TRY(carve_acts(cv, MEM_KV_CACHE, "decode workspace (one block)", d, &m->dec, ad, false, d->dec_rows, 0, false,
                   NULL));
    CARVE(cv, MEM_KV_CACHE, "decode residual", (size_t)d->dec_rows * d->C * 4, m->dec_x);
    CARVE(cv, MEM_KV_CACHE, "decode residual 2", (size_t)d->dec_rows * d->C * 4, m->dec_x2);
    CARVE(cv, MEM_KV_CACHE, "decode scores", (size_t)d->H * d->kv_T * 4, m->dec_scores);
    CARVE(cv, MEM_KV_CACHE, "decode token history", (size_t)d->kv_T * sizeof(int32_t), m->dec_tokens);
    return 0;
}

int layout_walk(Model *m, const ModelSpec *spec, Carver *cv) {
    const Dims *d = &m->d;
    bool dora = spec->type == TUNE_DORA;

    /* Block parameter slots (heap, not arena) */
    for (int l = 0; l < d->L; l++) m->blocks[l].adapted = block_adapted(m, l);

    if (d->convert) TRY(walk_frozen_matrices(m, cv));
    TRY(walk_frozen_small(m, spec, cv));
    TRY(walk_trainables(m, spec, cv));
    if (d->N > 0) {
        TRY(walk_activations(m, spec, cv));
    } else if (dora) {
        Sub s = {0};
        LoraScratch tmp;
        lora_split(d, &s, &tmp, dora);
        void *base;
        TRY(carve(cv, MEM_ACTIVATIONS, "DoRA norm scratch", s.off, &base));
        if (base) {
            Sub s2 = {base, 0};
            lora_split(d, &s2, &m->ls, dora);
        }
    }
    if (d->fused_qkv && (d->N > 0 || d->kv_T > 0)) {
        size_t rows = (size_t)imax(d->N, d->dec_rows);
        CARVE(cv, d->train ? MEM_BACKWARD_SCRATCH : MEM_ACTIVATIONS, "fused qkv_proj output / gradient",
              rows * d->QKVD * 4, m->qkv_tmp);
    }
    if (d->kv_T > 0) TRY(walk_kv_cache(m, spec, cv));

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
    return 0;
}

/* A Model for planning (no arena): config, spec, dims and the heap slots. */
static Model *plan_model(const ModelConfig *cfg, const ModelSpec *spec, const WeightsSummary *ws) {
    Model *m = mem_calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cfg = *cfg;
    m->spec = *spec;
    if (dims_init(&m->d, cfg, spec, ws->file_dtype) < 0 || dims_apply_summary(&m->d, spec, ws) < 0) {
        mem_free(m);
        return NULL;
    }
    m->blocks = mem_calloc((size_t)m->d.L, sizeof *m->blocks);
    if (!m->blocks) {
        mem_free(m);
        return NULL;
    }
    return m;
}

/* Planning entry point for a plain model whose matrices are of file_dtype. */
int model_layout_dtype(const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype, Carver *cv) {
    WeightsSummary ws;
    weights_summary_plain(&ws, file_dtype);
    return model_layout_summary(cfg, spec, &ws, cv);
}

int model_layout_summary(const ModelConfig *cfg, const ModelSpec *spec, const WeightsSummary *ws, Carver *cv) {
    Model *m = plan_model(cfg, spec, ws);
    if (!m) return -1;
    Carver plan_only = {NULL, cv->plan};
    int rc = layout_walk(m, spec, &plan_only);
    mem_free(m->blocks);
    mem_free(m);
    return rc;
}

int model_layout(const ModelConfig *cfg, const ModelSpec *spec, Carver *cv) {
    DType t = cfg->torch_dtype;
    if (t != DTYPE_F32 && t != DTYPE_BF16 && t != DTYPE_F16) t = DTYPE_F32;
    return model_layout_dtype(cfg, spec, t, cv);
}

/* A quantized model: every matrix stays in the mapped file (codes, scales, biases). */
static int plan_quantized_weights(const WeightsSummary *ws, const ModelConfig *cfg, MemPlan *plan) {
    char nm[160], bits[16];
    if (ws->bits_min == ws->bits_max) snprintf(bits, sizeof bits, "%d-bit", ws->bits_min);
    else snprintf(bits, sizeof bits, "%d/%d-bit", ws->bits_min, ws->bits_max);
    snprintf(nm, sizeof nm, "%sembed_tokens (mapped file)", cfg->prefix);
    TRY(plan_note(plan, MEM_FROZEN_WEIGHTS, nm, ws->embed_bytes, false));
    if (!cfg->tie_word_embeddings) {
        snprintf(nm, sizeof nm, "%s (mapped file)", cfg->head_name);
        TRY(plan_note(plan, MEM_FROZEN_WEIGHTS, nm, ws->lm_head_bytes, false));
    }
    if (ws->gguf)
        snprintf(nm, sizeof nm, "%d blocks' matrices (mapped GGUF file, %s per weight with scales)",
                 cfg->num_hidden_layers, bits);
    else
        snprintf(nm, sizeof nm, "%d blocks' matrices (mapped file, %s codes + %s scales/biases)",
                 cfg->num_hidden_layers, bits, dtype_name(ws->file_dtype));
    return plan_note(plan, MEM_FROZEN_WEIGHTS, nm, ws->block_bytes, false);
}

int model_plan_weights(const char *model_dir, const ModelConfig *cfg, const ModelSpec *spec, MemPlan *plan) {
    WeightsSummary ws;
    TRY(model_weights_summary(model_dir, cfg, &ws));
    if (ws.quantized) return plan_quantized_weights(&ws, cfg, plan);
    DType ft = ws.file_dtype;
    Dims d;
    TRY(dims_init(&d, cfg, spec, ft));
    if (d.convert) return 0;
    size_t es = ft == DTYPE_F32 ? 4 : 2;
    size_t emb = (size_t)d.V * d.C * es;
    char nm[160];
    snprintf(nm, sizeof nm, "%sembed_tokens.weight (mapped file)", cfg->prefix);
    TRY(plan_note(plan, MEM_FROZEN_WEIGHTS, nm, emb, false));
    if (!cfg->tie_word_embeddings) {
        snprintf(nm, sizeof nm, "%s (mapped file)", cfg->head_name);
        TRY(plan_note(plan, MEM_FROZEN_WEIGHTS, nm, emb, false));
    }
    size_t per_block = 0;
    FOR_EACH_PROJ(p, d.projs) {
        int in, out;
        proj_shape(&d, p, &in, &out);
        per_block += (size_t)in * out * es;
    }
    int frozen = spec->type == TUNE_FULL ? d.lo : d.L;
    if (frozen > 0) {
        snprintf(nm, sizeof nm, "%d blocks' matrices (mapped file, %s)", frozen, dtype_name(ft));
        TRY(plan_note(plan, MEM_FROZEN_WEIGHTS, nm, per_block * frozen, false));
    }
    return 0;
}

int model_trainable_list(const ModelConfig *cfg, const ModelSpec *spec, TrainableTensor **out, size_t *n) {
    *out = NULL;
    *n = 0;
    DType t = cfg->torch_dtype;
    if (t != DTYPE_F32 && t != DTYPE_BF16 && t != DTYPE_F16) t = DTYPE_F32;
    WeightsSummary ws;
    weights_summary_plain(&ws, t);
    Model *m = plan_model(cfg, spec, &ws);
    if (!m) return -1;
    /* The walk decides which projections each block adapts; run it in
     * planning mode into a throwaway plan first. */
    MemPlan scratch = {0};
    Carver plan_only = {NULL, &scratch};
    int rc = layout_walk(m, spec, &plan_only);
    plan_free(&scratch);
    if (rc == 0) {
        size_t floats = 0, nt = trainables_enumerate(m, NULL, &floats);
        TrainableTensor *list = nt ? mem_calloc(nt, sizeof *list) : NULL;
        if (nt && !list) rc = -1;
        else {
            if (nt) trainables_enumerate(m, list, &floats);
            for (size_t i = 0; i < nt; i++) list[i].value = list[i].grad = NULL;
            *out = list;
            *n = nt;
        }
    }
    mem_free(m->trainables);
    mem_free(m->blocks);
    mem_free(m);
    return rc;
}

/* model_layout.c: the one walk over every buffer the model holds. In
 * planning mode (Carver without arena) it records sizes; model_load runs the
 * very same walk on the arena and gets the pointers. Groups of buffers that
 * always live together (one block's activations, the backward scratch) are
 * one carve each, split into 64-byte aligned pieces, so the plan stays short
 * and readable. What a block holds comes from the family's block-tensor
 * table (formats/model_tensors.h). (The weights used in place from the
 * mapped files are noted outside the arena by model_residency.c.)
 *
 * Block kinds (Qwen3.5): an attention block and a Gated DeltaNet block carve
 * only their own buffers; the sets shared by every block (the recompute
 * set, the forward workspace, the backward scratch, decode) hold what either
 * kind needs. A Gated DeltaNet block keeps its projections' outputs, the
 * rule's output and one (Dk, Dv) state per chunk and head: every entry grows
 * linearly with the tokens of a batch (plus the chunk workspace, which
 * depends only on the thread count). */
#include "model/model_internal.h"
#include "kernels/gated_delta.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "formats/model_tensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdio.h>
#include <string.h>

/* model_trainables.c */
size_t trainables_enumerate(const Model *m, TrainableTensor *list, size_t *floats);
void bind_trainables(Model *m);

static int imax(int a, int b) { return a > b ? a : b; }

float **block_slot(BlockParams *bp, const BlockTensor *t, float ***grad) {
    switch (t->role) {
    case BT_NORM_ATTN_IN:
        *grad = &bp->dln1;
        return &bp->ln1;
    case BT_NORM_ATTN_OUT:
        *grad = &bp->dpn1;
        return &bp->pn1;
    case BT_NORM_MLP_IN:
        *grad = &bp->dln2;
        return &bp->ln2;
    case BT_NORM_MLP_OUT:
        *grad = &bp->dpn2;
        return &bp->pn2;
    case BT_Q_NORM:
        *grad = &bp->dqn;
        return &bp->qn;
    case BT_K_NORM:
        *grad = &bp->dkn;
        return &bp->kn;
    case BT_PROJ_BIAS:
        *grad = &bp->dbias[t->proj];
        return &bp->bias[t->proj];
    default:
        *grad = NULL;
        return NULL;
    }
}

/* Bump allocation inside one carved block: pass 1 (base NULL) sizes it. */
typedef struct {
    char *base;
    size_t off;
} Sub;
static float *sub_f(Sub *s, size_t count) {
    float *p = s->base ? (float *)(s->base + s->off) : NULL;
    s->off += arena_block_size(count * sizeof(float));
    return p;
}

static bool block_full(const Model *m, int l) { return block_is_full(m, l); }
static unsigned block_adapted(const Model *m, int l) { return block_adapted_mask(m, l); }

/* Which block kinds a shared activation set serves. */
enum { KIND_ATTN = 1, KIND_GDN = 2 };

/* One block's activation set. full: a training set (x_in is not carved here;
 * every adapted projection keeps its own x@A); otherwise a forward workspace
 * whose projections share one x@A scratch. kinds: the block kinds it serves.
 * transient: ln1, ln2, act and the intermediates rebuilt in backward are
 * not carved here (shared_split points them into the shared region). */
static void acts_split(const Dims *d, Sub *s, BlockActs *a, unsigned adapted, bool own_xa, int rows, int B,
                       bool transient, int kinds) {
    size_t N = (size_t)rows;
    a->transient = transient;
    if (!transient) a->ln1 = sub_f(s, N * d->C);
    a->rstd1 = sub_f(s, N);
    if (kinds & KIND_ATTN) {
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
        if (d->attn_gate) a->agate = sub_f(s, N * d->QD);
        if (d->sandwich) {
            a->o = sub_f(s, N * d->C);
            a->prstd1 = sub_f(s, N);
        }
    }
    if (kinds & KIND_GDN) {
        const GdnDims *g = &d->g;
        a->qkv = sub_f(s, N * g->CC);
        a->z = sub_f(s, N * g->Vd);
        a->ga = sub_f(s, N * g->Hv);
        a->gb = sub_f(s, N * g->Hv);
        a->core = sub_f(s, N * g->Vd);
        a->grstd = sub_f(s, N * g->Hv);
        if (B > 0) a->states = sub_f(s, (size_t)B * g->Hv * g->nchunk * g->Dk * g->Dv);
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

/* The intermediates every block rebuilds (cheaply) instead of keeping:
 * norm outputs and the GLU output; Qwen3.5's q_proj output and gated
 * attention output; the Gated DeltaNet's conv output, normalised q and k,
 * gates and gated-norm output. One region serves all blocks. */
static void shared_split(const Dims *d, Sub *s, BlockActs *a, int rows, int kinds) {
    size_t N = (size_t)rows;
    a->ln1 = sub_f(s, N * d->C);
    a->ln2 = sub_f(s, N * d->C);
    a->act = sub_f(s, N * d->F);
    if ((kinds & KIND_ATTN) && d->attn_gate) {
        a->qg = sub_f(s, N * 2 * d->QD);
        a->ag = sub_f(s, N * d->QD);
    }
    if (kinds & KIND_GDN) {
        const GdnDims *g = &d->g;
        a->conv = sub_f(s, N * g->CC);
        a->qn = sub_f(s, N * g->Kd);
        a->kn = sub_f(s, N * g->Kd);
        a->qr = sub_f(s, N * g->Hk);
        a->kr = sub_f(s, N * g->Hk);
        a->g = sub_f(s, N * g->Hv);
        a->beta = sub_f(s, N * g->Hv);
        a->gy = sub_f(s, N * g->Vd);
    }
}

/* A set with its own copies of the shared intermediates (recompute set,
 * forward and decode workspaces): carved as one block. */
static void acts_split_whole(const Dims *d, Sub *s, BlockActs *a, unsigned adapted, bool own_xa, int rows, int B,
                             int kinds) {
    acts_split(d, s, a, adapted, own_xa, rows, B, true, kinds);
    shared_split(d, s, a, rows, kinds);
    a->transient = false;
}

/* carve_set with at least min_bytes carved (the region shared with the
 * LM-head chunk, walk_activations); *base_out (if given) its start. */
static int carve_set_min(Carver *cv, MemClass cls, const char *name, const Dims *d, BlockActs *a, unsigned adapted,
                         bool own_xa, int rows, int B, int kinds, size_t min_bytes, void **base_out) {
    Sub s = {0};
    BlockActs tmp;
    acts_split_whole(d, &s, &tmp, adapted, own_xa, rows, B, kinds);
    void *base;
    TRY(carve(cv, cls, name, s.off > min_bytes ? s.off : min_bytes, &base));
    memset(a, 0, sizeof *a);
    if (base) {
        Sub s2 = {base, 0};
        acts_split_whole(d, &s2, a, adapted, own_xa, rows, B, kinds);
    }
    if (base_out) *base_out = base;
    return 0;
}

static int carve_set(Carver *cv, MemClass cls, const char *name, const Dims *d, BlockActs *a, unsigned adapted,
                     bool own_xa, int rows, int B, int kinds) {
    return carve_set_min(cv, cls, name, d, a, adapted, own_xa, rows, B, kinds, 0, NULL);
}

/* A trainable block's own set; its transient intermediates point into `shared`. */
static int carve_block_acts(Carver *cv, const char *name, const Dims *d, BlockActs *a, unsigned adapted, int kinds,
                            const BlockActs *shared) {
    Sub s = {0};
    BlockActs tmp;
    acts_split(d, &s, &tmp, adapted, true, d->N, d->B, true, kinds);
    void *base;
    TRY(carve(cv, MEM_ACTIVATIONS, name, s.off, &base));
    memset(a, 0, sizeof *a);
    if (base) {
        Sub s2 = {base, 0};
        acts_split(d, &s2, a, adapted, true, d->N, d->B, true, kinds);
    }
    a->transient = true;
    a->ln1 = shared->ln1;
    a->ln2 = shared->ln2;
    a->act = shared->act;
    a->qg = shared->qg;
    a->ag = shared->ag;
    a->conv = shared->conv;
    a->qn = shared->qn;
    a->kn = shared->kn;
    a->qr = shared->qr;
    a->kr = shared->kr;
    a->g = shared->g;
    a->beta = shared->beta;
    a->gy = shared->gy;
    return 0;
}

static size_t max_in_out(const Dims *d) {
    int m = imax(imax(d->C, d->F), imax(d->attn_gate ? 2 * d->QD : d->QD, d->KVD));
    if (d->fused_qkv) m = imax(m, d->QKVD);
    m = imax(m, d->gu_ld);
    if (d->q35) m = imax(m, imax(d->g.CC, d->g.Vd));
    return (size_t)m;
}

static void scratch_split(const Dims *d, Sub *s, Scratch *sc, bool dora, int kinds) {
    size_t N = (size_t)d->N;
    sc->dres = sub_f(s, N * d->C);
    sc->dln = sub_f(s, N * d->C);
    if (d->sandwich) sc->dpost = sub_f(s, N * d->C);
    /* The mixer's gradients (attention or Gated DeltaNet) and the MLP's one
     * (dact) share their bytes: block_backward runs the MLP's backward to
     * its end before the mixer's, and the next block's MLP after it. The
     * gradients of gate and up need no scratch: glu_backward_set writes
     * them over the gate and up outputs it reads (block_mlp_backward). */
    size_t union_at = s->off;
    if (kinds & KIND_ATTN) {
        sc->datt = sub_f(s, N * d->QD);
        sc->dq = sub_f(s, N * d->QD);
        sc->dk = sub_f(s, N * d->KVD);
        sc->dv = sub_f(s, N * d->KVD);
        if (d->qk_norm) {
            sc->dq_pre = sub_f(s, N * d->QD);
            sc->dk_pre = sub_f(s, N * d->KVD);
        }
        if (d->attn_gate) {
            sc->dqg = sub_f(s, N * 2 * d->QD);
            sc->dagate = sub_f(s, N * d->QD);
        }
    }
    if (kinds & KIND_GDN) {
        const GdnDims *g = &d->g;
        sc->dqkv = sub_f(s, N * g->CC);
        sc->dconv = sub_f(s, N * g->CC);
        sc->dqn = sub_f(s, N * g->Kd);
        sc->dkn = sub_f(s, N * g->Kd);
        sc->dcore = sub_f(s, N * g->Vd);
        sc->dz = sub_f(s, N * g->Vd);
        sc->dgy = sub_f(s, N * g->Vd);
        sc->dg = sub_f(s, N * g->Hv);
        sc->dbeta = sub_f(s, N * g->Hv);
        sc->dga = sub_f(s, N * g->Hv);
        sc->dgb = sub_f(s, N * g->Hv);
    }
    size_t mixer_end = s->off;
    s->off = union_at;
    sc->dact = sub_f(s, N * d->F);
    if (s->off < mixer_end) s->off = mixer_end;
    if (d->r) sc->dxa = sub_f(s, N * d->r);
    /* merged LoRA groups (lora.c): at most 3 members (q/k/v), each reading (N, C) */
    bool merge = lora_merge_ok(d, d->N);
    size_t dat_cols = max_in_out(d);
    if (merge && dat_cols < 3 * (size_t)d->C) dat_cols = 3 * (size_t)d->C;
    if (d->r) sc->dat = sub_f(s, (size_t)d->r * dat_cols);
    if (merge) {
        sc->xa_grp = sub_f(s, N * 3 * d->r);
        sc->a_cat = sub_f(s, (size_t)d->C * 3 * d->r);
    }
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
 * its whole window after the chunk's keys are written); a Gated DeltaNet
 * layer keeps none (its states instead). */
static int kv_layer_len(const Model *m, int l) {
    const Dims *d = &m->d;
    if (layer_gdn(&m->cfg, l)) return 0;
    int w = m->cfg.layer_flags[l] & LAYER_SLIDING ? m->cfg.sliding_window : 0;
    if (w <= 0 || (long)w + d->dec_rows - 1 >= d->kv_T) return d->kv_T;
    return w + d->dec_rows - 1;
}

/* The block kinds among layers [l0, l1). */
static int kinds_of(const Model *m, int l0, int l1) {
    int k = 0;
    for (int l = l0; l < l1; l++) k |= layer_gdn(&m->cfg, l) ? KIND_GDN : KIND_ATTN;
    return k;
}

/* The union of the adapted projections of the trainable blocks. */
static unsigned adapted_union(const Model *m) {
    unsigned u = 0;
    for (int l = m->d.lo; l < m->d.L; l++) u |= m->blocks[l].adapted;
    return u;
}


/* Per layer, the slot of its Gated DeltaNet states (attention layers: of
 * their attention, unused; their KV cache is at kv_off). */
static int assign_cache_slots(Model *m, bool alloc) {
    if (!alloc) return 0;
    m->cache_slot = mem_calloc((size_t)m->d.L, sizeof *m->cache_slot);
    if (!m->cache_slot) return -1;
    int na = 0, ng = 0;
    for (int l = 0; l < m->d.L; l++) m->cache_slot[l] = m->blocks[l].gdn ? ng++ : na++;
    return 0;
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
        FOR_EACH_PROJ(pj, m->blocks[l].projs) {
            int in, out;
            proj_shape(d, pj, &in, &out);
            snprintf(nm, sizeof nm, "%slayers.%d.%s.weight", cfg->prefix, l, PROJ_KEYS[pj]);
            CARVE(cv, MEM_FROZEN_WEIGHTS, nm, (size_t)in * out * wsz, p);
            m->blocks[l].w[pj].data = p;
        }
    }
    return 0;
}

/* A Gated DeltaNet block's frozen small tensors: its two norms, then conv1d,
 * A_log, dt_bias and the gated norm as one carve. */
static int carve_gdn_small(Model *m, int l, Carver *cv) {
    const Dims *d = &m->d;
    const GdnDims *g = &d->g;
    const char *pf = m->cfg.prefix;
    BlockParams *bp = &m->blocks[l];
    char nm[160];
    snprintf(nm, sizeof nm, "%slayers.%d.input_layernorm.weight", pf, l);
    CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)d->C * 4, bp->ln1);
    snprintf(nm, sizeof nm, "%slayers.%d.post_attention_layernorm.weight", pf, l);
    CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)d->C * 4, bp->ln2);
    snprintf(nm, sizeof nm, "%slayers.%d.linear_attn.conv1d, A_log, dt_bias, norm", pf, l);
    size_t n = (size_t)g->CC * g->K;
    float *p;
    CARVE(cv, MEM_FROZEN_SMALL, nm, (n + 2 * (size_t)g->Hv + g->Dv) * 4, p);
    if (p) {
        bp->conv_w = p;
        bp->A_log = p + n;
        bp->dt_bias = p + n + g->Hv;
        bp->gnorm = p + n + 2 * g->Hv;
    }
    return 0;
}

/* 2. frozen norms, biases and Gated DeltaNet tensors as fp32, DoRA base row
 * norms, RoPE tables */
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
        if (bp->gdn) {
            TRY(carve_gdn_small(m, l, cv));
        } else {
            for (int j = 0; j < nbt; j++) {
                if (bt[j].ndim != 1) continue;
                float **g, **v = block_slot(bp, &bt[j], &g);
                layer_name(nm, sizeof nm, cfg->prefix, l, bt[j].suffix);
                CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)bt[j].shape[0] * 4, *v);
            }
        }
        if (spec->type != TUNE_DORA) continue;
        FOR_EACH_PROJ(pj, bp->adapted) {
            int in, out;
            proj_shape(d, pj, &in, &out);
            snprintf(nm, sizeof nm, "%slayers.%d.%s: DoRA base row norms", cfg->prefix, l, PROJ_KEYS[pj]);
            CARVE(cv, MEM_FROZEN_SMALL, nm, (size_t)out * 4, bp->wnorm2[pj]);
        }
    }
    if (d->rope_T <= 0 || d->n_attn == 0) return 0;
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

/* Part of 4, block by block: saved activations or a checkpointed input, then
 * the one-block workspace (recompute; forward when not training).
 *
 * The LM-head chunk and the final norm's output it reads (lm_span) live
 * only between the last block's forward and the first block's backward,
 * when no block's intermediates are: the recompute set is rebuilt for each
 * block before its backward, and the shared transient set (ln1, ln2, act)
 * likewise (block_backward). So when training, they are carved inside one
 * of them (the recompute set when there is one), which is made at least
 * lm_span long: one region instead of three. *lm_at is then their start
 * (NULL when planning); *lm_placed says whether they were placed here. */
static int walk_block_acts(Model *m, const ModelSpec *spec, Carver *cv, int kinds_all, int kinds_train,
                           unsigned ad_all, size_t lm_span, bool *lm_placed, void **lm_at) {
    const Dims *d = &m->d;
    size_t N = (size_t)d->N;
    char nm[160];
    /* each trainable block either saves its activations or keeps only its
     * input (checkpointed: rebuilt in the recompute workspace before its
     * backward pass); --grad-checkpoint BLOCKS mixes both */
    bool any_ckpt = false, any_saved = false;
    for (int l = d->lo; l < d->L; l++) {
        if (spec_block_ckpt(spec, l)) any_ckpt = true;
        else any_saved = true;
    }
    if (d->train) {
        if (cv->arena) {
            m->acts = mem_calloc((size_t)d->n_train, sizeof *m->acts);
            m->ckpt = mem_calloc((size_t)d->n_train, sizeof *m->ckpt);
            if (!m->acts || !m->ckpt) return -1;
        }
        m->any_ckpt = any_ckpt;
        BlockActs shared = {0};
        if (any_saved) {
            Sub s = {0};
            shared_split(d, &s, &shared, d->N, kinds_train);
            void *base;
            const char *what = d->q35 ? "norm and GLU outputs, gate and Gated DeltaNet intermediates "
                                        "(one block, rebuilt in backward)"
                                      : "norm outputs and GLU output (one block, rebuilt in backward)";
            char what_lm[200];
            size_t bytes = s.off;
            if (!any_ckpt) {   /* the LM-head span shares it (else the recompute set does, below) */
                snprintf(what_lm, sizeof what_lm, "%s, and the final norm output and LM-head chunk", what);
                what = what_lm;
                if (lm_span > bytes) bytes = lm_span;
                *lm_placed = true;
            }
            TRY(carve(cv, MEM_ACTIVATIONS, what, bytes, &base));
            if (!any_ckpt) *lm_at = base;
            if (base) {
                Sub s2 = {base, 0};
                shared_split(d, &s2, &shared, d->N, kinds_train);
            }
        }
        for (int i = 0; i < d->n_train; i++) {
            int l = d->lo + i;
            if (spec_block_ckpt(spec, l)) {
                float *tmp, **p = m->ckpt ? &m->ckpt[i] : &tmp;
                snprintf(nm, sizeof nm, "block %d input (checkpoint)", l);
                CARVE(cv, MEM_CHECKPOINTS, nm, N * d->C * 4, *p);
                continue;
            }
            BlockActs tmp, *a = m->acts ? &m->acts[i] : &tmp;
            float *xin;
            snprintf(nm, sizeof nm, "block %d input", l);
            CARVE(cv, MEM_ACTIVATIONS, nm, N * d->C * 4, xin);
            snprintf(nm, sizeof nm, "block %d saved activations%s", l, m->blocks[l].gdn ? " (Gated DeltaNet)" : "");
            TRY(carve_block_acts(cv, nm, d, a, m->blocks[l].adapted, kinds_of(m, l, l + 1), &shared));
            a->x_in = xin;
        }
        if (any_ckpt) {
            TRY(carve_set_min(cv, MEM_RECOMPUTE, "one block's activations (recompute), and the final norm "
                              "output and LM-head chunk", d, &m->work, ad_all, true, d->N, d->B, kinds_all, lm_span,
                              lm_at));
            *lm_placed = true;
        } else if (d->q35 && d->lo > 0) {
            /* the frozen blocks below run in acts[0], unless their kind differs (Qwen3.5) */
            TRY(carve_set(cv, MEM_ACTIVATIONS, "one block's activations (forward workspace of the frozen blocks)",
                          d, &m->work, 0, false, d->N, d->B, kinds_of(m, 0, d->lo)));
        }
    } else {
        TRY(carve_set(cv, MEM_ACTIVATIONS, "one block's activations (forward workspace)", d, &m->work, ad_all, false,
                      d->N, d->B, kinds_all));
    }
    return 0;
}

/* 4. activations, checkpoints, backward scratch, LM head */
static int walk_activations(Model *m, const ModelSpec *spec, Carver *cv) {
    bool dora = spec->type == TUNE_DORA;
    const Dims *d = &m->d;
    size_t N = (size_t)d->N;
    char nm[160];
    int kinds_all = kinds_of(m, 0, d->L), kinds_train = kinds_of(m, d->lo, d->L);
    unsigned ad_all = d->r ? adapted_union(m) : 0;
    CARVE(cv, MEM_ACTIVATIONS, "token ids", N * sizeof(int), m->ids);
    CARVE(cv, MEM_ACTIVATIONS, "residual stream (ping)", N * d->C * 4, m->resid[0]);
    CARVE(cv, MEM_ACTIVATIONS, "residual stream (pong)", N * d->C * 4, m->resid[1]);
    CARVE(cv, MEM_ACTIVATIONS, "final norm rstd", N * 4, m->final_rstd);
    /* the LM-head chunk, then the final norm's output (walk_block_acts) */
    size_t lm_bytes = lmhead_scratch_floats(d->chunk, d->C, d->V) * 4, final_bytes = N * d->C * 4;
    size_t lm_span = arena_block_size(lm_bytes) + arena_block_size(final_bytes);
    bool lm_placed = false;
    void *lm_at = NULL;
    TRY(walk_block_acts(m, spec, cv, kinds_all, kinds_train, ad_all, lm_span, &lm_placed, &lm_at));
    if (lm_placed) {
        m->lmhead_scratch = lm_at;
        m->final_out = lm_at ? (float *)((char *)lm_at + arena_block_size(lm_bytes)) : NULL;
    } else {
        CARVE(cv, MEM_ACTIVATIONS, "final norm output", final_bytes, m->final_out);
    }
    if (d->train) {
        Sub s = {0};
        Scratch tmp;
        scratch_split(d, &s, &tmp, dora, kinds_train);
        void *base;
        TRY(carve(cv, MEM_BACKWARD_SCRATCH, "activation gradients (one block)", s.off, &base));
        if (base) {
            Sub s2 = {base, 0};
            scratch_split(d, &s2, &m->sc, dora, kinds_train);
        }
        if (kinds_train & KIND_ATTN)
            CARVE(cv, MEM_ATTENTION, "attention backward workspace",
                  attention_workspace_floats(d->B, d->T, d->H, d->KVH, d->D, d->attn_splits) * 4, m->sc.attn_ws);
    }
    if (kinds_all & KIND_GDN) {
        GdnShape gs = {d->B, d->T, d->g.Hk, d->g.Hv, d->g.Dk, d->g.Dv, d->g.chunk};
        snprintf(nm, sizeof nm, "Gated DeltaNet chunk workspace (%d threads)", d->g.threads);
        CARVE(cv, d->train ? MEM_BACKWARD_SCRATCH : MEM_ACTIVATIONS, nm,
              gdn_workspace_floats(&gs, d->g.threads, d->train) * 4, m->sc.gdn_ws);
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
    if (!lm_placed) CARVE(cv, MEM_LMHEAD, "LM-head + cross-entropy chunk", lm_bytes, m->lmhead_scratch);
    return 0;
}

/* 5. KV cache, Gated DeltaNet states and decode workspace */
static int walk_kv_cache(Model *m, Carver *cv) {
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
    if (kv) {
        CARVE(cv, MEM_KV_CACHE, "KV cache keys", kv, m->kcache);
        CARVE(cv, MEM_KV_CACHE, "KV cache values", kv, m->vcache);
    }
    if (d->n_gdn) {
        const GdnDims *g = &d->g;
        CARVE(cv, MEM_KV_CACHE, "Gated DeltaNet conv states (last K-1 inputs)",
              (size_t)d->n_gdn * (g->K - 1) * g->CC * 4, m->conv_state);
        CARVE(cv, MEM_KV_CACHE, "Gated DeltaNet recurrent states", (size_t)d->n_gdn * g->Hv * g->Dk * g->Dv * 4,
              m->rec_state);
        GdnShape gs = {1, d->dec_rows, g->Hk, g->Hv, g->Dk, g->Dv, g->chunk};
        CARVE(cv, MEM_KV_CACHE, "Gated DeltaNet chunk workspace (decode)",
              gdn_workspace_floats(&gs, g->threads, 0) * 4, m->dec_gdn_ws);
    }
    unsigned ad = d->r ? adapted_union(m) : 0;
    TRY(carve_set(cv, MEM_KV_CACHE, "decode workspace (one block)", d, &m->dec, ad, false, d->dec_rows, 0,
                  kinds_of(m, 0, d->L)));
    CARVE(cv, MEM_KV_CACHE, "decode residual", (size_t)d->dec_rows * d->C * 4, m->dec_x);
    CARVE(cv, MEM_KV_CACHE, "decode residual 2", (size_t)d->dec_rows * d->C * 4, m->dec_x2);
    if (d->n_attn) CARVE(cv, MEM_KV_CACHE, "decode scores", (size_t)d->H * d->kv_T * 4, m->dec_scores);
    /* every position generation may reach (a rotating cache holds fewer):
     * longrope's recomputation reads them all again */
    CARVE(cv, MEM_KV_CACHE, "decode token history", (size_t)d->max_pos * sizeof(int32_t), m->dec_tokens);
    return 0;
}

/* 6-8. the libraries' scratch: bf16 conversion, dequantization panel,
 * oneDNN scratchpad */
static int walk_library_scratch(Model *m, const ModelSpec *spec, Carver *cv) {
    const Dims *d = &m->d;
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

int layout_walk(Model *m, const ModelSpec *spec, Carver *cv) {
    const Dims *d = &m->d;
    const ModelConfig *cfg = &m->cfg;
    bool dora = spec->type == TUNE_DORA;

    /* Block parameter slots (heap, not arena) */
    for (int l = 0; l < d->L; l++) {
        m->blocks[l].adapted = block_adapted(m, l);
        m->blocks[l].projs = layer_projs(cfg, l);
        m->blocks[l].gdn = layer_gdn(cfg, l);
    }
    TRY(assign_cache_slots(m, cv->arena != NULL));

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
    if (d->kv_T > 0) TRY(walk_kv_cache(m, cv));
    TRY(walk_library_scratch(m, spec, cv));
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

/* Planning entry point for a plain model whose matrices are stored in
 * file_dtype (model_file_dtype: the safetensors headers; config.json's
 * torch_dtype is only a label and may be absent or wrong). */
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

int model_file_dtype(const char *model, const ModelConfig *cfg, DType *out) {
    if (model_is_gguf(model)) {
        *out = cfg->torch_dtype;
        return 0;
    }
    WeightsSummary ws;
    TRY(model_weights_summary(model, cfg, &ws));
    *out = ws.file_dtype;
    return 0;
}


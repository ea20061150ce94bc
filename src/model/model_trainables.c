/* model_trainables.c: the trainable tensors of a spec, in their fixed order
 * (block by block; in a block, the tensors of full fine-tuning in the order
 * of the file's layer, or LoRA A, B (and DoRA m) projection by projection),
 * their names, and how the block parameters point at them once carved.
 *
 * Names: LoRA / DoRA tensors are MLX-LM adapter keys, i.e. the module path
 * of the layer ("model.layers.N.<key>.lora_a"; Qwen3.5 qwen3_5:
 * "language_model.model.layers.N...."); full fine-tuning trains the file's
 * own tensors under their names and shapes (Qwen3.5: conv1d (C, 1, K) or
 * MLX's (C, K, 1); norms as stored). */
#include "model/model_internal.h"
#include "formats/model_tensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdio.h>
#include <string.h>

static bool block_full(const Model *m, int l) { return m->spec.type == TUNE_FULL && l >= m->d.lo; }

/* One entry; list may be NULL (count only). value holds the offset (in
 * floats) until the block of all trainables is carved. */
static size_t add_t(TrainableTensor *list, size_t i, size_t *floats, const char *name, int ndim, int64_t a,
                    int64_t b, int64_t c) {
    size_t numel = (size_t)a * (ndim >= 2 ? (size_t)b : 1) * (ndim >= 3 ? (size_t)c : 1);
    if (list) {
        TrainableTensor *t = &list[i];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->ndim = ndim;
        t->shape[0] = a;
        t->shape[1] = ndim >= 2 ? b : 0;
        t->shape[2] = ndim >= 3 ? c : 0;
        t->numel = numel;
        t->value = (float *)(uintptr_t)(*floats);
    }
    *floats += (numel + 15) / 16 * 16;
    return i + 1;
}

/* The slots of block l's tensors, in enumeration order: value and grad
 * destinations (grad may be NULL: frozen), name suffix, shape. */
typedef struct {
    float **value, **grad;    /* value NULL for a projection weight (proj >= 0) */
    int proj;
    char suffix[64];
    int ndim;
    int64_t shape[3];
} Slot;

static int vec_slot(Slot *s, int k, float **v, float **g, const char *suffix, int64_t n) {
    s[k] = (Slot){v, g, -1, "", 1, {n, 0, 0}};
    snprintf(s[k].suffix, sizeof s[k].suffix, "%.63s", suffix);
    return k + 1;
}

static int proj_slot(Slot *s, int k, const Dims *d, BlockParams *bp, int p) {
    int in, out;
    proj_shape(d, p, &in, &out);
    s[k] = (Slot){NULL, &bp->dw[p], p, "", 2, {out, in, 0}};
    snprintf(s[k].suffix, sizeof s[k].suffix, "%s.weight", PROJ_KEYS[p]);
    return k + 1;
}

/* Full fine-tuning: the tensors of block l as the file has them (norms as
 * stored: zero-centred ones are used as 1 + w by the kernels). An attention
 * block's come from the family's block-tensor table. */
static int full_slots(const Model *m, BlockParams *bp, Slot *s) {
    const Dims *d = &m->d;
    const ModelConfig *cfg = &m->cfg;
    int k = 0;
    if (bp->gdn) {
        const GdnDims *g = &d->g;
        k = vec_slot(s, k, &bp->ln1, &bp->dln1, "input_layernorm.weight", d->C);
        for (int p = PROJ_LQKV; p <= PROJ_LA; p++) k = proj_slot(s, k, d, bp, p);
        bool mlx = cfg->q35.layout == Q35_LAYOUT_MLX;
        s[k] = (Slot){&bp->conv_w, &bp->dconv_w, -1, "linear_attn.conv1d.weight", 3,
                      {g->CC, mlx ? g->K : 1, mlx ? 1 : g->K}};
        k++;
        k = vec_slot(s, k, &bp->A_log, &bp->dA_log, "linear_attn.A_log", g->Hv);
        k = vec_slot(s, k, &bp->dt_bias, &bp->ddt_bias, "linear_attn.dt_bias", g->Hv);
        k = vec_slot(s, k, &bp->gnorm, &bp->dgnorm, "linear_attn.norm.weight", g->Dv);
        k = proj_slot(s, k, d, bp, PROJ_LOUT);
        k = vec_slot(s, k, &bp->ln2, &bp->dln2, "post_attention_layernorm.weight", d->C);
        for (int p = PROJ_GATE; p <= PROJ_DOWN; p++) k = proj_slot(s, k, d, bp, p);
        return k;
    }
    BlockTensor bt[BLOCK_TENSORS_MAX];
    int nbt = block_tensors(cfg, bt);
    for (int j = 0; j < nbt; j++) {
        if (bt[j].role == BT_PROJ_WEIGHT) {
            k = proj_slot(s, k, d, bp, bt[j].proj);
            continue;
        }
        float **g, **v = block_slot(bp, &bt[j], &g);
        k = vec_slot(s, k, v, g, bt[j].suffix, bt[j].shape[0]);
    }
    return k;
}

enum { MAX_SLOTS = 32 };

size_t trainables_enumerate(const Model *m, TrainableTensor *list, size_t *floats) {
    const Dims *d = &m->d;
    size_t i = 0;
    *floats = 0;
    char nm[160];
    for (int l = d->lo; l < d->L; l++) {
        if (block_full(m, l)) {
            Slot s[MAX_SLOTS];
            BlockParams tmp = m->blocks[l];
            int ns = full_slots(m, &tmp, s);
            for (int k = 0; k < ns; k++) {
                model_tensor_name(&m->cfg, nm, sizeof nm, "model.layers.%d.%s", l, s[k].suffix);
                i = add_t(list, i, floats, nm, s[k].ndim, s[k].shape[0], s[k].shape[1], s[k].shape[2]);
            }
            continue;
        }
        unsigned ad = m->blocks[l].adapted;
        for (int p = 0; p < PROJ_COUNT; p++) {
            if (!(ad >> p & 1u)) continue;
            int in, out;
            proj_shape(d, p, &in, &out);
            model_adapter_name(&m->cfg, nm, sizeof nm, "model.layers.%d.%s.lora_a", l, PROJ_KEYS[p]);
            i = add_t(list, i, floats, nm, 2, in, d->r, 0);
            model_adapter_name(&m->cfg, nm, sizeof nm, "model.layers.%d.%s.lora_b", l, PROJ_KEYS[p]);
            i = add_t(list, i, floats, nm, 2, d->r, out, 0);
            if (m->spec.type == TUNE_DORA) {
                model_adapter_name(&m->cfg, nm, sizeof nm, "model.layers.%d.%s.m", l, PROJ_KEYS[p]);
                i = add_t(list, i, floats, nm, 1, out, 0, 0);
            }
        }
    }
    return i;
}

void bind_trainables(Model *m) {
    size_t i = 0;
    const Dims *d = &m->d;
    for (int l = d->lo; l < d->L; l++) {
        BlockParams *bp = &m->blocks[l];
        if (block_full(m, l)) {
            Slot s[MAX_SLOTS];
            int ns = full_slots(m, bp, s);
            for (int k = 0; k < ns; k++, i++) {
                *s[k].grad = m->trainables[i].grad;
                if (s[k].proj >= 0) {
                    int in, out;
                    proj_shape(d, s[k].proj, &in, &out);
                    bp->w[s[k].proj] = fw_plain(m->trainables[i].value, DTYPE_F32, out, in, DTYPE_F32);
                } else {
                    *s[k].value = m->trainables[i].value;
                }
            }
            continue;
        }
        for (int p = 0; p < PROJ_COUNT; p++) {
            if (!(bp->adapted >> p & 1u)) continue;
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

int model_trainable_list(const ModelConfig *cfg, const ModelSpec *spec, TrainableTensor **out, size_t *n) {
    *out = NULL;
    *n = 0;
    Model *m = mem_calloc(1, sizeof *m);
    if (!m) return -1;
    m->cfg = *cfg;
    m->spec = *spec;
    /* the trainable tensors are fp32 whatever the file's dtype */
    int rc = dims_init(&m->d, cfg, spec, DTYPE_F32);
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
        if (nt && !list) {
            rc = -1;
        } else {
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

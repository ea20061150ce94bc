/* model_load.c: opening a model directory for a spec: config.json, every
 * tensor checked against the config (name, shape, dtype), the arena carved
 * through the layout walk, frozen weights pointed into the mapped file or
 * converted into the arena, norms and biases converted to fp32, RoPE tables
 * (each set the layers use), each layer's attention parameters, gemma's
 * embedding scale, DoRA base row norms. Also the trainable-tensor list, its initialisation
 * (MLX-LM's LoRA init, DoRA magnitudes, full fine-tuning masters) and the
 * small accessors. */
#include "model/model_internal.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "formats/model_tensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

const ModelConfig *model_config(const Model *m) { return &m->cfg; }
const ModelSpec *model_spec(const Model *m) { return &m->spec; }

size_t model_trainables(Model *m, TrainableTensor **list) {
    *list = m->trainables;
    return m->n_trainables;
}

void model_zero_grad(Model *m) {
    if (m->train_grads) memset(m->train_grads, 0, m->train_floats * sizeof(float));
}

void model_free(Model *m) {
    if (!m) return;
    matmul_forget(m->mm_scratch, m->mm_pad);   /* they live in the arena, which goes with the model */
    if (m->st_open) st_model_close(&m->st);
    if (m->gguf) gguf_close(&m->gg);
    mem_free(m->q_map);
    mem_free(m->k_map);
    quant_config_free(&m->qc);
    mem_free(m->blocks);
    mem_free(m->embed_rows);
    mem_free(m->attn);
    mem_free(m->kv_off);
    mem_free(m->kv_len);
    mem_free(m->trainables);
    mem_free(m->acts);
    mem_free(m->ckpt);
    mem_free(m->cache_slot);
    mem_free(m);
}

static int tensor_1d(Model *m, const char *name, int64_t n, const StTensor **t) {
    return st_model_expect(&m->st, name, 1, &n, t);
}

/* A plain matrix of a plain model: shape checked, and every matrix must
 * share the file's dtype because the memory plan is made for one dtype. */
static int tensor_2d(Model *m, const char *name, int64_t rows, int64_t cols, const StTensor **t) {
    int64_t shape[2] = {rows, cols};
    TRY(st_model_expect(&m->st, name, 2, shape, t));
    if ((*t)->dtype != m->d.file_dtype)
        return error_set("%s: tensor %s has dtype %s but the other matrices are %s", m->st.dir, name,
                         dtype_name((*t)->dtype), dtype_name(m->d.file_dtype));
    return 0;
}

/* A GGUF q/k projection or bias reads its rows through the row map. */
static const int32_t *gguf_map(const Model *m, const char *name) {
    if (strstr(name, ".self_attn.q_proj")) return m->q_map;
    if (strstr(name, ".self_attn.k_proj")) return m->k_map;
    return NULL;
}

/* A 1-D tensor into fp32 (norms as stored: zero-centred ones are used as
 * 1 + w by the kernels). */
static int load_small(Model *m, const char *name, int64_t n, float *dst) {
    if (!dst && m->gguf) return 0;
    if (m->gguf) return gguf_tensor_f32(&m->gg, m->gg_arch, name, gguf_map(m, name), n, 1, dst);
    const StTensor *t;
    TRY(tensor_1d(m, name, n, &t));
    /* read with pread: the file's copy never becomes resident */
    if (dst) TRY(model_read_tensor(m, t, dst, DTYPE_F32, (size_t)n));
    return 0;
}

/* Frozen matrix `module` (rows, cols) into *fw (NULL: check only). In a
 * quantized model every matrix is used as stored (packed or plain); in a
 * plain one it is converted into the arena (fw->data set by the layout
 * walk) or used in place. */
static int load_matrix(Model *m, const char *module, int rows, int cols, FrozenWeight *fw) {
    if (m->gguf) {
        FrozenWeight v;
        TRY(gguf_weights_view(&m->gg, m->gg_arch, module, rows, cols, gguf_map(m, module), m->d.run_dtype, &v));
        if (fw) *fw = v;
        return 0;
    }
    if (m->d.quantized) {
        FrozenWeight v;
        bool q;
        TRY(weights_view(&m->st, &m->qc, module, rows, cols, m->d.run_dtype, &v, &q));
        if (fw) *fw = v;
        return 0;
    }
    char name[200];
    snprintf(name, sizeof name, "%s.weight", module);
    const StTensor *t;
    TRY(tensor_2d(m, name, rows, cols, &t));
    if (!fw) return 0;
    if (m->d.convert) {
        /* read with pread: the file's copy never becomes resident */
        DType run = m->d.run_dtype;
        TRY(model_read_tensor(m, t, (void *)fw->data, run, (size_t)rows * cols));
        *fw = fw_plain(fw->data, run, rows, cols, run);
    } else {
        /* in place in the mapped file; 16-bit weights in fp32 products expand panels */
        *fw = fw_plain(t->data, t->dtype, rows, cols, m->d.run_dtype == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32);
    }
    return 0;
}

/* Gated DeltaNet's small tensors: conv1d (C', 1, K) or MLX's (C', K, 1), the
 * same floats either way, A_log, dt_bias, the gated norm (as stored). */
static int load_gdn_small(Model *m, int l, BlockParams *bp, bool none) {
    const GdnDims *g = &m->d.g;
    char nm[160];
    bool mlx = m->cfg.q35.layout == Q35_LAYOUT_MLX;
    int64_t shape[3] = {g->CC, mlx ? g->K : 1, mlx ? 1 : g->K};
    const StTensor *t;
    model_tensor_name(&m->cfg, nm, sizeof nm, "model.layers.%d.linear_attn.conv1d.weight", l);
    TRY(st_model_expect(&m->st, nm, 3, shape, &t));
    if (!none) dtype_to_f32(bp->conv_w, t->data, t->dtype, (size_t)g->CC * g->K);
    model_tensor_name(&m->cfg, nm, sizeof nm, "model.layers.%d.linear_attn.A_log", l);
    TRY(load_small(m, nm, g->Hv, none ? NULL : bp->A_log));
    model_tensor_name(&m->cfg, nm, sizeof nm, "model.layers.%d.linear_attn.dt_bias", l);
    TRY(load_small(m, nm, g->Hv, none ? NULL : bp->dt_bias));
    model_tensor_name(&m->cfg, nm, sizeof nm, "model.layers.%d.linear_attn.norm.weight", l);
    TRY(load_small(m, nm, g->Dv, none ? NULL : bp->gnorm));
    return 0;
}

static int load_weights(Model *m, bool check_only) {
    const Dims *d = &m->d;
    const ModelConfig *c = &m->cfg;
    bool none = check_only;
    char nm[160];
    hf_embed_module(c, nm, sizeof nm);
    TRY(load_matrix(m, nm, d->V, d->C, none ? NULL : &m->embed));
    if (c->tie_word_embeddings) {
        m->lm_head = m->embed;
    } else {
        hf_head_module(c, nm, sizeof nm);
        TRY(load_matrix(m, nm, d->V, d->C, none ? NULL : &m->lm_head));
    }
    snprintf(nm, sizeof nm, "%snorm.weight", c->prefix);
    TRY(load_small(m, nm, d->C, none ? NULL : m->final_norm));
    BlockTensor bt[BLOCK_TENSORS_MAX];
    int nbt = block_tensors(c, bt);
    for (int l = 0; l < d->L; l++) {
        BlockParams *bp = &m->blocks[l];
        bool full = none || (m->spec.type == TUNE_FULL && l >= d->lo);
        /* full fine-tuning blocks: checked here, copied at model_init_trainables */
        if (layer_gdn(c, l)) {
            FOR_EACH_PROJ(p, layer_projs(c, l)) {
                int in, out;
                proj_shape(d, p, &in, &out);
                layer_name(nm, sizeof nm, c->prefix, l, PROJ_KEYS[p]);
                TRY(load_matrix(m, nm, out, in, full ? NULL : &bp->w[p]));
            }
            layer_name(nm, sizeof nm, c->prefix, l, "input_layernorm.weight");
            TRY(load_small(m, nm, d->C, full ? NULL : bp->ln1));
            layer_name(nm, sizeof nm, c->prefix, l, "post_attention_layernorm.weight");
            TRY(load_small(m, nm, d->C, full ? NULL : bp->ln2));
            TRY(load_gdn_small(m, l, bp, full));
            continue;
        }
        for (int j = 0; j < nbt; j++) {
            if (bt[j].role == BT_PROJ_WEIGHT) {
                int p = bt[j].proj;
                layer_name(nm, sizeof nm, c->prefix, l, PROJ_KEYS[p]);
                TRY(load_matrix(m, nm, bt[j].shape[0], bt[j].shape[1], full ? NULL : &bp->w[p]));
                continue;
            }
            layer_name(nm, sizeof nm, c->prefix, l, bt[j].suffix);
            float **g, **v = block_slot(bp, &bt[j], &g);
            TRY(load_small(m, nm, bt[j].shape[0], full ? NULL : *v));
        }
    }
    return 0;
}

/* The score scale, window and soft-cap of each layer, and the dtype of its
 * tile products: bf16 when the frozen products run in bf16 (fp32 runs stay
 * fp32; the kernel falls back to fp32 without AVX512_BF16). */
static void attention_params(Model *m) {
    const ModelConfig *c = &m->cfg;
    for (int l = 0; l < m->d.L; l++) {
        m->attn[l].scale = hf_attention_scale(c);
        m->attn[l].window = c->layer_flags[l] & LAYER_SLIDING ? c->sliding_window : 0;
        m->attn[l].softcap = (float)c->attn_softcap;
        m->attn[l].bf16 = m->d.bf16_compute;
        m->attn[l].key_splits = m->d.attn_splits;
    }
}

/* RoPE tables: one set, or gemma3's global and local bases, or longrope's
 * short and long factors. Gemma's embedding scale, rounded to the dtype of
 * the file's weights (as transformers' embed_scale.to(weight.dtype) on the
 * checkpoint loaded in its dtype). */
static void fixed_tables(Model *m) {
    const Dims *d = &m->d;
    const ModelConfig *c = &m->cfg;
    if (m->rope_cos[0]) { /* none without attention layers */
        rope_tables(m->rope_cos[0], m->rope_sin[0], d->rope_T, d->rd, c->rope_theta, &c->rope_scaling, false);
        if (c->rope_scaling.type == ROPE_SCALING_LONGROPE)
            rope_tables(m->rope_cos[1], m->rope_sin[1], d->rope_T, d->rd, c->rope_theta, &c->rope_scaling, true);
        else if (d->n_rope > 1)
            rope_tables(m->rope_cos[1], m->rope_sin[1], d->rope_T, d->rd, c->rope_local_theta, NULL, false);
    }
    m->embed_scale = 0.0f;
    if (c->embed_scale) {
        float s = sqrtf((float)c->hidden_size);
        /* the file's dtype, also when the table was widened to fp32 for a CPU without bf16 products */
        if (m->d.file_dtype == DTYPE_BF16) s = bf16_to_f32(f32_to_bf16(s));
        m->embed_scale = s;
    }
}

/* ||W row||^2 of each DoRA-adapted base matrix, of the weights the products use. */
static void dora_base_norms(Model *m) {
    if (m->spec.type != TUNE_DORA) return;
    const Dims *d = &m->d;
    for (int l = d->lo; l < d->L; l++) {
        BlockParams *bp = &m->blocks[l];
        FOR_EACH_PROJ(p, bp->adapted) fw_row_norms2(bp->wnorm2[p], &bp->w[p]);
    }
}

/* The per-layer arrays (blocks, attention parameters, KV cache offsets). */
static int alloc_layer_arrays(Model *m) {
    size_t L = (size_t)m->d.L;
    m->blocks = mem_calloc(L, sizeof *m->blocks);
    m->attn = mem_calloc(L, sizeof *m->attn);
    m->kv_off = mem_calloc(L, sizeof *m->kv_off);
    m->kv_len = mem_calloc(L, sizeof *m->kv_len);
    if (!m->blocks || !m->attn || !m->kv_off || !m->kv_len) return -1;
    return 0;
}

/* model_load for a GGUF file: config and tensors checked from the file,
 * matrices as views of its blocks, q/k rows through the row maps. */
static int load_gguf(Model *m, const char *path, const ModelSpec *spec) {
    TRY(gguf_open(&m->gg, path));
    m->gguf = true;
    TRY(gguf_model_config(&m->gg, &m->cfg));
    m->gg_arch = gguf_arch_for(m->cfg.model_type);
    if (!m->gg_arch) return -1;
    TRY(gguf_check_model_tensors(&m->gg, m->gg_arch, &m->cfg));
    TRY(gguf_row_maps(&m->cfg, m->gg_arch, &m->q_map, &m->k_map));
    WeightsSummary ws;
    TRY(gguf_weights_summary(&m->gg, m->gg_arch, &m->cfg, DTYPE_F32, &ws));
    TRY(dims_init(&m->d, &m->cfg, spec, ws.file_dtype));
    TRY(dims_apply_summary(&m->d, spec, &ws));
    if (spec->embed_rows) {
        /* the model keeps its own copy: the caller's (a plan's) may go first */
        size_t words = ((size_t)m->d.V + 63) / 64;
        m->embed_rows = mem_alloc(words * sizeof *m->embed_rows);
        TRY_PTR(m->embed_rows);
        memcpy(m->embed_rows, spec->embed_rows, words * sizeof *m->embed_rows);
        m->spec.embed_rows = m->embed_rows;
    }
    TRY(alloc_layer_arrays(m));
    attention_params(m);
    TRY(load_weights(m, true));
    Carver cv = {m->arena, NULL};
    TRY(layout_walk(m, spec, &cv));
    TRY(load_weights(m, false));
    fixed_tables(m);
    model_bind_scratch(m);
    dora_base_norms(m);
    /* exactly the planned pages of the file stay resident */
    return model_keep_resident(m);
}

int model_load(Model **out, const char *model_dir, const ModelSpec *spec, Arena *arena) {
    *out = NULL;
    Model *m = mem_calloc(1, sizeof *m);
    if (!m) return -1;
    m->spec = *spec;
    m->arena = arena;
    if (model_is_gguf(model_dir)) {
        if (load_gguf(m, model_dir, spec) < 0) goto fail;
        *out = m;
        return 0;
    }
    char *cfg_path = path_join(model_dir, "config.json");
    if (!cfg_path) goto fail;
    int rc = hf_config_load(&m->cfg, cfg_path);
    mem_free(cfg_path);
    if (rc < 0) goto fail;
    cfg_path = path_join(model_dir, "config.json");
    if (!cfg_path) goto fail;
    rc = quant_config_load(&m->qc, cfg_path);
    mem_free(cfg_path);
    if (rc < 0) goto fail;
    if (st_model_open(&m->st, model_dir, false) < 0) goto fail;
    m->st_open = true;
    if (model_tensors_resolve(&m->cfg, &m->st) < 0) goto fail;
    WeightsSummary ws;
    /* every quantized module checked, then every tensor, before a byte of the arena is used */
    if (weights_summary_open(&m->st, &m->cfg, &m->qc, &ws) < 0) goto fail;
    if (dims_init(&m->d, &m->cfg, spec, ws.file_dtype) < 0) goto fail;
    if (dims_apply_summary(&m->d, spec, &ws) < 0) goto fail;
    if (spec->embed_rows) {
        /* the model keeps its own copy: the caller's (a plan's) may go first */
        size_t words = ((size_t)m->d.V + 63) / 64;
        m->embed_rows = mem_alloc(words * sizeof *m->embed_rows);
        if (!m->embed_rows) goto fail;
        memcpy(m->embed_rows, spec->embed_rows, words * sizeof *m->embed_rows);
        m->spec.embed_rows = m->embed_rows;
    }
    if (alloc_layer_arrays(m) < 0) goto fail;
    attention_params(m);
    if (model_check_tensors_quant(&m->cfg, &m->st, &m->qc) < 0) goto fail;
    if (load_weights(m, true) < 0) goto fail;
    Carver cv = {arena, NULL};
    if (layout_walk(m, spec, &cv) < 0) goto fail;
    if (load_weights(m, false) < 0) goto fail;
    fixed_tables(m);
    model_bind_scratch(m);
    dora_base_norms(m);
    /* exactly the planned pages of the files stay resident */
    if (model_keep_resident(m) < 0) goto fail;
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

int model_init_trainables(Model *m, Rng *rng) {
    const Dims *d = &m->d;
    if (m->spec.type == TUNE_FULL) {
        /* fp32 masters from the file, read with pread: the file's copy of
         * these blocks never becomes resident */
        for (size_t i = 0; i < m->n_trainables; i++) {
            TrainableTensor *t = &m->trainables[i];
            const StTensor *s = st_model_find(&m->st, t->name);
            if (!s || s->nelem != t->numel) return error_set("%s: tensor %s is missing", m->st.dir, t->name);
            TRY(model_read_tensor(m, s, t->value, DTYPE_F32, t->numel));
        }
        return 0;
    }
    for (int l = d->lo; l < d->L; l++) {
        BlockParams *bp = &m->blocks[l];
        FOR_EACH_PROJ(p, bp->adapted) {
            int in, out;
            proj_shape(d, p, &in, &out);
            float bound = 1.0f / sqrtf((float)in);
            for (size_t k = 0; k < (size_t)in * d->r; k++) bp->la[p][k] = rng_uniform_range(rng, -bound, bound);
            memset(bp->lb[p], 0, (size_t)d->r * out * sizeof(float));
            if (bp->dm[p])
                for (int o = 0; o < out; o++) bp->dm[p][o] = sqrtf(bp->wnorm2[p][o]);
        }
    }
    m->dora_fresh = false;
    return 0;
}

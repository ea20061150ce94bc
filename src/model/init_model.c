/* init_model.c: `lmtune init`: named architecture presets and a randomly
 * initialised model directory (config.json + model.safetensors with the
 * Hugging Face tensor names) that every other command can load. */
#include "model/model_internal.h"
#include "formats/model_tensors.h"
#include "formats/hf_config_qwen35.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Phi-4-mini-instruct's longrope factors (config.json rope_scaling): 48 =
 * 96 rotary dims / 2; the short ones are all 1. */
static const float PHI4_MINI_LONG[48] = {
    1.0f, 1.118320672f, 1.250641126f, 1.398617824f, 1.564103225f, 1.74916897f, 1.956131817f, 2.187582649f,
    2.446418898f, 2.735880826f, 3.059592084f, 3.421605075f, 3.826451687f, 4.279200023f, 4.785517845f,
    5.351743533f, 5.984965424f, 6.693110555f, 7.485043894f, 8.370679318f, 9.36110372f, 10.4687158f,
    11.70738129f, 13.09260651f, 14.64173252f, 16.37415215f, 18.31155283f, 20.47818807f, 22.90118105f,
    25.61086418f, 28.64115884f, 32.03f, 32.1f, 32.13f, 32.23f, 32.6f, 32.61f, 32.64f, 32.66f, 32.7f, 32.71f,
    32.93f, 32.97f, 33.28f, 33.49f, 33.5f, 44.16f, 47.77f,
};

/* The block shape of the gemma3_text family with its published 1B-class
 * defaults (transformers Gemma3TextConfig, the hub configs): sliding layers
 * in a pattern of 6, window 512, two RoPE bases. */
static void gemma3_shape(ModelConfig *c) {
    snprintf(c->model_type, sizeof c->model_type, "gemma3_text");
    c->head_dim = 256;
    c->qk_norm = true;
    c->norm_plus_one = true;
    c->sandwich_norms = true;
    c->embed_scale = true;
    c->hidden_act = HIDDEN_ACT_GELU_TANH;
    c->query_pre_attn_scalar = 256.0;
    c->rope_theta = 1e6;
    c->rope_local_theta = 10000.0;
    c->rms_norm_eps = 1e-6f;
    c->max_position_embeddings = 32768;
    c->sliding_window = 512;
    for (int i = 0; i < c->num_hidden_layers; i++)
        if ((i + 1) % 6 != 0) c->layer_flags[i] = LAYER_SLIDING;
    c->bos_token_id = 2;
    c->eos_token_ids[0] = 1;
    c->eos_token_ids[1] = 106;
    c->n_eos = 2;
}

/* Qwen3.5's dense text decoders, as published (Qwen/Qwen3.5-0.8B, -2B, -4B
 * config.json: text_config of a nested multimodal config): every 4th block
 * gated full attention (head_dim 256, rotary 64, rope_theta 1e7), the others
 * Gated DeltaNet (key/value head dim 128, conv kernel 4); tied embeddings;
 * vocabulary 248320. */
static int preset_qwen35(const char *name, ModelConfig *c) {
    static const struct {
        const char *name;
        int C, F, L, H, KVH, hk, hv;
    } P[] = {
        {"qwen3.5-0.8b", 1024, 3584, 24, 8, 2, 16, 16},
        {"qwen3.5-2b", 2048, 6144, 24, 8, 2, 16, 16},
        {"qwen3.5-4b", 2560, 9216, 32, 16, 4, 16, 32},
        {"tiny-qwen3.5", 64, 128, 4, 4, 2, 2, 4},
    };
    int k = -1;
    for (int i = 0; i < (int)(sizeof P / sizeof P[0]); i++)
        if (!strcmp(name, P[i].name)) k = i;
    if (k < 0) return error_set("unknown model preset '%s' (qwen3.5-0.8b, qwen3.5-2b, qwen3.5-4b, tiny-qwen3.5)", name);
    bool tiny = !strcmp(name, "tiny-qwen3.5");
    snprintf(c->model_type, sizeof c->model_type, "qwen3_5");
    c->hidden_size = P[k].C;
    c->intermediate_size = P[k].F;
    c->num_hidden_layers = P[k].L;
    c->num_attention_heads = P[k].H;
    c->num_key_value_heads = P[k].KVH;
    c->head_dim = tiny ? 16 : 256;
    c->vocab_size = tiny ? 256 : 248320;
    c->max_position_embeddings = tiny ? 2048 : 262144;
    c->rms_norm_eps = 1e-6f;
    c->rope_theta = 1e7;
    c->qk_norm = true;
    c->tie_word_embeddings = true;
    if (tiny) c->torch_dtype = DTYPE_F32;
    Qwen35Config *q = &c->q35;
    q->on = true;
    q->nested = true;
    q->k_heads = P[k].hk;
    q->v_heads = P[k].hv;
    q->k_dim = tiny ? 16 : 128;
    q->v_dim = tiny ? 16 : 128;
    q->conv_kernel = 4;
    q->partial_rotary_factor = 0.25;
    q->rotary_dim = c->head_dim / 4;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        q->linear[i] = (i + 1) % 4 != 0;
        q->n_linear += q->linear[i];
    }
    snprintf(q->prefix, sizeof q->prefix, "model.language_model.");
    snprintf(q->hf_prefix, sizeof q->hf_prefix, "model.language_model.");
    snprintf(q->adapter_prefix, sizeof q->adapter_prefix, "language_model.model.");
    snprintf(q->head_name, sizeof q->head_name, "lm_head.weight");
    hf_qwen35_names(c);
    return 0;
}

int model_preset(const char *name, ModelConfig *c) {
    memset(c, 0, sizeof *c);
    c->bos_token_id = -1;
    c->torch_dtype = DTYPE_BF16;
    c->tie_word_embeddings = true;
    c->max_position_embeddings = 8192;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0;
    c->rope_scaling.type = ROPE_SCALING_NONE;
    c->hidden_act = HIDDEN_ACT_SILU;
    snprintf(c->prefix, sizeof c->prefix, "model.");
    snprintf(c->adapter_prefix, sizeof c->adapter_prefix, "model.");
    snprintf(c->head_name, sizeof c->head_name, "lm_head.weight");
#define SET(type, hs, is, nl, nh, kv, hd, vs) \
    do { \
        snprintf(c->model_type, sizeof c->model_type, "%s", type); \
        c->hidden_size = hs; \
        c->intermediate_size = is; \
        c->num_hidden_layers = nl; \
        c->num_attention_heads = nh; \
        c->num_key_value_heads = kv; \
        c->head_dim = hd ? hd : hs / nh; \
        c->vocab_size = vs; \
    } while (0)
    if (!strcmp(name, "smollm2-135m")) {
        SET("llama", 576, 1536, 30, 9, 3, 0, 49152);
        c->rope_theta = 100000.0;
    } else if (!strcmp(name, "qwen2.5-0.5b")) {
        SET("qwen2", 896, 4864, 24, 14, 2, 0, 151936);
        c->attention_bias = true;
        c->rope_theta = 1e6;
        c->rms_norm_eps = 1e-6f;
        c->max_position_embeddings = 32768;
    } else if (!strcmp(name, "qwen3-0.6b")) {
        SET("qwen3", 1024, 3072, 28, 16, 8, 128, 151936);
        c->qk_norm = true;
        c->rope_theta = 1e6;
        c->rms_norm_eps = 1e-6f;
        c->max_position_embeddings = 40960;
    } else if (!strcmp(name, "llama-3.2-1b")) {
        SET("llama", 2048, 8192, 16, 32, 8, 64, 128256);
        c->rope_theta = 500000.0;
        c->max_position_embeddings = 131072;
        c->rope_scaling = (RopeScaling){.type = ROPE_SCALING_LLAMA3, .factor = 32.0, .low_freq_factor = 1.0,
                                        .high_freq_factor = 4.0, .original_max_position = 8192};
    } else if (!strcmp(name, "llama-3.1-8b")) {
        SET("llama", 4096, 14336, 32, 32, 8, 128, 128256);
        c->tie_word_embeddings = false;
        c->rope_theta = 500000.0;
        c->max_position_embeddings = 131072;
        c->rope_scaling = (RopeScaling){.type = ROPE_SCALING_LLAMA3, .factor = 8.0, .low_freq_factor = 1.0,
                                        .high_freq_factor = 4.0, .original_max_position = 8192};
    } else if (!strcmp(name, "gemma-3-270m")) {
        /* google/gemma-3-270m: 18 layers (global: 5, 11, 17), 640 wide, 4 heads of 256, one kv head */
        SET("gemma3_text", 640, 2048, 18, 4, 1, 256, 262144);
        gemma3_shape(c);
    } else if (!strcmp(name, "gemma-3-1b")) {
        /* google/gemma-3-1b-pt: 26 layers, 1152 wide, 4 heads of 256, one kv head */
        SET("gemma3_text", 1152, 6912, 26, 4, 1, 256, 262144);
        gemma3_shape(c);
    } else if (!strcmp(name, "phi-4-mini")) {
        /* microsoft/Phi-4-mini-instruct: fused projections, 96 of 128 head dims rotate, longrope */
        SET("phi3", 3072, 8192, 32, 24, 8, 0, 200064);
        c->fused_qkv = true;
        c->fused_gate_up = true;
        c->rotary_dim = 96;
        c->max_position_embeddings = 131072;
        c->original_max_position = 4096;
        c->sliding_window = 262144;
        for (int i = 0; i < c->num_hidden_layers; i++) c->layer_flags[i] = LAYER_SLIDING;
        RopeScaling *r = &c->rope_scaling;
        r->type = ROPE_SCALING_LONGROPE;
        r->n_factors = 48;
        r->original_max_position = 4096;
        r->factor = 131072.0 / 4096.0;
        r->attention_factor = sqrt(1.0 + log(r->factor) / log(4096.0));
        for (int i = 0; i < 48; i++) {
            r->short_factor[i] = 1.0f;
            r->long_factor[i] = PHI4_MINI_LONG[i];
        }
        c->bos_token_id = 199999;
        c->eos_token_ids[0] = 200020;
        c->n_eos = 1;
    } else if (!strcmp(name, "smollm3-3b")) {
        /* HuggingFaceTB/SmolLM3-3B: llama blocks, every 4th layer without RoPE */
        SET("smollm3", 2048, 11008, 36, 16, 4, 0, 128256);
        c->rope_theta = 5e6;
        c->rms_norm_eps = 1e-6f;
        c->max_position_embeddings = 65536;
        for (int i = 0; i < c->num_hidden_layers; i++)
            if ((i + 1) % 4 == 0) c->layer_flags[i] = LAYER_NOPE;
        c->eos_token_ids[0] = 128012;
        c->n_eos = 1;
    } else if (!strcmp(name, "tiny")) {
        SET("llama", 64, 128, 2, 4, 2, 0, 256);
        c->torch_dtype = DTYPE_F32;
        c->max_position_embeddings = 2048;
    } else if (!strncmp(name, "qwen3.5-", 8) || !strcmp(name, "tiny-qwen3.5")) {
        return preset_qwen35(name, c);
    } else {
        return error_set("unknown model preset '%s' (smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, llama-3.2-1b, "
                         "llama-3.1-8b, gemma-3-270m, gemma-3-1b, phi-4-mini, smollm3-3b, qwen3.5-0.8b, "
                         "qwen3.5-2b, qwen3.5-4b, tiny, tiny-qwen3.5)", name);
    }
#undef SET
    c->rotary_dim = c->rotary_dim ? c->rotary_dim : c->head_dim;
    return 0;
}

/* The tensors of the shard being made. Pass 1 (sizing) only counts bytes
 * and shards; pass 2 makes the data and writes each shard when the next
 * tensor would not fit (at most INIT_SHARD_BYTES each, as HF's 5 GB), so an
 * 8B model never holds more than one shard in memory. */
#define INIT_SHARD_BYTES ((size_t)5000000000ull)
/* The shard limit; LMTUNE_INIT_SHARD_BYTES overrides it (tests make small sharded models). */
static size_t shard_limit(void) {
    const char *e = getenv("LMTUNE_INIT_SHARD_BYTES");
    long long v = e ? atoll(e) : 0;
    return v > 0 ? (size_t)v : INIT_SHARD_BYTES;
}
typedef struct {
    StWriteTensor *t;
    size_t n, cap;
    void **bufs;
    bool sizing;          /* pass 1 */
    size_t shard_bytes;   /* bytes of the current shard */
    int shard, n_shards;  /* current shard index; total (known in pass 2) */
    const char *dir;
    json_t *weight_map;
    size_t total_bytes;
} WriteList;

static void free_pending(WriteList *w) {
    for (size_t i = 0; i < w->n; i++) {
        mem_free((void *)w->t[i].name);
        mem_free(w->bufs[i]);
    }
    w->n = 0;
}

static void shard_name(const WriteList *w, int shard, char *buf, size_t cap) {
    if (w->n_shards <= 1) snprintf(buf, cap, "model.safetensors");
    else snprintf(buf, cap, "model-%05d-of-%05d.safetensors", shard + 1, w->n_shards);
}

/* Writes the pending tensors as the current shard (pass 2). */
static int flush_shard(WriteList *w) {
    if (w->sizing || w->n == 0) return 0;
    char fname[64];
    shard_name(w, w->shard, fname, sizeof fname);
    char *sp = path_join(w->dir, fname);
    TRY_PTR(sp);
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    int rc = st_write(sp, w->t, w->n, mk, mv, 1);
    mem_free(sp);
    for (size_t i = 0; rc == 0 && i < w->n; i++) json_object_set_new(w->weight_map, w->t[i].name, json_string(fname));
    free_pending(w);
    return rc;
}

enum { FILL_CONST, FILL_NORMAL, FILL_A_LOG };

/* A tensor of up to 3 dims: a constant, N(0, 0.02^2), or Gated DeltaNet's
 * A_log = log U(0.01, 16) (transformers' init). */
static int add_tensor(WriteList *w, const char *name, int ndim, int64_t a, int64_t b, int64_t c, DType dt,
                      Rng *rng, float fill, int kind) {
    size_t n = (size_t)a * (ndim >= 2 ? (size_t)b : 1) * (ndim >= 3 ? (size_t)c : 1);
    size_t bytes = n * (dt == DTYPE_F32 ? 4 : 2);
    if (w->shard_bytes > 0 && w->shard_bytes + bytes > shard_limit()) {
        TRY(flush_shard(w));
        w->shard++;
        w->shard_bytes = 0;
    }
    w->shard_bytes += bytes;
    w->total_bytes += bytes;
    if (w->sizing) {
        w->n_shards = w->shard + 1;
        return 0;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        StWriteTensor *t = mem_realloc(w->t, cap * sizeof *t);
        if (!t) return -1;
        w->t = t;
        void **bufs = mem_realloc(w->bufs, cap * sizeof *bufs);
        if (!bufs) return -1;
        w->bufs = bufs;
        w->cap = cap;
    }
    float *tmp = mem_alloc(n * sizeof(float) + 1);
    if (!tmp) return -1;
    for (size_t i = 0; i < n; i++) {
        if (kind == FILL_NORMAL) tmp[i] = 0.02f * rng_normal(rng);
        else if (kind == FILL_A_LOG) tmp[i] = logf(rng_uniform_range(rng, 0.01f, 16.0f));
        else tmp[i] = fill;
    }
    void *data = tmp;
    if (dt != DTYPE_F32) {
        data = mem_alloc(n * 2 + 1);
        if (!data) {
            mem_free(tmp);
            return -1;
        }
        dtype_from_f32(data, dt, tmp, n);
        mem_free(tmp);
    }
    char *nm = mem_strdup(name);
    if (!nm) {
        mem_free(data);
        return -1;
    }
    StWriteTensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = a;
    t->shape[1] = b;
    t->shape[2] = c;
    t->data = data;
    w->bufs[w->n] = data;
    w->n++;
    return 0;
}

/* One block's tensors, transformers' names and conventions: norms (zero-
 * centred ones are 0, i.e. used as 1), projections, and for a Gated
 * DeltaNet block conv1d (C', 1, K), A_log, dt_bias = 1, gated norm = 1. */
static int add_block(WriteList *w, const ModelConfig *cfg, const Dims *d, int l, DType dtype, Rng *rng) {
    char nm[160];
    float one = d->norm_off != 0.0f ? 0.0f : 1.0f;
    int rc = 0;
    model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
    rc = add_tensor(w, nm, 1, d->C, 0, 0, dtype, rng, one, FILL_CONST);
    unsigned projs = layer_projs(cfg, l);
    for (int p = 0; rc == 0 && p < PROJ_COUNT; p++) {
        if (!(projs >> p & 1u)) continue;
        int in, out;
        proj_shape(d, p, &in, &out);
        model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.%s.weight", l, PROJ_KEYS[p]);
        rc = add_tensor(w, nm, 2, out, in, 0, dtype, rng, 0, FILL_NORMAL);
        if (rc == 0 && d->bias && p <= PROJ_V) {
            model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.%s.bias", l, PROJ_KEYS[p]);
            rc = add_tensor(w, nm, 1, out, 0, 0, dtype, rng, 0.0f, FILL_CONST);
        }
    }
    if (rc == 0 && layer_gdn(cfg, l)) {
        const GdnDims *g = &d->g;
        model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.linear_attn.conv1d.weight", l);
        rc = add_tensor(w, nm, 3, g->CC, 1, g->K, dtype, rng, 0, FILL_NORMAL);
        model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.linear_attn.A_log", l);
        if (rc == 0) rc = add_tensor(w, nm, 1, g->Hv, 0, 0, DTYPE_F32, rng, 0, FILL_A_LOG);
        model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.linear_attn.dt_bias", l);
        if (rc == 0) rc = add_tensor(w, nm, 1, g->Hv, 0, 0, dtype, rng, 1.0f, FILL_CONST);
        model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.linear_attn.norm.weight", l);
        if (rc == 0) rc = add_tensor(w, nm, 1, g->Dv, 0, 0, dtype, rng, 1.0f, FILL_CONST);
    } else if (rc == 0 && d->qk_norm) {
        model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", l);
        rc = add_tensor(w, nm, 1, d->D, 0, 0, dtype, rng, one, FILL_CONST);
        model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", l);
        if (rc == 0) rc = add_tensor(w, nm, 1, d->D, 0, 0, dtype, rng, one, FILL_CONST);
    }
    model_tensor_name(cfg, nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
    if (rc == 0) rc = add_tensor(w, nm, 1, d->C, 0, 0, dtype, rng, one, FILL_CONST);
    return rc;
}

/* Every tensor of the model, in HF order. */
static int add_all(WriteList *wl, const Dims *d, const ModelConfig *cfg, DType dtype, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    int rc = 0;
    if (cfg->q35.on) {
        /* block by block: Gated DeltaNet's tensors have their own inits */
        char nm[160];
        float one = d->norm_off != 0.0f ? 0.0f : 1.0f;
        model_tensor_name(cfg, nm, sizeof nm, "model.embed_tokens.weight");
        rc = add_tensor(wl, nm, 2, d->V, d->C, 0, dtype, &rng, 0, FILL_NORMAL);
        for (int l = 0; rc == 0 && l < d->L; l++) rc = add_block(wl, cfg, d, l, dtype, &rng);
        model_tensor_name(cfg, nm, sizeof nm, "model.norm.weight");
        if (rc == 0) rc = add_tensor(wl, nm, 1, d->C, 0, 0, dtype, &rng, one, FILL_CONST);
        model_tensor_name(cfg, nm, sizeof nm, "lm_head.weight");
        if (rc == 0 && !cfg->tie_word_embeddings)
            rc = add_tensor(wl, nm, 2, d->V, d->C, 0, dtype, &rng, 0, FILL_NORMAL);
        return rc;
    }
    /* every tensor the config implies: matrices N(0, 0.02^2), biases 0,
     * norms 1 (gemma's zero-centred norms: 0, i.e. a gain of 1) */
    ModelTensorSpec *specs;
    size_t n;
    rc = model_tensor_specs(cfg, &specs, &n);
    float norm_fill = cfg->norm_plus_one ? 0.0f : 1.0f;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ModelTensorSpec *t = &specs[i];
        bool bias = strstr(t->name, ".bias") != NULL;
        rc = add_tensor(wl, t->name, t->ndim, t->shape[0], t->shape[1], 0, dtype, &rng, bias ? 0.0f : norm_fill,
                        t->ndim == 2 ? FILL_NORMAL : FILL_CONST);
    }
    mem_free(specs);
    return rc;
}

int model_init_random(const char *out_dir, const ModelConfig *cfg, DType dtype, uint64_t seed) {
    if (dtype != DTYPE_F32 && dtype != DTYPE_BF16 && dtype != DTYPE_F16)
        return error_set("init: dtype must be F32, BF16 or F16 (got %s)", dtype_name(dtype));
    ModelSpec spec = {.type = TUNE_NONE, .weight_dtype = DTYPE_F32};
    ModelConfig c = *cfg;
    c.torch_dtype = dtype;
    if (c.q35.on) {
        /* --layers may have cut the model: count its kinds again */
        c.q35.n_linear = 0;
        for (int l = 0; l < c.num_hidden_layers && l < Q35_MAX_LAYERS; l++) c.q35.n_linear += c.q35.linear[l];
    }
    Dims d;
    TRY(dims_init(&d, &c, &spec, DTYPE_F32));
    TRY(dir_ensure(out_dir));
    char *cp = path_join(out_dir, "config.json");
    if (!cp) return -1;
    int rc = hf_config_write(&c, cp);
    mem_free(cp);
    TRY(rc);
    WriteList w = {0};
    w.dir = out_dir;
    w.weight_map = json_object();
    if (!w.weight_map) return error_set("init: out of memory");
    for (int pass = 0; pass < 2; pass++) {
        int n_shards = w.n_shards;
        w.sizing = pass == 0;
        w.shard = 0;
        w.shard_bytes = 0;
        w.total_bytes = 0;
        w.n_shards = n_shards;
        rc = add_all(&w, &d, &c, dtype, seed);
        if (rc == 0 && pass == 1) rc = flush_shard(&w);
        if (rc < 0) break;
    }
    if (rc == 0 && w.n_shards > 1) {
        json_t *index = json_object(), *meta = json_object();
        json_object_set_new(meta, "total_size", json_integer((json_int_t)w.total_bytes));
        json_object_set_new(index, "metadata", meta);
        json_object_set(index, "weight_map", w.weight_map);
        char *text = json_dumps(index, JSON_INDENT(2) | JSON_SORT_KEYS);
        json_decref(index);
        char *ip = path_join(out_dir, "model.safetensors.index.json");
        rc = text && ip ? atomic_write_file(ip, text, strlen(text)) : error_set("init: cannot write the index");
        free(text);
        mem_free(ip);
    }
    free_pending(&w);
    json_decref(w.weight_map);
    mem_free(w.t);
    mem_free(w.bufs);
    return rc;
}


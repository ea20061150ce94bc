/* init_model.c: `lmtune init`: named architecture presets and a randomly
 * initialised model directory (config.json + model.safetensors with the
 * Hugging Face tensor names) that every other command can load. */
#include "model/model_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_preset(const char *name, ModelConfig *c) {
    memset(c, 0, sizeof *c);
    c->bos_token_id = -1;
    c->torch_dtype = DTYPE_BF16;
    c->tie_word_embeddings = true;
    c->max_position_embeddings = 8192;
    c->rms_norm_eps = 1e-5f;
    c->rope_theta = 10000.0;
    c->rope_scaling.type = ROPE_SCALING_NONE;
#define SET(type, hs, is, nl, nh, kv, hd, vs) do { snprintf(c->model_type, sizeof c->model_type, "%s", type); \
    c->hidden_size = hs; c->intermediate_size = is; c->num_hidden_layers = nl; c->num_attention_heads = nh; \
    c->num_key_value_heads = kv; c->head_dim = hd ? hd : hs / nh; c->vocab_size = vs; } while (0)
    if (!strcmp(name, "smollm2-135m")) {
        SET("llama", 576, 1536, 30, 9, 3, 0, 49152);
        c->rope_theta = 100000.0;
    } else if (!strcmp(name, "qwen2.5-0.5b")) {
        SET("qwen2", 896, 4864, 24, 14, 2, 0, 151936);
        c->attention_bias = true; c->rope_theta = 1e6; c->rms_norm_eps = 1e-6f; c->max_position_embeddings = 32768;
    } else if (!strcmp(name, "qwen3-0.6b")) {
        SET("qwen3", 1024, 3072, 28, 16, 8, 128, 151936);
        c->qk_norm = true; c->rope_theta = 1e6; c->rms_norm_eps = 1e-6f; c->max_position_embeddings = 40960;
    } else if (!strcmp(name, "llama-3.2-1b")) {
        SET("llama", 2048, 8192, 16, 32, 8, 64, 128256);
        c->rope_theta = 500000.0; c->max_position_embeddings = 131072;
        c->rope_scaling = (RopeScaling){.type = ROPE_SCALING_LLAMA3, .factor = 32.0, .low_freq_factor = 1.0,
                                        .high_freq_factor = 4.0, .original_max_position = 8192};
    } else if (!strcmp(name, "llama-3.1-8b")) {
        SET("llama", 4096, 14336, 32, 32, 8, 128, 128256);
        c->tie_word_embeddings = false;
        c->rope_theta = 500000.0;
        c->max_position_embeddings = 131072;
        c->rope_scaling = (RopeScaling){.type = ROPE_SCALING_LLAMA3, .factor = 8.0, .low_freq_factor = 1.0,
                                        .high_freq_factor = 4.0, .original_max_position = 8192};
    } else if (!strcmp(name, "tiny")) {
        SET("llama", 64, 128, 2, 4, 2, 0, 256);
        c->torch_dtype = DTYPE_F32;
        c->max_position_embeddings = 2048;
    } else {
        return error_set("unknown model preset '%s' (smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, llama-3.2-1b, "
                         "llama-3.1-8b, tiny)", name);
    }
#undef SET
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

static int add_tensor(WriteList *w, const char *name, int ndim, int64_t a, int64_t b, DType dt,
                      Rng *rng, float fill, bool random) {
    size_t n = (size_t)a * (ndim == 2 ? (size_t)b : 1);
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
    float *tmp = mem_alloc(n * sizeof(float));
    if (!tmp) return -1;
    for (size_t i = 0; i < n; i++) tmp[i] = random ? 0.02f * rng_normal(rng) : fill;
    void *data = tmp;
    if (dt != DTYPE_F32) {
        data = mem_alloc(n * 2);
        if (!data) { mem_free(tmp); return -1; }
        dtype_from_f32(data, dt, tmp, n);
        mem_free(tmp);
    }
    char *nm = mem_strdup(name);
    if (!nm) { mem_free(data); return -1; }
    StWriteTensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = nm; t->dtype = dt; t->ndim = ndim; t->shape[0] = a; t->shape[1] = b; t->data = data;
    w->bufs[w->n] = data;
    w->n++;
    return 0;
}

/* Every tensor of the model, in HF order. */
static int add_all(WriteList *wl, const Dims *dp, const ModelConfig *cfg, DType dtype, uint64_t seed) {
    const Dims d = *dp;
    Rng rng;
    rng_seed(&rng, seed);
    char nm[160];
    int rc = add_tensor(wl, "model.embed_tokens.weight", 2, d.V, d.C, dtype, &rng, 0, true);
    for (int l = 0; rc == 0 && l < d.L; l++) {
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l);
        rc = add_tensor(wl, nm, 1, d.C, 0, dtype, &rng, 1.0f, false);
        for (int p = 0; rc == 0 && p < PROJ_COUNT; p++) {
            int in, out; proj_shape(&d, p, &in, &out);
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, PROJ_KEYS[p]);
            rc = add_tensor(wl, nm, 2, out, in, dtype, &rng, 0, true);
            if (rc == 0 && d.bias && p <= PROJ_V) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s.bias", l, PROJ_KEYS[p]);
                rc = add_tensor(wl, nm, 1, out, 0, dtype, &rng, 0.0f, false);
            }
        }
        if (rc == 0 && d.qk_norm) {
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", l);
            rc = add_tensor(wl, nm, 1, d.D, 0, dtype, &rng, 1.0f, false);
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", l);
            if (rc == 0) rc = add_tensor(wl, nm, 1, d.D, 0, dtype, &rng, 1.0f, false);
        }
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l);
        if (rc == 0) rc = add_tensor(wl, nm, 1, d.C, 0, dtype, &rng, 1.0f, false);
    }
    if (rc == 0) rc = add_tensor(wl, "model.norm.weight", 1, d.C, 0, dtype, &rng, 1.0f, false);
    if (rc == 0 && !cfg->tie_word_embeddings) rc = add_tensor(wl, "lm_head.weight", 2, d.V, d.C, dtype, &rng, 0, true);
    return rc;
}

int model_init_random(const char *out_dir, const ModelConfig *cfg, DType dtype, uint64_t seed) {
    if (dtype != DTYPE_F32 && dtype != DTYPE_BF16 && dtype != DTYPE_F16)
        return error_set("init: dtype must be F32, BF16 or F16 (got %s)", dtype_name(dtype));
    ModelSpec spec = {.type = TUNE_NONE, .weight_dtype = DTYPE_F32};
    Dims d;
    TRY(dims_init(&d, cfg, &spec, DTYPE_F32));
    TRY(dir_ensure(out_dir));
    ModelConfig c = *cfg;
    c.torch_dtype = dtype;
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
        rc = add_all(&w, &d, cfg, dtype, seed);
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


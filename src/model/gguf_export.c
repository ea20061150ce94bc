/* gguf_export.c: a Hugging Face model directory, or a LoRA adapter of it,
 * as the GGUF file llama.cpp loads (see gguf_export.h). Metadata as
 * convert_hf_to_gguf.py writes it for these architectures (TextModel and
 * LlamaModel.set_gguf_parameters, Gemma2Model, Gemma3Model,
 * Phi3MiniModel; the vocabulary through tok_gguf.c), tensors named by the
 * architecture's table, q/k rows permuted where the converter permutes them
 * (LlamaModel.permute), Gemma's norms stored as w + 1, Phi-3's longrope
 * factors as the rope_factors_long/short tensors, matrices in the
 * requested type and 1-D tensors in F32. A model that llama.cpp's graph of
 * its architecture would run differently (a NoPE layout other than
 * SmolLM3's every 4th layer, Gemma 2's attention scale, attention
 * soft-capping on gemma3) is refused before anything is written
 * (export_fits). */
#include "model/gguf_export.h"
#include "base/alloc.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/gguf.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/ggml_quants.h"
#include "base/rope_scaling.h"
#include "model/fuse.h"
#include "model/model.h"
#include "tokenizer/tok_gguf.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Heads of a permuted tensor: H for q, KVH for k, 0 when not permuted. */
static int permute_heads(const GgufArch *a, const ModelConfig *c, const char *hf) {
    if (!a->permute_qk) return 0;
    if (strstr(hf, ".self_attn.q_proj.")) return c->num_attention_heads;
    if (strstr(hf, ".self_attn.k_proj.")) return c->num_key_value_heads;
    return 0;
}

/* Reorders the rows (of `cols` floats each) of a permuted projection. */
static int permute_rows(float *x, int rows, int64_t cols, int D) {
    float *tmp = mem_alloc((size_t)rows * (size_t)cols * sizeof *tmp);
    if (!tmp) return -1;
    memcpy(tmp, x, (size_t)rows * (size_t)cols * sizeof *tmp);
    for (int r = 0; r < rows; r++)
        memcpy(x + (size_t)r * cols, tmp + (size_t)gguf_permuted_row(r, D) * cols, (size_t)cols * sizeof *x);
    mem_free(tmp);
    return 0;
}

/* ---- the whole model ---- */

typedef struct {
    const ModelConfig *cfg;
    const GgufArch *arch;
    const StTensor **src;      /* per output tensor; NULL for generated ones */
    const float **gen;         /* per generated tensor: its F32 values */
    char (*hf)[96];            /* per output tensor: HF name */
    int *types;
    float q_norm_scale;        /* gemma: q_norm's weights times this (attention_scale_fold) */
} ModelCtx;

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* llama.cpp's gemma2/gemma3 graphs scale q by 1/sqrt(head_dim) (by
 * 1/sqrt(hidden / heads) for the 27B shapes, which they know by their layer
 * count: 46 and 62), not by query_pre_attn_scalar^-1/2 as transformers does.
 * Returns the factor that turns llama.cpp's scale into the model's. */
static double attention_scale_fold(const ModelConfig *c, const GgufArch *a) {
    int big = !strcmp(a->arch, "gemma2") ? 46 : 62;
    double d = c->num_hidden_layers == big ? (double)(c->hidden_size / c->num_attention_heads) : c->head_dim;
    return sqrt(d) * (double)hf_attention_scale(c);
}

static int produce_tensor(void *vctx, size_t i, void *dst, size_t bytes) {
    ModelCtx *c = vctx;
    if (!c->src[i]) {
        memcpy(dst, c->gen[i], bytes);
        return 0;
    }
    const StTensor *t = c->src[i];
    float *x = mem_alloc(t->nelem * sizeof *x + 1);
    if (!x) return -1;
    dtype_to_f32(x, t->data, t->dtype, t->nelem);
    if (c->cfg->norm_plus_one && ends_with(c->hf[i], "norm.weight")) {
        /* Gemma{2,3}Model.modify_tensors: data_torch + 1, in fp32 here (llama.cpp's RMSNorm multiplies by the
         * stored weight) */
        float s = ends_with(c->hf[i], "self_attn.q_norm.weight") ? c->q_norm_scale : 1.0f;
        for (size_t k = 0; k < t->nelem; k++) x[k] = (x[k] + 1.0f) * s;
    }
    int heads = permute_heads(c->arch, c->cfg, c->hf[i]);
    int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
    int rows = (int)t->shape[0];
    if (heads > 0 && permute_rows(x, rows, cols, c->cfg->head_dim) < 0) {
        mem_free(x);
        return -1;
    }
    int type = c->types[i];
    if (type == GGML_TYPE_F32) {
        memcpy(dst, x, bytes);
    } else if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
        dtype_from_f32(dst, type == GGML_TYPE_F16 ? DTYPE_F16 : DTYPE_BF16, x, t->nelem);
    } else {
        size_t row_bytes = ggml_row_bytes(type, cols);
        for (int r = 0; r < rows; r++)
            ggml_quantize_row_q8_0(x + (size_t)r * cols, (uint8_t *)dst + (size_t)r * row_bytes, cols);
    }
    mem_free(x);
    return 0;
}

/* convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors for rope_type llama3. */
static void llama3_rope_factors(const ModelConfig *c, float *out) {
    const RopeScaling *r = &c->rope_scaling;
    int D = c->head_dim;
    double low_wavelen = r->original_max_position / r->low_freq_factor;
    double high_wavelen = r->original_max_position / r->high_freq_factor;
    for (int i = 0; i < D / 2; i++) {
        float freq = (float)(1.0 / pow(c->rope_theta, (double)(2 * i) / D));
        double wavelen = 2 * M_PI / freq;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = (float)r->factor;
        } else {
            double smooth = (r->original_max_position / wavelen - r->low_freq_factor)
                            / (r->high_freq_factor - r->low_freq_factor);
            out[i] = (float)(1.0 / ((1 - smooth) / r->factor + smooth));
        }
    }
}

static int file_type_of(int ggml_type) {
    switch (ggml_type) {
    case GGML_TYPE_F32: return 0;
    case GGML_TYPE_F16: return 1;
    case GGML_TYPE_Q8_0: return 7;
    default: return 32;   /* LLAMA_FTYPE_MOSTLY_BF16 */
    }
}

enum { MAX_KV = 64 };

typedef struct {
    GgufKVOut kv[MAX_KV];
    size_t n;
    char keys[MAX_KV][80];
} KVList;

static GgufKVOut *kv_add(KVList *l, const char *arch, const char *key, int type) {
    GgufKVOut *kv = &l->kv[l->n];
    if (arch) snprintf(l->keys[l->n], sizeof l->keys[0], "%s.%s", arch, key);
    else snprintf(l->keys[l->n], sizeof l->keys[0], "%s", key);
    memset(kv, 0, sizeof *kv);
    kv->key = l->keys[l->n];
    kv->type = type;
    l->n++;
    return kv;
}

static void kv_u32(KVList *l, const char *arch, const char *key, uint32_t v) {
    kv_add(l, arch, key, GGUF_TYPE_UINT32)->u32 = v;
}

static void kv_f32(KVList *l, const char *arch, const char *key, float v) {
    kv_add(l, arch, key, GGUF_TYPE_FLOAT32)->f32 = v;
}

static void kv_str(KVList *l, const char *arch, const char *key, const char *v) {
    kv_add(l, arch, key, GGUF_TYPE_STRING)->str = v;
}

static void kv_bool(KVList *l, const char *key, bool v) {
    kv_add(l, NULL, key, GGUF_TYPE_BOOL)->b = v;
}

/* The per-layer pattern of sliding layers (llama.cpp's
 * attention.sliding_window_pattern as an array, as the converters of
 * Cohere2, EXAONE 4 and others write it from layer_types). */
static void kv_sliding(KVList *l, const char *arch, const ModelConfig *c, uint8_t *bools) {
    for (int i = 0; i < c->num_hidden_layers; i++) bools[i] = (c->layer_flags[i] & LAYER_SLIDING) ? 1 : 0;
    kv_u32(l, arch, "attention.sliding_window", (uint32_t)c->sliding_window);
    GgufKVOut *kv = kv_add(l, arch, "attention.sliding_window_pattern", GGUF_TYPE_ARRAY);
    kv->arr_type = GGUF_TYPE_BOOL;
    kv->n = (size_t)c->num_hidden_layers;
    kv->bools = bools;
}

static bool any_layer(const ModelConfig *c, int flag) {
    for (int i = 0; i < c->num_hidden_layers; i++)
        if (c->layer_flags[i] & flag) return true;
    return false;
}

static void model_kvs(KVList *l, const ModelConfig *c, const GgufArch *a, int ggml_type, const char *name,
                      uint8_t *bools) {
    kv_str(l, NULL, "general.architecture", a->arch);
    kv_str(l, NULL, "general.type", "model");
    kv_str(l, NULL, "general.name", name);
    kv_u32(l, NULL, "general.file_type", (uint32_t)file_type_of(ggml_type));
    kv_u32(l, NULL, "general.quantization_version", 2);
    kv_u32(l, NULL, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
    kv_u32(l, a->arch, "vocab_size", (uint32_t)c->vocab_size);
    kv_u32(l, a->arch, "context_length", (uint32_t)c->max_position_embeddings);
    kv_u32(l, a->arch, "embedding_length", (uint32_t)c->hidden_size);
    kv_u32(l, a->arch, "block_count", (uint32_t)c->num_hidden_layers);
    kv_u32(l, a->arch, "feed_forward_length", (uint32_t)c->intermediate_size);
    kv_u32(l, a->arch, "attention.head_count", (uint32_t)c->num_attention_heads);
    kv_u32(l, a->arch, "attention.head_count_kv", (uint32_t)c->num_key_value_heads);
    kv_u32(l, a->arch, "attention.key_length", (uint32_t)c->head_dim);
    kv_u32(l, a->arch, "attention.value_length", (uint32_t)c->head_dim);
    kv_u32(l, a->arch, "rope.dimension_count", (uint32_t)(c->rotary_dim > 0 ? c->rotary_dim : c->head_dim));
    kv_f32(l, a->arch, "rope.freq_base", (float)c->rope_theta);
    kv_f32(l, a->arch, "attention.layer_norm_rms_epsilon", c->rms_norm_eps);
    if (c->rope_scaling.type == ROPE_SCALING_LINEAR) {
        kv_str(l, a->arch, "rope.scaling.type", "linear");
        kv_f32(l, a->arch, "rope.scaling.factor", (float)c->rope_scaling.factor);
    }
    bool sliding = c->sliding_window > 0 && any_layer(c, LAYER_SLIDING);
    if (!strcmp(a->arch, "gemma3") && sliding) {
        /* Gemma3Model / TextModel: the window, and the sliding layers' own
         * RoPE base (llama.cpp leaves them unscaled) */
        kv_sliding(l, a->arch, c, bools);
        double local = c->rope_local_theta > 0 ? c->rope_local_theta : c->rope_theta;
        kv_f32(l, a->arch, "rope.freq_base_swa", (float)local);
    }
    if (!strcmp(a->arch, "gemma3") && c->final_softcap > 0)
        kv_f32(l, a->arch, "final_logit_softcapping", (float)c->final_softcap);
    if (!strcmp(a->arch, "gemma2")) {
        kv_f32(l, a->arch, "attn_logit_softcapping", (float)c->attn_softcap);
        kv_f32(l, a->arch, "final_logit_softcapping", (float)c->final_softcap);
        if (sliding) kv_sliding(l, a->arch, c, bools);
    }
    if (!strcmp(a->arch, "phi3")) {
        /* Phi3MiniModel.set_gguf_parameters (llama.cpp runs phi3 without its window) */
        kv_u32(l, a->arch, "attention.sliding_window", (uint32_t)c->sliding_window);
        if (c->original_max_position > 0)
            kv_u32(l, a->arch, "rope.scaling.original_context_length", (uint32_t)c->original_max_position);
        if (c->rope_scaling.type == ROPE_SCALING_LONGROPE)
            kv_f32(l, a->arch, "rope.scaling.attn_factor", (float)c->rope_scaling.attention_factor);
    }
}

static void vocab_kvs(KVList *l, const TokGgufMeta *m) {
    kv_str(l, NULL, "tokenizer.ggml.model", m->model);
    kv_str(l, NULL, "tokenizer.ggml.pre", m->pre);
    GgufKVOut *kv = kv_add(l, NULL, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    kv->arr_type = GGUF_TYPE_STRING;
    kv->n = (size_t)m->n;
    kv->strs = (const char *const *)m->tokens;
    if (m->scores) {
        kv = kv_add(l, NULL, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY);
        kv->arr_type = GGUF_TYPE_FLOAT32;
        kv->n = (size_t)m->n;
        kv->f32s = m->scores;
    }
    kv = kv_add(l, NULL, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
    kv->arr_type = GGUF_TYPE_INT32;
    kv->n = (size_t)m->n;
    kv->i32s = m->types;
    if (m->merges) {
        kv = kv_add(l, NULL, "tokenizer.ggml.merges", GGUF_TYPE_ARRAY);
        kv->arr_type = GGUF_TYPE_STRING;
        kv->n = m->n_merges;
        kv->strs = (const char *const *)m->merges;
    }
    if (m->bos >= 0) kv_u32(l, NULL, "tokenizer.ggml.bos_token_id", (uint32_t)m->bos);
    if (m->eos >= 0) kv_u32(l, NULL, "tokenizer.ggml.eos_token_id", (uint32_t)m->eos);
    if (m->unk >= 0) kv_u32(l, NULL, "tokenizer.ggml.unknown_token_id", (uint32_t)m->unk);
    if (m->pad >= 0) kv_u32(l, NULL, "tokenizer.ggml.padding_token_id", (uint32_t)m->pad);
    kv_bool(l, "tokenizer.ggml.add_bos_token", m->add_bos);
    kv_bool(l, "tokenizer.ggml.add_eos_token", m->add_eos);
    if (!strcmp(m->model, "llama")) kv_bool(l, "tokenizer.ggml.add_space_prefix", m->add_space_prefix);
    if (m->chat_template) kv_str(l, NULL, "tokenizer.chat_template", m->chat_template);
}

/* The last path component of the model directory, for general.name. */
static const char *base_name(const char *dir, char *buf, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/') s--;
    snprintf(buf, cap, "%.*s", (int)(n - s), dir + s);
    return buf;
}

/* Whether llama.cpp's graph of the architecture (src/models/<arch>.cpp of
 * the llama.cpp in tests/llama) computes what lmtune computes for c; the
 * first difference is the error. */
static int export_fits(const ModelConfig *c, const GgufArch *a) {
    const char *at = a->arch;
    int rs = c->rope_scaling.type;
    bool sliding = c->sliding_window > 0 && any_layer(c, LAYER_SLIDING);
    if (!strcmp(at, "gemma3")) {
        if (c->attn_softcap > 0)
            return error_set("llama.cpp's gemma3 has no attention soft-capping (attn_logit_softcapping %g)",
                             c->attn_softcap);
        if (rs != ROPE_SCALING_NONE && rs != ROPE_SCALING_LINEAR)
            return error_set("llama.cpp's gemma3 takes linear RoPE scaling only");
        if (sliding && c->rope_local_theta <= 0 && rs != ROPE_SCALING_NONE)
            return error_set("llama.cpp's gemma3 leaves the sliding layers' RoPE unscaled, but they share the global "
                             "layers' scaling here");
        if (!c->qk_norm) return error_set("gemma3 without q/k norms has no llama.cpp form");
    }
    if (!strcmp(at, "gemma2")) {
        if (!(c->attn_softcap > 0) || !(c->final_softcap > 0))
            return error_set("llama.cpp's gemma2 always soft-caps the attention scores and the logits "
                             "(attn_logit_softcapping %g, final_logit_softcapping %g)", c->attn_softcap,
                             c->final_softcap);
        if (!c->tie_word_embeddings) return error_set("llama.cpp's gemma2 ties the LM head to the embeddings");
        if (rs != ROPE_SCALING_NONE && rs != ROPE_SCALING_LINEAR)
            return error_set("llama.cpp's gemma2 takes linear RoPE scaling only");
        if (fabs(attention_scale_fold(c, a) - 1) > 1e-6)
            return error_set("llama.cpp's gemma2 scales attention by 1/sqrt(head_dim) (1/sqrt(hidden / heads) at 46 "
                             "layers); query_pre_attn_scalar %g differs", c->query_pre_attn_scalar);
    }
    if (!strcmp(at, "phi3") && rs != ROPE_SCALING_NONE && rs != ROPE_SCALING_LINEAR && rs != ROPE_SCALING_LONGROPE)
        return error_set("llama.cpp's phi3 takes longrope or linear RoPE scaling only");
    if (!strcmp(at, "smollm3")) {
        /* llama_model_smollm3: n_no_rope_layer_step = 4, layer il without RoPE iff (il + 1) % 4 == 0 */
        for (int i = 0; i < c->num_hidden_layers; i++) {
            bool nope = (c->layer_flags[i] & LAYER_NOPE) != 0;
            if (nope != ((i + 1) % 4 == 0))
                return error_set("llama.cpp's smollm3 skips RoPE on every 4th layer (3, 7, 11, ...); layer %d %s RoPE "
                                 "here (no_rope_layers)", i, nope ? "has no" : "has");
        }
        if (sliding) return error_set("llama.cpp's smollm3 has no sliding window");
        if (rs != ROPE_SCALING_NONE && rs != ROPE_SCALING_LINEAR)
            return error_set("llama.cpp's smollm3 takes linear RoPE scaling only");
    }
    /* every tensor has its GGUF name (q/k/v biases on a family whose graph has none, ...) */
    ModelTensorSpec *specs;
    size_t n;
    TRY(model_tensor_specs(c, &specs, &n));
    int rc = 0;
    char name[96];
    for (size_t i = 0; i < n && rc == 0; i++)
        if (gguf_tensor_name_of(a, c, specs[i].name, name, sizeof name) < 0)
            rc = error_set("tensor %s has no GGUF name for architecture %s", specs[i].name, at);
    mem_free(specs);
    return rc;
}

/* Qwen3.5 is refused by name: the llama.cpp of tests/llama (node-llama-cpp
 * 3.22.1) has a qwen35 architecture, but its Gated DeltaNet tensors (ssm_*:
 * A_log as -exp, conv1d squeezed, per-head reorders) and hyperparameters are
 * not mapped here yet, and nothing half-mapped is written. */
static int load_config(const char *model, ModelConfig *c, const GgufArch **arch) {
    TRY(model_config_load(model, c));
    if (c->q35.on)
        return error_set("%s/config.json: GGUF export of %s (Qwen3.5, llama.cpp architecture qwen35) is not supported "
                         "yet; use lmtune fuse (safetensors) or --export-peft", model, c->model_type);
    *arch = gguf_arch_for(c->model_type);
    if (!*arch) return error_prefix("%s/config.json", model);
    if (export_fits(c, *arch) < 0)
        return error_prefix("%s/config.json: no GGUF export for llama.cpp (%s)", model, (*arch)->arch);
    return 0;
}

int gguf_export_check(const char *model, bool tokenizer) {
    ModelConfig *cfg = mem_alloc(sizeof *cfg);
    TRY_PTR(cfg);
    const GgufArch *arch;
    int rc = load_config(model, cfg, &arch);
    Tokenizer *tok = NULL;
    TokGgufMeta meta = {0};
    if (rc == 0 && tokenizer) rc = tokenizer_load(&tok, model);
    if (rc == 0 && tokenizer)
        rc = tokenizer_gguf_meta(tok, cfg->vocab_size, cfg->n_eos ? cfg->eos_token_ids[0] : -1, &meta);
    tokenizer_gguf_meta_free(&meta);
    tokenizer_free(tok);
    mem_free(cfg);
    return rc;
}

/* The generated tensors: llama3's rope_freqs (LlamaModel), Phi-3's
 * rope_factors_long and rope_factors_short (Phi3MiniModel), F32 of
 * rotary_dim / 2 values. Returns how many were added at ts[0..]. */
static size_t generated_tensors(const ModelConfig *c, ModelCtx *ctx, GgufTensorOut *ts, char (*gnames)[96],
                                float *rope) {
    const RopeScaling *r = &c->rope_scaling;
    size_t n = 0;
    uint64_t half = (uint64_t)(c->rotary_dim > 0 ? c->rotary_dim : c->head_dim) / 2;
    if (r->type == ROPE_SCALING_LLAMA3) {
        llama3_rope_factors(c, rope);
        snprintf(gnames[n], sizeof gnames[0], "rope_freqs.weight");
        ctx->gen[n] = rope;
        n++;
    }
    if (r->type == ROPE_SCALING_LONGROPE) {
        snprintf(gnames[n], sizeof gnames[0], "rope_factors_long.weight");
        ctx->gen[n] = r->long_factor;
        n++;
        snprintf(gnames[n], sizeof gnames[0], "rope_factors_short.weight");
        ctx->gen[n] = r->short_factor;
        n++;
    }
    for (size_t i = 0; i < n; i++) {
        ts[i] = (GgufTensorOut){gnames[i], 1, {half, 1, 1, 1}, GGML_TYPE_F32, NULL, produce_tensor, ctx, i};
        ctx->types[i] = GGML_TYPE_F32;
    }
    return n;
}

int gguf_export_model(const char *model_dir, const char *out_path, int ggml_type) {
    ModelConfig cfg;
    StModel st = {0};
    Tokenizer *tok = NULL;
    TokGgufMeta meta = {0};
    ModelTensorSpec *specs = NULL;
    size_t n_specs = 0;
    GgufTensorOut *ts = NULL;
    ModelCtx ctx = {0};
    float rope[512];
    char name[96];
    int rc = -1;
    if (ggml_type != GGML_TYPE_F32 && ggml_type != GGML_TYPE_F16 && ggml_type != GGML_TYPE_BF16
        && ggml_type != GGML_TYPE_Q8_0)
        return error_set("GGUF export: type %d is not one of f32, f16, bf16, q8_0", ggml_type);
    const GgufArch *arch;
    TRY(load_config(model_dir, &cfg, &arch));
    if (cfg.head_dim > 2 * (int)(sizeof rope / sizeof rope[0]))
        return error_set("%s/config.json: head_dim %d is too large", model_dir, cfg.head_dim);
    if (st_model_open(&st, model_dir, false) < 0) return -1;
    if (model_check_tensors(&cfg, &st) < 0) goto out;
    if (tokenizer_load(&tok, model_dir) < 0) goto out;
    if (tokenizer_gguf_meta(tok, cfg.vocab_size, cfg.n_eos ? cfg.eos_token_ids[0] : -1, &meta) < 0) goto out;
    if (model_tensor_specs(&cfg, &specs, &n_specs) < 0) goto out;
    size_t cap = n_specs + 3;
    ts = mem_calloc(cap, sizeof *ts);
    ctx.src = mem_calloc(cap, sizeof *ctx.src);
    ctx.gen = mem_calloc(cap, sizeof *ctx.gen);
    ctx.hf = mem_calloc(cap, sizeof *ctx.hf);
    ctx.types = mem_calloc(cap, sizeof *ctx.types);
    char (*gnames)[96] = mem_calloc(cap, sizeof *gnames);
    uint8_t *bools = mem_calloc((size_t)cfg.num_hidden_layers + 1, 1);
    if (!ts || !ctx.src || !ctx.gen || !ctx.hf || !ctx.types || !gnames || !bools) goto out_names;
    ctx.cfg = &cfg;
    ctx.arch = arch;
    /* Gemma 3: the model's attention scale folded into q_norm (exact: RoPE
     * is linear and nothing else touches q) */
    ctx.q_norm_scale = !strcmp(arch->arch, "gemma3") ? (float)attention_scale_fold(&cfg, arch) : 1.0f;
    size_t n = generated_tensors(&cfg, &ctx, ts, gnames, rope);
    for (size_t i = 0; i < n_specs; i++) {
        const StTensor *t = st_model_find(&st, specs[i].name);
        if (gguf_tensor_name_of(arch, &cfg, specs[i].name, name, sizeof name) < 0) {
            error_set("%s: tensor %s has no GGUF name for architecture %s", model_dir, specs[i].name, arch->arch);
            goto out_names;
        }
        snprintf(gnames[n], sizeof gnames[0], "%s", name);
        snprintf(ctx.hf[n], sizeof ctx.hf[0], "%s", specs[i].name);
        ctx.src[n] = t;
        int type = t->ndim == 1 ? GGML_TYPE_F32 : ggml_type;
        if (type == GGML_TYPE_Q8_0 && t->shape[1] % 32 != 0) type = GGML_TYPE_F16;
        ctx.types[n] = type;
        GgufTensorOut *o = &ts[n];
        *o = (GgufTensorOut){gnames[n], t->ndim, {1, 1, 1, 1}, type, NULL, produce_tensor, &ctx, n};
        for (int d = 0; d < t->ndim; d++) o->ne[d] = (uint64_t)t->shape[t->ndim - 1 - d];
        n++;
    }
    KVList *kvs = mem_calloc(1, sizeof *kvs);
    if (!kvs) goto out_names;
    model_kvs(kvs, &cfg, arch, ggml_type, base_name(model_dir, name, sizeof name), bools);
    vocab_kvs(kvs, &meta);
    rc = gguf_write(out_path, kvs->kv, kvs->n, ts, n);
    mem_free(kvs);
out_names:
    mem_free(gnames);
    mem_free(bools);
out:
    mem_free(ts);
    mem_free(ctx.src);
    mem_free(ctx.gen);
    mem_free(ctx.hf);
    mem_free(ctx.types);
    mem_free(specs);
    tokenizer_gguf_meta_free(&meta);
    tokenizer_free(tok);
    st_model_close(&st);
    return rc;
}

/* ---- the LoRA adapter ---- */

/* The pair of one projection in GGUF's layout: a = A^T (r, in), b = B^T
 * (out, r), b's rows permuted as the base weight's are. */
typedef struct {
    char a_name[112], b_name[112];
    int64_t in, out;
    float *a, *b;
} GgufPair;

static int make_pair(const StFile *ad, const AdapterConfig *ac, const ModelConfig *cfg, const GgufArch *arch,
                     int layer, int p, const StTensor *a, const StTensor *b, GgufPair *gp) {
    int r = ac->rank;
    char hf[128];
    if (a->ndim != 2 || b->ndim != 2 || a->shape[1] != r || b->shape[0] != r || a->dtype != DTYPE_F32
        || b->dtype != DTYPE_F32)
        return error_set("%s: layer %d %s: lora_a/lora_b not (in, %d) / (%d, out) F32", ad->path, layer, PROJ_KEYS[p],
                         r, r);
    snprintf(hf, sizeof hf, "model.layers.%d.%s.weight", layer, PROJ_KEYS[p]);
    char g[96];
    if (gguf_tensor_name(arch, hf, g, sizeof g) < 0)
        return error_set("%s: %s has no GGUF name", ad->path, hf);
    snprintf(gp->a_name, sizeof gp->a_name, "%s.lora_a", g);
    snprintf(gp->b_name, sizeof gp->b_name, "%s.lora_b", g);
    gp->in = a->shape[0];
    gp->out = b->shape[1];
    gp->a = mem_alloc((size_t)r * gp->in * sizeof(float));
    gp->b = mem_alloc((size_t)gp->out * r * sizeof(float));
    if (!gp->a || !gp->b) return -1;
    const float *A = a->data;
    const float *B = b->data;
    for (int64_t i = 0; i < gp->in; i++)
        for (int k = 0; k < r; k++) gp->a[(size_t)k * gp->in + i] = A[(size_t)i * r + k];
    for (int k = 0; k < r; k++)
        for (int64_t o = 0; o < gp->out; o++) gp->b[(size_t)o * r + k] = B[(size_t)k * gp->out + o];
    int heads = permute_heads(arch, cfg, hf);
    if (heads > 0 && gp->out != (int64_t)heads * cfg->head_dim)
        return error_set("%s: %s.lora_b has %lld outputs, expected %d heads of %d", ad->path, hf, (long long)gp->out,
                         heads, cfg->head_dim);
    if (heads > 0) TRY(permute_rows(gp->b, (int)gp->out, r, cfg->head_dim));
    return 0;
}

int gguf_export_adapter(const char *model_dir, const char *adapter_dir, const char *out_path) {
    AdapterConfig ac;
    ModelConfig cfg;
    StFile ad = {0};
    GgufPair *pairs = NULL;
    GgufTensorOut *ts = NULL;
    size_t n = 0;
    int rc = -1;
    const GgufArch *arch;
    TRY(load_config(model_dir, &cfg, &arch));
    TRY(adapter_open(adapter_dir, &ac, &ad));
    if (ac.type == TUNE_FULL) {
        error_set("%s: a full fine-tune has no LoRA adapter to export; use lmtune fuse --export-gguf", adapter_dir);
        goto out;
    }
    if (ac.type == TUNE_DORA) {
        error_set("%s: GGUF LoRA adapters cannot carry DoRA magnitudes; use lmtune fuse --export-gguf", adapter_dir);
        goto out;
    }
    pairs = mem_calloc(ad.n_tensors + 1, sizeof *pairs);
    ts = mem_calloc(ad.n_tensors + 1, sizeof *ts);
    if (!pairs || !ts) goto out;
    size_t used = 0;
    for (int layer = 0; layer < cfg.num_hidden_layers; layer++) {
        for (int p = 0; p < PROJ_COUNT; p++) {
            char key[160];
            const char *pre = model_adapter_prefix(&cfg);
            snprintf(key, sizeof key, "%slayers.%d.%s.lora_a", pre, layer, PROJ_KEYS[p]);
            const StTensor *a = st_find(&ad, key);
            snprintf(key, sizeof key, "%slayers.%d.%s.lora_b", pre, layer, PROJ_KEYS[p]);
            const StTensor *b = st_find(&ad, key);
            if (!a && !b) continue;
            if (!a || !b) {
                error_set("%s: layer %d %s has only one of lora_a and lora_b", ad.path, layer, PROJ_KEYS[p]);
                goto out;
            }
            if (make_pair(&ad, &ac, &cfg, arch, layer, p, a, b, &pairs[n]) < 0) goto out;
            used += 2;
            GgufPair *gp = &pairs[n];
            /* ggml order: a.ne = [n_in, r] (memory A^T (r, in)); b.ne = [r, n_out] (memory B^T (out, r)) */
            ts[2 * n] = (GgufTensorOut){gp->a_name, 2, {(uint64_t)gp->in, (uint64_t)ac.rank, 1, 1}, GGML_TYPE_F32,
                                        gp->a, NULL, NULL, 0};
            ts[2 * n + 1] = (GgufTensorOut){gp->b_name, 2, {(uint64_t)ac.rank, (uint64_t)gp->out, 1, 1},
                                            GGML_TYPE_F32, gp->b, NULL, NULL, 0};
            n++;
        }
    }
    if (used != ad.n_tensors) {
        error_set("%s: %zu tensors are not LoRA pairs of the model's %d layers", ad.path, ad.n_tensors - used,
                  cfg.num_hidden_layers);
        goto out;
    }
    KVList *kvs = mem_calloc(1, sizeof *kvs);
    if (!kvs) goto out;
    kv_str(kvs, NULL, "general.architecture", arch->arch);
    kv_str(kvs, NULL, "general.type", "adapter");
    kv_str(kvs, NULL, "adapter.type", "lora");
    /* llama.cpp scales by alpha / r (r = b.ne[0]); without the key it uses scale 1 */
    kv_f32(kvs, NULL, "adapter.lora.alpha", ac.scale * (float)ac.rank);
    kv_u32(kvs, NULL, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
    rc = gguf_write(out_path, kvs->kv, kvs->n, ts, 2 * n);
    mem_free(kvs);
out:
    for (size_t i = 0; pairs && i <= n; i++) {
        mem_free(pairs[i].a);
        mem_free(pairs[i].b);
    }
    mem_free(pairs);
    mem_free(ts);
    st_close(&ad);
    return rc;
}

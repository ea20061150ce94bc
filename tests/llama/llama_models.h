/* llama_models.h: the models the llama.cpp tests are made of, and what
 * lmtune answers on them: a random model directory of any architecture
 * (fan-in scaled weights, random norms and biases), a GGUF export's weights
 * back as lmtune's own f32 model directory (dequantized, q/k rows in
 * Hugging Face's order), lmtune's logits and greedy tokens (with or
 * without an adapter), and the relative error of two logit sets. */
#ifndef LT_TESTS_LLAMA_MODELS_H
#define LT_TESTS_LLAMA_MODELS_H
#include "check.h"
#include "base/alloc.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "formats/gguf.h"
#include "formats/gguf_arch.h"
#include "formats/hf_config.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/ggml_quants.h"
#include "model/adapter_io.h"
#include "model/model.h"
#include <math.h>

typedef struct {
    const char *name, *model_type;
    int H, KVH, D, C, F, L, extra_vocab;
    bool tied, bias, llama3_rope;
} Arch;

static inline void fill(Rng *r, float *x, size_t n, float mean, float sd) {
    for (size_t i = 0; i < n; i++) x[i] = mean + sd * rng_normal(r);
}

/* Model directory: config.json, model.safetensors, tokenizer files. */
static inline int write_model(const char *dir, const Arch *a, int V, uint64_t seed) {
    ModelConfig c;
    hf_config_init(&c, a->model_type);
    c.hidden_size = a->C;
    c.intermediate_size = a->F;
    c.num_hidden_layers = a->L;
    c.num_attention_heads = a->H;
    c.num_key_value_heads = a->KVH;
    c.head_dim = a->D;
    c.vocab_size = V;
    c.max_position_embeddings = 256;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = strcmp(a->model_type, "llama") ? 1000000.0 : 10000.0;
    c.tie_word_embeddings = a->tied;
    c.attention_bias = a->bias;
    c.qk_norm = !strcmp(a->model_type, "qwen3");
    c.bos_token_id = -1;
    c.torch_dtype = DTYPE_F32;
    if (a->llama3_rope) {
        c.rope_scaling.type = ROPE_SCALING_LLAMA3;
        c.rope_scaling.factor = 8;
        c.rope_scaling.low_freq_factor = 1;
        c.rope_scaling.high_freq_factor = 4;
        c.rope_scaling.original_max_position = 16;
    }
    char p[512];
    TRY(dir_ensure(dir));
    snprintf(p, sizeof p, "%s/config.json", dir);
    TRY(hf_config_write(&c, p));
    ModelTensorSpec *specs;
    size_t n;
    TRY(model_tensor_specs(&c, &specs, &n));
    StWriteTensor *wt = mem_calloc(n, sizeof *wt);
    float **data = mem_calloc(n, sizeof *data);
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        const ModelTensorSpec *s = &specs[i];
        size_t ne = (size_t)s->shape[0] * (s->ndim == 2 ? (size_t)s->shape[1] : 1);
        data[i] = mem_alloc(ne * sizeof(float));
        bool norm = strstr(s->name, "norm") != NULL;
        if (s->ndim == 2) fill(&r, data[i], ne, 0, 1.0f / sqrtf((float)s->shape[1]));
        else if (norm) fill(&r, data[i], ne, 1, 0.1f);
        else fill(&r, data[i], ne, 0, 0.3f);
        wt[i] = (StWriteTensor){s->name, DTYPE_F32, s->ndim, {s->shape[0], s->ndim == 2 ? s->shape[1] : 0}, data[i]};
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    int rc = st_write(p, wt, n, NULL, NULL, 0);
    for (size_t i = 0; i < n; i++) mem_free(data[i]);
    mem_free(data);
    mem_free(wt);
    mem_free(specs);
    return rc;
}

static inline int copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char a[512];
    char b[512];
    char *buf;
    size_t n;
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    TRY(file_read_all(a, 0, &buf, &n));
    int rc = atomic_write_file(b, buf, n);
    mem_free(buf);
    return rc;
}

/* The weights of a GGUF export as lmtune's own f32 model directory:
 * every tensor dequantized, q/k rows put back in Hugging Face's order,
 * Gemma's norms back to zero-centred (stored w + 1; Gemma 3's q_norm also
 * carries the attention-scale fold of gguf_export.c, sqrt(head_dim) times
 * the model's scale, for models of other than 62 layers). */
static inline int write_dequantized(const char *gguf, const char *fused_dir, const char *out_dir) {
    ModelConfig c;
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", fused_dir);
    TRY(hf_config_load(&c, p));
    const GgufArch *arch = gguf_arch_for(c.model_type);
    GgufFile g;
    TRY(gguf_open(&g, gguf));
    ModelTensorSpec *specs;
    size_t n;
    TRY(model_tensor_specs(&c, &specs, &n));
    StWriteTensor *wt = mem_calloc(n, sizeof *wt);
    float **data = mem_calloc(n, sizeof *data);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char name[96];
        const ModelTensorSpec *s = &specs[i];
        const GgufTensorInfo *t = NULL;
        if (gguf_tensor_name_of(arch, &c, s->name, name, sizeof name) == 0) t = gguf_find_tensor(&g, name);
        if (!t) {
            rc = error_set("%s: no tensor for %s", gguf, s->name);
            break;
        }
        int64_t cols = t->ne[0];
        int64_t rows = t->nelem / (cols ? cols : 1);
        float *x = mem_alloc((size_t)t->nelem * sizeof(float));
        data[i] = mem_alloc((size_t)t->nelem * sizeof(float));
        size_t rb = ggml_row_bytes(t->type, cols);
        for (int64_t r = 0; r < rows; r++)
            ggml_dequantize_row(t->type, (const uint8_t *)t->data + r * rb, x + r * cols, cols);
        size_t nl = strlen(s->name);
        if (c.norm_plus_one && nl >= 11 && !strcmp(s->name + nl - 11, "norm.weight")) {
            bool q = nl >= 23 && !strcmp(s->name + nl - 23, "self_attn.q_norm.weight");
            float fold = q && !strcmp(arch->arch, "gemma3") ? sqrtf((float)c.head_dim) * hf_attention_scale(&c) : 1;
            for (int64_t k = 0; k < t->nelem; k++) x[k] = x[k] / fold - 1.0f;
        }
        bool perm = arch->permute_qk && (strstr(s->name, "q_proj") || strstr(s->name, "k_proj"));
        if (t->n_dims == 1) {
            /* a bias: its elements are the permuted rows */
            rows = t->nelem;
            cols = 1;
        }
        for (int64_t r = 0; r < rows; r++) {
            int64_t hf = perm ? gguf_permuted_row((int)r, c.head_dim) : r;
            memcpy(data[i] + hf * cols, x + r * cols, (size_t)cols * sizeof(float));
        }
        mem_free(x);
        wt[i] = (StWriteTensor){s->name, DTYPE_F32, s->ndim, {s->shape[0], s->ndim == 2 ? s->shape[1] : 0}, data[i]};
    }
    if (rc == 0) rc = dir_ensure(out_dir);
    snprintf(p, sizeof p, "%s/model.safetensors", out_dir);
    if (rc == 0) rc = st_write(p, wt, n, NULL, NULL, 0);
    const char *copies[] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
    for (int k = 0; k < 3 && rc == 0; k++) rc = copy_file(fused_dir, out_dir, copies[k]);
    for (size_t i = 0; i < n; i++) mem_free(data[i]);
    mem_free(data);
    mem_free(wt);
    mem_free(specs);
    gguf_close(&g);
    return rc;
}

static inline int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Gap between the largest and second largest logit. */
static inline double margin(const float *x, int n) {
    int b = argmax(x, n);
    double second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != b && x[i] > second) second = x[i];
    return x[b] - second;
}

/* lmtune on the fused model directory: logits at every prompt position
 * (model_logits, as eval) and greedy decoding with the KV cache (as
 * generate), with the top-two margin of each greedy step. */
static inline int lmtune_side(const char *dir, const char *adapter, const int32_t *ids, int T, int V, int n_greedy,
                       float *logits, int32_t *greedy, double *margins) {
    Model *m;
    Arena arena;
    TRY(model_open_inference(&m, &arena, dir, adapter, 1, T + n_greedy, T + n_greedy, 0));
    int rc = model_logits(m, ids, 1, T, logits);
    float *last = mem_alloc((size_t)V * sizeof(float));
    if (rc == 0) rc = model_decode(m, ids, T, 0, last);
    for (int k = 0; k < n_greedy && rc == 0; k++) {
        greedy[k] = argmax(last, V);
        margins[k] = margin(last, V);
        if (k + 1 < n_greedy) rc = model_decode(m, &greedy[k], 1, T + k, last);
    }
    mem_free(last);
    model_free(m);
    arena_free(&arena);
    return rc;
}

static inline double rel_err(const float *a, const float *ref, size_t n) {
    double m = 0;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= m)) m = d;
        if (fabs(ref[i]) > s) s = fabs(ref[i]);
    }
    return m / (s > 0 ? s : 1);
}

#endif

/* model_tensors.c: expected tensor names and shapes of a llama / mistral /
 * qwen2 / qwen3 decoder (see model_tensors.h). Linear weights are stored
 * (out_features, in_features) as in PyTorch. */
#include "model_tensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void add(ModelTensorSpec *s, size_t *k, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1) {
    ModelTensorSpec *t = &s[(*k)++];
    if (layer >= 0) snprintf(t->name, sizeof t->name, "model.layers.%d.%s", layer, suffix);
    else snprintf(t->name, sizeof t->name, "%s", suffix);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->shape[2] = 0;
}

int model_tensor_specs(const ModelConfig *c, ModelTensorSpec **out, size_t *n) {
    *out = NULL; *n = 0;
    if (c->q35.on) return qwen35_tensor_specs(c, out, n);
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, L = c->num_hidden_layers;
    int64_t H = c->num_attention_heads, KVH = c->num_key_value_heads, D = c->head_dim;
    if (C <= 0 || F <= 0 || V <= 0 || L <= 0 || H <= 0 || KVH <= 0 || D <= 0)
        return error_set("model config: sizes must be positive (load config.json with hf_config_load)");
    size_t per_layer = 9 + (c->attention_bias ? 3 : 0) + (c->qk_norm ? 2 : 0);
    size_t total = 3 + (size_t)L * per_layer;
    ModelTensorSpec *s = mem_calloc(total, sizeof *s);
    if (!s) return -1;
    size_t k = 0;
    add(s, &k, -1, "model.embed_tokens.weight", 2, V, C);
    for (int i = 0; i < (int)L; i++) {
        add(s, &k, i, "input_layernorm.weight", 1, C, 0);
        add(s, &k, i, "self_attn.q_proj.weight", 2, H * D, C);
        add(s, &k, i, "self_attn.k_proj.weight", 2, KVH * D, C);
        add(s, &k, i, "self_attn.v_proj.weight", 2, KVH * D, C);
        if (c->attention_bias) {
            add(s, &k, i, "self_attn.q_proj.bias", 1, H * D, 0);
            add(s, &k, i, "self_attn.k_proj.bias", 1, KVH * D, 0);
            add(s, &k, i, "self_attn.v_proj.bias", 1, KVH * D, 0);
        }
        add(s, &k, i, "self_attn.o_proj.weight", 2, C, H * D);
        if (c->qk_norm) {
            add(s, &k, i, "self_attn.q_norm.weight", 1, D, 0);
            add(s, &k, i, "self_attn.k_norm.weight", 1, D, 0);
        }
        add(s, &k, i, "post_attention_layernorm.weight", 1, C, 0);
        add(s, &k, i, "mlp.gate_proj.weight", 2, F, C);
        add(s, &k, i, "mlp.up_proj.weight", 2, F, C);
        add(s, &k, i, "mlp.down_proj.weight", 2, C, F);
    }
    add(s, &k, -1, "model.norm.weight", 1, C, 0);
    if (!c->tie_word_embeddings) add(s, &k, -1, "lm_head.weight", 2, V, C);
    *out = s;
    *n = k;
    return 0;
}

/* What MLX-LM's models drop before their strict load (sanitize): llama's
 * and qwen2's precomputed RoPE frequencies, and lm_head.weight of a model
 * with tied embeddings. */
static bool sanitized_away(const ModelConfig *c, const char *name) {
    if (strstr(name, "self_attn.rotary_emb.inv_freq")) return true;
    if (c->q35.on) {
        /* Qwen3.5's vision tower and multi-token-prediction head: qwen3_5.py's
         * sanitize drops them; text fine-tuning never reads them */
        static const char *const dropped[] = {"mtp.", "model.mtp.", "model.visual.", "visual.", "vision_tower.",
                                              "model.vision_tower."};
        for (size_t i = 0; i < sizeof dropped / sizeof *dropped; i++)
            if (!strncmp(name, dropped[i], strlen(dropped[i]))) return true;
    }
    return c->tie_word_embeddings && !strcmp(name, "lm_head.weight");
}

/* Whether `name` is one of the model's tensors: a spec's name, or the
 * scales / biases of a module the first pass found quantized. */
static bool tensor_known(const ModelConfig *c, const ModelTensorSpec *specs, const bool *quantized, size_t n,
                         const char *name) {
    if (sanitized_away(c, name)) return true;
    size_t len = strlen(name);
    bool side = len > 7 && (!strcmp(name + len - 7, ".scales") || !strcmp(name + len - 7, ".biases"));
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(specs[i].name, name)) return true;
        /* specs[i].name is MODULE.weight when quantized[i] */
        size_t sl = strlen(specs[i].name);
        if (side && quantized[i] && sl == len && !strncmp(specs[i].name, name, len - 7)) return true;
    }
    return false;
}

int model_check_tensors_quant(const ModelConfig *c, const StModel *m, const QuantConfig *qc) {
    ModelTensorSpec *specs;
    size_t n;
    TRY(model_tensor_specs(c, &specs, &n));
    int rc = 0;
    bool *quantized = mem_calloc(n ? n : 1, sizeof *quantized);
    if (!quantized) {
        mem_free(specs);
        return -1;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        const ModelTensorSpec *s = &specs[i];
        size_t len = strlen(s->name);
        if (s->ndim == 2 && len > 7 && !strcmp(s->name + len - 7, ".weight")) {
            /* a linear or embedding matrix: MLX-quantized, or plain */
            char module[96];
            snprintf(module, sizeof module, "%.*s", (int)(len - 7), s->name);
            QuantParams qp;
            rc = quant_module(qc, m, module, &qp);
            if (rc == 1) {
                QuantTensors qt;
                quantized[i] = true;
                rc = quant_module_tensors(m, module, s->shape[0], s->shape[1], &qp, &qt);
                continue;
            }
            if (rc < 0) break;
        }
        rc = st_model_expect(m, s->name, s->ndim, s->shape, NULL);
    }
    /* MLX's strict load_weights: a tensor the architecture has no place for
     * is an error (a qwen3 checkpoint with q_norm/k_norm labelled mistral
     * would otherwise train without them) */
    for (size_t f = 0; f < m->n_files && rc == 0; f++) {
        for (size_t t = 0; t < m->files[f].n_tensors && rc == 0; t++) {
            const char *name = m->files[f].tensors[t].name;
            if (!tensor_known(c, specs, quantized, n, name)) {
                rc = error_set("%s: tensor \"%s\" has no place in a %s model as config.json describes it (MLX's "
                               "strict loading refuses it too: \"Received parameters not in model\"); is model_type "
                               "right?", m->files[f].path, name, c->model_type);
            }
        }
    }
    mem_free(quantized);
    mem_free(specs);
    return rc;
}

int model_check_tensors(const ModelConfig *c, const StModel *m) { return model_check_tensors_quant(c, m, NULL); }

size_t model_count_nonfinite(const ModelConfig *c, const StModel *m, char *first, size_t first_cap) {
    ModelTensorSpec *specs;
    size_t n, total = 0;
    if (first && first_cap) first[0] = 0;
    if (model_tensor_specs(c, &specs, &n) < 0) return 0;
    for (size_t i = 0; i < n; i++) {
        const StTensor *t = st_model_find(m, specs[i].name);
        size_t bad = t ? st_tensor_count_nonfinite(t) : 0;
        if (bad && total == 0 && first && first_cap) snprintf(first, first_cap, "%s", specs[i].name);
        total += bad;
    }
    mem_free(specs);
    return total;
}

int model_tensors_resolve(ModelConfig *c, const StModel *m) {
    return c->q35.on ? qwen35_detect_layout(c, m) : 0;
}

const char *model_file_prefix(const ModelConfig *c) { return c->q35.on ? c->q35.prefix : "model."; }
const char *model_adapter_prefix(const ModelConfig *c) { return c->q35.on ? c->q35.adapter_prefix : "model."; }

/* canonical "model.X" -> prefix "X"; "lm_head.weight" -> head (when given) */
static const char *rename_canonical(char *buf, size_t cap, const char *canon, const char *prefix, const char *head) {
    if (head && !strcmp(canon, "lm_head.weight")) snprintf(buf, cap, "%s", head);
    else if (!strncmp(canon, "model.", 6)) snprintf(buf, cap, "%s%s", prefix, canon + 6);
    else snprintf(buf, cap, "%s", canon);
    return buf;
}

const char *model_tensor_name(const ModelConfig *c, char *buf, size_t cap, const char *fmt, ...) {
    char canon[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(canon, sizeof canon, fmt, ap);
    va_end(ap);
    return rename_canonical(buf, cap, canon, model_file_prefix(c), c->q35.on ? c->q35.head_name : NULL);
}

const char *model_module_name(const ModelConfig *c, char *buf, size_t cap, const char *fmt, ...) {
    char canon[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(canon, sizeof canon - 8, fmt, ap);
    va_end(ap);
    strcat(canon, ".weight");
    rename_canonical(buf, cap, canon, model_file_prefix(c), c->q35.on ? c->q35.head_name : NULL);
    size_t n = strlen(buf);
    if (n >= 7 && !strcmp(buf + n - 7, ".weight")) buf[n - 7] = 0;
    return buf;
}

const char *model_adapter_name(const ModelConfig *c, char *buf, size_t cap, const char *fmt, ...) {
    char canon[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(canon, sizeof canon, fmt, ap);
    va_end(ap);
    return rename_canonical(buf, cap, canon, model_adapter_prefix(c), NULL);
}

/* model_tensors.c: expected tensor names and shapes of a llama / mistral /
 * qwen2 / qwen3 decoder (see model_tensors.h). Linear weights are stored
 * (out_features, in_features) as in PyTorch. */
#include "model_tensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdio.h>
#include <string.h>

static void add(ModelTensorSpec *s, size_t *k, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1) {
    ModelTensorSpec *t = &s[(*k)++];
    if (layer >= 0) snprintf(t->name, sizeof t->name, "model.layers.%d.%s", layer, suffix);
    else snprintf(t->name, sizeof t->name, "%s", suffix);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
}

int model_tensor_specs(const ModelConfig *c, ModelTensorSpec **out, size_t *n) {
    *out = NULL; *n = 0;
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

int model_check_tensors_quant(const ModelConfig *c, const StModel *m, const QuantConfig *qc) {
    ModelTensorSpec *specs;
    size_t n;
    TRY(model_tensor_specs(c, &specs, &n));
    int rc = 0;
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
                rc = quant_module_tensors(m, module, s->shape[0], s->shape[1], &qp, &qt);
                continue;
            }
            if (rc < 0) break;
        }
        rc = st_model_expect(m, s->name, s->ndim, s->shape, NULL);
    }
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

/* model_tensors.c: expected tensor names and shapes of the supported
 * decoders (see model_tensors.h). Linear weights are stored
 * (out_features, in_features) as in PyTorch. */
#include "model_tensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include "formats/hf_config_qwen35.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *const PROJ_KEYS[PROJ_COUNT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "self_attn.qkv_proj", "mlp.gate_up_proj",
    "linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a",
    "linear_attn.out_proj",
};

unsigned hf_block_projections(const ModelConfig *c) {
    unsigned m = 1u << PROJ_O | 1u << PROJ_DOWN;
    m |= c->fused_qkv ? 1u << PROJ_QKV : (1u << PROJ_Q | 1u << PROJ_K | 1u << PROJ_V);
    m |= c->fused_gate_up ? 1u << PROJ_GATE_UP : (1u << PROJ_GATE | 1u << PROJ_UP);
    return m;
}

void hf_proj_shape(const ModelConfig *c, int p, int64_t *out, int64_t *in) {
    const Qwen35Config *q = &c->q35;
    int64_t C = c->hidden_size, F = c->intermediate_size, D = c->head_dim;
    int64_t QD = c->num_attention_heads * D, KVD = c->num_key_value_heads * D;
    int64_t Kd = (int64_t)q->k_heads * q->k_dim, Vd = (int64_t)q->v_heads * q->v_dim;
    /* inputs: the hidden size, but o_proj (attention heads), down (F), out_proj (value heads) */
    *in = p == PROJ_O ? QD : p == PROJ_DOWN ? F : p == PROJ_LOUT ? Vd : C;
    switch (p) {
    case PROJ_Q: /* Qwen3.5: query and output gate */
        *out = q->on ? 2 * QD : QD;
        break;
    case PROJ_K:
    case PROJ_V:
        *out = KVD;
        break;
    case PROJ_GATE:
    case PROJ_UP:
        *out = F;
        break;
    case PROJ_QKV:
        *out = QD + 2 * KVD;
        break;
    case PROJ_GATE_UP:
        *out = 2 * F;
        break;
    case PROJ_LQKV: /* Gated DeltaNet: queries and keys (Hk Dk each), values (Hv Dv) */
        *out = 2 * Kd + Vd;
        break;
    case PROJ_LZ:
        *out = Vd;
        break;
    case PROJ_LB:
    case PROJ_LA:
        *out = q->v_heads;
        break;
    default: /* o_proj, down_proj, out_proj */
        *out = C;
        break;
    }
}

static void bt_add(BlockTensor *t, int *k, const char *suffix, BlockTensorRole role, int proj, int ndim,
                   int64_t d0, int64_t d1) {
    BlockTensor *b = &t[(*k)++];
    snprintf(b->suffix, sizeof b->suffix, "%s", suffix);
    b->role = role;
    b->proj = proj;
    b->ndim = ndim;
    b->shape[0] = d0;
    b->shape[1] = ndim > 1 ? d1 : 0;
}

static void bt_proj(BlockTensor *t, int *k, const ModelConfig *c, int p, bool bias) {
    char s[48];
    int64_t out, in;
    hf_proj_shape(c, p, &out, &in);
    snprintf(s, sizeof s, "%s.weight", PROJ_KEYS[p]);
    bt_add(t, k, s, BT_PROJ_WEIGHT, p, 2, out, in);
    if (!bias) return;
    snprintf(s, sizeof s, "%s.bias", PROJ_KEYS[p]);
    bt_add(t, k, s, BT_PROJ_BIAS, p, 1, out, 0);
}

int block_tensors(const ModelConfig *c, BlockTensor *t) {
    int k = 0;
    int64_t C = c->hidden_size, D = c->head_dim;
    bool bias = c->attention_bias;
    bt_add(t, &k, "input_layernorm.weight", BT_NORM_ATTN_IN, -1, 1, C, 0);
    if (c->fused_qkv) {
        bt_proj(t, &k, c, PROJ_QKV, false);
    } else {
        bt_proj(t, &k, c, PROJ_Q, bias);
        bt_proj(t, &k, c, PROJ_K, bias);
        bt_proj(t, &k, c, PROJ_V, bias);
    }
    if (c->qk_norm) {
        bt_add(t, &k, "self_attn.q_norm.weight", BT_Q_NORM, -1, 1, D, 0);
        bt_add(t, &k, "self_attn.k_norm.weight", BT_K_NORM, -1, 1, D, 0);
    }
    bt_proj(t, &k, c, PROJ_O, false);
    if (c->sandwich_norms) {
        bt_add(t, &k, "post_attention_layernorm.weight", BT_NORM_ATTN_OUT, -1, 1, C, 0);
        bt_add(t, &k, "pre_feedforward_layernorm.weight", BT_NORM_MLP_IN, -1, 1, C, 0);
    } else {
        bt_add(t, &k, "post_attention_layernorm.weight", BT_NORM_MLP_IN, -1, 1, C, 0);
    }
    if (c->fused_gate_up) {
        bt_proj(t, &k, c, PROJ_GATE_UP, false);
    } else {
        bt_proj(t, &k, c, PROJ_GATE, false);
        bt_proj(t, &k, c, PROJ_UP, false);
    }
    bt_proj(t, &k, c, PROJ_DOWN, false);
    if (c->sandwich_norms) bt_add(t, &k, "post_feedforward_layernorm.weight", BT_NORM_MLP_OUT, -1, 1, C, 0);
    return k;
}

static void add(ModelTensorSpec *s, size_t *k, const char *prefix, int layer, const char *suffix, int ndim,
                int64_t d0, int64_t d1) {
    ModelTensorSpec *t = &s[(*k)++];
    int n;
    if (layer >= 0) n = snprintf(t->name, sizeof t->name, "%slayers.%d.%s", prefix, layer, suffix);
    else n = snprintf(t->name, sizeof t->name, "%s%s", prefix, suffix);
    if (n < 0 || (size_t)n >= sizeof t->name) t->name[0] = 0; /* cannot happen: prefixes < 32, suffixes < 48 */
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->shape[2] = 0;
}

int model_tensor_specs(const ModelConfig *c, ModelTensorSpec **out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (c->q35.on) return qwen35_tensor_specs(c, out, n);
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, L = c->num_hidden_layers;
    int64_t H = c->num_attention_heads, KVH = c->num_key_value_heads, D = c->head_dim;
    if (C <= 0 || F <= 0 || V <= 0 || L <= 0 || H <= 0 || KVH <= 0 || D <= 0)
        return error_set("model config: sizes must be positive (load config.json with hf_config_load)");
    BlockTensor bt[BLOCK_TENSORS_MAX];
    int per_layer = block_tensors(c, bt);
    size_t total = 3 + (size_t)L * (size_t)per_layer;
    ModelTensorSpec *s = mem_calloc(total, sizeof *s);
    if (!s) return -1;
    size_t k = 0;
    add(s, &k, c->prefix, -1, "embed_tokens.weight", 2, V, C);
    for (int i = 0; i < (int)L; i++)
        for (int j = 0; j < per_layer; j++)
            add(s, &k, c->prefix, i, bt[j].suffix, bt[j].ndim, bt[j].shape[0], bt[j].shape[1]);
    add(s, &k, c->prefix, -1, "norm.weight", 1, C, 0);
    if (!c->tie_word_embeddings) add(s, &k, "", -1, c->head_name, 2, V, C);
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
    if (!strcmp(c->model_type, "gemma3")) {
        /* multimodal Gemma 3: gemma3.py's sanitize keeps the language model only */
        static const char *const towers[] = {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                                             "model.multi_modal_projector."};
        for (size_t i = 0; i < sizeof towers / sizeof *towers; i++)
            if (!strncmp(name, towers[i], strlen(towers[i]))) return true;
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

void hf_embed_module(const ModelConfig *c, char *dst, size_t cap) {
    snprintf(dst, cap, "%sembed_tokens", c->prefix);
}

void hf_head_module(const ModelConfig *c, char *dst, size_t cap) {
    size_t n = strlen(c->head_name);
    if (n > 7 && !strcmp(c->head_name + n - 7, ".weight")) n -= 7;
    snprintf(dst, cap, "%.*s", (int)n, c->head_name);
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

void model_tensors_detect_prefix(ModelConfig *c, const StModel *m) {
    if (strcmp(c->prefix, "language_model.model.") != 0) return;
    if (st_model_find(m, "language_model.model.embed_tokens.weight")) return;
    if (!st_model_find(m, "model.language_model.embed_tokens.weight")) return;
    snprintf(c->prefix, sizeof c->prefix, "model.language_model.");
    snprintf(c->head_name, sizeof c->head_name, "lm_head.weight");
}

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
    if (!c->q35.on) {
        model_tensors_detect_prefix(c, m);
        return 0;
    }
    TRY(qwen35_detect_layout(c, m));
    hf_qwen35_names(c);
    return 0;
}

const char *model_file_prefix(const ModelConfig *c) { return c->prefix; }
const char *model_adapter_prefix(const ModelConfig *c) { return c->adapter_prefix; }

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
    return rename_canonical(buf, cap, canon, model_file_prefix(c), c->head_name);
}

const char *model_module_name(const ModelConfig *c, char *buf, size_t cap, const char *fmt, ...) {
    char canon[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(canon, sizeof canon - 8, fmt, ap);
    va_end(ap);
    strcat(canon, ".weight");
    rename_canonical(buf, cap, canon, model_file_prefix(c), c->head_name);
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

/* gguf_arch.c: the architecture table of GGUF files and the reading of a
 * GGUF model's metadata as a ModelConfig (see gguf_arch.h). The keys are
 * those convert_hf_to_gguf.py writes (TextModel.set_gguf_parameters) and
 * llama.cpp reads (llama-arch.cpp); the tensor names those of gguf-py's
 * tensor_mapping.py and constants.py for each architecture. */
#include "formats/gguf_arch.h"
#include "base/alloc.h"
#include "base/error.h"
#include "formats/model_tensors.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const GgufNameMap DECODER_BLOCK[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {NULL, NULL},
};

static const GgufNameMap DECODER_GLOBAL[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};

/* Gemma 2 and 3: four norms per block (stored as 1 + w: gguf_export.c, as
 * Gemma{2,3}Model.modify_tensors adds 1). tensor_mapping.py gives
 * post_attention_layernorm to ATTN_POST_NORM ("post_attention_norm") for
 * these architectures, pre_feedforward_layernorm to FFN_PRE_NORM (named
 * "ffn_norm") and post_feedforward_layernorm to FFN_POST_NORM
 * ("post_ffw_norm"). */
static const GgufNameMap GEMMA_BLOCK[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {NULL, NULL},
};

/* Phi-3: the fused projections keep their layout: qkv_proj is ATTN_QKV
 * ("attn_qkv": q rows, k rows, v rows) and gate_up_proj is FFN_UP
 * ("ffn_up", 2F rows: gate, then up; llama.cpp's LLM_FFN_SWIGLU splits it
 * in that order). */
static const GgufNameMap PHI3_BLOCK[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {NULL, NULL},
};

/* convert_hf_to_gguf.py: LlamaForCausalLM and MistralForCausalLM are
 * LlamaModel ("llama", permuted); Qwen2Model and Qwen3Model keep HF's row
 * order (NEOX RoPE in llama.cpp). SmolLM3Model is a LlamaModel (permuted,
 * NORM RoPE in llama.cpp); Gemma2Model, Gemma3Model and Phi3MiniModel keep
 * HF's order (NEOX). Only the first four are read back as base models. */
static const GgufArch ARCHS[] = {
    {"llama", "llama", true, true, DECODER_BLOCK, DECODER_GLOBAL},
    {"mistral", "llama", true, true, DECODER_BLOCK, DECODER_GLOBAL},
    {"qwen2", "qwen2", false, true, DECODER_BLOCK, DECODER_GLOBAL},
    {"qwen3", "qwen3", false, true, DECODER_BLOCK, DECODER_GLOBAL},
    {"gemma3_text", "gemma3", false, false, GEMMA_BLOCK, DECODER_GLOBAL},
    {"gemma3", "gemma3", false, false, GEMMA_BLOCK, DECODER_GLOBAL},
    {"gemma2", "gemma2", false, false, GEMMA_BLOCK, DECODER_GLOBAL},
    {"phi3", "phi3", false, false, PHI3_BLOCK, DECODER_GLOBAL},
    {"smollm3", "smollm3", true, false, DECODER_BLOCK, DECODER_GLOBAL},
};

const GgufArch *gguf_arch_for(const char *model_type) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i].model_type, model_type)) return &ARCHS[i];
    error_set("model_type \"%s\" has no GGUF export (supported: llama, mistral, qwen2, qwen3, gemma2, gemma3_text, "
              "gemma3, phi3, smollm3)", model_type);
    return NULL;
}

int gguf_tensor_name(const GgufArch *a, const char *hf, char *out, size_t cap) {
    for (const GgufNameMap *g = a->global; g->hf; g++) {
        if (!strcmp(g->hf, hf)) {
            snprintf(out, cap, "%s", g->gguf);
            return 0;
        }
    }
    int layer;
    int n = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &n) != 1 || n == 0) return -1;
    for (const GgufNameMap *b = a->block; b->hf; b++) {
        if (!strcmp(b->hf, hf + n)) {
            snprintf(out, cap, "blk.%d.%s", layer, b->gguf);
            return 0;
        }
    }
    return -1;
}

int gguf_tensor_name_of(const GgufArch *a, const ModelConfig *c, const char *hf, char *out, size_t cap) {
    char canon[224];
    size_t n = strlen(c->prefix);
    if (c->head_name[0] && !strcmp(hf, c->head_name)) snprintf(canon, sizeof canon, "lm_head.weight");
    else if (n > 0 && !strncmp(hf, c->prefix, n)) snprintf(canon, sizeof canon, "model.%s", hf + n);
    else snprintf(canon, sizeof canon, "%s", hf);
    return gguf_tensor_name(a, canon, out, cap);
}

int gguf_permuted_row(int r, int D) {
    int head = r / D;
    int k = r % D;
    int j = k / 2;
    int t = k % 2;
    return head * D + t * (D / 2) + j;
}


const GgufArch *gguf_arch_by_name(const char *arch) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (ARCHS[i].readable && !strcmp(ARCHS[i].arch, arch)) return &ARCHS[i];
    error_set("general.architecture \"%s\" is not supported as a base model (supported: llama, qwen2, qwen3)", arch);
    return NULL;
}

/* {arch}.key as an int in [lo, hi]; *out keeps its value when absent and
 * not required. */
static int arch_int(const GgufFile *g, const char *arch, const char *key, bool required, int lo, int hi, int *out) {
    char k[128];
    int64_t v = *out;
    snprintf(k, sizeof k, "%s.%s", arch, key);
    TRY(gguf_get_int(g, k, required, lo, hi, &v));
    *out = (int)v;
    return 0;
}

static int arch_f64(const GgufFile *g, const char *arch, const char *key, bool required, double *out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_get_f64(g, k, required, out);
}

static int rope_from_gguf(const GgufFile *g, const char *arch, ModelConfig *c) {
    char *type = NULL;
    char k[128];
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    TRY(gguf_get_str(g, k, false, &type));
    int rc = 0;
    if (type && !strcmp(type, "linear")) {
        c->rope_scaling.type = ROPE_SCALING_LINEAR;
        rc = arch_f64(g, arch, "rope.scaling.factor", true, &c->rope_scaling.factor);
        if (rc == 0 && !(c->rope_scaling.factor >= 1))
            rc = error_set("%s: %s.rope.scaling.factor %g must be >= 1", g->name, arch, c->rope_scaling.factor);
    } else if (type && strcmp(type, "none")) {
        rc = error_set("%s: %s.rope.scaling.type \"%s\" is not supported (none, linear)", g->name, arch, type);
    }
    mem_free(type);
    TRY(rc);
    const GgufTensorInfo *f = gguf_find_tensor(g, "rope_freqs.weight");
    if (!f) return 0;
    if (c->rope_scaling.type != ROPE_SCALING_NONE)
        return error_set("%s: both rope_freqs.weight and %s.rope.scaling.type", g->name, arch);
    if (f->type != GGML_TYPE_F32 || f->n_dims != 1 || f->ne[0] != c->head_dim / 2 || f->ne[0] > ROPE_MAX_FACTORS)
        return error_set("%s: tensor rope_freqs.weight must be F32 of %d elements", g->name, c->head_dim / 2);
    c->rope_scaling.type = ROPE_SCALING_FACTORS;
    c->rope_scaling.n_factors = (int)f->ne[0];
    memcpy(c->rope_scaling.factors, f->data, (size_t)f->ne[0] * sizeof(float));
    for (int i = 0; i < c->rope_scaling.n_factors; i++)
        if (!(c->rope_scaling.factors[i] > 0))
            return error_set("%s: rope_freqs.weight[%d] is %g, not a positive factor", g->name, i,
                             (double)c->rope_scaling.factors[i]);
    return 0;
}

int gguf_model_config(const GgufFile *g, ModelConfig *c) {
    memset(c, 0, sizeof *c);
    char *arch_name = NULL;
    TRY(gguf_get_str(g, "general.architecture", true, &arch_name));
    const GgufArch *a = gguf_arch_by_name(arch_name);
    mem_free(arch_name);
    if (!a) return error_prefix("%s", g->name);
    const char *arch = a->arch;
    /* the llama block's tensor names and shape, as hf_config gives a config.json of these types */
    hf_config_init(c, a->model_type);
    const int big = 1 << 30;
    c->max_position_embeddings = 2048;
    TRY(arch_int(g, arch, "context_length", false, 1, big, &c->max_position_embeddings));
    TRY(arch_int(g, arch, "embedding_length", true, 1, 1 << 20, &c->hidden_size));
    TRY(arch_int(g, arch, "block_count", true, 1, 1 << 16, &c->num_hidden_layers));
    TRY(arch_int(g, arch, "feed_forward_length", true, 1, 1 << 24, &c->intermediate_size));
    TRY(arch_int(g, arch, "attention.head_count", true, 1, 1 << 16, &c->num_attention_heads));
    c->num_key_value_heads = c->num_attention_heads;
    TRY(arch_int(g, arch, "attention.head_count_kv", false, 1, c->num_attention_heads, &c->num_key_value_heads));
    if (c->num_attention_heads % c->num_key_value_heads)
        return error_set("%s: %d attention heads are not a multiple of %d KV heads", g->name, c->num_attention_heads,
                         c->num_key_value_heads);
    c->head_dim = c->hidden_size / c->num_attention_heads;
    TRY(arch_int(g, arch, "attention.key_length", false, 2, 1 << 12, &c->head_dim));
    int v_len = c->head_dim;
    int rope_dim = c->head_dim;
    TRY(arch_int(g, arch, "attention.value_length", false, 1, 1 << 12, &v_len));
    TRY(arch_int(g, arch, "rope.dimension_count", false, 1, 1 << 12, &rope_dim));
    if (v_len != c->head_dim || rope_dim != c->head_dim || c->head_dim % 2)
        return error_set("%s: key length %d, value length %d and RoPE dimensions %d must be one even head size",
                         g->name, c->head_dim, v_len, rope_dim);
    double eps = 0;
    TRY(arch_f64(g, arch, "attention.layer_norm_rms_epsilon", true, &eps));
    if (!(eps > 0 && eps < 1)) return error_set("%s: %s.attention.layer_norm_rms_epsilon %g", g->name, arch, eps);
    c->rms_norm_eps = (float)eps;
    c->rotary_dim = c->head_dim;
    c->rope_theta = 10000.0;
    TRY(arch_f64(g, arch, "rope.freq_base", false, &c->rope_theta));
    if (!(c->rope_theta > 0)) return error_set("%s: %s.rope.freq_base %g", g->name, arch, c->rope_theta);
    TRY(rope_from_gguf(g, arch, c));
    const GgufTensorInfo *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2) return error_set("%s: tensor token_embd.weight is missing or not 2-D", g->name);
    c->vocab_size = (int)(emb->ne[1] < big ? emb->ne[1] : big);
    c->tie_word_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    c->qk_norm = !strcmp(c->model_type, "qwen3");
    c->attention_bias = !strcmp(c->model_type, "qwen2") || gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    int64_t id = -1;
    TRY(gguf_get_int(g, "tokenizer.ggml.bos_token_id", false, 0, c->vocab_size - 1, &id));
    c->bos_token_id = (int)id;
    id = -1;
    TRY(gguf_get_int(g, "tokenizer.ggml.eos_token_id", false, 0, c->vocab_size - 1, &id));
    if (id >= 0) {
        c->eos_token_ids[0] = (int)id;
        c->n_eos = 1;
    }
    const GgufTensorInfo *q = gguf_find_tensor(g, "blk.0.attn_q.weight");
    c->torch_dtype = DTYPE_F32;
    if (q && q->type == GGML_TYPE_BF16) c->torch_dtype = DTYPE_BF16;
    if (q && q->type == GGML_TYPE_F16) c->torch_dtype = DTYPE_F16;
    return 0;
}

const GgufTensorInfo *gguf_model_tensor(const GgufFile *g, const GgufArch *a, const char *hf_name) {
    char name[96];
    if (gguf_tensor_name(a, hf_name, name, sizeof name) < 0) return NULL;
    return gguf_find_tensor(g, name);
}

int gguf_check_model_tensors(const GgufFile *g, const GgufArch *a, const ModelConfig *c) {
    ModelTensorSpec *specs;
    size_t n;
    TRY(model_tensor_specs(c, &specs, &n));
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const ModelTensorSpec *s = &specs[i];
        char name[96];
        const GgufTensorInfo *t = NULL;
        if (gguf_tensor_name(a, s->name, name, sizeof name) == 0) t = gguf_find_tensor(g, name);
        if (!t) {
            rc = error_set("%s: tensor %s (%s) is missing", g->name, name, s->name);
            break;
        }
        /* ggml order: ne[0] is the contiguous (last) dimension */
        bool same = t->n_dims == s->ndim && t->ne[0] == s->shape[s->ndim - 1];
        if (s->ndim == 2) same = same && t->ne[1] == s->shape[0];
        if (!same) {
            rc = error_set("%s: tensor %s has ne [%lld, %lld] but the metadata implies [%lld, %lld]", g->name, name,
                           (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1),
                           (long long)s->shape[s->ndim - 1], (long long)(s->ndim == 2 ? s->shape[0] : 1));
        } else if (s->ndim == 1 && ggml_type_is_quantized(t->type)) {
            rc = error_set("%s: tensor %s is %s; norms and biases must be F32, F16 or BF16", g->name, name,
                           ggml_type_name(t->type));
        }
    }
    size_t expected = n + (gguf_find_tensor(g, "rope_freqs.weight") ? 1 : 0);
    if (rc == 0 && g->n_tensors != expected) {
        /* name the first tensor the model has no use for */
        for (size_t i = 0; i < g->n_tensors && rc == 0; i++) {
            const char *nm = g->tensors[i].name;
            bool known = !strcmp(nm, "rope_freqs.weight");
            for (size_t k = 0; k < n && !known; k++) {
                char name[96];
                known = gguf_tensor_name(a, specs[k].name, name, sizeof name) == 0 && !strcmp(name, nm);
            }
            if (!known) rc = error_set("%s: tensor %s is not part of a %s model", g->name, nm, a->arch);
        }
    }
    mem_free(specs);
    return rc;
}

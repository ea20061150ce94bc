/* hf_config_qwen35.c: the Qwen3.5 part of config.json (see qwen35_config.h):
 * choosing the text config of a nested (multimodal) file, refusing the MoE
 * variants, reading the hybrid layout (layer kinds, Gated DeltaNet heads,
 * partial rotary, gated attention), and writing both layouts back. The
 * fields every decoder has are read by hf_config.c from the text config. */
#include "formats/hf_config.h"
#include "formats/hf_config_qwen35.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool hf_qwen35_type(const char *model_type) {
    return !strcmp(model_type, "qwen3_5") || !strcmp(model_type, "qwen3_5_text") ||
           !strcmp(model_type, "qwen3_5_moe") || !strcmp(model_type, "qwen3_5_moe_text");
}

static const json_t *get(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static int positive(const json_t *o, const char *name, const char *key, long long hi, int *out) {
    const json_t *v = get(o, key);
    if (!v) return error_set("%s: missing field \"%s\"", name, key);
    if (!json_is_integer(v)) return error_set("%s: field \"%s\" must be an integer", name, key);
    long long x = json_integer_value(v);
    if (x <= 0) return error_set("%s: field \"%s\" is %lld but must be positive", name, key, x);
    if (x > hi) return error_set("%s: field \"%s\" is %lld, outside the supported range [1, %lld]", name, key, x, hi);
    *out = (int)x;
    return 0;
}

int hf_qwen35_select(const json_t *root, const char *type, const char *name, const json_t **text) {
    const json_t *tc = get(root, "text_config");
    *text = root;
    const char *text_type = type;
    if (tc) {
        if (!json_is_object(tc)) return error_set("%s: field \"text_config\" must be an object", name);
        if (strcmp(type, "qwen3_5") && strcmp(type, "qwen3_5_moe"))
            return error_set("%s: model_type \"%s\" has no text_config (only qwen3_5 nests one)", name, type);
        const json_t *tt = get(tc, "model_type");
        if (tt && (!json_is_string(tt) || !hf_qwen35_type(json_string_value(tt))))
            return error_set("%s: text_config: field \"model_type\" must be qwen3_5_text", name);
        if (tt) text_type = json_string_value(tt);
        *text = tc;
    }
    const json_t *ne = get(*text, "num_experts");
    bool moe = strstr(type, "moe") || strstr(text_type, "moe");
    if (ne && (!json_is_integer(ne) || json_integer_value(ne))) moe = true;
    if (moe)
        return error_set("%s: the mixture-of-experts Qwen3.5 models (%s, num_experts > 0) are not supported yet; "
                         "the dense ones (Qwen3.5-0.8B to 27B, model_type qwen3_5) are", name, type);
    const json_t *mlp_only = get(*text, "mlp_only_layers");
    if (mlp_only && (!json_is_array(mlp_only) || json_array_size(mlp_only) != 0))
        return error_set("%s: field \"mlp_only_layers\" must be empty (a dense model)", name);
    return 0;
}

static int parse_rope(ModelConfig *c, const json_t *top, const json_t *text, const char *name) {
    Qwen35Config *q = &c->q35;
    if (c->rope_scaling.type != ROPE_SCALING_NONE)
        return error_set("%s: field \"rope_scaling\" must be absent or default for qwen3_5 (rope_parameters says it)",
                         name);
    const json_t *rp = get(text, "rope_parameters");
    double theta = 10000.0;
    double factor = 0.25;   /* transformers' default for this family (configuration_qwen3_5.py) */
    const json_t *v = get(text, "rope_theta");
    if (!v) v = get(top, "rope_theta");
    if (v && json_is_number(v)) theta = json_number_value(v);
    v = get(text, "partial_rotary_factor");
    if (v && json_is_number(v)) factor = json_number_value(v);
    if (rp) {
        if (!json_is_object(rp)) return error_set("%s: field \"rope_parameters\" must be an object", name);
        const json_t *t = get(rp, "rope_type");
        if (!t) t = get(rp, "type");
        const char *ts = t ? json_string_value(t) : "default";
        if (!ts || (strcmp(ts, "default") && strcmp(ts, "mrope")))
            return error_set("%s: rope_parameters: rope_type \"%s\" is not supported (default, mrope)", name,
                             ts ? ts : "?");
        v = get(rp, "rope_theta");
        if (v) {
            if (!json_is_number(v))
                return error_set("%s: rope_parameters: field \"rope_theta\" must be a number", name);
            theta = json_number_value(v);
        }
        v = get(rp, "partial_rotary_factor");
        if (v) {
            if (!json_is_number(v))
                return error_set("%s: rope_parameters: field \"partial_rotary_factor\" must be a number", name);
            factor = json_number_value(v);
        }
    }
    if (!(theta > 0) || !isfinite(theta)) return error_set("%s: rope_theta %g must be positive", name, theta);
    if (!(factor > 0 && factor <= 1)) return error_set("%s: partial_rotary_factor %g must be in (0, 1]", name, factor);
    c->rope_theta = theta;
    q->partial_rotary_factor = factor;
    q->rotary_dim = (int)(c->head_dim * factor);
    if (q->rotary_dim < 2 || q->rotary_dim % 2)
        return error_set("%s: head_dim %d x partial_rotary_factor %g = %d rotary dims, which must be even and >= 2",
                         name, c->head_dim, factor, q->rotary_dim);
    return 0;
}

static int parse_layers(ModelConfig *c, const json_t *text, const char *name) {
    Qwen35Config *q = &c->q35;
    int L = c->num_hidden_layers;
    if (L > Q35_MAX_LAYERS) return error_set("%s: %d layers, more than the supported %d", name, L, Q35_MAX_LAYERS);
    const json_t *lt = get(text, "layer_types");
    q->n_linear = 0;
    if (lt) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != L)
            return error_set("%s: field \"layer_types\" must list num_hidden_layers (%d) strings", name, L);
        for (int i = 0; i < L; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            if (!s || (strcmp(s, "linear_attention") && strcmp(s, "full_attention")))
                return error_set("%s: layer_types[%d] must be \"linear_attention\" or \"full_attention\"", name, i);
            q->linear[i] = !strcmp(s, "linear_attention");
        }
    } else {
        int every = 4;
        if (get(text, "full_attention_interval")) TRY(positive(text, name, "full_attention_interval", 10000, &every));
        for (int i = 0; i < L; i++) q->linear[i] = (i + 1) % every != 0;
    }
    for (int i = 0; i < L; i++) q->n_linear += q->linear[i];
    return 0;
}

int hf_qwen35_parse(ModelConfig *c, const json_t *top, const json_t *text, const char *name) {
    Qwen35Config *q = &c->q35;
    memset(q, 0, sizeof *q);
    q->on = true;
    q->nested = top != text;
    const json_t *gate = get(text, "attn_output_gate");
    if (gate && !json_is_true(gate))
        return error_set("%s: field \"attn_output_gate\" false is not supported (Qwen3.5's attention is gated)", name);
    if (c->attention_bias) return error_set("%s: field \"attention_bias\" true is not supported for qwen3_5", name);
    c->qk_norm = true;
    TRY(positive(text, name, "linear_num_key_heads", 4096, &q->k_heads));
    TRY(positive(text, name, "linear_num_value_heads", 4096, &q->v_heads));
    TRY(positive(text, name, "linear_key_head_dim", 4096, &q->k_dim));
    TRY(positive(text, name, "linear_value_head_dim", 4096, &q->v_dim));
    q->conv_kernel = 4;
    if (get(text, "linear_conv_kernel_dim")) TRY(positive(text, name, "linear_conv_kernel_dim", 16, &q->conv_kernel));
    if (q->v_heads % q->k_heads)
        return error_set("%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", name,
                         q->v_heads, q->k_heads);
    if ((long long)q->k_heads * q->k_dim > 1000000 || (long long)q->v_heads * q->v_dim > 1000000)
        return error_set("%s: the Gated DeltaNet heads are too large", name);
    TRY(parse_rope(c, top, text, name));
    TRY(parse_layers(c, text, name));
    /* fields a nested config may keep at the top level only */
    if (q->nested && !get(text, "tie_word_embeddings") && get(top, "tie_word_embeddings")) {
        const json_t *t = get(top, "tie_word_embeddings");
        if (!json_is_boolean(t)) return error_set("%s: field \"tie_word_embeddings\" must be true or false", name);
        c->tie_word_embeddings = json_is_true(t);
    }
    if (q->nested && !get(text, "dtype") && !get(text, "torch_dtype")) {
        const json_t *t = get(top, "torch_dtype");
        if (!t) t = get(top, "dtype");
        const char *s = json_string_value(t);
        if (s && !strcmp(s, "bfloat16")) c->torch_dtype = DTYPE_BF16;
        else if (s && !strcmp(s, "float16")) c->torch_dtype = DTYPE_F16;
    }
    if (q->nested && c->n_eos == 0) {
        const json_t *e = get(top, "eos_token_id");
        if (e && json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) < c->vocab_size)
            c->eos_token_ids[c->n_eos++] = (int)json_integer_value(e);
    }
    const char *pfx = q->nested ? "model.language_model." : "model.";
    snprintf(q->prefix, sizeof q->prefix, "%s", pfx);
    snprintf(q->hf_prefix, sizeof q->hf_prefix, "%s", pfx);
    snprintf(q->head_name, sizeof q->head_name, "lm_head.weight");
    snprintf(q->adapter_prefix, sizeof q->adapter_prefix, "%s",
             !strcmp(c->model_type, "qwen3_5") ? "language_model.model." : "model.");
    q->layout = Q35_LAYOUT_HF;
    return 0;
}

void hf_qwen35_names(ModelConfig *c) {
    const Qwen35Config *q = &c->q35;
    snprintf(c->prefix, sizeof c->prefix, "%s", q->prefix);
    snprintf(c->adapter_prefix, sizeof c->adapter_prefix, "%s", q->adapter_prefix);
    snprintf(c->head_name, sizeof c->head_name, "%s", q->head_name);
    c->rotary_dim = q->rotary_dim;
    c->norm_plus_one = q->layout == Q35_LAYOUT_HF;   /* transformers' zero-centred norms, used as 1 + w */
}

/* ---------------------------------------------------------------- writing */

/* The double whose shortest decimal is the float's (1e-06, not 9.99999997e-07). */
static double float_shortest(float x) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    return strtod(buf, NULL);
}

static json_t *text_json(const ModelConfig *c) {
    const Qwen35Config *q = &c->q35;
    const char *dt = c->torch_dtype == DTYPE_BF16 ? "bfloat16" : c->torch_dtype == DTYPE_F16 ? "float16" : "float32";
    json_t *types = json_array();
    for (int i = 0; i < c->num_hidden_layers; i++)
        json_array_append_new(types, json_string(q->linear[i] ? "linear_attention" : "full_attention"));
    int half = q->rotary_dim / 2;
    int s1 = half == 32 ? 11 : half / 3;
    int s0 = half - 2 * s1;
    if (half == 32) s0 = 11;
    json_t *rp = json_pack("{s:s, s:f, s:f, s:[i,i,i], s:b}", "rope_type", "default", "rope_theta", c->rope_theta,
                           "partial_rotary_factor", q->partial_rotary_factor, "mrope_section", s0, s1,
                           half - s0 - s1, "mrope_interleaved", 1);
    json_t *t = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:b, s:b, s:b}",
                          "model_type", "qwen3_5_text", "hidden_act", "silu", "hidden_size", c->hidden_size,
                          "intermediate_size", c->intermediate_size, "num_hidden_layers", c->num_hidden_layers,
                          "num_attention_heads", c->num_attention_heads, "num_key_value_heads",
                          c->num_key_value_heads, "head_dim", c->head_dim, "vocab_size", c->vocab_size,
                          "max_position_embeddings", c->max_position_embeddings, "rms_norm_eps",
                          float_shortest(c->rms_norm_eps), "attention_bias", 0, "attn_output_gate", 1,
                          "tie_word_embeddings", c->tie_word_embeddings);
    if (!t || !rp || !types) {
        json_decref(t);
        json_decref(rp);
        json_decref(types);
        return NULL;
    }
    json_object_set_new(t, "layer_types", types);
    json_object_set_new(t, "linear_num_key_heads", json_integer(q->k_heads));
    json_object_set_new(t, "linear_num_value_heads", json_integer(q->v_heads));
    json_object_set_new(t, "linear_key_head_dim", json_integer(q->k_dim));
    json_object_set_new(t, "linear_value_head_dim", json_integer(q->v_dim));
    json_object_set_new(t, "linear_conv_kernel_dim", json_integer(q->conv_kernel));
    json_object_set_new(t, "rope_parameters", rp);
    json_object_set_new(t, "dtype", json_string(dt));
    json_object_set_new(t, "mamba_ssm_dtype", json_string("float32"));
    if (c->bos_token_id >= 0) json_object_set_new(t, "bos_token_id", json_integer(c->bos_token_id));
    if (c->n_eos == 1) json_object_set_new(t, "eos_token_id", json_integer(c->eos_token_ids[0]));
    if (c->n_eos > 1) {
        json_t *e = json_array();
        for (int i = 0; i < c->n_eos; i++) json_array_append_new(e, json_integer(c->eos_token_ids[i]));
        json_object_set_new(t, "eos_token_id", e);
    }
    return t;
}

int hf_qwen35_write(const ModelConfig *c, const char *path) {
    json_t *text = text_json(c);
    if (!text) return error_set("%s: out of memory building config.json", path);
    json_t *root = text;
    if (c->q35.nested) {
        root = json_pack("{s:[s], s:s, s:o, s:b, s:s}", "architectures", "Qwen3_5ForConditionalGeneration",
                         "model_type", "qwen3_5", "text_config", text, "tie_word_embeddings",
                         c->tie_word_embeddings, "dtype", json_string_value(json_object_get(text, "dtype")));
        if (!root) return error_set("%s: out of memory building config.json", path);
    } else {
        json_object_set_new(root, "architectures", json_pack("[s]", "Qwen3_5ForCausalLM"));
    }
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(root);
    if (!s) return error_set("%s: out of memory writing config.json", path);
    ModelConfig back;
    int rc = hf_config_parse(&back, s, path);
    if (rc == 0 && (back.q35.n_linear != c->q35.n_linear || back.q35.rotary_dim != c->q35.rotary_dim))
        rc = error_set("%s: config.json does not read back as written", path);
    if (rc == 0) rc = atomic_write_file(path, s, strlen(s));
    else rc = error_prefix("refusing to write an invalid config");
    free(s);
    return rc;
}

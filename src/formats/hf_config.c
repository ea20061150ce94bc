/* hf_config.c: config.json of the llama, mistral, qwen2 and qwen3 families
 * (see hf_config.h). Reading follows the transformers config classes'
 * defaults (num_key_value_heads = H, head_dim = C / H, rope_theta 10000,
 * max_position_embeddings 2048, untied embeddings); what differs by family:
 * qwen2 always has q/k/v biases, qwen3 has per-head q/k RMSNorm and an
 * explicit head_dim. Every size is checked (positive, within sane limits,
 * heads divisible) so later layers can trust the struct. The writer emits
 * the same fields in HF style, and reading them back gives the same struct. */
#include "hf_config.h"
#include "base/alloc.h"
#include "base/error.h"
#include "one_line.h"
#include "base/fileio.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_MAX_CONFIG_BYTES (16u << 20)

static const struct { const char *type, *architecture; } families[] = {
    {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"},
};

/* Present and not null. */
static json_t *field(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

/* An integer field in [lo, hi]; `def` when absent and not required. */
static int get_int(const json_t *o, const char *name, const char *key, bool required, long long def,
                   long long lo, long long hi, int *out) {
    json_t *v = field(o, key);
    long long x = def;
    if (!v) {
        if (required) return error_set("%s: missing field \"%s\"", name, key);
    } else {
        /* 4096.0 is a float in JSON but harmless; transformers would keep it as float and break later */
        if (!json_is_integer(v)) return error_set("%s: field \"%s\" must be an integer", name, key);
        x = json_integer_value(v);
    }
    if (x < lo || x > hi) {
        if (x <= 0 && lo > 0) return error_set("%s: field \"%s\" is %lld but must be positive", name, key, x);
        return error_set("%s: field \"%s\" is %lld, outside the supported range [%lld, %lld]", name, key, x, lo, hi);
    }
    *out = (int)x;
    return 0;
}

static int get_number(const json_t *o, const char *name, const char *key, bool required, double def, double *out) {
    json_t *v = field(o, key);
    if (!v) {
        if (required) return error_set("%s: missing field \"%s\"", name, key);
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return error_set("%s: field \"%s\" must be a number", name, key);
    *out = json_number_value(v);
    return 0;
}

static int get_bool(const json_t *o, const char *name, const char *key, bool def, bool *out) {
    json_t *v = field(o, key);
    if (!v) { *out = def; return 0; }
    if (!json_is_boolean(v)) return error_set("%s: field \"%s\" must be true or false", name, key);
    *out = json_is_true(v);
    return 0;
}

static int parse_rope_scaling(ModelConfig *c, const json_t *root, const char *name) {
    memset(&c->rope_scaling, 0, sizeof c->rope_scaling);
    json_t *rs = field(root, "rope_scaling");
    if (!rs) return 0;
    if (!json_is_object(rs)) return error_set("%s: field \"rope_scaling\" must be an object or null", name);
    json_t *type = field(rs, "rope_type");
    if (!type) type = field(rs, "type");
    if (!type) return error_set("%s: rope_scaling: missing field \"rope_type\"", name);
    if (!json_is_string(type)) return error_set("%s: rope_scaling: field \"rope_type\" must be a string", name);
    const char *t = json_string_value(type);
    RopeScaling *r = &c->rope_scaling;
    char sub[64];
    snprintf(sub, sizeof sub, "%s: rope_scaling", name);
    if (strcmp(t, "default") == 0) return 0;
    if (strcmp(t, "linear") == 0) {
        r->type = ROPE_SCALING_LINEAR;
        TRY(get_number(rs, sub, "factor", true, 0, &r->factor));
    } else if (strcmp(t, "llama3") == 0) {
        r->type = ROPE_SCALING_LLAMA3;
        TRY(get_number(rs, sub, "factor", true, 0, &r->factor));
        TRY(get_number(rs, sub, "low_freq_factor", true, 0, &r->low_freq_factor));
        TRY(get_number(rs, sub, "high_freq_factor", true, 0, &r->high_freq_factor));
        TRY(get_int(rs, sub, "original_max_position_embeddings", true, 0, 1, 1 << 30, &r->original_max_position));
        if (!(r->high_freq_factor > r->low_freq_factor) || !(r->low_freq_factor > 0))
            return error_set("%s: rope_scaling: need 0 < low_freq_factor < high_freq_factor (got %g and %g)", name,
                             r->low_freq_factor, r->high_freq_factor);
    } else
        return error_set("%s: rope_scaling type \"%s\" is not supported (supported: llama3, linear)", name, t);
    if (!(r->factor >= 1.0) || !isfinite(r->factor))
        return error_set("%s: rope_scaling: factor %g must be a finite number >= 1", name, r->factor);
    return 0;
}

static int parse_token_ids(ModelConfig *c, const json_t *root, const char *name) {
    c->bos_token_id = -1;
    json_t *bos = field(root, "bos_token_id");
    if (bos) {
        if (!json_is_integer(bos)) return error_set("%s: field \"bos_token_id\" must be an integer", name);
        json_int_t id = json_integer_value(bos);
        if (id < 0 || id >= c->vocab_size)
            return error_set("%s: field \"bos_token_id\" is %lld, outside the vocabulary [0, %d)", name, (long long)id, c->vocab_size);
        c->bos_token_id = (int)id;
    }
    c->n_eos = 0;
    json_t *eos = field(root, "eos_token_id");
    if (!eos) return 0;
    size_t n = json_is_array(eos) ? json_array_size(eos) : 1;
    if (!json_is_array(eos) && !json_is_integer(eos))
        return error_set("%s: field \"eos_token_id\" must be an integer or a list of integers", name);
    if (n > sizeof c->eos_token_ids / sizeof c->eos_token_ids[0])
        return error_set("%s: field \"eos_token_id\" lists %zu ids, more than the supported 8", name, n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
        if (!json_is_integer(v)) return error_set("%s: field \"eos_token_id\" must be an integer or a list of integers", name);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= c->vocab_size)
            return error_set("%s: field \"eos_token_id\" has %lld, outside the vocabulary [0, %d)", name, (long long)id, c->vocab_size);
        c->eos_token_ids[c->n_eos++] = (int)id;
    }
    return 0;
}

static int parse_dtype(ModelConfig *c, const json_t *root, const char *name) {
    const char *key = "torch_dtype";
    json_t *v = field(root, key);
    if (!v) { key = "dtype"; v = field(root, key); } /* transformers >= 4.56 writes "dtype" */
    c->torch_dtype = DTYPE_F32;
    if (!v) return 0;
    if (!json_is_string(v)) return error_set("%s: field \"%s\" must be a string", name, key);
    const char *s = json_string_value(v);
    if (strcmp(s, "float32") == 0) c->torch_dtype = DTYPE_F32;
    else if (strcmp(s, "bfloat16") == 0) c->torch_dtype = DTYPE_BF16;
    else if (strcmp(s, "float16") == 0) c->torch_dtype = DTYPE_F16;
    else return error_set("%s: field \"%s\" is \"%s\" (supported: float32, bfloat16, float16)", name, key, s);
    return 0;
}

static int parse_root(ModelConfig *c, const json_t *root, const char *name) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(root)) return error_set("%s: not a JSON object", name);
    json_t *mt = field(root, "model_type");
    if (!mt) return error_set("%s: missing field \"model_type\"", name);
    if (!json_is_string(mt)) return error_set("%s: field \"model_type\" must be a string", name);
    const char *type = json_string_value(mt);
    int family = -1;
    for (int i = 0; i < (int)(sizeof families / sizeof families[0]); i++)
        if (strcmp(type, families[i].type) == 0) family = i;
    if (family < 0)
        return error_set("%s: model_type \"%.40s\" is not supported (supported: " HF_SUPPORTED_TYPES ")", name, type);
    snprintf(c->model_type, sizeof c->model_type, "%s", type);
    bool qwen2 = strcmp(type, "qwen2") == 0, qwen3 = strcmp(type, "qwen3") == 0;

    /* sizes: positive and within limits that keep every product in range */
    TRY(get_int(root, name, "hidden_size", true, 0, 1, 1000000, &c->hidden_size));
    TRY(get_int(root, name, "intermediate_size", true, 0, 1, 4000000, &c->intermediate_size));
    TRY(get_int(root, name, "num_hidden_layers", true, 0, 1, 10000, &c->num_hidden_layers));
    TRY(get_int(root, name, "num_attention_heads", true, 0, 1, 10000, &c->num_attention_heads));
    TRY(get_int(root, name, "vocab_size", true, 0, 1, 10000000, &c->vocab_size));
    int H = c->num_attention_heads;
    TRY(get_int(root, name, "num_key_value_heads", false, H, 1, 10000, &c->num_key_value_heads));
    if (H % c->num_key_value_heads != 0)
        return error_set("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", name, H, c->num_key_value_heads);
    if (field(root, "head_dim")) {
        TRY(get_int(root, name, "head_dim", true, 0, 1, 65536, &c->head_dim));
    } else {
        if (qwen3) return error_set("%s: missing field \"head_dim\" (qwen3 configs set it)", name);
        if (c->hidden_size % H != 0)
            return error_set("%s: hidden_size %d is not a multiple of num_attention_heads %d (and head_dim is not given)",
                             name, c->hidden_size, H);
        c->head_dim = c->hidden_size / H;
        if (c->head_dim > 65536) /* the range an explicit head_dim is held to */
            return error_set("%s: hidden_size / num_attention_heads = %d is outside the supported head_dim range [1, 65536]",
                             name, c->head_dim);
    }
    if (c->head_dim % 2 != 0) return error_set("%s: head_dim %d must be even (RoPE rotates pairs)", name, c->head_dim);
    if ((long long)H * c->head_dim > 1000000)
        return error_set("%s: num_attention_heads x head_dim = %lld is too large", name, (long long)H * c->head_dim);
    TRY(get_int(root, name, "max_position_embeddings", false, 2048, 1, 1 << 30, &c->max_position_embeddings));

    double eps;
    TRY(get_number(root, name, "rms_norm_eps", true, 0, &eps));
    if (!(eps > 0 && eps < 1)) return error_set("%s: field \"rms_norm_eps\" is %g but must be in (0, 1)", name, eps);
    c->rms_norm_eps = (float)eps;
    if (!(c->rms_norm_eps >= 1e-30f)) /* also keeps it a normal float */
        return error_set("%s: field \"rms_norm_eps\" is %g, too small to be useful in float32", name, eps);
    TRY(get_number(root, name, "rope_theta", false, 10000.0, &c->rope_theta));
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return error_set("%s: field \"rope_theta\" is %g but must be positive", name, c->rope_theta);
    TRY(parse_rope_scaling(c, root, name));

    TRY(get_bool(root, name, "tie_word_embeddings", false, &c->tie_word_embeddings));
    if (qwen2) {
        c->attention_bias = true; /* Qwen2Attention always has q/k/v biases */
    } else TRY(get_bool(root, name, "attention_bias", false, &c->attention_bias));
    c->qk_norm = qwen3;
    json_t *act = field(root, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return error_set("%s: field \"hidden_act\" must be \"silu\" (the SwiGLU MLP)", name);
    bool mlp_bias = false;
    TRY(get_bool(root, name, "mlp_bias", false, &mlp_bias));
    if (mlp_bias) return error_set("%s: field \"mlp_bias\" true is not supported", name);
    TRY(parse_token_ids(c, root, name));
    TRY(parse_dtype(c, root, name));
    /* mistral sets sliding_window alone; qwen2/qwen3 gate it with use_sliding_window; llama has none */
    bool use_window = strcmp(type, "mistral") == 0;
    if (qwen2 || qwen3) TRY(get_bool(root, name, "use_sliding_window", false, &use_window));
    if (use_window)
        TRY(get_int(root, name, "sliding_window", false, 0, 0, 1 << 30, &c->sliding_window));
    return 0;
}

int hf_config_parse(ModelConfig *c, const char *json, const char *name) {
    json_error_t jerr;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        memset(c, 0, sizeof *c);
        error_set("%s: not valid JSON: %s (line %d, column %d)", name, jerr.text, jerr.line, jerr.column);
        return error_one_line();
    }
    int rc = parse_root(c, root, name);
    json_decref(root);
    return rc < 0 ? error_one_line() : 0;
}

int hf_config_load(ModelConfig *c, const char *path) {
    char *text = NULL;
    if (file_read_all(path, HF_MAX_CONFIG_BYTES, &text, NULL) < 0) { memset(c, 0, sizeof *c); return -1; }
    int rc = hf_config_parse(c, text, path);
    mem_free(text);
    return rc;
}

/* Shortest decimal that reads back as the same float / double. */
static void fmt_float(char *buf, size_t cap, float x) {
    for (int p = 1; p <= 9; p++) { snprintf(buf, cap, "%.*g", p, (double)x); if ((float)strtod(buf, NULL) == x) break; }
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", cap - strlen(buf) - 1);
}
static void fmt_double(char *buf, size_t cap, double x) {
    if (x == floor(x) && fabs(x) < 1e15) { snprintf(buf, cap, "%.1f", x); return; } /* 500000.0, not 5e+05 */
    for (int p = 1; p <= 17; p++) { snprintf(buf, cap, "%.*g", p, x); if (strtod(buf, NULL) == x) break; }
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", cap - strlen(buf) - 1);
}

int hf_config_write(const ModelConfig *c, const char *path) {
    /* Round trip through the parser first: a struct the reader would refuse
     * (or read differently) is not written. */
    const char *arch = NULL;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(c->model_type, families[i].type) == 0) arch = families[i].architecture;
    if (!arch) return error_set("%s: model_type \"%s\" is not supported (supported: " HF_SUPPORTED_TYPES ")", path, c->model_type);
    bool qwen2 = strcmp(c->model_type, "qwen2") == 0, qwen3 = strcmp(c->model_type, "qwen3") == 0;
    if (c->qk_norm != qwen3) return error_set("%s: qk_norm is %s but model_type is %s", path, c->qk_norm ? "on" : "off", c->model_type);
    if (qwen2 && !c->attention_bias) return error_set("%s: qwen2 models always have attention biases", path);
    if (c->sliding_window && strcmp(c->model_type, "llama") == 0)
        return error_set("%s: llama models have no sliding_window", path);
    const char *dt = c->torch_dtype == DTYPE_BF16 ? "bfloat16" : c->torch_dtype == DTYPE_F16 ? "float16" : "float32";
    if (c->torch_dtype != DTYPE_F32 && c->torch_dtype != DTYPE_BF16 && c->torch_dtype != DTYPE_F16)
        return error_set("%s: torch_dtype %s cannot be written", path, dtype_name(c->torch_dtype));

    size_t cap = 4096;
    char *s = mem_alloc(cap), num[64], num2[64], num3[64];
    if (!s) return -1;
    size_t k = 0;
#define EMIT(...) (k += (size_t)snprintf(s + k, k < cap ? cap - k : 0, __VA_ARGS__))
    EMIT("{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", arch, c->model_type);
    EMIT("  \"hidden_act\": \"silu\",\n");
    EMIT("  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n", c->hidden_size, c->intermediate_size);
    EMIT("  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n", c->num_hidden_layers, c->num_attention_heads);
    EMIT("  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n", c->num_key_value_heads, c->head_dim);
    EMIT("  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n", c->vocab_size, c->max_position_embeddings);
    fmt_float(num, sizeof num, c->rms_norm_eps);
    EMIT("  \"rms_norm_eps\": %s,\n", num);
    fmt_double(num, sizeof num, c->rope_theta);
    EMIT("  \"rope_theta\": %s,\n", num);
    const RopeScaling *r = &c->rope_scaling;
    if (r->type == ROPE_SCALING_FACTORS) {
        /* a GGUF's rope_freqs: config.json has no way to say it */
        mem_free(s);
        return error_set("%s: the RoPE frequency factors of a GGUF model have no config.json form", path);
    }
    if (r->type == ROPE_SCALING_LLAMA3) {
        fmt_double(num, sizeof num, r->factor); fmt_double(num2, sizeof num2, r->low_freq_factor);
        fmt_double(num3, sizeof num3, r->high_freq_factor);
        EMIT("  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, "
             "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d},\n", num, num2, num3, r->original_max_position);
    } else if (r->type == ROPE_SCALING_LINEAR) {
        fmt_double(num, sizeof num, r->factor);
        EMIT("  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": %s},\n", num);
    } else EMIT("  \"rope_scaling\": null,\n");
    EMIT("  \"tie_word_embeddings\": %s,\n  \"attention_bias\": %s,\n", c->tie_word_embeddings ? "true" : "false",
         c->attention_bias ? "true" : "false");
    if (c->bos_token_id >= 0) EMIT("  \"bos_token_id\": %d,\n", c->bos_token_id);
    else EMIT("  \"bos_token_id\": null,\n");
    if (c->n_eos == 1) EMIT("  \"eos_token_id\": %d,\n", c->eos_token_ids[0]);
    else if (c->n_eos == 0) EMIT("  \"eos_token_id\": null,\n");
    else {
        EMIT("  \"eos_token_id\": [");
        for (int i = 0; i < c->n_eos; i++) EMIT("%s%d", i ? ", " : "", c->eos_token_ids[i]);
        EMIT("],\n");
    }
    if (c->sliding_window > 0 && (qwen2 || qwen3)) EMIT("  \"use_sliding_window\": true,\n");
    if (c->sliding_window > 0) EMIT("  \"sliding_window\": %d,\n", c->sliding_window);
    EMIT("  \"torch_dtype\": \"%s\"\n}\n", dt);
#undef EMIT
    if (k >= cap) { mem_free(s); return error_set("%s: config text too long", path); }
    ModelConfig back;
    if (hf_config_parse(&back, s, path) < 0) { mem_free(s); return error_prefix("refusing to write an invalid config"); }
    int rc = atomic_write_file(path, s, k);
    mem_free(s);
    return rc;
}

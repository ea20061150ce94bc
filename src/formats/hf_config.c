/* hf_config.c: config.json of the supported families (see hf_config.h).
 * Reading follows the transformers config classes' defaults (llama:
 * num_key_value_heads = H, head_dim = C / H, rope_theta 10000,
 * max_position_embeddings 2048, untied embeddings; each family's class for
 * the rest). What differs by family:
 *   qwen2     q/k/v biases always
 *   qwen3     per-head q/k RMSNorm, explicit head_dim
 *   mistral   sliding_window on every layer
 *   gemma2/3  RMSNorm 1 + w, sandwich norms, GeGLU (gelu_pytorch_tanh),
 *             embeddings times sqrt(C), scale query_pre_attn_scalar^-1/2,
 *             sliding layers from layer_types or the sliding_window_pattern
 *             (gemma2: every other layer), tied head; gemma2 soft-caps
 *             scores and logits; gemma3 has q/k norms and a second RoPE base
 *             (rope_local_base_freq) for its sliding layers. The multimodal
 *             gemma3 nests the text model's config in text_config and its
 *             weights under language_model.
 *   phi3      fused qkv_proj and gate_up_proj, partial_rotary_factor,
 *             longrope scaling against original_max_position_embeddings,
 *             sliding_window on every layer
 *   smollm3   no RoPE on the layers no_rope_layers (or its interval) marks
 *   qwen3_5   the common fields from the text config, the rest (Gated
 *             DeltaNet layers, gated attention, partial rotary, layout) by
 *             hf_config_qwen35.c
 * Transformers 5's rope_parameters (flat, or per layer type for gemma3) is
 * read as well as rope_theta / rope_scaling. Every size is checked
 * (positive, within sane limits, heads divisible) so later layers can trust
 * the struct. The writer emits the same fields in HF style, and reading
 * them back gives the same struct. */
#include "hf_config.h"
#include "hf_config_qwen35.h"
#include "base/alloc.h"
#include "base/error.h"
#include "one_line.h"
#include "base/fileio.h"
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_MAX_CONFIG_BYTES (16u << 20)

enum { F_LLAMA, F_MISTRAL, F_QWEN2, F_QWEN3, F_GEMMA2, F_GEMMA3_TEXT, F_GEMMA3, F_PHI3, F_SMOLLM3 };
enum { F_QWEN35 = -2 }; /* qwen3_5 / qwen3_5_text: not in the table, hf_config_qwen35.c reads and writes them */
static const struct { const char *type, *architecture; } families[] = {
    [F_LLAMA] = {"llama", "LlamaForCausalLM"},
    [F_MISTRAL] = {"mistral", "MistralForCausalLM"},
    [F_QWEN2] = {"qwen2", "Qwen2ForCausalLM"},
    [F_QWEN3] = {"qwen3", "Qwen3ForCausalLM"},
    [F_GEMMA2] = {"gemma2", "Gemma2ForCausalLM"},
    [F_GEMMA3_TEXT] = {"gemma3_text", "Gemma3ForCausalLM"},
    [F_GEMMA3] = {"gemma3", "Gemma3ForConditionalGeneration"},
    [F_PHI3] = {"phi3", "Phi3ForCausalLM"},
    [F_SMOLLM3] = {"smollm3", "SmolLM3ForCausalLM"},
};
enum { N_FAMILIES = sizeof families / sizeof families[0] };

static int family_of(const char *type) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (strcmp(type, families[i].type) == 0) return i;
    return -1;
}
static bool is_gemma(int f) { return f == F_GEMMA2 || f == F_GEMMA3_TEXT || f == F_GEMMA3; }

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
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return error_set("%s: field \"%s\" must be true or false", name, key);
    *out = json_is_true(v);
    return 0;
}

/* A list of rd / 2 longrope factors, each finite and positive. */
static int get_factors(const json_t *rs, const char *sub, const char *key, int n, float *out) {
    json_t *v = field(rs, key);
    if (!v) return error_set("%s: missing field \"%s\"", sub, key);
    if (!json_is_array(v)) return error_set("%s: field \"%s\" must be a list of numbers", sub, key);
    if ((int)json_array_size(v) != n)
        return error_set("%s: field \"%s\" has %zu factors but the rotary dims need %d (rotary_dim / 2)", sub, key,
                         json_array_size(v), n);
    for (int i = 0; i < n; i++) {
        json_t *x = json_array_get(v, (size_t)i);
        double d = json_is_number(x) ? json_number_value(x) : -1.0;
        if (!(d > 0) || !isfinite(d))
            return error_set("%s: field \"%s\" entry %d must be a positive number", sub, key, i);
        out[i] = (float)d;
    }
    return 0;
}

/* rope_scaling (or transformers 5's rope_parameters) into r. The rotary
 * dims and the original length must be known (longrope). */
static int parse_scaling(ModelConfig *c, RopeScaling *r, const json_t *rs, const char *name, const char *what) {
    memset(r, 0, sizeof *r);
    if (!rs) return 0;
    if (!json_is_object(rs)) return error_set("%s: field \"%s\" must be an object or null", name, what);
    json_t *type = field(rs, "rope_type");
    if (!type) type = field(rs, "type");
    char sub[96];
    snprintf(sub, sizeof sub, "%s: %s", name, what);
    if (!type) return error_set("%s: missing field \"rope_type\"", sub);
    if (!json_is_string(type)) return error_set("%s: field \"rope_type\" must be a string", sub);
    const char *t = json_string_value(type);
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
            return error_set("%s: need 0 < low_freq_factor < high_freq_factor (got %g and %g)", sub,
                             r->low_freq_factor, r->high_freq_factor);
    } else if (strcmp(t, "longrope") == 0 || strcmp(t, "su") == 0) {
        /* HF _compute_longrope_parameters: factor = max_position_embeddings /
         * original_max_position_embeddings; attention factor given, or
         * sqrt(1 + ln factor / ln original) (1 when factor <= 1) */
        r->type = ROPE_SCALING_LONGROPE;
        int n = c->rotary_dim / 2;
        if (n > ROPE_MAX_PAIRS)
            return error_set("%s: longrope with %d rotary pairs (at most %d)", sub, n, ROPE_MAX_PAIRS);
        r->n_factors = n;
        TRY(get_factors(rs, sub, "short_factor", n, r->short_factor));
        TRY(get_factors(rs, sub, "long_factor", n, r->long_factor));
        int orig = c->original_max_position > 0 ? c->original_max_position : c->max_position_embeddings;
        r->original_max_position = orig;
        r->factor = (double)c->max_position_embeddings / orig;
        double af = r->factor <= 1.0 ? 1.0 : sqrt(1.0 + log(r->factor) / log((double)orig));
        TRY(get_number(rs, sub, "attention_factor", false, af, &r->attention_factor));
        if (!(r->attention_factor > 0) || !isfinite(r->attention_factor))
            return error_set("%s: attention_factor %g must be positive", sub, r->attention_factor);
        return 0;
    } else
        return error_set("%s type \"%s\" is not supported (supported: llama3, linear, longrope)", sub, t);
    if (!(r->factor >= 1.0) || !isfinite(r->factor))
        return error_set("%s: factor %g must be a finite number >= 1", sub, r->factor);
    return 0;
}

static int parse_token_ids_eos(ModelConfig *c, const json_t *o, const json_t *outer, const char *name);

static int parse_token_ids(ModelConfig *c, const json_t *o, const json_t *outer, const char *name) {
    c->bos_token_id = -1;
    json_t *bos = field(o, "bos_token_id");
    if (!bos && outer) bos = field(outer, "bos_token_id");
    if (bos) {
        if (!json_is_integer(bos)) return error_set("%s: field \"bos_token_id\" must be an integer", name);
        json_int_t id = json_integer_value(bos);
        if (id < 0 || id >= c->vocab_size)
            return error_set("%s: field \"bos_token_id\" is %lld, outside the vocabulary [0, %d)", name,
                             (long long)id, c->vocab_size);
        c->bos_token_id = (int)id;
    }
    return parse_token_ids_eos(c, o, outer, name);
}

/* eos_token_id: an id or a list of ids, in the vocabulary (o's, else outer's). */
static int parse_token_ids_eos(ModelConfig *c, const json_t *o, const json_t *outer, const char *name) {
    c->n_eos = 0;
    json_t *eos = field(o, "eos_token_id");
    if (!eos && outer) eos = field(outer, "eos_token_id");
    if (!eos) return 0;
    size_t n = json_is_array(eos) ? json_array_size(eos) : 1;
    if (!json_is_array(eos) && !json_is_integer(eos))
        return error_set("%s: field \"eos_token_id\" must be an integer or a list of integers", name);
    if (n > sizeof c->eos_token_ids / sizeof c->eos_token_ids[0])
        return error_set("%s: field \"eos_token_id\" lists %zu ids, more than the supported 8", name, n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
        if (!json_is_integer(v))
            return error_set("%s: field \"eos_token_id\" must be an integer or a list of integers", name);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= c->vocab_size)
            return error_set("%s: field \"eos_token_id\" has %lld, outside the vocabulary [0, %d)", name,
                             (long long)id, c->vocab_size);
        c->eos_token_ids[c->n_eos++] = (int)id;
    }
    return 0;
}

static int parse_dtype(ModelConfig *c, const json_t *o, const json_t *outer, const char *name) {
    const char *key = "torch_dtype";
    json_t *v = field(o, key);
    if (!v) {
        key = "dtype"; /* transformers >= 4.56 writes "dtype" */
        v = field(o, key);
    }
    if (!v && outer) return parse_dtype(c, outer, NULL, name);
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

/* The activation: llama-like blocks take silu, gemma the tanh GELU. */
static int parse_activation(ModelConfig *c, const json_t *o, const char *name, int fam) {
    const char *key = "hidden_act";
    json_t *act = field(o, key);
    if (is_gemma(fam)) {
        if (field(o, "hidden_activation")) { /* the key Gemma2/3's MLPs read */
            key = "hidden_activation";
            act = field(o, key);
        }
        c->hidden_act = HIDDEN_ACT_GELU_TANH;
        if (act && (!json_is_string(act) || strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0))
            return error_set("%s: field \"%s\" must be \"gelu_pytorch_tanh\" (the GeGLU MLP)", name, key);
        return 0;
    }
    c->hidden_act = HIDDEN_ACT_SILU;
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0))
        return error_set("%s: field \"%s\" must be \"silu\" (the SwiGLU MLP)", name, key);
    return 0;
}

/* layer_types: a list of "sliding_attention" / "full_attention", one per layer. */
static int parse_layer_types(ModelConfig *c, const json_t *lt, const char *name) {
    if (!json_is_array(lt)) return error_set("%s: field \"layer_types\" must be a list of strings", name);
    if ((int)json_array_size(lt) != c->num_hidden_layers)
        return error_set("%s: field \"layer_types\" has %zu entries for %d layers", name, json_array_size(lt),
                         c->num_hidden_layers);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)i));
        if (s && strcmp(s, "sliding_attention") == 0) c->layer_flags[i] |= LAYER_SLIDING;
        else if (!s || strcmp(s, "full_attention") != 0)
            return error_set("%s: field \"layer_types\" entry %d must be \"sliding_attention\" or \"full_attention\"",
                             name, i);
    }
    return 0;
}

/* smollm3: no_rope_layers[i] is 1 where layer i uses RoPE, 0 for NoPE
 * (HF: at least one entry per layer); else every no_rope_layer_interval-th
 * layer is NoPE. */
static int parse_nope(ModelConfig *c, const json_t *o, const char *name) {
    int L = c->num_hidden_layers;
    json_t *list = field(o, "no_rope_layers");
    if (list) {
        if (!json_is_array(list) || (int)json_array_size(list) < L)
            return error_set("%s: field \"no_rope_layers\" must be a list of at least %d zeros and ones", name, L);
        for (int i = 0; i < L; i++) {
            json_t *v = json_array_get(list, (size_t)i);
            if (!json_is_integer(v) || (json_integer_value(v) != 0 && json_integer_value(v) != 1))
                return error_set("%s: field \"no_rope_layers\" entry %d must be 0 or 1", name, i);
            if (json_integer_value(v) == 0) c->layer_flags[i] |= LAYER_NOPE;
        }
        return 0;
    }
    int interval;
    TRY(get_int(o, name, "no_rope_layer_interval", false, 4, 1, 1 << 30, &interval));
    for (int i = 0; i < L; i++)
        if ((i + 1) % interval == 0) c->layer_flags[i] |= LAYER_NOPE;
    return 0;
}

/* Which layers slide, and the window. */
static int parse_windows(ModelConfig *c, const json_t *o, const char *name, int fam) {
    int L = c->num_hidden_layers;
    bool use = fam == F_MISTRAL || fam == F_PHI3 || is_gemma(fam);
    if (fam == F_QWEN2 || fam == F_QWEN3 || fam == F_SMOLLM3)
        TRY(get_bool(o, name, "use_sliding_window", false, &use));
    if (!use) return 0;
    int def = is_gemma(fam) ? 4096 : 0;
    TRY(get_int(o, name, "sliding_window", false, def, 0, 1 << 30, &c->sliding_window));
    if (c->sliding_window == 0) return 0;
    json_t *lt = field(o, "layer_types");
    if (lt && fam != F_MISTRAL && fam != F_PHI3) return parse_layer_types(c, lt, name);
    if (fam == F_MISTRAL || fam == F_PHI3) {
        for (int i = 0; i < L; i++) c->layer_flags[i] |= LAYER_SLIDING;
    } else if (fam == F_QWEN2 || fam == F_QWEN3) {
        int first;
        TRY(get_int(o, name, "max_window_layers", false, 28, 0, 1 << 30, &first));
        for (int i = first; i < L; i++) c->layer_flags[i] |= LAYER_SLIDING;
    } else if (fam == F_SMOLLM3) {
        for (int i = 0; i < L; i++)
            if (c->layer_flags[i] & LAYER_NOPE) c->layer_flags[i] |= LAYER_SLIDING;
    } else {
        /* gemma: the pattern's last layer is global (HF: sliding iff (i + 1) % pattern) */
        int pattern;
        TRY(get_int(o, name, "sliding_window_pattern", false, fam == F_GEMMA2 ? 2 : 6, 1, 1 << 30, &pattern));
        for (int i = 0; i < L; i++)
            if ((i + 1) % pattern != 0) c->layer_flags[i] |= LAYER_SLIDING;
    }
    return 0;
}

/* rope_theta and scaling of the full layers (and gemma3's local base), from
 * rope_theta / rope_scaling / rope_local_base_freq or rope_parameters. */
static int parse_rope(ModelConfig *c, const json_t *o, const char *name, int fam) {
    double def = fam == F_GEMMA3_TEXT ? 1e6 : fam == F_SMOLLM3 ? 2e6 : 10000.0;
    TRY(get_number(o, name, "rope_theta", false, def, &c->rope_theta));
    json_t *rs = field(o, "rope_scaling");
    const char *what = "rope_scaling";
    /* Qwen3.5's rope_parameters (partial rotary, mrope) are hf_qwen35_parse's */
    json_t *rp = fam == F_QWEN35 ? NULL : field(o, "rope_parameters");
    json_t *full = NULL, *local = NULL;
    bool per_type = rp && json_is_object(rp) &&
                    (json_object_get(rp, "full_attention") || json_object_get(rp, "sliding_attention"));
    if (per_type) {
        full = field(rp, "full_attention");
        local = field(rp, "sliding_attention");
    } else if (rp && !rs) {
        full = rp;
    }
    if (full) {
        if (!json_is_object(full)) return error_set("%s: field \"rope_parameters\" must be an object", name);
        TRY(get_number(full, name, "rope_theta", false, c->rope_theta, &c->rope_theta));
        if (!rs) {
            rs = full;
            what = "rope_parameters";
        }
    }
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return error_set("%s: field \"rope_theta\" is %g but must be positive", name, c->rope_theta);
    TRY(parse_scaling(c, &c->rope_scaling, rs, name, what));
    if (fam != F_GEMMA3_TEXT) return 0;
    TRY(get_number(o, name, "rope_local_base_freq", false, 10000.0, &c->rope_local_theta));
    if (local) {
        if (!json_is_object(local)) return error_set("%s: field \"rope_parameters\" must be an object", name);
        TRY(get_number(local, name, "rope_theta", false, c->rope_local_theta, &c->rope_local_theta));
        RopeScaling ls;
        TRY(parse_scaling(c, &ls, local, name, "rope_parameters.sliding_attention"));
        if (ls.type != ROPE_SCALING_NONE)
            return error_set("%s: rope_parameters.sliding_attention: only the default RoPE is supported", name);
    }
    if (!(c->rope_local_theta > 0) || !isfinite(c->rope_local_theta))
        return error_set("%s: field \"rope_local_base_freq\" is %g but must be positive", name, c->rope_local_theta);
    return 0;
}

/* The text model's fields from object o (outer: the multimodal config
 * around it, for the fields it keeps at the top). */
static int parse_text(ModelConfig *c, const json_t *o, const json_t *outer, const char *name, int fam) {
    bool gemma = is_gemma(fam), qwen2 = fam == F_QWEN2, qwen3 = fam == F_QWEN3;
    bool req = !gemma; /* transformers' Gemma configs omit fields that have defaults */
    int vocab_def = fam == F_GEMMA2 ? 256000 : 262208;
    if (outer && field(outer, "vocab_size"))
        TRY(get_int(outer, name, "vocab_size", false, vocab_def, 1, 10000000, &vocab_def));

    /* sizes: positive and within limits that keep every product in range */
    TRY(get_int(o, name, "hidden_size", req, 2304, 1, 1000000, &c->hidden_size));
    TRY(get_int(o, name, "intermediate_size", req, 9216, 1, 4000000, &c->intermediate_size));
    TRY(get_int(o, name, "num_hidden_layers", req, 26, 1, HF_MAX_LAYERS, &c->num_hidden_layers));
    TRY(get_int(o, name, "num_attention_heads", req, 8, 1, 10000, &c->num_attention_heads));
    TRY(get_int(o, name, "vocab_size", req, vocab_def, 1, 10000000, &c->vocab_size));
    int H = c->num_attention_heads;
    TRY(get_int(o, name, "num_key_value_heads", false, gemma ? 4 : H, 1, 10000, &c->num_key_value_heads));
    if (H % c->num_key_value_heads != 0)
        return error_set("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", name, H,
                         c->num_key_value_heads);
    if (field(o, "head_dim") || gemma) {
        TRY(get_int(o, name, "head_dim", false, 256, 1, 65536, &c->head_dim));
    } else {
        if (qwen3) return error_set("%s: missing field \"head_dim\" (qwen3 configs set it)", name);
        if (c->hidden_size % H != 0)
            return error_set(
                "%s: hidden_size %d is not a multiple of num_attention_heads %d (and head_dim is not given)", name,
                c->hidden_size, H);
        c->head_dim = c->hidden_size / H;
        if (c->head_dim > 65536) /* the range an explicit head_dim is held to */
            return error_set(
                "%s: hidden_size / num_attention_heads = %d is outside the supported head_dim range [1, 65536]", name,
                c->head_dim);
    }
    if (c->head_dim % 2 != 0) return error_set("%s: head_dim %d must be even (RoPE rotates pairs)", name, c->head_dim);
    if ((long long)H * c->head_dim > 1000000)
        return error_set("%s: num_attention_heads x head_dim = %lld is too large", name, (long long)H * c->head_dim);
    int maxpos_def = fam == F_GEMMA3_TEXT ? 131072 : fam == F_GEMMA2 ? 8192 : fam == F_PHI3 ? 4096
                   : fam == F_SMOLLM3 ? 32768 : 2048;
    TRY(get_int(o, name, "max_position_embeddings", false, maxpos_def, 1, 1 << 30, &c->max_position_embeddings));

    double eps;
    bool eps_req = req && fam != F_PHI3 && fam != F_SMOLLM3;
    TRY(get_number(o, name, "rms_norm_eps", eps_req, fam == F_PHI3 ? 1e-5 : 1e-6, &eps));
    if (!(eps > 0 && eps < 1)) return error_set("%s: field \"rms_norm_eps\" is %g but must be in (0, 1)", name, eps);
    c->rms_norm_eps = (float)eps;
    if (!(c->rms_norm_eps >= 1e-30f)) /* also keeps it a normal float */
        return error_set("%s: field \"rms_norm_eps\" is %g, too small to be useful in float32", name, eps);

    /* rotary dims: partial_rotary_factor (phi3) */
    c->rotary_dim = c->head_dim;
    if (fam == F_PHI3) {
        double prf;
        TRY(get_number(o, name, "partial_rotary_factor", false, 1.0, &prf));
        if (!(prf > 0 && prf <= 1.0))
            return error_set("%s: field \"partial_rotary_factor\" is %g, not in (0, 1]", name, prf);
        c->rotary_dim = (int)(c->head_dim * prf);
        if (c->rotary_dim < 2 || c->rotary_dim % 2)
            return error_set("%s: partial_rotary_factor %g gives %d rotary dims of head_dim %d "
                             "(need a positive even number)", name, prf, c->rotary_dim, c->head_dim);
        TRY(get_int(o, name, "original_max_position_embeddings", false, 4096, 1, 1 << 30, &c->original_max_position));
    }
    TRY(parse_rope(c, o, name, fam));

    bool tie_def = gemma || fam == F_SMOLLM3;
    if (outer && field(outer, "tie_word_embeddings") && !field(o, "tie_word_embeddings"))
        TRY(get_bool(outer, name, "tie_word_embeddings", tie_def, &c->tie_word_embeddings));
    else TRY(get_bool(o, name, "tie_word_embeddings", tie_def, &c->tie_word_embeddings));
    if (qwen2) {
        c->attention_bias = true; /* Qwen2Attention always has q/k/v biases */
    } else if (fam != F_PHI3) {
        TRY(get_bool(o, name, "attention_bias", false, &c->attention_bias));
    }
    if (gemma && c->attention_bias)
        return error_set("%s: field \"attention_bias\" true is not supported for %s (its o_proj would have one too)",
                         name, families[fam].type);
    c->qk_norm = qwen3 || fam == F_GEMMA3_TEXT;
    TRY(parse_activation(c, o, name, fam));
    bool mlp_bias = false;
    TRY(get_bool(o, name, "mlp_bias", false, &mlp_bias));
    if (mlp_bias) return error_set("%s: field \"mlp_bias\" true is not supported", name);
    TRY(parse_token_ids(c, o, outer, name));
    TRY(parse_dtype(c, o, outer, name));

    if (gemma) {
        c->norm_plus_one = true;
        c->sandwich_norms = true;
        c->embed_scale = true;
        TRY(get_number(o, name, "query_pre_attn_scalar", false, 256.0, &c->query_pre_attn_scalar));
        if (!(c->query_pre_attn_scalar > 0) || !isfinite(c->query_pre_attn_scalar))
            return error_set("%s: field \"query_pre_attn_scalar\" is %g but must be positive", name,
                             c->query_pre_attn_scalar);
        /* absent: the class default (gemma2 50 and 30); null: none */
        bool g2 = fam == F_GEMMA2;
        bool attn_null = json_is_null(json_object_get(o, "attn_logit_softcapping"));
        bool final_null = json_is_null(json_object_get(o, "final_logit_softcapping"));
        TRY(get_number(o, name, "attn_logit_softcapping", false, g2 && !attn_null ? 50.0 : 0.0, &c->attn_softcap));
        TRY(get_number(o, name, "final_logit_softcapping", false, g2 && !final_null ? 30.0 : 0.0, &c->final_softcap));
        if (!(c->attn_softcap >= 0) || !(c->final_softcap >= 0) || !isfinite(c->attn_softcap + c->final_softcap))
            return error_set("%s: logit soft-capping values must be positive or null", name);
        bool bidi = false;
        TRY(get_bool(o, name, "use_bidirectional_attention", false, &bidi));
        if (bidi)
            return error_set("%s: field \"use_bidirectional_attention\" true (an embedding model) is not supported",
                             name);
    }
    if (fam == F_PHI3) {
        c->fused_qkv = true;
        c->fused_gate_up = true;
    }
    if (fam == F_SMOLLM3) TRY(parse_nope(c, o, name));
    return parse_windows(c, o, name, fam);
}

void hf_config_init(ModelConfig *c, const char *model_type) {
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "%s", model_type);
    snprintf(c->prefix, sizeof c->prefix, "model.");
    snprintf(c->adapter_prefix, sizeof c->adapter_prefix, "model.");
    snprintf(c->head_name, sizeof c->head_name, "lm_head.weight");
    c->hidden_act = HIDDEN_ACT_SILU;
    c->bos_token_id = -1;
}

static int parse_root(ModelConfig *c, const json_t *root, const char *name) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(root)) return error_set("%s: not a JSON object", name);
    json_t *mt = field(root, "model_type");
    if (!mt) return error_set("%s: missing field \"model_type\"", name);
    if (!json_is_string(mt)) return error_set("%s: field \"model_type\" must be a string", name);
    const char *type = json_string_value(mt);
    int fam = family_of(type);
    if (hf_qwen35_type(type)) {
        /* Qwen3.5: the common fields are read from the text config (nested or not) */
        const json_t *text;
        char text_name[600];
        TRY(hf_qwen35_select(root, type, name, &text));
        if (text != root) {
            snprintf(text_name, sizeof text_name, "%.560s: text_config", name);
            name = text_name;
        }
        snprintf(c->model_type, sizeof c->model_type, "%s", type);
        TRY(parse_text(c, text, NULL, name, F_QWEN35));
        TRY(hf_qwen35_parse(c, root, text, name));
        hf_qwen35_names(c);
        return 0;
    }
    if (fam < 0)
        return error_set("%s: model_type \"%.40s\" is not supported (supported: " HF_SUPPORTED_TYPES ")", name, type);
    snprintf(c->model_type, sizeof c->model_type, "%s", type);
    snprintf(c->prefix, sizeof c->prefix, "model.");
    snprintf(c->adapter_prefix, sizeof c->adapter_prefix, "model.");
    snprintf(c->head_name, sizeof c->head_name, "lm_head.weight");
    if (fam != F_GEMMA3) return parse_text(c, root, NULL, name, fam);
    /* multimodal gemma3: the text model's config is text_config; its
     * weights live under language_model (the vision tower is not used) */
    json_t *tc = field(root, "text_config");
    if (!tc) return error_set("%s: missing field \"text_config\" (a gemma3 config nests the text model's)", name);
    if (!json_is_object(tc)) return error_set("%s: field \"text_config\" must be an object", name);
    char sub[160];
    snprintf(sub, sizeof sub, "%s: text_config", name);
    TRY(parse_text(c, tc, root, sub, F_GEMMA3_TEXT));
    snprintf(c->prefix, sizeof c->prefix, "language_model.model.");
    snprintf(c->adapter_prefix, sizeof c->adapter_prefix, "language_model.model.");
    snprintf(c->head_name, sizeof c->head_name, "language_model.lm_head.weight");
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
    if (file_read_all(path, HF_MAX_CONFIG_BYTES, &text, NULL) < 0) {
        memset(c, 0, sizeof *c);
        return -1;
    }
    int rc = hf_config_parse(c, text, path);
    mem_free(text);
    return rc;
}

int hf_generation_config_eos(ModelConfig *c, const char *model_dir) {
    char *path = path_join(model_dir, "generation_config.json");
    TRY_PTR(path);
    char *text = NULL;
    if (!file_exists(path) || file_read_all(path, HF_MAX_CONFIG_BYTES, &text, NULL) < 0) {
        error_clear();
        mem_free(path);
        return 0;
    }
    json_t *root = json_loads(text, 0, NULL);
    mem_free(text);
    json_t *eos = json_is_object(root) ? json_object_get(root, "eos_token_id") : NULL;
    bool falsy = !eos || json_is_null(eos) || json_is_false(eos) || (json_is_integer(eos) && !json_integer_value(eos))
                 || (json_is_array(eos) && !json_array_size(eos));
    int rc = 0;
    if (!falsy) {
        ModelConfig g = *c;
        json_t *wrap = json_pack("{s:O}", "eos_token_id", eos);
        rc = wrap ? parse_token_ids_eos(&g, wrap, NULL, path) : error_set("%s: out of memory", path);
        json_decref(wrap);
        if (rc == 0) {
            memcpy(c->eos_token_ids, g.eos_token_ids, sizeof c->eos_token_ids);
            c->n_eos = g.n_eos;
        }
    }
    json_decref(root);
    mem_free(path);
    return rc;
}


float hf_attention_scale(const ModelConfig *c) {
    double s = c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar : (double)c->head_dim;
    return (float)(1.0 / sqrt(s));
}

/* ---- writer ---- */

/* Shortest decimal that reads back as the same float / double. */
static void fmt_float(char *buf, size_t cap, float x) {
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)x);
        if ((float)strtod(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", cap - strlen(buf) - 1);
}
static void fmt_double(char *buf, size_t cap, double x) {
    if (x == floor(x) && fabs(x) < 1e15) { /* 500000.0, not 5e+05 */
        snprintf(buf, cap, "%.1f", x);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", cap - strlen(buf) - 1);
}

/* A growing text buffer; a failed allocation is remembered and reported once. */
typedef struct {
    char *s;
    size_t k, cap;
    bool oom;
} Text;
static void emit(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(Text *t, const char *fmt, ...) {
    if (t->oom) return;
    if (!t->s) {
        t->cap = 4096;
        t->s = mem_alloc(t->cap);
        if (!t->s) {
            t->oom = true;
            return;
        }
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s + t->k, t->cap - t->k, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->k) {
            t->k += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *s = mem_realloc(t->s, cap);
        if (!s) {
            t->oom = true;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

static void emit_scaling(Text *t, const char *key, const RopeScaling *r, const ModelConfig *c) {
    char a[64], b[64], d[64];
    if (r->type == ROPE_SCALING_LLAMA3) {
        fmt_double(a, sizeof a, r->factor);
        fmt_double(b, sizeof b, r->low_freq_factor);
        fmt_double(d, sizeof d, r->high_freq_factor);
        emit(t, "  \"%s\": {\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, "
             "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d},\n", key, a, b, d,
             r->original_max_position);
    } else if (r->type == ROPE_SCALING_LINEAR) {
        fmt_double(a, sizeof a, r->factor);
        emit(t, "  \"%s\": {\"rope_type\": \"linear\", \"factor\": %s},\n", key, a);
    } else if (r->type == ROPE_SCALING_LONGROPE) {
        emit(t, "  \"%s\": {\"type\": \"longrope\"", key);
        double f = (double)c->max_position_embeddings / r->original_max_position;
        double af = f <= 1.0 ? 1.0 : sqrt(1.0 + log(f) / log((double)r->original_max_position));
        if (r->attention_factor != af) {
            fmt_double(a, sizeof a, r->attention_factor);
            emit(t, ", \"attention_factor\": %s", a);
        }
        const char *names[2] = {"short_factor", "long_factor"};
        for (int w = 0; w < 2; w++) {
            const float *v = w ? r->long_factor : r->short_factor;
            emit(t, ", \"%s\": [", names[w]);
            for (int i = 0; i < r->n_factors; i++) {
                fmt_float(a, sizeof a, v[i]);
                emit(t, "%s%s", i ? ", " : "", a);
            }
            emit(t, "]");
        }
        emit(t, "},\n");
    } else {
        emit(t, "  \"%s\": null,\n", key);
    }
}

/* The smallest p with sliding iff (i + 1) % p for every layer, or 0. */
static int sliding_pattern(const ModelConfig *c) {
    for (int p = 1; p <= c->num_hidden_layers + 1; p++) {
        bool ok = true;
        for (int i = 0; ok && i < c->num_hidden_layers; i++)
            ok = ((c->layer_flags[i] & LAYER_SLIDING) != 0) == ((i + 1) % p != 0);
        if (ok) return p;
    }
    return 0;
}

static void emit_layer_types(Text *t, const ModelConfig *c) {
    emit(t, "  \"layer_types\": [");
    for (int i = 0; i < c->num_hidden_layers; i++)
        emit(t, "%s\"%s\"", i ? ", " : "", c->layer_flags[i] & LAYER_SLIDING ? "sliding_attention" : "full_attention");
    emit(t, "],\n");
}

/* The family-specific fields. */
static void emit_family(Text *t, const ModelConfig *c, int fam) {
    char a[64];
    int L = c->num_hidden_layers, first_sliding = L, n_sliding = 0;
    for (int i = L - 1; i >= 0; i--)
        if (c->layer_flags[i] & LAYER_SLIDING) {
            first_sliding = i;
            n_sliding++;
        }
    if (is_gemma(fam)) {
        fmt_double(a, sizeof a, c->query_pre_attn_scalar);
        emit(t, "  \"query_pre_attn_scalar\": %s,\n", a);
        if (c->attn_softcap > 0) {
            fmt_double(a, sizeof a, c->attn_softcap);
            emit(t, "  \"attn_logit_softcapping\": %s,\n", a);
        } else emit(t, "  \"attn_logit_softcapping\": null,\n");
        if (c->final_softcap > 0) {
            fmt_double(a, sizeof a, c->final_softcap);
            emit(t, "  \"final_logit_softcapping\": %s,\n", a);
        } else emit(t, "  \"final_logit_softcapping\": null,\n");
        emit(t, "  \"sliding_window\": %d,\n", c->sliding_window);
        int p = sliding_pattern(c);
        if (p > 0) emit(t, "  \"sliding_window_pattern\": %d,\n", p); /* what MLX-LM reads */
        emit_layer_types(t, c);
        if (fam == F_GEMMA3_TEXT) {
            fmt_double(a, sizeof a, c->rope_local_theta);
            emit(t, "  \"rope_local_base_freq\": %s,\n", a);
        }
    } else if (fam == F_PHI3) {
        double prf = (double)c->rotary_dim / c->head_dim;
        while ((int)(c->head_dim * prf) < c->rotary_dim) prf = nextafter(prf, 2.0);
        fmt_double(a, sizeof a, prf);
        emit(t, "  \"partial_rotary_factor\": %s,\n", a);
        emit(t, "  \"original_max_position_embeddings\": %d,\n", c->original_max_position);
        if (n_sliding) emit(t, "  \"sliding_window\": %d,\n", c->sliding_window);
        else emit(t, "  \"sliding_window\": null,\n");
    } else if (fam == F_SMOLLM3) {
        emit(t, "  \"no_rope_layers\": [");
        for (int i = 0; i < L; i++) emit(t, "%s%d", i ? ", " : "", c->layer_flags[i] & LAYER_NOPE ? 0 : 1);
        emit(t, "],\n");
        if (c->sliding_window > 0) {
            emit(t, "  \"use_sliding_window\": true,\n  \"sliding_window\": %d,\n", c->sliding_window);
            emit_layer_types(t, c);
        } else emit(t, "  \"use_sliding_window\": false,\n");
    } else if (fam == F_MISTRAL) {
        if (c->sliding_window > 0) emit(t, "  \"sliding_window\": %d,\n", c->sliding_window);
    } else if (fam == F_QWEN2 || fam == F_QWEN3) {
        if (c->sliding_window > 0)
            emit(t, "  \"use_sliding_window\": true,\n  \"sliding_window\": %d,\n  \"max_window_layers\": %d,\n",
                 c->sliding_window, first_sliding);
    }
}

int hf_config_write(const ModelConfig *c, const char *path) {
    /* Round trip through the parser first: a struct the reader would refuse
     * (or read differently) is not written. */
    if (c->q35.on) return hf_qwen35_write(c, path);
    int fam = family_of(c->model_type);
    if (fam < 0)
        return error_set("%s: model_type \"%s\" is not supported (supported: " HF_SUPPORTED_TYPES ")", path,
                         c->model_type);
    if (fam == F_GEMMA3)
        return error_set("%s: writing a multimodal gemma3 config is not supported (write gemma3_text)", path);
    bool qwen2 = fam == F_QWEN2, qk = fam == F_QWEN3 || fam == F_GEMMA3_TEXT;
    if (c->qk_norm != qk)
        return error_set("%s: qk_norm is %s but model_type is %s", path, c->qk_norm ? "on" : "off", c->model_type);
    if (qwen2 && !c->attention_bias) return error_set("%s: qwen2 models always have attention biases", path);
    if (c->sliding_window && fam == F_LLAMA) return error_set("%s: llama models have no sliding_window", path);
    const char *dt = c->torch_dtype == DTYPE_BF16 ? "bfloat16" : c->torch_dtype == DTYPE_F16 ? "float16" : "float32";
    if (c->torch_dtype != DTYPE_F32 && c->torch_dtype != DTYPE_BF16 && c->torch_dtype != DTYPE_F16)
        return error_set("%s: torch_dtype %s cannot be written", path, dtype_name(c->torch_dtype));

    Text t = {0};
    char num[64];
    emit(&t, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", families[fam].architecture,
         c->model_type);
    if (is_gemma(fam)) emit(&t, "  \"hidden_activation\": \"gelu_pytorch_tanh\",\n");
    else emit(&t, "  \"hidden_act\": \"silu\",\n");
    emit(&t, "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n", c->hidden_size, c->intermediate_size);
    emit(&t, "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n", c->num_hidden_layers,
         c->num_attention_heads);
    emit(&t, "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n", c->num_key_value_heads, c->head_dim);
    emit(&t, "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n", c->vocab_size,
         c->max_position_embeddings);
    fmt_float(num, sizeof num, c->rms_norm_eps);
    emit(&t, "  \"rms_norm_eps\": %s,\n", num);
    fmt_double(num, sizeof num, c->rope_theta);
    emit(&t, "  \"rope_theta\": %s,\n", num);
    if (c->rope_scaling.type == ROPE_SCALING_FACTORS) {
        /* a GGUF's rope_freqs: config.json has no way to say it */
        mem_free(t.s);
        return error_set("%s: the RoPE frequency factors of a GGUF model have no config.json form", path);
    }
    emit_scaling(&t, "rope_scaling", &c->rope_scaling, c);
    emit(&t, "  \"tie_word_embeddings\": %s,\n", c->tie_word_embeddings ? "true" : "false");
    if (fam != F_PHI3) emit(&t, "  \"attention_bias\": %s,\n", c->attention_bias ? "true" : "false");
    emit_family(&t, c, fam);
    if (c->bos_token_id >= 0) emit(&t, "  \"bos_token_id\": %d,\n", c->bos_token_id);
    else emit(&t, "  \"bos_token_id\": null,\n");
    if (c->n_eos == 1) emit(&t, "  \"eos_token_id\": %d,\n", c->eos_token_ids[0]);
    else if (c->n_eos == 0) emit(&t, "  \"eos_token_id\": null,\n");
    else {
        emit(&t, "  \"eos_token_id\": [");
        for (int i = 0; i < c->n_eos; i++) emit(&t, "%s%d", i ? ", " : "", c->eos_token_ids[i]);
        emit(&t, "],\n");
    }
    emit(&t, "  \"torch_dtype\": \"%s\"\n}\n", dt);
    if (t.oom) {
        mem_free(t.s);
        return error_set("%s: out of memory formatting the config", path);
    }
    ModelConfig *back = mem_alloc(sizeof *back);
    if (!back) {
        mem_free(t.s);
        return -1;
    }
    int prc = hf_config_parse(back, t.s, path);
    bool same = prc == 0 && memcmp(back->layer_flags, c->layer_flags, (size_t)c->num_hidden_layers) == 0;
    mem_free(back);
    if (prc < 0) {
        mem_free(t.s);
        return error_prefix("refusing to write an invalid config");
    }
    if (!same) {
        mem_free(t.s);
        return error_set("%s: the layer types cannot be written for %s", path, c->model_type);
    }
    int rc = atomic_write_file(path, t.s, t.k);
    mem_free(t.s);
    return rc;
}

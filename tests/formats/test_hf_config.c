/* test_hf_config.c: config.json for each supported family (with the derived
 * defaults transformers uses), every missing / wrongly typed / zero or
 * negative required field, unsupported model types and rope scalings, and
 * the writer's round trip. */
#include "check.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/hf_config.h"
#include "model/model.h"
#include <math.h>
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

static const char *LLAMA =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":172,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":256,"
    "\"rms_norm_eps\":1e-05,\"hidden_act\":\"silu\"}";

/* With LMTUNE_SEED_CORPUS=DIR, every config text parsed here is also saved
 * there (the fuzzer's seed corpus, tests/fuzz/corpus/hf_config, tests/fuzz/run.sh --regen). */
static void corpus_save(const char *text) {
    static int counter = 0;
    const char *dir = getenv("LMTUNE_SEED_CORPUS");
    if (!dir) return;
    char p[512];
    snprintf(p, sizeof p, "%s/config_%03d.json", dir, counter++);
    FILE *fp = fopen(p, "w");
    if (fp) { fputs(text, fp); fclose(fp); }
}
static int parse(ModelConfig *c, const char *text) { corpus_save(text); return hf_config_parse(c, text, "config.json"); }

/* Parses `base` with `key` set to the JSON `value` (or removed when NULL). */
static int parse_with(ModelConfig *c, const char *base, const char *key, const char *value) {
    json_t *root = json_loads(base, 0, NULL);
    if (!root) { fprintf(stderr, "bad test JSON\n"); exit(2); }
    if (key) {
        if (value) json_object_set_new(root, key, json_loads(value, JSON_DECODE_ANY, NULL));
        else json_object_del(root, key);
    }
    char *s = json_dumps(root, 0);
    json_decref(root);
    int rc = parse(c, s);
    free(s);
    return rc;
}

static void test_families(void) {
    ModelConfig c;
    /* llama: derived defaults */
    CHECK(parse(&c, LLAMA) == 0);
    CHECK(strcmp(c.model_type, "llama") == 0);
    CHECK(c.hidden_size == 64 && c.intermediate_size == 172 && c.num_hidden_layers == 2 && c.vocab_size == 256);
    CHECK(c.num_attention_heads == 4 && c.num_key_value_heads == 2 && c.head_dim == 16);
    CHECK(c.rms_norm_eps == 1e-5f && c.rope_theta == 10000.0 && c.max_position_embeddings == 2048);
    CHECK(!c.tie_word_embeddings && !c.attention_bias && !c.qk_norm);
    CHECK(c.rope_scaling.type == ROPE_SCALING_NONE);
    CHECK(c.bos_token_id == -1 && c.n_eos == 0 && c.torch_dtype == DTYPE_F32);
    /* num_key_value_heads absent (or null) -> H */
    CHECK(parse_with(&c, LLAMA, "num_key_value_heads", NULL) == 0 && c.num_key_value_heads == 4);
    CHECK(parse_with(&c, LLAMA, "num_key_value_heads", "null") == 0 && c.num_key_value_heads == 4);
    /* llama 3.2 style: rope_scaling llama3, eos list, explicit head_dim, bias key */
    const char *l3 =
        "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":1,"
        "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":48,\"vocab_size\":128256,\"rms_norm_eps\":1e-05,"
        "\"rope_theta\":500000.0,\"max_position_embeddings\":131072,\"tie_word_embeddings\":true,\"attention_bias\":true,"
        "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
        "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"torch_dtype\":\"bfloat16\"}";
    CHECK(parse(&c, l3) == 0);
    CHECK(c.head_dim == 48 && c.rope_theta == 500000.0 && c.max_position_embeddings == 131072);
    CHECK(c.tie_word_embeddings && c.attention_bias && !c.qk_norm);
    CHECK(c.rope_scaling.type == ROPE_SCALING_LLAMA3 && c.rope_scaling.factor == 32.0 && c.rope_scaling.low_freq_factor == 1.0 &&
          c.rope_scaling.high_freq_factor == 4.0 && c.rope_scaling.original_max_position == 8192);
    CHECK(c.bos_token_id == 128000 && c.n_eos == 3 && c.eos_token_ids[0] == 128001 && c.eos_token_ids[2] == 128009);
    CHECK(c.torch_dtype == DTYPE_BF16);
    /* mistral: head_dim null, sliding_window ignored */
    const char *mistral =
        "{\"model_type\":\"mistral\",\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":1,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":null,\"vocab_size\":100,\"rms_norm_eps\":1e-06,"
        "\"rope_theta\":1000000.0,\"sliding_window\":null,\"bos_token_id\":1,\"eos_token_id\":2,\"torch_dtype\":\"float16\"}";
    CHECK(parse(&c, mistral) == 0);
    CHECK(strcmp(c.model_type, "mistral") == 0 && c.head_dim == 8 && c.num_key_value_heads == 1);
    CHECK(c.rms_norm_eps == 1e-6f && c.rope_theta == 1e6 && !c.attention_bias);
    CHECK(c.bos_token_id == 1 && c.n_eos == 1 && c.eos_token_ids[0] == 2 && c.torch_dtype == DTYPE_F16);
    /* qwen2: biases always (even when the key says false), tie read from the key */
    const char *qwen2 =
        "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":8,\"num_key_value_heads\":2,\"vocab_size\":300,\"rms_norm_eps\":1e-06,"
        "\"rope_theta\":1000000.0,\"tie_word_embeddings\":true,\"use_sliding_window\":false,\"sliding_window\":4096,"
        "\"eos_token_id\":151643}";
    CHECK(parse_with(&c, qwen2, "vocab_size", "151936") == 0);
    CHECK(c.attention_bias && c.tie_word_embeddings && !c.qk_norm && c.head_dim == 8 && c.eos_token_ids[0] == 151643);
    CHECK(parse_with(&c, "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
                         "\"num_attention_heads\":8,\"vocab_size\":300,\"rms_norm_eps\":1e-06}", "attention_bias", "false") == 0);
    CHECK(c.attention_bias && !c.tie_word_embeddings);
    /* qwen3: explicit head_dim != C/H, qk_norm, no bias by default */
    const char *qwen3 =
        "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":300,\"rms_norm_eps\":1e-06,"
        "\"rope_theta\":1000000,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\"}";
    CHECK(parse(&c, qwen3) == 0);
    CHECK(c.qk_norm && !c.attention_bias && c.head_dim == 32 && c.rope_theta == 1e6 && c.tie_word_embeddings);
    CHECK(parse_with(&c, qwen3, "attention_bias", "true") == 0 && c.attention_bias);
    CHECK(parse_with(&c, qwen3, "head_dim", NULL) == -1);
    CHECK_ERROR_CONTAINS("config.json: missing field \"head_dim\"");
    /* sliding windows: mistral's is read, qwen's only when enabled, llama has none */
    CHECK(parse_with(&c, mistral, "sliding_window", "4096") == 0 && c.sliding_window == 4096);
    CHECK(parse(&c, mistral) == 0 && c.sliding_window == 0);
    CHECK(parse_with(&c, qwen2, "vocab_size", "151936") == 0 && c.sliding_window == 0); /* use_sliding_window false */
    CHECK(parse_with(&c, "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
                         "\"num_attention_heads\":8,\"vocab_size\":300,\"rms_norm_eps\":1e-06,\"sliding_window\":512}",
                     "use_sliding_window", "true") == 0 && c.sliding_window == 512);
    CHECK(parse_with(&c, LLAMA, "sliding_window", "4096") == 0 && c.sliding_window == 0);
    CHECK(parse_with(&c, mistral, "sliding_window", "-1") == -1);
    CHECK_ERROR_CONTAINS("field \"sliding_window\" is -1, outside the supported range");
    /* newer transformers write "dtype" */
    CHECK(parse_with(&c, LLAMA, "dtype", "\"bfloat16\"") == 0 && c.torch_dtype == DTYPE_BF16);
    /* rope_scaling variants */
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"type\":\"linear\",\"factor\":2.0}") == 0);
    CHECK(c.rope_scaling.type == ROPE_SCALING_LINEAR && c.rope_scaling.factor == 2.0);
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"rope_type\":\"default\"}") == 0 && c.rope_scaling.type == ROPE_SCALING_NONE);
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "null") == 0 && c.rope_scaling.type == ROPE_SCALING_NONE);
}

/* The new families: what each config says about the block and its layers. */
static void test_new_families(void) {
    ModelConfig c;
    /* gemma3_text with the hub's fields (gemma-3-1b): pattern 6, two RoPE bases */
    const char *g3 =
        "{\"model_type\":\"gemma3_text\",\"hidden_size\":1152,\"intermediate_size\":6912,\"num_hidden_layers\":26,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":256,\"vocab_size\":262144,"
        "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"rope_local_base_freq\":10000.0,\"sliding_window\":512,"
        "\"sliding_window_pattern\":6,\"query_pre_attn_scalar\":256,\"hidden_activation\":\"gelu_pytorch_tanh\","
        "\"max_position_embeddings\":32768,\"rope_scaling\":null,\"final_logit_softcapping\":null,"
        "\"attn_logit_softcapping\":null,\"bos_token_id\":2,\"eos_token_id\":[1,106],\"torch_dtype\":\"bfloat16\"}";
    CHECK(parse(&c, g3) == 0);
    CHECK(c.norm_plus_one && c.sandwich_norms && c.qk_norm && c.embed_scale && !c.fused_qkv && !c.fused_gate_up);
    CHECK(c.hidden_act == HIDDEN_ACT_GELU_TANH && c.tie_word_embeddings && c.head_dim == 256);
    CHECK(c.query_pre_attn_scalar == 256 && c.attn_softcap == 0 && c.final_softcap == 0);
    CHECK(c.rope_theta == 1e6 && c.rope_local_theta == 1e4 && c.sliding_window == 512);
    int full = 0;
    for (int i = 0; i < 26; i++) full += !(c.layer_flags[i] & LAYER_SLIDING);
    CHECK(full == 4 && !(c.layer_flags[5] & LAYER_SLIDING) && (c.layer_flags[4] & LAYER_SLIDING) &&
          !(c.layer_flags[23] & LAYER_SLIDING) && (c.layer_flags[25] & LAYER_SLIDING));
    CHECK_NEAR(hf_attention_scale(&c), 1.0 / 16.0, 1e-9);
    CHECK(strcmp(c.prefix, "model.") == 0 && strcmp(c.adapter_prefix, "model.") == 0);
    /* layer_types wins over the pattern; rope_scaling applies to the full layers */
    CHECK(parse_with(&c, "{\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"intermediate_size\":96,"
                         "\"num_hidden_layers\":3,\"sliding_window\":8,\"rope_scaling\":{\"rope_type\":\"linear\","
                         "\"factor\":8.0}}", "layer_types",
                     "[\"full_attention\",\"sliding_attention\",\"full_attention\"]") == 0);
    CHECK(c.layer_flags[0] == 0 && c.layer_flags[1] == LAYER_SLIDING && c.layer_flags[2] == 0);
    CHECK(c.rope_scaling.type == ROPE_SCALING_LINEAR && c.rope_scaling.factor == 8.0);
    /* gemma defaults (transformers' Gemma3TextConfig): 8 heads of 256, 4 kv heads, eps 1e-6 */
    CHECK(c.num_attention_heads == 8 && c.num_key_value_heads == 4 && c.head_dim == 256 && c.rms_norm_eps == 1e-6f);
    CHECK(parse_with(&c, g3, "layer_types", "[\"sliding_attention\"]") == -1);
    CHECK_ERROR_CONTAINS("field \"layer_types\" has 1 entries for 26 layers");
    CHECK(parse_with(&c, g3, "hidden_activation", "\"silu\"") == -1);
    CHECK_ERROR_CONTAINS("field \"hidden_activation\" must be \"gelu_pytorch_tanh\"");
    CHECK(parse_with(&c, g3, "use_bidirectional_attention", "true") == -1);
    CHECK_ERROR_CONTAINS("use_bidirectional_attention");
    CHECK(parse_with(&c, g3, "attention_bias", "true") == -1);
    CHECK_ERROR_CONTAINS("\"attention_bias\" true is not supported for gemma3_text");
    /* transformers 5's rope_parameters per layer type */
    CHECK(parse_with(&c, g3, "rope_parameters",
                     "{\"full_attention\":{\"rope_type\":\"linear\",\"factor\":4.0,\"rope_theta\":500000.0},"
                     "\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":20000.0}}") == 0);
    CHECK(c.rope_theta == 500000.0 && c.rope_local_theta == 20000.0 && c.rope_scaling.type == ROPE_SCALING_LINEAR &&
          c.rope_scaling.factor == 4.0);
    /* multimodal gemma3: text_config nested, weights under language_model */
    const char *mm = "{\"model_type\":\"gemma3\",\"text_config\":{\"hidden_size\":2560,\"intermediate_size\":10240,"
                     "\"model_type\":\"gemma3_text\",\"num_hidden_layers\":34,\"rope_scaling\":{\"factor\":8.0,"
                     "\"rope_type\":\"linear\"},\"sliding_window\":1024},\"vision_config\":{\"hidden_size\":1152},"
                     "\"eos_token_id\":[1,106],\"torch_dtype\":\"bfloat16\"}";
    CHECK(parse(&c, mm) == 0);
    CHECK(strcmp(c.model_type, "gemma3") == 0 && c.hidden_size == 2560 && c.num_hidden_layers == 34);
    CHECK(c.num_attention_heads == 8 && c.num_key_value_heads == 4 && c.vocab_size == 262208);
    CHECK(c.tie_word_embeddings && c.n_eos == 2 && c.torch_dtype == DTYPE_BF16 && c.sliding_window == 1024);
    CHECK(strcmp(c.prefix, "language_model.model.") == 0 && strcmp(c.adapter_prefix, "language_model.model.") == 0);
    CHECK(strcmp(c.head_name, "language_model.lm_head.weight") == 0);
    CHECK(parse_with(&c, mm, "text_config", NULL) == -1);
    CHECK_ERROR_CONTAINS("missing field \"text_config\"");
    CHECK(parse_with(&c, mm, "text_config", "{\"hidden_size\":-3}") == -1);
    CHECK_ERROR_CONTAINS("config.json: text_config: field \"hidden_size\" is -3 but must be positive");
    /* gemma2: soft-capping, every other layer slides */
    const char *g2 = "{\"model_type\":\"gemma2\",\"hidden_size\":2304,\"intermediate_size\":9216,\"num_hidden_layers\":26,"
                     "\"num_attention_heads\":8,\"num_key_value_heads\":4,\"head_dim\":256,\"vocab_size\":256000,"
                     "\"rms_norm_eps\":1e-06,\"query_pre_attn_scalar\":256,\"sliding_window\":4096,"
                     "\"attn_logit_softcapping\":50.0,\"final_logit_softcapping\":30.0}";
    CHECK(parse(&c, g2) == 0);
    CHECK(c.attn_softcap == 50.0 && c.final_softcap == 30.0 && !c.qk_norm && c.rope_local_theta == 0);
    CHECK((c.layer_flags[0] & LAYER_SLIDING) && !(c.layer_flags[1] & LAYER_SLIDING) && c.sliding_window == 4096);
    CHECK(parse_with(&c, g2, "final_logit_softcapping", "null") == 0 && c.final_softcap == 0);
    /* phi3 / Phi-4-mini: fused projections, partial rotary, longrope */
    char factors[2][512];
    for (int w = 0; w < 2; w++) {
        size_t k = 0;
        k += (size_t)snprintf(factors[w] + k, sizeof factors[w] - k, "[");
        for (int i = 0; i < 48; i++)
            k += (size_t)snprintf(factors[w] + k, sizeof factors[w] - k, "%s%g", i ? "," : "", w ? 1.0 + i : 1.0);
        snprintf(factors[w] + k, sizeof factors[w] - k, "]");
    }
    char phi[2048];
    snprintf(phi, sizeof phi,
             "{\"model_type\":\"phi3\",\"hidden_size\":3072,\"intermediate_size\":8192,\"num_hidden_layers\":32,"
             "\"num_attention_heads\":24,\"num_key_value_heads\":8,\"vocab_size\":200064,\"rms_norm_eps\":1e-05,"
             "\"max_position_embeddings\":131072,\"original_max_position_embeddings\":4096,"
             "\"partial_rotary_factor\":0.75,\"sliding_window\":262144,\"tie_word_embeddings\":true,"
             "\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":%s,\"long_factor\":%s}}",
             factors[0], factors[1]);
    CHECK(parse(&c, phi) == 0);
    CHECK(c.fused_qkv && c.fused_gate_up && c.head_dim == 128 && c.rotary_dim == 96 && !c.norm_plus_one);
    CHECK(c.rope_scaling.type == ROPE_SCALING_LONGROPE && c.rope_scaling.n_factors == 48 &&
          c.rope_scaling.original_max_position == 4096 && c.rope_scaling.long_factor[47] == 48.0f);
    CHECK_NEAR(c.rope_scaling.attention_factor, sqrt(1.0 + log(32.0) / log(4096.0)), 1e-12);
    CHECK((c.layer_flags[0] & LAYER_SLIDING) && (c.layer_flags[31] & LAYER_SLIDING) && c.sliding_window == 262144);
    CHECK(parse_with(&c, phi, "partial_rotary_factor", "0.5") == -1);
    CHECK_ERROR_CONTAINS("has 48 factors but the rotary dims need 32");
    CHECK(parse_with(&c, phi, "partial_rotary_factor", "0.003") == -1);
    CHECK_ERROR_CONTAINS("partial_rotary_factor 0.003 gives 0 rotary dims");
    /* smollm3: NoPE layers from the list or the interval */
    const char *sm = "{\"model_type\":\"smollm3\",\"hidden_size\":2048,\"intermediate_size\":11008,"
                     "\"num_hidden_layers\":8,\"num_attention_heads\":16,\"num_key_value_heads\":4,"
                     "\"vocab_size\":128256,\"rope_theta\":5000000.0}";
    CHECK(parse(&c, sm) == 0);
    CHECK(c.tie_word_embeddings && c.rms_norm_eps == 1e-6f && c.sliding_window == 0);
    CHECK(c.layer_flags[3] == LAYER_NOPE && c.layer_flags[7] == LAYER_NOPE && c.layer_flags[0] == 0);
    CHECK(parse_with(&c, sm, "no_rope_layers", "[1,0,1,1,1,1,1,0]") == 0);
    CHECK(c.layer_flags[1] == LAYER_NOPE && c.layer_flags[3] == 0 && c.layer_flags[7] == LAYER_NOPE);
    CHECK(parse_with(&c, sm, "no_rope_layers", "[1,0,2,1,1,1,1,0]") == -1);
    CHECK_ERROR_CONTAINS("\"no_rope_layers\" entry 2 must be 0 or 1");
    CHECK(parse_with(&c, sm, "no_rope_layers", "[1,0]") == -1);
    CHECK_ERROR_CONTAINS("at least 8 zeros and ones");
    /* qwen2's window starts at max_window_layers; mistral's covers every layer */
    CHECK(parse_with(&c, "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":96,"
                         "\"num_hidden_layers\":4,\"num_attention_heads\":8,\"vocab_size\":300,\"rms_norm_eps\":1e-06,"
                         "\"use_sliding_window\":true,\"sliding_window\":16}", "max_window_layers", "2") == 0);
    CHECK(c.layer_flags[1] == 0 && c.layer_flags[2] == LAYER_SLIDING && c.layer_flags[3] == LAYER_SLIDING);
}

static void test_errors(void) {
    ModelConfig c;
    /* model_type */
    CHECK(parse_with(&c, LLAMA, "model_type", "\"gpt2\"") == -1);
    CHECK_ERROR_CONTAINS("config.json: model_type \"gpt2\" is not supported (supported: llama, mistral, qwen2, qwen3, "
                         "qwen3_5, qwen3_5_text, gemma2, gemma3_text, gemma3, phi3, smollm3)");
    CHECK(parse_with(&c, LLAMA, "model_type", "\"Llama\"") == -1);
    CHECK_ERROR_CONTAINS("model_type \"Llama\" is not supported");
    CHECK(parse_with(&c, LLAMA, "model_type", NULL) == -1);
    CHECK_ERROR_CONTAINS("config.json: missing field \"model_type\"");
    CHECK(parse_with(&c, LLAMA, "model_type", "3") == -1);
    CHECK_ERROR_CONTAINS("config.json: field \"model_type\" must be a string");
    /* every required integer: missing, wrong type (string, float, bool), zero, negative */
    const char *ints[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"};
    char want[160];
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        CHECK(parse_with(&c, LLAMA, ints[i], NULL) == -1);
        snprintf(want, sizeof want, "config.json: missing field \"%s\"", ints[i]);
        CHECK_ERROR_CONTAINS(want);
        const char *bad_types[] = {"\"64\"", "64.0", "true", "[64]"};
        for (int k = 0; k < 4; k++) {
            CHECK(parse_with(&c, LLAMA, ints[i], bad_types[k]) == -1);
            snprintf(want, sizeof want, "config.json: field \"%s\" must be an integer", ints[i]);
            CHECK_ERROR_CONTAINS(want);
        }
        CHECK(parse_with(&c, LLAMA, ints[i], "0") == -1);
        snprintf(want, sizeof want, "config.json: field \"%s\" is 0 but must be positive", ints[i]);
        CHECK_ERROR_CONTAINS(want);
        CHECK(parse_with(&c, LLAMA, ints[i], "-4") == -1);
        snprintf(want, sizeof want, "config.json: field \"%s\" is -4 but must be positive", ints[i]);
        CHECK_ERROR_CONTAINS(want);
    }
    /* optional integers: wrong type, zero */
    const char *opt[] = {"num_key_value_heads", "head_dim", "max_position_embeddings"};
    for (size_t i = 0; i < 3; i++) {
        CHECK(parse_with(&c, LLAMA, opt[i], "\"8\"") == -1);
        snprintf(want, sizeof want, "field \"%s\" must be an integer", opt[i]);
        CHECK_ERROR_CONTAINS(want);
        CHECK(parse_with(&c, LLAMA, opt[i], "0") == -1);
        snprintf(want, sizeof want, "field \"%s\" is 0 but must be positive", opt[i]);
        CHECK_ERROR_CONTAINS(want);
    }
    /* rms_norm_eps: missing, string, zero, negative */
    CHECK(parse_with(&c, LLAMA, "rms_norm_eps", NULL) == -1);
    CHECK_ERROR_CONTAINS("config.json: missing field \"rms_norm_eps\"");
    CHECK(parse_with(&c, LLAMA, "rms_norm_eps", "\"1e-5\"") == -1);
    CHECK_ERROR_CONTAINS("config.json: field \"rms_norm_eps\" must be a number");
    CHECK(parse_with(&c, LLAMA, "rms_norm_eps", "0") == -1);
    CHECK_ERROR_CONTAINS("field \"rms_norm_eps\" is 0 but must be in (0, 1)");
    CHECK(parse_with(&c, LLAMA, "rms_norm_eps", "-1e-6") == -1);
    CHECK_ERROR_CONTAINS("must be in (0, 1)");
    CHECK(parse_with(&c, LLAMA, "rms_norm_eps", "1e-205") == -1); /* found by the fuzzer: 0 as a float */
    CHECK_ERROR_CONTAINS("field \"rms_norm_eps\" is 1e-205, too small to be useful in float32");
    CHECK(parse_with(&c, LLAMA, "rope_theta", "0") == -1);
    CHECK_ERROR_CONTAINS("field \"rope_theta\" is 0 but must be positive");
    CHECK(parse_with(&c, LLAMA, "rope_theta", "\"1e4\"") == -1);
    CHECK_ERROR_CONTAINS("field \"rope_theta\" must be a number");
    /* booleans */
    CHECK(parse_with(&c, LLAMA, "tie_word_embeddings", "1") == -1);
    CHECK_ERROR_CONTAINS("field \"tie_word_embeddings\" must be true or false");
    CHECK(parse_with(&c, LLAMA, "attention_bias", "\"yes\"") == -1);
    CHECK_ERROR_CONTAINS("field \"attention_bias\" must be true or false");
    /* head arithmetic */
    CHECK(parse_with(&c, LLAMA, "num_key_value_heads", "3") == -1);
    CHECK_ERROR_CONTAINS("num_attention_heads 4 is not a multiple of num_key_value_heads 3");
    CHECK(parse_with(&c, LLAMA, "num_key_value_heads", "8") == -1);
    CHECK_ERROR_CONTAINS("num_attention_heads 4 is not a multiple of num_key_value_heads 8");
    CHECK(parse_with(&c, LLAMA, "num_attention_heads", "6") == -1);
    CHECK_ERROR_CONTAINS("hidden_size 64 is not a multiple of num_attention_heads 6");
    CHECK(parse_with(&c, LLAMA, "head_dim", "15") == -1);
    CHECK_ERROR_CONTAINS("head_dim 15 must be even");
    /* absurd sizes */
    CHECK(parse_with(&c, LLAMA, "hidden_size", "2000000") == -1);
    CHECK_ERROR_CONTAINS("field \"hidden_size\" is 2000000, outside the supported range");
    CHECK(parse_with(&c, LLAMA, "vocab_size", "99999999999") == -1);
    CHECK_ERROR_CONTAINS("field \"vocab_size\" is 99999999999, outside the supported range");
    CHECK(parse_with(&c, LLAMA, "num_hidden_layers", "1000000") == -1);
    CHECK_ERROR_CONTAINS("field \"num_hidden_layers\" is 1000000, outside");
    /* rope_scaling */
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":4.0}") == -1);
    CHECK_ERROR_CONTAINS("config.json: rope_scaling type \"yarn\" is not supported "
                         "(supported: llama3, linear, longrope)");
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"type\":\"dynamic\",\"factor\":4.0}") == -1);
    CHECK_ERROR_CONTAINS("rope_scaling type \"dynamic\" is not supported");
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0}") == -1);
    CHECK_ERROR_CONTAINS("config.json: rope_scaling: missing field \"original_max_position_embeddings\"");
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4.0,\"high_freq_factor\":1.0,"
                                                "\"original_max_position_embeddings\":8192}") == -1);
    CHECK_ERROR_CONTAINS("need 0 < low_freq_factor < high_freq_factor");
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"rope_type\":\"linear\"}") == -1);
    CHECK_ERROR_CONTAINS("rope_scaling: missing field \"factor\"");
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"rope_type\":\"linear\",\"factor\":0.5}") == -1);
    CHECK_ERROR_CONTAINS("factor 0.5 must be a finite number >= 1");
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "{\"factor\":2}") == -1);
    CHECK_ERROR_CONTAINS("rope_scaling: missing field \"rope_type\"");
    CHECK(parse_with(&c, LLAMA, "rope_scaling", "\"linear\"") == -1);
    CHECK_ERROR_CONTAINS("field \"rope_scaling\" must be an object or null");
    /* token ids */
    CHECK(parse_with(&c, LLAMA, "eos_token_id", "256") == -1);
    CHECK_ERROR_CONTAINS("field \"eos_token_id\" has 256, outside the vocabulary [0, 256)");
    CHECK(parse_with(&c, LLAMA, "eos_token_id", "[1, \"2\"]") == -1);
    CHECK_ERROR_CONTAINS("field \"eos_token_id\" must be an integer or a list of integers");
    CHECK(parse_with(&c, LLAMA, "eos_token_id", "[1,2,3,4,5,6,7,8,9]") == -1);
    CHECK_ERROR_CONTAINS("lists 9 ids, more than the supported 8");
    CHECK(parse_with(&c, LLAMA, "bos_token_id", "-1") == -1);
    CHECK_ERROR_CONTAINS("field \"bos_token_id\" is -1, outside the vocabulary");
    CHECK(parse_with(&c, LLAMA, "bos_token_id", "null") == 0 && c.bos_token_id == -1);
    /* dtype, activation, mlp bias */
    CHECK(parse_with(&c, LLAMA, "torch_dtype", "\"float64\"") == -1);
    CHECK_ERROR_CONTAINS("field \"torch_dtype\" is \"float64\" (supported: float32, bfloat16, float16)");
    CHECK(parse_with(&c, LLAMA, "hidden_act", "\"gelu\"") == -1);
    CHECK_ERROR_CONTAINS("field \"hidden_act\" must be \"silu\"");
    CHECK(parse_with(&c, LLAMA, "mlp_bias", "true") == -1);
    CHECK_ERROR_CONTAINS("\"mlp_bias\" true is not supported");
    /* not JSON, not an object, duplicate key */
    CHECK(parse(&c, "{\"model_type\": \"llama\",") == -1);
    CHECK_ERROR_CONTAINS("config.json: not valid JSON");
    CHECK(parse(&c, "[1]") == -1);
    CHECK_ERROR_CONTAINS("config.json: not a JSON object");
    CHECK(parse(&c, "{\"model_type\":\"llama\",\"model_type\":\"gpt2\"}") == -1);
    CHECK_ERROR_CONTAINS("duplicate object key");
}

static void test_files_and_roundtrip(void) {
    char dir[] = "/tmp/lt_cfg_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(2); }
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ModelConfig c, back;
    CHECK(hf_config_load(&c, path) == -1);
    CHECK_ERROR_CONTAINS("config.json: cannot open");
    FILE *fp = fopen(path, "w");
    fputs("{\"model_type\":\"llama\"}", fp);
    fclose(fp);
    CHECK(hf_config_load(&c, path) == -1);
    CHECK_ERROR_CONTAINS(path);
    CHECK_ERROR_CONTAINS("missing field \"hidden_size\"");

    const char *cases[] = {
        LLAMA,
        "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":1,"
        "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":48,\"vocab_size\":128256,\"rms_norm_eps\":1e-05,"
        "\"rope_theta\":500000.0,\"tie_word_embeddings\":true,\"attention_bias\":true,"
        "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
        "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"torch_dtype\":\"bfloat16\"}",
        "{\"model_type\":\"mistral\",\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
        "\"vocab_size\":100,\"rms_norm_eps\":3.3e-06,\"sliding_window\":4096,\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.5},\"eos_token_id\":2,"
        "\"torch_dtype\":\"float16\"}",
        "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,\"num_attention_heads\":8,"
        "\"num_key_value_heads\":2,\"vocab_size\":300,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"tie_word_embeddings\":true}",
        "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":300,\"rms_norm_eps\":1e-06,\"rope_theta\":1234567.89}",
    };
    const char *archs[] = {"LlamaForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                           "Qwen3ForCausalLM"};
    for (int i = 0; i < 5; i++) {
        CHECK(hf_config_parse(&c, cases[i], "case") == 0);
        CHECK(hf_config_write(&c, path) == 0);
        CHECK(hf_config_load(&back, path) == 0);
        CHECK_MSG(memcmp(&c, &back, sizeof c) == 0, "case %d does not round-trip", i);
        CHECK(back.rms_norm_eps == c.rms_norm_eps && back.rope_theta == c.rope_theta && back.head_dim == c.head_dim);
        char *text = NULL;
        CHECK(file_read_all(path, 0, &text, NULL) == 0);
        json_t *j = json_loads(text, 0, NULL);
        CHECK(j && strcmp(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)), archs[i]) == 0);
        CHECK(j && strcmp(json_string_value(json_object_get(j, "model_type")), c.model_type) == 0);
        json_decref(j);
        mem_free(text);
    }
    /* every preset (each family's fields: layer types, NoPE layers, longrope
     * factors, partial rotary, soft-capping) reads back as the same struct */
    const char *presets[] = {"gemma-3-270m", "gemma-3-1b", "phi-4-mini", "smollm3-3b", "llama-3.2-1b", "qwen3-0.6b"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        CHECK(model_preset(presets[i], &c) == 0);
        CHECK_MSG(hf_config_write(&c, path) == 0, "%s: %s", presets[i], error_message());
        CHECK(hf_config_load(&back, path) == 0);
        CHECK_MSG(memcmp(&c, &back, sizeof c) == 0, "preset %s does not round-trip", presets[i]);
    }
    CHECK(hf_config_parse(&c, "{\"model_type\":\"gemma2\",\"hidden_size\":32,\"intermediate_size\":64,"
                              "\"num_hidden_layers\":3,\"vocab_size\":100,\"rms_norm_eps\":1e-06,"
                              "\"layer_types\":[\"full_attention\",\"sliding_attention\",\"sliding_attention\"]}", "g2") == 0);
    CHECK(hf_config_write(&c, path) == 0 && hf_config_load(&back, path) == 0);
    CHECK(memcmp(&c, &back, sizeof c) == 0 && back.attn_softcap == 50.0 && back.layer_flags[0] == 0);
    /* shortest decimals in the file */
    CHECK(hf_config_parse(&c, cases[0], "case") == 0 && hf_config_write(&c, path) == 0);
    char *text = NULL;
    CHECK(file_read_all(path, 0, &text, NULL) == 0);
    CHECK(text && strstr(text, "\"rms_norm_eps\": 1e-05,") && strstr(text, "\"rope_theta\": 10000.0,"));
    mem_free(text);
    /* inconsistent structs are refused and nothing is written */
    CHECK(hf_config_parse(&c, cases[3], "case") == 0);
    c.attention_bias = false;
    CHECK(hf_config_write(&c, path) == -1);
    CHECK_ERROR_CONTAINS("qwen2 models always have attention biases");
    CHECK(hf_config_parse(&c, cases[0], "case") == 0);
    c.qk_norm = true;
    CHECK(hf_config_write(&c, path) == -1);
    CHECK_ERROR_CONTAINS("qk_norm is on but model_type is llama");
    c.qk_norm = false;
    c.num_key_value_heads = 3;
    CHECK(hf_config_write(&c, path) == -1);
    CHECK_ERROR_CONTAINS("refusing to write an invalid config");
    snprintf(c.model_type, sizeof c.model_type, "gpt2");
    CHECK(hf_config_write(&c, path) == -1);
    CHECK_ERROR_CONTAINS("model_type \"gpt2\" is not supported");
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_families();
    test_new_families();
    test_errors();
    test_files_and_roundtrip();
    return check_finish("formats/hf_config");
}

/* test_hf_config_qwen35.c: config.json of Qwen3.5: the published nested
 * layout (the text_config of Qwen/Qwen3.5-0.8B, fields as transformers
 * writes them), the flat text-only layout, layer kinds from layer_types or
 * full_attention_interval, partial rotary, fields kept at the top level only,
 * every refusal with its message (MoE, attn_output_gate false, bad
 * layer_types, unsupported rope types, odd rotary dims, value heads not a
 * multiple of key heads), and the writer's round trip in both layouts. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "base/error.h"
#include "formats/hf_config.h"

static const char *TEXT_08B =
    "\"attention_bias\": false, \"attention_dropout\": 0.0, \"attn_output_gate\": true, \"dtype\": \"bfloat16\","
    "\"eos_token_id\": 248044, \"full_attention_interval\": 4, \"head_dim\": 256, \"hidden_act\": \"silu\","
    "\"hidden_size\": 1024, \"initializer_range\": 0.02, \"intermediate_size\": 3584,"
    "\"layer_types\": [\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\","
    "\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\","
    "\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\","
    "\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\","
    "\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\","
    "\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\"],"
    "\"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 128, \"linear_num_key_heads\": 16,"
    "\"linear_num_value_heads\": 16, \"linear_value_head_dim\": 128, \"mamba_ssm_dtype\": \"float32\","
    "\"max_position_embeddings\": 262144, \"mlp_only_layers\": [], \"model_type\": \"qwen3_5_text\","
    "\"mtp_num_hidden_layers\": 1, \"mtp_use_dedicated_embeddings\": false, \"num_attention_heads\": 8,"
    "\"num_hidden_layers\": 24, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06,"
    "\"rope_parameters\": {\"mrope_interleaved\": true, \"mrope_section\": [11, 11, 10], \"rope_type\": \"default\","
    "\"rope_theta\": 10000000, \"partial_rotary_factor\": 0.25},"
    "\"tie_word_embeddings\": true, \"use_cache\": true, \"vocab_size\": 248320";

static char buf[16384];

static const char *nested(const char *text_extra, const char *top_extra) {
    snprintf(buf, sizeof buf, "{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"image_token_id\": 248056,"
             "\"model_type\": \"qwen3_5\", \"text_config\": {%s%s}, \"tie_word_embeddings\": true,"
             "\"video_token_id\": 248057, \"vision_config\": {\"depth\": 12, \"hidden_size\": 768,"
             "\"model_type\": \"qwen3_5\"}, \"vision_end_token_id\": 248054, \"vision_start_token_id\": 248053%s}",
             TEXT_08B, text_extra, top_extra);
    return buf;
}

static const char *replaced(const char *from, const char *to, bool nest);

static void expect_error(const char *json, const char *needle) {
    ModelConfig c;
    CHECK_MSG(hf_config_parse(&c, json, "config.json") < 0, "accepted: expected \"%s\"", needle);
    CHECK_ERROR_CONTAINS(needle);
}

/* The published Qwen3.5-0.8B layout. */
static void test_published(void) {
    ModelConfig c;
    CHECK(hf_config_parse(&c, nested("", ""), "config.json") == 0);
    CHECK(!strcmp(c.model_type, "qwen3_5"));
    CHECK(c.q35.on && c.q35.nested);
    CHECK(c.hidden_size == 1024 && c.intermediate_size == 3584 && c.num_hidden_layers == 24);
    CHECK(c.num_attention_heads == 8 && c.num_key_value_heads == 2 && c.head_dim == 256);
    CHECK(c.vocab_size == 248320 && c.tie_word_embeddings && c.qk_norm && !c.attention_bias);
    CHECK(c.q35.k_heads == 16 && c.q35.v_heads == 16 && c.q35.k_dim == 128 && c.q35.v_dim == 128);
    CHECK(c.q35.conv_kernel == 4 && c.q35.rotary_dim == 64 && c.rope_theta == 1e7);
    CHECK(c.q35.n_linear == 18 && c.q35.linear[0] && c.q35.linear[2] && !c.q35.linear[3] && !c.q35.linear[23]);
    CHECK(c.torch_dtype == DTYPE_BF16 && c.n_eos == 1 && c.eos_token_ids[0] == 248044);
    CHECK(!strcmp(c.q35.prefix, "model.language_model.") && !strcmp(c.q35.adapter_prefix, "language_model.model."));
    CHECK(!strcmp(c.q35.head_name, "lm_head.weight"));
}

static void test_variants(void) {
    ModelConfig c;
    /* flat, text-only (Qwen3_5ForCausalLM), kinds from the interval, untied */
    const char *flat = "{\"model_type\": \"qwen3_5_text\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                       "\"num_hidden_layers\": 6, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                       "\"head_dim\": 32, \"vocab_size\": 300, \"rms_norm_eps\": 1e-6, \"full_attention_interval\": 3,"
                       "\"linear_num_key_heads\": 2, \"linear_num_value_heads\": 6, \"linear_key_head_dim\": 16,"
                       "\"linear_value_head_dim\": 8}";
    CHECK(hf_config_parse(&c, flat, "config.json") == 0);
    CHECK(c.q35.on && !c.q35.nested && !c.tie_word_embeddings);
    CHECK(c.q35.n_linear == 4 && c.q35.linear[0] && c.q35.linear[1] && !c.q35.linear[2] && !c.q35.linear[5]);
    CHECK(c.q35.rotary_dim == 8 && c.rope_theta == 10000.0);    /* transformers' defaults: 0.25, 10000 */
    CHECK(!strcmp(c.q35.prefix, "model.") && !strcmp(c.q35.adapter_prefix, "model."));
    /* tie_word_embeddings and dtype at the top level only */
    snprintf(buf, sizeof buf, "{\"model_type\": \"qwen3_5\", \"tie_word_embeddings\": true,"
             "\"torch_dtype\": \"bfloat16\", \"text_config\": {\"hidden_size\": 32, \"intermediate_size\": 64,"
             "\"num_hidden_layers\": 4,"
             "\"num_attention_heads\": 2, \"head_dim\": 16, \"vocab_size\": 100, \"rms_norm_eps\": 1e-6,"
             "\"linear_num_key_heads\": 1, \"linear_num_value_heads\": 1, \"linear_key_head_dim\": 8,"
             "\"linear_value_head_dim\": 8}}");
    CHECK(hf_config_parse(&c, buf, "config.json") == 0);
    CHECK(c.tie_word_embeddings && c.torch_dtype == DTYPE_BF16 && c.q35.n_linear == 3);
    /* the text config wins over the top level (which says true) */
    CHECK(hf_config_parse(&c, replaced("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", true),
                          "config.json") == 0);
    CHECK(!c.tie_word_embeddings);
}

/* {TEXT_08B with one substring replaced}, a flat config; nested when `nest`. */
static const char *replaced(const char *from, const char *to, bool nest) {
    char t[8192];
    const char *at = strstr(TEXT_08B, from);
    if (!at) {
        CHECK_MSG(0, "fixture has no \"%s\"", from);
        return "{}";
    }
    snprintf(t, sizeof t, "%.*s%s%s", (int)(at - TEXT_08B), TEXT_08B, to, at + strlen(from));
    if (nest) snprintf(buf, sizeof buf, "{\"model_type\": \"qwen3_5\", \"text_config\": {%s}}", t);
    else snprintf(buf, sizeof buf, "{%s}", t);
    return buf;
}

static void test_refusals(void) {
    expect_error("{\"model_type\": \"qwen3_5_moe\", \"text_config\": {}}", "mixture-of-experts");
    expect_error(nested(", \"num_experts\": 256", ""), "mixture-of-experts");
    expect_error(replaced("\"mlp_only_layers\": []", "\"mlp_only_layers\": [1]", true), "mlp_only_layers");
    expect_error(replaced("\"attn_output_gate\": true", "\"attn_output_gate\": false", true), "attn_output_gate");
    expect_error(replaced("\"full_attention\"],", "\"dense_attention\"],", false), "layer_types[23]");
    expect_error(replaced("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", false),
                 "rope_type \"yarn\" is not supported");
    expect_error(replaced("\"partial_rotary_factor\": 0.25", "\"partial_rotary_factor\": 0.013", false),
                 "rotary dims");
    expect_error(replaced("\"linear_num_value_heads\": 16", "\"linear_num_value_heads\": 24", false),
                 "not a multiple of linear_num_key_heads");
    expect_error(replaced("\"linear_key_head_dim\": 128", "\"linear_key_head_dim\": -128", true),
                 "\"linear_key_head_dim\" is -128 but must be positive");
    expect_error(replaced("\"linear_conv_kernel_dim\": 4", "\"linear_conv_kernel_dim\": 17", false),
                 "linear_conv_kernel_dim");
    expect_error("{\"model_type\": \"qwen3_5_text\", \"text_config\": {}}", "only qwen3_5 nests one");
    expect_error("{\"model_type\": \"qwen3_5\", \"text_config\": 3}", "\"text_config\" must be an object");
    expect_error("{\"model_type\": \"qwen3_5\", \"text_config\": {\"hidden_size\": 8}}",
                 "config.json: text_config:");
}

static void test_write_back(void) {
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/lmtune_q35_config_%d.json", dir, (int)getpid());
    for (int flat = 0; flat < 2; flat++) {
        ModelConfig a, b;
        CHECK(hf_config_parse(&a, nested("", ""), "config.json") == 0);
        a.q35.nested = !flat;
        CHECK(hf_config_write(&a, path) == 0);
        CHECK(hf_config_load(&b, path) == 0);
        CHECK(b.q35.nested == !flat && b.q35.n_linear == a.q35.n_linear && b.q35.rotary_dim == a.q35.rotary_dim);
        CHECK(b.hidden_size == a.hidden_size && b.rope_theta == a.rope_theta && b.rms_norm_eps == a.rms_norm_eps);
        CHECK(memcmp(b.q35.linear, a.q35.linear, (size_t)a.num_hidden_layers) == 0);
        CHECK(b.tie_word_embeddings == a.tie_word_embeddings && b.torch_dtype == a.torch_dtype);
        CHECK(!strcmp(b.model_type, flat ? "qwen3_5_text" : "qwen3_5"));
    }
    remove(path);
}

int main(void) {
    test_published();
    test_variants();
    test_refusals();
    test_write_back();
    return check_finish("formats/hf_config_qwen35");
}

/* test_model_tensors.c: the expected tensor list of each family, and the
 * "model vs config" checks on real files: a shape that disagrees with
 * config.json (hidden size, heads, vocab), a missing tensor, a wrong dtype,
 * in one file and in shards, opened fully and header-only. */
#include "check.h"
#include "base/alloc.h"
#include "base/error.h"
#include "formats/hf_config.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

static char tmpdir[64];

static const char *LLAMA =
    "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":96,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":50,\"rms_norm_eps\":1e-05}";
static const char *QWEN2 =
    "{\"model_type\":\"qwen2\",\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":3,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"vocab_size\":40,\"rms_norm_eps\":1e-06,\"tie_word_embeddings\":true}";
static const char *QWEN3 =
    "{\"model_type\":\"qwen3\",\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":1,"
    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":24,\"vocab_size\":40,\"rms_norm_eps\":1e-06}";

static const ModelTensorSpec *find_spec(const ModelTensorSpec *s, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++) if (strcmp(s[i].name, name) == 0) return &s[i];
    return NULL;
}

static bool shape_is(const ModelTensorSpec *t, int ndim, int64_t d0, int64_t d1) {
    return t && t->ndim == ndim && t->shape[0] == d0 && (ndim < 2 || t->shape[1] == d1);
}

static void test_specs(void) {
    ModelConfig c;
    ModelTensorSpec *s;
    size_t n;
    CHECK(hf_config_parse(&c, LLAMA, "config.json") == 0);
    CHECK(model_tensor_specs(&c, &s, &n) == 0);
    CHECK(n == 3 + 2 * 9);
    CHECK(strcmp(s[0].name, "model.embed_tokens.weight") == 0 && shape_is(&s[0], 2, 50, 64));
    CHECK(shape_is(find_spec(s, n, "model.layers.1.input_layernorm.weight"), 1, 64, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.1.self_attn.q_proj.weight"), 2, 64, 64));
    CHECK(shape_is(find_spec(s, n, "model.layers.1.self_attn.k_proj.weight"), 2, 32, 64));
    CHECK(shape_is(find_spec(s, n, "model.layers.1.self_attn.v_proj.weight"), 2, 32, 64));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.o_proj.weight"), 2, 64, 64));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.post_attention_layernorm.weight"), 1, 64, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.mlp.gate_proj.weight"), 2, 96, 64));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.mlp.up_proj.weight"), 2, 96, 64));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.mlp.down_proj.weight"), 2, 64, 96));
    CHECK(shape_is(find_spec(s, n, "model.norm.weight"), 1, 64, 0));
    CHECK(shape_is(find_spec(s, n, "lm_head.weight"), 2, 50, 64));
    CHECK(find_spec(s, n, "model.layers.0.self_attn.q_proj.bias") == NULL);
    CHECK(find_spec(s, n, "model.layers.2.input_layernorm.weight") == NULL);
    mem_free(s);
    /* qwen2: biases, tied (no lm_head) */
    CHECK(hf_config_parse(&c, QWEN2, "config.json") == 0);
    CHECK(model_tensor_specs(&c, &s, &n) == 0);
    CHECK(n == 2 + 3 * 12);
    CHECK(shape_is(find_spec(s, n, "model.layers.2.self_attn.q_proj.bias"), 1, 32, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.2.self_attn.k_proj.bias"), 1, 8, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.2.self_attn.v_proj.bias"), 1, 8, 0));
    CHECK(find_spec(s, n, "lm_head.weight") == NULL);
    mem_free(s);
    /* qwen3: head_dim 24 != C/H, q/k norms */
    CHECK(hf_config_parse(&c, QWEN3, "config.json") == 0);
    CHECK(model_tensor_specs(&c, &s, &n) == 0);
    CHECK(n == 3 + 11);
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.q_proj.weight"), 2, 48, 32));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.k_proj.weight"), 2, 24, 32));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.o_proj.weight"), 2, 32, 48));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.q_norm.weight"), 1, 24, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.k_norm.weight"), 1, 24, 0));
    mem_free(s);
    /* gemma3_text: 1 + w norms around both halves of the block, q/k norms */
    CHECK(hf_config_parse(&c, "{\"model_type\":\"gemma3_text\",\"hidden_size\":32,\"intermediate_size\":48,"
                              "\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                              "\"head_dim\":16,\"vocab_size\":40}", "config.json") == 0);
    CHECK(model_tensor_specs(&c, &s, &n) == 0);
    CHECK(n == 2 + 2 * 13);   /* tied; 4 norms, 2 q/k norms, 7 projections per block */
    CHECK(shape_is(find_spec(s, n, "model.layers.1.post_attention_layernorm.weight"), 1, 32, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.1.pre_feedforward_layernorm.weight"), 1, 32, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.1.post_feedforward_layernorm.weight"), 1, 32, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.q_norm.weight"), 1, 16, 0));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.q_proj.weight"), 2, 32, 32));
    CHECK(find_spec(s, n, "lm_head.weight") == NULL);
    BlockTensor bt[BLOCK_TENSORS_MAX];
    int nbt = block_tensors(&c, bt), roles = 0;
    for (int j = 0; j < nbt; j++) {
        if (!strcmp(bt[j].suffix, "post_attention_layernorm.weight")) roles += bt[j].role == BT_NORM_ATTN_OUT;
        if (!strcmp(bt[j].suffix, "pre_feedforward_layernorm.weight")) roles += bt[j].role == BT_NORM_MLP_IN;
    }
    CHECK(nbt == 13 && roles == 2);
    mem_free(s);
    /* multimodal gemma3: under language_model.model., the head (when untied) language_model.lm_head */
    CHECK(hf_config_parse(&c, "{\"model_type\":\"gemma3\",\"tie_word_embeddings\":false,\"text_config\":"
                              "{\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":1,"
                              "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":16,"
                              "\"vocab_size\":40}}", "config.json") == 0);
    CHECK(model_tensor_specs(&c, &s, &n) == 0);
    CHECK(n == 3 + 13);
    CHECK(shape_is(find_spec(s, n, "language_model.model.embed_tokens.weight"), 2, 40, 32));
    CHECK(shape_is(find_spec(s, n, "language_model.model.layers.0.mlp.down_proj.weight"), 2, 32, 48));
    CHECK(shape_is(find_spec(s, n, "language_model.model.norm.weight"), 1, 32, 0));
    CHECK(shape_is(find_spec(s, n, "language_model.lm_head.weight"), 2, 40, 32));
    mem_free(s);
    /* phi3: fused qkv_proj (q rows, k, v) and gate_up_proj, no separate ones */
    CHECK(hf_config_parse(&c, "{\"model_type\":\"phi3\",\"hidden_size\":48,\"intermediate_size\":64,"
                              "\"num_hidden_layers\":1,\"num_attention_heads\":3,\"num_key_value_heads\":1,"
                              "\"vocab_size\":40,\"rms_norm_eps\":1e-05}", "config.json") == 0);
    CHECK(model_tensor_specs(&c, &s, &n) == 0);
    CHECK(n == 3 + 6);
    CHECK(shape_is(find_spec(s, n, "model.layers.0.self_attn.qkv_proj.weight"), 2, 80, 48));
    CHECK(shape_is(find_spec(s, n, "model.layers.0.mlp.gate_up_proj.weight"), 2, 128, 48));
    CHECK(find_spec(s, n, "model.layers.0.self_attn.q_proj.weight") == NULL);
    CHECK(hf_block_projections(&c) == (1u << PROJ_QKV | 1u << PROJ_O | 1u << PROJ_GATE_UP | 1u << PROJ_DOWN));
    mem_free(s);
    /* a struct that was not loaded */
    memset(&c, 0, sizeof c);
    CHECK(model_tensor_specs(&c, &s, &n) == -1 && s == NULL);
    CHECK_ERROR_CONTAINS("sizes must be positive");
}

/* Writes the model of `config_json` to tmpdir/name (model.safetensors, or two
 * shards + index when `shards`), with one tensor altered: `edit` named
 * tensor gets `shape` (when ndim > 0), `dtype`, or is dropped (drop). */
typedef struct { const char *name; int ndim; int64_t shape[2]; DType dtype; bool drop; const char *extra; } Edit;

static const char *make_model(const char *name, const char *config_json, DType dtype, Edit e, bool shards) {
    static char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0755);
    ModelConfig c;
    CHECK(hf_config_parse(&c, config_json, "config.json") == 0);
    char path[400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(hf_config_write(&c, path) == 0);
    ModelTensorSpec *s;
    size_t n;
    CHECK(model_tensor_specs(&c, &s, &n) == 0);
    StWriteTensor *w = calloc(n + 1, sizeof *w);
    void *zeros = calloc(1, 1 << 20);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        StWriteTensor t = {.name = s[i].name, .dtype = dtype, .ndim = s[i].ndim, .data = zeros};
        memcpy(t.shape, s[i].shape, sizeof s[i].shape);
        if (e.name && strcmp(e.name, s[i].name) == 0) {
            if (e.drop) continue;
            if (e.ndim) { t.ndim = e.ndim; memcpy(t.shape, e.shape, sizeof e.shape); }
            if (e.dtype != DTYPE_F32) t.dtype = e.dtype;
        }
        w[k++] = t;
    }
    if (e.extra) w[k++] = (StWriteTensor){.name = e.extra, .dtype = dtype, .ndim = 2, .shape = {c.vocab_size, c.hidden_size}, .data = zeros};
    if (!shards) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        CHECK(st_write(path, w, k, NULL, NULL, 0) == 0);
    } else {
        size_t half = k / 2;
        snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
        CHECK(st_write(path, w, half, NULL, NULL, 0) == 0);
        snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
        CHECK(st_write(path, w + half, k - half, NULL, NULL, 0) == 0);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        FILE *fp = fopen(path, "w");
        fprintf(fp, "{\"metadata\": {}, \"weight_map\": {");
        for (size_t i = 0; i < k; i++)
            fprintf(fp, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", w[i].name, i < half ? 1 : 2);
        fprintf(fp, "}}\n");
        fclose(fp);
    }
    free(zeros);
    free(w);
    mem_free(s);
    return dir;
}

/* Loads DIR/config.json and the weights, and runs model_check_tensors. */
static int check_dir(const char *dir, bool header_only) {
    char path[400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ModelConfig c;
    if (hf_config_load(&c, path) < 0) return -2;
    StModel m;
    if (st_model_open(&m, dir, header_only) < 0) return -2;
    int rc = model_check_tensors(&c, &m);
    st_model_close(&m);
    return rc;
}

static void test_dirs(void) {
    const Edit none = {0};
    const char *cfgs[3] = {LLAMA, QWEN2, QWEN3};
    DType dts[3] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
    for (int i = 0; i < 3; i++)
        for (int shards = 0; shards < 2; shards++) {
            char name[32];
            snprintf(name, sizeof name, "good%d%d", i, shards);
            const char *dir = make_model(name, cfgs[i], dts[i], none, shards);
            CHECK_MSG(check_dir(dir, false) == 0, "%s: %s", name, error_message());
            CHECK_MSG(check_dir(dir, true) == 0, "%s: %s", name, error_message());
        }
    char want[400];
    /* q_proj in of 32 where config.json implies 64 (hidden size) */
    const char *dir = make_model("qshape", LLAMA, DTYPE_F32,
                                 (Edit){.name = "model.layers.0.self_attn.q_proj.weight", .ndim = 2, .shape = {64, 32}}, false);
    CHECK(check_dir(dir, true) == -1);
    snprintf(want, sizeof want, "%s/model.safetensors: tensor \"model.layers.0.self_attn.q_proj.weight\": shape [64, 32] but config.json implies [64, 64]", dir);
    CHECK_ERROR_CONTAINS(want);
    /* k_proj with 4 kv heads instead of 2 (heads) */
    dir = make_model("kheads", LLAMA, DTYPE_BF16, (Edit){.name = "model.layers.1.self_attn.k_proj.weight", .ndim = 2, .shape = {64, 64}}, false);
    CHECK(check_dir(dir, false) == -1);
    CHECK_ERROR_CONTAINS("tensor \"model.layers.1.self_attn.k_proj.weight\": shape [64, 64] but config.json implies [32, 64]");
    /* embedding with a different vocab (vocab) */
    dir = make_model("vocab", LLAMA, DTYPE_F32, (Edit){.name = "model.embed_tokens.weight", .ndim = 2, .shape = {51, 64}}, true);
    CHECK(check_dir(dir, false) == -1);
    CHECK_ERROR_CONTAINS("model-00001-of-00002.safetensors: tensor \"model.embed_tokens.weight\": shape [51, 64] but config.json implies [50, 64]");
    /* a norm of rank 2 */
    dir = make_model("rank", QWEN3, DTYPE_F32, (Edit){.name = "model.layers.0.self_attn.k_norm.weight", .ndim = 2, .shape = {24, 1}}, false);
    CHECK(check_dir(dir, false) == -1);
    CHECK_ERROR_CONTAINS("shape [24, 1] but config.json implies [24]");
    /* missing tensor: lm_head of an untied model, a qwen2 bias, a qwen3 norm */
    dir = make_model("nohead", LLAMA, DTYPE_F32, (Edit){.name = "lm_head.weight", .drop = true}, false);
    CHECK(check_dir(dir, false) == -1);
    snprintf(want, sizeof want, "%s: tensor \"lm_head.weight\" is missing (config.json implies shape [50, 64])", dir);
    CHECK_ERROR_CONTAINS(want);
    dir = make_model("nobias", QWEN2, DTYPE_F32, (Edit){.name = "model.layers.2.self_attn.v_proj.bias", .drop = true}, true);
    CHECK(check_dir(dir, true) == -1);
    CHECK_ERROR_CONTAINS("tensor \"model.layers.2.self_attn.v_proj.bias\" is missing");
    dir = make_model("noqnorm", QWEN3, DTYPE_F32, (Edit){.name = "model.layers.0.self_attn.q_norm.weight", .drop = true}, false);
    CHECK(check_dir(dir, false) == -1);
    CHECK_ERROR_CONTAINS("tensor \"model.layers.0.self_attn.q_norm.weight\" is missing");
    /* wrong dtype */
    dir = make_model("i32", LLAMA, DTYPE_F32, (Edit){.name = "model.norm.weight", .dtype = DTYPE_I32}, false);
    CHECK(check_dir(dir, false) == -1);
    CHECK_ERROR_CONTAINS("model.safetensors: tensor \"model.norm.weight\": dtype I32 is not supported (expected F32, BF16 or F16)");
    dir = make_model("f64", QWEN2, DTYPE_BF16, (Edit){.name = "model.layers.0.mlp.up_proj.weight", .dtype = DTYPE_F64}, false);
    CHECK(check_dir(dir, false) == -1);
    CHECK_ERROR_CONTAINS("dtype F64 is not supported");
    /* a tied model that still ships lm_head.weight is fine */
    dir = make_model("tiedextra", QWEN2, DTYPE_F32, (Edit){.extra = "lm_head.weight"}, false);
    CHECK_MSG(check_dir(dir, false) == 0, "%s", error_message());
    /* st_model_expect hands back the tensor */
    StModel m;
    dir = make_model("expect", QWEN3, DTYPE_BF16, none, true);
    CHECK(st_model_open(&m, dir, false) == 0);
    const StTensor *t = NULL;
    int64_t shape[1] = {24};
    CHECK(st_model_expect(&m, "model.layers.0.self_attn.q_norm.weight", 1, shape, &t) == 0);
    CHECK(t && t->dtype == DTYPE_BF16 && t->nelem == 24 && t->data != NULL);
    CHECK(st_model_expect(&m, "nope", 1, shape, &t) == -1 && t == NULL);
    ModelConfig c;
    char path[400], first[96];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(hf_config_load(&c, path) == 0);
    CHECK(model_count_nonfinite(&c, &m, first, sizeof first) == 0 && first[0] == 0);
    st_model_close(&m);
    /* NaN/Inf weights are flagged with the first tensor holding one */
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    StFile f;
    CHECK(st_open(&f, path) == 0);
    size_t k = f.n_tensors;
    StWriteTensor *w = calloc(k, sizeof *w);
    uint16_t *copies[64] = {0};
    for (size_t i = 0; i < k && i < 64; i++) {
        const StTensor *src = &f.tensors[i];
        copies[i] = malloc(src->nelem * 2 + 2);
        memcpy(copies[i], src->data, src->nelem * 2);
        w[i] = (StWriteTensor){.name = src->name, .dtype = src->dtype, .ndim = src->ndim, .data = copies[i]};
        memcpy(w[i].shape, src->shape, sizeof w[i].shape);
        if (strcmp(src->name, "model.norm.weight") == 0) { copies[i][3] = f32_to_bf16(NAN); copies[i][5] = f32_to_bf16(-INFINITY); }
    }
    CHECK(st_write(path, w, k, NULL, NULL, 0) == 0);
    st_close(&f);
    for (size_t i = 0; i < k && i < 64; i++) free(copies[i]);
    free(w);
    CHECK(st_model_open(&m, dir, false) == 0);
    CHECK(model_count_nonfinite(&c, &m, first, sizeof first) == 2 && strcmp(first, "model.norm.weight") == 0);
    st_model_close(&m);
    CHECK(st_model_open(&m, dir, true) == 0);
    CHECK(model_count_nonfinite(&c, &m, first, sizeof first) == 0); /* header-only: no data to look at */
    st_model_close(&m);
}

/* A multimodal gemma3 saved by recent transformers keeps its text weights
 * under model.language_model. (and the head at lm_head): found either way. */
static void test_mm_prefix(void) {
    const char *cfg = "{\"model_type\":\"gemma3\",\"text_config\":{\"hidden_size\":32,\"intermediate_size\":48,"
                      "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":16,"
                      "\"vocab_size\":40}}";
    for (int layout = 0; layout < 2; layout++) {
        char dir[300], path[400];
        snprintf(dir, sizeof dir, "%s/mm%d", tmpdir, layout);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *fp = fopen(path, "w");
        fputs(cfg, fp);
        fclose(fp);
        ModelConfig c;
        CHECK(hf_config_load(&c, path) == 0);
        if (layout) snprintf(c.prefix, sizeof c.prefix, "model.language_model.");
        ModelTensorSpec *s;
        size_t n;
        CHECK(model_tensor_specs(&c, &s, &n) == 0);
        StWriteTensor *w = calloc(n + 1, sizeof *w);
        void *zeros = calloc(1, 1 << 16);
        for (size_t i = 0; i < n; i++) {
            w[i] = (StWriteTensor){.name = s[i].name, .dtype = DTYPE_F32, .ndim = s[i].ndim, .data = zeros};
            memcpy(w[i].shape, s[i].shape, sizeof s[i].shape);
        }
        w[n] = (StWriteTensor){.name = "model.vision_tower.x", .dtype = DTYPE_F32, .ndim = 1, .shape = {4}, .data = zeros};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        CHECK(st_write(path, w, n + 1, NULL, NULL, 0) == 0);
        StModel m;
        CHECK(hf_config_load(&c, strcat(strcpy(path, dir), "/config.json")) == 0);
        CHECK(st_model_open(&m, dir, true) == 0);
        model_tensors_detect_prefix(&c, &m);
        CHECK(strcmp(c.prefix, layout ? "model.language_model." : "language_model.model.") == 0);
        CHECK(strcmp(c.adapter_prefix, "language_model.model.") == 0);   /* MLX-LM's module path either way */
        CHECK(model_check_tensors(&c, &m) == 0);
        st_model_close(&m);
        free(w);
        free(zeros);
        mem_free(s);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_mt_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    test_specs();
    test_dirs();
    test_mm_prefix();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_finish("formats/model_tensors");
}

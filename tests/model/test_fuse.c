/* test_fuse.c: `fuse` and the adapter exports on a small hand-made model:
 * the merged weight equals W + scale * B^T A^T computed naively in double,
 * DoRA rescales rows to m, untouched tensors are copied byte for byte, shards
 * and their index are written when the shard limit is small, the PEFT export
 * holds A^T and B^T with lora_alpha = scale * r, and the GGUF adapter export
 * parses back (keys, every tensor's bytes in PEFT's layout with q's lora_b
 * rows permuted as llama.cpp's converter does). llama.cpp itself runs the
 * exports in tests/llama/test_llama_interop.c. */
#include "base/alloc.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "check.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "model/fuse.h"
#include "model/gguf_export.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum { C = 16, F = 24, L = 2, V = 32, R = 4 };

static char dir[256];
static char *p(const char *name) { static char buf[8][512]; static int k; k = (k + 1) % 8; snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name); return buf[k]; }

static float wq[L][C * C], wup[L][F * C], emb[V * C], norm[C];
static float a_q[C * R], b_q[R * C], a_up[C * R], b_up[R * F], m_q[C];

static void fill(Rng *r, float *x, size_t n, float s) { for (size_t i = 0; i < n; i++) x[i] = s * rng_normal(r); }

static void write_base(DType dt) {
    ModelConfig cfg = {0};
    strcpy(cfg.model_type, "llama");
    cfg.hidden_size = C; cfg.intermediate_size = F; cfg.num_hidden_layers = L;
    cfg.num_attention_heads = 2; cfg.num_key_value_heads = 2; cfg.head_dim = C / 2; cfg.vocab_size = V;
    cfg.max_position_embeddings = 64; cfg.rms_norm_eps = 1e-5f; cfg.rope_theta = 10000; cfg.tie_word_embeddings = true;
    cfg.bos_token_id = -1; cfg.torch_dtype = dt;
    CHECK(hf_config_write(&cfg, p("base/config.json")) == 0);
    StWriteTensor t[1 + 2 * L + 1];
    static uint16_t conv[L * 2][F * C];
    int k = 0;
    t[k++] = (StWriteTensor){"model.embed_tokens.weight", DTYPE_F32, 2, {V, C}, emb};
    static char names[2 * L][96];
    for (int l = 0; l < L; l++) {
        snprintf(names[2 * l], 96, "model.layers.%d.self_attn.q_proj.weight", l);
        snprintf(names[2 * l + 1], 96, "model.layers.%d.mlp.up_proj.weight", l);
        const void *dq = wq[l], *du = wup[l];
        if (dt == DTYPE_BF16) { dtype_from_f32(conv[2 * l], dt, wq[l], C * C); dtype_from_f32(conv[2 * l + 1], dt, wup[l], F * C); dq = conv[2 * l]; du = conv[2 * l + 1]; }
        t[k++] = (StWriteTensor){names[2 * l], dt, 2, {C, C}, dq};
        t[k++] = (StWriteTensor){names[2 * l + 1], dt, 2, {F, C}, du};
    }
    t[k++] = (StWriteTensor){"model.norm.weight", DTYPE_F32, 1, {C}, norm};
    CHECK(st_write(p("base/model.safetensors"), t, k, NULL, NULL, 0) == 0);
    CHECK(atomic_write_file(p("base/tokenizer.json"), "{}", 2) == 0);
}

static void write_adapter(const char *sub, const char *type, bool dora) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    CHECK(dir_ensure(path) == 0);
    char json[512];
    snprintf(json, sizeof json, "{\"fine_tune_type\": \"%s\", \"num_layers\": 1, \"lora_parameters\": {\"rank\": %d, \"scale\": 2.5, \"dropout\": 0.0}}", type, R);
    snprintf(path, sizeof path, "%s/%s/adapter_config.json", dir, sub);
    CHECK(atomic_write_file(path, json, strlen(json)) == 0);
    StWriteTensor t[5];
    int k = 0;
    t[k++] = (StWriteTensor){"model.layers.1.self_attn.q_proj.lora_a", DTYPE_F32, 2, {C, R}, a_q};
    t[k++] = (StWriteTensor){"model.layers.1.self_attn.q_proj.lora_b", DTYPE_F32, 2, {R, C}, b_q};
    t[k++] = (StWriteTensor){"model.layers.1.mlp.up_proj.lora_a", DTYPE_F32, 2, {C, R}, a_up};
    t[k++] = (StWriteTensor){"model.layers.1.mlp.up_proj.lora_b", DTYPE_F32, 2, {R, F}, b_up};
    if (dora) t[k++] = (StWriteTensor){"model.layers.1.self_attn.q_proj.m", DTYPE_F32, 1, {C}, m_q};
    snprintf(path, sizeof path, "%s/%s/adapters.safetensors", dir, sub);
    const char *mk[] = {"format"}, *mv[] = {"mlx"};
    CHECK(st_write(path, t, k, mk, mv, 1) == 0);
}

/* Naive merge in double: W[o][i] + s * sum_k A[i][k] B[k][o]. */
static double merged(const float *w, const float *a, const float *b, int out, int in, int o, int i) {
    (void)out;
    double d = w[o * in + i];
    for (int k = 0; k < R; k++) d += 2.5 * (double)a[i * R + k] * b[k * out + o];
    return d;
}

static void check_lora_fuse(bool dora) {
    CHECK(fuse_model(p("base"), p(dora ? "dora" : "lora"), p(dora ? "fused_dora" : "fused"), 0, false) == 0);
    StModel fm;
    CHECK(st_model_open(&fm, p(dora ? "fused_dora" : "fused"), false) == 0);
    const StTensor *q1 = st_model_find(&fm, "model.layers.1.self_attn.q_proj.weight");
    const StTensor *u1 = st_model_find(&fm, "model.layers.1.mlp.up_proj.weight");
    const StTensor *q0 = st_model_find(&fm, "model.layers.0.self_attn.q_proj.weight");
    CHECK(q1 && u1 && q0);
    if (!q1 || !u1 || !q0) return;
    double worst = 0;
    const float *fq = q1->data, *fu = u1->data;
    for (int o = 0; o < C; o++) {
        double ss = 0, row[C];
        for (int i = 0; i < C; i++) { row[i] = merged(wq[1], a_q, b_q, C, C, o, i); ss += row[i] * row[i]; }
        for (int i = 0; i < C; i++) {
            double want = dora ? row[i] * m_q[o] / sqrt(ss) : row[i];
            double d = fabs(fq[o * C + i] - want) / (fabs(want) + 1e-3);
            if (d > worst) worst = d;
        }
    }
    for (int o = 0; o < F; o++) for (int i = 0; i < C; i++) {
        double want = merged(wup[1], a_up, b_up, F, C, o, i), d = fabs(fu[o * C + i] - want) / (fabs(want) + 1e-3);
        if (d > worst) worst = d;
    }
    printf("worst %s fuse relative error %.3g\n", dora ? "dora" : "lora", worst);
    CHECK(worst < 1e-5);
    CHECK(memcmp(q0->data, wq[0], sizeof wq[0]) == 0);   /* untouched layer copied exactly */
    CHECK(file_exists(p(dora ? "fused_dora/config.json" : "fused/config.json")));
    CHECK(file_exists(p(dora ? "fused_dora/tokenizer.json" : "fused/tokenizer.json")));
    st_model_close(&fm);
}

int main(void) {
    strcpy(dir, "/tmp/lmtune-fuse-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    Rng r; rng_seed(&r, 7);
    for (int l = 0; l < L; l++) { fill(&r, wq[l], C * C, 0.1f); fill(&r, wup[l], F * C, 0.1f); }
    fill(&r, emb, V * C, 0.1f); for (int i = 0; i < C; i++) norm[i] = 1;
    fill(&r, a_q, C * R, 0.2f); fill(&r, b_q, R * C, 0.2f); fill(&r, a_up, C * R, 0.2f); fill(&r, b_up, R * F, 0.2f);
    for (int i = 0; i < C; i++) m_q[i] = 0.5f + 0.1f * i;
    CHECK(dir_ensure(p("base")) == 0);
    write_base(DTYPE_F32);
    write_adapter("lora", "lora", false);
    write_adapter("dora", "dora", true);
    check_lora_fuse(false);
    check_lora_fuse(true);

    /* bf16 base: merged in fp32, stored back in bf16. */
    write_base(DTYPE_BF16);
    CHECK(fuse_model(p("base"), p("lora"), p("fused_bf16"), 0, false) == 0);
    StModel fb;
    CHECK(st_model_open(&fb, p("fused_bf16"), false) == 0);
    const StTensor *t = st_model_find(&fb, "model.layers.1.self_attn.q_proj.weight");
    CHECK(t && t->dtype == DTYPE_BF16);
    if (t) {
        const uint16_t *h = t->data; double worst = 0;
        for (int o = 0; o < C; o++) for (int i = 0; i < C; i++) {
            /* the base is stored in bf16: merge from its rounded value, then
             * one rounding of the result to bf16 (half an ulp, 2^-9 relative) */
            float wr[C * C];
            for (int k = 0; k < C * C; k++) wr[k] = bf16_to_f32(f32_to_bf16(wq[1][k]));
            double want = merged(wr, a_q, b_q, C, C, o, i);
            double d = fabs(bf16_to_f32(h[o * C + i]) - want) / (fabs(want) + 1e-30);
            if (d > worst) worst = d;
        }
        printf("worst bf16 fuse relative error %.3g\n", worst);
        CHECK(worst <= 1.0 / 256);
    }
    st_model_close(&fb);
    write_base(DTYPE_F32);

    /* Shards: a 4 KB limit splits the model and writes the index. */
    CHECK(fuse_model(p("base"), p("lora"), p("fused_sharded"), 4096, false) == 0);
    CHECK(file_exists(p("fused_sharded/model.safetensors.index.json")));
    StModel fs;
    CHECK(st_model_open(&fs, p("fused_sharded"), false) == 0);
    CHECK(fs.n_files >= 2);
    for (size_t f = 0; f < fs.n_files; f++) {
        size_t data = 0;
        for (size_t i = 0; i < fs.files[f].n_tensors; i++) data += fs.files[f].tensors[i].end - fs.files[f].tensors[i].begin;
        CHECK_MSG(data <= 4096 || fs.files[f].n_tensors == 1, "shard %zu holds %zu bytes", f, data);
    }
    {
        char name[64];
        snprintf(name, sizeof name, "fused_sharded/model-00001-of-%05zu.safetensors", fs.n_files);
        CHECK(file_exists(p(name)));
    }
    const StTensor *sq = st_model_find(&fs, "model.layers.1.self_attn.q_proj.weight");
    CHECK(sq != NULL);
    st_model_close(&fs);

    /* PEFT export: lora_A = A^T (r, in), lora_B = B^T (out, r), alpha = scale * r. */
    CHECK(export_peft(p("base"), p("lora"), p("peft")) == 0);
    StFile pf;
    CHECK(st_open(&pf, p("peft/adapter_model.safetensors")) == 0);
    const StTensor *pa = st_find(&pf, "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight");
    const StTensor *pb = st_find(&pf, "base_model.model.model.layers.1.mlp.up_proj.lora_B.weight");
    CHECK(pa && pa->shape[0] == R && pa->shape[1] == C);
    CHECK(pb && pb->shape[0] == F && pb->shape[1] == R);
    if (pa && pb) {
        const float *A = pa->data, *Bt = pb->data;
        int bad = 0;
        for (int k = 0; k < R; k++) for (int i = 0; i < C; i++) bad += A[k * C + i] != a_q[i * R + k];
        for (int o = 0; o < F; o++) for (int k = 0; k < R; k++) bad += Bt[o * R + k] != b_up[k * F + o];
        CHECK(bad == 0);
    }
    CHECK(pf.n_tensors == 4);
    st_close(&pf);
    json_error_t je;
    json_t *pc = json_load_file(p("peft/adapter_config.json"), 0, &je);
    CHECK(pc != NULL);
    if (pc) {
        CHECK(json_integer_value(json_object_get(pc, "r")) == R);
        CHECK_NEAR(json_number_value(json_object_get(pc, "lora_alpha")), 2.5 * R, 1e-9);
        CHECK(!strcmp(json_string_value(json_object_get(pc, "peft_type")), "LORA"));
        json_t *tm = json_object_get(pc, "target_modules");
        CHECK(json_array_size(tm) == 2);
        json_decref(pc);
    }

    /* GGUF export parsed back against the specification. */
    CHECK(gguf_export_adapter(p("base"), p("lora"), p("adapter.gguf")) == 0);
    GgufFile g;
    CHECK(gguf_open(&g, p("adapter.gguf")) == 0);
    CHECK(g.version == 3 && g.n_tensors == 4);
    const GgufKV *kt = gguf_find_kv(&g, "general.type");
    const GgufKV *ka = gguf_find_kv(&g, "adapter.lora.alpha");
    const GgufKV *kr = gguf_find_kv(&g, "general.architecture");
    const GgufKV *kl = gguf_find_kv(&g, "adapter.type");
    CHECK(kt && kt->type == GGUF_TYPE_STRING && kt->str.n == 7 && !memcmp(kt->str.p, "adapter", 7));
    CHECK(ka && ka->type == GGUF_TYPE_FLOAT32 && ka->f == 2.5f * R);
    CHECK(kr && kr->type == GGUF_TYPE_STRING && kr->str.n == 5 && !memcmp(kr->str.p, "llama", 5));
    CHECK(kl && kl->type == GGUF_TYPE_STRING && kl->str.n == 4 && !memcmp(kl->str.p, "lora", 4));
    /* Every tensor's bytes: lora_a holds A^T (r, in) and lora_b holds B^T
     * (out, r), the PEFT layout (ggml ne reversed); q's lora_b rows are
     * permuted as convert_hf_to_gguf.py's LlamaModel.permute does (per head
     * of D rows: row 2j + t is Hugging Face's row t * D/2 + j). */
    {
        const int D = C / 2;
        const struct { const char *name; const float *a_or_b; int rows, cols; bool permute; } want[] = {
            {"blk.1.attn_q.weight.lora_a", a_q, C, R, false}, {"blk.1.attn_q.weight.lora_b", b_q, R, C, true},
            {"blk.1.ffn_up.weight.lora_a", a_up, C, R, false}, {"blk.1.ffn_up.weight.lora_b", b_up, R, F, false}};
        for (size_t w = 0; w < 4; w++) {
            const GgufTensorInfo *t = gguf_find_tensor(&g, want[w].name);
            CHECK_MSG(t != NULL, "%s missing", want[w].name);
            if (!t) continue;
            CHECK(t->type == GGML_TYPE_F32 && t->n_dims == 2);
            CHECK(t->ne[0] == want[w].rows && t->ne[1] == want[w].cols);
            CHECK(t->offset % g.alignment == 0);
            /* MLX tensor (rows, cols); stored transposed: (cols, rows) row-major */
            const float *d = t->data;
            int bad = 0;
            for (int c = 0; c < want[w].cols; c++) {
                int src = c;
                if (want[w].permute) {
                    int head = c / D;
                    int j = (c % D) / 2;
                    int half = c % 2;
                    src = head * D + half * (D / 2) + j;
                }
                for (int r = 0; r < want[w].rows; r++)
                    bad += d[(size_t)c * want[w].rows + r] != want[w].a_or_b[(size_t)r * want[w].cols + src];
            }
            CHECK_MSG(bad == 0, "GGUF %s: %d values differ from the PEFT layout", want[w].name, bad);
        }
    }
    gguf_close(&g);
    /* A truncated GGUF is refused with a message naming the file. */
    {
        char *buf; size_t n;
        CHECK(file_read_all(p("adapter.gguf"), 0, &buf, &n) == 0);
        CHECK(atomic_write_file(p("cut.gguf"), buf, n / 2) == 0);
        mem_free(buf);
        CHECK(gguf_open(&g, p("cut.gguf")) < 0);
        CHECK_ERROR_CONTAINS("cut.gguf");
    }

    /* Errors: missing adapter dir (MLX-LM's message), a DoRA adapter to GGUF,
     * an adapter tensor that matches no base weight. */
    CHECK(fuse_model(p("base"), p("nope"), p("x"), 0, false) < 0);
    CHECK_ERROR_CONTAINS("The adapter path does not exist");
    CHECK(gguf_export_adapter(p("base"), p("dora"), p("d.gguf")) < 0);
    CHECK_ERROR_CONTAINS("DoRA");
    {
        StWriteTensor t2[2] = {{"model.layers.5.self_attn.q_proj.lora_a", DTYPE_F32, 2, {C, R}, a_q},
                               {"model.layers.5.self_attn.q_proj.lora_b", DTYPE_F32, 2, {R, C}, b_q}};
        CHECK(dir_ensure(p("bad")) == 0);
        CHECK(st_write(p("bad/adapters.safetensors"), t2, 2, NULL, NULL, 0) == 0);
        const char *js = "{\"fine_tune_type\": \"lora\", \"num_layers\": 1, \"lora_parameters\": {\"rank\": 4, \"scale\": 1.0}}";
        CHECK(atomic_write_file(p("bad/adapter_config.json"), js, strlen(js)) == 0);
        CHECK(fuse_model(p("base"), p("bad"), p("fused_bad"), 0, false) < 0);
        CHECK_ERROR_CONTAINS("not an adapter parameter in the model");
        CHECK(!file_exists(p("fused_bad/model.safetensors")));
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return check_finish("model/fuse");
}

/* test_llama_interop.c: lmtune's GGUF exports run by a real llama.cpp
 * (node-llama-cpp, tests/llama/llama_eval.mjs), for every architecture
 * lmtune trains: llama (GQA, tied; biases, untied, llama3 RoPE scaling),
 * mistral (multi-query, untied), qwen2 (biases, tied and untied), qwen3
 * (q/k norms, head_dim != hidden / heads, tied). Each model is random with
 * fan-in scaled weights (so logits are spread and greedy picks are clear),
 * random norms and biases, a byte-level BPE tokenizer learned by lmtune,
 * and a random LoRA adapter on all seven projections of every block.
 *   (a) llama.cpp on the fused model exported as f32 GGUF equals lmtune's
 *       own logits of the fused model (model_logits, as eval computes them)
 *       within 1e-4 of the largest logit, and its 32 greedy tokens equal
 *       lmtune's greedy generation with the KV cache (as generate). The
 *       f16 / bf16 / q8_0 exports are compared with lmtune on the same
 *       rounded weights (the GGUF's tensors dequantized, q/k rows put back,
 *       as an f32 model directory), so what is left is llama.cpp rounding
 *       each product's input the same way (ggml's vec_dot types): bound and
 *       greedy rule at TOL below.
 *   (b) llama.cpp on the base GGUF with lmtune's adapter GGUF (--lora)
 *       equals llama.cpp on the fused GGUF: logits within 1e-4, 32 greedy
 *       tokens equal. The same adapter with q/k lora_b left in Hugging
 *       Face's row order (the bug of the first exporter) must be far off
 *       for llama and mistral (> 1e-2), which shows that (b) sees the row
 *       order.
 *   The prompt is tokenized by llama.cpp from the GGUF's own vocabulary and
 *   must give lmtune's ids. */
#include "check.h"
#include "llama_run.h"
#include "llama_models.h"
#include "cli_run.h"
#include "base/alloc.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/ggml_quants.h"
#include "model/adapter_io.h"
#include "model/fuse.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include <math.h>
#include <omp.h>
#include <unistd.h>

enum { R = 4, GREEDY = 32, MAXV = 512 };

static const Arch ARCHS[] = {
    {"llama_gqa_tied", "llama", 4, 2, 16, 64, 128, 2, 0, true, false, false},
    {"llama_bias_untied_rope3", "llama", 4, 4, 16, 64, 96, 2, 8, false, true, true},
    {"mistral_mqa_untied", "mistral", 4, 1, 16, 64, 128, 2, 0, false, false, false},
    {"qwen2_bias_untied", "qwen2", 4, 2, 16, 64, 128, 2, 0, false, true, false},
    {"qwen2_bias_tied", "qwen2", 2, 2, 32, 64, 128, 2, 0, true, true, false},
    {"qwen3_qknorm_tied", "qwen3", 4, 2, 32, 64, 128, 2, 0, true, false, false},
};
enum { N_ARCH = sizeof ARCHS / sizeof ARCHS[0] };

/* The exports llama.cpp runs, per architecture (jobs in this order). */
enum { J_F32, J_F16, J_BF16, J_Q8, J_LORA, J_LORA_UNPERMUTED, N_JOBS };
static const char *const JOB_NAMES[N_JOBS] = {"f32", "f16", "bf16", "q8_0", "base+lora", "base+lora(unpermuted)"};
/* Relative logit bound of each run against its lmtune reference (as a
 * fraction of the largest logit). f32 and base+lora: float rounding only.
 * f16 / bf16 / q8_0: llama.cpp rounds the input of every product to the
 * weight's vec_dot type (f16: relative 2^-11; bf16: 2^-8; q8_0: half a step
 * of amax/127 per block of 32, and the largest of 32 normal values is about
 * 2 standard deviations, so about 1/127 of a typical value); with 7
 * products per block in 2 blocks and the LM head the errors add up over
 * ~15 products, so the bound is 16 units of that rounding. Greedy tokens
 * must agree for f32 and base+lora on all 32 steps, and for the rounded
 * exports on every step until lmtune's top-two margin first falls under
 * twice the bound (after that a tie may go either way). */
static const double TOL[N_JOBS] = {1e-4, 16 * 0x1p-11, 16 * 0x1p-8, 16.0 / 127, 1e-4, 0};

static const char TEXT[] =
    "The capital of France is Paris. The capital of Japan is Tokyo. What is the capital of Spain? "
    "Models learn from text: the quick brown fox jumps over the lazy dog, 12345 times.\n";
static const char PROMPT[] = "What is the capital of France? The capital of";

/* A LoRA adapter on every projection of every block, A ~ U(+-1/sqrt(in)),
 * B ~ N(0, 0.3^2), scale 2. */
static int write_adapter(const char *dir, const Arch *a, uint64_t seed) {
    char p[512];
    TRY(dir_ensure(dir));
    const char *cfg = "{\"fine_tune_type\": \"lora\", \"num_layers\": -1, \"lora_parameters\": "
                      "{\"rank\": 4, \"scale\": 2.0, \"dropout\": 0.0}}";
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    TRY(atomic_write_file(p, cfg, strlen(cfg)));
    int n = a->L * 7 * 2;
    StWriteTensor *wt = mem_calloc((size_t)n, sizeof *wt);
    float **data = mem_calloc((size_t)n, sizeof *data);
    char (*names)[128] = mem_calloc((size_t)n, sizeof *names);
    Rng r;
    rng_seed(&r, seed);
    int k = 0;
    for (int l = 0; l < a->L; l++) {
        for (int pj = 0; pj <= PROJ_DOWN; pj++) {   /* the seven projections of an attention block */
            int QD = a->H * a->D;
            int KVD = a->KVH * a->D;
            int ins[] = {a->C, a->C, a->C, QD, a->C, a->C, a->F};
            int outs[] = {QD, KVD, KVD, a->C, a->F, a->F, a->C};
            int in = ins[pj];
            int out = outs[pj];
            snprintf(names[k], 128, "model.layers.%d.%s.lora_a", l, PROJ_KEYS[pj]);
            data[k] = mem_alloc((size_t)in * R * sizeof(float));
            for (int e = 0; e < in * R; e++) data[k][e] = rng_uniform_range(&r, -1, 1) / sqrtf((float)in);
            wt[k] = (StWriteTensor){names[k], DTYPE_F32, 2, {in, R}, data[k]};
            k++;
            snprintf(names[k], 128, "model.layers.%d.%s.lora_b", l, PROJ_KEYS[pj]);
            data[k] = mem_alloc((size_t)out * R * sizeof(float));
            fill(&r, data[k], (size_t)out * R, 0, 0.3f);
            wt[k] = (StWriteTensor){names[k], DTYPE_F32, 2, {R, out}, data[k]};
            k++;
        }
    }
    snprintf(p, sizeof p, "%s/adapters.safetensors", dir);
    int rc = st_write(p, wt, (size_t)k, NULL, NULL, 0);
    for (int i = 0; i < k; i++) mem_free(data[i]);
    mem_free(data);
    mem_free(wt);
    mem_free(names);
    return rc;
}

/* The adapter GGUF with the q/k lora_b rows put back in Hugging Face's
 * order: what the first exporter wrote. */
static int write_unpermuted(const char *src, const char *dst, int D) {
    GgufFile g;
    TRY(gguf_open(&g, src));
    GgufKVOut kv[8];
    GgufTensorOut *ts = mem_calloc(g.n_tensors + 1, sizeof *ts);
    float **fixed = mem_calloc(g.n_tensors + 1, sizeof *fixed);
    size_t nk = 0;
    for (size_t i = 0; i < g.n_kv && nk < 8; i++) {
        const GgufKV *k = &g.kv[i];
        kv[nk] = (GgufKVOut){.key = k->key, .type = k->type};
        if (k->type == GGUF_TYPE_STRING) kv[nk].str = mem_strndup(k->str.p, k->str.n);
        kv[nk].f32 = (float)k->f;
        kv[nk].u32 = (uint32_t)k->u;
        nk++;
    }
    for (size_t i = 0; i < g.n_tensors; i++) {
        const GgufTensorInfo *t = &g.tensors[i];
        ts[i] = (GgufTensorOut){t->name, t->n_dims, {(uint64_t)t->ne[0], (uint64_t)t->ne[1], 1, 1}, t->type, t->data,
                                NULL, NULL, 0};
        bool qk = strstr(t->name, "attn_q.weight.lora_b") || strstr(t->name, "attn_k.weight.lora_b");
        if (!qk) continue;
        int r = (int)t->ne[0];
        int rows = (int)t->ne[1];
        fixed[i] = mem_alloc((size_t)rows * r * sizeof(float));
        const float *b = t->data;
        for (int row = 0; row < rows; row++)
            memcpy(fixed[i] + (size_t)gguf_permuted_row(row, D) * r, b + (size_t)row * r, (size_t)r * sizeof(float));
        ts[i].data = fixed[i];
    }
    int rc = gguf_write(dst, kv, nk, ts, g.n_tensors);
    for (size_t i = 0; i < nk; i++)
        if (kv[i].type == GGUF_TYPE_STRING) mem_free((void *)kv[i].str);
    for (size_t i = 0; i < g.n_tensors; i++) mem_free(fixed[i]);
    mem_free(fixed);
    mem_free(ts);
    gguf_close(&g);
    return rc;
}

/* lmtune's answers for one model directory. */
typedef struct {
    float *logits;         /* (T, V) */
    int32_t greedy[GREEDY];
    double margin[GREEDY];
} Lm;

typedef struct {
    int V, T;
    int32_t ids[128];
    Lm lm[4];              /* the fused model f32, and dequantized f16 / bf16 / q8_0 exports */
} Case;

static bool prepare(const Arch *a, Case *cs, uint64_t seed) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, a->name);
    CHECK(dir_ensure(dir) == 0);
    /* tokenizer first: the model's vocab is its size (+ unused rows) */
    CHECK(tokenizer_write_bytelevel(path(a->name, "base"), TEXT, strlen(TEXT), 300, NULL) == 0);
    Tokenizer *tok;
    if (tokenizer_load(&tok, path(a->name, "base")) < 0) {
        fprintf(stderr, "%s\n", error_message());
        return false;
    }
    cs->V = tokenizer_vocab_size(tok) + a->extra_vocab;
    int32_t *ids;
    size_t n;
    CHECK(tokenizer_encode(tok, PROMPT, strlen(PROMPT), false, &ids, &n) == 0);
    cs->T = (int)n;
    memcpy(cs->ids, ids, n * sizeof *ids);
    mem_free(ids);
    tokenizer_free(tok);
    bool ok = write_model(path(a->name, "base"), a, cs->V, seed) == 0;
    ok = ok && write_adapter(path(a->name, "adapter"), a, seed + 1) == 0;
    ok = ok && fuse_model(path(a->name, "base"), path(a->name, "adapter"), path(a->name, "fused"), 0, false) == 0;
    const int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0};
    const char *files[] = {"f32.gguf", "f16.gguf", "bf16.gguf", "q8_0.gguf"};
    for (int t = 0; t < 4 && ok; t++)
        ok = gguf_export_model(path(a->name, "fused"), path(a->name, files[t]), types[t]) == 0;
    ok = ok && gguf_export_model(path(a->name, "base"), path(a->name, "base.gguf"), GGML_TYPE_F32) == 0;
    ok = ok && gguf_export_adapter(path(a->name, "base"), path(a->name, "adapter"), path(a->name, "lora.gguf")) == 0;
    ok = ok && write_unpermuted(path(a->name, "lora.gguf"), path(a->name, "lora_hf_rows.gguf"), a->D) == 0;
    const char *deq[4] = {"fused", "deq_f16", "deq_bf16", "deq_q8_0"};
    for (int t = 1; t < 4 && ok; t++)
        ok = write_dequantized(path(a->name, files[t]), path(a->name, "fused"), path(a->name, deq[t])) == 0;
    for (int t = 0; t < 4 && ok; t++) {
        Lm *lm = &cs->lm[t];
        lm->logits = mem_alloc((size_t)cs->T * cs->V * sizeof(float));
        ok = lmtune_side(path(a->name, deq[t]), NULL, cs->ids, cs->T, cs->V, GREEDY, lm->logits, lm->greedy,
                         lm->margin) == 0;
    }
    if (!ok) fprintf(stderr, "%s: %s\n", a->name, error_message());
    return ok;
}

int main(void) {
    llama_require();
    /* tiny models: one thread (OpenMP barriers stall on a shared, oversubscribed machine) */
    omp_set_num_threads(1);
    cli_begin("llama_interop");
    static Case cases[N_ARCH];
    int job_of[N_ARCH][N_JOBS];
    int n_jobs = 0;
    json_t *jobs = json_array();
    int at[128];
    for (int i = 0; i < 128; i++) at[i] = i;
    const char *prompt = PROMPT;
    for (int a = 0; a < N_ARCH; a++) {
        if (!prepare(&ARCHS[a], &cases[a], 1000 + 17 * (uint64_t)a)) {
            CHECK_MSG(false, "%s: could not prepare the models", ARCHS[a].name);
            return check_finish("llama_interop");
        }
        LlamaRun run = {cases[a].ids, cases[a].T, at, cases[a].T, GREEDY};
        const char *model[N_JOBS] = {"f32.gguf", "f16.gguf", "bf16.gguf", "q8_0.gguf", "base.gguf", "base.gguf"};
        const char *lora[N_JOBS] = {NULL, NULL, NULL, NULL, "lora.gguf", "lora_hf_rows.gguf"};
        for (int j = 0; j < N_JOBS; j++) {
            /* qwen has no permutation: its "unpermuted" adapter is the adapter */
            job_of[a][j] = -1;
            if (j == J_LORA_UNPERMUTED && ARCHS[a].model_type[0] == 'q') continue;
            job_of[a][j] = n_jobs++;
            llama_job_add(jobs, path(ARCHS[a].name, model[j]), lora[j] ? path(ARCHS[a].name, lora[j]) : NULL, &run, 1,
                          j == J_F32 ? &prompt : NULL, j == J_F32 ? 1 : 0);
        }
    }
    json_t *res = llama_run_jobs(jobs, root);
    json_decref(jobs);
    CHECK(res != NULL);
    if (!res) return check_finish("llama_interop");
    float *lc = mem_alloc((size_t)128 * MAXV * sizeof(float));
    float *fused_lc = mem_alloc((size_t)128 * MAXV * sizeof(float));
    printf("%-26s %-22s %12s %10s %8s\n", "architecture", "export", "max rel err", "bound", "greedy");
    for (int a = 0; a < N_ARCH; a++) {
        const Arch *ar = &ARCHS[a];
        Case *cs = &cases[a];
        int V = cs->V;
        int T = cs->T;
        json_t *tk = json_array_get(json_object_get(json_array_get(res, (size_t)job_of[a][J_F32]), "tokenize"), 0);
        bool same_ids = (int)json_array_size(tk) == T;
        for (int i = 0; same_ids && i < T; i++)
            same_ids = json_integer_value(json_array_get(tk, (size_t)i)) == cs->ids[i];
        CHECK_MSG(same_ids, "%s: llama.cpp tokenizes the prompt differently from lmtune", ar->name);
        for (int j = 0; j < N_JOBS; j++) {
            int job = job_of[a][j];
            if (job < 0) continue;
            bool got = true;
            for (int t = 0; t < T && got; t++) got = llama_logits(res, job, 0, t, lc + (size_t)t * V, V);
            CHECK_MSG(got, "%s %s: no logits of length %d", ar->name, JOB_NAMES[j], V);
            if (!got) continue;
            int32_t g[GREEDY];
            int ng = llama_greedy(res, job, 0, g, GREEDY);
            if (j == J_F32) memcpy(fused_lc, lc, (size_t)T * V * sizeof(float));
            /* (b) compares with llama.cpp's own fused f32 run; (a) with lmtune on the same weights */
            const Lm *lm = &cs->lm[j < J_LORA ? j : J_F32];
            const float *ref = j >= J_LORA ? fused_lc : lm->logits;
            double err = rel_err(lc, ref, (size_t)T * V);
            int same = 0;
            while (same < ng && g[same] == lm->greedy[same]) same++;
            if (j == J_LORA_UNPERMUTED) {
                printf("%-26s %-22s %12.3g %10s %5d/%d  (must differ)\n", ar->name, JOB_NAMES[j], err, "> 1e-2", same,
                       GREEDY);
                CHECK_MSG(err > 1e-2, "%s: unpermuted q/k lora_b gives %.3g: the check is blind", ar->name, err);
                continue;
            }
            /* greedy tokens must agree while lmtune's pick is clear by more than the bound */
            double scale = 0;
            for (size_t i = 0; i < (size_t)T * V; i++) scale = fmax(scale, fabs(lm->logits[i]));
            int clear = 0;
            while (clear < GREEDY && lm->margin[clear] > 2 * TOL[j] * scale) clear++;
            int need = j == J_F32 || j == J_LORA ? GREEDY : clear;
            printf("%-26s %-22s %12.3g %10.3g %5d/%d  (clear picks %d)\n", ar->name, JOB_NAMES[j], err, TOL[j], same,
                   GREEDY, clear);
            CHECK_MSG(err <= TOL[j], "%s %s: logits off by %.3g relative (bound %.3g)", ar->name, JOB_NAMES[j], err,
                      TOL[j]);
            CHECK_MSG(ng == GREEDY && same >= need, "%s %s: greedy tokens agree on %d of %d (need %d)", ar->name,
                      JOB_NAMES[j], same, GREEDY, need);
        }
        for (int t = 0; t < 4; t++) mem_free(cs->lm[t].logits);
    }
    mem_free(lc);
    mem_free(fused_lc);
    json_decref(res);
    root_remove();
    return check_finish("llama_interop");
}

/* test_llama_fuse_gguf.c: `lmtune fuse` on a GGUF base (--model FILE.gguf),
 * checked with a real llama.cpp. For each base (a llama model, GQA, whose
 * q/k rows llama.cpp's converter permutes, quantized to Q8_0 and to Q4_K;
 * a qwen2 model with biases, no permutation, Q8_0), all through the CLI:
 * lmtune trains a LoRA on every projection of every block on the GGUF
 * file itself, fuses it into that file (--gguf-type f32, the default f16,
 * and q8_0 for the Q8_0 bases) and exports the adapter as a GGUF LoRA
 * (--export-gguf-adapter) and for PEFT (--export-peft) in the same call.
 *
 * The bases keep their LM head (output.weight) in f32 and quantize every
 * other matrix (the embedding too). Every quantized matrix but the
 * embedding is adapted, so in the f32 fuse no product of llama.cpp uses a
 * quantized weight (the embedding's rows are dequantized exactly by
 * get_rows), and float rounding is all that separates:
 *   (1) lmtune on the fused f32 file vs lmtune on the base with the adapter:
 *       1e-5 of the largest logit, the 32 greedy tokens (KV-cached decode,
 *       as generate) equal;
 *       the f16 and q8_0 fuses, whose merged matrices are rounded, within
 *       the bounds of (2) with greedy tokens equal while the pick is clear;
 *   (2) llama.cpp on the fused file vs lmtune on the same file: the bounds
 *       of test_llama_interop.c (f32 1e-4 and all 32 greedy tokens; f16
 *       16 * 2^-11 and q8_0 16/127 with greedy tokens equal while lmtune's
 *       pick is clear by twice the bound);
 *   (3) llama.cpp on the fused f32 file vs lmtune on the base with the
 *       adapter: 1e-4, 32 greedy tokens (the whole chain at once);
 *   (4) llama.cpp on the fused f32 file vs llama.cpp on the base with
 *       lmtune's GGUF adapter (--lora): llama.cpp multiplies the base's
 *       quantized matrices with activations rounded to 8 bits (Q8_0 / Q8_K),
 *       the bound of test_llama_quant_base.c, 16/127, greedy tokens equal
 *       while the pick is clear;
 *       (the same rounding measured on the base alone, llama.cpp vs lmtune,
 *       is printed beside it);
 *   (5) the adapter matters: lmtune without it is more than 1e-2 away, so
 *       the 1e-4 checks see a wrong merge (q/k rows, scale, a missing
 *       matrix);
 *   (6) a DoRA adapter on the Q4_K base, fused f32: (1) and (3);
 *   (7) `lmtune generate` (greedy, 32 tokens) prints the same text on the
 *       fused file as on the base with the adapter.
 * test-timeout: 900 */
#include "check.h"
#include "llama_models.h"
#include "llama_run.h"
#include "cli_run.h"
#include "requant.h"
#include "model/gguf_export.h"
#include "tokenizer/tokenizer.h"
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

enum { GREEDY = 32, N_FUSE = 3 };

static const char CHATML[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
static const char PROMPT[] = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";

/* The fused files of a base: --gguf-type and its bound against lmtune on the same file. */
static const char *const FUSE_TYPE[N_FUSE] = {"f32", "f16", "q8_0"};
static const double FUSE_TOL[N_FUSE] = {1e-4, 16 * 0x1p-11, 16.0 / 127};
static const double Q_BOUND = 16.0 / 127;

typedef struct {
    const char *name;
    Arch arch;
    int quant;          /* GGML_TYPE_Q8_0 or GGML_TYPE_Q4_K */
    int n_fuse;         /* the first n of FUSE_TYPE */
    bool dora;          /* also a DoRA adapter, fused f32 */
} Case;

static const Case CASES[] = {
    {"llama_Q8_0", {"llama", "llama", 4, 2, 64, 256, 512, 2, 0, false, false, false}, GGML_TYPE_Q8_0, 3, false},
    {"llama_Q4_K", {"llama", "llama", 4, 2, 64, 256, 512, 2, 0, false, false, false}, GGML_TYPE_Q4_K, 2, true},
    {"qwen2_bias_Q8_0", {"qwen2", "qwen2", 4, 2, 64, 256, 512, 2, 0, false, true, false}, GGML_TYPE_Q8_0, 3, false},
};
enum { N_CASES = sizeof CASES / sizeof CASES[0] };


/* lmtune's answers on one model (+ adapter). */
typedef struct {
    float *logits;
    int32_t greedy[GREEDY];
    double margin[GREEDY];
} Lm;

typedef struct {
    int V, T;
    int32_t *ids;
    Lm base_ad, base, fused[N_FUSE], dora_ad, dora_fused;
    int job_fused[N_FUSE], job_lora, job_base, job_dora;
} Run;

static bool lm(const char *model, const char *adapter, Run *r, Lm *out) {
    out->logits = mem_alloc((size_t)r->T * r->V * sizeof(float));
    return out->logits && lmtune_side(model, adapter, r->ids, r->T, r->V, GREEDY, out->logits, out->greedy,
                                      out->margin) == 0;
}

/* The text `lmtune generate` prints, greedy, 32 tokens. */
static bool generate(const char *model, const char *adapter, char *out, size_t cap) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' %s%s%s --prompt 'What is the capital of France?' "
             "--max-tokens 32 --temp 0 --quiet 2>&1", bin, model, adapter ? "--adapter-path '" : "",
             adapter ? adapter : "", adapter ? "'" : "");
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, cap - 1, p) : 0;
    out[n] = 0;
    return p && pclose(p) == 0 && n > 0;
}

static bool prepare(const Case *c, Run *r) {
    char *text;
    size_t len;
    CHECK(dir_ensure(path(c->name, "")) == 0);
    CHECK(file_read_all("demo/data/train.jsonl", 0, &text, &len) == 0);
    CHECK(tokenizer_write_bytelevel(path(c->name, "hf"), text, len, 400, CHATML) == 0);
    mem_free(text);
    Tokenizer *tok;
    CHECK(tokenizer_load(&tok, path(c->name, "hf")) == 0);
    r->V = tokenizer_vocab_size(tok);
    size_t T;
    CHECK(tokenizer_encode(tok, PROMPT, strlen(PROMPT), false, &r->ids, &T) == 0);
    r->T = (int)T;
    tokenizer_free(tok);
    bool ok = write_model(path(c->name, "hf"), &c->arch, r->V, 91) == 0;
    ok = ok && gguf_export_model(path(c->name, "hf"), path(c->name, "f32.gguf"), GGML_TYPE_F32) == 0;
    /* alone in its folder: lmtune reads the tokenizer from the metadata, as llama.cpp does */
    ok = ok && dir_ensure(path(c->name, "base")) == 0;
    ok = ok && requantize_keep(path(c->name, "f32.gguf"), path(c->name, "base/model.gguf"), c->quant,
                               "output.weight") == 0;
    if (!ok) {
        fprintf(stderr, "%s: %s\n", c->name, error_message());
        return false;
    }
    const char *base = path(c->name, "base/model.gguf"), *ad = path(c->name, "adapters");
    ok = sh("'%s' train --model '%s' --data demo/data --iters 30 --batch-size 4 --num-layers -1 --learning-rate 2e-3 "
            "--max-seq-length 64 --val-batches 1 --steps-per-eval 100 --threads 1 --adapter-path '%s' "
            "-c tests/llama/lora_all.yaml > '%s.log' 2>&1", bin, base, ad, ad) == 0;
    /* f32 with both adapter exports; the default (f16, ggml-model-f16.gguf); q8_0 */
    ok = ok && sh("'%s' fuse --model '%s' --adapter-path '%s' --save-path '%s' --gguf-type f32 --gguf-path fused.gguf "
                  "--export-gguf-adapter '%s' --export-peft '%s' > '%s.log' 2>&1", bin, base, ad,
                  path(c->name, "fused_f32"), path(c->name, "lora.gguf"), path(c->name, "peft"),
                  path(c->name, "fused_f32")) == 0;
    ok = ok && sh("'%s' fuse --model '%s' --adapter-path '%s' --save-path '%s' > '%s.log' 2>&1", bin, base, ad,
                  path(c->name, "fused_f16"), path(c->name, "fused_f16")) == 0;
    if (c->n_fuse > 2)
        ok = ok && sh("'%s' fuse --model '%s' --adapter-path '%s' --save-path '%s' --export-gguf --gguf-type q8_0 "
                      "--gguf-path fused.gguf > '%s.log' 2>&1", bin, base, ad, path(c->name, "fused_q8_0"),
                      path(c->name, "fused_q8_0")) == 0;
    if (c->dora) {
        const char *dora = path(c->name, "dora");
        ok = ok && sh("'%s' train --model '%s' --data demo/data --iters 30 --batch-size 4 --num-layers -1 "
                      "--learning-rate 2e-3 --max-seq-length 64 --val-batches 1 --steps-per-eval 100 --threads 1 "
                      "--adapter-path '%s' -c tests/llama/lora_all.yaml --fine-tune-type dora > '%s.log' 2>&1", bin,
                      base, dora, dora) == 0;
        ok = ok && sh("'%s' fuse --model '%s' --adapter-path '%s' --save-path '%s' --gguf-type f32 > '%s.log' 2>&1",
                      bin, base, dora, path(c->name, "fused_dora"), path(c->name, "fused_dora")) == 0;
        ok = ok && lm(base, dora, r, &r->dora_ad) && lm(path(c->name, "fused_dora/ggml-model-f16.gguf"), NULL, r,
                                                       &r->dora_fused);
    }
    CHECK_MSG(ok, "%s: lmtune train/fuse failed (logs in %s)", c->name, path(c->name, ""));
    if (!ok) return false;
    /* the PEFT export: A (r, in) and B (out, r) of the 7 projections of each block */
    StFile pf;
    ok = st_open(&pf, path(c->name, "peft/adapter_model.safetensors")) == 0;
    CHECK_MSG(ok && pf.n_tensors == (size_t)(c->arch.L * 7 * 2), "%s: PEFT export: %s", c->name,
              ok ? "wrong tensor count" : error_message());
    if (ok) {
        const StTensor *b = st_find(&pf, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
        CHECK(b && b->ndim == 2 && b->shape[0] == c->arch.H * c->arch.D && b->shape[1] == 8);
        st_close(&pf);
    }
    ok = lm(base, ad, r, &r->base_ad) && lm(base, NULL, r, &r->base);
    const char *fused[N_FUSE] = {path(c->name, "fused_f32/fused.gguf"), path(c->name, "fused_f16/ggml-model-f16.gguf"),
                                 path(c->name, "fused_q8_0/fused.gguf")};
    for (int f = 0; f < c->n_fuse && ok; f++) ok = lm(fused[f], NULL, r, &r->fused[f]);
    CHECK_MSG(ok, "%s: lmtune on the files: %s", c->name, error_message());
    if (!ok) return false;
    /* the fused files hold what was asked: the merged matrices in the type, the others as stored */
    GgufFile g;
    const char *types[N_FUSE] = {"F32", "F16", "Q8_0"};
    for (int f = 0; f < c->n_fuse; f++) {
        CHECK(gguf_open(&g, fused[f]) == 0);
        const GgufTensorInfo *q = gguf_find_tensor(&g, "blk.1.attn_q.weight");
        const GgufTensorInfo *e = gguf_find_tensor(&g, "token_embd.weight");
        const GgufTensorInfo *o = gguf_find_tensor(&g, "output.weight");
        CHECK_MSG(q && !strcmp(ggml_type_name(q->type), types[f]), "%s %s: blk.1.attn_q.weight is %s", c->name,
                  FUSE_TYPE[f], q ? ggml_type_name(q->type) : "missing");
        CHECK(e && e->type == c->quant);
        CHECK(o && o->type == GGML_TYPE_F32);
        CHECK(gguf_find_kv(&g, "tokenizer.ggml.merges") != NULL);
        gguf_close(&g);
    }
    /* (7) the CLI's generate */
    char want[4096], got[4096];
    ok = generate(base, ad, want, sizeof want) && generate(fused[0], NULL, got, sizeof got);
    CHECK_MSG(ok && !strcmp(want, got), "%s: lmtune generate on the fused file printed\n%s\ninstead of\n%s", c->name,
              got, want);
    return true;
}

static void report(const char *c, const char *what, double err, double bound, int same, int need) {
    printf("%-16s %-52s %10.3g %10.3g %5d/%d (need %d)\n", c, what, err, bound, same, GREEDY, need);
    CHECK_MSG(err <= bound, "%s %s: logits off by %.3g relative (bound %.3g)", c, what, err, bound);
    CHECK_MSG(same >= need, "%s %s: greedy tokens agree on %d (need %d)", c, what, same, need);
}

static int agree(const int32_t *a, const int32_t *b, int n) {
    int k = 0;
    while (k < n && a[k] == b[k]) k++;
    return k;
}

/* Greedy steps at which lmtune's pick is clear by twice the bound. */
static int clear_picks(const Lm *l, size_t n, double bound) {
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(l->logits[i]));
    int k = 0;
    while (k < GREEDY && l->margin[k] > 2 * bound * scale) k++;
    return k;
}

int main(void) {
    llama_require();
    omp_set_num_threads(1);
    cli_begin("llama_fuse_gguf");
    static Run runs[N_CASES];
    json_t *jobs = json_array();
    int at[128];
    for (int i = 0; i < 128; i++) at[i] = i;
    int n_jobs = 0;
    for (int c = 0; c < N_CASES; c++) {
        if (!prepare(&CASES[c], &runs[c])) return check_finish("llama_fuse_gguf");
        Run *r = &runs[c];
        LlamaRun run = {r->ids, r->T, at, r->T, GREEDY};
        const char *fused[N_FUSE] = {"fused_f32/fused.gguf", "fused_f16/ggml-model-f16.gguf", "fused_q8_0/fused.gguf"};
        for (int f = 0; f < CASES[c].n_fuse; f++) {
            r->job_fused[f] = n_jobs++;
            llama_job_add(jobs, path(CASES[c].name, fused[f]), NULL, &run, 1, NULL, 0);
        }
        r->job_lora = n_jobs++;
        llama_job_add(jobs, path(CASES[c].name, "base/model.gguf"), path(CASES[c].name, "lora.gguf"), &run, 1, NULL, 0);
        r->job_base = n_jobs++;
        llama_job_add(jobs, path(CASES[c].name, "base/model.gguf"), NULL, &run, 1, NULL, 0);
        if (CASES[c].dora) {
            r->job_dora = n_jobs++;
            llama_job_add(jobs, path(CASES[c].name, "fused_dora/ggml-model-f16.gguf"), NULL, &run, 1, NULL, 0);
        }
    }
    json_t *res = llama_run_jobs(jobs, root);
    json_decref(jobs);
    CHECK(res != NULL);
    if (!res) return check_finish("llama_fuse_gguf");
    printf("%-16s %-52s %10s %10s %s\n", "base", "comparison", "max rel", "bound", "greedy");
    float *lc = mem_alloc((size_t)128 * 512 * sizeof(float));
    float *lc32 = mem_alloc((size_t)128 * 512 * sizeof(float));
    for (int c = 0; c < N_CASES; c++) {
        const Case *cs = &CASES[c];
        Run *r = &runs[c];
        size_t n = (size_t)r->T * r->V;
        int32_t g[GREEDY], g32[GREEDY];
        /* (1) and (5): lmtune on its own files */
        report(cs->name, "lmtune: fused f32 vs base + adapter", rel_err(r->fused[0].logits, r->base_ad.logits, n),
               1e-5, agree(r->fused[0].greedy, r->base_ad.greedy, GREEDY), GREEDY);
        /* the rounded fuses: the merged matrices rounded to f16 / q8_0, the bound of that rounding */
        for (int f = 1; f < cs->n_fuse; f++) {
            char what[80];
            snprintf(what, sizeof what, "lmtune: fused %s vs base + adapter", FUSE_TYPE[f]);
            report(cs->name, what, rel_err(r->fused[f].logits, r->base_ad.logits, n), FUSE_TOL[f],
                   agree(r->fused[f].greedy, r->base_ad.greedy, GREEDY), clear_picks(&r->base_ad, n, FUSE_TOL[f]));
        }
        double without = rel_err(r->base.logits, r->base_ad.logits, n);
        printf("%-16s %-52s %10.3g %10s\n", cs->name, "lmtune: base without the adapter (must differ)", without,
               "> 1e-2");
        CHECK_MSG(without > 1e-2, "%s: the adapter changes the logits by %.3g only", cs->name, without);
        /* (2) llama.cpp on each fused file vs lmtune on it */
        for (int f = 0; f < cs->n_fuse; f++) {
            bool got = true;
            float *dst = f == 0 ? lc32 : lc;
            for (int t = 0; t < r->T && got; t++) got = llama_logits(res, r->job_fused[f], 0, t, dst + (size_t)t * r->V,
                                                                    r->V);
            CHECK_MSG(got, "%s: no llama.cpp logits for the %s fuse", cs->name, FUSE_TYPE[f]);
            if (!got) continue;
            int ng = llama_greedy(res, r->job_fused[f], 0, f == 0 ? g32 : g, GREEDY);
            CHECK(ng == GREEDY);
            char what[80];
            snprintf(what, sizeof what, "llama.cpp vs lmtune: fused %s", FUSE_TYPE[f]);
            int need = f == 0 ? GREEDY : clear_picks(&r->fused[f], n, FUSE_TOL[f]);
            report(cs->name, what, rel_err(dst, r->fused[f].logits, n), FUSE_TOL[f],
                   agree(f == 0 ? g32 : g, r->fused[f].greedy, GREEDY), need);
        }
        /* (3) the whole chain: llama.cpp on the fused f32 file vs lmtune on the base with the adapter */
        report(cs->name, "llama.cpp fused f32 vs lmtune base + adapter", rel_err(lc32, r->base_ad.logits, n), 1e-4,
               agree(g32, r->base_ad.greedy, GREEDY), GREEDY);
        /* (4) llama.cpp: fused f32 vs base + lmtune's GGUF adapter */
        bool got = true;
        for (int t = 0; t < r->T && got; t++) got = llama_logits(res, r->job_lora, 0, t, lc + (size_t)t * r->V, r->V);
        CHECK_MSG(got, "%s: no llama.cpp logits for base + LoRA", cs->name);
        if (got) {
            int ng = llama_greedy(res, r->job_lora, 0, g, GREEDY);
            CHECK(ng == GREEDY);
            report(cs->name, "llama.cpp: fused f32 vs base + lmtune's LoRA", rel_err(lc, lc32, n), Q_BOUND,
                   agree(g, g32, GREEDY), clear_picks(&r->fused[0], n, Q_BOUND));
        }
        /* what (4) is made of: llama.cpp's 8-bit activations on the base alone */
        got = true;
        for (int t = 0; t < r->T && got; t++) got = llama_logits(res, r->job_base, 0, t, lc + (size_t)t * r->V, r->V);
        CHECK_MSG(got, "%s: no llama.cpp logits for the base", cs->name);
        if (got) {
            int ng = llama_greedy(res, r->job_base, 0, g, GREEDY);
            CHECK(ng == GREEDY);
            report(cs->name, "base alone: llama.cpp vs lmtune", rel_err(lc, r->base.logits, n), Q_BOUND,
                   agree(g, r->base.greedy, GREEDY), clear_picks(&r->base, n, Q_BOUND));
        }
        if (cs->dora) {
            /* DoRA (no GGUF adapter can carry it): fused f32 against lmtune's base + adapter */
            report(cs->name, "DoRA: lmtune fused f32 vs base + adapter",
                   rel_err(r->dora_fused.logits, r->dora_ad.logits, n), 1e-5,
                   agree(r->dora_fused.greedy, r->dora_ad.greedy, GREEDY), GREEDY);
            got = true;
            for (int t = 0; t < r->T && got; t++)
                got = llama_logits(res, r->job_dora, 0, t, lc + (size_t)t * r->V, r->V);
            CHECK_MSG(got, "%s: no llama.cpp logits for the DoRA fuse", cs->name);
            if (got) {
                CHECK(llama_greedy(res, r->job_dora, 0, g, GREEDY) == GREEDY);
                report(cs->name, "DoRA: llama.cpp fused f32 vs lmtune base + adapter",
                       rel_err(lc, r->dora_ad.logits, n), 1e-4, agree(g, r->dora_ad.greedy, GREEDY), GREEDY);
            }
            mem_free(r->dora_ad.logits);
            mem_free(r->dora_fused.logits);
        }
        mem_free(r->base_ad.logits);
        mem_free(r->base.logits);
        for (int f = 0; f < cs->n_fuse; f++) mem_free(r->fused[f].logits);
        mem_free(r->ids);
    }
    mem_free(lc);
    mem_free(lc32);
    json_decref(res);
    if (root_remove() < 0) return 1;
    return check_finish("llama_fuse_gguf");
}

/* test_llama_quant_base.c: (c) of the GGUF checks: a LoRA adapter trained
 * by lmtune on a quantized GGUF base, applied by a real llama.cpp to that
 * same file (--lora), gives lmtune's own logits. Bases: a llama model
 * (GQA, hidden 256, so every matrix row holds whole Q4_K super-blocks)
 * exported by lmtune as f32 GGUF, then its matrices (the embedding too)
 * quantized to Q4_K (a simple min/max quantizer of this test: any valid
 * blocks do) and to Q8_0 (ggml's reference quantizer).
 *
 * lmtune trains on the GGUF file itself (`--model FILE.gguf`: the blocks
 * stay in the mapped file and are expanded tile by tile in the products;
 * the tokenizer is read from the metadata), and its logits on the file
 * equal its logits on the same weights dequantized into an f32 model
 * directory (1e-5: the same values, multiplied panel by panel). The
 * adapter is exported from lmtune's adapters.safetensors as a GGUF LoRA
 * (q/k lora_b permuted for llama.cpp's row order).
 *
 * Bound: llama.cpp multiplies Q4_K and Q8_0 weights with activations
 * quantized to 8 bits per block (Q8_K / Q8_0), relative ~1/127 of a typical
 * value, over ~15 products: 16/127 of the largest logit, as for the q8_0
 * export in test_llama_interop.c. The adapter must matter: without it
 * llama.cpp's logits are farther from lmtune's-with-adapter than the bound. */
#include "check.h"
#include "llama_models.h"
#include "llama_run.h"
#include "requant.h"
#include "model/gguf_export.h"
#include "tokenizer/tokenizer.h"
#include <omp.h>
#include <unistd.h>

enum { GREEDY = 24 };

static const char CHATML[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
static const char PROMPT[] = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
static const double BOUND = 16.0 / 127;

static char root[128];

static char *path(const char *name) {
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, name);
    return buf[k];
}

static int train(const char *model, const char *out) {
    const char *bin = getenv("LMTUNE_BIN") ? getenv("LMTUNE_BIN") : "./lmtune";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' train --model '%s' --data demo/data --iters 30 --batch-size 4 --num-layers -1 "
             "--learning-rate 2e-3 --max-seq-length 64 --val-batches 1 --steps-per-eval 100 --threads 1 "
             "--adapter-path '%s' -c tests/llama/lora_all.yaml > '%s.log' 2>&1", bin, model, out, out);
    return system(cmd) == 0 ? 0 : error_set("lmtune train failed (%s.log)", out);
}

/* The "frozen weights" line of `lmtune plan` for a LoRA on the model. */
static size_t plan_frozen_bytes(const char *model) {
    const char *bin = getenv("LMTUNE_BIN") ? getenv("LMTUNE_BIN") : "./lmtune";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' plan --model '%s' --data demo/data --batch-size 4 --num-layers -1 "
             "-c tests/llama/lora_all.yaml | awk '$1 == \"frozen\" && $2 == \"weights\" {print $3}'", bin, model);
    FILE *p = popen(cmd, "r");
    unsigned long long v = 0;
    if (!p || fscanf(p, "%llu", &v) != 1) v = 0;
    if (p) pclose(p);
    return (size_t)v;
}

int main(void) {
    llama_require();
    omp_set_num_threads(1);
    snprintf(root, sizeof root, "build/test_llama_quant_base.%d", (int)getpid());
    CHECK(dir_ensure(root) == 0);
    const Arch arch = {"llama_q", "llama", 4, 2, 64, 256, 512, 2, 0, true, false, false};
    char *text;
    size_t len;
    CHECK(file_read_all("demo/data/train.jsonl", 0, &text, &len) == 0);
    CHECK(tokenizer_write_bytelevel(path("base"), text, len, 400, CHATML) == 0);
    mem_free(text);
    Tokenizer *tok;
    CHECK(tokenizer_load(&tok, path("base")) == 0);
    int V = tokenizer_vocab_size(tok);
    int32_t *ids;
    size_t T;
    CHECK(tokenizer_encode(tok, PROMPT, strlen(PROMPT), false, &ids, &T) == 0);
    tokenizer_free(tok);
    CHECK(write_model(path("base"), &arch, V, 77) == 0);
    CHECK(gguf_export_model(path("base"), path("f32.gguf"), GGML_TYPE_F32) == 0);
    const int types[2] = {GGML_TYPE_Q4_K, GGML_TYPE_Q8_0};
    const char *names[2] = {"Q4_K", "Q8_0"};
    json_t *jobs = json_array();
    int at[128];
    for (int i = 0; i < 128; i++) at[i] = i;
    LlamaRun run = {ids, (int)T, at, (int)T, GREEDY};
    float *lm[2];
    int32_t lm_greedy[2][GREEDY];
    double lm_margin[2][GREEDY];
    for (int q = 0; q < 2; q++) {
        char gg[96];
        char deq[64];
        char ad[64];
        char lg[64];
        snprintf(gg, sizeof gg, "%s.gguf", names[q]);
        snprintf(deq, sizeof deq, "deq_%s", names[q]);
        snprintf(ad, sizeof ad, "adapters_%s", names[q]);
        snprintf(lg, sizeof lg, "lora_%s.gguf", names[q]);
        bool ok = requantize(path("f32.gguf"), path(gg), types[q]) == 0;
        ok = ok && write_dequantized(path(gg), path("base"), path(deq)) == 0;
        /* alone in its folder: the tokenizer comes from the metadata */
        char alone[64];
        snprintf(alone, sizeof alone, "alone_%s", names[q]);
        char file[300];
        snprintf(file, sizeof file, "%s/model.gguf", path(alone));
        ok = ok && dir_ensure(path(alone)) == 0 && rename(path(gg), file) == 0;
        ok = ok && train(file, path(ad)) == 0;
        if (ok) {
            /* the plan counts the file's matrix bytes, not a dequantized copy */
            GgufFile gf;
            size_t want = 0;
            CHECK(gguf_open(&gf, file) == 0);
            for (size_t i = 0; i < gf.n_tensors; i++)
                if (gf.tensors[i].n_dims == 2) want += gf.tensors[i].bytes;
            gguf_close(&gf);
            size_t got = plan_frozen_bytes(file);
            printf("%s: planned frozen weights %zu bytes, the file's matrices %zu bytes\n", names[q], got, want);
            CHECK(got == want);
        }
        ok = ok && gguf_export_adapter(file, path(ad), path(lg)) == 0;
        lm[q] = mem_alloc(T * (size_t)V * sizeof(float));
        ok = ok && lmtune_side(file, path(ad), ids, (int)T, V, GREEDY, lm[q], lm_greedy[q], lm_margin[q]) == 0;
        float *on_deq = mem_alloc(T * (size_t)V * sizeof(float));
        int32_t g2[GREEDY];
        double m2[GREEDY];
        ok = ok && lmtune_side(path(deq), path(ad), ids, (int)T, V, GREEDY, on_deq, g2, m2) == 0;
        if (ok) {
            double e = rel_err(lm[q], on_deq, T * (size_t)V);
            printf("%s: lmtune on the GGUF file vs on its dequantized weights: max rel err %.3g\n", names[q], e);
            CHECK(e <= 1e-5);
            CHECK(!memcmp(g2, lm_greedy[q], sizeof g2));
        }
        mem_free(on_deq);
        snprintf(gg, sizeof gg, "%s/model.gguf", alone);
        CHECK_MSG(ok, "%s: %s", names[q], error_message());
        if (!ok) return check_finish("llama_quant_base");
        llama_job_add(jobs, path(gg), path(lg), &run, 1, NULL, 0);
        llama_job_add(jobs, path(gg), NULL, &run, 1, NULL, 0);
    }
    json_t *res = llama_run_jobs(jobs, root);
    json_decref(jobs);
    CHECK(res != NULL);
    if (!res) return check_finish("llama_quant_base");
    float *lc = mem_alloc(T * (size_t)V * sizeof(float));
    for (int q = 0; q < 2; q++) {
        bool got = true;
        for (size_t t = 0; t < T && got; t++) got = llama_logits(res, 2 * q, 0, (int)t, lc + t * V, V);
        CHECK(got);
        double err = rel_err(lc, lm[q], T * (size_t)V);
        int32_t g[GREEDY];
        int ng = llama_greedy(res, 2 * q, 0, g, GREEDY);
        int same = 0;
        while (same < ng && g[same] == lm_greedy[q][same]) same++;
        double scale = 0;
        for (size_t i = 0; i < T * (size_t)V; i++) scale = fmax(scale, fabs(lm[q][i]));
        int clear = 0;
        while (clear < GREEDY && lm_margin[q][clear] > 2 * BOUND * scale) clear++;
        for (size_t t = 0; t < T && got; t++) got = llama_logits(res, 2 * q + 1, 0, (int)t, lc + t * V, V);
        double without = rel_err(lc, lm[q], T * (size_t)V);
        printf("%s base + lmtune's LoRA: llama.cpp vs lmtune max rel err %.3g (bound %.3g), greedy %d/%d equal "
               "(clear picks %d); llama.cpp without the LoRA: %.3g\n", names[q], err, BOUND, same, GREEDY, clear,
               without);
        CHECK(err <= BOUND);
        CHECK(same >= clear);
        CHECK_MSG(without > BOUND, "%s: the adapter changes nothing measurable (%.3g)", names[q], without);
        mem_free(lm[q]);
    }
    mem_free(lc);
    mem_free(ids);
    json_decref(res);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (check_failed == 0 && system(cmd) != 0) return 1;
    return check_finish("llama_quant_base");
}

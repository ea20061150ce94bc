/* llama_run.h: what the C tests need to ask a real llama.cpp something: the
 * install check (tests/llama/install.sh, a SKIP with exit 77 when node or
 * the package cannot be had), a job list written as JSON for
 * tests/llama/llama_eval.mjs, the run, and the parsed answer. */
#ifndef LT_TESTS_LLAMA_RUN_H
#define LT_TESTS_LLAMA_RUN_H
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exits 77 with "SKIP: ..." unless llama.cpp can run (installs it first). */
static inline void llama_require(void) {
    if (system("command -v node >/dev/null 2>&1") != 0) {
        printf("SKIP: node is not installed (scripts/install-deps.sh installs it)\n");
        exit(77);
    }
    if (system("tests/llama/install.sh >/dev/null") != 0) {
        printf("SKIP: tests/llama/install.sh could not install node-llama-cpp\n");
        exit(77);
    }
}

/* One evaluation: logits at `n_at` positions of `tokens`, then `greedy`
 * greedy tokens. */
typedef struct {
    const int32_t *tokens;
    int n_tokens;
    const int *at;
    int n_at;
    int greedy;
} LlamaRun;

/* Appends a job (model, optional LoRA at scale 1, runs, texts to tokenize). */
static inline void llama_job_add(json_t *jobs, const char *model, const char *lora, const LlamaRun *runs, int n_runs,
                                 const char *const *texts, int n_texts) {
    json_t *job = json_object();
    json_object_set_new(job, "model", json_string(model));
    if (lora) json_object_set_new(job, "lora", json_string(lora));
    json_t *rs = json_array();
    for (int i = 0; i < n_runs; i++) {
        json_t *r = json_object();
        json_t *toks = json_array();
        for (int k = 0; k < runs[i].n_tokens; k++) json_array_append_new(toks, json_integer(runs[i].tokens[k]));
        json_t *at = json_array();
        for (int k = 0; k < runs[i].n_at; k++) json_array_append_new(at, json_integer(runs[i].at[k]));
        json_object_set_new(r, "tokens", toks);
        json_object_set_new(r, "logits_at", at);
        json_object_set_new(r, "greedy", json_integer(runs[i].greedy));
        json_array_append_new(rs, r);
    }
    json_object_set_new(job, "runs", rs);
    if (n_texts > 0) {
        json_t *tx = json_array();
        for (int i = 0; i < n_texts; i++) json_array_append_new(tx, json_string(texts[i]));
        json_object_set_new(job, "tokenize", tx);
        if (n_runs == 0) json_object_set_new(job, "vocab_only", json_true());
    }
    json_array_append_new(jobs, job);
}

/* Runs llama_eval.mjs on the jobs (written to DIR/jobs.json) and returns the
 * "results" array (a new reference), or NULL. */
static inline json_t *llama_run_jobs(json_t *jobs, const char *dir) {
    char in[512];
    char out[512];
    char cmd[1400];
    snprintf(in, sizeof in, "%s/jobs.json", dir);
    snprintf(out, sizeof out, "%s/llama_out.json", dir);
    json_t *root = json_object();
    json_object_set(root, "jobs", jobs);
    int wrc = json_dump_file(root, in, 0);
    json_decref(root);
    if (wrc != 0) return NULL;
    snprintf(cmd, sizeof cmd, "node tests/llama/llama_eval.mjs '%s' > '%s'", in, out);
    if (system(cmd) != 0) {
        fprintf(stderr, "llama.cpp run failed: %s\n", cmd);
        return NULL;
    }
    json_error_t err;
    json_t *res = json_load_file(out, 0, &err);
    if (!res) {
        fprintf(stderr, "%s: %s\n", out, err.text);
        return NULL;
    }
    const char *tag = json_string_value(json_object_get(res, "llama_cpp"));
    printf("llama.cpp %s (node-llama-cpp)\n", tag ? tag : "?");
    json_t *r = json_object_get(res, "results");
    json_incref(r);
    json_decref(res);
    return r;
}

/* Logits row k of run `run` of result `job` into dst (V floats); false when
 * absent or of another length. */
static inline bool llama_logits(json_t *results, int job, int run, int k, float *dst, int V) {
    json_t *runs = json_object_get(json_array_get(results, (size_t)job), "runs");
    json_t *row = json_array_get(json_object_get(json_array_get(runs, (size_t)run), "logits"), (size_t)k);
    if (!json_is_array(row) || (int)json_array_size(row) != V) return false;
    for (int i = 0; i < V; i++) dst[i] = (float)json_number_value(json_array_get(row, (size_t)i));
    return true;
}

/* The greedy ids of a run into dst (at most cap); returns how many. */
static inline int llama_greedy(json_t *results, int job, int run, int32_t *dst, int cap) {
    json_t *runs = json_object_get(json_array_get(results, (size_t)job), "runs");
    json_t *g = json_object_get(json_array_get(runs, (size_t)run), "greedy");
    int n = 0;
    for (size_t i = 0; i < json_array_size(g) && n < cap; i++)
        dst[n++] = (int32_t)json_integer_value(json_array_get(g, i));
    return n;
}
#endif

/* test_plan_limit.c: the promises of --memory-limit and --batch-size auto,
 * through the CLI ($LMTUNE_BIN):
 *  - a run over the limit is refused BEFORE any weight is loaded: the model
 *    here is a 70B-shaped directory whose model.safetensors is a sparse file
 *    of ~280 GB (a valid header, holes for data); the refusal must come in
 *    seconds, name the largest parts and the levers, and exit 1. Loading the
 *    weights would take minutes and run out of memory.
 *  - `plan` prints the same total as the refusal's arithmetic;
 *  - --batch-size auto picks the largest micro-batch whose plan fits, keeping
 *    the effective batch, for limits placed between the plans of B=2 and B=4;
 *  - a run admitted under a limit stays under it (measured peak);
 *  - eval and generate are planned and refused the same way, with their
 *    levers (--batch-size, --max-tokens), and eval --plan prints the plan.
 * A second, tiny model makes the auto and measured checks quick. */
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "check.h"
#include "formats/hf_config.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[128];
static const char *bin;

/* Under AddressSanitizer the resident set is ASan's too (shadow memory, the
 * allocator's quarantine): the sanitized build runs every command for its
 * memory errors, and only the plain build compares resident sizes. */
#if defined(__SANITIZE_ADDRESS__)
static const bool sanitized = true;
#else
static const bool sanitized = false;
#endif

/* Runs a shell command, captures stdout+stderr into out; returns the exit status. */
static int run(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t cap, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static size_t planned_total(const char *text) {
    const char *p = strstr(text, "Planned peak: ");
    return p ? strtoull(p + 14, NULL, 10) : 0;
}

/* The run's own plan in `plan --verbose` output: the total less the
 * start-up probe's floor (plan_note_startup_peak), when the plan has one. */
static size_t planned_run(const char *text) {
    size_t total = planned_total(text), floor = 0;
    const char *f = strstr(text, "start-up probes' peak above the run's (measured)");
    if (f) floor = strtoull(f + strlen("start-up probes' peak above the run's (measured)"), NULL, 10);
    return total > floor ? total - floor : 0;
}

/* A safetensors file with a real header and sparse (hole) data. */
static int write_sparse_model(const char *path, const ModelConfig *c) {
    size_t cap = 1 << 20, k = 0, off = 0;
    char *h = malloc(cap);
    k += snprintf(h + k, cap - k, "{");
    int C = c->hidden_size, F = c->intermediate_size, Dq = c->num_attention_heads * c->head_dim,
        Dkv = c->num_key_value_heads * c->head_dim;
#define T(name, a, b) do { size_t bytes = (size_t)(a) * (size_t)(b) * 2; \
        k += snprintf(h + k, cap - k, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}", \
                      off ? "," : "", name, (int)(a), (int)(b), off, off + bytes); off += bytes; } while (0)
#define T1(name, a) do { size_t bytes = (size_t)(a) * 2; \
        k += snprintf(h + k, cap - k, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}", \
                      name, (int)(a), off, off + bytes); off += bytes; } while (0)
    T("model.embed_tokens.weight", c->vocab_size, C);
    char nm[128];
    for (int l = 0; l < c->num_hidden_layers; l++) {
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l); T1(nm, C);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l); T1(nm, C);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.weight", l); T(nm, Dq, C);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_proj.weight", l); T(nm, Dkv, C);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.weight", l); T(nm, Dkv, C);
        snprintf(nm, sizeof nm, "model.layers.%d.self_attn.o_proj.weight", l); T(nm, C, Dq);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l); T(nm, F, C);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l); T(nm, F, C);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l); T(nm, C, F);
    }
    T1("model.norm.weight", C);
    T("lm_head.weight", c->vocab_size, C);
    k += snprintf(h + k, cap - k, "}");
    while (k % 8) h[k++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned long long n = k;
    fwrite(&n, 8, 1, f);
    fwrite(h, 1, k, f);
    fclose(f);
    free(h);
    return truncate(path, (off_t)(8 + k + off));
}

int main(void) {
    bin = getenv("LMTUNE_BIN");
    if (!bin) bin = "./lmtune";
    static char out[1 << 16];
    strcpy(dir, "/tmp/lmtune-limit-XXXXXX");
    if (!mkdtemp(dir)) return 1;

    /* Data: 16 short text lines (the tokenizer is bytes-only). */
    char path[512];
    snprintf(path, sizeof path, "%s/data", dir);
    CHECK(dir_ensure(path) == 0);
    snprintf(path, sizeof path, "%s/data/train.jsonl", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 16; i++) fprintf(f, "{\"text\": \"line %d: a sentence of training text, long enough.\"}\n", i);
    fclose(f);

    /* 1. A Llama-70B-shaped model with sparse weights. */
    ModelConfig c;
    CHECK(run(out, sizeof out, "%s init --preset tiny --out %s/big >/dev/null", bin, dir) == 0); /* tokenizer files */
    snprintf(path, sizeof path, "%s/big/config.json", dir);
    CHECK(hf_config_load(&c, path) == 0);
    int tok_vocab = c.vocab_size;
    c.hidden_size = 8192; c.intermediate_size = 28672; c.num_hidden_layers = 80; c.num_attention_heads = 64;
    c.num_key_value_heads = 8; c.head_dim = 128; c.vocab_size = 128256; c.tie_word_embeddings = false;
    c.torch_dtype = DTYPE_BF16; c.max_position_embeddings = 8192;
    if (tok_vocab > c.vocab_size) return 1;
    CHECK(hf_config_write(&c, path) == 0);
    snprintf(path, sizeof path, "%s/big/model.safetensors", dir);
    CHECK(write_sparse_model(path, &c) == 0);

    double t0 = time_now();
    int rc = run(out, sizeof out, "%s plan --model %s/big --data %s/data --batch-size 4 --num-layers 8", bin, dir, dir);
    double t_plan = time_now() - t0;
    size_t total = planned_total(out);
    printf("70B-shaped plan: %zu bytes in %.2f s\n", total, t_plan);
    CHECK(rc == 0 && total > 100000000000ull);
    CHECK_MSG(t_plan < 5, "plan of a 70B-shaped model took %.2f s", t_plan);

    t0 = time_now();
    rc = run(out, sizeof out, "%s train --model %s/big --data %s/data --batch-size 4 --num-layers 8 --iters 1 "
             "--adapter-path %s/ad --memory-limit 16GB", bin, dir, dir, dir);
    double t_refuse = time_now() - t0;
    printf("refused in %.2f s with exit %d:\n%s\n", t_refuse, rc, out);
    CHECK(rc == 1);
    CHECK_MSG(t_refuse < 5, "the refusal took %.2f s: were weights loaded?", t_refuse);
    CHECK(strstr(out, "--memory-limit is 16.000 GB") != NULL);
    CHECK(strstr(out, "frozen weights") != NULL);
    CHECK(strstr(out, "--grad-checkpoint") != NULL);
    CHECK(strstr(out, "--batch-size 2 --grad-accumulation-steps 2") != NULL);
    CHECK(strstr(out, "--num-layers 4") != NULL);
    CHECK(strstr(out, "Starting training") == NULL);
    snprintf(path, sizeof path, "%s/ad/adapters.safetensors", dir);
    CHECK(!file_exists(path));

    /* eval and generate plan too, and are refused the same way, with their levers */
    {
        char cp[400];
        snprintf(cp, sizeof cp, "cp %s/data/train.jsonl %s/data/test.jsonl", dir, dir);
        CHECK(system(cp) == 0);
    }
    t0 = time_now();
    rc = run(out, sizeof out, "%s eval --model %s/big --data %s/data --batch-size 4 --memory-limit 16GB", bin, dir,
             dir);
    double t_eval = time_now() - t0;
    printf("eval refused in %.2f s with exit %d:\n%s\n", t_eval, rc, out);
    CHECK(rc == 1 && t_eval < 5);
    CHECK(strstr(out, "--memory-limit is 16.000 GB") != NULL && strstr(out, "frozen weights") != NULL);
    CHECK(strstr(out, "--batch-size 2") != NULL && strstr(out, "Test loss") == NULL);
    t0 = time_now();
    rc = run(out, sizeof out, "%s generate --model %s/big --prompt hello --max-tokens 100000 --ignore-chat-template "
             "--memory-limit 16GB", bin, dir);
    double t_gen = time_now() - t0;
    printf("generate refused in %.2f s with exit %d:\n%s\n", t_gen, rc, out);
    CHECK(rc == 1 && t_gen < 5);
    CHECK(strstr(out, "KV cache") != NULL || strstr(out, "frozen weights") != NULL);
    CHECK(strstr(out, "--max-tokens 50000") != NULL);
    rc = run(out, sizeof out, "%s eval --model %s/big --data %s/data --batch-size 4 --plan", bin, dir, dir);
    CHECK(rc == 0 && planned_total(out) > 100000000000ull && strstr(out, "Test loss") == NULL);

    /* 2. --batch-size auto on the tiny model: limits between the plans. Rows
     * of ~450 bytes (tokens): the plans of micro-batch 2 and 4 then differ by
     * several MB, far more than the ~0.5 MB by which two processes' measured
     * baselines differ (with the short rows above the gap was ~1.2 MB, and
     * the limit between them was missed about one run in eight). */
    snprintf(path, sizeof path, "%s/long", dir);
    CHECK(dir_ensure(path) == 0);
    snprintf(path, sizeof path, "%s/long/train.jsonl", dir);
    f = fopen(path, "w");
    for (int i = 0; i < 16; i++) {
        fprintf(f, "{\"text\": \"line %d:", i);
        for (int k = 0; k < 8; k++) fprintf(f, " a sentence of training text, long enough.");
        fprintf(f, "\"}\n");
    }
    fclose(f);
    CHECK(run(out, sizeof out, "%s init --preset tiny --out %s/tiny >/dev/null", bin, dir) == 0);
    size_t plan_b[9] = {0};
    for (int b = 1; b <= 8; b *= 2) {
        CHECK(run(out, sizeof out, "%s plan --model %s/tiny --data %s/long --num-layers -1 --batch-size %d "
                  "--grad-accumulation-steps %d --verbose", bin, dir, dir, b, 8 / b) == 0);
        plan_b[b] = planned_run(out);
        CHECK(plan_b[b] > 0);
    }
    printf("plans of micro-batch 1/2/4/8: %zu %zu %zu %zu\n", plan_b[1], plan_b[2], plan_b[4], plan_b[8]);
    /* the runs' own plans (a plan is never below the start-up probe's resident set,
     * plan_note_startup_peak, and on this tiny model the smallest micro-batches may sit at
     * that floor) */
    CHECK(plan_b[1] < plan_b[2] && plan_b[2] < plan_b[4] && plan_b[4] < plan_b[8]);
    size_t limit = (plan_b[2] + plan_b[4]) / 2;
    rc = run(out, sizeof out, "%s plan --model %s/tiny --data %s/long --num-layers -1 --batch-size auto "
             "--effective-batch-size 8 --memory-limit %zu", bin, dir, dir, limit);
    printf("auto with a limit between B=2 (%zu) and B=4 (%zu):\n%s\n", plan_b[2], plan_b[4], out);
    CHECK(rc == 0);
    CHECK(strstr(out, "micro-batch 2 x 4 accumulation steps = effective batch 8") != NULL);

    /* 3. Admitted under a limit: the measured peak stays under it. The
     * limit is the plan of the same run plus the 3% the plan may be off by
     * (issue 20's bar: tests/memory/test_plan_exact.c); the peak is the
     * process's (wait4), not the log's rounded figure. The plan's measured
     * parts (process baseline, oneDNN primitives) are measured again by the
     * train process and differ by up to ~0.6 MB from the plan command's,
     * over 3% of this tiny run: a train refused for that ("the run needs X")
     * is retried once under X plus 3%, its own plan. */
    const char *flags = "--num-layers -1 --batch-size 4 --iters 4 --steps-per-report 1 --val-batches 1";
    CHECK(run(out, sizeof out, "%s plan --model %s/tiny --data %s/long %s", bin, dir, dir, flags) == 0);
    size_t same = planned_total(out);
    CHECK(same > 0);
    limit = same + same * 3 / 100;
    int status = 0;
    size_t peak = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        char cmd[2048], err_path[600];
        snprintf(err_path, sizeof err_path, "%s/limit-err.txt", dir);
        snprintf(cmd, sizeof cmd, "exec %s train --model %s/tiny --data %s/long %s --adapter-path %s/ad2 "
                 "--memory-limit %zu >/dev/null 2>%s", bin, dir, dir, flags, dir, limit, err_path);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
            _exit(127);
        }
        struct rusage ru;
        memset(&ru, 0, sizeof ru);
        CHECK(pid > 0 && wait4(pid, &status, 0, &ru) == pid);
        peak = (size_t)ru.ru_maxrss * 1024;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) break;
        /* refused: retry under the train's own plan, if that is what it said */
        char err[4096] = "";
        FILE *ef = fopen(err_path, "r");
        if (ef) {
            size_t n = fread(err, 1, sizeof err - 1, ef);
            err[n] = 0;
            fclose(ef);
        }
        const char *need = strstr(err, "the run needs ");
        double v = 0;
        char unit[4] = "";
        if (attempt > 0 || !need || sscanf(need + 14, "%lf %3s", &v, unit) != 2) break;
        double scale = !strcmp(unit, "MB") ? 1e6 : !strcmp(unit, "KB") ? 1e3 : !strcmp(unit, "GB") ? 1e9 : 0;
        if (scale == 0) break;
        size_t own = (size_t)(v * scale) + 10000;   /* the figure is rounded to 10 KB */
        printf("refused under %zu bytes (the plan command's %zu + 3%%): the train's own plan is %zu; retrying\n",
               limit, same, own);
        same = own;
        limit = own + own * 3 / 100;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("admitted with a limit of %zu bytes: measured peak %zu bytes (plan %zu)\n", limit, peak, same);
    CHECK(peak > 0 && (sanitized || peak <= limit));

    snprintf(out, sizeof out, "rm -rf %s", dir);
    if (system(out) != 0) return 1;
    return check_finish("memory/plan_limit");
}

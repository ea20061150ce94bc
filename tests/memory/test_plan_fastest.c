/* test_plan_fastest.c: `lmtune plan --memory-limit` answers with the fastest
 * configuration that fits (memory/run_fastest.h).
 *  - Without a limit every configuration of the effective batch fits and
 *    the answer is the fastest of them (P). With a limit between P's plan
 *    and the plan of a slower configuration Q that needs less, P is not
 *    chosen, the choice fits (its plan rebuilt here independently is under
 *    the limit) and is the fastest of the configurations that fit, so no
 *    slower than Q.
 *  - The estimates follow the FLOPs: configurations of one effective batch
 *    and dtype without recompute cost the same FLOPs; checkpointing adds
 *    exactly the chosen blocks' recompute; bf16 weights run at the bf16 rate.
 *  - Through the CLI: the plan prints the chosen flags, and `lmtune train`
 *    with them and the limit stays under it (peak RSS from wait4). */
#include "check.h"
#include "data/tiny_tokenizer.h"
#include "kernels/matmul.h"
#include "memory/run_ckpt.h"
#include "memory/run_fastest.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[128], model_dir[160], data_dir[160];

/* Under AddressSanitizer the resident set is ASan's too (shadow memory, the
 * allocator's quarantine): the sanitized build runs every command for its
 * memory errors, and only the plain build compares resident sizes. */
#if defined(__SANITIZE_ADDRESS__)
static const bool sanitized = true;
#else
static const bool sanitized = false;
#endif

static int write_data(void) {
    char path[256];
    snprintf(path, sizeof path, "mkdir -p '%s'", data_dir);
    if (system(path) != 0) return -1;
    const char *splits[2] = {"train", "valid"};
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/%s.jsonl", data_dir, splits[s]);
        FILE *f = fopen(path, "w");
        if (!f) return -1;
        for (int i = 0; i < 8; i++) {
            fprintf(f, "{\"text\": \"");
            for (int w = 0; w < 60 + i % 2; w++) fprintf(f, "the %c ", 'a' + (i + w) % 26);
            fprintf(f, "\"}\n");
        }
        fclose(f);
    }
    return 0;
}

/* Peak RSS of a command (wait4 of its shell, which execs it). */
static size_t peak_of(const char *cmd) {
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) return 0;
    return (size_t)ru.ru_maxrss * 1024;
}

int main(void) {
    const char *bin = getenv("LMTUNE_BIN");
    if (!bin) bin = "./lmtune";
    snprintf(dir, sizeof dir, "/tmp/lmtune_fastest_%d", (int)getpid());
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    ModelConfig cfg;
    CHECK(model_preset("tiny", &cfg) == 0);
    cfg.num_hidden_layers = 4;
    cfg.vocab_size = 2048;
    cfg.tie_word_embeddings = false;
    CHECK(model_init_random(model_dir, &cfg, DTYPE_F32, 7) == 0);
    CHECK(write_tokenizer(model_dir, NULL) == 0);
    CHECK(write_data() == 0);
    Tokenizer *tok = NULL;
    CHECK(tokenizer_load(&tok, model_dir) == 0);
    DatasetOptions o;
    dataset_options_default(&o);
    Dataset train, valid;
    bool present;
    CHECK(dataset_load_split(&train, data_dir, "train", tok, &o, &present) == 0);
    CHECK(dataset_load_split(&valid, data_dir, "valid", tok, &o, &present) == 0);
    matmul_probe();
    /* the baseline the CLI measures for these flags, so its choice can be
     * compared with the library's (it varies by a few hundred kB per process) */
    size_t baseline = 13u << 20;
    {
        char cmd[1024], text[16384];
        snprintf(cmd, sizeof cmd, "%s plan --model %s --data %s --num-layers -1 --batch-size 4 --iters 2 "
                 "--val-batches 1 -v 2>&1", bin, model_dir, data_dir);
        FILE *p = popen(cmd, "r");
        size_t got = p ? fread(text, 1, sizeof text - 1, p) : 0;
        text[got] = 0;
        if (p) pclose(p);
        const char *b = strstr(text, "heap), measured");
        if (b) baseline = strtoull(b + strlen("heap), measured"), NULL, 10);
        CHECK(b != NULL && baseline > 0);
    }
    RunInputs in = {&cfg, &train, &valid, NULL, 1, baseline};

    RunShape s;
    memset(&s, 0, sizeof s);
    s.model_dir = model_dir;
    s.spec.type = TUNE_LORA;
    s.spec.num_layers = -1;
    s.spec.lora_rank = 8;
    s.spec.lora_scale = 20.0f;
    s.spec.lora_keys = PROJ_ALL;
    s.spec.weight_dtype = DTYPE_F32;
    s.batch_size = 4;
    s.grad_accumulation_steps = 1;
    s.max_seq_length = 2048;
    s.iters = 2;
    s.val_batches = 1;
    optimizer_config_default(&s.optimizer);

    RunFastest all;
    CHECK(run_fastest(&s, &in, &all) == 0);
    CHECK(all.n >= 4 && all.best >= 0);
    const RunConfig *P = &all.list[all.best];
    for (int i = 0; i < all.n; i++) {
        CHECK(all.list[i].fits && all.list[i].seconds >= P->seconds);
        for (int j = 0; j < all.n; j++)
            if (all.list[i].shape.spec.weight_dtype == all.list[j].shape.spec.weight_dtype)
                CHECK_MSG(fabs(all.list[i].gflop - all.list[j].gflop) <= 1e-9 * all.list[i].gflop,
                          "configurations of one batch and dtype: %.3f vs %.3f GFLOP", all.list[i].gflop,
                          all.list[j].gflop);
    }
    /* the bf16 and f32 configurations of one micro-batch: same FLOPs, the
     * frozen products at their own rate */
    CHECK(P->shape.spec.weight_dtype == (matmul_probe()->gflops_bf16 > matmul_probe()->gflops_f32 ? DTYPE_BF16
                                                                                                 : DTYPE_F32));
    /* Q: slower than P and needing less memory */
    int q = -1;
    for (int i = 0; i < all.n; i++)
        if (all.list[i].total < P->total && all.list[i].seconds > P->seconds &&
            (q < 0 || all.list[i].total > all.list[q].total))
            q = i;
    CHECK(q >= 0);
    if (q < 0) return check_finish("memory/plan_fastest");
    size_t limit = all.list[q].total + (P->total - all.list[q].total) / 2;
    s.memory_limit = limit;
    RunFastest f;
    CHECK(run_fastest(&s, &in, &f) == 0);
    CHECK(f.best >= 0);
    const RunConfig *c = &f.list[f.best];
    CHECK(c->fits && c->total <= limit && c->seconds <= all.list[q].seconds);
    CHECK(!(c->shape.batch_size == P->shape.batch_size && c->shape.spec.weight_dtype == P->shape.spec.weight_dtype &&
            block_set_count(&c->shape.ckpt_blocks) == 0));
    RunShape check = c->shape;
    size_t rebuilt = run_plan_total(&check, &in);
    CHECK_MSG(rebuilt == c->total && rebuilt <= limit, "chosen plan %zu rebuilt as %zu, limit %zu", c->total, rebuilt,
              limit);
    for (int i = 0; i < f.n; i++)
        if (f.list[i].fits) CHECK(f.list[i].seconds >= c->seconds && f.list[i].total <= limit);
    /* checkpointing costs exactly its blocks' recompute */
    for (int i = 0; i < f.n; i++) {
        if (!block_set_count(&f.list[i].shape.ckpt_blocks)) continue;
        RunShape plain = f.list[i].shape;
        memset(&plain.ckpt_blocks, 0, sizeof plain.ckpt_blocks);
        RunCost a, b;
        CHECK(run_step_cost(&plain, &in, &a) == 0 && run_step_cost(&f.list[i].shape, &in, &b) == 0);
        double extra = 0;
        for (int l = 0; l < MODEL_MAX_BLOCKS; l++)
            if (block_set_has(&f.list[i].shape.ckpt_blocks, l)) extra += a.recompute_flops[l];
        CHECK(fabs(b.flops - a.flops - extra) <= 1e-9 * b.flops);
    }
    char flags[256];
    run_config_flags(c, flags, sizeof flags);
    printf("limit %zu between %zu (fastest, %.4f s) and %zu (%.4f s): chose %s, %zu bytes, %.4f s\n", limit, P->total,
           P->seconds, all.list[q].total, all.list[q].seconds, flags, c->total, c->seconds);

    /* the CLI prints the same choice, and training with it stays under the limit */
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s plan --model %s --data %s --num-layers -1 --batch-size 4 --iters 2 --val-batches 1 "
             "--memory-limit %zu 2>&1", bin, model_dir, data_dir, limit);
    FILE *p = popen(cmd, "r");
    size_t got = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[got] = 0;
    if (p) pclose(p);
    const char *line = strstr(out, "Fastest that fits: ");
    CHECK_MSG(line != NULL, "plan printed no choice:\n%s", out);
    if (line && !sanitized) {
        char want[300];
        snprintf(want, sizeof want, "Fastest that fits: %s:", flags);
        CHECK_MSG(!strncmp(line, want, strlen(want)), "CLI: %.200s, library: %s", line, want);
    }
    snprintf(cmd, sizeof cmd, "exec %s train --model %s --data %s --num-layers -1 %s --iters 2 --val-batches 1 "
             "--steps-per-report 1 --memory-limit %zu --adapter-path %s/ad >/dev/null 2>&1", bin, model_dir, data_dir,
             flags, limit, dir);
    size_t peak = peak_of(cmd);
    printf("training with them under the limit %zu: peak %zu bytes\n", limit, peak);
    CHECK(peak > 0 && (sanitized || peak <= limit));

    dataset_free(&train);
    dataset_free(&valid);
    tokenizer_free(tok);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return check_finish("memory/plan_fastest");
}

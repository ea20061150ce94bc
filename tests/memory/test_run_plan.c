/* test_run_plan.c: the run planner (memory/run_plan.c) as a library, without
 * the CLI: on a tiny random model and a small data set,
 *  - the spec it plans follows the shape (rows per worker, the widest batch,
 *    checkpointing) and the model walk it records is the one model_load
 *    carves (the arena part of the plan == the arena the model uses);
 *  - levers move the total the way they must (checkpointing and fewer
 *    layers save, a wider micro-batch costs);
 *  - the limit check passes at the total and fails one byte under it, with
 *    an error that names each lever and the planned total with it, which
 *    equals the plan of that variant computed here;
 *  - --batch-size auto picks the largest micro-batch whose plan fits a limit
 *    placed between two plans, keeps the effective batch, falls back to
 *    checkpointing, and refuses a limit nothing fits. */
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "check.h"
#include "kernels/matmul.h"
#include "data/tiny_tokenizer.h"
#include "memory/run_plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[128], model_dir[160], data_dir[160];

static int write_data(void) {
    char path[256];
    snprintf(path, sizeof path, "mkdir -p '%s'", data_dir);
    if (system(path) != 0) return -1;
    const char *splits[2] = {"train", "valid"};
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/%s.jsonl", data_dir, splits[s]);
        FILE *f = fopen(path, "w");
        if (!f) return -1;
        for (int i = 0; i < 12; i++) {
            fprintf(f, "{\"text\": \"");
            /* rows of nearly one length: every batch has the same width, so
             * the oneDNN allowance (per distinct width) is the same for
             * every batch size and the activations decide */
            for (int w = 0; w < 120 + i % 3; w++) fprintf(f, "the %c ", 'a' + (i + w) % 26);
            fprintf(f, "\"}\n");
        }
        fclose(f);
    }
    return 0;
}

static RunShape base_shape(void) {
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
    optimizer_config_default(&s.optimizer);
    return s;
}

/* The planned total of a variant, as the limit check prints it. */
static void check_lever_line(const char *msg, const char *lever, size_t total) {
    char want[96], bytes[32];
    snprintf(want, sizeof want, "%s", lever);
    const char *line = strstr(msg, want);
    CHECK_MSG(line != NULL, "lever \"%s\" missing from: %s", lever, msg);
    if (!line) return;
    format_bytes(bytes, sizeof bytes, total);
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char copy[256];
    snprintf(copy, sizeof copy, "%.*s", (int)(len < 255 ? len : 255), line);
    CHECK_MSG(strstr(copy, bytes) != NULL, "lever \"%s\": expected total %s in \"%s\"", lever, bytes, copy);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/lmtune_run_plan_%d", (int)getpid());
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    ModelConfig cfg;
    CHECK(model_preset("tiny", &cfg) == 0);
    cfg.num_hidden_layers = 6;
    cfg.vocab_size = 265;
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
    RunInputs in = {&cfg, &train, &valid, NULL, 1, 50u << 20};

    /* The spec follows the shape. */
    RunShape s = base_shape();
    ModelSpec spec;
    run_model_spec(&s, &in, &spec);
    int width = run_max_width(&s, &in);
    CHECK(width > 32 && (width - 1) % 32 == 0);
    CHECK(spec.max_rows == 4 && spec.max_tokens == width - 1 && spec.training && !spec.grad_checkpoint);
    RunInputs two = in;
    two.world = 2;
    run_model_spec(&s, &two, &spec);
    CHECK(spec.max_rows == 2);
    RunShape narrow = s;
    narrow.max_seq_length = 40;
    CHECK(run_max_width(&narrow, &in) <= 41);

    /* The plan's arena part is exactly what model_load and the optimizer carve. */
    MemPlan plan;
    CHECK(run_plan_build(&s, &in, &plan, &spec) == 0);
    size_t total = plan_total(&plan);
    size_t arena_bytes = plan_arena_bytes(&plan);
    CHECK(total > arena_bytes && arena_bytes > 0);
    CHECK(plan_class_bytes(&plan, MEM_RUNTIME) == in.baseline);
    Arena arena;
    CHECK(arena_init(&arena, arena_bytes) == 0);
    Model *m = NULL;
    CHECK(model_load(&m, model_dir, &spec, &arena) == 0);
    if (m) {
        TrainableTensor *list;
        size_t n = model_trainables(m, &list);
        Optimizer opt;
        Carver cv = {&arena, NULL};
        CHECK(optimizer_layout(&opt, &s.optimizer, list, n, &cv) == 0);
        CHECK_MSG(arena.used == arena.capacity, "carved %zu of %zu planned", arena.used, arena.capacity);
        optimizer_free(&opt);
        model_free(m);
    }
    arena_free(&arena);

    /* Levers move the total the way they must. */
    RunShape v = s;
    v.grad_checkpoint = true;
    size_t ckpt_total = run_plan_total(&v, &in);
    CHECK(ckpt_total > 0 && ckpt_total < total);
    v = s;
    v.spec.num_layers = 2;
    size_t two_layers = run_plan_total(&v, &in);
    CHECK(two_layers > 0 && two_layers < total);
    v = s;
    v.batch_size = 8;
    CHECK(run_plan_total(&v, &in) > total);
    v = s;
    v.batch_size = 2;
    v.grad_accumulation_steps = 2;
    size_t half_batch = run_plan_total(&v, &in);
    CHECK(half_batch > 0 && half_batch < total);

    /* The limit: at the total it fits, one byte under it does not, and the
     * error names each lever with the total of that variant. */
    s.memory_limit = total;
    CHECK(run_check_limit(&s, &in, &plan) == 0);
    s.memory_limit = total - 1;
    CHECK(run_check_limit(&s, &in, &plan) < 0);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", error_message());
    CHECK(strstr(msg, "largest parts:") != NULL);
    check_lever_line(msg, "--batch-size 2 --grad-accumulation-steps 2", half_batch);
    check_lever_line(msg, "--grad-checkpoint", ckpt_total);
    v = s;
    v.spec.num_layers = 4;   /* 6 layers: the lever offers 4 */
    check_lever_line(msg, "--num-layers 4", run_plan_total(&v, &in));
    /* the bf16 lever only where it saves memory (F32 weights rounded to
     * bf16 at load against bf16 activations and scratch: on this tiny model
     * the activations decide) */
    v = s;
    v.spec.weight_dtype = DTYPE_BF16;
    size_t bf16_total = run_plan_total(&v, &in);
    if (matmul_bf16_supported() && bf16_total < total)
        check_lever_line(msg, "--weights-dtype bf16", bf16_total);
    else
        CHECK_MSG(strstr(msg, "--weights-dtype bf16") == NULL, "bf16 lever offered at %zu >= %zu: %s", bf16_total,
                  total, msg);
    error_clear();
    plan_free(&plan);

    /* --batch-size auto, effective batch 4. */
    RunShape a = base_shape();
    a.batch_size = 0;
    a.effective_batch_size = 4;
    v = base_shape();
    size_t b4 = run_plan_total(&v, &in);
    v.batch_size = 2;
    v.grad_accumulation_steps = 2;
    size_t b2 = run_plan_total(&v, &in);
    v.batch_size = 1;
    v.grad_accumulation_steps = 4;
    size_t b1 = run_plan_total(&v, &in);
    v.grad_checkpoint = true;
    size_t b1_ckpt = run_plan_total(&v, &in);
    CHECK(b1_ckpt < b1 && b1 < b2 && b2 < b4);
    FILE *devnull = fopen("/dev/null", "w");
    a.memory_limit = (b2 + b4) / 2;
    CHECK(run_choose_batch(&a, &in, devnull) == 0);
    CHECK(a.batch_size == 2 && a.grad_accumulation_steps == 2 && !a.grad_checkpoint);
    a = base_shape();
    a.batch_size = 0;
    a.effective_batch_size = 4;
    a.memory_limit = b4;
    CHECK(run_choose_batch(&a, &in, devnull) == 0);
    CHECK(a.batch_size == 4 && a.grad_accumulation_steps == 1);
    a = base_shape();
    a.batch_size = 0;
    a.effective_batch_size = 4;
    a.memory_limit = (b1_ckpt + b1) / 2;
    if (b1_ckpt < a.memory_limit) {
        CHECK(run_choose_batch(&a, &in, devnull) == 0);
        CHECK(a.grad_checkpoint && a.batch_size * a.grad_accumulation_steps == 4);
    }
    a = base_shape();
    a.batch_size = 0;
    a.effective_batch_size = 4;
    a.memory_limit = b1_ckpt - 1;
    CHECK(run_choose_batch(&a, &in, devnull) < 0);
    CHECK_ERROR_CONTAINS("even a micro-batch of 1 with checkpointing does not fit");
    a = base_shape();
    a.batch_size = 0;
    CHECK(run_choose_batch(&a, &in, devnull) < 0);
    CHECK_ERROR_CONTAINS("needs --memory-limit");
    fclose(devnull);

    dataset_free(&train);
    dataset_free(&valid);
    tokenizer_free(tok);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_finish("memory/run_plan");
}

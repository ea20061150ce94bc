/* cmd_eval.c: `lmtune eval`: the test loss and perplexity of a model, with
 * or without an adapter, as mlx_lm.lora --test prints them:
 * "Test loss X, Test ppl Y." The loss is token-weighted over a fixed seeded
 * subset of --test-batches batches (-1: the whole test set). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "data/batching.h"
#include "data/dataset.h"
#include "dist/dist.h"
#include "model/adapter_io.h"
#include "tokenizer/tokenizer.h"
#include "train/sources.h"
#include "train/trainer.h"

typedef struct {
    const char *model, *adapter_path, *data, *chat_template;
    int test_batches, max_seq_length, batch_size, threads;
    uint64_t seed;
    bool mask_prompt;
    ArgResult parsed;
} EvalArgs;

#define OFF(f) offsetof(EvalArgs, f)
static const ArgSpec EVAL_SPECS[] = {
    {"model", 0, ARG_STRING, OFF(model), "DIR", "model directory", NULL, ARG_UNBOUNDED},
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR", "adapter directory (adapter_config.json, adapters.safetensors); none: the base model", NULL, ARG_UNBOUNDED},
    {"data", 0, ARG_STRING, OFF(data), "DIR", "directory with test.jsonl", NULL, ARG_UNBOUNDED},
    {"test-batches", 0, ARG_INT, OFF(test_batches), "N", "test batches; -1 for the whole set", NULL, ARG_AT_LEAST(-1, "an integer >= -1")},
    {"max-seq-length", 0, ARG_INT, OFF(max_seq_length), "N", "longer examples are truncated", NULL, ARG_AT_LEAST(2, "an integer >= 2")},
    {"batch-size", 0, ARG_INT, OFF(batch_size), "N", "rows per batch", NULL, ARG_AT_LEAST(1, "a positive integer")},
    {"mask-prompt", 0, ARG_BOOL, OFF(mask_prompt), NULL, "loss on the completion / last message only", NULL, ARG_UNBOUNDED},
    {"seed", 0, ARG_U64, OFF(seed), "N", "seed of the test subset", NULL, ARG_UNBOUNDED},
    {"threads", 0, ARG_INT, OFF(threads), "N", "compute threads; 0: all cores", NULL, ARG_AT_LEAST(0, "a non-negative integer")},
    {"chat-template", 0, ARG_STRING, OFF(chat_template), "FILE", "Jinja chat template instead of the tokenizer's", NULL, ARG_UNBOUNDED},
};
static const ArgTable EVAL_TABLE = {
    "eval", "eval --model DIR --data DIR [--adapter-path DIR] [flags]",
    EVAL_SPECS, sizeof EVAL_SPECS / sizeof EVAL_SPECS[0], false, NULL, NULL, NULL,
};

static int run_eval(EvalArgs *a) {
    if (!a->model) return error_set("--model is required (a model directory)");
#ifdef _OPENMP
    if (a->threads > 0) omp_set_num_threads(a->threads);
#endif
    Tokenizer *tok = NULL;
    TRY(model_tokenizer_load(&tok, a->model));
    DatasetOptions dopt;
    dataset_options_default(&dopt);
    dopt.mask_prompt = a->mask_prompt;
    char *tmpl = NULL;
    int rc = -1;
    Dataset test;
    bool have_test = false, present;
    Model *m = NULL;
    Arena arena = {0};
    DataSource src;
    bool have_src = false;
    if (a->chat_template) {
        size_t n;
        if (file_read_all(a->chat_template, 64u << 20, &tmpl, &n) < 0) { error_prefix("--chat-template"); goto out; }
        dopt.chat_template = tmpl;
    }
    if (dataset_load_split(&test, a->data, "test", tok, &dopt, &present) < 0) goto out;
    have_test = true;
    int width = batch_max_width(&test, a->batch_size, a->max_seq_length);
    if (model_open_inference(&m, &arena, a->model, a->adapter_path, a->batch_size, width - 1, 0) < 0) goto out;
    if (data_source_init(&src, NULL, NULL, &test, a->batch_size, a->max_seq_length, dist_rank(), dist_world(), a->seed) < 0) goto out;
    have_src = true;
    Trainee tr = model_trainee(m);
    BatchSource bs = data_source_iface(&src);
    double loss;
    long ntok;
    bool have;
    if (train_evaluate(&tr, &bs, SPLIT_TEST, a->test_batches, &loss, &ntok, &have) < 0) goto out;
    if (dist_rank() == 0) printf("Test loss %.3f, Test ppl %.3f.\n", loss, exp(loss));
    rc = 0;
out:
    if (have_src) data_source_free(&src);
    if (m) model_free(m);
    arena_free(&arena);
    if (have_test) dataset_free(&test);
    mem_free(tmpl);
    tokenizer_free(tok);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    EvalArgs a = {.data = "data", .test_batches = 500, .max_seq_length = 2048, .batch_size = 4};
    if (dist_init(&argc, &argv) < 0) die_with_error();
    if (args_parse(&EVAL_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    int rc = run_eval(&a);
    if (rc < 0) fprintf(stderr, "lmtune: error: %s\n", error_message());
    args_release();
    dist_finalize();
    return rc < 0 ? 1 : 0;
}

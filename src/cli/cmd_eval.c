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
#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/eval_run.h"
#include "dist/dist.h"
#include "formats/hf_hub.h"

typedef struct {
    const char *model, *adapter_path, *data, *chat_template;
    const char *prompt_feature, *completion_feature, *text_feature, *chat_feature, *weights_dtype;
    int test_batches, max_seq_length, batch_size, threads;
    uint64_t seed;
    size_t memory_limit;
    bool mask_prompt, trust_remote_code, plan;
    ArgResult parsed;
} EvalArgs;

#define OFF(f) offsetof(EvalArgs, f)
static const ArgSpec EVAL_SPECS[] = {
    {"model", 0, ARG_STRING, OFF(model), "DIR", "model directory, or a Hugging Face repo id in the local cache", NULL,
     ARG_UNBOUNDED},
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR",
     "adapter directory (adapter_config.json, adapters.safetensors); none: the base model", NULL, ARG_UNBOUNDED},
    {"data", 0, ARG_STRING, OFF(data), "DIR", "directory with test.jsonl", NULL, ARG_UNBOUNDED},
    {"test-batches", 0, ARG_INT, OFF(test_batches), "N", "test batches; -1 for the whole set", NULL,
     ARG_AT_LEAST(-1, "an integer >= -1")},
    {"max-seq-length", 0, ARG_INT, OFF(max_seq_length), "N", "longer examples are truncated", NULL,
     ARG_AT_LEAST(2, "an integer >= 2")},
    {"batch-size", 0, ARG_INT, OFF(batch_size), "N", "rows per batch", NULL, ARG_AT_LEAST(1, "a positive integer")},
    {"mask-prompt", 0, ARG_BOOL, OFF(mask_prompt), NULL, "loss on the completion / last message only", NULL,
     ARG_UNBOUNDED},
    {"seed", 0, ARG_U64, OFF(seed), "N", "seed of the test subset", NULL, ARG_UNBOUNDED},
    {"threads", 0, ARG_INT, OFF(threads), "N", "compute threads; 0: all cores", NULL,
     ARG_AT_LEAST(0, "a non-negative integer")},
    {"chat-template", 0, ARG_STRING, OFF(chat_template), "FILE", "Jinja chat template instead of the tokenizer's", NULL,
     ARG_UNBOUNDED},
    {"prompt-feature", 0, ARG_STRING, OFF(prompt_feature), "KEY", "JSONL key of the prompt (completions data)", NULL,
     ARG_UNBOUNDED},
    {"completion-feature", 0, ARG_STRING, OFF(completion_feature), "KEY", "JSONL key of the completion", NULL,
     ARG_UNBOUNDED},
    {"text-feature", 0, ARG_STRING, OFF(text_feature), "KEY", "JSONL key of the text (text data)", NULL, ARG_UNBOUNDED},
    {"chat-feature", 0, ARG_STRING, OFF(chat_feature), "KEY", "JSONL key of the messages (chat data)", NULL,
     ARG_UNBOUNDED},
    {"trust-remote-code", 0, ARG_BOOL, OFF(trust_remote_code), NULL, "refused: lmtune runs no model code", NULL,
     ARG_UNBOUNDED},
    {"memory-limit", 0, ARG_SIZE, OFF(memory_limit), "SIZE",
     "refuse, before loading any weight, an evaluation whose plan exceeds SIZE (8GB, 7.5GiB)", NULL, ARG_UNBOUNDED},
    {"weights-dtype", 0, ARG_CHOICE, OFF(weights_dtype), "T",
     "dtype of the frozen products: auto measures bf16 weights both ways on this CPU and takes the faster; f32 "
     "widens bf16 weights panel by panel (they stay bf16 in memory); bf16 rounds f32 weights at load",
     "auto|f32|bf16", ARG_UNBOUNDED},
    {"plan", 0, ARG_BOOL, OFF(plan), NULL, "print the memory plan (every buffer) and stop before loading weights", NULL,
     ARG_UNBOUNDED},
};
static const ArgTable EVAL_TABLE = {
    "eval", "eval --model DIR --data DIR [--adapter-path DIR] [flags]",
    EVAL_SPECS, sizeof EVAL_SPECS / sizeof EVAL_SPECS[0], false, NULL, NULL, NULL,
};

static int run_eval(EvalArgs *a) {
    if (a->trust_remote_code) return args_refuse_remote_code();
#ifdef _OPENMP
    if (a->threads > 0) omp_set_num_threads(a->threads);
#endif
    EvalRequest r = {
        .model = a->model, .adapter_path = a->adapter_path, .data = a->data, .chat_template = a->chat_template,
        .test_batches = a->test_batches, .max_seq_length = a->max_seq_length, .batch_size = a->batch_size,
        .seed = a->seed, .threads = a->threads, .memory_limit = a->memory_limit, .plan = a->plan,
        .weights_dtype = a->weights_dtype,
    };
    dataset_options_default(&r.data_options);
    r.data_options.mask_prompt = a->mask_prompt;
    r.data_options.prompt_feature = a->prompt_feature;
    r.data_options.completion_feature = a->completion_feature;
    r.data_options.text_feature = a->text_feature;
    r.data_options.chat_feature = a->chat_feature;
    return eval_run(&r);
}

int cmd_eval(int argc, char **argv) {
    EvalArgs a = {.data = "data", .test_batches = 500, .max_seq_length = 2048, .batch_size = 4,
                  .prompt_feature = "prompt", .completion_feature = "completion", .text_feature = "text",
                  .chat_feature = "messages", .weights_dtype = "auto"};
    if (dist_init(&argc, &argv) < 0) die_with_error();
    if (args_parse(&EVAL_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    int rc = args_resolve_model(&a.model);
    if (rc == 0) rc = hf_hub_check_data(a.data);
    if (rc == 0) rc = run_eval(&a);
    if (rc < 0) fprintf(stderr, "lmtune: error: %s\n", error_message());
    args_release();
    dist_finalize();
    return rc < 0 ? 1 : 0;
}

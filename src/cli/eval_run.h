/* eval_run.h: the test-set evaluation that `lmtune eval` and an
 * evaluation-only `lmtune train --test` (mlx_lm.lora --test without
 * --train) share: the test split, the base model with an optional adapter
 * (its adapter_config.json gives the type, layers, rank and scale, as
 * MLX-LM's load_adapters reads them), and "Test loss X, Test ppl Y." on
 * stdout. Nothing is written. The frozen products' dtype is chosen as
 * lmtune train chooses it (--weights-dtype; auto measures bf16 weights'
 * products both ways on the evaluation's shapes, rank 0's choice for every
 * worker) and printed as "Frozen products: ..." on stderr. */
#ifndef LT_EVAL_RUN_H
#define LT_EVAL_RUN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "data/dataset.h"

typedef struct {
    const char *model;          /* model directory */
    const char *adapter_path;   /* NULL or "": the base model (MLX-LM: an empty path tests without LoRA) */
    const char *data;           /* directory with test.jsonl */
    const char *chat_template;  /* file, or NULL: the tokenizer's */
    int test_batches;           /* -1: the whole test set */
    int max_seq_length;
    int batch_size;
    uint64_t seed;
    int threads;                /* compute threads (0: all cores), for the plan's primitives */
    size_t memory_limit;        /* 0: none; over it the evaluation is refused before any weight is loaded */
    bool plan;                  /* print the memory plan and stop (eval --plan) */
    DatasetOptions data_options;   /* mask_prompt, feature keys (chat_template is filled in here) */
    bool mlx_log;               /* print mlx_lm.lora's "Loading pretrained model" / "Loading datasets" / "Testing" */
    const char *weights_dtype;  /* --weights-dtype: "auto" (or NULL), "f32" or "bf16", as lmtune train takes it */
} EvalRequest;

int eval_run(const EvalRequest *r);
#endif

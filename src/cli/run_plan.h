/* run_plan.h: the memory plan of a training run, shared by `lmtune plan` and
 * `lmtune train`: the model's layout walk (memory/plan.h), the optimizer
 * moments of its trainable tensors, the tokenised data and batch buffers,
 * oneDNN's scratch and the process baseline measured in this very process.
 * Also the two decisions the plan drives: refusing a run over
 * --memory-limit (naming the lever that makes it fit and what each saves)
 * and choosing the micro-batch for --batch-size auto. */
#ifndef LT_RUN_PLAN_H
#define LT_RUN_PLAN_H
#include <stdio.h>
#include "cli/args.h"
#include "data/dataset.h"
#include "formats/hf_config.h"
#include "memory/plan.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const ModelConfig *cfg;
    const Dataset *train, *valid, *test;   /* valid/test may be NULL */
    int world;
    size_t baseline;                        /* process bytes outside the plan's other entries */
} RunInputs;

/* What a run reads before it plans: config, tokenizer, data splits. */
typedef struct {
    ModelConfig cfg;
    Tokenizer *tok;
    Dataset train, valid, test;
    bool have_train, have_valid, have_test;
    char *chat_template;   /* --chat-template file contents, or NULL */
    RunInputs in;          /* points into this struct */
} RunData;
/* Loads config.json (the only model file read before the plan besides the
 * safetensors headers), the tokenizer and the splits (test only with --test),
 * with MLX-LM's messages; measures the baseline. */
int run_data_load(RunData *d, const TrainArgs *a, int world);
void run_data_free(RunData *d);

/* Measures the process baseline now: resident bytes minus the data sets'. */
size_t run_baseline_now(const RunInputs *in);
/* The widest batch width (tokens per row incl. the last target) of the run. */
int run_max_width(const TrainArgs *a, const RunInputs *in);
/* Builds the whole plan for `a` (batch_size > 0) into *plan and the spec. */
int run_plan_build(const TrainArgs *a, const RunInputs *in, MemPlan *plan, ModelSpec *spec);
void run_plan_print(const TrainArgs *a, const ModelSpec *spec, const MemPlan *plan, bool verbose, FILE *out);
/* With --batch-size auto: picks the largest micro-batch that fits the limit
 * (then checkpointing if needed) and sets the accumulation steps so that the
 * effective batch is kept; prints what it chose and why. */
int run_choose_batch(TrainArgs *a, const RunInputs *in, FILE *out);
/* -1 with an error naming the largest components and each lever's total
 * when the plan exceeds --memory-limit; 0 when it fits or there is no limit. */
int run_check_limit(const TrainArgs *a, const RunInputs *in, const MemPlan *plan);
#endif

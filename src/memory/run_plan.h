/* run_plan.h: the memory plan of a training run, shared by `lmtune plan` and
 * `lmtune train`: the model's layout walk (memory/plan.h), the optimizer
 * moments of its trainable tensors, the tokenised data and batch buffers,
 * oneDNN's scratch and the process baseline measured in this very process.
 * Also the two decisions the plan drives: refusing a run over a memory limit
 * (naming the lever that makes it fit and what each saves) and choosing the
 * micro-batch for `--batch-size auto`.
 *
 * memory/ has two levels: plan.h is the ledger every layer carves its
 * buffers through (model, optimizer); this file composes those layers (it
 * sits above model/, data/ and train/'s optimizer) and knows nothing of the
 * command line: the CLI turns its flags into a RunShape. */
#ifndef LT_RUN_PLAN_H
#define LT_RUN_PLAN_H
#include <stdbool.h>
#include <stdio.h>
#include "data/dataset.h"
#include "formats/hf_config.h"
#include "memory/plan.h"
#include "model/model.h"
#include "train/optimizer.h"

/* What a training run asks for: the knobs that the plan depends on and that
 * its levers vary. */
typedef struct {
    const char *model_dir;
    ModelSpec spec;             /* tune type, num_layers (-1: all), LoRA rank/scale/dropout/keys,
                                   weight_dtype; max_rows, max_tokens, grad_checkpoint and
                                   training are set from the fields below */
    int batch_size;             /* global rows of a micro-batch; 0: auto */
    int grad_accumulation_steps;
    int max_seq_length;
    bool grad_checkpoint;
    bool test;                  /* the test split is evaluated too */
    OptimizerConfig optimizer;
    size_t memory_limit;        /* 0: none */
    int effective_batch_size;   /* --batch-size auto keeps it; 0: 4 x accumulation steps */
} RunShape;

/* What the plan measures besides the model: the data and the process. */
typedef struct {
    const ModelConfig *cfg;
    const Dataset *train, *valid, *test;   /* valid/test may be NULL */
    int world;                              /* data-parallel workers */
    size_t baseline;                        /* process bytes outside the plan's other entries */
} RunInputs;

/* Measures the process baseline now: resident bytes minus the data sets'. */
size_t run_baseline_now(const RunInputs *in);
/* The widest batch width (tokens per row incl. the last target) of the run. */
int run_max_width(const RunShape *s, const RunInputs *in);
/* The model spec of the run's widest micro-batch (rows per worker). */
void run_model_spec(const RunShape *s, const RunInputs *in, ModelSpec *spec);
/* Builds the whole plan for `s` (batch_size > 0) into *plan and the spec. */
int run_plan_build(const RunShape *s, const RunInputs *in, MemPlan *plan, ModelSpec *spec);
void run_plan_print(const RunShape *s, const ModelSpec *spec, const MemPlan *plan, bool verbose, FILE *out);
/* Total of the plan for s; 0 when it cannot be built (the error is cleared). */
size_t run_plan_total(const RunShape *s, const RunInputs *in);
/* With batch_size 0 (auto): picks the largest micro-batch that fits the
 * limit (then checkpointing if needed) and sets the accumulation steps so
 * that the effective batch is kept; prints what it chose and why. */
int run_choose_batch(RunShape *s, const RunInputs *in, FILE *out);
/* One lever of a run that does not fit: the same run with one knob pulled. */
#define RUN_MAX_LEVERS 8
typedef struct {
    char what[96];              /* the flags that pull it: "--grad-checkpoint" */
    RunShape shape;
    size_t total;               /* its planned total; 0 when it cannot be built */
} RunLever;
/* The levers that apply to s: half the micro-batch with twice the
 * accumulation (and a micro-batch of 1), checkpointing, fewer trainable
 * blocks, half the sequence length, bf16 frozen weights. Returns how many
 * (at most RUN_MAX_LEVERS) were written to lever[]. */
int run_levers(const RunShape *s, const RunInputs *in, RunLever *lever);
/* -1 with an error naming the largest components and each lever's total
 * when the plan exceeds the memory limit; 0 when it fits or there is none. */
int run_check_limit(const RunShape *s, const RunInputs *in, const MemPlan *plan);
#endif

/* train_args.h: the flags of `lmtune train` and `lmtune plan`. TrainArgs
 * holds every flag of mlx_lm.lora with its default, plus ours; the table is
 * read by the shared parser (cli/args.h). */
#ifndef LT_TRAIN_ARGS_H
#define LT_TRAIN_ARGS_H
#include "cli/args.h"
#include "model/model.h"
#include "train/optimizer.h"
#include "train/schedule.h"
#include "memory/run_plan.h"


#define LORA_MAX_KEYS 16
typedef struct {
    int rank;                   /* 8 */
    double scale;               /* 20.0 */
    double dropout;             /* 0.0 */
    char keys[LORA_MAX_KEYS][64];
    int n_keys;                 /* 0: MLX-LM's default (every linear of a block) */
} LoraParams;

typedef struct {
    /* MLX-LM's flags */
    const char *model;          /* after parsing: the directory (a repo id resolved in the HF cache) */
    const char *model_name;     /* --model as given (adapter_config.json's "model") */
    bool train;                 /* after parsing: whether to train (see train_args_parse) */
    const char *data;
    const char *fine_tune_type; /* lora | dora | full */
    const char *optimizer;      /* adam | adamw | sgd | adafactor */
    bool mask_prompt;
    int num_layers;
    int batch_size;             /* 0: auto */
    int iters;
    int val_batches;
    double learning_rate;
    int steps_per_report;
    int steps_per_eval;
    const char *resume_adapter_file;
    const char *adapter_path;
    int save_every;
    bool test;
    int test_batches;
    int max_seq_length;
    const char *grad_checkpoint; /* "off"; "all" (the switch alone, MLX-LM's); "auto"; blocks "3,5-7" */
    int grad_accumulation_steps;
    uint64_t seed;
    /* MLX-LM's data column keys (config keys of tuner/datasets.py) */
    const char *prompt_feature, *completion_feature, *text_feature, *chat_feature;
    /* MLX-LM options lmtune has no use for: accepted with a note */
    const char *report_to, *project_name, *clear_cache_threshold;
    bool trust_remote_code;     /* refused: lmtune runs no model code */
    /* config-file sections */
    LoraParams lora;
    ScheduleConfig lr_schedule;
    OptimizerConfig optimizer_config;
    /* optimizer_config and lr_schedule as the YAML gave them (jansson, NULL:
     * not given), written back to adapter_config.json in MLX-LM's shape */
    struct json_t *optimizer_config_json, *lr_schedule_json;
    /* ours */
    double epochs;              /* 0: use iters */
    double max_grad_norm;       /* 0: no clipping */
    int threads;                /* 0: OpenMP's default */
    const char *metrics_file;
    const char *loss_normalization; /* mean | tokens */
    size_t memory_limit;        /* 0: none */
    const char *weights_dtype;  /* auto | f32 | bf16 */
    bool resume;
    const char *chat_template;
    bool skip_bad_lines;
    int effective_batch_size;   /* 0: batch_size x accumulation (for --batch-size auto) */
    const char *config;         /* -c FILE.yaml */
    /* lmtune plan only */
    bool plan_verbose;          /* --verbose: every buffer */
    int plan_workers;           /* --workers N: one worker's share; 0: the MPI world */
    const char *plan_html;      /* --html FILE: the plan as a page */
    ArgResult parsed;
} TrainArgs;

void train_args_default(TrainArgs *a);
/* Frees what parsing kept (the YAML sections' JSON, the YAML strings). */
void train_args_free(TrainArgs *a);
extern const ArgTable TRAIN_ARGS_TABLE;
extern const ArgTable PLAN_ARGS_TABLE;   /* train's flags plus --verbose and --workers */
/* Defaults, then YAML, then the command line; also checks the combinations
 * (e.g. --iters with --epochs), resolves optimizer_config's kind and
 * whether the run trains: as mlx_lm.lora, `--test` without `--train` (or
 * YAML train: false) only evaluates the adapter in --adapter-path; without
 * either flag `lmtune train` trains. Prints the one-line notes of the
 * MLX-LM options lmtune accepts and ignores (report_to, project_name,
 * clear_cache_threshold). */
int train_args_parse(TrainArgs *a, int argc, char **argv);
/* The same for `lmtune plan` (PLAN_ARGS_TABLE). */
int plan_args_parse(TrainArgs *a, int argc, char **argv);
bool train_args_was_set(const TrainArgs *a, const char *name);
/* --grad-checkpoint's value: off, all, auto, or blocks ("3,5-7"). */
int train_args_checkpoint(const char *value, BlockSet *blocks, bool *all, bool *none, bool *autom);
/* The run shape the memory planner works on (memory/run_plan.h): tune
 * type, trainable blocks (MLX-LM's "Requested to train N layers but the
 * model only has L layers." when too many), LoRA rank/scale/dropout, adapted
 * projections from lora_parameters.keys, frozen dtype, batch, accumulation,
 * checkpointing, sequence length, optimizer and memory limit. */
int train_args_run_shape(const TrainArgs *a, const ModelConfig *cfg, RunShape *out);
/* The dtype of the frozen products: --weights-dtype f32 or bf16 as given;
 * auto measured by model_auto_weights_dtype (a start-up probe of the run's
 * product shapes), replacing train_args_run_shape's first guess in
 * shape->spec. note: one line saying which and why. */
int train_args_weights_dtype(const TrainArgs *a, const ModelConfig *cfg, RunShape *shape, char *note, size_t cap);
/* --weights-dtype by name (train and eval): 1 and *out for "f32" or "bf16"
 * (bf16 refused where oneDNN has no bf16 products), 0 for "auto", -1 with
 * the error otherwise. */
int weights_dtype_named(const char *name, DType *out);
/* Every MPI worker takes rank 0's *dt (a probe's choice may differ between
 * processes); a no-op on one process. */
int weights_dtype_agree(DType *dt);
#endif

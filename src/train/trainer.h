/* trainer.h: the training loop of MLX-LM's tuner/trainer.py, with what its
 * users asked for: micro-batches, gradient accumulation (mean of per-batch
 * means as MLX-LM, or token-weighted), average_gradients across workers,
 * global-norm clipping, a non-finite guard, the LR schedule counted in
 * updates, validation over a fixed seeded subset, MLX-LM's report lines, a
 * metrics file, periodic saves and an exact resume.
 *
 * The loop knows neither the model's nor the data layer's insides: it talks
 * to a Trainee (parameters and two functions) and a BatchSource, so tests
 * can drive it with small synthetic problems and the CLI plugs in the real
 * decoder (train/model_trainee.c) and the real batch iterator. */
#ifndef LT_TRAINER_H
#define LT_TRAINER_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "base/arena.h"
#include "base/rng.h"
#include "data/batching.h"
#include "model/model.h"
#include "train/optimizer.h"
#include "train/schedule.h"

typedef struct {
    void *self;
    TrainableTensor *params;    /* (n_params): value and grad (grad accumulates +=) */
    size_t n_params;
    /* Adds the gradient of grad_scale * (mean CE of the batch) into the grads. */
    int (*forward_backward)(void *self, const Batch *b, float grad_scale, Rng *dropout_rng,
                            double *loss, long *n_tokens);
    /* Eval mode (no dropout): SUM of CE over counted targets and their count. */
    int (*loss)(void *self, const Batch *b, double *loss_sum, long *n_tokens);
} Trainee;

typedef enum { SPLIT_VALID, SPLIT_TEST } EvalSplit;

typedef struct {
    void *self;
    /* The training stream: endless, deterministic from the seed. */
    int (*train_next)(void *self, Batch **out);
    /* Starts an evaluation pass over at most num_batches batches (-1: all)
     * of a split. The subset is fixed: every pass sees the same batches.
     * Returns 1, or 0 when the split is absent. */
    int (*eval_begin)(void *self, EvalSplit split, int num_batches);
    int (*eval_next)(void *self, Batch **out);   /* 1: a batch; 0: end */
} BatchSource;

typedef struct {
    int iters;                  /* micro-batch iterations in total (resumed ones count) */
    int grad_accum;             /* A >= 1 */
    int batch_size;             /* B (for the effective batch line) */
    int steps_per_report, steps_per_eval, save_every;
    int val_batches;            /* -1: all */
    bool loss_tokens;           /* --loss-normalization tokens */
    double max_grad_norm;       /* <= 0: no clipping */
    uint64_t seed;              /* dropout RNG */
    Schedule schedule;
    const char *adapter_path;   /* NULL: nothing is saved (tests) */
    const char *metrics_file;   /* NULL: none */
    bool resume;                /* continue from adapter_path/training_state.safetensors */
    const char *fingerprint;    /* the base model and run layout; a state saved by another is refused */
    const Arena *arena;         /* for the metrics file's arena_high_water (may be NULL) */
    size_t plan_total;          /* for the metrics file (0: not given) */
    FILE *out;                  /* the log (stdout) */
    /* Called on rank 0 once the history (adapter_path/metrics.jsonl) holds
     * an evaluation, and at the end of the run (also one stopped by a signal
     * or an error): the CLI renders report.html there. May be NULL. */
    int (*on_history)(void *ctx);
    void *history_ctx;
} TrainConfig;

void train_config_default(TrainConfig *c);

typedef struct {
    int iterations;             /* last iteration run */
    uint64_t updates;
    uint64_t skipped_updates;   /* non-finite loss or gradient */
    double last_val_loss;       /* NAN when never evaluated */
    int stop_signal;            /* SIGINT / SIGTERM that stopped the run, else 0 */
} TrainResult;

#define TRAIN_MAX_NONFINITE_IN_A_ROW 5

int train_run(Trainee *tr, BatchSource *src, Optimizer *opt, const TrainConfig *cfg, TrainResult *res);

/* Token-weighted mean loss over a fixed pass; *present = false when the
 * split is absent. Reduced across workers. */
int train_evaluate(Trainee *tr, BatchSource *src, EvalSplit split, int num_batches,
                   double *loss, long *n_tokens, bool *present);

/* SIGINT/SIGTERM set a flag the loop checks after each iteration: it saves
 * the adapters and the full state and returns with res->stop_signal set. */
void train_install_signal_handlers(void);
int train_pending_signal(void);
void train_request_stop(int signo);   /* for tests */
#endif

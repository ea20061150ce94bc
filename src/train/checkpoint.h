/* checkpoint.h: what a run leaves in --adapter-path. Adapters in MLX-LM's
 * format (safetensors, metadata {"format": "mlx"}, tensor names as the
 * flattened trainable paths, fp32), loaded with MLX-LM's checks and
 * messages; and ours, training_state.safetensors: everything else needed to
 * continue bit-identically (parameters, optimizer moments, update and
 * iteration counters, dropout RNG, batches consumed, a mid-accumulation
 * gradient sum, report-window counters) with a fingerprint of the run so a
 * state from another model or layout is refused. Every write is atomic. */
#ifndef LT_CHECKPOINT_H
#define LT_CHECKPOINT_H
#include <stdbool.h>
#include <stdint.h>
#include "base/rng.h"
#include "model/model.h"
#include "train/optimizer.h"

#define ADAPTERS_FILE "adapters.safetensors"
#define STATE_FILE "training_state.safetensors"

int checkpoint_save_adapters(const char *path, const TrainableTensor *t, size_t n);
/* As MLX-LM: every tensor of the file must be a trainable tensor of the same
 * shape ("Adapter at PATH contains incompatible tensors:\n  NAME: ..."); a
 * missing directory/file gives "The adapter path does not exist: PATH".
 * Tensors the file lacks keep their values (strict=False). */
int checkpoint_load_adapters(const char *path, TrainableTensor *t, size_t n);

typedef struct {
    uint64_t iteration;         /* last micro-batch iteration done */
    uint64_t micro_batches;     /* batches consumed from the training stream */
    int accum_count;            /* micro-batches summed into the grads since the last update */
    double accum_tokens;
    bool accum_bad;             /* a non-finite loss inside the pending accumulation */
    Rng dropout_rng;
    uint64_t skipped_total;
    int nonfinite_streak;
    uint64_t trained_tokens;
    double window_loss;         /* report window in progress */
    long window_tokens;
    int window_steps, window_loss_steps;
    double window_norm_sum, window_norm_max;   /* gradient norms of the window's updates (history) */
    int window_updates, window_clipped;
} TrainState;

/* The optimizer's step counter is the update count (schedule position). */
int checkpoint_save_state(const char *path, const TrainState *s, const Optimizer *opt,
                          const TrainableTensor *t, size_t n, const char *fingerprint);
int checkpoint_load_state(const char *path, TrainState *s, Optimizer *opt,
                          TrainableTensor *t, size_t n, const char *fingerprint);
/* 64-bit FNV-1a of a run's description, printed as 16 hex digits. */
void checkpoint_fingerprint(const char *description, const TrainableTensor *t, size_t n,
                            const OptimizerConfig *opt, char out[17]);
#endif

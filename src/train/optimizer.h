/* optimizer.h: the optimizers of MLX (mlx/optimizers/optimizers.py) with
 * MLX's defaults and update formulas: Adam (no bias correction unless asked),
 * AdamW (decoupled decay: w *= 1 - lr*wd, then Adam), SGD (v = mu*v + g),
 * Adafactor (relative step, factored second moments for 2-D tensors), Muon
 * (momentum, then Newton-Schulz orthogonalisation of 2-D updates; 1-D
 * tensors such as DoRA magnitudes and norms take the momentum update as is).
 * Unlike MLX the moments are always fp32, whatever the parameter dtype. The
 * moments are carved from the run's arena through optimizer_layout, so the
 * memory plan records exactly what the update uses. */
#ifndef LT_OPTIMIZER_H
#define LT_OPTIMIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "memory/plan.h"
#include "base/trainable.h"

typedef enum { OPT_ADAM, OPT_ADAMW, OPT_SGD, OPT_ADAFACTOR, OPT_MUON } OptimizerKind;

typedef struct {
    double betas[2];        /* 0.9, 0.999 */
    double eps;             /* 1e-8 */
    bool bias_correction;   /* false (MLX) */
    double weight_decay;    /* AdamW only: 0.01 */
} AdamConfig;

typedef struct {
    double momentum;        /* 0 */
    double weight_decay;    /* 0 */
    double dampening;       /* 0 */
    bool nesterov;          /* false */
} SgdConfig;

typedef struct {
    double learning_rate;   /* NAN: none (needs relative_step) */
    double eps[2];          /* 1e-30, 1e-3 */
    double clip_threshold;  /* 1.0 */
    double decay_rate;      /* -0.8 */
    double beta_1;          /* NAN: no first moment */
    double weight_decay;    /* 0 */
    bool scale_parameter;   /* true */
    bool relative_step;     /* true: the learning rate is ignored */
    bool warmup_init;       /* false */
} AdafactorConfig;

/* MLX's Muon: g += wd * w (coupled, every tensor); v = mu*v + (1-mu)*g;
 * update = nesterov ? (1-mu)*g + mu*v : v; a 2-D update (rows, cols) is
 * replaced by its Newton-Schulz orthogonalisation and the rate scaled by
 * sqrt(max(1, rows/cols)); w -= lr * update. */
typedef struct {
    double momentum;        /* 0.95 */
    double weight_decay;    /* 0.01 */
    bool nesterov;          /* true */
    int ns_steps;           /* 5 */
} MuonConfig;

typedef struct {
    OptimizerKind kind;
    AdamConfig adam, adamw;
    SgdConfig sgd;
    AdafactorConfig adafactor;
    MuonConfig muon;
} OptimizerConfig;

void optimizer_config_default(OptimizerConfig *c);
const char *optimizer_name(OptimizerKind k);
int optimizer_kind_from_name(const char *name, OptimizerKind *out);

/* Per-tensor state. Which pointers are used depends on the kind:
 * Adam/AdamW m, v; SGD v (momentum > 0); Adafactor row (shape[0]) and col
 * (shape[1]) for 2-D tensors, else v; m when beta_1 is set. */
typedef struct {
    float *m, *v, *row, *col;
    size_t numel;
    int ndim;
    int64_t shape[2];
} OptSlot;

typedef struct {
    OptimizerConfig cfg;
    OptSlot *slots;         /* (n) heap (small) */
    size_t n;
    uint64_t step;          /* updates done */
    float *ns_work;         /* Muon: Newton-Schulz workspace, (2*m*n + 2*m*m) floats of the
                               largest 2-D tensor (m = min, n = max of its sides); else NULL */
} Optimizer;

/* One state tensor of a slot, for checkpoints: "m", "v", "row" or "col". */
typedef struct {
    const char *key;
    float *data;
    size_t numel;
} OptStateView;
/* Fills up to 4 views of slot i; returns how many. */
int optimizer_state_views(const Optimizer *o, size_t i, OptStateView views[4]);

/* Records (planning) or carves (allocation) the moments of the trainable
 * tensors (only names/shapes are read), and Muon's Newton-Schulz workspace.
 * In planning mode the slots' pointers stay NULL. */
int optimizer_layout(Optimizer *o, const OptimizerConfig *cfg, const TrainableTensor *t, size_t n, Carver *cv);
/* Bytes of moments for one tensor (what optimizer_layout carves, unrounded). */
size_t optimizer_state_bytes(const OptimizerConfig *cfg, const TrainableTensor *t);
void optimizer_free(Optimizer *o);   /* frees the slot table, not the arena */

/* One update: step += 1, then every tensor is updated from its .grad with
 * learning rate lr (ignored by Adafactor with relative_step). */
int optimizer_update(Optimizer *o, TrainableTensor *t, size_t n, float lr);
#endif

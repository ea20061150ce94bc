/* run_batches.h: the batches a training run will read, replayed from the
 * data before the run. The order of batches is drawn from the seed, so the
 * planner knows which ones a run of `iters` micro-batches trains on (the
 * first iters of the first epoch's order, or every batch once the run is an
 * epoch or longer) and which ones every evaluation pass reads (the first
 * val_batches / test_batches of their splits' seeded orders), and for each
 * worker its rows, its padded width and its loss targets (the LM head's
 * rows). From them: the shapes of the run's matrix products (model/model.h's
 * model_products) and the token ids the model reads, whose embedding rows
 * are the only ones that become resident. A resumed run reads a subset of
 * the batches of the whole run planned here. */
#ifndef LT_RUN_BATCHES_H
#define LT_RUN_BATCHES_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/matmul.h"
#include "memory/run_plan.h"

typedef struct {
    ProductBatch *batches;  /* distinct per worker */
    int *rank;              /* (n) the worker each one is for */
    size_t n, cap;
    uint64_t *ids;          /* bitmap of the token ids read as inputs, all workers */
    size_t id_words;
    int vocab;              /* bits of ids: the model's vocab_size */
} RunBatches;

/* Micro-batches the run trains: --iters, or --epochs times the batches of
 * an epoch (as lmtune train computes it); 0 iters: one epoch. */
long run_train_iters(const RunShape *s, const Dataset *train);
int run_batches_build(const RunShape *s, const RunInputs *in, RunBatches *rb);
void run_batches_free(RunBatches *rb);
/* What the run's oneDNN primitives hold: the distinct shapes of the products
 * of rb's batches for spec (model_products), per worker, and the most any
 * worker holds (primitives alive at once, their bytes from the start-up
 * probe's per-primitive figures, the largest scratchpad need). With
 * this_rank >= 0, that worker's primitives are created now (matmul_prepare)
 * and held_bytes is what they were measured to hold. */
int run_library_plan(const RunBatches *rb, int world, int this_rank, const ModelConfig *cfg, const ModelSpec *spec,
                     const WeightsSummary *ws, const FrozenWeight *views, MatmulPlan *out);
/* Distinct token ids read (set bits of ids). */
size_t run_batches_rows_read(const RunBatches *rb);
#endif

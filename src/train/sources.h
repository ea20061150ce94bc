/* sources.h: the real implementations of the trainer's two interfaces: a
 * Trainee over the decoder (model/model.h) and a BatchSource over the data
 * layer's batch iterator (data/batching.h), with the validation and test
 * passes over a fixed seeded subset (the same batches at every evaluation,
 * unlike MLX-LM, whose subset changes each time). */
#ifndef LT_SOURCES_H
#define LT_SOURCES_H
#include "data/batching.h"
#include "model/model.h"
#include "train/trainer.h"

Trainee model_trainee(Model *m);

typedef struct {
    BatchIter train;            /* endless, reshuffled each epoch */
    BatchIter eval[2];          /* SPLIT_VALID, SPLIT_TEST */
    BatchCursor eval_start[2];  /* where every evaluation pass starts */
    bool have_train, have_eval[2];
    int eval_left;              /* batches left in the current pass */
    BatchIter *eval_cur;
} DataSource;

/* valid / test may be NULL (absent). The evaluation subset is drawn from the
 * seed and fixed for the run. */
int data_source_init(DataSource *s, const Dataset *train, const Dataset *valid, const Dataset *test,
                     int batch_size, int max_seq_length, int rank, int world, uint64_t seed);
void data_source_free(DataSource *s);
/* The seed of the evaluation iterator of a split (the planner replays which
 * batches an evaluation pass reads). */
uint64_t data_source_eval_seed(uint64_t seed, EvalSplit split);
BatchSource data_source_iface(DataSource *s);
#endif

/* sources.c: Trainee over the decoder, BatchSource over the batch iterator
 * (see sources.h). */
#include "train/sources.h"
#include <string.h>
#include "base/error.h"

static int fb(void *self, const Batch *b, float grad_scale, Rng *rng, double *loss, long *n_tokens) {
    if (b->rows == 0) {
        *loss = 0;
        *n_tokens = 0;
        return 0;
    } /* a worker's empty share of the last batch */
    return model_forward_backward(self, b->tokens, b->rows, b->width, b->lengths, b->offsets, grad_scale, rng,
                                  loss, n_tokens);
}

static int eval_loss(void *self, const Batch *b, double *loss_sum, long *n_tokens) {
    if (b->rows == 0) {
        *loss_sum = 0;
        *n_tokens = 0;
        return 0;
    }
    return model_loss(self, b->tokens, b->rows, b->width, b->lengths, b->offsets, loss_sum, n_tokens);
}

Trainee model_trainee(Model *m) {
    Trainee t = {m, NULL, 0, fb, eval_loss};
    t.n_params = model_trainables(m, &t.params);
    return t;
}

/* Streams are seeded apart so the validation subset does not follow the
 * training order. */
#define EVAL_SEED_MIX 0x76616c6964ull

uint64_t data_source_eval_seed(uint64_t seed, EvalSplit split) {
    return seed ^ (EVAL_SEED_MIX + (uint64_t)split);
}

int data_source_init(DataSource *s, const Dataset *train, const Dataset *valid, const Dataset *test,
                     int batch_size, int max_seq_length, int rank, int world, uint64_t seed) {
    memset(s, 0, sizeof *s);
    if (train) {
        TRY(batch_iter_init(&s->train, train, batch_size, max_seq_length, rank, world, seed, true));
        s->have_train = true;
    }
    const Dataset *sets[2] = {valid, test};
    for (int i = 0; i < 2; i++) {
        if (!sets[i]) continue;
        if (batch_iter_init(&s->eval[i], sets[i], batch_size, max_seq_length, rank, world,
                            data_source_eval_seed(seed, (EvalSplit)i), true) < 0) {
            error_prefix("%s", i == 0 ? "validation set" : "test set");
            data_source_free(s);
            return -1;
        }
        s->eval_start[i] = s->eval[i].cursor;
        s->have_eval[i] = true;
    }
    return 0;
}

void data_source_free(DataSource *s) {
    if (s->have_train) batch_iter_free(&s->train);
    for (int i = 0; i < 2; i++) if (s->have_eval[i]) batch_iter_free(&s->eval[i]);
    memset(s, 0, sizeof *s);
}

static int train_next(void *self, Batch **out) {
    DataSource *s = self;
    if (!s->have_train) return error_set("no training set");
    return batch_iter_next(&s->train, out);
}

static int eval_begin(void *self, EvalSplit split, int num_batches) {
    DataSource *s = self;
    if (!s->have_eval[split]) return 0;
    BatchIter *it = &s->eval[split];
    TRY(batch_iter_set_cursor(it, &s->eval_start[split]));
    s->eval_cur = it;
    s->eval_left = num_batches < 0 || num_batches > it->n_batches ? it->n_batches : num_batches;
    return 1;
}

static int eval_next(void *self, Batch **out) {
    DataSource *s = self;
    if (!s->eval_cur || s->eval_left <= 0) return 0;
    s->eval_left--;
    int r = batch_iter_next(s->eval_cur, out);
    TRY(r);
    return r == 0 ? 0 : 1;
}

BatchSource data_source_iface(DataSource *s) { return (BatchSource){s, train_next, eval_begin, eval_next}; }

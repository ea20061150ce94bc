/* run_batches.c: the batches a training run will read, replayed from the
 * data before the run (see run_batches.h). */
#include "memory/run_batches.h"
#include "base/alloc.h"
#include "base/error.h"
#include "data/batching.h"
#include "train/sources.h"
#include <math.h>
#include <string.h>

static bool same_batch(const ProductBatch *a, const ProductBatch *b) {
    return a->rows == b->rows && a->tokens == b->tokens && a->lm_rows == b->lm_rows && a->train == b->train &&
           a->decode == b->decode;
}

static int push_batch(RunBatches *rb, int rank, const ProductBatch *b) {
    for (size_t i = 0; i < rb->n; i++)
        if (rb->rank[i] == rank && same_batch(&rb->batches[i], b)) return 0;
    if (rb->n == rb->cap) {
        size_t cap = rb->cap ? 2 * rb->cap : 64;
        ProductBatch *nb = mem_realloc(rb->batches, cap * sizeof *nb);
        if (!nb) return -1;
        rb->batches = nb;
        int *nr = mem_realloc(rb->rank, cap * sizeof *nr);
        if (!nr) return -1;
        rb->rank = nr;
        rb->cap = cap;
    }
    rb->batches[rb->n] = *b;
    rb->rank[rb->n] = rank;
    rb->n++;
    return 0;
}

/* The first `count` batches of the iterator's first epoch (count < 0 or
 * past the end: all of them), described for its worker. */
static int visit(RunBatches *rb, const BatchIter *it, long count, bool train) {
    long n = count < 0 || count > it->n_batches ? it->n_batches : count;
    for (long i = 0; i < n; i++) {
        int rows, width;
        long loss;
        batch_describe(it, it->order[i], &rows, &width, &loss, rb->ids, (uint32_t)rb->vocab);
        if (rows == 0) continue;   /* a worker's empty share of the last batch: no product */
        ProductBatch b = {rows, width - 1, loss, train, false};
        TRY(push_batch(rb, it->rank, &b));
    }
    return 0;
}

static int visit_split(RunBatches *rb, const RunShape *s, const Dataset *d, int world, uint64_t seed, long count,
                       bool train) {
    for (int rank = 0; rank < world; rank++) {
        BatchIter it;
        TRY(batch_iter_init(&it, d, s->batch_size, s->max_seq_length, rank, world, seed, true));
        int rc = visit(rb, &it, count, train);
        batch_iter_free(&it);
        TRY(rc);
    }
    return 0;
}

long run_train_iters(const RunShape *s, const Dataset *train) {
    long batches = ((long)train->n + s->batch_size - 1) / s->batch_size;
    if (s->epochs > 0) return (long)ceil(s->epochs * (double)batches);
    return s->iters > 0 ? s->iters : batches;
}

int run_batches_build(const RunShape *s, const RunInputs *in, RunBatches *rb) {
    memset(rb, 0, sizeof *rb);
    int world = in->world > 0 ? in->world : 1;
    rb->vocab = in->cfg->vocab_size > 0 ? in->cfg->vocab_size : 1;
    rb->id_words = ((size_t)rb->vocab + 63) / 64;
    rb->ids = mem_calloc(rb->id_words, sizeof *rb->ids);
    if (!rb->ids) return -1;
    int rc = visit_split(rb, s, in->train, world, s->seed, run_train_iters(s, in->train), true);
    /* an evaluation pass reads the first val_batches batches of its split's
     * seeded order, the same ones at every evaluation */
    if (rc == 0 && in->valid && s->val_batches != 0)
        rc = visit_split(rb, s, in->valid, world, data_source_eval_seed(s->seed, SPLIT_VALID), s->val_batches, false);
    if (rc == 0 && in->test && s->test && s->test_batches != 0)
        rc = visit_split(rb, s, in->test, world, data_source_eval_seed(s->seed, SPLIT_TEST), s->test_batches, false);
    if (rc < 0) run_batches_free(rb);
    return rc;
}

void run_batches_free(RunBatches *rb) {
    mem_free(rb->batches);
    mem_free(rb->rank);
    mem_free(rb->ids);
    memset(rb, 0, sizeof *rb);
}

size_t run_batches_rows_read(const RunBatches *rb) {
    size_t n = 0;
    for (size_t w = 0; w < rb->id_words; w++) n += (size_t)__builtin_popcountll(rb->ids[w]);
    return n;
}

/* A set of distinct shapes (open addressing on a hash of the fields). */
typedef struct {
    MatmulShape *slot;
    bool *used;
    size_t cap, n;
    MatmulShape *list;      /* insertion order */
    int failed;
} ShapeSet;

static uint64_t shape_hash(const MatmulShape *s) {
    uint64_t v[10] = {(uint64_t)s->M, (uint64_t)s->N, (uint64_t)s->K,
                      (uint64_t)(s->transA * 2 + s->transB), (uint64_t)s->lda, (uint64_t)s->ldb,
                      (uint64_t)s->ldc, (uint64_t)(s->a_type * 64 + s->b_type), 0, (uint64_t)s->has_bias};
    uint32_t ab[2];
    memcpy(&ab[0], &s->alpha, 4);
    memcpy(&ab[1], &s->beta, 4);
    v[8] = (uint64_t)ab[0] << 32 | ab[1];
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 10; i++) {
        h ^= v[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static bool shape_eq(const MatmulShape *a, const MatmulShape *b) {
    return a->M == b->M && a->N == b->N && a->K == b->K && a->transA == b->transA && a->transB == b->transB &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->a_type == b->a_type &&
           a->b_type == b->b_type && a->alpha == b->alpha && a->beta == b->beta && a->has_bias == b->has_bias;
}

static int set_grow(ShapeSet *s) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    MatmulShape *slot = mem_calloc(cap, sizeof *slot);
    bool *used = mem_calloc(cap, sizeof *used);
    MatmulShape *list = mem_realloc(s->list, cap * sizeof *list);
    if (!slot || !used || !list) {
        mem_free(slot);
        mem_free(used);
        if (list) s->list = list;
        return -1;
    }
    s->list = list;
    for (size_t i = 0; i < s->n; i++) {
        size_t h = (size_t)(shape_hash(&list[i]) & (cap - 1));
        while (used[h]) h = (h + 1) & (cap - 1);
        used[h] = true;
        slot[h] = list[i];
    }
    mem_free(s->slot);
    mem_free(s->used);
    s->slot = slot;
    s->used = used;
    s->cap = cap;
    return 0;
}

static void set_add(void *ctx, const MatmulShape *shape, int block, ProductPhase phase) {
    (void)block;
    (void)phase;
    ShapeSet *s = ctx;
    if (s->failed) return;
    if (2 * (s->n + 1) > s->cap && set_grow(s) < 0) {
        s->failed = 1;
        return;
    }
    size_t h = (size_t)(shape_hash(shape) & (s->cap - 1));
    while (s->used[h]) {
        if (shape_eq(&s->slot[h], shape)) return;
        h = (h + 1) & (s->cap - 1);
    }
    s->used[h] = true;
    s->slot[h] = *shape;
    s->list[s->n++] = *shape;
}

static void set_free(ShapeSet *s) {
    mem_free(s->slot);
    mem_free(s->used);
    mem_free(s->list);
    memset(s, 0, sizeof *s);
}

int run_library_plan(const RunBatches *rb, int world, int this_rank, const ModelConfig *cfg, const ModelSpec *spec,
                     const WeightsSummary *ws, const FrozenWeight *views, MatmulPlan *out) {
    memset(out, 0, sizeof *out);
    size_t measured = 0;
    bool have_measured = false;
    for (int rank = 0; rank < (world > 0 ? world : 1); rank++) {
        ShapeSet set = {0};
        int rc = 0;
        for (size_t i = 0; i < rb->n && rc == 0; i++)
            if (rb->rank[i] == rank) rc = model_products(cfg, spec, ws, views, &rb->batches[i], 1, set_add, &set);
        /* the allocator's message stays */
        if (rc == 0 && set.failed) rc = error_prefix("listing the run's matrix products");
        MatmulPlan p;
        if (rc == 0) rc = matmul_plan(set.list, set.n, &p);
        /* this worker's own primitives: created now and measured */
        if (rc == 0 && rank == this_rank) {
            measured = matmul_prepare(set.list, set.n);
            have_measured = true;
        }
        set_free(&set);
        TRY(rc);
        /* every worker is planned for the most any of them holds */
        size_t pad = out->scratchpad_bytes > p.scratchpad_bytes ? out->scratchpad_bytes : p.scratchpad_bytes;
        if (p.held_bytes >= out->held_bytes) *out = p;
        out->scratchpad_bytes = pad;
    }
    if (have_measured) {
        out->held_bytes = measured;
        out->measured = true;
    }
    return 0;
}

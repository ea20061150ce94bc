/* batching.c: iterate_batches (batching.h). The examples are sorted once by
 * their real token length (MLX-LM's CacheDataset sorts by the record's key
 * count, a no-op: issue #596) and cut into batches of B consecutive examples.
 * MLX-LM drops the last n % B examples every epoch; here they form a last,
 * smaller batch, so every example is seen exactly once per epoch. Training
 * shuffles the order of the batches (never their content) at the start of
 * each epoch; the cursor holds the generator state the current epoch's order
 * was drawn from, so (epoch, position, rng) resumes exactly. */
#include "data/batching.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"

#define PAD_MULTIPLE 32

/* 1 + 32*ceil(max_len/32), capped at max_seq_length: the "+1" makes the
 * shifted input/target length a multiple of 32. */
static int padded_width(size_t max_len, int max_seq_length) {
    size_t w = 1 + PAD_MULTIPLE * ((max_len + PAD_MULTIPLE - 1) / PAD_MULTIPLE);
    return w > (size_t)max_seq_length ? max_seq_length : (int)w;
}

static int n_batches_of(size_t n, int batch_size) { return (int)((n + (size_t)batch_size - 1) / (size_t)batch_size); }

/* Example indices sorted by length; ties keep file order (a stable sort:
 * the key is the pair (length, index)). */
typedef struct {
    size_t len;
    int index;
} LengthKey;
static int by_length(const void *a, const void *b) {
    const LengthKey *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int *sorted_indices(const Dataset *d, bool sorted) {
    int *idx = mem_calloc(d->n ? d->n : 1, sizeof *idx);
    if (!idx) return NULL;
    for (size_t i = 0; i < d->n; i++) idx[i] = (int)i;
    if (!sorted || d->n < 2) return idx;
    LengthKey *keys = mem_calloc(d->n, sizeof *keys);
    if (!keys) {
        mem_free(idx);
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++) keys[i] = (LengthKey){dataset_len(d, i), (int)i};
    qsort(keys, d->n, sizeof *keys, by_length);
    for (size_t i = 0; i < d->n; i++) idx[i] = keys[i].index;
    mem_free(keys);
    return idx;
}

int batch_max_width(const Dataset *d, int batch_size, int max_seq_length) {
    (void)batch_size; /* the longest example sets the widest batch, whatever B */
    size_t longest = 0;
    for (size_t i = 0; i < d->n; i++)
        if (dataset_len(d, i) > longest) longest = dataset_len(d, i);
    return padded_width(longest, max_seq_length);
}

static int by_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

int batch_distinct_widths(const Dataset *d, int batch_size, int max_seq_length) {
    if (d->n == 0 || batch_size < 1) return 0;
    size_t *len = mem_alloc(d->n * sizeof *len);
    if (!len) return -1;
    for (size_t i = 0; i < d->n; i++) len[i] = dataset_len(d, i);
    qsort(len, d->n, sizeof *len, by_size);
    int count = 0, last = -1;
    /* groups of B consecutive sorted examples (the last may be smaller): the
     * widest row of a group is its last one; widths only grow along the sort */
    for (size_t g = 0; g < d->n; g += (size_t)batch_size) {
        size_t end = g + (size_t)batch_size < d->n ? g + (size_t)batch_size : d->n;
        int w = padded_width(len[end - 1], max_seq_length);
        if (w != last) {
            count++;
            last = w;
        }
    }
    mem_free(len);
    return count;
}

size_t batch_iter_bytes(const Dataset *d, int batch_size, int max_seq_length, int world) {
    size_t rows = (size_t)(batch_size / (world > 0 ? world : 1));
    size_t width = (size_t)batch_max_width(d, batch_size, max_seq_length);
    return rows * width * sizeof(int32_t)                      /* tokens */
         + 2 * rows * sizeof(int32_t)                           /* lengths, offsets */
         + d->n * sizeof(int)                                   /* sorted */
         + (size_t)n_batches_of(d->n, batch_size) * sizeof(int); /* order */
}

void batch_truncation_warning(char *buf, size_t size, int max_seq_length, size_t longest) {
    snprintf(buf, size,
             "[WARNING] Some sequences are longer than %d tokens. The longest sentence %zu will be truncated to %d. "
             "Consider pre-splitting your data to save memory.",
             max_seq_length, longest, max_seq_length);
}

/* The current epoch's batch order, drawn from a copy of cursor.rng. */
static void build_order(BatchIter *it) {
    for (int i = 0; i < it->n_batches; i++) it->order[i] = i;
    if (it->loop) {
        Rng r = it->cursor.rng;
        rng_shuffle_int(&r, it->order, it->n_batches);
    }
}

int batch_iter_init(BatchIter *it, const Dataset *d, int batch_size, int max_seq_length, int rank, int world,
                    uint64_t seed, bool loop) {
    memset(it, 0, sizeof *it);
    if (batch_size <= 0) return error_set("batching: batch size %d must be positive", batch_size);
    if (max_seq_length < 2) return error_set("batching: max_seq_length %d must be at least 2", max_seq_length);
    if (world <= 0 || rank < 0 || rank >= world) return error_set("batching: rank %d of %d workers", rank, world);
    if (d->n > (size_t)INT32_MAX) return error_set("batching: %zu examples is too many", d->n);
    if (d->n < (size_t)batch_size)
        return error_set("Dataset must have at least batch_size=%d examples but only has %zu.", batch_size, d->n);
    if (batch_size % world != 0) return error_set("The batch size must be divisible by the number of workers");
    it->data = d;
    it->batch_size = batch_size;
    it->max_seq_length = max_seq_length;
    it->rank = rank;
    it->world = world;
    it->loop = loop;
    it->n_batches = n_batches_of(d->n, batch_size);
    int rows = batch_size / world, width = batch_max_width(d, batch_size, max_seq_length);
    it->sorted = sorted_indices(d, true);
    it->order = mem_calloc((size_t)it->n_batches, sizeof *it->order);
    it->batch.tokens = mem_calloc((size_t)rows * (size_t)width, sizeof(int32_t));
    it->batch.lengths = mem_calloc((size_t)rows, sizeof(int32_t));
    it->batch.offsets = mem_calloc((size_t)rows, sizeof(int32_t));
    if (!it->sorted || !it->order || !it->batch.tokens || !it->batch.lengths || !it->batch.offsets) {
        batch_iter_free(it);
        return -1;
    }
    rng_seed(&it->cursor.rng, seed);
    build_order(it);
    return 0;
}

int batch_iter_set_cursor(BatchIter *it, const BatchCursor *c) {
    if (c->position > (uint64_t)it->n_batches)
        return error_set("batching: cursor position %llu is past the %d batches of an epoch",
                         (unsigned long long)c->position, it->n_batches);
    it->cursor = *c;
    build_order(it);
    return 0;
}

/* Fills it->batch with this worker's rows of sorted batch `b`. */
static void fill_batch(BatchIter *it, int b) {
    const Dataset *d = it->data;
    size_t first = (size_t)b * (size_t)it->batch_size, count = d->n - first;
    if (count > (size_t)it->batch_size) count = (size_t)it->batch_size;
    const int *group = it->sorted + first;
    Batch *out = &it->batch;
    size_t longest = 0;
    int rows = 0;
    for (size_t j = (size_t)it->rank; j < count; j += (size_t)it->world, rows++)
        if (dataset_len(d, (size_t)group[j]) > longest) longest = dataset_len(d, (size_t)group[j]);
    if (longest > (size_t)it->max_seq_length && !it->warned) {
        char msg[512];
        batch_truncation_warning(msg, sizeof msg, it->max_seq_length, longest);
        log_warning("%s", msg + strlen("[WARNING] "));
        it->warned = true; /* once per run, not once per batch as MLX-LM does */
    }
    out->rows = rows;
    out->width = padded_width(longest, it->max_seq_length);
    out->n_loss_tokens = 0;
    memset(out->tokens, 0, (size_t)rows * (size_t)out->width * sizeof *out->tokens);
    int r = 0;
    for (size_t j = (size_t)it->rank; j < count; j += (size_t)it->world, r++) {
        size_t ex = (size_t)group[j], len = dataset_len(d, ex);
        if (len > (size_t)it->max_seq_length) len = (size_t)it->max_seq_length;
        memcpy(out->tokens + (size_t)r * (size_t)out->width, d->tokens + d->starts[ex], len * sizeof(int32_t));
        out->lengths[r] = (int32_t)len;
        out->offsets[r] = d->offsets ? d->offsets[ex] : 0;
        out->n_loss_tokens += batch_row_loss_tokens(out->offsets[r], out->lengths[r]);
    }
}

void batch_describe(const BatchIter *it, int b, int *rows, int *width, long *loss_tokens, uint64_t *ids,
                    uint32_t n_ids) {
    const Dataset *d = it->data;
    size_t first = (size_t)b * (size_t)it->batch_size, count = d->n - first;
    if (count > (size_t)it->batch_size) count = (size_t)it->batch_size;
    const int *group = it->sorted + first;
    size_t longest = 0;
    int r = 0;
    for (size_t j = (size_t)it->rank; j < count; j += (size_t)it->world, r++)
        if (dataset_len(d, (size_t)group[j]) > longest) longest = dataset_len(d, (size_t)group[j]);
    int w = padded_width(longest, it->max_seq_length);
    long loss = 0;
    for (size_t j = (size_t)it->rank; j < count; j += (size_t)it->world) {
        size_t ex = (size_t)group[j], len = dataset_len(d, ex);
        if (len > (size_t)it->max_seq_length) len = (size_t)it->max_seq_length;
        loss += batch_row_loss_tokens(d->offsets ? d->offsets[ex] : 0, (int32_t)len);
        if (!ids) continue;
        /* the model's inputs are positions 0 .. w-2: the row's tokens, then padding (id 0) */
        size_t inputs = (size_t)w - 1;
        const int32_t *t = d->tokens + d->starts[ex];
        for (size_t k = 0; k < len && k < inputs; k++) {
            uint32_t id = (uint32_t)t[k];
            if (id < n_ids) ids[id >> 6] |= 1ull << (id & 63);
        }
        if (len < inputs) ids[0] |= 1ull;
    }
    *rows = r;
    *width = w;
    *loss_tokens = loss;
}

long batch_row_loss_tokens(int32_t offset, int32_t length) {
    /* Target steps s = 1 .. width-1 count when offset <= s < length. */
    int32_t first = offset > 1 ? offset : 1;
    return length > first ? (long)(length - first) : 0;
}

size_t batch_count_empty_rows(const Dataset *d, int max_seq_length) {
    size_t empty = 0;
    for (size_t i = 0; i < d->n; i++) {
        size_t len = dataset_len(d, i);
        if (len > (size_t)max_seq_length) len = (size_t)max_seq_length;
        empty += batch_row_loss_tokens(d->offsets ? d->offsets[i] : 0, (int32_t)len) == 0;
    }
    return empty;
}

int batch_iter_next(BatchIter *it, Batch **out) {
    if (it->cursor.position >= (uint64_t)it->n_batches) {
        if (!it->loop) return 0;
        /* Next epoch: advance the generator past this epoch's shuffle (a
         * shuffle of n items always draws the same count), then redraw. */
        Rng r = it->cursor.rng;
        rng_shuffle_int(&r, it->order, it->n_batches);
        it->cursor.rng = r;
        it->cursor.epoch++;
        it->cursor.position = 0;
        build_order(it);
    }
    fill_batch(it, it->order[it->cursor.position++]);
    *out = &it->batch;
    return 1;
}

void batch_iter_free(BatchIter *it) {
    mem_free(it->sorted);
    mem_free(it->order);
    mem_free(it->batch.tokens);
    mem_free(it->batch.lengths);
    mem_free(it->batch.offsets);
    memset(it, 0, sizeof *it);
}

double batch_padding_share(const Dataset *d, int batch_size, int max_seq, bool sorted) {
    if (d->n == 0 || batch_size <= 0 || max_seq < 1) return 0;
    int *idx = sorted_indices(d, sorted);
    if (!idx) return -1;
    double cells = 0, real = 0;
    for (size_t first = 0; first < d->n; first += (size_t)batch_size) {
        size_t count = d->n - first < (size_t)batch_size ? d->n - first : (size_t)batch_size, longest = 0;
        for (size_t j = 0; j < count; j++) {
            size_t len = dataset_len(d, (size_t)idx[first + j]);
            if (len > longest) longest = len;
            real += (double)(len < (size_t)max_seq ? len : (size_t)max_seq);
        }
        cells += (double)count * padded_width(longest, max_seq);
    }
    mem_free(idx);
    return cells > 0 ? 1.0 - real / cells : 0;
}

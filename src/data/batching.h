/* batching.h: MLX-LM's iterate_batches, with its bugs fixed: examples are
 * sorted by their real token length, grouped into batches of B consecutive
 * examples, the order of batches is shuffled every epoch from the seed, rows
 * are padded with id 0 to 1 + 32*ceil(max_len/32) capped at max_seq_length,
 * longer rows are truncated with MLX-LM's warning. Unlike MLX-LM, the
 * remainder (n % B examples) is not dropped: it forms a last, smaller batch.
 * Each of `world` workers takes rows rank, rank + world, ... of a batch. */
#ifndef LT_BATCHING_H
#define LT_BATCHING_H
#include <stdbool.h>
#include <stdint.h>
#include "base/rng.h"
#include "data/dataset.h"

typedef struct {
    int rows;           /* this worker's rows (<= batch_size / world); the last,
                           smaller batch can leave a worker with 0 rows when
                           world > 1: it then contributes no tokens */
    int width;          /* W: padded row width; the model sees T = W - 1 inputs */
    int32_t *tokens;    /* (rows, width), right-padded with 0 */
    int32_t *lengths;   /* (rows): min(len, max_seq_length) */
    int32_t *offsets;   /* (rows): prompt offsets */
    long n_loss_tokens; /* targets that count in the loss on this worker */
} Batch;

typedef struct {
    uint64_t epoch;
    uint64_t position;  /* index into the current epoch's batch order */
    Rng rng;
} BatchCursor;          /* everything needed to resume exactly */

typedef struct {
    const Dataset *data;
    int batch_size, max_seq_length, rank, world;
    bool loop;          /* training: endless epochs, reshuffled; eval: one pass in order */
    int *sorted;        /* (n) example indices sorted by length (stable) */
    int n_batches;
    int *order;         /* (n_batches) batch order of the current epoch */
    BatchCursor cursor;
    bool warned;        /* truncation warning printed (once per iterator) */
    Batch batch;        /* buffers sized for the widest batch */
} BatchIter;

/* Errors: "Dataset must have at least batch_size=B examples but only has N."
 * and "The batch size must be divisible by the number of workers". */
int batch_iter_init(BatchIter *it, const Dataset *d, int batch_size, int max_seq_length,
                    int rank, int world, uint64_t seed, bool loop);
/* 1: *out points at the next batch; 0: end of the pass (eval only). */
int batch_iter_next(BatchIter *it, Batch **out);
void batch_iter_free(BatchIter *it);
/* Restores a saved cursor (it->cursor of an iterator built with the same
 * data, batch size and world): the next batches are those the saved one
 * would have given. */
int batch_iter_set_cursor(BatchIter *it, const BatchCursor *c);
/* Sorted batch b as fill_batch would make it for this iterator's worker,
 * without filling it: rows, padded width and loss targets; and, when ids is
 * not NULL, the token ids the model reads as inputs (positions 0 .. width-2
 * of each row, padding id 0 included) set in the bitmap ids (bit i of word
 * i / 64; ids >= n_ids are left out: the model refuses them). */
void batch_describe(const BatchIter *it, int b, int *rows, int *width, long *loss_tokens, uint64_t *ids,
                    uint32_t n_ids);
/* Loss targets of one row: steps s with offset <= s < length (s >= 1).
 * MLX-LM counts s <= length, one padding target too many per row. */
long batch_row_loss_tokens(int32_t offset, int32_t length);
/* Examples that keep no loss target at this max_seq_length (a prompt offset
 * at or past the truncated length): the trainer warns about them, and a
 * batch made only of them has n_loss_tokens == 0. */
size_t batch_count_empty_rows(const Dataset *d, int max_seq_length);
/* MLX-LM's truncation warning, without the newline. */
void batch_truncation_warning(char *buf, size_t size, int max_seq_length, size_t longest);
/* Share of padded cells over one epoch of batches (world 1): with the real
 * length sort, or in file order (what MLX-LM does because of its bug). */
double batch_padding_share(const Dataset *d, int batch_size, int max_seq, bool sorted);
/* Widest padded width any batch of this data set will have (for the plan). */
int batch_max_width(const Dataset *d, int batch_size, int max_seq_length);
/* How many different widths the batches of this data set have (each width
 * is a different set of matrix-product shapes for the planner); -1 on OOM. */
int batch_distinct_widths(const Dataset *d, int batch_size, int max_seq_length);
/* Bytes of the batch buffers (for the plan). */
size_t batch_iter_bytes(const Dataset *d, int batch_size, int max_seq_length, int world);
#endif

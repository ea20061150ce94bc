/* test_batching.c: iterate_batches rules on hand-built data sets (no
 * tokenizer): length sort, grouping with the remainder kept, padding width
 * and its cap, the truncation warning, the two MLX-LM errors, seeded shuffle,
 * rank splitting, cursor resume, and the loss-token count. */
#include "base/alloc.h"
#include "base/error.h"
#include "check.h"
#include "data/capture.h"
#include "data/batching.h"

/* Example i has tokens i*1000 + p + 1 (never 0, so padding is visible). */
static void make_data(Dataset *d, const int *lengths, const int *offsets, size_t n) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->starts = mem_calloc(n + 1, sizeof *d->starts);
    d->offsets = mem_calloc(n, sizeof *d->offsets);
    for (size_t i = 0; i < n; i++) d->starts[i + 1] = d->starts[i] + (size_t)lengths[i];
    d->n_tokens = d->starts[n];
    d->tokens = mem_calloc(d->n_tokens ? d->n_tokens : 1, sizeof *d->tokens);
    for (size_t i = 0; i < n; i++) {
        for (int p = 0; p < lengths[i]; p++) d->tokens[d->starts[i] + (size_t)p] = (int32_t)(i * 1000 + (size_t)p + 1);
        d->offsets[i] = offsets ? offsets[i] : 0;
    }
}
/* Not dataset_free: this test needs no tokenizer, so no dataset.o. */
static void free_data(Dataset *d) {
    mem_free(d->tokens);
    mem_free(d->starts);
    mem_free(d->offsets);
    memset(d, 0, sizeof *d);
}
static int row_example(const Batch *b, int r) { return (b->tokens[(size_t)r * (size_t)b->width] - 1) / 1000; }

static int random_lengths(int *len, int n, int lo, int hi, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) len[i] = lo + (int)rng_below(&r, (uint64_t)(hi - lo + 1));
    return n;
}

/* Runs fn with its output redirected into a buffer. */
static void capture_output(char *buf, size_t size, void (*fn)(void *), void *arg) {
    output_begin();
    fn(arg);
    output_end(buf, size);
}

static void test_errors(void) {
    int len[3] = {4, 5, 6};
    Dataset d;
    make_data(&d, len, NULL, 3);
    BatchIter it;
    CHECK(batch_iter_init(&it, &d, 4, 100, 0, 1, 0, true) < 0);
    CHECK(strcmp(error_message(), "Dataset must have at least batch_size=4 examples but only has 3.") == 0);
    CHECK(batch_iter_init(&it, &d, 3, 100, 0, 2, 0, true) < 0);
    CHECK(strcmp(error_message(), "The batch size must be divisible by the number of workers") == 0);
    CHECK(batch_iter_init(&it, &d, 3, 100, 0, 1, 0, true) == 0);
    batch_iter_free(&it);
    free_data(&d);
}

/* Eval mode: one pass over batches of B consecutive sorted examples, the
 * remainder last; ties in length keep file order. */
static void test_sort_and_groups(void) {
    int len[7] = {5, 3, 9, 3, 1, 5, 2};
    int expect[7] = {4, 6, 1, 3, 0, 5, 2}; /* stable sort by length */
    Dataset d;
    make_data(&d, len, NULL, 7);
    BatchIter it;
    CHECK(batch_iter_init(&it, &d, 3, 100, 0, 1, 0, false) == 0);
    CHECK(it.n_batches == 3);
    Batch *b;
    int seen = 0, batches = 0;
    while (batch_iter_next(&it, &b) == 1) {
        CHECK(b->rows == (batches < 2 ? 3 : 1));
        for (int r = 0; r < b->rows; r++, seen++) CHECK(row_example(b, r) == expect[seen]);
        batches++;
    }
    CHECK(batches == 3 && seen == 7);
    CHECK(batch_iter_next(&it, &b) == 0);
    batch_iter_free(&it);
    free_data(&d);
}

static void test_padding_width(void) {
    struct { int len, max_seq, width; } cases[] = {
        {1, 2048, 33}, {31, 2048, 33}, {32, 2048, 33}, {33, 2048, 65}, {64, 2048, 65}, {65, 2048, 97},
        {33, 50, 50}, {100, 50, 50}, {32, 33, 33}, {32, 20, 20},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int len[2] = {3, cases[c].len};
        Dataset d;
        make_data(&d, len, NULL, 2);
        BatchIter it;
        CHECK(batch_iter_init(&it, &d, 2, cases[c].max_seq, 0, 1, 0, false) == 0);
        CHECK(batch_max_width(&d, 2, cases[c].max_seq) == cases[c].width);
        Batch *b;
        char ignored[4096];
        output_begin(); /* the truncation warning, tested below */
        CHECK(batch_iter_next(&it, &b) == 1);
        output_end(ignored, sizeof ignored);
        CHECK_MSG(b->width == cases[c].width, "len %d max %d: width %d", cases[c].len, cases[c].max_seq, b->width);
        for (int r = 0; r < 2; r++) {
            int ex = row_example(b, r), want_len = len[ex] < cases[c].max_seq ? len[ex] : cases[c].max_seq;
            CHECK(b->lengths[r] == want_len);
            CHECK(r == 0 || b->lengths[r] >= b->lengths[r - 1]); /* sorted */
            /* Row contents: the example, then zeros. */
            for (int p = 0; p < b->width; p++) {
                int32_t want = p < want_len ? (int32_t)(ex * 1000 + p + 1) : 0;
                CHECK_MSG(b->tokens[r * b->width + p] == want, "row %d pos %d", r, p);
            }
        }
        CHECK(batch_iter_bytes(&d, 2, cases[c].max_seq, 1) >= (size_t)(2 * cases[c].width) * 4);
        batch_iter_free(&it);
        free_data(&d);
    }
}

static void run_two_batches(void *arg) {
    BatchIter *it = arg;
    Batch *b;
    batch_iter_next(it, &b);
    batch_iter_next(it, &b);
}

static void test_truncation_warning(void) {
    int len[4] = {70, 80, 90, 10};
    Dataset d;
    make_data(&d, len, NULL, 4);
    BatchIter it;
    CHECK(batch_iter_init(&it, &d, 2, 64, 0, 1, 0, false) == 0);
    char out[2048], want[512];
    capture_output(out, sizeof out, run_two_batches, &it);
    /* Sorted: {10, 70}, {80, 90}: the first batch warns about 70. */
    CHECK(strcmp(out, "[WARNING] Some sequences are longer than 64 tokens. The longest sentence 70 will be truncated "
                      "to 64. Consider pre-splitting your data to save memory.\n") == 0);
    batch_truncation_warning(want, sizeof want, 64, 70);
    CHECK(strncmp(out, want, strlen(want)) == 0);
    batch_iter_free(&it);
    free_data(&d);
}

/* Collects the first example of each batch for `count` batches. */
static void batch_trace(BatchIter *it, int *trace, int count) {
    Batch *b;
    for (int i = 0; i < count; i++) {
        batch_iter_next(it, &b);
        trace[i] = b->rows ? row_example(b, 0) : -1;
    }
}

static void test_shuffle_and_coverage(void) {
    enum { N = 83, B = 4, NB = 21 }; /* 20 full batches and one of 3 */
    int len[N];
    random_lengths(len, N, 1, 200, 7);
    Dataset d;
    make_data(&d, len, NULL, N);
    BatchIter a, b2, c;
    CHECK(batch_iter_init(&a, &d, B, 4096, 0, 1, 42, true) == 0);
    CHECK(batch_iter_init(&b2, &d, B, 4096, 0, 1, 42, true) == 0);
    CHECK(batch_iter_init(&c, &d, B, 4096, 0, 1, 43, true) == 0);
    CHECK(a.n_batches == NB);
    int ta[3 * NB], tb[3 * NB], tc[3 * NB];
    /* Every example exactly once per epoch, the remainder included. */
    for (int epoch = 0; epoch < 3; epoch++) {
        int count[N] = {0};
        Batch *bt;
        for (int k = 0; k < NB; k++) {
            CHECK(batch_iter_next(&a, &bt) == 1);
            for (int r = 0; r < bt->rows; r++) count[row_example(bt, r)]++;
            ta[epoch * NB + k] = row_example(bt, 0);
            /* Batch composition is B consecutive sorted examples. */
            for (int r = 1; r < bt->rows; r++) CHECK(bt->lengths[r] >= bt->lengths[r - 1]);
        }
        int once = 0;
        for (int i = 0; i < N; i++) once += count[i] == 1;
        CHECK_MSG(once == N, "epoch %d: %d of %d examples seen once", epoch, once, N);
        CHECK(a.cursor.epoch == (uint64_t)epoch);
    }
    batch_trace(&b2, tb, 3 * NB);
    batch_trace(&c, tc, 3 * NB);
    CHECK(memcmp(ta, tb, sizeof ta) == 0);          /* same seed: same order */
    CHECK(memcmp(ta, tc, sizeof ta) != 0);          /* other seed: other order */
    CHECK(memcmp(ta, ta + NB, NB * sizeof *ta) != 0); /* each epoch reshuffles */
    CHECK(memcmp(ta + NB, ta + 2 * NB, NB * sizeof *ta) != 0);
    /* Shuffled: not the sorted order. */
    int in_order = 1;
    for (int k = 1; k < NB; k++) in_order &= len[ta[k]] >= len[ta[k - 1]];
    CHECK(!in_order);
    batch_iter_free(&a);
    batch_iter_free(&b2);
    batch_iter_free(&c);
    free_data(&d);
}

/* Resuming from a saved cursor gives the same next batches, byte for byte,
 * across epoch boundaries. */
static void test_cursor_resume(void) {
    enum { N = 37, B = 3 };
    int len[N], off[N];
    random_lengths(len, N, 2, 90, 11);
    for (int i = 0; i < N; i++) off[i] = i % 3 ? len[i] / 2 : 0;
    Dataset d;
    make_data(&d, len, off, N);
    for (int stop = 0; stop < 40; stop += 7) {
        BatchIter a, b;
        CHECK(batch_iter_init(&a, &d, B, 64, 0, 1, 5, true) == 0);
        char ignored[4096];
        output_begin();
        Batch *x, *y;
        for (int k = 0; k < stop; k++) batch_iter_next(&a, &x);
        BatchCursor saved = a.cursor;
        CHECK(batch_iter_init(&b, &d, B, 64, 0, 1, 999, true) == 0); /* seed replaced by the cursor */
        CHECK(batch_iter_set_cursor(&b, &saved) == 0);
        int same = 1;
        for (int k = 0; k < 30; k++) {
            batch_iter_next(&a, &x);
            batch_iter_next(&b, &y);
            same &= x->rows == y->rows && x->width == y->width && x->n_loss_tokens == y->n_loss_tokens &&
                    memcmp(x->tokens, y->tokens, (size_t)x->rows * (size_t)x->width * 4) == 0 &&
                    memcmp(x->lengths, y->lengths, (size_t)x->rows * 4) == 0 &&
                    memcmp(x->offsets, y->offsets, (size_t)x->rows * 4) == 0;
        }
        output_end(ignored, sizeof ignored);
        CHECK_MSG(same, "resume after %d batches", stop);
        CHECK(a.cursor.epoch == b.cursor.epoch && a.cursor.position == b.cursor.position);
        batch_iter_free(&a);
        batch_iter_free(&b);
    }
    BatchIter a;
    CHECK(batch_iter_init(&a, &d, B, 64, 0, 1, 5, true) == 0);
    BatchCursor bad = a.cursor;
    bad.position = 1000;
    CHECK(batch_iter_set_cursor(&a, &bad) < 0);
    batch_iter_free(&a);
    free_data(&d);
}

/* Rank r takes rows r, r+world, ... of each batch; together the ranks hold
 * the world-1 batch, remainder included (a rank may get 0 rows there). */
static void test_ranks(void) {
    enum { N = 21, B = 4, W = 2 };
    int len[N];
    random_lengths(len, N, 1, 50, 3);
    Dataset d;
    make_data(&d, len, NULL, N);
    BatchIter one, r0, r1;
    CHECK(batch_iter_init(&one, &d, B, 512, 0, 1, 9, true) == 0);
    CHECK(batch_iter_init(&r0, &d, B, 512, 0, W, 9, true) == 0);
    CHECK(batch_iter_init(&r1, &d, B, 512, 1, W, 9, true) == 0);
    int zero_rows = 0;
    for (int k = 0; k < 2 * one.n_batches; k++) {
        Batch *a, *b0, *b1;
        batch_iter_next(&one, &a);
        batch_iter_next(&r0, &b0);
        batch_iter_next(&r1, &b1);
        CHECK(b0->rows + b1->rows == a->rows);
        CHECK(b0->rows == (a->rows + 1) / 2);
        for (int r = 0; r < a->rows; r++) {
            const Batch *mine = r % W == 0 ? b0 : b1;
            CHECK(row_example(mine, r / W) == row_example(a, r));
        }
        CHECK(b0->n_loss_tokens + b1->n_loss_tokens == a->n_loss_tokens);
        zero_rows += b1->rows == 0;
    }
    CHECK(zero_rows == 2); /* 21 = 5*4 + 1: rank 1 has nothing in the last batch */
    batch_iter_free(&one);
    batch_iter_free(&r0);
    batch_iter_free(&r1);
    free_data(&d);
}

/* n_loss_tokens counts targets s (token index in the row) with
 * offset <= s < length: the last real token is a target, padding never is. */
static void test_loss_tokens(void) {
    enum { N = 12 };
    int len[N] = {1, 2, 5, 9, 33, 40, 7, 7, 64, 70, 3, 20};
    int off[N] = {0, 1, 3, 0, 10, 40, 8, 6, 2, 65, 0, 25};
    Dataset d;
    make_data(&d, len, off, N);
    BatchIter it;
    CHECK(batch_iter_init(&it, &d, 4, 66, 0, 1, 0, false) == 0);
    Batch *b;
    char warning[4096];
    output_begin();
    long total = 0, brute_total = 0;
    while (batch_iter_next(&it, &b) == 1) {
        long brute = 0;
        for (int r = 0; r < b->rows; r++) {
            int ex = row_example(b, r);
            CHECK(b->offsets[r] == off[ex]);
            for (int s = 1; s < b->width; s++) {
                int counted = s >= b->offsets[r] && s < b->lengths[r];
                brute += counted;
                if (counted) CHECK(b->tokens[r * b->width + s] != 0);   /* never a pad */
            }
            int last = b->lengths[r] - 1;                              /* last real token */
            if (last >= 1 && last >= b->offsets[r]) CHECK(b->tokens[r * b->width + last] == ex * 1000 + last + 1);
        }
        CHECK(b->n_loss_tokens == brute);
        total += b->n_loss_tokens;
        brute_total += brute;
    }
    output_end(warning, sizeof warning);
    CHECK(strstr(warning, "The longest sentence 70 will be truncated to 66.") != NULL);
    /* By hand: len-1 targets from max(off,1); 70 truncates to 66. */
    long hand = 0 + 1 + 2 + 8 + 23 + 0 + 0 + 1 + 62 + 1 + 2 + 0;
    CHECK(total == hand && brute_total == hand);
    CHECK(batch_row_loss_tokens(0, 1) == 0 && batch_row_loss_tokens(0, 5) == 4 && batch_row_loss_tokens(3, 5) == 2);
    CHECK(batch_row_loss_tokens(7, 5) == 0);
    /* No target left: example 0 (one token), 5 (offset = length), 6 and 11
     * (offset past the end); at 30 tokens also 9 (offset 65). */
    CHECK(batch_count_empty_rows(&d, 66) == 4);
    CHECK(batch_count_empty_rows(&d, 30) == 5);
    batch_iter_free(&it);
    free_data(&d);
}

static void test_padding_share(void) {
    /* By hand, B=2: sorted {1,2},{40,50} -> widths 33, 65: pads (66-3)+(130-90) = 103 of 196. */
    int len[4] = {40, 1, 50, 2};
    Dataset d;
    make_data(&d, len, NULL, 4);
    CHECK_NEAR(batch_padding_share(&d, 2, 2048, true), 103.0 / 196.0, 1e-12);
    /* File order {40,1},{50,2}: widths 65, 65: pads 260-93 = 167 of 260. */
    CHECK_NEAR(batch_padding_share(&d, 2, 2048, false), 167.0 / 260.0, 1e-12);
    free_data(&d);
    enum { N = 1000 };
    int many[N];
    random_lengths(many, N, 20, 1500, 1);
    make_data(&d, many, NULL, N);
    double s = batch_padding_share(&d, 4, 2048, true), f = batch_padding_share(&d, 4, 2048, false);
    printf("padding share, 1000 uniform lengths 20..1500, B=4: sorted %.1f%%, file order %.1f%%\n", 100 * s, 100 * f);
    CHECK(s < 0.05 && f > 0.2);
    free_data(&d);
}

/* Every allocation of batch_iter_init failing in turn: an error, no crash. */
static void test_alloc_failures(void) {
    int len[9] = {3, 1, 4, 1, 5, 9, 2, 6, 5};
    Dataset d;
    make_data(&d, len, NULL, 9);
    BatchIter it;
    int failures = 0;
    for (long k = 1; k < 50; k++) {
        mem_fail_at(k);
        int rc = batch_iter_init(&it, &d, 2, 64, 0, 1, 0, true);
        mem_fail_at(0);
        if (rc == 0) { batch_iter_free(&it); break; }
        failures++;
    }
    CHECK(failures >= 5); /* sorted, keys, order, tokens, lengths, offsets */
    CHECK(batch_padding_share(&d, 2, 64, true) > 0);
    free_data(&d);
}

int main(void) {
    test_errors();
    test_sort_and_groups();
    test_padding_width();
    test_truncation_warning();
    test_shuffle_and_coverage();
    test_cursor_resume();
    test_ranks();
    test_loss_tokens();
    test_padding_share();
    test_alloc_failures();
    return check_finish("data/batching");
}

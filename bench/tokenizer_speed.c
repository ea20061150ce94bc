/* tokenizer_speed.c: encode throughput of the C tokenizer on one core.
 * Usage: tokenizer_speed MODEL_DIR TEXT_FILE [CHUNK_BYTES=4096]
 * The text is cut into chunks at line ends near CHUNK_BYTES (as documents
 * would be), encoded once with a fresh tokenizer (cold BPE cache) and once
 * more (warm); prints MB/s for both and the load time. Built and run by
 * bench/tokenizer_speed.sh next to the same measurement in JavaScript. */
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
/* CPU time of this process: on a shared machine it is the fairer clock. */
static double cpu(void) { struct timespec ts; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static int run_pass(const Tokenizer *t, const char *text, size_t size, size_t chunk, size_t *n_tokens) {
    *n_tokens = 0;
    for (size_t pos = 0; pos < size;) {
        size_t end = pos + chunk < size ? pos + chunk : size;
        while (end < size && text[end - 1] != '\n') end++;
        int32_t *ids; size_t n;
        TRY(tokenizer_encode(t, text + pos, end - pos, false, &ids, &n));
        *n_tokens += n;
        mem_free(ids);
        pos = end;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s MODEL_DIR TEXT_FILE [CHUNK_BYTES]\n", argv[0]); return 2; }
    size_t chunk = argc > 3 ? (size_t)atol(argv[3]) : 4096;
    char *text; size_t size;
    if (file_read_all(argv[2], 0, &text, &size) < 0) die_with_error();
    double t0 = now(), c0 = cpu();
    Tokenizer *t;
    if (tokenizer_load(&t, argv[1]) < 0) die_with_error();
    double t1 = now(), c1 = cpu();
    size_t n_cold, n_warm;
    if (run_pass(t, text, size, chunk, &n_cold) < 0) die_with_error();
    double t2 = now(), c2 = cpu();
    if (run_pass(t, text, size, chunk, &n_warm) < 0) die_with_error();
    double t3 = now(), c3 = cpu();
    const char *name = strrchr(argv[1], '-') ? strrchr(argv[1], '-') + 1 : argv[1];
    printf("C   %-16s load %.2fs (cpu %.2fs)  %zu bytes -> %zu tokens  cold %.2f MB/s (cpu %.2f)  warm %.2f MB/s (cpu %.2f)\n", name,
           t1 - t0, c1 - c0, size, n_cold, size / 1e6 / (t2 - t1), size / 1e6 / (c2 - c1), size / 1e6 / (t3 - t2), size / 1e6 / (c3 - c2));
    tokenizer_free(t);
    mem_free(text);
    return 0;
}

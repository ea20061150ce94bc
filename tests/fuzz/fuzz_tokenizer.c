/* fuzz_tokenizer.c: libFuzzer target for the tokenizer.json loader: any
 * input is refused with a one-line message, or loads into a tokenizer that
 * encodes and decodes a fixed text (ids in range). Build and run: make fuzz. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/alloc.h"
#include "base/error.h"
#include "tokenizer/tokenizer.h"
#include "data/tiny_tokenizer.h"

static char json_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *seed_dir = getenv("LMTUNE_FUZZ_WRITE_SEED");
    if (seed_dir) exit(write_tokenizer(seed_dir, NULL) < 0);
    snprintf(json_path, sizeof json_path, "/tmp/lmtune_fuzz_tok.%d.json", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(json_path, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    Tokenizer *t = NULL;
    if (tokenizer_load_files(&t, json_path, NULL) == 0) {
        static const char text[] = "Hello world, the other one: 123 \xC3\xA9t\xC3\xA9 <|im_end|>\n";
        int32_t *ids = NULL;
        size_t n = 0;
        if (tokenizer_encode(t, text, sizeof text - 1, true, &ids, &n) == 0) {
            int vocab = tokenizer_vocab_size(t);
            for (size_t i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= vocab) abort();
            char *back = NULL;
            size_t back_len;
            if (tokenizer_decode(t, ids, n, false, &back, &back_len) == 0) mem_free(back);
            mem_free(ids);
        }
        tokenizer_free(t);
    } else if (strchr(error_message(), '\n')) {
        abort();
    }
    return 0;
}

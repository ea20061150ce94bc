/* fuzz_jsonl.c: libFuzzer target for the JSONL data path (line reader, JSON
 * checks, format detection, tokenization through the chat template), in
 * strict and skip-bad-lines modes, with and without --mask-prompt.
 * Build and run: make fuzz (tests/fuzz/run.sh). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "base/error.h"
#include "data/dataset.h"
#include "tokenizer/tokenizer.h"
#include "data/tiny_tokenizer.h"

static Tokenizer *tok;
static char data_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    char dir[] = "/tmp/lmtune_fuzz_XXXXXX";
    if (!mkdtemp(dir)) abort();
    const char *tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    if (write_tokenizer(dir, tmpl) < 0 || tokenizer_load(&tok, dir) < 0) {
        fprintf(stderr, "fuzz setup: %s\n", error_message());
        abort();
    }
    snprintf(data_path, sizeof data_path, "%s/data.jsonl", dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(data_path, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    for (int mode = 0; mode < 4; mode++) {
        DatasetOptions o;
        dataset_options_default(&o);
        o.skip_bad_lines = mode & 1;
        o.mask_prompt = mode & 2;
        o.max_line_bytes = 1 << 16;
        Dataset d;
        if (dataset_load(&d, data_path, tok, &o) == 0) {
            if (d.n == 0 || d.starts[d.n] != d.n_tokens) abort();
            dataset_free(&d);
        }
    }
    return 0;
}

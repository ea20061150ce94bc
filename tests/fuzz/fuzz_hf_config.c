/* fuzz_hf_config.c: libFuzzer target for the config.json reader: any input
 * either fails with a one-line message naming the file, or gives a config
 * whose sizes are positive and consistent and which writes and reads back
 * identically. Build and run: make fuzz (tests/fuzz/run.sh). */
#include "base/error.h"
#include "formats/hf_config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    ModelConfig c, back;
    if (hf_config_parse(&c, text, "config.json") == 0) {
        if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 ||
            c.num_attention_heads % c.num_key_value_heads != 0 || c.vocab_size <= 0 || !(c.rms_norm_eps > 0))
            abort();
        char path[64];
        snprintf(path, sizeof path, "/tmp/fuzz_hf_config.%d.json", (int)getpid());
        if (hf_config_write(&c, path) != 0 || hf_config_load(&back, path) != 0 || memcmp(&c, &back, sizeof c) != 0) abort();
        unlink(path);
    } else if (strncmp(error_message(), "config.json", 11) != 0 || strchr(error_message(), '\n')) abort();
    free(text);
    return 0;
}

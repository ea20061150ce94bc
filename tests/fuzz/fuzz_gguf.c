/* fuzz_gguf.c: libFuzzer target for the GGUF reader, down to the tensors:
 * any input is either refused with one line naming the file, or parsed
 * into key-values and tensor infos whose data lies inside the input; then
 * every tensor (all the quantized block types included) is dequantized row
 * by row, so a size or offset the reader let through that does not fit the
 * type's blocks is a finding. Build and run: make fuzz.
 * LMTUNE_FUZZ_WRITE_SEED=DIR writes the seeds: an adapter (F32 tensors),
 * and a file with one tensor of every supported type (random blocks). */
#include "base/alloc.h"
#include "base/error.h"
#include "base/rng.h"
#include "formats/gguf.h"
#include "kernels/ggml_quants.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_seeds(const char *dir) {
    static const float a[6] = {1, 2, 3, 4, 5, 6};
    static const float b[4] = {0.5f, -1, 2, 0};
    GgufKVOut kv[] = {{.key = "general.type", .type = GGUF_TYPE_STRING, .str = "adapter"},
                      {.key = "adapter.lora.alpha", .type = GGUF_TYPE_FLOAT32, .f32 = 16}};
    GgufTensorOut t[] = {{"blk.0.attn_q.weight.lora_a", 2, {3, 2, 1, 1}, GGML_TYPE_F32, a, NULL, NULL, 0},
                         {"blk.0.attn_q.weight.lora_b", 2, {2, 2, 1, 1}, GGML_TYPE_F32, b, NULL, NULL, 0}};
    char path[512];
    snprintf(path, sizeof path, "%s/adapter.gguf", dir);
    if (gguf_write(path, kv, 2, t, 2) < 0) {
        fprintf(stderr, "%s\n", error_message());
        exit(1);
    }
    /* one small tensor of each type: 2 rows of one block (two for 32-blocks) */
    static const int types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
                                GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    enum { NT = sizeof types / sizeof types[0] };
    GgufTensorOut ts[NT];
    static char names[NT][32];
    static uint8_t data[NT][2 * 256 * 4];
    Rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < NT; i++) {
        int bs = ggml_block_size(types[i]);
        int64_t cols = bs == 1 ? 8 : bs == 32 ? 64 : 256;
        snprintf(names[i], sizeof names[i], "t.%s", ggml_type_name(types[i]));
        size_t bytes = 2 * ggml_row_bytes(types[i], cols);
        for (size_t k = 0; k < bytes; k++) data[i][k] = (uint8_t)rng_next(&r);
        /* fp16 scales kept finite and small: the two bytes of each block's d */
        for (size_t k = 1; k < bytes; k += 2) data[i][k] &= 0x3b;
        ts[i] = (GgufTensorOut){names[i], 2, {(uint64_t)cols, 2, 1, 1}, types[i], data[i], NULL, NULL, 0};
    }
    snprintf(path, sizeof path, "%s/all_types.gguf", dir);
    if (gguf_write(path, kv, 1, ts, NT) < 0) {
        fprintf(stderr, "%s\n", error_message());
        exit(1);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = getenv("LMTUNE_FUZZ_WRITE_SEED");
    if (!dir) return 0;
    write_seeds(dir);
    exit(0);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    GgufFile g;
    if (gguf_parse(&g, data, size, "fuzz.gguf") < 0) {
        if (!strstr(error_message(), "fuzz.gguf") || strchr(error_message(), '\n')) abort();
        return 0;
    }
    float row[4096];
    for (size_t i = 0; i < g.n_tensors; i++) {
        const GgufTensorInfo *t = &g.tensors[i];
        const uint8_t *p = t->data;
        if (t->bytes && (p < data || p + t->bytes > data + size)) abort();
        int64_t cols = t->ne[0];
        if (cols == 0 || cols > 4096) continue;
        size_t rb = ggml_row_bytes(t->type, cols);
        if (rb == 0) abort();
        size_t rows = t->bytes / rb;
        if (rows * rb != t->bytes || (int64_t)rows * cols != t->nelem) abort();
        for (size_t r = 0; r < rows && r < 64; r++) ggml_dequantize_row(t->type, p + r * rb, row, cols);
    }
    for (size_t i = 0; i < g.n_kv; i++) {
        const GgufKV *kv = &g.kv[i];
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type == GGUF_TYPE_STRING) continue;
        for (uint64_t k = 0; k < kv->arr_n && k < 64; k++) (void)gguf_arr_f64(kv, k);
    }
    gguf_close(&g);
    return 0;
}

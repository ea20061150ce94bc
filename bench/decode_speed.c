/* decode_speed.c: greedy decoding speed of a model directory (no
 * tokenizer: token ids), the way `lmtune generate` runs it: a prompt of
 * P tokens, then one token at a time through the KV cache. Prints
 * "decode: P prompt tokens X tok/s, G generated tokens Y tok/s (Z per CPU
 * second)".
 * Usage: decode_speed MODEL_DIR [prompt_tokens] [generated_tokens] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "base/alloc.h"
#include "base/arena.h"
#include "base/error.h"
#include "kernels/matmul.h"
#include "model/adapter_io.h"

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU seconds of the process (all threads): steadier than wall time on a shared machine. */
static double cpu_now(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: decode_speed MODEL_DIR [prompt_tokens] [generated_tokens]\n");
        return 2;
    }
    int P = argc > 2 ? atoi(argv[2]) : 16, G = argc > 3 ? atoi(argv[3]) : 32;
    Model *m;
    Arena arena;
    if (model_open_inference(&m, &arena, argv[1], NULL, 1, 1, P + G, 0) < 0) {
        fprintf(stderr, "decode_speed: %s\n", error_message());
        return 1;
    }
    int V = model_config(m)->vocab_size;
    float *logits = mem_alloc((size_t)V * sizeof(float));
    int32_t *prompt = mem_alloc((size_t)P * sizeof(int32_t));
    for (int i = 0; i < P; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    double t0 = now();
    if (model_decode(m, prompt, P, 0, logits) < 0) return 1;
    double t1 = now(), c1 = cpu_now();
    for (int g = 0; g < G; g++) {
        int32_t best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        if (model_decode(m, &best, 1, P + g, logits) < 0) return 1;
    }
    double t2 = now(), c2 = cpu_now();
    printf("decode: %d prompt tokens %.1f tok/s, %d generated tokens %.2f tok/s (%.2f per CPU second)\n", P,
           P / (t1 - t0), G, G / (t2 - t1), G / (c2 - c1));
    model_free(m);
    arena_free(&arena);
    matmul_release_all();
    return 0;
}

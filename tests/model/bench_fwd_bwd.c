/* bench_fwd_bwd.c: time of one forward+backward micro-batch of a
 * SmolLM2-135M-shaped model (hidden 576, 30 layers, 9/3 heads, MLP 1536,
 * vocab 49152, tied), batch 4 x 512, LoRA rank 8 on all 7 projections of all
 * blocks, with the frozen weights in fp32 and in bf16. Not a test (make test
 * does not build it); build by hand:
 * The Makefile links every tests/ .c file not named test_* into every test,
 * so the whole file is behind LT_BENCH_MAIN and compiles to nothing there.
 *   make build/rel/liblmtune.a && gcc -std=c11 -D_GNU_SOURCE -DLT_BENCH_MAIN -O2 -march=native -fopenmp -Isrc -Itests \
 *     -o build/bench_fwd_bwd tests/model/bench_fwd_bwd.c build/rel/liblmtune.a -fopenmp -ldnnl -ljansson -lpcre2-8 -lyaml -lm
 *   build/bench_fwd_bwd [B T steps [ckpt]]
 * The random models are written once under /tmp/lmtune_bench_{f32,bf16}. */
#ifdef LT_BENCH_MAIN
#include "model_testutil.h"
#include "base/sys.h"
#include "kernels/matmul.h"
#include <stdlib.h>
#include <time.h>

/* CPU seconds of the whole process (all threads): on a shared, loaded
 * machine this is steadier than wall time. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void run(const char *dir, DType ft, int B, int T, int steps, bool ckpt, bool full) {
    ModelConfig cfg;
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (hf_config_load(&cfg, p) < 0) die_with_error();
    ModelSpec spec = {.type = full ? TUNE_FULL : TUNE_LORA, .num_layers = full ? 4 : -1, .lora_rank = 8, .lora_scale = 20.0f,
                      .lora_keys = PROJ_ALL, .max_rows = B, .max_tokens = T, .weight_dtype = DTYPE_F32,
                      .training = true, .grad_checkpoint = ckpt};
    Model *m; Arena arena; size_t planned;
    if (load_planned(&m, &arena, &planned, dir, &cfg, &spec, ft) < 0) die_with_error();
    Rng rng; rng_seed(&rng, 1);
    if (model_init_trainables(m, &rng) < 0) die_with_error();
    int W = T + 1;
    int32_t *tok = mem_alloc((size_t)B * W * 4), len[64], off[64];
    for (int i = 0; i < B * W; i++) tok[i] = (int32_t)rng_below(&rng, (uint64_t)cfg.vocab_size);
    for (int b = 0; b < B; b++) { len[b] = W; off[b] = 0; }
    double best = 1e30, sum = 0, cpu = 0;
    for (int s = 0; s <= steps; s++) {
        double t0 = time_now(), c0 = cpu_now(), loss; long nt;
        if (model_forward_backward(m, tok, B, W, len, off, 1.0f, NULL, &loss, &nt) < 0) die_with_error();
        double dt = time_now() - t0;
        if (s > 0) { sum += dt; cpu += cpu_now() - c0; if (dt < best) best = dt; }   /* step 0 warms up (primitive creation) */
        if (s == 0) printf("  warm-up step %.0f ms, loss %.4f\n", dt * 1e3, loss);
        matmul_profile_report(s == steps); /* LMTUNE_MATMUL_PROFILE: products of the measured steps */
    }
    char b1[32];
    printf("%-5s %s%s B=%d T=%d: fwd+bwd best %.0f ms, mean %.0f ms, CPU %.0f ms/step (%.0f tokens/s), arena %s\n",
           dtype_name(ft), full ? "full(last 4)" : "LoRA r8 all", ckpt ? " +ckpt" : "", B, T, best * 1e3, sum / steps * 1e3,
           cpu / steps * 1e3, B * T / best, format_bytes(b1, sizeof b1, planned));
    mem_free(tok);
    model_free(m);
    arena_free(&arena);
}

int main(int argc, char **argv) {
    int B = argc > 1 ? atoi(argv[1]) : 4, T = argc > 2 ? atoi(argv[2]) : 512, steps = argc > 3 ? atoi(argv[3]) : 2;
    bool ckpt = argc > 4 && atoi(argv[4]);
    const char *which = getenv("BENCH_DTYPES") ? getenv("BENCH_DTYPES") : "f32,bf16";
    ModelConfig cfg;
    if (model_preset("smollm2-135m", &cfg) < 0) die_with_error();
    const char *dirs[2] = {"/tmp/lmtune_bench_f32", "/tmp/lmtune_bench_bf16"};
    DType dts[2] = {DTYPE_F32, DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        if (!strstr(which, i ? "bf16" : "f32")) continue;
        char p[600];
        snprintf(p, sizeof p, "%s/model.safetensors", dirs[i]);
        if (!file_exists(p) && model_init_random(dirs[i], &cfg, dts[i], 1) < 0) die_with_error();
        run(dirs[i], dts[i], B, T, steps, ckpt, getenv("BENCH_FULL") != NULL);
    }
    return 0;
}
#endif

/* fuzz_state.c: libFuzzer target for the training-state file
 * (training_state.safetensors, src/train/checkpoint.h) loaded into a small
 * run (two trainable tensors, Adam): any input is refused with a one-line
 * message naming the file, or loads. Build and run: make fuzz. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "base/arena.h"
#include "base/error.h"
#include "memory/plan.h"
#include "train/checkpoint.h"

static float values[2][12], grads[2][12];
static TrainableTensor params[2];
static Optimizer opt;
static Arena arena;
static char fingerprint[17];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    params[0] = (TrainableTensor){.name = "layers.0.self_attn.q_proj.lora_a", .value = values[0], .grad = grads[0],
                                  .numel = 6, .ndim = 2, .shape = {3, 2}};
    params[1] = (TrainableTensor){.name = "layers.0.self_attn.q_proj.lora_b", .value = values[1], .grad = grads[1],
                                  .numel = 4, .ndim = 2, .shape = {2, 2}};
    OptimizerConfig oc;
    optimizer_config_default(&oc);
    oc.kind = OPT_ADAM;
    if (arena_init(&arena, 1 << 16) < 0) abort();
    Carver cv = {&arena, NULL};
    if (optimizer_layout(&opt, &oc, params, 2, &cv) < 0) abort();
    checkpoint_fingerprint("fuzz", params, 2, &oc, fingerprint);
    /* LMTUNE_FUZZ_WRITE_SEED=DIR: write valid states (with and without a
     * pending accumulation) as seeds and exit. */
    const char *dir = getenv("LMTUNE_FUZZ_WRITE_SEED");
    if (dir) {
        for (int i = 0; i < 12; i++) { values[0][i] = 0.1f * i; values[1][i] = -0.2f * i; grads[0][i] = 1; grads[1][i] = 2; }
        TrainState s;
        memset(&s, 0, sizeof s);
        s.iteration = 7; s.micro_batches = 7; s.trained_tokens = 123; s.window_loss = 2.5; s.window_tokens = 40;
        s.window_steps = 2; s.window_loss_steps = 2;
        char path[512];
        snprintf(path, sizeof path, "%s/state.safetensors", dir);
        if (checkpoint_save_state(path, &s, &opt, params, 2, fingerprint) < 0) exit(1);
        s.accum_count = 1; s.accum_tokens = 17; s.nonfinite_streak = 2; s.skipped_total = 3;
        snprintf(path, sizeof path, "%s/state_accum.safetensors", dir);
        if (checkpoint_save_state(path, &s, &opt, params, 2, fingerprint) < 0) exit(1);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("state", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    TrainState s;
    if (checkpoint_load_state(path, &s, &opt, params, 2, fingerprint) < 0 &&
        (!strstr(error_message(), path) || strchr(error_message(), '\n')))
        abort();
    close(fd);
    return 0;
}

/* fuzz_yaml.c: libFuzzer target for `lmtune train -c FILE.yaml` (the YAML
 * loader, every key of the flag table, lora_parameters, lr_schedule and
 * optimizer_config sections, and the checks of combinations): any input is
 * accepted or refused with a message, never a crash. Build and run: make fuzz. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "base/error.h"
#include "cli/train_args.h"

static char yaml_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    snprintf(yaml_path, sizeof yaml_path, "/tmp/lmtune_fuzz_yaml.%d.yaml", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(yaml_path, "wb");
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    char *argv[] = {"train", "-c", yaml_path, "--iters", "5", NULL};
    TrainArgs a;
    train_args_default(&a);
    if (train_args_parse(&a, 5, argv) < 0 && !error_message()[0]) abort();
    args_release();
    return 0;
}

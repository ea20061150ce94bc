/* main.c: `lmtune COMMAND [flags]`: sets OpenMP's waiting (sys_default_wait_policy), then
 * dispatches to the command files. */
#include "base/sys.h"
#include "cli/commands.h"
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *what;
} commands[] = {
    {"train", cmd_train, "fine-tune with LoRA, DoRA or full fine-tuning (mlx_lm.lora flags)"},
    {"plan", cmd_plan, "print the exact memory plan of a training run, before loading any weight"},
    {"eval", cmd_eval, "test loss and perplexity of a model, with or without an adapter"},
    {"generate", cmd_generate, "sample text, with or without an adapter"},
    {"fuse", cmd_fuse, "merge an adapter into the base model; export PEFT or GGUF adapters"},
    {"convert", cmd_convert, "quantize (MLX affine), dequantize or cast a model (mlx_lm.convert flags)"},
    {"init", cmd_init, "create a randomly initialised model directory from a preset"},
    {"report", cmd_report, "write the HTML training report of a run from its adapter directory"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    fprintf(out, "usage: lmtune COMMAND [flags]   (lmtune COMMAND --help for the flags)\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].what);
}

int main(int argc, char **argv) {
    sys_default_wait_policy(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "lmtune: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

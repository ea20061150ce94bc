/* cmd_fuse.c: `lmtune fuse`: merges an adapter into the base model (as
 * mlx_lm.fuse) and exports it as a PEFT adapter or a GGUF LoRA adapter. */
#include "base/error.h"
#include "base/sys.h"
#include "model/fuse.h"
#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
        "usage: lmtune fuse --model DIR [--adapter-path DIR] [--save-path DIR] [flags]\n\n"
        "Merges a LoRA/DoRA adapter (or a full fine-tune) into the base weights, computed\n"
        "in fp32 and stored in the base dtype, and writes a Hugging Face model directory.\n\n"
        "  --model DIR            base model directory (default mlx_model)\n"
        "  --adapter-path DIR     adapter directory (default adapters)\n"
        "  --save-path DIR        fused model output (default fused_model)\n"
        "  --max-shard-size SIZE  largest safetensors shard (default 5GB)\n"
        "  --export-peft DIR      also write a PEFT adapter (adapter_model.safetensors, adapter_config.json)\n"
        "  --export-gguf FILE     also write a GGUF LoRA adapter for llama.cpp (--lora FILE)\n"
        "  --no-fuse              only export; do not write the fused model\n");
}

int cmd_fuse(int argc, char **argv) {
    const char *model = "mlx_model", *adapter = "adapters", *save = "fused_model", *peft = NULL, *gguf = NULL;
    size_t shard = 5000000000ull;
    int no_fuse = 0;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"adapter-path", required_argument, 0, 'a'},
        {"save-path", required_argument, 0, 's'}, {"export-peft", required_argument, 0, 'p'},
        {"export-gguf", required_argument, 0, 'g'}, {"max-shard-size", required_argument, 0, 'x'},
        {"no-fuse", no_argument, 0, 'n'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'a': adapter = optarg; break;
        case 's': save = optarg; break;
        case 'p': peft = optarg; break;
        case 'g': gguf = optarg; break;
        case 'n': no_fuse = 1; break;
        case 'x': if (parse_size(optarg, &shard) < 0 || shard == 0) die_with_error(); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) die("fuse: unexpected argument '%s' (see lmtune fuse --help)", argv[optind]);
    if (!no_fuse) {
        printf("Loading pretrained model\n");
        if (fuse_model(model, adapter, save, shard) < 0) die_with_error();
        printf("Fused model saved to %s\n", save);
    }
    if (peft) {
        if (export_peft(model, adapter, peft) < 0) die_with_error();
        printf("PEFT adapter saved to %s\n", peft);
    }
    if (gguf) {
        if (export_gguf(model, adapter, gguf) < 0) die_with_error();
        printf("GGUF adapter saved to %s\n", gguf);
    }
    return 0;
}

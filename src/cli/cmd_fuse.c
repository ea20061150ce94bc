/* cmd_fuse.c: `lmtune fuse`: merges an adapter into the base model (as
 * mlx_lm.fuse) and exports it as a PEFT adapter or a GGUF LoRA adapter. The
 * flags are an args table (cli/args.h), parsed, checked and listed by --help
 * as every command's. Temporary files a killed earlier run left in the
 * output folders are removed first. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "base/error.h"
#include "base/fileio.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/fuse.h"

typedef struct {
    const char *model, *adapter_path, *save_path, *export_peft, *export_gguf;
    size_t max_shard_size;
    bool no_fuse, dequantize;
    ArgResult parsed;
} FuseArgs;

#define OFF(f) offsetof(FuseArgs, f)
static const ArgSpec FUSE_SPECS[] = {
    {"model", 0, ARG_STRING, OFF(model), "DIR", "base model directory", NULL, ARG_UNBOUNDED},
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR", "adapter directory", NULL, ARG_UNBOUNDED},
    {"save-path", 0, ARG_STRING, OFF(save_path), "DIR", "fused model output", NULL, ARG_UNBOUNDED},
    {"max-shard-size", 0, ARG_SIZE, OFF(max_shard_size), "SIZE", "largest safetensors shard (5GB, 512MB, 2GiB)", NULL,
     ARG_AT_LEAST(1, "a positive size such as 5GB, 512MB or 2GiB")},
    {"export-peft", 0, ARG_STRING, OFF(export_peft), "DIR", "also write a PEFT adapter (adapter_model.safetensors, adapter_config.json)", NULL, ARG_UNBOUNDED},
    {"export-gguf", 0, ARG_STRING, OFF(export_gguf), "FILE", "also write a GGUF LoRA adapter for llama.cpp (--lora FILE)", NULL, ARG_UNBOUNDED},
    {"no-fuse", 0, ARG_BOOL, OFF(no_fuse), NULL, "only export; do not write the fused model", NULL, ARG_UNBOUNDED},
    {"dequantize", 0, ARG_BOOL, OFF(dequantize), NULL,
     "write a quantized base's fused model in full precision (default: quantized again with each module's bits)",
     NULL, ARG_UNBOUNDED},
};
#undef OFF
static const ArgTable FUSE_TABLE = {
    "fuse", "fuse --model DIR [--adapter-path DIR] [--save-path DIR] [flags]",
    FUSE_SPECS, sizeof FUSE_SPECS / sizeof FUSE_SPECS[0], false, NULL, NULL,
    "Merges a LoRA/DoRA adapter (or a full fine-tune) into the base weights, computed\n"
    "in fp32 and stored in the base dtype, and writes a Hugging Face model directory.\n"
    "A quantized base's adapted modules are quantized again with their bits and group size.\n",
};

int cmd_fuse(int argc, char **argv) {
    FuseArgs a = {.model = "mlx_model", .adapter_path = "adapters", .save_path = "fused_model",
                  .max_shard_size = 5000000000ull};
    if (args_parse(&FUSE_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    /* what a fuse or export killed inside a save left in its output folders */
    const char *outputs[2] = {a.no_fuse ? NULL : a.save_path, a.export_peft};
    for (int i = 0; i < 2; i++)
        if (outputs[i] && atomic_remove_stale(outputs[i]) < 0) die_with_error();
    if (!a.no_fuse) {
        printf("Loading pretrained model\n");
        if (fuse_model(a.model, a.adapter_path, a.save_path, a.max_shard_size, a.dequantize) < 0) die_with_error();
        printf("Fused model saved to %s\n", a.save_path);
    }
    if (a.export_peft) {
        if (export_peft(a.model, a.adapter_path, a.export_peft) < 0) die_with_error();
        printf("PEFT adapter saved to %s\n", a.export_peft);
    }
    if (a.export_gguf) {
        if (export_gguf(a.model, a.adapter_path, a.export_gguf) < 0) die_with_error();
        printf("GGUF adapter saved to %s\n", a.export_gguf);
    }
    return 0;
}

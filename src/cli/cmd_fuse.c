/* cmd_fuse.c: `lmtune fuse`: merges an adapter into the base model (as
 * mlx_lm.fuse), writes the fused model as one GGUF file for llama.cpp
 * (--export-gguf, as mlx_lm.fuse), and exports the adapter itself for PEFT
 * or as a GGUF LoRA adapter (--export-gguf-adapter). The
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
#include "base/alloc.h"
#include "base/sys.h"
#include "kernels/ggml_quants.h"
#include "memory/plan.h"
#include "memory/infer_plan.h"
#include "model/fuse.h"
#include "model/model.h"
#include "model/gguf_export.h"
#include <string.h>

typedef struct {
    const char *model, *adapter_path, *save_path, *export_peft, *export_gguf_adapter;
    const char *gguf_path, *gguf_type;
    size_t max_shard_size, memory_limit;
    bool no_fuse, export_gguf, dequantize, trust_remote_code;
    ArgResult parsed;
} FuseArgs;

#define OFF(f) offsetof(FuseArgs, f)
static const ArgSpec FUSE_SPECS[] = {
    {"model", 0, ARG_STRING, OFF(model), "DIR",
     "base model directory, a GGUF file (FILE.gguf), or a Hugging Face repo id in the local cache", NULL,
     ARG_UNBOUNDED},
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR", "adapter directory", NULL, ARG_UNBOUNDED},
    {"save-path", 0, ARG_STRING, OFF(save_path), "DIR", "fused model output (a GGUF base: the folder of --gguf-path)",
     NULL, ARG_UNBOUNDED},
    {"max-shard-size", 0, ARG_SIZE, OFF(max_shard_size), "SIZE", "largest safetensors shard (5GB, 512MB, 2GiB)", NULL,
     ARG_AT_LEAST(1, "a positive size such as 5GB, 512MB or 2GiB")},
    {"memory-limit", 0, ARG_SIZE, OFF(memory_limit), "SIZE",
     "refuse, before reading any weight, a fuse whose plan exceeds SIZE (8GB, 7.5GiB)", NULL, ARG_UNBOUNDED},
    {"export-peft", 0, ARG_STRING, OFF(export_peft), "DIR",
     "also write a PEFT adapter (adapter_model.safetensors, adapter_config.json)", NULL, ARG_UNBOUNDED},
    {"export-gguf", 0, ARG_BOOL, OFF(export_gguf), NULL,
     "also write the fused model as one GGUF file for llama.cpp (at --gguf-path; implied by a GGUF base)", NULL,
     ARG_UNBOUNDED},
    {"gguf-path", 0, ARG_STRING, OFF(gguf_path), "FILE",
     "the fused GGUF model, relative to --save-path (default ggml-model-f16.gguf)", NULL, ARG_UNBOUNDED},
    {"gguf-type", 0, ARG_CHOICE, OFF(gguf_type), "TYPE",
     "matrices of the GGUF model: f16 (default), bf16, f32 or q8_0 (norms and biases stay f32; a GGUF base: "
     "the merged matrices, the others keep their types)",
     "f16|bf16|f32|q8_0", ARG_UNBOUNDED},
    {"export-gguf-adapter", 0, ARG_STRING, OFF(export_gguf_adapter), "FILE",
     "also write the adapter as a GGUF LoRA adapter for llama.cpp (--lora FILE)", NULL, ARG_UNBOUNDED},
    {"no-fuse", 0, ARG_BOOL, OFF(no_fuse), NULL, "only export; do not write the fused model", NULL, ARG_UNBOUNDED},
    {"dequantize", 0, ARG_BOOL, OFF(dequantize), NULL,
     "write a quantized base's fused model in full precision (default: quantized again with each module's bits)", NULL,
     ARG_UNBOUNDED},
    {"trust-remote-code", 0, ARG_BOOL, OFF(trust_remote_code), NULL, "refused: lmtune runs no model code", NULL,
     ARG_UNBOUNDED},
};
#undef OFF
static const ArgTable FUSE_TABLE = {
    "fuse", "fuse --model DIR [--adapter-path DIR] [--save-path DIR] [flags]",
    FUSE_SPECS, sizeof FUSE_SPECS / sizeof FUSE_SPECS[0], false, NULL, NULL,
    "Merges a LoRA/DoRA adapter (or a full fine-tune) into the base weights, computed\n"
    "in fp32 and stored in the base dtype, and writes a Hugging Face model directory;\n"
    "with --export-gguf also the fused model as one GGUF file that llama.cpp runs.\n"
    "A quantized base's adapted modules are quantized again with their bits and group size.\n"
    "On a GGUF base (--model FILE.gguf) the fused model is one GGUF file, SAVE_PATH/GGUF_PATH:\n"
    "every tensor and key of the base copied, the adapted matrices merged in --gguf-type.\n",
};

/* The ggml type of --gguf-type. */
static int gguf_type_of(const char *name) {
    return !strcmp(name, "f32")    ? GGML_TYPE_F32
           : !strcmp(name, "bf16") ? GGML_TYPE_BF16
           : !strcmp(name, "q8_0") ? GGML_TYPE_Q8_0
                                   : GGML_TYPE_F16;
}

/* A GGUF base (--model FILE.gguf): its fused model is one GGUF file, what
 * --export-gguf writes for any base (implied, may be given). Flags that only
 * mean something for a Hugging Face directory are refused, naming the file. */
static int check_gguf_base(const FuseArgs *a) {
    if (a->dequantize)
        return error_set("%s: --dequantize applies to MLX-quantized models; a GGUF base's fused model is a GGUF file "
                         "whose other tensors keep their types (the merged matrices are --gguf-type: f32 for full "
                         "precision)", a->model);
    if (args_was_set(&FUSE_TABLE, &a->parsed, "max-shard-size"))
        return error_set("%s: --max-shard-size applies to safetensors shards; a GGUF base's fused model is one GGUF "
                         "file", a->model);
    return 0;
}

int cmd_fuse(int argc, char **argv) {
    FuseArgs a = {.model = "mlx_model", .adapter_path = "adapters", .save_path = "fused_model",
                  .max_shard_size = 5000000000ull, .gguf_path = "ggml-model-f16.gguf", .gguf_type = "f16"};
    if (args_parse(&FUSE_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    if (a.trust_remote_code) {
        args_refuse_remote_code();
        die_with_error();
    }
    if (args_resolve_model(&a.model) < 0) die_with_error();
    bool gguf_base = model_is_gguf(a.model);
    if (a.export_gguf && a.no_fuse) {
        error_set("--export-gguf writes the fused model: it cannot be combined with --no-fuse");
        die_with_error();
    }
    if (gguf_base && check_gguf_base(&a) < 0) die_with_error();
    bool gguf_model = a.export_gguf && !gguf_base;
    if ((gguf_model || a.export_gguf_adapter) && gguf_export_check(a.model, gguf_model) < 0) die_with_error();
    int type = gguf_type_of(a.gguf_type);
    /* mlx_lm.fuse: save_path / gguf_path (an absolute gguf_path stands alone) */
    char *gguf_out = a.gguf_path[0] == '/' ? mem_strdup(a.gguf_path) : path_join(a.save_path, a.gguf_path);
    if (!gguf_out) die_with_error();
    /* what a fuse or export killed inside a save left in its output folders */
    char *gguf_dir = gguf_base && !a.no_fuse ? mem_strdup(gguf_out) : NULL;
    if (gguf_dir && strrchr(gguf_dir, '/')) *strrchr(gguf_dir, '/') = 0;
    const char *outputs[2] = {a.no_fuse ? NULL : gguf_base ? gguf_dir : a.save_path, a.export_peft};
    for (int i = 0; i < 2; i++)
        if (outputs[i] && outputs[i][0] && atomic_remove_stale(outputs[i]) < 0) die_with_error();
    mem_free(gguf_dir);
    if (!a.no_fuse && a.memory_limit) {
        /* planned from the headers and the adapter: refused before any weight is read */
        MemPlan plan = {0};
        int rc = gguf_base ? gguf_fuse_plan(a.model, a.adapter_path, type, &plan)
                           : fuse_plan(a.model, a.adapter_path, a.dequantize, &plan);
        if (rc == 0) rc = plan_note(&plan, MEM_RUNTIME, "process baseline", infer_baseline_now(NULL), false);
        /* a small model's fuse peaks in the start-up probe, not in the merge */
        if (rc == 0) rc = plan_note_startup_peak(&plan);
        if (rc == 0 && plan_total(&plan) > a.memory_limit) {
            char msg[2048];
            plan_limit_text(&plan, a.memory_limit, msg, sizeof msg);
            rc = error_set(gguf_base ? "%s. fuse holds one merged matrix in fp32 and the GGUF file it reads: no "
                                       "lever makes it smaller"
                                     : "%s. fuse holds every merged tensor in fp32 and the files it reads until the "
                                       "last shard is written: no lever makes it smaller",
                           msg);
        }
        plan_free(&plan);
        if (rc < 0) die_with_error();
    }
    if (!a.no_fuse && gguf_base) {
        printf("Loading pretrained model\n");
        if (gguf_fuse_model(a.model, a.adapter_path, gguf_out, type) < 0) die_with_error();
        printf("Fused model saved to %s\n", gguf_out);
    } else if (!a.no_fuse) {
        printf("Loading pretrained model\n");
        if (fuse_model(a.model, a.adapter_path, a.save_path, a.max_shard_size, a.dequantize) < 0) die_with_error();
        printf("Fused model saved to %s\n", a.save_path);
    }
    if (a.export_peft) {
        if (export_peft(a.model, a.adapter_path, a.export_peft) < 0) die_with_error();
        printf("PEFT adapter saved to %s\n", a.export_peft);
    }
    if (a.export_gguf && !gguf_base) {
        if (gguf_export_model(a.save_path, gguf_out, type) < 0) die_with_error();
        printf("GGUF model saved to %s\n", gguf_out);
    }
    mem_free(gguf_out);
    if (a.export_gguf_adapter) {
        if (gguf_export_adapter(a.model, a.adapter_path, a.export_gguf_adapter) < 0) die_with_error();
        printf("GGUF adapter saved to %s\n", a.export_gguf_adapter);
    }
    args_release();
    return 0;
}

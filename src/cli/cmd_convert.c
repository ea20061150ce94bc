/* cmd_convert.c: `lmtune convert`: mlx_lm.convert's flags on a local model
 * directory (model/convert.h does the work): cast to --dtype, quantize with
 * MLX's affine quantization (-q, --q-group-size, --q-bits, --q-mode affine,
 * --quant-predicate mixed_*), or dequantize (-d). */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/convert.h"

typedef struct {
    const char *hf_path, *mlx_path, *q_mode, *quant_predicate, *dtype, *upload_repo;
    int q_group_size, q_bits;
    bool quantize, dequantize, trust_remote_code;
    size_t max_shard_size;
    ArgResult parsed;
} ConvertArgs;

#define OFF(f) offsetof(ConvertArgs, f)
static const ArgSpec CONVERT_SPECS[] = {
    {"hf-path", 0, ARG_STRING, OFF(hf_path), "DIR", "the model to convert (a local Hugging Face or MLX directory)",
     NULL, ARG_UNBOUNDED},
    {"model", 0, ARG_STRING, OFF(hf_path), "DIR", "the same as --hf-path", NULL, ARG_UNBOUNDED},
    {"mlx-path", 0, ARG_STRING, OFF(mlx_path), "DIR", "where to write the converted model (must not exist)", NULL,
     ARG_UNBOUNDED},
    {"quantize", 'q', ARG_BOOL, OFF(quantize), NULL, "quantize the Linear and Embedding weights", NULL,
     ARG_UNBOUNDED},
    {"q-group-size", 0, ARG_INT, OFF(q_group_size), "N", "group size for quantization: 32, 64 (default) or 128",
     NULL, ARG_AT_LEAST(1, "32, 64 or 128")},
    {"q-bits", 0, ARG_INT, OFF(q_bits), "N", "bits per weight: 2, 3, 4 (default), 5, 6 or 8", NULL,
     ARG_AT_LEAST(1, "2, 3, 4, 5, 6 or 8")},
    {"q-mode", 0, ARG_CHOICE, OFF(q_mode), "MODE", "quantization mode (lmtune writes affine only)",
     "affine|mxfp4|nvfp4|mxfp8", ARG_UNBOUNDED},
    {"quant-predicate", 0, ARG_CHOICE, OFF(quant_predicate), "RECIPE",
     "mixed-bit recipe: more bits for some v_proj / down_proj and lm_head", "mixed_2_6|mixed_3_4|mixed_3_6|mixed_4_6",
     ARG_UNBOUNDED},
    {"dtype", 0, ARG_CHOICE, OFF(dtype), "DTYPE", "dtype of the saved floating weights (default: config's torch_dtype)",
     "float16|bfloat16|float32", ARG_UNBOUNDED},
    {"dequantize", 'd', ARG_BOOL, OFF(dequantize), NULL, "dequantize a quantized model", NULL, ARG_UNBOUNDED},
    {"upload-repo", 0, ARG_STRING, OFF(upload_repo), "REPO", "not supported (lmtune does not upload)", NULL,
     ARG_UNBOUNDED},
    {"trust-remote-code", 0, ARG_BOOL, OFF(trust_remote_code), NULL, "accepted and ignored (no remote code runs)",
     NULL, ARG_UNBOUNDED},
    {"max-shard-size", 0, ARG_SIZE, OFF(max_shard_size), "SIZE", "largest safetensors shard (default 5GiB, as MLX)",
     NULL, ARG_AT_LEAST(1, "a positive size such as 5GB, 512MB or 2GiB")},
};
#undef OFF
static const ArgTable CONVERT_TABLE = {
    "convert", "convert --hf-path DIR [--mlx-path DIR] [-q [--q-bits N] [--q-group-size N]] [flags]",
    CONVERT_SPECS, sizeof CONVERT_SPECS / sizeof CONVERT_SPECS[0], false, NULL, NULL,
    "Converts a model directory as mlx_lm.convert does: --dtype casts, -q quantizes with MLX's\n"
    "affine quantization (the bits MLX writes: packed uint32 codes, scales, biases, and config.json's\n"
    "quantization), -d dequantizes. The output directory appears only when complete.\n",
};

int cmd_convert(int argc, char **argv) {
    ConvertArgs a = {.mlx_path = "mlx_model", .q_mode = "affine"};
    if (args_parse(&CONVERT_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    if (a.upload_repo) {
        error_set("--upload-repo: lmtune does not upload models; upload %s with huggingface-cli", a.mlx_path);
        die_with_error();
    }
    ConvertOptions o = {
        .hf_path = a.hf_path, .mlx_path = a.mlx_path, .quantize = a.quantize, .dequantize = a.dequantize,
        .q_group_size = a.q_group_size, .q_bits = a.q_bits, .q_mode = a.q_mode,
        .quant_predicate = a.quant_predicate, .dtype = a.dtype, .max_shard_bytes = a.max_shard_size,
    };
    if (convert_model(&o, stdout) < 0) die_with_error();
    printf("[INFO] Saved the converted model to %s\n", a.mlx_path);
    return 0;
}

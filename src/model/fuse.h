/* fuse.h: what happens to an adapter after training: merged into the base
 * weights (`lmtune fuse`), or exported for other tools (a PEFT adapter
 * directory; GGUF: model/gguf_export.h). Works on the files alone:
 * the base model's safetensors, the adapter's adapters.safetensors and
 * adapter_config.json (MLX-LM's format). */
#ifndef LT_FUSE_H
#define LT_FUSE_H
#include <stdbool.h>
#include <stddef.h>
#include "model/model.h"

typedef struct {
    TuneType type;
    int num_layers;
    int rank;
    float scale;
    float dropout;
} AdapterConfig;

/* Reads DIR/adapter_config.json (MLX-LM keys). Errors name the file and field;
 * a missing directory is MLX-LM's "The adapter path does not exist: DIR". */
int adapter_config_load(AdapterConfig *ac, const char *adapter_dir);

/* Merges DIR/adapters.safetensors into the base weights (LoRA/DoRA computed in
 * fp32, stored in the base dtype; full fine-tunes replace the weights) and
 * writes a Hugging Face model directory: config.json, safetensors shards of at
 * most max_shard_bytes (5 GB by default) with model.safetensors.index.json when
 * there is more than one, and the tokenizer files copied. An MLX-quantized
 * module with an adapter is dequantized, merged and quantized again with its
 * bits and group size (mlx_lm.fuse); with dequantize every quantized module
 * is written dense in its scales' dtype and config.json loses its
 * quantization (mlx_lm.fuse --dequantize). */
int fuse_model(const char *model_dir, const char *adapter_dir, const char *out_dir, size_t max_shard_bytes,
               bool dequantize);
/* PEFT: adapter_model.safetensors (lora_A [r, in], lora_B [out, r]) + adapter_config.json. */
int export_peft(const char *model_dir, const char *adapter_dir, const char *out_dir);
#endif

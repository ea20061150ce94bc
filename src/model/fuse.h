/* fuse.h: what happens to an adapter after training: merged into the base
 * weights (`lmtune fuse`), or exported for other tools (a PEFT adapter
 * directory; GGUF: model/gguf_export.h). Works on the files alone:
 * the base model's safetensors, the adapter's adapters.safetensors and
 * adapter_config.json (MLX-LM's format). A GGUF base is fused by
 * gguf_fuse_model (model/gguf_export.h, fuse_gguf.c) with fuse_merge_lora's
 * arithmetic. */
#ifndef LT_FUSE_H
#define LT_FUSE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "formats/safetensors.h"
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
/* adapter_config_load, then DIR/adapters.safetensors opened into *ad (st_close it). */
int adapter_open(const char *adapter_dir, AdapterConfig *ac, StFile *ad);

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
/* The memory fuse_model holds at its peak (headers and the adapter only are
 * read): the merged tensors' fp32 buffers, an MLX-quantized base's
 * re-quantized codes, scales and biases (with dequantize: its dense
 * matrices) and one module's fp32 expansion, the base files and the adapter
 * file, all resident through their mappings by the last shard. */
int fuse_plan(const char *model_dir, const char *adapter_dir, bool dequantize, MemPlan *plan);
/* The merge of one matrix, fp32 in place: W (out, in) += scale * B^T A^T with
 * a = A (in, r) and b = B (r, out) as MLX-LM stores them; with m (out, DoRA's
 * magnitudes) row o is then rescaled to m[o] / ||W[o, :]||. */
void fuse_merge_lora(float *w, const float *a, const float *b, const float *m, float scale, int64_t out, int64_t in,
                     int r);
/* PEFT: adapter_model.safetensors (lora_A [r, in], lora_B [out, r]) + adapter_config.json.
 * model_dir may be a GGUF file: the adapter keeps Hugging Face's names and row
 * order, so it is the adapter of the model that file was converted from. */
int export_peft(const char *model_dir, const char *adapter_dir, const char *out_dir);
#endif

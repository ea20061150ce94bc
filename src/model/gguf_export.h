/* gguf_export.h: models and LoRA adapters for llama.cpp, written as its
 * converters (convert_hf_to_gguf.py, convert_lora_to_gguf.py) write them.
 * What an architecture is called in GGUF, its tensor names and whether its
 * q/k rows are permuted is the table of formats/gguf_arch.h. */
#ifndef LT_GGUF_EXPORT_H
#define LT_GGUF_EXPORT_H
#include <stdbool.h>
#include "formats/gguf_arch.h"

/* The whole model of a Hugging Face directory (config.json, safetensors,
 * tokenizer.json) as one GGUF file, matrices in ggml_type (F32, F16, BF16 or
 * Q8_0; norms and biases F32; a matrix whose rows do not fit Q8_0's blocks
 * of 32 is written F16, as the converter does). */
int gguf_export_model(const char *model_dir, const char *out_path, int ggml_type);
/* A LoRA adapter (DIR/adapters.safetensors, adapter_config.json, MLX-LM's
 * format) for the model in model_dir, as llama.cpp's --lora loads it. */
int gguf_export_adapter(const char *model_dir, const char *adapter_dir, const char *out_path);
/* 0 when the model's family has a GGUF form (gguf_arch.h's table), else -1
 * with the error; `fuse` asks before it writes anything. */
int gguf_export_check(const char *model);
#endif

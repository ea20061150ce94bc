/* gguf_export.h: models and LoRA adapters for llama.cpp, written as its
 * converters (convert_hf_to_gguf.py, convert_lora_to_gguf.py) write them.
 * What an architecture is called in GGUF, its tensor names and whether its
 * q/k rows are permuted is the table of formats/gguf_arch.h. Also the fuse
 * of an adapter into a GGUF base, written as a GGUF file (fuse_gguf.c). */
#ifndef LT_GGUF_EXPORT_H
#define LT_GGUF_EXPORT_H
#include <stdbool.h>
#include "formats/gguf_arch.h"
#include "memory/plan.h"

/* The whole model of a Hugging Face directory (config.json, safetensors,
 * tokenizer.json) as one GGUF file, matrices in ggml_type (F32, F16, BF16 or
 * Q8_0; norms and biases F32; a matrix whose rows do not fit Q8_0's blocks
 * of 32 is written F16, as the converter does). */
int gguf_export_model(const char *model_dir, const char *out_path, int ggml_type);
/* A LoRA adapter (DIR/adapters.safetensors, adapter_config.json, MLX-LM's
 * format) for the model in model_dir, as llama.cpp's --lora loads it. */
int gguf_export_adapter(const char *model_dir, const char *adapter_dir, const char *out_path);
/* Whether model_dir's architecture has a GGUF export that llama.cpp runs as
 * lmtune does, and with `tokenizer` whether its tokenizer has a GGUF form
 * (an error set if not): checked before a fuse, so a refused export leaves
 * no fused model behind. */
int gguf_export_check(const char *model_dir, bool tokenizer);
/* `lmtune fuse` on a GGUF base: the base file with the adapter merged, as
 * one GGUF file at out_path (its folder made if missing). Every tensor and
 * key-value of the base is copied as stored (general.alignment becomes 32);
 * each matrix with a LoRA/DoRA adapter is dequantized, merged in fp32 and
 * written in ggml_type (F32, F16, BF16 or Q8_0; F16 where a row does not fit
 * Q8_0's blocks), q/k rows in the file's own order. The tokenizer files
 * beside the base (tokenizer.json, ...) are copied beside the output. A full
 * fine-tune, an adapter tensor that matches no matrix of the file, or one of
 * the wrong shape is refused before anything is written. */
int gguf_fuse_model(const char *model_gguf, const char *adapter_dir, const char *out_path, int ggml_type);
/* Its memory at the peak, from the headers and the adapter's: the largest
 * merged matrix in fp32 and in the output type, the base file and the
 * adapter (mapped, all read), the parsed header, oneDNN's merge product. */
int gguf_fuse_plan(const char *model_gguf, const char *adapter_dir, int ggml_type, MemPlan *plan);
#endif

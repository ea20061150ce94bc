/* gguf_export.h: models and LoRA adapters for llama.cpp, written as its
 * converters (convert_hf_to_gguf.py, convert_lora_to_gguf.py) write them.
 * One table row per architecture (config.json's model_type -> GGUF
 * general.architecture, whether q/k rows are permuted, the tensor names),
 * so a new family is a new row. */
#ifndef LT_GGUF_EXPORT_H
#define LT_GGUF_EXPORT_H
#include <stdbool.h>
#include "formats/hf_config.h"

typedef struct {
    const char *hf;      /* suffix after "model.layers.N." (or a whole name for the model-level tensors) */
    const char *gguf;    /* suffix after "blk.N." (or a whole name) */
} GgufNameMap;

typedef struct {
    const char *model_type;        /* config.json */
    const char *arch;              /* general.architecture */
    /* LlamaModel.permute: q rows (by attention heads) and k rows (by KV
     * heads) reordered from Hugging Face's rotate-half RoPE layout to GGML's
     * interleaved one, in the weights, the biases and LoRA B alike */
    bool permute_qk;
    const GgufNameMap *block;      /* per-block tensors, NULL-terminated */
    const GgufNameMap *global;     /* model-level tensors, NULL-terminated */
} GgufArch;

/* The row for a config.json model_type, or NULL (with an error naming the
 * supported types). */
const GgufArch *gguf_arch_for(const char *model_type);

/* The GGUF name of an HF tensor name ("model.layers.3.self_attn.q_proj.weight"
 * -> "blk.3.attn_q.weight") into out; -1 when the table has none. */
int gguf_tensor_name(const GgufArch *a, const char *hf_name, char *out, size_t cap);

/* Row r of a permuted q (n_head heads) or k (n_kv_head heads) projection
 * output takes HF row gguf_permuted_row(r, D): within each head of D rows,
 * GGUF row 2j + t is HF row t * D/2 + j. */
int gguf_permuted_row(int r, int D);

/* The whole model of a Hugging Face directory (config.json, safetensors,
 * tokenizer.json) as one GGUF file, matrices in ggml_type (F32, F16, BF16 or
 * Q8_0; norms and biases F32; a matrix whose rows do not fit Q8_0's blocks
 * of 32 is written F16, as the converter does). */
int gguf_export_model(const char *model_dir, const char *out_path, int ggml_type);
/* A LoRA adapter (DIR/adapters.safetensors, adapter_config.json, MLX-LM's
 * format) for the model in model_dir, as llama.cpp's --lora loads it. */
int gguf_export_adapter(const char *model_dir, const char *adapter_dir, const char *out_path);
#endif

/* gguf_arch.h: the architectures lmtune reads and writes as GGUF, one
 * table row each: config.json's model_type -> GGUF general.architecture,
 * whether the q/k rows are permuted (llama.cpp's converter,
 * LlamaModel.permute), and the tensor names (Hugging Face -> GGUF). A new
 * family is a new row. Also a GGUF model's metadata read back as the
 * ModelConfig lmtune runs on. */
#ifndef LT_GGUF_ARCH_H
#define LT_GGUF_ARCH_H
#include <stdbool.h>
#include <stddef.h>
#include "formats/gguf.h"
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
    /* lmtune reads a GGUF file of this architecture as a base model
     * (gguf_model_config); the others are written only */
    bool readable;
    const GgufNameMap *block;      /* per-block tensors, NULL-terminated */
    const GgufNameMap *global;     /* model-level tensors, NULL-terminated */
} GgufArch;

/* The row for a config.json model_type, or NULL (with an error naming the
 * supported types). Whether a model of that type fits llama.cpp's graph of
 * the architecture (windows, NoPE layers, soft-capping) is gguf_export.c's
 * check. */
const GgufArch *gguf_arch_for(const char *model_type);

/* The GGUF name of an HF tensor name ("model.layers.3.self_attn.q_proj.weight"
 * -> "blk.3.attn_q.weight") into out; -1 when the table has none. Names
 * are in the "model." layout ("lm_head.weight" for the head);
 * gguf_tensor_name_of maps a model's own prefix (multimodal Gemma 3's
 * "language_model.model.") to it first. */
int gguf_tensor_name(const GgufArch *a, const char *hf_name, char *out, size_t cap);
int gguf_tensor_name_of(const GgufArch *a, const ModelConfig *c, const char *hf_name, char *out, size_t cap);

/* Row r of a permuted q (n_head heads) or k (n_kv_head heads) projection
 * output takes HF row gguf_permuted_row(r, D): within each head of D rows,
 * GGUF row 2j + t is HF row t * D/2 + j. */
int gguf_permuted_row(int r, int D);

/* The readable row whose general.architecture is `arch` (the first: a
 * "llama" file reads as model_type llama), or NULL with an error. */
const GgufArch *gguf_arch_by_name(const char *arch);

/* The ModelConfig of a GGUF model from its metadata and tensor shapes:
 * sizes, RoPE (rope.freq_base, linear rope.scaling, llama3's rope_freqs
 * tensor as per-frequency factors), tied embeddings (no output.weight),
 * q/k/v biases (blk.0.attn_q.bias), BOS/EOS ids. torch_dtype is BF16 when
 * the matrices are BF16, else F32 (the compute type). Every missing or
 * inconsistent key is an error naming the file and the key. */
int gguf_model_config(const GgufFile *g, ModelConfig *c);
/* The GGUF tensor of a Hugging Face tensor name, or NULL. */
const GgufTensorInfo *gguf_model_tensor(const GgufFile *g, const GgufArch *a, const char *hf_name);
/* Every tensor the config implies is there with the shape it implies (ne
 * reversed), norms and biases unquantized, and no other tensor but
 * rope_freqs.weight: the first problem is the error. */
int gguf_check_model_tensors(const GgufFile *g, const GgufArch *a, const ModelConfig *c);
#endif

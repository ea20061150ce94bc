/* model_tensors.h: the Hugging Face tensor names and shapes a decoder of a
 * given config.json must have, and the check of a model directory's weights
 * against them, done before any weight is used or any compute planned.
 *
 * One table says what a block holds for each family (block_tensors): its
 * norms (input, the Gemma post-attention / pre- and post-feed-forward
 * sandwich, q/k norms), its linear projections (separate q/k/v and
 * gate/up, or Phi-3's fused qkv_proj and gate_up_proj) and their biases.
 * Every other list is derived from it: the whole model's tensors here, and
 * in the model the parameter slots, the frozen and trainable tensors, the
 * memory plan and `lmtune init`'s random weights. */
#ifndef LT_MODEL_TENSORS_H
#define LT_MODEL_TENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats/mlx_quant.h"

/* The linear projections a block can have, in MLX-LM key order. A block
 * uses a subset: llama-like blocks q, k, v, o, gate, up, down
 * (hf_block_projections); phi3 qkv, o, gate_up, down; Qwen3.5's Gated
 * DeltaNet blocks the five linear_attn projections and the same MLP. */
enum {
    PROJ_Q, PROJ_K, PROJ_V, PROJ_O, PROJ_GATE, PROJ_UP, PROJ_DOWN, PROJ_QKV, PROJ_GATE_UP,
    PROJ_LQKV, PROJ_LZ, PROJ_LB, PROJ_LA, PROJ_LOUT, PROJ_COUNT
};
extern const char *const PROJ_KEYS[PROJ_COUNT]; /* "self_attn.q_proj", ..., "linear_attn.out_proj" */
#define PROJ_ALL ((1u << PROJ_COUNT) - 1)
#define PROJ_MLP ((1u << PROJ_GATE) | (1u << PROJ_UP) | (1u << PROJ_DOWN))
#define PROJ_ATTN_BLOCK ((1u << PROJ_Q) | (1u << PROJ_K) | (1u << PROJ_V) | (1u << PROJ_O) | PROJ_MLP)
#define PROJ_GDN_BLOCK ((1u << PROJ_LQKV) | (1u << PROJ_LZ) | (1u << PROJ_LB) | (1u << PROJ_LA) | \
                        (1u << PROJ_LOUT) | PROJ_MLP)
/* Bitmask (1u << PROJ_*) of the projections of c's attention blocks (every
 * block but Qwen3.5's Gated DeltaNet ones). */
unsigned hf_block_projections(const ModelConfig *c);
/* (out, in) of projection p: the one place a projection's shape is said
 * (block_tensors, qwen35_tensor_specs and the model's Dims all take it). */
void hf_proj_shape(const ModelConfig *c, int p, int64_t *out, int64_t *in);

/* What a block tensor is to the model. */
typedef enum {
    BT_NORM_ATTN_IN,   /* input_layernorm */
    BT_NORM_ATTN_OUT,  /* gemma's post_attention_layernorm: on the attention output */
    BT_NORM_MLP_IN,    /* llama's post_attention_layernorm, gemma's pre_feedforward_layernorm */
    BT_NORM_MLP_OUT,   /* gemma's post_feedforward_layernorm: on the MLP output */
    BT_Q_NORM,         /* qwen3 / gemma3 per-head q and k norms */
    BT_K_NORM,
    BT_PROJ_WEIGHT,    /* proj's weight (out, in) */
    BT_PROJ_BIAS,      /* proj's bias (out) */
} BlockTensorRole;

enum { BLOCK_TENSORS_MAX = 24 };
typedef struct {
    char suffix[48];      /* after "<prefix>layers.N.": "self_attn.q_proj.weight" */
    BlockTensorRole role;
    int proj;             /* PROJ_* for the projection roles, -1 otherwise */
    int ndim;
    int64_t shape[2];
} BlockTensor;

/* The tensors of every block of c (all blocks of these families have the
 * same), in a fixed order: input norm, attention (projections with their
 * biases, q/k norms, output projection), then the MLP side with its norms.
 * Returns the count (<= BLOCK_TENSORS_MAX). */
int block_tensors(const ModelConfig *c, BlockTensor *out);

typedef struct {
    char name[96];        /* e.g. "model.layers.3.self_attn.q_proj.weight" */
    int ndim;             /* 1, 2, or 3 (Qwen3.5's conv1d weights) */
    int64_t shape[3];
} ModelTensorSpec;

/* Module paths (tensor names without ".weight") of the embedding table
 * ("<prefix>embed_tokens") and of the untied LM head (head_name's module). */
void hf_embed_module(const ModelConfig *c, char *dst, size_t cap);
void hf_head_module(const ModelConfig *c, char *dst, size_t cap);

/* Every tensor of the model in HF order (embedding, then per layer, then
 * final norm and lm_head unless tied). *out is heap (mem_free it). */
int model_tensor_specs(const ModelConfig *c, ModelTensorSpec **out, size_t *n);
/* All specs present in `m` with dtype F32/BF16/F16 and exactly the shape;
 * the first problem is the error ("DIR/model.safetensors: tensor "NAME":
 * shape [64, 32] but config.json implies [64, 64]"). */
int model_check_tensors(const ModelConfig *c, const StModel *m);
/* The same for a model that may be MLX-quantized (qc from config.json, or
 * NULL): a quantized module's codes, scales and biases are checked against
 * its bits and group size instead (formats/mlx_quant.h). */
int model_check_tensors_quant(const ModelConfig *c, const StModel *m, const QuantConfig *qc);
/* Multimodal Gemma 3 checkpoints keep the text weights under
 * "language_model.model." (as published) or, saved by recent transformers,
 * under "model.language_model.": points c->prefix (and the head's name) at
 * the one this directory uses. No-op for the other families. */
void model_tensors_detect_prefix(ModelConfig *c, const StModel *m);
/* NaN/Inf elements over all the model's tensors (the format allows them, so
 * this is a flag for the caller to warn or refuse, not an error). The name
 * of the first tensor holding one goes to `first` (may be NULL). Returns 0
 * for header-only models. Call after model_check_tensors. */
size_t model_count_nonfinite(const ModelConfig *c, const StModel *m, char *first, size_t first_cap);

/* Fixes what config.json cannot say about the files: for Qwen3.5, where the
 * text weights are and whether they are in transformers' or MLX-LM's layout
 * (qwen35_detect_layout). No-op for the other families. */
int model_tensors_resolve(ModelConfig *c, const StModel *m);
/* A tensor's name in the files from its canonical name, printf-style:
 * "model.X" -> the text prefix + "X", "lm_head.weight" -> the head's name.
 * Identity for every family but Qwen3.5. */
const char *model_tensor_name(const ModelConfig *c, char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A module's path in the files (a tensor name without ".weight") from its
 * canonical path: "lm_head" -> the head's module. */
const char *model_module_name(const ModelConfig *c, char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The name of a canonical "model.layers...." tensor in adapter files (MLX-LM's
 * module paths: "language_model.model.layers...." for qwen3_5). */
const char *model_adapter_name(const ModelConfig *c, char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The prefix "model.layers.N..." names take in adapter files and in files. */
const char *model_adapter_prefix(const ModelConfig *c);
const char *model_file_prefix(const ModelConfig *c);

int qwen35_tensor_specs(const ModelConfig *c, ModelTensorSpec **out, size_t *n);
int qwen35_detect_layout(ModelConfig *c, const StModel *m);
#endif

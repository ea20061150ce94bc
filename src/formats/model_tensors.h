/* model_tensors.h: the Hugging Face tensor names and shapes a decoder of a
 * given config.json must have, and the check of a model directory's weights
 * against them, done before any weight is used or any compute planned. */
#ifndef LT_MODEL_TENSORS_H
#define LT_MODEL_TENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "formats/mlx_quant.h"

typedef struct {
    char name[96];        /* e.g. "model.layers.3.self_attn.q_proj.weight" */
    int ndim;             /* 1, 2, or 3 (Qwen3.5's conv1d weights) */
    int64_t shape[3];
} ModelTensorSpec;

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

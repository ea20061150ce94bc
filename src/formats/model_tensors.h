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
    int ndim;             /* 1 or 2 */
    int64_t shape[2];
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
#endif

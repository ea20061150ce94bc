/* mlx_quant.h: MLX-LM's quantized models as stored on disk. config.json's
 * "quantization" (or its copy "quantization_config") holds the default
 * {"group_size", "bits", "mode"} and, for mixed recipes, per-module
 * overrides keyed by module path ("model.layers.3.mlp.down_proj": {...},
 * or false for a module left in full precision). A quantized module PATH
 * stores PATH.weight (U32, (out, in * bits / 32): codes packed along the
 * input dimension), PATH.scales and PATH.biases ((out, in / group), the
 * model dtype). Which modules are quantized follows mlx_lm.utils.load_model:
 * a module with an override uses it; any other one is quantized with the
 * defaults exactly when PATH.scales is in the weights. */
#ifndef LT_MLX_QUANT_H
#define LT_MLX_QUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "formats/safetensors.h"

typedef struct {
    int bits;       /* 2, 3, 4, 5, 6 or 8 */
    int group;      /* 32, 64 or 128 */
} QuantParams;

typedef struct {
    char *path;             /* module path, e.g. "model.layers.0.self_attn.q_proj" */
    bool quantized;         /* false: the module stays in full precision */
    QuantParams p;
} QuantOverride;

typedef struct {
    bool present;           /* config.json has a quantization */
    QuantParams global;     /* the defaults */
    QuantOverride *ov;      /* heap; n_ov of them */
    size_t n_ov;
} QuantConfig;

/* Reads the quantization of DIR/config.json (`config_path`); none present
 * is not an error (present = false). Errors name the file and the field:
 * unsupported bits / group sizes / modes, quantization_config methods that
 * are not MLX's (awq, gptq, ...). */
int quant_config_load(QuantConfig *qc, const char *config_path);
/* The same from JSON text; `name` is used in messages. */
int quant_config_parse(QuantConfig *qc, const char *json, const char *name);
void quant_config_free(QuantConfig *qc);

/* Whether module `path` is quantized and with what: 1 (params in *p), 0
 * (plain), -1 + error. st may be header-only. */
int quant_module(const QuantConfig *qc, const StModel *st, const char *path, QuantParams *p);

/* The three tensors of quantized module `path` with logical shape
 * (rows, cols), checked: codes U32 (rows, cols * bits / 32), scales and
 * biases of one float dtype, (rows, cols / group); cols a multiple of the
 * group. Errors name the file, the tensor and the expected shape. */
typedef struct {
    const StTensor *codes, *scales, *biases;
} QuantTensors;
int quant_module_tensors(const StModel *st, const char *path, int64_t rows, int64_t cols, const QuantParams *p,
                         QuantTensors *out);
#endif

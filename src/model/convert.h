/* convert.h: `lmtune convert`, mlx_lm.convert on a local model directory:
 * cast to a dtype, quantize with MLX's affine quantization (uniform or a
 * mixed recipe), or dequantize, and write what MLX writes: safetensors
 * shards with {"format": "mlx"} metadata, model.safetensors.index.json,
 * config.json with "quantization" and "quantization_config" (keys sorted),
 * and the tokenizer files. The output directory appears only when complete
 * (written under a temporary name, then renamed). */
#ifndef LT_CONVERT_H
#define LT_CONVERT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *hf_path;          /* source model directory */
    const char *mlx_path;         /* output directory; must not exist */
    bool quantize, dequantize;
    int q_group_size, q_bits;     /* 0: the mode's defaults (64, 4) */
    const char *q_mode;           /* "affine" (others are refused) */
    const char *quant_predicate;  /* NULL or mixed_2_6 | mixed_3_4 | mixed_3_6 | mixed_4_6 */
    const char *dtype;            /* NULL (config's torch_dtype) or float16 | bfloat16 | float32 */
    size_t max_shard_bytes;       /* 0: MLX's 5 GiB */
} ConvertOptions;

/* Progress lines ("[INFO] ...", as mlx_lm.convert prints them) go to log. */
int convert_model(const ConvertOptions *o, FILE *log);

/* mlx_lm.convert's mixed_quant_predicate_builder: bits of module `path` for
 * `recipe` in a model of `layers` blocks (layer index read from the path;
 * 0 when it has none). -1 for an unknown recipe. */
int convert_mixed_bits(const char *recipe, const char *path, int layers);
#endif

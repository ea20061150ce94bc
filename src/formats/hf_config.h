/* hf_config.h: a Hugging Face config.json for the decoder families lmtune
 * runs (llama, mistral, qwen2, qwen3), read with jansson and checked: a
 * missing or malformed field is one error naming the file and the field. */
#ifndef LT_HF_CONFIG_H
#define LT_HF_CONFIG_H
#include <stdbool.h>
#include "base/dtype.h"
#include "base/rope_scaling.h"
#include "formats/qwen35_config.h"

#define HF_SUPPORTED_TYPES "llama, mistral, qwen2, qwen3, qwen3_5, qwen3_5_text"

typedef struct {
    char model_type[32];
    int hidden_size;            /* C */
    int intermediate_size;      /* F */
    int num_hidden_layers;      /* L */
    int num_attention_heads;    /* H */
    int num_key_value_heads;    /* KVH (defaults to H when absent) */
    int head_dim;               /* D (defaults to C / H) */
    int vocab_size;             /* V */
    int max_position_embeddings;
    float rms_norm_eps;
    double rope_theta;
    RopeScaling rope_scaling;
    bool tie_word_embeddings;
    bool attention_bias;        /* q, k, v biases (qwen2 always) */
    bool qk_norm;               /* qwen3: per-head RMSNorm on q and k */
    int bos_token_id;           /* -1 when absent */
    int eos_token_ids[8];       /* eos_token_id may be a list */
    int n_eos;
    DType torch_dtype;          /* DTYPE_F32 when absent */
    int sliding_window;         /* 0 = full causal attention; mistral's sliding_window, or
                                 * qwen2/qwen3's when use_sliding_window is true. lmtune computes
                                 * full attention, so callers must refuse sequences longer
                                 * than this (where it would differ) */
    Qwen35Config q35;           /* Qwen3.5's hybrid blocks (q35.on); see qwen35_config.h */
} ModelConfig;

int hf_config_load(ModelConfig *c, const char *path);
/* Same from a JSON string; `name` is used in error messages. */
int hf_config_parse(ModelConfig *c, const char *json, const char *name);
/* MLX-LM's utils.load_config: DIR/generation_config.json's eos_token_id (an
 * id or a list of ids), when present and not empty (Python-falsy values
 * such as 0 or [] are skipped, as there), replaces config.json's in c. A
 * missing file, or one that is not JSON, changes nothing (MLX-LM ignores it);
 * ids outside the vocabulary are an error naming the file. */
int hf_generation_config_eos(ModelConfig *c, const char *model_dir);
/* Writes config.json (atomically) for `lmtune init` and `fuse`. */
int hf_config_write(const ModelConfig *c, const char *path);
#endif

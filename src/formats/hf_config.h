/* hf_config.h: a Hugging Face config.json for the decoder families lmtune
 * runs (llama, mistral, qwen2, qwen3, gemma2, gemma3 text and multimodal,
 * phi3, smollm3; Qwen3.5's hybrid layout is hf_config_qwen35.c's, in the
 * q35 member), read with jansson and checked: a missing or malformed
 * field is one error naming the file and the field. The struct says what a
 * family's block looks like (norm style, sandwich norms, activation, fused
 * projections, attention scale and soft-capping, partial rotary) and what
 * each layer is (sliding window, NoPE), so the model has no per-family
 * branches, only these properties. */
#ifndef LT_HF_CONFIG_H
#define LT_HF_CONFIG_H
#include <stdbool.h>
#include "base/dtype.h"
#include "base/rope_scaling.h"
#include "formats/qwen35_config.h"

#define HF_SUPPORTED_TYPES \
    "llama, mistral, qwen2, qwen3, qwen3_5, qwen3_5_text, gemma2, gemma3_text, gemma3, phi3, smollm3"
enum { HF_MAX_LAYERS = 10000 };
/* layer_flags bits */
enum { LAYER_SLIDING = 1, LAYER_NOPE = 2 };
/* the gated MLP's activation */
enum { HIDDEN_ACT_SILU = 0, HIDDEN_ACT_GELU_TANH = 1 };

typedef struct {
    char model_type[32];
    int hidden_size;            /* C */
    int intermediate_size;      /* F */
    int num_hidden_layers;      /* L */
    int num_attention_heads;    /* H */
    int num_key_value_heads;    /* KVH (defaults to H when absent) */
    int head_dim;               /* D (defaults to C / H; gemma: 256) */
    int vocab_size;             /* V */
    int max_position_embeddings;
    float rms_norm_eps;
    double rope_theta;
    RopeScaling rope_scaling;   /* of the full-attention layers */
    bool tie_word_embeddings;
    bool attention_bias;        /* q, k, v biases (qwen2 always) */
    bool qk_norm;               /* qwen3, gemma3: per-head RMSNorm on q and k, before RoPE */
    int bos_token_id;           /* -1 when absent */
    int eos_token_ids[8];       /* eos_token_id may be a list */
    int n_eos;
    DType torch_dtype;          /* DTYPE_F32 when absent */
    int sliding_window;         /* keys a LAYER_SLIDING layer's query sees (itself included); 0 when
                                 * no layer slides. mistral and phi3: every layer; qwen2/qwen3 with
                                 * use_sliding_window: layers >= max_window_layers; gemma: layer_types
                                 * or sliding_window_pattern; smollm3: its NoPE layers if asked */

    /* --- the block's shape (defaults: the llama block) --- */
    bool norm_plus_one;         /* gemma, Qwen3.5 in transformers' layout: RMSNorm weights are
                                 * zero-centred and used as 1 + w */
    bool sandwich_norms;        /* gemma2/3: attention and MLP outputs are normed before the residual
                                 * add (post_attention_layernorm, post_feedforward_layernorm) and the
                                 * MLP input norm is pre_feedforward_layernorm */
    bool fused_qkv;             /* phi3: one qkv_proj (q rows, then k, then v) */
    bool fused_gate_up;         /* phi3: one gate_up_proj (gate rows, then up) */
    int hidden_act;             /* HIDDEN_ACT_SILU (SwiGLU) or HIDDEN_ACT_GELU_TANH (gemma's GeGLU) */
    bool embed_scale;           /* gemma: embeddings times sqrt(hidden_size) rounded to the weights' dtype */
    double query_pre_attn_scalar; /* > 0: attention scale is its -1/2 power (gemma); 0: head_dim^-1/2 */
    double attn_softcap;        /* gemma2: scores = cap tanh(scores / cap); 0 = none */
    double final_softcap;       /* gemma2: logits = cap tanh(logits / cap); 0 = none */
    int rotary_dim;             /* dims of a head RoPE rotates: head_dim * partial_rotary_factor (phi3) */
    double rope_local_theta;    /* gemma3: RoPE base of the sliding layers, unscaled (0: they share
                                 * the full layers' rope_theta and scaling) */
    int original_max_position;  /* phi3: original_max_position_embeddings (longrope picks its factors
                                 * by the sequence length against it) */
    char prefix[32];            /* tensor names: prefix "embed_tokens.weight", prefix "layers.N.", ...:
                                 * "model.", multimodal gemma3 "language_model.model." */
    char adapter_prefix[32];    /* the same modules' path in MLX-LM (adapter keys) */
    char head_name[48];         /* the untied LM head's tensor */
    unsigned char layer_flags[HF_MAX_LAYERS]; /* LAYER_* per layer */
    Qwen35Config q35;           /* Qwen3.5's hybrid blocks (q35.on); see qwen35_config.h. Its
                                 * prefix, adapter_prefix, head_name and rotary_dim are copied into
                                 * the fields above (hf_qwen35_names) */
} ModelConfig;

/* A zeroed config of model_type with the llama block's tensor names
 * ("model." prefixes, "lm_head.weight"), SiLU and no BOS: the start of a
 * config built in code (GGUF metadata, tests) rather than parsed. */
void hf_config_init(ModelConfig *c, const char *model_type);
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
/* The attention score scale of c's layers. */
float hf_attention_scale(const ModelConfig *c);
#endif

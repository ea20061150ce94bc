/* qwen35_config.h: what config.json says about Qwen3.5's hybrid decoder
 * (model_type qwen3_5 with a nested text_config, as published, or a flat
 * text-only qwen3_5_text), beyond the fields every decoder has; and, once the
 * weights are opened, how they are laid out. Part of ModelConfig (the `q35`
 * member); parsed and written by hf_config_qwen35.c.
 *
 * Verified in transformers models/qwen3_5/configuration_qwen3_5.py and
 * MLX-LM mlx_lm/models/qwen3_5.py:
 * - layer_types[i] "linear_attention" (Gated DeltaNet) or "full_attention";
 *   without the list, layer i is full attention iff (i + 1) %
 *   full_attention_interval == 0 (default 4).
 * - rope_parameters {rope_type "default", rope_theta, partial_rotary_factor
 *   (default 0.25), mrope_section, mrope_interleaved}: with text positions the
 *   three mrope sections see the same position, i.e. plain RoPE on the first
 *   head_dim * partial_rotary_factor dims of each head.
 * - the attention's q_proj has 2 * heads * head_dim outputs (query and
 *   output gate, per head); q/k norms per head; no biases.
 * - linear_num_key_heads / linear_num_value_heads (a multiple), key/value
 *   head dims, linear_conv_kernel_dim (4).
 * - MoE variants (qwen3_5_moe, num_experts > 0) are refused. */
#ifndef LT_QWEN35_CONFIG_H
#define LT_QWEN35_CONFIG_H
#include <stdbool.h>

enum { Q35_MAX_LAYERS = 1024 };

/* How the weights of a directory are stored (set by qwen35_detect_layout). */
typedef enum {
    Q35_LAYOUT_HF = 0,    /* transformers: norms zero-centred (used as 1 + w), conv1d (C, 1, K) */
    Q35_LAYOUT_MLX = 1,   /* mlx_lm.convert: norms stored as used (1 + w), conv1d (C, K, 1) */
} Qwen35Layout;

typedef struct {
    bool on;                  /* a Qwen3.5 model */
    bool nested;              /* config.json nests text_config (model_type qwen3_5) */
    int k_heads, v_heads;     /* linear_num_key_heads, linear_num_value_heads */
    int k_dim, v_dim;         /* linear_key_head_dim, linear_value_head_dim */
    int conv_kernel;          /* linear_conv_kernel_dim */
    int rotary_dim;           /* head_dim * partial_rotary_factor (even) */
    double partial_rotary_factor;
    int n_linear;             /* Gated DeltaNet layers */
    unsigned char linear[Q35_MAX_LAYERS]; /* 1: layer i is Gated DeltaNet, 0: gated full attention */
    /* names and layout of the weights: defaults from the config, fixed by qwen35_detect_layout */
    Qwen35Layout layout;
    char prefix[32];          /* of embed_tokens, layers.N., norm: "model.language_model." (nested),
                                 "model." (flat), "language_model.model." (MLX-LM files) */
    char head_name[48];       /* untied LM head: "lm_head.weight" or "language_model.lm_head.weight" */
    char adapter_prefix[32];  /* MLX-LM's module path of the layers (adapter keys): "language_model.model."
                                 for qwen3_5, "model." for qwen3_5_text */
    char hf_prefix[32];       /* transformers' module path (PEFT keys, fused output) */
} Qwen35Config;
#endif

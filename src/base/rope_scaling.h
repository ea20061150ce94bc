/* rope_scaling.h: the RoPE frequency-scaling parameters of a model, plain
 * numbers shared by the config reader (formats/hf_config.c fills them from
 * config.json's rope_scaling) and the RoPE kernel (kernels/rope.c builds its
 * tables from them). Here so that neither layer includes the other. */
#ifndef LT_ROPE_SCALING_H
#define LT_ROPE_SCALING_H

enum { ROPE_SCALING_NONE = 0, ROPE_SCALING_LLAMA3 = 1, ROPE_SCALING_LINEAR = 2, ROPE_SCALING_FACTORS = 3 };
#define ROPE_MAX_FACTORS 256
/* FACTORS: llama.cpp's rope_freqs tensor (how a GGUF file carries llama3
 * scaling): the inverse frequency of pair i is divided by factors[i]. */
typedef struct {
    int type;                     /* ROPE_SCALING_* */
    double factor;                /* llama3 and linear */
    double low_freq_factor;       /* llama3 */
    double high_freq_factor;      /* llama3 */
    int original_max_position;    /* llama3: original_max_position_embeddings */
    int n_factors;                /* FACTORS: head_dim / 2 */
    float factors[ROPE_MAX_FACTORS];
} RopeScaling;
#endif

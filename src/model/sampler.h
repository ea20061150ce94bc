/* sampler.h: next-token sampling as mlx_lm.generate's make_sampler does it:
 * greedy (argmax) at temperature 0; otherwise the top-p (nucleus) and min-p
 * filters are applied to the temperature-1 distribution softmax(logits), and
 * the next token is drawn from the tokens they keep with weights
 * softmax(logits / temp). */
#ifndef LT_SAMPLER_H
#define LT_SAMPLER_H
#include <stdint.h>
#include "base/rng.h"

typedef struct {
    float temp;     /* 0 = greedy */
    float top_p;    /* 1 = off: keep the most likely tokens until their mass reaches top_p */
    float min_p;    /* 0 = off: keep tokens with p >= min_p * p_max */
    Rng rng;
    float *probs;   /* (V) scratch */
    int32_t *index; /* (V) scratch */
} Sampler;

int sampler_init(Sampler *s, int vocab, float temp, float top_p, float min_p, uint64_t seed);
void sampler_free(Sampler *s);
/* The next token for logits (V); deterministic for a given seed and call sequence. */
int32_t sampler_pick(Sampler *s, const float *logits, int vocab);
#endif

/* sampler.h: next-token sampling as mlx_lm.generate does it: temperature,
 * then top-p (nucleus) and min-p filtering; greedy (argmax) at temperature 0. */
#ifndef LT_SAMPLER_H
#define LT_SAMPLER_H
#include <stdint.h>
#include "base/rng.h"

typedef struct {
    float temp;     /* 0 = greedy */
    float top_p;    /* 1 = off */
    float min_p;    /* 0 = off */
    Rng rng;
    float *probs;   /* (V) scratch */
    int32_t *index; /* (V) scratch */
} Sampler;

int sampler_init(Sampler *s, int vocab, float temp, float top_p, float min_p, uint64_t seed);
void sampler_free(Sampler *s);
int32_t sampler_pick(Sampler *s, const float *logits, int vocab);
#endif

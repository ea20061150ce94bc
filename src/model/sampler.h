/* sampler.h: next-token sampling as mlx_lm.generate's make_sampler builds
 * it (sample_utils.py): greedy (argmax) at temperature 0; otherwise a chain
 * of filters on the log-probabilities of the temperature-1 distribution, in
 * MLX's order, each masking tokens out (-inf) for the next:
 *   top-p (only for 0 < top_p < 1): keep a token when the probability mass
 *     of the tokens ranked above it is below top_p;
 *   min-p (min_p != 0): drop tokens below min_p x the top probability, but
 *     never the min_tokens_to_keep most likely;
 *   XTC (xtc_probability > 0): with that probability, drop every token above
 *     xtc_threshold except the least likely of them (the special tokens are
 *     never dropped);
 *   top-k (top_k > 0): keep the k most likely;
 * and the token is drawn from what is left with weights softmax(lp / temp). */
#ifndef LT_SAMPLER_H
#define LT_SAMPLER_H
#include <stdint.h>
#include "base/rng.h"

typedef struct {
    float temp;                 /* 0: greedy */
    float top_p;                /* off unless 0 < top_p < 1 */
    float min_p;                /* 0: off */
    int min_tokens_to_keep;     /* 1 */
    int top_k;                  /* 0: off */
    float xtc_probability;      /* 0: off */
    float xtc_threshold;        /* 0.1 */
    const int32_t *xtc_special; /* ids XTC never drops (MLX: "\n" and the EOS ids) */
    int n_xtc_special;
} SamplerConfig;

/* MLX-LM's defaults: temp 0, top_p 1, min_p 0, min_tokens_to_keep 1, top_k 0,
 * XTC off with threshold 0.1. */
void sampler_config_default(SamplerConfig *c);

typedef struct {
    SamplerConfig cfg;
    Rng rng;
    float *lp;      /* (V) scratch: the masked log-probabilities */
    int32_t *index; /* (V) scratch */
    int32_t *special; /* (n_xtc_special) copy */
} Sampler;

/* Checks the settings with MLX's messages (min_p in [0, 1], top_k in (0, V),
 * XTC threshold in [0, 0.5] and probability in [0, 1], ...). */
int sampler_init(Sampler *s, int vocab, const SamplerConfig *c, uint64_t seed);
void sampler_free(Sampler *s);
/* The next token for logits (V); deterministic for a given seed and call sequence. */
int32_t sampler_pick(Sampler *s, const float *logits, int vocab);
#endif

/* rng.h: a small deterministic generator (xoshiro256**, seeded by splitmix64)
 * whose whole state fits in a checkpoint, so resumed runs draw the same
 * numbers as uninterrupted ones. */
#ifndef LT_RNG_H
#define LT_RNG_H
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} Rng;

void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_next(Rng *r);
float rng_uniform(Rng *r); /* [0, 1) */
float rng_uniform_range(Rng *r, float lo, float hi);
float rng_normal(Rng *r); /* N(0, 1), Box-Muller */
uint64_t rng_below(Rng *r, uint64_t n); /* uniform in [0, n), unbiased */
void rng_shuffle_int(Rng *r, int *a, int n); /* Fisher-Yates */
#endif

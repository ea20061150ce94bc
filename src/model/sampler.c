/* sampler.c: see sampler.h. */
#include "model/sampler.h"
#include "base/alloc.h"
#include <math.h>
#include <stdlib.h>

int sampler_init(Sampler *s, int vocab, float temp, float top_p, float min_p, uint64_t seed) {
    s->temp = temp; s->top_p = top_p; s->min_p = min_p;
    rng_seed(&s->rng, seed);
    s->probs = mem_alloc((size_t)vocab * sizeof(float));
    s->index = mem_alloc((size_t)vocab * sizeof(int32_t));
    return s->probs && s->index ? 0 : -1;
}
void sampler_free(Sampler *s) { mem_free(s->probs); mem_free(s->index); s->probs = NULL; s->index = NULL; }

static const float *sort_probs;
static int by_prob_desc(const void *a, const void *b) {
    float pa = sort_probs[*(const int32_t *)a], pb = sort_probs[*(const int32_t *)b];
    if (pa != pb) return pa < pb ? 1 : -1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

int32_t sampler_pick(Sampler *s, const float *logits, int V) {
    int32_t best = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    if (s->temp <= 0) return best;
    double sum = 0;
    for (int i = 0; i < V; i++) { s->probs[i] = expf((logits[i] - logits[best]) / s->temp); sum += s->probs[i]; }
    for (int i = 0; i < V; i++) s->probs[i] = (float)(s->probs[i] / sum);
    int n = V;
    for (int i = 0; i < V; i++) s->index[i] = i;
    if (s->min_p > 0 || s->top_p < 1) {
        sort_probs = s->probs;
        qsort(s->index, V, sizeof(int32_t), by_prob_desc);
        float floor_p = s->min_p * s->probs[s->index[0]];
        double cum = 0;
        int keep = 0;
        for (int i = 0; i < V; i++) {
            float p = s->probs[s->index[i]];
            if (s->min_p > 0 && p < floor_p && keep > 0) break;
            keep++;
            cum += p;
            if (s->top_p < 1 && cum >= s->top_p) break;
        }
        n = keep;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += s->probs[s->index[i]];
    double u = rng_uniform(&s->rng) * total, acc = 0;
    for (int i = 0; i < n; i++) { acc += s->probs[s->index[i]]; if (u < acc) return s->index[i]; }
    return s->index[n - 1];
}

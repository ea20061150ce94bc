/* sampler.c: see sampler.h. */
#include "model/sampler.h"
#include "base/alloc.h"
#include "base/error.h"
#include <math.h>
#include <stdlib.h>

int sampler_init(Sampler *s, int vocab, float temp, float top_p, float min_p, uint64_t seed) {
    if (vocab < 1) return error_set("sampler: vocabulary size %d", vocab);
    s->temp = temp; s->top_p = top_p; s->min_p = min_p;
    rng_seed(&s->rng, seed);
    s->probs = mem_alloc((size_t)vocab * sizeof(float));
    s->index = mem_alloc((size_t)vocab * sizeof(int32_t));
    if (!s->probs || !s->index) { sampler_free(s); return -1; }
    return 0;
}
void sampler_free(Sampler *s) { mem_free(s->probs); mem_free(s->index); s->probs = NULL; s->index = NULL; }

/* Descending probability, ties by ascending id (a stable, seed-independent order). */
static int by_prob_desc(const void *a, const void *b, void *ctx) {
    const float *p = ctx;
    int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
    if (p[ia] != p[ib]) return p[ia] < p[ib] ? 1 : -1;
    return ia - ib;
}

int32_t sampler_pick(Sampler *s, const float *logits, int V) {
    int32_t best = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    if (s->temp <= 0) return best;
    /* the filters see the temperature-1 distribution (MLX-LM applies them to
     * the log-probabilities before categorical sampling at `temp`) */
    int n = V;
    for (int i = 0; i < V; i++) s->index[i] = i;
    if (s->min_p > 0 || s->top_p < 1) {
        double sum = 0;
        for (int i = 0; i < V; i++) { s->probs[i] = expf(logits[i] - logits[best]); sum += s->probs[i]; }
        for (int i = 0; i < V; i++) s->probs[i] = (float)(s->probs[i] / sum);
        qsort_r(s->index, (size_t)V, sizeof(int32_t), by_prob_desc, s->probs);
        float floor_p = s->min_p * s->probs[s->index[0]];
        double cum = 0;
        int keep = 0;
        for (int i = 0; i < V; i++) {
            float p = s->probs[s->index[i]];
            if (keep > 0 && s->min_p > 0 && p < floor_p) break;
            if (keep > 0 && s->top_p < 1 && cum >= s->top_p) break;
            keep++;
            cum += p;
        }
        n = keep;
    }
    /* weights of the kept tokens at the temperature */
    double total = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = s->index[i];
        s->probs[id] = expf((logits[id] - logits[best]) / s->temp);
        total += s->probs[id];
    }
    double u = rng_uniform(&s->rng) * total, acc = 0;
    for (int i = 0; i < n; i++) { acc += s->probs[s->index[i]]; if (u < acc) return s->index[i]; }
    return s->index[n - 1];
}

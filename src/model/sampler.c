/* sampler.c: see sampler.h. */
#include "model/sampler.h"
#include "base/alloc.h"
#include "base/error.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void sampler_config_default(SamplerConfig *c) {
    memset(c, 0, sizeof *c);
    c->top_p = 1.0f;
    c->min_tokens_to_keep = 1;
    c->xtc_threshold = 0.1f;
}

int sampler_init(Sampler *s, int vocab, const SamplerConfig *c, uint64_t seed) {
    memset(s, 0, sizeof *s);
    if (vocab < 1) return error_set("sampler: vocabulary size %d", vocab);
    if (!(c->min_p >= 0 && c->min_p <= 1))
        return error_set("`min_p` has to be a float in the [0, 1] interval, but is %g", c->min_p);
    if (c->min_tokens_to_keep < 1)
        return error_set("`min_tokens_to_keep` has to be a positive integer, but is %d", c->min_tokens_to_keep);
    if (c->top_k < 0 || (c->top_k > 0 && c->top_k >= vocab))
        return error_set("`top_k` has to be an integer in the (0, %d) interval, but is %d.", vocab, c->top_k);
    if (!(c->xtc_threshold >= 0 && c->xtc_threshold <= 0.5f))
        return error_set("`threshold` has to be a float in the [0, 0.5] interval, but is %g", c->xtc_threshold);
    if (!(c->xtc_probability >= 0 && c->xtc_probability <= 1))
        return error_set("`probability` has to be a float in the [0, 1] interval, but is %g", c->xtc_probability);
    s->cfg = *c;
    rng_seed(&s->rng, seed);
    s->lp = mem_alloc((size_t)vocab * sizeof(float));
    s->index = mem_alloc((size_t)vocab * sizeof(int32_t));
    if (c->n_xtc_special > 0) {
        s->special = mem_alloc((size_t)c->n_xtc_special * sizeof(int32_t));
        if (s->special) memcpy(s->special, c->xtc_special, (size_t)c->n_xtc_special * sizeof(int32_t));
    }
    if (!s->lp || !s->index || (c->n_xtc_special > 0 && !s->special)) {
        sampler_free(s);
        return -1;
    }
    s->cfg.xtc_special = s->special;
    return 0;
}

void sampler_free(Sampler *s) {
    mem_free(s->lp);
    mem_free(s->index);
    mem_free(s->special);
    s->lp = NULL;
    s->index = NULL;
    s->special = NULL;
}

/* Descending log-probability, ties by ascending id (a stable, seed-independent order). */
static int by_lp_desc(const void *a, const void *b, void *ctx) {
    const float *p = ctx;
    int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
    if (p[ia] != p[ib]) return p[ia] < p[ib] ? 1 : -1;
    return ia - ib;
}

/* s->index = every id, most likely first under the current mask. */
static void rank(Sampler *s, int V) {
    for (int i = 0; i < V; i++) s->index[i] = i;
    qsort_r(s->index, (size_t)V, sizeof(int32_t), by_lp_desc, s->lp);
}

static void apply_top_p(Sampler *s, int V) {
    rank(s, V);
    double before = 0;   /* mass of the tokens ranked above */
    for (int k = 0; k < V; k++) {
        int32_t id = s->index[k];
        double p = exp((double)s->lp[id]);
        if (!(before < s->cfg.top_p)) s->lp[id] = -INFINITY;
        before += p;
    }
}

static void apply_min_p(Sampler *s, int V) {
    float top = -INFINITY;
    for (int i = 0; i < V; i++) if (s->lp[i] > top) top = s->lp[i];
    const float floor_lp = top + logf(s->cfg.min_p);
    int keep = s->cfg.min_tokens_to_keep;
    if (keep > 1) rank(s, V);
    for (int k = 0; k < V; k++) {
        int32_t id = keep > 1 ? s->index[k] : k;
        if (keep > 1 && k < keep) continue;   /* the most likely survive whatever min_p says */
        if (s->lp[id] < floor_lp) s->lp[id] = -INFINITY;
    }
}

static bool is_special(const Sampler *s, int32_t id) {
    for (int i = 0; i < s->cfg.n_xtc_special; i++) if (s->special[i] == id) return true;
    return false;
}

static void apply_xtc(Sampler *s, int V) {
    /* MLX draws every step, and applies XTC when the draw is <= the probability */
    float u = rng_uniform(&s->rng);
    if (u > s->cfg.xtc_probability) return;
    float top = -INFINITY;
    for (int i = 0; i < V; i++) if (s->lp[i] > top) top = s->lp[i];
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)(s->lp[i] - top));
    /* the least likely token above the threshold stays; the others above it go */
    double least = INFINITY;
    for (int i = 0; i < V; i++) {
        double p = exp((double)(s->lp[i] - top)) / sum;
        if (p > s->cfg.xtc_threshold && p < least) least = p;
    }
    if (isinf(least)) return;
    for (int i = 0; i < V; i++) {
        double p = exp((double)(s->lp[i] - top)) / sum;
        if (p > least && !is_special(s, i)) s->lp[i] = -INFINITY;
    }
}

static void apply_top_k(Sampler *s, int V) {
    rank(s, V);
    for (int k = s->cfg.top_k; k < V; k++) s->lp[s->index[k]] = -INFINITY;
}

int32_t sampler_pick(Sampler *s, const float *logits, int V) {
    int32_t best = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    const SamplerConfig *c = &s->cfg;
    if (c->temp <= 0) return best;
    /* log-probabilities of the temperature-1 distribution */
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)(logits[i] - logits[best]));
    const float lse = logits[best] + (float)log(sum);
    for (int i = 0; i < V; i++) s->lp[i] = logits[i] - lse;
    if (c->top_p > 0 && c->top_p < 1) apply_top_p(s, V);
    if (c->min_p != 0) apply_min_p(s, V);
    if (c->xtc_probability > 0) apply_xtc(s, V);
    if (c->top_k > 0) apply_top_k(s, V);
    /* categorical over what is left, at the temperature */
    float top = -INFINITY;
    for (int i = 0; i < V; i++) if (s->lp[i] > top) top = s->lp[i];
    double total = 0;
    for (int i = 0; i < V; i++) total += isinf(s->lp[i]) ? 0 : exp((double)(s->lp[i] - top) / c->temp);
    double u = rng_uniform(&s->rng) * total, acc = 0;
    int32_t last = best;
    for (int i = 0; i < V; i++) {
        if (isinf(s->lp[i])) continue;
        acc += exp((double)(s->lp[i] - top) / c->temp);
        last = i;
        if (u < acc) return i;
    }
    return last;
}

/* test_sampler.c: sampler_pick against the distributions it must draw from
 * (MLX-LM's make_sampler, sample_utils.py): frequencies over many draws of a
 * fixed four-token distribution at temperature 1 and 0.5, with top-p, min-p
 * (and min_tokens_to_keep), XTC and top-k (filters on the temperature-1
 * probabilities, in MLX's order, weights at the temperature), worked out by
 * hand from MLX's formulas; top-p 1e-6 equal to greedy, top-p 0 and 1 off,
 * MLX's range errors, and the same seed giving the same draws. */
#include "check.h"
#include "base/error.h"
#include "model/sampler.h"
#include <math.h>

enum { V = 4, DRAWS = 40000 };
static const double P[V] = {0.10, 0.50, 0.15, 0.25};   /* argmax 1 */

/* Draw frequencies vs want[] (unnormalised; 0 = never drawn). */
static double run_cfg(const char *what, const SamplerConfig *cfg, const double *want) {
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)log(P[i]) + 3.0f;   /* a shift changes nothing */
    Sampler s;
    CHECK(sampler_init(&s, V, cfg, 42) == 0);
    long count[V] = {0}, bad = 0;
    for (int k = 0; k < DRAWS; k++) { int32_t t = sampler_pick(&s, logits, V); if (t >= 0 && t < V) count[t]++; else bad++; }
    sampler_free(&s);
    CHECK(bad == 0);
    double tot = 0, worst = 0;
    for (int i = 0; i < V; i++) tot += want[i];
    for (int i = 0; i < V; i++) {
        double f = (double)count[i] / DRAWS, w = want[i] / tot;
        if (w == 0) CHECK_MSG(count[i] == 0, "%s: token %d drawn %ld times, must be filtered out", what, i, count[i]);
        if (fabs(f - w) > worst) worst = fabs(f - w);
    }
    printf("%-28s freq %.4f %.4f %.4f %.4f  worst |f-p| %.4f\n", what, (double)count[0] / DRAWS, (double)count[1] / DRAWS,
           (double)count[2] / DRAWS, (double)count[3] / DRAWS, worst);
    CHECK_MSG(worst < 0.012, "%s: worst frequency error %.4f", what, worst);   /* ~5 sigma at 40k draws */
    return worst;
}

static SamplerConfig config(float temp, float top_p, float min_p) {
    SamplerConfig c;
    sampler_config_default(&c);
    c.temp = temp;
    c.top_p = top_p;
    c.min_p = min_p;
    return c;
}

static double run(const char *what, float temp, float top_p, float min_p, const double *want) {
    SamplerConfig c = config(temp, top_p, min_p);
    return run_cfg(what, &c, want);
}

int main(void) {
    double sq[V], sqrt_p[V];
    for (int i = 0; i < V; i++) { sq[i] = P[i] * P[i]; sqrt_p[i] = sqrt(P[i]); }
    run("temp 1", 1.0f, 1.0f, 0.0f, P);
    run("temp 0.5 (p^2)", 0.5f, 1.0f, 0.0f, sq);
    run("temp 2 (sqrt p)", 2.0f, 1.0f, 0.0f, sqrt_p);
    /* top-p 0.7: 0.50 (cum 0.50 < 0.7), 0.25 (cum 0.75): two tokens kept */
    run("top-p 0.7", 1.0f, 0.7f, 0.0f, (double[]){0, 0.50, 0, 0.25});
    /* top-p 0.45: the first token already covers it (0.5 exactly would sit on
     * the boundary, where float rounding decides, in MLX too) */
    run("top-p 0.45", 1.0f, 0.45f, 0.0f, (double[]){0, 1, 0, 0});
    /* min-p 0.4: keep p >= 0.2 -> {0.50, 0.25}; min-p 0.25: also 0.15 */
    run("min-p 0.4", 1.0f, 1.0f, 0.4f, (double[]){0, 0.50, 0, 0.25});
    run("min-p 0.25", 1.0f, 1.0f, 0.25f, (double[]){0, 0.50, 0.15, 0.25});
    /* filters on the temperature-1 probabilities, weights at temperature 2 */
    run("min-p 0.4 temp 2", 2.0f, 1.0f, 0.4f, (double[]){0, sqrt(0.50), 0, sqrt(0.25)});
    run("top-p 0.7 temp 0.5", 0.5f, 0.7f, 0.0f, (double[]){0, 0.25, 0, 0.0625});
    /* top-p 1e-6 and temp 0 are greedy */
    run("top-p 1e-6 temp 0.8", 0.8f, 1e-6f, 0.0f, (double[]){0, 1, 0, 0});
    run("temp 0", 0.0f, 1.0f, 0.0f, (double[]){0, 1, 0, 0});

    /* top-p 0 and top-p above 1 are off, as in make_sampler (0 < top_p < 1) */
    run("top-p 0 (off)", 1.0f, 0.0f, 0.0f, P);
    /* min-p 0.9 keeps only 0.50; min_tokens_to_keep 3 keeps the three most likely */
    SamplerConfig c = config(1.0f, 1.0f, 0.9f);
    run_cfg("min-p 0.9", &c, (double[]){0, 1, 0, 0});
    c.min_tokens_to_keep = 3;
    run_cfg("min-p 0.9 keep 3", &c, (double[]){0, 0.50, 0.15, 0.25});
    /* top-k 2: {0.50, 0.25}; after top-p 0.9 (keeps 0.50, 0.25, 0.15), top-k 2 the same */
    c = config(1.0f, 1.0f, 0.0f);
    c.top_k = 2;
    run_cfg("top-k 2", &c, (double[]){0, 0.50, 0, 0.25});
    c.top_p = 0.9f;
    run_cfg("top-p 0.9 then top-k 2", &c, (double[]){0, 0.50, 0, 0.25});
    /* XTC, threshold 0.2: 0.50 and 0.25 are above it; all but the least likely
     * of them (0.25) go: {0.10, 0.15, 0.25}. Always (probability 1), half of
     * the time (0.5: a mixture), never for a special token. */
    c = config(1.0f, 1.0f, 0.0f);
    c.xtc_probability = 1.0f;
    c.xtc_threshold = 0.2f;
    run_cfg("xtc 1 threshold 0.2", &c, (double[]){0.10, 0, 0.15, 0.25});
    c.xtc_probability = 0.5f;
    run_cfg("xtc 0.5 threshold 0.2", &c, (double[]){0.5 * 0.10 / 0.5 + 0.5 * 0.10, 0.5 * 0.50,
                                                     0.5 * 0.15 / 0.5 + 0.5 * 0.15, 0.5 * 0.25 / 0.5 + 0.5 * 0.25});
    const int32_t special[1] = {1};
    c.xtc_probability = 1.0f;
    c.xtc_special = special;
    c.n_xtc_special = 1;
    run_cfg("xtc with token 1 special", &c, P);
    /* threshold 0.5: nothing is above it, nothing goes */
    c = config(1.0f, 1.0f, 0.0f);
    c.xtc_probability = 1.0f;
    c.xtc_threshold = 0.5f;
    run_cfg("xtc threshold 0.5", &c, P);

    /* MLX's checks */
    Sampler bad;
    c = config(1.0f, 1.0f, 1.5f);
    CHECK(sampler_init(&bad, V, &c, 1) < 0);
    CHECK_ERROR_CONTAINS("`min_p` has to be a float in the [0, 1] interval, but is 1.5");
    c = config(1.0f, 1.0f, 0.0f);
    c.top_k = V;
    CHECK(sampler_init(&bad, V, &c, 1) < 0);
    CHECK_ERROR_CONTAINS("`top_k` has to be an integer in the (0, 4) interval, but is 4.");
    c = config(1.0f, 1.0f, 0.0f);
    c.xtc_threshold = 0.6f;
    CHECK(sampler_init(&bad, V, &c, 1) < 0);
    CHECK_ERROR_CONTAINS("`threshold` has to be a float in the [0, 0.5] interval");
    c = config(1.0f, 1.0f, 0.0f);
    c.min_tokens_to_keep = 0;
    CHECK(sampler_init(&bad, V, &c, 1) < 0);
    CHECK_ERROR_CONTAINS("`min_tokens_to_keep` has to be a positive integer");

    /* a larger random vocabulary: same seed, same draws; another seed differs */
    enum { BV = 1000, N = 64 };
    static float lg[BV];
    Rng r; rng_seed(&r, 5);
    for (int i = 0; i < BV; i++) lg[i] = 2.0f * rng_normal(&r);
    int32_t a[N], b[N], cc[N];
    Sampler s1, s2, s3;
    SamplerConfig big = config(0.8f, 0.95f, 0.05f);
    big.top_k = 50;
    CHECK(sampler_init(&s1, BV, &big, 7) == 0);
    CHECK(sampler_init(&s2, BV, &big, 7) == 0);
    CHECK(sampler_init(&s3, BV, &big, 8) == 0);
    int same_ab = 0, same_ac = 0;
    for (int k = 0; k < N; k++) {
        a[k] = sampler_pick(&s1, lg, BV); b[k] = sampler_pick(&s2, lg, BV); cc[k] = sampler_pick(&s3, lg, BV);
        same_ab += a[k] == b[k]; same_ac += a[k] == cc[k];
    }
    CHECK(same_ab == N);
    CHECK(same_ac < N);
    sampler_free(&s1); sampler_free(&s2); sampler_free(&s3);
    c = config(1.0f, 1.0f, 0.0f);
    CHECK(sampler_init(&s1, 0, &c, 1) < 0);
    CHECK_ERROR_CONTAINS("vocabulary");
    return check_finish("cli/sampler");
}

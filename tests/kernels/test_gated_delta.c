/* test_gated_delta.c: the Gated DeltaNet kernels (kernels/gated_delta.h)
 * against the float64 recurrent PyTorch reference of tests/ref/gdn/<case>/
 * (gen_gdn_refs.py, which checks itself by finite differences): every
 * intermediate of the forward (conv + SiLU, normalised q and k, gates, the
 * rule's output, the final state, the gated norm) and every gradient, within
 * 1e-4 relative (max|a-b| / max|ref|), for chunk sizes 64, 16, 5 and 1.
 * Then, in the engine alone: chunked == recurrent; a sequence split in two
 * calls that carry the state (and the conv state) == one call; one thread ==
 * two threads, bit for bit; and central finite differences of the chunked
 * backward in float. Prints one `worst` line. */
#include <dirent.h>
#include <jansson.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "formats/safetensors.h"
#include "kernels/gated_delta.h"

static const double TOL = 1e-4;
static double worst_ref = 0;

typedef struct {
    int B, T, Hk, Hv, Dk, Dv, K;
    float eps, l2_eps;
    StFile in, ex;
} Case;

static const float *get(const StFile *f, const char *name, size_t n) {
    const StTensor *t = st_find(f, name);
    CHECK_MSG(t && t->dtype == DTYPE_F32 && t->nelem == n, "tensor %s missing or of the wrong size", name);
    return t && t->nelem == n ? t->data : NULL;
}

static void compare(const char *cs, const char *what, const float *a, const float *ref, size_t n, double tol) {
    double e = rel_error(a, ref, n);
    if (e > worst_ref) worst_ref = e;
    if (getenv("VERBOSE")) printf("%s %s %.2e\n", cs, what, e);
    CHECK_MSG(e <= tol, "%s: %s relative error %.3g > %.1g", cs, what, e, tol);
}

/* Every buffer of a test goes through fzeros and is released by pool_free. */
static void *pool[512];
static int pool_n;
static float *fzeros(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (pool_n < 512) pool[pool_n++] = p;
    return p;
}
static void pool_free(void) {
    while (pool_n > 0) free(pool[--pool_n]);
}

/* One case at one chunk size: forward and backward through every kernel. */
static void run_case(const char *name, Case *c, int chunk) {
    int B = c->B, T = c->T, N = B * T, Hk = c->Hk, Hv = c->Hv, Dk = c->Dk, Dv = c->Dv, K = c->K;
    int kd = Hk * Dk, vd = Hv * Dv, CC = 2 * kd + vd;
    char cs[300];
    snprintf(cs, sizeof cs, "%.200s chunk %d", name, chunk);
    const float *qkv = get(&c->in, "qkv", (size_t)N * CC), *z = get(&c->in, "z", (size_t)N * vd);
    const float *a = get(&c->in, "a", (size_t)N * Hv), *b = get(&c->in, "b", (size_t)N * Hv);
    const float *cw = get(&c->in, "conv_w", (size_t)CC * K), *A_log = get(&c->in, "A_log", Hv);
    const float *dt = get(&c->in, "dt_bias", Hv), *nw = get(&c->in, "norm_w", Dv);
    const float *dy = get(&c->in, "dy", (size_t)N * vd);
    if (!qkv || !z || !a || !b || !cw || !A_log || !dt || !nw || !dy) return;
    GdnShape s = {B, T, Hk, Hv, Dk, Dv, chunk};
    int threads = omp_get_max_threads();

    float *conv = fzeros((size_t)N * CC), *qn = fzeros((size_t)N * kd), *kn = fzeros((size_t)N * kd);
    float *qr = fzeros((size_t)N * Hk), *kr = fzeros((size_t)N * Hk);
    float *g = fzeros((size_t)N * Hv), *beta = fzeros((size_t)N * Hv), *core = fzeros((size_t)N * vd);
    float *states = fzeros(gdn_chunk_states_floats(&s)), *final = fzeros((size_t)B * Hv * Dk * Dv);
    float *ws = fzeros(gdn_workspace_floats(&s, threads, 1));
    float *y = fzeros((size_t)N * vd), *rstd = fzeros((size_t)N * Hv);

    conv1d_silu_forward(conv, qkv, cw, NULL, NULL, B, T, CC, K);
    l2norm_forward(qn, qr, conv, CC, 1.0f / sqrtf((float)Dk), c->l2_eps, N, Hk, Dk);
    l2norm_forward(kn, kr, conv + kd, CC, 1.0f, c->l2_eps, N, Hk, Dk);
    gdn_gates_forward(g, beta, a, b, A_log, dt, N, Hv);
    gated_delta_forward(core, states, NULL, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta, ws, threads, &s);
    /* the same from a zero initial state, keeping the final state */
    float *core2 = fzeros((size_t)N * vd);
    gated_delta_forward(core2, NULL, final, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta, ws, threads, &s);
    CHECK_MSG(memcmp(core, core2, (size_t)N * vd * sizeof(float)) == 0, "%s: output depends on the state path", cs);
    gated_rmsnorm_forward(y, rstd, core, z, nw, c->eps, N * Hv, Dv);

    const StFile *ex = &c->ex;
    compare(cs, "conv", conv, get(ex, "conv", (size_t)N * CC), (size_t)N * CC, TOL);
    compare(cs, "q", qn, get(ex, "q", (size_t)N * kd), (size_t)N * kd, TOL);
    compare(cs, "k", kn, get(ex, "k", (size_t)N * kd), (size_t)N * kd, TOL);
    compare(cs, "g", g, get(ex, "g", (size_t)N * Hv), (size_t)N * Hv, TOL);
    compare(cs, "beta", beta, get(ex, "beta", (size_t)N * Hv), (size_t)N * Hv, TOL);
    compare(cs, "core", core, get(ex, "core", (size_t)N * vd), (size_t)N * vd, TOL);
    compare(cs, "final_state", final, get(ex, "final_state", (size_t)B * Hv * Dk * Dv), (size_t)B * Hv * Dk * Dv, TOL);
    compare(cs, "y", y, get(ex, "y", (size_t)N * vd), (size_t)N * vd, TOL);

    /* backward, with L = sum(y * dy) */
    float *dcore = fzeros((size_t)N * vd), *dz = fzeros((size_t)N * vd), *dnw = fzeros(Dv);
    gated_rmsnorm_backward(dcore, dz, dnw, dy, core, z, nw, rstd, N * Hv, Dv);
    compare(cs, "grad.core", dcore, get(ex, "grad.core", (size_t)N * vd), (size_t)N * vd, TOL);
    compare(cs, "grad.z", dz, get(ex, "grad.z", (size_t)N * vd), (size_t)N * vd, TOL);
    compare(cs, "grad.norm_w", dnw, get(ex, "grad.norm_w", Dv), Dv, TOL);
    float *dqn = fzeros((size_t)N * kd), *dkn = fzeros((size_t)N * kd), *dconv = fzeros((size_t)N * CC);
    float *dg = fzeros((size_t)N * Hv), *dbeta = fzeros((size_t)N * Hv);
    gated_delta_backward(dqn, dkn, dconv + 2 * kd, dg, dbeta, dcore, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta,
                         states, ws, threads, &s);
    compare(cs, "grad.q", dqn, get(ex, "grad.q", (size_t)N * kd), (size_t)N * kd, TOL);
    compare(cs, "grad.k", dkn, get(ex, "grad.k", (size_t)N * kd), (size_t)N * kd, TOL);
    compare(cs, "grad.g", dg, get(ex, "grad.g", (size_t)N * Hv), (size_t)N * Hv, TOL);
    compare(cs, "grad.beta", dbeta, get(ex, "grad.beta", (size_t)N * Hv), (size_t)N * Hv, TOL);
    float *dvv = fzeros((size_t)N * vd);
    for (int n = 0; n < N; n++) memcpy(dvv + (size_t)n * vd, dconv + (size_t)n * CC + 2 * kd, vd * sizeof(float));
    compare(cs, "grad.v", dvv, get(ex, "grad.v", (size_t)N * vd), (size_t)N * vd, TOL);
    l2norm_backward(dconv, dqn, conv, CC, qr, 1.0f / sqrtf((float)Dk), N, Hk, Dk);
    l2norm_backward(dconv + kd, dkn, conv + kd, CC, kr, 1.0f, N, Hk, Dk);
    float *da = fzeros((size_t)N * Hv), *db = fzeros((size_t)N * Hv), *dA = fzeros(Hv), *ddt = fzeros(Hv);
    gdn_gates_backward(da, db, dA, ddt, dg, dbeta, a, b, A_log, dt, N, Hv);
    compare(cs, "grad.a", da, get(ex, "grad.a", (size_t)N * Hv), (size_t)N * Hv, TOL);
    compare(cs, "grad.b", db, get(ex, "grad.b", (size_t)N * Hv), (size_t)N * Hv, TOL);
    compare(cs, "grad.A_log", dA, get(ex, "grad.A_log", Hv), Hv, TOL);
    compare(cs, "grad.dt_bias", ddt, get(ex, "grad.dt_bias", Hv), Hv, TOL);
    float *dqkv = fzeros((size_t)N * CC), *dcw = fzeros((size_t)CC * K);
    conv1d_silu_backward(dqkv, dcw, dconv, qkv, cw, B, T, CC, K);
    compare(cs, "grad.qkv", dqkv, get(ex, "grad.qkv", (size_t)N * CC), (size_t)N * CC, TOL);
    compare(cs, "grad.conv_w", dcw, get(ex, "grad.conv_w", (size_t)CC * K), (size_t)CC * K, TOL);

    /* the engine against itself: the plain recurrence */
    float *rec = fzeros((size_t)N * vd), *rstate = fzeros((size_t)B * Hv * Dk * Dv);
    gated_delta_recurrent_forward(rec, rstate, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta, &s);
    double e1 = rel_error(core, rec, (size_t)N * vd), e2 = rel_error(final, rstate, (size_t)B * Hv * Dk * Dv);
    CHECK_MSG(e1 <= 1e-5 && e2 <= 1e-5, "%s: chunked vs recurrent %.3g (output) %.3g (state)", cs, e1, e2);

    /* one thread gives the same bits as many (fixed summation order) */
    if (threads > 1) {
        float *core1 = fzeros((size_t)N * vd), *dq1 = fzeros((size_t)N * kd), *dk1 = fzeros((size_t)N * kd);
        float *dv1 = fzeros((size_t)N * CC), *dg1 = fzeros((size_t)N * Hv), *db1 = fzeros((size_t)N * Hv);
        float *dqA = fzeros((size_t)N * kd), *dkA = fzeros((size_t)N * kd), *dvA = fzeros((size_t)N * CC);
        float *dgA = fzeros((size_t)N * Hv), *dbA = fzeros((size_t)N * Hv);
        gated_delta_backward(dqA, dkA, dvA + 2 * kd, dgA, dbA, dcore, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta,
                             states, ws, threads, &s);
        omp_set_num_threads(1);
        gated_delta_forward(core1, NULL, NULL, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta, ws, threads, &s);
        gated_delta_backward(dq1, dk1, dv1 + 2 * kd, dg1, db1, dcore, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta,
                             states, ws, threads, &s);
        omp_set_num_threads(threads);
        CHECK_MSG(memcmp(core1, core, (size_t)N * vd * 4) == 0 && memcmp(dq1, dqA, (size_t)N * kd * 4) == 0 &&
                  memcmp(dk1, dkA, (size_t)N * kd * 4) == 0 && memcmp(dv1, dvA, (size_t)N * CC * 4) == 0 &&
                  memcmp(dg1, dgA, (size_t)N * Hv * 4) == 0 && memcmp(db1, dbA, (size_t)N * Hv * 4) == 0,
                  "%s: one thread and %d threads differ", cs, threads);
    }
    pool_free();
}

/* Generation: the sequence fed in two calls that carry the conv state and the
 * recurrent state gives the same outputs as one call over the whole. */
static void split_equals_whole(const char *name, Case *c) {
    int B = c->B, T = c->T, N = B * T, Hk = c->Hk, Hv = c->Hv, Dk = c->Dk, Dv = c->Dv, K = c->K;
    int kd = Hk * Dk, vd = Hv * Dv, CC = 2 * kd + vd;
    const float *qkv = get(&c->in, "qkv", (size_t)N * CC), *cw = get(&c->in, "conv_w", (size_t)CC * K);
    const float *a = get(&c->in, "a", (size_t)N * Hv), *b = get(&c->in, "b", (size_t)N * Hv);
    const float *A_log = get(&c->in, "A_log", Hv), *dt = get(&c->in, "dt_bias", Hv);
    if (!qkv || !cw || !a || !b || !A_log || !dt) return;
    int threads = omp_get_max_threads();
    float *whole = fzeros((size_t)N * vd), *parts = fzeros((size_t)N * vd);
    for (int row = 0; row < B; row++) {
        const float *x = qkv + (size_t)row * T * CC;
        float *conv = fzeros((size_t)T * CC), *qn = fzeros((size_t)T * kd), *kn = fzeros((size_t)T * kd);
        float *r = fzeros((size_t)T * Hk), *g = fzeros((size_t)T * Hv), *beta = fzeros((size_t)T * Hv);
        gdn_gates_forward(g, beta, a + (size_t)row * T * Hv, b + (size_t)row * T * Hv, A_log, dt, T, Hv);
        GdnShape s = {1, T, Hk, Hv, Dk, Dv, 16};
        float *ws = fzeros(gdn_workspace_floats(&s, threads, 0));
        conv1d_silu_forward(conv, x, cw, NULL, NULL, 1, T, CC, K);
        l2norm_forward(qn, r, conv, CC, 1.0f / sqrtf((float)Dk), c->l2_eps, T, Hk, Dk);
        l2norm_forward(kn, r, conv + kd, CC, 1.0f, c->l2_eps, T, Hk, Dk);
        gated_delta_forward(whole + (size_t)row * T * vd, NULL, NULL, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta,
                            ws, threads, &s);
        /* parts: T1 positions chunked (prompt), then one at a time, recurrent (generation) */
        int T1 = T / 2 + 1;
        float *cstate = fzeros((size_t)(K - 1) * CC), *state = fzeros((size_t)Hv * Dk * Dv);
        GdnShape s1 = {1, T1, Hk, Hv, Dk, Dv, 16};
        conv1d_silu_forward(conv, x, cw, NULL, cstate, 1, T1, CC, K);
        l2norm_forward(qn, r, conv, CC, 1.0f / sqrtf((float)Dk), c->l2_eps, T1, Hk, Dk);
        l2norm_forward(kn, r, conv + kd, CC, 1.0f, c->l2_eps, T1, Hk, Dk);
        gated_delta_forward(parts + (size_t)row * T * vd, NULL, state, qn, kd, kn, kd, conv + 2 * kd, CC, g, beta,
                            ws, threads, &s1);
        GdnShape s2 = {1, 1, Hk, Hv, Dk, Dv, 16};
        for (int t = T1; t < T; t++) {
            conv1d_silu_forward(conv, x + (size_t)t * CC, cw, cstate, cstate, 1, 1, CC, K);
            l2norm_forward(qn, r, conv, CC, 1.0f / sqrtf((float)Dk), c->l2_eps, 1, Hk, Dk);
            l2norm_forward(kn, r, conv + kd, CC, 1.0f, c->l2_eps, 1, Hk, Dk);
            gated_delta_recurrent_forward(parts + ((size_t)row * T + t) * vd, state, qn, kd, kn, kd, conv + 2 * kd,
                                          CC, g + (size_t)t * Hv, beta + (size_t)t * Hv, &s2);
        }
    }
    double e = rel_error(parts, whole, (size_t)N * vd);
    CHECK_MSG(e <= 1e-5, "%s: prompt + step-by-step generation vs one pass: %.3g", name, e);
    pool_free();
}

/* ---- finite differences of the chunked backward, in float ---- */
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

typedef struct {
    GdnShape s;
    float *q, *k, *v, *g, *beta, *probe, *out, *ws;
} FdCtx;

static double fd_loss(FdCtx *f) {
    const GdnShape *s = &f->s;
    int kd = s->Hk * s->Dk, vd = s->Hv * s->Dv;
    gated_delta_forward(f->out, NULL, NULL, f->q, kd, f->k, kd, f->v, vd, f->g, f->beta, f->ws,
                        omp_get_max_threads(), s);
    double l = 0;
    for (size_t i = 0; i < (size_t)s->B * s->T * vd; i++) l += (double)f->out[i] * f->probe[i];
    return l;
}

static double fd_one(FdCtx *f, const char *what, float *p, const float *grad, size_t n) {
    double scale = max_abs(grad, n), worst = 0;
    for (size_t i = 0; i < n; i += 3) {
        float keep = p[i];
        float eps = 1e-2f;
        p[i] = keep + eps;
        double lp = fd_loss(f);
        p[i] = keep - eps;
        double lm = fd_loss(f);
        double h = (double)(keep + eps) - (double)(keep - eps);
        p[i] = keep;
        double e = fabs((lp - lm) / h - grad[i]) / scale;
        if (e > worst) worst = e;
    }
    CHECK_MSG(worst < 2e-2, "finite differences of %s: worst %.3g", what, worst);
    return worst;
}

static double test_fd(void) {
    FdCtx f;
    f.s = (GdnShape){2, 11, 1, 2, 8, 8, 4};
    const GdnShape *s = &f.s;
    size_t N = (size_t)s->B * s->T, kd = (size_t)s->Hk * s->Dk, vd = (size_t)s->Hv * s->Dv;
    f.q = fzeros(N * kd);
    f.k = fzeros(N * kd);
    f.v = fzeros(N * vd);
    f.g = fzeros(N * s->Hv);
    f.beta = fzeros(N * s->Hv);
    f.probe = fzeros(N * vd);
    f.out = fzeros(N * vd);
    for (size_t i = 0; i < N * kd; i++) {
        f.q[i] = 0.4f * frand();
        f.k[i] = 0.4f * frand();
    }
    for (size_t i = 0; i < N * vd; i++) {
        f.v[i] = frand();
        f.probe[i] = frand();
    }
    for (size_t i = 0; i < N * s->Hv; i++) {
        f.g[i] = -0.3f + 0.25f * frand();
        f.beta[i] = 0.5f + 0.4f * frand();
    }
    int threads = omp_get_max_threads();
    f.ws = fzeros(gdn_workspace_floats(s, threads, 1));
    float *states = fzeros(gdn_chunk_states_floats(s));
    gated_delta_forward(f.out, states, NULL, f.q, kd, f.k, kd, f.v, vd, f.g, f.beta, f.ws, threads, s);
    float *dq = fzeros(N * kd), *dk = fzeros(N * kd), *dv = fzeros(N * vd), *dg = fzeros(N * s->Hv);
    float *db = fzeros(N * s->Hv);
    gated_delta_backward(dq, dk, dv, dg, db, f.probe, f.q, kd, f.k, kd, f.v, vd, f.g, f.beta, states, f.ws,
                         threads, s);
    double w = fd_one(&f, "q", f.q, dq, N * kd);
    w = fmax(w, fd_one(&f, "k", f.k, dk, N * kd));
    w = fmax(w, fd_one(&f, "v", f.v, dv, N * vd));
    w = fmax(w, fd_one(&f, "g", f.g, dg, N * s->Hv));
    w = fmax(w, fd_one(&f, "beta", f.beta, db, N * s->Hv));
    pool_free();
    return w;
}

static int read_case(Case *c, const char *dir) {
    char p[700];
    snprintf(p, sizeof p, "%s/case.json", dir);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) {
        fprintf(stderr, "%s: %s\n", p, je.text);
        return -1;
    }
    c->B = (int)json_integer_value(json_object_get(j, "B"));
    c->T = (int)json_integer_value(json_object_get(j, "T"));
    c->Hk = (int)json_integer_value(json_object_get(j, "Hk"));
    c->Hv = (int)json_integer_value(json_object_get(j, "Hv"));
    c->Dk = (int)json_integer_value(json_object_get(j, "Dk"));
    c->Dv = (int)json_integer_value(json_object_get(j, "Dv"));
    c->K = (int)json_integer_value(json_object_get(j, "K"));
    c->eps = (float)json_number_value(json_object_get(j, "eps"));
    c->l2_eps = (float)json_number_value(json_object_get(j, "l2_eps"));
    json_decref(j);
    snprintf(p, sizeof p, "%s/inputs.safetensors", dir);
    if (st_open(&c->in, p) < 0) return -1;
    snprintf(p, sizeof p, "%s/expected.safetensors", dir);
    if (st_open(&c->ex, p) < 0) return -1;
    return 0;
}

int main(void) {
    const char *root = "tests/ref/gdn";
    DIR *d = opendir(root);
    CHECK_MSG(d != NULL, "cannot open %s", root);
    int cases = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%.200s", root, e->d_name);
        Case c;
        CHECK_MSG(read_case(&c, dir) == 0, "%s: cannot read the case", dir);
        cases++;
        int chunks[] = {64, 16, 5, 1};
        for (int i = 0; i < 4; i++) run_case(e->d_name, &c, chunks[i]);
        split_equals_whole(e->d_name, &c);
        st_close(&c.in);
        st_close(&c.ex);
    }
    if (d) closedir(d);
    CHECK_MSG(cases >= 3, "only %d reference cases found", cases);
    double fd = test_fd();
    printf("worst: reference %.3g (bound %.0e), finite differences %.3g, %d cases\n", worst_ref, TOL, fd, cases);
    return check_finish("gated_delta");
}

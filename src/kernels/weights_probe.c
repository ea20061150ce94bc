/* weights_probe.c: the start-up timing of a run's frozen products in fp32
 * (bf16 weights widened into panels) and in bf16 (see weights_probe.h), and
 * oneDNN's instruction set by name. */
#include "kernels/weights_probe.h"

#include <stdint.h>
#include <time.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/error.h"
#include "kernels/frozen_weight.h"
#include "kernels/matmul.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Deterministic values of the size of trained weights and activations. */
static void fill(float *p, size_t n, float scale) {
    uint32_t s = 0x9e3779b9u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = scale * ((float)(s >> 8) * (1.0f / 8388608.0f) - 1.0f);
    }
}

typedef struct {
    float *x, *y, *dy, *dx;   /* (rows, in), (rows, out), (rows, out), (rows, in) */
    const FrozenWeight *w;
    int rows;
} Job;

/* CPU seconds of the forward product and of the input gradient. */
static void time_pair(const Job *j, double *fwd, double *bwd) {
    double t0 = cpu_seconds();
    fw_linear_forward(j->y, j->x, NULL, j->w, NULL, j->rows);
    double t1 = cpu_seconds();
    fw_linear_backward_dinp(j->dx, 0.0f, j->dy, NULL, 0, j->w, j->rows);
    double t2 = cpu_seconds();
    *fwd = t1 - t0;
    *bwd = t2 - t1;
}

int weights_probe(const ProbeShape *shapes, int n, int rows, ProbeResult *res) {
    double w0 = wall_seconds();
    int max_in = 1;
    int max_out = 1;
    for (int i = 0; i < n; i++) {
        if (shapes[i].in > max_in) max_in = shapes[i].in;
        int o = shapes[i].out;
        if ((size_t)o * (size_t)shapes[i].in > PROBE_MAX_WEIGHTS) o = PROBE_MAX_WEIGHTS / shapes[i].in;
        if (o > max_out) max_out = o;
    }
    if (rows < 1) rows = 1;
    size_t wn = (size_t)max_in * (size_t)max_out;
    size_t an = (size_t)rows * (size_t)(max_in > max_out ? max_in : max_out);
    size_t panel_bytes = fw_panel_scratch_bytes(max_in);
    size_t conv_bytes = matmul_scratch_bytes((size_t)rows, (size_t)(max_in > max_out ? max_in : max_out));
    float *wf = mem_alloc(wn * sizeof(float));
    uint16_t *w16 = mem_alloc(wn * sizeof(uint16_t));
    float *x = mem_alloc(an * sizeof(float));
    float *y = mem_alloc(an * sizeof(float));
    float *dy = mem_alloc(an * sizeof(float));
    float *dx = mem_alloc(an * sizeof(float));
    void *panel = mem_alloc(panel_bytes);
    void *conv = mem_alloc(conv_bytes);
    int rc = -1;
    if (!wf || !w16 || !x || !y || !dy || !dx || !panel || !conv) {
        error_set("weights probe: out of memory");
        goto out;
    }
    fill(wf, wn, 0.05f);
    matmul_f32_to_bf16(w16, wf, wn);
    fill(x, an, 1.0f);
    fill(dy, an, 0.01f);
    fw_set_panel_scratch(panel, panel_bytes);
    matmul_set_scratch(conv, conv_bytes);
    double t_f32 = 0.0, t_bf16 = 0.0, flops = 0.0;
    for (int i = 0; i < n; i++) {
        int in = shapes[i].in;
        int out = shapes[i].out;
        if ((size_t)out * (size_t)in > PROBE_MAX_WEIGHTS) out = PROBE_MAX_WEIGHTS / in;
        if (out < 1 || in < 1) continue;
        /* the slice stands for the whole matrix: its times scale by out / slice */
        double scale = (double)shapes[i].out / (double)out;
        FrozenWeight wv[2] = {fw_plain(w16, DTYPE_BF16, out, in, DTYPE_F32),
                              fw_plain(w16, DTYPE_BF16, out, in, DTYPE_BF16)};
        double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};
        for (int rep = 0; rep < 3; rep++) {
            for (int p = 0; p < 2; p++) {
                Job j = {x, y, dy, dx, &wv[p], rows};
                double f, b;
                time_pair(&j, &f, &b);
                if (rep == 0) continue; /* creates the primitives */
                if (f < best[p][0]) best[p][0] = f;
                if (b < best[p][1]) best[p][1] = b;
            }
        }
        t_f32 += scale * (shapes[i].fwd * best[0][0] + shapes[i].bwd * best[0][1]);
        t_bf16 += scale * (shapes[i].fwd * best[1][0] + shapes[i].bwd * best[1][1]);
        flops += 2.0 * rows * (double)in * (double)shapes[i].out * (shapes[i].fwd + shapes[i].bwd);
    }
    res->rows = rows;
    res->gflops_f32 = t_f32 > 0 ? flops / t_f32 * 1e-9 : 0.0;
    res->gflops_bf16 = t_bf16 > 0 ? flops / t_bf16 * 1e-9 : 0.0;
    rc = 0;
out:
    fw_set_panel_scratch(NULL, 0);
    matmul_set_scratch(NULL, 0);
    /* the probe's primitives are not the run's: they leave the cache (and
     * the product profile, LMTUNE_MATMUL_PROFILE) */
    matmul_profile_report(false);
    matmul_release_all();
    mem_free(wf);
    mem_free(w16);
    mem_free(x);
    mem_free(y);
    mem_free(dy);
    mem_free(dx);
    mem_free(panel);
    mem_free(conv);
    res->seconds = wall_seconds() - w0;
    return rc;
}

/* weights_dtype.c: the dtype of a run's frozen products under
 * --weights-dtype auto. bf16 products are taken only where they can be
 * faster and are measured so: the stored weights must be bf16 numbers
 * (plain bf16, or MLX affine with bf16 scales: F32 and F16 weights would be
 * rounded), oneDNN must multiply bf16 on this CPU, and the start-up probe of
 * the run's own product shapes (kernels/weights_probe.h) must find the bf16
 * products faster than fp32 ones on the widened weights. Otherwise the
 * products run in fp32 and bf16 weights stay bf16 in memory, widened panel
 * by panel inside the products. */
#include "model/model_internal.h"
#include "kernels/matmul.h"
#include "kernels/weights_probe.h"
#include "base/error.h"
#include <stdio.h>

/* The frozen products of one training step of spec (of one evaluation
 * batch when !spec->training), by shape. */
static int step_shapes(const ModelConfig *cfg, const ModelSpec *spec, ProbeShape *s) {
    int C = cfg->hidden_size, F = cfg->intermediate_size, L = cfg->num_hidden_layers;
    int QD = cfg->num_attention_heads * cfg->head_dim, KVD = cfg->num_key_value_heads * cfg->head_dim;
    int trained = spec->num_layers <= 0 || spec->num_layers > L ? L : spec->num_layers;
    bool full = spec->type == TUNE_FULL;
    /* blocks whose base matrices are frozen, run forward; and backward */
    double fwd = full ? L - trained : L, bwd = full ? 0 : trained;
    if (spec->grad_checkpoint && !full) fwd += trained;
    if (!spec->training) bwd = 0;   /* an evaluation: forward products only */
    double qkv_bwd = bwd > 0 ? bwd - 1 : 0; /* the lowest trained block's q/k/v input gradient is not needed */
    int n = 0;
    s[n++] = (ProbeShape){C, QD, fwd, qkv_bwd};
    s[n++] = (ProbeShape){C, KVD, 2 * fwd, 2 * qkv_bwd};
    s[n++] = (ProbeShape){QD, C, fwd, bwd};
    s[n++] = (ProbeShape){C, F, 2 * fwd, 2 * bwd};
    s[n++] = (ProbeShape){F, C, fwd, bwd};
    s[n++] = (ProbeShape){C, cfg->vocab_size, 1, spec->training ? 1 : 0};
    return n;
}

int model_auto_weights_dtype(const char *model_dir, const ModelConfig *cfg, const ModelSpec *spec, int rows,
                             DType *out, char *why, size_t cap) {
    WeightsSummary ws;
    TRY(model_weights_summary(model_dir, cfg, &ws));
    *out = DTYPE_F32;
    /* GGUF blocks expand to either dtype: the probe decides as for bf16 weights */
    const char *widened = ws.gguf ? "fp32 on GGUF blocks expanded panel by panel"
                                  : "fp32 on bf16 weights widened panel by panel";
    if (!ws.bf16_values && !ws.gguf) {
        snprintf(why, cap, "fp32 (the weights are %s in the file)", dtype_name(ws.file_dtype));
        return 0;
    }
    if (!matmul_bf16_supported()) {
        snprintf(why, cap, "%s (oneDNN has no bf16 products with %s)", widened, matmul_isa_name());
        return 0;
    }
    ProbeShape shapes[8];
    int n = step_shapes(cfg, spec, shapes);
    /* Another process on the cores only slows a measurement down (with two
     * threads and one core taken, a product's CPU time can grow tenfold), so
     * the best rate of each path over several probes is the closer one. A
     * probe whose faster path leads by PROBE_CLEAR_LEAD stands alone (Zen 4:
     * bf16 ~2x; the Xeon of issue 18: fp32 ~1.7x); a closer or disturbed one
     * is probed again, up to PROBE_TRIES times in all. */
    enum { PROBE_TRIES = 3 };
    const double PROBE_CLEAR_LEAD = 1.5;
    ProbeResult r = {0};
    double seconds = 0.0;
    int tries = 0;
    while (tries < PROBE_TRIES) {
        tries++;
        ProbeResult p;
        TRY(weights_probe(shapes, n, rows, &p));
        seconds += p.seconds;
        r.rows = p.rows;
        if (p.gflops_f32 > r.gflops_f32) r.gflops_f32 = p.gflops_f32;
        if (p.gflops_bf16 > r.gflops_bf16) r.gflops_bf16 = p.gflops_bf16;
        double lo = r.gflops_f32 < r.gflops_bf16 ? r.gflops_f32 : r.gflops_bf16;
        double hi = r.gflops_f32 < r.gflops_bf16 ? r.gflops_bf16 : r.gflops_f32;
        if (hi >= PROBE_CLEAR_LEAD * lo) break;
    }
    r.seconds = seconds;
    bool bf16 = r.gflops_bf16 > r.gflops_f32;
    *out = bf16 ? DTYPE_BF16 : DTYPE_F32;
    snprintf(why, cap,
             "%s (oneDNN %s; this run's products measured at %d rows, %d probe%s in %.0f ms: bf16 %.0f GFLOP/s, "
             "fp32 %.0f GFLOP/s%s)",
             bf16 ? "bf16" : widened, matmul_isa_name(), r.rows, tries, tries > 1 ? "s" : "", r.seconds * 1e3,
             r.gflops_bf16, r.gflops_f32, bf16 ? "" : ": bf16 products are slower on this CPU");
    return 0;
}

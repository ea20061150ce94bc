/* optimizer.c: MLX's Adam, AdamW, SGD, Adafactor and Muon update rules on
 * fp32 moments. Arithmetic is float32 as in MLX, element by element in a
 * fixed order, so the same run gives the same bits; Muon's matrix products
 * go through oneDNN (kernels/matmul.h). */
#include "train/optimizer.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "kernels/matmul.h"

void optimizer_config_default(OptimizerConfig *c) {
    memset(c, 0, sizeof *c);
    c->kind = OPT_ADAM;
    c->adam = (AdamConfig){{0.9, 0.999}, 1e-8, false, 0.0};
    c->adamw = (AdamConfig){{0.9, 0.999}, 1e-8, false, 0.01};
    c->sgd = (SgdConfig){0.0, 0.0, 0.0, false};
    c->adafactor = (AdafactorConfig){NAN, {1e-30, 1e-3}, 1.0, -0.8, NAN, 0.0, true, true, false};
    c->muon = (MuonConfig){0.95, 0.01, true, 5};
}

static const char *const NAMES[] = {"adam", "adamw", "sgd", "adafactor", "muon"};
#define N_NAMES (sizeof NAMES / sizeof NAMES[0])
const char *optimizer_name(OptimizerKind k) { return NAMES[k]; }
int optimizer_kind_from_name(const char *name, OptimizerKind *out) {
    for (size_t i = 0; i < N_NAMES; i++)
        if (!strcmp(name, NAMES[i])) {
            *out = (OptimizerKind)i;
            return 0;
        }
    return error_set("unknown optimizer \"%s\" (expected adam, adamw, muon, sgd or adafactor)", name);
}

static bool factored(const OptSlot *s) { return s->ndim == 2; }

/* Which state tensors a slot needs, in checkpoint order. */
static int slot_keys(const OptimizerConfig *cfg, const OptSlot *s, const char *keys[4], size_t numels[4]) {
    int n = 0;
    switch (cfg->kind) {
    case OPT_ADAM: case OPT_ADAMW:
        keys[n] = "m";
        numels[n++] = s->numel;
        keys[n] = "v";
        numels[n++] = s->numel;
        break;
    case OPT_SGD:
        if (cfg->sgd.momentum > 0) {
            keys[n] = "v";
            numels[n++] = s->numel;
        }
        break;
    case OPT_MUON:
        keys[n] = "v";
        numels[n++] = s->numel;
        break;
    case OPT_ADAFACTOR:
        if (factored(s)) {
            keys[n] = "row";
            numels[n++] = (size_t)s->shape[0];
            keys[n] = "col";
            numels[n++] = (size_t)s->shape[1];
        } else {
            keys[n] = "v";
            numels[n++] = s->numel;
        }
        if (!isnan(cfg->adafactor.beta_1)) {
            keys[n] = "m";
            numels[n++] = s->numel;
        }
        break;
    }
    return n;
}

static float **slot_field(OptSlot *s, const char *key) {
    if (!strcmp(key, "m")) return &s->m;
    if (!strcmp(key, "v")) return &s->v;
    if (!strcmp(key, "row")) return &s->row;
    return &s->col;
}

int optimizer_state_views(const Optimizer *o, size_t i, OptStateView views[4]) {
    const char *keys[4];
    size_t numels[4];
    OptSlot *s = &o->slots[i];
    int n = slot_keys(&o->cfg, s, keys, numels);
    for (int k = 0; k < n; k++) views[k] = (OptStateView){keys[k], *slot_field(s, keys[k]), numels[k]};
    return n;
}

static void slot_from_tensor(OptSlot *s, const TrainableTensor *t) {
    memset(s, 0, sizeof *s);
    s->numel = t->numel;
    s->ndim = t->ndim;
    s->shape[0] = t->shape[0];
    s->shape[1] = t->ndim == 2 ? t->shape[1] : 1;
}

size_t optimizer_state_bytes(const OptimizerConfig *cfg, const TrainableTensor *t) {
    OptSlot s;
    slot_from_tensor(&s, t);
    const char *keys[4];
    size_t numels[4], bytes = 0;
    int n = slot_keys(cfg, &s, keys, numels);
    for (int k = 0; k < n; k++) bytes += numels[k] * sizeof(float);
    return bytes;
}

/* Floats of Muon's Newton-Schulz workspace for a (rows, cols) update: the
 * update and the next iterate (m, n), X X^T and the polynomial (m, m). */
static size_t ns_floats(const OptSlot *s) {
    if (s->ndim != 2) return 0;
    size_t a = (size_t)s->shape[0], b = (size_t)s->shape[1];
    size_t m = a < b ? a : b, k = a < b ? b : a;
    return 2 * m * k + 2 * m * m;
}

int optimizer_layout(Optimizer *o, const OptimizerConfig *cfg, const TrainableTensor *t, size_t n, Carver *cv) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    if (cfg->kind == OPT_MUON && cfg->muon.ns_steps < 0)
        return error_set("optimizer_config.muon.ns_steps must be >= 0, got %d", cfg->muon.ns_steps);
    if (n) TRY_PTR(o->slots = mem_calloc(n, sizeof *o->slots));
    o->n = n;
    size_t work = 0;
    for (size_t i = 0; i < n; i++) {
        OptSlot *s = &o->slots[i];
        slot_from_tensor(s, &t[i]);
        const char *keys[4];
        size_t numels[4];
        int nk = slot_keys(cfg, s, keys, numels);
        for (int k = 0; k < nk; k++) {
            char name[128];
            snprintf(name, sizeof name, "%s.%s", t[i].name, keys[k]);
            void *p = NULL;
            if (carve(cv, MEM_OPTIMIZER, name, numels[k] * sizeof(float), &p) < 0) {
                optimizer_free(o);
                return -1;
            }
            *slot_field(s, keys[k]) = p;
        }
        if (cfg->kind == OPT_MUON && ns_floats(s) > work) work = ns_floats(s);
    }
    if (work) {
        void *p = NULL;
        if (carve(cv, MEM_OPTIMIZER, "Muon Newton-Schulz workspace", work * sizeof(float), &p) < 0) {
            optimizer_free(o);
            return -1;
        }
        o->ns_work = p;
    }
    return 0;
}

void optimizer_free(Optimizer *o) {
    mem_free(o->slots);
    o->slots = NULL;
    o->n = 0;
}

/* MLX Adam.apply_single; AdamW first scales the parameter by 1 - lr*wd. */
static void adam_update(const AdamConfig *c, bool decoupled, OptSlot *s, float *w, const float *g, float lr,
                        uint64_t step) {
    const float b1 = (float)c->betas[0], b2 = (float)c->betas[1], eps = (float)c->eps;
    const float decay = decoupled ? 1.0f - lr * (float)c->weight_decay : 1.0f;
    float c1 = lr, c2 = 1.0f;
    if (c->bias_correction) {
        c1 = lr / (1.0f - powf(b1, (float)step));
        c2 = 1.0f / sqrtf(1.0f - powf(b2, (float)step));
    }
    float *m = s->m, *v = s->v;
    for (size_t i = 0; i < s->numel; i++) {
        float p = decoupled ? w[i] * decay : w[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * (g[i] * g[i]);
        if (c->bias_correction) w[i] = p - (c1 * m[i]) / (sqrtf(v[i]) * c2 + eps);
        else w[i] = p - lr * m[i] / (sqrtf(v[i]) + eps);
    }
}

/* MLX SGD.apply_single. */
static void sgd_update(const SgdConfig *c, OptSlot *s, float *w, const float *g, float lr) {
    const float wd = (float)c->weight_decay, mu = (float)c->momentum, damp = (float)c->dampening;
    for (size_t i = 0; i < s->numel; i++) {
        float grad = g[i];
        if (wd != 0) grad += wd * w[i];
        if (mu <= 0) {
            w[i] -= lr * grad;
            continue;
        }
        float v = mu * s->v[i];
        if (damp > 0) v += (1.0f - damp) * grad;
        else v += grad;
        s->v[i] = v;
        float update = c->nesterov ? grad + mu * v : v;
        w[i] -= lr * update;
    }
}

static float rms(const float *x, size_t n) {
    double acc = 0;
    for (size_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
    return (float)sqrt(acc / (double)n);
}

/* MLX Adafactor.apply_single. `u` is scratch of numel floats (the tensor's
 * gradient buffer is reused: the gradient is consumed by the update). */
static void adafactor_update(const AdafactorConfig *c, OptSlot *s, float *w, float *g, float lr_in, uint64_t step) {
    const size_t n = s->numel;
    const float stepf = (float)step;
    float param_rms = rms(w, n);
    float rel;
    if (c->relative_step) {
        float min_step = c->warmup_init ? 1e-6f * stepf : 1e-2f;
        float inv = 1.0f / sqrtf(stepf);
        rel = min_step < inv ? min_step : inv;
    } else {
        rel = lr_in;
    }
    float scale = 1.0f;
    if (c->scale_parameter) scale = param_rms > (float)c->eps[1] ? param_rms : (float)c->eps[1];
    const float lr = scale * rel;
    const float beta2 = 1.0f - powf(stepf, (float)c->decay_rate);
    const float eps0 = (float)c->eps[0];
    if (factored(s)) {
        const size_t R = (size_t)s->shape[0], C = (size_t)s->shape[1];
        for (size_t r = 0; r < R; r++) {          /* mean over the last axis */
            double acc = 0;
            for (size_t j = 0; j < C; j++) acc += (double)g[r * C + j] * g[r * C + j] + eps0;
            s->row[r] = beta2 * s->row[r] + (1.0f - beta2) * (float)(acc / (double)C);
        }
        for (size_t j = 0; j < C; j++) {          /* mean over rows */
            double acc = 0;
            for (size_t r = 0; r < R; r++) acc += (double)g[r * C + j] * g[r * C + j] + eps0;
            s->col[j] = beta2 * s->col[j] + (1.0f - beta2) * (float)(acc / (double)R);
        }
        double row_mean = 0;
        for (size_t r = 0; r < R; r++) row_mean += s->row[r];
        row_mean /= (double)R;
        for (size_t r = 0; r < R; r++) {
            float rf = 1.0f / sqrtf(s->row[r] / (float)row_mean);
            for (size_t j = 0; j < C; j++) g[r * C + j] = rf * (1.0f / sqrtf(s->col[j])) * g[r * C + j];
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            s->v[i] = beta2 * s->v[i] + (1.0f - beta2) * (g[i] * g[i] + eps0);
            g[i] = (1.0f / sqrtf(s->v[i])) * g[i];
        }
    }
    float urms = rms(g, n) / (float)c->clip_threshold;
    float denom = urms > 1.0f ? urms : 1.0f;
    const bool first = !isnan(c->beta_1);
    const float b1 = first ? (float)c->beta_1 : 0.0f;
    const float wd = (float)c->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float u = lr * (g[i] / denom);
        if (first) {
            s->m[i] = b1 * s->m[i] + (1.0f - b1) * u;
            u = s->m[i];
        }
        float p = w[i];
        if (wd != 0) p += p * (-wd * lr);
        w[i] = p - u;
    }
}

/* MLX Muon._zeropower_via_newtonschulz5 on X (m, k), m <= k, in place:
 * X /= (||X||_F + 1e-7); then `steps` times A = X X^T, B = b A + c A A,
 * X = a X + B X, with (a, b, c) = (3.4445, -4.7750, 2.0315). */
static void newton_schulz(float *X, /* (m, k) */
                          float *Y, /* (m, k) scratch */
                          float *A, /* (m, m) scratch */
                          float *B, /* (m, m) scratch */
                          int m, int k, int steps) {
    const float a = 3.4445f, b = -4.7750f, c = 2.0315f;
    const size_t mk = (size_t)m * k, mm = (size_t)m * m;
    double ss = 0;
    for (size_t i = 0; i < mk; i++) ss += (double)X[i] * X[i];
    const float inv = 1.0f / ((float)sqrt(ss) + 1e-7f);
    for (size_t i = 0; i < mk; i++) X[i] *= inv;
    for (int s = 0; s < steps; s++) {
        gemm_f32(A, X, X, m, m, k, false, true, 1.0f, 0.0f);
        for (size_t i = 0; i < mm; i++) B[i] = b * A[i];
        gemm_f32(B, A, A, m, m, m, false, false, c, 1.0f);
        for (size_t i = 0; i < mk; i++) Y[i] = a * X[i];
        gemm_f32(Y, B, X, m, k, m, false, false, 1.0f, 1.0f);
        memcpy(X, Y, mk * sizeof(float));
    }
}

/* MLX Muon.apply_single. The gradient buffer is consumed (it holds g + wd*w). */
static void muon_update(const MuonConfig *c, OptSlot *s, float *w, float *g, float lr, float *work) {
    const float mu = (float)c->momentum, wd = (float)c->weight_decay;
    const size_t n = s->numel;
    float *v = s->v;
    for (size_t i = 0; i < n; i++) {
        if (wd != 0) g[i] = g[i] + wd * w[i];
        v[i] = mu * v[i] + (1.0f - mu) * g[i];
    }
    if (s->ndim != 2) {
        for (size_t i = 0; i < n; i++) {
            float u = c->nesterov ? g[i] * (1.0f - mu) + v[i] * mu : v[i];
            w[i] = w[i] - lr * u;
        }
        return;
    }
    const int rows = (int)s->shape[0], cols = (int)s->shape[1];
    const bool transpose = rows > cols;   /* orthogonalise the wide orientation */
    const int m = transpose ? cols : rows, k = transpose ? rows : cols;
    float *X = work, *Y = X + (size_t)m * k, *A = Y + (size_t)m * k, *B = A + (size_t)m * m;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
            size_t i = (size_t)r * cols + j;
            float u = c->nesterov ? g[i] * (1.0f - mu) + v[i] * mu : v[i];
            X[transpose ? (size_t)j * rows + r : i] = u;
        }
    newton_schulz(X, Y, A, B, m, k, c->ns_steps);
    const float ratio = (float)rows / (float)cols;
    const float lr_eff = lr * sqrtf(ratio > 1.0f ? ratio : 1.0f);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
            size_t i = (size_t)r * cols + j;
            w[i] = w[i] - lr_eff * X[transpose ? (size_t)j * rows + r : i];
        }
}

int optimizer_update(Optimizer *o, TrainableTensor *t, size_t n, float lr) {
    if (n != o->n) return error_set("optimizer: %zu tensors, but the state has %zu", n, o->n);
    if (o->cfg.kind == OPT_ADAFACTOR && !o->cfg.adafactor.relative_step && isnan(o->cfg.adafactor.learning_rate) &&
        isnan(lr))
        return error_set("optimizer: adafactor: learning_rate must be set when relative_step is false");
    o->step++;
    for (size_t i = 0; i < n; i++) {
        OptSlot *s = &o->slots[i];
        switch (o->cfg.kind) {
        case OPT_ADAM:
            adam_update(&o->cfg.adam, false, s, t[i].value, t[i].grad, lr, o->step);
            break;
        case OPT_ADAMW:
            adam_update(&o->cfg.adamw, true, s, t[i].value, t[i].grad, lr, o->step);
            break;
        case OPT_SGD:
            sgd_update(&o->cfg.sgd, s, t[i].value, t[i].grad, lr);
            break;
        case OPT_ADAFACTOR:
            adafactor_update(&o->cfg.adafactor, s, t[i].value, t[i].grad, lr, o->step);
            break;
        case OPT_MUON:
            muon_update(&o->cfg.muon, s, t[i].value, t[i].grad, lr, o->ns_work);
            break;
        }
    }
    return 0;
}

/* test_optimizer.c: Adam, AdamW, SGD and Adafactor update rules. 10 steps on
 * a quadratic against PyTorch 1.13 (torch.optim.Adam/AdamW with bias
 * correction, SGD with momentum / nesterov / weight decay; the script is in
 * the comment below), MLX's default Adam (no bias correction) against the
 * formula in double, Adafactor's factored moments against a direct
 * implementation, and the moments carved through the plan. */
#include <math.h>
#include <stdlib.h>
#include "base/alloc.h"
#include "base/error.h"
#include "check.h"
#include "train/optimizer.h"

/* PyTorch reference (python3 with torch 1.13):
 *   w = [0.5, -1, 2, 0.1]; c = [1, 2, 3, 4]; t = [1, 0.5, -1, 0]
 *   loss = sum(c * (w - t)^2); 10 x (backward, step)
 *   Adam(lr=0.1); AdamW(lr=0.1, weight_decay=0.01);
 *   SGD(lr=0.05, momentum=0.9); SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1) */
static const float W0[4] = {0.5f, -1.0f, 2.0f, 0.1f}, C[4] = {1, 2, 3, 4}, T[4] = {1, 0.5f, -1, 0};
static const float REF_ADAM[4] = {1.20332277f, -0.0379533693f, 1.01418841f, 0.0191362314f};
static const float REF_ADAMW[4] = {1.19889367f, -0.0328484923f, 0.999050677f, 0.0188289657f};
static const float REF_SGD[4] = {1.29439461f, 0.493400156f, 0.65196538f, 0.0516678691f};
static const float REF_SGD_NESTEROV[4] = {1.10160863f, 0.393341184f, -0.657887876f, 0.0018529169f};
static const double REF_ADAM_LOSS[10] = {31.7900009, 29.3100033, 27.0116425, 24.8246517, 22.7462997,
                                         20.7954178, 18.9766521, 17.2782898, 15.684577, 14.1889486};
static const double REF_SGD_LOSS[10] = {31.7900009, 16.3268986, 2.38860011, 2.17467856, 11.6238337,
                                        17.8918896, 14.2858772, 5.76936913, 1.32146978, 3.79139328};

static void run(OptimizerConfig *cfg, float lr, int steps, float *w_out, double *losses) {
    float w[4], g[4];
    memcpy(w, W0, sizeof w);
    TrainableTensor t = {.name = "w", .value = w, .grad = g, .numel = 4, .ndim = 1, .shape = {4, 0}};
    Arena arena;
    CHECK(arena_init(&arena, 1 << 16) == 0);
    Carver cv = {&arena, NULL};
    Optimizer o;
    CHECK(optimizer_layout(&o, cfg, &t, 1, &cv) == 0);
    for (int s = 0; s < steps; s++) {
        double loss = 0;
        for (int i = 0; i < 4; i++) { g[i] = 2 * C[i] * (w[i] - T[i]); loss += C[i] * (w[i] - T[i]) * (w[i] - T[i]); }
        if (losses) losses[s] = loss;
        CHECK(optimizer_update(&o, &t, 1, lr) == 0);
    }
    CHECK(o.step == (uint64_t)steps);
    memcpy(w_out, w, sizeof w);
    optimizer_free(&o);
    arena_free(&arena);
}

static void test_torch_trajectories(void) {
    OptimizerConfig cfg;
    float w[4];
    double losses[10];
    optimizer_config_default(&cfg);
    cfg.adam.bias_correction = true;
    run(&cfg, 0.1f, 10, w, losses);
    printf("adam vs torch: rel %.3g\n", rel_error(w, REF_ADAM, 4));
    CHECK(rel_error(w, REF_ADAM, 4) < 1e-5);
    for (int i = 0; i < 10; i++) CHECK_NEAR(losses[i], REF_ADAM_LOSS[i], 1e-5 * REF_ADAM_LOSS[i]);

    optimizer_config_default(&cfg);
    cfg.kind = OPT_ADAMW;
    cfg.adamw.bias_correction = true;
    run(&cfg, 0.1f, 10, w, NULL);
    printf("adamw vs torch: rel %.3g\n", rel_error(w, REF_ADAMW, 4));
    CHECK(rel_error(w, REF_ADAMW, 4) < 1e-5);

    optimizer_config_default(&cfg);
    cfg.kind = OPT_SGD;
    cfg.sgd.momentum = 0.9;
    run(&cfg, 0.05f, 10, w, losses);
    printf("sgd vs torch: rel %.3g\n", rel_error(w, REF_SGD, 4));
    CHECK(rel_error(w, REF_SGD, 4) < 1e-5);
    for (int i = 0; i < 10; i++) CHECK_NEAR(losses[i], REF_SGD_LOSS[i], 1e-5 * REF_SGD_LOSS[i] + 1e-6);

    cfg.sgd.nesterov = true;
    cfg.sgd.weight_decay = 0.1;
    run(&cfg, 0.05f, 10, w, NULL);
    CHECK(rel_error(w, REF_SGD_NESTEROV, 4) < 1e-5);
}

/* MLX's default Adam has no bias correction: w -= lr * m / (sqrt(v) + eps). */
static void test_mlx_adam_default(void) {
    OptimizerConfig cfg;
    optimizer_config_default(&cfg);
    CHECK(cfg.adam.betas[0] == 0.9 && cfg.adam.betas[1] == 0.999 && cfg.adam.eps == 1e-8 && !cfg.adam.bias_correction);
    CHECK(cfg.adamw.weight_decay == 0.01 && cfg.sgd.momentum == 0 && cfg.adafactor.relative_step);
    float w[4];
    run(&cfg, 0.01f, 5, w, NULL);
    double wd[4], m[4] = {0}, v[4] = {0};
    for (int i = 0; i < 4; i++) wd[i] = W0[i];
    for (int s = 0; s < 5; s++)
        for (int i = 0; i < 4; i++) {
            double g = 2 * C[i] * (wd[i] - T[i]);
            m[i] = 0.9 * m[i] + 0.1 * g;
            v[i] = 0.999 * v[i] + 0.001 * g * g;
            wd[i] -= 0.01 * m[i] / (sqrt(v[i]) + 1e-8);
        }
    float wf[4];
    for (int i = 0; i < 4; i++) wf[i] = (float)wd[i];
    CHECK(rel_error(w, wf, 4) < 1e-6);
    /* The first step moves each weight by lr * 0.1 / sqrt(0.001) = 0.0316 (no bias correction). */
    run(&cfg, 0.01f, 1, w, NULL);
    CHECK_NEAR(fabs(w[0] - W0[0]), 0.01 * 0.1 / sqrt(0.001), 1e-6);
}

/* Adafactor on a 2-D tensor: factored row/col moments, relative step. */
static void test_adafactor(void) {
    enum { R = 3, Cc = 4 };
    float w[R * Cc], g[R * Cc];
    double wd[R * Cc];
    for (int i = 0; i < R * Cc; i++) { w[i] = (float)(0.1 * (i - 5)); wd[i] = w[i]; }
    TrainableTensor t = {.name = "w2", .value = w, .grad = g, .numel = R * Cc, .ndim = 2, .shape = {R, Cc}};
    OptimizerConfig cfg;
    optimizer_config_default(&cfg);
    cfg.kind = OPT_ADAFACTOR;
    CHECK(optimizer_state_bytes(&cfg, &t) == (R + Cc) * sizeof(float));
    MemPlan plan = {0};
    Carver planner = {NULL, &plan};
    Optimizer po;
    CHECK(optimizer_layout(&po, &cfg, &t, 1, &planner) == 0);
    CHECK(plan_class_bytes(&plan, MEM_OPTIMIZER) >= (R + Cc) * sizeof(float) && po.slots[0].row == NULL);
    optimizer_free(&po);
    Arena arena;
    CHECK(arena_init(&arena, plan_arena_bytes(&plan)) == 0);
    plan_free(&plan);
    Carver cv = {&arena, NULL};
    Optimizer o;
    CHECK(optimizer_layout(&o, &cfg, &t, 1, &cv) == 0);
    double row[R] = {0}, col[Cc] = {0};
    for (int step = 1; step <= 3; step++) {
        double gd[R * Cc];
        for (int i = 0; i < R * Cc; i++) { gd[i] = sin(1.0 + i * step) + 0.5 * wd[i]; g[i] = (float)gd[i]; }
        /* Reference: MLX Adafactor.apply_single in double. */
        double prms = 0;
        for (int i = 0; i < R * Cc; i++) prms += wd[i] * wd[i];
        prms = sqrt(prms / (R * Cc));
        double rel = fmin(1e-2, 1 / sqrt(step)), lr = fmax(1e-3, prms) * rel, b2 = 1 - pow(step, -0.8);
        for (int r = 0; r < R; r++) { double a = 0; for (int j = 0; j < Cc; j++) a += gd[r * Cc + j] * gd[r * Cc + j] + 1e-30; row[r] = b2 * row[r] + (1 - b2) * a / Cc; }
        for (int j = 0; j < Cc; j++) { double a = 0; for (int r = 0; r < R; r++) a += gd[r * Cc + j] * gd[r * Cc + j] + 1e-30; col[j] = b2 * col[j] + (1 - b2) * a / R; }
        double rm = 0; for (int r = 0; r < R; r++) rm += row[r]; rm /= R;
        double u[R * Cc], urms = 0;
        for (int r = 0; r < R; r++) for (int j = 0; j < Cc; j++) { u[r * Cc + j] = gd[r * Cc + j] / sqrt(row[r] / rm) / sqrt(col[j]); urms += u[r * Cc + j] * u[r * Cc + j]; }
        urms = sqrt(urms / (R * Cc));
        for (int i = 0; i < R * Cc; i++) wd[i] -= lr * u[i] / fmax(1.0, urms);
        CHECK(optimizer_update(&o, &t, 1, 1e-5f) == 0);
    }
    float wf[R * Cc];
    for (int i = 0; i < R * Cc; i++) wf[i] = (float)wd[i];
    printf("adafactor vs formula: rel %.3g\n", rel_error(w, wf, R * Cc));
    CHECK(rel_error(w, wf, R * Cc) < 1e-5);
    OptStateView views[4];
    CHECK(optimizer_state_views(&o, 0, views) == 2 && !strcmp(views[0].key, "row") && views[1].numel == Cc);
    optimizer_free(&o);
    arena_free(&arena);
}

int main(void) {
    test_torch_trajectories();
    test_mlx_adam_default();
    test_adafactor();
    OptimizerKind k;
    CHECK(optimizer_kind_from_name("adamw", &k) == 0 && k == OPT_ADAMW);
    CHECK(optimizer_kind_from_name("muon", &k) < 0);
    CHECK_ERROR_CONTAINS("unknown optimizer \"muon\"");
    return check_finish("train/optimizer");
}

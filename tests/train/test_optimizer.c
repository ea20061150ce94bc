/* test_optimizer.c: Adam, AdamW, SGD, Adafactor and Muon update rules. 10
 * steps on a quadratic against PyTorch 1.13 (torch.optim.Adam/AdamW with bias
 * correction, SGD with momentum / nesterov / weight decay; the script is in
 * the comment below), MLX's default Adam (no bias correction) against the
 * formula in double, Adafactor's factored moments against a direct
 * implementation, Muon against tests/ref/muon.json (an independent PyTorch
 * implementation of MLX's Muon, tests/ref/gen_muon.py: tall, wide, square
 * and 1-D tensors, five settings), and the moments carved through the plan. */
#include <jansson.h>
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

/* Floats of a JSON list into dst (n of them). */
static int json_floats(json_t *a, float *dst, size_t n) {
    if (!json_is_array(a) || json_array_size(a) != n) return -1;
    for (size_t i = 0; i < n; i++) dst[i] = (float)json_number_value(json_array_get(a, i));
    return 0;
}

/* Muon against the PyTorch reference of MLX's Muon (tests/ref/muon.json). */
static void test_muon(void) {
    json_error_t jerr;
    json_t *doc = json_load_file("tests/ref/muon.json", 0, &jerr);
    CHECK_MSG(doc != NULL, "tests/ref/muon.json: %s", jerr.text);
    if (!doc) return;
    static const char *const NAMES[] = {"tall", "wide", "square", "vector"};
    enum { NT = 4, MAXN = 32 };
    json_t *tensors = json_object_get(doc, "tensors"), *settings = json_object_get(doc, "settings");
    const float lr = (float)json_number_value(json_object_get(doc, "lr"));
    const int updates = (int)json_integer_value(json_object_get(doc, "updates"));
    float w[NT][MAXN], g[NT][MAXN], c[NT][MAXN], tg[NT][MAXN];
    TrainableTensor t[NT];
    for (int k = 0; k < NT; k++) {
        json_t *tj = json_object_get(tensors, NAMES[k]), *shape = json_object_get(tj, "shape");
        memset(&t[k], 0, sizeof t[k]);
        snprintf(t[k].name, sizeof t[k].name, "%s", NAMES[k]);
        t[k].ndim = (int)json_array_size(shape);
        t[k].numel = 1;
        for (int d = 0; d < t[k].ndim; d++) {
            t[k].shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
            t[k].numel *= (size_t)t[k].shape[d];
        }
        CHECK(t[k].numel <= MAXN);
        CHECK(json_floats(json_object_get(tj, "c"), c[k], t[k].numel) == 0);
        CHECK(json_floats(json_object_get(tj, "t"), tg[k], t[k].numel) == 0);
        t[k].value = w[k];
        t[k].grad = g[k];
    }
    double worst_all = 0;
    size_t n_settings = json_array_size(settings);
    CHECK(n_settings == 5);
    for (size_t si = 0; si < n_settings; si++) {
        json_t *sj = json_array_get(settings, si), *after = json_object_get(sj, "after");
        const char *name = json_string_value(json_object_get(sj, "name"));
        OptimizerConfig cfg;
        optimizer_config_default(&cfg);
        CHECK(cfg.muon.momentum == 0.95 && cfg.muon.weight_decay == 0.01 && cfg.muon.nesterov && cfg.muon.ns_steps == 5);
        cfg.kind = OPT_MUON;
        cfg.muon.momentum = json_number_value(json_object_get(sj, "momentum"));
        cfg.muon.weight_decay = json_number_value(json_object_get(sj, "weight_decay"));
        cfg.muon.nesterov = json_is_true(json_object_get(sj, "nesterov"));
        cfg.muon.ns_steps = (int)json_integer_value(json_object_get(sj, "ns_steps"));
        for (int k = 0; k < NT; k++) {
            json_t *tj = json_object_get(tensors, NAMES[k]);
            CHECK(json_floats(json_object_get(tj, "w0"), w[k], t[k].numel) == 0);
        }
        /* the plan has the momentum of every tensor and the Newton-Schulz
         * workspace of the largest matrix: tall (6, 4): 2*4*6 + 2*4*4 floats */
        MemPlan plan = {0};
        Carver planner = {NULL, &plan};
        Optimizer po;
        CHECK(optimizer_layout(&po, &cfg, t, NT, &planner) == 0);
        optimizer_free(&po);
        CHECK(plan_class_bytes(&plan, MEM_OPTIMIZER) >= (24 + 24 + 16 + 5 + 80) * sizeof(float));
        Arena arena;
        CHECK(arena_init(&arena, plan_arena_bytes(&plan)) == 0);
        plan_free(&plan);
        Carver cv = {&arena, NULL};
        Optimizer o;
        CHECK(optimizer_layout(&o, &cfg, t, NT, &cv) == 0);
        CHECK(arena.used == arena.capacity);
        double worst = 0;
        for (int u = 1; u <= updates; u++) {
            for (int k = 0; k < NT; k++)
                for (size_t i = 0; i < t[k].numel; i++) g[k][i] = 2 * c[k][i] * (w[k][i] - tg[k][i]);
            CHECK(optimizer_update(&o, t, NT, lr) == 0);
            char key[16];
            snprintf(key, sizeof key, "%d", u);
            json_t *ref = json_object_get(after, key);
            if (!ref) continue;
            for (int k = 0; k < NT; k++) {
                json_t *rk = json_object_get(ref, NAMES[k]);
                for (size_t i = 0; i < t[k].numel; i++) {
                    double e = fabs(w[k][i] - json_number_value(json_array_get(rk, i)));
                    if (e > worst) worst = e;
                }
            }
        }
        OptStateView views[4];
        CHECK(optimizer_state_views(&o, 0, views) == 1 && !strcmp(views[0].key, "v") && views[0].numel == 24);
        printf("muon %-22s vs PyTorch (float64): max abs %.3g after %d updates (PyTorch float32: %.3g)\n", name, worst,
               updates, json_number_value(json_object_get(sj, "float32_gap")));
        CHECK_MSG(worst < 2e-6, "muon %s: max abs error %.3g", name, worst);
        if (worst > worst_all) worst_all = worst;
        optimizer_free(&o);
        arena_free(&arena);
    }
    printf("worst muon max abs error %.3g\n", worst_all);
    json_decref(doc);
}

int main(void) {
    test_torch_trajectories();
    test_mlx_adam_default();
    test_adafactor();
    test_muon();
    OptimizerKind k;
    CHECK(optimizer_kind_from_name("adamw", &k) == 0 && k == OPT_ADAMW);
    CHECK(optimizer_kind_from_name("muon", &k) == 0 && k == OPT_MUON);
    CHECK(optimizer_kind_from_name("lion", &k) < 0);
    CHECK_ERROR_CONTAINS("unknown optimizer \"lion\" (expected adam, adamw, muon, sgd or adafactor)");
    return check_finish("train/optimizer");
}

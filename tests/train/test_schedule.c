/* test_schedule.c: MLX's schedules and MLX-LM's warmup join: 50 steps of
 * ten schedules (each kind, with and without warm-up) against
 * mlx_schedules.expected, the output of an independent Python
 * implementation written from mlx/optimizers/schedulers.py and
 * mlx_lm/tuner/utils.py (tests/train/mlx_schedules.py): the float64 value
 * to 1e-12 relative, and the value MLX prints ({:.3e} of its float32) to
 * the printed digits; plus a few values derived by hand and the errors. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "base/error.h"
#include "check.h"
#include "train/schedule.h"

/* The cases of mlx_schedules.py, by name. */
static const struct {
    const char *name, *kind;
    double args[3];
    int n_args, warmup;
    double warmup_init;
} CASES[] = {
    {"cosine", "cosine_decay", {1e-3, 40, 1e-5}, 3, 0, 0},
    {"cosine_no_end", "cosine_decay", {1e-3, 40, 0}, 2, 0, 0},
    {"cosine_warmup", "cosine_decay", {1e-3, 30, 1e-4}, 3, 10, 1e-6},
    {"cosine_demo", "cosine_decay", {5e-4, 180, 1e-4}, 3, 20, 0},
    {"linear", "linear_schedule", {1e-3, 1e-5, 30}, 3, 0, 0},
    {"linear_warmup", "linear_schedule", {2e-3, 1e-4, 25}, 3, 5, 0},
    {"exponential", "exponential_decay", {1e-3, 0.9, 0}, 2, 0, 0},
    {"exponential_warmup", "exponential_decay", {1e-3, 0.95, 0}, 2, 5, 1e-5},
    {"step", "step_decay", {1e-3, 0.5, 7}, 3, 0, 0},
    {"step_warmup", "step_decay", {1e-3, 0.5, 6}, 3, 8, 1e-4},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

static Schedule make(const char *name, const double *args, int n, int warmup, double warmup_init);

/* Every line of the expected file against schedule_lr. */
static void test_against_python(void) {
    FILE *f = fopen("tests/train/mlx_schedules.expected", "r");
    CHECK_MSG(f != NULL, "cannot open tests/train/mlx_schedules.expected");
    if (!f) return;
    char line[256], printed[32], want[32];
    Schedule s = {0};
    int have = -1, cases = 0, values = 0, digits_differ = 0;
    double worst = 0;
    while (fgets(line, sizeof line, f)) {
        char name[64];
        if (sscanf(line, "case %63s", name) == 1) {
            have = -1;
            for (size_t i = 0; i < N_CASES; i++)
                if (!strcmp(CASES[i].name, name)) have = (int)i;
            CHECK_MSG(have >= 0, "case %s of the expected file is not in this test", name);
            if (have >= 0)
                s = make(CASES[have].kind, CASES[have].args, CASES[have].n_args, CASES[have].warmup,
                         CASES[have].warmup_init);
            cases++;
            continue;
        }
        int step;
        double v64;
        if (have < 0 || sscanf(line, "%d %lf %31s", &step, &v64, want) != 3) continue;
        double got = schedule_lr(&s, (uint64_t)step);
        double rel = fabs(got - v64) / (fabs(v64) > 0 ? fabs(v64) : 1);
        if (rel > worst) worst = rel;
        CHECK_MSG(rel < 1e-12, "%s step %d: %.17g, Python %.17g", CASES[have].name, step, got, v64);
        snprintf(printed, sizeof printed, "%.3e", got);
        if (strcmp(printed, want)) digits_differ++;
        CHECK_MSG(!strcmp(printed, want), "%s step %d: prints %s, MLX (float32) %s", CASES[have].name, step,
                  printed, want);
        values++;
    }
    fclose(f);
    printf("schedules vs Python: %d cases, %d values, worst rel %.3g, %d printed values differ\n", cases, values,
           worst, digits_differ);
    CHECK(cases == (int)N_CASES && values == 50 * (int)N_CASES);
}

static Schedule make(const char *name, const double *args, int n, int warmup, double warmup_init) {
    ScheduleConfig c = {.set = true, .n_arguments = n, .warmup = warmup, .warmup_init = warmup_init};
    snprintf(c.name, sizeof c.name, "%s", name);
    for (int i = 0; i < n; i++) c.arguments[i] = args[i];
    Schedule s;
    CHECK(schedule_init(&s, &c, 123.0) == 0);
    return s;
}

int main(void) {
    test_against_python();
    Schedule s;
    /* Constant: the learning rate, whatever the step. */
    CHECK(schedule_init(&s, NULL, 1e-5) == 0);
    CHECK(schedule_lr(&s, 0) == 1e-5 && schedule_lr(&s, 999) == 1e-5);

    /* cosine_decay(0.1, 1000): 0.1 * 0.5 * (1 + cos(pi * s / 1000)). */
    s = make("cosine_decay", (double[]){0.1, 1000}, 2, 0, 0);
    CHECK_NEAR(schedule_lr(&s, 0), 0.1, 1e-15);
    CHECK_NEAR(schedule_lr(&s, 4), 0.1 * 0.5 * (1 + cos(M_PI * 4 / 1000)), 1e-15);
    CHECK_NEAR(schedule_lr(&s, 4), 0.0999960522, 1e-9);   /* MLX docstring: 0.0999961 after 5 updates */
    CHECK_NEAR(schedule_lr(&s, 500), 0.05, 1e-12);
    CHECK_NEAR(schedule_lr(&s, 1000), 0.0, 1e-15);
    CHECK_NEAR(schedule_lr(&s, 5000), 0.0, 1e-15);
    /* With an end value the decay runs from init to end: end + decay * (init - end)
     * (MLX since 2024; before, max(init * decay, end)). */
    s = make("cosine_decay", (double[]){1e-5, 1000, 1e-7}, 3, 0, 0);
    CHECK_NEAR(schedule_lr(&s, 1000), 1e-7, 1e-20);
    CHECK_NEAR(schedule_lr(&s, 500), 1e-7 + 0.5 * (1e-5 - 1e-7), 1e-20);
    CHECK_NEAR(schedule_lr(&s, 990), 1e-7 + 0.5 * (1 + cos(0.99 * M_PI)) * (1e-5 - 1e-7), 1e-20);
    CHECK(schedule_lr(&s, 990) > 1e-7);                         /* the old formula floored it at 1e-7 */
    CHECK_NEAR(schedule_lr(&s, 250), 1e-7 + 0.5 * (1 + cos(M_PI / 4)) * (1e-5 - 1e-7), 1e-18);
    /* step_decay with a fractional step_size: step // 2.5 (MLX floor-divides by the float) */
    s = make("step_decay", (double[]){1.0, 0.5, 2.5}, 3, 0, 0);
    CHECK_NEAR(schedule_lr(&s, 4), 0.5, 1e-15);
    CHECK_NEAR(schedule_lr(&s, 5), 0.25, 1e-15);

    /* linear_schedule(0, 0.1, 100): 0.001 per step, end after 100. */
    s = make("linear_schedule", (double[]){0, 0.1, 100}, 3, 0, 0);
    CHECK_NEAR(schedule_lr(&s, 0), 0, 1e-15);
    CHECK_NEAR(schedule_lr(&s, 37), 0.037, 1e-15);
    CHECK_NEAR(schedule_lr(&s, 101), 0.1, 1e-15);

    /* exponential_decay(0.1, 0.9): MLX doc, 0.06561 after 4 updates (step 4). */
    s = make("exponential_decay", (double[]){0.1, 0.9}, 2, 0, 0);
    CHECK_NEAR(schedule_lr(&s, 4), 0.06561, 1e-12);
    /* step_decay(0.1, 0.9, 10): MLX doc, 0.081 after 21 updates. */
    s = make("step_decay", (double[]){0.1, 0.9, 10}, 3, 0, 0);
    CHECK_NEAR(schedule_lr(&s, 9), 0.1, 1e-15);
    CHECK_NEAR(schedule_lr(&s, 10), 0.09, 1e-15);
    CHECK_NEAR(schedule_lr(&s, 21), 0.081, 1e-15);

    /* MLX-LM's example: {cosine_decay, warmup 100, warmup_init 1e-7, [1e-5, 1000, 1e-7]}.
     * Update k uses step k-1. Step 0: warmup_init. Step 50: 1e-7 + 50*(1e-5-1e-7)/100.
     * Steps 100 and 101 are both the peak (the join is at W+1, the cosine restarts at 0). */
    s = make("cosine_decay", (double[]){1e-5, 1000, 1e-7}, 3, 100, 1e-7);
    CHECK_NEAR(schedule_lr(&s, 0), 1e-7, 1e-20);
    CHECK_NEAR(schedule_lr(&s, 50), 1e-7 + 50 * (1e-5 - 1e-7) / 100, 1e-20);
    CHECK_NEAR(schedule_lr(&s, 100), 1e-5, 1e-20);
    CHECK_NEAR(schedule_lr(&s, 101), 1e-5, 1e-20);
    CHECK_NEAR(schedule_lr(&s, 102), 1e-7 + 0.5 * (1 + cos(M_PI / 1000)) * (1e-5 - 1e-7), 1e-20);
    CHECK_NEAR(schedule_lr(&s, 601), 1e-7 + 0.5 * (1e-5 - 1e-7), 1e-18);
    /* Default warmup_init 0: the first update has LR 0. */
    s = make("constant", (double[]){2e-4}, 1, 10, 0);
    CHECK(schedule_lr(&s, 0) == 0);
    CHECK_NEAR(schedule_lr(&s, 5), 1e-4, 1e-18);
    CHECK(schedule_lr(&s, 11) == 2e-4 && schedule_lr(&s, 10000) == 2e-4);

    /* Errors. */
    ScheduleConfig bad = {.set = true, .n_arguments = 1, .arguments = {1e-5}};
    snprintf(bad.name, sizeof bad.name, "cosine_decay");
    CHECK(schedule_init(&s, &bad, 0) < 0);
    CHECK_ERROR_CONTAINS("cosine_decay takes 2 to 3 arguments, got 1");
    snprintf(bad.name, sizeof bad.name, "warmup_cosine");
    CHECK(schedule_init(&s, &bad, 0) < 0);
    CHECK_ERROR_CONTAINS("unknown name \"warmup_cosine\"");
    ScheduleConfig lin = {.set = true, .n_arguments = 3, .arguments = {0, 1, 0}};
    snprintf(lin.name, sizeof lin.name, "linear_schedule");
    CHECK(schedule_init(&s, &lin, 0) < 0);
    CHECK_ERROR_CONTAINS("steps must be greater than 0");
    return check_finish("train/schedule");
}

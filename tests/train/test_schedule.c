/* test_schedule.c: MLX's schedules and MLX-LM's warmup join, against values
 * computed by hand from the formulas in mlx/optimizers/schedulers.py. */
#include <math.h>
#include "base/error.h"
#include "check.h"
#include "train/schedule.h"

static Schedule make(const char *name, const double *args, int n, int warmup, double warmup_init) {
    ScheduleConfig c = {.set = true, .n_arguments = n, .warmup = warmup, .warmup_init = warmup_init};
    snprintf(c.name, sizeof c.name, "%s", name);
    for (int i = 0; i < n; i++) c.arguments[i] = args[i];
    Schedule s;
    CHECK(schedule_init(&s, &c, 123.0) == 0);
    return s;
}

int main(void) {
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
    /* With an end value the decay is floored at it (max(init*decay, end)). */
    s = make("cosine_decay", (double[]){1e-5, 1000, 1e-7}, 3, 0, 0);
    CHECK_NEAR(schedule_lr(&s, 1000), 1e-7, 1e-20);
    CHECK_NEAR(schedule_lr(&s, 990), 1e-7, 1e-20);            /* 1e-5*0.5*(1+cos(0.99pi)) = 2.47e-9 < 1e-7 */
    CHECK_NEAR(schedule_lr(&s, 250), 1e-5 * 0.5 * (1 + cos(M_PI / 4)), 1e-18);

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
    CHECK_NEAR(schedule_lr(&s, 102), 1e-5 * 0.5 * (1 + cos(M_PI / 1000)), 1e-20);
    CHECK_NEAR(schedule_lr(&s, 601), 1e-5 * 0.5, 1e-18);
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

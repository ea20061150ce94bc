/* schedule.c: MLX's learning-rate schedules (mlx/optimizers/schedulers.py)
 * and MLX-LM's build_schedule warmup join (tuner/utils.py). */
#include "train/schedule.h"
#include <math.h>
#include <string.h>
#include "base/error.h"

static const struct {
    const char *name;
    ScheduleKind kind;
    int min_args, max_args;
    const char *signature;
} KINDS[] = {
    {"constant", SCHED_CONSTANT, 1, 1, "constant(value)"},
    {"cosine_decay", SCHED_COSINE_DECAY, 2, 3, "cosine_decay(init, decay_steps, end=0)"},
    {"linear_schedule", SCHED_LINEAR, 3, 3, "linear_schedule(init, end, steps)"},
    {"exponential_decay", SCHED_EXPONENTIAL_DECAY, 2, 2, "exponential_decay(init, decay_rate)"},
    {"step_decay", SCHED_STEP_DECAY, 3, 3, "step_decay(init, decay_rate, step_size)"},
};
#define N_KINDS (sizeof KINDS / sizeof KINDS[0])

int schedule_init(Schedule *s, const ScheduleConfig *cfg, double learning_rate) {
    memset(s, 0, sizeof *s);
    if (!cfg || !cfg->set) {
        s->kind = SCHED_CONSTANT;
        s->args[0] = learning_rate;
        return 0;
    }
    size_t k = 0;
    while (k < N_KINDS && strcmp(KINDS[k].name, cfg->name)) k++;
    if (k == N_KINDS)
        return error_set("lr_schedule: unknown name \"%s\" (expected constant, cosine_decay, linear_schedule, "
                         "exponential_decay or step_decay)", cfg->name);
    if (cfg->n_arguments < KINDS[k].min_args || cfg->n_arguments > KINDS[k].max_args)
        return error_set("lr_schedule: %s takes %d to %d arguments, got %d: %s", cfg->name,
                         KINDS[k].min_args, KINDS[k].max_args, cfg->n_arguments, KINDS[k].signature);
    s->kind = KINDS[k].kind;
    for (int i = 0; i < cfg->n_arguments; i++) {
        if (!isfinite(cfg->arguments[i]))
            return error_set("lr_schedule: %s: argument %d is not a finite number", cfg->name, i + 1);
        s->args[i] = cfg->arguments[i];
    }
    /* MLX's own checks and messages (schedulers.py) */
    if (s->kind == SCHED_COSINE_DECAY && s->args[1] < 1)
        return error_set("lr_schedule: cosine_decay: decay_steps must be greater than 0, but got %g.", s->args[1]);
    if (s->kind == SCHED_LINEAR && s->args[2] < 1)
        return error_set("lr_schedule: linear_schedule: steps must be greater than 0, but got %g.", s->args[2]);
    if (s->kind == SCHED_STEP_DECAY && s->args[2] < 1)
        return error_set("lr_schedule: step_decay: step_size must be greater than 0, but got %g.", s->args[2]);
    if (cfg->warmup < 0) return error_set("lr_schedule: warmup must be >= 0, got %d", cfg->warmup);
    s->warmup = cfg->warmup;
    s->warmup_init = cfg->warmup_init;
    return 0;
}

static double main_schedule(const Schedule *s, double step) {
    const double *a = s->args;
    switch (s->kind) {
    case SCHED_CONSTANT: return a[0];
    case SCHED_COSINE_DECAY: {   /* end + decay * (init - end), MLX since 2024 (mlx #1138) */
        double d = a[1], st = step < d ? step : d;
        double decay = 0.5 * (1.0 + cos(M_PI / d * st));
        return a[2] + decay * (a[0] - a[2]);
    }
    case SCHED_LINEAR: {
        double st = step < a[2] ? step : a[2];
        return st * ((a[1] - a[0]) / a[2]) + a[0];
    }
    case SCHED_EXPONENTIAL_DECAY: return a[0] * pow(a[1], step);
    case SCHED_STEP_DECAY: return a[0] * pow(a[1], floor(step / a[2]));   /* step // step_size */
    }
    return a[0];
}

double schedule_lr(const Schedule *s, uint64_t updates_done) {
    double step = (double)updates_done;
    if (s->warmup > 0) {
        double boundary = s->warmup + 1.0;
        if (step < boundary) {  /* linear_schedule(warmup_init, peak, W) */
            double st = step < s->warmup ? step : s->warmup;
            return st * ((s->args[0] - s->warmup_init) / s->warmup) + s->warmup_init;
        }
        return main_schedule(s, step - boundary);
    }
    return main_schedule(s, step);
}

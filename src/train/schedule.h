/* schedule.h: learning-rate schedules as MLX defines them (cosine_decay,
 * linear_schedule, exponential_decay, step_decay; `constant` is lmtune's:
 * MLX has no such schedule, the plain learning rate is constant) and
 * MLX-LM's warmup joining rule: a linear warmup from warmup_init to the peak
 * (the schedule's first argument) over W steps, joined to the main schedule
 * at boundary W + 1, after which the main schedule restarts at its own step
 * 0. The schedule is evaluated at the number of updates already done (MLX's
 * pre-increment step), so update k uses step k - 1. */
#ifndef LT_SCHEDULE_H
#define LT_SCHEDULE_H
#include <stdbool.h>
#include <stdint.h>

typedef enum {
    SCHED_CONSTANT,
    SCHED_COSINE_DECAY,
    SCHED_LINEAR,
    SCHED_EXPONENTIAL_DECAY,
    SCHED_STEP_DECAY
} ScheduleKind;

#define SCHED_MAX_ARGS 4
typedef struct {
    bool set;                       /* lr_schedule was given (else: constant learning_rate) */
    char name[32];                  /* MLX name: "cosine_decay", ... */
    double arguments[SCHED_MAX_ARGS];
    int n_arguments;
    int warmup;                     /* W (0: none) */
    double warmup_init;             /* 0.0 */
} ScheduleConfig;

typedef struct {
    ScheduleKind kind;
    double args[SCHED_MAX_ARGS];    /* arguments with MLX's defaults filled in */
    int warmup;
    double warmup_init;
} Schedule;

/* Builds the schedule; without cfg->set it is the constant `learning_rate`.
 * Errors name the schedule and the bad argument. */
int schedule_init(Schedule *s, const ScheduleConfig *cfg, double learning_rate);
/* Learning rate for the update that follows `updates_done` updates. */
double schedule_lr(const Schedule *s, uint64_t updates_done);
#endif

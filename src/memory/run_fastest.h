/* run_fastest.h: the fastest configuration of a training run that fits a
 * memory limit. For the same effective batch (micro-batch x accumulation
 * steps), every micro-batch that divides it and every dtype the frozen
 * weights can be used in (as stored, or bf16 from an f32 or f16 file) is
 * planned; where it does not fit as asked, the fewest checkpointed blocks
 * that make it fit (run_ckpt.h) are added. Each is timed from the model's
 * FLOPs at the GEMM rates the start-up probe measured (run_step_cost), and
 * the fastest that fits is the answer `lmtune plan --memory-limit` prints
 * next to the configuration asked for. */
#ifndef LT_RUN_FASTEST_H
#define LT_RUN_FASTEST_H
#include <stdio.h>
#include "memory/run_plan.h"

typedef struct {
    RunShape shape;         /* batch_size, accumulation, checkpointed blocks, weights dtype */
    size_t total;           /* planned bytes */
    bool fits;
    double seconds;         /* estimated per step (all micro-batches of one update) */
    double gflop;           /* per step */
} RunConfig;

#define RUN_FASTEST_MAX 64
typedef struct {
    RunConfig asked;
    RunConfig list[RUN_FASTEST_MAX];    /* every configuration planned */
    int n;
    int best;               /* index into list of the fastest that fits; -1: none */
} RunFastest;

int run_fastest(const RunShape *asked, const RunInputs *in, RunFastest *out);
/* The flags that select a configuration: "--batch-size 2 --grad-accumulation-steps 2 ..." */
void run_config_flags(const RunConfig *c, char *buf, size_t n);
void run_fastest_print(const RunFastest *f, const RunShape *asked, FILE *out);
#endif

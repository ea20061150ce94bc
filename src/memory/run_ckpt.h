/* run_ckpt.h: what a training micro-batch costs, and which blocks to
 * checkpoint under a memory limit (--grad-checkpoint auto, and
 * --batch-size auto when no micro-batch fits without). */
#ifndef LT_RUN_CKPT_H
#define LT_RUN_CKPT_H
#include <stdio.h>
#include "memory/run_plan.h"

/* One micro-batch of the run's widest shape (every position counted). */
typedef struct {
    double flops;           /* every product and attention, recompute of the checkpointed blocks included */
    double seconds;         /* at the probe's rates: per dtype, times the run's threads */
    double recompute_flops[MODEL_MAX_BLOCKS];    /* what checkpointing block l costs */
    double recompute_seconds[MODEL_MAX_BLOCKS];
    double gflops_f32, gflops_bf16;              /* the rates used (all threads) */
    int accumulation;       /* micro-batches per step */
} RunCost;
int run_step_cost(const RunShape *a, const RunInputs *in, RunCost *out);

typedef struct {
    int count;              /* blocks chosen; 0: none needed; -1: nothing fits */
    int trainable;
    BlockSet set;
    double flops, seconds;  /* recompute per micro-batch */
    double gflops_f32;
    size_t total_before, total_after;   /* plan without checkpointing, and with the set */
} RunCkptChoice;
/* The fewest trainable blocks whose checkpointing makes the plan fit
 * a->memory_limit, the cheapest to recompute among sets of that size. */
int run_ckpt_choose(const RunShape *a, const RunInputs *in, RunCkptChoice *out);
/* With a->ckpt_auto: makes the choice, sets a->ckpt_blocks and prints it
 * (blocks, memory saved, recompute FLOPs and seconds per step). */
int run_choose_checkpoint(RunShape *a, const RunInputs *in, FILE *out);
/* The choice's line: blocks, memory saved, recompute FLOPs and seconds per step. */
void run_ckpt_print(const RunCkptChoice *ch, const RunShape *a, FILE *out);
/* "off", "on" (every block) or "blocks 3,5-7". */
void run_ckpt_text(const ModelSpec *spec, char *buf, size_t n);
#endif

/* plan.h: the memory plan of a run. Every buffer a run will hold is one
 * entry (class, name, bytes). The same walk that records the entries in
 * planning mode carves them from the arena in allocation mode (carve()), so
 * the plan and the real layout cannot drift. Entries outside the arena
 * (mapped weight files, the tokenised data set, library scratch, the
 * process baseline) are recorded as notes so the total is the process's. */
#ifndef LT_PLAN_H
#define LT_PLAN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "base/arena.h"

typedef enum {
    MEM_FROZEN_WEIGHTS,   /* base matrices (mapped file pages or converted copies) */
    MEM_FROZEN_SMALL,     /* norms and biases converted to fp32 */
    MEM_TRAINABLE,        /* LoRA/DoRA/full parameters (fp32) */
    MEM_GRADIENTS,        /* their gradients (fp32); also the accumulation sum */
    MEM_OPTIMIZER,        /* optimizer moments (fp32) */
    MEM_ACTIVATIONS,      /* saved activations of trainable blocks */
    MEM_CHECKPOINTS,      /* block inputs kept with --grad-checkpoint */
    MEM_RECOMPUTE,        /* one block's activations rebuilt in the backward pass */
    MEM_BACKWARD_SCRATCH, /* activation gradients of the block in flight */
    MEM_LMHEAD,           /* LM head + cross-entropy chunk */
    MEM_ATTENTION,        /* attention workspace */
    MEM_KV_CACHE,         /* generation */
    MEM_DATASET,          /* tokenised data set and batch buffers */
    MEM_LIBRARY,          /* oneDNN scratch, OpenMP stacks */
    MEM_RUNTIME,          /* process baseline: code, libraries, allocator */
    MEM_CLASS_COUNT
} MemClass;

typedef struct {
    MemClass cls;
    char name[80];
    size_t bytes;     /* as consumed from the arena (rounded) when in_arena */
    bool in_arena;
} PlanEntry;

typedef struct {
    PlanEntry *entries;
    size_t n, cap;
    void *owned;      /* heap data the plan's model spec points to (freed by plan_free) */
} MemPlan;

const char *mem_class_name(MemClass c);
int plan_note(MemPlan *p, MemClass c, const char *name, size_t bytes, bool in_arena);
size_t plan_total(const MemPlan *p);
/* The start-up probe's transient (matmul_probe's rss_above_end: its buffers
 * and primitives alive, above the baseline it leaves) on top of the plan's
 * baseline and data is a floor of the run's peak: when it is above the
 * plan's total (a tiny model, generating a few tokens), the difference is
 * noted (MEM_RUNTIME, measured), so the plan is never below what the process
 * reaches before its first step. Call last. */
int plan_note_startup_peak(MemPlan *p);
size_t plan_arena_bytes(const MemPlan *p);
size_t plan_class_bytes(const MemPlan *p, MemClass c);
void plan_free(MemPlan *p);
/* The table of classes (every entry with verbose), the arena and the total. */
void plan_print_table(const MemPlan *p, bool verbose, FILE *out);
/* "the run needs X but --memory-limit is Y; largest parts: A a, B b, C c"
 * into msg; returns its length. */
size_t plan_limit_text(const MemPlan *p, size_t limit, char *msg, size_t cap);

/* Planning mode: arena == NULL, every carve records an entry and yields NULL.
 * Allocation mode: plan may be NULL; carve takes the block from the arena. */
typedef struct {
    Arena *arena;
    MemPlan *plan;
} Carver;

/* *out = zeroed block of `bytes` (NULL in planning mode). -1 + error when the
 * arena is exhausted (a planner bug) or the plan cannot grow. */
int carve(Carver *cv, MemClass c, const char *name, size_t bytes, void **out);
#define CARVE(cv, cls, name, bytes, ptr) TRY(carve((cv), (cls), (name), (bytes), (void **)&(ptr)))
#endif

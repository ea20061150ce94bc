/* plan.c: the memory plan's entries and the carver (see plan.h). */
#include "memory/plan.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"
#include "kernels/matmul.h"
#include <stdio.h>
#include <string.h>

static const char *class_names[MEM_CLASS_COUNT] = {
    [MEM_FROZEN_WEIGHTS] = "frozen weights", [MEM_FROZEN_SMALL] = "frozen norms and biases (fp32)",
    [MEM_TRAINABLE] = "trainable parameters", [MEM_GRADIENTS] = "gradients (accumulation buffer)",
    [MEM_OPTIMIZER] = "optimizer moments", [MEM_ACTIVATIONS] = "saved activations",
    [MEM_CHECKPOINTS] = "checkpointed block inputs", [MEM_RECOMPUTE] = "recompute workspace",
    [MEM_BACKWARD_SCRATCH] = "backward scratch", [MEM_LMHEAD] = "LM head + cross-entropy chunk",
    [MEM_ATTENTION] = "attention workspace", [MEM_KV_CACHE] = "KV cache",
    [MEM_DATASET] = "tokenised data set and batches", [MEM_LIBRARY] = "library scratch",
    [MEM_RUNTIME] = "process baseline (code, libraries)",
};
const char *mem_class_name(MemClass c) { return (unsigned)c < MEM_CLASS_COUNT ? class_names[c] : "?"; }

int plan_note(MemPlan *p, MemClass c, const char *name, size_t bytes, bool in_arena) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        PlanEntry *e = mem_realloc(p->entries, cap * sizeof *e);
        if (!e) return -1;
        p->entries = e;
        p->cap = cap;
    }
    PlanEntry *e = &p->entries[p->n++];
    e->cls = c;
    snprintf(e->name, sizeof e->name, "%s", name);
    e->bytes = in_arena ? arena_block_size(bytes) : bytes;
    e->in_arena = in_arena;
    return 0;
}

size_t plan_total(const MemPlan *p) {
    size_t s = 0;
    for (size_t i = 0; i < p->n; i++) s += p->entries[i].bytes;
    return s;
}

int plan_note_startup_peak(MemPlan *p) {
    size_t peak = plan_class_bytes(p, MEM_RUNTIME) + plan_class_bytes(p, MEM_DATASET) + matmul_probe()->rss_above_end;
    size_t total = plan_total(p);
    if (peak <= total) return 0;
    return plan_note(p, MEM_RUNTIME, "start-up probes' peak above the run's (measured)", peak - total, false);
}
size_t plan_arena_bytes(const MemPlan *p) {
    size_t s = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->entries[i].in_arena) s += p->entries[i].bytes;
    return s;
}
size_t plan_class_bytes(const MemPlan *p, MemClass c) {
    size_t s = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->entries[i].cls == c) s += p->entries[i].bytes;
    return s;
}
void plan_free(MemPlan *p) {
    mem_free(p->entries);
    mem_free(p->owned);
    memset(p, 0, sizeof *p);
}

int carve(Carver *cv, MemClass c, const char *name, size_t bytes, void **out) {
    *out = NULL;
    if (cv->plan) TRY(plan_note(cv->plan, c, name, bytes, true));
    if (cv->arena) {
        void *p = arena_alloc(cv->arena, bytes);
        if (!p) return error_prefix("allocating %s (%s)", name, mem_class_name(c));
        memset(p, 0, bytes);
        *out = p;
    }
    return 0;
}

size_t plan_limit_text(const MemPlan *p, size_t limit, char *msg, size_t cap) {
    char b1[32], b2[32];
    size_t total = plan_total(p);
    size_t k = (size_t)snprintf(msg, cap, "the run needs %s but --memory-limit is %s; largest parts:",
                                format_bytes(b1, sizeof b1, total), format_bytes(b2, sizeof b2, limit));
    size_t cls[MEM_CLASS_COUNT];
    for (int c = 0; c < MEM_CLASS_COUNT; c++) cls[c] = plan_class_bytes(p, (MemClass)c);
    for (int r = 0; r < 3; r++) {
        int best = 0;
        for (int c = 1; c < MEM_CLASS_COUNT; c++)
            if (cls[c] > cls[best]) best = c;
        if (!cls[best]) break;
        k += (size_t)snprintf(msg + k, k < cap ? cap - k : 0, "%s %s %s", r ? "," : "", mem_class_name((MemClass)best),
                              format_bytes(b1, sizeof b1, cls[best]));
        cls[best] = 0;
    }
    return k < cap ? k : cap;
}

void plan_print_table(const MemPlan *plan, bool verbose, FILE *out) {
    char b[32];
    fprintf(out, "  %-44s %16s %12s\n", "buffer class", "bytes", "");
    for (int c = 0; c < MEM_CLASS_COUNT; c++) {
        size_t bytes = plan_class_bytes(plan, (MemClass)c);
        if (!bytes && c != MEM_CHECKPOINTS && c != MEM_RECOMPUTE) continue;
        fprintf(out, "  %-44s %16zu %12s\n", mem_class_name((MemClass)c), bytes, format_bytes(b, sizeof b, bytes));
        if (!verbose) continue;
        for (size_t i = 0; i < plan->n; i++)
            if (plan->entries[i].cls == (MemClass)c)
                fprintf(out, "      %-58s %14zu%s\n", plan->entries[i].name, plan->entries[i].bytes,
                        plan->entries[i].in_arena ? "" : "  (outside the arena)");
    }
    size_t arena = plan_arena_bytes(plan);
    fprintf(out, "  %-44s %16zu %12s\n", "arena (allocated once, touched once)", arena,
            format_bytes(b, sizeof b, arena));
    fprintf(out, "Planned peak: %zu bytes (%s)\n", plan_total(plan), format_bytes(b, sizeof b, plan_total(plan)));
}

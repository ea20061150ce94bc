/* profile.h: where the time of a training step goes, by kernel class.
 * Off unless LMTUNE_PROFILE is set in the environment; then the trainer
 * switches it on around each training step after the first (which creates
 * the oneDNN primitives and touches the arena) and prints one table at the
 * end. Each timed call is a parallel region run from the main thread, so the
 * main thread's wall clock around it is that kernel's share of the step.
 * LMTUNE_PROFILE=cpu times with the process's CPU clock instead (all
 * threads: with one thread, the kernel's CPU seconds; the measure to use on
 * a loaded machine). */
#ifndef LT_PROFILE_H
#define LT_PROFILE_H
#include <stdbool.h>

typedef enum {
    PROF_PROJ,       /* base products of the projections (frozen or trained) */
    PROF_LORA,       /* LoRA / DoRA branch products and their element-wise work */
    PROF_ATTN_FWD,   /* attention forward (scores, softmax, values; LSE saved) */
    PROF_ATTN_BWD,   /* attention backward */
    PROF_LMHEAD,     /* LM head products and cross-entropy, forward and backward */
    PROF_NORM,       /* RMSNorm forward and backward */
    PROF_ROPE,       /* rotary embedding forward and backward */
    PROF_SWIGLU,     /* SwiGLU forward and backward */
    PROF_ELEMENT,    /* residual adds, clearing gradient buffers, embedding */
    PROF_UPDATE,     /* gradient reduction, norm, optimizer, clearing gradients */
    PROF_GDN,        /* Gated DeltaNet kernels (conv, L2 norms, gates, the chunked rule, gated norm) */
    PROF_COUNT
} ProfKind;

extern bool profile_active;   /* true inside a profiled step */
extern double profile_seconds[PROF_COUNT];

double profile_clock(void);
static inline double prof_begin(void) { return profile_active ? profile_clock() : 0.0; }
static inline void prof_end(ProfKind k, double t0) {
    if (profile_active) profile_seconds[k] += profile_clock() - t0;
}
/* PROF(kind, statement): time one statement. */
#define PROF(kind, stmt) do { double prof_t0_ = prof_begin(); stmt; prof_end(kind, prof_t0_); } while (0)

bool profile_requested(void);        /* LMTUNE_PROFILE set */
bool profile_uses_cpu_time(void);    /* LMTUNE_PROFILE=cpu */
const char *profile_name(ProfKind k);
#endif

/* profile.c: the step profile's accumulators and clock (see profile.h). */
#include "base/profile.h"
#include <stdlib.h>
#include <time.h>

#include <string.h>

bool profile_active;
double profile_seconds[PROF_COUNT];

/* LMTUNE_PROFILE=cpu: the process's CPU time (every thread) instead of the
 * wall clock; read once. On a loaded shared machine a one-thread run's CPU
 * time is steady where its wall time is not. */
static int profile_cpu = -1;

bool profile_uses_cpu_time(void) {
    if (profile_cpu < 0) {
        const char *e = getenv("LMTUNE_PROFILE");
        profile_cpu = e && !strcmp(e, "cpu");
    }
    return profile_cpu == 1;
}

double profile_clock(void) {
    struct timespec ts;
    clock_gettime(profile_uses_cpu_time() ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool profile_requested(void) {
    const char *e = getenv("LMTUNE_PROFILE");
    return e && *e && *e != '0';
}

const char *profile_name(ProfKind k) {
    static const char *names[PROF_COUNT] = {
        [PROF_PROJ] = "projections (base products)", [PROF_LORA] = "LoRA branch products",
        [PROF_ATTN_FWD] = "attention forward", [PROF_ATTN_BWD] = "attention backward",
        [PROF_LMHEAD] = "LM head + cross-entropy", [PROF_NORM] = "RMSNorm",
        [PROF_ROPE] = "RoPE", [PROF_SWIGLU] = "SwiGLU",
        [PROF_ELEMENT] = "residual adds, clears, embedding", [PROF_UPDATE] = "update (reduce, norm, optimizer)",
        [PROF_GDN] = "Gated DeltaNet (conv, norms, rule)",
    };
    return (unsigned)k < PROF_COUNT ? names[k] : "?";
}

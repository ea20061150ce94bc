/* profile.c: the step profile's accumulators and clock (see profile.h). */
#include "base/profile.h"
#include <stdlib.h>
#include <time.h>

bool profile_active;
double profile_seconds[PROF_COUNT];

double profile_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
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

/* sys.c: timers, resident memory, size parsing, OpenMP's waiting policy (see sys.h). */
#include "sys.h"
#include "error.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <link.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double time_unix(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t status_kb(const char *key) {
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp) return 0;
    char line[256];
    size_t kb = 0, klen = strlen(key);
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, key, klen) == 0) {
            kb = strtoull(line + klen, NULL, 10);
            break;
        }
    fclose(fp);
    return kb;
}
size_t rss_current_bytes(void) { return status_kb("VmRSS:") * 1024; }
size_t rss_peak_bytes(void) { return status_kb("VmHWM:") * 1024; }

int parse_size(const char *s, size_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return error_set("cannot read size '%s' (examples: 8GB, 7.5GiB, 512MB)", s);
    double mult = 1;
    while (*end == ' ') end++;
    if (*end == 0 || !strcasecmp(end, "B")) mult = 1;
    else if (!strcasecmp(end, "K") || !strcasecmp(end, "KB")) mult = 1e3;
    else if (!strcasecmp(end, "M") || !strcasecmp(end, "MB")) mult = 1e6;
    else if (!strcasecmp(end, "G") || !strcasecmp(end, "GB")) mult = 1e9;
    else if (!strcasecmp(end, "T") || !strcasecmp(end, "TB")) mult = 1e12;
    else if (!strcasecmp(end, "KiB")) mult = 1024.0;
    else if (!strcasecmp(end, "MiB")) mult = 1024.0 * 1024;
    else if (!strcasecmp(end, "GiB")) mult = 1024.0 * 1024 * 1024;
    else if (!strcasecmp(end, "TiB")) mult = 1024.0 * 1024 * 1024 * 1024;
    else return error_set("cannot read size '%s': unknown unit '%s' (use B, KB, MB, GB, KiB, MiB, GiB)", s, end);
    double bytes = v * mult;
    if (bytes > 1.8e19) return error_set("size '%s' is too large", s);
    *out = (size_t)bytes;
    return 0;
}

const char *format_bytes(char *buf, size_t n, size_t bytes) {
    if (bytes >= 1000000000ull) snprintf(buf, n, "%.3f GB", bytes / 1e9);
    else if (bytes >= 1000000ull) snprintf(buf, n, "%.2f MB", bytes / 1e6);
    else if (bytes >= 1000ull) snprintf(buf, n, "%.1f KB", bytes / 1e3);
    else snprintf(buf, n, "%zu B", bytes);
    return buf;
}

static void copy_smaps(const char *path, size_t now) {
    FILE *in = fopen("/proc/self/smaps", "r");
    FILE *out = in ? fopen(path, "w") : NULL;
    if (out) {
        char buf[65536];
        size_t n;
        fprintf(out, "# VmRSS %zu VmHWM %zu\n", now, rss_peak_bytes());
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
        fclose(out);
    }
    if (in) fclose(in);
}

void rss_snapshot_baseline(void) {
    const char *path = getenv("LMTUNE_SMAPS");
    if (!path || !*path) return;
    char p[4096];
    snprintf(p, sizeof p, "%s.baseline", path);
    copy_smaps(p, rss_current_bytes());
}

/* Diagnostics for the memory bench: with LMTUNE_SMAPS=FILE in the
 * environment, /proc/self/smaps is copied to FILE whenever the resident set
 * is at a new high, so the peak can be attributed mapping by mapping. */
void rss_snapshot_if_peak(void) {
    static int state; /* 0: unknown, 1: on, 2: off */
    static size_t high;
    static const char *path;
    if (state == 0) {
        path = getenv("LMTUNE_SMAPS");
        state = path && *path ? 1 : 2;
    }
    if (state != 1) return;
    size_t now = rss_current_bytes();
    if (now < high) return;
    high = now;
    copy_smaps(path, now);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

/* The executable's own code segments (the first object dl_iterate_phdr reports). */
static int fault_in_program(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    long pg = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        uintptr_t b = (info->dlpi_addr + ph->p_vaddr) & ~(uintptr_t)(pg - 1);
        uintptr_t e = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        if (madvise((void *)b, e - b, MADV_POPULATE_READ) == 0) continue;
        volatile unsigned char sink = 0;
        for (uintptr_t a = b; a < e; a += (uintptr_t)pg) sink ^= *(const volatile unsigned char *)a;
        (void)sink;
    }
    return 1;   /* only the program itself */
}

void sys_warm_code(void) {
    dl_iterate_phdr(fault_in_program, NULL);
    /* every libm function lmtune calls, once on ordinary and large
     * arguments (their fast and slow paths, and their tables) */
    volatile double x = 0.7, y = 300.5, acc = 0;
    volatile float xf = 0.7f, yf = 30.5f;
    double sv, cv;
    for (int i = 0; i < 2; i++) {
        double a = i ? y : x;
        float af = i ? yf : xf;
        sincos(a, &sv, &cv);
        acc += cos(a) + exp(a) + floor(a) + fmod(a, 0.3) + log(a) + log2(a) + pow(a, 1.7) + sqrt(a) + sv + cv;
        acc += (double)(expf(af) + logf(af) + powf(af, 1.7f) + sqrtf(af));
    }
    (void)acc;
}

/* Why passive: on these shared VMs another process on one of the two cores
 * leaves a spinning thread burning its partner's time slice at every
 * barrier (SmolLM2-135M step 32 s -> 59 s wall under one busy loop), and on
 * a quiet machine waiting passively measured no slower (bench/RESULTS.md,
 * "OpenMP's waiting"). */
void sys_default_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY"); /* the exec failed: say what this process runs with */
}

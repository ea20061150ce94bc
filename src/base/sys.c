/* sys.c: timers, resident memory, size parsing (see sys.h). */
#define _POSIX_C_SOURCE 200809L
#include "sys.h"
#include "error.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

double time_now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

double time_unix(void) { struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static size_t status_kb(const char *key) {
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp) return 0;
    char line[256]; size_t kb = 0, klen = strlen(key);
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, key, klen) == 0) { kb = strtoull(line + klen, NULL, 10); break; }
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

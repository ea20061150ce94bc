/* error.c: the per-thread error message behind error.h. */
#include "error.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char message[2048];
static int g_quiet;
static void (*g_line_hook)(void *);
static void *g_line_ctx;

void log_set_quiet(int quiet) { g_quiet = quiet; }

void log_set_line_hook(void (*hook)(void *ctx), void *ctx) {
    g_line_hook = hook;
    g_line_ctx = ctx;
}

static void log_v(const char *prefix, const char *fmt, va_list ap) {
    if (g_quiet) return;
    if (g_line_hook) g_line_hook(g_line_ctx);
    fputs(prefix, stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void log_warning(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v("[WARNING] ", fmt, ap);
    va_end(ap);
}

void log_info(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v("", fmt, ap);
    va_end(ap);
}

int error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return -1;
}

int error_prefix(const char *fmt, ...) {
    char prefix[1024], old[sizeof message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, message, sizeof old);
    size_t k = strlen(prefix);
    if (k > sizeof message - 3) k = sizeof message - 3;
    memcpy(message, prefix, k);
    message[k] = ':';
    message[k + 1] = ' ';
    size_t room = sizeof message - k - 3, len = strlen(old);
    if (len > room) len = room;
    memcpy(message + k + 2, old, len);
    message[k + 2 + len] = 0;
    return -1;
}

const char *error_message(void) { return message[0] ? message : "unknown error"; }
void error_clear(void) { message[0] = 0; }

void die_with_error(void) {
    fprintf(stderr, "lmtune: error: %s\n", error_message());
    exit(1);
}

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lmtune: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* cli_run.h: what the llama.cpp tests that drive the lmtune CLI share: the
 * test's temporary root, the lmtune binary, paths of files inside a case's
 * folder under that root, and a shell command built like printf (its
 * failure printed with the command). Each test sets root and bin in main. */
#ifndef LT_TESTS_LLAMA_CLI_RUN_H
#define LT_TESTS_LLAMA_CLI_RUN_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static char root[128];
static const char *bin;

/* root/c/name; the last 16 results stay valid */
static char *path(const char *c, const char *name) {
    static char buf[16][320];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s/%s", root, c, name);
    return buf[k];
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[2400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "failed (%d): %s\n", rc, cmd);
    return rc == 0 ? 0 : -1;
}
#endif

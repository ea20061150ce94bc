/* cli_run.h: what the C tests that drive the lmtune CLI or write files of
 * their own share: the lmtune binary, the test's temporary root (made by
 * cli_begin, removed by root_remove when every check passed), paths of
 * files inside a case's folder under that root, and a shell command built
 * like printf (its failure printed with the command). */
#ifndef LT_TESTS_CLI_RUN_H
#define LT_TESTS_CLI_RUN_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "check.h"
#include "base/fileio.h"

static char root[128];
static const char *bin;

/* bin: $LMTUNE_BIN, else ./lmtune; root: build/test_NAME.PID, made. */
static inline void cli_begin(const char *name) {
    bin = getenv("LMTUNE_BIN") ? getenv("LMTUNE_BIN") : "./lmtune";
    snprintf(root, sizeof root, "build/test_%s.%d", name, (int)getpid());
    CHECK(dir_ensure(root) == 0);
}

/* Removes root unless a check failed (its files are then left to look at);
 * -1 (said on stderr) when that fails. */
static inline int root_remove(void) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (check_failed > 0 || system(cmd) == 0) return 0;
    fprintf(stderr, "could not remove %s\n", root);
    return -1;
}

/* root/c/name; the last 16 results stay valid */
static inline char *path(const char *c, const char *name) {
    static char buf[16][320];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s/%s", root, c, name);
    return buf[k];
}

static inline int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int sh(const char *fmt, ...) {
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

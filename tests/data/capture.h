/* capture.h: test helpers for the data tests: run a function with stderr
 * redirected into a buffer, or silenced. */
#ifndef LT_TEST_CAPTURE_H
#define LT_TEST_CAPTURE_H
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int stderr_saved = -1;
static char stderr_path[64];
static int stderr_fd = -1;

/* Starts sending stderr to a temporary file. */
static void stderr_begin(void) {
    snprintf(stderr_path, sizeof stderr_path, "/tmp/lmtune_stderr_XXXXXX");
    stderr_fd = mkstemp(stderr_path);
    fflush(stderr);
    stderr_saved = dup(2);
    dup2(stderr_fd, 2);
}
/* Restores stderr and copies what was written into buf. */
static void stderr_end(char *buf, size_t size) {
    fflush(stderr);
    dup2(stderr_saved, 2);
    close(stderr_saved);
    lseek(stderr_fd, 0, SEEK_SET);
    ssize_t got = read(stderr_fd, buf, size - 1);
    buf[got > 0 ? got : 0] = 0;
    close(stderr_fd);
    unlink(stderr_path);
}
#endif

/* capture.h: test helpers for the data tests: run a function with its
 * output (stdout, where the [WARNING] lines go as MLX-LM prints them, and
 * stderr) redirected into a buffer, or silenced. */
#ifndef LT_TEST_CAPTURE_H
#define LT_TEST_CAPTURE_H
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int output_saved[2] = {-1, -1};
static char output_path[64];
static int output_fd = -1;

/* Starts sending stdout and stderr to a temporary file. */
static void output_begin(void) {
    snprintf(output_path, sizeof output_path, "/tmp/lmtune_output_XXXXXX");
    output_fd = mkstemp(output_path);
    fflush(stdout);
    fflush(stderr);
    output_saved[0] = dup(1);
    output_saved[1] = dup(2);
    dup2(output_fd, 1);
    dup2(output_fd, 2);
}
/* Restores stdout and stderr and copies what was written into buf. */
static void output_end(char *buf, size_t size) {
    fflush(stdout);
    fflush(stderr);
    dup2(output_saved[0], 1);
    dup2(output_saved[1], 2);
    close(output_saved[0]);
    close(output_saved[1]);
    lseek(output_fd, 0, SEEK_SET);
    ssize_t got = read(output_fd, buf, size - 1);
    buf[got > 0 ? got : 0] = 0;
    close(output_fd);
    unlink(output_path);
}
#endif

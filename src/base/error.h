/* error.h: one error message per thread, set where a failure is found and
 * printed once by the command that gives up. Functions that can fail return
 * -1 (or NULL) after error_set(); callers propagate with TRY. Also the
 * warning line every layer prints the same way. */
#ifndef LT_ERROR_H
#define LT_ERROR_H
#include <stdarg.h>

/* Stores a formatted message ("FILE: place: problem") and returns -1. */
int error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prepends context to the current message ("context: old message"); returns -1. */
int error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *error_message(void);
void error_clear(void);

#define TRY(expr) do { if ((expr) < 0) return -1; } while (0)
#define TRY_PTR(expr) do { if ((expr) == NULL) return -1; } while (0)

/* Prints "[WARNING] <message>" on stdout, where MLX-LM prints its warnings
 * (so `> log.txt` keeps them with the log), and flushes; nothing once
 * log_set_quiet(true) was called (the workers other than rank 0). */
void log_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A progress line on stdout (MLX-LM's "Loading datasets", ...), the same way. */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_set_quiet(int quiet);
/* Called before every such line (NULL: none): the trainer's terminal
 * progress line erases itself there, so a line never lands inside it. */
void log_set_line_hook(void (*hook)(void *ctx), void *ctx);

/* Prints "lmtune: error: <message>" to stderr and exits with status 1. */
void die_with_error(void) __attribute__((noreturn));
/* Prints a formatted fatal message and exits 1 (for impossible states). */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#endif

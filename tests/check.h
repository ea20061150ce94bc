/* check.h: the assertions every C test uses. A failed CHECK prints the file,
 * line and expression and the test keeps going; check_finish() prints a
 * summary line and returns the exit status. A part that cannot run (a
 * reference that is not installed) calls check_skip(reason): the test then
 * ends with "SKIP: reason" and exit status 77 unless a check failed, and the
 * runner counts it as skipped (a failure in strict mode), never as passed. */
#ifndef LT_CHECK_H
#define LT_CHECK_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int check_total = 0, check_failed = 0;
static char check_skip_reason[512];

#define CHECK(cond) do { check_total++; if (!(cond)) { check_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { check_total++; if (!(cond)) { check_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)
/* The error message of the last failing call contains `needle`. */
#define CHECK_ERROR_CONTAINS(needle) do { check_total++; const char *m_ = error_message(); \
    if (!strstr(m_, (needle))) { check_failed++; \
    fprintf(stderr, "%s:%d: expected error containing \"%s\", got \"%s\"\n", __FILE__, __LINE__, (needle), m_); } } while (0)
#define CHECK_NEAR(a, b, tol) do { check_total++; double a_ = (a), b_ = (b); \
    if (!(fabs(a_ - b_) <= (tol))) { check_failed++; \
    fprintf(stderr, "%s:%d: %s = %.9g, %s = %.9g, |diff| %.3g > %.3g\n", __FILE__, __LINE__, #a, a_, #b, b_, fabs(a_ - b_), (double)(tol)); } } while (0)

/* Worst relative error of two float arrays: max|a-b| / max(max|b|, tiny). */
static inline double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0; for (size_t i = 0; i < n; i++) { double d = fabs((double)a[i] - b[i]); if (!(d <= m)) m = d; } return m;
}
static inline double max_abs(const float *a, size_t n) {
    double m = 0; for (size_t i = 0; i < n; i++) { double d = fabs((double)a[i]); if (d > m) m = d; } return m;
}
static inline double rel_error(const float *a, const float *ref, size_t n) {
    double s = max_abs(ref, n); return max_abs_diff(a, ref, n) / (s > 1e-30 ? s : 1e-30);
}

/* Records why a part of the test did not run (the first reason is kept). */
__attribute__((format(printf, 1, 2))) static inline void check_skip(const char *fmt, ...) {
    if (check_skip_reason[0]) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(check_skip_reason, sizeof check_skip_reason, fmt, ap);
    va_end(ap);
}

/* The summary line; exit status 1 on a failed check, else 77 when a part was
 * skipped, else 0. */
static inline int check_finish(const char *name) {
    printf("summary %s: %d checks, %d failed\n", name, check_total, check_failed);
    if (check_failed) {
        return 1;
    }
    if (check_skip_reason[0]) {
        printf("SKIP: %s\n", check_skip_reason);
        return 77;
    }
    return 0;
}
#endif

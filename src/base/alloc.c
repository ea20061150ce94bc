/* alloc.c: checked heap allocation with fault injection (see alloc.h). */
#include "alloc.h"
#include "error.h"
#include <stdlib.h>
#include <string.h>

static long alloc_count = 0;
static long fail_at = -1; /* -1: not read from the environment yet */

static bool should_fail(void) {
    if (fail_at < 0) {
        const char *env = getenv("LMTUNE_FAIL_ALLOC");
        fail_at = env ? atol(env) : 0;
    }
    alloc_count++;
    return fail_at > 0 && alloc_count == fail_at;
}

void mem_fail_at(long n) {
    fail_at = n > 0 ? n : 0;
    alloc_count = 0;
}
long mem_alloc_count(void) { return alloc_count; }

void *mem_alloc(size_t bytes) {
    void *p = should_fail() ? NULL : malloc(bytes ? bytes : 1);
    if (!p) error_set("out of memory allocating %zu bytes", bytes);
    return p;
}

void *mem_calloc(size_t count, size_t size) {
    size_t bytes;
    if (!size_mul(count, size, &bytes)) {
        error_set("allocation size overflows (%zu x %zu)", count, size);
        return NULL;
    }
    void *p = should_fail() ? NULL : calloc(bytes ? bytes : 1, 1);
    if (!p) error_set("out of memory allocating %zu bytes", bytes);
    return p;
}

void *mem_realloc(void *old, size_t bytes) {
    void *p = should_fail() ? NULL : realloc(old, bytes ? bytes : 1);
    if (!p) error_set("out of memory allocating %zu bytes", bytes);
    return p;
}

char *mem_strndup(const char *s, size_t n) {
    char *p = mem_alloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}
char *mem_strdup(const char *s) { return mem_strndup(s, strlen(s)); }
void mem_free(void *p) { free(p); }

bool size_mul(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
bool size_add(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* alloc.h: every heap allocation outside the arena goes through here, so a
 * test can make the Nth allocation fail (fault injection) and every failure
 * carries a message. Sizes are checked for overflow. */
#ifndef LT_ALLOC_H
#define LT_ALLOC_H
#include <stddef.h>
#include <stdbool.h>

void *mem_alloc(size_t bytes); /* NULL + error_set on failure */
void *mem_calloc(size_t count, size_t size); /* zeroed; checks count*size overflow */
void *mem_realloc(void *p, size_t bytes);
char *mem_strdup(const char *s);
char *mem_strndup(const char *s, size_t n);
void mem_free(void *p);

/* Overflow-checked arithmetic for sizes read from files: false on overflow. */
bool size_mul(size_t a, size_t b, size_t *out);
bool size_add(size_t a, size_t b, size_t *out);

/* Fault injection: the allocation numbered `n` from now (1 = the next one)
 * fails; 0 disables. Also read from env LMTUNE_FAIL_ALLOC at first use. */
void mem_fail_at(long n);
long mem_alloc_count(void);
#endif

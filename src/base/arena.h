/* arena.h: the one allocation of a run. Its size comes from the memory plan
 * (src/memory/); buffers are carved from it in plan order and never freed one
 * by one. The pages are touched once at creation so no page fault happens in
 * the step loop, and the high-water mark is what the run really used. */
#ifndef LT_ARENA_H
#define LT_ARENA_H
#include <stddef.h>

typedef struct {
    char *base; /* start of the mapping */
    size_t capacity; /* bytes reserved (the plan's total) */
    size_t used; /* bytes handed out so far */
    size_t high; /* high-water mark of `used` (arena_reset lowers `used` only) */
} Arena;

#define ARENA_ALIGN 64

/* Maps `capacity` bytes and touches every page. -1 + error on failure. */
int arena_init(Arena *a, size_t capacity);
/* 64-byte aligned block; NULL + error when the plan was too small (a bug). */
void *arena_alloc(Arena *a, size_t bytes);
/* Same, as floats, zeroed. */
float *arena_floats(Arena *a, size_t count);
/* Bytes that arena_alloc(bytes) consumes (rounded up to ARENA_ALIGN). */
size_t arena_block_size(size_t bytes);
/* Rewinds to a mark returned by arena_mark (scratch regions). */
size_t arena_mark(const Arena *a);
void arena_reset(Arena *a, size_t mark);
void arena_free(Arena *a);
#endif

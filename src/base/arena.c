/* arena.c: see arena.h. */
#include "arena.h"
#include "error.h"
#include <string.h>
#include <sys/mman.h>

size_t arena_block_size(size_t bytes) { return (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

int arena_init(Arena *a, size_t capacity) {
    memset(a, 0, sizeof *a);
    if (capacity == 0) return 0;
    void *p = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) return error_set("cannot reserve the planned %zu bytes of memory", capacity);
    a->base = p;
    a->capacity = capacity;
    /* MAP_POPULATE already faulted the pages in; zero them explicitly so the
     * touch does not depend on the kernel honouring the flag. */
    memset(a->base, 0, capacity);
    return 0;
}

void *arena_alloc(Arena *a, size_t bytes) {
    size_t need = arena_block_size(bytes);
    if (need > a->capacity - a->used) {
        error_set("memory plan too small: %zu bytes requested with %zu of %zu left (bug in the planner)", need,
                  a->capacity - a->used, a->capacity);
        return NULL;
    }
    void *p = a->base + a->used;
    a->used += need;
    if (a->used > a->high) a->high = a->used;
    return p;
}

float *arena_floats(Arena *a, size_t count) {
    float *p = arena_alloc(a, count * sizeof(float));
    if (p) memset(p, 0, count * sizeof(float));
    return p;
}

size_t arena_mark(const Arena *a) { return a->used; }
void arena_reset(Arena *a, size_t mark) {
    if (mark <= a->used) a->used = mark;
}

void arena_free(Arena *a) {
    if (a->base) munmap(a->base, a->capacity);
    memset(a, 0, sizeof *a);
}

/* ckpt_choose.c: the fewest, then cheapest, blocks to checkpoint (see
 * ckpt_choose.h). */
#include "memory/ckpt_choose.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    double saving, cost;
    int first, count;       /* members: order[first .. first + count) */
} Class;

/* Blocks ordered by saving (largest first), then cost (cheapest first), then index. */
static int by_value(const void *a, const void *b) {
    const CkptBlock *x = a, *y = b;
    if (x->saving != y->saving) return x->saving > y->saving ? -1 : 1;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    return (x->block > y->block) - (x->block < y->block);
}

typedef struct {
    double cost;
    size_t index;
} Ranked;

static int by_cost(const void *a, const void *b) {
    const Ranked *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

typedef struct {
    int *take;              /* (cap * classes) */
    double *cost;
    size_t n, cap;
    int classes;
    bool overflow;
} Vectors;

#define MAX_VECTORS 200000

/* Every way to take k blocks from the classes (x_j <= count_j). */
static void enumerate(Vectors *v, const Class *cl, int classes, int j, int left, int *x) {
    if (v->overflow) return;
    if (j == classes - 1) {
        if (left > cl[j].count) return;
        x[j] = left;
        if (v->n == v->cap) {
            v->overflow = true;
            return;
        }
        double cost = 0;
        for (int i = 0; i < classes; i++) cost += x[i] * cl[i].cost;
        memcpy(v->take + v->n * (size_t)classes, x, (size_t)classes * sizeof *x);
        v->cost[v->n++] = cost;
        return;
    }
    for (int t = 0; t <= cl[j].count && t <= left; t++) {
        x[j] = t;
        enumerate(v, cl, classes, j + 1, left - t, x);
    }
}

static void build_set(const CkptBlock *sorted, const Class *cl, int classes, const int *take, BlockSet *set) {
    memset(set, 0, sizeof *set);
    for (int j = 0; j < classes; j++) {
        /* the members of a class are interchangeable: the lowest indices */
        int idx[MODEL_MAX_BLOCKS];
        int m = 0;
        for (int i = 0; i < cl[j].count; i++) idx[m++] = sorted[cl[j].first + i].block;
        for (int a = 1; a < m; a++)
            for (int b = a; b > 0 && idx[b - 1] > idx[b]; b--) {
                int t = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = t;
            }
        for (int i = 0; i < take[j]; i++) block_set_add(set, idx[i]);
    }
}

int ckpt_choose(const CkptBlock *blocks, int n, CkptFits fits, void *ctx, CkptChoice *out) {
    memset(out, 0, sizeof *out);
    out->count = -1;
    if (n < 0 || n > MODEL_MAX_BLOCKS)
        return error_set("checkpoint choice: %d blocks (at most %d)", n, MODEL_MAX_BLOCKS);
    for (int i = 0; i < n; i++)
        if (blocks[i].block < 0 || blocks[i].block >= MODEL_MAX_BLOCKS)
            return error_set("checkpoint choice: block index %d", blocks[i].block);
    BlockSet empty;
    memset(&empty, 0, sizeof empty);
    out->tried = 1;
    if (fits(ctx, &empty)) {
        out->count = 0;
        return 0;
    }
    if (n == 0) return 0;
    CkptBlock *sorted = mem_alloc((size_t)n * sizeof *sorted);
    Class *cl = mem_calloc((size_t)n, sizeof *cl);
    Vectors v = {0};
    int *x = mem_calloc((size_t)n, sizeof *x);
    int rc = sorted && cl && x ? 0 : -1;
    int classes = 0;
    if (rc == 0) {
        memcpy(sorted, blocks, (size_t)n * sizeof *sorted);
        qsort(sorted, (size_t)n, sizeof *sorted, by_value);
        for (int i = 0; i < n; i++) {
            if (classes && sorted[i].saving == cl[classes - 1].saving && sorted[i].cost == cl[classes - 1].cost) {
                cl[classes - 1].count++;
                continue;
            }
            cl[classes] = (Class){sorted[i].saving, sorted[i].cost, i, 1};
            classes++;
        }
        v.classes = classes;
        v.cap = MAX_VECTORS;
        v.take = mem_alloc(v.cap * (size_t)classes * sizeof *v.take);
        v.cost = mem_alloc(v.cap * sizeof *v.cost);
        if (!v.take || !v.cost) rc = -1;
    }
    for (int k = 1; rc == 0 && k <= n && out->count < 0; k++) {
        /* the k largest savings first: when they do not fit, no k do */
        int left = k;
        for (int j = 0; j < classes; j++) {
            x[j] = left < cl[j].count ? left : cl[j].count;
            left -= x[j];
        }
        BlockSet set;
        build_set(sorted, cl, classes, x, &set);
        out->tried++;
        if (!fits(ctx, &set)) continue;
        /* some k fit: the largest savings do; then the cheapest count vector that fits */
        out->count = k;
        out->set = set;
        out->cost = 0;
        for (int j = 0; j < classes; j++) out->cost += x[j] * cl[j].cost;
        v.n = 0;
        v.overflow = false;
        enumerate(&v, cl, classes, 0, k, x);
        Ranked *order = mem_alloc((v.n ? v.n : 1) * sizeof *order);
        if (!order) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < v.n; i++) order[i] = (Ranked){v.cost[i], i};
        qsort(order, v.n, sizeof *order, by_cost);
        for (size_t i = 0; i < v.n && !v.overflow; i++) {
            const int *take = v.take + order[i].index * (size_t)classes;
            if (order[i].cost >= out->cost) break;
            BlockSet s;
            build_set(sorted, cl, classes, take, &s);
            out->tried++;
            if (fits(ctx, &s)) {
                out->set = s;
                out->cost = order[i].cost;
                break;
            }
        }
        mem_free(order);
    }
    mem_free(sorted);
    mem_free(cl);
    mem_free(x);
    mem_free(v.take);
    mem_free(v.cost);
    return rc;
}

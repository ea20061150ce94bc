/* test_ckpt_choose.c: the choice of blocks to checkpoint against brute force.
 * Models with up to 12 trainable blocks of up to three kinds (different
 * savings and recompute costs, as attention, sliding-window and Gated
 * DeltaNet blocks will have), whose plan is base - savings + a recompute
 * workspace (when any block is checkpointed) - a shared region (when all
 * are), under many limits: every subset is tried by brute force, and the
 * chooser must return a set of the smallest size that fits, with the
 * smallest recompute cost among the sets of that size that fit; removing
 * any block from it must exceed the limit; and when nothing fits it must
 * say so. */
#include "check.h"
#include "memory/ckpt_choose.h"
#include <stdio.h>
#include <string.h>

typedef struct {
    const CkptBlock *b;
    int n;
    double base, workspace, shared, limit;
    long calls;
} Synth;

static double total(const Synth *m, const BlockSet *s) {
    double t = m->base;
    int k = 0;
    for (int i = 0; i < m->n; i++)
        if (block_set_has(s, m->b[i].block)) {
            t -= m->b[i].saving;
            k++;
        }
    if (k > 0) t += m->workspace;
    if (k == m->n) t -= m->shared;
    return t;
}

static bool fits(void *ctx, const BlockSet *s) {
    Synth *m = ctx;
    m->calls++;
    return total(m, s) <= m->limit;
}

static unsigned long long rng = 88172645463325252ull;
static unsigned next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng >> 11);
}

int main(void) {
    int cases = 0, none = 0, checked_cost = 0;
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + next() % 12;
        int kinds = 1 + next() % 3;
        double save[3] = {1000 + next() % 500, 600 + next() % 300, 2000 + next() % 900};
        double cost[3] = {50 + next() % 40, 20 + next() % 10, 80 + next() % 60};
        CkptBlock b[12];
        for (int i = 0; i < n; i++) {
            int k = (int)(next() % (unsigned)kinds);
            b[i] = (CkptBlock){3 + 2 * i, save[k], cost[k]};
        }
        Synth m = {b, n, 20000, 700 + next() % 400, 300 + next() % 200, 0, 0};
        /* the range of the totals, to place limits across it */
        double lo = 1e300, hi = 0;
        for (unsigned mask = 0; mask < 1u << n; mask++) {
            BlockSet s;
            memset(&s, 0, sizeof s);
            for (int i = 0; i < n; i++)
                if (mask >> i & 1u) block_set_add(&s, b[i].block);
            double t = total(&m, &s);
            if (t < lo) lo = t;
            if (t > hi) hi = t;
        }
        for (int l = 0; l < 6; l++) {
            m.limit = lo - 10 + (hi - lo + 20) * (next() % 1000) / 999.0;
            /* brute force: every subset */
            int min_k = -1;
            double min_cost = 1e300;
            for (unsigned mask = 0; mask < 1u << n; mask++) {
                BlockSet s;
                memset(&s, 0, sizeof s);
                double c = 0;
                int k = __builtin_popcount(mask);
                for (int i = 0; i < n; i++)
                    if (mask >> i & 1u) {
                        block_set_add(&s, b[i].block);
                        c += b[i].cost;
                    }
                if (total(&m, &s) > m.limit) continue;
                if (min_k < 0 || k < min_k) {
                    min_k = k;
                    min_cost = c;
                } else if (k == min_k && c < min_cost) {
                    min_cost = c;
                }
            }
            CkptChoice ch;
            m.calls = 0;
            CHECK(ckpt_choose(b, n, fits, &m, &ch) == 0);
            cases++;
            if (min_k < 0) {
                none++;
                CHECK_MSG(ch.count == -1, "trial %d: nothing fits but %d blocks chosen", trial, ch.count);
                continue;
            }
            CHECK_MSG(ch.count == min_k, "trial %d: %d blocks chosen, %d is the fewest that fit", trial, ch.count,
                      min_k);
            CHECK(block_set_count(&ch.set) == ch.count);
            CHECK_MSG(total(&m, &ch.set) <= m.limit, "trial %d: the chosen set does not fit", trial);
            double c = 0;
            for (int i = 0; i < n; i++)
                if (block_set_has(&ch.set, b[i].block)) c += b[i].cost;
            CHECK_MSG(c == min_cost && ch.cost == c, "trial %d: cost %g (reported %g), cheapest of size %d is %g",
                      trial, c, ch.cost, min_k, min_cost);
            checked_cost++;
            /* minimal: removing any block exceeds the limit */
            for (int i = 0; i < n; i++) {
                if (!block_set_has(&ch.set, b[i].block)) continue;
                BlockSet s = ch.set;
                s.w[b[i].block >> 6] &= ~(1ull << (b[i].block & 63));
                CHECK_MSG(total(&m, &s) > m.limit, "trial %d: block %d can be left out", trial, b[i].block);
            }
            /* it tests far fewer sets than brute force */
            CHECK(ch.tried == m.calls && m.calls <= 2 + 2L * n + 200);
        }
    }
    printf("%d cases (%d where nothing fits), chosen sets minimal and cheapest as brute force found in %d\n", cases,
           none, checked_cost);
    CHECK(none > 0 && checked_cost > 1000);
    return check_finish("memory/ckpt_choose");
}

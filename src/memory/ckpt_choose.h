/* ckpt_choose.h: which blocks to checkpoint. Given the trainable blocks,
 * each with what checkpointing it saves and what its recomputation costs,
 * and a test of whether a set of checkpointed blocks fits the memory limit,
 * find the fewest blocks that fit and, among the sets of that size that fit,
 * the one whose recomputation costs least.
 *
 * Blocks with the same saving and cost are interchangeable, so the search
 * runs over how many blocks of each such class are taken (a model has one
 * class per kind of block: attention, sliding-window attention, Gated
 * DeltaNet, ...), testing each count vector with the exact test; size k is
 * tried only when the k largest savings could fit. The sets tried are
 * exactly the candidates, so the answer is exact whenever the test depends
 * on a set only through its classes' counts (true of a memory plan: a
 * block's buffers depend on its kind, not its index). */
#ifndef LT_CKPT_CHOOSE_H
#define LT_CKPT_CHOOSE_H
#include <stdbool.h>
#include "model/model.h"

typedef struct {
    int block;          /* index in the model */
    double saving;      /* bytes checkpointing it saves (before the shared workspace) */
    double cost;        /* FLOPs of its recomputation per micro-batch */
} CkptBlock;

/* true when the plan with these blocks checkpointed fits. */
typedef bool (*CkptFits)(void *ctx, const BlockSet *set);

typedef struct {
    BlockSet set;
    int count;          /* blocks in set; -1: nothing fits, not even every block */
    double cost;        /* summed recompute FLOPs */
    long tried;         /* sets tested */
} CkptChoice;

/* Empty set when it fits as is. -1 + error on a bad argument. */
int ckpt_choose(const CkptBlock *blocks, int n, CkptFits fits, void *ctx, CkptChoice *out);
#endif

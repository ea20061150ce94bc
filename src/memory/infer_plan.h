/* infer_plan.h: the memory plan of `lmtune eval` and `lmtune generate`,
 * built the way a training run's is (memory/run_plan.h) and before any
 * weight is loaded: the model's arena for the batches (or the prompt and the
 * KV cache), the weights read in place (for eval only the embedding rows of
 * the test set's tokens), the oneDNN primitives of the products the command
 * runs, the attention tiles, the data, the process baseline. With a memory
 * limit a command over it is refused before loading, naming its levers. */
#ifndef LT_INFER_PLAN_H
#define LT_INFER_PLAN_H
#include <stdio.h>
#include "base/arena.h"
#include "data/dataset.h"
#include "memory/plan.h"
#include "model/model.h"

typedef enum { INFER_EVAL, INFER_GENERATE } InferKind;

typedef struct {
    InferKind kind;
    const char *model_dir, *adapter_dir;    /* adapter_dir may be NULL */
    /* eval: the test set and how it is batched and subset */
    const Dataset *data;
    int batch_size, max_seq_length, batches;    /* batches: -1 all */
    uint64_t seed;
    /* generate: the prompt's positions and the tokens to generate */
    int prompt_tokens;
    long max_tokens;
    int world, threads;
    size_t baseline;            /* infer_baseline_now */
    size_t memory_limit;        /* 0: none */
    int max_kv_size;            /* generate: > 0, the KV cache holds at most this many positions and rotates */
    bool fixed_dtype;           /* the frozen products run in weight_dtype (eval: --weights-dtype, measured under
                                   auto); false: as stored where bf16 products exist (matmul_weight_dtype) */
    DType weight_dtype;
} InferRequest;

/* Warms up (code, oneDNN probe) and measures the process baseline, less the
 * data set's bytes (planned apart). */
size_t infer_baseline_now(const Dataset *data);
/* prepare_rank >= 0: that worker's primitives are created and measured. */
int infer_plan_build(const InferRequest *r, MemPlan *plan, ModelSpec *spec, int prepare_rank);
/* -1 + an error naming the largest parts and the levers when over the limit. */
int infer_check_limit(const InferRequest *r, const MemPlan *plan);
/* Plans (refusing over the limit), then creates the arena, loads the model
 * and the adapter: what model_open_inference does, planned. */
int infer_open(const InferRequest *r, Model **out, Arena *arena, size_t *planned);
/* `--plan`: prints the plan (with verbose, every entry) and whether it fits;
 * nothing of the model is loaded. */
int infer_print_plan(const InferRequest *r, bool verbose, FILE *out);
#endif

/* model.h: the decoder (llama / mistral / qwen2 / qwen3 / gemma2 / gemma3 /
 * phi3 / smollm3 / qwen3_5) as lmtune trains and runs it: frozen base
 * weights, trainable LoRA / DoRA / full parameters of the last N blocks,
 * forward and backward of one micro-batch, gradient checkpointing, and
 * incremental decoding with a KV cache.
 *
 * Memory: model_layout_summary() walks every buffer the model will hold for a spec
 * (weights converted at load, trainable parameters, gradients, activations,
 * checkpoints, recompute workspace, LM-head chunk, attention workspace, KV
 * cache). With a planning Carver it only records sizes (memory/plan.h); the
 * very same walk carves the arena in model_load(). Frozen weights stored in
 * the file as F32 or BF16 are used in place from the mapped file (recorded
 * as a non-arena note of their bytes); F16 is converted at load. */
#ifndef LT_MODEL_H
#define LT_MODEL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/rng.h"
#include "base/trainable.h"
#include "formats/hf_config.h"
#include "formats/model_tensors.h"   /* PROJ_*: the projections a block can have */
#include "memory/plan.h"
#include "kernels/frozen_weight.h"

typedef enum { TUNE_LORA = 0, TUNE_DORA, TUNE_FULL, TUNE_NONE } TuneType;

/* A set of blocks by index (checkpointed blocks). */
#define MODEL_MAX_BLOCKS 256
typedef struct {
    uint64_t w[MODEL_MAX_BLOCKS / 64];
} BlockSet;
static inline bool block_set_has(const BlockSet *s, int l) {
    return l >= 0 && l < MODEL_MAX_BLOCKS && (s->w[l >> 6] >> (l & 63) & 1u);
}
static inline void block_set_add(BlockSet *s, int l) {
    if (l >= 0 && l < MODEL_MAX_BLOCKS) s->w[l >> 6] |= 1ull << (l & 63);
}
static inline int block_set_count(const BlockSet *s) {
    int n = 0;
    for (int i = 0; i < MODEL_MAX_BLOCKS / 64; i++) n += __builtin_popcountll(s->w[i]);
    return n;
}

typedef struct {
    TuneType type;          /* TUNE_NONE: inference only (eval without adapter, generate) */
    int num_layers;         /* last N blocks are trainable; -1 or 0 = all (MLX-LM) */
    int lora_rank;          /* r */
    float lora_scale;       /* MLX-LM's scale (PEFT alpha / r) */
    float lora_dropout;
    unsigned lora_keys;     /* bitmask of 1u << PROJ_*; the projections a block does not
                               have are ignored (MLX-LM matches keys by name) */
    bool grad_checkpoint;   /* every trainable block keeps only its input */
    BlockSet ckpt_blocks;   /* and these blocks too (partial checkpointing): a
                               trainable block keeps only its input and rebuilds
                               its activations before its backward pass */
    int max_rows;           /* B: rows of the widest micro-batch */
    int max_tokens;         /* T: input positions per row (batch width - 1) */
    DType weight_dtype;     /* F32 or BF16: dtype of the frozen products. bf16
                               and f16 weights stay so in memory in fp32
                               products (expanded panel by panel); F32 and F16
                               weights are rounded to bf16 at load for bf16
                               products (default: matmul_weight_dtype of the
                               file's, or the start-up probe of lmtune train) */
    int lmhead_chunk;       /* rows per LM-head chunk (0 = default) */
    bool training;          /* false: no gradients / saved activations */
    int kv_cache_tokens;    /* > 0: allocate a KV cache for generation, of this many positions */
    int max_positions;      /* positions generation may reach; above kv_cache_tokens the cache
                               rotates (mlx_lm --max-kv-size: the first KV_KEEP positions stay,
                               the others are overwritten oldest first); 0: kv_cache_tokens */
    int gdn_chunk;          /* Gated DeltaNet chunk size (0 = 64) */
    const uint64_t *embed_rows; /* bitmap (bit v of word v / 64) of the embedding rows the run
                                   reads, from its data's token ids; NULL: every row */
    size_t library_scratchpad; /* bytes of oneDNN's scratchpad (matmul_plan of the run's
                                  products); 0: none planned */
} ModelSpec;

/* Positions a rotating KV cache never overwrites (MLX-LM's RotatingKVCache keep=4). */
#define KV_KEEP 4


typedef struct Model Model;

/* The dtype the model's matrices are stored in, as the files say: the
 * safetensors headers (an MLX-quantized model: its scales' dtype), or a
 * GGUF file's tensors (cfg->torch_dtype, which formats/gguf_arch.c derives
 * from them). config.json's torch_dtype / dtype is a label that may be
 * absent or wrong: every command plans from the stored weights. */
int model_file_dtype(const char *model, const ModelConfig *cfg, DType *out);

/* Block l is checkpointed under this spec (it must also be trainable). */
static inline bool spec_block_ckpt(const ModelSpec *s, int l) {
    return s->grad_checkpoint || block_set_has(&s->ckpt_blocks, l);
}

/* The trainable tensors a spec creates (names, shapes, numel; value and
 * grad NULL), without loading anything: the planner sizes the optimizer
 * moments from it. *out is heap (mem_free). */
int model_trainable_list(const ModelConfig *cfg, const ModelSpec *spec, TrainableTensor **out, size_t *n);
/* Notes the frozen weights read in place from the mapped file(s): the pages
 * of the frozen matrices, the LM head and the embedding rows of
 * spec->embed_rows, exactly those model_load keeps resident. Reads headers only. */
int model_plan_weights(const char *model_dir, const ModelConfig *cfg, const ModelSpec *spec, MemPlan *plan);

/* Opens DIR (config.json, safetensors), checks every tensor against the
 * config, carves the arena through model_layout, converts what must be
 * converted. Trainable tensors are zero until model_init_adapters or a load. */
int model_load(Model **out, const char *model_dir, const ModelSpec *spec, Arena *arena);
void model_free(Model *m);
const ModelConfig *model_config(const Model *m);
const ModelSpec *model_spec(const Model *m);

/* Trainable tensors in a fixed order (block by block, projection by projection). */
size_t model_trainables(Model *m, TrainableTensor **list);
/* LoRA: A ~ U(+-1/sqrt(in)), B = 0 (MLX-LM); DoRA also m = row norms of W;
 * full: copies the base weights of the trainable blocks into fp32 masters. */
int model_init_trainables(Model *m, Rng *rng);
void model_zero_grad(Model *m);

/* One micro-batch. tokens (B, W): inputs tokens[:, :-1], targets tokens[:, 1:],
 * T = W - 1. Target position j (step s = j + 1) counts iff
 * offsets[b] <= s < lengths[b]. Loss = mean CE over counted targets.
 * Gradients of (grad_scale * loss) are ADDED to each TrainableTensor.grad.
 * dropout_rng may be NULL when lora_dropout == 0. */
int model_forward_backward(Model *m, const int32_t *tokens, int B, int W,
                           const int32_t *lengths, const int32_t *offsets,
                           float grad_scale, Rng *dropout_rng,
                           double *loss, long *n_tokens);
/* Forward only: the SUM of CE over counted targets and their count (eval). */
int model_loss(Model *m, const int32_t *tokens, int B, int W,
               const int32_t *lengths, const int32_t *offsets,
               double *loss_sum, long *n_tokens);
/* Full logits (B, T, V) for small tests/generation of short inputs. */
int model_logits(Model *m, const int32_t *tokens, int B, int T, float *logits);

/* Generation with the KV cache (spec.kv_cache_tokens > 0): feeds n tokens at
 * positions pos..pos+n-1 of a single sequence and writes the logits (V) of
 * the last one. pos == 0 resets the cache. With a rotating cache a position
 * attends to the first KV_KEEP positions and the kv_cache_tokens - KV_KEEP
 * latest ones (itself included). */
int model_decode(Model *m, const int32_t *tokens, int n, int pos, float *logits);

/* --- additions --- */
/* What the planner needs of the stored weights beyond config.json, read
 * from the safetensors headers and config.json's quantization. */
typedef struct {
    DType file_dtype;       /* plain matrices' dtype; the scales' dtype when quantized */
    bool quantized;         /* some matrix is MLX-quantized: every matrix is used as stored */
    bool gguf;              /* a GGUF file: every matrix used as stored, its blocks expand to either dtype */
    bool bf16_values;       /* some matrix holds bf16 numbers (plain BF16, or affine with BF16 scales) */
    /* widest matrix whose products expand panels (0: none), when the frozen
     * products run in fp32 and in bf16 (weights_compute) */
    int panel_cols_f32, panel_cols_bf16;
    int bits_min, bits_max; /* of the quantized matrices */
    size_t embed_bytes, lm_head_bytes, block_bytes; /* stored bytes (codes, scales, biases); lm_head 0 when tied */
} WeightsSummary;
/* --weights-dtype auto: the dtype of the frozen products of a training run
 * of spec on DIR's weights, with rows rows per product: bf16 only when the
 * weights hold bf16 numbers, oneDNN multiplies bf16 here and a start-up
 * probe of the run's product shapes finds bf16 faster (model/weights_dtype.c).
 * why: one line saying what was chosen and why. */
int model_auto_weights_dtype(const char *model_dir, const ModelConfig *cfg, const ModelSpec *spec, int rows,
                             DType *out, char *why, size_t cap);
/* Reads DIR's config.json quantization and safetensors headers; checks every
 * quantized module's tensors. */
int model_weights_summary(const char *model_dir, const ModelConfig *cfg, WeightsSummary *ws);
/* The stored matrices of DIR as FrozenWeights from the headers alone (data
 * pointers NULL): matrix k = 0 the embedding, 1 the LM head, then
 * PROJ_COUNT per block. *out is heap (mem_free). For the product shapes of
 * quantized models (model_products). */
int model_frozen_views(const char *model_dir, const ModelConfig *cfg, DType run, FrozenWeight **out, int *n);
/* Records every buffer of the model for this spec and the weights as they
 * are stored (model_weights_summary), without reading weights; model_load
 * carves the arena with the very same walk. */
int model_layout_summary(const ModelConfig *cfg, const ModelSpec *spec, const WeightsSummary *ws, Carver *cv);
/* model_layout_summary for a plain model whose matrices are stored in
 * file_dtype (model_file_dtype). */
int model_layout_dtype(const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype, Carver *cv);

/* --- the products of a run, listed without running it (model_products.c) --- */
typedef enum {
    PRODUCT_FORWARD,      /* a block's forward pass */
    PRODUCT_RECOMPUTE,    /* a checkpointed block's forward again, before its backward */
    PRODUCT_BACKWARD,     /* a trainable block's backward pass */
    PRODUCT_LMHEAD,       /* the LM head (and its input gradient) */
    PRODUCT_DORA_NORMS,   /* DoRA's adapted row norms, once per step */
} ProductPhase;
typedef struct {
    int rows, tokens;     /* B rows x T positions (decode: the prompt's positions) */
    long lm_rows;         /* positions whose loss counts: the LM head's rows */
    bool train;           /* forward + backward (and recompute); else forward only */
    bool decode;          /* KV-cache generation: a prompt of `tokens`, then one token at a time */
} ProductBatch;
struct MatmulShape;
/* block: the block's index, or -1 (LM head). Recompute products are listed
 * for every trainable block (a subset of its forward shapes); a sink that
 * sums FLOPs counts them for the checkpointed blocks only. */
typedef void (*ProductSink)(void *ctx, const struct MatmulShape *shape, int block, ProductPhase phase);
/* ws: the summary of the model's files (model_weights_summary); views: the
 * stored matrices (model_frozen_views) when some are quantized, else NULL. */
int model_products(const ModelConfig *cfg, const ModelSpec *spec, const WeightsSummary *ws,
                   const FrozenWeight *views, const ProductBatch *batches, size_t n, ProductSink sink, void *ctx);
/* FLOPs of causal attention over rows x tokens (forward, or backward with
 * the score recompute); attention runs lmtune's own tiles, not oneDNN. */
double model_attention_flops(const ModelConfig *cfg, int rows, int tokens, bool backward);

/* `lmtune init`: a model directory with config.json and model.safetensors
 * (HF names; shards of at most 5 GB with model.safetensors.index.json for
 * larger models), weights ~ N(0, 0.02^2), norms 1, biases 0, in dtype F32,
 * BF16 or F16. */
int model_init_random(const char *out_dir, const ModelConfig *cfg, DType dtype, uint64_t seed);
/* Fills cfg with a named preset: "smollm2-135m", "qwen2.5-0.5b",
 * "qwen3-0.6b", "llama-3.2-1b", "llama-3.1-8b", "gemma-3-270m", "gemma-3-1b",
 * "phi-4-mini", "smollm3-3b", "tiny". The caller may then override
 * vocab_size. -1 + error for an unknown name. */
int model_preset(const char *name, ModelConfig *cfg);
/* A GGUF file as the base model (`--model FILE.gguf`, model_gguf.c): a path
 * ending in .gguf that is not a directory. */
bool model_is_gguf(const char *model);
/* config.json of a model directory, or a GGUF file's metadata. */
int model_config_load(const char *model, ModelConfig *cfg);
/* cfg as the load will see it: for a safetensors directory, where its
 * weights are and in which layout (model_tensors_resolve: a multimodal
 * checkpoint's text prefix, Qwen3.5's transformers or MLX-LM layout); a GGUF
 * file's is complete. Every planner resolves before it plans. */
int model_config_resolve(const char *model, ModelConfig *cfg);
/* The model's tokenizer: DIR's tokenizer.json; for a GGUF file the
 * tokenizer.json beside it, else its metadata. */
struct Tokenizer;
int model_tokenizer_load(struct Tokenizer **out, const char *model);
/* The WeightsSummary of a GGUF file (every matrix used as stored, products
 * in `compute`: F32, or BF16 with --weights-dtype bf16); checks every tensor. */
int gguf_model_summary(const char *model, const ModelConfig *cfg, DType compute, WeightsSummary *ws);

/* Testing hook: DoRA's row norms are a stop-gradient, so finite differences
 * of the loss only match the gradients with the norms held fixed. While
 * frozen, the norms of the last step are reused instead of recomputed. */
void model_freeze_dora_norms(Model *m, bool frozen);
#endif

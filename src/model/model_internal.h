/* model_internal.h: what the files of src/model share and nobody else sees:
 * the dimensions of a run, the parameter pointers of one block, one block's
 * activation set, the backward scratch, and struct Model itself. Every
 * pointer here is carved by the one layout walk (model_layout.c), so the
 * memory plan and the real buffers are the same list.
 *
 * The block is one shape with properties (hf_config.h): norms used as w or
 * 1 + w, optional sandwich norms on the attention and MLP outputs, optional
 * q/k norms and q/k/v biases, separate or fused q/k/v and gate/up
 * projections, SwiGLU or GeGLU, the attention scale and soft-capping, and
 * per layer a sliding window, a RoPE table set or none (NoPE). Qwen3.5 adds
 * a second block kind: the Gated DeltaNet token mixer in place of the
 * (gated) attention, with the same MLP (block_gdn.c). */
#ifndef LT_MODEL_INTERNAL_H
#define LT_MODEL_INTERNAL_H
#include "model/model.h"
#include "formats/safetensors.h"
#include "formats/mlx_quant.h"
#include "kernels/frozen_weight.h"
#include "kernels/ops.h"   /* AttnParams */
#include <stdio.h>
#include "formats/gguf_arch.h"

/* Gated DeltaNet dimensions (Qwen3.5's linear-attention blocks). */
typedef struct {
    int Hk, Hv, Dk, Dv, K;  /* key heads, value heads, head dims, conv kernel */
    int Kd, Vd, CC;         /* Hk Dk, Hv Dv, conv channels 2 Kd + Vd */
    int chunk, nchunk;      /* chunk size, chunks of the widest row */
    int threads;            /* OpenMP threads the chunk workspace is carved for */
} GdnDims;

/* Dimensions of a run (maxima over the micro-batches the spec allows). */
typedef struct {
    int C, F, L, H, KVH, D, V;
    int QD, KVD;          /* H*D, KVH*D */
    int QKVD;             /* QD + 2 KVD: a fused qkv_proj's output */
    int B, T, N;          /* max rows, max positions, N = B*T */
    int attn_splits;      /* key segments of the attention backward (attention_key_splits) */
    int lo;               /* lowest trainable block (L when none) */
    int n_train;          /* L - lo */
    int r;                /* LoRA rank (0 unless LoRA/DoRA) */
    int chunk;            /* LM-head rows per chunk */
    int rope_T;           /* rows of the RoPE tables */
    int rd;               /* rotary dims of a head (partial rotary: < D) */
    int n_rope;           /* RoPE table sets: 1, or 2 (gemma3's local base; longrope's short and long) */
    int dec_rows;         /* rows of one decode step chunk (0: no KV cache) */
    int kv_T;             /* KV cache positions */
    int max_pos;          /* positions decoding may reach (> kv_T: the cache rotates) */
    bool train;           /* gradients and saved activations exist */
    bool dropout;         /* training with lora_dropout > 0 */
    bool qk_norm, bias;
    bool sandwich;        /* attention and MLP outputs normed before the residual add */
    bool fused_qkv;       /* one qkv_proj */
    int gu_ld;            /* row stride of the gate/up activations: F, or 2F for a fused gate_up_proj */
    int act;              /* GLU_SILU or GLU_GELU_TANH */
    float norm_off;       /* RMSNorm weight offset: 1 for zero-centred weights used as 1 + w
                             (gemma, Qwen3.5 in transformers' layout) */
    unsigned projs;       /* bitmask of the attention blocks' projections (1u << PROJ_*) */
    bool q35;             /* Qwen3.5: gated attention and Gated DeltaNet blocks */
    bool attn_gate;       /* q_proj also gives the attention output's gate: (N, 2 QD) */
    int n_gdn, n_attn;    /* blocks of each kind (n_gdn: Qwen3.5) */
    GdnDims g;
    DType file_dtype;     /* dtype of the matrices in the file (of the scales when quantized) */
    DType run_dtype;      /* dtype of the frozen products (spec.weight_dtype) */
    bool convert;         /* frozen matrices are converted into the arena (F32/F16 file, bf16 products) */
    bool quantized;       /* some matrix is MLX-quantized: every matrix is used as stored */
    bool bf16_compute;    /* some frozen product runs in bf16 (the conversion scratch exists) */
    int panel_cols;       /* widest frozen matrix whose products expand panels (0: none) */
    int proj_in[PROJ_COUNT], proj_out[PROJ_COUNT]; /* features of each projection (hf_proj_shape) */
} Dims;

int dims_init(Dims *d, const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype);
/* The dimensions of cfg's weights alone (no run: inference, fp32), for the
 * walks over its matrices. */
int dims_of_weights(Dims *d, const ModelConfig *cfg);
/* What the safetensors headers add to the dimensions (model_weights_summary). */
int dims_apply_summary(Dims *d, const ModelSpec *spec, const WeightsSummary *ws);
/* in/out features of projection p (formats/model_tensors.c's hf_proj_shape,
 * taken once by dims_init). */
static inline void proj_shape(const Dims *d, int p, int *in, int *out) {
    *in = d->proj_in[p];
    *out = d->proj_out[p];
}
/* "<prefix>layers.<l>.<suffix>" into dst (prefixes are < 32 bytes, block
 * tensor suffixes < 48: 160 bytes always hold it; a cut name is emptied). */
static inline void layer_name(char *dst, size_t cap, const char *prefix, int l, const char *suffix) {
    int n = snprintf(dst, cap, "%slayers.%d.%s", prefix, l, suffix);
    if (n < 0 || (size_t)n >= cap) dst[0] = 0;
}
/* for (p in mask) in PROJ_* order */
#define FOR_EACH_PROJ(p, mask) for (int p = 0; p < PROJ_COUNT; p++) if ((mask) >> p & 1u)
/* The projections of block l (PROJ_ATTN_BLOCK or PROJ_GDN_BLOCK). */
unsigned layer_projs(const ModelConfig *cfg, int l);
static inline bool layer_gdn(const ModelConfig *cfg, int l) { return cfg->q35.on && cfg->q35.linear[l]; }

/* Parameters of one block: what forward and backward read. Gradient
 * pointers are NULL when the tensor is frozen. */
typedef struct {
    FrozenWeight w[PROJ_COUNT]; /* (out, in); full fine-tuning: the fp32 masters, plain F32 */
    float *dw[PROJ_COUNT];      /* full fine-tuning */
    float *bias[3], *dbias[3];  /* q, k, v (attention_bias) */
    float *ln1, *dln1;          /* attention input norm (C) */
    float *ln2, *dln2;          /* MLP input norm (C) */
    float *pn1, *dpn1;          /* sandwich: attention output norm (C) */
    float *pn2, *dpn2;          /* sandwich: MLP output norm (C) */
    float *qn, *dqn, *kn, *dkn; /* per-head q/k norms (D) */
    float *la[PROJ_COUNT], *dla[PROJ_COUNT];  /* LoRA A (in, r) */
    float *lb[PROJ_COUNT], *dlb[PROJ_COUNT];  /* LoRA B (r, out) */
    float *dm[PROJ_COUNT], *ddm[PROJ_COUNT];  /* DoRA magnitude (out) */
    float *wnorm2[PROJ_COUNT];  /* DoRA: ||W row||^2 of the base (out), fixed */
    float *dnorm[PROJ_COUNT];   /* DoRA: ||W + scale (AB)^T|| rows (out), per step */
    unsigned adapted;           /* bitmask of LoRA/DoRA projections */
    unsigned projs;             /* bitmask of the block's projections */
    bool gdn;                   /* a Gated DeltaNet block (Qwen3.5) */
    float *conv_w, *dconv_w;    /* GDN: conv1d (CC, K) */
    float *A_log, *dA_log;      /* GDN: (Hv) */
    float *dt_bias, *ddt_bias;  /* GDN: (Hv) */
    float *gnorm, *dgnorm;      /* GDN: gated RMSNorm weight (Dv), used as stored */
} BlockParams;

/* The fp32 slot of a 1-D block tensor (norms, biases) and its gradient. */
float **block_slot(BlockParams *bp, const BlockTensor *t, float ***grad);

/* One block's activations ((N, .) rows; x_in points at the block's input). */
typedef struct {
    float *x_in;              /* (N, C) */
    float *ln1, *rstd1;       /* (N, C), (N) */
    float *q_pre, *k_pre;     /* q/k norms: projections before the norm */
    float *q_rstd, *k_rstd;   /* (N*H), (N*KVH) */
    float *q, *k, *v;         /* (N, QD), (N, KVD), (N, KVD), after RoPE */
    float *att, *lse;         /* (N, QD), (B, H, T) */
    float *o, *prstd1;        /* sandwich: o_proj output (N, C) before its norm, rstd (N) */
    float *x_mid;             /* (N, C) residual after attention */
    float *ln2, *rstd2;       /* (N, C), (N) */
    float *gate, *up, *act;   /* (N, gu_ld) rows (fused: one (N, 2F) region), (N, F) */
    float *mlp, *prstd2;      /* sandwich: down_proj output (N, C) before its norm, rstd (N) */
    float *xa[PROJ_COUNT];    /* (N, r): dropout(x) @ A of adapted projections */
    bool transient;           /* ln1, ln2, act (and the GDN and gate
                                 intermediates below) are shared: rebuild them in backward */
    /* Qwen3.5 gated attention */
    float *agate;             /* (N, QD) the output gate, before the sigmoid */
    float *qg;                /* (N, 2 QD) q_proj output (shared) */
    float *ag;                /* (N, QD) att * sigmoid(agate): o_proj's input (shared) */
    /* Gated DeltaNet */
    float *qkv, *z, *ga, *gb; /* (N, CC), (N, Vd), (N, Hv) x 2: in_proj_{qkv,z,a,b} outputs */
    float *core, *grstd;      /* (N, Vd) the gated delta rule's output, (N * Hv) gated-norm rstd */
    float *states;            /* (B, Hv, nchunk, Dk, Dv) the state at each chunk's start */
    float *conv;              /* (N, CC) conv1d + SiLU (shared) */
    float *qn, *kn, *qr, *kr; /* (N, Kd) x 2 normalised q, k; (N * Hk) x 2 their 1/norms (shared) */
    float *g, *beta;          /* (N, Hv) x 2 log decay and beta (shared) */
    float *gy;                /* (N, Vd) gated norm output: out_proj's input (shared) */
} BlockActs;

/* Activation gradients of the block in flight, reused by every block. */
typedef struct {
    float *dres;              /* (N, C) residual gradient */
    float *dln;               /* (N, C) */
    float *dpost;             /* sandwich: (N, C) gradient of a normed output's input */
    float *datt, *dq, *dk, *dv; /* (N, QD), (N, QD), (N, KVD), (N, KVD) */
    float *dq_pre, *dk_pre;   /* q/k norms */
    float *dact;              /* (N, F) gradient of the GLU output; shares its bytes with the mixer's */
    float *dxa;               /* (N, r) */
    float *dat;               /* (r, max in) LoRA dA^T, see proj_backward; merged groups: (3 r, C) at least */
    float *xa_grp;            /* merged LoRA groups (lora_merge_ok): (N, 3 r) x@[A..] forward, dxa backward */
    float *a_cat;             /* merged LoRA groups: (C, 3 r) the members' A side by side */
    float *ylin;              /* DoRA: (N, max out) unscaled output */
    float *attn_ws;           /* attention workspace */
    float *dqg, *dagate;      /* gated attention: (N, 2 QD), (N, QD) */
    float *dqkv, *dconv;      /* GDN: (N, CC) x 2 */
    float *dqn, *dkn;         /* GDN: (N, Kd) x 2 */
    float *dcore, *dz, *dgy;  /* GDN: (N, Vd) x 3 */
    float *dg, *dbeta, *dga, *dgb; /* GDN: (N, Hv) x 4 */
    float *gdn_ws;            /* GDN chunk workspace (gdn_workspace_floats, backward) */
} Scratch;

/* Shared by forward and backward of LoRA/DoRA. */
typedef struct {
    float *drop_x;            /* (N, max in): dropout(x), dropout > 0 only */
    float *at, *wa, *g, *gb;  /* DoRA norms: A^T (r, in), (W A)^T (r, out), A^T A (r, r), (A^T A) B (r, out) */
} LoraScratch;

enum { ROPE_SETS = 2 };

struct Model {
    ModelConfig cfg;
    ModelSpec spec;
    Dims d;
    StModel st;
    bool st_open;
    Arena *arena;

    GgufFile gg;              /* a GGUF base (--model FILE.gguf) */
    bool gguf;
    const GgufArch *gg_arch;
    int32_t *q_map, *k_map;   /* GGUF q/k: stored row of each Hugging Face row (heap), or NULL */
    FrozenWeight embed;       /* (V, C) */
    float embed_scale;        /* gemma: sqrt(C) in the table's dtype; 0: none */
    FrozenWeight lm_head;     /* (V, C): embed when tied (MLX's QuantizedEmbedding.as_linear) */
    QuantConfig qc;           /* config.json's quantization (present = false for plain models) */
    float *final_norm;        /* (C) */
    BlockParams *blocks;      /* (L) heap */
    AttnParams *attn;         /* (L) heap: scale, window, soft-cap of each layer */

    TrainableTensor *trainables; /* heap list */
    size_t n_trainables;
    float *train_values, *train_grads; /* one arena block each */
    size_t train_floats;

    float *rope_cos[ROPE_SETS], *rope_sin[ROPE_SETS];  /* (rope_T, rd/2) each */
    float *resid[2];          /* (N, C) ping-pong */
    float *qkv_tmp;           /* fused qkv_proj: (max(N, dec_rows), QKVD) output / gradient */
    BlockActs *acts;          /* (n_train) saved activations of the blocks not checkpointed */
    float **ckpt;             /* (n_train) inputs of the checkpointed blocks */
    bool any_ckpt;            /* some trainable block is checkpointed: work is the recompute set */
    uint64_t *embed_rows;     /* the model's copy of spec.embed_rows (heap), or NULL */
    BlockActs work;           /* recompute set / forward workspace */
    Scratch sc;
    LoraScratch ls;
    float *final_out, *final_rstd;   /* (N, C), (N) */
    int *ids, *targets;       /* (N) */
    float *row_weight;        /* (N) */
    float *lmhead_scratch;
    void *mm_scratch;
    size_t mm_scratch_bytes;
    void *mm_pad;             /* oneDNN's scratchpad (spec.library_scratchpad) */
    size_t mm_pad_bytes;

    void *panel_scratch;      /* expansion panels of the frozen products (frozen_weight.h) */
    size_t panel_scratch_bytes;

    /* KV cache: layer l holds kv_len[l] positions from kv_off[l] (rows of
     * KVD floats); a sliding layer's is a ring of window + dec_rows - 1 */
    float *kcache, *vcache;
    size_t *kv_off;           /* (L) heap */
    int *kv_len;              /* (L) heap (0 on Gated DeltaNet layers) */
    int *cache_slot;          /* (L) heap: a Gated DeltaNet layer's state slot */
    float *conv_state;        /* GDN layers: (n_gdn, K-1, CC) the last K-1 conv inputs */
    float *rec_state;         /* GDN layers: (n_gdn, Hv, Dk, Dv) the recurrent state */
    float *dec_gdn_ws;        /* GDN chunk workspace of a multi-token decode step */
    BlockActs dec;            /* (dec_rows) workspace */
    float *dec_x, *dec_x2, *dec_scores; /* (dec_rows, C) x2, (H, kv_T) */
    int32_t *dec_tokens;      /* (kv_T) the sequence so far (longrope recomputes it) */
    int dec_len;              /* positions filled */
    bool dec_long;            /* longrope: the cache was built with the long factors */

    uint64_t dropout_seed;
    bool dora_fresh;          /* dnorm matches the current adapter */
    bool dora_frozen;         /* testing hook, see model_freeze_dora_norms */
};

/* Block l's parameters are fully trainable (full fine-tuning's blocks). */
static inline bool block_is_full(const Model *m, int l) { return m->spec.type == TUNE_FULL && l >= m->d.lo; }
/* The projections of block l with a LoRA/DoRA branch (bitmask of 1u << PROJ_*). */
static inline unsigned block_adapted_mask(const Model *m, int l) {
    if ((m->spec.type != TUNE_LORA && m->spec.type != TUNE_DORA) || l < m->d.lo) return 0;
    return m->spec.lora_keys & layer_projs(&m->cfg, l);
}

/* Trainable block l keeps only its input (spec.grad_checkpoint or spec.ckpt_blocks). */
static inline bool block_ckpt(const Model *m, int l) { return spec_block_ckpt(&m->spec, l); }

/* model_weights.c: matrix k of the model (0 embedding, 1 LM head, then
 * PROJ_COUNT slots per block): module path (with cfg's prefix) and (rows,
 * cols); false when the model has no such matrix (a tied head, a projection
 * the family's blocks do not have). */
int weights_matrix_count(const Dims *d);
bool weights_matrix(const ModelConfig *cfg, const Dims *d, int k, char *module, size_t cap, int *rows, int *cols);
/* The stored matrix of `module` as a FrozenWeight (into st's mapping),
 * multiplied in the compute type weights_compute gives for products of
 * dtype run. */
int weights_view(const StModel *st, const QuantConfig *qc, const char *module, int rows, int cols, DType run,
                 FrozenWeight *out, bool *quantized);
/* The compute type of a stored matrix in products of dtype run: BF16 when
 * run is BF16 and the stored values are bf16 numbers (plain BF16, affine
 * with BF16 scales), else F32. */
DType weights_compute(const FrozenWeight *w, DType run);
int weights_summary_open(const StModel *st, const ModelConfig *cfg, const QuantConfig *qc, WeightsSummary *ws);
void weights_summary_plain(WeightsSummary *ws, DType file_dtype);

/* model_gguf.c: a GGUF file as the base (see model.h for the public half). */
int gguf_row_maps(const ModelConfig *cfg, const GgufArch *a, int32_t **q_map, int32_t **k_map);
int gguf_weights_view(const GgufFile *g, const GgufArch *a, const char *module, int rows, int cols,
                      const int32_t *row_map, DType compute, FrozenWeight *out);
int gguf_weights_summary(const GgufFile *g, const GgufArch *a, const ModelConfig *cfg, DType compute,
                         WeightsSummary *ws);
/* rows x cols floats of the HF tensor hf_name (rows read through row_map
 * when given; a vector's elements are its rows). */
/* model_frozen_views for a GGUF file (data pointers NULL). */
int gguf_frozen_views(const char *model, const ModelConfig *cfg, DType run, FrozenWeight **out, int *n);
int gguf_tensor_f32(const GgufFile *g, const GgufArch *a, const char *hf_name, const int32_t *row_map,
                    int64_t rows, int64_t cols, float *dst);

/* The one layout walk: fills m's pointers (allocation mode) or only records
 * (planning mode, m may be a scratch Model). m->d must be set. */
int layout_walk(Model *m, const ModelSpec *spec, Carver *cv);

/* The RoPE tables of layer l for a sequence of len positions (longrope picks
 * its factors by it); NULL for a NoPE layer. */
const float *layer_rope(const Model *m, int l, int len, const float **sin_t);
/* Embedding lookup of n tokens, times gemma's scale. */
void embed_rows(Model *m, float *out, const int *ids, int n);

/* lora.c: an adapted projection. x16: x already rounded to bf16 (from
 * proj_shared_input), used by the base product when its weight is BF16; or NULL. */
void proj_forward(Model *m, const BlockParams *bp, int layer, int p,
                  float *out, const float *x, const uint16_t *x16, float *xa, int N, bool skip_base);
/* The projections of mask (q/k/v, or gate/up) read the same x (N, in): when
 * any of them has a BF16 weight, x is rounded to bf16 once here (into the
 * matmul conversion scratch) for all of them; else NULL. */
const uint16_t *proj_shared_input(const BlockParams *bp, unsigned mask, const float *x, int N, int in);
/* dx (N, in) += the input gradient, or = it when dx_set (the buffer's first
 * contribution: no zeroing needed); dx NULL when not needed. */
void proj_backward(Model *m, const BlockParams *bp, int layer, int p,
                   float *dx, bool dx_set, const float *dout, const float *x, const float *xa, int N);
/* Merged LoRA A products of projections that share an input (lora.c):
 * lora_merge_ok: the run merges at N rows (training, no dropout);
 * lora_group: the adapted projections of mask (q/k/v or gate/up) that are
 * merged in block l, or 0 (fewer than two, or no merging). A group's
 * forward: proj_forward_base of each member, then lora_group_forward (outs,
 * xa indexed by PROJ_*); backward: proj_backward_grouped of each member in
 * PROJ_* order, then lora_group_backward. */
bool lora_merge_ok(const Dims *d, int N);
unsigned lora_group(const Model *m, const BlockParams *bp, unsigned mask, int N);
void proj_forward_base(Model *m, const BlockParams *bp, int p, float *out, const float *x, const uint16_t *x16,
                       int N);
void lora_group_forward(Model *m, const BlockParams *bp, unsigned grp, float *const outs[PROJ_COUNT],
                        float *const xa[PROJ_COUNT], const float *x, int N);
void proj_backward_grouped(Model *m, const BlockParams *bp, int layer, int p, float *dx, bool dx_set,
                           const float *dout, const float *x, const float *xa, int N, unsigned grp);
void lora_group_backward(Model *m, const BlockParams *bp, unsigned grp, float *dx, const float *x, int N);
void dora_update_norms(Model *m);

/* model_residency.c: settles which pages of the weight files are resident
 * (those the run reads in place; see model_plan_weights), and reads a
 * tensor out of its file with pread (n elements, converted to dst_type). */
int model_keep_resident(Model *m);
int model_read_tensor(const Model *m, const StTensor *t, void *dst, DType dst_type, size_t n);

/* block.c. The q/k/v projections (and q/k norms; Qwen3.5: the output gate
 * into agate) of ln1 -> q, k, v, and the gate/up projections and activation
 * of ln2 -> act, shared with decode.c. */
void block_qkv_forward(Model *m, int layer, const BlockActs *a, int N);
void block_glu_forward(Model *m, int layer, const BlockActs *a, int N);
/* o_proj's input: att, or (Qwen3.5) att * sigmoid(agate) into a->ag. */
const float *block_attn_out_input(Model *m, const BlockActs *a, int N);
void block_forward(Model *m, int layer, const BlockActs *a, float *x_out,
                   int B, int T, bool recompute);
void block_backward(Model *m, int layer, const BlockActs *a, int B, int T);
/* The MLP half of a block: x_out = x_mid + post2(down(act(gate(ln2)) up(ln2))),
 * and its backward (m->sc.dres from d(x_out) to d(x_mid)). */
void block_mlp_forward(Model *m, int layer, const BlockActs *a, float *x_out, int N, bool recompute);
void block_mlp_backward(Model *m, int layer, const BlockActs *a, int N);

/* block_gdn.c: the Gated DeltaNet token mixer of block l, x_in -> x_mid
 * (forward) and m->sc.dres from d(x_mid) to d(x_in) (backward). */
void gdn_mixer_forward(Model *m, int layer, const BlockActs *a, int B, int T);
void gdn_mixer_backward(Model *m, int layer, const BlockActs *a, int B, int T);
/* One decode chunk of `rows` positions of a single sequence through the
 * mixer of GDN layer l, carrying its conv and recurrent state. */
void gdn_mixer_decode(Model *m, int layer, const BlockActs *a, const float *x, int rows);
/* model.c */
void model_bind_scratch(Model *m);
#endif

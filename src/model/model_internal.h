/* model_internal.h: what the files of src/model share and nobody else sees:
 * the dimensions of a run, the parameter pointers of one block, one block's
 * activation set, the backward scratch, and struct Model itself. Every
 * pointer here is carved by the one layout walk (model_layout.c), so the
 * memory plan and the real buffers are the same list. */
#ifndef LT_MODEL_INTERNAL_H
#define LT_MODEL_INTERNAL_H
#include "model/model.h"
#include "formats/safetensors.h"
#include "formats/mlx_quant.h"
#include "kernels/frozen_weight.h"
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
    int B, T, N;          /* max rows, max positions, N = B*T */
    int lo;               /* lowest trainable block (L when none) */
    int n_train;          /* L - lo */
    int r;                /* LoRA rank (0 unless LoRA/DoRA) */
    int chunk;            /* LM-head rows per chunk */
    int rope_T;           /* rows of the RoPE tables */
    int dec_rows;         /* rows of one decode step chunk (0: no KV cache) */
    int kv_T;             /* KV cache positions */
    int max_pos;          /* positions decoding may reach (> kv_T: the cache rotates) */
    bool train;           /* gradients and saved activations exist */
    bool dropout;         /* training with lora_dropout > 0 */
    bool qk_norm, bias;
    bool q35;             /* Qwen3.5: gated attention and Gated DeltaNet blocks */
    bool attn_gate;       /* q_proj also gives the attention output's gate: (N, 2 QD) */
    int rd;               /* dims of a head RoPE rotates (D unless partial rotary) */
    float norm_off;       /* stored RMSNorm weights are used as w + norm_off (1: zero-centred) */
    int n_gdn, n_attn;    /* Qwen3.5: blocks of each kind */
    GdnDims g;
    DType file_dtype;     /* dtype of the matrices in the file (of the scales when quantized) */
    DType run_dtype;      /* dtype of the frozen products (spec.weight_dtype) */
    bool convert;         /* frozen matrices are converted into the arena (F32/F16 file, bf16 products) */
    bool quantized;       /* some matrix is MLX-quantized: every matrix is used as stored */
    bool bf16_compute;    /* some frozen product runs in bf16 (the conversion scratch exists) */
    int panel_cols;       /* widest frozen matrix whose products expand panels (0: none) */
} Dims;

int dims_init(Dims *d, const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype);
/* What the safetensors headers add to the dimensions (model_weights_summary). */
int dims_apply_summary(Dims *d, const ModelSpec *spec, const WeightsSummary *ws);
/* in/out features of projection p. */
void proj_shape(const Dims *d, int p, int *in, int *out);
/* The projections of block l (PROJ_ATTN_BLOCK or PROJ_GDN_BLOCK). */
unsigned layer_projs(const ModelConfig *cfg, int l);
static inline bool layer_gdn(const ModelConfig *cfg, int l) { return cfg->q35.on && cfg->q35.linear[l]; }

/* Parameters of one block: what forward and backward read. Gradient
 * pointers are NULL when the tensor is frozen. */
typedef struct {
    FrozenWeight w[PROJ_COUNT]; /* (out, in); full fine-tuning: the fp32 masters, plain F32 */
    float *dw[PROJ_COUNT];      /* full fine-tuning */
    float *bias[3], *dbias[3];  /* q, k, v (attention_bias) */
    float *ln1, *dln1, *ln2, *dln2;
    float *qn, *dqn, *kn, *dkn; /* qwen3 q/k norms (D) */
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
    /* full fine-tuning of zero-centred norms: ln1/ln2/qn/kn point at w + 1,
     * rebuilt from these trainable values before every pass (norms_refresh) */
    const float *ln1_w, *ln2_w, *qn_w, *kn_w;
} BlockParams;

/* One block's activations ((N, .) rows; x_in points at the block's input). */
typedef struct {
    float *x_in;              /* (N, C) */
    float *ln1, *rstd1;       /* (N, C), (N) */
    float *q_pre, *k_pre;     /* qwen3: projections before the q/k norm */
    float *q_rstd, *k_rstd;   /* (N*H), (N*KVH) */
    float *q, *k, *v;         /* (N, QD), (N, KVD), (N, KVD), after RoPE */
    float *att, *lse;         /* (N, QD), (B, H, T) */
    float *x_mid;             /* (N, C) residual after attention */
    float *ln2, *rstd2;       /* (N, C), (N) */
    float *gate, *up, *act;   /* (N, F) */
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
    float *datt, *dq, *dk, *dv; /* (N, QD), (N, QD), (N, KVD), (N, KVD) */
    float *dq_pre, *dk_pre;   /* qwen3 */
    float *dgate, *dup, *dact; /* (N, F) */
    float *dxa;               /* (N, r) */
    float *dat;               /* (r, max in) LoRA dA^T, see proj_backward */
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
    FrozenWeight lm_head;     /* (V, C): embed when tied (MLX's QuantizedEmbedding.as_linear) */
    QuantConfig qc;           /* config.json's quantization (present = false for plain models) */
    float *final_norm;        /* (C) */
    BlockParams *blocks;      /* (L) heap */

    TrainableTensor *trainables; /* heap list */
    size_t n_trainables;
    float *train_values, *train_grads; /* one arena block each */
    size_t train_floats;

    float *rope_cos, *rope_sin;  /* (rope_T, rd/2) */
    float *norm_eff;          /* full fine-tuning of zero-centred norms: the w + 1 copies */
    float *resid[2];          /* (N, C) ping-pong */
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

    /* KV cache */
    float *kcache, *vcache;   /* (attention layers, kv_T, KVD) */
    int *cache_slot;          /* (L) heap: layer -> its KV cache or GDN state slot */
    float *conv_state;        /* GDN layers: (n_gdn, K-1, CC) the last K-1 conv inputs */
    float *rec_state;         /* GDN layers: (n_gdn, Hv, Dk, Dv) the recurrent state */
    float *dec_gdn_ws;        /* GDN chunk workspace of a multi-token decode step */
    BlockActs dec;            /* (dec_rows) workspace */
    float *dec_x, *dec_x2, *dec_scores; /* (dec_rows, C) x2, (H, kv_T) */
    int dec_len;              /* positions filled */

    uint64_t dropout_seed;
    bool dora_fresh;
    bool dora_frozen;         /* testing hook, see model_freeze_dora_norms */          /* dnorm matches the current adapter */
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
 * PROJ_COUNT per block): module path in the files and (rows, cols). */
int weights_matrix_count(const Dims *d);
/* false: block k's layer has no such projection (Qwen3.5's two block kinds). */
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

/* lora.c: an adapted projection. x16: x already rounded to bf16 (from
 * proj_shared_input), used by the base product when its weight is BF16; or NULL. */
void proj_forward(Model *m, const BlockParams *bp, int layer, int p,
                  float *out, const float *x, const uint16_t *x16, float *xa, int N, bool skip_base);
/* Projections p0..p1 (q/k/v, or gate/up) read the same x (N, in): when any
 * of them has a BF16 weight, x is rounded to bf16 once here (into the matmul
 * conversion scratch) for all of them; else NULL. */
const uint16_t *proj_shared_input(const BlockParams *bp, int p0, int p1, const float *x, int N, int in);
/* dx (N, in) += the input gradient, or = it when dx_set (the buffer's first
 * contribution: no zeroing needed); dx NULL when not needed. */
void proj_backward(Model *m, const BlockParams *bp, int layer, int p,
                   float *dx, bool dx_set, const float *dout, const float *x, const float *xa, int N);
void dora_update_norms(Model *m);

/* model_residency.c: settles which pages of the weight files are resident
 * (those the run reads in place; see model_plan_weights), and reads a
 * tensor out of its file with pread (n elements, converted to dst_type). */
int model_keep_resident(Model *m);
int model_read_tensor(const Model *m, const StTensor *t, void *dst, DType dst_type, size_t n);

/* block.c */
void block_forward(Model *m, int layer, const BlockActs *a, float *x_out,
                   int B, int T, bool recompute);
void block_backward(Model *m, int layer, const BlockActs *a, int B, int T);
/* The MLP half of a block: x_out = x_mid + down(silu(gate(ln2)) up(ln2)), and
 * its backward (m->sc.dres from d(x_out) to d(x_mid)). */
void block_mlp_forward(Model *m, int layer, const BlockActs *a, float *x_out, int N, bool recompute);
void block_mlp_backward(Model *m, int layer, const BlockActs *a, int N);
/* Rebuilds the w + 1 copies of trainable zero-centred norms. */
void norms_refresh(Model *m);

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

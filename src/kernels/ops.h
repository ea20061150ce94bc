/* ops.h: the element-wise and row-wise kernels of the decoder, each a
 * _forward/_backward pair on raw float pointers (llm.c style: outputs first,
 * then inputs, then weights, then dimensions). Every _backward ACCUMULATES
 * (+=) into its gradient outputs, so callers zero them once. */
#ifndef LT_OPS_H
#define LT_OPS_H
#include <stdbool.h>
#include <stddef.h>
#include "base/dtype.h"
#include "base/rope_scaling.h"
#include "kernels/frozen_weight.h"
#include "kernels/matmul.h"

/* --- embedding --- */
void embedding_forward(float *out,         /* (N, C) */
                       const int *tokens,  /* (N) */
                       const void *table,  /* (V, C) in dtype ttype */
                       DType ttype, int N, int C);
void embedding_backward(float *dtable,     /* (V, C) += */
                        const float *dout, /* (N, C) */
                        const int *tokens, int N, int C);

/* --- RMSNorm (fp32 math, as HF LlamaRMSNorm): out = x * rstd * (weight + w_off),
 *     rstd = 1/sqrt(mean(x^2) + eps); w_off = 1 for Gemma's zero-centred
 *     weights (1 + w), 0 otherwise --- */
void rmsnorm_forward(float *out,          /* (N, C) */
                     float *rstd,         /* (N), saved for backward */
                     const float *inp,    /* (N, C) */
                     const float *weight, /* (C) */
                     float w_off, float eps, int N, int C);
void rmsnorm_backward(float *dinp,         /* (N, C) += */
                      float *dweight,      /* (C) += , or NULL when frozen */
                      const float *dout,   /* (N, C) */
                      const float *inp,    /* (N, C) */
                      const float *weight, /* (C) */
                      float w_off,
                      const float *rstd,   /* (N) */
                      int N, int C);

/* --- RoPE, HF convention (rotate_half: pairs are (i, i + rd/2)) on the
 *     first rd dims of each head (rd = D unless partial rotary) --- */
/* cos/sin tables for positions 0..T-1: (T, rd/2) each. long_factors picks
 * longrope's long set (ignored by the other types). */
void rope_tables(float *cos_t, float *sin_t, int T, int rd, double theta, const RopeScaling *scaling,
                 bool long_factors);
/* In place on x (B, T, H, D), dims [0, rd) of each head: x1' = x1*c - x2*s,
 * x2' = x2*c + x1*s with x1 = dims [0, rd/2), x2 = [rd/2, rd). */
void rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd);
/* In place on dx (B, T, H, D): the transpose rotation (uses -sin). */
void rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd);

/* --- causal grouped-query attention, flash-style: no (T x T) matrix is
 *     kept; the backward recomputes scores from q, k and the saved
 *     log-sum-exp. Head h reads kv head h / (H / KVH). D <= 256.
 *     AttnParams: the score scale (1/sqrt(D) for most families), an optional
 *     sliding window (query i sees keys i-window+1..i; the tiles outside it
 *     are skipped in both passes, so a sliding layer costs O(T x window)),
 *     and optional tanh soft-capping of the scores (Gemma 2). Per-thread
 *     tiles live on the OpenMP threads' stacks (at most (640 * roundup(D, 16)
 *     + 4608) floats, 4096 more with soft-capping: 178 KiB at D = 64, 338 KiB
 *     at D = 128, 658 KiB at D = 256; with bf16 products (736 * D + 14336)
 *     floats: 240 KiB at D = 64; the default 8 MiB thread stacks hold that
 *     easily).
 *     The forward runs tasks of (batch, 64-query block, kv head, <= 4 of its
 *     heads); the backward runs one task per (key segment, batch, kv head),
 *     so it uses at most key_splits * B * KVH threads. The workspace holds
 *     rowsum(dout * out), (B, H, T), and key_splits - 1 dq partials. --- */
typedef struct {
    float scale;      /* scores = scale * q.k */
    int window;       /* > 0: sliding window of this many keys (self included); 0: full causal */
    float softcap;    /* > 0: scores = softcap * tanh(scores / softcap) */
    bool bf16;        /* tile products in bf16 with fp32 sums (vdpbf16ps), where the CPU has
                         AVX512_BF16 (attention_bf16_supported); else, and when false, fp32 */
    int key_splits;   /* backward: cut each kv head's keys into this many segments of equal
                         work (0 or 1: none); the workspace must be sized for it */
} AttnParams;
void attention_forward(float *out,      /* (B, T, H, D) */
                       float *lse,      /* (B, H, T), saved for backward */
                       const float *q,  /* (B, T, H, D) */
                       const float *k,  /* (B, T, KVH, D) */
                       const float *v,  /* (B, T, KVH, D) */
                       int B, int T, int H, int KVH, int D, const AttnParams *ap);
void attention_backward(float *dq,        /* (B, T, H, D) += */
                        float *dk,        /* (B, T, KVH, D) += */
                        float *dv,        /* (B, T, KVH, D) += */
                        const float *dout,/* (B, T, H, D) */
                        const float *q, const float *k, const float *v,
                        const float *out, /* (B, T, H, D) forward output */
                        const float *lse, /* (B, H, T) */
                        float *workspace, /* attention_workspace_floats(...) floats */
                        int B, int T, int H, int KVH, int D, const AttnParams *ap);
size_t attention_workspace_floats(int B, int T, int H, int KVH, int D, int key_splits);
/* Key segments for the backward on `threads` threads: 1 when batch x kv
 * heads gives every thread two tasks, else enough for that, at most 8 (the
 * workspace's dq partials: (splits - 1) B T H D floats, linear in T; a
 * sequence with fewer 64-key blocks uses fewer). The result depends on the
 * thread count: a run's dq sums change with it when B x KVH < 2 threads (as
 * oneDNN's do). */
int attention_key_splits(int B, int KVH, int threads);
/* True when AttnParams.bf16 takes effect: the AVX-512 kernels run and the
 * CPU has AVX512_BF16 (CPUID, once). Else bf16 requests run in fp32. */
bool attention_bf16_supported(void);
/* Bytes of the tiles one thread's attention task keeps on its stack (the
 * larger of the forward's and the backward's): resident on every OpenMP
 * thread's stack once attention has run, so the memory plan counts them.
 * bf16: the run asks for bf16 products (AttnParams.bf16): 62 KiB more at
 * D = 64 (the backward's bf16 operands). */
size_t attention_stack_bytes(int D, bool bf16);
/* Decoding (kernels/attention_cache.c): out (rows, H*D) for the query rows
 * q (rows, H*D) at absolute positions p0.. over a KV cache of len slots
 * (kc, vc: (len, KVH*D), keys after RoPE): row i sees positions j0..p0+i,
 * j0 = p0+i-window+1 on a sliding layer (at least 0), the slot of position
 * j being j mod len; a full layer's row sees at most len slots (a rotating
 * cache: every slot). scores: H rows of score_stride >= the positions a row
 * sees, one per head. Parallel over heads. */
void attention_cached(float *out, const float *q, const float *kc, const float *vc, float *scores,
                      size_t score_stride, int rows, int p0, int len, int H, int KVH, int D, const AttnParams *ap);
/* A decode chunk through attention_forward's tiles: out (rows, H*D) for the
 * query rows q (rows, H*D) at positions p0 .. p0 + rows - 1 over a cache
 * whose first p0 + rows slots hold positions 0 .. p0 + rows - 1 in order
 * (kc, vc: (p0 + rows, KVH*D); no ring wrap, no rotation), causal and
 * within the window on a sliding layer. p0 a multiple of
 * ATTN_PREFILL_ALIGN (the tile: the last key tile of a query tile is then
 * its diagonal one). lse: (H, rows) floats of scratch. The same sums as
 * attention_cached up to their order, as tile products: a long prompt's
 * rows at the training forward's rate instead of one position at a time. */
enum { ATTN_PREFILL_ALIGN = 64 };
void attention_prefill(float *out, float *lse, const float *q, const float *kc, const float *vc, int rows, int p0,
                       int H, int KVH, int D, const AttnParams *ap);

/* --- gated MLP activations: out = act(gate) * up, act = silu (SwiGLU) or
 *     the tanh approximation of GELU (GeGLU, Gemma's gelu_pytorch_tanh).
 *     gate and up (and their gradients) are rows of stride ld, so a fused
 *     gate_up projection (ld = 2F, up = gate + F) is read in place. --- */
enum { GLU_SILU = 0, GLU_GELU_TANH = 1 };
void glu_forward(float *out,        /* (rows, F) */
                 const float *gate, /* (rows, ld) */
                 const float *up,   /* (rows, ld) */
                 size_t rows, size_t F, size_t ld, int act);
void glu_backward(float *dgate, float *dup, /* (rows, ld) += */
                  const float *dout,        /* (rows, F) */
                  const float *gate, const float *up, size_t rows, size_t F, size_t ld, int act);
/* glu_backward, except that dgate and dup are overwritten (=) */
void glu_backward_set(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t rows,
                      size_t F, size_t ld, int act);
/* SwiGLU on contiguous (n) vectors. */
void swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void swiglu_backward(float *dgate, float *dup,   /* += */
                     const float *dout, const float *gate, const float *up, size_t n);

/* --- LM head + cross-entropy, in chunks of rows: the (N, V) logits never
 *     exist, only (chunk, V) at a time. softcap > 0: the logits are
 *     softcap * tanh(z / softcap) (Gemma 2's final_logit_softcapping).
 *     Row i counts with weight row_weight[i]
 *     (0 = skipped, no logits computed for it). Returns
 *     sum_i row_weight[i] * (logsumexp(z_i) - z_i[target_i]), z_i = inp_i W^T,
 *     in double. When dinp != NULL, dinp += d(that sum)/d(inp).
 *     row_loss[i] (if given) is the UNweighted loss of row i, 0 for skipped rows.
 *     The scratch covers everything, including the bf16 copies of the bf16
 *     product path (it does not use matmul_set_scratch's buffer):
 *     chunk * (2 C + V) floats. With bf16 products (w->compute BF16) the
 *     dlogits are rounded to bf16 before dinp = dlogits W. Targets outside [0, V) of counted rows
 *     are a caller bug (die). --- */
double lmhead_xent(float *dinp,             /* (N, C) += , or NULL (eval) */
                   float *row_loss,         /* (N) per-row loss, or NULL */
                   const float *inp,        /* (N, C) final-norm output */
                   const FrozenWeight *w,   /* (V, C): plain or packed (kernels/frozen_weight.h) */
                   const int *targets,      /* (N) */
                   const float *row_weight, /* (N) */
                   float *scratch,          /* lmhead_scratch_floats(chunk, C, V) */
                   float softcap, int chunk, int N);
size_t lmhead_scratch_floats(int chunk, int C, int V);
/* Whether lmhead_xent computes a chunk's input gradient transposed (an fp32
 * weight multiplied as stored), and that product's shape on np rows. */
bool lmhead_dinp_transposed(const FrozenWeight *w);
MatmulShape lmhead_dinp_transposed_shape(int np, int C, int V);
/* Rows the products of a chunk of n counted rows run on: n rounded up to a
 * multiple of 16, at most chunk (zero rows; see lmhead_xent.c). */
int lmhead_product_rows(int n, int chunk);
/* Plain logits for generation: out (N, V) = inp (N, C) W^T, soft-capped as
 * lmhead_xent when softcap > 0. A bf16 product needs the matmul conversion
 * scratch for (N, C). */
void lmhead_logits(float *out, const float *inp, const FrozenWeight *w, float softcap, int N);
#endif

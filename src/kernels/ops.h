/* ops.h: the element-wise and row-wise kernels of the decoder, each a
 * _forward/_backward pair on raw float pointers (llm.c style: outputs first,
 * then inputs, then weights, then dimensions). Every _backward ACCUMULATES
 * (+=) into its gradient outputs, so callers zero them once. */
#ifndef LT_OPS_H
#define LT_OPS_H
#include <stddef.h>
#include "base/dtype.h"
#include "base/rope_scaling.h"
#include "kernels/frozen_weight.h"

/* --- embedding --- */
void embedding_forward(float *out,         /* (N, C) */
                       const int *tokens,  /* (N) */
                       const void *table,  /* (V, C) in dtype ttype */
                       DType ttype, int N, int C);
void embedding_backward(float *dtable,     /* (V, C) += */
                        const float *dout, /* (N, C) */
                        const int *tokens, int N, int C);

/* --- RMSNorm (fp32 math, as HF LlamaRMSNorm): out = x * rstd * weight,
 *     rstd = 1/sqrt(mean(x^2) + eps) --- */
void rmsnorm_forward(float *out,          /* (N, C) */
                     float *rstd,         /* (N), saved for backward */
                     const float *inp,    /* (N, C) */
                     const float *weight, /* (C) */
                     float eps, int N, int C);
void rmsnorm_backward(float *dinp,         /* (N, C) += */
                      float *dweight,      /* (C) += , or NULL when frozen */
                      const float *dout,   /* (N, C) */
                      const float *inp,    /* (N, C) */
                      const float *weight, /* (C) */
                      const float *rstd,   /* (N) */
                      int N, int C);

/* --- RoPE, HF convention (rotate_half: pairs are (i, i + D/2)) --- */
/* cos/sin tables for positions 0..T-1: (T, D/2) each. */
void rope_tables(float *cos_t, float *sin_t, int T, int D, double theta, const RopeScaling *scaling);
/* In place on x (B, T, H, D): x1' = x1*c - x2*s, x2' = x2*c + x1*s. */
void rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int D);
/* In place on dx (B, T, H, D): the transpose rotation (uses -sin). */
void rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int H, int D);

/* --- causal grouped-query attention, flash-style: no (T x T) matrix is
 *     kept; the backward recomputes scores from q, k and the saved
 *     log-sum-exp. Head h reads kv head h / (H / KVH). scale = 1/sqrt(D).
 *     D <= 256. Per-thread tiles live on the OpenMP threads' stacks (at most
 *     (640 * roundup(D, 16) + 4608) floats: 178 KiB at D = 64, 338 KiB at
 *     D = 128; the default 8 MiB thread stacks hold that easily).
 *     The forward runs tasks of (batch, 64-query block, kv head, <= 4 of its
 *     heads); the backward runs one task per (batch, kv head), so it uses at
 *     most B * KVH threads. The workspace holds rowsum(dout * out), (B, H, T). --- */
void attention_forward(float *out,      /* (B, T, H, D) */
                       float *lse,      /* (B, H, T), saved for backward */
                       const float *q,  /* (B, T, H, D) */
                       const float *k,  /* (B, T, KVH, D) */
                       const float *v,  /* (B, T, KVH, D) */
                       int B, int T, int H, int KVH, int D);
void attention_backward(float *dq,        /* (B, T, H, D) += */
                        float *dk,        /* (B, T, KVH, D) += */
                        float *dv,        /* (B, T, KVH, D) += */
                        const float *dout,/* (B, T, H, D) */
                        const float *q, const float *k, const float *v,
                        const float *out, /* (B, T, H, D) forward output */
                        const float *lse, /* (B, H, T) */
                        float *workspace, /* attention_workspace_floats(...) floats */
                        int B, int T, int H, int KVH, int D);
size_t attention_workspace_floats(int B, int T, int H, int KVH, int D);
/* Bytes of the tiles one thread's attention task keeps on its stack (the
 * larger of the forward's and the backward's): resident on every OpenMP
 * thread's stack once attention has run, so the memory plan counts them. */
size_t attention_stack_bytes(int D);

/* --- SwiGLU: out = silu(gate) * up --- */
void swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void swiglu_backward(float *dgate, float *dup,   /* += */
                     const float *dout, const float *gate, const float *up, size_t n);

/* --- LM head + cross-entropy, in chunks of rows: the (N, V) logits never
 *     exist, only (chunk, V) at a time. Row i counts with weight row_weight[i]
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
                   int chunk, int N);
size_t lmhead_scratch_floats(int chunk, int C, int V);
/* Rows the products of a chunk of n counted rows run on: n rounded up to a
 * multiple of 16, at most chunk (zero rows; see lmhead_xent.c). */
int lmhead_product_rows(int n, int chunk);
/* Plain logits for generation: out (N, V) = inp (N, C) W^T. A bf16 product
 * needs the matmul conversion scratch for (N, C). */
void lmhead_logits(float *out, const float *inp, const FrozenWeight *w, int N);
#endif

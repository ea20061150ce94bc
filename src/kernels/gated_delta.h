/* gated_delta.h: the kernels of the Gated DeltaNet token mixer of Qwen3.5
 * (and Qwen3-Next), each a _forward/_backward pair on raw float pointers,
 * llm.c style (outputs first, then inputs, then weights, then dimensions;
 * every _backward ACCUMULATES (+=) into its gradient outputs).
 *
 * The mixer, as verified in the sources (transformers
 * models/qwen3_5/modeling_qwen3_5.py Qwen3_5GatedDeltaNet, and MLX-LM
 * mlx_lm/models/qwen3_5.py GatedDeltaNet + gated_delta.py), per token and
 * after the four input projections of the block's normed input x:
 *   qkv = in_proj_qkv x   (key_dim + key_dim + value_dim), key_dim = Hk*Dk,
 *                          value_dim = Hv*Dv, channels in that order
 *   z = in_proj_z x (Hv*Dv), b = in_proj_b x (Hv), a = in_proj_a x (Hv)
 *   c = silu(depthwise causal conv1d(qkv)), kernel K (4), no bias, zero
 *       left padding: c[t,ch] = sum_j w[ch,j] qkv[t-K+1+j, ch];
 *       HF stores w as (Cc, 1, K), MLX as (Cc, K, 1): the same numbers
 *   q, k, v = split(c) into (Hk, Dk), (Hk, Dk), (Hv, Dv) heads
 *   q <- q / sqrt(sum q^2 + 1e-6) / sqrt(Dk);  k <- k / sqrt(sum k^2 + 1e-6)
 *       (HF l2norm, eps 1e-6 on the sum of squares, "use_qk_l2norm_in_kernel";
 *       MLX: rms_norm(., eps 1e-6) * Dk^-1/2 (q: Dk^-1), i.e. eps Dk*1e-6
 *       on the sum: the eps is this kernel's parameter)
 *   beta = sigmoid(b);  g = -exp(A_log) * softplus(a + dt_bias)  (log decay,
 *       A_log and dt_bias (Hv) kept fp32)
 *   value head h reads key head h / (Hv / Hk) (repeat_interleave / mx.repeat)
 *   state S (Dk, Dv) per (row, value head), zero at t = 0:
 *       S <- exp(g_t) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t
 *       (HF keeps S as (Dk, Dv), MLX as (Dv, Dk): transposes of each other)
 *   y = norm_w * (o / sqrt(mean_Dv(o^2) + eps)) * silu(z)  per value head
 *       (Qwen3_5RMSNormGated: weight stored as is, NOT zero-centred; eps is
 *       rms_norm_eps), then out_proj (Hv*Dv -> hidden).
 *
 * The recurrence runs chunked (gated_delta_forward): within a chunk of C
 * positions it is matrix products (the UT / WY form of the delta rule, as
 * HF's torch_chunk_gated_delta_rule), and only one (Dk, Dv) state per chunk
 * is carried; the backward recomputes a chunk's intermediates from the state
 * saved at its start, so memory is one state per chunk, not per token. */
#ifndef LT_GATED_DELTA_H
#define LT_GATED_DELTA_H
#include <stddef.h>

/* Shape of one gated delta rule call. q, k rows (one per token) are ldq /
 * ldk floats apart and hold Hk heads of Dk; v rows ldv apart with Hv heads of
 * Dv; g and beta (B*T, Hv); out (B*T, Hv*Dv). */
typedef struct {
    int B, T;        /* rows, positions per row */
    int Hk, Hv;      /* key heads, value heads (Hv a multiple of Hk) */
    int Dk, Dv;      /* head dims */
    int chunk;       /* positions per chunk (64 by default) */
} GdnShape;

/* Number of chunks of a row: ceil(T / chunk). */
int gdn_num_chunks(const GdnShape *s);
/* Floats of the per-chunk state buffer: B * Hv * nchunks * Dk * Dv. */
size_t gdn_chunk_states_floats(const GdnShape *s);
/* Floats of the workspace of gated_delta_forward / _backward for `threads`
 * OpenMP threads (each thread works in its own slice). */
size_t gdn_workspace_floats(const GdnShape *s, int threads, int backward);

/* The chunked gated delta rule. state (B, Hv, Dk, Dv): when given, the
 * recurrence starts from it and it receives the final state (generation);
 * NULL starts from zero. chunk_states (B, Hv, nchunks, Dk, Dv), when given,
 * receives the state at the start of every chunk (for the backward).
 * workspace: gdn_workspace_floats(s, threads, 0) floats, threads >= the
 * OpenMP threads the call runs on. */
void gated_delta_forward(float *out,          /* (B*T, Hv*Dv) */
                         float *chunk_states, /* (B, Hv, nchunks, Dk, Dv) or NULL */
                         float *state,        /* (B, Hv, Dk, Dv) in/out, or NULL */
                         const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                         const float *g,      /* (B*T, Hv) log decay, <= 0 */
                         const float *beta,   /* (B*T, Hv) */
                         float *workspace, int threads, const GdnShape *s);
/* Gradients (+=) of sum(dout * out) with the forward started from zero;
 * dq/dk/dv rows have the same strides as q/k/v. Reads the chunk states the
 * forward saved. workspace: gdn_workspace_floats(s, threads, 1). */
void gated_delta_backward(float *dq, float *dk, float *dv,
                          float *dg,           /* (B*T, Hv) += */
                          float *dbeta,        /* (B*T, Hv) += */
                          const float *dout,   /* (B*T, Hv*Dv) */
                          const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                          const float *g, const float *beta,
                          const float *chunk_states,
                          float *workspace, int threads, const GdnShape *s);
/* The plain recurrence, token by token (generation steps, and the check that
 * the chunked form computes the same). state (B, Hv, Dk, Dv) is required:
 * the recurrence starts from it and leaves the final state in it. */
void gated_delta_recurrent_forward(float *out, float *state,
                                   const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                                   const float *g, const float *beta, const GdnShape *s);

/* --- depthwise causal conv1d (no bias) followed by SiLU, over T positions
 *     of B rows: pre[t,c] = sum_j w[c,j] x[t-K+1+j, c], out = silu(pre).
 *     state (B, K-1, C): the K-1 inputs before position 0 (generation), or
 *     NULL for zeros; state_out (B, K-1, C), if given, receives the last
 *     K-1 inputs (state followed by x), for the next call. --- */
void conv1d_silu_forward(float *out,          /* (B*T, C) */
                         const float *inp,    /* (B*T, C) */
                         const float *weight, /* (C, K) */
                         const float *state, float *state_out,
                         int B, int T, int C, int K);
/* K <= 16 (Qwen3.5 uses 4). */
void conv1d_silu_backward(float *dinp,        /* (B*T, C) += */
                          float *dweight,     /* (C, K) += , or NULL when frozen */
                          const float *dout,  /* (B*T, C) */
                          const float *inp, const float *weight, int B, int T, int C, int K);

/* --- per-head L2 normalisation: out = scale * x / sqrt(sum x^2 + eps) for
 *     each of H heads of D floats; input rows ld_in floats apart, output
 *     rows H*D. rnorm (N*H) keeps 1/sqrt(sum x^2 + eps). --- */
void l2norm_forward(float *out, float *rnorm, const float *inp, int ld_in, float scale, float eps,
                    int N, int H, int D);
void l2norm_backward(float *dinp,            /* rows ld_in apart, += */
                     const float *dout,      /* (N, H*D) */
                     const float *inp, int ld_in, const float *rnorm, float scale, int N, int H, int D);

/* --- the gates: beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)
 *     (softplus as torch: x for x > 20). a, b, g, beta (N, H). --- */
void gdn_gates_forward(float *g, float *beta, const float *a, const float *b,
                       const float *A_log, const float *dt_bias, int N, int H);
void gdn_gates_backward(float *da, float *db,          /* (N, H) += */
                        float *dA_log, float *ddt_bias, /* (H) += , or NULL when frozen */
                        const float *dg, const float *dbeta,
                        const float *a, const float *b, const float *A_log, const float *dt_bias, int N, int H);

/* --- gated RMSNorm of Qwen3.5 / Qwen3-Next: per group of D floats,
 *     out = w * x / sqrt(mean(x^2) + eps) * silu(z). rstd (N) saved. --- */
void gated_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *z, const float *weight,
                           float eps, int N, int D);
void gated_rmsnorm_backward(float *dinp, float *dz,    /* (N, D) += */
                            float *dweight,            /* (D) += , or NULL when frozen */
                            const float *dout, const float *inp, const float *z, const float *weight,
                            const float *rstd, int N, int D);
#endif

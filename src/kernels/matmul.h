/* matmul.h: every matrix product of lmtune, through oneDNN (fp32, and bf16
 * inputs with fp32 accumulation for frozen bf16 weights). Primitives are
 * created once per shape and cached, so the step loop creates nothing.
 * Row-major throughout. */
#ifndef LT_MATMUL_H
#define LT_MATMUL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"

/* Sets the scratch that bf16 paths use to convert fp32 activations to bf16;
 * sized by matmul_scratch_bytes() for the largest (rows x cols) converted:
 * linear_forward converts inp (N, C), linear_backward's dinp path converts
 * dout (N, OC); so max_rows = N and max_cols = the largest C or OC of any
 * BF16-weight layer. Must be called before any bf16 product (the memory plan
 * provides it); a product that does not fit dies with a message. */
void matmul_set_scratch(void *scratch, size_t bytes);
size_t matmul_scratch_bytes(size_t max_rows, size_t max_cols);

/* C (M,N) = alpha * op(A) @ op(B) + beta * C, with op(A) (M,K), op(B) (K,N).
 * A is (M,K) or, when transA, (K,M); B is (K,N) or, when transB, (N,K). */
void gemm_f32(float *C, const float *A, const float *B, int M, int N, int K,
              bool transA, bool transB, float alpha, float beta);

/* A linear layer as PyTorch's nn.Linear: out = inp @ weight^T + bias.
 * weight is stored (OC, C) in dtype wtype (F32 or BF16). */
void linear_forward(float *out,          /* (N, OC), overwritten */
                    const float *inp,    /* (N, C) */
                    const void *weight,  /* (OC, C) */
                    DType wtype,
                    const float *bias,   /* (OC) or NULL */
                    int N, int C, int OC);

/* Accumulates (+=) into whichever of dinp, dweight, dbias is not NULL.
 * dweight is fp32 (trainable weights are fp32 masters). */
void linear_backward(float *dinp,         /* (N, C) += dout @ weight, or NULL */
                     float *dweight,      /* (OC, C) += dout^T @ inp, or NULL */
                     float *dbias,        /* (OC) += sum over rows of dout, or NULL */
                     const float *dout,   /* (N, OC) */
                     const float *inp,    /* (N, C) */
                     const void *weight,  /* (OC, C) */
                     DType wtype,
                     int N, int C, int OC);
/* linear_backward, except that dinp is overwritten (dout @ weight), not
 * accumulated into: the first product into a gradient buffer needs no
 * zeroing pass before it and no read of the buffer (oneDNN's sum post-op).
 * dweight and dbias are still accumulated (+=). */
void linear_backward_set_dinp(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const void *weight, DType wtype, int N, int C, int OC);
/* --- additions beyond the first interface --- */

/* Largest oneDNN scratchpad (bytes) among the primitives created so far.
 * oneDNN manages that scratchpad itself (one buffer, grown to the largest
 * need), so the memory plan counts it as extra bytes outside the arena.
 * Known only after the shapes of a step have been run once. */
size_t matmul_library_scratch_bytes(void);
/* Number of oneDNN primitives created so far (flat once warm). */
long matmul_primitives_created(void);
/* With LMTUNE_MATMUL_PROFILE set in the environment (read at the first
 * product), every product's process CPU time is summed per primitive; this
 * prints the sums (calls, CPU seconds, GFLOP/s) to stderr when print, and
 * clears them. */
void matmul_profile_report(bool print);
/* Destroys every cached primitive and the engine (end of program, tests). */
void matmul_release_all(void);

/* Whether oneDNN multiplies bf16 on this CPU: it has bf16 kernels from
 * AVX-512 on (AVX512_CORE, native with AVX512_BF16), none below (oneDNN 2.6
 * on AVX2, or with LMTUNE_NO_AVX512); asked once. */
bool matmul_bf16_supported(void);
/* oneDNN's instruction set on this CPU, e.g. "avx512_core_bf16", "avx2". */
const char *matmul_isa_name(void);
/* True when that set multiplies bf16 natively (AVX512_BF16 or AMX), rather
 * than through fp32 (AVX-512 without BF16) or not at all. */
bool matmul_bf16_native(void);
/* The dtype frozen matrices stored as `stored` are multiplied in when no
 * probe decides (generation, evaluation, the plan's first guess): BF16 for
 * bf16 weights where oneDNN multiplies bf16 natively, else F32 (bf16
 * weights then stay bf16 in memory, widened panel by panel inside the
 * products). lmtune train measures instead (model_auto_weights_dtype). */
DType matmul_weight_dtype(DType stored);

/* Rounds n floats to bf16 (nearest even); OpenMP-parallel for large n. */
void matmul_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
/* Widens n bf16 numbers to floats (exact); single-threaded. */
void matmul_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
/* Rounds src (rows, cols) to bf16 into the conversion scratch set by
 * matmul_set_scratch and returns it: one conversion for several products
 * that read the same input (linear_forward_bf16_input leaves it intact;
 * linear_forward and linear_backward with BF16 weights overwrite it). */
const uint16_t *matmul_bf16_input(const float *src, size_t rows, size_t cols);
/* linear_forward for a BF16 weight whose input is already bf16 (N, C):
 * uses no matmul scratch. */
void linear_forward_bf16_input(float *out, const uint16_t *inp, const void *weight_bf16,
                               const float *bias, int N, int C, int OC);
/* dinp (N, C) = dout (N, OC, already bf16, rows ld_dout >= OC elements
 * apart) @ weight (OC, C, BF16) + beta * dinp; uses no matmul scratch. */
void linear_backward_dinp_bf16_dout(float *dinp, const uint16_t *dout, size_t ld_dout, const void *weight_bf16,
                                    float beta, int N, int C, int OC);
/* C (M, N), rows ldc apart, = alpha op(A) op(B) + beta C (+ bias (N) or
 * NULL). A and B are both F32 or both BF16 (ab); lda and ldb are the row
 * strides of A and B as stored: A (M, K) or, transposed, (K, M); B (K, N)
 * or, transposed, (N, K). The frozen-weight panels (frozen_weight.c) use it
 * to write or read a slice of columns of a larger matrix. */
void matmul_strided(float *C, size_t ldc, const void *A, size_t lda, bool transA,
                    const void *B, size_t ldb, bool transB, DType ab, const float *bias,
                    int M, int N, int K, float alpha, float beta);
#endif

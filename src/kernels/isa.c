/* isa.c: the start-up choice of the kernels' instruction set (see isa.h):
 * CPUID through the compiler's cpu model, the LMTUNE_NO_AVX512 switch, and
 * in the portable build the public entry points of the kernels compiled
 * twice, each calling the chosen variant. */
#include "kernels/isa.h"

#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dequant.h"
#include "kernels/gated_delta.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static bool isa_use_avx512;
static bool isa_use_bf16; /* AVX512_BF16 for attention's tile products */
static const char *isa_text = "native";

/* LMTUNE_NO_AVX512 set to anything but "" or "0". */
static bool avx512_disabled(void) {
    const char *e = getenv("LMTUNE_NO_AVX512");
    return e && *e && strcmp(e, "0") != 0;
}

static void isa_detect(void) {
    bool off = avx512_disabled();
#if defined(__x86_64__)
    if (off) {
        /* oneDNN then picks what it picks on an AVX2 machine. Must precede
         * its first use: matmul.c calls isa_init before creating anything. */
        dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
    }
#endif
#if defined(LT_ISA_DISPATCH)
    /* The AVX-512 variants are compiled for x86-64-v4: F, BW, CD, DQ, VL.
     * The compiler's cpu model also checks that the OS saves the AVX-512
     * registers (XCR0). */
    __builtin_cpu_init();
    bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    isa_use_avx512 = cpu && !off;
    isa_use_bf16 = isa_use_avx512 && __builtin_cpu_supports("avx512bf16");
    if (isa_use_avx512) {
        isa_text = "x86-64-v3 + AVX-512 kernels";
    } else if (cpu) {
        isa_text = "x86-64-v3 (AVX-512 disabled by LMTUNE_NO_AVX512)";
    } else {
        isa_text = "x86-64-v3 (no AVX-512 on this CPU)";
    }
#else
#if defined(__x86_64__) && defined(__AVX512F__)
    __builtin_cpu_init();
    isa_use_bf16 = __builtin_cpu_supports("avx512bf16");
#endif
    isa_text = off ? "native build (LMTUNE_NO_AVX512 caps oneDNN only)" : "native build";
#endif
}

void isa_init(void) { pthread_once(&isa_once, isa_detect); }

bool isa_avx512(void) {
    isa_init();
    return isa_use_avx512;
}

bool attention_bf16_supported(void) {
    isa_init();
    return isa_use_bf16;
}

const char *isa_describe(void) {
    isa_init();
    return isa_text;
}

#if defined(LT_ISA_DISPATCH)
/* The two compiles of each dispatched kernel (same type as the public one). */
extern __typeof__(attention_forward) attention_forward_base, attention_forward_avx512;
extern __typeof__(attention_backward) attention_backward_base, attention_backward_avx512;
extern __typeof__(lmhead_xent) lmhead_xent_base, lmhead_xent_avx512;
extern __typeof__(matmul_f32_to_bf16) matmul_f32_to_bf16_base, matmul_f32_to_bf16_avx512;
extern __typeof__(matmul_bf16_to_f32) matmul_bf16_to_f32_base, matmul_bf16_to_f32_avx512;
extern __typeof__(affine_expand) affine_expand_base, affine_expand_avx512;
extern __typeof__(affine_gemv) affine_gemv_base, affine_gemv_avx512;
extern __typeof__(bf16_gemv) bf16_gemv_base, bf16_gemv_avx512;
extern __typeof__(gated_delta_forward) gated_delta_forward_base, gated_delta_forward_avx512;
extern __typeof__(gated_delta_backward) gated_delta_backward_base, gated_delta_backward_avx512;
extern __typeof__(attention_cached) attention_cached_base, attention_cached_avx512;
extern __typeof__(attention_prefill) attention_prefill_base, attention_prefill_avx512;
void attention_prefill(float *out, float *lse, const float *q, const float *kc, const float *vc, int rows, int p0,
                       int H, int KVH, int D, const AttnParams *ap) {
    if (isa_avx512())
        attention_prefill_avx512(out, lse, q, kc, vc, rows, p0, H, KVH, D, ap);
    else
        attention_prefill_base(out, lse, q, kc, vc, rows, p0, H, KVH, D, ap);
}
void attention_cached(float *out, const float *q, const float *kc, const float *vc, float *scores,
                      size_t score_stride, int rows, int p0, int len, int H, int KVH, int D, const AttnParams *ap) {
    if (isa_avx512())
        attention_cached_avx512(out, q, kc, vc, scores, score_stride, rows, p0, len, H, KVH, D, ap);
    else
        attention_cached_base(out, q, kc, vc, scores, score_stride, rows, p0, len, H, KVH, D, ap);
}

extern __typeof__(glu_forward) glu_forward_base, glu_forward_avx512;
extern __typeof__(glu_backward) glu_backward_base, glu_backward_avx512;
extern __typeof__(glu_backward_set) glu_backward_set_base, glu_backward_set_avx512;

void glu_forward(float *out, const float *gate, const float *up, size_t rows, size_t F, size_t ld, int act) {
    if (isa_avx512()) {
        glu_forward_avx512(out, gate, up, rows, F, ld, act);
    } else {
        glu_forward_base(out, gate, up, rows, F, ld, act);
    }
}

void glu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t rows,
                  size_t F, size_t ld, int act) {
    if (isa_avx512()) {
        glu_backward_avx512(dgate, dup, dout, gate, up, rows, F, ld, act);
    } else {
        glu_backward_base(dgate, dup, dout, gate, up, rows, F, ld, act);
    }
}

void glu_backward_set(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t rows,
                      size_t F, size_t ld, int act) {
    if (isa_avx512()) {
        glu_backward_set_avx512(dgate, dup, dout, gate, up, rows, F, ld, act);
    } else {
        glu_backward_set_base(dgate, dup, dout, gate, up, rows, F, ld, act);
    }
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int H,
                       int KVH, int D, const AttnParams *ap) {
    if (isa_avx512()) {
        attention_forward_avx512(out, lse, q, k, v, B, T, H, KVH, D, ap);
    } else {
        attention_forward_base(out, lse, q, k, v, B, T, H, KVH, D, ap);
    }
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *out, const float *lse, float *workspace, int B, int T, int H,
                        int KVH, int D, const AttnParams *ap) {
    if (isa_avx512()) {
        attention_backward_avx512(dq, dk, dv, dout, q, k, v, out, lse, workspace, B, T, H, KVH, D, ap);
    } else {
        attention_backward_base(dq, dk, dv, dout, q, k, v, out, lse, workspace, B, T, H, KVH, D, ap);
    }
}

double lmhead_xent(float *dinp, float *row_loss, const float *inp, const FrozenWeight *w, const int *targets,
                   const float *row_weight, float *scratch, float softcap, int chunk, int N) {
    if (isa_avx512()) {
        return lmhead_xent_avx512(dinp, row_loss, inp, w, targets, row_weight, scratch, softcap, chunk, N);
    }
    return lmhead_xent_base(dinp, row_loss, inp, w, targets, row_weight, scratch, softcap, chunk, N);
}

void matmul_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
    if (isa_avx512()) {
        matmul_f32_to_bf16_avx512(dst, src, n);
    } else {
        matmul_f32_to_bf16_base(dst, src, n);
    }
}
void matmul_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
    if (isa_avx512()) {
        matmul_bf16_to_f32_avx512(dst, src, n);
    } else {
        matmul_bf16_to_f32_base(dst, src, n);
    }
}

void affine_expand(const uint8_t *packed, size_t row_bytes, const void *scales, const void *biases, DType t,
                   int bits, int group, int cols, int r0, int nr, int c0, int nc, DType out, void *dst, size_t ld) {
    if (isa_avx512()) {
        affine_expand_avx512(packed, row_bytes, scales, biases, t, bits, group, cols, r0, nr, c0, nc, out, dst, ld);
    } else {
        affine_expand_base(packed, row_bytes, scales, biases, t, bits, group, cols, r0, nr, c0, nc, out, dst, ld);
    }
}

void bf16_gemv(float *y, size_t ldy, const float *x, const uint16_t *x16, const void *w, int rows, int cols,
               const float *bias, int N) {
    if (isa_avx512()) {
        bf16_gemv_avx512(y, ldy, x, x16, w, rows, cols, bias, N);
    } else {
        bf16_gemv_base(y, ldy, x, x16, w, rows, cols, bias, N);
    }
}

void affine_gemv(float *y, size_t ldy, const float *x, const uint8_t *packed, size_t row_bytes,
                 const void *scales, const void *biases, DType t, int bits, int group,
                 int rows, int cols, const float *bias, int N) {
    if (isa_avx512()) {
        affine_gemv_avx512(y, ldy, x, packed, row_bytes, scales, biases, t, bits, group, rows, cols, bias, N);
    } else {
        affine_gemv_base(y, ldy, x, packed, row_bytes, scales, biases, t, bits, group, rows, cols, bias, N);
    }
}

void gated_delta_forward(float *out, float *chunk_states, float *state, const float *q, int ldq, const float *k,
                         int ldk, const float *v, int ldv, const float *g, const float *beta, float *workspace,
                         int threads, const GdnShape *s) {
    if (isa_avx512()) {
        gated_delta_forward_avx512(out, chunk_states, state, q, ldq, k, ldk, v, ldv, g, beta, workspace, threads, s);
    } else {
        gated_delta_forward_base(out, chunk_states, state, q, ldq, k, ldk, v, ldv, g, beta, workspace, threads, s);
    }
}

void gated_delta_backward(float *dq, float *dk, float *dv, float *dg, float *dbeta, const float *dout,
                          const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                          const float *g, const float *beta, const float *chunk_states, float *workspace,
                          int threads, const GdnShape *s) {
    if (isa_avx512()) {
        gated_delta_backward_avx512(dq, dk, dv, dg, dbeta, dout, q, ldq, k, ldk, v, ldv, g, beta, chunk_states,
                                    workspace, threads, s);
    } else {
        gated_delta_backward_base(dq, dk, dv, dg, dbeta, dout, q, ldq, k, ldk, v, ldv, g, beta, chunk_states,
                                  workspace, threads, s);
    }
}
#endif

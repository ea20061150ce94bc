/* glu.c: the gated MLP activations, out = act(gate) * up, with act either
 * silu(g) = g sigmoid(g) (SwiGLU: llama, qwen, phi3) or the tanh
 * approximation of GELU (GeGLU: gemma's gelu_pytorch_tanh),
 *   gelu(g) = g/2 (1 + tanh(u)) = g sigmoid(2u),  u = sqrt(2/pi) (g + 0.044715 g^3),
 * written through the sigmoid so it needs one exponential and no tanh. The
 * exponentials go through the vectorised exp16 (libm's scalar expf made this
 * a tenth of a layer's time). gate and up are rows of stride ld: a fused
 * gate_up projection's output is read in place.
 *
 * Compiled twice in the portable build (kernels/isa.h): the exponentials and
 * divisions run on 16-float vectors, one register with AVX-512. */
#include <math.h>

#include "kernels/isa.h"
#include "kernels/ops.h"
#include "kernels/vec.h"

enum { GLU_BLOCK = 4096 }; /* elements per parallel work item */

static const float GELU_C = 0.7978845608028654f; /* sqrt(2/pi) */
static const float GELU_A = 0.044715f;

static inline v16 sigmoid16(v16 g) { return splat16(1.0f) / (splat16(1.0f) + exp16(-g)); }
static inline float sigmoid1(float g) { return 1.0f / (1.0f + expf(-g)); }

/* act(g), 16 lanes */
static inline v16 act16(v16 g, int act) {
    if (act == GLU_SILU) return g * sigmoid16(g);
    v16 u2 = splat16(2.0f * GELU_C) * (g + splat16(GELU_A) * g * g * g);
    return g * sigmoid16(u2);
}
/* act(g) and d act / dg together: one exponential and one division per
 * element instead of two of each (the backward pass needs both) */
static inline v16 act_dact16(v16 g, int act, v16 *dact) {
    const v16 one = splat16(1.0f);
    if (act == GLU_SILU) {
        v16 s = sigmoid16(g);
        *dact = s * (one + g * (one - s));
        return g * s;
    }
    v16 u2 = splat16(2.0f * GELU_C) * (g + splat16(GELU_A) * g * g * g);
    v16 s = sigmoid16(u2);
    v16 du2 = splat16(2.0f * GELU_C) * (one + splat16(3.0f * GELU_A) * g * g);
    *dact = s + g * s * (one - s) * du2;
    return g * s;
}
static inline float act1(float g, int act) {
    if (act == GLU_SILU) return g * sigmoid1(g);
    return g * sigmoid1(2.0f * GELU_C * (g + GELU_A * g * g * g));
}
static inline float dact1(float g, int act) {
    if (act == GLU_SILU) {
        float s = sigmoid1(g);
        return s * (1.0f + g * (1.0f - s));
    }
    float s = sigmoid1(2.0f * GELU_C * (g + GELU_A * g * g * g));
    return s + g * s * (1.0f - s) * 2.0f * GELU_C * (1.0f + 3.0f * GELU_A * g * g);
}

/* Work items are blocks of at most GLU_BLOCK elements of one row: rows of
 * any width split evenly, and every element is written by one thread. */
static size_t blocks_per_row(size_t F) { return (F + GLU_BLOCK - 1) / GLU_BLOCK; }

void ISA_FN(glu_forward)(float *out, const float *gate, const float *up, size_t rows, size_t F, size_t ld,
                         int act) {
    size_t bpr = blocks_per_row(F), items = rows * bpr;
    #pragma omp parallel for schedule(static) if (rows * F > 32768)
    for (size_t it = 0; it < items; it++) {
        size_t r = it / bpr, c = (it % bpr) * GLU_BLOCK, end = c + GLU_BLOCK < F ? c + GLU_BLOCK : F;
        const float *g = gate + r * ld, *u = up + r * ld;
        float *o = out + r * F;
        for (; c + 16 <= end; c += 16) store16(o + c, act16(load16(g + c), act) * load16(u + c));
        for (; c < end; c++) o[c] = act1(g[c], act) * u[c];
    }
}

/* set: dgate, dup are written (=), not accumulated into (+=): a gradient
 * buffer's only contribution needs no zeroing pass and no read of it. In
 * set mode dgate may be gate and dup up (in place): every element of gate,
 * up and dout is read before that element of dgate or dup is written. */
static void glu_backward_impl(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                              size_t rows, size_t F, size_t ld, int act, int set) {
    size_t bpr = blocks_per_row(F), items = rows * bpr;
    #pragma omp parallel for schedule(static) if (rows * F > 32768)
    for (size_t it = 0; it < items; it++) {
        size_t r = it / bpr, c = (it % bpr) * GLU_BLOCK, end = c + GLU_BLOCK < F ? c + GLU_BLOCK : F;
        const float *g = gate + r * ld, *u = up + r * ld, *d = dout + r * F;
        float *dg = dgate + r * ld, *du = dup + r * ld;
        if (set) {
            for (; c + 16 <= end; c += 16) {
                v16 gv = load16(g + c), dv = load16(d + c), da;
                v16 a = act_dact16(gv, act, &da);
                store16(dg + c, dv * load16(u + c) * da);
                store16(du + c, dv * a);
            }
            for (; c < end; c++) {
                float gc = g[c], uc = u[c], dc = d[c];
                dg[c] = dc * uc * dact1(gc, act);
                du[c] = dc * act1(gc, act);
            }
            continue;
        }
        for (; c + 16 <= end; c += 16) {
            v16 gv = load16(g + c), dv = load16(d + c), da;
            v16 a = act_dact16(gv, act, &da);
            store16(dg + c, load16(dg + c) + dv * load16(u + c) * da);
            store16(du + c, load16(du + c) + dv * a);
        }
        for (; c < end; c++) {
            dg[c] += d[c] * u[c] * dact1(g[c], act);
            du[c] += d[c] * act1(g[c], act);
        }
    }
}

void ISA_FN(glu_backward)(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                          size_t rows, size_t F, size_t ld, int act) {
    glu_backward_impl(dgate, dup, dout, gate, up, rows, F, ld, act, 0);
}

void ISA_FN(glu_backward_set)(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                              size_t rows, size_t F, size_t ld, int act) {
    glu_backward_impl(dgate, dup, dout, gate, up, rows, F, ld, act, 1);
}

#ifndef LT_ISA_AVX512 /* once, in the baseline object */
void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    glu_forward(out, gate, up, 1, n, n, GLU_SILU);
}

void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
    glu_backward(dgate, dup, dout, gate, up, 1, n, n, GLU_SILU);
}
#endif

/* swiglu.c: the gated MLP activation, out = silu(gate) * up, silu(g) = g sigmoid(g). */
#include <math.h>

#include "kernels/ops.h"

void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    #pragma omp parallel for simd schedule(static) if (n > 32768)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g). */
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
    #pragma omp parallel for simd schedule(static) if (n > 32768)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], s = 1.0f / (1.0f + expf(-g));
        dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] += dout[i] * g * s;
    }
}

/* swiglu.c: the gated MLP activation, out = silu(gate) * up, silu(g) =
 * g sigmoid(g). The exponentials go through the vectorised exp16 (libm's
 * scalar expf made this a tenth of a layer's time). */
#include <math.h>

#include "kernels/ops.h"
#include "kernels/vec.h"

enum { SWIGLU_BLOCK = 4096 }; /* elements per parallel work item */

static inline v16 sigmoid16(v16 g) { return splat16(1.0f) / (splat16(1.0f) + exp16(-g)); }

void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    size_t blocks = (n + SWIGLU_BLOCK - 1) / SWIGLU_BLOCK;
    #pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t blk = 0; blk < blocks; blk++) {
        size_t i = blk * SWIGLU_BLOCK, end = i + SWIGLU_BLOCK < n ? i + SWIGLU_BLOCK : n;
        for (; i + 16 <= end; i += 16) {
            v16 g = load16(gate + i);
            store16(out + i, g * sigmoid16(g) * load16(up + i));
        }
        for (; i < end; i++) {
            float g = gate[i];
            out[i] = g / (1.0f + expf(-g)) * up[i];
        }
    }
}

/* d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g). */
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
    size_t blocks = (n + SWIGLU_BLOCK - 1) / SWIGLU_BLOCK;
    #pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t blk = 0; blk < blocks; blk++) {
        size_t i = blk * SWIGLU_BLOCK, end = i + SWIGLU_BLOCK < n ? i + SWIGLU_BLOCK : n;
        const v16 one = splat16(1.0f);
        for (; i + 16 <= end; i += 16) {
            v16 g = load16(gate + i), s = sigmoid16(g), d = load16(dout + i);
            store16(dgate + i, load16(dgate + i) + d * load16(up + i) * s * (one + g * (one - s)));
            store16(dup + i, load16(dup + i) + d * g * s);
        }
        for (; i < end; i++) {
            float g = gate[i], s = 1.0f / (1.0f + expf(-g));
            dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
            dup[i] += dout[i] * g * s;
        }
    }
}

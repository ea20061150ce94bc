/* rope_partial.c: RoPE on the first rd dims of each head (see
 * rope_partial.h); the same rotation as rope.c, with the head stride D kept
 * apart from the rotated width rd. */
#include "kernels/rope_partial.h"
#include <stddef.h>

/* sign = +1 forward, -1 for the transpose (backward). */
static void apply(float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd, float sign) {
    int half = rd / 2;
    #pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T * H * rd > 32768)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *c = cos_t + (size_t)t * half;
            const float *s = sin_t + (size_t)t * half;
            for (int h = 0; h < H; h++) {
                float *x1 = x + (((size_t)b * T + t) * H + h) * D;
                float *x2 = x1 + half;
                #pragma omp simd
                for (int i = 0; i < half; i++) {
                    float a = x1[i];
                    float bb = x2[i];
                    float si = sign * s[i];
                    x1[i] = a * c[i] - bb * si;
                    x2[i] = bb * c[i] + a * si;
                }
            }
        }
}

void rope_partial_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd) {
    apply(x, cos_t, sin_t, B, T, H, D, rd, 1.0f);
}

void rope_partial_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd) {
    apply(dx, cos_t, sin_t, B, T, H, D, rd, -1.0f);
}

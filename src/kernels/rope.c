/* rope.c: rotary position embeddings, HF convention (rotate_half: the pair
 * of element i is i + rd/2), on the first rd dims of each head (partial
 * rotary: Phi-3/Phi-4's partial_rotary_factor; the rest passes through).
 * Tables follow HF's rope init functions over the rotary dims:
 * default inv_freq = 1/theta^(2i/rd); "linear" divides inv_freq by factor;
 * "llama3" rescales low frequencies with a smooth ramp
 * (_compute_llama3_parameters); "longrope" divides by the short or long
 * factor of each pair and multiplies cos and sin by the attention factor
 * (_compute_longrope_parameters). Tables are computed in double. */
#include <math.h>

#include "kernels/ops.h"

static double llama3_inv_freq(double inv_freq, const RopeScaling *s) {
    double old_len = (double)s->original_max_position;
    double low_freq_wavelen = old_len / s->low_freq_factor;
    double high_freq_wavelen = old_len / s->high_freq_factor;
    double wavelen = 2.0 * M_PI / inv_freq;
    if (wavelen < high_freq_wavelen) return inv_freq;              /* high frequency: kept */
    if (wavelen > low_freq_wavelen) return inv_freq / s->factor;   /* low frequency: scaled */
    double smooth = (old_len / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    return (1.0 - smooth) * inv_freq / s->factor + smooth * inv_freq;
}

void rope_tables(float *cos_t, float *sin_t, int T, int rd, double theta, const RopeScaling *scaling,
                 bool long_factors) {
    int half = rd / 2;
    double position_scale = 1.0, amplitude = 1.0;
    int type = scaling ? scaling->type : ROPE_SCALING_NONE;
    if (type == ROPE_SCALING_LINEAR && scaling->factor > 0) position_scale = 1.0 / scaling->factor;
    if (type == ROPE_SCALING_LONGROPE) amplitude = scaling->attention_factor;
    for (int i = 0; i < half; i++) {
        double inv_freq = 1.0 / pow(theta, (double)(2 * i) / (double)rd);
        if (type == ROPE_SCALING_LLAMA3) inv_freq = llama3_inv_freq(inv_freq, scaling);
        if (type == ROPE_SCALING_LONGROPE)
            inv_freq /= long_factors ? scaling->long_factor[i] : scaling->short_factor[i];
        if (type == ROPE_SCALING_FACTORS && i < scaling->n_factors)
            inv_freq /= scaling->factors[i];
        for (int t = 0; t < T; t++) {
            double angle = (double)t * position_scale * inv_freq;
            cos_t[(size_t)t * half + i] = (float)(cos(angle) * amplitude);
            sin_t[(size_t)t * half + i] = (float)(sin(angle) * amplitude);
        }
    }
}

/* One rotation of every (i, i + rd/2) pair of the first rd dims of every
 * head; sign = +1 forward, -1 for the transpose (backward). With a longrope
 * attention factor a the tables hold a cos and a sin, and the pass-through
 * dims are left as they are (HF scales cos and sin, not the whole head). */
static void rope_apply(float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd,
                       float sign) {
    int half = rd / 2;
    #pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T * H * D > 32768)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *c = cos_t + (size_t)t * half, *s = sin_t + (size_t)t * half;
            for (int h = 0; h < H; h++) {
                float *x1 = x + (((size_t)b * T + t) * H + h) * D, *x2 = x1 + half;
                #pragma omp simd
                for (int i = 0; i < half; i++) {
                    float a = x1[i], bb = x2[i], si = sign * s[i];
                    x1[i] = a * c[i] - bb * si;
                    x2[i] = bb * c[i] + a * si;
                }
            }
        }
}

void rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd) {
    rope_apply(x, cos_t, sin_t, B, T, H, D, rd, 1.0f);
}

void rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int H, int D, int rd) {
    rope_apply(dx, cos_t, sin_t, B, T, H, D, rd, -1.0f);
}

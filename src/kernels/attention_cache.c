/* attention_cache.c: the queries of a decode chunk (the prompt's rows, or
 * one new token) over a KV cache, row by row: scores against every cached
 * position the row sees, a softmax, the weighted sum of the values. No
 * (rows x positions) matrix exists: each head keeps one row of scores.
 *
 * Vectorised over the head dim: a score is a dot product in two 8-float
 * accumulators and one sum across their lanes, the softmax runs through
 * exp16 (kernels/vec.h), and the output row is built 64 floats at a time in
 * registers over the positions (the rest of the head dim 16 at a time, then
 * column by column). The scalar version this replaced read a
 * 2,000-token prompt of a SmolLM2-135M shape in ~25 s of attention on 2
 * cores (89% of `lmtune generate`'s time; 7.1 s for the whole run with this
 * kernel). A prompt's chunks now go through the training forward's tiles
 * where the cache allows (attention_prefill, decode.c: 3.7 s for that run);
 * this kernel serves single tokens, chunks that start off a tile boundary
 * and caches that wrap or rotate. The arithmetic is the same up to the order
 * of the sums. Compiled twice in the
 * portable build (kernels/isa.h), the same operations in both variants, so
 * the same bits (tests/kernels/test_isa.c). */
#include <math.h>
#include "kernels/isa.h"
#include "kernels/ops.h"
#include "kernels/vec.h"

/* q . k over D floats: two 8-float accumulators (one AVX2 register each, so
 * the portable variant keeps them in registers too), then their lanes summed
 * in a fixed order: the same operations, so the same bits, in both
 * variants. */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));
VEC_INLINE v8 load8(const float *p) { return *(const v8u *)p; }

VEC_INLINE float dot_d(const float *q, const float *k, int D) {
    v8 a0 = {0}, a1 = {0};
    int e = 0;
    for (; e + 16 <= D; e += 16) {
        a0 += load8(q + e) * load8(k + e);
        a1 += load8(q + e + 8) * load8(k + e + 8);
    }
    v8 a = a0 + a1;
    float s = 0.0f;
    for (int l = 0; l < 8; l++) s += a[l];
    for (; e < D; e++) s += q[e] * k[e];
    return s;
}

/* o[0..W) = inv * sum over the n positions u of p_u v_u[0..W), position u in
 * slot (j0 + u) mod len, slots KVD floats apart. W is 64 or 16 at the call
 * sites, a constant after inlining: the W sums stay in registers. */
VEC_INLINE void weighted_cols(float *restrict o, const float *vh, const float *p, int n, int j0, int len, int KVD,
                              float inv, const int W) {
    float acc[64] = {0};
    for (int u = 0; u < n; u++) {
        const float *restrict vj = vh + (size_t)((j0 + u) % len) * KVD;
        float w = p[u];
        #pragma omp simd
        for (int e = 0; e < W; e++) acc[e] += w * vj[e];
    }
    #pragma omp simd
    for (int e = 0; e < W; e++) o[e] = acc[e] * inv;
}

void ISA_FN(attention_cached)(float *out, const float *q, const float *kc, const float *vc, float *scores,
                      size_t score_stride, int rows, int p0, int len, int H, int KVH, int D, const AttnParams *ap) {
    const int grp = H / KVH, KVD = KVH * D, QD = H * D;
    const float sc = ap->scale, cap = ap->softcap;
    const int window = ap->window;
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        float *s = scores + (size_t)h * score_stride;
        int kh = h / grp;
        for (int i = 0; i < rows; i++) {
            int p = p0 + i, j0 = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            int n = p + 1 - j0;
            if (window == 0 && n > len) n = len;   /* a rotating cache: every slot */
            const float *qi = q + (size_t)i * QD + (size_t)h * D;
            float mx = -INFINITY;
            for (int t = 0; t < n; t++) {
                const float *kj = kc + (size_t)((j0 + t) % len) * KVD + (size_t)kh * D;
                float z = dot_d(qi, kj, D) * sc;
                if (cap > 0.0f) z = cap * tanhf(z / cap);
                s[t] = z;
                mx = z > mx ? z : mx;
            }
            v16 m16 = splat16(mx), acc = splat16(0.0f);
            int t = 0;
            for (; t + 16 <= n; t += 16) {
                v16 e = exp16(load16(s + t) - m16);
                store16(s + t, e);
                acc += e;
            }
            double sum = 0.0;
            for (int l = 0; l < 16; l++) sum += acc[l];
            for (; t < n; t++) {
                s[t] = expf(s[t] - mx);
                sum += s[t];
            }
            float inv = (float)(1.0 / sum);
            float *restrict o = out + (size_t)i * QD + (size_t)h * D;
            const float *vh = vc + (size_t)kh * D;
            int e0 = 0;
            for (; e0 + 64 <= D; e0 += 64) weighted_cols(o + e0, vh + e0, s, n, j0, len, KVD, inv, 64);
            for (; e0 + 16 <= D; e0 += 16) weighted_cols(o + e0, vh + e0, s, n, j0, len, KVD, inv, 16);
            for (; e0 < D; e0++) {   /* a head dim that is not a multiple of 16 */
                float a1 = 0.0f;
                for (int u = 0; u < n; u++) a1 += s[u] * vh[(size_t)((j0 + u) % len) * KVD + e0];
                o[e0] = a1 * inv;
            }
        }
    }
}

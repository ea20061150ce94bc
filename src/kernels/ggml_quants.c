/* ggml_quants.c: ggml's block types and their reference conversions (see
 * ggml_quants.h). Each dequantizer follows ggml-quants.c's
 * dequantize_row_* statement for statement: the scales are fp16 (read
 * exactly), the products are done in float in the same order, so the
 * results are the same bits. Compiled with -ffp-contract=off: a fused
 * multiply-add in `x * d + m` would round once instead of twice. */
#include "kernels/ggml_quants.h"
#include "base/dtype.h"
#include <math.h>
#include <string.h>

static float half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

/* block_q4_0: d (fp16), qs[16]: element j is the low nibble of qs[j],
 * element j + 16 the high nibble; value (q - 8) * d. */
static void dq_q4_0(const uint8_t *b, float *y) {
    const float d = half(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        const int x0 = (qs[j] & 0x0F) - 8;
        const int x1 = (qs[j] >> 4) - 8;
        y[j] = x0 * d;
        y[j + 16] = x1 * d;
    }
}

/* block_q4_1: d, m (fp16), qs[16]; value q * d + m. */
static void dq_q4_1(const uint8_t *b, float *y) {
    const float d = half(b);
    const float m = half(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        const int x0 = qs[j] & 0x0F;
        const int x1 = qs[j] >> 4;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

/* block_q5_0: d, qh[4] (the fifth bits, little-endian u32), qs[16]. */
static void dq_q5_0(const uint8_t *b, float *y) {
    const float d = half(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
        const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
        const int32_t x0 = ((qs[j] & 0x0F) | xh_0) - 16;
        const int32_t x1 = ((qs[j] >> 4) | xh_1) - 16;
        y[j] = x0 * d;
        y[j + 16] = x1 * d;
    }
}

/* block_q5_1: d, m, qh[4], qs[16]. */
static void dq_q5_1(const uint8_t *b, float *y) {
    const float d = half(b);
    const float m = half(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
        const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
        const int x0 = (qs[j] & 0x0F) | xh_0;
        const int x1 = (qs[j] >> 4) | xh_1;
        y[j] = x0 * d + m;
        y[j + 16] = x1 * d + m;
    }
}

/* block_q8_0: d, qs[32] (int8). */
static void dq_q8_0(const uint8_t *b, float *y) {
    const float d = half(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++) y[j] = qs[j] * d;
}

/* block_q2_K: scales[16] (4-bit scale | 4-bit min), qs[64], d, dmin. */
static void dq_q2_K(const uint8_t *b, float *y) {
    const uint8_t *scales = b;
    const uint8_t *q = b + 16;
    const float d = half(b + 80);
    const float min = half(b + 82);
    int is = 0;
    for (int n = 0; n < GGML_QK_K; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
            uint8_t sc = scales[is++];
            float dl = d * (sc & 0xF);
            float ml = min * (sc >> 4);
            for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
            sc = scales[is++];
            dl = d * (sc & 0xF);
            ml = min * (sc >> 4);
            for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
            shift += 2;
        }
        q += 32;
    }
}

/* block_q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales), d. */
static void dq_q3_K(const uint8_t *b, float *y) {
    const uint32_t kmask1 = 0x03030303;
    const uint32_t kmask2 = 0x0f0f0f0f;
    uint32_t aux[4];
    int8_t scales[16];
    const uint8_t *hm = b;
    const uint8_t *q = b + 32;
    const float d_all = half(b + 108);
    uint8_t m = 1;
    memcpy(aux, b + 96, 12);
    uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    memcpy(scales, aux, 16);
    int is = 0;
    for (int n = 0; n < GGML_QK_K; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
            float dl = d_all * (scales[is++] - 32);
            for (int l = 0; l < 16; ++l)
                *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
            dl = d_all * (scales[is++] - 32);
            for (int l = 0; l < 16; ++l)
                *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
            shift += 2;
            m <<= 1;
        }
        q += 32;
    }
}

/* The 6-bit scale and min j (0..7) of a Q4_K / Q5_K block's scales[12]. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

/* block_q4_K: d, dmin, scales[12], qs[128]. */
static void dq_q4_K(const uint8_t *b, float *y) {
    const float d = half(b);
    const float min = half(b + 2);
    const uint8_t *scales = b + 4;
    const uint8_t *q = b + 16;
    int is = 0;
    uint8_t sc;
    uint8_t m;
    for (int j = 0; j < GGML_QK_K; j += 64) {
        scale_min_k4(is + 0, scales, &sc, &m);
        const float d1 = d * sc;
        const float m1 = min * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc;
        const float m2 = min * m;
        for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
        q += 32;
        is += 2;
    }
}

/* block_q5_K: d, dmin, scales[12], qh[32], qs[128]. */
static void dq_q5_K(const uint8_t *b, float *y) {
    const float d = half(b);
    const float min = half(b + 2);
    const uint8_t *scales = b + 4;
    const uint8_t *qh = b + 16;
    const uint8_t *ql = b + 48;
    int is = 0;
    uint8_t sc;
    uint8_t m;
    uint8_t u1 = 1;
    uint8_t u2 = 2;
    for (int j = 0; j < GGML_QK_K; j += 64) {
        scale_min_k4(is + 0, scales, &sc, &m);
        const float d1 = d * sc;
        const float m1 = min * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc;
        const float m2 = min * m;
        for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
}

/* block_q6_K: ql[128], qh[64], scales[16] (int8), d. */
static void dq_q6_K(const uint8_t *b, float *y) {
    const uint8_t *ql = b;
    const uint8_t *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = half(b + 208);
    for (int n = 0; n < GGML_QK_K; n += 128) {
        for (int l = 0; l < 32; ++l) {
            int is = l / 16;
            const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

typedef void (*BlockFn)(const uint8_t *b, float *y);

static BlockFn block_fn(int type) {
    switch (type) {
    case GGML_TYPE_Q4_0: return dq_q4_0;
    case GGML_TYPE_Q4_1: return dq_q4_1;
    case GGML_TYPE_Q5_0: return dq_q5_0;
    case GGML_TYPE_Q5_1: return dq_q5_1;
    case GGML_TYPE_Q8_0: return dq_q8_0;
    case GGML_TYPE_Q2_K: return dq_q2_K;
    case GGML_TYPE_Q3_K: return dq_q3_K;
    case GGML_TYPE_Q4_K: return dq_q4_K;
    case GGML_TYPE_Q5_K: return dq_q5_K;
    case GGML_TYPE_Q6_K: return dq_q6_K;
    default: return NULL;
    }
}

void ggml_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    if (type == GGML_TYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
        dtype_to_f32(dst, src, type == GGML_TYPE_F16 ? DTYPE_F16 : DTYPE_BF16, (size_t)n);
        return;
    }
    BlockFn fn = block_fn(type);
    const int bs = ggml_block_size(type);
    const int bb = ggml_block_bytes(type);
    if (!fn) return;
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / bs; i++) fn(b + (size_t)i * bb, dst + i * bs);
}

void ggml_expand(int type, const uint8_t *data, size_t row_bytes, int r0, int nr, int c0, int nc, DType out,
                 void *dst, size_t ld) {
    const int bs = ggml_block_size(type);
    const size_t off = ggml_row_bytes(type, c0);
    float tmp[GGML_QK_K];
    for (int r = 0; r < nr; r++) {
        const uint8_t *src = data + (size_t)(r0 + r) * row_bytes + off;
        if (out == DTYPE_F32) {
            ggml_dequantize_row(type, src, (float *)dst + (size_t)r * ld, nc);
            continue;
        }
        uint16_t *d16 = (uint16_t *)dst + (size_t)r * ld;
        /* a block at a time through a small buffer, rounded to bf16 */
        int step = bs > 1 ? bs : GGML_QK_K;
        for (int c = 0; c < nc; c += step) {
            int k = nc - c < step ? nc - c : step;
            ggml_dequantize_row(type, src + ggml_row_bytes(type, c), tmp, k);
            for (int i = 0; i < k; i++) d16[c + i] = f32_to_bf16(tmp[i]);
        }
    }
}

/* roundf(x) stored in an int8_t, as the reference's implicit conversion
 * does on x86 (cvttss2si): a NaN becomes 0. |x| <= 127 otherwise. */
static int8_t round_to_i8(float x) {
    float r = roundf(x);
    if (!(r >= -128.0f && r <= 127.0f)) return 0;
    return (int8_t)r;
}

void ggml_quantize_row_q8_0(const float *x, void *dst, int64_t n) {
    uint8_t *y = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float v = x[i * 32 + j];
            /* MAX(a, b) as ggml writes it: ((a) > (b) ? (a) : (b)) */
            amax = amax > fabsf(v) ? amax : fabsf(v);
        }
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        uint16_t h = f32_to_f16(d);
        uint8_t *blk = y + i * 34;
        memcpy(blk, &h, 2);
        for (int j = 0; j < 32; ++j) {
            const float x0 = x[i * 32 + j] * id;
            blk[2 + j] = (uint8_t)round_to_i8(x0);
        }
    }
}

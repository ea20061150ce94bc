/* requant.h: a GGUF model's matrices quantized again (tests and bench):
 * Q8_0 by ggml's reference quantizer, Q4_K by a plain min/max quantizer
 * written here (any valid blocks do for a test base). */
#ifndef LT_TESTS_LLAMA_REQUANT_H
#define LT_TESTS_LLAMA_REQUANT_H
#include "base/alloc.h"
#include "base/dtype.h"
#include "formats/gguf.h"
#include "kernels/ggml_quants.h"
#include <math.h>
#include <string.h>

/* A plain Q4_K quantizer (not ggml's search for the best scales): per
 * sub-block of 32, min m = min(0, x) and scale s = (max - m) / 15; the
 * super-block's d and dmin are the largest s and -m over 63; 6-bit scales
 * and mins packed as get_scale_min_k4 unpacks them. */
static inline void quantize_q4_K(const float *x, uint8_t *blk) {
    float s[8];
    float mn[8];
    float smax = 0;
    float mmax = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0;
        float hi = 0;
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        s[j] = (hi - lo) / 15;
        mn[j] = -lo;
        smax = fmaxf(smax, s[j]);
        mmax = fmaxf(mmax, mn[j]);
    }
    uint16_t hd = f32_to_f16(smax / 63);
    uint16_t hm = f32_to_f16(mmax / 63);
    float d = f16_to_f32(hd);
    float dmin = f16_to_f32(hm);
    uint8_t sc[8];
    uint8_t mq[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)fminf(63, roundf(d > 0 ? s[j] / d : 0));
        mq[j] = (uint8_t)fminf(63, roundf(dmin > 0 ? mn[j] / dmin : 0));
    }
    memcpy(blk, &hd, 2);
    memcpy(blk + 2, &hm, 2);
    uint8_t *q = blk + 4;
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)(mq[j] | ((mq[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mq[j + 4] & 0xF) << 4));
    }
    uint8_t *qs = blk + 16;
    for (int k = 0; k < 4; k++) {
        for (int l = 0; l < 32; l++) {
            int v[2];
            for (int h = 0; h < 2; h++) {
                int j = 2 * k + h;
                float scale = d * sc[j];
                float m = dmin * mq[j];
                float r = scale > 0 ? roundf((x[32 * j + l] + m) / scale) : 0;
                v[h] = (int)fminf(15, fmaxf(0, r));
            }
            qs[32 * k + l] = (uint8_t)(v[0] | (v[1] << 4));
        }
    }
}

typedef struct {
    int type;
    float *src;      /* the f32 tensor */
    int64_t cols;
} Requant;

static inline int produce(void *ctx, size_t i, void *dst, size_t bytes) {
    Requant *rq = &((Requant *)ctx)[i];
    int64_t rows = (int64_t)(bytes / ggml_row_bytes(rq->type, rq->cols));
    size_t rb = ggml_row_bytes(rq->type, rq->cols);
    for (int64_t r = 0; r < rows; r++) {
        const float *x = rq->src + r * rq->cols;
        uint8_t *y = (uint8_t *)dst + r * rb;
        if (rq->type == GGML_TYPE_Q8_0) {
            ggml_quantize_row_q8_0(x, y, rq->cols);
            continue;
        }
        for (int64_t b = 0; b < rq->cols / 256; b++) quantize_q4_K(x + 256 * b, y + 144 * b);
    }
    return 0;
}

/* src (an f32 GGUF model) with every matrix in `type` but the tensor named
 * `keep` (NULL: none), which stays f32; the metadata copied. */
static inline int requantize_keep(const char *src, const char *dst, int type, const char *keep) {
    GgufFile g;
    TRY(gguf_open(&g, src));
    GgufKVOut *kv = mem_calloc(g.n_kv + 1, sizeof *kv);
    GgufTensorOut *ts = mem_calloc(g.n_tensors + 1, sizeof *ts);
    Requant *rq = mem_calloc(g.n_tensors + 1, sizeof *rq);
    size_t cap = 2 * g.n_kv + 2;
    for (size_t i = 0; i < g.n_kv; i++) cap += g.kv[i].arr_type == GGUF_TYPE_STRING ? g.kv[i].arr_n : 0;
    void **owned = mem_calloc(cap, sizeof *owned);
    size_t no = 0;
    for (size_t i = 0; i < g.n_kv; i++) {
        const GgufKV *k = &g.kv[i];
        kv[i] = (GgufKVOut){.key = k->key, .type = k->type, .u32 = (uint32_t)k->u, .i32 = (int32_t)k->i,
                            .f32 = (float)k->f, .b = k->u != 0, .arr_type = k->arr_type, .n = k->arr_n};
        if (k->type == GGUF_TYPE_STRING) kv[i].str = owned[no++] = mem_strndup(k->str.p, k->str.n);
        if (!strcmp(k->key, "general.file_type")) kv[i].u32 = type == GGML_TYPE_Q8_0 ? 7 : 15;
        if (k->type != GGUF_TYPE_ARRAY) continue;
        if (k->arr_type == GGUF_TYPE_STRING) {
            char **s = owned[no++] = mem_calloc(k->arr_n + 1, sizeof *s);
            for (uint64_t e = 0; e < k->arr_n; e++) s[e] = owned[no++] = mem_strndup(k->arr_str[e].p, k->arr_str[e].n);
            kv[i].strs = (const char *const *)s;
        } else {
            void *copy = owned[no++] = mem_alloc(k->arr_n * 4 + 4);
            memcpy(copy, k->arr, k->arr_n * 4);
            kv[i].f32s = copy;
            kv[i].i32s = copy;
        }
    }
    for (size_t i = 0; i < g.n_tensors; i++) {
        const GgufTensorInfo *t = &g.tensors[i];
        ts[i] = (GgufTensorOut){t->name, t->n_dims, {(uint64_t)t->ne[0], (uint64_t)t->ne[1], 1, 1}, t->type, t->data,
                                NULL, NULL, 0};
        if (t->n_dims != 2 || (keep && !strcmp(t->name, keep))) continue;
        rq[i] = (Requant){type, (float *)t->data, t->ne[0]};
        ts[i].type = type;
        ts[i].data = NULL;
        ts[i].produce = produce;
        ts[i].ctx = rq;
        ts[i].index = i;
    }
    int rc = gguf_write(dst, kv, g.n_kv, ts, g.n_tensors);
    for (size_t i = 0; i < no; i++) mem_free(owned[i]);
    mem_free(owned);
    mem_free(rq);
    mem_free(ts);
    mem_free(kv);
    gguf_close(&g);
    return rc;
}

/* src (an f32 GGUF model) with every matrix in `type`; the metadata copied. */
static inline int requantize(const char *src, const char *dst, int type) {
    return requantize_keep(src, dst, type, NULL);
}

#endif

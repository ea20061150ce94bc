/* embedding.c: token embedding lookup (table in F32 or BF16, e.g. a frozen
 * bf16 base table) and its backward, which scatters rows of dout into the
 * (fp32, trainable) table gradient. */
#include "kernels/ops.h"

#include "base/error.h"

void embedding_forward(float *out, const int *tokens, const void *table, DType ttype, int N, int C) {
    if (ttype != DTYPE_F32 && ttype != DTYPE_BF16 && ttype != DTYPE_F16)
        die("embedding.c: embedding_forward: table dtype %s not supported", dtype_name(ttype));
    size_t elem = ttype == DTYPE_F32 ? 4 : 2;
    #pragma omp parallel for schedule(static) if ((size_t)N * C > 32768)
    for (int n = 0; n < N; n++) {
        const char *row = (const char *)table + (size_t)tokens[n] * C * elem;
        dtype_to_f32(out + (size_t)n * C, row, ttype, (size_t)C);
    }
}

/* Repeated tokens add into the same row, so threads split the columns, not
 * the rows: no races, and the order of additions is fixed. */
void embedding_backward(float *dtable, const float *dout, const int *tokens, int N, int C) {
    enum { COLS = 64 };
    int blocks = (C + COLS - 1) / COLS;
    #pragma omp parallel for schedule(static) if ((size_t)N * C > 32768)
    for (int b = 0; b < blocks; b++) {
        int c0 = b * COLS, width = C - c0 < COLS ? C - c0 : COLS;
        for (int n = 0; n < N; n++) {
            float *dst = dtable + (size_t)tokens[n] * C + c0;
            const float *src = dout + (size_t)n * C + c0;
            #pragma omp simd
            for (int j = 0; j < width; j++) dst[j] += src[j];
        }
    }
}

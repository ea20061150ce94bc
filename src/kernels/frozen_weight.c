/* frozen_weight.c: products, lookups and norms of frozen matrices in any
 * stored format (see frozen_weight.h): the direct oneDNN product when the
 * stored elements are of the compute type, else expansion panel by panel
 * into the panel scratch and one oneDNN product per panel, or the fused
 * GEMV for a few rows. The format-specific work is in the kernels of
 * dequant.h; this file only dispatches and tiles. */
#include "kernels/frozen_weight.h"
#include "kernels/dequant.h"
#include "kernels/ggml_quants.h"
#include "kernels/matmul.h"
#include "kernels/vec.h"
#include "base/error.h"
#include <string.h>

/* Bytes of expanded weights per panel: a few MB, so that a panel stays in
 * the last-level cache while oneDNN reads it, and large enough that the
 * other operand is streamed only a few times per product. */
#define FW_PANEL_BUDGET ((size_t)4 << 20)
/* The input gradient expands panels of whole columns when one holds at
 * least this many (or all): narrower ones make thin products; else it takes
 * panels of rows and sums their products (an LM head: V rows). */
#define FW_MIN_PANEL_COLS 128

static void *fw_panel;
static size_t fw_panel_size;

static size_t esize_of(DType t) { return t == DTYPE_F32 ? 4 : 2; }

FrozenWeight fw_plain(const void *data, DType dtype, int rows, int cols, DType compute) {
    FrozenWeight w = {0};
    w.fmt = FW_PLAIN;
    w.rows = rows;
    w.cols = cols;
    w.data = data;
    w.dtype = dtype;
    w.row_bytes = (size_t)cols * esize_of(dtype);
    w.compute = compute;
    return w;
}

FrozenWeight fw_affine(const void *packed, const void *scales, const void *biases, DType dtype,
                       int bits, int group, int rows, int cols) {
    FrozenWeight w = {0};
    w.fmt = FW_AFFINE;
    w.rows = rows;
    w.cols = cols;
    w.data = packed;
    w.row_bytes = (size_t)cols * (size_t)bits / 8;
    w.dtype = dtype;
    w.bits = bits;
    w.group = group;
    w.scales = scales;
    w.biases = biases;
    w.compute = matmul_weight_dtype(dtype);   /* bf16 panels only where oneDNN has bf16 products */
    return w;
}

FrozenWeight fw_ggml(const void *data, int type, int rows, int cols, const int32_t *row_map, DType compute) {
    FrozenWeight w = {0};
    w.fmt = FW_GGML;
    w.rows = rows;
    w.cols = cols;
    w.data = data;
    w.row_bytes = ggml_row_bytes(type, cols);
    w.dtype = DTYPE_F32;
    w.group = ggml_block_size(type);
    w.aux = type;
    w.row_map = row_map;
    w.compute = compute;
    return w;
}

bool fw_is_direct(const FrozenWeight *w) { return w->fmt == FW_PLAIN && w->dtype == w->compute; }

size_t fw_storage_bytes(const FrozenWeight *w) {
    size_t codes = (size_t)w->rows * w->row_bytes;
    if (w->fmt != FW_AFFINE) return codes;
    return codes + 2 * (size_t)w->rows * (size_t)(w->cols / w->group) * esize_of(w->dtype);
}

int fw_col_align(const FrozenWeight *w) { return w->fmt == FW_AFFINE || w->fmt == FW_GGML ? w->group : 1; }

static void plain_expand(const FrozenWeight *w, int r0, int nr, int c0, int nc, DType out, void *dst, size_t ld) {
    size_t es = esize_of(w->dtype), eo = esize_of(out);
    for (int r = 0; r < nr; r++) {
        const char *src = (const char *)w->data + ((size_t)(r0 + r) * (size_t)w->cols + (size_t)c0) * es;
        char *d = (char *)dst + (size_t)r * ld * eo;
        if (out == DTYPE_F32 && w->dtype == DTYPE_BF16)
            matmul_bf16_to_f32((float *)d, (const uint16_t *)src, (size_t)nc);
        else if (out == DTYPE_F32) dtype_to_f32((float *)d, src, w->dtype, (size_t)nc);
        else if (w->dtype == DTYPE_BF16) memcpy(d, src, (size_t)nc * 2);
        else if (w->dtype == DTYPE_F32) matmul_f32_to_bf16((uint16_t *)d, (const float *)src, (size_t)nc);
        else
            for (int c = 0; c < nc; c++) ((uint16_t *)d)[c] = f32_to_bf16(f16_to_f32(((const uint16_t *)src)[c]));
    }
}

void fw_expand(const FrozenWeight *w, int r0, int nr, int c0, int nc, DType out, void *dst, size_t ld) {
    switch (w->fmt) {
    case FW_PLAIN:
        plain_expand(w, r0, nr, c0, nc, out, dst, ld);
        return;
    case FW_AFFINE:
        affine_expand(w->data, w->row_bytes, w->scales, w->biases, w->dtype, w->bits, w->group, w->cols,
                      r0, nr, c0, nc, out, dst, ld);
        return;
    case FW_GGML:
        if (!w->row_map) {
            ggml_expand(w->aux, w->data, w->row_bytes, r0, nr, c0, nc, out, dst, ld);
            return;
        }
        for (int r = 0; r < nr; r++)
            ggml_expand(w->aux, w->data, w->row_bytes, w->row_map[r0 + r], 1, c0, nc, out,
                        (char *)dst + (size_t)r * ld * esize_of(out), ld);
        return;
    default:
        die("frozen_weight.c: fw_expand: format %d has no expansion kernel", (int)w->fmt);
    }
}

/* The scratch holds a panel (its first part) and, after it, the staging
 * tile of products with a slice of a wider matrix as an operand (below). */
size_t fw_panel_scratch_bytes(int max_cols) {
    size_t min_rows = (size_t)16 * (size_t)(max_cols > 0 ? max_cols : 1) * 4;
    return (min_rows > FW_PANEL_BUDGET ? min_rows : FW_PANEL_BUDGET) + FW_PANEL_BUDGET;
}

void fw_set_panel_scratch(void *scratch, size_t bytes) {
    fw_panel = scratch;
    fw_panel_size = bytes;
}

static void *panel_for(size_t bytes, const char *who) {
    if (!fw_panel || fw_panel_size < bytes)
        die("frozen_weight.c: %s: panel scratch too small (%zu bytes set, %zu needed); "
            "call fw_set_panel_scratch first", who, fw_panel_size, bytes);
    return fw_panel;
}

/* oneDNN's brgemm kernels, which use the planned scratchpad and allocate
 * nothing, take dense operands only: a product whose output or input is a
 * slice of a wider matrix (the columns of a panel in out, the rows of a
 * panel in dout) falls back to gemm:jit, whose packing buffers are
 * malloc'ed by every thread at every call, outside the memory plan. Such a
 * product runs instead through a dense staging tile after the panel in the
 * scratch, `stage_rows` rows of `width` elements at a time. */
static int stage_rows(int width, int N) {
    size_t r = FW_PANEL_BUDGET / ((size_t)(width > 0 ? width : 1) * 4);
    if (r < 1) r = 1;
    return r > (size_t)N ? N : (int)r;
}

static void *stage_for(size_t panel_bytes, size_t bytes, const char *who) {
    if (!fw_panel || fw_panel_size < panel_bytes + bytes)
        die("frozen_weight.c: %s: panel scratch too small for the staging tile (%zu bytes set, %zu needed)", who,
            fw_panel_size, panel_bytes + bytes);
    /* 64-byte aligned after the panel */
    return (char *)fw_panel + (panel_bytes + 63) / 64 * 64;
}

/* dst rows (n, width) with stride ld_dst += / = src rows (n, width), stride ld_src. */
static void copy_rows(float *dst, size_t ld_dst, const float *src, size_t ld_src, int n, int width, bool add) {
    #pragma omp parallel for schedule(static) if ((size_t)n * width > 32768)
    for (int r = 0; r < n; r++) {
        float *d = dst + (size_t)r * ld_dst;
        const float *x = src + (size_t)r * ld_src;
        if (add)
            for (int c = 0; c < width; c++) d[c] += x[c];
        else
            memcpy(d, x, (size_t)width * sizeof *d);
    }
}

/* Rows per row panel: the budget's worth, a multiple of 16, at least 1. */
static int panel_rows(const FrozenWeight *w, size_t es) {
    size_t p = FW_PANEL_BUDGET / ((size_t)w->cols * es);
    if (p >= 16) p -= p % 16;
    if (p < 1) p = 1;
    return p > (size_t)w->rows ? w->rows : (int)p;
}

/* dst (nr, cols) = rows r0.. of W, threads splitting the rows. */
static void expand_rows_par(const FrozenWeight *w, int r0, int nr, DType out, void *dst) {
    size_t eo = esize_of(out);
    #pragma omp parallel for schedule(static) if ((size_t)nr * w->cols > 32768)
    for (int r = 0; r < nr; r++)
        fw_expand(w, r0 + r, 1, 0, w->cols, out, (char *)dst + (size_t)r * w->cols * eo, (size_t)w->cols);
}

/* dst (rows, nc), rows nc apart = columns c0.. of every row of W. */
static void expand_cols_par(const FrozenWeight *w, int c0, int nc, DType out, void *dst) {
    size_t eo = esize_of(out);
    #pragma omp parallel for schedule(static) if ((size_t)nc * w->rows > 32768)
    for (int r = 0; r < w->rows; r++)
        fw_expand(w, r, 1, c0, nc, out, (char *)dst + (size_t)r * nc * eo, (size_t)nc);
}

void fw_linear_forward(float *out, const float *x, const uint16_t *x16, const FrozenWeight *w,
                       const float *bias, int N) {
    int rows = w->rows, cols = w->cols;
    if (N <= 0 || rows <= 0) return;
    bool bf = w->compute == DTYPE_BF16;
    if (N <= FW_GEMV_MAX_ROWS && w->fmt == FW_PLAIN && w->dtype == DTYPE_BF16 && (x || (bf && x16))) {
        /* a bf16 product reads the input rounded to bf16 */
        if (bf && !x16) x16 = matmul_bf16_input(x, (size_t)N, (size_t)cols);
        bf16_gemv(out, (size_t)rows, bf ? NULL : x, bf ? x16 : NULL, w->data, rows, cols, bias, N);
        return;
    }
    if (fw_is_direct(w)) {
        if (bf && x16) linear_forward_bf16_input(out, x16, w->data, bias, N, cols, rows);
        else linear_forward(out, x, w->data, w->dtype, bias, N, cols, rows);
        return;
    }
    if (N <= FW_GEMV_MAX_ROWS && w->fmt == FW_AFFINE && x) {
        affine_gemv(out, (size_t)rows, x, w->data, w->row_bytes, w->scales, w->biases, w->dtype, w->bits,
                    w->group, rows, cols, bias, N);
        return;
    }
    const void *a = x;
    if (bf) a = x16 ? (const void *)x16 : (const void *)matmul_bf16_input(x, (size_t)N, (size_t)cols);
    size_t es = esize_of(w->compute);
    int P = panel_rows(w, es);
    size_t panel_bytes = (size_t)P * cols * es;
    void *panel = panel_for(panel_bytes, "fw_linear_forward");
    for (int o0 = 0; o0 < rows; o0 += P) {
        int np = rows - o0 < P ? rows - o0 : P;
        expand_rows_par(w, o0, np, w->compute, panel);
        if (np == rows) {
            matmul_strided(out, (size_t)rows, a, (size_t)cols, false, panel, (size_t)cols, true, w->compute, bias,
                           N, np, cols, 1.0f, 0.0f);
            continue;
        }
        /* the panel's columns of out, through the staging tile (ns, np) */
        int S = stage_rows(np, N);
        float *tile = stage_for(panel_bytes, (size_t)S * np * sizeof(float), "fw_linear_forward");
        for (int n0 = 0; n0 < N; n0 += S) {
            int ns = N - n0 < S ? N - n0 : S;
            const void *an = (const char *)a + (size_t)n0 * cols * es;
            matmul_strided(tile, (size_t)np, an, (size_t)cols, false, panel, (size_t)cols, true, w->compute,
                           bias ? bias + o0 : NULL, ns, np, cols, 1.0f, 0.0f);
            copy_rows(out + (size_t)n0 * rows + o0, (size_t)rows, tile, (size_t)np, ns, np, false);
        }
    }
}

void fw_linear_backward_dinp(float *dx, float beta, const float *dout, const uint16_t *dout16, size_t ld16,
                             const FrozenWeight *w, int N) {
    int rows = w->rows, cols = w->cols;
    if (N <= 0 || rows <= 0 || cols <= 0) return;
    bool bf = w->compute == DTYPE_BF16;
    if (fw_is_direct(w)) {
        if (bf && dout16) linear_backward_dinp_bf16_dout(dx, dout16, ld16, w->data, beta, N, cols, rows);
        else if (beta == 0.0f) linear_backward_set_dinp(dx, NULL, NULL, dout, NULL, w->data, w->dtype, N, cols, rows);
        else linear_backward(dx, NULL, NULL, dout, NULL, w->data, w->dtype, N, cols, rows);
        return;
    }
    const void *a = dout;
    size_t lda = (size_t)rows, es = esize_of(w->compute);
    if (bf) {
        if (dout16) a = dout16, lda = ld16;
        else a = matmul_bf16_input(dout, (size_t)N, (size_t)rows);
    }
    size_t align = (size_t)fw_col_align(w);
    size_t pc = FW_PANEL_BUDGET / ((size_t)rows * es) / align * align;
    size_t min_pc = align > FW_MIN_PANEL_COLS ? align : FW_MIN_PANEL_COLS;
    if (pc >= (size_t)cols || (pc >= min_pc && pc > 0)) {
        /* panels of whole columns: each column of dx is written by one product */
        if (pc > (size_t)cols) pc = (size_t)cols;
        size_t panel_bytes = pc * rows * es;
        void *panel = panel_for(panel_bytes, "fw_linear_backward_dinp");
        for (size_t c0 = 0; c0 < (size_t)cols; c0 += pc) {
            int nc = (int)((size_t)cols - c0 < pc ? (size_t)cols - c0 : pc);
            expand_cols_par(w, (int)c0, nc, w->compute, panel);
            if (nc == cols) {
                matmul_strided(dx, (size_t)cols, a, lda, false, panel, (size_t)nc, false, w->compute, NULL,
                               N, nc, rows, 1.0f, beta);
                continue;
            }
            /* the panel's columns of dx, through the staging tile (ns, nc) */
            int S = stage_rows(nc, N);
            float *tile = stage_for(panel_bytes, (size_t)S * nc * sizeof(float), "fw_linear_backward_dinp");
            for (int n0 = 0; n0 < N; n0 += S) {
                int ns = N - n0 < S ? N - n0 : S;
                const void *an = (const char *)a + (size_t)n0 * lda * es;
                matmul_strided(tile, (size_t)nc, an, lda, false, panel, (size_t)nc, false, w->compute, NULL,
                               ns, nc, rows, 1.0f, 0.0f);
                copy_rows(dx + (size_t)n0 * cols + c0, (size_t)cols, tile, (size_t)nc, ns, nc, beta != 0.0f);
            }
        }
        return;
    }
    /* very tall matrices (an LM head): panels of rows, products summed into dx */
    int P = panel_rows(w, es);
    size_t panel_bytes = (size_t)P * cols * es;
    void *panel = panel_for(panel_bytes, "fw_linear_backward_dinp");
    for (int o0 = 0; o0 < rows; o0 += P) {
        int np = rows - o0 < P ? rows - o0 : P;
        expand_rows_par(w, o0, np, w->compute, panel);
        const void *ap = (const char *)a + (size_t)o0 * es;
        float b0 = o0 == 0 ? beta : 1.0f;
        if ((size_t)np == lda) {
            matmul_strided(dx, (size_t)cols, ap, lda, false, panel, (size_t)cols, false, w->compute, NULL,
                           N, cols, np, 1.0f, b0);
            continue;
        }
        /* the panel's columns of dout, copied to the staging tile (ns, np) */
        int S = stage_rows(np, N);
        void *tile = stage_for(panel_bytes, (size_t)S * np * es, "fw_linear_backward_dinp");
        for (int n0 = 0; n0 < N; n0 += S) {
            int ns = N - n0 < S ? N - n0 : S;
            const char *src = (const char *)ap + (size_t)n0 * lda * es;
            #pragma omp parallel for schedule(static) if ((size_t)ns * np > 32768)
            for (int r = 0; r < ns; r++)
                memcpy((char *)tile + (size_t)r * np * es, src + (size_t)r * lda * es, (size_t)np * es);
            matmul_strided(dx + (size_t)n0 * cols, (size_t)cols, tile, (size_t)np, false, panel, (size_t)cols, false,
                           w->compute, NULL, ns, cols, np, 1.0f, b0);
        }
    }
}

void fw_gather_rows(float *out, const int *ids, int N, const FrozenWeight *w) {
    #pragma omp parallel for schedule(static) if ((size_t)N * w->cols > 32768)
    for (int n = 0; n < N; n++)
        fw_expand(w, ids[n], 1, 0, w->cols, DTYPE_F32, out + (size_t)n * w->cols, (size_t)w->cols);
}

void fw_row_norms2(float *out, const FrozenWeight *w) {
    int align = fw_col_align(w);
    int chunk = (256 + align - 1) / align * align;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < w->rows; r++) {
        float buf[chunk];
        double s = 0;
        for (int c0 = 0; c0 < w->cols; c0 += chunk) {
            int nc = w->cols - c0 < chunk ? w->cols - c0 : chunk;
            fw_expand(w, r, 1, c0, nc, DTYPE_F32, buf, (size_t)nc);
            for (int c = 0; c < nc; c++) s += (double)buf[c] * buf[c];
        }
        out[r] = (float)s;
    }
}

/* --- the shapes of the products above, for the memory planner --- */

void fw_forward_shapes(const FrozenWeight *w, int N, bool bias, bool have_x, FwShapeSink sink, void *ctx) {
    int rows = w->rows, cols = w->cols;
    if (N <= 0 || rows <= 0) return;
    /* the bf16 GEMV (without x, a bf16 product has x16) */
    if (N <= FW_GEMV_MAX_ROWS && w->fmt == FW_PLAIN && w->dtype == DTYPE_BF16 && (have_x || w->compute == DTYPE_BF16))
        return;
    if (fw_is_direct(w)) {
        MatmulShape k = matmul_shape_linear_forward(N, cols, rows, w->dtype, bias);
        sink(ctx, &k);
        return;
    }
    if (N <= FW_GEMV_MAX_ROWS && w->fmt == FW_AFFINE && have_x) return;   /* the fused GEMV */
    int P = panel_rows(w, esize_of(w->compute));
    for (int o0 = 0; o0 < rows; o0 += P) {
        int np = rows - o0 < P ? rows - o0 : P;
        if (np == rows) {
            MatmulShape k = matmul_shape_strided((size_t)rows, (size_t)cols, false, (size_t)cols, true, w->compute,
                                                 bias, N, np, cols, 1.0f, 0.0f);
            sink(ctx, &k);
            continue;
        }
        int S = stage_rows(np, N);
        for (int n0 = 0; n0 < N; n0 += S) {
            int ns = N - n0 < S ? N - n0 : S;
            MatmulShape k = matmul_shape_strided((size_t)np, (size_t)cols, false, (size_t)cols, true, w->compute,
                                                 bias, ns, np, cols, 1.0f, 0.0f);
            sink(ctx, &k);
        }
    }
}

void fw_dinp_shapes(const FrozenWeight *w, int N, float beta, size_t ld16, FwShapeSink sink, void *ctx) {
    int rows = w->rows, cols = w->cols;
    if (N <= 0 || rows <= 0 || cols <= 0) return;
    bool bf = w->compute == DTYPE_BF16;
    if (fw_is_direct(w)) {
        MatmulShape k = bf && ld16 ? matmul_shape_dinp_bf16_dout(ld16, N, cols, rows, beta)
                                   : matmul_shape_linear_dinp(N, cols, rows, w->dtype, beta);
        sink(ctx, &k);
        return;
    }
    size_t lda = bf && ld16 ? ld16 : (size_t)rows, es = esize_of(w->compute);
    size_t align = (size_t)fw_col_align(w);
    if ((size_t)rows * align * es <= FW_PANEL_BUDGET) {
        size_t pc = FW_PANEL_BUDGET / ((size_t)rows * es) / align * align;
        if (pc > (size_t)cols) pc = (size_t)cols;
        for (size_t c0 = 0; c0 < (size_t)cols; c0 += pc) {
            int nc = (int)((size_t)cols - c0 < pc ? (size_t)cols - c0 : pc);
            if (nc == cols) {
                MatmulShape k = matmul_shape_strided((size_t)cols, lda, false, (size_t)nc, false, w->compute, false,
                                                     N, nc, rows, 1.0f, beta);
                sink(ctx, &k);
                continue;
            }
            int S = stage_rows(nc, N);
            for (int n0 = 0; n0 < N; n0 += S) {
                int ns = N - n0 < S ? N - n0 : S;
                MatmulShape k = matmul_shape_strided((size_t)nc, lda, false, (size_t)nc, false, w->compute, false,
                                                     ns, nc, rows, 1.0f, 0.0f);
                sink(ctx, &k);
            }
        }
        return;
    }
    int P = panel_rows(w, es);
    for (int o0 = 0; o0 < rows; o0 += P) {
        int np = rows - o0 < P ? rows - o0 : P;
        float b0 = o0 == 0 ? beta : 1.0f;
        if ((size_t)np == lda) {
            MatmulShape k = matmul_shape_strided((size_t)cols, lda, false, (size_t)cols, false, w->compute, false, N,
                                                 cols, np, 1.0f, b0);
            sink(ctx, &k);
            continue;
        }
        int S = stage_rows(np, N);
        for (int n0 = 0; n0 < N; n0 += S) {
            int ns = N - n0 < S ? N - n0 : S;
            MatmulShape k = matmul_shape_strided((size_t)cols, (size_t)np, false, (size_t)cols, false, w->compute,
                                                 false, ns, cols, np, 1.0f, b0);
            sink(ctx, &k);
        }
    }
}

/* test_quant_kernels.c: MLX affine quantization against the independent
 * reference of tests/quant/data/kernels.safetensors (tests/quant/mlx_affine.py,
 * written from MLX's kernels): for every bits x group x dtype, affine_quantize
 * gives the same packed bytes, scales and biases bit for bit (constant,
 * zero, all-negative, all-positive, extreme and tie groups included), and
 * the expansion gives the same dequantized values bit for bit, for any
 * tile. Then the frozen-weight products, which have no outside reference
 * beyond the expansion: panel products (row panels, column panels, summed
 * row panels), the fused GEMV, the embedding gather and the row norms,
 * against float64 sums over the expanded weights. */
#include "check.h"
#include "base/error.h"
#include "base/rng.h"
#include "formats/safetensors.h"
#include "kernels/dequant.h"
#include "kernels/frozen_weight.h"
#include "kernels/matmul.h"
#include <stdlib.h>

static const StTensor *get(const StFile *f, const char *key, const char *what) {
    char nm[96];
    snprintf(nm, sizeof nm, "%s.%s", key, what);
    const StTensor *t = st_find(f, nm);
    CHECK_MSG(t != NULL, "%s missing", nm);
    return t;
}

static size_t es(DType t) { return t == DTYPE_F32 ? 4 : 2; }

static int kernel_case(const StFile *f, int bits, int group, DType dt, const char *dname) {
    char key[64];
    snprintf(key, sizeof key, "b%d_g%d_%s", bits, group, dname);
    const StTensor *w = get(f, key, "w"), *pk = get(f, key, "packed"), *sc = get(f, key, "scales");
    const StTensor *bi = get(f, key, "biases"), *dq = get(f, key, "deq");
    if (!w || !pk || !sc || !bi || !dq) return 1;
    int rows = (int)w->shape[0], cols = (int)w->shape[1];
    size_t nbytes = (size_t)rows * cols * bits / 8, ng = (size_t)rows * cols / group;
    uint8_t *packed = calloc(nbytes, 1);
    void *scales = calloc(ng, 4), *biases = calloc(ng, 4);
    affine_quantize(packed, scales, biases, w->data, dt, bits, group, rows, cols);
    int bad = 0;
    CHECK_MSG(pk->nelem == nbytes && memcmp(packed, pk->data, nbytes) == 0, "%s: packed codes differ", key);
    CHECK_MSG(memcmp(scales, sc->data, ng * es(dt)) == 0, "%s: scales differ", key);
    CHECK_MSG(memcmp(biases, bi->data, ng * es(dt)) == 0, "%s: biases differ", key);
    bad += memcmp(packed, pk->data, nbytes) != 0;

    /* expansion of the reference's packed weights: whole matrix and a tile */
    FrozenWeight fw = fw_affine(pk->data, sc->data, bi->data, dt, bits, group, rows, cols);
    float *full = calloc((size_t)rows * cols, 4), *ref = calloc((size_t)rows * cols, 4);
    dtype_to_f32(ref, dq->data, dt, (size_t)rows * cols);
    fw_expand(&fw, 0, rows, 0, cols, DTYPE_F32, full, (size_t)cols);
    size_t mism = 0;
    for (size_t i = 0; i < (size_t)rows * cols; i++) mism += memcmp(&full[i], &ref[i], 4) != 0;
    CHECK_MSG(mism == 0, "%s: %zu dequantized values differ from MLX's", key, mism);
    bad += mism != 0;
    /* a tile: rows 1..2, columns starting at the second group */
    if (cols >= 2 * group) {
        float tile[2 * 128];
        fw_expand(&fw, 1, 2, group, group, DTYPE_F32, tile, (size_t)group);
        size_t tm = 0;
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < group; c++) tm += tile[r * group + c] != full[(size_t)(1 + r) * cols + group + c];
        CHECK_MSG(tm == 0, "%s: tile expansion differs in %zu values", key, tm);
    }
    if (dt != DTYPE_F16) {   /* bf16 panels: the bf16 rounding of the same values */
        uint16_t *b16 = calloc((size_t)rows * cols, 2);
        fw_expand(&fw, 0, rows, 0, cols, DTYPE_BF16, b16, (size_t)cols);
        size_t bm = 0;
        for (size_t i = 0; i < (size_t)rows * cols; i++) bm += b16[i] != f32_to_bf16(ref[i]);
        CHECK_MSG(bm == 0, "%s: %zu bf16 panel values differ", key, bm);
        free(b16);
    }
    /* the scalar definition */
    float s0, b0;
    dtype_to_f32(&s0, sc->data, dt, 1);
    dtype_to_f32(&b0, bi->data, dt, 1);
    unsigned q0 = ((const uint8_t *)pk->data)[0] & ((1u << bits) - 1);
    CHECK_MSG(affine_value(s0, b0, q0, dt) == ref[0], "%s: affine_value", key);
    free(packed); free(scales); free(biases); free(full); free(ref);
    return bad;
}

static float *rnd(Rng *g, size_t n, float s) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = (rng_uniform(g) * 2.0f - 1.0f) * s;
    return p;
}

/* A random affine matrix (quantized by affine_quantize), its expansion, and
 * s * q + b in double without the rounding to T (what the fused GEMV sums,
 * as MLX's qmv does). */
typedef struct { uint8_t *codes; void *scales, *biases; float *deq; double *exact; FrozenWeight fw; } QMat;

static double elem(const void *p, DType t, size_t i) {
    if (t == DTYPE_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

static QMat qmat(Rng *g, int rows, int cols, int bits, int group, DType dt) {
    QMat q;
    size_t n = (size_t)rows * cols;
    float *w = rnd(g, n, 0.1f);
    void *src = w;
    uint16_t *w16 = NULL;
    if (dt != DTYPE_F32) {
        w16 = malloc(n * 2);
        dtype_from_f32(w16, dt, w, n);
        src = w16;
    }
    q.codes = malloc(n * bits / 8);
    q.scales = malloc(n / group * 4);
    q.biases = malloc(n / group * 4);
    affine_quantize(q.codes, q.scales, q.biases, src, dt, bits, group, rows, cols);
    q.fw = fw_affine(q.codes, q.scales, q.biases, dt, bits, group, rows, cols);
    q.deq = malloc(n * 4);
    fw_expand(&q.fw, 0, rows, 0, cols, DTYPE_F32, q.deq, (size_t)cols);
    q.exact = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        size_t bit = i * (size_t)bits;   /* code i of the whole matrix's bit stream (rows are byte-aligned) */
        unsigned v = q.codes[bit / 8] | (bit / 8 + 1 < n * bits / 8 ? (unsigned)q.codes[bit / 8 + 1] << 8 : 0u);
        unsigned code = (v >> (bit % 8)) & ((1u << bits) - 1);
        q.exact[i] = elem(q.scales, dt, i / group) * code + elem(q.biases, dt, i / group);
    }
    free(w); free(w16);
    return q;
}

static void qfree(QMat *q) { free(q->codes); free(q->scales); free(q->biases); free(q->deq); free(q->exact); }

/* The products with a quantized weight against float64 sums over its
 * expansion (inputs rounded to bf16 first when the product is bf16). */
static void products(Rng *g, int N, int rows, int cols, int bits, int group, DType dt, double tol, const char *what) {
    QMat q = qmat(g, rows, cols, bits, group, dt);
    bool bf = q.fw.compute == DTYPE_BF16;
    float *x = rnd(g, (size_t)N * cols, 1.0f), *dy = rnd(g, (size_t)N * rows, 1.0f), *bias = rnd(g, rows, 1.0f);
    float *y = calloc((size_t)N * rows, 4), *dx = calloc((size_t)N * cols, 4);
    fw_linear_forward(y, x, NULL, &q.fw, bias, N);
    double worst = 0, scale = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < rows; o++) {
            double s = bias[o];
            for (int c = 0; c < cols; c++) {
                double xv = x[(size_t)n * cols + c];
                bool gemv = N <= FW_GEMV_MAX_ROWS;
                if (bf && !gemv) xv = bf16_to_f32(f32_to_bf16((float)xv));
                s += xv * (gemv ? q.exact[(size_t)o * cols + c] : q.deq[(size_t)o * cols + c]);
            }
            double e = fabs(s - y[(size_t)n * rows + o]);
            if (e > worst) worst = e;
            if (fabs(s) > scale) scale = fabs(s);
        }
    CHECK_MSG(worst <= tol * scale, "%s forward: max error %.3g of max %.3g", what, worst, scale);
    double fwd = worst / scale;
    for (int pass = 0; pass < 2; pass++) {   /* overwrite, then accumulate */
        if (pass == 1) for (size_t i = 0; i < (size_t)N * cols; i++) dx[i] = 1.0f;
        fw_linear_backward_dinp(dx, pass ? 1.0f : 0.0f, dy, NULL, 0, &q.fw, N);
        worst = 0; scale = 0;
        for (int n = 0; n < N; n++)
            for (int c = 0; c < cols; c++) {
                double s = pass ? 1.0 : 0.0;
                for (int o = 0; o < rows; o++) {
                    double d = dy[(size_t)n * rows + o];
                    if (bf) d = bf16_to_f32(f32_to_bf16((float)d));
                    s += d * q.deq[(size_t)o * cols + c];
                }
                double e = fabs(s - dx[(size_t)n * cols + c]);
                if (e > worst) worst = e;
                if (fabs(s) > scale) scale = fabs(s);
            }
        CHECK_MSG(worst <= tol * scale, "%s backward (beta %d): max error %.3g of max %.3g", what, pass, worst, scale);
    }
    printf("  %-44s forward %.2e backward %.2e\n", what, fwd, worst / scale);
    free(x); free(dy); free(bias); free(y); free(dx);
    qfree(&q);
}

int main(void) {
    StFile f;
    if (st_open(&f, "tests/quant/data/kernels.safetensors") < 0) {
        fprintf(stderr, "%s\n", error_message());
        return 1;
    }
    static const struct { DType t; const char *name; } dts[] = {
        {DTYPE_F32, "float32"}, {DTYPE_BF16, "bfloat16"}, {DTYPE_F16, "float16"}};
    static const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    int cases = 0, bad = 0;
    for (int d = 0; d < 3; d++)
        for (int b = 0; b < 6; b++)
            for (int g = 0; g < 3; g++) { bad += kernel_case(&f, bits[b], groups[g], dts[d].t, dts[d].name); cases++; }
    printf("quantize/dequantize: %d cases, %d differ from the reference\n", cases, bad);
    st_close(&f);

    size_t panel_bytes = fw_panel_scratch_bytes(4096);
    void *panel = malloc(panel_bytes);
    fw_set_panel_scratch(panel, panel_bytes);
    size_t mm_bytes = matmul_scratch_bytes(64, 20000);
    void *mm = malloc(mm_bytes);
    matmul_set_scratch(mm, mm_bytes);
    Rng g;
    rng_seed(&g, 7);
    /* f32 scales: fp32 products; bf16 scales: bf16 products (inputs rounded) */
    products(&g, 37, 600, 4096, 4, 64, DTYPE_F32, 1e-5, "row panels / column panels, 4-bit f32");
    products(&g, 37, 600, 4096, 8, 128, DTYPE_BF16, 1e-3, "row panels / column panels, 8-bit bf16");
    products(&g, 9, 20000, 128, 4, 32, DTYPE_F32, 1e-5, "tall (summed row panels), 4-bit f32");
    products(&g, 9, 20000, 128, 3, 64, DTYPE_BF16, 1e-3, "tall (summed row panels), 3-bit bf16");
    products(&g, 1, 300, 512, 4, 64, DTYPE_BF16, 1e-5, "GEMV 1 row, 4-bit bf16");
    products(&g, 3, 300, 512, 8, 32, DTYPE_F32, 1e-5, "GEMV 3 rows, 8-bit f32");
    products(&g, 2, 300, 512, 6, 128, DTYPE_F16, 1e-5, "GEMV 2 rows, 6-bit f16");
    products(&g, 33, 300, 512, 5, 32, DTYPE_F16, 1e-5, "panels 5-bit f16 (fp32 products)");
    /* plain weights expanded on the fly (bf16 stored, fp32 products) */
    {
        int rows = 300, cols = 256, N = 20;
        float *w = rnd(&g, (size_t)rows * cols, 0.1f), *x = rnd(&g, (size_t)N * cols, 1.0f);
        uint16_t *w16 = malloc((size_t)rows * cols * 2);
        dtype_from_f32(w16, DTYPE_BF16, w, (size_t)rows * cols);
        FrozenWeight fw = fw_plain(w16, DTYPE_BF16, rows, cols, DTYPE_F32);
        CHECK(!fw_is_direct(&fw));
        float *y = calloc((size_t)N * rows, 4);
        fw_linear_forward(y, x, NULL, &fw, NULL, N);
        double worst = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < rows; o++) {
                double s = 0;
                for (int c = 0; c < cols; c++) s += (double)x[n * cols + c] * bf16_to_f32(w16[(size_t)o * cols + c]);
                worst = fmax(worst, fabs(s - y[(size_t)n * rows + o]));
            }
        CHECK_MSG(worst < 1e-4, "bf16 -> fp32 panels: error %.3g", worst);
        free(w); free(x); free(w16); free(y);
    }
    /* embedding gather and row norms */
    {
        QMat q = qmat(&g, 50, 128, 2, 32, DTYPE_BF16);
        int ids[4] = {3, 49, 0, 3};
        float out[4 * 128], norms[50];
        fw_gather_rows(out, ids, 4, &q.fw);
        size_t gm = 0;
        for (int n = 0; n < 4; n++) gm += memcmp(out + n * 128, q.deq + ids[n] * 128, 128 * 4) != 0;
        CHECK_MSG(gm == 0, "gather: %zu rows differ", gm);
        fw_row_norms2(norms, &q.fw);
        double worst = 0;
        for (int r = 0; r < 50; r++) {
            double s = 0;
            for (int c = 0; c < 128; c++) s += (double)q.deq[r * 128 + c] * q.deq[r * 128 + c];
            worst = fmax(worst, fabs(s - norms[r]) / s);
        }
        CHECK_MSG(worst < 1e-6, "row norms: rel error %.3g", worst);
        CHECK(fw_storage_bytes(&q.fw) == 50 * 128 * 2 / 8 + 2 * 50 * 4 * 2);
        qfree(&q);
    }
    matmul_release_all();
    free(panel); free(mm);
    return check_finish("quant/kernels");
}

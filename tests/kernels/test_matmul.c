/* test_matmul.c: gemm_f32 and the linear layer against naive triple loops in
 * double: every transpose combination, alpha/beta, odd sizes, the bf16 path
 * (against naive products of bf16-rounded inputs), bias, the backward
 * accumulation, and that a warm cache creates no new primitive. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "base/dtype.h"
#include "kernels/matmul.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *rand_vec(size_t n) { float *p = malloc(n * sizeof *p); for (size_t i = 0; i < n; i++) p[i] = frand(); return p; }
static float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

/* C = alpha op(A) op(B) + beta C in double. */
static void naive_gemm(float *C, const float *A, const float *B, int M, int N, int K, int tA, int tB, float alpha, float beta) {
    for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) {
        double s = 0;
        for (int k = 0; k < K; k++) {
            double a = tA ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
            double b = tB ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
            s += a * b;
        }
        C[(size_t)i * N + j] = (float)(alpha * s + (beta == 0 ? 0.0 : beta * C[(size_t)i * N + j]));
    }
}

static double worst_gemm = 0, worst_bf16 = 0, worst_linear = 0;

static void test_gemm_case(int M, int N, int K, int tA, int tB, float alpha, float beta) {
    float *A = rand_vec((size_t)M * K), *B = rand_vec((size_t)K * N), *C = rand_vec((size_t)M * N);
    float *R = malloc((size_t)M * N * sizeof *R);
    memcpy(R, C, (size_t)M * N * sizeof *R);
    if (beta == 0) for (size_t i = 0; i < (size_t)M * N; i++) C[i] = NAN; /* beta 0 must ignore C */
    gemm_f32(C, A, B, M, N, K, tA, tB, alpha, beta);
    naive_gemm(R, A, B, M, N, K, tA, tB, alpha, beta);
    double e = rel_error(C, R, (size_t)M * N);
    if (!(e <= worst_gemm)) worst_gemm = e;
    CHECK_MSG(e < 1e-5, "gemm %dx%dx%d tA=%d tB=%d alpha=%g beta=%g: rel err %.3g", M, N, K, tA, tB, alpha, beta, e);
    free(A); free(B); free(C); free(R);
}

static uint16_t *to_bf16(const float *x, size_t n) { uint16_t *p = malloc(n * 2); for (size_t i = 0; i < n; i++) p[i] = f32_to_bf16(x[i]); return p; }

static void test_linear_case(int N, int C, int OC, DType wt, int with_bias) {
    float *inp = rand_vec((size_t)N * C), *w = rand_vec((size_t)OC * C), *bias = with_bias ? rand_vec(OC) : NULL;
    float *out = malloc((size_t)N * OC * 4), *ref = malloc((size_t)N * OC * 4);
    uint16_t *w16 = to_bf16(w, (size_t)OC * C);
    float *inp_r = malloc((size_t)N * C * 4), *w_r = malloc((size_t)OC * C * 4);
    for (size_t i = 0; i < (size_t)N * C; i++) inp_r[i] = wt == DTYPE_BF16 ? round_bf16(inp[i]) : inp[i];
    for (size_t i = 0; i < (size_t)OC * C; i++) w_r[i] = wt == DTYPE_BF16 ? round_bf16(w[i]) : w[i];
    linear_forward(out, inp, wt == DTYPE_BF16 ? (void *)w16 : (void *)w, wt, bias, N, C, OC);
    naive_gemm(ref, inp_r, w_r, N, OC, C, 0, 1, 1.0f, 0.0f);
    if (bias) for (int n = 0; n < N; n++) for (int o = 0; o < OC; o++) ref[(size_t)n * OC + o] += bias[o];
    double e = rel_error(out, ref, (size_t)N * OC);
    double *worst = wt == DTYPE_BF16 ? &worst_bf16 : &worst_linear;
    if (!(e <= *worst)) *worst = e;
    CHECK_MSG(e < 1e-5, "linear_forward %s %dx%dx%d bias=%d: rel err %.3g", dtype_name(wt), N, C, OC, with_bias, e);

    /* backward: dinp += dout @ W (bf16-rounded dout on the bf16 path), dweight += dout^T inp, dbias += colsum */
    float *dout = rand_vec((size_t)N * OC), *dinp = rand_vec((size_t)N * C), *dw = rand_vec((size_t)OC * C), *db = rand_vec(OC);
    float *rdinp = malloc((size_t)N * C * 4), *rdw = malloc((size_t)OC * C * 4), *rdb = malloc((size_t)OC * 4);
    memcpy(rdinp, dinp, (size_t)N * C * 4); memcpy(rdw, dw, (size_t)OC * C * 4); memcpy(rdb, db, (size_t)OC * 4);
    float *dout_r = malloc((size_t)N * OC * 4);
    for (size_t i = 0; i < (size_t)N * OC; i++) dout_r[i] = wt == DTYPE_BF16 ? round_bf16(dout[i]) : dout[i];
    linear_backward(dinp, dw, db, dout, inp, wt == DTYPE_BF16 ? (void *)w16 : (void *)w, wt, N, C, OC);
    naive_gemm(rdinp, dout_r, w_r, N, C, OC, 0, 0, 1.0f, 1.0f);
    naive_gemm(rdw, dout, inp, OC, C, N, 1, 0, 1.0f, 1.0f);
    for (int o = 0; o < OC; o++) { double s = 0; for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o]; rdb[o] = (float)(rdb[o] + s); }
    double e1 = rel_error(dinp, rdinp, (size_t)N * C), e2 = rel_error(dw, rdw, (size_t)OC * C), e3 = rel_error(db, rdb, OC);
    double m = e1 > e2 ? e1 : e2; m = m > e3 ? m : e3;
    if (!(m <= *worst)) *worst = m;
    CHECK_MSG(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5, "linear_backward %s %dx%dx%d: dinp %.3g dweight %.3g dbias %.3g",
              dtype_name(wt), N, C, OC, e1, e2, e3);
    free(inp); free(w); free(bias); free(out); free(ref); free(w16); free(inp_r); free(w_r);
    free(dout); free(dinp); free(dw); free(db); free(rdinp); free(rdw); free(rdb); free(dout_r);
}

int main(void) {
    static uint16_t scratch[1 << 16];
    matmul_set_scratch(scratch, sizeof scratch);
    CHECK(matmul_scratch_bytes(100, 7) == 1400);

    const int sizes[][3] = {{7, 13, 5}, {1, 1, 1}, {33, 17, 64}, {64, 48, 31}, {5, 129, 3}};
    const float ab[][2] = {{1, 0}, {1, 1}, {0.5f, 0}, {-2, 0.25f}, {1.5f, -1}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int tA = 0; tA < 2; tA++) for (int tB = 0; tB < 2; tB++)
            for (size_t a = 0; a < sizeof ab / sizeof *ab; a++)
                test_gemm_case(sizes[s][0], sizes[s][1], sizes[s][2], tA, tB, ab[a][0], ab[a][1]);
    printf("worst gemm_f32 rel err %.3g\n", worst_gemm);

    const int lin[][3] = {{7, 13, 5}, {16, 64, 48}, {33, 40, 129}, {1, 8, 3}};
    for (size_t s = 0; s < sizeof lin / sizeof *lin; s++)
        for (int bias = 0; bias < 2; bias++) {
            test_linear_case(lin[s][0], lin[s][1], lin[s][2], DTYPE_F32, bias);
            test_linear_case(lin[s][0], lin[s][1], lin[s][2], DTYPE_BF16, bias);
        }
    printf("worst linear f32 rel err %.3g, bf16 (vs bf16-rounded naive) %.3g\n", worst_linear, worst_bf16);

    /* A warm cache creates nothing: the same shapes again. */
    long before = matmul_primitives_created();
    test_gemm_case(7, 13, 5, 1, 0, 1, 1);
    test_linear_case(16, 64, 48, DTYPE_BF16, 1);
    CHECK(matmul_primitives_created() == before);
    printf("primitives created %ld, library scratchpad %zu bytes\n", before, matmul_library_scratch_bytes());

    /* K = 0: only the beta term. */
    float c0[6] = {1, 2, 3, 4, 5, 6};
    gemm_f32(c0, NULL, NULL, 2, 3, 0, false, false, 1.0f, 2.0f);
    CHECK_NEAR(c0[5], 12.0, 0);

    printf("worst matmul %.3g\n", worst_gemm > worst_linear ? (worst_gemm > worst_bf16 ? worst_gemm : worst_bf16)
                                                            : (worst_linear > worst_bf16 ? worst_linear : worst_bf16));
    matmul_release_all();
    return check_finish("kernels/matmul");
}

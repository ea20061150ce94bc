/* matmul.c: every matrix product of lmtune, through oneDNN's matmul
 * primitive (CPU engine, one in-order stream, OpenMP threading inside
 * oneDNN). Transposed operands are expressed with strides, never copied;
 * alpha is an output scale, beta a sum post-op, bias oneDNN's bias input.
 *
 * Primitives are created on first use of a (shape, transposes, dtypes,
 * alpha, beta, bias) combination and kept in a fixed table of
 * MM_CACHE_SLOTS entries (least recently used is replaced), together with
 * their memory objects, whose data handles are swapped per call: once
 * every shape of a step has been seen, the step creates nothing.
 *
 * bf16: frozen bf16 weights are multiplied as bf16 x bf16 -> f32; the fp32
 * activation operand is first rounded to bf16 into the scratch given by
 * matmul_set_scratch (AVX512-BF16 then runs about twice as fast as fp32).
 *
 * oneDNN's own scratchpad stays library-managed (shared, grown to the
 * largest need); matmul_library_scratch_bytes() reports that size so the
 * memory planner can count it. Failures of oneDNN here are impossible
 * states for a correct caller (shapes are positive and consistent), so they
 * die() with the oneDNN status rather than return an error. */
#include "kernels/matmul.h"

#include <dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "kernels/isa.h"

#define MM_CACHE_SLOTS 256

typedef struct {
    /* key */
    int64_t M, N, K;
    int transA, transB;
    int64_t lda, ldb, ldc; /* row strides of A, B (as stored) and C, in elements */
    dnnl_data_type_t a_type, b_type;
    float alpha, beta;
    int has_bias;
    /* value */
    int used;
    uint64_t last_use;
    dnnl_primitive_t prim;
    dnnl_memory_t mem_a, mem_b, mem_c, mem_bias;
    size_t scratchpad_bytes;
    /* profile (LMTUNE_MATMUL_PROFILE set): calls and process CPU seconds */
    long prof_calls;
    double prof_cpu_s;
} MatmulSlot;

static pthread_mutex_t mm_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t mm_engine;
static dnnl_stream_t mm_stream;
static int mm_ready;
static MatmulSlot mm_cache[MM_CACHE_SLOTS];
static uint64_t mm_clock;
static size_t mm_max_scratchpad;
static long mm_created; /* primitives created so far (tests check warm-up) */

static int mm_profile; /* LMTUNE_MATMUL_PROFILE set: time every call */

static void *mm_bf16_scratch;
static size_t mm_bf16_scratch_bytes;

#define DNNL_CHECK(call) do { dnnl_status_t s_ = (call); \
    if (s_ != dnnl_success) die("matmul.c: %s failed with oneDNN status %d", #call, (int)s_); } while (0)

void matmul_set_scratch(void *scratch, size_t bytes) {
    mm_bf16_scratch = scratch;
    mm_bf16_scratch_bytes = bytes;
}

size_t matmul_scratch_bytes(size_t max_rows, size_t max_cols) {
    return max_rows * max_cols * sizeof(uint16_t);
}

size_t matmul_library_scratch_bytes(void) {
    pthread_mutex_lock(&mm_lock);
    size_t s = mm_max_scratchpad;
    pthread_mutex_unlock(&mm_lock);
    return s;
}

long matmul_primitives_created(void) {
    pthread_mutex_lock(&mm_lock);
    long n = mm_created;
    pthread_mutex_unlock(&mm_lock);
    return n;
}

static void mm_init_locked(void) {
    if (mm_ready) return;
    isa_init(); /* LMTUNE_NO_AVX512 caps oneDNN's ISA before its first use */
    DNNL_CHECK(dnnl_engine_create(&mm_engine, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&mm_stream, mm_engine, dnnl_stream_default_flags));
    mm_profile = getenv("LMTUNE_MATMUL_PROFILE") != NULL;
    mm_ready = 1;
}

static int mm_bf16_ok = -1; /* -1: not asked yet */

bool matmul_bf16_supported(void) {
    pthread_mutex_lock(&mm_lock);
    mm_init_locked();
    if (mm_bf16_ok < 0) {
        dnnl_memory_desc_t a_md, b_md, c_md;
        dnnl_dims_t dims = {16, 16};
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&a_md, 2, dims, dnnl_bf16, dnnl_ab));
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&b_md, 2, dims, dnnl_bf16, dnnl_ab));
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&c_md, 2, dims, dnnl_f32, dnnl_ab));
        dnnl_matmul_desc_t desc;
        DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));
        dnnl_primitive_desc_t pd;
        mm_bf16_ok = dnnl_primitive_desc_create(&pd, &desc, NULL, mm_engine, NULL) == dnnl_success;
        if (mm_bf16_ok) {
            dnnl_primitive_desc_destroy(pd);
        }
    }
    bool ok = mm_bf16_ok;
    pthread_mutex_unlock(&mm_lock);
    return ok;
}

const char *matmul_isa_name(void) {
    matmul_bf16_supported(); /* creates the engine: LMTUNE_NO_AVX512's cap on the ISA is set by then */
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
    }
}

bool matmul_bf16_native(void) {
    if (!matmul_bf16_supported()) return false;
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

DType matmul_weight_dtype(DType stored) {
    return stored == DTYPE_BF16 && matmul_bf16_native() ? DTYPE_BF16 : DTYPE_F32;
}

/* CPU seconds of the whole process (all threads): on a shared, loaded
 * machine steadier than wall time. */
static double mm_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void mm_slot_report(const MatmulSlot *s) {
    if (!s->prof_calls) return;
    double gflop = 2.0 * s->M * s->N * s->K * s->prof_calls * 1e-9;
    fprintf(stderr, "matmul profile: %5ld x %-4s (%lld,%lld)x(%lld,%lld)%s%s%s %8.3f s CPU %7.1f GFLOP/s\n",
            s->prof_calls, s->b_type == dnnl_bf16 ? "bf16" : "f32", (long long)s->M, (long long)s->K,
            (long long)s->K, (long long)s->N, s->transA ? " A^T" : "", s->transB ? " B^T" : "",
            s->beta != 0.0f ? " +=" : "", s->prof_cpu_s, gflop / (s->prof_cpu_s > 0 ? s->prof_cpu_s : 1e-30));
}

void matmul_profile_report(bool print) {
    pthread_mutex_lock(&mm_lock);
    double total = 0;
    for (int i = 0; i < MM_CACHE_SLOTS; i++) {
        if (print) mm_slot_report(&mm_cache[i]);
        total += mm_cache[i].prof_cpu_s;
        mm_cache[i].prof_calls = 0;
        mm_cache[i].prof_cpu_s = 0;
    }
    if (print && mm_profile) fprintf(stderr, "matmul profile: total %.3f s CPU\n", total);
    pthread_mutex_unlock(&mm_lock);
}

static void mm_slot_release(MatmulSlot *s) {
    if (!s->used) return;
    mm_slot_report(s);
    dnnl_primitive_destroy(s->prim);
    dnnl_memory_destroy(s->mem_a);
    dnnl_memory_destroy(s->mem_b);
    dnnl_memory_destroy(s->mem_c);
    if (s->mem_bias) dnnl_memory_destroy(s->mem_bias);
    memset(s, 0, sizeof *s);
}

/* Row-major (rows, cols) matrix with rows ld apart, or its transpose seen
 * through strides: logical (rows, cols) stored as (cols, rows), rows of the
 * stored matrix ld apart. */
static void mm_desc(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans, int64_t ld, dnnl_data_type_t t) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides;
    strides[0] = trans ? 1 : ld;
    strides[1] = trans ? ld : 1;
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, t, strides));
}

static void mm_slot_create(MatmulSlot *s) {
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
    mm_desc(&a_md, s->M, s->K, s->transA, s->lda, s->a_type);
    mm_desc(&b_md, s->K, s->N, s->transB, s->ldb, s->b_type);
    mm_desc(&c_md, s->M, s->N, 0, s->ldc, dnnl_f32);
    if (s->has_bias) mm_desc(&bias_md, 1, s->N, 0, s->N, dnnl_f32);

    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, s->has_bias ? &bias_md : NULL, &c_md));

    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    if (s->alpha != 1.0f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &s->alpha));
    if (s->beta != 0.0f) {
        dnnl_post_ops_t ops;
        DNNL_CHECK(dnnl_post_ops_create(&ops));
        DNNL_CHECK(dnnl_post_ops_append_sum(ops, s->beta));
        DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, ops));
        dnnl_post_ops_destroy(ops);
    }
    /* With the library-managed scratchpad the descriptor reports no
     * scratchpad, so its size is read from a user-mode twin first. */
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, mm_engine, NULL));
    const dnnl_memory_desc_t *scratch_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    s->scratchpad_bytes = scratch_md ? dnnl_memory_desc_get_size(scratch_md) : 0;
    if (s->scratchpad_bytes > mm_max_scratchpad) mm_max_scratchpad = s->scratchpad_bytes;
    dnnl_primitive_desc_destroy(pd);
    DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_library));
    DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, mm_engine, NULL));
    dnnl_primitive_attr_destroy(attr);

    DNNL_CHECK(dnnl_primitive_create(&s->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    DNNL_CHECK(dnnl_memory_create(&s->mem_a, &a_md, mm_engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&s->mem_b, &b_md, mm_engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&s->mem_c, &c_md, mm_engine, DNNL_MEMORY_NONE));
    s->mem_bias = NULL;
    if (s->has_bias) DNNL_CHECK(dnnl_memory_create(&s->mem_bias, &bias_md, mm_engine, DNNL_MEMORY_NONE));
    mm_created++;
}

/* C (M,N) = alpha * op(A) op(B) + beta * C (+ bias broadcast over rows).
 * Caller holds mm_lock. */
static void mm_run_ld_locked(float *C, int64_t ldc, const void *A, dnnl_data_type_t a_type, int transA, int64_t lda,
                             const void *B, dnnl_data_type_t b_type, int transB, int64_t ldb,
                             const float *bias, int M, int N, int K, float alpha, float beta) {
    mm_init_locked();
    MatmulSlot *hit = NULL, *victim = &mm_cache[0];
    for (int i = 0; i < MM_CACHE_SLOTS; i++) {
        MatmulSlot *s = &mm_cache[i];
        if (!s->used) { if (victim->used) victim = s; continue; }
        if (s->M == M && s->N == N && s->K == K && s->transA == transA && s->transB == transB && s->lda == lda &&
            s->ldb == ldb && s->ldc == ldc &&
            s->a_type == a_type && s->b_type == b_type && s->alpha == alpha && s->beta == beta &&
            s->has_bias == (bias != NULL)) { hit = s; break; }
        if (victim->used && s->last_use < victim->last_use) victim = s;
    }
    if (!hit) {
        mm_slot_release(victim);
        hit = victim;
        hit->M = M; hit->N = N; hit->K = K;
        hit->transA = transA;
        hit->transB = transB;
        hit->lda = lda;
        hit->ldb = ldb;
        hit->ldc = ldc;
        hit->a_type = a_type; hit->b_type = b_type;
        hit->alpha = alpha; hit->beta = beta;
        hit->has_bias = bias != NULL;
        mm_slot_create(hit);
        hit->used = 1;
    }
    hit->last_use = ++mm_clock;

    DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_a, (void *)A));
    DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_b, (void *)B));
    DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_c, C));
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, hit->mem_a}, {DNNL_ARG_WEIGHTS, hit->mem_b}, {DNNL_ARG_DST, hit->mem_c},
        {DNNL_ARG_BIAS, hit->mem_bias},
    };
    if (bias) DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_bias, (void *)bias));
    double t0 = mm_profile ? mm_cpu_now() : 0.0;
    DNNL_CHECK(dnnl_primitive_execute(hit->prim, mm_stream, bias ? 4 : 3, args));
    DNNL_CHECK(dnnl_stream_wait(mm_stream));
    if (mm_profile) { hit->prof_calls++; hit->prof_cpu_s += mm_cpu_now() - t0; }
}

static void mm_run_locked(float *C, const void *A, dnnl_data_type_t a_type, int transA,
                          const void *B, dnnl_data_type_t b_type, int transB,
                          const float *bias, int M, int N, int K, float alpha, float beta) {
    mm_run_ld_locked(C, N, A, a_type, transA, transA ? M : K, B, b_type, transB, transB ? K : N,
                     bias, M, N, K, alpha, beta);
}

void matmul_strided(float *C, size_t ldc, const void *A, size_t lda, bool transA,
                    const void *B, size_t ldb, bool transB, DType ab, const float *bias,
                    int M, int N, int K, float alpha, float beta) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    if (ab != DTYPE_F32 && ab != DTYPE_BF16)
        die("matmul.c: matmul_strided: operand dtype %s (F32 or BF16)", dtype_name(ab));
    dnnl_data_type_t t = ab == DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    pthread_mutex_lock(&mm_lock);
    mm_run_ld_locked(C, (int64_t)ldc, A, t, transA, (int64_t)lda, B, t, transB, (int64_t)ldb, bias, M, N, K,
                     alpha, beta);
    pthread_mutex_unlock(&mm_lock);
}

void gemm_f32(float *C, const float *A, const float *B, int M, int N, int K,
              bool transA, bool transB, float alpha, float beta) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* empty product: only the beta term remains */
        for (size_t i = 0; i < (size_t)M * N; i++) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    pthread_mutex_lock(&mm_lock);
    mm_run_locked(C, A, dnnl_f32, transA, B, dnnl_f32, transB, NULL, M, N, K, alpha, beta);
    pthread_mutex_unlock(&mm_lock);
}

static uint16_t *mm_bf16_operand(const float *src, size_t rows, size_t cols, const char *who) {
    size_t need = matmul_scratch_bytes(rows, cols);
    if (!mm_bf16_scratch || mm_bf16_scratch_bytes < need)
        die("matmul.c: %s: bf16 scratch too small (%zu bytes set, %zu needed); call matmul_set_scratch first",
            who, mm_bf16_scratch_bytes, need);
    uint16_t *dst = mm_bf16_scratch;
    matmul_f32_to_bf16(dst, src, rows * cols);
    return dst;
}

const uint16_t *matmul_bf16_input(const float *src, size_t rows, size_t cols) {
    return mm_bf16_operand(src, rows, cols, "matmul_bf16_input");
}

static void require_weight_type(DType wtype, const char *who) {
    if (wtype != DTYPE_F32 && wtype != DTYPE_BF16)
        die("matmul.c: %s: weight dtype %s not supported (F32 or BF16)", who, dtype_name(wtype));
}

void linear_forward(float *out, const float *inp, const void *weight, DType wtype,
                    const float *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    require_weight_type(wtype, "linear_forward");
    if (C <= 0) { /* no inputs: out is the bias */
        for (int n = 0; n < N; n++) for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias ? bias[o] : 0.0f;
        return;
    }
    pthread_mutex_lock(&mm_lock);
    if (wtype == DTYPE_BF16) {
        const uint16_t *inp16 = mm_bf16_operand(inp, (size_t)N, (size_t)C, "linear_forward");
        mm_run_locked(out, inp16, dnnl_bf16, 0, weight, dnnl_bf16, 1, bias, N, OC, C, 1.0f, 0.0f);
    } else {
        mm_run_locked(out, inp, dnnl_f32, 0, weight, dnnl_f32, 1, bias, N, OC, C, 1.0f, 0.0f);
    }
    pthread_mutex_unlock(&mm_lock);
}

void linear_forward_bf16_input(float *out, const uint16_t *inp, const void *weight,
                               const float *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0 || C <= 0) return;
    pthread_mutex_lock(&mm_lock);
    mm_run_locked(out, inp, dnnl_bf16, 0, weight, dnnl_bf16, 1, bias, N, OC, C, 1.0f, 0.0f);
    pthread_mutex_unlock(&mm_lock);
}

void linear_backward_dinp_bf16_dout(float *dinp, const uint16_t *dout, size_t ld_dout, const void *weight,
                                    float beta, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return;
    pthread_mutex_lock(&mm_lock);
    mm_run_ld_locked(dinp, C, dout, dnnl_bf16, 0, (int64_t)ld_dout, weight, dnnl_bf16, 0, C, NULL, N, C, OC,
                     1.0f, beta);
    pthread_mutex_unlock(&mm_lock);
}

/* dinp = dout W + dinp_beta dinp (dinp_beta 0 or 1); dweight, dbias += */
static void linear_backward_beta(float *dinp, float dinp_beta, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const void *weight, DType wtype, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return;
    if (dinp) { /* (N, C) (+)= dout (N, OC) @ W (OC, C) */
        require_weight_type(wtype, "linear_backward");
        pthread_mutex_lock(&mm_lock);
        if (wtype == DTYPE_BF16) {
            const uint16_t *dout16 = mm_bf16_operand(dout, (size_t)N, (size_t)OC, "linear_backward");
            mm_run_locked(dinp, dout16, dnnl_bf16, 0, weight, dnnl_bf16, 0, NULL, N, C, OC, 1.0f, dinp_beta);
        } else {
            mm_run_locked(dinp, dout, dnnl_f32, 0, weight, dnnl_f32, 0, NULL, N, C, OC, 1.0f, dinp_beta);
        }
        pthread_mutex_unlock(&mm_lock);
    }
    if (dweight) { /* (OC, C) += dout^T (OC, N) @ inp (N, C) */
        pthread_mutex_lock(&mm_lock);
        mm_run_locked(dweight, dout, dnnl_f32, 1, inp, dnnl_f32, 0, NULL, OC, C, N, 1.0f, 1.0f);
        pthread_mutex_unlock(&mm_lock);
    }
    if (dbias) { /* column sums in blocks of columns; rows in a fixed order (deterministic) */
        enum { COLS = 64 };
        int blocks = (OC + COLS - 1) / COLS;
        #pragma omp parallel for schedule(static) if ((size_t)N * OC > 65536)
        for (int b = 0; b < blocks; b++) {
            int o0 = b * COLS, width = OC - o0 < COLS ? OC - o0 : COLS;
            float acc[COLS] = {0};
            for (int n = 0; n < N; n++) {
                const float *row = dout + (size_t)n * OC + o0;
                for (int j = 0; j < width; j++) acc[j] += row[j];
            }
            for (int j = 0; j < width; j++) dbias[o0 + j] += acc[j];
        }
    }
}

void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const void *weight, DType wtype, int N, int C, int OC) {
    linear_backward_beta(dinp, 1.0f, dweight, dbias, dout, inp, weight, wtype, N, C, OC);
}

void linear_backward_set_dinp(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const void *weight, DType wtype, int N, int C, int OC) {
    linear_backward_beta(dinp, 0.0f, dweight, dbias, dout, inp, weight, wtype, N, C, OC);
}

void matmul_release_all(void) {
    pthread_mutex_lock(&mm_lock);
    for (int i = 0; i < MM_CACHE_SLOTS; i++) mm_slot_release(&mm_cache[i]);
    if (mm_ready) {
        dnnl_stream_destroy(mm_stream);
        dnnl_engine_destroy(mm_engine);
        mm_ready = 0;
    }
    pthread_mutex_unlock(&mm_lock);
}

/* matmul.c: every matrix product of lmtune, through oneDNN's matmul
 * primitive (CPU engine, one in-order stream, OpenMP threading inside
 * oneDNN). Transposed operands are expressed with strides, never copied;
 * alpha is an output scale, beta a sum post-op, bias oneDNN's bias input.
 *
 * Primitives are created on first use of a shape (MatmulShape: sizes,
 * transposes, strides, dtypes, alpha, beta, bias) and kept in a fixed table
 * of MM_CACHE_SLOTS entries (least recently used is replaced), together with
 * their memory objects, whose data handles are swapped per call: once every
 * shape of a step has been seen, the step creates nothing. oneDNN's own
 * primitive cache is switched off (capacity 0), so a primitive lives exactly
 * as long as its slot: the memory planner counts the slots a run fills
 * (matmul_plan) and nothing of oneDNN's lives outside that count.
 *
 * bf16: frozen bf16 weights are multiplied as bf16 x bf16 -> f32; the fp32
 * activation operand is first rounded to bf16 into the scratch given by
 * matmul_set_scratch (AVX512-BF16 then runs about twice as fast as fp32).
 *
 * oneDNN's scratchpad is user-managed: one buffer, given by
 * matmul_set_scratchpad (a plan entry of the run's arena, sized by
 * matmul_plan as the largest need of the run's shapes), serves every
 * primitive, since products run one at a time under mm_lock. A product whose
 * need exceeds it (a caller without a plan: tests, fuse) uses a buffer of
 * this file's, grown to the largest need and counted
 * (matmul_unplanned_scratchpad_bytes). Failures of oneDNN here are
 * impossible states for a correct caller (shapes are positive and
 * consistent), so they die() with the oneDNN status rather than return an
 * error. */
#include "kernels/matmul.h"

#include <dnnl.h>
#include <malloc.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/sys.h"
#include "kernels/isa.h"

#define MM_CACHE_SLOTS 256

typedef struct {
    MatmulShape key;
    /* value */
    int used;
    uint64_t last_use;
    dnnl_primitive_t prim;
    dnnl_memory_t mem_a, mem_b, mem_c, mem_bias, mem_scratch;
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

/* oneDNN's scratchpad: the planned buffer, or this file's own (grown). */
static void *mm_pad;
static size_t mm_pad_bytes;
static void *mm_own_pad;
static size_t mm_own_pad_bytes;

#define DNNL_CHECK(call) do { dnnl_status_t s_ = (call); \
    if (s_ != dnnl_success) die("matmul.c: %s failed with oneDNN status %d", #call, (int)s_); } while (0)

void matmul_set_scratch(void *scratch, size_t bytes) {
    mm_bf16_scratch = scratch;
    mm_bf16_scratch_bytes = bytes;
}

void matmul_set_scratchpad(void *pad, size_t bytes) {
    pthread_mutex_lock(&mm_lock);
    mm_pad = pad;
    mm_pad_bytes = pad ? bytes : 0;
    pthread_mutex_unlock(&mm_lock);
}

void matmul_forget(const void *scratch, const void *pad) {
    pthread_mutex_lock(&mm_lock);
    if (scratch && mm_bf16_scratch == scratch) {
        mm_bf16_scratch = NULL;
        mm_bf16_scratch_bytes = 0;
    }
    if (pad && mm_pad == pad) {
        mm_pad = NULL;
        mm_pad_bytes = 0;
    }
    pthread_mutex_unlock(&mm_lock);
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

size_t matmul_unplanned_scratchpad_bytes(void) {
    pthread_mutex_lock(&mm_lock);
    size_t s = mm_own_pad_bytes;
    pthread_mutex_unlock(&mm_lock);
    return s;
}

long matmul_primitives_created(void) {
    pthread_mutex_lock(&mm_lock);
    long n = mm_created;
    pthread_mutex_unlock(&mm_lock);
    return n;
}

long matmul_primitives_alive(void) {
    pthread_mutex_lock(&mm_lock);
    long n = 0;
    for (int i = 0; i < MM_CACHE_SLOTS; i++) n += mm_cache[i].used;
    pthread_mutex_unlock(&mm_lock);
    return n;
}

size_t matmul_alive_shapes(MatmulShape *out, size_t cap) {
    pthread_mutex_lock(&mm_lock);
    size_t n = 0;
    for (int i = 0; i < MM_CACHE_SLOTS; i++) {
        if (!mm_cache[i].used) continue;
        if (n < cap) out[n] = mm_cache[i].key;
        n++;
    }
    pthread_mutex_unlock(&mm_lock);
    return n;
}

static void mm_init_locked(void) {
    if (mm_ready) return;
    isa_init(); /* LMTUNE_NO_AVX512 caps oneDNN's ISA before its first use */
    /* Nothing of oneDNN's outlives our slots (see the header comment). */
    DNNL_CHECK(dnnl_set_primitive_cache_capacity(0));
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
    const MatmulShape *k = &s->key;
    double gflop = 2.0 * k->M * k->N * k->K * s->prof_calls * 1e-9;
    fprintf(stderr, "matmul profile: %5ld x %-4s (%lld,%lld)x(%lld,%lld)%s%s%s %8.3f s CPU %7.1f GFLOP/s\n",
            s->prof_calls, k->b_type == DTYPE_BF16 ? "bf16" : "f32", (long long)k->M, (long long)k->K,
            (long long)k->K, (long long)k->N, k->transA ? " A^T" : "", k->transB ? " B^T" : "",
            k->beta != 0.0f ? " +=" : "", s->prof_cpu_s, gflop / (s->prof_cpu_s > 0 ? s->prof_cpu_s : 1e-30));
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
    if (s->mem_scratch) dnnl_memory_destroy(s->mem_scratch);
    memset(s, 0, sizeof *s);
}

/* Row-major (rows, cols) matrix with rows ld apart, or its transpose seen
 * through strides: logical (rows, cols) stored as (cols, rows), rows of the
 * stored matrix ld apart. */
static void mm_desc(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans, int64_t ld, dnnl_data_type_t t) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides;
    if (trans) {
        strides[0] = 1;
        strides[1] = ld;
    } else {
        strides[0] = ld;
        strides[1] = 1;
    }
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, t, strides));
}

static dnnl_data_type_t mm_type(DType t) { return t == DTYPE_BF16 ? dnnl_bf16 : dnnl_f32; }

typedef struct {
    dnnl_memory_desc_t a, b, c, bias;
} MatmulDescs;

/* The primitive descriptor of a shape, with a user-managed scratchpad. */
static dnnl_primitive_desc_t mm_pd_create(const MatmulShape *k, MatmulDescs *md) {
    mm_desc(&md->a, k->M, k->K, k->transA, k->lda, mm_type(k->a_type));
    mm_desc(&md->b, k->K, k->N, k->transB, k->ldb, mm_type(k->b_type));
    mm_desc(&md->c, k->M, k->N, 0, k->ldc, dnnl_f32);
    if (k->has_bias) mm_desc(&md->bias, 1, k->N, 0, k->N, dnnl_f32);
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &md->a, &md->b, k->has_bias ? &md->bias : NULL, &md->c));
    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    if (k->alpha != 1.0f) DNNL_CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha));
    if (k->beta != 0.0f) {
        dnnl_post_ops_t ops;
        DNNL_CHECK(dnnl_post_ops_create(&ops));
        DNNL_CHECK(dnnl_post_ops_append_sum(ops, k->beta));
        DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, ops));
        dnnl_post_ops_destroy(ops);
    }
    DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, mm_engine, NULL));
    dnnl_primitive_attr_destroy(attr);
    return pd;
}

static size_t mm_pd_scratchpad(dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

static void mm_slot_create(MatmulSlot *s) {
    MatmulDescs md;
    dnnl_primitive_desc_t pd = mm_pd_create(&s->key, &md);
    s->scratchpad_bytes = mm_pd_scratchpad(pd);
    if (s->scratchpad_bytes > mm_max_scratchpad) mm_max_scratchpad = s->scratchpad_bytes;
    s->mem_scratch = NULL;
    if (s->scratchpad_bytes) {
        const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        DNNL_CHECK(dnnl_memory_create(&s->mem_scratch, smd, mm_engine, DNNL_MEMORY_NONE));
    }
    DNNL_CHECK(dnnl_primitive_create(&s->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    DNNL_CHECK(dnnl_memory_create(&s->mem_a, &md.a, mm_engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&s->mem_b, &md.b, mm_engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&s->mem_c, &md.c, mm_engine, DNNL_MEMORY_NONE));
    s->mem_bias = NULL;
    if (s->key.has_bias) DNNL_CHECK(dnnl_memory_create(&s->mem_bias, &md.bias, mm_engine, DNNL_MEMORY_NONE));
    mm_created++;
}

static bool mm_shape_eq(const MatmulShape *a, const MatmulShape *b) {
    return a->M == b->M && a->N == b->N && a->K == b->K && a->transA == b->transA && a->transB == b->transB &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->a_type == b->a_type &&
           a->b_type == b->b_type && a->alpha == b->alpha && a->beta == b->beta && a->has_bias == b->has_bias;
}

/* The scratchpad a product runs with: the planned one when it is large
 * enough, else this file's own, grown (and counted as unplanned). */
static void *mm_scratchpad_for(size_t need) {
    if (need <= mm_pad_bytes) return mm_pad;
    if (need > mm_own_pad_bytes) {
        free(mm_own_pad);
        mm_own_pad = aligned_alloc(64, (need + 63) / 64 * 64);
        if (!mm_own_pad) die("matmul.c: out of memory for a %zu-byte oneDNN scratchpad", need);
        mm_own_pad_bytes = need;
    }
    return mm_own_pad;
}

/* C (M,N) = alpha * op(A) op(B) + beta * C (+ bias broadcast over rows).
 * Caller holds mm_lock. */
static void mm_run_locked(const MatmulShape *k, float *C, const void *A, const void *B, const float *bias) {
    mm_init_locked();
    MatmulSlot *hit = NULL, *victim = &mm_cache[0];
    for (int i = 0; i < MM_CACHE_SLOTS; i++) {
        MatmulSlot *s = &mm_cache[i];
        if (!s->used) {
            if (victim->used) victim = s;
            continue;
        }
        if (mm_shape_eq(&s->key, k)) {
            hit = s;
            break;
        }
        if (victim->used && s->last_use < victim->last_use) victim = s;
    }
    if (!hit) {
        mm_slot_release(victim);
        hit = victim;
        hit->key = *k;
        mm_slot_create(hit);
        hit->used = 1;
    }
    hit->last_use = ++mm_clock;

    DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_a, (void *)A));
    DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_b, (void *)B));
    DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_c, C));
    dnnl_exec_arg_t args[5];
    int nargs = 0;
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, hit->mem_a};
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, hit->mem_b};
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_DST, hit->mem_c};
    if (bias) {
        DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_bias, (void *)bias));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, hit->mem_bias};
    }
    if (hit->mem_scratch) {
        DNNL_CHECK(dnnl_memory_set_data_handle(hit->mem_scratch, mm_scratchpad_for(hit->scratchpad_bytes)));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, hit->mem_scratch};
    }
    double t0 = mm_profile ? mm_cpu_now() : 0.0;
    DNNL_CHECK(dnnl_primitive_execute(hit->prim, mm_stream, nargs, args));
    DNNL_CHECK(dnnl_stream_wait(mm_stream));
    if (mm_profile) {
        hit->prof_calls++;
        hit->prof_cpu_s += mm_cpu_now() - t0;
    }
}

/* --- shapes: what each product of the API creates (shared with the planner) --- */

static MatmulShape mm_shape(int M, int N, int K, bool transA, bool transB, DType ab, float alpha, float beta,
                            bool bias) {
    MatmulShape k;
    memset(&k, 0, sizeof k);
    k.M = M;
    k.N = N;
    k.K = K;
    k.transA = transA;
    k.transB = transB;
    k.lda = transA ? M : K;
    k.ldb = transB ? K : N;
    k.ldc = N;
    k.a_type = ab;
    k.b_type = ab;
    k.alpha = alpha;
    k.beta = beta;
    k.has_bias = bias;
    return k;
}

MatmulShape matmul_shape_gemm(int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
    return mm_shape(M, N, K, transA, transB, DTYPE_F32, alpha, beta, false);
}

MatmulShape matmul_shape_linear_forward(int N, int C, int OC, DType wtype, bool bias) {
    return mm_shape(N, OC, C, false, true, wtype == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32, 1.0f, 0.0f, bias);
}

MatmulShape matmul_shape_linear_dinp(int N, int C, int OC, DType wtype, float beta) {
    return mm_shape(N, C, OC, false, false, wtype == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32, 1.0f, beta, false);
}

MatmulShape matmul_shape_linear_dweight(int N, int C, int OC) {
    return mm_shape(OC, C, N, true, false, DTYPE_F32, 1.0f, 1.0f, false);
}

MatmulShape matmul_shape_dinp_bf16_dout(size_t ld_dout, int N, int C, int OC, float beta) {
    MatmulShape k = mm_shape(N, C, OC, false, false, DTYPE_BF16, 1.0f, beta, false);
    k.lda = (int64_t)ld_dout;
    return k;
}

MatmulShape matmul_shape_strided(size_t ldc, size_t lda, bool transA, size_t ldb, bool transB, DType ab, bool bias,
                                 int M, int N, int K, float alpha, float beta) {
    MatmulShape k = mm_shape(M, N, K, transA, transB, ab, alpha, beta, bias);
    k.lda = (int64_t)lda;
    k.ldb = (int64_t)ldb;
    k.ldc = (int64_t)ldc;
    return k;
}

void matmul_strided(float *C, size_t ldc, const void *A, size_t lda, bool transA,
                    const void *B, size_t ldb, bool transB, DType ab, const float *bias,
                    int M, int N, int K, float alpha, float beta) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    if (ab != DTYPE_F32 && ab != DTYPE_BF16)
        die("matmul.c: matmul_strided: operand dtype %s (F32 or BF16)", dtype_name(ab));
    MatmulShape k = matmul_shape_strided(ldc, lda, transA, ldb, transB, ab, bias != NULL, M, N, K, alpha, beta);
    pthread_mutex_lock(&mm_lock);
    mm_run_locked(&k, C, A, B, bias);
    pthread_mutex_unlock(&mm_lock);
}

void gemm_f32(float *C, const float *A, const float *B, int M, int N, int K,
              bool transA, bool transB, float alpha, float beta) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* empty product: only the beta term remains */
        for (size_t i = 0; i < (size_t)M * N; i++) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
        return;
    }
    MatmulShape k = matmul_shape_gemm(M, N, K, transA, transB, alpha, beta);
    pthread_mutex_lock(&mm_lock);
    mm_run_locked(&k, C, A, B, NULL);
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
    MatmulShape k = matmul_shape_linear_forward(N, C, OC, wtype, bias != NULL);
    pthread_mutex_lock(&mm_lock);
    const void *a = wtype == DTYPE_BF16 ? (const void *)mm_bf16_operand(inp, (size_t)N, (size_t)C, "linear_forward")
                                        : (const void *)inp;
    mm_run_locked(&k, out, a, weight, bias);
    pthread_mutex_unlock(&mm_lock);
}

void linear_forward_bf16_input(float *out, const uint16_t *inp, const void *weight,
                               const float *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0 || C <= 0) return;
    MatmulShape k = matmul_shape_linear_forward(N, C, OC, DTYPE_BF16, bias != NULL);
    pthread_mutex_lock(&mm_lock);
    mm_run_locked(&k, out, inp, weight, bias);
    pthread_mutex_unlock(&mm_lock);
}

void linear_backward_dinp_bf16_dout(float *dinp, const uint16_t *dout, size_t ld_dout, const void *weight,
                                    float beta, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return;
    MatmulShape k = matmul_shape_dinp_bf16_dout(ld_dout, N, C, OC, beta);
    pthread_mutex_lock(&mm_lock);
    mm_run_locked(&k, dinp, dout, weight, NULL);
    pthread_mutex_unlock(&mm_lock);
}

/* dinp = dout W + dinp_beta dinp (dinp_beta 0 or 1); dweight, dbias += */
static void linear_backward_beta(float *dinp, float dinp_beta, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const void *weight, DType wtype, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return;
    if (dinp) { /* (N, C) (+)= dout (N, OC) @ W (OC, C) */
        require_weight_type(wtype, "linear_backward");
        MatmulShape k = matmul_shape_linear_dinp(N, C, OC, wtype, dinp_beta);
        pthread_mutex_lock(&mm_lock);
        const void *a = wtype == DTYPE_BF16
                            ? (const void *)mm_bf16_operand(dout, (size_t)N, (size_t)OC, "linear_backward")
                            : (const void *)dout;
        mm_run_locked(&k, dinp, a, weight, NULL);
        pthread_mutex_unlock(&mm_lock);
    }
    if (dweight) { /* (OC, C) += dout^T (OC, N) @ inp (N, C) */
        MatmulShape k = matmul_shape_linear_dweight(N, C, OC);
        pthread_mutex_lock(&mm_lock);
        mm_run_locked(&k, dweight, dout, inp, NULL);
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
    free(mm_own_pad);
    mm_own_pad = NULL;
    mm_own_pad_bytes = 0;
    if (mm_ready) {
        dnnl_stream_destroy(mm_stream);
        dnnl_engine_destroy(mm_engine);
        mm_ready = 0;
    }
    pthread_mutex_unlock(&mm_lock);
}

/* --- planning: what the run's primitives hold --- */

/* The scratchpad need of a shape, memoized: oneDNN answers it from a
 * primitive descriptor (no kernel is generated). */
typedef struct {
    MatmulShape key;
    size_t bytes;
} PadMemo;
static PadMemo *mm_memo;
static size_t mm_memo_n, mm_memo_cap;

static size_t mm_shape_scratchpad_locked(const MatmulShape *k) {
    for (size_t i = 0; i < mm_memo_n; i++)
        if (mm_shape_eq(&mm_memo[i].key, k)) return mm_memo[i].bytes;
    mm_init_locked();
    MatmulDescs md;
    dnnl_primitive_desc_t pd = mm_pd_create(k, &md);
    size_t bytes = mm_pd_scratchpad(pd);
    dnnl_primitive_desc_destroy(pd);
    if (mm_memo_n == mm_memo_cap) {
        size_t cap = mm_memo_cap ? 2 * mm_memo_cap : 256;
        PadMemo *p = realloc(mm_memo, cap * sizeof *p);
        if (!p) return bytes;
        mm_memo = p;
        mm_memo_cap = cap;
    }
    mm_memo[mm_memo_n].key = *k;
    mm_memo[mm_memo_n].bytes = bytes;
    mm_memo_n++;
    return bytes;
}

const char *matmul_shape_impl(const MatmulShape *k, char *buf, size_t n) {
    pthread_mutex_lock(&mm_lock);
    mm_init_locked();
    MatmulDescs md;
    dnnl_primitive_desc_t pd = mm_pd_create(k, &md);
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl) impl = "?";
    snprintf(buf, n, "%s", impl);
    dnnl_primitive_desc_destroy(pd);
    pthread_mutex_unlock(&mm_lock);
    return buf;
}

static MatmulProbe mm_probe_result;
static int mm_probe_done;

int matmul_plan(const MatmulShape *shapes, size_t n, MatmulPlan *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&mm_lock);
    size_t distinct = 0, bf16 = 0;
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) seen = mm_shape_eq(&shapes[i], &shapes[j]);
        if (seen) continue;
        distinct++;
        bf16 += shapes[i].b_type == DTYPE_BF16;
        size_t pad = mm_shape_scratchpad_locked(&shapes[i]);
        if (pad > out->scratchpad_bytes) out->scratchpad_bytes = pad;
    }
    pthread_mutex_unlock(&mm_lock);
    out->shapes = distinct;
    out->primitives = distinct < MM_CACHE_SLOTS ? distinct : MM_CACHE_SLOTS;
    out->primitive_bytes = mm_probe_done ? mm_probe_result.primitive_bytes : MATMUL_PRIMITIVE_BYTES_DEFAULT;
    out->primitive_bytes_bf16 = mm_probe_done ? mm_probe_result.primitive_bytes_bf16 : MATMUL_PRIMITIVE_BYTES_DEFAULT;
    /* beyond the cache's slots, the alive ones keep the shapes' dtype mix */
    double keep = distinct ? (double)out->primitives / (double)distinct : 0;
    out->primitives_bf16 = (size_t)(bf16 * keep + 0.5);
    out->held_bytes = (out->primitives - out->primitives_bf16) * out->primitive_bytes +
                      out->primitives_bf16 * out->primitive_bytes_bf16;
    return 0;
}

size_t matmul_prepare(const MatmulShape *shapes, size_t n) {
    size_t r0 = rss_current_bytes();
    pthread_mutex_lock(&mm_lock);
    mm_init_locked();
    size_t made = 0;
    for (size_t i = 0; i < n && made < MM_CACHE_SLOTS; i++) {
        MatmulSlot *hit = NULL, *victim = &mm_cache[0];
        for (int j = 0; j < MM_CACHE_SLOTS && !hit; j++) {
            MatmulSlot *s = &mm_cache[j];
            if (!s->used) {
                if (victim->used) victim = s;
                continue;
            }
            if (mm_shape_eq(&s->key, &shapes[i])) hit = s;
            else if (victim->used && s->last_use < victim->last_use) victim = s;
        }
        if (hit) continue;
        mm_slot_release(victim);
        victim->key = shapes[i];
        mm_slot_create(victim);
        victim->used = 1;
        victim->last_use = ++mm_clock;
        made++;
    }
    pthread_mutex_unlock(&mm_lock);
    size_t r1 = rss_current_bytes();
    return r1 > r0 ? r1 - r0 : 0;
}

/* Best of `reps` timed runs of one product, in GFLOP/s (wall time). */
static double mm_rate(const MatmulShape *k, float *C, const void *A, const void *B, int reps) {
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = time_now();
        pthread_mutex_lock(&mm_lock);
        mm_run_locked(k, C, A, B, NULL);
        pthread_mutex_unlock(&mm_lock);
        double dt = time_now() - t0;
        double rate = dt > 0 ? 2.0 * k->M * k->N * k->K / dt * 1e-9 : 0;
        if (rate > best) best = rate;
    }
    return best;
}

/* The probe, in the order that makes its measurements clean: (1) one
 * product of every kind the model uses (f32 with and without transposes,
 * alpha and the sum post-op, bias; bf16 with both weight layouts), which
 * loads the code of oneDNN's generators and of its kernels, starts the
 * OpenMP threads and sizes the scratchpad; (2) fresh primitives created
 * and kept, whose resident growth per primitive is what a primitive holds
 * (its generated code and descriptors: the scratchpad is the planned
 * buffer's); (3) the GEMM rates on a product of training size; then every
 * probe primitive and buffer is released and the heap trimmed, so the
 * process baseline measured after it holds none of them. */
const MatmulProbe *matmul_probe(void) {
    if (mm_probe_done) return &mm_probe_result;
    enum { WARM = 64, RM = 256, RN = 512, RK = 512, FRESH = 4 };
    size_t floats = (size_t)RM * RK + (size_t)RK * RN + (size_t)RM * RN;
    float *buf = calloc(floats, sizeof(float));
    uint16_t *buf16 = calloc((size_t)RM * RK + (size_t)RK * RN, sizeof(uint16_t));
    if (!buf || !buf16) die("matmul.c: out of memory for the start-up probe");
    float *A = buf, *B = A + (size_t)RM * RK, *C = B + (size_t)RK * RN;
    const uint16_t *A16 = buf16, *B16 = buf16 + (size_t)RM * RK;
    MatmulShape warm[] = {
        matmul_shape_gemm(WARM, WARM, WARM, false, false, 1.0f, 0.0f),
        matmul_shape_gemm(WARM, WARM, WARM, false, true, 2.0f, 0.0f),
        matmul_shape_gemm(WARM, WARM, WARM, true, false, 2.0f, 1.0f),
        matmul_shape_linear_forward(WARM, WARM, WARM, DTYPE_F32, true),
        matmul_shape_linear_dinp(WARM, WARM, WARM, DTYPE_F32, 1.0f),
        matmul_shape_linear_forward(WARM, WARM, WARM, DTYPE_BF16, false),
        matmul_shape_dinp_bf16_dout(2 * WARM, WARM, WARM, WARM, 0.0f),
    };
    float bias[WARM] = {0};
    long created0 = matmul_primitives_created();
    size_t rss_held = 0;
    /* without bf16 products (no AVX-512) bf16 weights compute in fp32
     * (matmul_weight_dtype): no bf16 primitive exists to probe */
    bool bf16 = matmul_bf16_supported();
    for (size_t i = 0; i < sizeof warm / sizeof *warm; i++) {
        bool b16 = warm[i].a_type == DTYPE_BF16;
        if (b16 && !bf16) continue;
        pthread_mutex_lock(&mm_lock);
        mm_run_locked(&warm[i], C, b16 ? (const void *)A16 : A, b16 ? (const void *)B16 : B,
                      warm[i].has_bias ? bias : NULL);
        pthread_mutex_unlock(&mm_lock);
    }
    /* fresh primitives of each dtype, of the kinds the model creates (the
     * weight transposed, as in forward products, and not, as in input
     * gradients); what they add to the resident set, per primitive */
    for (int dt = 0; dt < (bf16 ? 2 : 1); dt++) {
        size_t r0 = rss_current_bytes();
        pthread_mutex_lock(&mm_lock);
        mm_init_locked();
        for (int i = 0; i < FRESH; i++) {
            MatmulShape k = mm_shape(RM / 2 + 24 * i, RN / 2 + 16 * i, RK / 2 + 32 * (i / 2), false, i % 2,
                                     dt ? DTYPE_BF16 : DTYPE_F32, 1.0f, 0.0f, false);
            MatmulSlot *s = NULL;
            for (int j = 0; j < MM_CACHE_SLOTS && !s; j++)
                if (!mm_cache[j].used) s = &mm_cache[j];
            if (!s) break;
            s->key = k;
            mm_slot_create(s);
            s->used = 1;
            s->last_use = ++mm_clock;
        }
        pthread_mutex_unlock(&mm_lock);
        size_t r1 = rss_current_bytes();
        if (r1 > rss_held) rss_held = r1;
        size_t per = r1 > r0 ? (r1 - r0) / FRESH : 0;
        if (dt) mm_probe_result.primitive_bytes_bf16 = per;
        else mm_probe_result.primitive_bytes = per;
    }
    /* One thread: on a shared machine a product timed across all threads
     * measures the other processes (one descheduled thread stalls the
     * rest); one core's rate, times the threads, is the steadier estimate. */
    MatmulShape f32 = matmul_shape_linear_forward(RM, RK, RN, DTYPE_F32, false);
    MatmulShape b16 = matmul_shape_linear_forward(RM, RK, RN, DTYPE_BF16, false);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    mm_probe_result.gflops_f32 = mm_rate(&f32, C, A, B, 5);
    mm_probe_result.gflops_bf16 = bf16 ? mm_rate(&b16, C, A16, B16, 5) : mm_probe_result.gflops_f32;
    if (!bf16) mm_probe_result.primitive_bytes_bf16 = mm_probe_result.primitive_bytes;
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    mm_probe_result.threads = threads;
    mm_probe_result.probe_primitives = matmul_primitives_created() - created0;
    size_t held = rss_current_bytes();
    if (held > rss_held) rss_held = held;
    pthread_mutex_lock(&mm_lock);
    for (int i = 0; i < MM_CACHE_SLOTS; i++) mm_slot_release(&mm_cache[i]);
    free(mm_own_pad);
    mm_own_pad = NULL;
    mm_own_pad_bytes = 0;
    mm_max_scratchpad = 0;
    pthread_mutex_unlock(&mm_lock);
    free(buf);
    free(buf16);
    malloc_trim(0);
    size_t left = rss_current_bytes();
    mm_probe_result.rss_above_end = rss_held > left ? rss_held - left : 0;
    mm_probe_done = 1;
    return &mm_probe_result;
}

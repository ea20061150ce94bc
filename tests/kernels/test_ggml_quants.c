/* test_ggml_quants.c: lmtune's ggml block conversions against an
 * independent reference (tests/kernels/ggml_ref.py, plain Python written
 * from ggml-quants.c), bit for bit:
 *   - dequantization of every supported type (F32, F16, BF16, Q4_0, Q4_1,
 *     Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) on random blocks and
 *     on the special cases: scales and mins of 0, -0, +-inf, NaN, the
 *     largest finite fp16, the smallest subnormals, and quant bytes all
 *     0x00 or all 0xFF (every NaN counts as equal to any NaN);
 *   - Q8_0 quantization (quantize_row_q8_0_ref) of random rows at many
 *     scales and of the special rows: zeros, halves that round away from
 *     zero, a huge value, +-inf, NaN, subnormals, scales whose fp16
 *     overflows or underflows.
 * Also the type table (block sizes, bytes, row sizes) against ggml-common.h,
 * and ggml_expand (the tiles of the frozen-weight products) against whole
 * rows, as F32 and as BF16. */
#include "check.h"
#include "base/alloc.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "kernels/ggml_quants.h"
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

enum { NB = 64 };   /* blocks per type */

static const int TYPES[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                            GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                            GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
enum { NT = sizeof TYPES / sizeof TYPES[0] };

/* Byte offsets of the fp16 scale fields of one block (ggml-common.h). */
static int half_fields(int type, int off[2]) {
    switch (type) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: off[0] = 0; return 1;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
        off[0] = 0;
        off[1] = 2;
        return 2;
    case GGML_TYPE_Q2_K: off[0] = 80; off[1] = 82; return 2;
    case GGML_TYPE_Q3_K: off[0] = 108; return 1;
    case GGML_TYPE_Q6_K: off[0] = 208; return 1;
    default: return 0;
    }
}

static const uint16_t SPECIAL_HALVES[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7bff, 0xfbff,
                                          0x0001, 0x03ff, 0x8001, 0x3c00, 0x0400};
enum { NSPECIAL = sizeof SPECIAL_HALVES / sizeof SPECIAL_HALVES[0] };

/* NB blocks: random bytes; the scale fields random moderate halves, or a
 * special value; some blocks with all quant bytes 0x00 or 0xFF. */
static void make_blocks(int type, Rng *r, uint8_t *b) {
    int bb = ggml_block_bytes(type);
    for (int k = 0; k < NB * bb; k++) b[k] = (uint8_t)rng_next(r);
    if (type == GGML_TYPE_F16) {
        for (int i = 0; i < NSPECIAL; i++) memcpy(b + 2 * i, &SPECIAL_HALVES[i], 2);
        return;
    }
    int off[2];
    int nf = half_fields(type, off);
    for (int blk = 0; blk < NB && nf > 0; blk++) {
        uint8_t *p = b + (size_t)blk * bb;
        if (blk % 8 == 6) memset(p, 0x00, (size_t)bb);
        if (blk % 8 == 7) memset(p, 0xff, (size_t)bb);
        for (int f = 0; f < nf; f++) {
            uint16_t h;
            if (blk < NSPECIAL * 2 && (blk + f) % 2 == 0) h = SPECIAL_HALVES[(blk / 2 + f) % NSPECIAL];
            else h = (uint16_t)((rng_next(r) & 0x83ff) | (0x2400 + (rng_below(r, 16) << 10)));  /* 2^-6 .. 2^9 */
            memcpy(p + off[f], &h, 2);
        }
    }
}

static bool same_bits(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    uint32_t x;
    uint32_t y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

static char dir[128];

static char *file(const char *fmt, const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    char base[64];
    snprintf(base, sizeof base, fmt, name);
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, base);
    return buf[k];
}

/* Q8_0 inputs: rows of 32 floats, random at many scales, then special rows. */
static size_t make_q8_input(Rng *r, float *x) {
    size_t n = 0;
    for (int row = 0; row < 40; row++) {
        float scale = ldexpf(1.0f, (int)rng_below(r, 60) - 30);
        for (int j = 0; j < 32; j++) x[n++] = scale * rng_normal(r);
    }
    for (int j = 0; j < 32; j++) x[n++] = 0.0f;                       /* d = 0: id = 0 */
    for (int j = 0; j < 32; j++) x[n++] = j == 0 ? 127.0f : (float)(j - 16) + 0.5f;   /* d = 1, ties */
    for (int j = 0; j < 32; j++) x[n++] = j == 5 ? 3e38f : 1.0f;       /* fp16(d) overflows */
    for (int j = 0; j < 32; j++) x[n++] = j == 9 ? INFINITY : (float)j;
    for (int j = 0; j < 32; j++) x[n++] = j == 3 ? -INFINITY : (float)-j;
    for (int j = 0; j < 32; j++) x[n++] = j == 7 ? NAN : (float)j;
    for (int j = 0; j < 32; j++) x[n++] = j == 0 ? NAN : (float)j;     /* NaN first: MAX's order */
    for (int j = 0; j < 32; j++) x[n++] = ldexpf((float)(j + 1), -140);  /* subnormal inputs */
    for (int j = 0; j < 32; j++) x[n++] = ldexpf((float)(j - 16), -20);  /* fp16(d) subnormal */
    for (int j = 0; j < 32; j++) x[n++] = ldexpf((float)(j - 16), -40);  /* fp16(d) underflows to 0 */
    for (int j = 0; j < 32; j++) x[n++] = 65504.0f * 127 * (j % 2 ? 1 : -1);  /* d at the fp16 maximum */
    return n;
}

int main(void) {
    /* the table against ggml-common.h's static_asserts */
    CHECK(ggml_block_size(GGML_TYPE_Q4_0) == 32 && ggml_block_bytes(GGML_TYPE_Q4_0) == 18);
    CHECK(ggml_block_bytes(GGML_TYPE_Q4_1) == 20 && ggml_block_bytes(GGML_TYPE_Q5_0) == 22);
    CHECK(ggml_block_bytes(GGML_TYPE_Q5_1) == 24 && ggml_block_bytes(GGML_TYPE_Q8_0) == 34);
    CHECK(ggml_block_size(GGML_TYPE_Q2_K) == 256 && ggml_block_bytes(GGML_TYPE_Q2_K) == 84);
    CHECK(ggml_block_bytes(GGML_TYPE_Q3_K) == 110 && ggml_block_bytes(GGML_TYPE_Q4_K) == 144);
    CHECK(ggml_block_bytes(GGML_TYPE_Q5_K) == 176 && ggml_block_bytes(GGML_TYPE_Q6_K) == 210);
    CHECK(ggml_row_bytes(GGML_TYPE_Q4_K, 4096) == 16 * 144 && ggml_row_bytes(GGML_TYPE_Q4_K, 100) == 0);
    CHECK(ggml_row_bytes(GGML_TYPE_BF16, 3) == 6 && !ggml_type_supported(4) && !ggml_type_supported(-1));
    CHECK(!ggml_type_supported(GGML_TYPE_LIMIT) && !strcmp(ggml_type_name(GGML_TYPE_Q6_K), "Q6_K"));

    if (system("[ -x /usr/bin/python3 ]") != 0) {
        printf("SKIP: /usr/bin/python3 is not installed (scripts/install-deps.sh installs it)\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "build/test_ggml_quants.%d", (int)getpid());
    CHECK(dir_ensure(dir) == 0);
    Rng r;
    rng_seed(&r, 20240601);
    static uint8_t blocks[NT][NB * 256 * 4];
    for (int t = 0; t < NT; t++) {
        make_blocks(TYPES[t], &r, blocks[t]);
        CHECK(atomic_write_file(file("blocks_%s.bin", ggml_type_name(TYPES[t])), blocks[t],
                                (size_t)NB * ggml_block_bytes(TYPES[t])) == 0);
    }
    static float q8_in[64 * 32];
    size_t nq = make_q8_input(&r, q8_in);
    CHECK(atomic_write_file(file("%s", "q8_in.bin"), q8_in, nq * sizeof(float)) == 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/kernels/ggml_ref.py %s", dir);
    CHECK(system(cmd) == 0);

    for (int t = 0; t < NT; t++) {
        int type = TYPES[t];
        int64_t n = (int64_t)NB * ggml_block_size(type);
        char *ref;
        size_t ref_bytes;
        if (file_read_all(file("deq_%s.bin", ggml_type_name(type)), 0, &ref, &ref_bytes) < 0) {
            CHECK_MSG(false, "no reference for %s", ggml_type_name(type));
            continue;
        }
        CHECK(ref_bytes == (size_t)n * 4);
        float *got = mem_alloc((size_t)n * sizeof(float));
        ggml_dequantize_row(type, blocks[t], got, n);
        size_t bad = 0;
        size_t nan = 0;
        size_t inf = 0;
        for (int64_t i = 0; i < n && (size_t)i * 4 < ref_bytes; i++) {
            float want;
            memcpy(&want, ref + i * 4, 4);
            if (!same_bits(got[i], want) && bad++ < 3)
                fprintf(stderr, "%s element %lld: %a, reference %a\n", ggml_type_name(type), (long long)i,
                        (double)got[i], (double)want);
            nan += isnan(want) != 0;
            inf += isinf(want) != 0;
        }
        printf("%-5s %6lld values bit-identical to the reference: %s (%zu NaN, %zu inf among them)\n",
               ggml_type_name(type), (long long)n, bad ? "NO" : "yes", nan, inf);
        CHECK_MSG(bad == 0, "%s: %zu values differ", ggml_type_name(type), bad);
        mem_free(got);
        mem_free(ref);
    }

    /* tiles of a (5, 2 blocks) matrix equal the rows' dequantized values */
    for (int t = 0; t < NT; t++) {
        int type = TYPES[t];
        int bs = ggml_block_size(type);
        int cols = bs == 1 ? 64 : 2 * bs;
        size_t rb = ggml_row_bytes(type, cols);
        int bad_tiles = 0;
        float row[512];
        float tile[5 * 512];
        uint16_t tile16[5 * 512];
        for (int r0 = 0; r0 < 5; r0 += 2) {
            for (int c0 = 0; c0 < cols; c0 += (bs == 1 ? 16 : bs)) {
                int nr = 5 - r0 < 2 ? 5 - r0 : 2;
                int nc = cols - c0;
                ggml_expand(type, blocks[t], rb, r0, nr, c0, nc, DTYPE_F32, tile, 512);
                ggml_expand(type, blocks[t], rb, r0, nr, c0, nc, DTYPE_BF16, tile16, 512);
                for (int r = 0; r < nr; r++) {
                    ggml_dequantize_row(type, blocks[t] + (size_t)(r0 + r) * rb, row, cols);
                    for (int c = 0; c < nc; c++) {
                        bad_tiles += !same_bits(tile[r * 512 + c], row[c0 + c]);
                        bad_tiles += tile16[r * 512 + c] != f32_to_bf16(row[c0 + c]);
                    }
                }
            }
        }
        CHECK_MSG(bad_tiles == 0, "%s: %d tile values differ from the rows", ggml_type_name(type), bad_tiles);
    }

    char *ref;
    size_t ref_bytes;
    CHECK(file_read_all(file("%s", "q8_out.bin"), 0, &ref, &ref_bytes) == 0);
    uint8_t *q = mem_alloc(nq / 32 * 34);
    ggml_quantize_row_q8_0(q8_in, q, (int64_t)nq);
    CHECK(ref_bytes == nq / 32 * 34);
    size_t bad = 0;
    for (size_t i = 0; i < ref_bytes && i < nq / 32 * 34; i++) bad += q[i] != (uint8_t)ref[i];
    printf("Q8_0 quantization of %zu values (%zu special rows): %zu bytes differ from quantize_row_q8_0_ref\n", nq,
           (size_t)12, bad);
    CHECK(bad == 0);
    mem_free(q);
    mem_free(ref);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failed == 0 && system(cmd) != 0) return 1;
    return check_finish("kernels/ggml_quants");
}

/* test_dtype.c: the bf16 rounding rule (base/dtype.h, LT_BF16_ROUND), bit
 * for bit on all 2^32 float bit patterns against an independent reference
 * that rounds by comparing distances in double: the two bf16 neighbours of
 * x (the truncation and the next one away from zero, 2^128 standing in for
 * infinity past the largest finite value), the nearer one, a tie to the
 * even one. NaNs: the result is a quiet NaN with the same sign and top
 * payload bits. Under the sanitizers (slow) every 7th block of 2^16
 * patterns. The vector forms of the rule are checked against this scalar
 * in tests/kernels/test_isa.c. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"
#include "check.h"

#if defined(__SANITIZE_ADDRESS__)
enum { BLOCK_STRIDE = 7 };
#else
enum { BLOCK_STRIDE = 1 };
#endif

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double bits_to_double(uint32_t u) {
    return (double)bits_to_float(u);
}

/* The reference: nearest by distance, ties to even, no bit tricks. */
static uint16_t reference_bf16(uint32_t u) {
    uint32_t sign = u & 0x80000000u;
    uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x40u);
    }
    if (mag == 0x7f800000u) {
        return (uint16_t)(u >> 16);
    }
    uint32_t lo = mag & 0xffff0000u;
    uint32_t hi = lo + 0x10000u;
    double x = fabs(bits_to_double(u));
    double a = bits_to_double(lo);
    double b = hi == 0x7f800000u ? ldexp(1.0, 128) : bits_to_double(hi);
    double da = x - a;
    double db = b - x;
    uint32_t pick;
    if (da < db) {
        pick = lo;
    } else if (db < da) {
        pick = hi;
    } else {
        pick = (lo & 0x10000u) ? hi : lo;
    }
    return (uint16_t)((sign | pick) >> 16);
}

static void test_exhaustive(void) {
    long bad = 0;
    long first_bad = -1;
    long checked = 0;
    #pragma omp parallel for schedule(dynamic, 64) reduction(+ : bad, checked)
    for (long block = 0; block < 65536; block += BLOCK_STRIDE) {
        for (uint32_t low = 0; low < 65536; low++) {
            uint32_t u = (uint32_t)block << 16 | low;
            float f;
            memcpy(&f, &u, 4);
            checked++;
            if (f32_to_bf16(f) != reference_bf16(u)) {
                bad++;
                #pragma omp critical
                if (first_bad < 0) {
                    first_bad = (long)u;
                }
            }
        }
    }
    printf("bf16 rounding: %ld bit patterns checked, %ld differ from the reference\n", checked, bad);
    CHECK_MSG(bad == 0, "first difference at 0x%08lx: f32_to_bf16 0x%04x, reference 0x%04x", first_bad,
              f32_to_bf16(bits_to_float((uint32_t)first_bad)), reference_bf16((uint32_t)first_bad));
    CHECK(checked == (BLOCK_STRIDE == 1 ? 1L << 32 : checked));
}

/* Named cases, so a reader sees the rule. */
static void test_cases(void) {
    CHECK(f32_to_bf16(1.0f) == 0x3f80);
    CHECK(f32_to_bf16(-2.0f) == 0xc000);
    CHECK(f32_to_bf16(bits_to_float(0x3f808000u)) == 0x3f80);  /* tie, even below */
    CHECK(f32_to_bf16(bits_to_float(0x3f818000u)) == 0x3f82);  /* tie, odd below: up */
    CHECK(f32_to_bf16(bits_to_float(0x3f808001u)) == 0x3f81);  /* above the tie */
    CHECK(f32_to_bf16(bits_to_float(0x7f7fffffu)) == 0x7f80);  /* largest float: rounds to infinity */
    CHECK(f32_to_bf16(bits_to_float(0x7f7f7fffu)) == 0x7f7f);  /* below the midpoint: largest bf16 */
    CHECK(f32_to_bf16(INFINITY) == 0x7f80 && f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(f32_to_bf16(bits_to_float(0x00018000u)) == 0x0002);  /* subnormal tie: rounded, not flushed */
    CHECK(f32_to_bf16(-0.0f) == 0x8000);
    uint16_t n = f32_to_bf16(bits_to_float(0x7f800001u));       /* signalling NaN with a low payload */
    CHECK(n == 0x7fc0 && isnan(bf16_to_f32(n)));
    CHECK(f32_to_bf16(bits_to_float(0xffffffffu)) == 0xffff);
    for (uint32_t h = 0; h < 65536; h++) {                       /* every bf16 survives a round trip */
        float f = bf16_to_f32((uint16_t)h);
        if (!isnan(f) && f32_to_bf16(f) != h) {
            CHECK_MSG(0, "bf16 0x%04x does not round-trip", h);
            break;
        }
    }
}

int main(void) {
    test_cases();
    test_exhaustive();
    return check_finish("base/dtype");
}

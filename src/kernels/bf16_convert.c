/* bf16_convert.c: the fp32 activation operand of a bf16 product rounded to
 * bf16 (matmul.c's scratch), 16 floats at a time by store16_bf16 (the rule
 * of base/dtype.h), in parallel for large arrays: ~625 M conversions in a
 * bf16 step of the bench model, a measurable part of it; and the other way,
 * bf16 weights widened to fp32 panels (frozen_weight.c: every frozen
 * product in fp32 on bf16 weights). Compiled twice in the portable build
 * (kernels/isa.h): with AVX-512 a block is one register. */
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/vec.h"

void ISA_FN(matmul_f32_to_bf16)(uint16_t *dst, const float *src, size_t n) {
    size_t blocks = n / 16;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t b = 0; b < blocks; b++) {
        store16_bf16(dst + 16 * b, load16(src + 16 * b));
    }
    for (size_t i = blocks * 16; i < n; i++) {
        dst[i] = f32_to_bf16(src[i]);
    }
}

/* Exact: a bf16 number is the high half of its float. Single-threaded (the
 * panel expansion splits rows among threads). */
void ISA_FN(matmul_bf16_to_f32)(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16h h = *(const v16hu *)(src + i);
        v16w w = __builtin_convertvector(h, v16w) << 16;
        store16(dst + i, (v16)w);
    }
    for (; i < n; i++) {
        dst[i] = bf16_to_f32(src[i]);
    }
}

/* dtype.c: names, sizes and conversions of element types (see dtype.h). */
#include "dtype.h"

static const struct {
    const char *name;
    int bits;
} info[DTYPE_COUNT] = {
    [DTYPE_F32] = {"F32", 32},
    [DTYPE_BF16] = {"BF16", 16},
    [DTYPE_F16] = {"F16", 16},
    [DTYPE_F64] = {"F64", 64},
    [DTYPE_I64] = {"I64", 64},
    [DTYPE_I32] = {"I32", 32},
    [DTYPE_I16] = {"I16", 16},
    [DTYPE_I8] = {"I8", 8},
    [DTYPE_U64] = {"U64", 64},
    [DTYPE_U32] = {"U32", 32},
    [DTYPE_U16] = {"U16", 16},
    [DTYPE_U8] = {"U8", 8},
    [DTYPE_BOOL] = {"BOOL", 8},
    [DTYPE_C64] = {"C64", 64},
    [DTYPE_F8_E5M2] = {"F8_E5M2", 8},
    [DTYPE_F8_E4M3] = {"F8_E4M3", 8},
    [DTYPE_F8_E8M0] = {"F8_E8M0", 8},
    [DTYPE_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [DTYPE_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [DTYPE_F4] = {"F4", 4},
    [DTYPE_F6_E2M3] = {"F6_E2M3", 6},
    [DTYPE_F6_E3M2] = {"F6_E3M2", 6},
};

const char *dtype_name(DType t) { return (unsigned)t < DTYPE_COUNT ? info[t].name : "?"; }
int dtype_bits(DType t) { return (unsigned)t < DTYPE_COUNT ? info[t].bits : 0; }

int dtype_from_name(const char *name, DType *out) {
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (strcmp(name, info[i].name) == 0) {
            *out = (DType)i;
            return 0;
        }
    return -1;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0)
            u = sign;
        else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31)
        u = sign | 0x7f800000u | (man << 13);
    else
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffff;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        int shift = 14 - exp;
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)half;
}

void dtype_to_f32(float *dst, const void *src, DType t, size_t n) {
    if (t == DTYPE_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
    const uint16_t *s = src;
    if (t == DTYPE_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = f16_to_f32(s[i]);
}

void dtype_from_f32(void *dst, DType t, const float *src, size_t n) {
    if (t == DTYPE_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
    uint16_t *d = dst;
    if (t == DTYPE_BF16)
        for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++) d[i] = f32_to_f16(src[i]);
}

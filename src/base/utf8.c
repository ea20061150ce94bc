/* utf8.c: strict UTF-8 validation (see utf8.h). */
#include "base/utf8.h"

size_t utf8_lead(unsigned char b, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) return 1;
    if (b == 0xE0) {
        *lo = 0xA0;
        return 2;
    } /* no overlong */
    if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 2;
    if (b == 0xED) {
        *hi = 0x9F;
        return 2;
    } /* no surrogates */
    if (b == 0xF0) {
        *lo = 0x90;
        return 3;
    } /* no overlong */
    if (b >= 0xF1 && b <= 0xF3) return 3;
    if (b == 0xF4) {
        *hi = 0x8F;
        return 3;
    } /* <= U+10FFFF */
    return 0;
}

size_t utf8_valid_len(const unsigned char *s, size_t len) {
    unsigned char b = s[0];
    if (b < 0x80) return 1;
    unsigned char lo, hi;
    size_t need = utf8_lead(b, &lo, &hi);
    if (!need || len < need + 1) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k <= need; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return need + 1;
}

size_t utf8_first_invalid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = utf8_valid_len(s + i, len - i);
        if (!n) return i;
        i += n;
    }
    return len;
}

/* test_utf8.c: base/utf8.c against a reference written from the definition
 * (a well-formed sequence is the shortest encoding of a Unicode scalar
 * value: not a surrogate, at most U+10FFFF): every 1-, 2- and 3-byte
 * string exhaustively, 4-byte strings by random sampling, and every scalar
 * value's encoding. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "base/utf8.h"

/* Whether s[0..n) is exactly one well-formed sequence. */
static int ref_one_sequence(const unsigned char *s, size_t n) {
    uint32_t cp;
    if (n == 1) return s[0] < 0x80;
    for (size_t k = 1; k < n; k++) if ((s[k] & 0xC0) != 0x80) return 0;
    if (n == 2 && (s[0] & 0xE0) == 0xC0) cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    else if (n == 3 && (s[0] & 0xF0) == 0xE0) cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    else if (n == 4 && (s[0] & 0xF8) == 0xF0)
        cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    else return 0;
    static const uint32_t shortest[5] = {0, 0, 0x80, 0x800, 0x10000};
    return cp >= shortest[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

static size_t ref_first_invalid(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        size_t ok = 0;
        for (size_t n = 1; n <= 4 && i + n <= len && !ok; n++) if (ref_one_sequence(s + i, n)) ok = n;
        if (!ok) return i;
        i += ok;
    }
    return len;
}

int main(void) {
    long bad = 0, total = 0;
    unsigned char s[4];
    for (uint32_t x = 0; x < (1u << 24); x++) { /* every 3-byte string, and its 1- and 2-byte prefixes */
        s[0] = (unsigned char)(x >> 16); s[1] = (unsigned char)(x >> 8); s[2] = (unsigned char)x;
        for (size_t n = (x & 0xFFFF) ? 3 : 1; n <= 3; n++) {
            total++;
            bad += utf8_first_invalid((const char *)s, n) != ref_first_invalid(s, n);
        }
    }
    uint64_t st = 12345;
    for (int t = 0; t < 4000000; t++) { /* 4-byte strings, biased towards F0-F4 leads */
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(st >> 32);
        s[0] = (unsigned char)((t & 1) ? 0xF0 + (r & 7) : r); s[1] = (unsigned char)(0x80 + ((r >> 8) & 0x7F) * ((t & 2) ? 1 : 2));
        s[2] = (unsigned char)(r >> 16); s[3] = (unsigned char)(0x80 | (r >> 24));
        total++;
        bad += utf8_first_invalid((const char *)s, 4) != ref_first_invalid(s, 4);
    }
    CHECK_MSG(bad == 0, "utf8_first_invalid differs from the reference on %ld of %ld strings", bad, total);

    long cp_bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) { /* every scalar value's encoding is valid, surrogates are not */
        unsigned char e[4]; size_t n;
        if (cp < 0x80) { e[0] = (unsigned char)cp; n = 1; }
        else if (cp < 0x800) { e[0] = (unsigned char)(0xC0 | cp >> 6); e[1] = (unsigned char)(0x80 | (cp & 0x3F)); n = 2; }
        else if (cp < 0x10000) { e[0] = (unsigned char)(0xE0 | cp >> 12); e[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)); e[2] = (unsigned char)(0x80 | (cp & 0x3F)); n = 3; }
        else { e[0] = (unsigned char)(0xF0 | cp >> 18); e[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F)); e[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)); e[3] = (unsigned char)(0x80 | (cp & 0x3F)); n = 4; }
        int surrogate = cp >= 0xD800 && cp <= 0xDFFF;
        size_t got = utf8_first_invalid((const char *)e, n);
        cp_bad += surrogate ? got != 0 : got != n;
        cp_bad += surrogate ? utf8_valid_len(e, n) != 0 : utf8_valid_len(e, n) != n;
    }
    CHECK_MSG(cp_bad == 0, "%ld scalar-value encodings misjudged", cp_bad);
    /* the error offset is that of the first bad sequence, after valid ones */
    CHECK(utf8_first_invalid("ab\xC3\xA9" "c\xC0\xAF", 7) == 5);
    CHECK(utf8_first_invalid("\xE2\x82", 2) == 0);          /* truncated */
    CHECK(utf8_first_invalid("", 0) == 0);
    return check_finish("base/utf8");
}

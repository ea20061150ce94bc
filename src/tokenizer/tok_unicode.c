/* tok_unicode.c: UTF-8 decoding with WHATWG replacement (validation is
 * base/utf8.c), NFC
 * normalization (tables in tok_nfc_tables.c), JavaScript's idea of
 * whitespace, and the GPT-2 byte <-> unicode map used by byte-level BPE. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"
#include <string.h>

extern const uint32_t nfc_ccc[][2];
extern const size_t nfc_ccc_count;
extern const uint32_t nfc_decomp[][3];
extern const size_t nfc_decomp_count;
extern const uint32_t nfc_decomp_pool[];
extern const uint32_t nfc_comp[][3];
extern const size_t nfc_comp_count;
extern const uint32_t nfc_check_ranges[][2];
extern const size_t nfc_check_count;

int utf8_decode(const unsigned char *s, size_t len, uint32_t *cp) {
    unsigned char b = s[0];
    if (b < 0x80 || len < 2) {
        *cp = b;
        return 1;
    }
    if (b < 0xE0) {
        *cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (b < 0xF0 || len < 4) {
        if (len < 3) {
            *cp = b;
            return 1;
        }
        *cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp =
        ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

int utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* WHATWG "UTF-8 decode": an ill-formed sequence yields one U+FFFD for its
 * maximal valid prefix, and the offending byte is looked at again. */
int utf8_append_replacing(PieceList *out, const char *bytes, size_t len) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const unsigned char *s = (const unsigned char *)bytes;
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = utf8_valid_len(s + i, len - i);
        if (n) {
            i += n;
            continue;
        }
        TRY(pieces_append(out, bytes + run, i - run));
        TRY(pieces_append(out, fffd, 3));
        /* Skip the maximal prefix of a valid sequence (lead + fitting continuations). */
        unsigned char lo, hi;
        size_t need = utf8_lead(s[i], &lo, &hi);
        size_t j = i + 1;
        for (size_t k = 0; k < need && j < len; k++, j++) {
            unsigned char c = s[j];
            if (c < (k == 0 ? lo : 0x80) || c > (k == 0 ? hi : 0xBF)) break;
        }
        i = j;
        run = j;
    }
    return pieces_append(out, bytes + run, len - run);
}

bool unicode_is_js_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
        c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

/* ---------------------------------------------------------------- GPT-2 byte map */
static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}
uint32_t byte_to_unicode(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (int x = 0; x < b; x++)
        if (!byte_is_printable(x)) n++;
    return 256 + n;
}
int unicode_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1; /* 68 bytes are remapped */
    uint32_t n = 0;
    for (int x = 0; x < 256; x++)
        if (!byte_is_printable(x)) {
            if (n == cp - 256) return x;
            n++;
        }
    return -1;
}

/* ---------------------------------------------------------------- NFC */
enum {
    S_BASE = 0xAC00,
    L_BASE = 0x1100,
    V_BASE = 0x1161,
    T_BASE = 0x11A7,
    L_COUNT = 19,
    V_COUNT = 21,
    T_COUNT = 28,
    N_COUNT = V_COUNT * T_COUNT,
    S_COUNT = L_COUNT * N_COUNT
};

static int ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    size_t lo = 0, hi = nfc_ccc_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfc_ccc[mid][0] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nfc_ccc_count && nfc_ccc[lo][0] == cp ? (int)nfc_ccc[lo][1] : 0;
}
static bool needs_check(uint32_t cp) {
    size_t lo = 0, hi = nfc_check_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfc_check_ranges[mid][1] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nfc_check_count && nfc_check_ranges[lo][0] <= cp;
}
static const uint32_t *decomp_of(uint32_t cp, size_t *n) {
    size_t lo = 0, hi = nfc_decomp_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfc_decomp[mid][0] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < nfc_decomp_count && nfc_decomp[lo][0] == cp) {
        *n = nfc_decomp[lo][2];
        return nfc_decomp_pool + nfc_decomp[lo][1];
    }
    return NULL;
}
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = nfc_comp_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfc_comp[mid][0] < a || (nfc_comp[mid][0] == a && nfc_comp[mid][1] < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nfc_comp_count && nfc_comp[lo][0] == a && nfc_comp[lo][1] == b ? nfc_comp[lo][2] : 0;
}

int unicode_nfc(PieceList *out, const char *str, size_t len, size_t *off, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)str;
    bool need = false;
    for (size_t i = 0; i < len && !need;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        i += (size_t)utf8_decode(s + i, len - i, &cp);
        need = needs_check(cp);
    }
    *off = out->buf_len;
    if (!need) {
        TRY(pieces_append(out, str, len));
        *out_len = len;
        return 0;
    }
    /* Full canonical decomposition: at most 4 code points per byte of input
     * is far more than any expansion (the longest is 18 from 4 bytes). */
    size_t cap = len * 5 + 16;
    uint32_t *d = mem_alloc(cap * sizeof *d);
    if (!d) return -1;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)utf8_decode(s + i, len - i, &cp);
        size_t k;
        const uint32_t *dec;
        if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
            uint32_t si = cp - S_BASE;
            d[n++] = L_BASE + si / N_COUNT;
            d[n++] = V_BASE + (si % N_COUNT) / T_COUNT;
            if (si % T_COUNT) d[n++] = T_BASE + si % T_COUNT;
        } else if ((dec = decomp_of(cp, &k)) != NULL) {
            for (size_t j = 0; j < k; j++) d[n++] = dec[j];
        } else
            d[n++] = cp;
    }
    /* Canonical ordering: stable insertion sort inside each run of non-starters. */
    for (size_t i = 1; i < n; i++) {
        int c = ccc_of(d[i]);
        if (!c) continue;
        size_t j = i;
        while (j > 0) {
            int p = ccc_of(d[j - 1]);
            if (p <= c) break;
            uint32_t tmp = d[j];
            d[j] = d[j - 1];
            d[j - 1] = tmp;
            j--;
        }
    }
    /* Canonical composition. */
    size_t r = 0;
    if (n) {
        size_t starter = 0;
        int last = 0;
        bool have_starter = ccc_of(d[0]) == 0;
        r = 1;
        for (size_t i = 1; i < n; i++) {
            uint32_t ch = d[i];
            int c = ccc_of(ch);
            uint32_t comp = have_starter ? compose_pair(d[starter], ch) : 0;
            if (comp && (last < c || last == 0)) {
                d[starter] = comp;
                continue;
            }
            if (c == 0) {
                starter = r;
                have_starter = true;
            }
            last = c;
            d[r++] = ch;
        }
    }
    for (size_t i = 0; i < r; i++) {
        char buf[4];
        int k = utf8_encode(d[i], buf);
        if (pieces_append(out, buf, (size_t)k) < 0) {
            mem_free(d);
            return -1;
        }
    }
    mem_free(d);
    *out_len = out->buf_len - *off;
    return 0;
}

/* tok_encode.c: one encode from text to ids. The raw text is cut at added
 * tokens (tok_added.c); each section between them is normalized,
 * pre-tokenized and BPE-encoded; the post-processor template adds BOS/EOS
 * ids when asked. Mirrors transformers.js's _encode_text. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"
#include <string.h>

typedef struct {
    size_t start, end;
    int32_t added_id;
} Section;

/* JavaScript's trimStart / trimEnd on UTF-8, for lstrip / rstrip tokens. */
static size_t trim_start(const char *s, size_t a, size_t b) {
    while (a < b) {
        uint32_t cp;
        int n = utf8_decode((const unsigned char *)s + a, b - a, &cp);
        if (!unicode_is_js_space(cp)) break;
        a += (size_t)n;
    }
    return a;
}
static size_t trim_end(const char *s, size_t a, size_t b) {
    while (b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        uint32_t cp;
        utf8_decode((const unsigned char *)s + k, b - k, &cp);
        if (!unicode_is_js_space(cp)) break;
        b = k;
    }
    return b;
}

static int encode_section(const Tokenizer *t, BpeWork *w, const char *s, size_t len, size_t section_index,
                          PieceList *norm, PieceList *pre, int32_t **ids, size_t *n, size_t *cap) {
    if (t->normalizer) {
        TRY(normalizer_apply(t->normalizer, s, len, norm));
        s = norm->buf;
        len = norm->buf_len;
        if (len == 0) return 0;
    }
    if (!t->pre_tokenizer && t->split_before_metaspace) {
        /* Cut before each U+2581 that follows another character. */
        size_t start = 0;
        for (size_t i = 1; i + 3 <= len; i++) {
            if (memcmp(s + i, "\xE2\x96\x81", 3) != 0) continue;
            if (i >= 3 && memcmp(s + i - 3, "\xE2\x96\x81", 3) == 0) continue;
            TRY(bpe_encode_piece(t, w, s + start, i - start, ids, n, cap));
            start = i;
            i += 2;
        }
        return bpe_encode_piece(t, w, s + start, len - start, ids, n, cap);
    }
    if (!t->pre_tokenizer) return bpe_encode_piece(t, w, s, len, ids, n, cap);
    pieces_reset(pre);
    TRY(pretokenizer_apply(t->pre_tokenizer, s, len, pre, section_index));
    for (size_t i = 0; i < pre->n; i++) TRY(bpe_encode_piece(t, w, piece_ptr(pre, i), pre->items[i].len, ids, n, cap));
    return 0;
}

int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids_out,
                     size_t *n_out) {
    *ids_out = NULL;
    *n_out = 0;
    if (len && !text) return error_set("tokenizer: encode: NULL text");
    size_t bad = utf8_first_invalid(text, len);
    if (bad < len)
        return error_set("tokenizer: encode: invalid UTF-8 at byte offset %zu (byte 0x%02X)", bad,
                         (unsigned)(unsigned char)text[bad]);
    /* Sections: text gaps and added tokens, in order. */
    Section *secs = NULL;
    size_t n_secs = 0, cap_secs = 0;
    int rc = 0;
    size_t gap = 0;
    for (size_t i = 0; i <= len && rc == 0;) {
        int32_t id = -1;
        size_t m = i < len ? added_match(t, text + i, len - i, &id) : 0;
        if (i < len && !m) {
            i++;
            continue;
        }
        if (n_secs + 2 > cap_secs) {
            size_t c = cap_secs ? cap_secs * 2 : 16;
            Section *q = mem_realloc(secs, c * sizeof *q);
            if (!q) {
                rc = -1;
                break;
            }
            secs = q;
            cap_secs = c;
        }
        if (i > gap) secs[n_secs++] = (Section){gap, i, -1};
        if (i == len) break;
        secs[n_secs++] = (Section){i, i + m, id};
        i += m;
        gap = i;
    }
    /* lstrip / rstrip of added tokens trim the neighbouring text. */
    for (size_t k = 0; rc == 0 && k < n_secs; k++) {
        if (secs[k].added_id < 0 || !t->added[secs[k].added_id]) continue;
        const AddedToken *a = added_find(t, secs[k].added_id);
        if (!a) continue;
        if (a->lstrip && k > 0 && secs[k - 1].added_id < 0)
            secs[k - 1].end = trim_end(text, secs[k - 1].start, secs[k - 1].end);
        if (a->rstrip && k + 1 < n_secs && secs[k + 1].added_id < 0)
            secs[k + 1].start = trim_start(text, secs[k + 1].start, secs[k + 1].end);
    }
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    BpeWork *w = rc == 0 ? bpe_work_new() : NULL;
    PieceList norm = {0}, pre = {0};
    if (rc == 0 && !w) rc = -1;
    if (rc == 0 && add_special && t->post.present) {
        /* Template items before $A. */
        for (size_t k = 0; k < t->post.n_single && rc == 0 && !t->post.single[k].is_sequence_a; k++)
            for (size_t j = 0; j < t->post.single[k].n_ids && rc == 0; j++)
                rc = ids_push(&ids, &n, &cap, t->post.single[k].ids[j]);
    }
    for (size_t k = 0; k < n_secs && rc == 0; k++) {
        if (secs[k].added_id >= 0) {
            rc = ids_push(&ids, &n, &cap, secs[k].added_id);
            continue;
        }
        if (secs[k].end > secs[k].start)
            rc =
                encode_section(t, w, text + secs[k].start, secs[k].end - secs[k].start, k, &norm, &pre, &ids, &n, &cap);
    }
    if (rc == 0 && add_special && t->post.present) {
        size_t k = 0;
        while (k < t->post.n_single && !t->post.single[k].is_sequence_a) k++;
        for (k++; k < t->post.n_single && rc == 0; k++)
            for (size_t j = 0; j < t->post.single[k].n_ids && rc == 0; j++)
                rc = ids_push(&ids, &n, &cap, t->post.single[k].ids[j]);
    }
    if (rc == 0 && !ids) {
        ids = mem_alloc(sizeof *ids);
        if (!ids) rc = -1;
    }
    bpe_work_free(w);
    pieces_free(&norm);
    pieces_free(&pre);
    mem_free(secs);
    if (rc < 0) {
        mem_free(ids);
        return -1;
    }
    *ids_out = ids;
    *n_out = n;
    return 0;
}

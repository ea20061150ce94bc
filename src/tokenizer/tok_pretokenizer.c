/* tok_pretokenizer.c: splitting a normalized section into pre-tokens:
 * Sequence, Split (regex or string; Isolated, Removed, MergedWithPrevious,
 * MergedWithNext, Contiguous; invert), ByteLevel (optional GPT-2 regex and
 * prefix space; the byte -> unicode mapping is done by the BPE model),
 * Metaspace and Digits. Semantics follow transformers.js where it and HF
 * tokenizers agree; see the notes at each stage. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <string.h>

void pretokenizer_free(PreTokenizer *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_children; i++) pretokenizer_free(&p->children[i]);
    mem_free(p->children);
    if (p->has_regex) tok_regex_free(&p->regex);
    mem_free(p->replacement);
    mem_free(p->pattern);
}

bool pretokenizer_has_bytelevel(const PreTokenizer *p) {
    if (!p) return false;
    if (p->kind == PRE_BYTELEVEL) return true;
    for (size_t i = 0; i < p->n_children; i++) if (pretokenizer_has_bytelevel(&p->children[i])) return true;
    return false;
}

/* Matches of a regex as (start, end) pairs. */
typedef struct {
    size_t *v;
    size_t n, cap;
} MatchList;
static int collect_match(size_t start, size_t end, void *vctx) {
    MatchList *m = vctx;
    if (end == start) return 0; /* empty matches split nothing */
    if (m->n + 2 > m->cap) {
        size_t c = m->cap ? m->cap * 2 : 64;
        size_t *q = mem_realloc(m->v, c * sizeof *q);
        if (!q) return -1;
        m->v = q;
        m->cap = c;
    }
    m->v[m->n++] = start;
    m->v[m->n++] = end;
    return 0;
}

static int split_apply(const PreTokenizer *p, const char *s, size_t len, PieceList *out) {
    MatchList m = { 0 };
    if (tok_regex_foreach(&p->regex, s, len, collect_match, &m) < 0) {
        mem_free(m.v);
        return -1;
    }
    int rc = 0;
    size_t nm = m.n / 2, prev = 0;
    if (p->invert) {
        /* transformers.js: an inverted split keeps the matches only. */
        for (size_t i = 0; i < nm && rc == 0; i++)
            rc = pieces_push_bytes(out, s + m.v[2 * i], m.v[2 * i + 1] - m.v[2 * i]);
        mem_free(m.v);
        return rc;
    }
    /* pending: a piece being built (MergedWithNext keeps a match open; the
     * other behaviours flush as they go). */
    size_t pend_start = 0, pend_end = 0;
    bool pending = false;
    bool pend_is_match = false;
#define FLUSH() \
    do { \
        if (pending && rc == 0) rc = pieces_push_bytes(out, s + pend_start, pend_end - pend_start); \
        pending = false; \
    } while (0)
    for (size_t i = 0; i <= nm && rc == 0; i++) {
        size_t ms = i < nm ? m.v[2 * i] : len, me = i < nm ? m.v[2 * i + 1] : len;
        if (ms > prev) { /* the gap before this match */
            if (p->behavior == SPLIT_MERGED_NEXT && pending) {
                pend_end = ms;
                FLUSH();
            } else {
                FLUSH();
                pend_start = prev;
                pend_end = ms;
                pending = true;
                pend_is_match = false;
            }
        }
        if (i == nm) break;
        switch (p->behavior) {
        case SPLIT_REMOVED:
            FLUSH();
            break;
        case SPLIT_ISOLATED:
            FLUSH();
            pend_start = ms;
            pend_end = me;
            pending = true;
            FLUSH();
            break;
        case SPLIT_MERGED_PREV:
            if (pending && !pend_is_match) {
                pend_end = me;
                FLUSH();
            } else {
                FLUSH();
                pend_start = ms;
                pend_end = me;
                pending = true;
                FLUSH();
            }
            break;
        case SPLIT_MERGED_NEXT:
            FLUSH();
            pend_start = ms;
            pend_end = me;
            pending = true;
            pend_is_match = true;
            break;
        case SPLIT_CONTIGUOUS:
            if (pending && pend_is_match && pend_end == ms) pend_end = me;
            else {
                FLUSH();
                pend_start = ms;
                pend_end = me;
                pending = true;
                pend_is_match = true;
            }
            break;
        }
        prev = me;
    }
    FLUSH();
#undef FLUSH
    mem_free(m.v);
    return rc;
}

typedef struct {
    const char *s;
    PieceList *out;
} KeepCtx;
static int keep_match(size_t start, size_t end, void *vctx) {
    KeepCtx *c = vctx;
    return end > start ? pieces_push_bytes(c->out, c->s + start, end - start) : 0;
}

static int bytelevel_apply(const PreTokenizer *p, const char *s, size_t len, PieceList *out) {
    PieceList tmp = { 0 };
    if (p->add_prefix_space && (len == 0 || s[0] != ' ')) {
        /* transformers.js adds the space to every piece it is given. */
        if (pieces_append(&tmp, " ", 1) < 0 || pieces_append(&tmp, s, len) < 0) {
            pieces_free(&tmp);
            return -1;
        }
        s = tmp.buf;
        len = tmp.buf_len;
    }
    int rc;
    if (p->has_regex) {
        KeepCtx c = { s, out };
        rc = tok_regex_foreach(&p->regex, s, len, keep_match, &c);
    } else rc = pieces_push_bytes(out, s, len);
    pieces_free(&tmp);
    return rc;
}

/* Metaspace: spaces become the replacement; a replacement is prepended
 * (prepend_scheme always, or first for the first section) unless the text
 * starts with one; with split, pieces start at each replacement (HF's
 * MergedWithNext; transformers.js does not split). */
static int metaspace_apply(const PreTokenizer *p, const char *s, size_t len, PieceList *out, size_t section_index) {
    size_t start = out->buf_len;
    const char *r = p->replacement;
    size_t rl = p->replacement_len;
    bool starts_with_rep = false;
    {
        /* Does the replaced text start with the replacement? */
        if (len > 0 && s[0] == ' ') starts_with_rep = true;
        else if (len >= rl && memcmp(s, r, rl) == 0) starts_with_rep = true;
    }
    bool prepend = p->add_prefix_space && !starts_with_rep &&
                   (p->prepend_scheme == PREPEND_ALWAYS || (p->prepend_scheme == PREPEND_FIRST && section_index == 0));
    if (prepend) TRY(pieces_append(out, r, rl));
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') TRY(pieces_append(out, r, rl));
        else TRY(pieces_append(out, s + i, 1));
    }
    size_t end = out->buf_len;
    if (!p->split) return pieces_push_span(out, start, end - start);
    size_t piece = start;
    for (size_t i = start; i + rl <= end;) {
        if (i > piece && memcmp(out->buf + i, r, rl) == 0) {
            TRY(pieces_push_span(out, piece, i - piece));
            piece = i;
            i += rl;
        } else
            i++;
    }
    if (end > piece) TRY(pieces_push_span(out, piece, end - piece));
    return 0;
}

/* Digits: runs of ASCII digits (or single digits) and runs of the rest. */
static int digits_apply(const PreTokenizer *p, const char *s, size_t len, PieceList *out) {
    size_t i = 0;
    while (i < len) {
        bool d = s[i] >= '0' && s[i] <= '9';
        size_t j = i + 1;
        if (d) { if (!p->individual_digits) while (j < len && s[j] >= '0' && s[j] <= '9') j++; }
        else while (j < len && !(s[j] >= '0' && s[j] <= '9')) j++;
        TRY(pieces_push_bytes(out, s + i, j - i));
        i = j;
    }
    return 0;
}

static bool is_identity(const PreTokenizer *p) {
    return p->kind == PRE_BYTELEVEL && !p->has_regex && !p->add_prefix_space;
}

int pretokenizer_apply(const PreTokenizer *p, const char *s, size_t len, PieceList *out, size_t section_index) {
    switch (p->kind) {
    case PRE_SPLIT: return split_apply(p, s, len, out);
    case PRE_BYTELEVEL: return bytelevel_apply(p, s, len, out);
    case PRE_METASPACE: return metaspace_apply(p, s, len, out, section_index);
    case PRE_DIGITS: return digits_apply(p, s, len, out);
    case PRE_SEQUENCE: {
        /* Stages that change nothing (ByteLevel without regex or prefix
         * space: its byte mapping is the BPE model's) are skipped; a single
         * remaining stage writes straight into out. */
        size_t active = 0, only = 0;
        for (size_t c = 0; c < p->n_children; c++)
            if (!is_identity(&p->children[c])) {
                active++;
                only = c;
            }
        if (active == 0) return pieces_push_bytes(out, s, len);
        if (active == 1) return pretokenizer_apply(&p->children[only], s, len, out, section_index);
        PieceList a = { 0 }, b = { 0 };
        PieceList *cur = &a, *next = &b;
        int rc = pieces_push_bytes(cur, s, len);
        for (size_t c = 0; rc == 0 && c < p->n_children; c++) {
            if (is_identity(&p->children[c])) continue;
            pieces_reset(next);
            for (size_t i = 0; rc == 0 && i < cur->n; i++)
                rc = pretokenizer_apply(&p->children[c], piece_ptr(cur, i), cur->items[i].len, next, section_index);
            PieceList *t = cur;
            cur = next;
            next = t;
        }
        for (size_t i = 0; rc == 0 && i < cur->n; i++)
            rc = pieces_push_bytes(out, piece_ptr(cur, i), cur->items[i].len);
        pieces_free(&a);
        pieces_free(&b);
        return rc;
    }
    }
    return error_set("tokenizer: unknown pre-tokenizer");
}

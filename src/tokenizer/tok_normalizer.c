/* tok_normalizer.c: the normalizers of tokenizer.json that real BPE
 * tokenizers use: Sequence, Prepend, Replace (String or Regex pattern) and
 * NFC. They run on each text section between added tokens. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <string.h>

void normalizer_free(Normalizer *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_children; i++) normalizer_free(&n->children[i]);
    mem_free(n->children);
    mem_free(n->a);
    mem_free(n->b);
    if (n->has_regex) tok_regex_free(&n->regex);
}

typedef struct {
    const char *s;
    PieceList *out;
    size_t last;
    const char *content;
    size_t content_len;
} ReplaceCtx;
static int replace_match(size_t start, size_t end, void *vctx) {
    ReplaceCtx *c = vctx;
    TRY(pieces_append(c->out, c->s + c->last, start - c->last));
    TRY(pieces_append(c->out, c->content, c->content_len));
    c->last = end;
    return 0;
}

static int replace_all(const Normalizer *n, const char *s, size_t len, PieceList *out) {
    if (n->has_regex) {
        ReplaceCtx c = {s, out, 0, n->b, n->b_len};
        TRY(tok_regex_foreach(&n->regex, s, len, replace_match, &c));
        return pieces_append(out, s + c.last, len - c.last);
    }
    if (n->a_len == 0) return pieces_append(out, s, len);
    size_t i = 0;
    while (i < len) {
        const char *hit = memmem(s + i, len - i, n->a, n->a_len);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        TRY(pieces_append(out, s + i, at - i));
        TRY(pieces_append(out, n->b, n->b_len));
        i = at + n->a_len;
    }
    return pieces_append(out, s + i, len - i);
}

int normalizer_apply(const Normalizer *n, const char *s, size_t len, PieceList *out) {
    pieces_reset(out);
    switch (n->kind) {
    case NORM_PREPEND:
        TRY(pieces_append(out, n->a, n->a_len));
        return pieces_append(out, s, len);
    case NORM_REPLACE: return replace_all(n, s, len, out);
    case NORM_NFC: {
        size_t off, olen;
        return unicode_nfc(out, s, len, &off, &olen);
    }
    case NORM_SEQUENCE: {
        if (n->n_children == 0) return pieces_append(out, s, len);
        PieceList a = {0}, b = {0};
        PieceList *cur = &a, *next = &b;
        int rc = normalizer_apply(&n->children[0], s, len, cur);
        for (size_t i = 1; rc == 0 && i < n->n_children; i++) {
            rc = normalizer_apply(&n->children[i], cur->buf ? cur->buf : "", cur->buf_len, next);
            PieceList *t = cur;
            cur = next;
            next = t;
        }
        if (rc == 0) rc = pieces_append(out, cur->buf ? cur->buf : "", cur->buf_len);
        pieces_free(&a);
        pieces_free(&b);
        return rc;
    }
    }
    return error_set("tokenizer: unknown normalizer");
}

/* tok_decoder.c: ids back to text. Ids become token strings, special ones
 * optionally dropped, then the decoder chain of tokenizer.json runs on the
 * list of strings: ByteLevel (GPT-2 chars back to bytes, added tokens kept
 * verbatim), Replace, ByteFallback (<0xNN> runs back to bytes), Fuse, Strip,
 * Metaspace, Sequence. Byte runs are turned into UTF-8 the way a WHATWG
 * TextDecoder does (ill-formed parts become U+FFFD), as the reference. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <string.h>

void decoder_free(Decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_children; i++) decoder_free(&d->children[i]);
    mem_free(d->children);
    mem_free(d->a);
    mem_free(d->b);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Ends the current output piece started at `start`. */
static int close_piece(PieceList *out, size_t start) { return pieces_push_span(out, start, out->buf_len - start); }

static int dec_bytelevel(const Tokenizer *t, const PieceList *in, PieceList *out) {
    PieceList bytes = {0};
    int rc = 0;
    for (size_t i = 0; i <= in->n && rc == 0; i++) {
        bool added = false;
        if (i < in->n) {
            int32_t id = strmap_get(&t->token_to_id, piece_ptr(in, i), in->items[i].len);
            added = id >= 0 && t->added[id];
        }
        if ((i == in->n || added) && bytes.buf_len) {
            size_t start = out->buf_len;
            rc = utf8_append_replacing(out, bytes.buf, bytes.buf_len);
            if (rc == 0) rc = close_piece(out, start);
            pieces_reset(&bytes);
        }
        if (i == in->n || rc) break;
        const unsigned char *s = (const unsigned char *)piece_ptr(in, i);
        size_t len = in->items[i].len;
        if (added) {
            rc = pieces_push_bytes(out, (const char *)s, len);
            continue;
        }
        for (size_t k = 0; k < len && rc == 0;) {
            uint32_t cp;
            int n = utf8_decode(s + k, len - k, &cp);
            int b = unicode_to_byte(cp);
            if (b >= 0) {
                char c = (char)b;
                rc = pieces_append(&bytes, &c, 1);
            } else
                rc = pieces_append(&bytes, (const char *)s + k, (size_t)n);
            k += (size_t)n;
        }
    }
    pieces_free(&bytes);
    return rc;
}

/* Appends piece s with every occurrence of d->a replaced by `with` (the
 * Replace and Metaspace decoders differ only in what they put back). */
static int append_replaced(const Decoder *d, const char *s, size_t len, const char *with, size_t with_len,
                           PieceList *out) {
    size_t k = 0;
    while (d->a_len && k < len) {
        const char *hit = memmem(s + k, len - k, d->a, d->a_len);
        if (!hit) break;
        TRY(pieces_append(out, s + k, (size_t)(hit - (s + k))));
        TRY(pieces_append(out, with, with_len));
        k = (size_t)(hit - s) + d->a_len;
    }
    return pieces_append(out, s + k, len - k);
}

static int dec_replace(const Decoder *d, const PieceList *in, PieceList *out) {
    for (size_t i = 0; i < in->n; i++) {
        size_t start = out->buf_len;
        TRY(append_replaced(d, piece_ptr(in, i), in->items[i].len, d->b, d->b_len, out));
        TRY(close_piece(out, start));
    }
    return 0;
}

static int dec_bytefallback(const PieceList *in, PieceList *out) {
    PieceList bytes = {0};
    int rc = 0;
    for (size_t i = 0; i <= in->n && rc == 0; i++) {
        int byte = -1;
        if (i < in->n) {
            const char *s = piece_ptr(in, i);
            if (in->items[i].len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') {
                int hi = hexval(s[3]), lo = hexval(s[4]);
                if (hi >= 0 && lo >= 0) byte = hi * 16 + lo;
            }
        }
        if (byte >= 0) {
            char c = (char)byte;
            rc = pieces_append(&bytes, &c, 1);
            continue;
        }
        if (bytes.buf_len) {
            size_t start = out->buf_len;
            rc = utf8_append_replacing(out, bytes.buf, bytes.buf_len);
            if (rc == 0) rc = close_piece(out, start);
            pieces_reset(&bytes);
        }
        if (i < in->n && rc == 0) rc = pieces_push_bytes(out, piece_ptr(in, i), in->items[i].len);
    }
    pieces_free(&bytes);
    return rc;
}

static int dec_fuse(const PieceList *in, PieceList *out) {
    size_t start = out->buf_len;
    for (size_t i = 0; i < in->n; i++) TRY(pieces_append(out, piece_ptr(in, i), in->items[i].len));
    if (out->buf_len == start) TRY(pieces_append(out, "", 0));
    return close_piece(out, start);
}

static int dec_strip(const Decoder *d, const PieceList *in, PieceList *out) {
    for (size_t i = 0; i < in->n; i++) {
        const char *s = piece_ptr(in, i);
        size_t a = 0, b = in->items[i].len;
        for (int k = 0; k < d->start && d->a_len && a + d->a_len <= b && memcmp(s + a, d->a, d->a_len) == 0; k++)
            a += d->a_len;
        for (int k = 0; k < d->stop && d->a_len && b >= a + d->a_len && memcmp(s + b - d->a_len, d->a, d->a_len) == 0;
             k++)
            b -= d->a_len;
        TRY(pieces_push_bytes(out, s + a, b - a));
    }
    return 0;
}

static int dec_metaspace(const Decoder *d, const PieceList *in, PieceList *out) {
    for (size_t i = 0; i < in->n; i++) {
        size_t start = out->buf_len;
        TRY(append_replaced(d, piece_ptr(in, i), in->items[i].len, " ", 1, out));
        size_t s0 = start;
        if (d->strip_first_space && i == 0 && out->buf_len > start && out->buf[start] == ' ') s0++;
        TRY(pieces_push_span(out, s0, out->buf_len - s0));
    }
    return 0;
}

int decoder_run(const Tokenizer *t, const Decoder *d, PieceList *tokens, PieceList *scratch) {
    if (d->kind == DEC_SEQUENCE) {
        for (size_t i = 0; i < d->n_children; i++) TRY(decoder_run(t, &d->children[i], tokens, scratch));
        return 0;
    }
    pieces_reset(scratch);
    int rc;
    switch (d->kind) {
    case DEC_BYTELEVEL:
        rc = dec_bytelevel(t, tokens, scratch);
        break;
    case DEC_REPLACE:
        rc = dec_replace(d, tokens, scratch);
        break;
    case DEC_BYTEFALLBACK:
        rc = dec_bytefallback(tokens, scratch);
        break;
    case DEC_FUSE:
        rc = dec_fuse(tokens, scratch);
        break;
    case DEC_STRIP:
        rc = dec_strip(d, tokens, scratch);
        break;
    case DEC_METASPACE:
        rc = dec_metaspace(d, tokens, scratch);
        break;
    default: return error_set("tokenizer: unknown decoder");
    }
    if (rc < 0) return -1;
    PieceList tmp = *tokens;
    *tokens = *scratch;
    *scratch = tmp;
    return 0;
}

int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    PieceList tokens = {0}, scratch = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab_size || !t->id_to_token[id]) {
            rc = error_set("tokenizer: decode: token id %d at position %zu is not in the vocab (size %d)", (int)id, i,
                           (int)t->vocab_size);
            break;
        }
        if (skip_special && t->special[id]) continue;
        rc = pieces_push_bytes(&tokens, t->id_to_token[id], strlen(t->id_to_token[id]));
    }
    if (rc == 0 && t->decoder) rc = decoder_run(t, t->decoder, &tokens, &scratch);
    char *text = NULL;
    size_t len = 0;
    if (rc == 0) {
        size_t total = 0;
        for (size_t i = 0; i < tokens.n; i++) total += tokens.items[i].len + 1;
        text = mem_alloc(total + 1);
        if (!text) rc = -1;
        for (size_t i = 0; rc == 0 && i < tokens.n; i++) {
            if (!t->decoder && i > 0) text[len++] = ' '; /* no decoder: tokens joined by spaces */
            memcpy(text + len, piece_ptr(&tokens, i), tokens.items[i].len);
            len += tokens.items[i].len;
        }
        if (text) text[len] = 0;
    }
    pieces_free(&tokens);
    pieces_free(&scratch);
    if (rc < 0) {
        mem_free(text);
        return -1;
    }
    *out = text;
    *out_len = len;
    return 0;
}

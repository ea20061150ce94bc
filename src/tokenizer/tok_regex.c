/* tok_regex.c: the pre-tokenizer regexes, compiled by PCRE2 (UTF, UCP, JIT).
 * Patterns are rewritten the way transformers.js runs them, so splits agree
 * with the JavaScript reference: \s and \S mean JavaScript's whitespace set
 * (PCRE's Unicode \s also has U+0085 and lacks U+FEFF), and the
 * case-insensitive contraction group becomes explicit letter classes (PCRE's
 * caseless matching would also take U+017F for 's' and U+212A for 'k').
 * \p{L}, \p{N} and the letter and mark subcategories (\p{Lu}, \p{Ll}, \p{Lt},
 * \p{Lm}, \p{Lo}, \p{M}: the gpt-4o / Phi-4 pattern) also get the code points
 * Unicode assigned after the version PCRE2 knows (tok_regex_tables.c), as
 * Node's newer tables have them. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <string.h>

/* The extra ranges of the category named at p (after "\\p{", up to "}"), or NULL. */
static const char *js_extra(const char *p, size_t *name_len) {
    const char *end = strchr(p, '}');
    if (!end) return NULL;
    *name_len = (size_t)(end - p);
    for (int k = 0; k < tok_js_extra_count; k++)
        if (strlen(tok_js_extra[k].name) == *name_len && !strncmp(tok_js_extra[k].name, p, *name_len))
            return tok_js_extra[k].ranges;
    return NULL;
}

#define JS_SPACES "\\t-\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}"

static int buf_add(char **b, size_t *n, size_t *cap, const char *s, size_t len) {
    if (*n + len + 1 > *cap) {
        size_t c = (*cap ? *cap : 64);
        while (c < *n + len + 1) c *= 2;
        char *q = mem_realloc(*b, c);
        if (!q) return -1;
        *b = q;
        *cap = c;
    }
    memcpy(*b + *n, s, len);
    *n += len;
    (*b)[*n] = 0;
    return 0;
}

static char *rewrite_for_js(const char *pat) {
    static const char *ci_from = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
    static const char *ci_to = "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))";
    char *b = NULL;
    size_t n = 0, cap = 0;
    bool in_class = false;
    size_t len = strlen(pat);
    for (size_t i = 0; i < len;) {
        if (!in_class && strncmp(pat + i, ci_from, strlen(ci_from)) == 0) {
            if (buf_add(&b, &n, &cap, ci_to, strlen(ci_to)) < 0) goto fail;
            i += strlen(ci_from);
            continue;
        }
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            int rc;
            size_t nl = 0;
            const char *extra = e == 'p' && i + 2 < len && pat[i + 2] == '{' ? js_extra(pat + i + 3, &nl) : NULL;
            if (extra) {
                size_t whole = nl + 4;   /* \p{name} */
                rc = 0;
                if (!in_class) rc = buf_add(&b, &n, &cap, "[", 1);
                if (rc == 0) rc = buf_add(&b, &n, &cap, pat + i, whole);
                if (rc == 0) rc = buf_add(&b, &n, &cap, extra, strlen(extra));
                if (rc == 0 && !in_class) rc = buf_add(&b, &n, &cap, "]", 1);
                if (rc < 0) goto fail;
                i += whole;
                continue;
            }
            if (e == 's') rc = in_class ? buf_add(&b, &n, &cap, JS_SPACES, strlen(JS_SPACES))
                                        : buf_add(&b, &n, &cap, "[" JS_SPACES "]", strlen(JS_SPACES) + 2);
            else if (e == 'S' && !in_class) rc = buf_add(&b, &n, &cap, "[^" JS_SPACES "]", strlen(JS_SPACES) + 3);
            else rc = buf_add(&b, &n, &cap, pat + i, 2);
            if (rc < 0) goto fail;
            i += 2;
            continue;
        }
        if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
        if (buf_add(&b, &n, &cap, pat + i, 1) < 0) goto fail;
        i++;
    }
    if (!b && buf_add(&b, &n, &cap, "", 0) < 0) goto fail;
    return b;
fail:
    mem_free(b);
    return NULL;
}

int tok_regex_compile(TokRegex *r, const char *pattern, bool literal, const char *source) {
    memset(r, 0, sizeof *r);
    char *pat = literal ? mem_strdup(pattern) : rewrite_for_js(pattern);
    if (!pat) return -1;
    int errcode;
    PCRE2_SIZE erroff;
    /* PCRE2_LITERAL refuses PCRE2_UCP (no classes to widen anyway). */
    uint32_t opts = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    r->code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff, NULL);
    mem_free(pat);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return error_set("%s: invalid regex at offset %zu: %s", source, (size_t)erroff, (const char *)msg);
    }
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void tok_regex_free(TokRegex *r) {
    if (r->code) pcre2_code_free(r->code);
    r->code = NULL;
}

int tok_regex_foreach(const TokRegex *r, const char *s, size_t len,
                      int (*fn)(size_t start, size_t end, void *ctx), void *ctx) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->code, NULL);
    if (!md) return error_set("tokenizer: out of memory for regex match data");
    size_t pos = 0;
    int status = 0;
    while (pos <= len) {
        int rc = r->jit ? pcre2_jit_match(r->code, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL)
                        : pcre2_match(r->code, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            status = error_set("tokenizer: regex match failed at byte %zu: %s", pos, (const char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (fn(a, b, ctx) < 0) {
            status = -1;
            break;
        }
        if (b > a) pos = b;
        else {
            /* Empty match: step over one code point, as JavaScript's matchAll with /u. */
            if (b >= len) break;
            unsigned char c = (unsigned char)s[b];
            pos = b + (c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4);
        }
    }
    pcre2_match_data_free(md);
    return status;
}

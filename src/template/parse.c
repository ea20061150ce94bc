/* parse.c: source text -> syntax tree for chat templates.
 * Three stages, each mirroring @huggingface/jinja (the reference the tests
 * compare against) so whitespace comes out byte-identical:
 *   1. preprocess: drop one trailing newline, lstrip_blocks, trim_blocks,
 *      remove transformers' {% generation %} tags; a map keeps every byte's
 *      offset in the original source for line:column in errors;
 *   2. lex: text / {{ }} / {% %} / {# #} with `-` whitespace control;
 *   3. parse: recursive descent with Jinja's precedence, depth-bounded.
 * Unknown statements, filters and tests are compile errors with line:col. */
#include "template/ast.h"
#include "base/alloc.h"
#include "base/error.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- allocator */

struct Block {
    Block *next;
    size_t used, cap;
    max_align_t data[];
};

void *ct_alloc(ChatTemplate *t, size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    Block *b = t->blocks;
    if (!b || b->cap - b->used < bytes) {
        size_t cap = bytes > 65536 ? bytes : 65536;
        b = mem_alloc(sizeof(Block) + cap);
        if (!b) return NULL;
        b->next = t->blocks;
        b->used = 0;
        b->cap = cap;
        t->blocks = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += bytes;
    memset(p, 0, bytes);
    return p;
}

static char *ct_strndup(ChatTemplate *t, const char *s, size_t n) {
    char *d = ct_alloc(t, n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}


/* ---------------------------------------------------------------- preprocess */

typedef struct {
    char *s;
    uint32_t *at;
    size_t n;
} Src;

static int src_new(Src *d, size_t cap) {
    d->s = mem_alloc(cap + 1);
    d->at = mem_alloc((cap + 1) * sizeof(uint32_t));
    d->n = 0;
    if (!d->s || !d->at) {
        mem_free(d->s);
        mem_free(d->at);
        d->s = NULL;
        d->at = NULL;
        return -1;
    }
    return 0;
}
static void src_free(Src *d) {
    mem_free(d->s);
    mem_free(d->at);
    d->s = NULL;
    d->at = NULL;
}
static void src_put(Src *d, const Src *from, size_t i) {
    d->s[d->n] = from->s[i];
    d->at[d->n] = from->at[i];
    d->n++;
}
static void src_finish(Src *d, uint32_t end_at) {
    d->s[d->n] = 0;
    d->at[d->n] = end_at;
}

static bool line_start(const Src *a, size_t i) {
    if (i == 0) return true;
    unsigned char c = (unsigned char)a->s[i - 1];
    if (c == '\n' || c == '\r') return true;
    return i >= 3 && (unsigned char)a->s[i - 3] == 0xE2 && (unsigned char)a->s[i - 2] == 0x80 &&
        (c == 0xA8 || c == 0xA9);
}

/* lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1" */
static int pass_lstrip(Src *out, const Src *in) {
    TRY(src_new(out, in->n));
    for (size_t i = 0; i < in->n;) {
        if (line_start(in, i)) {
            size_t j = i;
            while (j < in->n && (in->s[j] == ' ' || in->s[j] == '\t')) j++;
            if (j + 1 < in->n && in->s[j] == '{' && strchr("#%-", in->s[j + 1]) && in->s[j + 1]) i = j;
        }
        src_put(out, in, i++);
    }
    src_finish(out, in->at[in->n]);
    return 0;
}

/* trim_blocks: /([#%-]})\n/g -> "$1" */
static int pass_trim(Src *out, const Src *in) {
    TRY(src_new(out, in->n));
    for (size_t i = 0; i < in->n; i++) {
        if (in->s[i] == '\n' && i >= 2 && in->s[i - 1] == '}' && in->s[i - 2] && strchr("#%-", in->s[i - 2])) continue;
        src_put(out, in, i);
    }
    src_finish(out, in->at[in->n]);
    return 0;
}

/* Matches /{%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/ at i: returns the end of
 * the tag (before the trailing whitespace) or 0. */
static size_t match_generation(const Src *in, size_t i, bool *lstrip, bool *rstrip) {
    const char *s = in->s;
    size_t n = in->n, k = i + 2, w;
    if (!(s[i] == '{' && i + 1 < n && s[i + 1] == '%')) return 0;
    *lstrip = k < n && s[k] == '-';
    if (*lstrip) k++;
    while (k < n && (w = ct_ws_at(s, n, k))) k += w;
    if (n - k >= 3 && !memcmp(s + k, "end", 3)) k += 3;
    if (n - k < 10 || memcmp(s + k, "generation", 10)) return 0;
    k += 10;
    while (k < n && (w = ct_ws_at(s, n, k))) k += w;
    *rstrip = k < n && s[k] == '-';
    if (*rstrip) k++;
    if (n - k < 2 || s[k] != '%' || s[k + 1] != '}') return 0;
    return k + 2;
}

static int pass_generation(Src *out, const Src *in) {
    TRY(src_new(out, in->n));
    size_t out_last = 0; /* output length after the previous match */
    for (size_t i = 0; i < in->n;) {
        bool ls, rs;
        size_t end = in->s[i] == '{' ? match_generation(in, i, &ls, &rs) : 0;
        if (!end) {
            src_put(out, in, i++);
            continue;
        }
        if (ls)
            while (out->n > out_last && ct_ws_at(out->s, out->n, out->n - 1) == 1) out->n--;
        size_t w;
        i = end;
        while (i < in->n && (w = ct_ws_at(in->s, in->n, i))) {
            if (!rs)
                for (size_t q = 0; q < w; q++) src_put(out, in, i + q);
            i += w;
        }
        out_last = out->n;
    }
    src_finish(out, in->at[in->n]);
    return 0;
}

/* ---------------------------------------------------------------- lexer */

typedef enum {
    T_TEXT,
    T_NUM,
    T_STR,
    T_IDENT,
    T_EQUALS,
    T_LPAREN,
    T_RPAREN,
    T_OPEN_STMT,
    T_CLOSE_STMT,
    T_OPEN_EXPR,
    T_CLOSE_EXPR,
    T_LBRACKET,
    T_RBRACKET,
    T_LBRACE,
    T_RBRACE,
    T_COMMA,
    T_DOT,
    T_COLON,
    T_PIPE,
    T_ADD,
    T_MUL,
    T_POW,
    T_CMP,
    T_UNARY,
    T_COMMENT,
    T_EOF,
} TokType;

typedef struct {
    TokType type;
    const char *val;
    size_t len;
    size_t at;
} Token;

typedef struct {
    ChatTemplate *t;
    const char *source; /* original, for line:col */
    Src src; /* preprocessed */
    Token *toks;
    size_t n, cap;
    size_t pos; /* parser cursor */
    int depth;
} Parser;


static uint32_t orig_offset(const Parser *p, size_t at) { return p->src.at[at < p->src.n ? at : p->src.n]; }

static void where(const Parser *p, size_t at, uint32_t *line, uint32_t *col) {
    ct_where(p->source, orig_offset(p, at), line, col);
}

static int fail_at(const Parser *p, size_t at, const char *fmt, const char *a, const char *b) {
    uint32_t line, col;
    where(p, at, &line, &col);
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
    return error_set("%s: %u:%u: %s", p->t->name, line, col, msg);
}

static int push_tok(Parser *p, TokType type, const char *val, size_t len, size_t at) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        Token *nt = mem_realloc(p->toks, cap * sizeof(Token));
        if (!nt) return -1;
        p->toks = nt;
        p->cap = cap;
    }
    p->toks[p->n++] = (Token){type, val, len, at};
    return 0;
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static void strip_last_text(Parser *p) {
    if (p->n == 0 || p->toks[p->n - 1].type != T_TEXT) return;
    Token *tk = &p->toks[p->n - 1];
    size_t w;
    while (tk->len > 0 && (w = ct_ws_before(tk->val, tk->len))) tk->len -= w;
    if (tk->len == 0) p->n--;
}

static int lex_string(Parser *p, size_t *ip, char quote) {
    const char *s = p->src.s;
    size_t n = p->src.n, start = *ip - 1, i = *ip;
    size_t end = i; /* the closing quote bounds the decoded length */
    while (end < n && s[end] != quote) end += (s[end] == '\\' && end + 1 < n) ? 2 : 1;
    char *buf = ct_alloc(p->t, end - i + 1);
    if (!buf) return -1;
    size_t len = 0;
    for (;;) {
        if (i >= n) return fail_at(p, start, "unterminated string literal%s%s", NULL, NULL);
        char c = s[i];
        if (c == quote) break;
        i++;
        if (c != '\\') {
            buf[len++] = c;
            continue;
        }
        if (i >= n) return fail_at(p, start, "unterminated string literal%s%s", NULL, NULL);
        char e = s[i++];
        switch (e) {
        case 'n':
            buf[len++] = '\n';
            break;
        case 't':
            buf[len++] = '\t';
            break;
        case 'r':
            buf[len++] = '\r';
            break;
        case 'b':
            buf[len++] = '\b';
            break;
        case 'f':
            buf[len++] = '\f';
            break;
        case 'v':
            buf[len++] = '\v';
            break;
        case '\'':
        case '"':
        case '\\':
            buf[len++] = e;
            break;
        case 'x':
        case 'u': {
            int hl = e == 'x' ? 2 : 4;
            unsigned cp = 0;
            for (int k = 0; k < hl; k++) {
                char h = i + k < n ? s[i + k] : 0;
                int v = is_digit(h)          ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
                if (v < 0)
                    return fail_at(p, i - 2, "invalid hexadecimal escape sequence in string literal%s%s", NULL, NULL);
                cp = cp * 16 + (unsigned)v;
            }
            i += hl;
            if (cp < 0x80)
                buf[len++] = (char)cp;
            else if (cp < 0x800) {
                buf[len++] = (char)(0xC0 | (cp >> 6));
                buf[len++] = (char)(0x80 | (cp & 63));
            } else {
                buf[len++] = (char)(0xE0 | (cp >> 12));
                buf[len++] = (char)(0x80 | ((cp >> 6) & 63));
                buf[len++] = (char)(0x80 | (cp & 63));
            }
            break;
        }
        default: {
            char esc[2] = {e, 0};
            return fail_at(p, i - 2, "unsupported escape '\\%s' in string literal%s", esc, NULL);
        }
        }
    }
    buf[len] = 0;
    *ip = i + 1;
    return push_tok(p, T_STR, buf, len, start);
}

static int lex(Parser *p) {
    const char *s = p->src.s;
    size_t n = p->src.n, i = 0;
    int curly = 0;
    static const struct {
        const char *seq;
        TokType type;
    } table[] = {
        {"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR}, {"(", T_LPAREN},
        {")", T_RPAREN},     {"{", T_LBRACE},      {"}", T_RBRACE},     {"[", T_LBRACKET},    {"]", T_RBRACKET},
        {",", T_COMMA},      {".", T_DOT},         {":", T_COLON},      {"|", T_PIPE},        {"<=", T_CMP},
        {">=", T_CMP},       {"==", T_CMP},        {"!=", T_CMP},       {"<", T_CMP},         {">", T_CMP},
        {"+", T_ADD},        {"-", T_ADD},         {"~", T_ADD},        {"**", T_POW},        {"*", T_MUL},
        {"//", T_MUL},       {"/", T_MUL},         {"%", T_MUL},        {"=", T_EQUALS},
    };
    while (i < n) {
        TokType last = p->n ? p->toks[p->n - 1].type : T_EOF;
        bool in_text = p->n == 0 || last == T_CLOSE_STMT || last == T_CLOSE_EXPR || last == T_COMMENT;
        if (in_text) {
            size_t end = i;
            for (;;) {
                const char *q = memchr(s + end, '{', n - end);
                if (!q) {
                    end = n;
                    break;
                }
                end = (size_t)(q - s);
                if (end + 1 < n && (s[end + 1] == '%' || s[end + 1] == '{' || s[end + 1] == '#')) break;
                end++;
            }
            if (end > i) {
                TRY(push_tok(p, T_TEXT, s + i, end - i, i));
                i = end;
                continue;
            }
        }
        if (s[i] == '{' && i + 1 < n) {
            char nx = s[i + 1];
            if (nx == '#') {
                size_t start = i;
                i += 2;
                bool strip_before = i < n && s[i] == '-';
                if (strip_before) i++;
                const char *q = NULL;
                for (size_t k = i; k + 1 < n; k++)
                    if (s[k] == '#' && s[k + 1] == '}') {
                        q = s + k;
                        break;
                    }
                if (!q) return fail_at(p, start, "unterminated comment (missing #})%s%s", NULL, NULL);
                size_t end = (size_t)(q - s);
                bool strip_after = end > i && s[end - 1] == '-';
                if (strip_before) strip_last_text(p);
                TRY(push_tok(p, T_COMMENT, s + i, 0, start));
                i = end + 2;
                size_t w;
                if (strip_after)
                    while (i < n && (w = ct_ws_at(s, n, i))) i += w;
                continue;
            }
            if (i + 2 < n && s[i + 2] == '-' && (nx == '%' || nx == '{')) {
                strip_last_text(p);
                TRY(push_tok(p, nx == '%' ? T_OPEN_STMT : T_OPEN_EXPR, s + i, 2, i));
                if (nx == '{') curly = 0;
                i += 3;
                continue;
            }
        }
        size_t w;
        while (i < n && (w = ct_ws_at(s, n, i))) i += w;
        if (i >= n) return fail_at(p, n, "unexpected end of template (unclosed tag)%s%s", NULL, NULL);
        char c = s[i];
        if (c == '-' && i + 2 < n && s[i + 2] == '}' && (s[i + 1] == '%' || s[i + 1] == '}')) {
            TRY(push_tok(p, s[i + 1] == '%' ? T_CLOSE_STMT : T_CLOSE_EXPR, s + i + 1, 2, i));
            i += 3;
            while (i < n && (w = ct_ws_at(s, n, i))) i += w;
            continue;
        }
        if (c == '-' || c == '+') {
            if (last == T_TEXT || last == T_EOF)
                return fail_at(p, i, "unexpected character '%s'%s", c == '-' ? "-" : "+", NULL);
            if (!(last == T_IDENT || last == T_NUM || last == T_STR || last == T_RPAREN || last == T_RBRACKET)) {
                size_t start = i++;
                while (i < n && is_digit(s[i])) i++;
                if (i > start + 1 && i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
                    i++;
                    while (i < n && is_digit(s[i])) i++;
                }
                TRY(push_tok(p, i > start + 1 ? T_NUM : T_UNARY, s + start, i - start, start));
                continue;
            }
        }
        bool matched = false;
        for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
            size_t l = strlen(table[k].seq);
            if (table[k].type == T_CLOSE_EXPR && curly > 0) continue;
            if (n - i >= l && !memcmp(s + i, table[k].seq, l)) {
                TRY(push_tok(p, table[k].type, s + i, l, i));
                if (table[k].type == T_OPEN_EXPR)
                    curly = 0;
                else if (table[k].type == T_LBRACE)
                    curly++;
                else if (table[k].type == T_RBRACE)
                    curly--;
                i += l;
                matched = true;
                break;
            }
        }
        if (matched) continue;
        if (c == '\'' || c == '"') {
            i++;
            TRY(lex_string(p, &i, c));
            continue;
        }
        if (is_digit(c)) {
            size_t start = i;
            while (i < n && is_digit(s[i])) i++;
            if (last != T_DOT && i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
                i++;
                while (i < n && is_digit(s[i])) i++;
            }
            TRY(push_tok(p, T_NUM, s + start, i - start, start));
            continue;
        }
        if (is_word(c)) {
            size_t start = i;
            while (i < n && is_word(s[i])) i++;
            TRY(push_tok(p, T_IDENT, s + start, i - start, start));
            continue;
        }
        char bad[8] = {0};
        size_t bl = 1;
        while (bl < 4 && i + bl < n && ((unsigned char)s[i + bl] & 0xC0) == 0x80) bl++;
        memcpy(bad, s + i, bl);
        return fail_at(p, i, "unexpected character '%s'%s", bad, NULL);
    }
    return push_tok(p, T_EOF, "", 0, n);
}

/* ---------------------------------------------------------------- parser */

static Token *peek(Parser *p) { return &p->toks[p->pos]; }
static bool is(Parser *p, TokType t) { return p->toks[p->pos].type == t; }
static bool tok_is_word(const Token *tk, const char *w) {
    return tk->type == T_IDENT && tk->len == strlen(w) && !memcmp(tk->val, w, tk->len);
}
static bool is_ident(Parser *p, const char *w) { return tok_is_word(peek(p), w); }
static bool is_ident2(Parser *p, const char *a, const char *b) {
    return p->toks[p->pos].type != T_EOF && tok_is_word(&p->toks[p->pos], a) && tok_is_word(&p->toks[p->pos + 1], b);
}
/* {% NAME where NAME is one of the NULL-terminated names */
static bool is_statement(Parser *p, const char *const *names) {
    if (!is(p, T_OPEN_STMT)) return false;
    for (; *names; names++)
        if (tok_is_word(&p->toks[p->pos + 1], *names)) return true;
    return false;
}

static const char *tok_name(TokType t) {
    static const char *names[] = {"text",       "number",
                                  "string",     "name",
                                  "'='",        "'('",
                                  "')'",        "'{%'",
                                  "'%}'",       "'{{'",
                                  "'}}'",       "'['",
                                  "']'",        "'{'",
                                  "'}'",        "','",
                                  "'.'",        "':'",
                                  "'|'",        "operator",
                                  "operator",   "'**'",
                                  "comparison", "unary operator",
                                  "comment",    "end of template"};
    return names[t];
}

static int expect(Parser *p, TokType t) {
    if (is(p, t)) {
        p->pos++;
        return 0;
    }
    char what[64];
    snprintf(what, sizeof what, "%s", tok_name(t));
    return fail_at(p, peek(p)->at, "expected %s, got %s", what, tok_name(peek(p)->type));
}

static int expect_word(Parser *p, const char *w) {
    if (is_ident(p, w)) {
        p->pos++;
        return 0;
    }
    return fail_at(p, peek(p)->at, "expected '%s', got %s", w, tok_name(peek(p)->type));
}

static Node *node(Parser *p, NodeKind kind, size_t at) {
    Node *nd = ct_alloc(p->t, sizeof(Node));
    if (!nd) return NULL;
    nd->kind = kind;
    nd->off = orig_offset(p, at);
    return nd;
}

/* Makes the constant of a literal node once, at compile time. */
static int set_lit(Parser *p, Node *nd) {
    ChatTemplate *t = p->t;
    json_t *j = nd->kind == E_STR ? json_stringn_nocheck(nd->str, nd->len)
        : nd->kind == E_INT       ? json_integer(nd->ival)
                                  : json_real(nd->fval);
    if (!j) return error_set("%s: out of memory", t->name);
    if (t->n_lits == t->cap_lits) {
        size_t cap = t->cap_lits ? t->cap_lits * 2 : 64;
        json_t **nl = mem_realloc(t->lits, cap * sizeof(json_t *));
        if (!nl) {
            json_decref(j);
            return -1;
        }
        t->lits = nl;
        t->cap_lits = cap;
    }
    t->lits[t->n_lits++] = j;
    /* Immortal, as jansson's own true/false/null: incref/decref only read the
     * count, so renders on several threads share the constant without a race. */
    j->refcount = (size_t)-1;
    nd->lit = j;
    return 0;
}

/* growable list of nodes in the block allocator */
typedef struct {
    Node **v;
    size_t n, cap;
} NodeList;
static int list_push(Parser *p, NodeList *l, Node *x) {
    if (!x) return -1;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        Node **nv = ct_alloc(p->t, cap * sizeof(Node *));
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, l->n * sizeof(Node *));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static Node *parse_expression(Parser *p);
static Node *parse_statement(Parser *p);
static Node *parse_primary(Parser *p);

static bool enter(Parser *p) {
    if (++p->depth > CHAT_TEMPLATE_MAX_DEPTH) {
        char lim[32];
        snprintf(lim, sizeof lim, "%d", CHAT_TEMPLATE_MAX_DEPTH);
        fail_at(p, peek(p)->at, "nesting deeper than the limit of %s levels%s", lim, NULL);
        return false;
    }
    return true;
}

/* Parses statements until {% one-of-names %}; names end with NULL. */
static int parse_body(Parser *p, const char *const *names, NodeList *out, const char *block, size_t opened_at) {
    while (!is_statement(p, names)) {
        if (is(p, T_EOF)) {
            char want[64];
            snprintf(want, sizeof want, "%s", names[0]);
            uint32_t l, c;
            where(p, opened_at, &l, &c);
            char at[40];
            snprintf(at, sizeof at, "%u:%u", l, c);
            char msg[160];
            snprintf(msg, sizeof msg, "%s' block opened at %s (expected {%% %s %%})", block, at, want);
            return fail_at(p, peek(p)->at, "unterminated '%s%s", msg, NULL);
        }
        TRY(list_push(p, out, parse_statement(p)));
    }
    return 0;
}

static int parse_args(Parser *p, NodeList *args, bool parameters) {
    TRY(expect(p, T_LPAREN));
    bool saw_kw = false;
    while (!is(p, T_RPAREN)) {
        if (is(p, T_POW) || (is(p, T_MUL) && peek(p)->len == 1 && peek(p)->val[0] == '*'))
            return fail_at(p, peek(p)->at, "argument unpacking (* / **) is not supported%s%s", NULL, NULL);
        if (is(p, T_EOF)) return fail_at(p, peek(p)->at, "unexpected end of template in argument list%s%s", NULL, NULL);
        size_t at = peek(p)->at;
        Node *arg = parse_expression(p);
        if (!arg) return -1;
        if (is(p, T_EQUALS)) {
            p->pos++;
            if (arg->kind != E_IDENT) return fail_at(p, at, "expected a name before '='%s%s", NULL, NULL);
            Node *kw = node(p, E_KWARG, at);
            if (!kw) return -1;
            kw->str = arg->str;
            kw->len = arg->len;
            if (!(kw->a = parse_expression(p))) return -1;
            arg = kw;
            saw_kw = true;
        } else if (saw_kw) {
            return fail_at(p, at, "%s%s",
                           parameters ? "non-default parameter follows default parameter"
                                      : "positional argument follows keyword argument",
                           NULL);
        }
        if (parameters && arg->kind != E_IDENT && arg->kind != E_KWARG)
            return fail_at(p, at, "expected a parameter name%s%s", NULL, NULL);
        TRY(list_push(p, args, arg));
        if (is(p, T_COMMA))
            p->pos++;
        else if (!is(p, T_RPAREN))
            return fail_at(p, peek(p)->at, "expected ',' or ')', got %s%s", tok_name(peek(p)->type), NULL);
    }
    p->pos++;
    return 0;
}

static Node *parse_sequence(Parser *p, bool primary) {
    size_t at = peek(p)->at;
    Node *first = primary ? parse_primary(p) : parse_expression(p);
    if (!first || !is(p, T_COMMA)) return first;
    NodeList l = {0};
    if (list_push(p, &l, first) < 0) return NULL;
    while (is(p, T_COMMA)) {
        p->pos++;
        if (is(p, T_RPAREN) || is(p, T_CLOSE_STMT) || is_ident(p, "in") || is(p, T_EQUALS)) break;
        if (list_push(p, &l, primary ? parse_primary(p) : parse_expression(p)) < 0) return NULL;
    }
    Node *t = node(p, E_TUPLE, at);
    if (t) {
        t->list = l.v;
        t->n = l.n;
    }
    return t;
}

static Node *parse_member(Parser *p, Node *obj) {
    while (obj && (is(p, T_DOT) || is(p, T_LBRACKET))) {
        size_t at = peek(p)->at;
        bool computed = is(p, T_LBRACKET);
        p->pos++;
        if (!computed) {
            Token *tk = peek(p);
            Node *m = node(p, E_MEMBER, at);
            if (!m) return NULL;
            m->a = obj;
            if (tk->type == T_IDENT) {
                Node *prop = node(p, E_STR, tk->at);
                if (!prop) return NULL;
                prop->str = ct_strndup(p->t, tk->val, tk->len);
                prop->len = tk->len;
                if (!prop->str || set_lit(p, prop) < 0) return NULL;
                m->b = prop;
            } else if (tk->type == T_NUM && !memchr(tk->val, '.', tk->len) && tk->val[0] != '-') {
                Node *prop = node(p, E_INT, tk->at);
                if (!prop) return NULL;
                prop->ival = strtoll(tk->val, NULL, 10);
                if (set_lit(p, prop) < 0) return NULL;
                m->b = prop;
            } else {
                fail_at(p, tk->at, "expected a name after '.'%s%s", NULL, NULL);
                return NULL;
            }
            p->pos++;
            obj = m;
            continue;
        }
        /* [expr] or a slice [a:b:c] */
        Node *parts[3] = {0};
        size_t count = 0;
        bool slice = false;
        while (!is(p, T_RBRACKET)) {
            if (is(p, T_EOF)) {
                fail_at(p, at, "unclosed '['%s%s", NULL, NULL);
                return NULL;
            }
            if (count == 3) {
                fail_at(p, at, "a slice takes at most 3 parts%s%s", NULL, NULL);
                return NULL;
            }
            if (is(p, T_COLON)) {
                parts[count++] = NULL;
                p->pos++;
                slice = true;
                continue;
            }
            Node *e = parse_expression(p);
            if (!e) return NULL;
            parts[count++] = e;
            if (is(p, T_COLON)) {
                p->pos++;
                slice = true;
            } else if (!is(p, T_RBRACKET)) {
                fail_at(p, peek(p)->at, "expected ']', got %s%s", tok_name(peek(p)->type), NULL);
                return NULL;
            }
        }
        if (count == 0) {
            fail_at(p, at, "empty subscript []%s%s", NULL, NULL);
            return NULL;
        }
        p->pos++;
        Node *m = node(p, slice ? E_SLICE : E_MEMBER, at);
        if (!m) return NULL;
        m->a = obj;
        if (slice) {
            m->list = ct_alloc(p->t, 3 * sizeof(Node *));
            if (!m->list) return NULL;
            for (int k = 0; k < 3; k++) m->list[k] = parts[k];
            m->n = 3;
        } else {
            m->b = parts[0];
            m->ival = 1;
        }
        obj = m;
    }
    return obj;
}

static Node *parse_call_member(Parser *p) {
    Node *e = parse_member(p, parse_primary(p));
    while (e && is(p, T_LPAREN)) {
        Node *call = node(p, E_CALL, peek(p)->at);
        if (!call) return NULL;
        call->a = e;
        NodeList args = {0};
        if (parse_args(p, &args, false) < 0) return NULL;
        call->list = args.v;
        call->n = args.n;
        e = parse_member(p, call);
    }
    return e;
}

static Node *parse_unary_sign(Parser *p) {
    Token *tk = peek(p);
    if ((tk->type == T_UNARY || tk->type == T_ADD) && tk->len == 1 && (tk->val[0] == '-' || tk->val[0] == '+')) {
        if (!enter(p)) return NULL;
        p->pos++;
        Node *u = node(p, E_UNARY, tk->at);
        if (!u) return NULL;
        u->op = tk->val[0];
        u->a = parse_unary_sign(p);
        p->depth--;
        return u->a ? u : NULL;
    }
    return parse_call_member(p);
}

/* A filter's or a test's name (`what`, known to `known`) and its arguments
 * in parentheses if any: node `kind` without its operand; *called: there
 * were parentheses. `after` ends the message when the name is missing
 * (" after '|'"). */
static Node *parse_named_call(Parser *p, NodeKind kind, const char *what, const char *after,
                              bool (*known)(const char *), bool *called) {
    Token *tk = peek(p);
    if (tk->type != T_IDENT) {
        fail_at(p, tk->at, "expected a %s name%s", what, after);
        return NULL;
    }
    char *name = ct_strndup(p->t, tk->val, tk->len);
    if (!name) return NULL;
    if (!known(name)) {
        fail_at(p, tk->at, "unknown %s '%s'", what, name);
        return NULL;
    }
    p->pos++;
    Node *f = node(p, kind, tk->at);
    if (!f) return NULL;
    f->str = name;
    f->len = tk->len;
    *called = is(p, T_LPAREN);
    if (*called) {
        NodeList args = {0};
        if (parse_args(p, &args, false) < 0) return NULL;
        f->list = args.v;
        f->n = args.n;
    }
    return f;
}

static Node *parse_filter(Parser *p) {
    Node *e = parse_unary_sign(p);
    while (e && is(p, T_PIPE)) {
        p->pos++;
        bool called;
        Node *f = parse_named_call(p, E_FILTER, "filter", " after '|'", ct_filter_known, &called);
        if (!f) return NULL;
        f->a = e;
        f->ival = called;
        e = f;
    }
    return e;
}

static Node *parse_test(Parser *p) {
    Node *e = parse_filter(p);
    while (e && is_ident(p, "is")) {
        p->pos++;
        bool neg = is_ident(p, "not");
        if (neg) p->pos++;
        bool called;
        Node *t = parse_named_call(p, E_TEST, "test", " after 'is'", ct_test_known, &called);
        if (!t) return NULL;
        t->a = e;
        t->ival = neg;
        e = t;
    }
    return e;
}

static Node *binary(Parser *p, int op, Node *l, Node *r, size_t at) {
    if (!l || !r) return NULL;
    Node *b = node(p, E_BINARY, at);
    if (b) {
        b->op = op;
        b->a = l;
        b->b = r;
    }
    return b;
}

static Node *parse_power(Parser *p) {
    Node *e = parse_test(p);
    while (e && is(p, T_POW)) {
        size_t at = peek(p)->at;
        p->pos++;
        e = binary(p, OP_POW, e, parse_test(p), at);
    }
    return e;
}

static Node *parse_mul(Parser *p) {
    Node *e = parse_power(p);
    while (e && is(p, T_MUL)) {
        Token *tk = peek(p);
        int op = tk->len == 2 ? OP_FLOORDIV : tk->val[0] == '*' ? OP_MUL : tk->val[0] == '/' ? OP_DIV : OP_MOD;
        p->pos++;
        e = binary(p, op, e, parse_power(p), tk->at);
    }
    return e;
}

static Node *parse_add(Parser *p) {
    Node *e = parse_mul(p);
    while (e && is(p, T_ADD)) {
        Token *tk = peek(p);
        int op = tk->val[0] == '+' ? OP_ADD : tk->val[0] == '-' ? OP_SUB : OP_CONCAT;
        p->pos++;
        e = binary(p, op, e, parse_mul(p), tk->at);
    }
    return e;
}

static Node *parse_compare(Parser *p) {
    Node *e = parse_add(p);
    while (e) {
        Token *tk = peek(p);
        int op;
        if (is_ident2(p, "not", "in")) {
            op = OP_NOT_IN;
            p->pos += 2;
        } else if (is_ident(p, "in")) {
            op = OP_IN;
            p->pos++;
        } else if (is(p, T_CMP)) {
            const char *v = tk->val;
            op = v[0] == '='  ? OP_EQ
                : v[0] == '!' ? OP_NE
                : v[0] == '<' ? (tk->len == 2 ? OP_LE : OP_LT)
                              : (tk->len == 2 ? OP_GE : OP_GT);
            p->pos++;
        } else
            break;
        e = binary(p, op, e, parse_add(p), tk->at);
    }
    return e;
}

static Node *parse_not(Parser *p) {
    if (is_ident(p, "not")) {
        if (!enter(p)) return NULL;
        size_t at = peek(p)->at;
        p->pos++;
        Node *u = node(p, E_UNARY, at);
        if (!u) return NULL;
        u->op = 'n';
        u->a = parse_not(p);
        p->depth--;
        return u->a ? u : NULL;
    }
    return parse_compare(p);
}

static Node *parse_and(Parser *p) {
    Node *e = parse_not(p);
    while (e && is_ident(p, "and")) {
        size_t at = peek(p)->at;
        p->pos++;
        e = binary(p, OP_AND, e, parse_not(p), at);
    }
    return e;
}

static Node *parse_or(Parser *p) {
    Node *e = parse_and(p);
    while (e && is_ident(p, "or")) {
        size_t at = peek(p)->at;
        p->pos++;
        e = binary(p, OP_OR, e, parse_and(p), at);
    }
    return e;
}

static Node *parse_if_expr(Parser *p) {
    Node *a = parse_or(p);
    if (a && is_ident(p, "if")) {
        size_t at = peek(p)->at;
        p->pos++;
        Node *test = parse_or(p);
        if (!test) return NULL;
        if (is_ident(p, "else")) {
            p->pos++;
            Node *t = node(p, E_TERNARY, at);
            if (!t) return NULL;
            t->a = test;
            t->b = a;
            if (!(t->c = parse_if_expr(p))) return NULL;
            return t;
        }
        Node *s = node(p, E_SELECT, at);
        if (!s) return NULL;
        s->a = a;
        s->b = test;
        return s;
    }
    return a;
}

static Node *parse_expression(Parser *p) {
    if (!enter(p)) return NULL;
    Node *e = parse_if_expr(p);
    p->depth--;
    return e;
}

static Node *parse_primary(Parser *p) {
    Token *tk = peek(p);
    switch (tk->type) {
    case T_NUM: {
        p->pos++;
        char buf[64];
        size_t l = tk->len < sizeof buf - 1 ? tk->len : sizeof buf - 1;
        memcpy(buf, tk->val, l);
        buf[l] = 0;
        bool is_float = memchr(tk->val, '.', tk->len) != NULL;
        Node *nd = node(p, is_float ? E_FLOAT : E_INT, tk->at);
        if (!nd) return NULL;
        if (is_float)
            nd->fval = strtod(buf, NULL);
        else {
            char *end;
            long long v = strtoll(buf, &end, 10);
            if ((v == LLONG_MAX || v == LLONG_MIN) && tk->len > 18) {
                fail_at(p, tk->at, "integer literal %s is too large%s", buf, NULL);
                return NULL;
            }
            nd->ival = v;
        }
        return set_lit(p, nd) < 0 ? NULL : nd;
    }
    case T_STR: {
        size_t total = 0, k = p->pos;
        while (p->toks[k].type == T_STR) total += p->toks[k++].len;
        char *buf = ct_alloc(p->t, total + 1);
        if (!buf) return NULL;
        size_t off = 0;
        while (is(p, T_STR)) {
            memcpy(buf + off, peek(p)->val, peek(p)->len);
            off += peek(p)->len;
            p->pos++;
        }
        Node *nd = node(p, E_STR, tk->at);
        if (!nd) return NULL;
        nd->str = buf;
        nd->len = total;
        return set_lit(p, nd) < 0 ? NULL : nd;
    }
    case T_IDENT: {
        p->pos++;
        static const struct {
            const char *w;
            NodeKind k;
            int v;
        } lits[] = {
            {"true", E_BOOL, 1},  {"True", E_BOOL, 1}, {"false", E_BOOL, 0},
            {"False", E_BOOL, 0}, {"none", E_NONE, 0}, {"None", E_NONE, 0},
        };
        for (size_t k = 0; k < sizeof lits / sizeof lits[0]; k++)
            if (tok_is_word(tk, lits[k].w)) {
                Node *nd = node(p, lits[k].k, tk->at);
                if (nd) nd->ival = lits[k].v;
                return nd;
            }
        Node *nd = node(p, E_IDENT, tk->at);
        if (!nd) return NULL;
        nd->str = ct_strndup(p->t, tk->val, tk->len);
        nd->len = tk->len;
        return nd->str ? nd : NULL;
    }
    case T_LPAREN: {
        p->pos++;
        Node *e = parse_sequence(p, false);
        if (!e || expect(p, T_RPAREN) < 0) return NULL;
        return e;
    }
    case T_LBRACKET: {
        p->pos++;
        NodeList l = {0};
        while (!is(p, T_RBRACKET)) {
            if (is(p, T_EOF)) {
                fail_at(p, tk->at, "unclosed '['%s%s", NULL, NULL);
                return NULL;
            }
            if (list_push(p, &l, parse_expression(p)) < 0) return NULL;
            if (is(p, T_COMMA))
                p->pos++;
            else if (!is(p, T_RBRACKET)) {
                fail_at(p, peek(p)->at, "expected ',' or ']', got %s%s", tok_name(peek(p)->type), NULL);
                return NULL;
            }
        }
        p->pos++;
        Node *nd = node(p, E_ARRAY, tk->at);
        if (nd) {
            nd->list = l.v;
            nd->n = l.n;
        }
        return nd;
    }
    case T_LBRACE: {
        p->pos++;
        NodeList keys = {0}, vals = {0};
        while (!is(p, T_RBRACE)) {
            if (is(p, T_EOF)) {
                fail_at(p, tk->at, "unclosed '{'%s%s", NULL, NULL);
                return NULL;
            }
            if (list_push(p, &keys, parse_expression(p)) < 0) return NULL;
            if (expect(p, T_COLON) < 0) return NULL;
            if (list_push(p, &vals, parse_expression(p)) < 0) return NULL;
            if (is(p, T_COMMA))
                p->pos++;
            else if (!is(p, T_RBRACE)) {
                fail_at(p, peek(p)->at, "expected ',' or '}', got %s%s", tok_name(peek(p)->type), NULL);
                return NULL;
            }
        }
        p->pos++;
        Node *nd = node(p, E_OBJECT, tk->at);
        if (nd) {
            nd->list = keys.v;
            nd->n = keys.n;
            nd->list2 = vals.v;
            nd->n2 = vals.n;
        }
        return nd;
    }
    default:
        fail_at(p, tk->at, "unexpected %s in expression%s", tok_name(tk->type), NULL);
        return NULL;
    }
}

/* ---------------------------------------------------------------- statements */

static Node *parse_set(Parser *p, size_t at) {
    Node *s = node(p, N_SET, at);
    if (!s || !(s->a = parse_sequence(p, false))) return NULL;
    Node *target = s->a;
    if (target->kind != E_IDENT && target->kind != E_TUPLE && !(target->kind == E_MEMBER && !target->ival)) {
        fail_at(p, at, "cannot assign to this expression in {%% set %%}%s%s", NULL, NULL);
        return NULL;
    }
    if (is(p, T_EQUALS)) {
        p->pos++;
        if (!(s->b = parse_sequence(p, false))) return NULL;
    } else {
        if (expect(p, T_CLOSE_STMT) < 0) return NULL;
        static const char *const endset[] = {"endset", NULL};
        NodeList body = {0};
        if (parse_body(p, endset, &body, "set", at) < 0) return NULL;
        s->list = body.v;
        s->n = body.n;
        p->pos++;
        if (expect_word(p, "endset") < 0) return NULL;
    }
    if (expect(p, T_CLOSE_STMT) < 0) return NULL;
    return s;
}

static Node *parse_if_rest(Parser *p, size_t at) {
    Node *s = node(p, N_IF, at);
    if (!s || !(s->a = parse_expression(p)) || expect(p, T_CLOSE_STMT) < 0) return NULL;
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    NodeList body = {0}, alt = {0};
    if (parse_body(p, stops, &body, "if", at) < 0) return NULL;
    if (is_statement(p, (const char *const[]){"elif", NULL})) {
        size_t eat = peek(p)->at;
        p->pos += 2;
        if (!enter(p)) return NULL;
        Node *nested = parse_if_rest(p, eat);
        p->depth--;
        if (list_push(p, &alt, nested) < 0) return NULL;
    } else if (is_statement(p, (const char *const[]){"else", NULL})) {
        p->pos += 2;
        if (expect(p, T_CLOSE_STMT) < 0) return NULL;
        if (parse_body(p, endif, &alt, "if", at) < 0) return NULL;
    }
    s->list = body.v;
    s->n = body.n;
    s->list2 = alt.v;
    s->n2 = alt.n;
    return s;
}

static Node *parse_for(Parser *p, size_t at) {
    Node *s = node(p, N_FOR, at);
    if (!s || !(s->a = parse_sequence(p, true))) return NULL;
    if (s->a->kind != E_IDENT && s->a->kind != E_TUPLE) {
        fail_at(p, at, "expected loop variable name(s)%s%s", NULL, NULL);
        return NULL;
    }
    for (size_t k = 0; s->a->kind == E_TUPLE && k < s->a->n; k++)
        if (s->a->list[k]->kind != E_IDENT) {
            fail_at(p, at, "expected loop variable name(s)%s%s", NULL, NULL);
            return NULL;
        }
    if (expect_word(p, "in") < 0) return NULL;
    Node *it = parse_expression(p);
    if (!it) return NULL;
    if (it->kind == E_SELECT) {
        s->b = it->a;
        s->c = it->b;
    } else
        s->b = it;
    if (is_ident(p, "recursive")) {
        fail_at(p, peek(p)->at, "recursive loops are not supported%s%s", NULL, NULL);
        return NULL;
    }
    if (expect(p, T_CLOSE_STMT) < 0) return NULL;
    static const char *const stops[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    NodeList body = {0}, alt = {0};
    if (parse_body(p, stops, &body, "for", at) < 0) return NULL;
    if (is_statement(p, (const char *const[]){"else", NULL})) {
        p->pos += 2;
        if (expect(p, T_CLOSE_STMT) < 0) return NULL;
        if (parse_body(p, endfor, &alt, "for", at) < 0) return NULL;
    }
    s->list = body.v;
    s->n = body.n;
    s->list2 = alt.v;
    s->n2 = alt.n;
    return s;
}

static Node *parse_statement_inner(Parser *p) {
    Token *tk = peek(p);
    switch (tk->type) {
    case T_COMMENT:
        p->pos++;
        return node(p, N_TEXT, tk->at); /* renders as "" */
    case T_TEXT: {
        p->pos++;
        Node *nd = node(p, N_TEXT, tk->at);
        if (!nd) return NULL;
        nd->str = ct_strndup(p->t, tk->val, tk->len);
        nd->len = tk->len;
        return nd->str ? nd : NULL;
    }
    case T_OPEN_EXPR: {
        p->pos++;
        Node *nd = node(p, N_OUTPUT, tk->at);
        if (!nd || !(nd->a = parse_expression(p)) || expect(p, T_CLOSE_EXPR) < 0) return NULL;
        return nd;
    }
    case T_OPEN_STMT: break;
    default:
        fail_at(p, tk->at, "unexpected %s%s", tok_name(tk->type), NULL);
        return NULL;
    }
    size_t at = tk->at;
    p->pos++;
    Token *nm = peek(p);
    if (nm->type != T_IDENT) {
        fail_at(p, nm->at, "expected a statement name after '{%%', got %s%s", tok_name(nm->type), NULL);
        return NULL;
    }
    char name[48];
    size_t nl = nm->len < sizeof name - 1 ? nm->len : sizeof name - 1;
    memcpy(name, nm->val, nl);
    name[nl] = 0;
    p->pos++;
    if (!strcmp(name, "set")) return parse_set(p, at);
    if (!strcmp(name, "if")) {
        Node *s = parse_if_rest(p, at);
        if (!s) return NULL;
        p->pos++; /* {% */
        if (expect_word(p, "endif") < 0 || expect(p, T_CLOSE_STMT) < 0) return NULL;
        return s;
    }
    if (!strcmp(name, "for")) {
        Node *s = parse_for(p, at);
        if (!s) return NULL;
        p->pos++;
        if (expect_word(p, "endfor") < 0 || expect(p, T_CLOSE_STMT) < 0) return NULL;
        return s;
    }
    if (!strcmp(name, "macro")) {
        Token *mt = peek(p);
        if (mt->type != T_IDENT) {
            fail_at(p, mt->at, "expected a macro name%s%s", NULL, NULL);
            return NULL;
        }
        Node *s = node(p, N_MACRO, at);
        if (!s) return NULL;
        s->str = ct_strndup(p->t, mt->val, mt->len);
        s->len = mt->len;
        p->pos++;
        NodeList params = {0}, body = {0};
        if (parse_args(p, &params, true) < 0 || expect(p, T_CLOSE_STMT) < 0) return NULL;
        static const char *const endmacro[] = {"endmacro", NULL};
        if (parse_body(p, endmacro, &body, "macro", at) < 0) return NULL;
        p->pos += 2;
        if (expect(p, T_CLOSE_STMT) < 0) return NULL;
        s->list = body.v;
        s->n = body.n;
        s->list2 = params.v;
        s->n2 = params.n;
        return s;
    }
    if (!strcmp(name, "call")) {
        Node *s = node(p, N_CALLBLOCK, at);
        if (!s) return NULL;
        NodeList params = {0}, body = {0};
        if (is(p, T_LPAREN) && parse_args(p, &params, true) < 0) return NULL;
        Node *callee = parse_primary(p);
        if (!callee) return NULL;
        if (callee->kind != E_IDENT || !is(p, T_LPAREN)) {
            fail_at(p, at, "expected a macro call after {%% call%s%s", NULL, NULL);
            return NULL;
        }
        Node *call = node(p, E_CALL, at);
        NodeList args = {0};
        if (!call || parse_args(p, &args, false) < 0 || expect(p, T_CLOSE_STMT) < 0) return NULL;
        call->a = callee;
        call->list = args.v;
        call->n = args.n;
        static const char *const endcall[] = {"endcall", NULL};
        if (parse_body(p, endcall, &body, "call", at) < 0) return NULL;
        p->pos += 2;
        if (expect(p, T_CLOSE_STMT) < 0) return NULL;
        s->a = call;
        s->list = body.v;
        s->n = body.n;
        s->list2 = params.v;
        s->n2 = params.n;
        return s;
    }
    if (!strcmp(name, "filter")) {
        bool called;
        Node *f = parse_named_call(p, E_FILTER, "filter", "", ct_filter_known, &called);
        if (!f) return NULL;
        f->ival = called;
        if (expect(p, T_CLOSE_STMT) < 0) return NULL;
        Node *s = node(p, N_FILTERBLOCK, at);
        NodeList body = {0};
        static const char *const endfilter[] = {"endfilter", NULL};
        if (!s || parse_body(p, endfilter, &body, "filter", at) < 0) return NULL;
        p->pos += 2;
        if (expect(p, T_CLOSE_STMT) < 0) return NULL;
        s->a = f;
        s->list = body.v;
        s->n = body.n;
        return s;
    }
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (expect(p, T_CLOSE_STMT) < 0) return NULL;
        return node(p, name[0] == 'b' ? N_BREAK : N_CONTINUE, at);
    }
    static const char *const closers[] = {"endif",     "endfor", "endset", "endmacro", "endcall",
                                          "endfilter", "elif",   "else",   NULL};
    for (const char *const *c = closers; *c; c++)
        if (!strcmp(name, *c)) {
            fail_at(p, at, "unexpected {%% %s %%} without a matching opening block%s", name, NULL);
            return NULL;
        }
    fail_at(p, at, "unsupported statement '%s'%s", name, NULL);
    return NULL;
}

static Node *parse_statement(Parser *p) {
    if (!enter(p)) return NULL;
    Node *s = parse_statement_inner(p);
    p->depth--;
    return s;
}

/* ---------------------------------------------------------------- API */

void chat_template_free(ChatTemplate *t) {
    if (!t) return;
    for (Block *b = t->blocks, *next; b; b = next) {
        next = b->next;
        mem_free(b);
    }
    for (size_t i = 0; i < t->n_lits; i++) {
        t->lits[i]->refcount = 1;
        json_decref(t->lits[i]);
    }
    mem_free(t->lits);
    mem_free(t->name);
    mem_free(t->source);
    mem_free(t);
}

int chat_template_compile(ChatTemplate **out, const char *source, const char *name) {
    *out = NULL;
    if (!name) name = "chat template";
    if (!source) return error_set("%s: no template text", name);
    size_t n = strlen(source);
    if (n > CHAT_TEMPLATE_MAX_OUTPUT) return error_set("%s: template of %zu bytes is too large", name, n);
    ChatTemplate *t = mem_calloc(1, sizeof *t);
    if (!t) return -1;
    if (!(t->name = mem_strdup(name))) {
        mem_free(t);
        return -1;
    }

    Parser p = {.t = t, .source = source};
    Src a = {0}, b = {0};
    int rc = -1;
    if (!(t->source = mem_strdup(source))) goto done;
    if (src_new(&a, n) < 0) goto done;
    for (size_t i = 0; i < n; i++) {
        a.s[i] = source[i];
        a.at[i] = (uint32_t)i;
    }
    a.n = n;
    if (a.n && a.s[a.n - 1] == '\n') a.n--;
    src_finish(&a, (uint32_t)a.n);
    if (pass_lstrip(&b, &a) < 0) goto done;
    src_free(&a);
    if (pass_trim(&a, &b) < 0) goto done;
    src_free(&b);
    if (pass_generation(&b, &a) < 0) goto done;
    src_free(&a);
    p.src = b;
    b = (Src){0};

    if (lex(&p) < 0) goto done;
    NodeList body = {0};
    while (!is(&p, T_EOF))
        if (list_push(&p, &body, parse_statement(&p)) < 0) goto done;
    t->body = body.v;
    t->n_body = body.n;
    rc = 0;
done:
    src_free(&a);
    src_free(&b);
    src_free(&p.src);
    mem_free(p.toks);
    if (rc < 0) {
        chat_template_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

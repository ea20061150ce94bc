/* value.c: runtime values of chat templates (jansson values
 * plus undefined, namespaces, macros and builtins): truthiness, equality,
 * the string form that {{ }} prints, and JSON text the way
 * @huggingface/jinja's `tojson` writes it (Python json.dumps separators:
 * ", " and ": ", or "," and ": " with an indent; non-ASCII kept unless
 * ensure_ascii). Also the output buffer and call arguments. */
#include "template/runtime.h"
#include "base/alloc.h"
#include "base/error.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Value v_undef(void) { return (Value){.k = V_UNDEF}; }
Value v_json(json_t *j) { return j ? (Value){.k = V_JSON, .j = j} : v_undef(); }
Value v_copy(Value v) {
    if (v.j) json_incref(v.j);
    return v;
}
void v_free(Value *v) {
    if (v->j) json_decref(v->j);
    *v = v_undef();
}
bool v_is_str(Value v) { return v.k == V_JSON && json_is_string(v.j); }
bool v_is_num(Value v) { return v.k == V_JSON && json_is_number(v.j); }
bool v_is_int(Value v) { return v.k == V_JSON && json_is_integer(v.j); }
bool v_is_obj(Value v) { return (v.k == V_JSON || v.k == V_NS) && json_is_object(v.j); }
bool v_is_arr(Value v) { return v.k == V_JSON && json_is_array(v.j); }
const char *v_str(Value v) { return json_string_value(v.j); }
size_t v_len(Value v) { return json_string_length(v.j); }

double v_num(Value v) {
    if (v.k != V_JSON) return 0;
    if (json_is_integer(v.j)) return (double)json_integer_value(v.j);
    if (json_is_real(v.j)) return json_real_value(v.j);
    if (json_is_boolean(v.j)) return json_is_true(v.j);
    return 0;
}

bool v_truthy(Value v) {
    switch (v.k) {
    case V_UNDEF: return false;
    case V_NS: case V_MACRO: case V_FUNC: case V_LOOP: return true;
    case V_JSON: break;
    }
    switch (json_typeof(v.j)) {
    case JSON_OBJECT: return json_object_size(v.j) > 0;
    case JSON_ARRAY: return json_array_size(v.j) > 0;
    case JSON_STRING: return json_string_length(v.j) > 0;
    case JSON_INTEGER: return json_integer_value(v.j) != 0;
    case JSON_REAL: return json_real_value(v.j) != 0;
    case JSON_TRUE: return true;
    default: return false;
    }
}

const char *v_type(Value v) {
    switch (v.k) {
    case V_UNDEF: return "undefined";
    case V_NS: return "namespace";
    case V_MACRO: return "macro";
    case V_FUNC: return "function";
    case V_LOOP: return "loop";
    case V_JSON: break;
    }
    switch (json_typeof(v.j)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "float";
    case JSON_TRUE: case JSON_FALSE: return "boolean";
    default: return "none";
    }
}

static bool is_scalar_num(Value v) { return v.k == V_JSON && (json_is_number(v.j) || json_is_boolean(v.j)); }

/* JavaScript's Number(string) for the loose comparison of a string and a number. */
static double js_number(const char *s, size_t n, bool *ok) {
    size_t i = 0, w;
    while (i < n && (w = ct_ws_at(s, n, i))) i += w;
    size_t e = n;
    while (e > i && (w = ct_ws_before(s, e))) e -= w;
    *ok = true;
    if (e == i) return 0;
    char buf[64];
    if (e - i >= sizeof buf) {
        *ok = false;
        return 0;
    }
    memcpy(buf, s + i, e - i);
    buf[e - i] = 0;
    char *end;
    double d = strtod(buf, &end);
    if (*end) *ok = false;
    return d;
}

bool v_equal(Value a, Value b) {
    bool a_nullish = a.k == V_UNDEF || (a.k == V_JSON && json_is_null(a.j));
    bool b_nullish = b.k == V_UNDEF || (b.k == V_JSON && json_is_null(b.j));
    if (a_nullish || b_nullish) return a_nullish && b_nullish;
    if (a.k != V_JSON || b.k != V_JSON) return a.k == b.k && a.j == b.j && a.macro == b.macro && a.fn == b.fn;
    if (json_is_string(a.j) && json_is_string(b.j))
        return json_string_length(a.j) == json_string_length(b.j) &&
               !memcmp(json_string_value(a.j), json_string_value(b.j), json_string_length(a.j));
    if (is_scalar_num(a) && is_scalar_num(b)) return v_num(a) == v_num(b);
    if ((json_is_string(a.j) && is_scalar_num(b)) || (is_scalar_num(a) && json_is_string(b.j))) {
        Value s = json_is_string(a.j) ? a : b, x = json_is_string(a.j) ? b : a;
        bool ok;
        double d = js_number(v_str(s), v_len(s), &ok);
        return ok && d == v_num(x);
    }
    return a.j == b.j;  /* arrays and objects: identity */
}

bool v_strict_equal(Value a, Value b) {
    if (a.k == V_UNDEF || b.k == V_UNDEF) return a.k == b.k;
    if (a.k != V_JSON || b.k != V_JSON) return a.j == b.j && a.k == b.k;
    if (json_is_number(a.j) && json_is_number(b.j)) return v_num(a) == v_num(b);
    if (json_typeof(a.j) != json_typeof(b.j)) return false;
    if (json_is_string(a.j)) return v_equal(a, b);
    if (json_is_null(a.j) || json_is_boolean(a.j)) return true;
    return a.j == b.j;
}

json_t *v_to_json(Value v) {
    if (v.k == V_JSON || v.k == V_NS) return json_incref(v.j);
    if (v.k == V_LOOP) return loop_object(v);
    return json_null();
}

json_t *loop_field(Value loop, const char *name, bool *oom) {
    size_t i = (size_t)loop.fn, n = json_array_size(loop.j);
    json_t *f = NULL;
    *oom = false;
    if (!strcmp(name, "previtem")) return i > 0 ? json_incref(json_array_get(loop.j, i - 1)) : NULL;
    if (!strcmp(name, "nextitem")) return i + 1 < n ? json_incref(json_array_get(loop.j, i + 1)) : NULL;
    if (!strcmp(name, "first")) return json_boolean(i == 0);
    if (!strcmp(name, "last")) return json_boolean(i + 1 == n);
    if (!strcmp(name, "index")) f = json_integer((json_int_t)i + 1);
    else if (!strcmp(name, "index0")) f = json_integer((json_int_t)i);
    else if (!strcmp(name, "revindex")) f = json_integer((json_int_t)(n - i));
    else if (!strcmp(name, "revindex0")) f = json_integer((json_int_t)(n - i - 1));
    else if (!strcmp(name, "length")) f = json_integer((json_int_t)n);
    else return NULL;
    *oom = f == NULL;
    return f;
}

json_t *loop_object(Value loop) {
    static const char *const fields[] = {"index", "index0", "revindex", "revindex0", "first",
                                         "last", "length", "previtem", "nextitem"};
    json_t *o = json_object();
    for (size_t k = 0; o && k < sizeof fields / sizeof fields[0]; k++) {
        bool oom;
        json_t *f = loop_field(loop, fields[k], &oom);
        if (oom || (f && json_object_set_new(o, fields[k], f) < 0)) {
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

/* ---------------------------------------------------------------- buffers */

int buf_put(Buf *b, const char *s, size_t n) {
    if (n == 0) return 0;
    if (b->len + n > CHAT_TEMPLATE_MAX_OUTPUT)
        return error_set("chat template: output limit of %u bytes exceeded", (unsigned)CHAT_TEMPLATE_MAX_OUTPUT);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *ns = mem_realloc(b->s, cap);
        if (!ns) return -1;
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return 0;
}
int buf_str(Buf *b, const char *s) { return buf_put(b, s, strlen(s)); }

/* ---------------------------------------------------------------- numbers */

/* Shortest text that reads back as x; integral values as "1.0" when
 * python_float (Python's and the reference's float printing), else "1". */
int real_to_string(char *out, size_t cap, double x, bool python_float) {
    if (isnan(x)) return snprintf(out, cap, "NaN");
    if (isinf(x)) return snprintf(out, cap, x > 0 ? "Infinity" : "-Infinity");
    if (x == floor(x) && fabs(x) < 1e16) {
        if (x == 0 && signbit(x)) return snprintf(out, cap, python_float ? "-0.0" : "0");
        return snprintf(out, cap, python_float ? "%.1f" : "%.0f", x);
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, x);
        if (strtod(out, NULL) == x) break;
    }
    /* JavaScript writes exponents without a leading zero: 1e-7, 1e+21 */
    char *e = strchr(out, 'e');
    if (e && (e[1] == '-' || e[1] == '+') && e[2] == '0') memmove(e + 2, e + 3, strlen(e + 3) + 1);
    return (int)strlen(out);
}

/* Python's repr() of a float: shortest round-trip digits, fixed notation for
 * exponents in [-4, 16), else d.dddde+XX (two-digit exponents, unlike JavaScript). */
static int py_float(char *out, size_t cap, double x) {
    if (isnan(x)) return snprintf(out, cap, "nan");
    if (isinf(x)) return snprintf(out, cap, x > 0 ? "inf" : "-inf");
    if (x == floor(x) && fabs(x) < 1e16) return snprintf(out, cap, "%.1f", x);
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, x);
        if (strtod(out, NULL) == x) break;
    }
    return (int)strlen(out);
}

/* Python's repr() of a string: single quotes unless the text has a single
 * quote and no double quote; backslash, the quote, \t \n \r and other C0/C1
 * controls and DEL escaped; the other code points kept (Python also escapes
 * the non-printable ones, e.g. U+00A0: escaped here are the common ones, the
 * format and separator characters of the JavaScript whitespace set). */
static int py_str(Buf *b, const char *s, size_t n) {
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    if (buf_put(b, &q, 1) < 0) return -1;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t next = utf8_next(s, n, i);
        uint32_t cp = c;
        if (c >= 0x80 && next - i == 2) cp = (uint32_t)(c & 0x1f) << 6 | ((unsigned char)s[i + 1] & 0x3f);
        if (c >= 0x80 && next - i == 3)
            cp = (uint32_t)(c & 0x0f) << 12 | (uint32_t)((unsigned char)s[i + 1] & 0x3f) << 6 |
                 ((unsigned char)s[i + 2] & 0x3f);
        char esc[16] = "";
        if (c == '\\' || c == (unsigned char)q) snprintf(esc, sizeof esc, "\\%c", c);
        else if (c == '\t') snprintf(esc, sizeof esc, "\\t");
        else if (c == '\n') snprintf(esc, sizeof esc, "\\n");
        else if (c == '\r') snprintf(esc, sizeof esc, "\\r");
        else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) snprintf(esc, sizeof esc, "\\x%02x", cp);
        else if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
                 (cp >= 0x205f && cp <= 0x2064) || cp == 0x3000 || cp == 0xfeff)
            snprintf(esc, sizeof esc, "\\u%04x", cp);
        int rc = esc[0] ? buf_str(b, esc) : buf_put(b, s + i, next - i);
        if (rc < 0) return -1;
        i = next;
    }
    return buf_put(b, &q, 1);
}

int v_to_python_repr(Buf *b, json_t *j) {
    char num[64];
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if (buf_str(b, "{") < 0) return -1;
        const char *k;
        json_t *v;
        bool first = true;
        json_object_foreach(j, k, v) {
            if (!first && buf_str(b, ", ") < 0) return -1;
            first = false;
            if (py_str(b, k, strlen(k)) < 0 || buf_str(b, ": ") < 0 || v_to_python_repr(b, v) < 0) return -1;
        }
        return buf_str(b, "}");
    }
    case JSON_ARRAY:
        if (buf_str(b, "[") < 0) return -1;
        for (size_t i = 0; i < json_array_size(j); i++) {
            if (i && buf_str(b, ", ") < 0) return -1;
            if (v_to_python_repr(b, json_array_get(j, i)) < 0) return -1;
        }
        return buf_str(b, "]");
    case JSON_STRING: return py_str(b, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(j));
        return buf_str(b, num);
    case JSON_REAL:
        py_float(num, sizeof num, json_real_value(j));
        return buf_str(b, num);
    case JSON_TRUE: return buf_str(b, "True");
    case JSON_FALSE: return buf_str(b, "False");
    default: return buf_str(b, "None");
    }
}

/* ---------------------------------------------------------------- UTF-8 */


static unsigned utf8_decode(const char *s, size_t n, size_t i, size_t *next) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[i];
    size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + len > n) len = n - i;
    unsigned cp = len == 1 ? c : len == 2 ? (c & 31) : len == 3 ? (c & 15) : (c & 7);
    for (size_t k = 1; k < len; k++) cp = (cp << 6) | (u[i + k] & 63);
    *next = i + len;
    return cp;
}

/* ---------------------------------------------------------------- JSON text */

static int json_string_write(Buf *b, const char *s, size_t n, bool ensure_ascii) {
    TRY(buf_put(b, "\"", 1));
    size_t run = 0;  /* start of pending bytes that need no escape */
    char esc[16];
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *rep = NULL;
        size_t next = i + 1;
        switch (c) {
        case '"':
            rep = "\\\"";
            break;
        case '\\':
            rep = "\\\\";
            break;
        case '\b':
            rep = "\\b";
            break;
        case '\f':
            rep = "\\f";
            break;
        case '\n':
            rep = "\\n";
            break;
        case '\r':
            rep = "\\r";
            break;
        case '\t':
            rep = "\\t";
            break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                rep = esc;
            } else if (ensure_ascii && c >= 0x7F) {
                unsigned cp = utf8_decode(s, n, i, &next);
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                } else snprintf(esc, sizeof esc, "\\u%04x", cp);
                rep = esc;
            }
        }
        if (rep) {
            TRY(buf_put(b, s + run, i - run));
            TRY(buf_str(b, rep));
            run = next;
        }
        i = next;
    }
    TRY(buf_put(b, s + run, n - run));
    return buf_put(b, "\"", 1);
}

static int newline_indent(Buf *b, int indent, int depth) {
    TRY(buf_put(b, "\n", 1));
    for (long k = 0; k < (long)indent * depth; k++) TRY(buf_put(b, " ", 1));
    return 0;
}

typedef struct {
    const char *key;
    json_t *value;
} Entry;
static int entry_cmp(const void *a, const void *b) { return strcmp(((const Entry *)a)->key, ((const Entry *)b)->key); }

int json_write(Buf *b, json_t *j, const JsonStyle *st, int depth) {
    if (depth > CHAT_TEMPLATE_MAX_DEPTH)
        return error_set("chat template: tojson: value nested deeper than %d levels", CHAT_TEMPLATE_MAX_DEPTH);
    char num[64];
    switch (json_typeof(j)) {
    case JSON_NULL: return buf_str(b, "null");
    case JSON_TRUE: return buf_str(b, "true");
    case JSON_FALSE: return buf_str(b, "false");
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(j));
        return buf_str(b, num);
    case JSON_REAL:
        real_to_string(num, sizeof num, json_real_value(j), true);
        return buf_str(b, num);
    case JSON_STRING: return json_string_write(b, json_string_value(j), json_string_length(j), st->ensure_ascii);
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        TRY(buf_put(b, "[", 1));
        for (size_t i = 0; i < n; i++) {
            if (i) TRY(buf_str(b, st->item_sep));
            if (st->indent > 0) TRY(newline_indent(b, st->indent, depth + 1));
            TRY(json_write(b, json_array_get(j, i), st, depth + 1));
        }
        if (st->indent > 0 && n) TRY(newline_indent(b, st->indent, depth));
        return buf_put(b, "]", 1);
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j), k = 0;
        Entry *e = n ? mem_alloc(n * sizeof(Entry)) : NULL;
        if (n && !e) return -1;
        const char *key;
        json_t *val;
        json_object_foreach(j, key, val) {
            e[k].key = key;
            e[k].value = val;
            k++;
        }
        if (st->sort_keys) qsort(e, n, sizeof(Entry), entry_cmp);
        int rc = buf_put(b, "{", 1);
        for (size_t i = 0; i < n && rc == 0; i++) {
            if (i) rc = buf_str(b, st->item_sep);
            if (rc == 0 && st->indent > 0) rc = newline_indent(b, st->indent, depth + 1);
            if (rc == 0) rc = json_string_write(b, e[i].key, strlen(e[i].key), st->ensure_ascii);
            if (rc == 0) rc = buf_str(b, st->key_sep);
            if (rc == 0) rc = json_write(b, e[i].value, st, depth + 1);
        }
        mem_free(e);
        TRY(rc);
        if (st->indent > 0 && n) TRY(newline_indent(b, st->indent, depth));
        return buf_put(b, "}", 1);
    }
    }
    return 0;
}

int v_to_string(Buf *b, Value v) {
    static const JsonStyle plain = {0, false, false, ", ", ": "};
    char num[64];
    switch (v.k) {
    case V_UNDEF: return 0;
    case V_MACRO: return buf_str(b, "<macro>");
    case V_FUNC: return buf_str(b, "<function>");
    case V_NS: return json_write(b, v.j, &plain, 0);
    case V_LOOP: {
        json_t *o = loop_object(v);
        if (!o) return error_set("chat template: out of memory");
        int rc = json_write(b, o, &plain, 0);
        json_decref(o);
        return rc;
    }
    case V_JSON: break;
    }
    switch (json_typeof(v.j)) {
    case JSON_STRING: return buf_put(b, json_string_value(v.j), json_string_length(v.j));
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v.j));
        return buf_str(b, num);
    case JSON_REAL:
        real_to_string(num, sizeof num, json_real_value(v.j), true);
        return buf_str(b, num);
    case JSON_TRUE: return buf_str(b, "true");
    case JSON_FALSE: return buf_str(b, "false");
    case JSON_NULL: return buf_str(b, "None");
    default: return json_write(b, v.j, &plain, 0);
    }
}

/* ---------------------------------------------------------------- errors */

void args_free(Args *a) {
    for (size_t i = 0; i < a->npos; i++) v_free(&a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) v_free(&a->kwv[i]);
    a->npos = a->nkw = 0;
}

Value arg_get(Args *a, size_t index, const char *kw) {
    if (index < a->npos) return a->pos[index];
    for (size_t i = 0; kw && i < a->nkw; i++) if (!strcmp(a->kw[i], kw)) return a->kwv[i];
    return v_undef();
}

/* filters.c: what chat templates call by name: filters
 * (`x | trim`), tests (`x is defined`), methods of strings and dicts
 * (`s.strip()`, `d.items()`) and the global functions raise_exception,
 * range, namespace and strftime_now. Behaviour follows @huggingface/jinja
 * (the byte-for-byte reference of the tests), except where it drops
 * Python's arguments: strip/lstrip/rstrip honour a `chars` argument as
 * Python and transformers do. Filters are one function each, found by name
 * in FILTER_TABLE; that table and the list of tests are also what the parser
 * accepts, so an unknown filter or test is a compile error. */
#include "template/runtime.h"
#include "base/alloc.h"
#include "base/error.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const TESTS[] = {
    "boolean", "callable", "defined", "eq", "equalto", "even", "false", "float", "integer", "iterable", "lower",
    "mapping", "none", "number", "odd", "sequence", "string", "true", "undefined", "upper", NULL,
};

static bool in_list(const char *const *l, const char *name) {
    for (; *l; l++) if (!strcmp(*l, name)) return true;
    return false;
}
bool ct_test_known(const char *name) { return in_list(TESTS, name); }

/* ---------------------------------------------------------------- helpers */

static int ret_str(Ctx *c, const Node *at, const char *s, size_t n, Value *out) {
    *out = v_undef();
    TRY(count_work(c, at, n));
    *out = v_json(json_oom(c, at, json_stringn_nocheck(s ? s : "", n)));
    return out->k == V_UNDEF ? -1 : 0;
}
static int ret_buf(Ctx *c, const Node *at, Buf *b, Value *out) {
    int rc = ret_str(c, at, b->s, b->len, out);
    mem_free(b->s);
    *b = (Buf){0};
    return rc;
}
static int ret_json(Ctx *c, const Node *at, json_t *j, Value *out) {
    *out = v_json(json_oom(c, at, j));
    return out->k == V_UNDEF ? -1 : 0;
}
static bool is_nullish(Value v) { return v.k == V_UNDEF || (v.k == V_JSON && json_is_null(v.j)); }
static bool arg_bool(Value v, bool dflt) { return v.k == V_UNDEF ? dflt : v_truthy(v); }
static int to_string_value(Ctx *c, const Node *at, Value x, Value *out) {
    Buf b = {0};
    if (v_to_string(&b, x) < 0) {
        mem_free(b.s);
        return rt_error(c, at, "%s", error_message());
    }
    return ret_buf(c, at, &b, out);
}

/* Whitespace trimming (JavaScript's trim) or, with chars, Python's strip(chars). */
static void strip_bounds(const char *s, size_t n, Value chars, bool left, bool right, size_t *b, size_t *e) {
    size_t i = 0, j = n, w;
    if (v_is_str(chars)) {
        const char *set = v_str(chars);
        size_t sl = v_len(chars);
        /* chars as a set of code points */
        while (left && i < j) {
            size_t nx = utf8_next(s, j, i);
            if (!memmem(set, sl, s + i, nx - i)) break;
            i = nx;
        }
        while (right && j > i) {
            size_t st = j - 1;
            while (st > i && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
            if (!memmem(set, sl, s + st, j - st)) break;
            j = st;
        }
    } else {
        while (left && i < j && (w = ct_ws_at(s, j, i))) i += w;
        while (right && j > i && (w = ct_ws_before(s, j)) && j - w >= i) j -= w;
    }
    *b = i;
    *e = j;
}

static bool is_word_byte(unsigned char ch) { return isalnum(ch) || ch == '_'; }

/* JavaScript's replace(/\b\w/g, toUpperCase): ASCII word starts upper-cased. */
static void title_case(char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (is_word_byte((unsigned char)s[i]) && (i == 0 || !is_word_byte((unsigned char)s[i - 1])))
            s[i] = (char)toupper((unsigned char)s[i]);
}

static int str_replace(Ctx *c, const Node *at, Value self, Value old, Value neu, Value count, Value *out) {
    if (!v_is_str(old) || !v_is_str(neu)) return rt_error(c, at, "replace() arguments must be strings");
    long long left = v_is_int(count) ? json_integer_value(count.j) : -1;
    if (left < 0) left = -1;
    const char *s = v_str(self), *o = v_str(old), *r = v_str(neu);
    size_t n = v_len(self), on = v_len(old), rn = v_len(neu);
    Buf b = {0};
    int rc = 0;
    size_t i = 0;
    if (on == 0) {  /* insert between code points, as Python does */
        while (rc == 0 && i <= n) {
            if (left != 0) {
                rc = buf_put(&b, r, rn);
                if (left > 0) left--;
            }
            if (i == n) break;
            size_t nx = utf8_next(s, n, i);
            if (rc == 0) rc = buf_put(&b, s + i, nx - i);
            i = nx;
        }
    } else {
        while (rc == 0 && i < n) {
            const char *hit = left != 0 ? memmem(s + i, n - i, o, on) : NULL;
            if (!hit) {
                rc = buf_put(&b, s + i, n - i);
                break;
            }
            size_t h = (size_t)(hit - s);
            rc = buf_put(&b, s + i, h - i);
            if (rc == 0) rc = buf_put(&b, r, rn);
            i = h + on;
            if (left > 0) left--;
        }
    }
    if (rc < 0) {
        mem_free(b.s);
        return rt_error(c, at, "%s", error_message());
    }
    return ret_buf(c, at, &b, out);
}

static int str_split(Ctx *c, const Node *at, Value self, Value sep, Value maxsplit, Value *out) {
    long long max = v_is_int(maxsplit) ? json_integer_value(maxsplit.j) : -1;
    const char *s = v_str(self);
    size_t n = v_len(self);
    json_t *arr = json_array();
    if (!arr) return rt_error(c, at, "out of memory");
    int rc = 0;
    if (is_nullish(sep)) {
        size_t i = 0, w;
        while (i < n && (w = ct_ws_at(s, n, i))) i += w;
        while (i < n && rc == 0) {
            if (max >= 0 && (long long)json_array_size(arr) >= max) {
                rc = json_array_append_new(arr, json_stringn_nocheck(s + i, n - i));
                break;
            }
            size_t j = i;
            while (j < n && !ct_ws_at(s, n, j)) j++;
            rc = json_array_append_new(arr, json_stringn_nocheck(s + i, j - i));
            i = j;
            while (i < n && (w = ct_ws_at(s, n, i))) i += w;
        }
    } else if (!v_is_str(sep) || v_len(sep) == 0) {
        json_decref(arr);
        return rt_error(c, at,
                        v_is_str(sep) ? "split(): empty separator" : "split(): separator must be a string or none");
    } else {
        const char *p = v_str(sep);
        size_t pn = v_len(sep), i = 0;
        for (;;) {
            const char *hit = (max < 0 || (long long)json_array_size(arr) < max) ? memmem(s + i, n - i, p, pn) : NULL;
            size_t end = hit ? (size_t)(hit - s) : n;
            if ((rc = json_array_append_new(arr, json_stringn_nocheck(s + i, end - i))) < 0 || !hit) break;
            i = end + pn;
        }
    }
    if (rc < 0) {
        json_decref(arr);
        return rt_error(c, at, "out of memory");
    }
    *out = v_json(arr);
    return 0;
}

static int affix(Ctx *c, const Node *at, Value self, Value arg, bool suffix, Value *out) {
    const char *s = v_str(self);
    size_t n = v_len(self);
    bool hit = false;
    json_t *cands[64];
    size_t k = 0;
    if (v_is_str(arg)) cands[k++] = arg.j;
    else if (v_is_arr(arg))
        for (size_t i = 0; i < json_array_size(arg.j) && k < 64; i++) cands[k++] = json_array_get(arg.j, i);
    else
        return rt_error(c, at, "%s() argument must be a string or a tuple of strings",
                        suffix ? "endswith" : "startswith");
    for (size_t i = 0; i < k && !hit; i++) {
        if (!json_is_string(cands[i]))
            return rt_error(c, at, "%s() tuple elements must be strings", suffix ? "endswith" : "startswith");
        size_t pn = json_string_length(cands[i]);
        hit = pn <= n && !memcmp(suffix ? s + n - pn : s, json_string_value(cands[i]), pn);
    }
    *out = v_json(json_boolean(hit));
    return 0;
}

static int case_map(Ctx *c, const Node *at, Value self, int mode, Value *out) {
    size_t n = v_len(self);
    char *d = mem_alloc(n + 1);
    if (!d) return -1;
    memcpy(d, v_str(self), n);
    if (mode == 'u') for (size_t i = 0; i < n; i++) d[i] = (char)toupper((unsigned char)d[i]);
    else if (mode == 'l') for (size_t i = 0; i < n; i++) d[i] = (char)tolower((unsigned char)d[i]);
    else if (mode == 't') title_case(d, n);
    else if (mode == 'c' && n) d[0] = (char)toupper((unsigned char)d[0]);
    int rc = ret_str(c, at, d, n, out);
    mem_free(d);
    return rc;
}

static int items_of(Ctx *c, const Node *at, json_t *obj, int which, Value *out) {
    json_t *arr = json_array();
    if (!arr) return rt_error(c, at, "out of memory");
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(obj, k, v) {
        json_t *x = which == 'k' ? json_string(k) : which == 'v' ? json_incref(v) : json_pack("[sO]", k, v);
        if ((rc = json_array_append_new(arr, x)) < 0) break;
    }
    if (rc < 0) {
        json_decref(arr);
        return rt_error(c, at, "out of memory");
    }
    *out = v_json(arr);
    return 0;
}

/* ---------------------------------------------------------------- methods */

int call_method(Ctx *c, const Node *at, Value self, const char *name, Args *a, Value *out, bool *found) {
    *found = true;
    Value a0 = arg_get(a, 0, NULL), a1 = arg_get(a, 1, NULL);
    if (v_is_str(self)) {
        const char *s = v_str(self);
        size_t n = v_len(self);
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            size_t b, e;
            strip_bounds(s, n, arg_get(a, 0, "chars"), name[0] != 'r', name[0] != 'l', &b, &e);
            return ret_str(c, at, s + b, e - b, out);
        }
        if (!strcmp(name, "upper")) return case_map(c, at, self, 'u', out);
        if (!strcmp(name, "lower")) return case_map(c, at, self, 'l', out);
        if (!strcmp(name, "title")) return case_map(c, at, self, 't', out);
        if (!strcmp(name, "capitalize")) return case_map(c, at, self, 'c', out);
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            if (a->npos == 0) return rt_error(c, at, "%s() requires an argument", name);
            return affix(c, at, self, a0, name[0] == 'e', out);
        }
        if (!strcmp(name, "split")) return str_split(c, at, self, arg_get(a, 0, "sep"), arg_get(a, 1, "maxsplit"), out);
        if (!strcmp(name, "replace")) return str_replace(c, at, self, a0, a1, arg_get(a, 2, "count"), out);
        if (!strcmp(name, "join")) {  /* Python's sep.join(items) */
            if (!v_is_arr(a0)) return rt_error(c, at, "join() needs a list");
            Buf b = {0};
            int rc = 0;
            for (size_t i = 0; rc == 0 && i < json_array_size(a0.j); i++) {
                if (i) rc = buf_put(&b, s, n);
                if (rc == 0) rc = v_to_string(&b, (Value){.k = V_JSON, .j = json_array_get(a0.j, i)});
            }
            if (rc < 0) {
                mem_free(b.s);
                return rt_error(c, at, "%s", error_message());
            }
            return ret_buf(c, at, &b, out);
        }
    } else if (v_is_obj(self) && self.k == V_JSON) {
        if (!strcmp(name, "get")) {
            if (!v_is_str(a0)) return rt_error(c, at, "get(): key must be a string");
            json_t *j = json_object_get(self.j, v_str(a0));
            if (j) {
                *out = v_json(json_incref(j));
                return 0;
            }
            *out = a->npos > 1 ? v_copy(a1) : v_json(json_null());
            return 0;
        }
        if (!strcmp(name, "items")) return items_of(c, at, self.j, 'i', out);
        if (!strcmp(name, "keys")) return items_of(c, at, self.j, 'k', out);
        if (!strcmp(name, "values")) return items_of(c, at, self.j, 'v', out);
    }
    *found = false;
    return 0;
}

/* ---------------------------------------------------------------- tests */

int apply_test(Ctx *c, const Node *at, const char *name, Value x, Args *a, bool *out) {
    bool json = x.k == V_JSON;
    if (!strcmp(name, "defined")) *out = x.k != V_UNDEF;
    else if (!strcmp(name, "undefined")) *out = x.k == V_UNDEF;
    else if (!strcmp(name, "none")) *out = json && json_is_null(x.j);
    else if (!strcmp(name, "boolean")) *out = json && json_is_boolean(x.j);
    else if (!strcmp(name, "true")) *out = json && json_is_true(x.j);
    else if (!strcmp(name, "false")) *out = json && json_is_false(x.j);
    else if (!strcmp(name, "string")) *out = v_is_str(x);
    else if (!strcmp(name, "number")) *out = v_is_num(x);
    else if (!strcmp(name, "integer")) *out = v_is_int(x);
    else if (!strcmp(name, "float")) *out = json && json_is_real(x.j);
    else if (!strcmp(name, "mapping")) *out = json && json_is_object(x.j);
    else if (!strcmp(name, "iterable")) *out = v_is_arr(x) || v_is_str(x);
    else if (!strcmp(name, "sequence")) *out = v_is_arr(x) || v_is_str(x) || (json && json_is_object(x.j));
    else if (!strcmp(name, "callable")) *out = x.k == V_MACRO || x.k == V_FUNC;
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (!v_is_int(x)) return rt_error(c, at, "test '%s' needs an integer, got %s", name, v_type(x));
        *out = (json_integer_value(x.j) % 2 != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        *out = v_is_str(x);
        for (size_t i = 0; *out && i < v_len(x); i++) {
            int ch = (unsigned char)v_str(x)[i];
            *out = name[0] == 'l' ? !isupper(ch) : !islower(ch);
        }
    } else if (!strcmp(name, "eq") || !strcmp(name, "equalto")) *out = v_strict_equal(x, arg_get(a, 0, "value"));
    else return rt_error(c, at, "unknown test '%s'", name);
    return 0;
}

/* ---------------------------------------------------------------- builtins */

static int strftime_now(Ctx *c, const Node *at, Value fmt, Value *out) {
    if (!v_is_str(fmt)) return rt_error(c, at, "strftime_now() needs a format string");
    /* LMTUNE_CHAT_DATE=YYYY-MM-DD[ HH:MM] pins "now" (reproducible prompts and tests) */
    struct tm tm = {0};
    const char *pin = getenv("LMTUNE_CHAT_DATE");
    int y, mo, d, h = 0, mi = 0;
    if (pin && sscanf(pin, "%d-%d-%d %d:%d", &y, &mo, &d, &h, &mi) >= 3) {
        tm.tm_year = y - 1900;
        tm.tm_mon = mo - 1;
        tm.tm_mday = d;
        tm.tm_hour = h;
        tm.tm_min = mi;
        time_t t = timegm(&tm);
        gmtime_r(&t, &tm);
    } else {
        time_t t = time(NULL);
        localtime_r(&t, &tm);
    }
    static const char *months[] = {"January", "February", "March", "April", "May", "June", "July", "August",
                                   "September", "October", "November", "December"};
    const char *f = v_str(fmt);
    size_t n = v_len(fmt);
    Buf b = {0};
    char tmp[32];
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (f[i] != '%' || i + 1 >= n) {
            rc = buf_put(&b, f + i, 1);
            continue;
        }
        char k = f[++i];
        switch (k) {
        case 'Y':
            snprintf(tmp, sizeof tmp, "%d", tm.tm_year + 1900);
            break;
        case 'm':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_mon + 1);
            break;
        case 'd':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_mday);
            break;
        case 'H':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_hour);
            break;
        case 'M':
            snprintf(tmp, sizeof tmp, "%02d", tm.tm_min);
            break;
        case 'b':
            snprintf(tmp, sizeof tmp, "%.3s", months[tm.tm_mon]);
            break;
        case 'B':
            snprintf(tmp, sizeof tmp, "%s", months[tm.tm_mon]);
            break;
        case '%':
            snprintf(tmp, sizeof tmp, "%%");
            break;
        default: snprintf(tmp, sizeof tmp, "%%%c", k);
        }
        rc = buf_str(&b, tmp);
    }
    if (rc < 0) {
        mem_free(b.s);
        return -1;
    }
    return ret_buf(c, at, &b, out);
}

int call_builtin(Ctx *c, const Node *at, int fn, Args *a, Value *out) {
    switch (fn) {
    case F_RAISE: {
        Buf b = {0};
        if (v_to_string(&b, arg_get(a, 0, NULL)) < 0) {
            mem_free(b.s);
            return -1;
        }
        int rc = rt_error(c, at, "raise_exception: %s", b.s ? b.s : "");
        mem_free(b.s);
        return rc;
    }
    case F_RANGE: {
        long long v[3] = {0, 0, 1};
        if (a->npos < 1 || a->npos > 3) return rt_error(c, at, "range() takes 1 to 3 integer arguments");
        for (size_t i = 0; i < a->npos; i++) {
            if (!v_is_int(a->pos[i]))
                return rt_error(c, at, "range() arguments must be integers, got %s", v_type(a->pos[i]));
            v[i] = json_integer_value(a->pos[i].j);
        }
        long long start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], step = v[2];
        if (step == 0) return rt_error(c, at, "range() step must not be zero");
        double count = step > 0 ? (stop > start ? ceil(((double)stop - start) / step) : 0)
                                : (start > stop ? ceil(((double)start - stop) / -step) : 0);
        if (count > CHAT_TEMPLATE_MAX_ITERATIONS) return count_iterations(c, at, CHAT_TEMPLATE_MAX_ITERATIONS + 1);
        TRY(count_iterations(c, at, (long)count));
        json_t *arr = json_array();
        if (!arr) return rt_error(c, at, "out of memory");
        for (long long i = 0, x = start; i < (long long)count; i++, x += step)
            if (json_array_append_new(arr, json_integer(x)) < 0) {
                json_decref(arr);
                return rt_error(c, at, "out of memory");
            }
        *out = v_json(arr);
        return 0;
    }
    case F_NAMESPACE: {
        json_t *obj = json_object();
        if (!obj) return rt_error(c, at, "out of memory");
        int rc = 0;
        if (a->npos > 1) rc = rt_error(c, at, "namespace() takes at most one positional argument");
        else if (a->npos == 1) {
            if (!v_is_obj(a->pos[0])) rc = rt_error(c, at, "namespace() argument must be a dict");
            else if (json_object_update(obj, a->pos[0].j) < 0) rc = rt_error(c, at, "out of memory");
        }
        for (size_t i = 0; rc == 0 && i < a->nkw; i++) {
            Value v = a->kwv[i];
            if (v.k == V_MACRO || v.k == V_FUNC)
                rc = rt_error(c, at, "a macro or function cannot be stored in a namespace");
            else if (v.k != V_UNDEF && json_object_set_new(obj, a->kw[i], v_to_json(v)) < 0)
                rc = rt_error(c, at, "out of memory");
        }
        if (rc < 0) {
            json_decref(obj);
            return -1;
        }
        *out = (Value){.k = V_NS, .j = obj};
        return 0;
    }
    case F_STRFTIME: return strftime_now(c, at, arg_get(a, 0, NULL), out);
    }
    return rt_error(c, at, "internal error: unknown builtin");
}

/* ---------------------------------------------------------------- sorting */

typedef struct {
    Ctx *c;
    const Node *at;
    bool case_sensitive;
    int failed;
} CmpCtx;

static int cmp_values(CmpCtx *cc, json_t *x, json_t *y) {
    if (json_is_number(x) || json_is_boolean(x)) {
        if (!(json_is_number(y) || json_is_boolean(y))) goto mismatch;
        double a = v_num(v_json(x)), b = v_num(v_json(y));
        return a < b ? -1 : a > b;
    }
    if (json_is_null(x) && json_is_null(y)) return 0;
    if (json_is_string(x) && json_is_string(y)) {
        const char *a = json_string_value(x), *b = json_string_value(y);
        size_t la = json_string_length(x), lb = json_string_length(y);
        for (size_t i = 0; i < la && i < lb; i++) {
            int ca = (unsigned char)a[i], cb = (unsigned char)b[i];
            if (!cc->case_sensitive) {
                ca = tolower(ca);
                cb = tolower(cb);
            }
            if (ca != cb) return ca < cb ? -1 : 1;
        }
        return la < lb ? -1 : la > lb;
    }
mismatch:
    if (!cc->failed) rt_error(cc->c, cc->at, "sort: cannot compare these values");
    cc->failed = 1;
    return 0;
}

static json_t *attr_path(json_t *item, const char *path) {
    char part[256];
    while (item && *path) {
        size_t l = strcspn(path, ".");
        if (l >= sizeof part) return NULL;
        memcpy(part, path, l);
        part[l] = 0;
        path += l + (path[l] == '.');
        if (json_is_object(item)) item = json_object_get(item, part);
        else if (json_is_array(item)) {
            char *end;
            long idx = strtol(part, &end, 10);
            item = (*end || idx < 0) ? NULL : json_array_get(item, (size_t)idx);
        } else return NULL;
    }
    return item;
}

/* Stable merge sort of json values, by key (NULL: the value itself). */
static void merge_sort(json_t **v, json_t **tmp, size_t n, CmpCtx *cc, const char *attr, bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(v, tmp, h, cc, attr, reverse);
    merge_sort(v + h, tmp, n - h, cc, attr, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        json_t *x = attr ? attr_path(v[i], attr) : v[i], *y = attr ? attr_path(v[j], attr) : v[j];
        int r = (x && y) ? cmp_values(cc, x, y) : 0;
        if (reverse) r = -r;
        tmp[k++] = r <= 0 ? v[i++] : v[j++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof(json_t *));
}

static int sorted(Ctx *c, const Node *at, json_t *arr, bool reverse, bool case_sensitive, const char *attr,
                  Value *out) {
    size_t n = json_array_size(arr);
    json_t **v = mem_alloc((n + 1) * sizeof(json_t *)), **tmp = mem_alloc((n + 1) * sizeof(json_t *));
    if (!v || !tmp) {
        mem_free(v);
        mem_free(tmp);
        return -1;
    }
    for (size_t i = 0; i < n; i++) v[i] = json_array_get(arr, i);
    double log_n = n > 1 ? ceil(log2((double)n)) : 1;
    if (count_iterations(c, at, (long)(n * log_n)) < 0) {
        mem_free(v);
        mem_free(tmp);
        return -1;
    }
    CmpCtx cc = {c, at, case_sensitive, 0};
    merge_sort(v, tmp, n, &cc, attr, reverse);
    json_t *res = cc.failed ? NULL : json_array();
    for (size_t i = 0; res && i < n; i++)
        if (json_array_append(res, v[i]) < 0) {
            json_decref(res);
            res = NULL;
        }
    mem_free(v);
    mem_free(tmp);
    if (cc.failed) return -1;
    return ret_json(c, at, res, out);
}

/* ---------------------------------------------------------------- filters */

/* One filter: x | name(args), result in *out (V_UNDEF until set). */
typedef int (*FilterFn)(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out);

/* x as a string (s, n), or NULL when it is not one. */
static const char *str_of(Value x, size_t *n) {
    const char *s = v_is_str(x) ? v_str(x) : NULL;
    *n = s ? v_len(x) : 0;
    return s;
}

/* safe */
static int filter_safe(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)c;
    (void)at;
    (void)a;
    (void)name;
    *out = v_copy(x);
    return 0;
}

/* default, d */
static int filter_default(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)name;
    Value dflt = arg_get(a, 0, "default_value");
    bool boolean = arg_bool(arg_get(a, 1, "boolean"), false);
    if (x.k == V_UNDEF || (boolean && !v_truthy(x))) {
        if (dflt.k == V_UNDEF) return ret_str(c, at, "", 0, out);
        *out = v_copy(dflt);
    } else *out = v_copy(x);
    return 0;
}

/* tojson */
static int filter_tojson(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)name;
    Value ind = arg_get(a, (size_t)-1, "indent"), seps = arg_get(a, (size_t)-1, "separators");
    if (!(ind.k == V_UNDEF || v_is_int(ind) || is_nullish(ind)))
        return rt_error(c, at, "tojson: indent must be an integer");
    JsonStyle st = {v_is_int(ind) ? (int)json_integer_value(ind.j) : 0,
                    arg_bool(arg_get(a, (size_t)-1, "ensure_ascii"), false),
                    arg_bool(arg_get(a, (size_t)-1, "sort_keys"), false), ", ", ": "};
    if (st.indent > 0) st.item_sep = ",";
    if (st.indent > 64) st.indent = 64;
    if (v_is_arr(seps)) {
        json_t *i0 = json_array_get(seps.j, 0), *i1 = json_array_get(seps.j, 1);
        if (json_array_size(seps.j) != 2 || !json_is_string(i0) || !json_is_string(i1))
            return rt_error(c, at, "tojson: separators must be two strings");
        st.item_sep = json_string_value(i0);
        st.key_sep = json_string_value(i1);
    }
    if (x.k == V_MACRO || x.k == V_FUNC) return rt_error(c, at, "tojson: cannot serialize a %s", v_type(x));
    Buf b = {0};
    json_t *j = v_to_json(x);
    if (!j) return rt_error(c, at, "out of memory");
    int rc = json_write(&b, j, &st, 0);
    json_decref(j);
    if (rc < 0) {
        mem_free(b.s);
        return rt_error(c, at, "%s", error_message());
    }
    return ret_buf(c, at, &b, out);
}

/* length, count */
static int filter_length(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)a;
    (void)name;
    size_t n;
    const char *s = str_of(x, &n);
    long long len = s ? (long long)utf8_len(s, n) : v_is_arr(x) ? (long long)json_array_size(x.j)
                  : v_is_obj(x) ? (long long)json_object_size(x.j) : x.k == V_UNDEF ? 0 : -1;
    if (len < 0) return rt_error(c, at, "filter 'length' cannot be applied to a %s value", v_type(x));
    return ret_json(c, at, json_integer(len), out);
}

/* string */
static int filter_string(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)a;
    (void)name;
    if (x.k == V_UNDEF) return ret_str(c, at, "", 0, out);
    /* a dict or a list prints as Python's repr(), as in transformers' Jinja2 */
    if (x.k == V_JSON && (json_is_object(x.j) || json_is_array(x.j))) {
        Buf b = {0};
        if (v_to_python_repr(&b, x.j) < 0) {
            mem_free(b.s);
            return rt_error(c, at, "out of memory");
        }
        return ret_buf(c, at, &b, out);
    }
    return to_string_value(c, at, x, out);
}

/* trim */
static int filter_trim(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)name;
    size_t n;
    const char *s = str_of(x, &n);
    if (x.k == V_UNDEF) return ret_str(c, at, "", 0, out);
    if (!s) return rt_error(c, at, "filter 'trim' cannot be applied to a %s value", v_type(x));
    size_t b, e;
    strip_bounds(s, n, arg_get(a, 0, "chars"), true, true, &b, &e);
    return ret_str(c, at, s + b, e - b, out);
}

/* upper, lower, title, capitalize */
static int filter_case(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)a;
    size_t n;
    const char *s = str_of(x, &n);
    if (!s) return rt_error(c, at, "filter '%s' cannot be applied to a %s value", name, v_type(x));
    return case_map(c, at, x, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 't' : 'c', out);
}

/* replace */
static int filter_replace(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)name;
    size_t n;
    const char *s = str_of(x, &n);
    Value a0 = arg_get(a, 0, NULL);
    if (!s) return rt_error(c, at, "filter 'replace' cannot be applied to a %s value", v_type(x));
    return str_replace(c, at, x, a0, arg_get(a, 1, NULL), arg_get(a, 2, "count"), out);
}

/* indent */
static int filter_indent(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)name;
    size_t n;
    const char *s = str_of(x, &n);
    if (!s) return rt_error(c, at, "filter 'indent' cannot be applied to a %s value", v_type(x));
    Value w = arg_get(a, 0, "width");
    bool first = arg_bool(arg_get(a, 1, "first"), false), blank = arg_bool(arg_get(a, 2, "blank"), false);
    Buf pad = {0}, b = {0};
    int rc = 0;
    if (v_is_str(w)) rc = buf_put(&pad, v_str(w), v_len(w));
    else
        for (long long k = 0, wn = v_is_int(w) ? json_integer_value(w.j) : 4; rc == 0 && k < wn && k < 4096; k++)
            rc = buf_put(&pad, " ", 1);
    size_t i = 0, line = 0;
    while (rc == 0) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - s) : n;
        bool skip = (line == 0 && !first) || (end == i && !blank);
        if (!skip) rc = buf_put(&b, pad.s, pad.len);
        if (rc == 0) rc = buf_put(&b, s + i, end - i);
        if (!nl || rc) break;
        if (rc == 0) rc = buf_put(&b, "\n", 1);
        i = end + 1;
        line++;
    }
    mem_free(pad.s);
    if (rc < 0) {
        mem_free(b.s);
        return rt_error(c, at, "%s", error_message());
    }
    return ret_buf(c, at, &b, out);
}

/* int, float */
static int filter_number(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    size_t n;
    const char *s = str_of(x, &n);
    bool is_int = name[0] == 'i';
    Value dflt = arg_get(a, 0, "default");
    double d;
    if (s) {
        char buf[64];
        size_t l = n < sizeof buf - 1 ? n : sizeof buf - 1;
        memcpy(buf, s, l);
        buf[l] = 0;
        char *end;
        d = is_int ? (double)strtoll(buf, &end, 10) : strtod(buf, &end);
        if (end == buf) {
            if (dflt.k != V_UNDEF) {
                *out = v_copy(dflt);
                return 0;
            }
            d = 0;
        }
    } else if (v_is_num(x) || (x.k == V_JSON && json_is_boolean(x.j))) d = v_num(x);
    else return rt_error(c, at, "filter '%s' cannot be applied to a %s value", name, v_type(x));
    return ret_json(c, at, is_int ? json_integer((json_int_t)trunc(d)) : json_real(d), out);
}

/* abs */
static int filter_abs(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)a;
    (void)name;
    if (v_is_int(x)) return ret_json(c, at, json_integer(llabs(json_integer_value(x.j))), out);
    if (v_is_num(x)) return ret_json(c, at, json_real(fabs(v_num(x))), out);
    return rt_error(c, at, "filter 'abs' cannot be applied to a %s value", v_type(x));
}

/* bool */
static int filter_bool(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)c;
    (void)at;
    (void)a;
    (void)name;
    *out = v_json(json_boolean(v_truthy(x)));
    return 0;
}

/* items, dictsort */
static int filter_items_dictsort(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    if (x.k == V_UNDEF) return ret_json(c, at, json_array(), out);
    if (!v_is_obj(x)) return rt_error(c, at, "filter '%s' cannot be applied to a %s value", name, v_type(x));
    if (name[0] == 'i') return items_of(c, at, x.j, 'i', out);
    Value pairs;
    TRY(items_of(c, at, x.j, 'i', &pairs));
    bool by_value = v_is_str(arg_get(a, 1, "by")) && !strcmp(v_str(arg_get(a, 1, "by")), "value");
    int rc = sorted(c, at, pairs.j, arg_bool(arg_get(a, 2, "reverse"), false),
                    arg_bool(arg_get(a, 0, "case_sensitive"), false), by_value ? "1" : "0", out);
    v_free(&pairs);
    return rc;
}

/* join */
static int filter_join(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)name;
    size_t n;
    const char *s = str_of(x, &n);
    Value sep = arg_get(a, 0, "d");
    Value attr = arg_get(a, 1, "attribute");
    if (!v_is_arr(x) && !s) return rt_error(c, at, "filter 'join' cannot be applied to a %s value", v_type(x));
    Buf b = {0};
    int rc = 0;
    if (s) {
        for (size_t i = 0; rc == 0 && i < n; i = utf8_next(s, n, i)) {
            if (i && v_is_str(sep)) rc = buf_put(&b, v_str(sep), v_len(sep));
            if (rc == 0) rc = buf_put(&b, s + i, utf8_next(s, n, i) - i);
        }
    } else {
        for (size_t i = 0; rc == 0 && i < json_array_size(x.j); i++) {
            if (i && v_is_str(sep)) rc = buf_put(&b, v_str(sep), v_len(sep));
            json_t *item = json_array_get(x.j, i);
            if (v_is_str(attr)) item = attr_path(item, v_str(attr));
            if (rc == 0 && item && !json_is_null(item)) rc = v_to_string(&b, (Value){.k = V_JSON, .j = item});
        }
    }
    if (rc < 0) {
        mem_free(b.s);
        return rt_error(c, at, "%s", error_message());
    }
    return ret_buf(c, at, &b, out);
}

/* first, last */
static int filter_first_last(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)a;
    size_t n;
    const char *s = str_of(x, &n);
    bool last = name[0] == 'l';
    if (v_is_arr(x)) {
        size_t len = json_array_size(x.j);
        if (len) *out = v_json(json_incref(json_array_get(x.j, last ? len - 1 : 0)));
        return 0;
    }
    if (s) {
        if (!n) return 0;
        size_t i = 0;
        if (last) {
            i = n - 1;
            while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
        }
        return ret_str(c, at, s + i, utf8_next(s, n, i) - i, out);
    }
    return rt_error(c, at, "filter '%s' cannot be applied to a %s value", name, v_type(x));
}

/* list, reverse */
static int filter_list_reverse(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)a;
    size_t n;
    const char *s = str_of(x, &n);
    json_t *arr = json_array();
    if (!arr) return rt_error(c, at, "out of memory");
    int rc = 0;
    if (v_is_arr(x)) rc = json_array_extend(arr, x.j);
    else if (s)
        for (size_t i = 0; rc == 0 && i < n; i = utf8_next(s, n, i))
            rc = json_array_append_new(arr, json_stringn_nocheck(s + i, utf8_next(s, n, i) - i));
    else if (v_is_obj(x)) {
        const char *k;
        json_t *v;
        json_object_foreach(x.j, k, v)
            if (rc == 0) rc = json_array_append_new(arr, json_string(k));
    } else if (x.k != V_UNDEF) {
        json_decref(arr);
        return rt_error(c, at, "filter '%s' cannot be applied to a %s value", name, v_type(x));
    }
    if (rc < 0) {
        json_decref(arr);
        return rt_error(c, at, "out of memory");
    }
    if (name[0] == 'r') {
        size_t len = json_array_size(arr);
        if (s) {  /* reversed string */
            Buf b = {0};
            for (size_t i = len; rc == 0 && i-- > 0;)
                rc = v_to_string(&b, (Value){.k = V_JSON, .j = json_array_get(arr, i)});
            json_decref(arr);
            if (rc < 0) {
                mem_free(b.s);
                return -1;
            }
            return ret_buf(c, at, &b, out);
        }
        for (size_t i = 0; i < len / 2; i++) {
            json_t *p = json_incref(json_array_get(arr, i)), *q = json_incref(json_array_get(arr, len - 1 - i));
            json_array_set_new(arr, i, q);
            json_array_set_new(arr, len - 1 - i, p);
        }
    }
    *out = v_json(arr);
    return 0;
}

/* sort */
static int filter_sort(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)name;
    if (!v_is_arr(x)) return rt_error(c, at, "filter 'sort' cannot be applied to a %s value", v_type(x));
    Value attr = arg_get(a, 2, "attribute");
    char idx[32];
    const char *path = v_is_str(attr) ? v_str(attr) : NULL;
    if (v_is_int(attr)) {
        snprintf(idx, sizeof idx, "%lld", (long long)json_integer_value(attr.j));
        path = idx;
    }
    return sorted(c, at, x.j, arg_bool(arg_get(a, 0, "reverse"), false),
                  arg_bool(arg_get(a, 1, "case_sensitive"), false), path, out);
}

/* unique */
static int filter_unique(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)a;
    (void)name;
    if (!v_is_arr(x)) return rt_error(c, at, "filter 'unique' cannot be applied to a %s value", v_type(x));
    json_t *arr = json_array();
    if (!arr) return rt_error(c, at, "out of memory");
    size_t len = json_array_size(x.j);
    for (size_t i = 0; i < len; i++) {
        if (count_iterations(c, at, (long)json_array_size(arr) + 1) < 0) {
            json_decref(arr);
            return -1;
        }
        Value item = {.k = V_JSON, .j = json_array_get(x.j, i)};
        bool seen = false;
        for (size_t k = 0; k < json_array_size(arr) && !seen; k++)
            seen = v_strict_equal(item, (Value){.k = V_JSON, .j = json_array_get(arr, k)});
        if (!seen && json_array_append(arr, item.j) < 0) {
            json_decref(arr);
            return rt_error(c, at, "out of memory");
        }
    }
    *out = v_json(arr);
    return 0;
}

/* selectattr, rejectattr */
static int filter_select_reject(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    Value a0 = arg_get(a, 0, NULL);
    bool select = name[0] == 's';
    if (x.k == V_UNDEF) return ret_json(c, at, json_array(), out);
    if (!v_is_arr(x)) return rt_error(c, at, "filter '%s' cannot be applied to a %s value", name, v_type(x));
    Value attr = a0, test = arg_get(a, 1, NULL);
    if (!v_is_str(attr) || (test.k != V_UNDEF && !v_is_str(test)))
        return rt_error(c, at, "arguments of '%s' must be strings", name);
    if (test.k != V_UNDEF && !ct_test_known(v_str(test))) return rt_error(c, at, "unknown test '%s'", v_str(test));
    json_t *arr = json_array();
    if (!arr) return rt_error(c, at, "out of memory");
    Args targs = {0};
    if (a->npos > 2) {
        targs.pos[0] = a->pos[2];
        targs.npos = 1;
    }
    for (size_t i = 0; i < json_array_size(x.j); i++) {
        json_t *item = json_array_get(x.j, i);
        if (!json_is_object(item)) {
            json_decref(arr);
            return rt_error(c, at, "'%s' can only be applied to a list of objects", name);
        }
        json_t *v = attr_path(item, v_str(attr));
        bool r = false;
        if (v) {
            Value vv = {.k = V_JSON, .j = v};
            if (test.k == V_UNDEF) r = v_truthy(vv);
            else if (apply_test(c, at, v_str(test), vv, &targs, &r) < 0) {
                json_decref(arr);
                return -1;
            }
        }
        if (r == select && json_array_append(arr, item) < 0) {
            json_decref(arr);
            return rt_error(c, at, "out of memory");
        }
    }
    *out = v_json(arr);
    return 0;
}

/* map */
static int filter_map(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    (void)name;
    Value a0 = arg_get(a, 0, NULL);
    Value attr = arg_get(a, (size_t)-1, "attribute"), dflt = arg_get(a, (size_t)-1, "default");
    if (x.k == V_UNDEF) return ret_json(c, at, json_array(), out);
    if (!v_is_arr(x)) return rt_error(c, at, "filter 'map' cannot be applied to a %s value", v_type(x));
    json_t *arr = json_array();
    if (!arr) return rt_error(c, at, "out of memory");
    for (size_t i = 0; i < json_array_size(x.j); i++) {
        json_t *item = json_array_get(x.j, i), *r;
        if (v_is_str(attr)) {
            r = attr_path(item, v_str(attr));
            r = r ? json_incref(r) : v_to_json(dflt);
        } else if (v_is_str(a0) && a->npos == 1 && ct_filter_known(v_str(a0)) && strcmp(v_str(a0), "map")) {
            Value fr;
            Args none = {0};
            if (apply_filter(c, at, v_str(a0), (Value){.k = V_JSON, .j = item}, &none, &fr) < 0) {
                json_decref(arr);
                return -1;
            }
            r = v_to_json(fr);
            v_free(&fr);
        } else {
            json_decref(arr);
            return rt_error(c, at, "map: needs attribute='name' or a filter name");
        }
        if (json_array_append_new(arr, r) < 0) {
            json_decref(arr);
            return rt_error(c, at, "out of memory");
        }
    }
    *out = v_json(arr);
    return 0;
}

/* Every filter, sorted by name for bsearch (strcmp order); also what the
 * parser accepts. */
typedef struct {
    const char *name;
    FilterFn fn;
} FilterEntry;

static const FilterEntry FILTER_TABLE[] = {
    {"abs", filter_abs},
    {"bool", filter_bool},
    {"capitalize", filter_case},
    {"count", filter_length},
    {"d", filter_default},
    {"default", filter_default},
    {"dictsort", filter_items_dictsort},
    {"first", filter_first_last},
    {"float", filter_number},
    {"indent", filter_indent},
    {"int", filter_number},
    {"items", filter_items_dictsort},
    {"join", filter_join},
    {"last", filter_first_last},
    {"length", filter_length},
    {"list", filter_list_reverse},
    {"lower", filter_case},
    {"map", filter_map},
    {"rejectattr", filter_select_reject},
    {"replace", filter_replace},
    {"reverse", filter_list_reverse},
    {"safe", filter_safe},
    {"selectattr", filter_select_reject},
    {"sort", filter_sort},
    {"string", filter_string},
    {"title", filter_case},
    {"tojson", filter_tojson},
    {"trim", filter_trim},
    {"unique", filter_unique},
    {"upper", filter_case},
};
enum { FILTER_COUNT = sizeof FILTER_TABLE / sizeof FILTER_TABLE[0] };

static int filter_cmp(const void *key, const void *entry) {
    return strcmp(key, *(const char *const *)entry);
}

static FilterFn filter_find(const char *name) {
    const void *e = bsearch(name, FILTER_TABLE, FILTER_COUNT, sizeof FILTER_TABLE[0], filter_cmp);
    if (!e) {
        return NULL;
    }
    return ((const FilterEntry *)e)->fn;
}

bool ct_filter_known(const char *name) {
    return filter_find(name) != NULL;
}

int apply_filter(Ctx *c, const Node *at, const char *name, Value x, Args *a, Value *out) {
    *out = v_undef();
    FilterFn fn = filter_find(name);
    if (!fn) {
        return rt_error(c, at, "unknown filter '%s'", name);
    }
    return fn(c, at, name, x, a, out);
}

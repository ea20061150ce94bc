/* eval.c: walks the chat-template syntax tree with a context
 * object and writes the output. Scopes follow @huggingface/jinja: a `for`
 * opens one scope for the whole loop (so `set` inside does not leak out and
 * namespace() is needed to carry state), `if` opens none, a macro call opens
 * one whose parent is the scope the macro was defined in. Undefined names
 * are a value of their own: they print as "", are falsy, and any attribute
 * of them is undefined. Every render is bounded: evaluation depth (macro
 * recursion included), total loop iterations, output and string size. */
#include "template/runtime.h"
#include "base/alloc.h"
#include "base/error.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { FLOW_OK = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

static int eval(Ctx *c, Scope *s, const Node *e, Value *out);
static int exec_block(Ctx *c, Scope *s, Node *const *list, size_t n, Buf *out);

/* ---------------------------------------------------------------- scopes */

static void scope_free(Scope *s) {
    for (size_t i = 0; i < s->n; i++) v_free(&s->vars[i].v);
    mem_free(s->vars);
    s->vars = NULL;
    s->n = s->cap = 0;
}

/* Sets name in this scope; takes the value. */
static int scope_set(Scope *s, const char *name, Value v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->vars[i].name, name)) {
            v_free(&s->vars[i].v);
            s->vars[i].v = v;
            return 0;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        Var *nv = mem_realloc(s->vars, cap * sizeof(Var));
        if (!nv) {
            v_free(&v);
            return -1;
        }
        s->vars = nv;
        s->cap = cap;
    }
    s->vars[s->n++] = (Var){name, v};
    return 0;
}

static Value lookup(Ctx *c, Scope *s, const char *name) {
    for (; s; s = s->parent)
        for (size_t i = 0; i < s->n; i++)
            if (!strcmp(s->vars[i].name, name)) return v_copy(s->vars[i].v);
    json_t *j = c->context ? json_object_get(c->context, name) : NULL;
    if (j) return v_json(json_incref(j));
    static const struct {
        const char *name;
        int fn;
    } builtins[] = {
        {"raise_exception", F_RAISE},
        {"range", F_RANGE},
        {"namespace", F_NAMESPACE},
        {"strftime_now", F_STRFTIME},
    };
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (!strcmp(name, builtins[i].name)) return (Value){.k = V_FUNC, .fn = builtins[i].fn};
    return v_undef();
}

/* ---------------------------------------------------------------- helpers */

static int enter(Ctx *c, const Node *at) {
    if (++c->depth > CHAT_TEMPLATE_MAX_DEPTH * 2) {
        c->depth--;
        return rt_error(c, at, "recursion limit of %d levels exceeded", CHAT_TEMPLATE_MAX_DEPTH * 2);
    }
    return 0;
}


static Value make_string(Ctx *c, const Node *at, const char *s, size_t n) {
    if (count_work(c, at, n) < 0) return v_undef();
    json_t *j = json_oom(c, at, json_stringn_nocheck(s, n));
    return v_json(j);
}


static int eval_args(Ctx *c, Scope *s, const Node *at, Node *const *list, size_t n, Args *a) {
    a->npos = a->nkw = 0;
    for (size_t i = 0; i < n; i++) {
        if (a->npos + a->nkw >= CT_MAX_ARGS) {
            args_free(a);
            return rt_error(c, at, "more than %d arguments", CT_MAX_ARGS);
        }
        const Node *e = list[i];
        if (e->kind == E_KWARG) {
            a->kw[a->nkw] = e->str;
            if (eval(c, s, e->a, &a->kwv[a->nkw]) < 0) {
                args_free(a);
                return -1;
            }
            a->nkw++;
        } else {
            if (eval(c, s, e, &a->pos[a->npos]) < 0) {
                args_free(a);
                return -1;
            }
            a->npos++;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- members */

static int get_member(Ctx *c, const Node *at, Value obj, Value prop, Value *out) {
    *out = v_undef();
    if (obj.k == V_LOOP) {
        bool oom = false;
        if (v_is_str(prop)) *out = v_json(loop_field(obj, v_str(prop), &oom));
        return oom ? rt_error(c, at, "out of memory") : 0;
    }
    if (v_is_obj(obj)) {
        if (!v_is_str(prop)) return 0;
        json_t *j = json_object_get(obj.j, v_str(prop));
        if (j) *out = v_json(json_incref(j));
        return 0;
    }
    if (v_is_arr(obj) || v_is_str(obj)) {
        if (v_is_int(prop)) {
            long long idx = json_integer_value(prop.j);
            if (v_is_arr(obj)) {
                long long n = (long long)json_array_size(obj.j);
                if (idx < 0) idx += n;
                if (idx >= 0 && idx < n) *out = v_json(json_incref(json_array_get(obj.j, (size_t)idx)));
                return 0;
            }
            const char *s = v_str(obj);
            size_t n = v_len(obj);
            long long cps = (long long)utf8_len(s, n);
            if (idx < 0) idx += cps;
            if (idx < 0 || idx >= cps) return 0;
            size_t i = 0;
            for (long long k = 0; k < idx; k++) i = utf8_next(s, n, i);
            *out = make_string(c, at, s + i, utf8_next(s, n, i) - i);
            return out->k == V_UNDEF ? -1 : 0;
        }
        if (v_is_str(prop) && !strcmp(v_str(prop), "length")) {
            size_t len = v_is_arr(obj) ? json_array_size(obj.j) : utf8_len(v_str(obj), v_len(obj));
            *out = v_json(json_oom(c, at, json_integer((json_int_t)len)));
            return out->k == V_UNDEF ? -1 : 0;
        }
    }
    return 0;
}

/* Python slicing (start, stop, step may be undefined/none). */
static int eval_slice(Ctx *c, Scope *s, const Node *e, Value obj, Value *out) {
    long long part[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; k++) {
        if (!e->list[k]) continue;
        Value v;
        TRY(eval(c, s, e->list[k], &v));
        if (v_is_int(v)) {
            part[k] = json_integer_value(v.j);
            given[k] = true;
        } else if (!(v.k == V_UNDEF || (v.k == V_JSON && json_is_null(v.j)))) {
            v_free(&v);
            return rt_error(c, e, "slice indices must be integers");
        }
        v_free(&v);
    }
    if (!v_is_arr(obj) && !v_is_str(obj)) return rt_error(c, e, "cannot slice a value of type %s", v_type(obj));
    long long step = given[2] ? part[2] : 1;
    if (step == 0) return rt_error(c, e, "slice step cannot be zero");
    /* string slicing works on code points: index them first */
    const char *str = v_is_str(obj) ? v_str(obj) : NULL;
    size_t slen = str ? v_len(obj) : 0;
    long long n = str ? (long long)utf8_len(str, slen) : (long long)json_array_size(obj.j);
    size_t *offs = NULL;
    if (str) {
        offs = mem_alloc(((size_t)n + 1) * sizeof(size_t));
        if (!offs) return -1;
        size_t i = 0;
        for (long long k = 0; k < n; k++) {
            offs[k] = i;
            i = utf8_next(str, slen, i);
        }
        offs[n] = slen;
    }
    long long start, stop;
    if (step > 0) {
        start = !given[0] ? 0 : part[0] < 0 ? (n + part[0] > 0 ? n + part[0] : 0) : (part[0] < n ? part[0] : n);
        stop = !given[1] ? n : part[1] < 0 ? (n + part[1] > 0 ? n + part[1] : 0) : (part[1] < n ? part[1] : n);
    } else {
        start = !given[0] ? n - 1
            : part[0] < 0 ? (n + part[0] > -1 ? n + part[0] : -1)
                          : (part[0] < n - 1 ? part[0] : n - 1);
        stop = !given[1]   ? -1
            : part[1] < -1 ? (n + part[1] > -1 ? n + part[1] : -1)
                           : (part[1] < n - 1 ? part[1] : n - 1);
    }
    int rc = 0;
    if (str) {
        Buf b = {0};
        for (long long i = start; rc == 0 && (step > 0 ? i < stop : i > stop); i += step)
            rc = buf_put(&b, str + offs[i], offs[i + 1] - offs[i]);
        if (rc == 0) {
            *out = make_string(c, e, b.s ? b.s : "", b.len);
            if (out->k == V_UNDEF) rc = -1;
        }
        mem_free(b.s);
        mem_free(offs);
        return rc;
    }
    json_t *arr = json_oom(c, e, json_array());
    if (!arr) return -1;
    for (long long i = start; rc == 0 && (step > 0 ? i < stop : i > stop); i += step)
        if (json_array_append(arr, json_array_get(obj.j, (size_t)i)) < 0) rc = rt_error(c, e, "out of memory");
    if (rc < 0) {
        json_decref(arr);
        return -1;
    }
    *out = v_json(arr);
    return 0;
}

/* ---------------------------------------------------------------- operators */

static bool is_nullish(Value v) { return v.k == V_UNDEF || (v.k == V_JSON && json_is_null(v.j)); }

static int concat(Ctx *c, const Node *e, Value a, Value b, Value *out) {
    Buf buf = {0};
    int rc = v_to_string(&buf, a);
    if (rc == 0) rc = v_to_string(&buf, b);
    if (rc == 0) {
        *out = make_string(c, e, buf.s ? buf.s : "", buf.len);
        if (out->k == V_UNDEF) rc = -1;
    } else
        rt_error(c, e, "%s", error_message());
    mem_free(buf.s);
    return rc;
}

static int membership(Ctx *c, const Node *e, Value x, Value container, bool *out) {
    if (container.k == V_UNDEF) {
        *out = false;
        return 0;
    }
    if (v_is_arr(container)) {
        TRY(count_iterations(c, e, (long)json_array_size(container.j)));
        *out = false;
        for (size_t i = 0; i < json_array_size(container.j) && !*out; i++)
            *out = v_strict_equal(x, (Value){.k = V_JSON, .j = json_array_get(container.j, i)});
        return 0;
    }
    if (v_is_str(container) && v_is_str(x)) {
        *out = v_len(x) == 0 || memmem(v_str(container), v_len(container), v_str(x), v_len(x)) != NULL;
        return 0;
    }
    if (v_is_obj(container) && v_is_str(x)) {
        *out = json_object_get(container.j, v_str(x)) != NULL;
        return 0;
    }
    return rt_error(c, e, "'in' is not supported between %s and %s", v_type(x), v_type(container));
}

static int make_number(Ctx *c, const Node *e, double r, bool is_float, Value *out) {
    json_t *j;
    if (is_float) j = json_real(r);
    else {
        if (!(r >= -9.2e18 && r <= 9.2e18)) return rt_error(c, e, "integer overflow");
        j = json_integer((json_int_t)r);
    }
    *out = v_json(json_oom(c, e, j));
    return out->k == V_UNDEF ? -1 : 0;
}

static int binary(Ctx *c, Scope *s, const Node *e, Value *out) {
    Value a, b;
    TRY(eval(c, s, e->a, &a));
    if (e->op == OP_AND || e->op == OP_OR) {
        bool t = v_truthy(a);
        if ((e->op == OP_AND) != t) {
            *out = a;
            return 0;
        }
        v_free(&a);
        return eval(c, s, e->b, out);
    }
    if (eval(c, s, e->b, &b) < 0) {
        v_free(&a);
        return -1;
    }
    int rc = 0;
    bool flag = false;
    switch (e->op) {
    case OP_EQ: case OP_NE:
        flag = v_equal(a, b);
        *out = v_json(json_boolean(e->op == OP_EQ ? flag : !flag));
        break;
    case OP_IN: case OP_NOT_IN:
        rc = membership(c, e, a, b, &flag);
        if (rc == 0) *out = v_json(json_boolean(e->op == OP_IN ? flag : !flag));
        break;
    case OP_CONCAT:
        rc = concat(c, e, a, b, out);
        break;
    case OP_LT: case OP_GT: case OP_LE: case OP_GE: {
        int cmp;
        if ((v_is_num(a) || (a.k == V_JSON && json_is_boolean(a.j))) &&
            (v_is_num(b) || (b.k == V_JSON && json_is_boolean(b.j)))) {
            double x = v_num(a), y = v_num(b);
            cmp = x < y ? -1 : x > y ? 1 : 0;
        } else if (v_is_str(a) && v_is_str(b)) {
            size_t la = v_len(a), lb = v_len(b);
            cmp = memcmp(v_str(a), v_str(b), la < lb ? la : lb);
            if (cmp == 0) cmp = la < lb ? -1 : la > lb ? 1 : 0;
        } else {
            rc = rt_error(c, e, "cannot compare %s with %s", v_type(a), v_type(b));
            break;
        }
        flag = e->op == OP_LT ? cmp < 0 : e->op == OP_GT ? cmp > 0 : e->op == OP_LE ? cmp <= 0 : cmp >= 0;
        *out = v_json(json_boolean(flag));
        break;
    }
    default: {
        bool numeric = (v_is_num(a) || (a.k == V_JSON && json_is_boolean(a.j) && e->op == OP_POW)) &&
                       (v_is_num(b) || (b.k == V_JSON && json_is_boolean(b.j) && e->op == OP_POW));
        if (numeric) {
            double x = v_num(a), y = v_num(b);
            bool fl = (a.k == V_JSON && json_is_real(a.j)) || (b.k == V_JSON && json_is_real(b.j));
            switch (e->op) {
            case OP_ADD:
                rc = make_number(c, e, x + y, fl, out);
                break;
            case OP_SUB:
                rc = make_number(c, e, x - y, fl, out);
                break;
            case OP_MUL:
                rc = make_number(c, e, x * y, fl, out);
                break;
            case OP_DIV:
                if (y == 0) {
                    rc = rt_error(c, e, "division by zero");
                    break;
                }
                rc = make_number(c, e, x / y, true, out);
                break;
            case OP_FLOORDIV:
                if (y == 0) {
                    rc = rt_error(c, e, "division by zero");
                    break;
                }
                rc = make_number(c, e, floor(x / y), fl, out);
                break;
            case OP_MOD:
                if (y == 0) {
                    rc = rt_error(c, e, "modulo by zero");
                    break;
                }
                rc = make_number(c, e, fmod(x, y), fl, out);
                break;
            case OP_POW: {
                if (x == 0 && y < 0) {
                    rc = rt_error(c, e, "0.0 cannot be raised to a negative power");
                    break;
                }
                double r = pow(x, y);
                if (!isfinite(r)) {
                    rc = rt_error(c, e, "exponentiation result is not a finite real number");
                    break;
                }
                rc = make_number(c, e, r, fl || y < 0, out);
                break;
            }
            }
            break;
        }
        if (e->op == OP_ADD && v_is_arr(a) && v_is_arr(b)) {
            size_t total = json_array_size(a.j) + json_array_size(b.j);
            if ((rc = count_iterations(c, e, (long)total)) < 0) break;
            json_t *arr = json_oom(c, e, json_array());
            if (!arr || json_array_extend(arr, a.j) < 0 || json_array_extend(arr, b.j) < 0) {
                json_decref(arr);
                rc = rt_error(c, e, "out of memory");
                break;
            }
            *out = v_json(arr);
            break;
        }
        if (e->op == OP_ADD && (v_is_str(a) || v_is_str(b)) && !is_nullish(a) && !is_nullish(b)) {
            rc = concat(c, e, a, b, out);
            break;
        }
        if (e->op == OP_MUL && ((v_is_str(a) && v_is_int(b)) || (v_is_int(a) && v_is_str(b)))) {
            Value str = v_is_str(a) ? a : b;
            long long times = json_integer_value(v_is_int(a) ? a.j : b.j);
            Buf buf = {0};
            for (long long k = 0; rc == 0 && k < times; k++) rc = buf_put(&buf, v_str(str), v_len(str));
            if (rc == 0) {
                *out = make_string(c, e, buf.s ? buf.s : "", buf.len);
                if (out->k == V_UNDEF) rc = -1;
            } else
                rt_error(c, e, "%s", error_message());
            mem_free(buf.s);
            break;
        }
        static const char *names[] = {"", "+", "-", "~", "*", "/", "//", "%", "**"};
        rc = rt_error(c, e, "unsupported operand types for %s: %s and %s", e->op <= OP_POW ? names[e->op] : "?",
                      v_type(a), v_type(b));
    }
    }
    v_free(&a);
    v_free(&b);
    return rc;
}

/* ---------------------------------------------------------------- calls */

static int call_macro(Ctx *c, const Node *at, Value fn, Args *args, Value caller, Value *out) {
    const Node *m = fn.macro;
    const char *name = m->kind == N_MACRO ? m->str : "caller";
    TRY(enter(c, at));
    Scope scope = {.parent = fn.scope};
    int rc = 0;
    if (args->npos > m->n2)
        rc = rt_error(c, at, "macro '%s' takes at most %zu argument(s), got %zu", name, m->n2, args->npos);
    for (size_t i = 0; rc == 0 && i < args->nkw; i++) {
        bool known = false;
        for (size_t k = 0; k < m->n2; k++) if (!strcmp(m->list2[k]->str, args->kw[i])) known = true;
        if (!known) rc = rt_error(c, at, "macro '%s' has no parameter '%s'", name, args->kw[i]);
    }
    /* bind every parameter first (undefined when not given), then defaults */
    for (size_t k = 0; rc == 0 && k < m->n2; k++) {
        Value v = k < args->npos ? v_copy(args->pos[k]) : v_copy(arg_get(args, (size_t)-1, m->list2[k]->str));
        rc = scope_set(&scope, m->list2[k]->str, v);
    }
    if (rc == 0 && m->kind == N_MACRO && caller.k != V_UNDEF) rc = scope_set(&scope, "caller", v_copy(caller));
    for (size_t k = 0; rc == 0 && k < m->n2; k++) {
        const Node *p = m->list2[k];
        if (p->kind != E_KWARG || k < args->npos || arg_get(args, (size_t)-1, p->str).k != V_UNDEF) continue;
        Value v;
        rc = eval(c, &scope, p->a, &v);
        if (rc == 0) rc = scope_set(&scope, p->str, v);
    }
    Buf b = {0};
    if (rc == 0) {
        rc = exec_block(c, &scope, m->list, m->n, &b);
        if (rc > 0) rc = rt_error(c, at, "break or continue outside a loop");
    }
    if (rc == 0) {
        *out = make_string(c, at, b.s ? b.s : "", b.len);
        if (out->k == V_UNDEF) rc = -1;
    }
    mem_free(b.s);
    scope_free(&scope);
    c->depth--;
    return rc;
}

static int call_value(Ctx *c, const Node *at, Value fn, Args *args, Value *out) {
    if (fn.k == V_MACRO) return call_macro(c, at, fn, args, v_undef(), out);
    if (fn.k == V_FUNC) return call_builtin(c, at, fn.fn, args, out);
    return rt_error(c, at, "cannot call a value of type %s", v_type(fn));
}

static int eval_call(Ctx *c, Scope *s, const Node *e, Value *out) {
    const Node *callee = e->a;
    Value fn = v_undef(), self = v_undef();
    Args args;
    if (callee->kind == E_MEMBER && !callee->ival && callee->b->kind == E_STR) {
        /* obj.method(...): a key of that name wins over a method */
        TRY(eval(c, s, callee->a, &self));
        const char *name = callee->b->str;
        if (v_is_obj(self) && json_object_get(self.j, name)) {
            fn = v_json(json_incref(json_object_get(self.j, name)));
        } else {
            if (eval_args(c, s, e, e->list, e->n, &args) < 0) {
                v_free(&self);
                return -1;
            }
            bool found = false;
            int rc = call_method(c, e, self, name, &args, out, &found);
            if (rc == 0 && !found)
                rc = rt_error(c, e,
                              self.k == V_UNDEF ? "cannot call method '%s' of an undefined value"
                                                : "unknown method '%s' of a %s value",
                              name, v_type(self));
            args_free(&args);
            v_free(&self);
            return rc;
        }
        v_free(&self);
    } else {
        TRY(eval(c, s, callee, &fn));
    }
    if (eval_args(c, s, e, e->list, e->n, &args) < 0) {
        v_free(&fn);
        return -1;
    }
    int rc;
    if (fn.k == V_UNDEF && callee->kind == E_IDENT)
        rc = rt_error(c, e, "'%s' is undefined and cannot be called", callee->str);
    else rc = call_value(c, e, fn, &args, out);
    args_free(&args);
    v_free(&fn);
    return rc;
}

/* ---------------------------------------------------------------- eval */

static int eval_inner(Ctx *c, Scope *s, const Node *e, Value *out) {
    *out = v_undef();
    switch (e->kind) {
    case E_STR:
    case E_INT:
    case E_FLOAT:
        *out = v_json(json_incref(e->lit));
        return 0;
    case E_BOOL:
        *out = v_json(json_boolean(e->ival));
        return 0;
    case E_NONE:
        *out = v_json(json_null());
        return 0;
    case E_IDENT:
        *out = lookup(c, s, e->str);
        return 0;
    case E_MEMBER: {
        Value obj, prop;
        TRY(eval(c, s, e->a, &obj));
        if (eval(c, s, e->b, &prop) < 0) {
            v_free(&obj);
            return -1;
        }
        int rc = get_member(c, e, obj, prop, out);
        v_free(&obj);
        v_free(&prop);
        return rc;
    }
    case E_SLICE: {
        Value obj;
        TRY(eval(c, s, e->a, &obj));
        int rc = eval_slice(c, s, e, obj, out);
        v_free(&obj);
        return rc;
    }
    case E_CALL: return eval_call(c, s, e, out);
    case E_FILTER: {
        Value x;
        Args args;
        TRY(eval(c, s, e->a, &x));
        if (eval_args(c, s, e, e->list, e->n, &args) < 0) {
            v_free(&x);
            return -1;
        }
        int rc = apply_filter(c, e, e->str, x, &args, out);
        args_free(&args);
        v_free(&x);
        return rc;
    }
    case E_TEST: {
        Value x;
        Args args;
        bool r;
        TRY(eval(c, s, e->a, &x));
        if (eval_args(c, s, e, e->list, e->n, &args) < 0) {
            v_free(&x);
            return -1;
        }
        int rc = apply_test(c, e, e->str, x, &args, &r);
        args_free(&args);
        v_free(&x);
        if (rc == 0) *out = v_json(json_boolean(e->ival ? !r : r));
        return rc;
    }
    case E_BINARY: return binary(c, s, e, out);
    case E_UNARY: {
        Value x;
        TRY(eval(c, s, e->a, &x));
        int rc = 0;
        if (e->op == 'n') *out = v_json(json_boolean(!v_truthy(x)));
        else if (v_is_num(x) || (x.k == V_JSON && json_is_boolean(x.j)))
            rc = make_number(c, e, e->op == '-' ? -v_num(x) : v_num(x), json_is_real(x.j), out);
        else rc = rt_error(c, e, "bad operand type for unary %c: %s", e->op, v_type(x));
        v_free(&x);
        return rc;
    }
    case E_TERNARY: {
        Value cond;
        TRY(eval(c, s, e->a, &cond));
        bool t = v_truthy(cond);
        v_free(&cond);
        return eval(c, s, t ? e->b : e->c, out);
    }
    case E_SELECT: {
        Value cond;
        TRY(eval(c, s, e->b, &cond));
        bool t = v_truthy(cond);
        v_free(&cond);
        return t ? eval(c, s, e->a, out) : 0;
    }
    case E_ARRAY: case E_TUPLE: {
        json_t *arr = json_oom(c, e, json_array());
        if (!arr) return -1;
        for (size_t i = 0; i < e->n; i++) {
            Value v;
            if (eval(c, s, e->list[i], &v) < 0) {
                json_decref(arr);
                return -1;
            }
            if (v.k == V_MACRO || v.k == V_FUNC) {
                v_free(&v);
                json_decref(arr);
                return rt_error(c, e->list[i], "a macro or function cannot be stored in a list");
            }
            json_t *jv = v_to_json(v);
            int rc = jv ? json_array_append_new(arr, jv) : -1;
            v_free(&v);
            if (rc < 0) {
                json_decref(arr);
                return rt_error(c, e, "out of memory");
            }
        }
        *out = v_json(arr);
        return 0;
    }
    case E_OBJECT: {
        json_t *obj = json_oom(c, e, json_object());
        if (!obj) return -1;
        for (size_t i = 0; i < e->n; i++) {
            Value k, v;
            if (eval(c, s, e->list[i], &k) < 0) {
                json_decref(obj);
                return -1;
            }
            if (!v_is_str(k)) {
                v_free(&k);
                json_decref(obj);
                return rt_error(c, e->list[i], "object keys must be strings");
            }
            if (eval(c, s, e->list2[i], &v) < 0) {
                v_free(&k);
                json_decref(obj);
                return -1;
            }
            if (v.k == V_MACRO || v.k == V_FUNC) {
                v_free(&k);
                v_free(&v);
                json_decref(obj);
                return rt_error(c, e->list2[i], "a macro or function cannot be stored in a dict");
            }
            json_t *jv = v_to_json(v);
            int rc = jv ? json_object_setn_new_nocheck(obj, v_str(k), v_len(k), jv) : -1;
            v_free(&k);
            v_free(&v);
            if (rc < 0) {
                json_decref(obj);
                return rt_error(c, e, "out of memory");
            }
        }
        *out = v_json(obj);
        return 0;
    }
    default:
        return rt_error(c, e, "internal error: statement used as an expression");
    }
}

static int eval(Ctx *c, Scope *s, const Node *e, Value *out) {
    *out = v_undef();
    TRY(enter(c, e));
    int rc = eval_inner(c, s, e, out);
    c->depth--;
    return rc;
}

/* ---------------------------------------------------------------- statements */

static int assign(Ctx *c, Scope *s, const Node *target, Value v) {
    if (target->kind == E_IDENT) return scope_set(s, target->str, v);
    if (target->kind == E_TUPLE) {
        int rc = 0;
        if (!v_is_arr(v)) rc = rt_error(c, target, "cannot unpack a %s value", v_type(v));
        else if (json_array_size(v.j) != target->n)
            rc = rt_error(c, target, "expected %zu values to unpack, got %zu", target->n, json_array_size(v.j));
        for (size_t i = 0; rc == 0 && i < target->n; i++) {
            if (target->list[i]->kind != E_IDENT) rc = rt_error(c, target, "can only unpack into names");
            else rc = scope_set(s, target->list[i]->str, v_json(json_incref(json_array_get(v.j, i))));
        }
        v_free(&v);
        return rc;
    }
    /* ns.attr = value */
    Value obj;
    if (eval(c, s, target->a, &obj) < 0) {
        v_free(&v);
        return -1;
    }
    int rc = 0;
    if (obj.k != V_NS)
        rc = rt_error(c, target, "cannot assign an attribute of a %s value (only of a namespace())", v_type(obj));
    else if (v.k == V_MACRO || v.k == V_FUNC)
        rc = rt_error(c, target, "a macro or function cannot be stored in a namespace");
    else if (v.k == V_UNDEF) json_object_del(obj.j, target->b->str);
    else if (json_object_set_new(obj.j, target->b->str, v_to_json(v)) < 0) rc = rt_error(c, target, "out of memory");
    v_free(&obj);
    v_free(&v);
    return rc;
}

static int exec_for(Ctx *c, Scope *outer, const Node *st, Buf *out) {
    Scope s = {.parent = outer};
    Value it;
    TRY(eval(c, &s, st->b, &it));
    json_t *cands = NULL;
    int rc = 0;
    if (v_is_arr(it)) cands = json_incref(it.j);
    else if (v_is_obj(it)) {
        cands = json_array();
        const char *k;
        json_t *val;
        json_object_foreach(it.j, k, val) if (cands && json_array_append_new(cands, json_string(k)) < 0) rc = -1;
    } else if (v_is_str(it)) {
        cands = json_array();
        const char *str = v_str(it);
        size_t n = v_len(it);
        for (size_t i = 0; cands && i < n; i = utf8_next(str, n, i))
            if (json_array_append_new(cands, json_stringn_nocheck(str + i, utf8_next(str, n, i) - i)) < 0) rc = -1;
    } else if (it.k == V_UNDEF) cands = json_array();
    else {
        v_free(&it);
        return rt_error(c, st->b, "cannot loop over a %s value", v_type(it));
    }
    v_free(&it);
    if (!cands || rc < 0) {
        json_decref(cands);
        return rt_error(c, st, "out of memory");
    }

    /* select with the loop filter first: loop.length counts the kept items */
    json_t *items = cands;
    if (st->c) {
        items = json_array();
        if (!items) {
            json_decref(cands);
            return rt_error(c, st, "out of memory");
        }
        for (size_t i = 0; rc == 0 && i < json_array_size(cands); i++) {
            if ((rc = count_iterations(c, st, 1)) < 0) break;
            Scope ts = {.parent = &s};
            Value cond = v_undef();
            rc = assign(c, &ts, st->a, v_json(json_incref(json_array_get(cands, i))));
            if (rc == 0) rc = eval(c, &ts, st->c, &cond);
            if (rc == 0 && v_truthy(cond) && json_array_append(items, json_array_get(cands, i)) < 0)
                rc = rt_error(c, st, "out of memory");
            v_free(&cond);
            scope_free(&ts);
        }
        json_decref(cands);
    }
    size_t n = json_array_size(items);
    bool ran = false;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if ((rc = count_iterations(c, st, 1)) < 0) break;
        Value loop = {.k = V_LOOP, .j = json_incref(items), .fn = (int)i};
        if ((rc = scope_set(&s, "loop", loop)) < 0) break;
        if ((rc = assign(c, &s, st->a, v_json(json_incref(json_array_get(items, i))))) < 0) break;
        rc = exec_block(c, &s, st->list, st->n, out);
        if (rc == FLOW_CONTINUE) rc = 0;
        else if (rc == FLOW_BREAK) {
            rc = 0;
            ran = true;
            break;
        }
        ran = true;
    }
    if (rc == 0 && !ran && st->n2) rc = exec_block(c, &s, st->list2, st->n2, out);
    json_decref(items);
    scope_free(&s);
    return rc;
}

/* The body of st (a block set, a filter block) rendered into a string
 * value; `what` names the block when a break or continue leaves it. */
static int render_body(Ctx *c, Scope *s, const Node *st, const char *what, Value *v) {
    Buf b = {0};
    int rc = exec_block(c, s, st->list, st->n, &b);
    if (rc > 0) rc = rt_error(c, st, "break or continue inside %s", what);
    if (rc == 0) {
        *v = make_string(c, st, b.s ? b.s : "", b.len);
        if (v->k == V_UNDEF) rc = -1;
    }
    mem_free(b.s);
    return rc;
}

static int exec(Ctx *c, Scope *s, const Node *st, Buf *out) {
    switch (st->kind) {
    case N_TEXT: return buf_put(out, st->str, st->len);
    case N_OUTPUT: {
        Value v;
        TRY(eval(c, s, st->a, &v));
        int rc = 0;
        if (!is_nullish(v)) rc = v_to_string(out, v);
        v_free(&v);
        if (rc < 0) return rt_error(c, st, "%s", error_message());
        return rc;
    }
    case N_IF: {
        Value t;
        TRY(eval(c, s, st->a, &t));
        bool yes = v_truthy(t);
        v_free(&t);
        return yes ? exec_block(c, s, st->list, st->n, out) : exec_block(c, s, st->list2, st->n2, out);
    }
    case N_FOR: return exec_for(c, s, st, out);
    case N_SET: {
        Value v;
        if (st->b) TRY(eval(c, s, st->b, &v));
        else TRY(render_body(c, s, st, "a block set", &v));
        return assign(c, s, st->a, v);
    }
    case N_MACRO: return scope_set(s, st->str, (Value){.k = V_MACRO, .macro = st, .scope = s});
    case N_CALLBLOCK: {
        const Node *call = st->a;
        Value fn, r;
        Args args;
        TRY(eval(c, s, call->a, &fn));
        if (fn.k != V_MACRO) {
            v_free(&fn);
            return rt_error(c, st, "{%% call %%} needs a macro, got %s", v_type(fn));
        }
        if (eval_args(c, s, call, call->list, call->n, &args) < 0) return -1;
        Value caller = {.k = V_MACRO, .macro = st, .scope = s};
        int rc = call_macro(c, st, fn, &args, caller, &r);
        args_free(&args);
        if (rc == 0) {
            rc = v_to_string(out, r);
            v_free(&r);
        }
        return rc;
    }
    case N_FILTERBLOCK: {
        Value x = v_undef(), r = v_undef();
        Args args = {0};
        int rc = render_body(c, s, st, "a filter block", &x);
        if (rc == 0) rc = eval_args(c, s, st->a, st->a->list, st->a->n, &args);
        if (rc == 0) rc = apply_filter(c, st->a, st->a->str, x, &args, &r);
        if (rc == 0) rc = v_to_string(out, r);
        args_free(&args);
        v_free(&x);
        v_free(&r);
        return rc;
    }
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default: return rt_error(c, st, "internal error: expression used as a statement");
    }
}

static int exec_block(Ctx *c, Scope *s, Node *const *list, size_t n, Buf *out) {
    for (size_t i = 0; i < n; i++) {
        TRY(enter(c, list[i]));
        int rc = exec(c, s, list[i], out);
        c->depth--;
        if (rc != 0) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- API */

int ct_render(const ChatTemplate *t, json_t *context, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (context && !json_is_object(context)) return error_set("%s: the render context must be a JSON object", t->name);
    Ctx c = {.t = t, .context = context};
    Scope global = {0};
    Buf b = {0};
    int rc = exec_block(&c, &global, t->body, t->n_body, &b);
    if (rc > 0) rc = error_set("%s: break or continue outside a loop", t->name);
    scope_free(&global);
    if (rc < 0) {
        mem_free(b.s);
        return -1;
    }
    if (!b.s && !(b.s = mem_calloc(1, 1))) return -1;
    *out = b.s;
    if (out_len) *out_len = b.len;
    return 0;
}

int chat_template_render(const ChatTemplate *t, json_t *context, char **out, size_t *out_len) {
    return ct_render(t, context, out, out_len);
}

int chat_template_apply(const ChatTemplate *t, json_t *messages, json_t *tools, bool add_generation_prompt,
                        const char *bos_token, const char *eos_token, char **out, size_t *out_len) {
    return chat_template_apply_ex(t, messages, tools, add_generation_prompt, bos_token, eos_token, NULL, out, out_len);
}

int chat_template_apply_ex(const ChatTemplate *t, json_t *messages, json_t *tools, bool add_generation_prompt,
                           const char *bos_token, const char *eos_token, json_t *extra, char **out, size_t *out_len) {
    json_t *ctx = json_object();
    if (!ctx) return error_set("%s: out of memory", t->name);
    int rc = 0;
    if (messages) rc |= json_object_set(ctx, "messages", messages);
    if (tools && !json_is_null(tools)) rc |= json_object_set(ctx, "tools", tools);
    rc |= json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    if (bos_token) rc |= json_object_set_new(ctx, "bos_token", json_string(bos_token));
    if (eos_token) rc |= json_object_set_new(ctx, "eos_token", json_string(eos_token));
    const char *key;
    json_t *value;
    if (extra) {
        json_object_foreach(extra, key, value) {
            if (!strcmp(key, "messages") || !strcmp(key, "tools") || !strcmp(key, "add_generation_prompt")) {
                json_decref(ctx);
                return error_set("%s: \"%s\" is set by the caller, not by extra template variables", t->name, key);
            }
            rc |= json_object_set(ctx, key, value);   /* transformers: kwargs override the special tokens */
        }
    }
    if (rc) {
        json_decref(ctx);
        return error_set("%s: cannot build the render context (invalid UTF-8 token?)", t->name);
    }
    rc = ct_render(t, ctx, out, out_len);
    json_decref(ctx);
    return rc;
}

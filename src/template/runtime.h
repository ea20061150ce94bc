/* runtime.h: runtime values and render state shared by the
 * chat-template evaluator (eval.c), its values and JSON output
 * (value.c), its filters and methods (filters.c) and the helpers they all
 * use (shared.c). Private to src/template. The files depend one way:
 * shared <- value <- filters <- eval (and parse, for the filter names). */
#ifndef LT_CHAT_TEMPLATE_RUNTIME_H
#define LT_CHAT_TEMPLATE_RUNTIME_H
#include "template/ast.h"

/* A value: a jansson value (one owned reference), a namespace (a JSON
 * object that `set ns.x = ...` may change), undefined, a macro or call
 * block (node + the scope it closes over), a builtin function, or a loop
 * variable (fields computed when read, so an iteration allocates nothing). */
typedef enum { V_UNDEF, V_JSON, V_NS, V_MACRO, V_FUNC, V_LOOP } VKind;
enum { F_RAISE = 1, F_RANGE, F_NAMESPACE, F_STRFTIME };

typedef struct Scope Scope;
typedef struct {
    VKind k;
    json_t *j;          /* V_JSON, V_NS */
    const Node *macro;  /* V_MACRO: N_MACRO or N_CALLBLOCK */
    Scope *scope;       /* V_MACRO: defining scope */
    int fn;             /* V_FUNC: which; V_LOOP: the iteration (j: the loop's items) */
} Value;

typedef struct {
    const char *name;
    Value v;
} Var;
struct Scope {
    Scope *parent;
    Var *vars;
    size_t n, cap;
};

typedef struct {
    char *s;
    size_t len, cap;
} Buf;

typedef struct {
    const ChatTemplate *t;
    json_t *context;
    long iterations;    /* loop iterations, range() items, list scans so far */
    size_t work;        /* bytes of strings built so far */
    int depth;          /* evaluation nesting, including macro calls */
    Value caller;       /* set while a {% call %} invokes its macro */
} Ctx;

#define CT_MAX_ARGS 16
typedef struct {
    Value pos[CT_MAX_ARGS];
    size_t npos;
    const char *kw[CT_MAX_ARGS];
    Value kwv[CT_MAX_ARGS];
    size_t nkw;
} Args;

/* values (value.c) */
Value v_undef(void);
Value v_json(json_t *j);              /* takes the reference; NULL -> V_UNDEF (check OOM before) */
Value v_copy(Value v);
void v_free(Value *v);
bool v_is_str(Value v);
bool v_is_num(Value v);               /* int or real (not bool) */
bool v_is_int(Value v);
bool v_is_obj(Value v);               /* JSON object or namespace */
bool v_is_arr(Value v);
const char *v_str(Value v);
size_t v_len(Value v);                /* string bytes */
double v_num(Value v);                /* int, real or bool as a number */
bool v_truthy(Value v);
bool v_equal(Value a, Value b);       /* the reference's loose == */
bool v_strict_equal(Value a, Value b);/* `in`, unique: same type and value */
const char *v_type(Value v);          /* for error messages */
json_t *v_to_json(Value v);           /* new reference for storing in arrays/objects; undefined -> null; NULL on OOM */
json_t *loop_field(Value loop, const char *name, bool *oom);  /* new reference; NULL: no such field, or *oom */
json_t *loop_object(Value loop);                   /* the loop variable as a JSON object */

int buf_put(Buf *b, const char *s, size_t n);
int buf_str(Buf *b, const char *s);
/* The string form (what {{ }} prints, ~ and + concatenate). */
int v_to_string(Buf *b, Value v);
/* Python's repr() of a JSON value: what `x | string` gives a dict or a list in
 * transformers' Jinja2 ({'name': 'f', 'n': 1.0, 'ok': True}), where
 * @huggingface/jinja has no string filter for objects (SmolLM3's xml_tools). */
int v_to_python_repr(Buf *b, json_t *j);
/* JSON text as @huggingface/jinja's toJSON writes it. indent <= 0: one line. */
typedef struct {
    int indent;
    bool ensure_ascii;
    bool sort_keys;
    const char *item_sep, *key_sep;
} JsonStyle;
int json_write(Buf *b, json_t *j, const JsonStyle *st, int depth);
int real_to_string(char *out, size_t cap, double x, bool python_float);

/* call arguments (value.c) */
void args_free(Args *a);
Value arg_get(Args *a, size_t index, const char *kw);   /* borrowed; V_UNDEF when absent */

/* UTF-8 helpers (shared.c) */
size_t utf8_len(const char *s, size_t n);               /* code points */
size_t utf8_next(const char *s, size_t n, size_t i);    /* index of the next code point */

/* errors at a node: "NAME: line:col: message"; the render limits (shared.c) */
int rt_error(const Ctx *c, const Node *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
json_t *json_oom(const Ctx *c, const Node *at, json_t *j);  /* j, or NULL + error when j is NULL */
int count_iterations(Ctx *c, const Node *at, long n);
int count_work(Ctx *c, const Node *at, size_t bytes);

/* filters, methods, tests, builtins (filters.c) */
int apply_filter(Ctx *c, const Node *at, const char *name, Value x, Args *args, Value *out);
int call_method(Ctx *c, const Node *at, Value self, const char *name, Args *args, Value *out, bool *found);
int apply_test(Ctx *c, const Node *at, const char *name, Value x, Args *args, bool *out);
int call_builtin(Ctx *c, const Node *at, int fn, Args *args, Value *out);
#endif

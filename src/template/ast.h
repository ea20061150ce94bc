/* ast.h: the syntax tree shared by the chat-template parser
 * (parse.c) and evaluator (eval.c). Private to
 * those files. Nodes live in a block allocator owned by the template. */
#ifndef LT_CHAT_TEMPLATE_AST_H
#define LT_CHAT_TEMPLATE_AST_H
#include "template/chat_template.h"
#include <stdint.h>

typedef enum {
    /* statements */
    N_TEXT, /* str: literal text */
    N_OUTPUT, /* a: expression printed by {{ }} */
    N_IF, /* a: test; list: body; list2: else branch (an elif is a nested N_IF) */
    N_FOR, /* a: target (E_IDENT or E_TUPLE); b: iterable; c: filter test or NULL; list: body; list2: else */
    N_SET, /* a: target (ident, tuple or member); b: value or NULL (block set: list is the body) */
    N_MACRO, /* str: name; list2: parameters (E_IDENT or E_KWARG with default); list: body */
    N_CALLBLOCK, /* a: E_CALL of the macro; list2: caller parameters; list: body */
    N_FILTERBLOCK, /* a: E_FILTER whose operand (NULL) is the rendered body; list: body */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    E_STR, /* str */
    E_INT, /* ival */
    E_FLOAT, /* fval */
    E_BOOL, /* ival 0/1 */
    E_NONE,
    E_IDENT, /* str */
    E_MEMBER, /* a: object; b: property expression (computed) or E_STR/E_INT (dot); ival: computed */
    E_SLICE, /* a: object; list[3]: start, stop, step (NULL when absent) */
    E_CALL, /* a: callee; list: arguments (E_KWARG for keyword ones) */
    E_KWARG, /* str: name; a: value */
    E_FILTER, /* a: operand; str: filter name; list: arguments; ival: 1 when called with () */
    E_TEST, /* a: operand; str: test name; ival: negated; list: arguments */
    E_BINARY, /* op; a, b */
    E_UNARY, /* op ('-', '+', 'n' for not); a */
    E_TERNARY, /* a: condition; b: when true; c: when false */
    E_SELECT, /* a: value; b: condition (`x if c` without else: undefined when false) */
    E_ARRAY, /* list */
    E_TUPLE, /* list */
    E_OBJECT, /* list: keys; list2: values */
} NodeKind;

/* Binary operators (Node.op). */
enum {
    OP_ADD = 1,
    OP_SUB,
    OP_CONCAT,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_GT,
    OP_LE,
    OP_GE,
    OP_IN,
    OP_NOT_IN,
    OP_AND,
    OP_OR,
};

typedef struct Node Node;
struct Node {
    NodeKind kind;
    int op;
    uint32_t off; /* where it starts in the original source (ct_where: line:col) */
    const char *str; /* NUL-terminated, may contain NULs: length in len */
    size_t len;
    int64_t ival;
    double fval;
    Node *a, *b, *c;
    Node **list;
    size_t n;
    Node **list2;
    size_t n2;
    json_t *lit; /* E_STR, E_INT, E_FLOAT: the constant, shared by every render */
};

typedef struct Block Block;
struct ChatTemplate {
    char *name;
    char *source; /* the original text, for line:col of runtime errors */
    Node **body;
    size_t n_body;
    Block *blocks; /* every node, string and list of the tree */
    json_t **lits;
    size_t n_lits, cap_lits; /* owned references of Node.lit */
};

/* chat_template_parse.c: block allocator of the tree; line:col (1-based,
 * columns in code points) of an offset of the original source. */
/* parse.c */
void *ct_alloc(ChatTemplate *t, size_t bytes);
/* shared.c: line and column of a source offset; bytes of the JavaScript
 * `\s` whitespace character at s[i] / ending at s[end] (0: none). */
void ct_where(const char *source, size_t off, uint32_t *line, uint32_t *col);
size_t ct_ws_at(const char *s, size_t n, size_t i);
size_t ct_ws_before(const char *s, size_t end);
/* eval.c */
int ct_render(const ChatTemplate *t, json_t *context, char **out, size_t *out_len);
/* filters.c: known filters and tests, checked at compile time. */
bool ct_filter_known(const char *name);
bool ct_test_known(const char *name);
#endif

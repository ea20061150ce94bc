/* shared.c: the helpers every part of the chat-template interpreter uses
 * (the parser, the evaluator, the filters and the values): JavaScript
 * whitespace and source positions, UTF-8 stepping, the error of a node and
 * the render limits. They depend on nothing else of src/template, so the
 * parts depend one way: shared <- value <- filters <- parse, eval. */
#include "template/runtime.h"
#include "base/error.h"
#include <stdarg.h>
#include <stdio.h>

/* ---------------------------------------------------------------- whitespace and positions */

/* Bytes of the JavaScript `\s` character starting at s[i] (0 if none). */
size_t ct_ws_at(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c == ' ' || (c >= 9 && c <= 13)) return 1;
    if (c < 0xC2) return 0;
    const unsigned char *u = (const unsigned char *)s + i;
    if (c == 0xC2 && i + 1 < n && u[1] == 0xA0) return 2;
    if (i + 2 >= n) return 0;
    if (c == 0xE1 && u[1] == 0x9A && u[2] == 0x80) return 3;
    if (c == 0xE2 && u[1] == 0x80 && ((u[2] >= 0x80 && u[2] <= 0x8A) || u[2] == 0xA8 || u[2] == 0xA9 || u[2] == 0xAF))
        return 3;
    if (c == 0xE2 && u[1] == 0x81 && u[2] == 0x9F) return 3;
    if (c == 0xE3 && u[1] == 0x80 && u[2] == 0x80) return 3;
    if (c == 0xEF && u[1] == 0xBB && u[2] == 0xBF) return 3;
    return 0;
}

/* Bytes of the whitespace character ending just before s[end] (0 if none). */
size_t ct_ws_before(const char *s, size_t end) {
    for (size_t k = 1; k <= 3 && k <= end; k++)
        if (ct_ws_at(s, end, end - k) == k) return k;
    return 0;
}

void ct_where(const char *source, size_t off, uint32_t *line, uint32_t *col) {
    uint32_t l = 1, c = 1;
    for (size_t i = 0; i < off && source[i]; i++) {
        if (source[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)source[i] & 0xC0) != 0x80)
            c++;
    }
    *line = l;
    *col = c;
}

/* ---------------------------------------------------------------- UTF-8 */

size_t utf8_next(const char *s, size_t n, size_t i) {
    i++;
    while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    return i;
}

size_t utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* ---------------------------------------------------------------- errors and limits */

/* "NAME: line:col: message" at a node (or "NAME: message"). */
int rt_error(const Ctx *c, const Node *at, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) {
        uint32_t line, col;
        ct_where(c->t->source, at->off, &line, &col);
        return error_set("%s: %u:%u: %s", c->t->name, line, col, msg);
    }
    return error_set("%s: %s", c->t->name, msg);
}

json_t *json_oom(const Ctx *c, const Node *at, json_t *j) {
    if (!j) rt_error(c, at, "out of memory");
    return j;
}

int count_iterations(Ctx *c, const Node *at, long n) {
    if (n < 0 || c->iterations + n > CHAT_TEMPLATE_MAX_ITERATIONS)
        return rt_error(c, at, "chat template: loop limit of %ld iterations exceeded", CHAT_TEMPLATE_MAX_ITERATIONS);
    c->iterations += n;
    return 0;
}

int count_work(Ctx *c, const Node *at, size_t bytes) {
    if (bytes > CHAT_TEMPLATE_MAX_WORK || c->work + bytes > CHAT_TEMPLATE_MAX_WORK)
        return rt_error(c, at, "chat template: work limit of %lu bytes of strings exceeded",
                        (unsigned long)CHAT_TEMPLATE_MAX_WORK);
    c->work += bytes;
    return 0;
}

/* jsonl.c: the bounded-memory JSON Lines reader behind jsonl.h. A line is
 * accumulated from a fixed read buffer; once it passes the limit the rest of
 * it is read and dropped, so memory never exceeds the limit whatever the file
 * holds. Lines are checked for NUL bytes, strict UTF-8 and nesting depth
 * before jansson sees them (jansson recurses per nesting level). */
#include "data/jsonl.h"
#include <errno.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"

#define CHUNK_BYTES (64 * 1024)

int jsonl_open(JsonlReader *r, const char *path, size_t max_line) {
    memset(r, 0, sizeof *r);
    r->max_line = max_line ? max_line : JSONL_DEFAULT_MAX_LINE;
    r->fp = fopen(path, "rb");
    if (!r->fp) return error_set("%s: %s", path, strerror(errno));
    r->path = mem_strdup(path);
    r->chunk = mem_alloc(CHUNK_BYTES);
    if (!r->path || !r->chunk) {
        jsonl_close(r);
        return -1;
    }
    return 0;
}

void jsonl_close(JsonlReader *r) {
    if (r->fp) fclose(r->fp);
    mem_free(r->path);
    mem_free(r->chunk);
    mem_free(r->line);
    memset(r, 0, sizeof *r);
}

/* 1: more bytes in the chunk, 0: end of file, -1: read error. */
static int fill_chunk(JsonlReader *r) {
    if (r->eof) return 0;
    size_t n = fread(r->chunk, 1, CHUNK_BYTES, r->fp);
    if (n == 0) {
        if (ferror(r->fp)) return error_set("%s:%ld: read error: %s", r->path, r->line_no + 1, strerror(errno));
        r->eof = true;
        return 0;
    }
    r->chunk_len = n;
    r->chunk_pos = 0;
    return 1;
}

static int append_bytes(JsonlReader *r, const unsigned char *p, size_t n) {
    size_t need = r->line_len + n + 1;
    if (need > r->line_cap) {
        size_t cap = r->line_cap ? r->line_cap : 256;
        while (cap < need) cap *= 2;
        if (cap > r->max_line + 2) cap = r->max_line + 2; /* CR and NUL */
        char *grown = mem_realloc(r->line, cap);
        if (!grown) return -1;
        r->line = grown;
        r->line_cap = cap;
    }
    memcpy(r->line + r->line_len, p, n);
    r->line_len += n;
    r->line[r->line_len] = 0;
    return 0;
}

/* Reads up to the next '\n'. 1: a line, 0: end of file, -1: error.
 * *too_long: the line passed the limit and its bytes were dropped. */
static int read_raw_line(JsonlReader *r, bool *too_long) {
    bool any = false;
    *too_long = false;
    r->line_len = 0;
    if (r->line) r->line[0] = 0;
    for (;;) {
        if (r->chunk_pos == r->chunk_len) {
            int got = fill_chunk(r);
            if (got < 0) return -1;
            if (got == 0) break;
        }
        const unsigned char *start = r->chunk + r->chunk_pos;
        size_t avail = r->chunk_len - r->chunk_pos;
        const unsigned char *nl = memchr(start, '\n', avail);
        size_t take = nl ? (size_t)(nl - start) : avail;
        any = true;
        if (!*too_long) {
            if (r->line_len + take > r->max_line + 1)
                *too_long = true; /* +1: a CR before LF */
            else if (append_bytes(r, start, take) < 0)
                return -1;
        }
        r->chunk_pos += take + (nl ? 1 : 0);
        if (nl) break;
    }
    if (!any) return 0;
    r->line_no++;
    if (!r->line) TRY(append_bytes(r, (const unsigned char *)"", 0));
    if (r->line_len > 0 && r->line[r->line_len - 1] == '\r') r->line[--r->line_len] = 0;
    if (!*too_long && r->line_len > r->max_line) *too_long = true;
    return 1;
}

static bool is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v') return false;
    return true;
}

int jsonl_next(JsonlReader *r, const char **line, size_t *len) {
    for (;;) {
        bool too_long;
        int got = read_raw_line(r, &too_long);
        if (got <= 0) return got < 0 ? -1 : JSONL_EOF;
        if (too_long)
            return error_set("%s:%ld: line longer than the limit of %zu bytes", r->path, r->line_no, r->max_line),
                   JSONL_BAD;
        char *s = r->line;
        size_t n = r->line_len;
        if (r->line_no == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            s += 3;
            n -= 3;
        }
        const char *nul = memchr(s, 0, n);
        if (nul)
            return error_set("%s:%ld: NUL byte at column %zu", r->path, r->line_no, (size_t)(nul - s) + 1), JSONL_BAD;
        size_t bad = utf8_first_invalid(s, n);
        if (bad < n) return error_set("%s:%ld: invalid UTF-8 at column %zu", r->path, r->line_no, bad + 1), JSONL_BAD;
        if (is_blank(s, n)) {
            r->blank_lines++;
            continue;
        }
        if (jsonl_nesting_depth(s, n, JSONL_MAX_DEPTH) > JSONL_MAX_DEPTH)
            return error_set("%s:%ld: JSON nested deeper than %d levels", r->path, r->line_no, JSONL_MAX_DEPTH),
                   JSONL_BAD;
        *line = s;
        *len = n;
        return JSONL_LINE;
    }
}

int jsonl_nesting_depth(const char *s, size_t len, int limit) {
    int depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest) {
                deepest = depth;
                if (deepest > limit) return deepest;
            }
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return deepest;
}

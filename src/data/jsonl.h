/* jsonl.h: a line reader for JSON Lines files with bounded memory. Each call
 * hands back one line with its CR/LF removed (and a UTF-8 BOM removed from
 * the first line), or says that the line is bad: longer than the limit (it is
 * skipped without being held in memory), a NUL byte, invalid UTF-8, or
 * nesting deeper than JSONL_MAX_DEPTH. Blank and whitespace-only lines are
 * skipped and counted. The JSON itself is parsed by the caller (jansson). */
#ifndef LT_JSONL_H
#define LT_JSONL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define JSONL_DEFAULT_MAX_LINE ((size_t)64 << 20) /* 64 MiB */
#define JSONL_MAX_DEPTH 512 /* [ and { nesting */

typedef struct {
    FILE *fp;
    char *path;
    unsigned char *chunk; /* read buffer */
    size_t chunk_len, chunk_pos;
    char *line; /* current line, NUL-terminated */
    size_t line_len, line_cap;
    size_t max_line; /* bytes, CR/LF excluded */
    long line_no; /* 1-based number of the line last returned */
    size_t blank_lines;
    bool eof;
} JsonlReader;

enum { JSONL_EOF = 0, JSONL_LINE = 1, JSONL_BAD = 2 };

/* max_line 0 = JSONL_DEFAULT_MAX_LINE. A missing file: -1, "PATH: reason". */
int jsonl_open(JsonlReader *r, const char *path, size_t max_line);
/* JSONL_LINE: line and len hold the line (valid until the next call);
 * JSONL_BAD: the line is unusable, error_message() says "PATH:N: why", and the
 * next call reads the following line; JSONL_EOF; -1: read error. */
int jsonl_next(JsonlReader *r, const char **line, size_t *len);
void jsonl_close(JsonlReader *r);

/* Deepest [ / { nesting outside JSON strings, stopping once past `limit`. */
int jsonl_nesting_depth(const char *s, size_t len, int limit);
#endif

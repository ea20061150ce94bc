/* page.h: what the report pages share: the HTML head with the inline style
 * sheet, the foot, the colours of the memory plan's buffer classes, and
 * small formatters. */
#ifndef LT_PAGE_H
#define LT_PAGE_H
#include <stddef.h>
#include <stdio.h>

void page_begin(FILE *f, const char *title);
void page_end(FILE *f);
/* A stable colour for a buffer class (its MemClass number, memory/plan.h). */
const char *page_class_color(int index);
/* "1.234 GB" / "12.3 MB" (decimal, as MLX-LM's Peak mem). */
void page_bytes(char *buf, size_t cap, double bytes);
/* "1 h 02 min", "3 min 04 s", "12.3 s". */
void page_duration(char *buf, size_t cap, double seconds);
/* "2025-01-31 12:34:56 UTC". */
void page_date(char *buf, size_t cap, double unix_seconds);
#endif

/* report_html.h: the training report, one self-contained HTML file (inline
 * CSS and SVG, no scripts, no external assets: it opens from a file system,
 * a mail attachment or an air-gapped machine), made from the adapter
 * directory alone (report/history.h): the loss curves against iterations
 * and trained tokens (linear or log, switched by CSS radio buttons), the
 * best validation point, learning rate, tokens/s, gradient norm with the
 * clipped updates, skipped updates and resumes marked on every chart, the
 * memory plan's stacked bar beside the measured peak and the limit, peak
 * RSS over the run, and the run's settings.
 *
 * Also the page of `lmtune plan --html`: the plan's stacked bar and, beside
 * it, the stacked bar of the same run with each lever pulled. */
#ifndef LT_REPORT_HTML_H
#define LT_REPORT_HTML_H
#include <stddef.h>
#include <stdio.h>
#include "report/history.h"

#define REPORT_FILE "report.html"

/* The page of h into f; -1 with the error set when an allocation fails (nothing
 * is worth writing then: the caller discards f). */
int report_html_render(FILE *f, const History *h);
/* Reads ADAPTER_DIR's history and writes the report atomically to out_path
 * (NULL: ADAPTER_DIR/report.html). */
int report_html_write(const char *adapter_dir, const char *out_path);

/* ---- lmtune plan --html ---- */

#define PLAN_PAGE_CLASSES 16
#define PLAN_PAGE_BARS 8

typedef struct {
    const char *label;                          /* "this run", "--grad-checkpoint", ... */
    const char *class_names[PLAN_PAGE_CLASSES];
    int class_ids[PLAN_PAGE_CLASSES];           /* MemClass, for the colours */
    double class_bytes[PLAN_PAGE_CLASSES];
    int n_classes;
    double total;
} PlanBar;

typedef struct {
    const char *title;          /* "Memory plan: MODEL, LoRA of ..." */
    const char *command;        /* the command line */
    PlanBar bars[PLAN_PAGE_BARS];   /* [0]: the run as given; then one per lever */
    int n_bars;
    double memory_limit;        /* 0: none */
    double arena;
} PlanPage;

int plan_html_write(const char *path, const PlanPage *p);
#endif

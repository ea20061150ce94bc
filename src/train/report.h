/* report.h: MLX-LM's log lines (v0.31.3 plain text), the progress line on a
 * terminal, and the --metrics-file (one JSON object per line, per report and
 * per evaluation, with the keys of MLX-LM's callbacks plus ours). */
#ifndef LT_REPORT_H
#define LT_REPORT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *out;          /* the log (stdout) */
    FILE *metrics;      /* NULL without --metrics-file */
    bool progress;      /* stderr is a terminal */
    bool progress_shown;
} Reporter;

typedef struct {
    int iteration;
    double train_loss, learning_rate, iterations_per_second, tokens_per_second;
    unsigned long long trained_tokens;
    double peak_memory_gb;      /* process peak RSS, decimal GB */
    size_t arena_high_water;    /* 0: not given */
    size_t plan_total;          /* 0: not given */
    unsigned long long skipped_updates;
} TrainReport;

/* metrics_file may be NULL; it is appended to (a resumed run continues it). */
int report_open(Reporter *r, FILE *out, const char *metrics_file);
void report_close(Reporter *r);
void report_train(Reporter *r, const TrainReport *t);
void report_val(Reporter *r, int iteration, double val_loss, double seconds);
void report_saved(Reporter *r, int iteration, const char *adapters, const char *numbered);
void report_progress(Reporter *r, int iteration, int iters, double loss, double tokens_per_second);
void report_line(Reporter *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif

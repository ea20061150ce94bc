/* report.h: what a training run tells the world as it goes.
 *  - MLX-LM's log lines (v0.31.3 plain text) on the log stream, unchanged
 *    whatever the stream is;
 *  - on a terminal (stdout is a tty), one progress line under them, redrawn
 *    in place (iteration, loss, tokens/s, ETA) and erased before each log line;
 *  - the run's history, ADAPTER_DIR/metrics.jsonl: one JSON object per line,
 *    append-only, flushed at every record (a kill -9 loses nothing written)
 *    and fsynced at every evaluation and at the end. Besides the report and
 *    evaluation records it holds events: "start" (each start, also of a
 *    --resume), "skip" (a non-finite update) and "end". A --resume appends
 *    to the same file; the reader (report/history.h) keeps one continuous
 *    history: a start at iteration k supersedes the records after k;
 *  - --metrics-file: the report and evaluation records only (MLX-LM's
 *    callback keys plus ours), appended. */
#ifndef LT_REPORT_H
#define LT_REPORT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HISTORY_FILE "metrics.jsonl"

typedef struct {
    bool enabled;           /* stdout is a terminal */
    bool shown;             /* a progress line is on screen */
    double t_start;         /* monotonic time of this process's first iteration */
    int it_start;           /* the iteration before it */
    double last_draw;
} Progress;

typedef struct {
    FILE *out;              /* the log (stdout) */
    FILE *history;          /* ADAPTER_DIR/metrics.jsonl, or NULL */
    FILE *metrics;          /* --metrics-file, or NULL */
    char *history_path, *metrics_path;
    Progress progress;
} Reporter;

typedef struct {
    int iteration;
    double train_loss, learning_rate, iterations_per_second, tokens_per_second;
    unsigned long long trained_tokens;
    double peak_memory_gb;      /* process peak RSS, decimal GB */
    size_t arena_high_water;    /* 0: not given */
    size_t plan_total;          /* 0: not given */
    unsigned long long skipped_updates;
    /* the updates of the report window */
    int updates;                /* applied (not skipped) */
    double grad_norm_mean;      /* global norm before clipping; NAN without updates */
    double grad_norm_max;
    int clipped;                /* updates whose norm was clipped */
    /* data parallelism (world > 1): all-reduce time of this process so far */
    int world;
    double comm_seconds;
    long comm_calls;
} TrainReport;

typedef struct {
    int iteration;              /* the evaluation runs before this iteration's step */
    double val_loss, seconds;
    unsigned long long trained_tokens;   /* trained before it */
} ValReport;

typedef struct {
    int iteration;              /* the last iteration done before this start */
    int iters;                  /* the run's last iteration */
    bool resumed;
    uint64_t updates;
    int world;
} StartReport;

typedef struct {
    int iteration;
    uint64_t updates, skipped_updates;
    const char *status;         /* "completed", "stopped" (signal), "error" */
    int signal;
    const char *message;        /* the error, or NULL */
    int world;
    double comm_seconds;
    long comm_calls;
} EndReport;

/* history_path may be NULL (no adapter directory): no history. With
 * resume, the history is continued (a torn last line, left by a kill in the
 * middle of a write, is cut off first); without, it starts anew.
 * metrics_file may be NULL; it is appended to. */
int report_open(Reporter *r, FILE *out, const char *history_path, bool resume, const char *metrics_file);
/* Flushes and fsyncs; -1 + error when a write failed. */
int report_close(Reporter *r);
/* The records return -1 + error when the history cannot be written. */
int report_start(Reporter *r, const StartReport *s);
int report_train(Reporter *r, const TrainReport *t);
int report_val(Reporter *r, const ValReport *v);
/* The log line "Iter N: non-finite loss, update skipped (S in a row, T in total)" and a skip event. */
int report_skip(Reporter *r, int iteration, bool loss, int streak, unsigned long long total);
int report_end(Reporter *r, const EndReport *e);
/* fsync of the history (at evaluations): a power loss keeps what came before. */
int report_sync(Reporter *r);
void report_saved(Reporter *r, int iteration, const char *adapters, const char *numbered);
/* The terminal's progress line (nothing when stdout is not a terminal). */
void report_progress(Reporter *r, int iteration, int iters, double loss, double tokens_per_second);
void report_line(Reporter *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The progress line's text for a width of `columns` (for tests). */
void report_progress_text(char *buf, size_t cap, int columns, int iteration, int iters, double loss,
                          double tokens_per_second, double eta_seconds);
#endif

/* history.h: a training run as its adapter directory records it, read back
 * for the report: ADAPTER_DIR/metrics.jsonl (train/report.h writes it: the
 * report and evaluation records and the start, skip and end events, over
 * every --resume) and ADAPTER_DIR/run.json (the settings, data sets and
 * memory plan of the latest start, written by `lmtune train`).
 *
 * One continuous history: a start event at iteration k (a --resume from
 * the state saved at k) supersedes the records after k that the earlier
 * process wrote before it stopped, since the resumed run does those
 * iterations again. A last line without its newline (a kill in the middle
 * of a write) is left out; any other line that is not a JSON object is an
 * error naming the file and the line. */
#ifndef LT_HISTORY_H
#define LT_HISTORY_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int iteration;
    double time;                    /* unix seconds */
    double train_loss, learning_rate, iterations_per_second, tokens_per_second;
    double trained_tokens;
    double peak_memory_gb;          /* process peak RSS so far */
    double arena_high_water, plan_total;
    double skipped_updates;         /* in total so far */
    double updates;                 /* applied in the window (NAN: not recorded) */
    double grad_norm, grad_norm_max;
    double clipped;                 /* updates of the window whose norm was clipped */
    double allreduce_seconds;       /* NAN for one worker */
    double allreduce_calls;
} HistTrain;

typedef struct {
    int iteration;
    double time, val_loss, val_time, trained_tokens;
} HistVal;

typedef struct {
    int iteration;
    double time;
    bool loss;                      /* non-finite loss (else: gradient) */
} HistSkip;

/* One process's part of the run: from a start event to its last record. */
typedef struct {
    int iteration;                  /* where it started (0, or the resumed state's) */
    int iters;                      /* its last planned iteration */
    bool resumed;
    int world;
    long pid;
    char host[128];
    double start_time, last_time;   /* unix seconds */
    int last_iteration;             /* the highest iteration it recorded */
    bool ended;                     /* an end event: */
    char status[16];                /* "completed", "stopped", "error" */
    int signal;
    char message[512];
    double allreduce_seconds, allreduce_calls, updates;
} HistSegment;

typedef struct {
    char *dir;
    char *metrics_path;
    HistTrain *train;
    size_t n_train;
    HistVal *val;
    size_t n_val;
    HistSkip *skip;
    size_t n_skip;
    HistSegment *seg;
    size_t n_seg;
    size_t lines;                   /* records read */
    bool torn_tail;                 /* the last line was incomplete and left out */
    json_t *run;                    /* run.json, or NULL when there is none */
} History;

int history_load(History *h, const char *dir);
void history_free(History *h);

/* Helpers on run.json (NULL / NAN / def when absent). */
const char *history_run_string(const History *h, const char *key);
double history_run_number(const History *h, const char *key);
#endif

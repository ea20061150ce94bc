/* report.c: the train log, the terminal's progress line, the run's history
 * (ADAPTER_DIR/metrics.jsonl) and the --metrics-file (see report.h). */
#include "train/report.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"

/* ---- opening ---- */

/* Cuts what follows the last newline: the part of a record a kill -9 or a
 * power loss interrupted, so the next record starts on a line of its own. */
static int cut_torn_line(int fd, const char *path) {
    struct stat st;
    if (fstat(fd, &st) < 0) return error_set("%s: cannot stat: %s", path, strerror(errno));
    off_t pos = st.st_size;
    char buf[4096];
    while (pos > 0) {
        size_t n = pos > (off_t)sizeof buf ? sizeof buf : (size_t)pos;
        pos -= (off_t)n;
        if (pread(fd, buf, n, pos) != (ssize_t)n) return error_set("%s: cannot read: %s", path, strerror(errno));
        for (size_t i = n; i-- > 0;) {
            if (buf[i] != '\n') continue;
            off_t keep = pos + (off_t)i + 1;
            if (keep < st.st_size && ftruncate(fd, keep) < 0)
                return error_set("%s: cannot cut the incomplete last line: %s", path, strerror(errno));
            return 0;
        }
    }
    if (st.st_size > 0 && ftruncate(fd, 0) < 0)
        return error_set("%s: cannot cut the incomplete last line: %s", path, strerror(errno));
    return 0;
}

static FILE *open_history(const char *path, bool resume) {
    int flags = resume ? O_RDWR | O_CREAT | O_APPEND : O_WRONLY | O_CREAT | O_TRUNC | O_APPEND;
    int fd = open(path, flags | O_CLOEXEC, 0644);
    if (fd < 0) {
        error_set("%s: cannot open for writing: %s", path, strerror(errno));
        return NULL;
    }
    if (resume && cut_torn_line(fd, path) < 0) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "a");
    if (!f) {
        error_set("%s: cannot open for writing: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int report_open(Reporter *r, FILE *out, const char *history_path, bool resume, const char *metrics_file) {
    memset(r, 0, sizeof *r);
    r->out = out ? out : stdout;
    const char *term = getenv("TERM");
    r->progress.enabled = isatty(fileno(r->out)) && !(term && !strcmp(term, "dumb"));
    if (history_path) {
        r->history_path = mem_strdup(history_path);
        if (!r->history_path) return -1;
        r->history = open_history(history_path, resume);
        if (!r->history) {
            report_close(r);
            return -1;
        }
    }
    if (metrics_file && *metrics_file && !(history_path && same_file(metrics_file, history_path))) {
        r->metrics_path = mem_strdup(metrics_file);
        if (!r->metrics_path) {
            report_close(r);
            return -1;
        }
        r->metrics = fopen(metrics_file, "a");
        if (!r->metrics) {
            error_set("--metrics-file %s: cannot open for writing: %s", metrics_file, strerror(errno));
            report_close(r);
            return -1;
        }
    }
    return 0;
}

static int sync_file(FILE *f, const char *path) {
    if (!f) return 0;
    if (fflush(f) != 0 || fdatasync(fileno(f)) != 0)
        return error_set("%s: write failed: %s", path, strerror(errno));
    return 0;
}

int report_sync(Reporter *r) {
    TRY(sync_file(r->history, r->history_path));
    return sync_file(r->metrics, r->metrics_path);
}

int report_close(Reporter *r) {
    int rc = report_sync(r);
    if (r->history && fclose(r->history) != 0 && rc == 0)
        rc = error_set("%s: write failed: %s", r->history_path, strerror(errno));
    if (r->metrics && fclose(r->metrics) != 0 && rc == 0)
        rc = error_set("%s: write failed: %s", r->metrics_path, strerror(errno));
    r->history = r->metrics = NULL;
    mem_free(r->history_path);
    mem_free(r->metrics_path);
    r->history_path = r->metrics_path = NULL;
    return rc;
}

/* ---- records: one JSON object per line ---- */

typedef struct {
    char text[2048];
    size_t n;
} Rec;

static void rec_add(Rec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rec_add(Rec *r, const char *fmt, ...) {
    if (r->n >= sizeof r->text) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(r->text + r->n, sizeof r->text - r->n, fmt, ap);
    va_end(ap);
    r->n = k < 0 ? sizeof r->text : r->n + (size_t)k;
}

static void rec_key(Rec *r, const char *key) { rec_add(r, "%s\"%s\": ", r->n ? ", " : "{", key); }

/* JSON has no NaN/Infinity: such values are written as null. */
static void rec_num(Rec *r, const char *key, double v) {
    rec_key(r, key);
    if (isfinite(v)) rec_add(r, "%.17g", v);
    else rec_add(r, "null");
}

static void rec_int(Rec *r, const char *key, long long v) {
    rec_key(r, key);
    rec_add(r, "%lld", v);
}

static void rec_uint(Rec *r, const char *key, unsigned long long v) {
    rec_key(r, key);
    rec_add(r, "%llu", v);
}

static void rec_str(Rec *r, const char *key, const char *s) {
    rec_key(r, key);
    rec_add(r, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p && r->n + 8 < sizeof r->text; p++) {
        if (*p == '"' || *p == '\\') rec_add(r, "\\%c", *p);
        else if (*p < 0x20) rec_add(r, "\\u%04x", *p);
        else rec_add(r, "%c", *p);
    }
    rec_add(r, "\"");
}

static int rec_write(FILE *f, const char *path, const Rec *r) {
    if (!f) return 0;
    if (fputs(r->text, f) == EOF || fputs("}\n", f) == EOF || fflush(f) != 0)
        return error_set("%s: write failed: %s", path, strerror(errno));
    return 0;
}

/* A record of the history only (events), or of both files. */
static int rec_emit(Reporter *r, const Rec *rec, bool also_metrics) {
    TRY(rec_write(r->history, r->history_path, rec));
    return also_metrics ? rec_write(r->metrics, r->metrics_path, rec) : 0;
}

/* ---- the terminal ---- */

static void clear_progress(Reporter *r) {
    if (!r->progress.shown) return;
    fputs("\r\033[K", r->out);
    fflush(r->out);
    r->progress.shown = false;
}

static void format_eta(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "--:--");
        return;
    }
    long t = lround(s);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

void report_progress_text(char *buf, size_t cap, int columns, int iteration, int iters, double loss,
                          double tokens_per_second, double eta_seconds) {
    char eta[32], tail[160];
    format_eta(eta, sizeof eta, eta_seconds);
    snprintf(tail, sizeof tail, " %d/%d  loss %.3f  %.0f tok/s  ETA %s", iteration, iters, loss, tokens_per_second,
             eta);
    int room = columns - 1;   /* the last column would wrap on some terminals */
    int tail_len = (int)strlen(tail);
    int bar = room - tail_len - 2;
    if (bar > 30) bar = 30;
    if (bar < 10 || cap < (size_t)bar + 3) {
        /* too narrow for a bar: the numbers, cut to the width */
        const char *t = tail + 1;
        int keep = room < (int)strlen(t) ? room : (int)strlen(t);
        if (keep < 0) keep = 0;
        snprintf(buf, cap, "%.*s", keep, t);
        return;
    }
    int filled = iters > 0 ? (int)((long long)bar * iteration / iters) : 0;
    if (filled > bar) filled = bar;
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < bar; i++) buf[k++] = i < filled ? '=' : (i == filled ? '>' : ' ');
    buf[k++] = ']';
    snprintf(buf + k, cap - k, "%s", tail);
}

void report_progress(Reporter *r, int iteration, int iters, double loss, double tokens_per_second) {
    Progress *p = &r->progress;
    if (!p->enabled) return;
    double now = time_now();
    /* at most ten redraws a second: a fast run must not spend its time drawing */
    if (p->shown && now - p->last_draw < 0.1 && iteration != iters) return;
    int done = iteration - p->it_start;
    double eta = done > 0 ? (now - p->t_start) / done * (iters - iteration) : NAN;
    int columns = 80;
    struct winsize ws;
    if (ioctl(fileno(r->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) columns = ws.ws_col;
    char line[512];
    report_progress_text(line, sizeof line, columns < (int)sizeof line ? columns : (int)sizeof line - 1, iteration,
                         iters, loss, tokens_per_second, eta);
    fprintf(r->out, "\r\033[K%s", line);
    fflush(r->out);
    p->shown = true;
    p->last_draw = now;
}

/* ---- the log and the records ---- */

int report_start(Reporter *r, const StartReport *s) {
    r->progress.t_start = time_now();
    r->progress.it_start = s->iteration;
    Rec rec = {0};
    rec_str(&rec, "event", "start");
    rec_int(&rec, "iteration", s->iteration);
    rec_int(&rec, "iters", s->iters);
    rec_key(&rec, "resumed");
    rec_add(&rec, "%s", s->resumed ? "true" : "false");
    rec_uint(&rec, "updates", (unsigned long long)s->updates);
    rec_int(&rec, "world", s->world);
    rec_int(&rec, "pid", (long long)getpid());
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) == 0) rec_str(&rec, "host", host);
    rec_num(&rec, "time", time_unix());
    return rec_emit(r, &rec, false);
}

int report_train(Reporter *r, const TrainReport *t) {
    clear_progress(r);
    fprintf(r->out, "Iter %d: Train loss %.3f, Learning Rate %.3e, It/sec %.3f, Tokens/sec %.3f, "
            "Trained Tokens %llu, Peak mem %.3f GB\n", t->iteration, t->train_loss, t->learning_rate,
            t->iterations_per_second, t->tokens_per_second, t->trained_tokens, t->peak_memory_gb);
    fflush(r->out);
    Rec rec = {0};
    rec_int(&rec, "iteration", t->iteration);
    rec_num(&rec, "train_loss", t->train_loss);
    rec_num(&rec, "learning_rate", t->learning_rate);
    rec_num(&rec, "iterations_per_second", t->iterations_per_second);
    rec_num(&rec, "tokens_per_second", t->tokens_per_second);
    rec_uint(&rec, "trained_tokens", t->trained_tokens);
    rec_num(&rec, "peak_memory", t->peak_memory_gb);
    rec_uint(&rec, "skipped_updates", t->skipped_updates);
    if (t->arena_high_water) rec_uint(&rec, "arena_high_water", t->arena_high_water);
    if (t->plan_total) rec_uint(&rec, "plan_total", t->plan_total);
    rec_int(&rec, "updates", t->updates);
    rec_num(&rec, "grad_norm", t->grad_norm_mean);
    rec_num(&rec, "grad_norm_max", t->grad_norm_max);
    rec_int(&rec, "clipped_updates", t->clipped);
    if (t->world > 1) {
        rec_num(&rec, "allreduce_seconds", t->comm_seconds);
        rec_int(&rec, "allreduce_calls", t->comm_calls);
    }
    rec_num(&rec, "time", time_unix());
    return rec_emit(r, &rec, true);
}

int report_val(Reporter *r, const ValReport *v) {
    clear_progress(r);
    fprintf(r->out, "Iter %d: Val loss %.3f, Val took %.3fs\n", v->iteration, v->val_loss, v->seconds);
    fflush(r->out);
    Rec rec = {0};
    rec_int(&rec, "iteration", v->iteration);
    rec_num(&rec, "val_loss", v->val_loss);
    rec_num(&rec, "val_time", v->seconds);
    rec_uint(&rec, "trained_tokens", v->trained_tokens);
    rec_num(&rec, "time", time_unix());
    return rec_emit(r, &rec, true);
}

int report_skip(Reporter *r, int iteration, bool loss, int streak, unsigned long long total) {
    report_line(r, "Iter %d: non-finite %s, update skipped (%d in a row, %llu in total)", iteration,
                loss ? "loss" : "gradient", streak, total);
    Rec rec = {0};
    rec_str(&rec, "event", "skip");
    rec_int(&rec, "iteration", iteration);
    rec_str(&rec, "reason", loss ? "loss" : "gradient");
    rec_uint(&rec, "skipped_updates", total);
    rec_num(&rec, "time", time_unix());
    return rec_emit(r, &rec, false);
}

int report_end(Reporter *r, const EndReport *e) {
    clear_progress(r);
    Rec rec = {0};
    rec_str(&rec, "event", "end");
    rec_int(&rec, "iteration", e->iteration);
    rec_str(&rec, "status", e->status);
    if (e->signal) rec_int(&rec, "signal", e->signal);
    if (e->message) rec_str(&rec, "message", e->message);
    rec_uint(&rec, "updates", (unsigned long long)e->updates);
    rec_uint(&rec, "skipped_updates", (unsigned long long)e->skipped_updates);
    if (e->world > 1) {
        rec_num(&rec, "allreduce_seconds", e->comm_seconds);
        rec_int(&rec, "allreduce_calls", e->comm_calls);
    }
    rec_num(&rec, "time", time_unix());
    return rec_emit(r, &rec, false);
}

void report_saved(Reporter *r, int iteration, const char *adapters, const char *numbered) {
    clear_progress(r);
    fprintf(r->out, "Iter %d: Saved adapter weights to %s and %s.\n", iteration, adapters, numbered);
    fflush(r->out);
}

void report_line(Reporter *r, const char *fmt, ...) {
    clear_progress(r);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(r->out, fmt, ap);
    va_end(ap);
    fputc('\n', r->out);
    fflush(r->out);
}

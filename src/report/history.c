/* history.c: reads a run's metrics.jsonl and run.json (see history.h). */
#include "report/history.h"
#include <math.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"

#define HISTORY_MAX_BYTES ((size_t)1 << 32)   /* 4 GiB: millions of records */

/* Appends one element to a growing array (*items, *n), doubling its room. */
static void *grow(void *items, size_t n, size_t *cap, size_t size) {
    if (n < *cap) return items;
    size_t c = *cap ? 2 * *cap : 64;
    void *p = mem_realloc(items, c * size);
    if (p) *cap = c;
    return p;
}

static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* An integer field within [lo, hi], or def when absent or out of range. */
static long num_int(json_t *o, const char *key, long lo, long hi, long def) {
    double v = num(o, key);
    return v >= lo && v <= hi ? (long)v : def;
}

static void copy_str(char *dst, size_t cap, json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

typedef struct {
    History *h;
    size_t cap_train, cap_val, cap_skip, cap_seg;
    const char *path;
    size_t line;
} Reader;

/* A start at iteration k: the records after k belong to a process whose
 * work after its last save is done again by this one. */
static void drop_after(History *h, int k) {
    while (h->n_train && h->train[h->n_train - 1].iteration > k) h->n_train--;
    while (h->n_val && h->val[h->n_val - 1].iteration > k) h->n_val--;
    while (h->n_skip && h->skip[h->n_skip - 1].iteration > k) h->n_skip--;
}

static HistSegment *current_segment(Reader *r, double time) {
    History *h = r->h;
    if (h->n_seg) return &h->seg[h->n_seg - 1];
    /* records before any start event (a history written without them) */
    HistSegment *s = grow(h->seg, 0, &r->cap_seg, sizeof *s);
    if (!s) return NULL;
    h->seg = s;
    memset(s, 0, sizeof *s);
    s->world = 1;
    s->start_time = s->last_time = time;
    h->n_seg = 1;
    return s;
}

static int read_event(Reader *r, json_t *o, const char *event, int it, double time) {
    History *h = r->h;
    if (!strcmp(event, "start")) {
        json_t *resumed = json_object_get(o, "resumed");
        if (!json_is_true(resumed)) {
            h->n_train = h->n_val = h->n_skip = 0;   /* a fresh run in this directory */
            h->n_seg = 0;
        }
        drop_after(h, it);
        HistSegment *s = grow(h->seg, h->n_seg, &r->cap_seg, sizeof *s);
        if (!s) return -1;
        h->seg = s;
        s = &h->seg[h->n_seg++];
        memset(s, 0, sizeof *s);
        s->iteration = it;
        s->last_iteration = it;
        s->iters = (int)num_int(o, "iters", 0, 2147483647, 0);
        s->resumed = json_is_true(resumed);
        s->world = (int)num_int(o, "world", 1, 1 << 24, 1);
        s->pid = num_int(o, "pid", 1, 1L << 40, 0);
        copy_str(s->host, sizeof s->host, o, "host");
        s->start_time = s->last_time = time;
        return 0;
    }
    HistSegment *seg = current_segment(r, time);
    TRY_PTR(seg);
    if (isfinite(time) && !(time <= seg->last_time)) seg->last_time = time;
    if (!strcmp(event, "skip")) {
        HistSkip *k = grow(h->skip, h->n_skip, &r->cap_skip, sizeof *k);
        TRY_PTR(k);
        h->skip = k;
        k = &h->skip[h->n_skip++];
        k->iteration = it;
        k->time = time;
        json_t *reason = json_object_get(o, "reason");
        k->loss = json_is_string(reason) && !strcmp(json_string_value(reason), "loss");
    } else if (!strcmp(event, "end")) {
        seg->ended = true;
        copy_str(seg->status, sizeof seg->status, o, "status");
        copy_str(seg->message, sizeof seg->message, o, "message");
        seg->signal = (int)num_int(o, "signal", 0, 1024, 0);
        seg->allreduce_seconds = num(o, "allreduce_seconds");
        seg->allreduce_calls = num(o, "allreduce_calls");
        seg->updates = num(o, "updates");
    }
    if (it > seg->last_iteration) seg->last_iteration = it;
    return 0;
}

static int read_record(Reader *r, json_t *o) {
    History *h = r->h;
    json_t *jit = json_object_get(o, "iteration");
    if (!json_is_integer(jit) || json_integer_value(jit) < 0 || json_integer_value(jit) > 2147483647)
        return error_set("%s:%zu: \"iteration\" must be a non-negative integer", r->path, r->line);
    int it = (int)json_integer_value(jit);
    double time = num(o, "time");
    json_t *ev = json_object_get(o, "event");
    if (ev) {
        if (!json_is_string(ev)) return error_set("%s:%zu: \"event\" must be a string", r->path, r->line);
        return read_event(r, o, json_string_value(ev), it, time);
    }
    HistSegment *seg = current_segment(r, time);
    TRY_PTR(seg);
    if (isfinite(time) && !(time <= seg->last_time)) seg->last_time = time;
    if (it > seg->last_iteration) seg->last_iteration = it;
    if (json_object_get(o, "train_loss")) {
        HistTrain *t = grow(h->train, h->n_train, &r->cap_train, sizeof *t);
        TRY_PTR(t);
        h->train = t;
        t = &h->train[h->n_train++];
        *t = (HistTrain){
            .iteration = it,
            .time = time,
            .train_loss = num(o, "train_loss"),
            .learning_rate = num(o, "learning_rate"),
            .iterations_per_second = num(o, "iterations_per_second"),
            .tokens_per_second = num(o, "tokens_per_second"),
            .trained_tokens = num(o, "trained_tokens"),
            .peak_memory_gb = num(o, "peak_memory"),
            .arena_high_water = num(o, "arena_high_water"),
            .plan_total = num(o, "plan_total"),
            .skipped_updates = num(o, "skipped_updates"),
            .updates = num(o, "updates"),
            .grad_norm = num(o, "grad_norm"),
            .grad_norm_max = num(o, "grad_norm_max"),
            .clipped = num(o, "clipped_updates"),
            .allreduce_seconds = num(o, "allreduce_seconds"),
            .allreduce_calls = num(o, "allreduce_calls"),
        };
    } else if (json_object_get(o, "val_loss")) {
        HistVal *v = grow(h->val, h->n_val, &r->cap_val, sizeof *v);
        TRY_PTR(v);
        h->val = v;
        v = &h->val[h->n_val++];
        *v = (HistVal){it, time, num(o, "val_loss"), num(o, "val_time"), num(o, "trained_tokens")};
    }
    /* other records (from a later lmtune) are left out */
    return 0;
}

static int read_metrics(History *h, const char *path) {
    char *text;
    size_t size;
    TRY(file_read_all(path, HISTORY_MAX_BYTES, &text, &size));
    Reader r = {h, 0, 0, 0, 0, path, 0};
    int rc = 0;
    for (char *p = text; p < text + size;) {
        char *nl = memchr(p, '\n', (size_t)(text + size - p));
        r.line++;
        if (!nl) {
            h->torn_tail = true;   /* killed while writing this record */
            break;
        }
        *nl = 0;
        if (p[strspn(p, " \t\r")]) {
            json_error_t jerr;
            json_t *o = json_loads(p, JSON_REJECT_DUPLICATES, &jerr);
            if (!o || !json_is_object(o)) {
                rc = error_set("%s:%zu: not a JSON object: %s", path, r.line, o ? "another JSON value" : jerr.text);
                json_decref(o);
                break;
            }
            rc = read_record(&r, o);
            json_decref(o);
            if (rc < 0) break;
            h->lines++;
        }
        p = nl + 1;
    }
    mem_free(text);
    return rc;
}

int history_load(History *h, const char *dir) {
    memset(h, 0, sizeof *h);
    if (!dir_exists(dir)) return error_set("%s: no such directory (the --adapter-path of a training run)", dir);
    h->dir = mem_strdup(dir);
    h->metrics_path = path_join(dir, "metrics.jsonl");
    char *run_path = path_join(dir, "run.json");
    if (!h->dir || !h->metrics_path || !run_path) {
        mem_free(run_path);
        history_free(h);
        return -1;
    }
    if (!file_exists(h->metrics_path)) {
        error_set("%s: no such file (lmtune train writes the run's history there, in its --adapter-path)",
                  h->metrics_path);
        mem_free(run_path);
        history_free(h);
        return -1;
    }
    if (read_metrics(h, h->metrics_path) < 0) {
        mem_free(run_path);
        history_free(h);
        return -1;
    }
    if (file_exists(run_path)) {
        json_error_t jerr;
        h->run = json_load_file(run_path, JSON_REJECT_DUPLICATES, &jerr);
        if (!h->run || !json_is_object(h->run)) {
            error_set("%s:%d: not a JSON object: %s", run_path, jerr.line, h->run ? "another JSON value" : jerr.text);
            mem_free(run_path);
            history_free(h);
            return -1;
        }
    }
    mem_free(run_path);
    return 0;
}

void history_free(History *h) {
    mem_free(h->dir);
    mem_free(h->metrics_path);
    mem_free(h->train);
    mem_free(h->val);
    mem_free(h->skip);
    mem_free(h->seg);
    json_decref(h->run);
    memset(h, 0, sizeof *h);
}

const char *history_run_string(const History *h, const char *key) {
    json_t *v = h->run ? json_object_get(h->run, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

double history_run_number(const History *h, const char *key) {
    json_t *v = h->run ? json_object_get(h->run, key) : NULL;
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* report.c: the train log and the metrics file (see report.h). */
#include "train/report.h"
#include <math.h>
#include <stdarg.h>
#include <unistd.h>
#include "base/error.h"

int report_open(Reporter *r, FILE *out, const char *metrics_file) {
    r->out = out ? out : stdout;
    r->metrics = NULL;
    r->progress = isatty(2) != 0;
    r->progress_shown = false;
    if (metrics_file && *metrics_file) {
        r->metrics = fopen(metrics_file, "a");
        if (!r->metrics) return error_set("--metrics-file %s: cannot open for writing", metrics_file);
    }
    return 0;
}

void report_close(Reporter *r) {
    if (r->metrics) fclose(r->metrics);
    r->metrics = NULL;
}

static void clear_progress(Reporter *r) {
    if (r->progress_shown) { fputs("\r\033[K", stderr); fflush(stderr); r->progress_shown = false; }
}

/* JSON has no NaN/Infinity: such values are written as null. */
static void json_number(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ", \"%s\": %.17g", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

void report_train(Reporter *r, const TrainReport *t) {
    clear_progress(r);
    fprintf(r->out, "Iter %d: Train loss %.3f, Learning Rate %.3e, It/sec %.3f, Tokens/sec %.3f, "
            "Trained Tokens %llu, Peak mem %.3f GB\n", t->iteration, t->train_loss, t->learning_rate,
            t->iterations_per_second, t->tokens_per_second, t->trained_tokens, t->peak_memory_gb);
    fflush(r->out);
    if (!r->metrics) return;
    fprintf(r->metrics, "{\"iteration\": %d", t->iteration);
    json_number(r->metrics, "train_loss", t->train_loss);
    json_number(r->metrics, "learning_rate", t->learning_rate);
    json_number(r->metrics, "iterations_per_second", t->iterations_per_second);
    json_number(r->metrics, "tokens_per_second", t->tokens_per_second);
    fprintf(r->metrics, ", \"trained_tokens\": %llu", t->trained_tokens);
    json_number(r->metrics, "peak_memory", t->peak_memory_gb);
    fprintf(r->metrics, ", \"skipped_updates\": %llu", t->skipped_updates);
    if (t->arena_high_water) fprintf(r->metrics, ", \"arena_high_water\": %zu", t->arena_high_water);
    if (t->plan_total) fprintf(r->metrics, ", \"plan_total\": %zu", t->plan_total);
    fputs("}\n", r->metrics);
    fflush(r->metrics);
}

void report_val(Reporter *r, int iteration, double val_loss, double seconds) {
    clear_progress(r);
    fprintf(r->out, "Iter %d: Val loss %.3f, Val took %.3fs\n", iteration, val_loss, seconds);
    fflush(r->out);
    if (!r->metrics) return;
    fprintf(r->metrics, "{\"iteration\": %d", iteration);
    json_number(r->metrics, "val_loss", val_loss);
    json_number(r->metrics, "val_time", seconds);
    fputs("}\n", r->metrics);
    fflush(r->metrics);
}

void report_saved(Reporter *r, int iteration, const char *adapters, const char *numbered) {
    clear_progress(r);
    fprintf(r->out, "Iter %d: Saved adapter weights to %s and %s.\n", iteration, adapters, numbered);
    fflush(r->out);
}

void report_progress(Reporter *r, int iteration, int iters, double loss, double tokens_per_second) {
    if (!r->progress) return;
    fprintf(stderr, "\r\033[Kiter %d/%d  loss %.3f  %.1f tok/s", iteration, iters, loss, tokens_per_second);
    fflush(stderr);
    r->progress_shown = true;
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

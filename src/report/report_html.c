/* report_html.c: the training report page (see report_html.h). */
#include "report/report_html.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "report/page.h"
#include "report/svg_chart.h"

#define C_TRAIN "#1f77b4"
#define C_VAL "#ff7f0e"
#define C_BEST "#2ca02c"
#define C_LR "#9467bd"
#define C_TPS "#17becf"
#define C_NORM "#1f77b4"
#define C_NORM_MAX "#aec7e8"
#define C_CLIP "#e377c2"
#define C_SKIP "#d62728"
#define C_RESUME "#7f7f7f"
#define C_PEAK "#1d2330"
#define C_PLAN "#4c72b0"
#define C_LIMIT "#a50f15"

/* The series of the charts, taken from the history once. */
typedef struct {
    const History *h;
    double *it, *loss, *tok, *lr, *tps, *norm, *norm_max, *peak;    /* (n_train) */
    double *sort_scratch;                                           /* (n_train): median_finite's copy */
    double *v_it, *v_loss, *v_tok;                                  /* (n_val) */
    ChartLine *lines_it, *lines_tok;    /* skipped updates and resumes (n_lines) */
    size_t n_lines;
    ChartMark *clips;                   /* report windows with clipped updates */
    size_t n_clips;
    char (*tips)[200];                  /* the tooltips of lines and clips */
    int best;                           /* index of the best validation loss, or -1 */
    ChartMark best_it, best_tok;
    char best_label[64], best_tip[160];
} Series;

/* Trained tokens at an iteration, between the recorded points (train and
 * validation records both carry them). */
static double tokens_at(const History *h, double it) {
    double x0 = 0, y0 = 0, x1 = NAN, y1 = NAN;
    for (size_t i = 0; i < h->n_train; i++) {
        double x = h->train[i].iteration, y = h->train[i].trained_tokens;
        if (!isfinite(y)) continue;
        if (x <= it && x >= x0) {
            x0 = x;
            y0 = y;
        }
        if (x >= it && (isnan(x1) || x < x1)) {
            x1 = x;
            y1 = y;
        }
    }
    for (size_t i = 0; i < h->n_val; i++) {
        /* an evaluation at iteration k counts the tokens of iterations < k */
        double x = h->val[i].iteration - 1, y = h->val[i].trained_tokens;
        if (!isfinite(y)) continue;
        if (x <= it && x >= x0) {
            x0 = x;
            y0 = y;
        }
        if (x >= it && (isnan(x1) || x < x1)) {
            x1 = x;
            y1 = y;
        }
    }
    if (isnan(x1)) return y0;
    return x1 > x0 ? y0 + (y1 - y0) * (it - x0) / (x1 - x0) : y0;
}

static void series_free(Series *s) {
    double **arrays[] = {&s->it, &s->loss, &s->tok, &s->lr, &s->tps, &s->norm, &s->norm_max, &s->peak,
                         &s->sort_scratch, &s->v_it, &s->v_loss, &s->v_tok};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) mem_free(*arrays[i]);
    mem_free(s->lines_it);
    mem_free(s->lines_tok);
    mem_free(s->clips);
    mem_free(s->tips);
}

static int series_build(Series *s, const History *h, double max_grad_norm) {
    memset(s, 0, sizeof *s);
    s->h = h;
    s->best = -1;
    size_t nt = h->n_train ? h->n_train : 1, nv = h->n_val ? h->n_val : 1;
    size_t nl = h->n_skip + h->n_seg + 1, nm = nt + 1;
    double **train_arrays[] = {&s->it, &s->loss, &s->tok, &s->lr, &s->tps, &s->norm, &s->norm_max, &s->peak,
                               &s->sort_scratch};
    for (size_t i = 0; i < sizeof train_arrays / sizeof *train_arrays; i++)
        if (!(*train_arrays[i] = mem_calloc(nt, sizeof(double)))) {
            series_free(s);
            return -1;
        }
    s->v_it = mem_calloc(nv, sizeof(double));
    s->v_loss = mem_calloc(nv, sizeof(double));
    s->v_tok = mem_calloc(nv, sizeof(double));
    s->lines_it = mem_calloc(nl, sizeof(ChartLine));
    s->lines_tok = mem_calloc(nl, sizeof(ChartLine));
    s->clips = mem_calloc(nm, sizeof(ChartMark));
    s->tips = mem_calloc(nl + nm, sizeof *s->tips);
    if (!s->v_it || !s->v_loss || !s->v_tok || !s->lines_it || !s->lines_tok || !s->clips || !s->tips) {
        series_free(s);
        return -1;
    }
    size_t tip = 0;
    for (size_t i = 0; i < h->n_train; i++) {
        const HistTrain *t = &h->train[i];
        s->it[i] = t->iteration;
        s->loss[i] = t->train_loss;
        s->tok[i] = t->trained_tokens;
        s->lr[i] = t->learning_rate;
        s->tps[i] = t->tokens_per_second;
        s->norm[i] = t->grad_norm;
        s->norm_max[i] = t->grad_norm_max;
        s->peak[i] = t->peak_memory_gb;
        if (t->clipped > 0) {
            int from = i ? h->train[i - 1].iteration + 1 : 1;
            snprintf(s->tips[tip], sizeof s->tips[tip], "iterations %d-%d: %.0f of %.0f updates clipped to "
                     "--max-grad-norm %g (largest norm %.4g)", from, t->iteration, t->clipped, t->updates,
                     max_grad_norm, t->grad_norm_max);
            s->clips[s->n_clips++] = (ChartMark){t->iteration, t->grad_norm_max, s->tips[tip++], C_CLIP, '^', NULL};
        }
    }
    for (size_t i = 0; i < h->n_val; i++) {
        s->v_it[i] = h->val[i].iteration;
        s->v_loss[i] = h->val[i].val_loss;
        s->v_tok[i] = h->val[i].trained_tokens;
        if (isfinite(h->val[i].val_loss) && (s->best < 0 || h->val[i].val_loss < h->val[s->best].val_loss))
            s->best = (int)i;
    }
    if (s->best >= 0) {
        const HistVal *b = &h->val[s->best];
        snprintf(s->best_label, sizeof s->best_label, "best %.4g @ %d", b->val_loss, b->iteration);
        snprintf(s->best_tip, sizeof s->best_tip, "best validation loss %.6g at iteration %d", b->val_loss,
                 b->iteration);
        s->best_it = (ChartMark){b->iteration, b->val_loss, s->best_tip, C_BEST, 'o', s->best_label};
        s->best_tok = (ChartMark){b->trained_tokens, b->val_loss, s->best_tip, C_BEST, 'o', s->best_label};
    }
    for (size_t i = 0; i < h->n_skip; i++) {
        const HistSkip *k = &h->skip[i];
        snprintf(s->tips[tip], sizeof s->tips[tip], "iteration %d: non-finite %s, update skipped", k->iteration,
                 k->loss ? "loss" : "gradient");
        ChartLine l = {k->iteration, s->tips[tip++], "skipped update", C_SKIP, true};
        s->lines_it[s->n_lines] = l;
        l.at = tokens_at(h, k->iteration);
        s->lines_tok[s->n_lines++] = l;
    }
    for (size_t i = 0; i < h->n_seg; i++) {
        const HistSegment *g = &h->seg[i];
        if (!g->resumed) continue;
        snprintf(s->tips[tip], sizeof s->tips[tip], "resumed from the state saved at iteration %d", g->iteration);
        ChartLine l = {g->iteration, s->tips[tip++], "resumed", C_RESUME, true};
        s->lines_it[s->n_lines] = l;
        l.at = tokens_at(h, g->iteration);
        s->lines_tok[s->n_lines++] = l;
    }
    return 0;
}

/* ---- the head of the page ---- */

static bool process_alive(const HistSegment *g) {
    char host[256] = "";
    if (g->pid <= 0 || gethostname(host, sizeof host - 1) != 0 || strcmp(host, g->host)) return false;
    return kill((pid_t)g->pid, 0) == 0 || errno == EPERM;
}

/* The run's state in a word (*word) and in a sentence (buf), and the class of its colour. */
static const char *run_status(const History *h, char *buf, size_t cap, const char **word) {
    *word = "no records";
    if (!h->n_seg) {
        snprintf(buf, cap, "the history has no record yet");
        return "status-warn";
    }
    const HistSegment *g = &h->seg[h->n_seg - 1];
    *word = g->ended ? g->status : "running";
    if (g->ended && !strcmp(g->status, "completed")) {
        snprintf(buf, cap, "completed at iteration %d", g->last_iteration);
        return "status-ok";
    }
    if (g->ended && !strcmp(g->status, "stopped")) {
        snprintf(buf, cap, "stopped by signal %d at iteration %d (the state is saved: --resume continues)", g->signal,
                 g->last_iteration);
        return "status-warn";
    }
    if (g->ended) {
        snprintf(buf, cap, "stopped by an error after iteration %d: %s", g->last_iteration, g->message);
        return "status-bad";
    }
    if (process_alive(g)) {
        snprintf(buf, cap, "running: iteration %d of %d (process %ld)", g->last_iteration, g->iters, g->pid);
        return "status-run";
    }
    *word = "killed";
    snprintf(buf, cap, "no end record after iteration %d: the process was killed (kill -9, out of memory, power "
             "loss) or runs on another machine; --resume continues from the last save", g->last_iteration);
    return "status-bad";
}

static void card(FILE *f, const char *key, const char *value, const char *note, const char *cls) {
    fprintf(f, "<div class=\"card\"><div class=\"k\">%s</div><div class=\"v%s%s\">", key, cls ? " " : "",
            cls ? cls : "");
    html_text(f, value);
    fputs("</div><div class=\"n\">", f);
    html_text(f, note ? note : "");
    fputs("</div></div>\n", f);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v's finite values (NAN if none), sorted in scratch (n). */
static double median_finite(const double *v, size_t n, double *scratch) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) scratch[k++] = v[i];
    qsort(scratch, k, sizeof *scratch, cmp_double);
    if (k == 0) return NAN;
    return k % 2 ? scratch[k / 2] : 0.5 * (scratch[k / 2 - 1] + scratch[k / 2]);
}

static double peak_bytes(const History *h) {
    double m = NAN;
    for (size_t i = 0; i < h->n_train; i++)
        if (isfinite(h->train[i].peak_memory_gb) && !(h->train[i].peak_memory_gb * 1e9 <= m))
            m = h->train[i].peak_memory_gb * 1e9;
    return m;
}

static double plan_total(const History *h) {
    json_t *plan = h->run ? json_object_get(h->run, "plan") : NULL;
    json_t *t = plan ? json_object_get(plan, "total") : NULL;
    if (json_is_number(t)) return json_number_value(t);
    return h->n_train ? h->train[h->n_train - 1].plan_total : NAN;
}

static void write_cards(FILE *f, const History *h, const Series *s) {
    char v[600], n[200];
    const char *word;
    const char *cls = run_status(h, v, sizeof v, &word);
    fputs("<section class=\"cards\">\n", f);
    const HistSegment *last = h->n_seg ? &h->seg[h->n_seg - 1] : NULL;
    int done = last ? last->last_iteration : 0, planned = last ? last->iters : 0;
    card(f, "status", word, v, cls);
    snprintf(v, sizeof v, "%d / %d", done, planned);
    snprintf(n, sizeof n, "%zu start%s%s", h->n_seg, h->n_seg == 1 ? "" : "s",
             h->n_seg > 1 ? " (resumed)" : "");
    card(f, "iterations", v, n, NULL);
    if (s->best >= 0) {
        snprintf(v, sizeof v, "%.4f", h->val[s->best].val_loss);
        snprintf(n, sizeof n, "at iteration %d (perplexity %.3f)", h->val[s->best].iteration,
                 exp(h->val[s->best].val_loss));
    } else {
        snprintf(v, sizeof v, "n/a");
        snprintf(n, sizeof n, "no evaluation yet");
    }
    card(f, "best validation loss", v, n, NULL);
    const HistTrain *lt = h->n_train ? &h->train[h->n_train - 1] : NULL;
    snprintf(v, sizeof v, lt ? "%.4f" : "n/a", lt ? lt->train_loss : 0);
    snprintf(n, sizeof n, lt ? "mean over iterations up to %d" : "no report yet", lt ? lt->iteration : 0);
    card(f, "last train loss", v, n, NULL);
    format_short(v, sizeof v, lt ? lt->trained_tokens : 0);
    card(f, "trained tokens", v, "loss tokens (prompt and padding excluded)", NULL);
    double tps = median_finite(s->tps, h->n_train, s->sort_scratch);
    format_short(v, sizeof v, tps);
    if (!isfinite(tps)) snprintf(v, sizeof v, "n/a");
    card(f, "tokens/s", v, "median over the report windows", NULL);
    double wall = 0;
    for (size_t i = 0; i < h->n_seg; i++)
        if (isfinite(h->seg[i].last_time - h->seg[i].start_time)) wall += h->seg[i].last_time - h->seg[i].start_time;
    page_duration(v, sizeof v, wall);
    snprintf(n, sizeof n, "first start %s", "");
    if (h->n_seg) page_date(n, sizeof n, h->seg[0].start_time);
    char started[240];
    snprintf(started, sizeof started, "started %s", n);
    card(f, "wall time", v, started, NULL);
    double peak = peak_bytes(h), plan = plan_total(h);
    page_bytes(v, sizeof v, peak);
    char pb[32];
    page_bytes(pb, sizeof pb, plan);
    snprintf(n, sizeof n, "process peak RSS; the plan: %s", pb);
    card(f, "peak memory", v, n, NULL);
    double skipped = lt && isfinite(lt->skipped_updates) ? lt->skipped_updates : (double)h->n_skip;
    double clipped = 0;
    for (size_t i = 0; i < h->n_train; i++) if (h->train[i].clipped > 0) clipped += h->train[i].clipped;
    snprintf(v, sizeof v, "%.0f / %.0f", skipped, clipped);
    card(f, "skipped / clipped updates", v, "a non-finite loss or gradient / a norm over --max-grad-norm",
         skipped > 0 ? "status-bad" : NULL);
    int world = last ? last->world : 1;
    if (world > 1) {
        double secs = NAN, calls = NAN, updates = NAN;
        for (size_t i = h->n_train; i-- > 0;)
            if (isfinite(h->train[i].allreduce_seconds)) {
                secs = h->train[i].allreduce_seconds;
                calls = h->train[i].allreduce_calls;
                break;
            }
        if (last->ended && isfinite(last->allreduce_seconds)) {
            secs = last->allreduce_seconds;
            calls = last->allreduce_calls;
            updates = last->updates;
        }
        snprintf(v, sizeof v, "%d workers", world);
        if (isfinite(updates) && updates > 0)
            snprintf(n, sizeof n, "all-reduce %.3f s in %.0f calls (%.2f ms per update)", secs, calls,
                     1e3 * secs / updates);
        else
            snprintf(n, sizeof n, "all-reduce %.3f s in %.0f calls (this process)", secs, calls);
        card(f, "data parallel (MPI)", v, n, NULL);
    }
    fputs("</section>\n", f);
}

/* ---- the charts ---- */

static Chart chart(const char *name, const char *title, const char *xlabel, const char *ylabel, int width) {
    Chart c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.title = title;
    c.xlabel = xlabel;
    c.ylabel = ylabel;
    c.width = width;
    c.height = width > 700 ? 380 : 300;
    return c;
}

/* Whether the losses span more than two decades: the log scale is then shown first. */
static bool loss_spans_decades(const Series *s) {
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < s->h->n_train; i++)
        if (s->loss[i] > 0 && isfinite(s->loss[i])) {
            lo = fmin(lo, s->loss[i]);
            hi = fmax(hi, s->loss[i]);
        }
    for (size_t i = 0; i < s->h->n_val; i++)
        if (s->v_loss[i] > 0 && isfinite(s->v_loss[i])) {
            lo = fmin(lo, s->v_loss[i]);
            hi = fmax(hi, s->v_loss[i]);
        }
    return isfinite(lo) && hi / lo > 100;
}

static void write_loss(FILE *f, const Series *s) {
    const History *h = s->h;
    fprintf(f, "<section>\n<h2>Loss</h2>\n"
            "<input type=\"radio\" class=\"sw\" name=\"x\" id=\"x-it\" checked>"
            "<input type=\"radio\" class=\"sw\" name=\"x\" id=\"x-tok\">"
            "<input type=\"checkbox\" class=\"sw\" id=\"y-log\"%s>\n", loss_spans_decades(s) ? " checked" : "");
    fputs("<div class=\"switch\"><span>x axis: <label for=\"x-it\">iterations</label> "
          "<label for=\"x-tok\">trained tokens</label></span><span>y axis: <label for=\"y-log\">log scale</label>"
          "</span></div>\n<div class=\"loss\">\n", f);
    static const struct {
        const char *name, *cls;
        bool tokens, log;
    } views[] = {{"loss-iteration-linear", "it-lin", false, false},
                 {"loss-iteration-log", "it-log", false, true},
                 {"loss-tokens-linear", "tok-lin", true, false},
                 {"loss-tokens-log", "tok-log", true, true}};
    for (size_t v = 0; v < 4; v++) {
        Chart c = chart(views[v].name, "Train and validation loss", views[v].tokens ? "trained tokens" :
                        "iteration", "cross-entropy (nats per token)", 1086);
        c.css_class = views[v].cls;
        c.ylog = views[v].log;
        const double *tx = views[v].tokens ? s->tok : s->it, *vx = views[v].tokens ? s->v_tok : s->v_it;
        c.series[c.n_series++] = (ChartSeries){tx, s->loss, h->n_train, "train_loss", "train loss (window mean)",
                                               C_TRAIN, false, h->n_train <= 60};
        c.series[c.n_series++] = (ChartSeries){vx, s->v_loss, h->n_val, "val_loss", "validation loss", C_VAL, false,
                                               h->n_val <= 80};
        c.vlines = views[v].tokens ? s->lines_tok : s->lines_it;
        c.n_vlines = s->n_lines;
        c.marks = s->best >= 0 ? (views[v].tokens ? &s->best_tok : &s->best_it) : NULL;
        c.n_marks = s->best >= 0 ? 1 : 0;
        svg_chart(f, &c);
    }
    fputs("</div>\n<p class=\"note\">The train loss is the mean over each report window's iterations (MLX-LM's "
          "Train loss); the validation loss is over the same fixed batches at every evaluation, before that "
          "iteration's step. Hover a marker for its details.</p>\n</section>\n", f);
}

static void write_small_charts(FILE *f, const Series *s, double max_grad_norm, double plan, double limit) {
    const History *h = s->h;
    fputs("<section class=\"grid2\">\n", f);
    Chart c = chart("learning-rate", "Learning rate", "iteration", "learning rate", 540);
    c.series[c.n_series++] = (ChartSeries){s->it, s->lr, h->n_train, "learning_rate", "rate of the last update",
                                           C_LR, false, h->n_train <= 60};
    c.vlines = s->lines_it;
    c.n_vlines = s->n_lines;
    svg_chart(f, &c);
    c = chart("tokens-per-second", "Throughput", "iteration", "tokens/s (loss tokens)", 540);
    c.series[c.n_series++] = (ChartSeries){s->it, s->tps, h->n_train, "tokens_per_second", "tokens/s per window",
                                           C_TPS, false, h->n_train <= 60};
    c.vlines = s->lines_it;
    c.n_vlines = s->n_lines;
    svg_chart(f, &c);
    c = chart("grad-norm", "Gradient norm (before clipping)", "iteration", "global L2 norm", 540);
    c.series[c.n_series++] = (ChartSeries){s->it, s->norm, h->n_train, "grad_norm", "window mean", C_NORM, false,
                                           h->n_train <= 60};
    c.series[c.n_series++] = (ChartSeries){s->it, s->norm_max, h->n_train, "grad_norm_max", "window max",
                                           C_NORM_MAX, true, false};
    char clip_label[64];
    if (max_grad_norm > 0) {
        snprintf(clip_label, sizeof clip_label, "--max-grad-norm %g", max_grad_norm);
        c.hlines[c.n_hlines++] = (ChartLine){max_grad_norm, clip_label, NULL, C_CLIP, true};
    }
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < h->n_train; i++) {
        if (s->norm[i] > 0) lo = fmin(lo, s->norm[i]);
        if (s->norm_max[i] > 0) hi = fmax(hi, s->norm_max[i]);
    }
    c.ylog = isfinite(lo) && hi / lo > 100;   /* early norms can be orders of magnitude above the later ones */
    c.vlines = s->lines_it;
    c.n_vlines = s->n_lines;
    c.marks = s->clips;
    c.n_marks = s->n_clips;
    svg_chart(f, &c);
    c = chart("peak-memory", "Peak resident memory", "iteration", "GB (peak RSS, VmHWM)", 540);
    c.series[c.n_series++] = (ChartSeries){s->it, s->peak, h->n_train, "peak_memory", "peak RSS so far", C_PEAK,
                                           false, h->n_train <= 60};
    char plan_label[64], limit_label[64], b[32];
    if (isfinite(plan) && plan > 0) {
        page_bytes(b, sizeof b, plan);
        snprintf(plan_label, sizeof plan_label, "plan %s", b);
        c.hlines[c.n_hlines++] = (ChartLine){plan / 1e9, plan_label, NULL, C_PLAN, true};
    }
    if (isfinite(limit) && limit > 0) {
        page_bytes(b, sizeof b, limit);
        snprintf(limit_label, sizeof limit_label, "--memory-limit %s", b);
        c.hlines[c.n_hlines++] = (ChartLine){limit / 1e9, limit_label, NULL, C_LIMIT, false};
    }
    c.vlines = s->lines_it;
    c.n_vlines = s->n_lines;
    svg_chart(f, &c);
    fputs("</section>\n", f);
}

/* ---- memory ---- */

static void write_memory(FILE *f, const History *h, double limit) {
    fputs("<section>\n<h2>Memory: the plan, the measured peak and the limit</h2>\n", f);
    json_t *plan = h->run ? json_object_get(h->run, "plan") : NULL;
    json_t *classes = plan ? json_object_get(plan, "classes") : NULL;
    size_t n = json_is_array(classes) ? json_array_size(classes) : 0;
    BarPart parts[32];
    int np = 0;
    double total = 0;
    for (size_t i = 0; i < n && np < 32; i++) {
        json_t *c = json_array_get(classes, i);
        json_t *name = json_object_get(c, "name"), *bytes = json_object_get(c, "bytes");
        json_t *id = json_object_get(c, "class");
        if (!json_is_string(name) || !json_is_number(bytes)) continue;
        parts[np++] = (BarPart){json_string_value(name),
                                page_class_color(json_is_integer(id) ? (int)json_integer_value(id) : 99),
                                json_number_value(bytes)};
        total += json_number_value(bytes);
    }
    double peak = peak_bytes(h);
    BarPart peak_part = {"measured peak RSS (VmHWM)", C_PEAK, isfinite(peak) ? peak : 0};
    Bar bars[2] = {{"plan, by buffer class", "plan", parts, np}, {"measured peak RSS", "peak", &peak_part, 1}};
    ChartLine lim[1];
    char label[64], b[32];
    int nl = 0;
    if (isfinite(limit) && limit > 0) {
        page_bytes(b, sizeof b, limit);
        snprintf(label, sizeof label, "--memory-limit %s", b);
        lim[nl++] = (ChartLine){limit, label, NULL, C_LIMIT, true};
    }
    svg_bars(f, "Planned bytes by buffer class, and the process's real peak", bars, 2, lim, nl, 1086);
    if (np) {
        fputs("<div class=\"chips\">\n", f);
        for (int i = 0; i < np; i++) {
            char human[32];
            page_bytes(human, sizeof human, parts[i].value);
            fprintf(f, "<span><span class=\"sw-color\" style=\"background:%s\"></span>", parts[i].color);
            html_text(f, parts[i].label);
            fprintf(f, " <b>%s</b> (%.1f%%)</span>\n", human, total > 0 ? 100 * parts[i].value / total : 0);
        }
        char t[32], p[32], l[32];
        page_bytes(t, sizeof t, total);
        page_bytes(p, sizeof p, peak);
        page_bytes(l, sizeof l, limit);
        fprintf(f, "</div>\n<p>Planned peak <b>%s</b>; measured peak RSS <b>%s</b>", t, p);
        if (total > 0 && isfinite(peak)) fprintf(f, " (%+.1f%% of the plan)", 100 * (peak - total) / total);
        if (isfinite(limit) && limit > 0) fprintf(f, "; --memory-limit <b>%s</b>", l);
        else fputs("; no --memory-limit", f);
        fputs(".</p>\n", f);
    } else {
        fputs("<p class=\"note\">No run.json in the adapter directory: the plan is not known.</p>\n", f);
    }
    fputs("<p class=\"note\">Every buffer of the run is an entry of the plan, computed before the first step; the "
          "arena is carved by the same walk. The peak is the process's resident high-water mark, everything "
          "included.</p>\n</section>\n", f);
}

/* ---- the run ---- */

static void row(FILE *f, const char *key, const char *value) {
    fprintf(f, "<tr><th>%s</th><td>", key);
    html_text(f, value ? value : "n/a");
    fputs("</td></tr>\n", f);
}

static void write_run(FILE *f, const History *h) {
    fputs("<section>\n<h2>The run</h2>\n", f);
    if (!h->run) {
        fputs("<p class=\"note\">No run.json in the adapter directory.</p>\n</section>\n", f);
        return;
    }
    char v[512];
    fputs("<div class=\"two\"><div><table>\n", f);
    row(f, "model", history_run_string(h, "model"));
    const char *arch = history_run_string(h, "model_type");
    snprintf(v, sizeof v, "%s, %.0f blocks, hidden %.0f, vocabulary %.0f", arch ? arch : "?",
             history_run_number(h, "num_hidden_layers"),
             history_run_number(h, "hidden_size"), history_run_number(h, "vocab_size"));
    row(f, "architecture", v);
    const char *type = history_run_string(h, "fine_tune_type");
    double rank = history_run_number(h, "lora_rank"), blocks = history_run_number(h, "trained_blocks");
    if (isfinite(rank)) snprintf(v, sizeof v, "%s of the last %.0f blocks, rank %.0f", type ? type : "?", blocks, rank);
    else snprintf(v, sizeof v, "%s of the last %.0f blocks", type ? type : "?", blocks);
    row(f, "fine-tuning", v);
    double tp = history_run_number(h, "trainable_parameters"), all = history_run_number(h, "total_parameters");
    snprintf(v, sizeof v, "%.3fM of %.3fM (%.3f%%)", tp / 1e6, all / 1e6, all > 0 ? 100 * tp / all : 0);
    row(f, "trainable parameters", v);
    double world = history_run_number(h, "world");
    snprintf(v, sizeof v, "%.0f x %.0f x %.0f = %.0f (rows per worker x accumulation steps x workers)",
             history_run_number(h, "batch_size") / world, history_run_number(h, "grad_accumulation_steps"), world,
             history_run_number(h, "effective_batch_size"));
    row(f, "effective batch", v);
    const char *opt = history_run_string(h, "optimizer");
    snprintf(v, sizeof v, "%s, learning rate %g", opt ? opt : "?", history_run_number(h, "learning_rate"));
    row(f, "optimizer", v);
    snprintf(v, sizeof v, "%.0f (threads per worker: %.0f)", history_run_number(h, "iters"),
             history_run_number(h, "threads"));
    row(f, "iterations", v);
    row(f, "data", history_run_string(h, "data"));
    fputs("</table>\n", f);
    json_t *sets = json_object_get(h->run, "data_sets");
    fputs("<table><tr><th>split</th><th>format</th><th class=\"num\">examples</th><th class=\"num\">tokens</th>"
          "<th class=\"num\">padding</th></tr>\n", f);
    for (size_t i = 0; json_is_array(sets) && i < json_array_size(sets); i++) {
        json_t *d = json_array_get(sets, i);
        json_t *pad = json_object_get(d, "padding_share");
        fputs("<tr><td>", f);
        html_text(f, json_string_value(json_object_get(d, "split")));
        fputs("</td><td>", f);
        html_text(f, json_string_value(json_object_get(d, "format")));
        fprintf(f, "</td><td class=\"num\">%.0f</td><td class=\"num\">%.0f</td><td class=\"num\">",
                json_number_value(json_object_get(d, "examples")), json_number_value(json_object_get(d, "tokens")));
        if (json_is_number(pad)) fprintf(f, "%.1f%%", 100 * json_number_value(pad));
        else fputs("n/a", f);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n<p class=\"note\">Padding: the share of padded cells in one epoch of batches, with the "
          "batches sorted by length.</p>\n</div><div>\n<table class=\"flags\"><tr><th>flag (not its default)</th>"
          "<th>value</th><th>default</th></tr>\n", f);
    json_t *flags = json_object_get(h->run, "flags");
    for (size_t i = 0; json_is_array(flags) && i < json_array_size(flags); i++) {
        json_t *fl = json_array_get(flags, i);
        const char *keys[3] = {"flag", "value", "default"};
        fputs("<tr>", f);
        for (int k = 0; k < 3; k++) {
            fputs(k ? "<td>" : "<td><code>", f);
            html_text(f, json_string_value(json_object_get(fl, keys[k])));
            fputs(k ? "</td>" : "</code></td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n</div></div>\n", f);
    const char *cmd = history_run_string(h, "command");
    if (cmd) {
        fputs("<p class=\"note\">Command: <code>", f);
        html_text(f, cmd);
        fputs("</code></p>\n", f);
    }
    fputs("</section>\n", f);
}

static void write_events(FILE *f, const History *h, const Series *s) {
    fputs("<section>\n<h2>Evaluations and events</h2>\n<div class=\"two\"><div>\n<table><tr><th class=\"num\">"
          "iteration</th><th class=\"num\">trained tokens</th><th class=\"num\">validation loss</th>"
          "<th class=\"num\">took</th></tr>\n", f);
    size_t step = h->n_val > 40 ? (h->n_val + 39) / 40 : 1;
    for (size_t i = 0; i < h->n_val; i++) {
        if (i % step && i + 1 != h->n_val && (int)i != s->best) continue;
        const HistVal *v = &h->val[i];
        fprintf(f, "<tr%s><td class=\"num\">%d</td><td class=\"num\">%.0f</td><td class=\"num\">%.4f%s</td>"
                "<td class=\"num\">%.3f s</td></tr>\n", (int)i == s->best ? " style=\"font-weight:600\"" : "",
                v->iteration, v->trained_tokens, v->val_loss, (int)i == s->best ? " (best)" : "", v->val_time);
    }
    fputs("</table>\n</div><div>\n<table><tr><th>when</th><th>what</th></tr>\n", f);
    char d[64];
    for (size_t i = 0; i < h->n_seg; i++) {
        const HistSegment *g = &h->seg[i];
        page_date(d, sizeof d, g->start_time);
        fprintf(f, "<tr><td>%s</td><td>%s at iteration %d of %d (%d worker%s, process %ld on ", d,
                g->resumed ? "resumed" : "started", g->iteration, g->iters, g->world, g->world == 1 ? "" : "s",
                g->pid);
        html_text(f, g->host);
        fputs(")</td></tr>\n", f);
        if (!g->ended) continue;
        page_date(d, sizeof d, g->last_time);
        fprintf(f, "<tr><td>%s</td><td>%s at iteration %d", d, g->status, g->last_iteration);
        if (g->signal) fprintf(f, " (signal %d)", g->signal);
        if (g->message[0]) {
            fputs(": ", f);
            html_text(f, g->message);
        }
        fputs("</td></tr>\n", f);
    }
    for (size_t i = 0; i < h->n_skip && i < 50; i++) {
        page_date(d, sizeof d, h->skip[i].time);
        fprintf(f, "<tr><td>%s</td><td style=\"color:%s\">iteration %d: non-finite %s, update skipped</td></tr>\n",
                d, C_SKIP, h->skip[i].iteration, h->skip[i].loss ? "loss" : "gradient");
    }
    if (h->n_skip > 50) fprintf(f, "<tr><td></td><td>... %zu more skipped updates</td></tr>\n", h->n_skip - 50);
    fputs("</table>\n</div></div>\n</section>\n", f);
}

int report_html_render(FILE *f, const History *h) {
    char title[512];
    snprintf(title, sizeof title, "lmtune report: %s", h->dir);
    page_begin(f, title);
    double max_grad_norm = history_run_number(h, "max_grad_norm"), limit = history_run_number(h, "memory_limit");
    Series s;
    if (series_build(&s, h, max_grad_norm) < 0) return -1;   /* no page without its charts */
    fputs("<h1>Training report</h1>\n<div class=\"sub\">", f);
    html_text(f, h->dir);
    const char *model = history_run_string(h, "model");
    if (model) {
        fputs(" &middot; model ", f);
        html_text(f, model);
    }
    const char *type = history_run_string(h, "fine_tune_type");
    if (type) {
        fputs(" &middot; ", f);
        html_text(f, type);
    }
    fputs("</div>\n", f);
    write_cards(f, h, &s);
    write_loss(f, &s);
    write_small_charts(f, &s, max_grad_norm, plan_total(h), limit);
    write_memory(f, h, limit);
    write_run(f, h);
    write_events(f, h, &s);
    char now[64];
    page_date(now, sizeof now, time_unix());
    fprintf(f, "<footer>Made by <code>lmtune report</code> at %s from metrics.jsonl (%zu records%s) and run.json in "
            "the adapter directory. One file: no scripts, no external assets.</footer>\n", now, h->lines,
            h->torn_tail ? "; an incomplete last line, cut by a kill, left out" : "");
    series_free(&s);
    page_end(f);
    return 0;
}

int report_html_write(const char *adapter_dir, const char *out_path) {
    History h;
    TRY(history_load(&h, adapter_dir));
    char *path = out_path ? mem_strdup(out_path) : path_join(adapter_dir, REPORT_FILE);
    if (!path) {
        history_free(&h);
        return -1;
    }
    AtomicFile af;
    int rc = atomic_open(&af, path);
    if (rc == 0) {
        rc = report_html_render(af.fp, &h);
        if (rc == 0) {
            rc = atomic_commit(&af);
        } else {
            atomic_abort(&af);
        }
    }
    mem_free(path);
    history_free(&h);
    return rc;
}

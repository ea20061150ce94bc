/* svg_chart.c: line charts and stacked bars as inline SVG (see svg_chart.h). */
#include "report/svg_chart.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- text ---- */

void html_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default: fputc(*s, f);
        }
    }
}

void format_exact(char *buf, size_t cap, double v) {
    /* %.15g is exact for every value with at most 15 significant digits
     * (and prints no trailing zeros); the others need 16 or 17 */
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v) return;
    }
}

void format_short(char *buf, size_t cap, double v) {
    double a = fabs(v);
    static const char *const si[] = {"", "k", "M", "G", "T"};
    if (a >= 1e4) {
        int k = 0;
        while (a >= 1e3 && k < 4) {
            a /= 1e3;
            v /= 1e3;
            k++;
        }
        snprintf(buf, cap, "%.*f%s", a >= 100 ? 0 : a >= 10 ? 1 : 2, v, si[k]);
    } else if (a == 0) {
        snprintf(buf, cap, "0");
    } else if (a < 1e-3) {
        snprintf(buf, cap, "%.2e", v);
    } else {
        snprintf(buf, cap, "%.4g", v);
    }
}

/* ---- axes ---- */

#define AXIS_MAX_TICKS 24

typedef struct {
    double lo, hi;              /* the domain (log10 of the values on a log axis) */
    double ticks[AXIS_MAX_TICKS];   /* in domain units */
    double step;                /* of a linear axis (for the labels' digits) */
    int n;
    bool log;
} Axis;

static double nice_step(double range, int target) {
    double raw = range / target;
    double mag = pow(10, floor(log10(raw)));
    double r = raw / mag;
    double m = r <= 1 ? 1 : r <= 2 ? 2 : r <= 2.5 ? 2.5 : r <= 5 ? 5 : 10;
    return m * mag;
}

static void axis_linear(Axis *a, double lo, double hi, int target) {
    if (!(hi > lo)) {
        double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad;
        hi += pad;
    }
    double step = nice_step(hi - lo, target);
    a->log = false;
    a->step = step;
    a->lo = floor(lo / step + 1e-9) * step;
    a->hi = ceil(hi / step - 1e-9) * step;
    a->n = 0;
    for (int i = 0; a->n < AXIS_MAX_TICKS; i++) {
        double t = a->lo + i * step;
        if (t > a->hi + step * 1e-6) break;
        if (fabs(t) < step * 1e-9) t = 0;
        a->ticks[a->n++] = t;
    }
}

/* lo, hi: positive values. */
static void axis_log(Axis *a, double lo, double hi) {
    double L = log10(lo), H = log10(hi);
    if (H - L < 1e-9) {
        L -= 0.05;
        H += 0.05;
    }
    a->log = true;
    a->n = 0;
    if (H - L >= 1) {
        int d0 = (int)floor(L + 1e-9), d1 = (int)ceil(H - 1e-9);
        int every = (d1 - d0 + 7) / 8;   /* at most about 8 decade ticks */
        a->lo = d0;
        a->hi = d1;
        for (int d = d0; d <= d1 && a->n < AXIS_MAX_TICKS; d += every) a->ticks[a->n++] = d;
        return;
    }
    double pad = 0.05 * (H - L);
    a->lo = L - pad;
    a->hi = H + pad;
    /* 1..9 x 10^d inside; thinned to 1, 2, 5 when there are many */
    static const int all[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, few[] = {1, 2, 5};
    for (int pass = 0; pass < 2; pass++) {
        const int *ms = pass ? few : all;
        int nm = pass ? 3 : 9;
        a->n = 0;
        for (int d = (int)floor(a->lo); d <= (int)ceil(a->hi) && a->n < AXIS_MAX_TICKS; d++)
            for (int k = 0; k < nm && a->n < AXIS_MAX_TICKS; k++) {
                double t = log10(ms[k]) + d;
                if (t >= a->lo && t <= a->hi) a->ticks[a->n++] = t;
            }
        if (a->n <= 7) break;
    }
    if (a->n >= 2) return;
    /* less than a factor of two: linear ticks in value space */
    Axis lin;
    axis_linear(&lin, pow(10, a->lo), pow(10, a->hi), 4);
    a->n = 0;
    for (int i = 0; i < lin.n; i++)
        if (lin.ticks[i] > 0 && log10(lin.ticks[i]) >= a->lo && log10(lin.ticks[i]) <= a->hi)
            a->ticks[a->n++] = log10(lin.ticks[i]);
}

static void tick_label(char *buf, size_t cap, const Axis *a, double t) {
    double v = a->log ? pow(10, t) : t;
    if (a->log) {
        /* 10^d and m x 10^d print exactly */
        double r = round(v / pow(10, floor(t + 1e-9)));
        v = r * pow(10, floor(t + 1e-9));
        if (v < 1e-3) snprintf(buf, cap, "%g", v);   /* 1e-05, as the decade it is */
        else format_short(buf, cap, v);
        return;
    }
    double m = fmax(fabs(a->lo), fabs(a->hi));
    if (m >= 1e4) {
        format_short(buf, cap, v);
        return;
    }
    /* small values (learning rates): one exponent for the whole axis, 1.05e-3 */
    int exponent = m < 1e-2 ? (int)floor(log10(m)) : 0;
    double step = a->step / pow(10, exponent);
    int digits = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(step * pow(10, digits) - round(step * pow(10, digits))) > 1e-6) digits++;
    if (exponent) snprintf(buf, cap, "%.*fe%d", digits, v / pow(10, exponent), exponent);
    else snprintf(buf, cap, "%.*f", digits, v);
}

/* ---- line charts ---- */

typedef struct {
    double L, T, W, H;          /* plot area in pixels */
    Axis x, y;
} Frame;

static double fx(const Frame *fr, double x) { return fr->L + (x - fr->x.lo) / (fr->x.hi - fr->x.lo) * fr->W; }
static double fy(const Frame *fr, double y) {
    double v = fr->y.log ? log10(y) : y;
    return fr->T + fr->H - (v - fr->y.lo) / (fr->y.hi - fr->y.lo) * fr->H;
}
static bool plottable(const Chart *c, double y) { return isfinite(y) && (!c->ylog || y > 0); }

/* Legend entries (deduplicated by text), left to right from x; returns the x after them. */
static double legend_item(FILE *f, double x, double y, const char *text, const char *color, bool dashed, char shape) {
    if (shape) {
        if (shape == '^')
            fprintf(f, "<path d=\"M%.1f %.1fl4.5 8h-9z\" fill=\"%s\"/>", x + 9, y - 8, color);
        else
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>",
                    x + 9, y - 4, color);
    } else {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"%s/>", x,
                y - 4, x + 18, y - 4, color, dashed ? " stroke-dasharray=\"4 3\"" : "");
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"legend\">", x + 23, y);
    html_text(f, text);
    fputs("</text>", f);
    return x + 23 + 6.6 * (double)strlen(text) + 16;
}

static bool seen_before(const char *const *texts, size_t n, const char *t) {
    for (size_t i = 0; i < n; i++) if (texts[i] && !strcmp(texts[i], t)) return true;
    return false;
}

static void write_points(FILE *f, const Chart *c, const ChartSeries *s) {
    bool open = false;
    char bx[40], by[40];
    for (size_t i = 0; i < s->n; i++) {
        if (!isfinite(s->x[i]) || !plottable(c, s->y[i])) {
            if (open) fputs("\"/>\n", f);
            open = false;
            continue;
        }
        if (!open) {
            fprintf(f, "<polyline data-series=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                    "vector-effect=\"non-scaling-stroke\" stroke-linejoin=\"round\"%s points=\"", s->key, s->color,
                    s->dashed ? " stroke-dasharray=\"5 3\"" : "");
            open = true;
        } else {
            fputc(' ', f);
        }
        format_exact(bx, sizeof bx, s->x[i]);
        format_exact(by, sizeof by, c->ylog ? log10(s->y[i]) : s->y[i]);
        fprintf(f, "%s,%s", bx, by);
    }
    if (open) fputs("\"/>\n", f);
}

void svg_chart(FILE *f, const Chart *c) {
    const int width = c->width, height = c->height;
    Frame fr;
    memset(&fr, 0, sizeof fr);
    fr.L = 64;
    fr.T = c->note ? 60 : 46;
    fr.W = width - 64 - 18;
    fr.H = height - fr.T - 44;
    /* domains: every finite point, and the reference lines */
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    size_t points = 0;
    for (int k = 0; k < c->n_series; k++) {
        const ChartSeries *s = &c->series[k];
        for (size_t i = 0; i < s->n; i++) {
            if (!isfinite(s->x[i]) || !plottable(c, s->y[i])) continue;
            x0 = fmin(x0, s->x[i]);
            x1 = fmax(x1, s->x[i]);
            y0 = fmin(y0, s->y[i]);
            y1 = fmax(y1, s->y[i]);
            points++;
        }
    }
    for (size_t i = 0; i < c->n_vlines; i++) {
        if (!isfinite(c->vlines[i].at)) continue;
        x0 = fmin(x0, c->vlines[i].at);
        x1 = fmax(x1, c->vlines[i].at);
    }
    for (int i = 0; i < c->n_hlines; i++) {
        if (!plottable(c, c->hlines[i].at)) continue;
        y0 = fmin(y0, c->hlines[i].at);
        y1 = fmax(y1, c->hlines[i].at);
    }
    if (!isfinite(x0)) {
        x0 = 0;
        x1 = 1;
    }
    if (!isfinite(y0)) {
        y0 = c->ylog ? 0.1 : 0;
        y1 = c->ylog ? 10 : 1;
    }
    axis_linear(&fr.x, x0, x1, 6);
    if (c->ylog) axis_log(&fr.y, y0, y1);
    else axis_linear(&fr.y, y0, y1, 5);

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart%s%s\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\" data-chart=\"%s\" data-y-scale=\"%s\" aria-label=\"",
            c->css_class ? " " : "", c->css_class ? c->css_class : "", width, height, width, height,
            c->name ? c->name : "", c->ylog ? "log" : "linear");
    html_text(f, c->title);
    fputs("\">\n<title>", f);
    html_text(f, c->title);
    fputs("</title>\n<text x=\"8\" y=\"20\" class=\"ctitle\">", f);
    html_text(f, c->title);
    fputs("</text>\n", f);
    if (c->note) {
        fputs("<text x=\"8\" y=\"54\" class=\"cnote\">", f);
        html_text(f, c->note);
        fputs("</text>\n", f);
    }
    /* legend */
    const char *shown[CHART_MAX_SERIES + 16] = {0};
    size_t n_shown = 0;
    double lx = 10;
    for (int k = 0; k < c->n_series; k++)
        lx = legend_item(f, lx, 38, c->series[k].label, c->series[k].color, c->series[k].dashed, 0);
    for (size_t i = 0; i < c->n_vlines && n_shown < 8; i++) {
        const char *t = c->vlines[i].legend;
        if (!t || seen_before(shown, n_shown, t)) continue;
        shown[n_shown++] = t;
        lx = legend_item(f, lx, 38, t, c->vlines[i].color, true, 0);
    }
    for (size_t i = 0; i < c->n_marks && n_shown < 16; i++) {
        if (c->marks[i].shape != '^' || seen_before(shown, n_shown, "clipped")) continue;
        shown[n_shown++] = "clipped";
        lx = legend_item(f, lx, 38, "clipped updates", c->marks[i].color, false, '^');
    }
    /* grid, ticks and labels */
    fputs("<g class=\"grid\">", f);
    for (int i = 0; i < fr.y.n; i++) {
        double py = fr.T + fr.H - (fr.y.ticks[i] - fr.y.lo) / (fr.y.hi - fr.y.lo) * fr.H;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\"/>", fr.L, py, fr.L + fr.W, py);
    }
    for (int i = 0; i < fr.x.n; i++) {
        double px = fx(&fr, fr.x.ticks[i]);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>", px, fr.T, px, fr.T + fr.H);
    }
    fputs("</g>\n<g class=\"ticks\">", f);
    char lab[48];
    for (int i = 0; i < fr.y.n; i++) {
        double py = fr.T + fr.H - (fr.y.ticks[i] - fr.y.lo) / (fr.y.hi - fr.y.lo) * fr.H;
        tick_label(lab, sizeof lab, &fr.y, fr.y.ticks[i]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.2f\" text-anchor=\"end\">%s</text>", fr.L - 6, py + 4, lab);
    }
    for (int i = 0; i < fr.x.n; i++) {
        tick_label(lab, sizeof lab, &fr.x, fr.x.ticks[i]);
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", fx(&fr, fr.x.ticks[i]),
                fr.T + fr.H + 16, lab);
    }
    fprintf(f, "</g>\n<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n", fr.L, fr.T,
            fr.W, fr.H);
    fprintf(f, "<text class=\"alabel\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", fr.L + fr.W / 2, height - 8);
    html_text(f, c->xlabel);
    fprintf(f, "</text>\n<text class=\"alabel\" transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\">",
            fr.T + fr.H / 2);
    html_text(f, c->ylabel);
    if (c->ylog) fputs(" (log scale)", f);
    fputs("</text>\n", f);
    /* the data, clipped to the plot */
    /* clip paths need document-unique ids: the chart's name */
    const char *clip = c->name ? c->name : "chart";
    fprintf(f, "<clipPath id=\"clip-%s\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n"
            "<g clip-path=\"url(#clip-%s)\">\n", clip, fr.L - 9, fr.T - 9, fr.W + 18, fr.H + 18, clip);
    for (size_t i = 0; i < c->n_vlines; i++) {
        const ChartLine *v = &c->vlines[i];
        if (!isfinite(v->at)) continue;
        double px = fx(&fr, v->at);
        fprintf(f, "<line class=\"vline\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"1.5\"%s><title>", px, fr.T, px, fr.T + fr.H, v->color,
                v->dashed ? " stroke-dasharray=\"4 3\"" : "");
        html_text(f, v->label);
        fputs("</title></line>\n", f);
    }
    for (int i = 0; i < c->n_hlines; i++) {
        const ChartLine *h = &c->hlines[i];
        if (!plottable(c, h->at)) continue;
        double py = fy(&fr, h->at);
        double ty = py - 16 < fr.T ? py + 14 : py - 4;   /* the label stays inside the plot */
        fprintf(f, "<line class=\"hline\" x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"%s\" "
                "stroke-width=\"1.5\"%s/><text class=\"hlabel\" x=\"%.1f\" y=\"%.2f\" text-anchor=\"end\" "
                "fill=\"%s\">", fr.L, py, fr.L + fr.W, py, h->color, h->dashed ? " stroke-dasharray=\"6 4\"" : "",
                fr.L + fr.W - 4, ty, h->color);
        html_text(f, h->label);
        fputs("</text>\n", f);
    }
    char a[40], e[40], d[40], ff[40];
    double sx = fr.W / (fr.x.hi - fr.x.lo), sy = -fr.H / (fr.y.hi - fr.y.lo);
    format_exact(a, sizeof a, sx);
    format_exact(e, sizeof e, fr.L - sx * fr.x.lo);
    format_exact(d, sizeof d, sy);
    format_exact(ff, sizeof ff, fr.T + fr.H - sy * fr.y.lo);
    fprintf(f, "<g class=\"data\" transform=\"matrix(%s 0 0 %s %s %s)\">\n", a, d, e, ff);
    for (int k = 0; k < c->n_series; k++) write_points(f, c, &c->series[k]);
    fputs("</g>\n", f);
    for (int k = 0; k < c->n_series; k++) {
        const ChartSeries *s = &c->series[k];
        if (!s->dots) continue;
        fprintf(f, "<g fill=\"%s\">", s->color);
        for (size_t i = 0; i < s->n; i++)
            if (isfinite(s->x[i]) && plottable(c, s->y[i]))
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.6\"/>", fx(&fr, s->x[i]), fy(&fr, s->y[i]));
        fputs("</g>\n", f);
    }
    for (size_t i = 0; i < c->n_marks; i++) {
        const ChartMark *m = &c->marks[i];
        if (!isfinite(m->x) || !plottable(c, m->y)) continue;
        double px = fx(&fr, m->x), py = fy(&fr, m->y);
        fprintf(f, "<g class=\"mark\" data-x=\"%.17g\" data-y=\"%.17g\">", m->x, m->y);
        if (m->shape == '^')
            fprintf(f, "<path d=\"M%.2f %.2fl5 9h-10z\" fill=\"%s\"/>", px, py - 14, m->color);
        else
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"6.5\" fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\"/>",
                    px, py, m->color);
        if (m->label) {
            bool left = px > fr.L + fr.W * 0.7;
            fprintf(f, "<text class=\"mlabel\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\" fill=\"%s\">",
                    left ? px - 10 : px + 10, py - 10, left ? "end" : "start", m->color);
            html_text(f, m->label);
            fputs("</text>", f);
        }
        fputs("<title>", f);
        html_text(f, m->tooltip);
        fputs("</title></g>\n", f);
    }
    fputs("</g>\n", f);
    if (points == 0)
        fprintf(f, "<text class=\"empty\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">no data yet</text>\n",
                fr.L + fr.W / 2, fr.T + fr.H / 2);
    fputs("</svg>\n", f);
}

/* ---- stacked bars ---- */

static void bytes_label(char *buf, size_t cap, double v, double scale_max) {
    if (scale_max >= 2e9) snprintf(buf, cap, "%.*f GB", v == 0 ? 0 : v < 1e10 ? 1 : 0, v / 1e9);
    else snprintf(buf, cap, "%.*f MB", v == 0 ? 0 : v < 1e7 ? 1 : 0, v / 1e6);
}

/* A bar's label, on two lines at a space when it is longer than the room
 * left of the bars (about 27 characters). */
static void bar_label(FILE *f, const char *label, double x, double y) {
    const size_t room = 27;
    size_t n = strlen(label);
    const char *cut = NULL;
    if (n > room)
        for (const char *p = label + n / 3; *p && !cut; p++) if (*p == ' ') cut = p;
    if (!cut) {
        html_text(f, label);
        return;
    }
    char first[256];
    snprintf(first, sizeof first, "%.*s", (int)(cut - label), label);
    fprintf(f, "<tspan x=\"%.1f\" y=\"%.1f\">", x, y - 7);
    html_text(f, first);
    fprintf(f, "</tspan><tspan x=\"%.1f\" y=\"%.1f\">", x, y + 8);
    html_text(f, cut + 1);
    fputs("</tspan>", f);
}

void svg_bars(FILE *f, const char *title, const Bar *bars, int n_bars, const ChartLine *vlines, int n_vlines,
              int width) {
    const double L = 200, R = 90, T = 34, bar_h = 26, gap = 16;
    const double W = width - L - R;
    const int height = (int)(T + n_bars * (bar_h + gap) + 34);
    double top = 0;
    for (int b = 0; b < n_bars; b++) {
        double t = 0;
        for (int p = 0; p < bars[b].n_parts; p++) t += bars[b].parts[p].value;
        top = fmax(top, t);
    }
    for (int i = 0; i < n_vlines; i++) if (isfinite(vlines[i].at)) top = fmax(top, vlines[i].at);
    if (top <= 0) top = 1;
    Axis ax;
    axis_linear(&ax, 0, top * 1.02, 6);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", width, height, width, height);
    html_text(f, title);
    fputs("\">\n<title>", f);
    html_text(f, title);
    fputs("</title>\n<text x=\"8\" y=\"20\" class=\"ctitle\">", f);
    html_text(f, title);
    fputs("</text>\n<g class=\"grid\">", f);
    double y_end = T + n_bars * (bar_h + gap) - gap / 2;
    char lab[48];
    for (int i = 0; i < ax.n; i++) {
        double px = L + ax.ticks[i] / ax.hi * W;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>", px, T - 6, px, y_end);
    }
    fputs("</g>\n<g class=\"ticks\">", f);
    for (int i = 0; i < ax.n; i++) {
        bytes_label(lab, sizeof lab, ax.ticks[i], ax.hi);
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", L + ax.ticks[i] / ax.hi * W,
                y_end + 16, lab);
    }
    fputs("</g>\n", f);
    for (int b = 0; b < n_bars; b++) {
        const Bar *bar = &bars[b];
        double y = T + b * (bar_h + gap), x = L, total = 0;
        fprintf(f, "<g class=\"bar\" data-bar=\"%s\"><text class=\"blabel\" x=\"%.1f\" y=\"%.1f\" "
                "text-anchor=\"end\">", bar->key, L - 8, y + bar_h / 2 + 4);
        bar_label(f, bar->label, L - 8, y + bar_h / 2 + 4);
        fputs("</text>", f);
        for (int p = 0; p < bar->n_parts; p++) {
            const BarPart *part = &bar->parts[p];
            if (!(part->value > 0)) continue;
            double w = part->value / ax.hi * W;
            char exact[40], human[48];
            format_exact(exact, sizeof exact, part->value);
            bytes_label(human, sizeof human, part->value, 0);
            fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" data-part=\"", x, y,
                    w, bar_h, part->color);
            html_text(f, part->label);
            fprintf(f, "\" data-bytes=\"%s\"><title>", exact);
            html_text(f, part->label);
            fprintf(f, ": %s</title></rect>", human);
            x += w;
            total += part->value;
        }
        if (total >= 1e9) snprintf(lab, sizeof lab, "%.2f GB", total / 1e9);
        else snprintf(lab, sizeof lab, "%.*f MB", total >= 1e8 ? 0 : 1, total / 1e6);
        fprintf(f, "<text class=\"btotal\" x=\"%.1f\" y=\"%.1f\">%s</text></g>\n", x + 6, y + bar_h / 2 + 4, lab);
    }
    for (int i = 0; i < n_vlines; i++) {
        if (!isfinite(vlines[i].at)) continue;
        double px = L + vlines[i].at / ax.hi * W;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                "<text class=\"hlabel\" x=\"%.2f\" y=\"%.1f\" text-anchor=\"end\" fill=\"%s\">", px, T - 8, px, y_end,
                vlines[i].color, vlines[i].dashed ? " stroke-dasharray=\"6 4\"" : "", px - 4, T - 10, vlines[i].color);
        html_text(f, vlines[i].label);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
}

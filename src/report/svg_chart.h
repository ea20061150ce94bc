/* svg_chart.h: the report's charts as inline SVG (no scripts): line charts
 * with axes, ticks, units, a legend, reference lines and markers, and
 * horizontal stacked bars.
 *
 * A line chart's series are polylines in data coordinates inside one group
 * whose transform maps them onto the plot (vector-effect keeps the strokes
 * thin), so each point's text is the value itself: x as given, y as given
 * (log10 of it on a log scale), each printed with digits enough to read
 * back to the same double. A test can read the points back exactly;
 * every polyline carries data-series="KEY" and the <svg> data-y-scale. A
 * series is cut into several polylines at non-finite values (and, on a log
 * scale, at values <= 0). */
#ifndef LT_SVG_CHART_H
#define LT_SVG_CHART_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct {
    const double *x, *y;        /* (n) */
    size_t n;
    const char *key;            /* data-series: the metrics key it plots */
    const char *label;          /* in the legend */
    const char *color;
    bool dashed;
    bool dots;                  /* a dot at every point (few points) */
} ChartSeries;

typedef struct {
    double at;                  /* y of a horizontal line, x of a vertical one */
    const char *label;          /* a horizontal line's text beside it; a vertical line's tooltip */
    const char *legend;         /* a vertical line's legend entry (one per text), or NULL */
    const char *color;
    bool dashed;
} ChartLine;

typedef struct {
    double x, y;
    const char *tooltip;
    const char *color;
    char shape;                 /* 'o' ring, '^' triangle, 'x' cross */
    const char *label;          /* drawn beside it, or NULL */
} ChartMark;

#define CHART_MAX_SERIES 4
#define CHART_MAX_HLINES 4

typedef struct {
    const char *name;                   /* data-chart, and the clip path's id: unique in a page */
    const char *title;
    const char *xlabel, *ylabel;        /* with units */
    const char *css_class;              /* extra class of the <svg> */
    int width, height;
    bool ylog;
    ChartSeries series[CHART_MAX_SERIES];
    int n_series;
    ChartLine hlines[CHART_MAX_HLINES];
    int n_hlines;
    const ChartLine *vlines;            /* skipped updates, resumes */
    size_t n_vlines;
    const ChartMark *marks;
    size_t n_marks;
    const char *note;                   /* a line under the title, or NULL */
} Chart;

void svg_chart(FILE *f, const Chart *c);

typedef struct {
    const char *label;          /* a class name */
    const char *color;
    double value;               /* bytes */
} BarPart;

typedef struct {
    const char *label;          /* left of the bar */
    const char *key;            /* data-bar */
    const BarPart *parts;
    int n_parts;
} Bar;

/* Horizontal bars on one byte axis (decimal MB / GB), with vertical lines
 * (the memory limit). */
void svg_bars(FILE *f, const char *title, const Bar *bars, int n_bars, const ChartLine *vlines, int n_vlines,
              int width);

/* HTML text with <, >, &, " escaped. */
void html_text(FILE *f, const char *s);
/* A %g text of v that reads back as v: 15 significant digits, or 16 or 17
 * when fewer do not read back (no trailing zeros: 720, 0.001). */
void format_exact(char *buf, size_t cap, double v);
/* Short number: 1.2k, 3.4M, 0.0012, 12.5. */
void format_short(char *buf, size_t cap, double v);
#endif

/* plan_html.c: the page of `lmtune plan --html FILE` (see report_html.h):
 * the run's memory plan as a stacked bar by buffer class, the same run with
 * each lever pulled as a bar beside it (stacked the same way, so what a
 * lever saves shows where it saves it), the memory limit, and a table of
 * the totals. One self-contained file, as the training report. */
#include <math.h>
#include <string.h>
#include "base/error.h"
#include "base/fileio.h"
#include "report/page.h"
#include "report/report_html.h"
#include "report/svg_chart.h"

static void write_page(FILE *f, const PlanPage *p) {
    page_begin(f, p->title);
    fputs("<h1>Memory plan</h1>\n<div class=\"sub\">", f);
    html_text(f, p->title);
    fputs("</div>\n<section>\n", f);
    BarPart parts[PLAN_PAGE_BARS][PLAN_PAGE_CLASSES];
    Bar bars[PLAN_PAGE_BARS];
    for (int b = 0; b < p->n_bars; b++) {
        const PlanBar *pb = &p->bars[b];
        for (int k = 0; k < pb->n_classes; k++)
            parts[b][k] = (BarPart){pb->class_names[k], page_class_color(pb->class_ids[k]), pb->class_bytes[k]};
        bars[b] = (Bar){pb->label, b == 0 ? "plan" : "lever", parts[b], pb->n_classes};
    }
    ChartLine limit[1];
    char label[64], human[32];
    int nl = 0;
    if (p->memory_limit > 0) {
        page_bytes(human, sizeof human, p->memory_limit);
        snprintf(label, sizeof label, "--memory-limit %s", human);
        limit[nl++] = (ChartLine){p->memory_limit, label, NULL, "#a50f15", true};
    }
    svg_bars(f, "Planned bytes by buffer class: the run, and the run with each lever pulled", bars, p->n_bars, limit,
             nl, 1086);
    /* the legend: every class of the run's plan */
    fputs("<div class=\"chips\">\n", f);
    const PlanBar *run = &p->bars[0];
    for (int k = 0; k < run->n_classes; k++) {
        page_bytes(human, sizeof human, run->class_bytes[k]);
        fprintf(f, "<span><span class=\"sw-color\" style=\"background:%s\"></span>",
                page_class_color(run->class_ids[k]));
        html_text(f, run->class_names[k]);
        fprintf(f, " <b>%s</b> (%.1f%%)</span>\n", human, run->total > 0 ? 100 * run->class_bytes[k] / run->total : 0);
    }
    fputs("</div>\n</section>\n<section>\n<h2>Levers</h2>\n<table><tr><th>run</th><th class=\"num\">planned peak"
          "</th><th class=\"num\">saves</th><th>fits the limit</th></tr>\n", f);
    for (int b = 0; b < p->n_bars; b++) {
        const PlanBar *pb = &p->bars[b];
        char total[32], saves[32];
        page_bytes(total, sizeof total, pb->total);
        page_bytes(saves, sizeof saves, run->total - pb->total);
        fputs(b == 0 ? "<tr style=\"font-weight:600\"><td>" : "<tr><td><code>", f);
        html_text(f, pb->label);
        fprintf(f, "%s</td><td class=\"num\" data-total=\"%.17g\">%s</td><td class=\"num\">%s</td><td>%s</td></tr>\n",
                b == 0 ? "" : "</code>", pb->total, total, b == 0 ? "" : saves,
                p->memory_limit <= 0 ? "no limit" : pb->total <= p->memory_limit ? "yes" : "no");
    }
    fputs("</table>\n", f);
    if (p->command) {
        fputs("<p class=\"note\">Command: <code>", f);
        html_text(f, p->command);
        fputs("</code></p>\n", f);
    }
    fputs("<p class=\"note\">Every buffer of the run is an entry of the plan, computed from config.json, the "
          "safetensors headers and the real batch widths of the data, before any weight is loaded; the arena of "
          "the run is carved by the same walk.</p>\n</section>\n", f);
    page_end(f);
}

int plan_html_write(const char *path, const PlanPage *p) {
    if (p->n_bars < 1 || p->n_bars > PLAN_PAGE_BARS) return error_set("internal: a plan page needs 1 to %d bars",
                                                                      PLAN_PAGE_BARS);
    AtomicFile af;
    TRY(atomic_open(&af, path));
    write_page(af.fp, p);
    return atomic_commit(&af);
}

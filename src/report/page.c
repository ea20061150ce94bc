/* page.c: the shared head, style sheet and formatters of the report pages
 * (see page.h). The style sheet also holds the loss charts' switches:
 * radio buttons and a checkbox whose :checked state shows one of the four
 * charts (x: iterations or trained tokens; y: linear or log), so the page
 * needs no script. */
#include "report/page.h"
#include <math.h>
#include <string.h>
#include <time.h>
#include "report/svg_chart.h"

static const char STYLE[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#1d2330;"
    "background:#f4f5f7;margin:0}\n"
    "main{max-width:1120px;margin:0 auto;padding:20px 24px 40px}\n"
    "h1{font-size:24px;margin:0 0 2px}h2{font-size:17px;margin:0 0 10px}\n"
    ".sub{color:#5b6475;margin-bottom:16px;word-break:break-all}\n"
    "section{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:14px 16px;margin:0 0 16px}\n"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(200px,1fr));gap:10px;background:none;border:0;"
    "padding:0}\n"
    ".card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:10px 12px}\n"
    ".card .k{color:#5b6475;font-size:12px;text-transform:uppercase;letter-spacing:.04em}\n"
    ".card .v{font-size:20px;font-weight:600}.card .n{color:#5b6475;font-size:12px}\n"
    ".status-ok{color:#1a7f37}.status-warn{color:#b35900}.status-bad{color:#c62828}.status-run{color:#0b5cad}\n"
    ".grid2{display:grid;grid-template-columns:1fr 1fr;gap:0 12px}\n"
    "svg{display:block;max-width:100%;height:auto}\n"
    "svg text{font-family:inherit;font-size:12px;fill:#39404d}\n"
    "svg .ctitle{font-size:14px;font-weight:600;fill:#1d2330}svg .cnote{fill:#5b6475}\n"
    "svg .grid line{stroke:#e6e9ef;stroke-width:1}svg .frame{fill:none;stroke:#9aa3b2;stroke-width:1}\n"
    "svg .alabel{font-size:12.5px;fill:#1d2330}svg .mlabel{font-weight:600}svg .hlabel{font-size:11.5px}\n"
    "svg .empty{font-size:15px;fill:#9aa3b2}svg .blabel{font-size:12.5px}svg .btotal{font-weight:600}\n"
    ".switch{display:flex;gap:18px;align-items:center;margin:0 0 6px;color:#5b6475}\n"
    ".switch label{border:1px solid #c9cfd9;border-radius:5px;padding:2px 10px;cursor:pointer;color:#1d2330}\n"
    "input.sw{position:absolute;opacity:0;pointer-events:none}\n"
    ".loss svg{display:none}\n"
    "#x-it:checked~#y-log:not(:checked)~.loss .it-lin,#x-it:checked~#y-log:checked~.loss .it-log,"
    "#x-tok:checked~#y-log:not(:checked)~.loss .tok-lin,#x-tok:checked~#y-log:checked~.loss .tok-log{display:block}\n"
    "#x-it:checked~.switch label[for=x-it],#x-tok:checked~.switch label[for=x-tok],"
    "#y-log:checked~.switch label[for=y-log]{background:#1d2330;color:#fff;border-color:#1d2330}\n"
    "table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:4px 8px;border-bottom:1px solid #eef0f4;"
    "vertical-align:top}th{color:#5b6475;font-weight:600;font-size:12.5px}\n"
    "td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}\n"
    "code{font:12.5px ui-monospace,'DejaVu Sans Mono',monospace;word-break:break-all}\n"
    ".flags code{word-break:normal;white-space:nowrap}.flags td{word-break:break-word}\n"
    ".chips{display:flex;flex-wrap:wrap;gap:4px 18px;margin:8px 0 0;font-size:13px}\n"
    ".sw-color{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}\n"
    ".two{display:grid;grid-template-columns:1fr 1fr;gap:16px}\n"
    ".note{color:#5b6475;font-size:12.5px;margin:6px 0 0}\n"
    "footer{color:#5b6475;font-size:12px}\n";

void page_begin(FILE *f, const char *title) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>", f);
    html_text(f, title);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n", STYLE);
}

void page_end(FILE *f) { fputs("</main>\n</body>\n</html>\n", f); }

/* One colour per buffer class of memory/plan.h (MemClass order). */
const char *page_class_color(int index) {
    static const char *const colors[] = {
        "#4c72b0", "#8da0cb", "#dd8452", "#c44e52", "#937860", "#55a868", "#8fd19e", "#64b5cd", "#8172b3",
        "#da8bc3", "#ccb974", "#bcbd22", "#17becf", "#a5a5a5", "#6b6b6b", "#2f4b7c"};
    int n = (int)(sizeof colors / sizeof *colors);
    return colors[index >= 0 && index < n ? index : n - 1];
}

void page_bytes(char *buf, size_t cap, double bytes) {
    if (!isfinite(bytes)) snprintf(buf, cap, "n/a");
    else if (bytes >= 1e9) snprintf(buf, cap, "%.3f GB", bytes / 1e9);
    else if (bytes >= 1e6) snprintf(buf, cap, "%.1f MB", bytes / 1e6);
    else snprintf(buf, cap, "%.1f kB", bytes / 1e3);
}

void page_duration(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) snprintf(buf, cap, "n/a");
    else if (s >= 3600) snprintf(buf, cap, "%ld h %02ld min", (long)s / 3600, (long)s / 60 % 60);
    else if (s >= 60) snprintf(buf, cap, "%ld min %02ld s", (long)s / 60, (long)s % 60);
    else snprintf(buf, cap, "%.1f s", s);
}

void page_date(char *buf, size_t cap, double t) {
    if (!isfinite(t)) {
        snprintf(buf, cap, "n/a");
        return;
    }
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

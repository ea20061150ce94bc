/* cmd_report.c: `lmtune report ADAPTER_DIR [--out FILE]`: the training
 * report (report/report_html.h) of a run, from its adapter directory
 * alone: at any time, also while the run is going (it reads what the run
 * has flushed) or after it was killed. `lmtune train` writes the same page
 * to ADAPTER_DIR/report.html at every evaluation and at the end. */
#include <stddef.h>
#include <stdio.h>
#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "report/report_html.h"

typedef struct {
    const char *adapter_path, *out;
    ArgResult parsed;
} ReportArgs;

#define OFF(f) offsetof(ReportArgs, f)
static const ArgSpec REPORT_SPECS[] = {
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR",
     "the --adapter-path of a training run (may also be given first, without the flag)", NULL, ARG_UNBOUNDED},
    {"out", 0, ARG_STRING, OFF(out), "FILE", "where to write the page [default: ADAPTER_DIR/report.html]", NULL,
     ARG_UNBOUNDED},
};
#undef OFF
static const ArgTable REPORT_TABLE = {
    "report", "report ADAPTER_DIR [--out FILE]",
    REPORT_SPECS, sizeof REPORT_SPECS / sizeof REPORT_SPECS[0], false, NULL, NULL,
    "Writes the training report of a run: one HTML file with inline SVG and CSS (no scripts,\n"
    "no external assets), made from ADAPTER_DIR/metrics.jsonl and ADAPTER_DIR/run.json:\n"
    "loss curves, learning rate, throughput, gradient norm, memory plan against the measured\n"
    "peak and the limit, and the run's settings.\n",
};

int cmd_report(int argc, char **argv) {
    ReportArgs a = {0};
    /* ADAPTER_DIR as the first argument: the parser sees the rest */
    if (argc > 1 && argv[1][0] != '-') {
        a.adapter_path = argv[1];
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    const char *positional = a.adapter_path;
    if (args_parse(&REPORT_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    if (positional && a.adapter_path != positional)
        die("the adapter directory is given twice (%s and --adapter-path %s)", positional, a.adapter_path);
    if (!a.adapter_path) die("an adapter directory is required: lmtune report ADAPTER_DIR [--out FILE]");
    if (report_html_write(a.adapter_path, a.out) < 0) die_with_error();
    printf("Report written to %s%s\n", a.out ? a.out : a.adapter_path, a.out ? "" : "/" REPORT_FILE);
    return 0;
}

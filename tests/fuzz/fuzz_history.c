/* fuzz_history.c: libFuzzer target for a run's history (ADAPTER_DIR/
 * metrics.jsonl, read by report/history.c) and the report drawn from it
 * (report/report_html.c): any input is refused with a one-line message
 * naming the file, or gives a page. The input is the metrics file; when it
 * starts as a JSON object, a second pass also takes it as run.json, so
 * malformed run records are fuzzed as well.
 * Build and run: make fuzz (tests/fuzz/run.sh). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/error.h"
#include "report/history.h"
#include "report/report_html.h"

static char dir[] = "/tmp/lmtune_fuzz_history_XXXXXX";
static char metrics_path[96], run_path[96];
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (!mkdtemp(dir)) abort();
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", dir);
    snprintf(run_path, sizeof run_path, "%s/run.json", dir);
    devnull = fopen("/dev/null", "w");
    if (!devnull) abort();
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_file(metrics_path, data, size);
    /* as run.json too only when it can be one (a JSON object): one page per input otherwise */
    size_t lead = 0;
    while (lead < size && (data[lead] == ' ' || data[lead] == '\n' || data[lead] == '\t')) lead++;
    int passes = lead < size && data[lead] == '{' ? 2 : 1;
    for (int with_run = 0; with_run < passes; with_run++) {
        if (with_run) write_file(run_path, data, size);
        else unlink(run_path);
        History h;
        if (history_load(&h, dir) < 0) {
            const char *m = error_message();
            if (!strstr(m, dir) || strchr(m, '\n')) abort();
            continue;
        }
        if (report_html_render(devnull, &h) < 0) abort();   /* only allocation failures, none here */
        history_free(&h);
    }
    return 0;
}

/* test_progress_text.c: the terminal's progress line (train/report.h):
 * its text for a few widths, written out by hand from the format (a bar of
 * at most 30 cells filled in proportion, then iteration/iters, loss with 3
 * decimals, whole tokens/s and the ETA as m:ss or h:mm:ss), never wider than
 * the terminal less one column (a full line would wrap on some terminals,
 * and a wrapped line cannot be redrawn in place). */
#include <math.h>
#include <string.h>
#include "check.h"
#include "train/report.h"

static void expect(int columns, int it, int iters, double loss, double tps, double eta, const char *want) {
    char buf[512];
    report_progress_text(buf, sizeof buf, columns, it, iters, loss, tps, eta);
    CHECK_MSG(!strcmp(buf, want), "columns %d: got \"%s\", expected \"%s\"", columns, buf, want);
    CHECK_MSG((int)strlen(buf) <= columns - 1, "columns %d: %zu characters", columns, strlen(buf));
}

int main(void) {
    /* 80 columns: the numbers take 39, the bar its maximum of 30 cells, 5/20 of them filled (7) */
    expect(80, 5, 20, 1.25, 1234.4, 75, "[=======>                      ] 5/20  loss 1.250  1234 tok/s  ETA 1:15");
    /* the last iteration: full */
    expect(80, 20, 20, 0.5, 99.6, 0, "[==============================] 20/20  loss 0.500  100 tok/s  ETA 0:00");
    /* 56 columns: 55 - 39 - 2 = 14 cells, 3 filled (14 x 5 / 20) */
    expect(56, 5, 20, 1.25, 1234.4, 75, "[===>          ] 5/20  loss 1.250  1234 tok/s  ETA 1:15");
    /* 50 columns: no room for a bar of 10 cells: the numbers alone */
    expect(50, 5, 20, 1.25, 1234.4, 75, "5/20  loss 1.250  1234 tok/s  ETA 1:15");
    /* 20 columns: cut to 19 */
    expect(20, 5, 20, 1.25, 1234.4, 75, "5/20  loss 1.250  1");
    /* hours, and an unknown ETA before the first iteration is timed */
    expect(50, 1, 100000, 7.0, 10, 3725, "1/100000  loss 7.000  10 tok/s  ETA 1:02:05");
    /* (36 characters leave room for the smallest bar, 10 cells) */
    expect(50, 0, 10, 7.0, 0, NAN, "[>         ] 0/10  loss 7.000  0 tok/s  ETA --:--");
    return check_finish("train/progress_text");
}

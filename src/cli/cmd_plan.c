/* cmd_plan.c: `lmtune plan`: the exact memory plan of a `lmtune train`
 * invocation (same flags, same -c config), computed from config.json, the
 * safetensors headers and the real batch widths of the data, before any
 * weight is loaded. With --memory-limit it says whether the run fits and,
 * when it does not, which lever makes it fit. Exit status 1 when over. */
#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/run_plan.h"
#include "dist/dist.h"
#include <stdio.h>
#include <string.h>

int cmd_plan(int argc, char **argv) {
    bool verbose = false;
    int kept = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) { verbose = true; continue; }
        argv[kept++] = argv[i];
    }
    argc = kept;
    TrainArgs a;
    train_args_default(&a);
    if (train_args_parse(&a, argc, argv) < 0) { args_release(); die_with_error(); }
    if (a.parsed.help) { printf("\n(plan takes the flags of train, plus --verbose to list every buffer)\n"); args_release(); return 0; }
    RunData d;
    int world = dist_world() > 0 ? dist_world() : 1;
    if (run_data_load(&d, &a, world) < 0) { run_data_free(&d); args_release(); die_with_error(); }
    int rc = 0;
    if (run_choose_batch(&a, &d.in, stdout) < 0) { rc = 1; fprintf(stderr, "lmtune: error: %s\n", error_message()); goto out; }
    MemPlan plan; ModelSpec spec;
    if (run_plan_build(&a, &d.in, &plan, &spec) < 0) { rc = 1; fprintf(stderr, "lmtune: error: %s\n", error_message()); goto out; }
    run_plan_print(&a, &spec, &plan, verbose, stdout);
    if (run_check_limit(&a, &d.in, &plan) < 0) { rc = 1; fprintf(stderr, "lmtune: error: %s\n", error_message()); }
    else if (a.memory_limit) printf("Fits the --memory-limit.\n");
    plan_free(&plan);
out:
    run_data_free(&d);
    args_release();
    return rc;
}

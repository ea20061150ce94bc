/* cmd_plan.c: `lmtune plan`: the exact memory plan of a `lmtune train`
 * invocation (same flags, same -c config), computed from config.json, the
 * safetensors headers and the real batch widths of the data, before any
 * weight is loaded. With --memory-limit it says whether the run fits and,
 * when it does not, which lever makes it fit. Exit status 1 when over. */
#include "base/error.h"
#include "base/sys.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/run_plan.h"
#include "dist/dist.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_plan(int argc, char **argv) {
    bool verbose = false;
    int kept = 0, workers = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) { verbose = true; continue; }
        if (!strcmp(argv[i], "--workers") && i + 1 < argc) {
            char *end; long w = strtol(argv[i + 1], &end, 10);
            if (*end || w < 1 || w > 65536) die("--workers: expected a positive integer, got \"%s\"", argv[i + 1]);
            workers = (int)w; i++; continue;
        }
        argv[kept++] = argv[i];
    }
    argc = kept;
    TrainArgs a;
    train_args_default(&a);
    if (train_args_parse(&a, argc, argv) < 0) { args_release(); die_with_error(); }
    if (a.parsed.help) { printf("\n(plan takes the flags of train, plus --verbose to list every buffer and --workers N\n"
               " for a data-parallel run of N workers: each plans its share of the batch)\n"); args_release(); return 0; }
    RunData d;
    int world = workers ? workers : dist_world() > 0 ? dist_world() : 1;
    if (run_data_load(&d, &a, world) < 0) { run_data_free(&d); args_release(); die_with_error(); }
    int rc = 0;
    if (run_choose_batch(&a, &d.in, stdout) < 0) { rc = 1; fprintf(stderr, "lmtune: error: %s\n", error_message()); goto out; }
    MemPlan plan; ModelSpec spec;
    if (run_plan_build(&a, &d.in, &plan, &spec) < 0) { rc = 1; fprintf(stderr, "lmtune: error: %s\n", error_message()); goto out; }
    run_plan_print(&a, &spec, &plan, verbose, stdout);
    {   /* the same run with checkpointing flipped, so both columns are known */
        TrainArgs v = a;
        v.grad_checkpoint = !a.grad_checkpoint;
        MemPlan p2; ModelSpec s2;
        if (run_plan_build(&v, &d.in, &p2, &s2) == 0) {
            char b1[32], b2[32], b3[32], b4[32];
            printf("%s --grad-checkpoint: saved activations %s, checkpointed block inputs %s, recompute workspace %s; total %s\n",
                   v.grad_checkpoint ? "With" : "Without",
                   format_bytes(b1, sizeof b1, plan_class_bytes(&p2, MEM_ACTIVATIONS)),
                   format_bytes(b2, sizeof b2, plan_class_bytes(&p2, MEM_CHECKPOINTS)),
                   format_bytes(b3, sizeof b3, plan_class_bytes(&p2, MEM_RECOMPUTE)),
                   format_bytes(b4, sizeof b4, plan_total(&p2)));
            plan_free(&p2);
        }
        error_clear();
    }
    if (run_check_limit(&a, &d.in, &plan) < 0) { rc = 1; fprintf(stderr, "lmtune: error: %s\n", error_message()); }
    else if (a.memory_limit) printf("Fits the --memory-limit.\n");
    plan_free(&plan);
out:
    run_data_free(&d);
    args_release();
    return rc;
}

/* cmd_plan.c: `lmtune plan`: the exact memory plan of a `lmtune train`
 * invocation (same flags, same -c config), computed from config.json, the
 * safetensors headers and the real batch widths of the data, before any
 * weight is loaded. With --memory-limit it says whether the run fits and,
 * when it does not, which lever makes it fit. Exit status 1 when over. */
#include "base/error.h"
#include "base/sys.h"
#include "cli/commands.h"
#include "cli/run_data.h"
#include "cli/train_args.h"
#include "dist/dist.h"
#include "memory/run_plan.h"
#include <stdio.h>
#include <string.h>

/* The same run with checkpointing flipped, so both columns are known. */
static void print_checkpoint_flip(const RunShape *shape, const RunInputs *in) {
    RunShape v = *shape;
    v.grad_checkpoint = !shape->grad_checkpoint;
    MemPlan p2;
    ModelSpec s2;
    if (run_plan_build(&v, in, &p2, &s2) == 0) {
        char b1[32], b2[32], b3[32], b4[32];
        printf("%s --grad-checkpoint: saved activations %s, checkpointed block inputs %s, "
               "recompute workspace %s; total %s\n",
               v.grad_checkpoint ? "With" : "Without",
               format_bytes(b1, sizeof b1, plan_class_bytes(&p2, MEM_ACTIVATIONS)),
               format_bytes(b2, sizeof b2, plan_class_bytes(&p2, MEM_CHECKPOINTS)),
               format_bytes(b3, sizeof b3, plan_class_bytes(&p2, MEM_RECOMPUTE)),
               format_bytes(b4, sizeof b4, plan_total(&p2)));
    }
    plan_free(&p2);
    error_clear();
}

static int plan_run(TrainArgs *a, RunData *d) {
    RunShape shape;
    TRY(train_args_run_shape(a, &d->cfg, &shape));
    TRY(run_choose_batch(&shape, &d->in, stdout));
    MemPlan plan;
    ModelSpec spec;
    if (run_plan_build(&shape, &d->in, &plan, &spec) < 0) {
        plan_free(&plan);
        return -1;
    }
    run_plan_print(&shape, &spec, &plan, a->plan_verbose, stdout);
    print_checkpoint_flip(&shape, &d->in);
    int rc = run_check_limit(&shape, &d->in, &plan);
    if (rc == 0 && shape.memory_limit) printf("Fits the --memory-limit.\n");
    plan_free(&plan);
    return rc;
}

int cmd_plan(int argc, char **argv) {
    TrainArgs a;
    train_args_default(&a);
    if (plan_args_parse(&a, argc, argv) < 0) {
        args_release();
        die_with_error();
    }
    if (a.parsed.help) {
        args_release();
        return 0;
    }
    RunData d;
    int world = a.plan_workers ? a.plan_workers : dist_world() > 0 ? dist_world() : 1;
    int rc = 0;
    if (run_data_load(&d, &a, world) < 0 || plan_run(&a, &d) < 0) {
        rc = 1;
        fprintf(stderr, "lmtune: error: %s\n", error_message());
    }
    run_data_free(&d);
    args_release();
    return rc;
}

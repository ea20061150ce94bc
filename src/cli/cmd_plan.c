/* cmd_plan.c: `lmtune plan`: the exact memory plan of a `lmtune train`
 * invocation (same flags, same -c config), computed from config.json, the
 * safetensors headers and the real batch widths of the data, before any
 * weight is loaded. With --memory-limit it says whether the run fits and,
 * when it does not, which lever makes it fit. Exit status 1 when over. */
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"
#include "cli/commands.h"
#include "cli/run_data.h"
#include "cli/run_record.h"
#include "cli/train_args.h"
#include "dist/dist.h"
#include "memory/run_plan.h"
#include "report/report_html.h"
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

/* A plan's classes into a bar of the page. */
static void plan_bar(PlanBar *bar, const char *label, const MemPlan *plan) {
    memset(bar, 0, sizeof *bar);
    bar->label = label;
    for (int c = 0; c < MEM_CLASS_COUNT && bar->n_classes < PLAN_PAGE_CLASSES; c++) {
        size_t bytes = plan_class_bytes(plan, (MemClass)c);
        if (!bytes) continue;
        bar->class_names[bar->n_classes] = mem_class_name((MemClass)c);
        bar->class_ids[bar->n_classes] = c;
        bar->class_bytes[bar->n_classes++] = (double)bytes;
    }
    bar->total = (double)plan_total(plan);
}

/* --html FILE: the plan and each lever's, as stacked bars. */
static int write_plan_html(const char *path, const RunShape *shape, const RunInputs *in, const MemPlan *plan,
                           int argc, char **argv) {
    PlanPage page;
    memset(&page, 0, sizeof page);
    char title[600];
    snprintf(title, sizeof title, "lmtune plan: %s", shape->model_dir);
    page.title = title;
    page.memory_limit = (double)shape->memory_limit;
    page.arena = (double)plan_arena_bytes(plan);
    plan_bar(&page.bars[page.n_bars++], "this run", plan);
    RunLever lever[RUN_MAX_LEVERS];
    int nl = run_levers(shape, in, lever);
    for (int i = 0; i < nl && page.n_bars < PLAN_PAGE_BARS; i++) {
        MemPlan lp;
        ModelSpec ls;
        if (run_plan_build(&lever[i].shape, in, &lp, &ls) == 0) plan_bar(&page.bars[page.n_bars++], lever[i].what, &lp);
        plan_free(&lp);
        error_clear();
    }
    char *command = run_record_command(argc, argv);
    page.command = command;
    int rc = plan_html_write(path, &page);
    mem_free(command);
    return rc;
}

static int plan_run(TrainArgs *a, RunData *d, int argc, char **argv) {
    RunShape shape;
    TRY(train_args_run_shape(a, &d->cfg, &shape));
    char note[512];
    TRY(train_args_weights_dtype(a, &d->cfg, &shape, note, sizeof note));
    printf("Frozen products: %s\n", note);
    TRY(run_choose_batch(&shape, &d->in, stdout));
    MemPlan plan;
    ModelSpec spec;
    if (run_plan_build(&shape, &d->in, &plan, &spec) < 0) {
        plan_free(&plan);
        return -1;
    }
    run_plan_print(&shape, &spec, &plan, a->plan_verbose, stdout);
    print_checkpoint_flip(&shape, &d->in);
    if (a->plan_html) {
        if (write_plan_html(a->plan_html, &shape, &d->in, &plan, argc, argv) < 0) {
            plan_free(&plan);
            return -1;
        }
        printf("Plan page written to %s\n", a->plan_html);
    }
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
    if (run_data_load(&d, &a, world) < 0 || plan_run(&a, &d, argc, argv) < 0) {
        rc = 1;
        fprintf(stderr, "lmtune: error: %s\n", error_message());
    }
    run_data_free(&d);
    args_release();
    return rc;
}

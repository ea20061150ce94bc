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
#include "data/batching.h"
#include "memory/run_plan.h"
#include "model/adapter_io.h"
#include "memory/run_ckpt.h"
#include "memory/run_fastest.h"
#include "report/report_html.h"
#include <stdio.h>
#include <string.h>

/* The same run with checkpointing flipped, so both columns are known. */
static void print_checkpoint_flip(const RunShape *shape, const RunInputs *in) {
    RunShape v = *shape;
    bool any = shape->grad_checkpoint || block_set_count(&shape->ckpt_blocks) > 0;
    v.grad_checkpoint = !any;
    memset(&v.ckpt_blocks, 0, sizeof v.ckpt_blocks);
    MemPlan p2;
    ModelSpec s2;
    if (run_plan_build(&v, in, &p2, &s2) == 0) {
        char b1[32], b2[32], b3[32], b4[32];
        printf("%s --grad-checkpoint (every block): saved activations %s, checkpointed block inputs %s, "
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

/* The plan of `lmtune train --test` without --train: the model opened for
 * inference with the adapter of --adapter-path, the widest test batch, the
 * tokenised test set and the process baseline. */
static int plan_test_only(TrainArgs *a, RunData *d) {
    if (a->batch_size == 0) return error_set("--batch-size auto plans a training run; give a number with --test");
    TRY(run_data_load_model(d, a));
    DatasetOptions o;
    run_data_options(a, &o);
    if (d->cfg.n_eos > 0) o.eos_fallback = d->cfg.eos_token_ids[0];
    bool present;
    TRY(dataset_load_split(&d->test, a->data, "test", d->tok, &o, &present));
    d->have_test = true;
    int width = batch_max_width(&d->test, a->batch_size, a->max_seq_length);
    MemPlan plan;
    ModelSpec spec;
    const char *adapter = a->adapter_path && a->adapter_path[0] ? a->adapter_path : NULL;
    int rc = model_plan_inference(&plan, &spec, a->model, adapter, a->batch_size, width - 1, 0, 0);
    if (rc == 0) rc = plan_note(&plan, MEM_DATASET, "tokenised test set", dataset_bytes(&d->test), false);
    RunInputs in = {.cfg = &d->cfg, .train = &d->test, .world = 1};
    if (rc == 0) rc = plan_note(&plan, MEM_RUNTIME, "process baseline (code, libraries, tokenizer, heap), measured",
                                run_baseline_now(&in), false);
    if (rc == 0) {
        RunShape shape = {.model_dir = a->model, .batch_size = a->batch_size, .grad_accumulation_steps = 1,
                          .max_seq_length = a->max_seq_length};
        printf("Evaluation only (--test without --train): the test set with %s\n",
               adapter ? adapter : "the base model (no adapter)");
        run_plan_print(&shape, &spec, &plan, a->plan_verbose, stdout);
    }
    plan_free(&plan);
    return rc;
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
    TRY(run_choose_checkpoint(&shape, &d->in, stdout));
    MemPlan plan;
    ModelSpec spec;
    if (run_plan_build_ex(&shape, &d->in, &plan, &spec, 0) < 0) {
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
    if (shape.memory_limit) {
        /* the user's real question: the fastest way to train this within the limit */
        int keep = rc;
        char msg[4096];
        if (rc < 0) snprintf(msg, sizeof msg, "%s", error_message());
        RunFastest f;
        if (run_fastest(&shape, &d->in, &f) == 0) run_fastest_print(&f, &shape, stdout);
        else fprintf(stderr, "lmtune: warning: %s\n", error_message());
        if (keep < 0) error_set("%s", msg);
        rc = keep;
    }
    return rc;
}

int cmd_plan(int argc, char **argv) {
    TrainArgs a;
    train_args_default(&a);
    /* under mpirun the plan is made inside a worker: its baseline holds the
     * MPI runtime, as the training run's own plan does */
    if (dist_init(&argc, &argv) < 0) die_with_error();
    if (dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) die("cannot silence the other workers' output");
    if (plan_args_parse(&a, argc, argv) < 0) {
        train_args_free(&a);
        die_with_error();
    }
    if (a.parsed.help) {
        train_args_free(&a);
        return 0;
    }
    RunData d;
    int world = a.plan_workers ? a.plan_workers : dist_world() > 0 ? dist_world() : 1;
    int rc = 0;
    memset(&d, 0, sizeof d);
    int ok = a.train ? run_data_load(&d, &a, world) == 0 && plan_run(&a, &d, argc, argv) == 0
                     : plan_test_only(&a, &d) == 0;
    if (!ok) {
        rc = 1;
        fprintf(stderr, "lmtune: error: %s\n", error_message());
    }
    if (rc == 0 && world > 1 && dist_world() == 1)
        printf("Planned for one of %d workers outside an MPI job: the MPI runtime's own memory is measured only "
               "inside one (mpirun -np %d lmtune plan ...), as the training run's own plan is.\n", world, world);
    run_data_free(&d);
    train_args_free(&a);
    dist_finalize();
    return rc;
}

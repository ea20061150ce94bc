/* run_fastest.c: the fastest configuration that fits (see run_fastest.h). */
#include "memory/run_fastest.h"
#include "base/error.h"
#include "base/sys.h"
#include "kernels/matmul.h"
#include "memory/run_ckpt.h"
#include <string.h>

/* Plans and times configuration v (checkpointing: as in v when it fits,
 * else the fewest blocks that make it fit). */
static int plan_config(RunShape v, const RunInputs *in, RunConfig *c) {
    memset(c, 0, sizeof *c);
    v.ckpt_auto = false;
    c->total = run_plan_total(&v, in);
    if (!c->total) return error_set("the plan of a configuration cannot be built");
    c->fits = !v.memory_limit || c->total <= v.memory_limit;
    if (!c->fits && !v.grad_checkpoint) {
        RunCkptChoice ch;
        TRY(run_ckpt_choose(&v, in, &ch));
        if (ch.count > 0) {
            v.ckpt_blocks = ch.set;
            c->total = ch.total_after;
            c->fits = true;
        }
    }
    c->shape = v;
    RunCost cost;
    TRY(run_step_cost(&v, in, &cost));
    int accum = v.grad_accumulation_steps > 0 ? v.grad_accumulation_steps : 1;
    c->seconds = cost.seconds * accum;
    c->gflop = cost.flops * accum * 1e-9;
    return 0;
}

int run_fastest(const RunShape *asked, const RunInputs *in, RunFastest *out) {
    memset(out, 0, sizeof *out);
    out->best = -1;
    int accum = asked->grad_accumulation_steps > 0 ? asked->grad_accumulation_steps : 1;
    int effective = asked->batch_size > 0 ? asked->batch_size * accum
                    : asked->effective_batch_size > 0 ? asked->effective_batch_size : 4 * accum;
    int world = in->world > 0 ? in->world : 1;
    WeightsSummary ws;
    TRY(model_weights_summary(asked->model_dir, in->cfg, &ws));
    DType ft = ws.file_dtype;
    if (asked->batch_size > 0) {
        /* as asked: its own checkpointing, not a chosen one */
        RunConfig *c = &out->asked;
        c->shape = *asked;
        c->total = run_plan_total(asked, in);
        c->fits = !asked->memory_limit || c->total <= asked->memory_limit;
        RunCost cost;
        TRY(run_step_cost(asked, in, &cost));
        c->seconds = cost.seconds * accum;
        c->gflop = cost.flops * accum * 1e-9;
    }
    /* the weights as stored, and bf16 when they are stored wider */
    DType dtypes[2] = {ft == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32, DTYPE_BF16};
    int n_dtypes = ft == DTYPE_BF16 || !matmul_bf16_supported() ? 1 : 2;
    if (ws.quantized) {
        /* packed weights are used as stored */
        dtypes[0] = asked->spec.weight_dtype;
        n_dtypes = 1;
    }
    for (int t = 0; t < n_dtypes; t++)
        for (int b = effective; b >= 1 && out->n < RUN_FASTEST_MAX; b--) {
            if (effective % b || b % world || in->train->n < (size_t)b) continue;
            RunShape v = *asked;
            v.batch_size = b;
            v.grad_accumulation_steps = effective / b;
            v.spec.weight_dtype = dtypes[t];
            v.grad_checkpoint = false;
            memset(&v.ckpt_blocks, 0, sizeof v.ckpt_blocks);
            RunConfig *c = &out->list[out->n];
            if (plan_config(v, in, c) < 0) {
                error_clear();
                continue;
            }
            out->n++;
        }
    for (int i = 0; i < out->n; i++) {
        if (!out->list[i].fits) continue;
        if (out->best < 0 || out->list[i].seconds < out->list[out->best].seconds) out->best = i;
    }
    return 0;
}

/* ck (cap bytes) = the checkpointing of c as run_ckpt_text writes it: "off", "on" or "blocks 3,5-7" */
static void config_ckpt_text(const RunConfig *c, char *ck, size_t cap) {
    ModelSpec s;
    memset(&s, 0, sizeof s);
    s.grad_checkpoint = c->shape.grad_checkpoint;
    s.ckpt_blocks = c->shape.ckpt_blocks;
    run_ckpt_text(&s, ck, cap);
}

void run_config_flags(const RunConfig *c, char *buf, size_t n) {
    char ck[160];
    config_ckpt_text(c, ck, sizeof ck);
    const char *flag = !strcmp(ck, "off") ? "" : !strcmp(ck, "on") ? " --grad-checkpoint" : " --grad-checkpoint ";
    snprintf(buf, n, "--batch-size %d --grad-accumulation-steps %d%s%s --weights-dtype %s", c->shape.batch_size,
             c->shape.grad_accumulation_steps, flag, !strncmp(ck, "blocks ", 7) ? ck + 7 : "",
             c->shape.spec.weight_dtype == DTYPE_BF16 ? "bf16" : "f32");
}

static void print_config(const char *label, const RunConfig *c, const RunShape *asked, FILE *out) {
    char flags[256], b1[32];
    run_config_flags(c, flags, sizeof flags);
    fprintf(out, "%-18s %s: %s%s, ~%.3f s per step (%.1f GFLOP)\n", label, flags, format_bytes(b1, sizeof b1, c->total),
            !asked->memory_limit ? "" : c->fits ? "" : " (over the limit)", c->seconds, c->gflop);
}

void run_fastest_print(const RunFastest *f, const RunShape *asked, FILE *out) {
    const MatmulProbe *p = matmul_probe();
    int threads = run_threads(asked);
    char b1[32];
    fprintf(out, "Configurations of the same effective batch within the %s limit (step time estimated from the "
            "model's FLOPs at the GEMM rates measured at start-up: f32 %.0f, bf16 %.0f GFLOP/s per core, %d "
            "thread%s):\n", format_bytes(b1, sizeof b1, asked->memory_limit), p->gflops_f32, p->gflops_bf16,
            threads, threads == 1 ? "" : "s");
    fprintf(out, "  %-11s %-5s %-7s %-20s %12s %10s %12s\n", "micro-batch", "accum", "weights",
            "checkpointed blocks", "planned", "GFLOP", "step (est.)");
    for (int i = 0; i < f->n; i++) {
        const RunConfig *c = &f->list[i];
        char ck[160];
        config_ckpt_text(c, ck, sizeof ck);
        fprintf(out, "  %-11d %-5d %-7s %-20s %12s %10.1f %11.3fs%s%s\n", c->shape.batch_size,
                c->shape.grad_accumulation_steps, c->shape.spec.weight_dtype == DTYPE_BF16 ? "bf16" : "f32",
                !strncmp(ck, "blocks ", 7) ? ck + 7 : ck, format_bytes(b1, sizeof b1, c->total), c->gflop, c->seconds,
                c->fits ? "" : "  over", i == f->best ? "  <- fastest that fits" : "");
    }
    if (f->asked.total) print_config("Asked for:", &f->asked, asked, out);
    if (f->best >= 0) print_config("Fastest that fits:", &f->list[f->best], asked, out);
    else fprintf(out, "Fastest that fits: none of these configurations fits the limit\n");
}

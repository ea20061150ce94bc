/* run_ckpt.c: what a micro-batch costs (FLOPs of every product, by block
 * and phase, from model_products; seconds from the GEMM rates the start-up
 * probe measured) and which blocks to checkpoint under a memory limit (the
 * fewest that fit, the cheapest to recompute; memory/ckpt_choose.h). */
#include "memory/run_ckpt.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"
#include "kernels/matmul.h"
#include "memory/ckpt_choose.h"
#include <stdio.h>
#include <string.h>

void run_ckpt_text(const ModelSpec *spec, char *buf, size_t n) {
    if (spec->grad_checkpoint) {
        snprintf(buf, n, "on");
        return;
    }
    if (block_set_count(&spec->ckpt_blocks) == 0) {
        snprintf(buf, n, "off");
        return;
    }
    size_t k = (size_t)snprintf(buf, n, "blocks ");
    for (int l = 0; l < MODEL_MAX_BLOCKS && k < n; l++) {
        if (!block_set_has(&spec->ckpt_blocks, l) || (l > 0 && block_set_has(&spec->ckpt_blocks, l - 1))) continue;
        int e = l;
        while (e + 1 < MODEL_MAX_BLOCKS && block_set_has(&spec->ckpt_blocks, e + 1)) e++;
        bool first = k == 7;
        if (e == l) k += (size_t)snprintf(buf + k, n - k, "%s%d", first ? "" : ",", l);
        else k += (size_t)snprintf(buf + k, n - k, "%s%d-%d", first ? "" : ",", l, e);
    }
}

typedef struct {
    RunCost *c;
    double rate_f32, rate_bf16;     /* FLOP/s of the run's threads */
    const ModelSpec *spec;
} CostCtx;

static void cost_sink(void *ctx, const MatmulShape *s, int block, ProductPhase phase) {
    CostCtx *x = ctx;
    double flops = 2.0 * (double)s->M * (double)s->N * (double)s->K;
    double secs = flops / (s->b_type == DTYPE_BF16 ? x->rate_bf16 : x->rate_f32);
    if (phase == PRODUCT_RECOMPUTE) {
        if (block >= 0 && block < MODEL_MAX_BLOCKS) {
            x->c->recompute_flops[block] += flops;
            x->c->recompute_seconds[block] += secs;
        }
        if (!spec_block_ckpt(x->spec, block)) return;   /* recomputed only when checkpointed */
    }
    x->c->flops += flops;
    x->c->seconds += secs;
}

int run_step_cost(const RunShape *a, const RunInputs *in, RunCost *out) {
    memset(out, 0, sizeof *out);
    ModelSpec spec;
    run_model_spec(a, in, &spec);
    WeightsSummary ws;
    TRY(model_weights_summary(a->model_dir, in->cfg, &ws));
    FrozenWeight *views = NULL;
    int n_views = 0;
    if (ws.quantized) TRY(model_frozen_views(a->model_dir, in->cfg, a->spec.weight_dtype, &views, &n_views));
    const MatmulProbe *p = matmul_probe();
    int threads = run_threads(a);
    out->gflops_f32 = p->gflops_f32 * threads;
    out->gflops_bf16 = p->gflops_bf16 * threads;
    CostCtx x = {out, out->gflops_f32 * 1e9, out->gflops_bf16 * 1e9, &spec};
    ProductBatch b = {spec.max_rows, spec.max_tokens, (long)spec.max_rows * spec.max_tokens, true, false};
    int rc = x.rate_f32 > 0 && x.rate_bf16 > 0 ? 0 : error_set("the start-up probe measured no GEMM rate");
    if (rc == 0) rc = model_products(in->cfg, &spec, &ws, views, &b, 1, cost_sink, &x);
    mem_free(views);
    TRY(rc);
    /* attention runs lmtune's own f32 tiles: at the f32 rate */
    const ModelConfig *c = in->cfg;
    int L = c->num_hidden_layers;
    int lo = spec.num_layers > 0 && spec.num_layers < L ? L - spec.num_layers : 0;
    double fwd = model_attention_flops(c, spec.max_rows, spec.max_tokens, false);
    double bwd = model_attention_flops(c, spec.max_rows, spec.max_tokens, true);
    for (int l = 0; l < L && l < MODEL_MAX_BLOCKS; l++) {
        double f = fwd + (l >= lo ? bwd : 0);
        if (l >= lo) {
            out->recompute_flops[l] += fwd;
            out->recompute_seconds[l] += fwd / x.rate_f32;
            if (spec_block_ckpt(&spec, l)) f += fwd;
        }
        out->flops += f;
        out->seconds += f / x.rate_f32;
    }
    out->accumulation = a->grad_accumulation_steps > 0 ? a->grad_accumulation_steps : 1;
    return 0;
}

/* fits(S): the plan with S checkpointed, from the plan without any (the
 * blocks change only the model's arena: the layout walk of the spec). */
typedef struct {
    const ModelConfig *cfg;
    ModelSpec spec;
    WeightsSummary ws;
    size_t other;           /* the plan's total less the model's arena */
    size_t limit;
    int failed;
} FitCtx;

static size_t layout_bytes(FitCtx *x, const BlockSet *set) {
    ModelSpec s = x->spec;
    s.grad_checkpoint = false;
    s.ckpt_blocks = *set;
    MemPlan p = {0};
    Carver cv = {NULL, &p};
    size_t b = model_layout_summary(x->cfg, &s, &x->ws, &cv) == 0 ? plan_total(&p) : 0;
    if (!b) x->failed = 1;
    plan_free(&p);
    return b;
}

static bool fits(void *ctx, const BlockSet *set) {
    FitCtx *x = ctx;
    return x->other + layout_bytes(x, set) <= x->limit;
}

int run_ckpt_choose(const RunShape *a, const RunInputs *in, RunCkptChoice *out) {
    memset(out, 0, sizeof *out);
    RunShape none = *a;
    none.grad_checkpoint = false;
    memset(&none.ckpt_blocks, 0, sizeof none.ckpt_blocks);
    none.ckpt_auto = false;
    size_t base = run_plan_total(&none, in);
    if (!base) return error_set("the plan of the run without checkpointing cannot be built");
    FitCtx x;
    memset(&x, 0, sizeof x);
    x.cfg = in->cfg;
    x.limit = a->memory_limit;
    run_model_spec(&none, in, &x.spec);
    TRY(model_weights_summary(a->model_dir, in->cfg, &x.ws));
    BlockSet empty;
    memset(&empty, 0, sizeof empty);
    size_t arena0 = layout_bytes(&x, &empty);
    if (x.failed || arena0 > base) return error_set("the model's layout cannot be planned");
    x.other = base - arena0;
    out->total_before = base;
    RunCost cost;
    TRY(run_step_cost(&none, in, &cost));
    int L = in->cfg->num_hidden_layers;
    if (L > MODEL_MAX_BLOCKS)
        return error_set("checkpointing block by block supports up to %d blocks", MODEL_MAX_BLOCKS);
    int lo = x.spec.num_layers > 0 && x.spec.num_layers < L ? L - x.spec.num_layers : 0;
    CkptBlock blocks[MODEL_MAX_BLOCKS];
    int n = 0;
    for (int l = lo; l < L; l++) {
        BlockSet one = empty;
        block_set_add(&one, l);
        size_t with = layout_bytes(&x, &one);
        blocks[n++] = (CkptBlock){l, (double)arena0 - (double)with, cost.recompute_flops[l]};
    }
    if (x.failed) return error_set("the model's layout cannot be planned");
    CkptChoice ch;
    TRY(ckpt_choose(blocks, n, fits, &x, &ch));
    out->trainable = n;
    out->count = ch.count;
    out->set = ch.set;
    out->flops = ch.cost;
    out->gflops_f32 = cost.gflops_f32;
    for (int l = 0; l < L; l++)
        if (block_set_has(&ch.set, l)) out->seconds += cost.recompute_seconds[l];
    out->total_after = ch.count >= 0 ? x.other + layout_bytes(&x, &ch.set) : 0;
    return 0;
}

void run_ckpt_print(const RunCkptChoice *ch, const RunShape *a, FILE *out) {
    char b1[32], b2[32], b3[32], b4[32], list[160];
    ModelSpec s;
    memset(&s, 0, sizeof s);
    s.ckpt_blocks = ch->set;
    run_ckpt_text(&s, list, sizeof list);
    int accum = a->grad_accumulation_steps > 0 ? a->grad_accumulation_steps : 1;
    fprintf(out, "Checkpoint auto: %d of %d trainable blocks (%s) save %s: planned %s instead of %s, within the %s "
            "limit; recompute %.2f GFLOP per micro-batch, ~%.3f s per step of %d micro-batch%s at the measured %.0f "
            "GFLOP/s (f32)\n", ch->count, ch->trainable, list,
            format_bytes(b1, sizeof b1, ch->total_before - ch->total_after),
            format_bytes(b2, sizeof b2, ch->total_after), format_bytes(b3, sizeof b3, ch->total_before),
            format_bytes(b4, sizeof b4, a->memory_limit), ch->flops * 1e-9, ch->seconds * accum, accum,
            accum == 1 ? "" : "es", ch->gflops_f32);
}

int run_choose_checkpoint(RunShape *a, const RunInputs *in, FILE *out) {
    if (!a->ckpt_auto) return 0;
    if (!a->memory_limit) return error_set("--grad-checkpoint auto needs --memory-limit");
    RunCkptChoice ch;
    TRY(run_ckpt_choose(a, in, &ch));
    char b1[32], b2[32];
    a->ckpt_auto = false;
    a->grad_checkpoint = false;
    if (ch.count == 0) {
        memset(&a->ckpt_blocks, 0, sizeof a->ckpt_blocks);
        fprintf(out, "Checkpoint auto: no block needs checkpointing (planned %s of the %s limit)\n",
                format_bytes(b1, sizeof b1, ch.total_before), format_bytes(b2, sizeof b2, a->memory_limit));
        return 0;
    }
    if (ch.count < 0)
        return error_set("--grad-checkpoint auto: even checkpointing all %d trainable blocks does not fit the %s limit",
                         ch.trainable, format_bytes(b1, sizeof b1, a->memory_limit));
    a->ckpt_blocks = ch.set;
    run_ckpt_print(&ch, a, out);
    return 0;
}

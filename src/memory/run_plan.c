/* run_plan.c: the plan of a training run, its limit check with levers, and
 * --batch-size auto (see run_plan.h). */
#include "memory/run_plan.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"
#include "data/batching.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/matmul.h"
#include <string.h>

size_t run_baseline_now(const RunInputs *in) {
    size_t rss = rss_current_bytes(), data = 0;
    if (in->train) data += dataset_bytes(in->train);
    if (in->valid) data += dataset_bytes(in->valid);
    if (in->test) data += dataset_bytes(in->test);
    return rss > data ? rss - data : 0;
}

int run_max_width(const RunShape *a, const RunInputs *in) {
    int w = batch_max_width(in->train, a->batch_size, a->max_seq_length);
    const Dataset *other[2] = {in->valid, a->test ? in->test : NULL};
    for (int i = 0; i < 2; i++) if (other[i]) { int v = batch_max_width(other[i], a->batch_size, a->max_seq_length); if (v > w) w = v; }
    return w;
}

/* oneDNN's memory: each matrix-product primitive (its JIT-compiled kernels
 * and descriptors) holds about 0.21 MB (measured: 256 f32 primitives of
 * training shapes add 53 MB), and the products of one batch width make about
 * two dozen primitives (forward, backward and LoRA's thin products of the
 * projections, and the LM head); the cache keeps at most 256. Plus the
 * scratchpad, which is at most one panel reorder of the widest activation. */
static size_t library_scratch_bytes(const ModelConfig *c, const ModelSpec *s, int distinct_widths) {
    size_t N = (size_t)s->max_rows * (s->max_tokens > 0 ? s->max_tokens : 1);
    size_t widest = (size_t)c->intermediate_size > (size_t)c->hidden_size ? (size_t)c->intermediate_size : (size_t)c->hidden_size;
    size_t primitives = (size_t)(distinct_widths > 0 ? distinct_widths : 1) * 24;
    if (c->q35.on) {
        /* Qwen3.5: the Gated DeltaNet's in_proj_qkv and the gated q_proj are wider, and its
         * two block kinds make about twice the products */
        const Qwen35Config *q = &c->q35;
        size_t cc = 2 * (size_t)q->k_heads * q->k_dim + (size_t)q->v_heads * q->v_dim;
        size_t qg = 2 * (size_t)c->num_attention_heads * c->head_dim;
        if (cc > widest) widest = cc;
        if (qg > widest) widest = qg;
        primitives *= 2;
    }
    if (primitives > 256) primitives = 256;
    return ((size_t)4 << 20) + primitives * 210000 + N * widest * 2;
}

/* The number of distinct batch widths of the run's data sets, or -1 (out of
 * memory: error set). */
static int distinct_widths(const RunShape *a, const RunInputs *in) {
    const Dataset *sets[3] = { in->train, in->valid, in->test && a->test ? in->test : NULL };
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (!sets[i]) {
            continue;
        }
        int k = batch_distinct_widths(sets[i], a->batch_size, a->max_seq_length);
        if (k < 0) {
            return -1;
        }
        n += k;
    }
    return n;
}

void run_model_spec(const RunShape *a, const RunInputs *in, ModelSpec *spec) {
    int world = in->world > 0 ? in->world : 1;
    int rows = a->batch_size / world > 0 ? a->batch_size / world : 1;
    *spec = a->spec;
    spec->grad_checkpoint = a->grad_checkpoint;
    spec->max_rows = rows;
    spec->max_tokens = run_max_width(a, in) - 1;
    spec->training = true;
}

int run_plan_build(const RunShape *a, const RunInputs *in, MemPlan *plan, ModelSpec *spec) {
    memset(plan, 0, sizeof *plan);
    int world = in->world > 0 ? in->world : 1;
    run_model_spec(a, in, spec);
    Carver cv = {NULL, plan};
    /* Plan for the matrices as they really are in the file (config.json's
     * torch_dtype may say otherwise; quantized modules): read from the
     * safetensors headers and config.json's quantization; the layout of the
     * weights (Qwen3.5: names, transformers' or MLX-LM's conventions) as the
     * load will see it. */
    ModelConfig *cfg = mem_alloc(sizeof *cfg);
    TRY_PTR(cfg);
    *cfg = *in->cfg;
    int rc = 0;
    if (cfg->q35.on) {
        StModel st;
        rc = st_model_open(&st, a->model_dir, true);
        if (rc == 0) {
            rc = model_tensors_resolve(cfg, &st);
            st_model_close(&st);
        }
    }
    WeightsSummary ws;
    if (rc == 0) rc = model_weights_summary(a->model_dir, cfg, &ws);
    if (rc == 0) rc = model_layout_summary(cfg, spec, &ws, &cv);
    if (rc == 0) rc = model_plan_weights(a->model_dir, cfg, spec, plan);
    TrainableTensor *list = NULL;
    size_t n = 0;
    if (rc == 0) rc = model_trainable_list(cfg, spec, &list, &n);
    mem_free(cfg);
    TRY(rc);
    Optimizer probe;
    rc = optimizer_layout(&probe, &a->optimizer, list, n, &cv);
    if (rc == 0) optimizer_free(&probe);
    mem_free(list);
    TRY(rc);
    size_t data = dataset_bytes(in->train);
    if (in->valid) data += dataset_bytes(in->valid);
    if (in->test && a->test) data += dataset_bytes(in->test);
    TRY(plan_note(plan, MEM_DATASET, "tokenised train/valid/test sets", data, false));
    TRY(plan_note(plan, MEM_DATASET, "batch buffers", batch_iter_bytes(in->train, a->batch_size, a->max_seq_length, world) * 3, false));
    int widths = distinct_widths(a, in);
    TRY(widths);
    TRY(plan_note(plan, MEM_LIBRARY, "oneDNN scratchpad and JIT code", library_scratch_bytes(in->cfg, spec, widths), false));
    if (world > 1) /* Open MPI's all-reduce of the gradient block works through a buffer of its size */
        TRY(plan_note(plan, MEM_LIBRARY, "MPI all-reduce buffer", plan_class_bytes(plan, MEM_GRADIENTS), false));
    TRY(plan_note(plan, MEM_RUNTIME, "process baseline (code, libraries, tokenizer, heap), measured", in->baseline, false));
    return 0;
}

static const char *tune_name(TuneType t) { return t == TUNE_LORA ? "LoRA" : t == TUNE_DORA ? "DoRA" : t == TUNE_FULL ? "full" : "none"; }

void run_plan_print(const RunShape *a, const ModelSpec *spec, const MemPlan *plan, bool verbose, FILE *out) {
    char b[32];
    fprintf(out, "Memory plan: %s, %s fine-tuning of %s blocks, micro-batch %d x %d tokens, grad checkpoint %s, "
            "accumulation %d\n", a->model_dir, tune_name(spec->type),
            spec->num_layers <= 0 ? "all" : (snprintf(b, sizeof b, "the last %d", spec->num_layers), b),
            spec->max_rows, spec->max_tokens, spec->grad_checkpoint ? "on" : "off", a->grad_accumulation_steps);
    fprintf(out, "  %-44s %16s %12s\n", "buffer class", "bytes", "");
    for (int c = 0; c < MEM_CLASS_COUNT; c++) {
        size_t bytes = plan_class_bytes(plan, (MemClass)c);
        if (!bytes && c != MEM_CHECKPOINTS && c != MEM_RECOMPUTE) continue;
        fprintf(out, "  %-44s %16zu %12s\n", mem_class_name((MemClass)c), bytes, format_bytes(b, sizeof b, bytes));
        if (verbose)
            for (size_t i = 0; i < plan->n; i++)
                if (plan->entries[i].cls == (MemClass)c)
                    fprintf(out, "      %-58s %14zu%s\n", plan->entries[i].name, plan->entries[i].bytes, plan->entries[i].in_arena ? "" : "  (outside the arena)");
    }
    fprintf(out, "  %-44s %16zu %12s\n", "arena (allocated once, touched once)", plan_arena_bytes(plan), format_bytes(b, sizeof b, plan_arena_bytes(plan)));
    fprintf(out, "Planned peak: %zu bytes (%s)\n", plan_total(plan), format_bytes(b, sizeof b, plan_total(plan)));
}

/* Total of the plan for a variant of the arguments; 0 when it cannot be built. */
size_t run_plan_total(const RunShape *v, const RunInputs *in) {
    MemPlan p; ModelSpec s;
    size_t t = run_plan_build(v, in, &p, &s) == 0 ? plan_total(&p) : 0;
    plan_free(&p);
    error_clear();
    return t;
}

int run_levers(const RunShape *a, const RunInputs *in, RunLever *lever) {
    int nl = 0;
    RunShape *v;
    if (a->batch_size > 1) {
        v = &lever[nl].shape;
        *v = *a;
        v->batch_size = a->batch_size / 2;
        v->grad_accumulation_steps = a->grad_accumulation_steps * 2;
        snprintf(lever[nl].what, sizeof lever[nl].what, "--batch-size %d --grad-accumulation-steps %d",
                 v->batch_size, v->grad_accumulation_steps);
        lever[nl].total = run_plan_total(v, in);
        nl++;
        if (a->batch_size > 2) {
            v = &lever[nl].shape;
            *v = *a;
            v->batch_size = 1;
            v->grad_accumulation_steps = a->grad_accumulation_steps * a->batch_size;
            snprintf(lever[nl].what, sizeof lever[nl].what, "--batch-size 1 --grad-accumulation-steps %d",
                     v->grad_accumulation_steps);
            lever[nl].total = run_plan_total(v, in);
            nl++;
        }
    }
    if (!a->grad_checkpoint) {
        v = &lever[nl].shape;
        *v = *a;
        v->grad_checkpoint = true;
        snprintf(lever[nl].what, sizeof lever[nl].what, "--grad-checkpoint");
        lever[nl].total = run_plan_total(v, in);
        nl++;
    }
    int layers = a->spec.num_layers <= 0 ? in->cfg->num_hidden_layers : a->spec.num_layers;
    if (layers > 1) {
        v = &lever[nl].shape;
        *v = *a;
        v->spec.num_layers = layers > 8 ? layers / 2 : layers > 4 ? 4 : 1;
        snprintf(lever[nl].what, sizeof lever[nl].what, "--num-layers %d", v->spec.num_layers);
        lever[nl].total = run_plan_total(v, in);
        nl++;
    }
    int width = run_max_width(a, in);
    if (width > 64) {
        v = &lever[nl].shape;
        *v = *a;
        v->max_seq_length = (width - 1) / 2;
        snprintf(lever[nl].what, sizeof lever[nl].what, "--max-seq-length %d", v->max_seq_length);
        lever[nl].total = run_plan_total(v, in);
        nl++;
    }
    if (a->spec.weight_dtype != DTYPE_BF16 && matmul_bf16_supported()) {
        v = &lever[nl].shape;
        *v = *a;
        v->spec.weight_dtype = DTYPE_BF16;
        snprintf(lever[nl].what, sizeof lever[nl].what, "--weights-dtype bf16");
        lever[nl].total = run_plan_total(v, in);
        /* bf16 weights stay bf16 in fp32 products too: the lever saves memory
         * on F32 weights only (rounded to bf16 at load) */
        if (lever[nl].total && lever[nl].total < run_plan_total(a, in)) nl++;
    }
    return nl;
}

int run_check_limit(const RunShape *a, const RunInputs *in, const MemPlan *plan) {
    size_t total = plan_total(plan);
    if (!a->memory_limit || total <= a->memory_limit) return 0;
    char msg[4096], b1[32], b2[32];
    size_t k = (size_t)snprintf(msg, sizeof msg, "the run needs %s but --memory-limit is %s; largest parts:",
                                format_bytes(b1, sizeof b1, total), format_bytes(b2, sizeof b2, a->memory_limit));
    /* the three largest classes */
    size_t cls[MEM_CLASS_COUNT];
    for (int c = 0; c < MEM_CLASS_COUNT; c++) cls[c] = plan_class_bytes(plan, (MemClass)c);
    for (int r = 0; r < 3; r++) {
        int best = 0;
        for (int c = 1; c < MEM_CLASS_COUNT; c++) if (cls[c] > cls[best]) best = c;
        if (!cls[best]) break;
        k += (size_t)snprintf(msg + k, sizeof msg - k, "%s %s %s", r ? "," : "", mem_class_name((MemClass)best), format_bytes(b1, sizeof b1, cls[best]));
        cls[best] = 0;
    }
    k += (size_t)snprintf(msg + k, sizeof msg - k, ". Levers (planned total with each):");
    RunLever lever[RUN_MAX_LEVERS];
    int nl = run_levers(a, in, lever);
    for (int i = 0; i < nl; i++) {
        if (!lever[i].total) continue;
        bool fits = lever[i].total <= a->memory_limit;
        k += (size_t)snprintf(msg + k, k < sizeof msg ? sizeof msg - k : 0, "\n  %-48s %s (saves %s)%s", lever[i].what,
                              format_bytes(b1, sizeof b1, lever[i].total),
                              format_bytes(b2, sizeof b2, total > lever[i].total ? total - lever[i].total : 0),
                              fits ? "  fits" : "");
    }
    return error_set("%s", msg);
}

int run_choose_batch(RunShape *a, const RunInputs *in, FILE *out) {
    if (a->batch_size != 0) return 0;
    int effective = a->effective_batch_size > 0 ? a->effective_batch_size : 4 * a->grad_accumulation_steps;
    if (!a->memory_limit) return error_set("--batch-size auto needs --memory-limit");
    RunShape v = *a;
    for (int pass = 0; pass < 2; pass++) {
        v.grad_checkpoint = a->grad_checkpoint || pass == 1;
        for (int b = effective; b >= 1; b--) {
            if (effective % b) continue;
            if (in->train->n < (size_t)b) continue;
            v.batch_size = b;
            v.grad_accumulation_steps = effective / b;
            size_t t = run_plan_total(&v, in);
            if (t && t <= a->memory_limit) {
                char b1[32], b2[32];
                fprintf(out, "Batch size auto: micro-batch %d x %d accumulation steps = effective batch %d%s; planned %s of the %s limit\n",
                        b, v.grad_accumulation_steps, effective, v.grad_checkpoint && !a->grad_checkpoint ? ", with --grad-checkpoint (no micro-batch fits without it)" : "",
                        format_bytes(b1, sizeof b1, t), format_bytes(b2, sizeof b2, a->memory_limit));
                a->batch_size = b;
                a->grad_accumulation_steps = v.grad_accumulation_steps;
                a->grad_checkpoint = v.grad_checkpoint;
                return 0;
            }
        }
    }
    a->batch_size = 1;
    a->grad_accumulation_steps = effective;
    a->grad_checkpoint = true;
    MemPlan p; ModelSpec s;
    TRY(run_plan_build(a, in, &p, &s));
    int rc = run_check_limit(a, in, &p);
    plan_free(&p);
    return rc < 0 ? error_prefix("--batch-size auto: even a micro-batch of 1 with checkpointing does not fit") : 0;
}

/* run_plan.c: the plan of a training run, its limit check with levers, and
 * --batch-size auto (see run_plan.h). */
#include "memory/run_plan.h"
#include "dist/dist.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"
#include "data/batching.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/matmul.h"
#include "memory/run_batches.h"
#include "memory/run_ckpt.h"
#include "kernels/ops.h"
#include "base/fileio.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <string.h>

size_t run_baseline_now(const RunInputs *in) {
    rss_snapshot_baseline();
    size_t rss = rss_current_bytes(), data = 0;
    if (in->train) data += dataset_bytes(in->train);
    if (in->valid) data += dataset_bytes(in->valid);
    if (in->test) data += dataset_bytes(in->test);
    return rss > data ? rss - data : 0;
}

int run_max_width(const RunShape *a, const RunInputs *in) {
    int w = batch_max_width(in->train, a->batch_size, a->max_seq_length);
    const Dataset *other[2] = {in->valid, a->test ? in->test : NULL};
    for (int i = 0; i < 2; i++)
        if (other[i]) {
            int v = batch_max_width(other[i], a->batch_size, a->max_seq_length);
            if (v > w) w = v;
        }
    return w;
}

void run_model_spec(const RunShape *a, const RunInputs *in, ModelSpec *spec) {
    int world = in->world > 0 ? in->world : 1;
    int rows = a->batch_size / world > 0 ? a->batch_size / world : 1;
    *spec = a->spec;
    spec->grad_checkpoint = a->grad_checkpoint;
    spec->ckpt_blocks = a->ckpt_blocks;
    spec->max_rows = rows;
    spec->max_tokens = run_max_width(a, in) - 1;
    spec->training = true;
}

int run_file_dtype(const RunShape *a, const RunInputs *in, DType *out) {
    /* the dtype the matrices really have in the files (config.json's
     * torch_dtype may say otherwise), or of a quantized model's scales */
    WeightsSummary ws;
    TRY(model_weights_summary(a->model_dir, in->cfg, &ws));
    *out = ws.file_dtype;
    return 0;
}

int run_threads(const RunShape *s) {
    if (s->threads > 0) return s->threads;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int run_plan_build(const RunShape *a, const RunInputs *in, MemPlan *plan, ModelSpec *spec) {
    return run_plan_build_ex(a, in, plan, spec, -1);
}

int run_plan_build_ex(const RunShape *a, const RunInputs *in, MemPlan *plan, ModelSpec *spec, int prepare_rank) {
    memset(plan, 0, sizeof *plan);
    int world = in->world > 0 ? in->world : 1;
    run_model_spec(a, in, spec);
    Carver cv = {NULL, plan};
    /* Plan for the matrices as they really are in the files (config.json's
     * torch_dtype may say otherwise; quantized modules): read from the
     * safetensors headers and config.json's quantization; the layout of the
     * weights (Qwen3.5: names, transformers' or MLX-LM's conventions) as the
     * load will see it. */
    ModelConfig *cfg = mem_alloc(sizeof *cfg);
    TRY_PTR(cfg);
    *cfg = *in->cfg;
    int rc = model_config_resolve(a->model_dir, cfg);
    WeightsSummary ws;
    MatmulPlan lib = {0};
    FrozenWeight *views = NULL;
    int n_views = 0;
    if (rc == 0) rc = model_weights_summary(a->model_dir, cfg, &ws);
    if (rc == 0 && ws.quantized) rc = model_frozen_views(a->model_dir, cfg, spec->weight_dtype, &views, &n_views);
    /* The batches the run reads: the embedding rows of their tokens, and the
     * matrix products (oneDNN primitives) they create. */
    if (rc == 0) {
        RunBatches rb;
        rc = run_batches_build(a, in, &rb);
        if (rc == 0) rc = run_library_plan(&rb, world, prepare_rank, cfg, spec, &ws, views, &lib);
        plan->owned = rb.ids;
        rb.ids = NULL;
        run_batches_free(&rb);
        if (rc == 0) {
            spec->embed_rows = plan->owned;
            spec->library_scratchpad = lib.scratchpad_bytes;
        }
    }
    mem_free(views);
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
    size_t batch_bytes = batch_iter_bytes(in->train, a->batch_size, a->max_seq_length, world) * 3;
    TRY(plan_note(plan, MEM_DATASET, "batch buffers", batch_bytes, false));
    char nm[96];
    int threads = run_threads(a);
    snprintf(nm, sizeof nm, "attention tiles on the stacks of %d threads", threads);
    size_t pg = file_page_size();
    bool bf16 = spec->weight_dtype == DTYPE_BF16; /* attention's products follow the frozen ones */
    size_t stack = (attention_stack_bytes(in->cfg->head_dim, bf16) + pg - 1) / pg * pg;
    TRY(plan_note(plan, MEM_ATTENTION, nm, (size_t)threads * stack, false));
    if (lib.measured)
        snprintf(nm, sizeof nm, "oneDNN primitives: %zu (%zu bf16), created now and measured", lib.primitives,
                 lib.primitives_bf16);
    else
        snprintf(nm, sizeof nm, "oneDNN primitives: %zu f32 x %zu B, %zu bf16 x %zu B (start-up probe)",
                 lib.primitives - lib.primitives_bf16, lib.primitive_bytes, lib.primitives_bf16,
                 lib.primitive_bytes_bf16);
    TRY(plan_note(plan, MEM_LIBRARY, nm, lib.held_bytes, false));
    if (world > 1) {
        /* the MPI library's working buffer of one all-reduce call: at most
         * one chunk of the gradient block (dist/dist.h) */
        size_t grads = plan_class_bytes(plan, MEM_GRADIENTS), chunk = DIST_ALLREDUCE_CHUNK * sizeof(float);
        TRY(plan_note(plan, MEM_LIBRARY, "MPI all-reduce working buffer (one chunk)", grads < chunk ? grads : chunk,
                      false));
    }
    TRY(plan_note(plan, MEM_RUNTIME, "process baseline (code, libraries, tokenizer, heap), measured", in->baseline,
                  false));
    return plan_note_startup_peak(plan);
}

static const char *tune_name(TuneType t) {
    return t == TUNE_LORA ? "LoRA" : t == TUNE_DORA ? "DoRA" : t == TUNE_FULL ? "full" : "none";
}

void run_plan_print(const RunShape *a, const ModelSpec *spec, const MemPlan *plan, bool verbose, FILE *out) {
    char b[32];
    char ck[160];
    run_ckpt_text(spec, ck, sizeof ck);
    fprintf(out, "Memory plan: %s, %s fine-tuning of %s blocks, micro-batch %d x %d tokens, grad checkpoint %s, "
            "accumulation %d\n", a->model_dir, tune_name(spec->type),
            spec->num_layers <= 0 ? "all" : (snprintf(b, sizeof b, "the last %d", spec->num_layers), b),
            spec->max_rows, spec->max_tokens, ck, a->grad_accumulation_steps);
    plan_print_table(plan, verbose, out);
}

/* Total of the plan for a variant of the arguments; 0 when it cannot be built. */
size_t run_plan_total(const RunShape *v, const RunInputs *in) {
    MemPlan p;
    ModelSpec s;
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
        k += (size_t)snprintf(msg + k, sizeof msg - k, "%s %s %s", r ? "," : "", mem_class_name((MemClass)best),
                              format_bytes(b1, sizeof b1, cls[best]));
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
    char b1[32], b2[32];
    /* 1. the largest micro-batch that fits with the checkpointing asked for
     * (none with auto), 2. else, from the largest, the fewest checkpointed
     * blocks that make one fit */
    for (int pass = 0; pass < 2; pass++) {
        for (int b = effective; b >= 1; b--) {
            if (effective % b || in->train->n < (size_t)b) continue;
            RunShape v = *a;
            v.batch_size = b;
            v.grad_accumulation_steps = effective / b;
            if (pass == 0) {
                v.ckpt_auto = false;
                size_t t = run_plan_total(&v, in);
                if (!t || t > a->memory_limit) continue;
                fprintf(out, "Batch size auto: micro-batch %d x %d accumulation steps = effective batch %d; planned %s "
                        "of the %s limit\n", b, v.grad_accumulation_steps, effective, format_bytes(b1, sizeof b1, t),
                        format_bytes(b2, sizeof b2, a->memory_limit));
                *a = v;
                return 0;
            }
            RunCkptChoice ch;
            if (run_ckpt_choose(&v, in, &ch) < 0) {
                error_clear();
                continue;
            }
            if (ch.count <= 0) continue;
            fprintf(out, "Batch size auto: micro-batch %d x %d accumulation steps = effective batch %d, with %d "
                    "checkpointed blocks (no micro-batch fits without); planned %s of the %s limit\n", b,
                    v.grad_accumulation_steps, effective, ch.count, format_bytes(b1, sizeof b1, ch.total_after),
                    format_bytes(b2, sizeof b2, a->memory_limit));
            run_ckpt_print(&ch, &v, out);
            v.grad_checkpoint = false;
            v.ckpt_auto = false;
            v.ckpt_blocks = ch.set;
            *a = v;
            return 0;
        }
    }
    a->batch_size = 1;
    a->grad_accumulation_steps = effective;
    a->grad_checkpoint = true;
    a->ckpt_auto = false;
    MemPlan p;
    ModelSpec s;
    TRY(run_plan_build(a, in, &p, &s));
    int rc = run_check_limit(a, in, &p);
    plan_free(&p);
    return rc < 0 ? error_prefix("--batch-size auto: even a micro-batch of 1 with checkpointing does not fit") : 0;
}

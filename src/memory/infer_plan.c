/* infer_plan.c: the plans of eval and generate (see infer_plan.h). */
#include "memory/infer_plan.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "data/batching.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/adapter_io.h"
#include "train/sources.h"
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

size_t infer_baseline_now(const Dataset *data) {
    sys_warm_code();
    matmul_probe();
    rss_snapshot_baseline();
    size_t rss = rss_current_bytes(), d = data ? dataset_bytes(data) : 0;
    return rss > d ? rss - d : 0;
}

typedef struct {
    MatmulShape *s;
    size_t n, cap;
    int failed;
} Shapes;

static void add_shape(void *ctx, const MatmulShape *shape, int block, ProductPhase phase) {
    (void)block;
    (void)phase;
    Shapes *v = ctx;
    if (v->failed) return;
    for (size_t i = 0; i < v->n; i++)
        if (!memcmp(&v->s[i], shape, sizeof *shape)) return;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 128;
        MatmulShape *p = mem_realloc(v->s, cap * sizeof *p);
        if (!p) {
            v->failed = 1;
            return;
        }
        v->s = p;
        v->cap = cap;
    }
    v->s[v->n++] = *shape;
}

static int threads_of(const InferRequest *r) {
    if (r->threads > 0) return r->threads;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Eval: the batches the test pass reads, per worker, and their token ids. */
static int eval_batches(const InferRequest *r, int V, int rank, Shapes *shapes, const ModelConfig *cfg,
                        const ModelSpec *spec, const WeightsSummary *ws, const FrozenWeight *views, uint64_t *ids) {
    BatchIter it;
    int world = r->world > 0 ? r->world : 1;
    TRY(batch_iter_init(&it, r->data, r->batch_size, r->max_seq_length, rank, world,
                        data_source_eval_seed(r->seed, SPLIT_TEST), true));
    long n = r->batches < 0 || r->batches > it.n_batches ? it.n_batches : r->batches;
    int rc = 0;
    for (long i = 0; i < n && rc == 0; i++) {
        int rows, width;
        long loss;
        batch_describe(&it, it.order[i], &rows, &width, &loss, ids, (uint32_t)V);
        if (rows == 0) continue;
        ProductBatch b = {rows, width - 1, loss, false, false};
        if (shapes) rc = model_products(cfg, spec, ws, views, &b, 1, add_shape, shapes);
    }
    batch_iter_free(&it);
    return rc;
}

int infer_plan_build(const InferRequest *r, MemPlan *plan, ModelSpec *spec, int prepare_rank) {
    memset(plan, 0, sizeof *plan);
    memset(spec, 0, sizeof *spec);
    ModelConfig cfg;
    int rc = 0;
    TRY(model_config_load(r->model_dir, &cfg));   /* config.json, or a GGUF file's metadata */
    TRY(model_config_resolve(r->model_dir, &cfg));
    WeightsSummary ws;
    TRY(model_weights_summary(r->model_dir, &cfg, &ws));
    DType ft = ws.file_dtype;
    int world = r->world > 0 ? r->world : 1;
    spec->type = TUNE_NONE;
    spec->num_layers = -1;
    /* as stored where bf16 products exist (F16 widened), unless the command chose */
    spec->weight_dtype = r->fixed_dtype ? r->weight_dtype : matmul_weight_dtype(ft);
    FrozenWeight *views = NULL;
    int n_views = 0;
    if (ws.quantized) TRY(model_frozen_views(r->model_dir, &cfg, spec->weight_dtype, &views, &n_views));
    spec->training = false;
    if (r->adapter_dir) rc = adapter_spec_from_dir(r->adapter_dir, spec);
    Shapes shapes = {0};
    if (rc == 0 && r->kind == INFER_EVAL) {
        int rows = r->batch_size / world > 0 ? r->batch_size / world : 1;
        spec->max_rows = rows;
        spec->max_tokens = batch_max_width(r->data, r->batch_size, r->max_seq_length) - 1;
        size_t words = ((size_t)cfg.vocab_size + 63) / 64;
        uint64_t *ids = mem_calloc(words ? words : 1, sizeof *ids);
        if (!ids) rc = -1;
        plan->owned = ids;
        spec->embed_rows = ids;
        /* every worker's token ids; this worker's products (or worker 0's) */
        for (int rank = 0; rank < world && rc == 0; rank++)
            rc = eval_batches(r, cfg.vocab_size, rank, rank == (prepare_rank > 0 ? prepare_rank : 0) ? &shapes : NULL,
                              &cfg, spec, &ws, views, ids);
    } else if (rc == 0) {
        spec->max_rows = 1;
        spec->max_tokens = r->prompt_tokens;
        int positions = (int)(r->prompt_tokens + r->max_tokens);
        spec->kv_cache_tokens = r->max_kv_size > 0 && r->max_kv_size < positions ? r->max_kv_size : positions;
        spec->max_positions = positions;
        ProductBatch b = {1, r->prompt_tokens, 0, false, true};
        rc = model_products(&cfg, spec, &ws, views, &b, 1, add_shape, &shapes);
    }
    mem_free(views);
    /* the allocator's message stays */
    if (rc == 0 && shapes.failed) rc = error_prefix("listing the products");
    MatmulPlan lib;
    if (rc == 0) rc = matmul_plan(shapes.s, shapes.n, &lib);
    if (rc == 0 && prepare_rank >= 0) {
        lib.held_bytes = matmul_prepare(shapes.s, shapes.n);
        lib.measured = true;
    }
    mem_free(shapes.s);
    TRY(rc);
    spec->library_scratchpad = lib.scratchpad_bytes;
    Carver cv = {NULL, plan};
    TRY(model_layout_summary(&cfg, spec, &ws, &cv));
    TRY(model_plan_weights(r->model_dir, &cfg, spec, plan));
    char nm[96];
    if (r->kind == INFER_EVAL) {
        size_t pg = file_page_size();
        bool bf16 = spec->weight_dtype == DTYPE_BF16;
        size_t stack = (attention_stack_bytes(cfg.head_dim, bf16) + pg - 1) / pg * pg;
        snprintf(nm, sizeof nm, "attention tiles on the stacks of %d threads", threads_of(r));
        TRY(plan_note(plan, MEM_ATTENTION, nm, (size_t)threads_of(r) * stack, false));
        TRY(plan_note(plan, MEM_DATASET, "tokenised test set", dataset_bytes(r->data), false));
        TRY(plan_note(plan, MEM_DATASET, "batch buffers",
                      batch_iter_bytes(r->data, r->batch_size, r->max_seq_length, world), false));
    }
    snprintf(nm, sizeof nm, "oneDNN primitives: %zu%s", lib.primitives,
             lib.measured ? ", created now and measured" : " (start-up probe's figures)");
    TRY(plan_note(plan, MEM_LIBRARY, nm, lib.held_bytes, false));
    TRY(plan_note(plan, MEM_RUNTIME, "process baseline (code, libraries, tokenizer, heap), measured", r->baseline,
                  false));
    return plan_note_startup_peak(plan);
}

static size_t total_of(const InferRequest *r) {
    MemPlan p;
    ModelSpec s;
    size_t t = infer_plan_build(r, &p, &s, -1) == 0 ? plan_total(&p) : 0;
    plan_free(&p);
    error_clear();
    return t;
}

int infer_check_limit(const InferRequest *r, const MemPlan *plan) {
    if (!r->memory_limit || plan_total(plan) <= r->memory_limit) return 0;
    char msg[4096], b1[32], b2[32];
    size_t k = plan_limit_text(plan, r->memory_limit, msg, sizeof msg);
    k += (size_t)snprintf(msg + k, sizeof msg - k, ". Levers (planned total with each):");
    InferRequest v;
    char what[96];
    for (int i = 0; i < 3; i++) {
        v = *r;
        if (r->kind == INFER_EVAL && i == 0 && r->batch_size > 1) {
            v.batch_size = r->batch_size / 2;
            snprintf(what, sizeof what, "--batch-size %d", v.batch_size);
        } else if (r->kind == INFER_EVAL && i == 1 && r->max_seq_length > 64) {
            v.max_seq_length = r->max_seq_length / 2;
            snprintf(what, sizeof what, "--max-seq-length %d", v.max_seq_length);
        } else if (r->kind == INFER_GENERATE && i == 0 && r->max_tokens > 1) {
            v.max_tokens = r->max_tokens / 2;
            snprintf(what, sizeof what, "--max-tokens %ld", v.max_tokens);
        } else {
            continue;
        }
        size_t t = total_of(&v);
        if (!t) continue;
        size_t total = plan_total(plan);
        k += (size_t)snprintf(msg + k, k < sizeof msg ? sizeof msg - k : 0, "\n  %-30s %s (saves %s)%s", what,
                              format_bytes(b1, sizeof b1, t), format_bytes(b2, sizeof b2, total > t ? total - t : 0),
                              t <= r->memory_limit ? "  fits" : "");
    }
    return error_set("%s", msg);
}

int infer_open(const InferRequest *r, Model **out, Arena *arena, size_t *planned) {
    *out = NULL;
    memset(arena, 0, sizeof *arena);
    MemPlan plan;
    ModelSpec spec;
    /* first with the probe's figures (nothing created for a refused run) */
    int rc = infer_plan_build(r, &plan, &spec, -1);
    if (rc == 0) rc = infer_check_limit(r, &plan);
    plan_free(&plan);
    TRY(rc);
    int rank = 0;
    rc = infer_plan_build(r, &plan, &spec, rank);
    if (rc == 0) rc = infer_check_limit(r, &plan);
    if (rc == 0 && planned) *planned = plan_total(&plan);
    if (rc == 0) rc = arena_init(arena, plan_arena_bytes(&plan));
    if (rc == 0) rc = model_load(out, r->model_dir, &spec, arena);
    plan_free(&plan);   /* spec.embed_rows pointed into it; the model is loaded */
    if (rc == 0 && r->adapter_dir) {
        char *file = path_join(r->adapter_dir, "adapters.safetensors");
        rc = file ? adapter_load_file(*out, file, true) : -1;
        mem_free(file);
    }
    if (rc < 0) {
        if (*out) model_free(*out);
        *out = NULL;
        arena_free(arena);
    }
    return rc;
}

int infer_print_plan(const InferRequest *r, bool verbose, FILE *out) {
    MemPlan plan;
    ModelSpec spec;
    int rc = infer_plan_build(r, &plan, &spec, 0);
    if (rc == 0) {
        if (r->kind == INFER_EVAL)
            fprintf(out, "Memory plan: %s, evaluation in batches of %d x %d tokens%s\n", r->model_dir, spec.max_rows,
                    spec.max_tokens, r->adapter_dir ? ", with the adapter" : "");
        else
            fprintf(out, "Memory plan: %s, generation of %ld tokens after a %d-token prompt (KV cache of %d "
                    "positions)%s\n", r->model_dir, r->max_tokens, r->prompt_tokens, spec.kv_cache_tokens,
                    r->adapter_dir ? ", with the adapter" : "");
        plan_print_table(&plan, verbose, out);
        rc = infer_check_limit(r, &plan);
        if (rc == 0 && r->memory_limit) fprintf(out, "Fits the --memory-limit.\n");
    }
    plan_free(&plan);
    return rc;
}

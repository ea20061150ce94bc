/* cmd_train.c: `lmtune train`, mlx_lm.lora's run. Reads the flags
 * (cli/args.h), loads the tokenizer and the data splits, plans and carves
 * the model and the optimizer moments, writes adapter_config.json, runs the
 * loop (train/trainer.h) and, with --test, evaluates the test set; --test
 * without --train only evaluates the adapter in --adapter-path (cli/
 * eval_run.h) and writes nothing. Prints mlx_lm.lora's progress lines on
 * stdout. Exit status: 0, 1 on an error, 128 + signal when SIGINT/SIGTERM
 * stopped the run (after the adapters and the full state were saved). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "cli/adapter_config.h"
#include "cli/commands.h"
#include "cli/eval_run.h"
#include "cli/run_data.h"
#include "cli/run_record.h"
#include "cli/train_args.h"
#include "memory/run_plan.h"
#include "memory/run_ckpt.h"
#include "data/batching.h"
#include "data/dataset.h"
#include "dist/dist.h"
#include "formats/hf_config.h"
#include "model/model.h"
#include "kernels/matmul.h"
#include "report/report_html.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/sources.h"
#include "train/trainer.h"

/* Parameter count of the whole model (MLX-LM's total includes the adapters). */

/* FNV-1a over a weights file's name, size and 64 samples of 64 bytes spread
 * over it (a few pages read, whatever the model size). Read with pread, not
 * through a mapping: a mapping's faults would make whole folios of the
 * weights resident for a few bytes, outside the plan. */
static void fnv_add(uint64_t *f, const void *p, size_t n) {
    for (size_t k = 0; k < n; k++) {
        *f ^= ((const unsigned char *)p)[k];
        *f *= 1099511628211ull;
    }
}

static int file_identity(const char *path, const char *name, uint64_t *out) {
    struct stat sb;
    if (stat(path, &sb) < 0) return error_set("%s: cannot open: %s", path, strerror(errno));
    size_t size = (size_t)sb.st_size;
    uint64_t f = 1469598103934665603ull;
    fnv_add(&f, name, strlen(name));
    fnv_add(&f, &size, sizeof size);
    unsigned char sample[64];
    for (size_t i = 0; size >= 64 && i < 64; i++) {
        TRY(file_read_at(path, (size - 64) / 63 * i, sample, sizeof sample));
        fnv_add(&f, sample, sizeof sample);
    }
    *out = f;
    return 0;
}

/* An identity of the base weights for the resume fingerprint, so a training
 * state is refused on another base model of the same shape: the identities
 * of every *.safetensors file of the directory, combined independently of
 * readdir's order, or of the one file given (a GGUF base). A file that
 * cannot be read is an error: an identity without it would let --resume take
 * the state of another model. */
static int base_weights_id(const char *model, uint64_t *out) {
    uint64_t h = 1469598103934665603ull;
    DIR *d = opendir(model);
    if (!d && errno == ENOTDIR) {
        const char *slash = strrchr(model, '/');
        TRY(file_identity(model, slash ? slash + 1 : model, &h));
        *out = h;
        return 0;
    }
    if (!d) return error_set("%s: cannot open: %s", model, strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 12 || strcmp(e->d_name + len - 12, ".safetensors")) continue;
        char *path = path_join(model, e->d_name);
        uint64_t f;
        int rc = path ? file_identity(path, e->d_name, &f) : -1;
        mem_free(path);
        if (rc < 0) {
            closedir(d);
            return -1;
        }
        h ^= f;
    }
    closedir(d);
    *out = h;
    return 0;
}

static double base_parameters(const ModelConfig *c) {
    double C = c->hidden_size, F = c->intermediate_size, D = c->head_dim, H = c->num_attention_heads,
           KV = c->num_key_value_heads, V = c->vocab_size;
    double block = 2 * C + C * H * D + 2 * C * KV * D + H * D * C + 3 * C * F;
    if (c->attention_bias) block += H * D + 2 * KV * D;
    if (c->qk_norm) block += 2 * D;
    return V * C * (c->tie_word_embeddings ? 1 : 2) + C + block * c->num_hidden_layers;
}

/* The frozen_products of the run an --resume continues: 1 (found, *out
 * set), 0 (no record: a run of an older lmtune) or -1 (error set). */
static int resumed_products(const char *adapter_dir, DType *out) {
    char *path = path_join(adapter_dir, "adapter_config.json");
    TRY_PTR(path);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    mem_free(path);
    if (!j) return 0;
    const char *v = json_string_value(json_object_get(j, "frozen_products"));
    int found = v && (!strcmp(v, "bf16") || !strcmp(v, "f32"));
    if (found) *out = !strcmp(v, "bf16") ? DTYPE_BF16 : DTYPE_F32;
    json_decref(j);
    return found;
}

/* --weights-dtype: the frozen products' dtype, measured under auto, the same
 * on every worker (rank 0's) and across --resume; printed by rank 0. */
static int choose_products(const TrainArgs *a, const ModelConfig *cfg, RunShape *shape, int rank) {
    char note[512];
    bool automatic = !strcmp(a->weights_dtype, "auto");
    DType prev;
    int found = automatic && a->resume ? resumed_products(a->adapter_path, &prev) : 0;
    TRY(found);
    /* a run resumed on a CPU without bf16 products measures again */
    if (found && prev == DTYPE_BF16 && !matmul_bf16_supported()) found = 0;
    if (found) {
        shape->spec.weight_dtype = prev;
        snprintf(note, sizeof note, "%s (the choice of the run being resumed: %s/adapter_config.json)",
                 prev == DTYPE_BF16 ? "bf16" : "fp32", a->adapter_path);
    } else {
        TRY(train_args_weights_dtype(a, cfg, shape, note, sizeof note));
    }
    if (automatic) TRY(weights_dtype_agree(&shape->spec.weight_dtype));
    if (rank == 0) printf("Frozen products: %s\n", note);
    return 0;
}

typedef struct {
    TrainArgs a;
    int argc;               /* the command line, for run.json */
    char **argv;
    RunData d;              /* config, tokenizer, data splits (cli/run_data.h) */
    bool have_data;
    DataSource src;
    bool have_src;
    Model *model;
    Arena arena;
    Optimizer opt;
    bool have_opt;
    char ckpt_text[200];    /* the checkpointed blocks chosen */
} Run;

static void run_free(Run *r) {
    if (r->have_opt) optimizer_free(&r->opt);
    if (r->model) model_free(r->model);
    arena_free(&r->arena);
    if (r->have_src) data_source_free(&r->src);
    if (r->have_data) run_data_free(&r->d);
    train_args_free(&r->a);
}

/* mlx_lm.lora --test without --train: the adapter in --adapter-path (none
 * when it is "") on the test set; nothing is written. */
static int run_test_only(const TrainArgs *a) {
    if (a->batch_size == 0) return error_set("--batch-size auto plans a training run; give a number with --test");
    EvalRequest e = {
        .model = a->model, .adapter_path = a->adapter_path, .data = a->data, .chat_template = a->chat_template,
        .test_batches = a->test_batches, .max_seq_length = a->max_seq_length, .batch_size = a->batch_size,
        .seed = a->seed, .threads = a->threads, .memory_limit = a->memory_limit, .mlx_log = true,
        .weights_dtype = a->weights_dtype,
    };
    run_data_options(a, &e.data_options);
    return eval_run(&e);
}

/* The trainer's hook: ADAPTER_DIR/report.html after each evaluation and at the end. */
static int render_report(void *ctx) {
    return report_html_write(ctx, NULL);
}

static int run_train(Run *r, int *exit_code) {
    TrainArgs *a = &r->a;
    const int rank = dist_rank(), world = dist_world();
#ifdef _OPENMP
    if (a->threads > 0) omp_set_num_threads(a->threads);
#endif
    if (a->resume_adapter_file && dir_exists(a->resume_adapter_file))
        return error_set("--resume-adapter-file %s: is a directory; it must be an adapter file such as "
                         "%s/adapters.safetensors", a->resume_adapter_file, a->resume_adapter_file);
    if (a->config) log_info("Loading configuration file %s", a->config);
    if (!a->train) return run_test_only(a);
    /* Config, tokenizer and data: all a plan needs besides the weights' headers. */
    r->have_data = true;
    log_info("Loading pretrained model");
    TRY(run_data_load_model(&r->d, a));
    log_info("Loading datasets");
    TRY(run_data_load_splits(&r->d, a, world));
    log_info("Training");
    const ModelConfig *cfg = &r->d.cfg;
    RunShape shape;
    TRY(train_args_run_shape(a, cfg, &shape));
    TRY(choose_products(a, cfg, &shape, rank));
    if (a->batch_size == 0 || shape.ckpt_auto) {
        /* Every worker chooses the same; only rank 0 says so. */
        FILE *out = rank == 0 ? stdout : fopen("/dev/null", "w");
        int rc = out ? 0 : error_set("cannot open /dev/null");
        if (rc == 0 && a->batch_size == 0) rc = run_choose_batch(&shape, &r->d.in, out);
        if (rc == 0) rc = run_choose_checkpoint(&shape, &r->d.in, out);
        if (out && out != stdout) fclose(out);
        TRY(rc);
        a->batch_size = shape.batch_size;
        a->grad_accumulation_steps = shape.grad_accumulation_steps;
    }
    /* what the run checkpoints, as adapter_config.json records it */
    ModelSpec chosen;
    memset(&chosen, 0, sizeof chosen);
    chosen.grad_checkpoint = shape.grad_checkpoint;
    chosen.ckpt_blocks = shape.ckpt_blocks;
    run_ckpt_text(&chosen, r->ckpt_text, sizeof r->ckpt_text);
    a->grad_checkpoint = !strcmp(r->ckpt_text, "on") ? "all" : !strncmp(r->ckpt_text, "blocks ", 7) ? r->ckpt_text + 7
                                                                                                  : "off";

    /* The plan of every buffer (model walk, optimizer moments, data, library,
     * baseline); a run over --memory-limit is refused here, before any
     * weight is loaded. The arena is exactly the plan's arena part, carved
     * by the same walks. */
    MemPlan plan;
    ModelSpec spec;
    /* first with the start-up probe's per-primitive figures (nothing is
     * created for a run that is refused), then with the run's primitives
     * created and measured */
    if (run_plan_build(&shape, &r->d.in, &plan, &spec) < 0) {
        plan_free(&plan);
        return -1;
    }
    if (run_check_limit(&shape, &r->d.in, &plan) < 0) {
        plan_free(&plan);
        return -1;
    }
    plan_free(&plan);
    if (run_plan_build_ex(&shape, &r->d.in, &plan, &spec, rank) < 0) {
        plan_free(&plan);
        return -1;
    }
    if (run_check_limit(&shape, &r->d.in, &plan) < 0) {
        plan_free(&plan);
        return -1;
    }
    size_t arena_bytes = plan_arena_bytes(&plan), total_bytes = plan_total(&plan);
    RunRecord record = {.args = a, .data = &r->d, .plan_total = total_bytes, .plan_arena = arena_bytes,
                        .world = world, .argc = r->argc, .argv = r->argv};
    for (int c = 0; c < MEM_CLASS_COUNT; c++) record.class_bytes[c] = plan_class_bytes(&plan, (MemClass)c);
    int rc = arena_init(&r->arena, arena_bytes);
    if (rc == 0) rc = model_load(&r->model, a->model, &spec, &r->arena);
    plan_free(&plan);   /* spec.embed_rows pointed into it */
    TRY(rc);
    Rng init_rng;
    rng_seed(&init_rng, a->seed);
    TRY(model_init_trainables(r->model, &init_rng));
    Trainee tr = model_trainee(r->model);
    if (a->resume_adapter_file) {
        log_info("Loading fine-tuned weights from %s", a->resume_adapter_file);
        TRY(checkpoint_load_adapters(a->resume_adapter_file, tr.params, tr.n_params));
    }
    Carver ocv = {&r->arena, NULL};
    TRY(optimizer_layout(&r->opt, &a->optimizer_config, tr.params, tr.n_params, &ocv));
    r->have_opt = true;
    if (r->arena.used != r->arena.capacity)
        log_warning("memory plan: %zu arena bytes planned, %zu carved", r->arena.capacity, r->arena.used);

    TRY(data_source_init(&r->src, &r->d.train, r->d.have_valid ? &r->d.valid : NULL, r->d.have_test ? &r->d.test : NULL,
                         a->batch_size, a->max_seq_length, rank, world, a->seed));
    r->have_src = true;
    int iters = a->iters;
    if (a->epochs > 0) iters = (int)ceil(a->epochs * r->src.train.n_batches);

    double trainable = 0;
    for (size_t i = 0; i < tr.n_params; i++) trainable += (double)tr.params[i].numel;
    double total = base_parameters(cfg) + (spec.type == TUNE_FULL ? 0 : trainable);
    if (rank == 0) {
        printf("Trainable parameters: %.3f%% (%.3fM/%.3fM)\n", 100.0 * trainable / total, trainable / 1e6, total / 1e6);
        if (a->epochs > 0)
            printf("Epochs: %g x %d batches = %d iterations\n", a->epochs, r->src.train.n_batches, iters);
        fflush(stdout);
        TRY(dir_ensure(a->adapter_path));
        if (!a->resume) TRY(adapter_config_write(a, iters, a->adapter_path, spec.weight_dtype));
        record.spec = &spec;
        record.trainable = trainable;
        record.total_params = total;
        record.iters = iters;
#ifdef _OPENMP
        record.threads = omp_get_max_threads();
#else
        record.threads = 1;
#endif
        TRY(run_record_write(a->adapter_path, &record));
    }

    TrainConfig tc;
    train_config_default(&tc);
    tc.iters = iters;
    tc.grad_accum = a->grad_accumulation_steps;
    tc.batch_size = a->batch_size;
    tc.steps_per_report = a->steps_per_report;
    tc.steps_per_eval = a->steps_per_eval;
    tc.save_every = a->save_every;
    tc.val_batches = a->val_batches;
    tc.loss_tokens = !strcmp(a->loss_normalization, "tokens");
    tc.max_grad_norm = a->max_grad_norm;
    tc.seed = a->seed;
    TRY(schedule_init(&tc.schedule, &a->lr_schedule, a->learning_rate));
    tc.adapter_path = a->adapter_path;
    tc.metrics_file = a->metrics_file;
    tc.resume = a->resume;
    uint64_t weights_id = 0;
    TRY(base_weights_id(a->model, &weights_id));
    char fingerprint[512];
    snprintf(
        fingerprint, sizeof fingerprint,
        "%s L%d C%d F%d H%d KV%d D%d V%d weights %016llx | %s layers %d rank %d keys %x | data %zu B%d A%d world %d "
        "seed %llu %s",
        cfg->model_type, cfg->num_hidden_layers, cfg->hidden_size, cfg->intermediate_size, cfg->num_attention_heads,
        cfg->num_key_value_heads, cfg->head_dim, cfg->vocab_size, (unsigned long long)weights_id, a->fine_tune_type,
        spec.num_layers, spec.lora_rank, spec.lora_keys, r->d.train.n, a->batch_size, a->grad_accumulation_steps, world,
        (unsigned long long)a->seed, a->loss_normalization);
    tc.fingerprint = fingerprint;
    tc.arena = &r->arena;
    tc.plan_total = total_bytes;
    tc.on_history = render_report;
    tc.history_ctx = (void *)a->adapter_path;
    BatchSource bs = data_source_iface(&r->src);
    train_install_signal_handlers();
    TrainResult res;
    TRY(train_run(&tr, &bs, &r->opt, &tc, &res));
    /* LMTUNE_MATMUL_PROFILE: the products' CPU seconds, summed over the run */
    if (rank == 0) matmul_profile_report(true);
    if (world > 1 && rank == 0 && res.updates > 0)
        printf("Gradient all-reduce: %.2f ms per update (%ld all-reduces, %.3f s in all)\n",
               1e3 * dist_comm_seconds() / (double)res.updates, dist_comm_calls(), dist_comm_seconds());
    if (res.stop_signal) {
        *exit_code = 128 + res.stop_signal;
        return 0;
    }
    if (a->test) {
        log_info("Testing");
        double loss;
        long n;
        bool have;
        TRY(train_evaluate(&tr, &bs, SPLIT_TEST, a->test_batches, &loss, &n, &have));
        if (rank == 0) printf("Test loss %.3f, Test ppl %.3f.\n", loss, exp(loss));
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    Run r;
    memset(&r, 0, sizeof r);
    train_args_default(&r.a);
    if (dist_init(&argc, &argv) < 0) die_with_error();
    if (train_args_parse(&r.a, argc, argv) < 0) {
        train_args_free(&r.a);
        die_with_error();
    }
    if (r.a.parsed.help) {
        train_args_free(&r.a);
        return 0;
    }
    r.argc = argc;
    r.argv = argv;
    int exit_code = 0;
    if (run_train(&r, &exit_code) < 0) {
        fprintf(stderr, "lmtune: error: %s\n", error_message());
        exit_code = 1;
    }
    run_free(&r);
    dist_finalize();
    return exit_code;
}

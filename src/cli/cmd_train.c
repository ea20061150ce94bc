/* cmd_train.c: `lmtune train`, mlx_lm.lora's training run. Reads the flags
 * (cli/args.h), loads the tokenizer and the data splits, plans and carves
 * the model and the optimizer moments, writes adapter_config.json, runs the
 * loop (train/trainer.h) and, with --test, evaluates the test set. Exit
 * status: 0, 1 on an error, 128 + signal when SIGINT/SIGTERM stopped the
 * run (after the adapters and the full state were saved). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "cli/train_args.h"
#include "cli/commands.h"
#include "cli/run_data.h"
#include "cli/run_record.h"
#include "memory/run_plan.h"
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
 * over it (a few pages read, whatever the model size). */
static int file_identity(const char *path, const char *name, uint64_t *out) {
    MappedFile m;
    TRY(file_map(&m, path));
    uint64_t f = 1469598103934665603ull;
    const unsigned char *parts[2] = {(const unsigned char *)name, (const unsigned char *)&m.size};
    size_t lens[2] = {strlen(name), sizeof m.size};
    for (int p = 0; p < 2; p++) {
        for (size_t k = 0; k < lens[p]; k++) {
            f ^= parts[p][k];
            f *= 1099511628211ull;
        }
    }
    for (size_t i = 0; m.size >= 64 && i < 64; i++) {
        const unsigned char *sample = (const unsigned char *)m.data + (m.size - 64) / 63 * i;
        for (size_t k = 0; k < 64; k++) {
            f ^= sample[k];
            f *= 1099511628211ull;
        }
    }
    file_unmap(&m);
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

static json_t *json_num_list(const double *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

static json_t *adam_json(const AdamConfig *c, bool with_decay) {
    json_t *o = json_pack("{s:o, s:f, s:b}", "betas", json_num_list(c->betas, 2), "eps", c->eps,
                          "bias_correction", c->bias_correction);
    if (with_decay) json_object_set_new(o, "weight_decay", json_real(c->weight_decay));
    return o;
}

static json_t *nullable(double v) { return isnan(v) ? json_null() : json_real(v); }

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
static int choose_products(const TrainArgs *a, const ModelConfig *cfg, RunShape *shape, int rank, int world) {
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
    if (automatic && world > 1) {
        double bf16 = rank == 0 && shape->spec.weight_dtype == DTYPE_BF16 ? 1.0 : 0.0;
        TRY(dist_all_sum_doubles(&bf16, 1));
        shape->spec.weight_dtype = bf16 > 0.5 ? DTYPE_BF16 : DTYPE_F32;
    }
    if (rank == 0) printf("Frozen products: %s\n", note);
    return 0;
}

/* MLX-LM writes its whole argument namespace, keys sorted, 4-space indent;
 * we add the dtype the frozen products took (frozen_products: a --resume of
 * an auto run takes the same, so that it continues the same computation). */
static int write_adapter_config(const TrainArgs *a, const char *dir, DType products) {
    json_t *j = json_object();
#define S(k, v) json_object_set_new(j, k, (v) ? json_string(v) : json_null())
#define I(k, v) json_object_set_new(j, k, json_integer(v))
#define F(k, v) json_object_set_new(j, k, json_real(v))
#define B(k, v) json_object_set_new(j, k, json_boolean(v))
    S("model", a->model); B("train", true); S("data", a->data); S("fine_tune_type", a->fine_tune_type);
    S("optimizer", a->optimizer); B("mask_prompt", a->mask_prompt); I("num_layers", a->num_layers);
    I("batch_size", a->batch_size); I("iters", a->iters); I("val_batches", a->val_batches);
    F("learning_rate", a->learning_rate); I("steps_per_report", a->steps_per_report);
    I("steps_per_eval", a->steps_per_eval); S("resume_adapter_file", a->resume_adapter_file);
    S("adapter_path", a->adapter_path); I("save_every", a->save_every); B("test", a->test);
    I("test_batches", a->test_batches); I("max_seq_length", a->max_seq_length); S("config", a->config);
    B("grad_checkpoint", a->grad_checkpoint); I("grad_accumulation_steps", a->grad_accumulation_steps);
    I("seed", (json_int_t)a->seed);
    F("epochs", a->epochs); F("max_grad_norm", a->max_grad_norm); S("loss_normalization", a->loss_normalization);
    S("weights_dtype", a->weights_dtype); S("metrics_file", a->metrics_file);
    S("frozen_products", products == DTYPE_BF16 ? "bf16" : "f32");
#undef S
#undef I
#undef F
#undef B
    if (!strcmp(a->fine_tune_type, "full")) {
        json_object_set_new(j, "lora_parameters", json_null());
    } else {
        json_t *lp = json_pack("{s:i, s:f, s:f}", "rank", a->lora.rank, "dropout", a->lora.dropout, "scale", a->lora.scale);
        if (a->lora.n_keys) {
            json_t *keys = json_array();
            for (int k = 0; k < a->lora.n_keys; k++) json_array_append_new(keys, json_string(a->lora.keys[k]));
            json_object_set_new(lp, "keys", keys);
        }
        json_object_set_new(j, "lora_parameters", lp);
    }
    if (a->lr_schedule.set) {
        json_object_set_new(j, "lr_schedule", json_pack("{s:s, s:i, s:f, s:o}", "name", a->lr_schedule.name,
                            "warmup", a->lr_schedule.warmup, "warmup_init", a->lr_schedule.warmup_init, "arguments",
                            json_num_list(a->lr_schedule.arguments, a->lr_schedule.n_arguments)));
    } else {
        json_object_set_new(j, "lr_schedule", json_null());
    }
    const OptimizerConfig *o = &a->optimizer_config;
    const AdafactorConfig *af = &o->adafactor;
    json_t *oc = json_object();
    json_object_set_new(oc, "adam", adam_json(&o->adam, false));
    json_object_set_new(oc, "adamw", adam_json(&o->adamw, true));
    json_object_set_new(oc, "sgd", json_pack("{s:f, s:f, s:f, s:b}", "momentum", o->sgd.momentum, "weight_decay",
                                             o->sgd.weight_decay, "dampening", o->sgd.dampening, "nesterov", o->sgd.nesterov));
    json_object_set_new(oc, "adafactor", json_pack("{s:o, s:o, s:f, s:f, s:o, s:f, s:b, s:b, s:b}",
        "learning_rate", nullable(af->learning_rate), "eps", json_num_list(af->eps, 2), "clip_threshold", af->clip_threshold,
        "decay_rate", af->decay_rate, "beta_1", nullable(af->beta_1), "weight_decay", af->weight_decay,
        "scale_parameter", af->scale_parameter, "relative_step", af->relative_step, "warmup_init", af->warmup_init));
    json_object_set_new(j, "optimizer_config", oc);
    char *text = json_dumps(j, JSON_INDENT(4) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    json_decref(j);
    if (!text) return error_set("adapter_config.json: out of memory");
    char *path = path_join(dir, "adapter_config.json");
    int rc = path ? atomic_write_file(path, text, strlen(text)) : -1;
    mem_free(path);
    free(text);
    return rc;
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
} Run;

static void run_free(Run *r) {
    if (r->have_opt) optimizer_free(&r->opt);
    if (r->model) model_free(r->model);
    arena_free(&r->arena);
    if (r->have_src) data_source_free(&r->src);
    if (r->have_data) run_data_free(&r->d);
    args_release();
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
    /* Config, tokenizer and data: all a plan needs besides the weights' headers. */
    r->have_data = true;
    TRY(run_data_load(&r->d, a, world));
    const ModelConfig *cfg = &r->d.cfg;
    RunShape shape;
    TRY(train_args_run_shape(a, cfg, &shape));
    TRY(choose_products(a, cfg, &shape, rank, world));
    if (a->batch_size == 0) {
        /* Every worker chooses the same; only rank 0 says so. */
        FILE *out = rank == 0 ? stdout : fopen("/dev/null", "w");
        int rc = out ? run_choose_batch(&shape, &r->d.in, out) : error_set("cannot open /dev/null");
        if (out && out != stdout) fclose(out);
        TRY(rc);
        a->batch_size = shape.batch_size;
        a->grad_accumulation_steps = shape.grad_accumulation_steps;
        a->grad_checkpoint = shape.grad_checkpoint;
    }

    /* The plan of every buffer (model walk, optimizer moments, data, library,
     * baseline); a run over --memory-limit is refused here, before any
     * weight is loaded. The arena is exactly the plan's arena part, carved
     * by the same walks. */
    MemPlan plan;
    ModelSpec spec;
    if (run_plan_build(&shape, &r->d.in, &plan, &spec) < 0) { plan_free(&plan); return -1; }
    if (run_check_limit(&shape, &r->d.in, &plan) < 0) { plan_free(&plan); return -1; }
    size_t arena_bytes = plan_arena_bytes(&plan), total_bytes = plan_total(&plan);
    RunRecord record = {.args = a, .data = &r->d, .plan_total = total_bytes, .plan_arena = arena_bytes,
                        .world = world, .argc = r->argc, .argv = r->argv};
    for (int c = 0; c < MEM_CLASS_COUNT; c++) record.class_bytes[c] = plan_class_bytes(&plan, (MemClass)c);
    plan_free(&plan);
    TRY(arena_init(&r->arena, arena_bytes));
    TRY(model_load(&r->model, a->model, &spec, &r->arena));
    Rng init_rng;
    rng_seed(&init_rng, a->seed);
    TRY(model_init_trainables(r->model, &init_rng));
    Trainee tr = model_trainee(r->model);
    if (a->resume_adapter_file) TRY(checkpoint_load_adapters(a->resume_adapter_file, tr.params, tr.n_params));
    Carver ocv = {&r->arena, NULL};
    TRY(optimizer_layout(&r->opt, &a->optimizer_config, tr.params, tr.n_params, &ocv));
    r->have_opt = true;
    if (r->arena.used != r->arena.capacity)
        fprintf(stderr, "[WARNING] memory plan: %zu arena bytes planned, %zu carved\n", r->arena.capacity, r->arena.used);

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
        if (a->epochs > 0) printf("Epochs: %g x %d batches = %d iterations\n", a->epochs, r->src.train.n_batches, iters);
        fflush(stdout);
        TRY(dir_ensure(a->adapter_path));
        if (!a->resume) TRY(write_adapter_config(a, a->adapter_path, spec.weight_dtype));
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
    snprintf(fingerprint, sizeof fingerprint,
             "%s L%d C%d F%d H%d KV%d D%d V%d weights %016llx | %s layers %d rank %d keys %x | data %zu B%d A%d world %d "
             "seed %llu %s",
             cfg->model_type, cfg->num_hidden_layers, cfg->hidden_size, cfg->intermediate_size,
             cfg->num_attention_heads, cfg->num_key_value_heads, cfg->head_dim, cfg->vocab_size,
             (unsigned long long)weights_id, a->fine_tune_type, spec.num_layers, spec.lora_rank,
             spec.lora_keys, r->d.train.n, a->batch_size,
             a->grad_accumulation_steps, world, (unsigned long long)a->seed, a->loss_normalization);
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
    if (res.stop_signal) { *exit_code = 128 + res.stop_signal; return 0; }
    if (a->test) {
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
    if (train_args_parse(&r.a, argc, argv) < 0) { args_release(); die_with_error(); }
    if (r.a.parsed.help) { args_release(); return 0; }
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

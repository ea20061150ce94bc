/* run_record.c: writes ADAPTER_DIR/run.json (see run_record.h). */
#include "cli/run_record.h"
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "data/batching.h"

static void add_flag(json_t *flags, const char *flag, const char *value, const char *def) {
    json_array_append_new(flags, json_pack("{s:s, s:s, s:s}", "flag", flag, "value", value, "default", def));
}

static bool same_double(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

/* The config-file sections (not flags of the table) that differ from their defaults. */
static void add_sections(json_t *flags, const TrainArgs *a, const TrainArgs *d) {
    char v[256], w[256];
    if (a->lora.rank != d->lora.rank) {
        snprintf(v, sizeof v, "%d", a->lora.rank);
        snprintf(w, sizeof w, "%d", d->lora.rank);
        add_flag(flags, "lora_parameters.rank", v, w);
    }
    if (a->lora.scale != d->lora.scale) {
        snprintf(v, sizeof v, "%g", a->lora.scale);
        snprintf(w, sizeof w, "%g", d->lora.scale);
        add_flag(flags, "lora_parameters.scale", v, w);
    }
    if (a->lora.dropout != d->lora.dropout) {
        snprintf(v, sizeof v, "%g", a->lora.dropout);
        snprintf(w, sizeof w, "%g", d->lora.dropout);
        add_flag(flags, "lora_parameters.dropout", v, w);
    }
    if (a->lora.n_keys) {
        size_t k = 0;
        v[0] = 0;
        for (int i = 0; i < a->lora.n_keys && k < sizeof v; i++)
            k += (size_t)snprintf(v + k, sizeof v - k, "%s%s", i ? ", " : "", a->lora.keys[i]);
        add_flag(flags, "lora_parameters.keys", v, "every linear of a block");
    }
    if (a->lr_schedule.set) {
        const ScheduleConfig *s = &a->lr_schedule;
        size_t k = (size_t)snprintf(v, sizeof v, "%s, arguments [", s->name);
        for (int i = 0; i < s->n_arguments && k < sizeof v; i++)
            k += (size_t)snprintf(v + k, sizeof v - k, "%s%g", i ? ", " : "", s->arguments[i]);
        if (k < sizeof v) snprintf(v + k, sizeof v - k, "], warmup %d, warmup_init %g", s->warmup, s->warmup_init);
        add_flag(flags, "lr_schedule", v, "none (constant learning rate)");
    }
    const OptimizerConfig *o = &a->optimizer_config, *od = &d->optimizer_config;
    const AdamConfig *ad = o->kind == OPT_ADAMW ? &o->adamw : &o->adam;
    const AdamConfig *add = o->kind == OPT_ADAMW ? &od->adamw : &od->adam;
    if ((o->kind == OPT_ADAM || o->kind == OPT_ADAMW) &&
        (ad->betas[0] != add->betas[0] || ad->betas[1] != add->betas[1] || ad->eps != add->eps ||
         ad->bias_correction != add->bias_correction || ad->weight_decay != add->weight_decay)) {
        snprintf(v, sizeof v, "betas [%g, %g], eps %g, bias_correction %s, weight_decay %g", ad->betas[0],
                 ad->betas[1], ad->eps, ad->bias_correction ? "true" : "false", ad->weight_decay);
        snprintf(w, sizeof w, "betas [%g, %g], eps %g, bias_correction %s, weight_decay %g", add->betas[0],
                 add->betas[1], add->eps, add->bias_correction ? "true" : "false", add->weight_decay);
        add_flag(flags, o->kind == OPT_ADAMW ? "optimizer_config.adamw" : "optimizer_config.adam", v, w);
    }
    const SgdConfig *sg = &o->sgd, *sgd = &od->sgd;
    if (o->kind == OPT_SGD && (sg->momentum != sgd->momentum || sg->weight_decay != sgd->weight_decay ||
                               sg->dampening != sgd->dampening || sg->nesterov != sgd->nesterov)) {
        snprintf(v, sizeof v, "momentum %g, weight_decay %g, dampening %g, nesterov %s", sg->momentum,
                 sg->weight_decay, sg->dampening, sg->nesterov ? "true" : "false");
        add_flag(flags, "optimizer_config.sgd", v, "momentum 0, weight_decay 0, dampening 0, nesterov false");
    }
    const AdafactorConfig *af = &o->adafactor, *afd = &od->adafactor;
    if (o->kind == OPT_ADAFACTOR &&
        (!same_double(af->learning_rate, afd->learning_rate) || !same_double(af->beta_1, afd->beta_1) ||
         af->eps[0] != afd->eps[0] || af->eps[1] != afd->eps[1] || af->clip_threshold != afd->clip_threshold ||
         af->decay_rate != afd->decay_rate || af->weight_decay != afd->weight_decay ||
         af->scale_parameter != afd->scale_parameter || af->relative_step != afd->relative_step ||
         af->warmup_init != afd->warmup_init)) {
        snprintf(v, sizeof v, "relative_step %s, scale_parameter %s, warmup_init %s, learning_rate %g, beta_1 %g, "
                 "clip_threshold %g, decay_rate %g, weight_decay %g", af->relative_step ? "true" : "false",
                 af->scale_parameter ? "true" : "false", af->warmup_init ? "true" : "false", af->learning_rate,
                 af->beta_1, af->clip_threshold, af->decay_rate, af->weight_decay);
        add_flag(flags, "optimizer_config.adafactor", v, "MLX's defaults");
    }
}

static json_t *flags_json(const TrainArgs *a) {
    TrainArgs d;
    train_args_default(&d);
    json_t *flags = json_array();
    const ArgTable *t = &TRAIN_ARGS_TABLE;
    for (size_t i = 0; i < t->n_specs; i++) {
        char v[512], w[512], flag[80];
        args_value_text(&t->specs[i], a, v, sizeof v);
        args_value_text(&t->specs[i], &d, w, sizeof w);
        if (!strcmp(v, w)) continue;
        snprintf(flag, sizeof flag, "--%s", t->specs[i].name);
        add_flag(flags, flag, v, w[0] ? w : "none");
    }
    add_sections(flags, a, &d);
    return flags;
}

static json_t *data_set_json(const char *split, const Dataset *d, const TrainArgs *a) {
    double pad = batch_padding_share(d, a->batch_size, a->max_seq_length, true);
    if (pad < 0) return NULL;   /* out of memory (the error is set) */
    return json_pack("{s:s, s:s, s:I, s:I, s:o}", "split", split, "format", dataset_format_name(d->format),
                     "examples", (json_int_t)d->n, "tokens", (json_int_t)d->n_tokens, "padding_share",
                     isfinite(pad) ? json_real(pad) : json_null());
}

char *run_record_command(int argc, char **argv) {
    size_t len = 8;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 3;
    char *s = mem_alloc(len);
    if (!s) return NULL;
    size_t k = (size_t)snprintf(s, len, "lmtune");
    for (int i = 0; i < argc; i++) {
        bool quote = argv[i][0] == 0 || strpbrk(argv[i], " \t\"'$") != NULL;
        k += (size_t)snprintf(s + k, len - k, quote ? " '%s'" : " %s", argv[i]);
    }
    return s;
}

static json_t *command_json(int argc, char **argv) {
    char *s = run_record_command(argc, argv);
    json_t *j = s ? json_string(s) : NULL;
    mem_free(s);
    return j;
}

static json_t *record_json(const RunRecord *r) {
    const TrainArgs *a = r->args;
    const ModelConfig *c = &r->data->cfg;
    json_t *j = json_object();
    json_object_set_new(j, "format", json_string("lmtune-run"));
    json_object_set_new(j, "version", json_integer(1));
    json_object_set_new(j, "time", json_real(time_unix()));
    json_t *cmd = command_json(r->argc, r->argv);
    if (!cmd) {   /* the command line's copy failed (the error is set): no record without it */
        json_decref(j);
        return NULL;
    }
    json_object_set_new(j, "command", cmd);
    json_object_set_new(j, "model", json_string(a->model));
    json_object_set_new(j, "model_type", json_string(c->model_type));
    json_object_set_new(j, "num_hidden_layers", json_integer(c->num_hidden_layers));
    json_object_set_new(j, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(j, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(j, "fine_tune_type", json_string(a->fine_tune_type));
    json_object_set_new(j, "trained_blocks", json_integer(r->spec->num_layers <= 0 ? c->num_hidden_layers
                                                                                   : r->spec->num_layers));
    if (r->spec->type != TUNE_FULL) json_object_set_new(j, "lora_rank", json_integer(r->spec->lora_rank));
    json_object_set_new(j, "grad_checkpoint", json_boolean(r->spec->grad_checkpoint));
    json_object_set_new(j, "trainable_parameters", json_real(r->trainable));
    json_object_set_new(j, "total_parameters", json_real(r->total_params));
    json_object_set_new(j, "iters", json_integer(r->iters));
    json_object_set_new(j, "batch_size", json_integer(a->batch_size));
    json_object_set_new(j, "grad_accumulation_steps", json_integer(a->grad_accumulation_steps));
    json_object_set_new(j, "world", json_integer(r->world));
    json_object_set_new(j, "effective_batch_size",
                        json_integer((json_int_t)(a->batch_size / r->world) * a->grad_accumulation_steps * r->world));
    json_object_set_new(j, "optimizer", json_string(a->optimizer));
    json_object_set_new(j, "learning_rate", json_real(a->learning_rate));
    json_object_set_new(j, "max_grad_norm", json_real(a->max_grad_norm));
    json_object_set_new(j, "memory_limit", a->memory_limit ? json_integer((json_int_t)a->memory_limit) : json_null());
    json_object_set_new(j, "threads", json_integer(r->threads));
    const char *wait = getenv("OMP_WAIT_POLICY");
    json_object_set_new(j, "omp_wait_policy", wait ? json_string(wait) : json_null());
    json_object_set_new(j, "data", json_string(a->data));
    json_t *sets = json_array();
    const struct {
        const char *split;
        const Dataset *d;
        bool have;
    } splits[3] = {
        {"train", &r->data->train, true},
        {"valid", &r->data->valid, r->data->have_valid},
        {"test", &r->data->test, r->data->have_test},
    };
    for (int k = 0; k < 3; k++) {
        if (!splits[k].have) continue;
        json_t *set = data_set_json(splits[k].split, splits[k].d, a);
        if (!set) {
            json_decref(sets);
            json_decref(j);
            return NULL;
        }
        json_array_append_new(sets, set);
    }
    json_object_set_new(j, "data_sets", sets);
    json_object_set_new(j, "flags", flags_json(a));
    json_t *classes = json_array();
    for (int k = 0; k < MEM_CLASS_COUNT; k++) {
        if (!r->class_bytes[k]) continue;
        json_array_append_new(classes, json_pack("{s:i, s:s, s:I}", "class", k, "name", mem_class_name((MemClass)k),
                                                 "bytes", (json_int_t)r->class_bytes[k]));
    }
    json_object_set_new(j, "plan", json_pack("{s:o, s:I, s:I}", "classes", classes, "total",
                                             (json_int_t)r->plan_total, "arena", (json_int_t)r->plan_arena));
    return j;
}

int run_record_write(const char *dir, const RunRecord *r) {
    json_t *j = record_json(r);
    if (!j) return error_prefix("%s/%s", dir, RUN_RECORD_FILE);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(j);
    if (!text) return error_set("%s/%s: out of memory", dir, RUN_RECORD_FILE);
    char *path = path_join(dir, RUN_RECORD_FILE);
    int rc = path ? atomic_write_file(path, text, strlen(text)) : -1;
    mem_free(path);
    free(text);
    return rc;
}

/* train_args.c: the flags of `lmtune train` and `lmtune plan` (every flag of
 * mlx_lm.lora with its default, plus ours), the YAML sections that are not
 * flags (lora_parameters, lr_schedule, optimizer_config), the checks of
 * their combinations, and the translation of the flags into the run shape
 * the memory planner works on (memory/run_plan.h). */
#include "cli/train_args.h"
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>
#include "base/error.h"
#include "formats/hf_hub.h"
#include <stdlib.h>
#include "dist/dist.h"
#include "kernels/matmul.h"

#define OFF(f) offsetof(TrainArgs, f)
#define POS ARG_AT_LEAST(1, "a positive integer")
#define NONNEG ARG_AT_LEAST(0, "a non-negative integer")
/* The flags of train, which plan shares. */
#define TRAIN_FLAG_ROWS \
    {"model", 0, ARG_STRING, OFF(model), "DIR", \
     "model directory (config.json, *.safetensors, tokenizer.json) or a Hugging Face repo id in the local cache", \
     NULL, ARG_UNBOUNDED}, \
    {"train", 0, ARG_BOOL, OFF(train), NULL, "do training (the default unless --test is given alone, as mlx_lm.lora)", \
     NULL, ARG_UNBOUNDED}, \
    {"data", 0, ARG_STRING, OFF(data), "DIR", "directory with train.jsonl, valid.jsonl, test.jsonl", NULL, \
     ARG_UNBOUNDED}, \
    {"fine-tune-type", 0, ARG_CHOICE, OFF(fine_tune_type), "TYPE", "what to train", "lora|dora|full", ARG_UNBOUNDED}, \
    {"optimizer", 0, ARG_CHOICE, OFF(optimizer), "NAME", "optimizer (settings in the config file's optimizer_config)", \
     "adam|adamw|muon|sgd|adafactor", ARG_UNBOUNDED}, \
    {"mask-prompt", 0, ARG_BOOL, OFF(mask_prompt), NULL, "loss on the completion / last message only", NULL, \
     ARG_UNBOUNDED}, \
    {"num-layers", 0, ARG_INT, OFF(num_layers), "N", "number of last blocks to train; -1 for all", NULL, \
     ARG_AT_LEAST(-1, "an integer >= -1")}, \
    {"batch-size", 0, ARG_INT_OR_AUTO, OFF(batch_size), "N|auto", \
     "rows per micro-batch; auto chooses it from --memory-limit", NULL, POS}, \
    {"iters", 0, ARG_INT, OFF(iters), "N", "micro-batch iterations", NULL, NONNEG}, \
    {"val-batches", 0, ARG_INT, OFF(val_batches), "N", \
     "validation batches (a fixed seeded subset); -1 for the whole set", NULL, ARG_AT_LEAST(-1, "an integer >= -1")}, \
    {"learning-rate", 0, ARG_DOUBLE, OFF(learning_rate), "LR", "learning rate (without lr_schedule)", NULL, \
     ARG_AT_LEAST(0, "a non-negative number")}, \
    {"steps-per-report", 0, ARG_INT, OFF(steps_per_report), "N", "iterations between train-loss reports", NULL, POS}, \
    {"steps-per-eval", 0, ARG_INT, OFF(steps_per_eval), "N", "iterations between validations", NULL, POS}, \
    {"resume-adapter-file", 0, ARG_STRING, OFF(resume_adapter_file), "FILE", \
     "start from these adapter weights (as mlx_lm.lora)", NULL, ARG_UNBOUNDED}, \
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR", \
     "where adapters, adapter_config.json and the training state are saved", NULL, ARG_UNBOUNDED}, \
    {"save-every", 0, ARG_INT, OFF(save_every), "N", "iterations between saves", NULL, POS}, \
    {"test", 0, ARG_BOOL, OFF(test), NULL, \
     "evaluate on test.jsonl (after training with --train; alone: the adapter in --adapter-path)", NULL, \
     ARG_UNBOUNDED}, \
    {"test-batches", 0, ARG_INT, OFF(test_batches), "N", "test batches; -1 for the whole set", NULL, \
     ARG_AT_LEAST(-1, "an integer >= -1")}, \
    {"max-seq-length", 0, ARG_INT, OFF(max_seq_length), "N", "longer examples are truncated", NULL, \
     ARG_AT_LEAST(2, "an integer >= 2")}, \
    {"grad-checkpoint", 0, ARG_SWITCH_OR_VALUE, OFF(grad_checkpoint), "[auto|BLOCKS]", \
     "keep only the input of each trainable block (alone), of the fewest blocks that fit --memory-limit " \
     "(auto) or of the blocks listed (3,5-7), and recompute their activations in the backward pass", \
     "all", ARG_UNBOUNDED}, \
    {"grad-accumulation-steps", 0, ARG_INT, OFF(grad_accumulation_steps), "N", "micro-batches per optimizer update", \
     NULL, ARG_UNBOUNDED}, \
    {"seed", 0, ARG_U64, OFF(seed), "N", "seed of the batch order, LoRA init and dropout", NULL, ARG_UNBOUNDED}, \
    {"prompt-feature", 0, ARG_STRING, OFF(prompt_feature), "KEY", "JSONL key of the prompt (completions data)", NULL, \
     ARG_UNBOUNDED}, \
    {"completion-feature", 0, ARG_STRING, OFF(completion_feature), "KEY", "JSONL key of the completion", NULL, \
     ARG_UNBOUNDED}, \
    {"text-feature", 0, ARG_STRING, OFF(text_feature), "KEY", "JSONL key of the text (text data)", NULL, \
     ARG_UNBOUNDED}, \
    {"chat-feature", 0, ARG_STRING, OFF(chat_feature), "KEY", "JSONL key of the messages (chat data)", NULL, \
     ARG_UNBOUNDED}, \
    {"report-to", 0, ARG_STRING, OFF(report_to), "SERVICES", \
     "MLX-LM's wandb/swanlab reporting: accepted, not used (see --metrics-file)", NULL, ARG_UNBOUNDED}, \
    {"project-name", 0, ARG_STRING, OFF(project_name), "NAME", "MLX-LM's logging project: accepted, not used", NULL, \
     ARG_UNBOUNDED}, \
    {"clear-cache-threshold", 0, ARG_STRING, OFF(clear_cache_threshold), "SIZE", \
     "MLX's allocator cache: accepted, not used (lmtune plans one arena)", NULL, ARG_UNBOUNDED}, \
    {"trust-remote-code", 0, ARG_BOOL, OFF(trust_remote_code), NULL, "refused: lmtune runs no model code", NULL, \
     ARG_UNBOUNDED}, \
    {"config", 'c', ARG_STRING, OFF(config), "FILE.yaml", \
     "YAML file with any flag (underscored) and lora_parameters, lr_schedule, optimizer_config", NULL, ARG_UNBOUNDED}, \
    {"epochs", 0, ARG_DOUBLE, OFF(epochs), "N", "train N passes over the data (sets --iters); 0: use --iters", NULL, \
     ARG_AT_LEAST(0, "a non-negative number")}, \
    {"max-grad-norm", 0, ARG_DOUBLE, OFF(max_grad_norm), "X", "clip the global gradient norm to X; 0: no clipping", \
     NULL, ARG_AT_LEAST(0, "a non-negative number")}, \
    {"threads", 0, ARG_INT, OFF(threads), "N", "compute threads; 0: all cores", NULL, NONNEG}, \
    {"metrics-file", 0, ARG_STRING, OFF(metrics_file), "FILE", "append one JSON line per report and evaluation", NULL, \
     ARG_UNBOUNDED}, \
    {"loss-normalization", 0, ARG_CHOICE, OFF(loss_normalization), "HOW", \
     "mean of per-batch means (MLX-LM) or token-weighted over the update", "mean|tokens", ARG_UNBOUNDED}, \
    {"memory-limit", 0, ARG_SIZE, OFF(memory_limit), "SIZE", "refuse a run whose plan exceeds SIZE (8GB, 7.5GiB)", \
     NULL, ARG_UNBOUNDED}, \
    {"weights-dtype", 0, ARG_CHOICE, OFF(weights_dtype), "T", "dtype of the frozen weights in memory", \
     "auto|f32|bf16", ARG_UNBOUNDED}, \
    {"resume", 0, ARG_BOOL, OFF(resume), NULL, "continue exactly from the training state in --adapter-path", NULL, \
     ARG_UNBOUNDED}, \
    {"chat-template", 0, ARG_STRING, OFF(chat_template), "FILE", "Jinja chat template instead of the tokenizer's", \
     NULL, ARG_UNBOUNDED}, \
    {"skip-bad-lines", 0, ARG_BOOL, OFF(skip_bad_lines), NULL, \
     "skip malformed JSONL lines (counted) instead of failing", NULL, ARG_UNBOUNDED}, \
    {"effective-batch-size", 0, ARG_INT, OFF(effective_batch_size), "N", \
     "with --batch-size auto: rows per update to keep; 0: batch x accumulation", NULL, NONNEG},
static const ArgSpec TRAIN_SPECS[] = {
    TRAIN_FLAG_ROWS
};
static const ArgSpec PLAN_SPECS[] = {
    TRAIN_FLAG_ROWS
    {"verbose", 'v', ARG_BOOL, OFF(plan_verbose), NULL, "list every buffer of the plan", NULL, ARG_UNBOUNDED},
    {"workers", 0, ARG_INT, OFF(plan_workers), "N",
     "plan one worker's share of a data-parallel run of N workers; 0: this process's MPI world", NULL,
     ARG_AT_LEAST(0, "a non-negative integer")},
    {"html", 0, ARG_STRING, OFF(plan_html), "FILE",
     "also write the plan as a page: a stacked bar by buffer class, with each lever's beside it", NULL,
     ARG_UNBOUNDED},
};
#undef TRAIN_FLAG_ROWS
#undef POS
#undef NONNEG
#undef OFF

/* An old MLX-LM key (the wandb project, before report_to). */
static const char *const MLX_IGNORED_KEYS[] = {"wandb", NULL};

static int yaml_number_list(const char *where, yaml_document_t *doc, yaml_node_t *n, double *out, int max, int *count) {
    if (!n || n->type != YAML_SEQUENCE_NODE) return error_set("%s: expected a list of numbers", where);
    int k = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        if (k == max) return error_set("%s: at most %d values", where, max);
        const char *v = args_yaml_scalar(yaml_document_get_node(doc, *it));
        if (!v) return error_set("%s: expected a list of numbers", where);
        TRY(args_parse_double(where, v, &out[k++]));
    }
    *count = k;
    return 0;
}

typedef struct {
    const char *key;
    char kind;
    size_t offset;
} FieldSpec; /* kind: d double, b bool, i int, B betas pair, E eps pair, n nullable double */

static int yaml_fields(const char *file, const char *section, yaml_document_t *doc, yaml_node_t *map,
                       const FieldSpec *fields, size_t n_fields, void *base) {
    if (!map || map->type != YAML_MAPPING_NODE) return error_set("%s: %s: expected a mapping", file, section);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *key = args_yaml_scalar(yaml_document_get_node(doc, p->key));
        yaml_node_t *vn = yaml_document_get_node(doc, p->value);
        const FieldSpec *f = NULL;
        for (size_t i = 0; key && i < n_fields; i++) if (!strcmp(fields[i].key, key)) f = &fields[i];
        if (!f) return error_set("%s: %s: unknown key \"%s\"", file, section, key ? key : "?");
        char where[160];
        snprintf(where, sizeof where, "%s: %s.%s", file, section, key);
        void *dst = (char *)base + f->offset;
        const char *v = args_yaml_scalar(vn);
        switch (f->kind) {
        case 'n':
            if (args_yaml_is_null(vn)) {
                *(double *)dst = NAN;
                break;
            }
            /* fall through */
        case 'd':
            if (!v) return error_set("%s: expected a number", where);
            TRY(args_parse_double(where, v, dst));
            break;
        case 'b':
            if (!v) return error_set("%s: expected true or false", where);
            TRY(args_parse_bool(where, v, dst));
            break;
        case 'i':
            if (!v) return error_set("%s: expected an integer", where);
            TRY(args_parse_int(where, v, dst));
            break;
        case 'B': case 'E': {
            int cnt = 0;
            TRY(yaml_number_list(where, doc, vn, dst, 2, &cnt));
            if (cnt != 2) return error_set("%s: expected two numbers", where);
            break;
        }
        }
    }
    return 0;
}

static int train_yaml_hook(void *opts, const char *file, const char *key, yaml_document_t *doc, yaml_node_t *v) {
    TrainArgs *a = opts;
    if (!strcmp(key, "lora_parameters")) {
        if (args_yaml_is_null(v)) return 1;
        if (v->type != YAML_MAPPING_NODE) return error_set("%s: lora_parameters: expected a mapping", file);
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
            const char *k = args_yaml_scalar(yaml_document_get_node(doc, p->key));
            yaml_node_t *vn = yaml_document_get_node(doc, p->value);
            const char *s = args_yaml_scalar(vn);
            char where[160];
            snprintf(where, sizeof where, "%s: lora_parameters.%s", file, k ? k : "?");
            if (k && !strcmp(k, "keys")) {
                if (vn->type != YAML_SEQUENCE_NODE) return error_set("%s: expected a list of layer names", where);
                a->lora.n_keys = 0;
                if (vn->data.sequence.items.start == vn->data.sequence.items.top)
                    return error_set("%s: an empty list puts LoRA on no layer (MLX-LM then trains nothing); list the "
                                     "layers, e.g. [self_attn.q_proj, self_attn.v_proj], or leave keys out for every "
                                     "linear layer of a block", where);
                for (yaml_node_item_t *it = vn->data.sequence.items.start; it < vn->data.sequence.items.top; it++) {
                    const char *name = args_yaml_scalar(yaml_document_get_node(doc, *it));
                    if (!name || strlen(name) >= sizeof a->lora.keys[0])
                        return error_set("%s: expected layer names such as self_attn.q_proj", where);
                    if (a->lora.n_keys == LORA_MAX_KEYS) return error_set("%s: at most %d keys", where, LORA_MAX_KEYS);
                    snprintf(a->lora.keys[a->lora.n_keys++], sizeof a->lora.keys[0], "%s", name);
                }
            } else if (k && !strcmp(k, "rank")) {
                if (!s || args_parse_int(where, s, &a->lora.rank) < 0 || a->lora.rank < 1)
                    return error_set("%s: expected a positive integer, got \"%s\"", where, s ? s : "?");
            } else if (k && !strcmp(k, "scale")) {
                if (!s) return error_set("%s: expected a number", where);
                TRY(args_parse_double(where, s, &a->lora.scale));
            } else if (k && !strcmp(k, "dropout")) {
                if (!s) return error_set("%s: expected a number", where);
                TRY(args_parse_double(where, s, &a->lora.dropout));
                if (a->lora.dropout < 0 || a->lora.dropout >= 1)
                    return error_set("%s: expected a number in [0, 1), got %s", where, s);
            } else if (k && !strcmp(k, "alpha")) {
                return error_set("%s: lmtune follows MLX-LM and takes `scale` (PEFT alpha / rank), not alpha", where);
            } else {
                return error_set("%s: lora_parameters: unknown key \"%s\" (rank, scale, dropout, keys)", file,
                                 k ? k : "?");
            }
        }
        return 1;
    }
    if (!strcmp(key, "lr_schedule")) {
        if (args_yaml_is_null(v)) return 1;
        ScheduleConfig *c = &a->lr_schedule;
        memset(c, 0, sizeof *c);
        if (v->type != YAML_MAPPING_NODE) return error_set("%s: lr_schedule: expected a mapping", file);
        bool have_name = false, have_args = false;
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
            const char *k = args_yaml_scalar(yaml_document_get_node(doc, p->key));
            yaml_node_t *vn = yaml_document_get_node(doc, p->value);
            const char *s = args_yaml_scalar(vn);
            char where[160];
            snprintf(where, sizeof where, "%s: lr_schedule.%s", file, k ? k : "?");
            if (k && !strcmp(k, "name")) {
                if (!s || strlen(s) >= sizeof c->name) return error_set("%s: expected a schedule name", where);
                snprintf(c->name, sizeof c->name, "%s", s);
                have_name = true;
            } else if (k && !strcmp(k, "arguments")) {
                TRY(yaml_number_list(where, doc, vn, c->arguments, SCHED_MAX_ARGS, &c->n_arguments));
                have_args = true;
            } else if (k && !strcmp(k, "warmup")) {
                if (!s || args_parse_int(where, s, &c->warmup) < 0 || c->warmup < 0)
                    return error_set("%s: expected a non-negative integer, got \"%s\"", where, s ? s : "?");
            } else if (k && !strcmp(k, "warmup_init")) {
                if (!s) return error_set("%s: expected a number", where);
                TRY(args_parse_double(where, s, &c->warmup_init));
            } else {
                return error_set("%s: lr_schedule: unknown key \"%s\" (name, arguments, warmup, warmup_init)", file,
                                 k ? k : "?");
            }
        }
        if (!have_name || !have_args) return error_set("%s: lr_schedule needs a name and arguments", file);
        c->set = true;
        json_decref(a->lr_schedule_json);
        TRY_PTR(a->lr_schedule_json = args_yaml_to_json(doc, v));
        return 1;
    }
    if (!strcmp(key, "hf_dataset")) {
        if (args_yaml_is_null(v)) return 1;
        return error_set("%s: hf_dataset: lmtune reads local JSONL files only; export the Hugging Face data set "
                         "to DIR/train.jsonl, valid.jsonl and test.jsonl first (datasets' Dataset.to_json) and pass "
                         "--data DIR", file);
    }
    if (!strcmp(key, "optimizer_config")) {
        if (args_yaml_is_null(v)) return 1;
        if (v->type != YAML_MAPPING_NODE) return error_set("%s: optimizer_config: expected a mapping", file);
        OptimizerConfig *o = &a->optimizer_config;
        static const FieldSpec ADAM[] = {{"betas", 'B', offsetof(AdamConfig, betas)},
                                         {"eps", 'd', offsetof(AdamConfig, eps)},
                                         {"bias_correction", 'b', offsetof(AdamConfig, bias_correction)},
                                         {"weight_decay", 'd', offsetof(AdamConfig, weight_decay)}};
        static const FieldSpec SGD[] = {
            {"momentum", 'd', offsetof(SgdConfig, momentum)}, {"weight_decay", 'd', offsetof(SgdConfig, weight_decay)},
            {"dampening", 'd', offsetof(SgdConfig, dampening)}, {"nesterov", 'b', offsetof(SgdConfig, nesterov)}};
        static const FieldSpec ADAFACTOR[] = {{"learning_rate", 'n', offsetof(AdafactorConfig, learning_rate)},
                                              {"eps", 'E', offsetof(AdafactorConfig, eps)},
                                              {"clip_threshold", 'd', offsetof(AdafactorConfig, clip_threshold)},
                                              {"decay_rate", 'd', offsetof(AdafactorConfig, decay_rate)},
                                              {"beta_1", 'n', offsetof(AdafactorConfig, beta_1)},
                                              {"weight_decay", 'd', offsetof(AdafactorConfig, weight_decay)},
                                              {"scale_parameter", 'b', offsetof(AdafactorConfig, scale_parameter)},
                                              {"relative_step", 'b', offsetof(AdafactorConfig, relative_step)},
                                              {"warmup_init", 'b', offsetof(AdafactorConfig, warmup_init)}};
        static const FieldSpec MUON[] = {
            {"momentum", 'd', offsetof(MuonConfig, momentum)},
            {"weight_decay", 'd', offsetof(MuonConfig, weight_decay)},
            {"nesterov", 'b', offsetof(MuonConfig, nesterov)},
            {"ns_steps", 'i', offsetof(MuonConfig, ns_steps)}};
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
            const char *k = args_yaml_scalar(yaml_document_get_node(doc, p->key));
            yaml_node_t *vn = yaml_document_get_node(doc, p->value);
            char section[64];
            snprintf(section, sizeof section, "optimizer_config.%s", k ? k : "?");
            if (args_yaml_is_null(vn)) continue;
            if (k && !strcmp(k, "adam")) TRY(yaml_fields(file, section, doc, vn, ADAM, 3, &o->adam));
            else if (k && !strcmp(k, "adamw")) TRY(yaml_fields(file, section, doc, vn, ADAM, 4, &o->adamw));
            else if (k && !strcmp(k, "sgd")) TRY(yaml_fields(file, section, doc, vn, SGD, 4, &o->sgd));
            else if (k && !strcmp(k, "adafactor"))
                TRY(yaml_fields(file, section, doc, vn, ADAFACTOR, 9, &o->adafactor));
            else if (k && !strcmp(k, "muon")) TRY(yaml_fields(file, section, doc, vn, MUON, 4, &o->muon));
            else return error_set("%s: optimizer_config: unknown optimizer \"%s\" (adam, adamw, muon, sgd, adafactor)",
                                  file, k ? k : "?");
        }
        json_decref(a->optimizer_config_json);
        TRY_PTR(a->optimizer_config_json = args_yaml_to_json(doc, v));
        return 1;
    }
    return 0;
}

/* The config-file sections, printed after the flags of train and plan. */
#define TRAIN_EPILOG \
    "config-file sections (-c FILE.yaml, as mlx_lm.lora), with their defaults:\n" \
    "  lora_parameters:  {rank: 8, scale: 20.0, dropout: 0.0, keys: [every linear of a block]}\n" \
    "                    keys from self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj (Qwen3.5 also\n" \
    "                    linear_attn.in_proj_{qkv,z,b,a}, linear_attn.out_proj); scale is PEFT's alpha / rank\n" \
    "  lr_schedule:      {name: cosine_decay | linear_schedule | exponential_decay | step_decay | constant,\n" \
    "                     arguments: [peak, ...], warmup: 0, warmup_init: 0.0}\n" \
    "  optimizer_config: adam: {betas: [0.9, 0.999], eps: 1e-8, bias_correction: false}\n" \
    "                    (MLX's default: without bias correction the first steps move each weight by ~3x the\n" \
    "                    learning rate; a PyTorch recipe's rate may need bias_correction: true or a lower rate)\n" \
    "                    adamw: {the same, weight_decay: 0.01}\n" \
    "                    sgd: {momentum: 0.0, weight_decay: 0.0, dampening: 0.0, nesterov: false}\n" \
    "                    adafactor: {relative_step: true, scale_parameter: true, warmup_init: false, beta_1: null,\n" \
    "                                eps: [1e-30, 1e-3], clip_threshold: 1.0, decay_rate: -0.8, weight_decay: 0.0}\n" \
    "                    muon: {momentum: 0.95, weight_decay: 0.01, nesterov: true, ns_steps: 5}\n" \
    "  prompt_feature, completion_feature, text_feature, chat_feature: the JSONL keys (also flags)\n" \
    "Exit status: 0; 1 on an error; 130 / 143 after SIGINT / SIGTERM (adapters and state saved; --resume continues).\n"

const ArgTable TRAIN_ARGS_TABLE = {
    "train",
    "train --model DIR --data DIR [flags]   (also: lmtune plan with the same flags)",
    TRAIN_SPECS, sizeof TRAIN_SPECS / sizeof TRAIN_SPECS[0], true, train_yaml_hook, MLX_IGNORED_KEYS,
    TRAIN_EPILOG,
};

void train_args_free(TrainArgs *a) {
    json_decref(a->optimizer_config_json);
    json_decref(a->lr_schedule_json);
    a->optimizer_config_json = a->lr_schedule_json = NULL;
    args_release();
}

void train_args_default(TrainArgs *a) {
    memset(a, 0, sizeof *a);
    a->model = NULL;
    a->data = "data";
    a->fine_tune_type = "lora";
    a->optimizer = "adam";
    a->num_layers = 16;
    a->batch_size = 4;
    a->iters = 1000;
    a->val_batches = 25;
    a->learning_rate = 1e-5;
    a->steps_per_report = 10;
    a->steps_per_eval = 200;
    a->adapter_path = "adapters";
    a->save_every = 100;
    a->test_batches = 500;
    a->max_seq_length = 2048;
    a->grad_accumulation_steps = 1;
    a->seed = 0;
    a->prompt_feature = "prompt";
    a->completion_feature = "completion";
    a->text_feature = "text";
    a->chat_feature = "messages";
    a->lora.rank = 8;
    a->lora.scale = 20.0;
    a->lora.dropout = 0.0;
    optimizer_config_default(&a->optimizer_config);
    a->loss_normalization = "mean";
    a->weights_dtype = "auto";
    a->grad_checkpoint = "off";
}

bool train_args_was_set(const TrainArgs *a, const char *name) {
    return args_was_set(&TRAIN_ARGS_TABLE, &a->parsed, name);
}

/* Whether a flag was set, looked up in the table that parsed it. */
static bool was_set_in(const ArgTable *t, const TrainArgs *a, const char *name) {
    return args_was_set(t, &a->parsed, name);
}

const ArgTable PLAN_ARGS_TABLE = {
    "plan",
    "plan --model DIR --data DIR [train's flags] [--verbose] [--workers N] [--html FILE]\n"
    "  the memory plan of the same `lmtune train` run, before any weight is loaded",
    PLAN_SPECS, sizeof PLAN_SPECS / sizeof PLAN_SPECS[0], true, train_yaml_hook, MLX_IGNORED_KEYS,
    TRAIN_EPILOG,
};

/* The MLX-LM options lmtune accepts and ignores, one line each, the same
 * from the command line and from YAML (on stdout, with the log). */
static void print_mlx_only_notes(const ArgTable *t, const TrainArgs *a) {
    if (was_set_in(t, a, "report-to"))
        printf("[WARNING] report_to %s: lmtune reports to no service; the adapter directory gets the training "
               "report (report.html) and its history (metrics.jsonl), and --metrics-file FILE appends the records "
               "anywhere\n", a->report_to);
    if (was_set_in(t, a, "project-name"))
        printf("[WARNING] project_name %s: lmtune reports to no service; the adapter directory gets the training "
               "report (report.html) and its history (metrics.jsonl), and --metrics-file FILE appends the records "
               "anywhere\n", a->project_name);
    if (was_set_in(t, a, "clear-cache-threshold") && strcmp(a->clear_cache_threshold, "0"))
        printf("[WARNING] clear_cache_threshold %s: lmtune has no allocator cache to clear (one arena, planned "
               "before the first step)\n", a->clear_cache_threshold);
    fflush(stdout);
}

static int parse_with(const ArgTable *t, TrainArgs *a, int argc, char **argv) {
    TRY(args_parse(t, a, argc, argv, &a->parsed));
    if (a->parsed.help) return 0;
    if (a->trust_remote_code) return args_refuse_remote_code();
    /* mlx_lm.lora: --test without --train only evaluates; lmtune train trains by default */
    if (!was_set_in(t, a, "train")) a->train = !a->test;
    if (!a->train && !a->test) return error_set("Must provide at least one of --train or --test");
    if (a->grad_accumulation_steps < 1) return error_set("grad_accumulation_steps must be at least 1");
    if (was_set_in(t, a, "epochs") && was_set_in(t, a, "iters") && a->epochs > 0)
        return error_set("--epochs and --iters both given: --epochs sets the number of iterations, give one of them");
    if (a->num_layers == 0) a->num_layers = -1;   /* MLX-LM: 0 and -1 both mean all blocks */
    TRY(optimizer_kind_from_name(a->optimizer, &a->optimizer_config.kind));
    if (a->resume && a->resume_adapter_file)
        return error_set(
            "--resume and --resume-adapter-file both given: --resume continues the full state in --adapter-path");
    if (!a->model) return error_set("--model is required (a model directory)");
    a->model_name = a->model;
    TRY(args_resolve_model(&a->model));
    TRY(hf_hub_check_data(a->data));
    print_mlx_only_notes(t, a);
    BlockSet blocks;
    bool all, none, autom;
    TRY(train_args_checkpoint(a->grad_checkpoint, &blocks, &all, &none, &autom));
    return 0;
}

int train_args_checkpoint(const char *v, BlockSet *blocks, bool *all, bool *none, bool *autom) {
    memset(blocks, 0, sizeof *blocks);
    *all = *none = *autom = false;
    if (!strcmp(v, "off") || !strcmp(v, "false")) return *none = true, 0;
    if (!strcmp(v, "all") || !strcmp(v, "true") || !strcmp(v, "on")) return *all = true, 0;
    if (!strcmp(v, "auto")) return *autom = true, 0;
    const char *p = v;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0) break;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || b < a) break;
        }
        if (b >= MODEL_MAX_BLOCKS)
            return error_set("--grad-checkpoint: block %ld: at most %d blocks can be listed", b, MODEL_MAX_BLOCKS);
        for (long l = a; l <= b; l++) block_set_add(blocks, (int)l);
        p = end;
        if (*p == ',') p++;
        else if (*p) break;
        if (!*p) return 0;
    }
    return error_set("--grad-checkpoint: expected auto, all or block indices such as 3,5-7, got \"%s\"", v);
}

int train_args_parse(TrainArgs *a, int argc, char **argv) {
    return parse_with(&TRAIN_ARGS_TABLE, a, argc, argv);
}

int plan_args_parse(TrainArgs *a, int argc, char **argv) {
    return parse_with(&PLAN_ARGS_TABLE, a, argc, argv);
}

int weights_dtype_named(const char *name, DType *out) {
    if (!strcmp(name, "auto")) return 0;
    if (!strcmp(name, "bf16") && !matmul_bf16_supported())
        return error_set("--weights-dtype bf16: this CPU has no bf16 matrix products (oneDNN has them from "
                         "AVX-512 on); use f32 or auto");
    if (strcmp(name, "bf16") && strcmp(name, "f32"))
        return error_set("--weights-dtype: expected auto, f32 or bf16 (got \"%s\")", name);
    *out = !strcmp(name, "bf16") ? DTYPE_BF16 : DTYPE_F32;
    return 1;
}

int weights_dtype_agree(DType *dt) {
    if (dist_world() <= 1) return 0;
    double bf16 = dist_rank() == 0 && *dt == DTYPE_BF16 ? 1.0 : 0.0;
    TRY(dist_all_sum_doubles(&bf16, 1));
    *dt = bf16 > 0.5 ? DTYPE_BF16 : DTYPE_F32;
    return 0;
}

int train_args_run_shape(const TrainArgs *a, const ModelConfig *cfg, RunShape *out) {
    memset(out, 0, sizeof *out);
    ModelSpec *spec = &out->spec;
    if (!strcmp(a->fine_tune_type, "lora")) spec->type = TUNE_LORA;
    else if (!strcmp(a->fine_tune_type, "dora")) spec->type = TUNE_DORA;
    else spec->type = TUNE_FULL;
    int L = cfg->num_hidden_layers;
    if (a->num_layers > L)
        return error_set("Requested to train %d layers but the model only has %d layers.", a->num_layers, L);
    spec->num_layers = a->num_layers <= 0 ? -1 : a->num_layers;
    spec->lora_rank = a->lora.rank;
    spec->lora_scale = (float)a->lora.scale;
    spec->lora_dropout = (float)a->lora.dropout;
    if (a->lora.n_keys == 0) {
        spec->lora_keys = PROJ_ALL;   /* MLX-LM since PR #515: every linear of a block */
    } else {
        for (int k = 0; k < a->lora.n_keys; k++) {
            int p = 0;
            while (p < PROJ_COUNT && strcmp(PROJ_KEYS[p], a->lora.keys[k])) p++;
            if (p == PROJ_COUNT)
                return error_set("lora_parameters.keys: \"%s\" is not a linear layer of a block (expected "
                                 "self_attn.q_proj, self_attn.k_proj, self_attn.v_proj, self_attn.o_proj, "
                                 "mlp.gate_proj, mlp.up_proj or mlp.down_proj; Qwen3.5 also "
                                 "linear_attn.in_proj_qkv, linear_attn.in_proj_z, linear_attn.in_proj_b, "
                                 "linear_attn.in_proj_a or linear_attn.out_proj)", a->lora.keys[k]);
            spec->lora_keys |= 1u << p;
        }
    }
    int named = weights_dtype_named(a->weights_dtype, &spec->weight_dtype);
    TRY(named);
    if (!named) {
        /* auto: the matrices are used as the stored weights say they are (the
         * safetensors headers or the GGUF tensors, not config.json's
         * torch_dtype label): BF16 where oneDNN has bf16 products, else F32;
         * train_args_weights_dtype then measures which is faster */
        DType stored;
        TRY(model_file_dtype(a->model, cfg, &stored));
        spec->weight_dtype = matmul_weight_dtype(stored);
    }
    spec->training = true;
    out->model_dir = a->model;
    out->batch_size = a->batch_size;
    out->grad_accumulation_steps = a->grad_accumulation_steps;
    out->max_seq_length = a->max_seq_length;
    bool all, none;
    TRY(train_args_checkpoint(a->grad_checkpoint, &out->ckpt_blocks, &all, &none, &out->ckpt_auto));
    out->grad_checkpoint = all;
    int lo = a->num_layers <= 0 ? 0 : L - a->num_layers;
    for (int l = 0; l < MODEL_MAX_BLOCKS; l++)
        if (block_set_has(&out->ckpt_blocks, l) && (l < lo || l >= L))
            return error_set("--grad-checkpoint: block %d is not trainable (blocks %d-%d train)", l, lo, L - 1);
    out->test = a->test;
    out->optimizer = a->optimizer_config;
    out->memory_limit = a->memory_limit;
    out->effective_batch_size = a->effective_batch_size;
    out->iters = a->iters;
    out->epochs = a->epochs;
    out->seed = a->seed;
    out->val_batches = a->val_batches;
    out->test_batches = a->test_batches;
    out->threads = a->threads;
    return 0;
}

int train_args_weights_dtype(const TrainArgs *a, const ModelConfig *cfg, RunShape *shape, char *note, size_t cap) {
    if (strcmp(a->weights_dtype, "auto")) {
        bool bf16 = shape->spec.weight_dtype == DTYPE_BF16;
        snprintf(note, cap, "%s (--weights-dtype %s; bf16 weights stay bf16 in memory, widened panel by panel in "
                 "fp32 products, and f32 weights are rounded to bf16 at load for bf16 products)",
                 bf16 ? "bf16" : "fp32", a->weights_dtype);
        return 0;
    }
    /* the probe's products: a micro-batch's rows, at most 256 */
    long rows = a->batch_size > 0 && a->max_seq_length > 0 ? (long)a->batch_size * a->max_seq_length : 256;
    if (rows > 256) rows = 256;
    ModelSpec probe = shape->spec;
    probe.grad_checkpoint = shape->grad_checkpoint;
    probe.ckpt_blocks = shape->ckpt_blocks;
    DType dt;
    TRY(model_auto_weights_dtype(a->model, cfg, &probe, (int)rows, &dt, note, cap));
    shape->spec.weight_dtype = dt;
    return 0;
}

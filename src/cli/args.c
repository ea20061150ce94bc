/* args.c: the table-driven flag parser and YAML loader (see args.h), and the
 * flag table of `lmtune train` / `lmtune plan`. */
#include "cli/args.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"

/* ---- strings read from YAML ---- */

static char **g_strings;
static size_t g_n_strings, g_cap_strings;

static const char *keep_string(const char *s) {
    if (g_n_strings == g_cap_strings) {
        size_t cap = g_cap_strings ? 2 * g_cap_strings : 16;
        char **grown = mem_realloc(g_strings, cap * sizeof *grown);
        if (!grown) return NULL;
        g_strings = grown;
        g_cap_strings = cap;
    }
    char *copy = mem_strdup(s);
    if (copy) g_strings[g_n_strings++] = copy;
    return copy;
}

void args_release(void) {
    for (size_t i = 0; i < g_n_strings; i++) mem_free(g_strings[i]);
    mem_free(g_strings);
    g_strings = NULL;
    g_n_strings = g_cap_strings = 0;
}

/* ---- value parsing ---- */

int args_parse_double(const char *where, const char *text, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno == ERANGE || !isfinite(v))
        return error_set("%s: expected a number, got \"%s\"", where, text);
    *out = v;
    return 0;
}

int args_parse_int(const char *where, const char *text, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno == ERANGE || v < -2147483647L || v > 2147483647L)
        return error_set("%s: expected an integer, got \"%s\"", where, text);
    *out = (int)v;
    return 0;
}

int args_parse_bool(const char *where, const char *text, bool *out) {
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "on", "1"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "off", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) if (!strcmp(text, yes[i])) { *out = true; return 0; }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) if (!strcmp(text, no[i])) { *out = false; return 0; }
    return error_set("%s: expected true or false, got \"%s\"", where, text);
}

static bool choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static void spec_where(char *buf, size_t cap, const ArgSpec *s, const char *file) {
    if (file) {
        snprintf(buf, cap, "%s: %s", file, s->name);
        for (char *p = buf + strlen(file) + 2; *p; p++) if (*p == '-') *p = '_';
    } else {
        snprintf(buf, cap, "--%s", s->name);
    }
}

/* Whether v lies in the spec's range: [min, max], less the ends in open_ends. */
static bool in_range(const ArgSpec *s, double v) {
    bool above_min = (s->open_ends & ARG_OPEN_MIN) ? v > s->min : v >= s->min;
    bool below_max = (s->open_ends & ARG_OPEN_MAX) ? v < s->max : v <= s->max;
    return above_min && below_max;
}

/* The error for a value that does not parse or is out of range: the spec's
 * range_text, or `plain` ("an integer") when it has none. */
static int bad_value(const char *where, const ArgSpec *s, const char *plain, const char *text) {
    return error_set("%s: expected %s, got \"%s\"", where, s->range_text ? s->range_text : plain, text);
}

/* Stores `text` into the field of spec s (appends it, for a list). `file` is
 * the YAML file or NULL. */
static int set_value(const ArgSpec *s, void *opts, const char *text, const char *file) {
    char where[160];
    spec_where(where, sizeof where, s, file);
    void *field = (char *)opts + s->offset;
    switch (s->type) {
    case ARG_STRING: {
        const char *v = file ? keep_string(text) : text;
        TRY_PTR(v);
        *(const char **)field = v;
        return 0;
    }
    case ARG_CHOICE: {
        if (!choice_ok(s->choices, text)) {
            char list[160];
            snprintf(list, sizeof list, "%s", s->choices);
            for (char *p = list; *p; p++) if (*p == '|') *p = ',';
            return error_set("%s: expected one of %s, got \"%s\"", where, list, text);
        }
        const char *v = file ? keep_string(text) : text;
        TRY_PTR(v);
        *(const char **)field = v;
        return 0;
    }
    case ARG_INT: case ARG_INT_OR_AUTO: {
        if (s->type == ARG_INT_OR_AUTO && !strcmp(text, "auto")) { *(int *)field = 0; return 0; }
        int v;
        if (args_parse_int(where, text, &v) < 0 || !in_range(s, v)) {
            if (s->type == ARG_INT_OR_AUTO)
                return error_set("%s: expected %s or auto, got \"%s\"", where, s->range_text ? s->range_text : "an integer", text);
            return bad_value(where, s, "an integer", text);
        }
        *(int *)field = v;
        return 0;
    }
    case ARG_U64: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (end == text || *end || errno || text[0] == '-')
            return error_set("%s: expected a non-negative integer, got \"%s\"", where, text);
        *(uint64_t *)field = v;
        return 0;
    }
    case ARG_DOUBLE: {
        double v;
        if (args_parse_double(where, text, &v) < 0 || !in_range(s, v)) return bad_value(where, s, "a number", text);
        *(double *)field = v;
        return 0;
    }
    case ARG_BOOL:
        return args_parse_bool(where, text, (bool *)field);
    case ARG_SIZE: {
        size_t v;
        if (parse_size(text, &v) < 0 || !in_range(s, (double)v))
            return bad_value(where, s, "a size such as 8GB, 7.5GiB or 512MB", text);
        *(size_t *)field = v;
        return 0;
    }
    case ARG_STRING_LIST: {
        ArgStringList *list = field;
        if (list->count == ARG_LIST_MAX) return error_set("%s: at most %d values, got another: \"%s\"", where, ARG_LIST_MAX, text);
        const char *v = file ? keep_string(text) : text;
        TRY_PTR(v);
        list->items[list->count++] = v;
        return 0;
    }
    }
    return error_set("%s: internal: unknown flag type", where);
}

static const ArgSpec *find_long(const ArgTable *t, const char *name, size_t len) {
    for (size_t i = 0; i < t->n_specs; i++)
        if (strlen(t->specs[i].name) == len && !strncmp(t->specs[i].name, name, len)) return &t->specs[i];
    return NULL;
}

static const ArgSpec *find_yaml(const ArgTable *t, const char *key) {
    for (size_t i = 0; i < t->n_specs; i++) {
        const char *a = t->specs[i].name, *b = key;
        while (*a && *b && (*a == *b || (*a == '-' && *b == '_'))) { a++; b++; }
        if (!*a && !*b) return &t->specs[i];
    }
    return NULL;
}

/* ---- YAML ---- */

const char *args_yaml_scalar(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static bool yaml_is_null(yaml_node_t *n) {
    if (!n || n->type != YAML_SCALAR_NODE) return false;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "null") || !strcmp(v, "~") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* A repeatable flag in YAML: one value or a list of them, replacing the default. */
static int yaml_list(const ArgSpec *s, void *opts, const char *path, yaml_document_t *doc, yaml_node_t *vn) {
    ((ArgStringList *)((char *)opts + s->offset))->count = 0;
    const char *v = args_yaml_scalar(vn);
    if (v) return set_value(s, opts, v, path);
    char where[160];
    spec_where(where, sizeof where, s, path);
    if (vn->type != YAML_SEQUENCE_NODE) return error_set("%s: expected a value or a list of values", where);
    for (yaml_node_item_t *it = vn->data.sequence.items.start; it < vn->data.sequence.items.top; it++) {
        v = args_yaml_scalar(yaml_document_get_node(doc, *it));
        if (!v) return error_set("%s: expected a list of single values", where);
        TRY(set_value(s, opts, v, path));
    }
    return 0;
}

static int load_yaml(const ArgTable *t, void *opts, const char *path, ArgResult *r) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return error_set("%s: cannot open the config file: %s", path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) { fclose(fp); return error_set("%s: cannot initialise the YAML parser", path); }
    yaml_parser_set_input_file(&parser, fp);
    if (!yaml_parser_load(&parser, &doc)) {
        int rc = error_set("%s:%zu:%zu: YAML error: %s", path, parser.problem_mark.line + 1,
                           parser.problem_mark.column + 1, parser.problem ? parser.problem : "malformed");
        yaml_parser_delete(&parser);
        fclose(fp);
        return rc;
    }
    yaml_parser_delete(&parser);
    fclose(fp);
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) goto done;   /* an empty file sets nothing */
    if (root->type != YAML_MAPPING_NODE) { rc = error_set("%s: expected a mapping of option: value", path); goto done; }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(&doc, p->key), *vn = yaml_document_get_node(&doc, p->value);
        const char *key = args_yaml_scalar(kn);
        if (!key) { rc = error_set("%s: a key is not a plain name", path); goto done; }
        const ArgSpec *s = find_yaml(t, key);
        if (s && s->short_name == 'c') s = NULL;
        if (s) {
            if (yaml_is_null(vn)) continue;
            if (s->type == ARG_STRING_LIST) {
                if (yaml_list(s, opts, path, &doc, vn) < 0) { rc = -1; goto done; }
                r->seen[s - t->specs] = true;
                continue;
            }
            const char *v = args_yaml_scalar(vn);
            if (!v) { rc = error_set("%s: %s: expected a single value, not a list or mapping", path, key); goto done; }
            if (set_value(s, opts, v, path) < 0) { rc = -1; goto done; }
            r->seen[s - t->specs] = true;
            continue;
        }
        if (t->yaml_hook) {
            int h = t->yaml_hook(opts, path, key, &doc, vn);
            if (h < 0) { rc = -1; goto done; }
            if (h == 1) continue;
        }
        bool ignored = false;
        for (const char *const *ig = t->yaml_ignored; ig && *ig; ig++) if (!strcmp(*ig, key)) ignored = true;
        if (ignored && yaml_is_null(vn)) continue;
        if (ignored) { fprintf(stderr, "Warning: %s: \"%s\" is not supported by lmtune and is ignored.\n", path, key); continue; }
        rc = error_set("%s: unknown option \"%s\" (lmtune %s --help lists them)", path, key, t->command);
        goto done;
    }
done:
    yaml_document_delete(&doc);
    return rc;
}

/* ---- command line ---- */

static const ArgSpec *lookup(const ArgTable *t, const char *arg, const char **inline_value) {
    *inline_value = NULL;
    if (arg[0] == '-' && arg[1] == '-') {
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        if (eq) *inline_value = eq + 1;
        return find_long(t, name, len);
    }
    if (arg[0] == '-' && arg[1] && !arg[2])
        for (size_t i = 0; i < t->n_specs; i++) if (t->specs[i].short_name == arg[1]) return &t->specs[i];
    return NULL;
}

int args_parse(const ArgTable *t, void *opts, int argc, char **argv, ArgResult *r) {
    memset(r, 0, sizeof *r);
    if (t->n_specs > ARG_MAX_SPECS) return error_set("internal: too many flags in the %s table", t->command);
    /* First pass: --help and the config file, so YAML applies before the command line. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            args_print_help(t, opts, stdout);
            r->help = true;
            return 0;
        }
        if (!t->config_file) continue;
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) return error_set("%s: expected a file name", argv[i]);
            r->config_path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            r->config_path = argv[i] + 9;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            const char *iv;
            const ArgSpec *s = lookup(t, argv[i], &iv);
            if (s && s->type != ARG_BOOL && !iv) i++;   /* skip its value */
        }
    }
    if (r->config_path) TRY(load_yaml(t, opts, r->config_path, r));
    bool listed[ARG_MAX_SPECS] = {false};   /* a repeatable flag already given on the command line */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value;
        if (arg[0] != '-') return error_set("unexpected argument \"%s\" (flags start with --; lmtune %s --help lists them)", arg, t->command);
        const ArgSpec *s = lookup(t, arg, &value);
        if (!s) {
            if (t->config_file && (!strcmp(arg, "-c") || !strcmp(arg, "--config"))) { i++; continue; }
            if (t->config_file && !strncmp(arg, "--config=", 9)) continue;
            return error_set("unknown flag %s (lmtune %s --help lists the flags)", arg, t->command);
        }
        if (s->type == ARG_BOOL) {
            if (value) {
                char where[80];
                snprintf(where, sizeof where, "--%s", s->name);
                TRY(args_parse_bool(where, value, (bool *)((char *)opts + s->offset)));
            } else {
                *(bool *)((char *)opts + s->offset) = true;
            }
        } else {
            if (!value) {
                if (i + 1 >= argc) return error_set("--%s: expected a value", s->name);
                value = argv[++i];
            }
            if (s->type == ARG_STRING_LIST && !listed[s - t->specs]) {
                /* the command line's values replace the default's and YAML's */
                ((ArgStringList *)((char *)opts + s->offset))->count = 0;
                listed[s - t->specs] = true;
            }
            TRY(set_value(s, opts, value, NULL));
        }
        r->seen[s - t->specs] = true;
    }
    return 0;
}

bool args_was_set(const ArgTable *t, const ArgResult *r, const char *name) {
    const ArgSpec *s = find_long(t, name, strlen(name));
    return s && r->seen[s - t->specs];
}

void args_value_text(const ArgSpec *s, const void *opts, char *buf, size_t cap) {
    const void *f = (const char *)opts + s->offset;
    buf[0] = 0;
    switch (s->type) {
    case ARG_STRING: case ARG_CHOICE: {
        const char *v = *(const char *const *)f;
        if (v) snprintf(buf, cap, "%s", v);
        break;
    }
    case ARG_INT: snprintf(buf, cap, "%d", *(const int *)f); break;
    case ARG_INT_OR_AUTO: { int v = *(const int *)f; if (v) snprintf(buf, cap, "%d", v); else snprintf(buf, cap, "auto"); break; }
    case ARG_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)f); break;
    case ARG_DOUBLE: snprintf(buf, cap, "%g", *(const double *)f); break;
    case ARG_BOOL: snprintf(buf, cap, "%s", *(const bool *)f ? "on" : "off"); break;
    case ARG_SIZE: { size_t v = *(const size_t *)f; if (v) snprintf(buf, cap, "%zu bytes", v); else snprintf(buf, cap, "none"); break; }
    case ARG_STRING_LIST: {
        const ArgStringList *list = f;
        size_t used = 0;
        for (int k = 0; k < list->count && used < cap; k++) {
            int n = snprintf(buf + used, cap - used, "%s%s", k ? ", " : "", list->items[k]);
            if (n < 0) break;
            used += (size_t)n;
        }
        break;
    }
    }
}

void args_print_help(const ArgTable *t, const void *defaults, FILE *out) {
    fprintf(out, "usage: lmtune %s\n\nflags:\n", t->usage);
    for (size_t i = 0; i < t->n_specs; i++) {
        const ArgSpec *s = &t->specs[i];
        char left[96], def[96];
        if (s->short_name) snprintf(left, sizeof left, "-%c, --%s%s%s", s->short_name, s->name, s->metavar ? " " : "", s->metavar ? s->metavar : "");
        else snprintf(left, sizeof left, "--%s%s%s", s->name, s->metavar ? " " : "", s->metavar ? s->metavar : "");
        args_value_text(s, defaults, def, sizeof def);
        fprintf(out, "  %-34s %s", left, s->help);
        if (s->type == ARG_CHOICE) fprintf(out, " (%s)", s->choices);
        if (s->type == ARG_STRING_LIST) fprintf(out, " (repeatable, up to %d times)", ARG_LIST_MAX);
        if (def[0] && s->short_name != 'c') fprintf(out, " [default: %s]", def);
        fputc('\n', out);
    }
    fprintf(out, "  %-34s %s\n", "-h, --help", "print this help");
    if (t->epilog) fprintf(out, "\n%s", t->epilog);
}

/* ---- lmtune train / plan ---- */

#define OFF(f) offsetof(TrainArgs, f)
#define POS ARG_AT_LEAST(1, "a positive integer")
#define NONNEG ARG_AT_LEAST(0, "a non-negative integer")
static const ArgSpec TRAIN_SPECS[] = {
    {"model", 0, ARG_STRING, OFF(model), "DIR", "model directory (config.json, *.safetensors, tokenizer.json)", NULL, ARG_UNBOUNDED},
    {"train", 0, ARG_BOOL, OFF(train), NULL, "do training (always on for lmtune train; accepted for mlx_lm.lora compatibility)", NULL, ARG_UNBOUNDED},
    {"data", 0, ARG_STRING, OFF(data), "DIR", "directory with train.jsonl, valid.jsonl, test.jsonl", NULL, ARG_UNBOUNDED},
    {"fine-tune-type", 0, ARG_CHOICE, OFF(fine_tune_type), "TYPE", "what to train", "lora|dora|full", ARG_UNBOUNDED},
    {"optimizer", 0, ARG_CHOICE, OFF(optimizer), "NAME", "optimizer (settings in the config file's optimizer_config)", "adam|adamw|sgd|adafactor", ARG_UNBOUNDED},
    {"mask-prompt", 0, ARG_BOOL, OFF(mask_prompt), NULL, "loss on the completion / last message only", NULL, ARG_UNBOUNDED},
    {"num-layers", 0, ARG_INT, OFF(num_layers), "N", "number of last blocks to train; -1 for all", NULL, ARG_AT_LEAST(-1, "an integer >= -1")},
    {"batch-size", 0, ARG_INT_OR_AUTO, OFF(batch_size), "N|auto", "rows per micro-batch; auto chooses it from --memory-limit", NULL, POS},
    {"iters", 0, ARG_INT, OFF(iters), "N", "micro-batch iterations", NULL, NONNEG},
    {"val-batches", 0, ARG_INT, OFF(val_batches), "N", "validation batches (a fixed seeded subset); -1 for the whole set", NULL, ARG_AT_LEAST(-1, "an integer >= -1")},
    {"learning-rate", 0, ARG_DOUBLE, OFF(learning_rate), "LR", "learning rate (without lr_schedule)", NULL, ARG_AT_LEAST(0, "a non-negative number")},
    {"steps-per-report", 0, ARG_INT, OFF(steps_per_report), "N", "iterations between train-loss reports", NULL, POS},
    {"steps-per-eval", 0, ARG_INT, OFF(steps_per_eval), "N", "iterations between validations", NULL, POS},
    {"resume-adapter-file", 0, ARG_STRING, OFF(resume_adapter_file), "FILE", "start from these adapter weights (as mlx_lm.lora)", NULL, ARG_UNBOUNDED},
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR", "where adapters, adapter_config.json and the training state are saved", NULL, ARG_UNBOUNDED},
    {"save-every", 0, ARG_INT, OFF(save_every), "N", "iterations between saves", NULL, POS},
    {"test", 0, ARG_BOOL, OFF(test), NULL, "evaluate on test.jsonl after training", NULL, ARG_UNBOUNDED},
    {"test-batches", 0, ARG_INT, OFF(test_batches), "N", "test batches; -1 for the whole set", NULL, ARG_AT_LEAST(-1, "an integer >= -1")},
    {"max-seq-length", 0, ARG_INT, OFF(max_seq_length), "N", "longer examples are truncated", NULL, ARG_AT_LEAST(2, "an integer >= 2")},
    {"grad-checkpoint", 0, ARG_BOOL, OFF(grad_checkpoint), NULL, "recompute each block's activations in the backward pass", NULL, ARG_UNBOUNDED},
    {"grad-accumulation-steps", 0, ARG_INT, OFF(grad_accumulation_steps), "N", "micro-batches per optimizer update", NULL, ARG_UNBOUNDED},
    {"seed", 0, ARG_U64, OFF(seed), "N", "seed of the batch order, LoRA init and dropout", NULL, ARG_UNBOUNDED},
    {"config", 'c', ARG_STRING, OFF(config), "FILE.yaml", "YAML file with any flag (underscored) and lora_parameters, lr_schedule, optimizer_config", NULL, ARG_UNBOUNDED},
    {"epochs", 0, ARG_DOUBLE, OFF(epochs), "N", "train N passes over the data (sets --iters); 0: use --iters", NULL, ARG_AT_LEAST(0, "a non-negative number")},
    {"max-grad-norm", 0, ARG_DOUBLE, OFF(max_grad_norm), "X", "clip the global gradient norm to X; 0: no clipping", NULL, ARG_AT_LEAST(0, "a non-negative number")},
    {"threads", 0, ARG_INT, OFF(threads), "N", "compute threads; 0: all cores", NULL, NONNEG},
    {"metrics-file", 0, ARG_STRING, OFF(metrics_file), "FILE", "append one JSON line per report and evaluation", NULL, ARG_UNBOUNDED},
    {"loss-normalization", 0, ARG_CHOICE, OFF(loss_normalization), "HOW", "mean of per-batch means (MLX-LM) or token-weighted over the update", "mean|tokens", ARG_UNBOUNDED},
    {"memory-limit", 0, ARG_SIZE, OFF(memory_limit), "SIZE", "refuse a run whose plan exceeds SIZE (8GB, 7.5GiB)", NULL, ARG_UNBOUNDED},
    {"weights-dtype", 0, ARG_CHOICE, OFF(weights_dtype), "T", "dtype of the frozen weights in memory", "auto|f32|bf16", ARG_UNBOUNDED},
    {"resume", 0, ARG_BOOL, OFF(resume), NULL, "continue exactly from the training state in --adapter-path", NULL, ARG_UNBOUNDED},
    {"chat-template", 0, ARG_STRING, OFF(chat_template), "FILE", "Jinja chat template instead of the tokenizer's", NULL, ARG_UNBOUNDED},
    {"skip-bad-lines", 0, ARG_BOOL, OFF(skip_bad_lines), NULL, "skip malformed JSONL lines (counted) instead of failing", NULL, ARG_UNBOUNDED},
    {"effective-batch-size", 0, ARG_INT, OFF(effective_batch_size), "N", "with --batch-size auto: rows per update to keep; 0: batch x accumulation", NULL, NONNEG},
};
#undef POS
#undef NONNEG
#undef OFF

static const char *const MLX_IGNORED_KEYS[] = {"report_to", "project_name", "wandb", "clear_cache_threshold", NULL};

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

typedef struct { const char *key; char kind; size_t offset; } FieldSpec;  /* kind: d double, b bool, i int, B betas pair, E eps pair, n nullable double */

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
            if (yaml_is_null(vn)) { *(double *)dst = NAN; break; }
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
            int cnt;
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
        if (yaml_is_null(v)) return 1;
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
                for (yaml_node_item_t *it = vn->data.sequence.items.start; it < vn->data.sequence.items.top; it++) {
                    const char *name = args_yaml_scalar(yaml_document_get_node(doc, *it));
                    if (!name || strlen(name) >= sizeof a->lora.keys[0]) return error_set("%s: expected layer names such as self_attn.q_proj", where);
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
                if (a->lora.dropout < 0 || a->lora.dropout >= 1) return error_set("%s: expected a number in [0, 1), got %s", where, s);
            } else if (k && !strcmp(k, "alpha")) {
                return error_set("%s: lmtune follows MLX-LM and takes `scale` (PEFT alpha / rank), not alpha", where);
            } else {
                return error_set("%s: lora_parameters: unknown key \"%s\" (rank, scale, dropout, keys)", file, k ? k : "?");
            }
        }
        return 1;
    }
    if (!strcmp(key, "lr_schedule")) {
        if (yaml_is_null(v)) return 1;
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
                return error_set("%s: lr_schedule: unknown key \"%s\" (name, arguments, warmup, warmup_init)", file, k ? k : "?");
            }
        }
        if (!have_name || !have_args) return error_set("%s: lr_schedule needs a name and arguments", file);
        c->set = true;
        return 1;
    }
    if (!strcmp(key, "optimizer_config")) {
        if (yaml_is_null(v)) return 1;
        if (v->type != YAML_MAPPING_NODE) return error_set("%s: optimizer_config: expected a mapping", file);
        OptimizerConfig *o = &a->optimizer_config;
        static const FieldSpec ADAM[] = {
            {"betas", 'B', offsetof(AdamConfig, betas)}, {"eps", 'd', offsetof(AdamConfig, eps)},
            {"bias_correction", 'b', offsetof(AdamConfig, bias_correction)}, {"weight_decay", 'd', offsetof(AdamConfig, weight_decay)}};
        static const FieldSpec SGD[] = {
            {"momentum", 'd', offsetof(SgdConfig, momentum)}, {"weight_decay", 'd', offsetof(SgdConfig, weight_decay)},
            {"dampening", 'd', offsetof(SgdConfig, dampening)}, {"nesterov", 'b', offsetof(SgdConfig, nesterov)}};
        static const FieldSpec ADAFACTOR[] = {
            {"learning_rate", 'n', offsetof(AdafactorConfig, learning_rate)}, {"eps", 'E', offsetof(AdafactorConfig, eps)},
            {"clip_threshold", 'd', offsetof(AdafactorConfig, clip_threshold)}, {"decay_rate", 'd', offsetof(AdafactorConfig, decay_rate)},
            {"beta_1", 'n', offsetof(AdafactorConfig, beta_1)}, {"weight_decay", 'd', offsetof(AdafactorConfig, weight_decay)},
            {"scale_parameter", 'b', offsetof(AdafactorConfig, scale_parameter)}, {"relative_step", 'b', offsetof(AdafactorConfig, relative_step)},
            {"warmup_init", 'b', offsetof(AdafactorConfig, warmup_init)}};
        for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
            const char *k = args_yaml_scalar(yaml_document_get_node(doc, p->key));
            yaml_node_t *vn = yaml_document_get_node(doc, p->value);
            char section[64];
            snprintf(section, sizeof section, "optimizer_config.%s", k ? k : "?");
            if (yaml_is_null(vn)) continue;
            if (k && !strcmp(k, "adam")) TRY(yaml_fields(file, section, doc, vn, ADAM, 3, &o->adam));
            else if (k && !strcmp(k, "adamw")) TRY(yaml_fields(file, section, doc, vn, ADAM, 4, &o->adamw));
            else if (k && !strcmp(k, "sgd")) TRY(yaml_fields(file, section, doc, vn, SGD, 4, &o->sgd));
            else if (k && !strcmp(k, "adafactor")) TRY(yaml_fields(file, section, doc, vn, ADAFACTOR, 9, &o->adafactor));
            else if (k && !strcmp(k, "muon")) fprintf(stderr, "Warning: %s: optimizer_config.muon is ignored (lmtune has no Muon).\n", file);
            else return error_set("%s: optimizer_config: unknown optimizer \"%s\" (adam, adamw, sgd, adafactor)", file, k ? k : "?");
        }
        return 1;
    }
    return 0;
}

const ArgTable TRAIN_ARGS_TABLE = {
    "train",
    "train --model DIR --data DIR [flags]   (also: lmtune plan with the same flags)",
    TRAIN_SPECS, sizeof TRAIN_SPECS / sizeof TRAIN_SPECS[0], true, train_yaml_hook, MLX_IGNORED_KEYS,
    "config-file sections (-c FILE.yaml, as mlx_lm.lora), with their defaults:\n"
    "  lora_parameters:  {rank: 8, scale: 20.0, dropout: 0.0, keys: [every linear of a block]}\n"
    "                    keys from self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj; scale is PEFT's alpha / rank\n"
    "  lr_schedule:      {name: cosine_decay | linear_schedule | exponential_decay | step_decay | constant,\n"
    "                     arguments: [peak, ...], warmup: 0, warmup_init: 0.0}\n"
    "  optimizer_config: adam: {betas: [0.9, 0.999], eps: 1e-8, bias_correction: false}\n"
    "                    (MLX's default: without bias correction the first steps move each weight by ~3x the\n"
    "                    learning rate; a PyTorch recipe's rate may need bias_correction: true or a lower rate)\n"
    "                    adamw: {the same, weight_decay: 0.01}\n"
    "                    sgd: {momentum: 0.0, weight_decay: 0.0, dampening: 0.0, nesterov: false}\n"
    "                    adafactor: {relative_step: true, scale_parameter: true, warmup_init: false, beta_1: null,\n"
    "                                eps: [1e-30, 1e-3], clip_threshold: 1.0, decay_rate: -0.8, weight_decay: 0.0}\n"
    "Exit status: 0; 1 on an error; 130 / 143 after SIGINT / SIGTERM (adapters and state saved; --resume continues).\n",
};

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
    a->lora.rank = 8;
    a->lora.scale = 20.0;
    a->lora.dropout = 0.0;
    optimizer_config_default(&a->optimizer_config);
    a->loss_normalization = "mean";
    a->weights_dtype = "auto";
}

bool train_args_was_set(const TrainArgs *a, const char *name) {
    return args_was_set(&TRAIN_ARGS_TABLE, &a->parsed, name);
}

int train_args_parse(TrainArgs *a, int argc, char **argv) {
    TRY(args_parse(&TRAIN_ARGS_TABLE, a, argc, argv, &a->parsed));
    if (a->parsed.help) return 0;
    if (a->grad_accumulation_steps < 1) return error_set("grad_accumulation_steps must be at least 1");
    if (train_args_was_set(a, "epochs") && train_args_was_set(a, "iters") && a->epochs > 0)
        return error_set("--epochs and --iters both given: --epochs sets the number of iterations, give one of them");
    if (a->num_layers == 0) a->num_layers = -1;   /* MLX-LM: 0 and -1 both mean all blocks */
    TRY(optimizer_kind_from_name(a->optimizer, &a->optimizer_config.kind));
    if (a->resume && a->resume_adapter_file)
        return error_set("--resume and --resume-adapter-file both given: --resume continues the full state in --adapter-path");
    if (!a->model) return error_set("--model is required (a model directory)");
    return 0;
}

int train_args_model_spec(const TrainArgs *a, const ModelConfig *cfg, int rows, int max_width, ModelSpec *spec) {
    memset(spec, 0, sizeof *spec);
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
                                 "mlp.gate_proj, mlp.up_proj or mlp.down_proj)", a->lora.keys[k]);
            spec->lora_keys |= 1u << p;
        }
    }
    spec->grad_checkpoint = a->grad_checkpoint;
    spec->max_rows = rows;
    spec->max_tokens = max_width - 1;
    if (!strcmp(a->weights_dtype, "bf16")) spec->weight_dtype = DTYPE_BF16;
    else if (!strcmp(a->weights_dtype, "f32")) spec->weight_dtype = DTYPE_F32;
    else spec->weight_dtype = cfg->torch_dtype == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32;
    spec->training = true;
    return 0;
}

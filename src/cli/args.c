/* args.c: the table-driven flag parser and YAML loader that every command
 * shares (see args.h). The flag tables live with their commands
 * (cli/train_args.c for train and plan). */
#include "cli/args.h"
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"
#include "formats/hf_hub.h"

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

const char *args_keep(const char *s) { return keep_string(s); }

int args_resolve_model(const char **model) {
    if (!*model) return 0;
    char *dir;
    TRY(hf_hub_resolve_model(*model, &dir));
    const char *kept = keep_string(dir);
    mem_free(dir);
    TRY_PTR(kept);
    *model = kept;
    return 0;
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
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (!strcmp(text, yes[i])) {
            *out = true;
            return 0;
        }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (!strcmp(text, no[i])) {
            *out = false;
            return 0;
        }
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
    case ARG_STRING: case ARG_SWITCH_OR_VALUE: {
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
        if (s->type == ARG_INT_OR_AUTO && !strcmp(text, "auto")) {
            *(int *)field = 0;
            return 0;
        }
        int v;
        if (args_parse_int(where, text, &v) < 0 || !in_range(s, v)) {
            if (s->type == ARG_INT_OR_AUTO)
                return error_set("%s: expected %s or auto, got \"%s\"", where,
                                 s->range_text ? s->range_text : "an integer", text);
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
    case ARG_TRUE_FALSE:
        if (!strcasecmp(text, "true") || !strcasecmp(text, "t") || !strcasecmp(text, "false") ||
            !strcasecmp(text, "f")) {
            *(bool *)field = tolower((unsigned char)text[0]) == 't';
            return 0;
        }
        return error_set("%s: expected True or False, got \"%s\"", where, text);
    case ARG_SIZE: {
        size_t v;
        if (parse_size(text, &v) < 0 || !in_range(s, (double)v))
            return bad_value(where, s, "a size such as 8GB, 7.5GiB or 512MB", text);
        *(size_t *)field = v;
        return 0;
    }
    case ARG_STRING_LIST: {
        ArgStringList *list = field;
        if (list->count == ARG_LIST_MAX)
            return error_set("%s: at most %d values, got another: \"%s\"", where, ARG_LIST_MAX, text);
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
        while (*a && *b && (*a == *b || (*a == '-' && *b == '_'))) {
            a++;
            b++;
        }
        if (!*a && !*b) return &t->specs[i];
    }
    return NULL;
}

/* ---- YAML ---- */

const char *args_yaml_scalar(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

bool args_yaml_is_null(yaml_node_t *n) {
    if (!n || n->type != YAML_SCALAR_NODE) return false;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "null") || !strcmp(v, "~") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* PyYAML's YAML 1.1 booleans, integers and MLX-LM's float resolver. */
static json_t *yaml_scalar_json(yaml_node_t *n) {
    const char *v = (const char *)n->data.scalar.value;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return json_string(v);
    if (args_yaml_is_null(n)) return json_null();
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) if (!strcmp(v, yes[i])) return json_true();
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) if (!strcmp(v, no[i])) return json_false();
    char *end;
    errno = 0;
    long long iv = strtoll(v, &end, 10);
    if (*v && !*end && errno == 0) return json_integer(iv);
    double dv = strtod(v, &end);
    bool numeric = *v && !*end && strpbrk(v, "0123456789") && !strpbrk(v, "xXpP");
    if (numeric && isfinite(dv)) return json_real(dv);
    return json_string(v);
}

json_t *args_yaml_to_json(yaml_document_t *doc, yaml_node_t *n) {
    if (!n) return json_null();
    if (n->type == YAML_SCALAR_NODE) return yaml_scalar_json(n);
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *a = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start; a && it < n->data.sequence.items.top; it++)
            if (json_array_append_new(a, args_yaml_to_json(doc, yaml_document_get_node(doc, *it))) < 0) {
                json_decref(a);
                return NULL;
            }
        return a;
    }
    json_t *o = json_object();
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; o && p < n->data.mapping.pairs.top; p++) {
        const char *k = args_yaml_scalar(yaml_document_get_node(doc, p->key));
        json_t *v = args_yaml_to_json(doc, yaml_document_get_node(doc, p->value));
        if (!k || !v || json_object_set_new(o, k, v) < 0) {
            json_decref(v);
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

int args_refuse_remote_code(void) {
    return error_set("--trust-remote-code: lmtune runs no model code (it reads config.json, the safetensors "
                     "weights and tokenizer.json only), so a model that needs its own Python code cannot be used");
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

/* A switch that may take a value, in YAML: a boolean, a value, or a list of
 * values joined with commas. */
static int yaml_switch(const ArgSpec *s, void *opts, const char *path, yaml_document_t *doc, yaml_node_t *vn) {
    char where[160];
    spec_where(where, sizeof where, s, path);
    const char *v = args_yaml_scalar(vn);
    if (v) {
        bool b;
        if (vn->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && args_parse_bool(where, v, &b) == 0)
            return set_value(s, opts, b ? s->choices : "off", path);
        error_clear();
        return set_value(s, opts, v, path);
    }
    if (vn->type != YAML_SEQUENCE_NODE) return error_set("%s: expected true, false, a value or a list", where);
    char joined[1024];
    size_t k = 0;
    joined[0] = 0;
    for (yaml_node_item_t *it = vn->data.sequence.items.start; it < vn->data.sequence.items.top; it++) {
        v = args_yaml_scalar(yaml_document_get_node(doc, *it));
        if (!v) return error_set("%s: expected a list of single values", where);
        k += (size_t)snprintf(joined + k, k < sizeof joined ? sizeof joined - k : 0, "%s%s", k ? "," : "", v);
        if (k >= sizeof joined) return error_set("%s: the list is too long", where);
    }
    return set_value(s, opts, joined, path);
}

static int load_yaml(const ArgTable *t, void *opts, const char *path, ArgResult *r) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return error_set("%s: cannot open the config file: %s", path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        fclose(fp);
        return error_set("%s: cannot initialise the YAML parser", path);
    }
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
    if (root->type != YAML_MAPPING_NODE) {
        rc = error_set("%s: expected a mapping of option: value", path);
        goto done;
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(&doc, p->key), *vn = yaml_document_get_node(&doc, p->value);
        const char *key = args_yaml_scalar(kn);
        if (!key) {
            rc = error_set("%s: a key is not a plain name", path);
            goto done;
        }
        const ArgSpec *s = find_yaml(t, key);
        /* MLX-LM's command line wins over a config file's `config` key (an
         * adapter_config.json written by MLX-LM has one): ignored */
        if (s && s->short_name == 'c') continue;
        if (s) {
            if (args_yaml_is_null(vn)) continue;
            if (s->type == ARG_STRING_LIST) {
                if (yaml_list(s, opts, path, &doc, vn) < 0) {
                    rc = -1;
                    goto done;
                }
                r->seen[s - t->specs] = true;
                continue;
            }
            if (s->type == ARG_SWITCH_OR_VALUE) {
                if (yaml_switch(s, opts, path, &doc, vn) < 0) {
                    rc = -1;
                    goto done;
                }
                r->seen[s - t->specs] = true;
                continue;
            }
            const char *v = args_yaml_scalar(vn);
            if (!v) {
                rc = error_set("%s: %s: expected a single value, not a list or mapping", path, key);
                goto done;
            }
            if (set_value(s, opts, v, path) < 0) {
                rc = -1;
                goto done;
            }
            r->seen[s - t->specs] = true;
            continue;
        }
        if (t->yaml_hook) {
            int h = t->yaml_hook(opts, path, key, &doc, vn);
            if (h < 0) {
                rc = -1;
                goto done;
            }
            if (h == 1) continue;
        }
        bool ignored = false;
        for (const char *const *ig = t->yaml_ignored; ig && *ig; ig++) if (!strcmp(*ig, key)) ignored = true;
        if (ignored && args_yaml_is_null(vn)) continue;
        if (ignored) {
            log_warning("%s: \"%s\" is not supported by lmtune and is ignored", path, key);
            continue;
        }
        rc = error_set("%s: unknown option \"%s\" (lmtune %s --help lists them)", path, key, t->command);
        goto done;
    }
done:
    yaml_document_delete(&doc);
    return rc;
}

/* ---- command line ---- */

/* A separate value that starts with "--" is the next flag: the value was
 * forgotten. `--flag=--value` is the way to give such a value. */
static int flag_as_value(const char *name, const char *value) {
    return error_set("--%s: expected a value, got the flag %s (write --%s=%s for a value that starts with --)",
                     name, value, name, value);
}

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
            if (r->config_path[0] == '-' && r->config_path[1] == '-') return flag_as_value("config", r->config_path);
        } else if (!strncmp(argv[i], "--config=", 9)) {
            r->config_path = argv[i] + 9;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            const char *iv;
            const ArgSpec *s = lookup(t, argv[i], &iv);
            bool takes_next = s && s->type != ARG_BOOL && !iv;
            if (takes_next && s->type == ARG_SWITCH_OR_VALUE) takes_next = i + 1 < argc && argv[i + 1][0] != '-';
            if (takes_next) i++;   /* skip its value */
        }
    }
    if (r->config_path) TRY(load_yaml(t, opts, r->config_path, r));
    bool listed[ARG_MAX_SPECS] = {false};   /* a repeatable flag already given on the command line */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value;
        if (arg[0] != '-')
            return error_set("unexpected argument \"%s\" (flags start with --; lmtune %s --help lists them)", arg,
                             t->command);
        const ArgSpec *s = lookup(t, arg, &value);
        if (!s) {
            if (t->config_file && (!strcmp(arg, "-c") || !strcmp(arg, "--config"))) {
                i++;
                continue;
            }
            if (t->config_file && !strncmp(arg, "--config=", 9)) continue;
            return error_set("unknown flag %s (lmtune %s --help lists the flags)", arg, t->command);
        }
        if (s->type == ARG_SWITCH_OR_VALUE && !value) {
            /* the next argument is its value unless it is a flag (lmtune takes no positional arguments) */
            value = i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : s->choices;
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
                /* `--export-gguf-adapter --no-fuse` is a forgotten value, not a file named --no-fuse */
                if (value[0] == '-' && value[1] == '-') return flag_as_value(s->name, value);
            }
            if (s->type == ARG_STRING_LIST && !listed[s - t->specs]) {
                /* the command line's values replace the default's and YAML's */
                ((ArgStringList *)((char *)opts + s->offset))->count = 0;
                listed[s - t->specs] = true;
            }
            TRY(set_value(s, opts, value, NULL));
            /* nargs="+": the values that follow, up to the next flag */
            while (s->type == ARG_STRING_LIST && i + 1 < argc && argv[i + 1][0] != '-')
                TRY(set_value(s, opts, argv[++i], NULL));
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
    case ARG_STRING: case ARG_CHOICE: case ARG_SWITCH_OR_VALUE: {
        const char *v = *(const char *const *)f;
        if (v) snprintf(buf, cap, "%s", v);
        break;
    }
    case ARG_INT:
        snprintf(buf, cap, "%d", *(const int *)f);
        break;
    case ARG_INT_OR_AUTO: {
        int v = *(const int *)f;
        if (v)
            snprintf(buf, cap, "%d", v);
        else
            snprintf(buf, cap, "auto");
        break;
    }
    case ARG_U64:
        snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)f);
        break;
    case ARG_DOUBLE:
        snprintf(buf, cap, "%g", *(const double *)f);
        break;
    case ARG_BOOL:
        snprintf(buf, cap, "%s", *(const bool *)f ? "on" : "off");
        break;
    case ARG_TRUE_FALSE:
        snprintf(buf, cap, "%s", *(const bool *)f ? "True" : "False");
        break;
    case ARG_SIZE: {
        size_t v = *(const size_t *)f;
        if (v)
            snprintf(buf, cap, "%zu bytes", v);
        else
            snprintf(buf, cap, "none");
        break;
    }
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
        if (s->short_name)
            snprintf(left, sizeof left, "-%c, --%s%s%s", s->short_name, s->name, s->metavar ? " " : "",
                     s->metavar ? s->metavar : "");
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

/* mlx_quant.c: MLX-LM's quantization config and quantized tensors (see
 * mlx_quant.h). Defaults as mlx.nn's _defaults_for_mode("affine"): group 64,
 * bits 4; a per-module entry whose group_size or bits is null (what
 * mlx_lm.convert's mixed recipes write without --q-group-size) takes them. */
#include "formats/mlx_quant.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/one_line.h"
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static bool bits_ok(long long b) { return b >= 2 && b <= 8 && b != 7; }
static bool group_ok(long long g) { return g == 32 || g == 64 || g == 128; }

/* {"group_size", "bits", "mode"} into *p; null or absent keys keep *p. */
static int parse_params(const json_t *o, const char *name, const char *where, QuantParams *p) {
    json_t *g = json_object_get(o, "group_size"), *b = json_object_get(o, "bits"), *m = json_object_get(o, "mode");
    if (g && !json_is_null(g)) {
        if (!json_is_integer(g) || !group_ok(json_integer_value(g)))
            return error_set("%s: %s.group_size must be 32, 64 or 128", name, where);
        p->group = (int)json_integer_value(g);
    }
    if (b && !json_is_null(b)) {
        if (!json_is_integer(b) || !bits_ok(json_integer_value(b)))
            return error_set("%s: %s.bits must be 2, 3, 4, 5, 6 or 8", name, where);
        p->bits = (int)json_integer_value(b);
    }
    if (m && !json_is_null(m)) {
        if (!json_is_string(m)) return error_set("%s: %s.mode must be a string", name, where);
        if (strcmp(json_string_value(m), "affine") != 0)
            return error_set("%s: %s.mode \"%s\" is not supported (lmtune reads MLX's affine quantization)", name,
                             where, json_string_value(m));
    }
    return 0;
}

static int parse_object(QuantConfig *qc, const json_t *q, const char *name, const char *key) {
    json_t *g = json_object_get(q, "group_size"), *b = json_object_get(q, "bits");
    if (!g || json_is_null(g)) return error_set("%s: %s has no \"group_size\"", name, key);
    if (!b || json_is_null(b)) return error_set("%s: %s has no \"bits\"", name, key);
    qc->global = (QuantParams){.bits = 4, .group = 64};
    TRY(parse_params(q, name, key, &qc->global));
    size_t n = json_object_size(q);
    qc->ov = mem_calloc(n + 1, sizeof *qc->ov);
    if (!qc->ov) return -1;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)q, k, v) {
        if (!strcmp(k, "group_size") || !strcmp(k, "bits") || !strcmp(k, "mode")) continue;
        if (!strcmp(k, "quant_method")) continue;
        QuantOverride *o = &qc->ov[qc->n_ov];
        char where[300];
        snprintf(where, sizeof where, "%s.\"%.200s\"", key, k);
        if (json_is_boolean(v)) {
            o->quantized = json_is_true(v);
            o->p = qc->global;
        } else if (json_is_object(v)) {
            o->quantized = true;
            o->p = (QuantParams){.bits = 4, .group = 64};   /* the mode's defaults, as to_quantized(None, None) */
            TRY(parse_params(v, name, where, &o->p));
        } else {
            return error_set("%s: %s must be an object or a boolean", name, where);
        }
        o->path = mem_strdup(k);
        if (!o->path) return -1;
        qc->n_ov++;
    }
    qc->present = true;
    return 0;
}

static int parse_root(QuantConfig *qc, const json_t *root, const char *name) {
    json_t *q = json_object_get(root, "quantization");
    const char *key = "quantization";
    if (!q || json_is_null(q)) {
        q = json_object_get(root, "quantization_config");
        key = "quantization_config";
    }
    if (!q || json_is_null(q)) return 0;
    if (!json_is_object(q)) return error_set("%s: %s must be an object", name, key);
    json_t *method = json_object_get(q, "quant_method");
    if (method && !json_object_get(root, "quantization")) {
        const char *ms = json_is_string(method) ? json_string_value(method) : "?";
        return error_set("%s: %s.quant_method \"%s\" is not supported; convert the model to MLX's affine "
                         "quantization first (lmtune convert -q)", name, key, ms);
    }
    return parse_object(qc, q, name, key);
}

int quant_config_parse(QuantConfig *qc, const char *json, const char *name) {
    memset(qc, 0, sizeof *qc);
    json_error_t je;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    if (!root) return error_set("%s:%d: %s", name, je.line, je.text);
    int rc = json_is_object(root) ? parse_root(qc, root, name) : error_set("%s: not a JSON object", name);
    json_decref(root);
    if (rc < 0) {
        quant_config_free(qc);
        return error_one_line();
    }
    return 0;
}

int quant_config_load(QuantConfig *qc, const char *config_path) {
    memset(qc, 0, sizeof *qc);
    char *text;
    size_t n;
    TRY(file_read_all(config_path, 16u << 20, &text, &n));
    int rc = quant_config_parse(qc, text, config_path);
    mem_free(text);
    return rc;
}

void quant_config_free(QuantConfig *qc) {
    for (size_t i = 0; i < qc->n_ov; i++) mem_free(qc->ov[i].path);
    mem_free(qc->ov);
    memset(qc, 0, sizeof *qc);
}

int quant_module(const QuantConfig *qc, const StModel *st, const char *path, QuantParams *p) {
    for (size_t i = 0; qc && i < qc->n_ov; i++)
        if (!strcmp(qc->ov[i].path, path)) {
            *p = qc->ov[i].p;
            return qc->ov[i].quantized ? 1 : 0;
        }
    char nm[300];
    snprintf(nm, sizeof nm, "%s.scales", path);
    if (!st_model_find(st, nm)) return 0;
    if (!qc || !qc->present)
        return error_set("%s: tensor \"%s\" is present but config.json has no \"quantization\"", st->dir, nm);
    *p = qc->global;
    return 1;
}

static int expect(const StModel *st, const char *name, int64_t rows, int64_t cols, bool codes, const StTensor **out) {
    char want[64], got[64];
    const StFile *f;
    const StTensor *t = st_model_find_in(st, name, &f);
    int64_t shape[2] = {rows, cols};
    if (!t)
        return error_set("%s: tensor \"%s\" is missing (the quantization implies shape %s)", st->dir, name,
                         st_format_shape(want, sizeof want, 2, shape));
    bool is_float = t->dtype == DTYPE_F32 || t->dtype == DTYPE_BF16 || t->dtype == DTYPE_F16;
    bool dt_ok = codes ? t->dtype == DTYPE_U32 : is_float;
    if (!dt_ok)
        return error_set("%s: tensor \"%s\": dtype %s but a quantized module stores %s", f->path, name,
                         dtype_name(t->dtype), codes ? "U32 codes" : "F32, BF16 or F16 scales and biases");
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return error_set("%s: tensor \"%s\": shape %s but the quantization implies %s", f->path, name,
                         st_format_shape(got, sizeof got, t->ndim, t->shape),
                         st_format_shape(want, sizeof want, 2, shape));
    *out = t;
    return 0;
}

int quant_module_tensors(const StModel *st, const char *path, int64_t rows, int64_t cols, const QuantParams *p,
                         QuantTensors *out) {
    memset(out, 0, sizeof *out);
    if (cols % p->group)
        return error_set("%s: module %s has %lld input features, not a multiple of its group size %d", st->dir, path,
                         (long long)cols, p->group);
    char nm[300];
    snprintf(nm, sizeof nm, "%s.weight", path);
    TRY(expect(st, nm, rows, cols * p->bits / 32, true, &out->codes));
    snprintf(nm, sizeof nm, "%s.scales", path);
    TRY(expect(st, nm, rows, cols / p->group, false, &out->scales));
    snprintf(nm, sizeof nm, "%s.biases", path);
    TRY(expect(st, nm, rows, cols / p->group, false, &out->biases));
    if (out->scales->dtype != out->biases->dtype)
        return error_set("%s: %s.scales is %s but %s.biases is %s", st->dir, path, dtype_name(out->scales->dtype), path,
                         dtype_name(out->biases->dtype));
    return 0;
}

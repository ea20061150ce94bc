/* convert.c: `lmtune convert` (see convert.h), following mlx_lm/convert.py
 * and mlx_lm/utils.py (quantize_model, dequantize_model, save_model,
 * save_config):
 *   - every floating tensor is cast to the dtype (--dtype, else config.json's
 *     torch_dtype when it is float16 / bfloat16 / float32);
 *   - -q: every 2-D ".weight" (the Linear and Embedding modules of a decoder)
 *     whose input dimension is a multiple of the group size is quantized by
 *     MLX's affine_quantize (kernels/dequant.h) with the defaults or, with a
 *     mixed recipe, its module's bits; config.json gets "quantization"
 *     {group_size, bits, mode} (plus one entry per module for mixed recipes)
 *     and the same as "quantization_config";
 *   - -d: every quantized module is dequantized to its scales' dtype and the
 *     quantization keys leave config.json;
 *   - a tied lm_head.weight is dropped, as the models' sanitize() does.
 * Tensors are written in name order, shard by shard (at most 5 GiB each),
 * each shard produced, written and freed before the next, and the source
 * pages it read dropped from the mapping, so the memory used is about one
 * shard of output and of its sources. */
#include "model/convert.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/hf_config.h"
#include "formats/mlx_quant.h"
#include "formats/safetensors.h"
#include "kernels/dequant.h"
#include "kernels/frozen_weight.h"
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What one output tensor is and how it is made from the source. */
typedef enum { OUT_CAST, OUT_COPY, OUT_CODES, OUT_SCALES, OUT_BIASES, OUT_DEQUANT } OutKind;

typedef struct {
    char name[200];
    OutKind kind;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t bytes;
    const StTensor *src;          /* source tensor (the weight for CODES / SCALES / BIASES / DEQUANT) */
    const StTensor *src_scales, *src_biases; /* DEQUANT */
    int bits, group;              /* CODES / SCALES / BIASES / DEQUANT */
    int group_of;                 /* index of this module's CODES output (SCALES / BIASES) */
    int shard;
} OutTensor;

static bool is_float(DType t) { return t == DTYPE_F32 || t == DTYPE_BF16 || t == DTYPE_F16; }
static size_t esize(DType t) { return t == DTYPE_F32 ? 4 : 2; }

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int convert_mixed_bits(const char *recipe, const char *path, int layers) {
    int low;
    if (!strcmp(recipe, "mixed_2_6")) low = 2;
    else if (!strcmp(recipe, "mixed_3_4")) low = 3;
    else if (!strcmp(recipe, "mixed_3_6")) low = 3;
    else if (!strcmp(recipe, "mixed_4_6")) low = 4;
    else return -1;
    int high = strcmp(recipe, "mixed_3_4") ? 6 : 4;
    /* the layer index is the third dotted part ("model.layers.N...."), 0 when absent */
    int index = 0;
    const char *p = strchr(path, '.');
    if (p && (p = strchr(p + 1, '.')) != NULL) index = atoi(p + 1);
    int e8 = layers / 8;
    bool more = index < e8 || index >= 7 * layers / 8 || (index - e8) % 3 == 2;
    if ((strstr(path, "v_proj") || strstr(path, "v_a_proj") || strstr(path, "v_b_proj")) && more) return high;
    if (strstr(path, "down_proj") && more) return high;
    if (strstr(path, "lm_head")) return high;
    return low;
}

static int dtype_from_string(const char *s, DType *t) {
    if (!strcmp(s, "float32")) *t = DTYPE_F32;
    else if (!strcmp(s, "bfloat16")) *t = DTYPE_BF16;
    else if (!strcmp(s, "float16")) *t = DTYPE_F16;
    else return -1;
    return 0;
}

static const char *dtype_string(DType t) {
    return t == DTYPE_F32 ? "float32" : t == DTYPE_BF16 ? "bfloat16" : "float16";
}

/* Every source tensor, sorted by name. */
static int collect_sources(const StModel *st, const StTensor ***out, size_t *n) {
    size_t total = 0;
    for (size_t f = 0; f < st->n_files; f++) total += st->files[f].n_tensors;
    const StTensor **list = mem_calloc(total + 1, sizeof *list);
    TRY_PTR(list);
    size_t k = 0;
    for (size_t f = 0; f < st->n_files; f++)
        for (size_t i = 0; i < st->files[f].n_tensors; i++) list[k++] = &st->files[f].tensors[i];
    for (size_t i = 1; i < k; i++)
        for (size_t j = i; j > 0 && strcmp(list[j - 1]->name, list[j]->name) > 0; j--) {
            const StTensor *t = list[j];
            list[j] = list[j - 1];
            list[j - 1] = t;
        }
    *out = list;
    *n = k;
    return 0;
}

typedef struct {
    const ConvertOptions *o;
    const ModelConfig *cfg;
    const QuantConfig *qc;        /* the source's quantization */
    const StModel *st;
    DType target;                 /* DTYPE_COUNT: keep each tensor's dtype */
    int group, bits;              /* -q defaults */
    json_t *qjson;                /* -q: the "quantization" object being built */
    OutTensor *out;
    size_t n_out, cap;
    double params;                /* MLX's get_total_parameters */
} Plan;

static OutTensor *add_out(Plan *p, const char *name, OutKind kind, DType dt, int ndim, const int64_t *shape) {
    if (p->n_out == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        OutTensor *n = mem_realloc(p->out, cap * sizeof *n);
        if (!n) return NULL;
        p->out = n;
        p->cap = cap;
    }
    OutTensor *t = &p->out[p->n_out++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->dtype = dt;
    t->ndim = ndim;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t->bytes = kind == OUT_CODES ? n * 4 : n * (size_t)dtype_bits(dt) / 8;
    return t;
}

/* A 2-D float ".weight" quantized with (bits, group): codes, scales, biases. */
static int plan_quantized(Plan *p, const StTensor *t, const char *stem, int bits, int group) {
    int64_t rows = t->shape[0], cols = t->shape[1];
    DType dt = p->target == DTYPE_COUNT ? t->dtype : p->target;
    char nm[220];
    int64_t cshape[2] = {rows, cols * bits / 32}, sshape[2] = {rows, cols / group};
    snprintf(nm, sizeof nm, "%s.weight", stem);
    OutTensor *c = add_out(p, nm, OUT_CODES, DTYPE_U32, 2, cshape);
    TRY_PTR(c);
    size_t ci = p->n_out - 1;
    c->src = t;
    c->bits = bits;
    c->group = group;
    static const char *suffix[2] = {"scales", "biases"};
    for (int k = 0; k < 2; k++) {
        snprintf(nm, sizeof nm, "%s.%s", stem, suffix[k]);
        OutTensor *s = add_out(p, nm, k ? OUT_BIASES : OUT_SCALES, dt, 2, sshape);
        TRY_PTR(s);
        s->src = t;
        s->bits = bits;
        s->group = group;
        s->group_of = (int)ci;
    }
    p->params += (double)rows * (double)cols;
    return 0;
}

static int plan_tensor(Plan *p, const StTensor *t) {
    const ConvertOptions *o = p->o;
    char stem[200];
    bool weight = ends_with(t->name, ".weight");
    snprintf(stem, sizeof stem, "%.*s", weight ? (int)(strlen(t->name) - 7) : 0, t->name);
    if (p->cfg->tie_word_embeddings && !strcmp(t->name, "lm_head.weight")) return 0;
    /* a quantized source module */
    QuantParams qp;
    int q = weight ? quant_module(p->qc, p->st, stem, &qp) : 0;
    TRY(q);
    if (q == 0 && p->qc->present && (ends_with(t->name, ".scales") || ends_with(t->name, ".biases"))) {
        char ws[220];
        snprintf(ws, sizeof ws, "%.*s", (int)(strlen(t->name) - 7), t->name);
        QuantParams qp2;
        int q2 = quant_module(p->qc, p->st, ws, &qp2);
        TRY(q2);
        if (q2 == 1) {   /* part of a quantized module: dropped when dequantizing, else cast */
            if (o->dequantize) return 0;
            DType dt = p->target == DTYPE_COUNT ? t->dtype : p->target;
            OutTensor *c = add_out(p, t->name, OUT_CAST, dt, t->ndim, t->shape);
            TRY_PTR(c);
            c->src = t;
            return 0;
        }
    }
    if (q == 1) {
        int64_t rows = t->shape[0], cols = t->shape[1] * 32 / qp.bits;
        QuantTensors qt;
        TRY(quant_module_tensors(p->st, stem, rows, cols, &qp, &qt));
        if (o->dequantize) {
            int64_t shape[2] = {rows, cols};
            DType dt = p->target == DTYPE_COUNT ? qt.scales->dtype : p->target;
            OutTensor *d = add_out(p, t->name, OUT_DEQUANT, dt, 2, shape);
            TRY_PTR(d);
            d->src = t;
            d->src_scales = qt.scales;
            d->src_biases = qt.biases;
            d->bits = qp.bits;
            d->group = qp.group;
            p->params += (double)rows * (double)cols;
            return 0;
        }
        OutTensor *c = add_out(p, t->name, OUT_COPY, DTYPE_U32, 2, t->shape);
        TRY_PTR(c);
        c->src = t;
        p->params += (double)rows * (double)cols;
        return 0;
    }
    if (o->quantize && weight && t->ndim == 2 && is_float(t->dtype) && t->shape[1] % p->group == 0) {
        int bits = p->bits, group = p->group;
        if (o->quant_predicate) {
            bits = convert_mixed_bits(o->quant_predicate, stem, p->cfg->num_hidden_layers);
            group = o->q_group_size ? o->q_group_size : 64;
            json_t *e = json_object();
            json_object_set_new(e, "group_size", o->q_group_size ? json_integer(o->q_group_size) : json_null());
            json_object_set_new(e, "bits", json_integer(bits));
            json_object_set_new(e, "mode", json_string("affine"));
            json_object_set_new(p->qjson, stem, e);
        }
        if (t->shape[1] % group)
            return error_set("%s: %s has %lld input features, not a multiple of the group size %d", o->hf_path,
                             t->name, (long long)t->shape[1], group);
        return plan_quantized(p, t, stem, bits, group);
    }
    bool fl = is_float(t->dtype);
    OutTensor *c = add_out(p, t->name, fl ? OUT_CAST : OUT_COPY, fl && p->target != DTYPE_COUNT ? p->target : t->dtype,
                           t->ndim, t->shape);
    TRY_PTR(c);
    c->src = t;
    p->params += (double)t->nelem;
    return 0;
}

/* The source weight of a CODES output as values of the output dtype. */
static void *source_values(const OutTensor *c, DType dt) {
    const StTensor *t = c->src;
    if (t->dtype == dt) return (void *)t->data;
    void *buf = mem_alloc(t->nelem * esize(dt));
    if (!buf) return NULL;
    enum { CH = 4096 };
    float tmp[CH];
    for (size_t i = 0; i < t->nelem; i += CH) {
        size_t k = t->nelem - i < CH ? t->nelem - i : CH;
        dtype_to_f32(tmp, (const char *)t->data + i * esize(t->dtype), t->dtype, k);
        dtype_from_f32((char *)buf + i * esize(dt), dt, tmp, k);
    }
    return buf;
}

static int check_finite(const void *v, DType dt, size_t n, const char *path, const char *name, int64_t cols) {
    for (size_t i = 0; i < n; i++) {
        float x = dt == DTYPE_F32 ? ((const float *)v)[i] : dt == DTYPE_BF16 ? bf16_to_f32(((const uint16_t *)v)[i])
                                                                              : f16_to_f32(((const uint16_t *)v)[i]);
        if (!isfinite(x))
            return error_set("%s: tensor \"%s\": non-finite value at row %lld, column %lld; it cannot be quantized",
                             path, name, (long long)(i / (size_t)cols), (long long)(i % (size_t)cols));
    }
    return 0;
}

/* A source tensor consumed into a buffer of its own leaves the resident set. */
static int drop_source(const Plan *p, const StTensor *t) {
    for (size_t f = 0; t && f < p->st->n_files; f++)
        TRY(file_map_drop(&p->st->files[f].map, t->data, t->end - t->begin));
    return 0;
}

/* Makes the data of outputs [a, b) (one shard); buffers into data[]. */
static int produce(const Plan *p, size_t a, size_t b, void **data) {
    for (size_t i = a; i < b; i++) {
        const OutTensor *t = &p->out[i];
        if (t->kind == OUT_SCALES || t->kind == OUT_BIASES) continue;   /* made with their codes */
        const StTensor *s = t->src;
        if (t->kind == OUT_COPY || (t->kind == OUT_CAST && s->dtype == t->dtype)) {
            data[i] = (void *)s->data;
            continue;
        }
        if (t->kind == OUT_CAST) {
            void *buf = source_values(t, t->dtype);
            TRY_PTR(buf);
            data[i] = buf;
            TRY(drop_source(p, s));
            continue;
        }
        if (t->kind == OUT_DEQUANT) {
            int rows = (int)t->shape[0], cols = (int)t->shape[1];
            FrozenWeight w = fw_affine(s->data, t->src_scales->data, t->src_biases->data, t->src_scales->dtype,
                                       t->bits, t->group, rows, cols);
            float *f = mem_alloc((size_t)rows * cols * 4);
            TRY_PTR(f);
            #pragma omp parallel for schedule(static)
            for (int r = 0; r < rows; r++) fw_expand(&w, r, 1, 0, cols, DTYPE_F32, f + (size_t)r * cols, (size_t)cols);
            dtype_from_f32(f, t->dtype, f, (size_t)rows * cols);   /* narrowing in place is safe front to back */
            data[i] = f;
            TRY(drop_source(p, s));
            TRY(drop_source(p, t->src_scales));
            TRY(drop_source(p, t->src_biases));
            continue;
        }
        /* CODES: quantize, with the scales and biases that follow it */
        int rows = (int)s->shape[0], cols = (int)s->shape[1];
        const OutTensor *sc = &p->out[i + 1];
        void *vals = source_values(t, sc->dtype);
        TRY_PTR(vals);
        int rc = check_finite(vals, sc->dtype, s->nelem, p->o->hf_path, s->name, cols);
        void *codes = rc == 0 ? mem_alloc(t->bytes) : NULL;
        void *scales = codes ? mem_alloc(sc->bytes) : NULL, *biases = scales ? mem_alloc(sc->bytes) : NULL;
        if (biases) affine_quantize(codes, scales, biases, vals, sc->dtype, t->bits, t->group, rows, cols);
        if (vals != s->data) mem_free(vals);
        if (!biases) {
            mem_free(codes);
            mem_free(scales);
            return -1;
        }
        data[i] = codes;
        data[i + 1] = scales;
        data[i + 2] = biases;
        TRY(drop_source(p, s));
    }
    return 0;
}

static void release(const Plan *p, size_t a, size_t b, void **data) {
    for (size_t i = a; i < b; i++)
        if (data[i] && (!p->out[i].src || data[i] != p->out[i].src->data)) mem_free(data[i]);
}

/* config.json with the quantization edits, top-level keys sorted (as
 * save_config), written with 4-space indentation. */
static int write_config(const Plan *p, json_t *root, const char *dir) {
    json_object_del(root, "_name_or_path");
    json_object_del(root, "vision_config");
    if (p->o->dequantize) {
        json_object_del(root, "quantization");
        json_object_del(root, "quantization_config");
    }
    if (p->qjson) {
        json_object_set(root, "quantization", p->qjson);
        json_object_set_new(root, "quantization_config", json_deep_copy(p->qjson));
    } else if (json_object_get(root, "quantization")) {
        json_object_set_new(root, "quantization_config", json_deep_copy(json_object_get(root, "quantization")));
    }
    size_t n = json_object_size(root);
    const char **keys = mem_calloc(n + 1, sizeof *keys);
    TRY_PTR(keys);
    size_t k = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) keys[k++] = key;
    for (size_t i = 1; i < k; i++)
        for (size_t j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
            const char *t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
        }
    json_t *sorted = json_object();
    for (size_t i = 0; i < k; i++) json_object_set(sorted, keys[i], json_object_get(root, keys[i]));
    mem_free(keys);
    char *text = json_dumps(sorted, JSON_INDENT(4));
    json_decref(sorted);
    char *path = path_join(dir, "config.json");
    int rc = text && path ? atomic_write_file(path, text, strlen(text))
                          : error_set("%s: cannot build config.json", dir);
    free(text);
    mem_free(path);
    return rc;
}

static int copy_if_exists(const char *src_dir, const char *dst_dir, const char *name) {
    char *src = path_join(src_dir, name), *dst = path_join(dst_dir, name);
    int rc = -1;
    if (src && dst) {
        rc = 0;
        if (file_exists(src)) {
            char *buf;
            size_t n;
            rc = file_read_all(src, 0, &buf, &n);
            if (rc == 0) {
                rc = atomic_write_file(dst, buf, n);
                mem_free(buf);
            }
        }
    }
    mem_free(src);
    mem_free(dst);
    return rc;
}

static int write_outputs(Plan *p, const char *dir, size_t max_shard, FILE *log) {
    size_t shards = 1, acc = 0, total = 0;
    for (size_t i = 0; i < p->n_out; i++) {
        OutTensor *t = &p->out[i];
        /* a module's codes, scales and biases stay in one shard */
        size_t unit = t->kind == OUT_CODES ? t->bytes + p->out[i + 1].bytes + p->out[i + 2].bytes : t->bytes;
        bool starts_unit = t->kind != OUT_SCALES && t->kind != OUT_BIASES;
        if (starts_unit && acc > 0 && acc + unit > max_shard) {
            shards++;
            acc = 0;
        }
        if (starts_unit) acc += unit;
        t->shard = (int)shards - 1;
        total += t->bytes;
    }
    void **data = mem_calloc(p->n_out + 1, sizeof *data);
    StWriteTensor *wt = mem_calloc(p->n_out + 1, sizeof *wt);
    json_t *weight_map = json_object();
    int rc = data && wt && weight_map ? 0 : -1;
    const char *mk[1] = {"format"}, *mv[1] = {"mlx"};
    size_t a = 0;
    for (size_t s = 0; rc == 0 && s < shards; s++) {
        size_t b = a;
        while (b < p->n_out && p->out[b].shard == (int)s) b++;
        char fname[64];
        if (shards == 1) snprintf(fname, sizeof fname, "model.safetensors");
        else snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", s + 1, shards);
        rc = produce(p, a, b, data);
        for (size_t i = a; rc == 0 && i < b; i++) {
            const OutTensor *t = &p->out[i];
            wt[i].name = t->name;
            wt[i].dtype = t->dtype;
            wt[i].ndim = t->ndim;
            memcpy(wt[i].shape, t->shape, sizeof t->shape);
            wt[i].data = data[i];
            json_object_set_new(weight_map, t->name, json_string(fname));
        }
        char *path = rc == 0 ? path_join(dir, fname) : NULL;
        if (rc == 0) rc = path ? st_write(path, wt + a, b - a, mk, mv, 1) : -1;
        mem_free(path);
        release(p, a, b, data);
        /* the source pages this shard read leave the resident set (they stay in the page cache): the
         * memory of a conversion is one shard, not the whole source model (8B in bf16: 16.7 GB before) */
        for (size_t f = 0; rc == 0 && f < p->st->n_files; f++) rc = file_map_keep(&p->st->files[f].map, NULL, 0);
        if (rc == 0 && shards > 1) fprintf(log, "[INFO] Wrote %s\n", fname);
        a = b;
    }
    if (rc == 0) {
        json_t *index = json_object(), *meta = json_object();
        json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
        json_object_set_new(meta, "total_parameters", json_integer((json_int_t)p->params));
        json_object_set_new(index, "metadata", meta);
        json_object_set(index, "weight_map", weight_map);
        char *text = json_dumps(index, JSON_INDENT(4) | JSON_SORT_KEYS);
        json_decref(index);
        char *path = path_join(dir, "model.safetensors.index.json");
        rc = text && path ? atomic_write_file(path, text, strlen(text)) : -1;
        free(text);
        mem_free(path);
    }
    json_decref(weight_map);
    mem_free(data);
    mem_free(wt);
    if (rc == 0 && p->o->quantize)
        fprintf(log, "[INFO] Quantized model with %.3f bits per weight.\n", (double)total * 8.0 / p->params);
    return rc;
}

static int check_options(const ConvertOptions *o) {
    if (!o->hf_path) return error_set("--hf-path (or --model) is required");
    if (file_exists(o->mlx_path) || dir_exists(o->mlx_path))
        return error_set("Cannot save to the path %s as it already exists. Please delete the file/directory or "
                         "specify a new path to save to.", o->mlx_path);
    if (o->quantize && o->dequantize) return error_set("Choose either quantize or dequantize, not both.");
    if (o->q_mode && strcmp(o->q_mode, "affine")) {
        if (o->quant_predicate) return error_set("Quant predicates only support 'affine' quantization.");
        return error_set("--q-mode %s: lmtune writes MLX's affine quantization only", o->q_mode);
    }
    if (o->q_group_size && o->q_group_size != 32 && o->q_group_size != 64 && o->q_group_size != 128)
        return error_set("[quantize] The requested group size %d is not supported. The supported group sizes are "
                         "32, 64, and 128.", o->q_group_size);
    if (o->q_bits && (o->q_bits < 2 || o->q_bits > 8 || o->q_bits == 7))
        return error_set("[quantize] The requested number of bits %d is not supported. The supported bits are 2, "
                         "3, 4, 5, 6 and 8.", o->q_bits);
    if (o->quant_predicate && convert_mixed_bits(o->quant_predicate, "", 1) < 0)
        return error_set("Invalid quant recipe %s", o->quant_predicate);
    return 0;
}

static int convert_into(const ConvertOptions *o, const char *tmp_dir, FILE *log) {
    Plan p = {0};
    p.o = o;
    ModelConfig cfg;
    QuantConfig qc = {0};
    StModel st = {0};
    json_t *root = NULL;
    const StTensor **src = NULL;
    size_t n_src = 0;
    int rc = -1;
    char *cfg_path = path_join(o->hf_path, "config.json");
    if (!cfg_path) return -1;
    fprintf(log, "[INFO] Loading\n");
    json_error_t je;
    if (hf_config_load(&cfg, cfg_path) < 0 || quant_config_load(&qc, cfg_path) < 0) goto out;
    root = json_load_file(cfg_path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        error_set("%s:%d: %s", cfg_path, je.line, je.text);
        goto out;
    }
    if (st_model_open(&st, o->hf_path, false) < 0) goto out;
    if (o->quantize && qc.present) {
        error_set("%s is already quantized; convert it with -d (--dequantize) first", o->hf_path);
        goto out;
    }
    p.cfg = &cfg;
    p.qc = &qc;
    p.st = &st;
    p.target = DTYPE_COUNT;
    const char *dt = o->dtype;
    json_t *td = json_object_get(root, "torch_dtype");
    if (!dt && json_is_string(td)) dt = json_string_value(td);
    DType target;
    if (dt && dtype_from_string(dt, &target) == 0) {
        fprintf(log, "[INFO] Using dtype: %s\n", dtype_string(target));
        p.target = target;
    }
    p.group = o->q_group_size ? o->q_group_size : 64;
    p.bits = o->q_bits ? o->q_bits : 4;
    if (o->quantize) {
        fprintf(log, "[INFO] Quantizing\n");
        p.qjson = json_pack("{s:i, s:i, s:s}", "group_size", p.group, "bits", p.bits, "mode", "affine");
    }
    if (o->dequantize) fprintf(log, "[INFO] Dequantizing\n");
    if (collect_sources(&st, &src, &n_src) < 0) goto out;
    for (size_t i = 0; i < n_src; i++)
        if (plan_tensor(&p, src[i]) < 0) goto out;
    if (write_outputs(&p, tmp_dir, o->max_shard_bytes ? o->max_shard_bytes : (size_t)5 << 30, log) < 0) goto out;
    if (write_config(&p, root, tmp_dir) < 0) goto out;
    static const char *copies[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                   "generation_config.json", "tokenizer.model", "chat_template.jinja",
                                   "added_tokens.json", "vocab.json", "merges.txt"};
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++)
        if (copy_if_exists(o->hf_path, tmp_dir, copies[i]) < 0) goto out;
    rc = 0;
out:
    json_decref(p.qjson);
    json_decref(root);
    mem_free(p.out);
    mem_free(src);
    st_model_close(&st);
    quant_config_free(&qc);
    mem_free(cfg_path);
    return rc;
}

/* Removes the temporary output directory (plain files only) after a failure. */
static void remove_dir(const char *dir) {
    DIR *dp = opendir(dir);
    if (dp) {
        struct dirent *e;
        while ((e = readdir(dp)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = path_join(dir, e->d_name);
            if (p) unlink(p);
            mem_free(p);
        }
        closedir(dp);
    }
    rmdir(dir);
}

int convert_model(const ConvertOptions *o, FILE *log) {
    TRY(check_options(o));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", o->mlx_path, (long)getpid());
    if (dir_ensure(tmp) < 0) return -1;
    if (convert_into(o, tmp, log) < 0) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", error_message());
        remove_dir(tmp);
        return error_set("%s", msg);
    }
    if (rename(tmp, o->mlx_path) != 0) {
        remove_dir(tmp);
        return error_set("%s: cannot rename %s into place", o->mlx_path, tmp);
    }
    return 0;
}

/* fuse.c: merging an adapter into the base weights and exporting it to PEFT
 * (see fuse.h; the GGUF exports are gguf_export.c). MLX-LM's LoRA: y = W x + scale * (x A) B with
 * A (in, r), B (r, out), so the merged weight is W' = W + scale * B^T A^T
 * (out, in); DoRA then rescales row o by m[o] / ||W'[o, :]||. Names follow
 * the model's config: weights "<prefix>layers.N.<key>.weight", adapters
 * "<adapter prefix>layers.N.<key>.lora_a" (MLX-LM's module paths; they
 * differ for a multimodal gemma3 saved by recent transformers), fused
 * projections (phi3's qkv_proj, gate_up_proj) under their own keys. */
#include "model/fuse.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/hf_config.h"
#include "formats/model_tensors.h"
#include "formats/mlx_quant.h"
#include "formats/safetensors.h"
#include "kernels/dequant.h"
#include "kernels/frozen_weight.h"
#include "kernels/matmul.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The model's config (prefixes): config.json or a GGUF file's metadata, with
 * the weight prefix (and Qwen3.5 layout) of its safetensors files. */
static int load_model_config(ModelConfig *mc, const char *model_dir, const StModel *st) {
    TRY(model_config_load(model_dir, mc));
    return st ? model_tensors_resolve(mc, st) : 0;
}

int adapter_config_load(AdapterConfig *ac, const char *adapter_dir) {
    memset(ac, 0, sizeof *ac);
    if (!dir_exists(adapter_dir)) return error_set("The adapter path does not exist: %s", adapter_dir);
    char *path = path_join(adapter_dir, "adapter_config.json");
    if (!path) return -1;
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    int rc = -1;
    if (!root) {
        error_set("%s:%d: %s", path, jerr.line, jerr.text);
        goto out;
    }
    const char *type = json_string_value(json_object_get(root, "fine_tune_type"));
    if (!type || !strcmp(type, "lora")) ac->type = TUNE_LORA;
    else if (!strcmp(type, "dora")) ac->type = TUNE_DORA;
    else if (!strcmp(type, "full")) ac->type = TUNE_FULL;
    else {
        error_set("%s: fine_tune_type \"%s\" is not lora, dora or full", path, type);
        goto out;
    }
    json_t *nl = json_object_get(root, "num_layers");
    ac->num_layers = json_is_integer(nl) ? (int)json_integer_value(nl) : 16;
    json_t *lp = json_object_get(root, "lora_parameters");
    if (ac->type != TUNE_FULL) {
        if (!json_is_object(lp)) {
            error_set("%s: missing field \"lora_parameters\"", path);
            goto out;
        }
        json_t *r = json_object_get(lp, "rank"), *s = json_object_get(lp, "scale"), *d = json_object_get(lp, "dropout");
        if (!json_is_integer(r) || json_integer_value(r) < 1) {
            error_set("%s: field \"lora_parameters.rank\" must be a positive integer", path);
            goto out;
        }
        if (!json_is_number(s)) {
            error_set("%s: field \"lora_parameters.scale\" must be a number", path);
            goto out;
        }
        ac->rank = (int)json_integer_value(r);
        ac->scale = (float)json_number_value(s);
        ac->dropout = json_is_number(d) ? (float)json_number_value(d) : 0.0f;
    }
    rc = 0;
out:
    json_decref(root);
    mem_free(path);
    return rc;
}

/* The adapter of one base weight, found by name in adapters.safetensors. */
typedef struct {
    const StTensor *a, *b, *m;   /* lora_a (in, r), lora_b (r, out), DoRA m (out) */
    const StTensor *full;        /* full fine-tuning: the replacement weight */
    int layer, proj;
} WeightAdapter;

/* "<prefix>layers.N.<key>.<rest>": layer, projection and rest. */
static int parse_layer_proj(const char *name, const char *prefix, int *layer, int *proj, const char **rest) {
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return -1;
    int i, n = 0;
    if (sscanf(name + pl, "layers.%d.%n", &i, &n) != 1 || n == 0) return -1;
    n += (int)pl;
    for (int p = 0; p < PROJ_COUNT; p++) {
        size_t k = strlen(PROJ_KEYS[p]);
        if (!strncmp(name + n, PROJ_KEYS[p], k) && name[n + k] == '.') {
            *layer = i;
            *proj = p;
            *rest = name + n + k + 1;
            return 0;
        }
    }
    return -1;
}

static int find_adapter(const StFile *ad, const AdapterConfig *ac, const ModelConfig *mc, const char *weight_name,
                        WeightAdapter *wa) {
    memset(wa, 0, sizeof *wa);
    wa->layer = wa->proj = -1;
    if (ac->type == TUNE_FULL) {
        wa->full = st_find(ad, weight_name);
        return 0;
    }
    const char *rest;
    if (parse_layer_proj(weight_name, mc->prefix, &wa->layer, &wa->proj, &rest) < 0 || strcmp(rest, "weight") != 0)
        return 0;
    char key[256];
    snprintf(key, sizeof key, "%slayers.%d.%s.lora_a", mc->adapter_prefix, wa->layer, PROJ_KEYS[wa->proj]);
    wa->a = st_find(ad, key);
    snprintf(key, sizeof key, "%slayers.%d.%s.lora_b", mc->adapter_prefix, wa->layer, PROJ_KEYS[wa->proj]);
    wa->b = st_find(ad, key);
    snprintf(key, sizeof key, "%slayers.%d.%s.m", mc->adapter_prefix, wa->layer, PROJ_KEYS[wa->proj]);
    wa->m = st_find(ad, key);
    if (!wa->a != !wa->b)
        return error_set("%s/adapters.safetensors: %s has only one of lora_a and lora_b", ad->path, weight_name);
    return 0;
}

/* Checks the adapter's tensors against the base weight (out, in). */
static int check_lora_shapes(const StFile *ad, const char *wname, const WeightAdapter *wa, const AdapterConfig *ac,
                             int64_t out, int64_t in) {
    if (wa->a->dtype != DTYPE_F32 || wa->b->dtype != DTYPE_F32)
        return error_set("%s: %s: lora_a and lora_b must be F32", ad->path, wname);
    if (wa->a->ndim != 2 || wa->a->shape[0] != in || wa->a->shape[1] != ac->rank)
        return error_set("%s: %s.lora_a: adapter shape does not match model parameter shape (%lld, %d)", ad->path,
                         wname, (long long)in, ac->rank);
    if (wa->b->ndim != 2 || wa->b->shape[0] != ac->rank || wa->b->shape[1] != out)
        return error_set("%s: %s.lora_b: adapter shape does not match model parameter shape (%d, %lld)", ad->path,
                         wname, ac->rank, (long long)out);
    if (wa->m && (wa->m->dtype != DTYPE_F32 || wa->m->ndim != 1 || wa->m->shape[0] != out))
        return error_set("%s: %s.m: adapter shape does not match model parameter shape (%lld)", ad->path, wname,
                         (long long)out);
    return 0;
}

void fuse_merge_lora(float *w, const float *a, const float *b, const float *m, float scale, int64_t out, int64_t in,
                     int r) {
    gemm_f32(w, b, a, (int)out, (int)in, r, true, true, scale, 1.0f);
    if (m) {
        for (int64_t o = 0; o < out; o++) {
            double ss = 0;
            for (int64_t i = 0; i < in; i++) ss += (double)w[o * in + i] * w[o * in + i];
            float k = (float)(m[o] / sqrt(ss > 0 ? ss : 1e-30));
            for (int64_t i = 0; i < in; i++) w[o * in + i] *= k;
        }
    }
}

/* W (out, in) fp32 in place: W += scale * B^T A^T; DoRA rescales rows. */
static void merge_lora(float *w, const WeightAdapter *wa, float scale, int64_t out, int64_t in, int r) {
    fuse_merge_lora(w, wa->a->data, wa->b->data, wa->m ? wa->m->data : NULL, scale, out, in, r);
}

int adapter_open(const char *adapter_dir, AdapterConfig *ac, StFile *ad) {
    TRY(adapter_config_load(ac, adapter_dir));
    char *p = path_join(adapter_dir, "adapters.safetensors");
    if (!p) return -1;
    int rc = st_open(ad, p);
    mem_free(p);
    return rc;
}

static int copy_file_if_exists(const char *src_dir, const char *dst_dir, const char *name) {
    char *src = path_join(src_dir, name), *dst = path_join(dst_dir, name);
    int rc = -1;
    if (!src || !dst) goto out;
    if (!file_exists(src)) {
        rc = 0;
        goto out;
    }
    char *buf;
    size_t n;
    if (file_read_all(src, 0, &buf, &n) < 0) goto out;
    rc = atomic_write_file(dst, buf, n);
    mem_free(buf);
out:
    mem_free(src);
    mem_free(dst);
    return rc;
}

static size_t write_bytes(const StWriteTensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n * (size_t)dtype_bits(t->dtype) / 8;
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int fuse_plan(const char *model_dir, const char *adapter_dir, bool dequantize, MemPlan *plan) {
    AdapterConfig ac;
    StFile ad = {0};
    StModel base = {0};
    QuantConfig qc = {0};
    ModelConfig *cfg = mem_alloc(sizeof *cfg);
    TRY_PTR(cfg);
    char *cfg_path = path_join(model_dir, "config.json");
    int crc = cfg_path ? hf_config_load(cfg, cfg_path) : -1;
    if (crc == 0) crc = quant_config_load(&qc, cfg_path);
    mem_free(cfg_path);
    if (crc == 0) crc = adapter_open(adapter_dir, &ac, &ad);
    if (crc < 0) {
        quant_config_free(&qc);
        mem_free(cfg);
        return -1;
    }
    int rc = st_model_open(&base, model_dir, true);
    if (rc == 0) rc = load_model_config(cfg, model_dir, &base);
    /* held: what waits for its shard (fp32 merged matrices; re-quantized
     * codes, scales and biases; --dequantize's dense matrices, allocated in
     * fp32 and narrowed in place); transient: the largest quantized module's
     * fp32 expansion while it is merged and re-quantized */
    size_t held = 0, transient = 0, tensors = 0, quantized = 0, files = 0, n_shapes = 0;
    MatmulShape shapes[PROJ_COUNT];
    for (size_t f = 0; rc == 0 && f < base.n_files; f++) {
        files += base.files[f].file_size;
        for (size_t i = 0; i < base.files[f].n_tensors && rc == 0; i++) {
            const StTensor *t = &base.files[f].tensors[i];
            WeightAdapter wa;
            rc = find_adapter(&ad, &ac, cfg, t->name, &wa);
            char stem[220];
            snprintf(stem, sizeof stem, "%.*s", (int)strlen(t->name) - 7, t->name);
            QuantParams qp;
            int q = rc == 0 && qc.present && has_suffix(t->name, ".weight") ? quant_module(&qc, &base, stem, &qp) : 0;
            if (q < 0) rc = -1;
            int64_t rows = t->ndim == 2 ? t->shape[0] : 0, cols = t->ndim == 2 ? t->shape[1] : 0;
            if (rc == 0 && q == 1 && (wa.a || wa.full || dequantize)) {
                cols = cols * 32 / qp.bits;
                size_t n = (size_t)rows * (size_t)cols, es = 2;
                char snm[240];
                snprintf(snm, sizeof snm, "%s.scales", stem);
                const StTensor *sc = st_model_find(&base, snm);
                if (sc && sc->dtype == DTYPE_F32) es = 4;
                held += dequantize ? n * sizeof(float) : n * (size_t)qp.bits / 8 + 2 * (n / (size_t)qp.group) * es;
                /* re-quantizing frees the expansion; dequantizing keeps it as the output */
                if (!dequantize && n * sizeof(float) > transient) transient = n * sizeof(float);
                quantized++;
            } else if (rc == 0 && q == 0 && (wa.full || wa.a)) {
                held += t->nelem * sizeof(float);
                tensors++;
            }
            if (rc == 0 && wa.a && rows > 0 && n_shapes < PROJ_COUNT) {
                /* merge_lora's product: one primitive per projection shape */
                MatmulShape k = matmul_shape_gemm((int)rows, (int)cols, ac.rank, true, true, ac.scale, 1.0f);
                bool seen = false;
                for (size_t j = 0; j < n_shapes; j++) seen = seen || !memcmp(&shapes[j], &k, sizeof k);
                if (!seen) shapes[n_shapes++] = k;
            }
        }
    }
    char nm[128];
    if (rc == 0) {
        if (quantized)
            snprintf(nm, sizeof nm, "%zu merged tensors in fp32 and %zu quantized modules %s, held until written",
                     tensors, quantized, dequantize ? "dequantized" : "re-quantized");
        else
            snprintf(nm, sizeof nm, "%zu merged tensors, held in fp32 until written", tensors);
        rc = plan_note(plan, MEM_FROZEN_WEIGHTS, nm, held, false);
    }
    if (rc == 0 && transient)
        rc = plan_note(plan, MEM_FROZEN_WEIGHTS, "one quantized module expanded to fp32 while merged", transient,
                       false);
    /* every byte of the base files is read through their mappings as the
     * shards are written, and every adapter tensor when merged */
    if (rc == 0) rc = plan_note(plan, MEM_FROZEN_WEIGHTS, "base weight files (mapped, all read)", files, false);
    if (rc == 0) rc = plan_note(plan, MEM_TRAINABLE, "adapters.safetensors (mapped, all read)", ad.map.size, false);
    MatmulPlan lib;
    if (rc == 0) rc = matmul_plan(shapes, n_shapes, &lib);
    if (rc == 0) rc = plan_note(plan, MEM_LIBRARY, "oneDNN primitives of the merge", lib.held_bytes, false);
    if (rc == 0) rc = plan_note(plan, MEM_LIBRARY, "oneDNN scratchpad", lib.scratchpad_bytes, false);
    st_model_close(&base);
    st_close(&ad);
    quant_config_free(&qc);
    mem_free(cfg);
    return rc;
}

/* The new scales and biases of a re-quantized module, found by its stem
 * when the loop reaches them. */
typedef struct {
    char stem[224];
    void *scales, *biases;
} Requant;

/* Quantized module `stem` of the base: dequantized (as MLX: the values in
 * the scales' dtype), merged with the adapter in fp32 when there is one,
 * then re-quantized with the module's bits and group size into codes,
 * scales and biases (*rq), or, with dequantize, left as a dense matrix of
 * the scales' dtype (*dense). */
static int fuse_quantized(const StModel *base, const char *stem, const QuantParams *qp, const WeightAdapter *wa,
                          const AdapterConfig *ac, const StFile *ad, bool dequantize, void **codes_out,
                          void **dense_out, Requant *rq, int64_t *rows_out, int64_t *cols_out) {
    char nm[240];
    snprintf(nm, sizeof nm, "%s.weight", stem);
    const StTensor *codes = st_model_find(base, nm);
    int64_t rows = codes->shape[0], cols = codes->shape[1] * 32 / qp->bits;
    QuantTensors qt;
    TRY(quant_module_tensors(base, stem, rows, cols, qp, &qt));
    if (wa && wa->full)
        return error_set("%s: %s: a full fine-tune cannot be merged into a quantized module", ad->path, nm);
    if (wa && wa->a) TRY(check_lora_shapes(ad, nm, wa, ac, rows, cols));
    DType dt = qt.scales->dtype;
    size_t n = (size_t)rows * (size_t)cols;
    float *w = mem_alloc(n * sizeof(float));
    TRY_PTR(w);
    FrozenWeight fw = fw_affine(qt.codes->data, qt.scales->data, qt.biases->data, dt, qp->bits, qp->group,
                                (int)rows, (int)cols);
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) fw_expand(&fw, (int)r, 1, 0, (int)cols, DTYPE_F32, w + r * cols, (size_t)cols);
    if (wa && wa->a) merge_lora(w, wa, ac->scale, rows, cols, ac->rank);
    dtype_from_f32(w, dt, w, n);   /* in place: narrowing is safe front to back */
    *rows_out = rows;
    *cols_out = cols;
    if (dequantize) {
        *dense_out = w;
        return 0;
    }
    size_t groups = n / (size_t)qp->group, es = dt == DTYPE_F32 ? 4 : 2;
    uint8_t *c = mem_alloc(n * (size_t)qp->bits / 8);
    void *s = c ? mem_alloc(groups * es) : NULL, *b = s ? mem_alloc(groups * es) : NULL;
    if (!b) {
        mem_free(w);
        mem_free(c);
        mem_free(s);
        return -1;
    }
    affine_quantize(c, s, b, w, dt, qp->bits, qp->group, (int)rows, (int)cols);
    mem_free(w);
    *codes_out = c;
    snprintf(rq->stem, sizeof rq->stem, "%s", stem);
    rq->scales = s;
    rq->biases = b;
    return 0;
}

/* config.json of the fused model: the base's, without its quantization when
 * the model was dequantized (as mlx_lm.fuse --dequantize). */
static int write_fused_config(const char *model_dir, const char *out_dir, bool drop_quantization) {
    char *src = path_join(model_dir, "config.json"), *dst = path_join(out_dir, "config.json");
    int rc = -1;
    if (src && dst) {
        json_error_t je;
        json_t *root = json_load_file(src, JSON_REJECT_DUPLICATES, &je);
        if (!root) error_set("%s:%d: %s", src, je.line, je.text);
        else {
            if (drop_quantization) {
                json_object_del(root, "quantization");
                json_object_del(root, "quantization_config");
            }
            char *text = json_dumps(root, JSON_INDENT(2));
            rc = text ? atomic_write_file(dst, text, strlen(text)) : error_set("%s: cannot write", dst);
            free(text);
            json_decref(root);
        }
    }
    mem_free(src);
    mem_free(dst);
    return rc;
}


int fuse_model(const char *model_dir, const char *adapter_dir, const char *out_dir, size_t max_shard_bytes,
               bool dequantize) {
    AdapterConfig ac;
    StFile ad = {0};
    StModel base = {0};
    StWriteTensor *wt = NULL;
    void **owned = NULL;
    Requant *rq = NULL;
    size_t n_rq = 0;
    QuantConfig qc = {0};
    size_t n_total = 0, used_adapters = 0, n_adapter_tensors = 0;
    int rc = -1;
    if (max_shard_bytes == 0) max_shard_bytes = 5000000000ull;
    ModelConfig *mc = mem_alloc(sizeof *mc);
    if (!mc) return -1;
    if (adapter_open(adapter_dir, &ac, &ad) < 0) {
        mem_free(mc);
        return -1;
    }
    char *cfg_path = path_join(model_dir, "config.json");
    int qrc = cfg_path ? quant_config_load(&qc, cfg_path) : -1;
    mem_free(cfg_path);
    if (qrc < 0) goto out;
    if (st_model_open(&base, model_dir, false) < 0) goto out;
    if (load_model_config(mc, model_dir, &base) < 0) goto out;
    if (dir_ensure(out_dir) < 0) goto out;
    for (size_t f = 0; f < base.n_files; f++) n_total += base.files[f].n_tensors;
    wt = mem_calloc(n_total + 1, sizeof *wt);
    owned = mem_calloc(n_total + 1, sizeof *owned);
    rq = mem_calloc(n_total + 1, sizeof *rq);
    if (!wt || !owned || !rq) goto out;
    size_t k = 0;
    for (size_t f = 0; f < base.n_files; f++) {
        for (size_t i = 0; i < base.files[f].n_tensors; i++) {
            const StTensor *t = &base.files[f].tensors[i];
            WeightAdapter wa;
            if (find_adapter(&ad, &ac, mc, t->name, &wa) < 0) goto out;
            char stem[220];
            snprintf(stem, sizeof stem, "%.*s", (int)strlen(t->name) - 7, t->name);
            QuantParams qp;
            int q = has_suffix(t->name, ".weight") ? quant_module(&qc, &base, stem, &qp) : 0;
            if (q < 0) goto out;
            if (q == 0 && qc.present && (has_suffix(t->name, ".scales") || has_suffix(t->name, ".biases"))) {
                /* a quantized module's scales or biases: gone when dequantizing, else filled below */
                q = quant_module(&qc, &base, stem, &qp);
                if (q < 0) goto out;
                if (q == 1 && dequantize) continue;
                q = 0;
            }
            wt[k].name = t->name;
            wt[k].dtype = t->dtype;
            wt[k].ndim = t->ndim;
            memcpy(wt[k].shape, t->shape, sizeof t->shape);
            wt[k].data = t->data;
            if (q == 1 && (wa.a || wa.full || dequantize)) {
                void *codes = NULL, *dense = NULL;
                int64_t rows, cols;
                if (fuse_quantized(&base, stem, &qp, &wa, &ac, &ad, dequantize, &codes, &dense, &rq[n_rq], &rows,
                                   &cols) < 0) goto out;
                if (dense) {   /* a dense matrix of the scales' dtype */
                    char snm[240];
                    snprintf(snm, sizeof snm, "%s.scales", stem);
                    owned[k] = dense;
                    wt[k].dtype = st_model_find(&base, snm)->dtype;
                    wt[k].shape[0] = rows;
                    wt[k].shape[1] = cols;
                } else {
                    owned[k] = codes;
                    n_rq++;
                }
                if (wa.a) used_adapters += 2 + (wa.m != NULL);
            } else if (wa.full) {
                if (wa.full->ndim != t->ndim || memcmp(wa.full->shape, t->shape, sizeof t->shape[0] * t->ndim)) {
                    error_set("%s: %s: shape does not match the base model", ad.path, t->name);
                    goto out;
                }
                float *w = mem_alloc(t->nelem * sizeof(float));
                if (!w) goto out;
                owned[k] = w;
                dtype_to_f32(w, wa.full->data, wa.full->dtype, t->nelem);
                dtype_from_f32(w, t->dtype, w, t->nelem); /* in place: narrowing is safe front to back */
                used_adapters++;
            } else if (wa.a) {
                if (t->ndim != 2 || (t->dtype != DTYPE_F32 && t->dtype != DTYPE_BF16 && t->dtype != DTYPE_F16)) {
                    error_set("%s: %s: cannot merge into a %s tensor of rank %d", model_dir, t->name,
                              dtype_name(t->dtype), t->ndim);
                    goto out;
                }
                if (check_lora_shapes(&ad, t->name, &wa, &ac, t->shape[0], t->shape[1]) < 0) goto out;
                float *w = mem_alloc(t->nelem * sizeof(float));
                if (!w) goto out;
                owned[k] = w;
                dtype_to_f32(w, t->data, t->dtype, t->nelem);
                merge_lora(w, &wa, ac.scale, t->shape[0], t->shape[1], ac.rank);
                dtype_from_f32(w, t->dtype, w, t->nelem);
                used_adapters += 2 + (wa.m != NULL);
            }
            if (owned[k]) wt[k].data = owned[k];
            k++;
        }
    }
    n_total = k;
    /* re-quantized modules: their new scales and biases */
    for (size_t i = 0; i < n_total; i++) {
        bool sc = has_suffix(wt[i].name, ".scales"), bi = has_suffix(wt[i].name, ".biases");
        if (!sc && !bi) continue;
        size_t len = strlen(wt[i].name) - 7;
        for (size_t r = 0; r < n_rq; r++)
            if (strlen(rq[r].stem) == len && !strncmp(rq[r].stem, wt[i].name, len)) {
                wt[i].data = sc ? rq[r].scales : rq[r].biases;
                break;
            }
    }
    n_adapter_tensors = ad.n_tensors;
    if (used_adapters != n_adapter_tensors) {
        /* Name the first adapter tensor that matched no base weight (MLX-LM's wording). */
        for (size_t i = 0; i < ad.n_tensors; i++) {
            const char *nm = ad.tensors[i].name;
            bool found = false;
            if (ac.type == TUNE_FULL) found = st_model_find(&base, nm) != NULL;
            else {
                int layer, proj;
                const char *rest;
                if (parse_layer_proj(nm, mc->adapter_prefix, &layer, &proj, &rest) == 0 &&
                    (!strcmp(rest, "lora_a") || !strcmp(rest, "lora_b") || !strcmp(rest, "m"))) {
                    char wname[256];
                    snprintf(wname, sizeof wname, "%slayers.%d.%s.weight", mc->prefix, layer, PROJ_KEYS[proj]);
                    found = st_model_find(&base, wname) != NULL;
                }
            }
            if (!found) {
                error_set("Adapter at %s contains incompatible tensors:\n  %s: not an adapter parameter in the model",
                          adapter_dir, nm);
                goto out;
            }
        }
    }
    /* Shards of at most max_shard_bytes, in the base model's tensor order. */
    size_t n_shards = 1, acc = 0;
    int *shard_of = mem_calloc(n_total + 1, sizeof(int));
    if (!shard_of) goto out;
    for (k = 0; k < n_total; k++) {
        size_t b = write_bytes(&wt[k]);
        if (acc > 0 && acc + b > max_shard_bytes) {
            n_shards++;
            acc = 0;
        }
        acc += b;
        shard_of[k] = (int)n_shards - 1;
    }
    json_t *index = json_object(), *weight_map = json_object();
    size_t total_bytes = 0;
    const char *meta_k[] = {"format"}, *meta_v[] = {"pt"};
    size_t start = 0;
    for (size_t s = 0; s < n_shards; s++) {
        size_t end = start;
        while (end < n_total && shard_of[end] == (int)s) {
            total_bytes += write_bytes(&wt[end]);
            end++;
        }
        char fname[64];
        if (n_shards == 1) snprintf(fname, sizeof fname, "model.safetensors");
        else snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", s + 1, n_shards);
        char *p = path_join(out_dir, fname);
        if (!p || st_write(p, wt + start, end - start, meta_k, meta_v, 1) < 0) {
            mem_free(p);
            mem_free(shard_of);
            json_decref(index);
            json_decref(weight_map);
            goto out;
        }
        mem_free(p);
        for (size_t i = start; i < end; i++) json_object_set_new(weight_map, wt[i].name, json_string(fname));
        start = end;
    }
    mem_free(shard_of);
    if (n_shards > 1) {
        json_t *meta = json_object();
        json_object_set_new(meta, "total_size", json_integer((json_int_t)total_bytes));
        json_object_set_new(index, "metadata", meta);
        json_object_set(index, "weight_map", weight_map);
        char *text = json_dumps(index, JSON_INDENT(2) | JSON_SORT_KEYS);
        char *p = path_join(out_dir, "model.safetensors.index.json");
        int wrc = text && p ? atomic_write_file(p, text, strlen(text)) : -1;
        free(text);
        mem_free(p);
        if (wrc < 0) {
            json_decref(index);
            json_decref(weight_map);
            goto out;
        }
    }
    json_decref(index);
    json_decref(weight_map);
    if (write_fused_config(model_dir, out_dir, dequantize && qc.present) < 0) goto out;
    static const char *copies[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                   "generation_config.json"};
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++)
        if (copy_file_if_exists(model_dir, out_dir, copies[i]) < 0) goto out;
    rc = 0;
out:
    for (size_t i = 0; owned && i < n_total; i++) mem_free(owned[i]);
    for (size_t i = 0; rq && i < n_rq; i++) {
        mem_free(rq[i].scales);
        mem_free(rq[i].biases);
    }
    mem_free(owned);
    mem_free(wt);
    mem_free(rq);
    quant_config_free(&qc);
    mem_free(mc);
    st_model_close(&base);
    st_close(&ad);
    return rc;
}

/* Collects the LoRA pairs of the adapter, in layer/projection order, as
 * transposed copies in PEFT's layout: A^T (r, in) and B^T (out, r). */
typedef struct {
    int layer, proj;
    int64_t in, out;
    float *a_t, *b_t;
    const float *m;
} LoraPair;

static int collect_pairs(const StFile *ad, const AdapterConfig *ac, const ModelConfig *mc, LoraPair **out,
                         size_t *n_out, unsigned *proj_mask) {
    *out = NULL;
    *n_out = 0;
    *proj_mask = 0;
    if (ac->type == TUNE_FULL)
        return error_set("%s: a full fine-tune has no LoRA adapter to export; use lmtune fuse", ad->path);
    LoraPair *pairs = mem_calloc(ad->n_tensors + 1, sizeof *pairs);
    if (!pairs) return -1;
    size_t n = 0;
    for (int layer = 0; layer < 4096; layer++) {
        bool any_layer = false;
        for (int p = 0; p < PROJ_COUNT; p++) {
            char key[256];
            snprintf(key, sizeof key, "%slayers.%d.%s.lora_a", mc->adapter_prefix, layer, PROJ_KEYS[p]);
            const StTensor *a = st_find(ad, key);
            snprintf(key, sizeof key, "%slayers.%d.%s.lora_b", mc->adapter_prefix, layer, PROJ_KEYS[p]);
            const StTensor *b = st_find(ad, key);
            snprintf(key, sizeof key, "%slayers.%d.%s.m", mc->adapter_prefix, layer, PROJ_KEYS[p]);
            const StTensor *m = st_find(ad, key);
            if (!a && !b) continue;
            any_layer = true;
            if (!a || !b || a->ndim != 2 || b->ndim != 2 || a->shape[1] != ac->rank || b->shape[0] != ac->rank
                || a->dtype != DTYPE_F32 || b->dtype != DTYPE_F32) {
                for (size_t i = 0; i < n; i++) {
                    mem_free(pairs[i].a_t);
                    mem_free(pairs[i].b_t);
                }
                mem_free(pairs);
                return error_set("%s: layer %d %s: lora_a/lora_b missing or not (in, %d) / (%d, out) F32", ad->path,
                                 layer, PROJ_KEYS[p], ac->rank, ac->rank);
            }
            LoraPair *lp = &pairs[n++];
            lp->layer = layer;
            lp->proj = p;
            lp->in = a->shape[0];
            lp->out = b->shape[1];
            lp->m = m ? m->data : NULL;
            int r = ac->rank;
            lp->a_t = mem_alloc((size_t)r * lp->in * sizeof(float));
            lp->b_t = mem_alloc((size_t)lp->out * r * sizeof(float));
            if (!lp->a_t || !lp->b_t) return -1;
            const float *A = a->data, *B = b->data;
            for (int64_t i = 0; i < lp->in; i++)
                for (int k = 0; k < r; k++) lp->a_t[(size_t)k * lp->in + i] = A[(size_t)i * r + k];
            for (int k = 0; k < r; k++)
                for (int64_t o = 0; o < lp->out; o++) lp->b_t[(size_t)o * r + k] = B[(size_t)k * lp->out + o];
            *proj_mask |= 1u << p;
        }
        (void)any_layer;
    }
    *out = pairs;
    *n_out = n;
    return 0;
}

static void free_pairs(LoraPair *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        mem_free(p[i].a_t);
        mem_free(p[i].b_t);
    }
    mem_free(p);
}

int export_peft(const char *model_dir, const char *adapter_dir, const char *out_dir) {
    AdapterConfig ac;
    StFile ad = {0};
    LoraPair *pairs = NULL;
    size_t n = 0;
    unsigned mask;
    StWriteTensor *wt = NULL;
    char(*names)[160] = NULL;
    int rc = -1;
    ModelConfig *mc = mem_alloc(sizeof *mc);
    StModel base = {0};
    if (!mc) return -1;
    /* a GGUF base: the adapter is in Hugging Face's names and row order (lmtune trains in that
     * order whatever the file), so it is PEFT's adapter of the model the GGUF was converted from */
    bool gguf = model_is_gguf(model_dir);
    if ((!gguf && st_model_open(&base, model_dir, true) < 0) ||
        load_model_config(mc, model_dir, gguf ? NULL : &base) < 0) {
        st_model_close(&base);
        mem_free(mc);
        return -1;
    }
    st_model_close(&base);
    if (adapter_open(adapter_dir, &ac, &ad) < 0) {
        mem_free(mc);
        return -1;
    }
    if (collect_pairs(&ad, &ac, mc, &pairs, &n, &mask) < 0) goto out;
    /* PEFT's keys follow transformers' module path (a Qwen3.5 in MLX-LM's layout stores another) */
    const char *peft_prefix = mc->q35.on ? mc->q35.hf_prefix : mc->prefix;
    if (dir_ensure(out_dir) < 0) goto out;
    wt = mem_calloc(3 * n + 1, sizeof *wt);
    names = mem_calloc(3 * n + 1, sizeof *names);
    if (!wt || !names) goto out;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const LoraPair *p = &pairs[i];
        snprintf(names[k], sizeof names[k], "base_model.model.%slayers.%d.%s.lora_A.weight", peft_prefix, p->layer,
                 PROJ_KEYS[p->proj]);
        wt[k] = (StWriteTensor){names[k], DTYPE_F32, 2, {ac.rank, p->in}, p->a_t};
        k++;
        snprintf(names[k], sizeof names[k], "base_model.model.%slayers.%d.%s.lora_B.weight", peft_prefix, p->layer,
                 PROJ_KEYS[p->proj]);
        wt[k] = (StWriteTensor){names[k], DTYPE_F32, 2, {p->out, ac.rank}, p->b_t};
        k++;
        if (p->m) {
            snprintf(names[k], sizeof names[k], "base_model.model.%slayers.%d.%s.lora_magnitude_vector", peft_prefix,
                     p->layer, PROJ_KEYS[p->proj]);
            wt[k] = (StWriteTensor){names[k], DTYPE_F32, 1, {p->out}, p->m};
            k++;
        }
    }
    char *path = path_join(out_dir, "adapter_model.safetensors");
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    if (!path || st_write(path, wt, k, mk, mv, 1) < 0) {
        mem_free(path);
        goto out;
    }
    mem_free(path);
    json_t *cfg = json_object(), *targets = json_array(), *layers = json_array();
    for (int p = 0; p < PROJ_COUNT; p++)
        if (mask & (1u << p)) json_array_append_new(targets, json_string(strchr(PROJ_KEYS[p], '.') + 1));
    int last = -1;
    for (size_t i = 0; i < n; i++)
        if (pairs[i].layer != last) {
            json_array_append_new(layers, json_integer(pairs[i].layer));
            last = pairs[i].layer;
        }
    json_object_set_new(cfg, "peft_type", json_string("LORA"));
    json_object_set_new(cfg, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(cfg, "base_model_name_or_path", json_string(model_dir));
    json_object_set_new(cfg, "r", json_integer(ac.rank));
    json_object_set_new(cfg, "lora_alpha", json_real((double)ac.scale * ac.rank));
    json_object_set_new(cfg, "lora_dropout", json_real(ac.dropout));
    json_object_set_new(cfg, "target_modules", targets);
    json_object_set_new(cfg, "layers_to_transform", layers);
    json_object_set_new(cfg, "bias", json_string("none"));
    json_object_set_new(cfg, "fan_in_fan_out", json_false());
    json_object_set_new(cfg, "use_rslora", json_false());
    json_object_set_new(cfg, "use_dora", json_boolean(ac.type == TUNE_DORA));
    json_object_set_new(cfg, "init_lora_weights", json_true());
    json_object_set_new(cfg, "inference_mode", json_true());
    json_object_set_new(cfg, "modules_to_save", json_null());
    json_object_set_new(cfg, "revision", json_null());
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(cfg);
    path = path_join(out_dir, "adapter_config.json");
    int wrc = text && path ? atomic_write_file(path, text, strlen(text)) : -1;
    free(text);
    mem_free(path);
    if (wrc < 0) goto out;
    rc = 0;
out:
    mem_free(wt);
    mem_free(names);
    mem_free(mc);
    free_pairs(pairs, n);
    st_close(&ad);
    st_model_close(&base);
    return rc;
}

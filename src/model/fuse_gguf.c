/* fuse_gguf.c: `lmtune fuse` on a GGUF base (--model FILE.gguf): the fused
 * model written as one GGUF file, the natural output for llama.cpp. Every
 * tensor of the base is copied as stored (its type, its blocks), every
 * key-value too (the tokenizer, the chat template, general.*), except
 * general.alignment, which is the writer's 32. The matrices with an adapter
 * are dequantized (bit-identically to ggml's dequantize_row_*), merged in
 * fp32 as fuse.c merges (W + scale * B^T A^T, DoRA's row rescale) and stored
 * in the requested type (F16, BF16, F32, or Q8_0 by ggml's reference
 * quantizer; F16 when a row does not fit Q8_0's blocks of 32).
 *
 * Row order: lmtune trains in Hugging Face's order, and a llama-style file
 * holds q's and k's rows in GGML's (llama.cpp's converter permuted them per
 * head). The base rows are read through the model's row map into Hugging
 * Face's order, merged there with the adapter as it is, and written back to
 * the rows they came from.
 *
 * Everything is checked (the file, the adapter's names, shapes and dtypes)
 * before the output is opened; the output is a temporary file until it is
 * complete, fsynced and renamed (gguf_write). */
#include "model/gguf_export.h"
#include "base/alloc.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/gguf.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/ggml_quants.h"
#include "kernels/matmul.h"
#include "model/fuse.h"
#include "model/model.h"
#include "model/model_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One adapted matrix of the base. */
typedef struct {
    const GgufTensorInfo *w;    /* the base matrix: ne = {in, out} */
    const float *a, *b, *m;     /* lora_a (in, r), lora_b (r, out), DoRA's m (out) or NULL */
    const int32_t *row_map;     /* q/k of a permuted file: HF row r is stored row row_map[r]; NULL */
    int type;                   /* the output's ggml type */
} Merge;

typedef struct {
    GgufFile g;
    bool g_open;
    ModelConfig cfg;
    const GgufArch *arch;
    AdapterConfig ac;
    StFile ad;
    int32_t *q_map, *k_map;
    int *merge_of;              /* per base tensor: its Merge, or -1 (copied) */
    Merge *merges;
    size_t n_merges;
} GgufFuse;

static void fuse_close(GgufFuse *f) {
    mem_free(f->q_map);
    mem_free(f->k_map);
    mem_free(f->merge_of);
    mem_free(f->merges);
    st_close(&f->ad);
    if (f->g_open) gguf_close(&f->g);
    memset(f, 0, sizeof *f);
}

/* The output type of an adapted matrix of `cols` columns. */
static int out_type(int requested, int64_t cols) {
    return requested == GGML_TYPE_Q8_0 && cols % 32 != 0 ? GGML_TYPE_F16 : requested;
}

/* The adapter's tensor `key` of layer/projection, F32 of the given shape
 * (dim1 == 0: a vector), or NULL when absent; an error when present but
 * unfit. */
static int adapter_tensor(GgufFuse *f, bool *used, int layer, int p, const char *what, int64_t d0, int64_t d1,
                          const float **out) {
    char key[224];
    snprintf(key, sizeof key, "%slayers.%d.%s.%s", model_adapter_prefix(&f->cfg), layer, PROJ_KEYS[p], what);
    const StTensor *t = st_find(&f->ad, key);
    *out = NULL;
    if (!t) return 0;
    int nd = d1 ? 2 : 1;
    bool ok = t->dtype == DTYPE_F32 && t->ndim == nd && t->shape[0] == d0 && (nd == 1 || t->shape[1] == d1);
    if (!ok) {
        if (nd == 1)
            return error_set("%s: %s: adapter shape does not match model parameter shape (%lld) F32", f->ad.path,
                             key, (long long)d0);
        return error_set("%s: %s: adapter shape does not match model parameter shape (%lld, %lld) F32", f->ad.path,
                         key, (long long)d0, (long long)d1);
    }
    used[t - f->ad.tensors] = true;
    *out = t->data;
    return 0;
}

/* Opens and checks the base and the adapter, and finds the adapted matrices. */
static int fuse_open(GgufFuse *f, const char *model, const char *adapter_dir, int ggml_type) {
    memset(f, 0, sizeof *f);
    TRY(gguf_open(&f->g, model));
    f->g_open = true;
    TRY(gguf_model_config(&f->g, &f->cfg));
    f->arch = gguf_arch_for(f->cfg.model_type);
    if (!f->arch) return error_prefix("%s", model);
    TRY(gguf_check_model_tensors(&f->g, f->arch, &f->cfg));
    TRY(adapter_config_load(&f->ac, adapter_dir));
    if (f->ac.type == TUNE_FULL)
        return error_set("%s: a full fine-tune cannot be fused into the GGUF base %s: its weights are the whole "
                         "model (lmtune fine-tunes GGUF bases with LoRA or DoRA only)", adapter_dir, model);
    char *p = path_join(adapter_dir, "adapters.safetensors");
    TRY_PTR(p);
    int rc = st_open(&f->ad, p);
    mem_free(p);
    TRY(rc);
    TRY(gguf_row_maps(&f->cfg, f->arch, &f->q_map, &f->k_map));
    f->merge_of = mem_alloc((f->g.n_tensors + 1) * sizeof *f->merge_of);
    f->merges = mem_calloc(f->g.n_tensors + 1, sizeof *f->merges);
    bool *used = mem_calloc(f->ad.n_tensors + 1, sizeof *used);
    if (!f->merge_of || !f->merges || !used) {
        mem_free(used);
        return -1;
    }
    for (size_t i = 0; i < f->g.n_tensors; i++) f->merge_of[i] = -1;
    int r = f->ac.rank;
    rc = 0;
    for (int layer = 0; layer < f->cfg.num_hidden_layers && rc == 0; layer++) {
        for (int pj = 0; pj < PROJ_COUNT && rc == 0; pj++) {
            char hf[200];
            snprintf(hf, sizeof hf, "%slayers.%d.%s.weight", model_file_prefix(&f->cfg), layer, PROJ_KEYS[pj]);
            const GgufTensorInfo *w = gguf_model_tensor(&f->g, f->arch, hf);
            if (!w || w->n_dims != 2) continue;   /* an adapter tensor for it is reported below */
            int64_t in = w->ne[0], out = w->ne[1];
            Merge mg = {w, NULL, NULL, NULL, NULL, out_type(ggml_type, in)};
            rc = adapter_tensor(f, used, layer, pj, "lora_a", in, r, &mg.a);
            if (rc == 0) rc = adapter_tensor(f, used, layer, pj, "lora_b", r, out, &mg.b);
            if (rc == 0) rc = adapter_tensor(f, used, layer, pj, "m", out, 0, &mg.m);
            if (rc < 0) break;
            if (!mg.a && !mg.b) {
                if (mg.m) rc = error_set("%s: layer %d %s has a DoRA magnitude but no lora_a and lora_b", f->ad.path,
                                         layer, PROJ_KEYS[pj]);
                continue;
            }
            if (!mg.a || !mg.b) {
                rc = error_set("%s: layer %d %s has only one of lora_a and lora_b", f->ad.path, layer, PROJ_KEYS[pj]);
                break;
            }
            if (pj == PROJ_Q) mg.row_map = f->q_map;
            if (pj == PROJ_K) mg.row_map = f->k_map;
            f->merge_of[w - f->g.tensors] = (int)f->n_merges;
            f->merges[f->n_merges++] = mg;
        }
    }
    /* every adapter tensor must have found its matrix (MLX-LM's wording) */
    for (size_t i = 0; rc == 0 && i < f->ad.n_tensors; i++)
        if (!used[i])
            rc = error_set("Adapter at %s contains incompatible tensors:\n  %s: not an adapter parameter in the model "
                           "%s", adapter_dir, f->ad.tensors[i].name, model);
    mem_free(used);
    return rc;
}

/* Fills dst (the matrix in its output type) with the merged matrix. */
static int produce_merged(void *ctx, size_t i, void *dst, size_t bytes) {
    const GgufFuse *f = ctx;
    const Merge *mg = &f->merges[f->merge_of[i]];
    const GgufTensorInfo *w = mg->w;
    int64_t cols = w->ne[0], rows = w->ne[1];
    size_t in_rb = ggml_row_bytes(w->type, cols), out_rb = ggml_row_bytes(mg->type, cols);
    if ((size_t)rows * out_rb != bytes) return error_set("%s: %s: output size mismatch", f->g.name, w->name);
    float *x = mem_alloc((size_t)rows * (size_t)cols * sizeof *x);
    TRY_PTR(x);
    /* rows in Hugging Face's order, where the adapter's are */
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t s = mg->row_map ? mg->row_map[r] : r;
        ggml_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)s * in_rb, x + r * cols, cols);
    }
    fuse_merge_lora(x, mg->a, mg->b, mg->m, f->ac.scale, rows, cols, f->ac.rank);
    /* ... and back to the rows they were read from */
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t s = mg->row_map ? mg->row_map[r] : r;
        uint8_t *y = (uint8_t *)dst + (size_t)s * out_rb;
        const float *src = x + r * cols;
        switch (mg->type) {
        case GGML_TYPE_F32:
            memcpy(y, src, (size_t)cols * sizeof *src);
            break;
        case GGML_TYPE_F16:
            dtype_from_f32(y, DTYPE_F16, src, (size_t)cols);
            break;
        case GGML_TYPE_BF16:
            dtype_from_f32(y, DTYPE_BF16, src, (size_t)cols);
            break;
        default:
            ggml_quantize_row_q8_0(src, y, cols);
            break;
        }
    }
    mem_free(x);
    return 0;
}

static int check_type(int ggml_type) {
    if (ggml_type != GGML_TYPE_F32 && ggml_type != GGML_TYPE_F16 && ggml_type != GGML_TYPE_BF16
        && ggml_type != GGML_TYPE_Q8_0)
        return error_set("GGUF fuse: type %d is not one of f32, f16, bf16, q8_0", ggml_type);
    return 0;
}

/* The directory part of a path ("." for a bare name): heap. */
static char *dir_part(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? mem_strndup(path, (size_t)(slash - path) + (slash == path)) : mem_strdup(".");
}

/* The tokenizer files beside the base (lmtune reads a tokenizer.json beside
 * a GGUF file before the metadata) go beside the fused file, so lmtune
 * tokenizes for the fused model as it did for the base. */
static int copy_tokenizer_files(const char *model, const char *out_path) {
    char *src = dir_part(model), *dst = dir_part(out_path);
    char *rs = src ? realpath(src, NULL) : NULL, *rd = dst ? realpath(dst, NULL) : NULL;
    int rc = src && dst ? 0 : -1;
    static const char *names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
    for (size_t i = 0; rc == 0 && rs && rd && strcmp(rs, rd) != 0 && i < sizeof names / sizeof names[0]; i++) {
        char *a = path_join(src, names[i]), *b = path_join(dst, names[i]);
        char *buf = NULL;
        size_t n = 0;
        if (!a || !b) rc = -1;
        else if (file_exists(a) && (rc = file_read_all(a, 0, &buf, &n)) == 0) rc = atomic_write_file(b, buf, n);
        mem_free(buf);
        mem_free(a);
        mem_free(b);
    }
    free(rs);
    free(rd);
    mem_free(src);
    mem_free(dst);
    return rc;
}

int gguf_fuse_model(const char *model, const char *adapter_dir, const char *out_path, int ggml_type) {
    TRY(check_type(ggml_type));
    GgufFuse f;
    GgufKVOut *kv = NULL;
    GgufTensorOut *ts = NULL;
    int rc = fuse_open(&f, model, adapter_dir, ggml_type);
    if (rc < 0) goto out;
    rc = -1;
    kv = mem_calloc(f.g.n_kv + 2, sizeof *kv);
    ts = mem_calloc(f.g.n_tensors + 1, sizeof *ts);
    if (!kv || !ts) goto out;
    size_t n_kv = 0;
    for (size_t i = 0; i < f.g.n_kv; i++) {
        if (!strcmp(f.g.kv[i].key, "general.alignment")) {
            /* the writer aligns to 32 whatever the base did */
            kv[n_kv++] = (GgufKVOut){.key = "general.alignment", .type = GGUF_TYPE_UINT32,
                                     .u32 = GGUF_DEFAULT_ALIGNMENT};
            continue;
        }
        kv[n_kv++] = (GgufKVOut){.from = &f.g.kv[i]};
    }
    for (size_t i = 0; i < f.g.n_tensors; i++) {
        const GgufTensorInfo *t = &f.g.tensors[i];
        GgufTensorOut *o = &ts[i];
        *o = (GgufTensorOut){t->name, t->n_dims, {1, 1, 1, 1}, t->type, t->data, NULL, NULL, 0};
        for (int d = 0; d < t->n_dims; d++) o->ne[d] = (uint64_t)t->ne[d];
        if (f.merge_of[i] >= 0) {
            o->type = f.merges[f.merge_of[i]].type;
            o->data = NULL;
            o->produce = produce_merged;
            o->ctx = &f;
            o->index = i;
        }
    }
    char *dir = dir_part(out_path);
    rc = dir ? dir_ensure(dir) : -1;
    mem_free(dir);
    if (rc == 0) rc = gguf_write(out_path, kv, n_kv, ts, f.g.n_tensors);
out:
    mem_free(kv);
    mem_free(ts);
    fuse_close(&f);
    if (rc == 0) rc = copy_tokenizer_files(model, out_path);
    return rc;
}

/* What the parsed header of g holds on the heap: its keys, tensor infos and
 * names, and the string arrays' pointers (the vocabulary). */
static size_t header_bytes(const GgufFile *g) {
    size_t n = (g->n_kv + 1) * sizeof *g->kv + (g->n_tensors + 1) * sizeof *g->tensors;
    for (size_t i = 0; i < g->n_kv; i++) {
        n += strlen(g->kv[i].key) + 1;
        if (g->kv[i].type == GGUF_TYPE_ARRAY && g->kv[i].arr_type == GGUF_TYPE_STRING)
            n += (size_t)(g->kv[i].arr_n + 1) * sizeof(GgufStr);
    }
    for (size_t i = 0; i < g->n_tensors; i++) n += strlen(g->tensors[i].name) + 1;
    return n;
}

int gguf_fuse_plan(const char *model, const char *adapter_dir, int ggml_type, MemPlan *plan) {
    TRY(check_type(ggml_type));
    GgufFuse f;
    int rc = fuse_open(&f, model, adapter_dir, ggml_type);
    size_t f32 = 0, out = 0, n_shapes = 0;
    MatmulShape shapes[PROJ_COUNT];
    for (size_t i = 0; rc == 0 && i < f.n_merges; i++) {
        const Merge *mg = &f.merges[i];
        size_t rows = (size_t)mg->w->ne[1], cols = (size_t)mg->w->ne[0];
        if (rows * cols * sizeof(float) > f32) f32 = rows * cols * sizeof(float);
        if (rows * ggml_row_bytes(mg->type, (int64_t)cols) > out) out = rows * ggml_row_bytes(mg->type, (int64_t)cols);
        /* fuse_merge_lora's product: one primitive per shape */
        MatmulShape k = matmul_shape_gemm((int)rows, (int)cols, f.ac.rank, true, true, f.ac.scale, 1.0f);
        bool seen = false;
        for (size_t j = 0; j < n_shapes; j++) seen = seen || !memcmp(&shapes[j], &k, sizeof k);
        if (!seen && n_shapes < PROJ_COUNT) shapes[n_shapes++] = k;
    }
    char nm[96];
    if (rc == 0) {
        snprintf(nm, sizeof nm, "the largest of %zu merged matrices, in fp32", f.n_merges);
        rc = plan_note(plan, MEM_FROZEN_WEIGHTS, nm, f32, false);
    }
    if (rc == 0) rc = plan_note(plan, MEM_FROZEN_WEIGHTS, "its output in the GGUF type", out, false);
    /* every byte of the base is read through its mapping: copied or merged */
    if (rc == 0) rc = plan_note(plan, MEM_FROZEN_WEIGHTS, "base GGUF file (mapped, all read)", f.g.map.size, false);
    if (rc == 0) rc = plan_note(plan, MEM_FROZEN_SMALL, "GGUF header, parsed", header_bytes(&f.g), false);
    if (rc == 0) rc = plan_note(plan, MEM_TRAINABLE, "adapters.safetensors (mapped, all read)", f.ad.map.size, false);
    MatmulPlan lib;
    if (rc == 0) rc = matmul_plan(shapes, n_shapes, &lib);
    if (rc == 0) rc = plan_note(plan, MEM_LIBRARY, "oneDNN primitives of the merge", lib.held_bytes, false);
    if (rc == 0) rc = plan_note(plan, MEM_LIBRARY, "oneDNN scratchpad", lib.scratchpad_bytes, false);
    fuse_close(&f);
    return rc;
}

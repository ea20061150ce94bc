/* model_gguf.c: a GGUF file as the base model (`--model FILE.gguf`): its
 * config from the metadata (formats/gguf_arch.h), its tokenizer (a
 * tokenizer.json beside the file, else the metadata: tok_gguf.h), and its
 * matrices as FrozenWeight views of the file's own blocks (FW_GGML: any
 * ggml type, expanded tile by tile inside the products, never as a whole).
 *
 * Row order: for llama-style files llama.cpp's converter permuted the rows
 * of q and k (and of their biases) per head; lmtune runs RoPE in Hugging
 * Face's rotate-half order, so the views read q's and k's rows through a
 * row map (row r of the Hugging Face layout is stored row map[r]) and the
 * biases are put back when converted. The map is two small arrays of the
 * Model (q's and k's rows), made once at load. */
#include "model/model_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/gguf_arch.h"
#include "kernels/ggml_quants.h"
#include "tokenizer/tok_gguf.h"
#include "tokenizer/tokenizer.h"
#include <stdio.h>
#include <string.h>

bool model_is_gguf(const char *model) {
    size_t n = strlen(model);
    return n > 5 && !strcmp(model + n - 5, ".gguf") && !dir_exists(model);
}

int model_config_load(const char *model, ModelConfig *cfg) {
    if (model_is_gguf(model)) {
        GgufFile g;
        TRY(gguf_open(&g, model));
        int rc = gguf_model_config(&g, cfg);
        gguf_close(&g);
        return rc;
    }
    char *p = path_join(model, "config.json");
    TRY_PTR(p);
    int rc = hf_config_load(cfg, p);
    mem_free(p);
    return rc;
}

int model_config_resolve(const char *model, ModelConfig *cfg) {
    if (model_is_gguf(model)) return 0;
    StModel st;
    TRY(st_model_open(&st, model, true));
    int rc = model_tensors_resolve(cfg, &st);
    st_model_close(&st);
    return rc;
}

/* The directory a GGUF file is in ("." for a bare name). */
static char *dir_of(const char *file) {
    const char *slash = strrchr(file, '/');
    return slash ? mem_strndup(file, (size_t)(slash - file) + (slash == file)) : mem_strdup(".");
}

int model_tokenizer_load(Tokenizer **out, const char *model) {
    if (!model_is_gguf(model)) return tokenizer_load(out, model);
    char *dir = dir_of(model);
    TRY_PTR(dir);
    char *tj = path_join(dir, "tokenizer.json");
    int rc = -1;
    if (tj && file_exists(tj)) {
        rc = tokenizer_load(out, dir);
    } else if (tj) {
        GgufFile g;
        rc = gguf_open(&g, model);
        if (rc == 0) {
            rc = tokenizer_load_gguf(out, &g);
            gguf_close(&g);
        }
    }
    mem_free(tj);
    mem_free(dir);
    return rc;
}

int gguf_row_maps(const ModelConfig *cfg, const GgufArch *a, int32_t **q_map, int32_t **k_map) {
    *q_map = NULL;
    *k_map = NULL;
    if (!a->permute_qk) return 0;
    int D = cfg->head_dim;
    int qd = cfg->num_attention_heads * D;
    int kd = cfg->num_key_value_heads * D;
    int32_t *q = mem_alloc((size_t)qd * sizeof *q);
    int32_t *k = mem_alloc((size_t)kd * sizeof *k);
    if (!q || !k) {
        mem_free(q);
        mem_free(k);
        return -1;
    }
    /* stored row s holds Hugging Face row gguf_permuted_row(s): invert it */
    for (int s = 0; s < qd; s++) q[gguf_permuted_row(s, D)] = s;
    for (int s = 0; s < kd; s++) k[gguf_permuted_row(s, D)] = s;
    *q_map = q;
    *k_map = k;
    return 0;
}

int gguf_weights_view(const GgufFile *g, const GgufArch *a, const char *module, int rows, int cols,
                      const int32_t *row_map, DType compute, FrozenWeight *out) {
    char hf[200];
    snprintf(hf, sizeof hf, "%s.weight", module);
    const GgufTensorInfo *t = gguf_model_tensor(g, a, hf);
    if (!t || t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows)
        return error_set("%s: no tensor of shape (%d, %d) for %s", g->name, rows, cols, hf);
    *out = fw_ggml(t->data, t->type, rows, cols, row_map, compute);
    return 0;
}

int gguf_weights_summary(const GgufFile *g, const GgufArch *a, const ModelConfig *cfg, DType compute,
                         WeightsSummary *ws) {
    memset(ws, 0, sizeof *ws);
    Dims d;
    TRY(dims_of_weights(&d, cfg));
    ws->quantized = true;
    ws->gguf = true;
    ws->file_dtype = compute;
    for (int k = 0; k < weights_matrix_count(&d); k++) {
        char module[160];
        int rows;
        int cols;
        if (!weights_matrix(cfg, &d, k, module, sizeof module, &rows, &cols)) continue;
        FrozenWeight w;
        TRY(gguf_weights_view(g, a, module, rows, cols, NULL, compute, &w));
        size_t bytes = fw_storage_bytes(&w);
        if (k == 0) ws->embed_bytes = bytes;
        else if (k == 1) ws->lm_head_bytes = bytes;
        else ws->block_bytes += bytes;
        int bits = (int)(w.row_bytes * 8 / (size_t)cols);
        if (ws->bits_min == 0 || bits < ws->bits_min) ws->bits_min = bits;
        if (bits > ws->bits_max) ws->bits_max = bits;
        if (cols > ws->panel_cols_f32) ws->panel_cols_f32 = cols;
        if (cols > ws->panel_cols_bf16) ws->panel_cols_bf16 = cols;
    }
    return 0;
}

int gguf_model_summary(const char *model, const ModelConfig *cfg, DType compute, WeightsSummary *ws) {
    GgufFile g;
    TRY(gguf_open(&g, model));
    const GgufArch *a = gguf_arch_for(cfg->model_type);
    int rc = a ? gguf_check_model_tensors(&g, a, cfg) : -1;
    if (rc == 0) rc = gguf_weights_summary(&g, a, cfg, compute, ws);
    gguf_close(&g);
    return rc;
}

int gguf_frozen_views(const char *model, const ModelConfig *cfg, DType run, FrozenWeight **out, int *n) {
    *out = NULL;
    *n = 0;
    GgufFile g;
    TRY(gguf_open(&g, model));
    const GgufArch *a = gguf_arch_for(cfg->model_type);
    Dims d;
    int rc = a ? dims_of_weights(&d, cfg) : -1;
    int count = rc == 0 ? weights_matrix_count(&d) : 0;
    FrozenWeight *v = rc == 0 ? mem_calloc((size_t)count, sizeof *v) : NULL;
    if (rc == 0 && !v) rc = -1;
    for (int k = 0; rc == 0 && k < count; k++) {
        if (k == 1 && cfg->tie_word_embeddings) {
            v[1] = v[0];
            continue;
        }
        char module[160];
        int rows, cols;
        if (!weights_matrix(cfg, &d, k, module, sizeof module, &rows, &cols)) continue;
        rc = gguf_weights_view(&g, a, module, rows, cols, NULL, run, &v[k]);
        v[k].data = NULL;   /* the mapping goes with g: shapes and formats only */
    }
    gguf_close(&g);
    if (rc < 0) {
        mem_free(v);
        return -1;
    }
    *out = v;
    *n = count;
    return 0;
}

int gguf_tensor_f32(const GgufFile *g, const GgufArch *a, const char *hf_name, const int32_t *row_map,
                    int64_t rows, int64_t cols, float *dst) {
    const GgufTensorInfo *t = gguf_model_tensor(g, a, hf_name);
    if (!t || t->nelem != rows * cols) return error_set("%s: tensor for %s is missing", g->name, hf_name);
    size_t rb = ggml_row_bytes(t->type, t->ne[0]);
    if (t->n_dims == 1) {
        /* a vector (norm or bias): its elements are the rows */
        float *tmp = row_map ? mem_alloc((size_t)rows * sizeof *tmp) : dst;
        TRY_PTR(tmp);
        ggml_dequantize_row(t->type, t->data, tmp, t->ne[0]);
        if (row_map) {
            for (int64_t r = 0; r < rows; r++) dst[r] = tmp[row_map[r]];
            mem_free(tmp);
        }
        return 0;
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t s = row_map ? row_map[r] : r;
        ggml_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)s * rb, dst + r * cols, cols);
    }
    return 0;
}

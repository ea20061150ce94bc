/* model_weights.c: the frozen matrices of a model directory as they are
 * stored: which are MLX-quantized (config.json's quantization and the
 * PATH.scales tensors, formats/mlx_quant.h) and which plain, summarised
 * for the planner from the safetensors headers alone (model_weights_summary),
 * and the same walk on the real files when a model is loaded. */
#include "model/model_internal.h"
#include "formats/model_tensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "kernels/matmul.h"
#include <stdio.h>
#include <string.h>

/* Matrix k of a model: 0 the embedding, 1 the LM head, then PROJ_COUNT slots
 * per block (a block has only some of them: layer_projs). */
int weights_matrix_count(const Dims *d) { return 2 + PROJ_COUNT * d->L; }

bool weights_matrix(const ModelConfig *cfg, const Dims *d, int k, char *module, size_t cap, int *rows, int *cols) {
    if (k < 2) {
        if (k == 0) hf_embed_module(cfg, module, cap);
        else hf_head_module(cfg, module, cap);
        *rows = d->V;
        *cols = d->C;
        return k == 0 || !cfg->tie_word_embeddings;
    }
    int l = (k - 2) / PROJ_COUNT;
    int p = (k - 2) % PROJ_COUNT;
    if (!(layer_projs(cfg, l) >> p & 1u)) return false;
    layer_name(module, cap, cfg->prefix, l, PROJ_KEYS[p]);
    proj_shape(d, p, cols, rows);
    return true;
}

DType weights_compute(const FrozenWeight *w, DType run) {
    return run == DTYPE_BF16 && w->dtype == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32;
}

int weights_view(const StModel *st, const QuantConfig *qc, const char *module, int rows, int cols, DType run,
                 FrozenWeight *out, bool *quantized) {
    QuantParams qp;
    int q = quant_module(qc, st, module, &qp);
    TRY(q);
    *quantized = q == 1;
    char name[200];
    if (q == 1) {
        QuantTensors qt;
        TRY(quant_module_tensors(st, module, rows, cols, &qp, &qt));
        *out = fw_affine(qt.codes->data, qt.scales->data, qt.biases->data, qt.scales->dtype, qp.bits, qp.group,
                         rows, cols);
        out->compute = weights_compute(out, run);
        return 0;
    }
    snprintf(name, sizeof name, "%s.weight", module);
    int64_t shape[2] = {rows, cols};
    const StTensor *t;
    TRY(st_model_expect(st, name, 2, shape, &t));
    *out = fw_plain(t->data, t->dtype, rows, cols, DTYPE_F32);
    out->compute = weights_compute(out, run);
    return 0;
}

static int summarise(const StModel *st, const ModelConfig *cfg, const QuantConfig *qc, WeightsSummary *ws) {
    memset(ws, 0, sizeof *ws);
    Dims d;
    TRY(dims_of_weights(&d, cfg));
    ws->bits_min = 32;
    DType plain = DTYPE_COUNT, scales = DTYPE_COUNT;
    for (int k = 0; k < weights_matrix_count(&d); k++) {
        char module[160];
        int rows, cols;
        if (!weights_matrix(cfg, &d, k, module, sizeof module, &rows, &cols)) continue;
        FrozenWeight w;
        bool q;
        TRY(weights_view(st, qc, module, rows, cols, DTYPE_F32, &w, &q));
        size_t bytes = fw_storage_bytes(&w);
        if (k == 0) ws->embed_bytes = bytes;
        else if (k == 1) ws->lm_head_bytes = bytes;
        else ws->block_bytes += bytes;
        if (q) {
            ws->quantized = true;
            if (scales == DTYPE_COUNT) scales = w.dtype;
            if (w.bits < ws->bits_min) ws->bits_min = w.bits;
            if (w.bits > ws->bits_max) ws->bits_max = w.bits;
        } else if (plain == DTYPE_COUNT) {
            plain = w.dtype;
        }
        if (w.dtype == DTYPE_BF16) ws->bf16_values = true;
        if (!fw_is_direct(&w) && cols > ws->panel_cols_f32) ws->panel_cols_f32 = cols;
        w.compute = weights_compute(&w, DTYPE_BF16);
        if (!fw_is_direct(&w) && cols > ws->panel_cols_bf16) ws->panel_cols_bf16 = cols;
    }
    if (!ws->quantized) ws->bits_min = 0;
    ws->file_dtype = ws->quantized ? scales : plain;
    return 0;
}

/* A model directory's quantization config and safetensors headers (both
 * released by the caller on success). */
static int open_stored(const char *model_dir, QuantConfig *qc, StModel *st) {
    char *cfg_path = path_join(model_dir, "config.json");
    TRY_PTR(cfg_path);
    int rc = quant_config_load(qc, cfg_path);
    mem_free(cfg_path);
    TRY(rc);
    if (st_model_open(st, model_dir, true) < 0) {
        quant_config_free(qc);
        return -1;
    }
    return 0;
}

int model_weights_summary(const char *model_dir, const ModelConfig *cfg, WeightsSummary *ws) {
    if (model_is_gguf(model_dir)) return gguf_model_summary(model_dir, cfg, DTYPE_F32, ws);
    QuantConfig qc;
    StModel st;
    TRY(open_stored(model_dir, &qc, &st));
    /* where the text weights sit (a multimodal gemma3's or a Qwen3.5 directory's prefix) */
    ModelConfig *rcfg = mem_alloc(sizeof *rcfg);
    int rc = rcfg ? 0 : -1;
    if (rc == 0) {
        *rcfg = *cfg;
        rc = model_tensors_resolve(rcfg, &st);
    }
    if (rc == 0) rc = summarise(&st, rcfg, &qc, ws);
    mem_free(rcfg);
    st_model_close(&st);
    quant_config_free(&qc);
    return rc;
}

int weights_summary_open(const StModel *st, const ModelConfig *cfg, const QuantConfig *qc, WeightsSummary *ws) {
    return summarise(st, cfg, qc, ws);
}

/* A plain model as config.json describes it (no headers): the summary
 * model_layout and the tests' plans assume. */
void weights_summary_plain(WeightsSummary *ws, DType file_dtype) {
    memset(ws, 0, sizeof *ws);
    ws->file_dtype = file_dtype;
}

int model_frozen_views(const char *model_dir, const ModelConfig *cfg, DType run, FrozenWeight **out, int *n) {
    *out = NULL;
    *n = 0;
    if (model_is_gguf(model_dir)) return gguf_frozen_views(model_dir, cfg, run, out, n);
    QuantConfig qc;
    StModel st;
    TRY(open_stored(model_dir, &qc, &st));
    Dims d;
    int rc = dims_of_weights(&d, cfg);
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
        if (!weights_matrix(cfg, &d, k, module, sizeof module, &rows, &cols)) continue;   /* not in this block kind */
        bool q;
        rc = weights_view(&st, &qc, module, rows, cols, run, &v[k], &q);
    }
    st_model_close(&st);
    quant_config_free(&qc);
    if (rc < 0) {
        mem_free(v);
        return -1;
    }
    *out = v;
    *n = count;
    return 0;
}

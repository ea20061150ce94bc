/* model_dims.c: the dimensions of a run (Dims), from config.json, the run's
 * spec and the summary of its weight files: the shapes of every buffer the
 * layout walk (model_layout.c) carves, the rows of an LM-head chunk, the
 * Gated DeltaNet's sizes, whether matrices are converted at load, whether
 * products run in bf16 and how wide the expansion panels are. */
#include "model/model_internal.h"
#include "base/error.h"
#include "formats/model_tensors.h"
#include <limits.h>
#include <omp.h>
#include <string.h>

static int imax(int a, int b) { return a > b ? a : b; }

/* 256 rows: oneDNN reaches ~97 (forward) and ~89 (dinp, K = V) GFLOP/s per
 * core there, against ~91 and ~77 at 128 rows. Large vocabularies hold the
 * (chunk, V) logits to 64 MiB instead (gemma's 262k tokens: 64 rows, 64 MiB
 * rather than 256 MiB), at least 64 rows. */
static int lmhead_rows(int V) {
    const size_t budget = (size_t)16 << 20; /* floats */
    int rows = 256;
    if ((size_t)rows * (size_t)V > budget) rows = (int)(budget / (size_t)V);
    return rows < 64 ? 64 : rows;
}

unsigned layer_projs(const ModelConfig *cfg, int l) {
    return layer_gdn(cfg, l) ? PROJ_GDN_BLOCK : hf_block_projections(cfg);
}

static int dims_gdn(Dims *d, const ModelConfig *cfg, const ModelSpec *spec) {
    const Qwen35Config *q = &cfg->q35;
    d->q35 = true;
    d->attn_gate = true;
    /* counted here, not taken from q->n_linear: a preset or a cut model may not have it */
    d->n_gdn = 0;
    for (int l = 0; l < d->L && l < Q35_MAX_LAYERS; l++) d->n_gdn += q->linear[l] != 0;
    d->n_attn = d->L - d->n_gdn;
    GdnDims *g = &d->g;
    g->Hk = q->k_heads;
    g->Hv = q->v_heads;
    g->Dk = q->k_dim;
    g->Dv = q->v_dim;
    g->K = q->conv_kernel;
    g->Kd = g->Hk * g->Dk;
    g->Vd = g->Hv * g->Dv;
    g->CC = 2 * g->Kd + g->Vd;
    if (g->Hk <= 0 || g->Hv % g->Hk || g->K < 1 || g->K > 16 || d->rd < 2 || d->rd > d->D || d->rd % 2)
        return error_set("model: inconsistent Qwen3.5 dimensions (load config.json with hf_config_load)");
    if (spec->gdn_chunk < 0 || spec->gdn_chunk > 1024)
        return error_set("model: Gated DeltaNet chunk %d not in [1, 1024]", spec->gdn_chunk);
    g->chunk = spec->gdn_chunk > 0 ? spec->gdn_chunk : 64;
    g->nchunk = d->T > 0 ? (d->T + g->chunk - 1) / g->chunk : 0;
    g->threads = omp_get_max_threads();
    return 0;
}

int dims_init(Dims *d, const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype) {
    memset(d, 0, sizeof *d);
    d->C = cfg->hidden_size;
    d->F = cfg->intermediate_size;
    d->L = cfg->num_hidden_layers;
    d->H = cfg->num_attention_heads;
    d->KVH = cfg->num_key_value_heads;
    d->D = cfg->head_dim;
    d->V = cfg->vocab_size;
    if (d->C <= 0 || d->F <= 0 || d->L <= 0 || d->H <= 0 || d->KVH <= 0 || d->D <= 0 || d->V <= 0)
        return error_set("model: config has a non-positive dimension");
    if (d->L > HF_MAX_LAYERS) return error_set("model: %d layers (at most %d)", d->L, HF_MAX_LAYERS);
    if (d->H % d->KVH)
        return error_set("model: num_attention_heads %d is not a multiple of num_key_value_heads %d", d->H, d->KVH);
    if (d->D % 2) return error_set("model: head_dim %d is odd (RoPE needs pairs)", d->D);
    d->rd = cfg->rotary_dim > 0 ? cfg->rotary_dim : d->D;
    if (d->rd % 2 || d->rd > d->D) return error_set("model: %d rotary dims of a %d-dim head", d->rd, d->D);
    d->QD = d->H * d->D;
    d->KVD = d->KVH * d->D;
    d->QKVD = d->QD + 2 * d->KVD;
    d->qk_norm = cfg->qk_norm;
    d->bias = cfg->attention_bias;
    d->sandwich = cfg->sandwich_norms;
    d->fused_qkv = cfg->fused_qkv;
    d->gu_ld = cfg->fused_gate_up ? 2 * d->F : d->F;
    d->act = cfg->hidden_act == HIDDEN_ACT_GELU_TANH ? GLU_GELU_TANH : GLU_SILU;
    d->norm_off = cfg->norm_plus_one ? 1.0f : 0.0f;
    d->projs = hf_block_projections(cfg);
    d->n_rope = cfg->rope_local_theta > 0 || cfg->rope_scaling.type == ROPE_SCALING_LONGROPE ? 2 : 1;
    if (spec->max_rows < 0 || spec->max_tokens < 0 || spec->kv_cache_tokens < 0)
        return error_set("model: negative batch shape");
    d->B = spec->max_rows;
    d->T = spec->max_tokens;
    size_t n = (size_t)d->B * (size_t)d->T;
    if (n > (1u << 30)) return error_set("model: batch of %zu tokens is too large", n);
    d->N = (int)n;
    /* the attention backward's key segments on this run's threads (the
     * workspace holds a dq partial per segment after the first) */
    d->attn_splits = attention_key_splits(d->B, d->KVH, omp_get_max_threads());
    if (cfg->q35.on) TRY(dims_gdn(d, cfg, spec));
    else d->n_attn = d->L;
    for (int p = 0; p < PROJ_COUNT; p++) {
        int64_t out, in;
        hf_proj_shape(cfg, p, &out, &in);
        if (out > INT_MAX || in > INT_MAX)
            return error_set("model: %s has %lld x %lld features (at most %d)", PROJ_KEYS[p], (long long)out,
                             (long long)in, INT_MAX);
        d->proj_out[p] = (int)out;
        d->proj_in[p] = (int)in;
    }
    bool tuned = spec->type != TUNE_NONE;
    int nl = spec->num_layers;
    if (tuned) {
        if (nl > d->L) return error_set("model: --num-layers %d is more than the model's %d layers", nl, d->L);
        if (nl <= 0) nl = d->L;
        d->lo = d->L - nl;
    } else {
        d->lo = d->L;
    }
    d->n_train = d->L - d->lo;
    if (spec->type == TUNE_LORA || spec->type == TUNE_DORA) {
        if (spec->lora_rank <= 0) return error_set("model: LoRA rank must be positive (got %d)", spec->lora_rank);
        if ((spec->lora_keys & PROJ_ALL) == 0) return error_set("model: no LoRA keys selected");
        unsigned projs = 0;
        for (int l = d->lo; l < d->L; l++) projs |= layer_projs(cfg, l);
        if ((spec->lora_keys & projs) == 0) {
            char have[320] = "";
            FOR_EACH_PROJ(p, projs)
                snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", have[0] ? ", " : "", PROJ_KEYS[p]);
            return error_set("model: none of the LoRA keys is a projection of a %s block (its keys: %s)",
                             cfg->model_type, have);
        }
        d->r = spec->lora_rank;
    }
    d->train = tuned && spec->training;
    if (d->train && d->N == 0) return error_set("model: training needs max_rows and max_tokens > 0");
    if (spec->lora_dropout < 0 || spec->lora_dropout >= 1)
        return error_set("model: lora dropout %g not in [0, 1)", spec->lora_dropout);
    d->dropout = d->train && d->r > 0 && spec->lora_dropout > 0;
    d->chunk = spec->lmhead_chunk > 0 ? spec->lmhead_chunk : lmhead_rows(d->V);
    if (d->N > 0 && d->chunk > d->N) d->chunk = d->N;
    if (d->chunk < 1) d->chunk = 1;
    d->kv_T = spec->kv_cache_tokens;
    d->dec_rows = d->kv_T > 0 ? (d->kv_T < 128 ? d->kv_T : 128) : 0;
    if (spec->max_positions < 0 || (spec->max_positions > d->kv_T && d->kv_T <= KV_KEEP))
        return error_set("model: a rotating KV cache needs more than %d positions (got %d)", KV_KEEP, d->kv_T);
    d->max_pos = imax(d->kv_T, spec->max_positions);
    d->rope_T = imax(d->T, d->max_pos);
    if (spec->weight_dtype != DTYPE_F32 && spec->weight_dtype != DTYPE_BF16)
        return error_set("model: weight dtype must be F32 or BF16 (got %s)", dtype_name(spec->weight_dtype));
    if (file_dtype != DTYPE_F32 && file_dtype != DTYPE_BF16 && file_dtype != DTYPE_F16)
        return error_set("model: weights of dtype %s are not supported (F32, BF16, F16)", dtype_name(file_dtype));
    d->file_dtype = file_dtype;
    d->run_dtype = spec->weight_dtype;
    /* Frozen matrices stay in the file's dtype, except where the products
     * run in bf16 and the file's values are not bf16 numbers: F32 or F16
     * matrices are then rounded to bf16 once, at load (--weights-dtype bf16
     * halves F32 weights). 16-bit matrices in fp32 products stay 16-bit and
     * are expanded panel by panel inside the products (dims_apply_summary). */
    d->convert = spec->weight_dtype == DTYPE_BF16 && file_dtype != DTYPE_BF16;
    return 0;
}

int dims_of_weights(Dims *d, const ModelConfig *cfg) {
    ModelSpec none = {0};
    none.type = TUNE_NONE;
    none.weight_dtype = DTYPE_F32;
    return dims_init(d, cfg, &none, DTYPE_F32);
}

static int max_in_features(const Dims *d) { return imax(imax(d->C, d->QD), d->F); }

int dims_apply_summary(Dims *d, const ModelSpec *spec, const WeightsSummary *ws) {
    bool bf16_run = d->run_dtype == DTYPE_BF16;
    if (!ws->quantized) {
        d->bf16_compute = bf16_run;
        /* 16-bit weights in fp32 products: panels as wide as the widest input */
        d->panel_cols = !bf16_run && d->file_dtype != DTYPE_F32 ? max_in_features(d) : 0;
        return 0;
    }
    if (spec->type == TUNE_FULL && ws->gguf)
        return error_set("--fine-tune-type full: a GGUF base's matrices are used as the file stores them; use lora "
                         "or dora, or a Hugging Face model directory");
    if (spec->type == TUNE_FULL)
        return error_set("--fine-tune-type full: the model is quantized and its packed weights cannot be trained "
                         "(MLX-LM would train only the norms and biases); use lora or dora, or a full-precision "
                         "model (lmtune convert -d)");
    d->quantized = true;
    d->convert = false;
    /* a GGUF's blocks expand to the compute type the run asks for */
    d->bf16_compute = bf16_run && (ws->bf16_values || ws->gguf);
    d->panel_cols = bf16_run ? ws->panel_cols_bf16 : ws->panel_cols_f32;
    return 0;
}

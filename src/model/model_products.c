/* model_products.c: every matrix product the model will run for a list of
 * batch shapes, listed without running anything: forward, backward and
 * recompute of each block (frozen, LoRA/DoRA-adapted or fully trainable),
 * the chunked LM head, DoRA's row norms and KV-cache decoding. Each product
 * is reported with its oneDNN shape (matmul.h's matmul_shape_*, the same
 * functions the products themselves key their primitives with), the block
 * it belongs to and the phase of the step, so the memory planner counts the
 * primitives a run creates and the scratchpad they need, and the recompute
 * planner costs each block in FLOPs. The sequence mirrors block.c, lora.c,
 * lmhead_xent.c and decode.c call for call; tests/model/test_products.c
 * checks it against the primitives a real run creates. */
#include "model/model_internal.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "base/alloc.h"
#include "base/error.h"
#include <string.h>

typedef struct {
    const Model *m;
    const FrozenWeight *views;  /* stored matrices (quantized models), or NULL */
    ProductSink sink;
    void *ctx;
} Emit;

static void put(const Emit *e, MatmulShape s, int block, ProductPhase phase) {
    e->sink(e->ctx, &s, block, phase);
}

/* The frozen products go through frozen_weight.c: its shape functions
 * report each product, tagged here with the block and the phase. */
typedef struct {
    const Emit *e;
    int block;
    ProductPhase phase;
} Tagged;

static void tagged(void *ctx, const MatmulShape *s) {
    const Tagged *t = ctx;
    t->e->sink(t->e->ctx, s, t->block, t->phase);
}

/* Matrix k (0 embedding, 1 LM head, 2 + 7 l + p) when it is not multiplied
 * directly (packed or expanded in panels), else NULL. */
static const FrozenWeight *panelled(const Emit *e, int k) {
    if (!e->views || fw_is_direct(&e->views[k])) return NULL;
    return &e->views[k];
}

/* fw_linear_forward of frozen matrix k: out (N, out) = x (N, in) W^T. */
static void frozen_forward(const Emit *e, int k, int N, int in, int od, bool bias, bool have_x, int block,
                           ProductPhase ph) {
    const FrozenWeight *w = panelled(e, k);
    if (!w) {
        /* a few rows by plain bf16 weights: the bf16 GEMV, no oneDNN product */
        if (N <= FW_GEMV_MAX_ROWS && e->m->d.run_dtype == DTYPE_BF16) return;
        put(e, matmul_shape_linear_forward(N, in, od, e->m->d.run_dtype, bias), block, ph);
        return;
    }
    Tagged t = {e, block, ph};
    fw_forward_shapes(w, N, bias, have_x, tagged, &t);
}

/* fw_linear_backward_dinp of frozen matrix k. */
static void frozen_dinp(const Emit *e, int k, int N, int in, int od, float beta, size_t ld16, int block,
                        ProductPhase ph) {
    const FrozenWeight *w = panelled(e, k);
    if (!w) {
        DType wt = e->m->d.run_dtype;
        put(e, ld16 && wt == DTYPE_BF16 ? matmul_shape_dinp_bf16_dout(ld16, N, in, od, beta)
                                        : matmul_shape_linear_dinp(N, in, od, wt, beta), block, ph);
        return;
    }
    Tagged t = {e, block, ph};
    fw_dinp_shapes(w, N, beta, ld16, tagged, &t);
}

static int matrix_of(int l, int p) { return 2 + PROJ_COUNT * l + p; }

/* proj_forward_base: the base product (its bias, unless DoRA adapts p). */
static void emit_proj_base(const Emit *e, int l, int p, int N, ProductPhase ph) {
    const Model *m = e->m;
    const Dims *d = &m->d;
    int in, od;
    proj_shape(d, p, &in, &od);
    bool dora = (m->blocks[l].adapted >> p & 1u) && m->spec.type == TUNE_DORA;
    bool bias = d->bias && p <= PROJ_V && !dora;
    if (block_is_full(m, l)) put(e, matmul_shape_linear_forward(N, in, od, DTYPE_F32, bias), l, ph);
    else frozen_forward(e, matrix_of(l, p), N, in, od, bias, true, l, ph);
}

/* proj_forward: the base product (unless skip_base) and the LoRA branch. */
static void emit_proj_forward(const Emit *e, int l, int p, int N, bool skip_base, ProductPhase ph) {
    const Model *m = e->m;
    const Dims *d = &m->d;
    int in, od;
    proj_shape(d, p, &in, &od);
    if (!skip_base) emit_proj_base(e, l, p, N, ph);
    if (!(m->blocks[l].adapted >> p & 1u)) return;
    put(e, matmul_shape_gemm(N, d->r, in, false, false, 1.0f, 0.0f), l, ph);
    if (!skip_base) put(e, matmul_shape_gemm(N, od, d->r, false, false, m->spec.lora_scale, 1.0f), l, ph);
}

/* lora_group (lora.c) of block l for the projections of mask */
static unsigned emit_group(const Emit *e, int l, unsigned mask, int N) {
    if (!lora_merge_ok(&e->m->d, N)) return 0;
    unsigned g = e->m->blocks[l].adapted & mask;
    return __builtin_popcount(g) >= 2 ? g : 0;
}

static const unsigned QKV_MASK = 1u << PROJ_Q | 1u << PROJ_K | 1u << PROJ_V;
static const unsigned GU_MASK = 1u << PROJ_GATE | 1u << PROJ_UP;

/* lora_group_forward: the merged A product, then each member's B product. */
static void emit_group_forward(const Emit *e, int l, unsigned grp, int N, ProductPhase ph) {
    const Dims *d = &e->m->d;
    int in, od;
    proj_shape(d, __builtin_ctz(grp), &in, &od);
    put(e, matmul_shape_gemm(N, d->r * __builtin_popcount(grp), in, false, false, 1.0f, 0.0f), l, ph);
    FOR_EACH_PROJ(p, grp) {
        proj_shape(d, p, &in, &od);
        put(e, matmul_shape_gemm(N, od, d->r, false, false, e->m->spec.lora_scale, 1.0f), l, ph);
    }
}

/* block_forward (recompute: the down projection's base product is skipped). */
static void emit_block_forward(const Emit *e, int l, int N, bool recompute) {
    ProductPhase ph = recompute ? PRODUCT_RECOMPUTE : PRODUCT_FORWARD;
    unsigned projs = layer_projs(&e->m->cfg, l);   /* the block kind's projections (Qwen3.5) */
    unsigned grp = 0;
    if (!(projs >> PROJ_QKV & 1u)) grp |= emit_group(e, l, projs & QKV_MASK, N);
    if (!(projs >> PROJ_GATE_UP & 1u)) grp |= emit_group(e, l, projs & GU_MASK, N);
    for (int p = 0; p < PROJ_COUNT; p++) {
        if (!(projs >> p & 1u)) continue;
        if (grp >> p & 1u) emit_proj_base(e, l, p, N, ph);
        else emit_proj_forward(e, l, p, N, recompute && p == PROJ_DOWN, ph);
        if (p == PROJ_V && (grp & QKV_MASK)) emit_group_forward(e, l, grp & QKV_MASK, N, ph);
        if (p == PROJ_UP && (grp & GU_MASK)) emit_group_forward(e, l, grp & GU_MASK, N, ph);
    }
}

/* proj_backward with dx (NULL or not) and its first-contribution flag;
 * grp: p is a member of that merged group (proj_backward_grouped). */
static void emit_proj_backward_g(const Emit *e, int l, int p, int N, bool dx, bool dx_set, unsigned grp);
static void emit_proj_backward(const Emit *e, int l, int p, int N, bool dx, bool dx_set) {
    emit_proj_backward_g(e, l, p, N, dx, dx_set, 0);
}

/* the members' proj_backward_grouped, then lora_group_backward */
static void emit_group_backward(const Emit *e, int l, unsigned grp, int N, bool dx) {
    const Dims *d = &e->m->d;
    bool first = true;
    FOR_EACH_PROJ(p, grp) {
        emit_proj_backward_g(e, l, p, N, dx, first, grp);
        first = false;
    }
    int in, od, gr = d->r * __builtin_popcount(grp);
    proj_shape(d, __builtin_ctz(grp), &in, &od);
    put(e, matmul_shape_gemm(gr, in, N, true, false, 1.0f, 0.0f), l, PRODUCT_BACKWARD);
    if (dx) put(e, matmul_shape_gemm(N, in, gr, false, true, 1.0f, 1.0f), l, PRODUCT_BACKWARD);
}

static void emit_proj_backward_g(const Emit *e, int l, int p, int N, bool dx, bool dx_set, unsigned grp) {
    const Model *m = e->m;
    const Dims *d = &m->d;
    const BlockParams *bp = &m->blocks[l];
    int in, od;
    proj_shape(d, p, &in, &od);
    bool adapted = bp->adapted >> p & 1u;
    bool full = block_is_full(m, l);
    float scale = m->spec.lora_scale;
    if (adapted && m->spec.type == TUNE_DORA) {
        frozen_forward(e, matrix_of(l, p), N, in, od, false, true, l, PRODUCT_BACKWARD);
        put(e, matmul_shape_gemm(N, od, d->r, false, false, scale, 1.0f), l, PRODUCT_BACKWARD);
    }
    if (full) {
        /* trainable weight: one call, dx (when wanted) and dW */
        if (dx) put(e, matmul_shape_linear_dinp(N, in, od, DTYPE_F32, dx_set ? 0.0f : 1.0f), l, PRODUCT_BACKWARD);
        put(e, matmul_shape_linear_dweight(N, in, od), l, PRODUCT_BACKWARD);
    } else if (dx) {
        frozen_dinp(e, matrix_of(l, p), N, in, od, dx_set ? 0.0f : 1.0f, 0, l, PRODUCT_BACKWARD);
    }
    if (!adapted) return;
    int r = d->r;
    put(e, matmul_shape_gemm(r, od, N, true, false, scale, 1.0f), l, PRODUCT_BACKWARD);
    put(e, matmul_shape_gemm(N, r, od, false, true, scale, 0.0f), l, PRODUCT_BACKWARD);
    if (grp) return;
    put(e, matmul_shape_gemm(r, in, N, true, false, 1.0f, 0.0f), l, PRODUCT_BACKWARD);
    if (dx) put(e, matmul_shape_gemm(N, in, r, false, true, 1.0f, d->dropout ? 0.0f : 1.0f), l, PRODUCT_BACKWARD);
}

/* block_backward's order and flags (block.c, block_gdn.c): the MLP, then
 * the mixer; fused projections (phi3's gate_up_proj and qkv_proj) in place
 * of their parts. */
static void emit_block_backward(const Emit *e, int l, int N) {
    const Model *m = e->m;
    unsigned projs = m->blocks[l].projs;
    bool need_dx = l > m->d.lo || block_is_full(m, l);
    emit_proj_backward(e, l, PROJ_DOWN, N, true, true);
    if (projs >> PROJ_GATE_UP & 1u) {
        emit_proj_backward(e, l, PROJ_GATE_UP, N, true, true);
    } else {
        unsigned grp = emit_group(e, l, layer_projs(&m->cfg, l) & GU_MASK, N);
        if (grp) {
            emit_group_backward(e, l, grp, N, true);
        } else {
            emit_proj_backward(e, l, PROJ_GATE, N, true, true);
            emit_proj_backward(e, l, PROJ_UP, N, true, false);
        }
    }
    if (m->blocks[l].gdn) {
        emit_proj_backward(e, l, PROJ_LOUT, N, true, true);
        emit_proj_backward(e, l, PROJ_LQKV, N, need_dx, true);
        emit_proj_backward(e, l, PROJ_LZ, N, need_dx, false);
        emit_proj_backward(e, l, PROJ_LB, N, need_dx, false);
        emit_proj_backward(e, l, PROJ_LA, N, need_dx, false);
        return;
    }
    emit_proj_backward(e, l, PROJ_O, N, true, true);
    if (projs >> PROJ_QKV & 1u) {
        emit_proj_backward(e, l, PROJ_QKV, N, need_dx, true);
        return;
    }
    unsigned grp = emit_group(e, l, layer_projs(&m->cfg, l) & QKV_MASK, N);
    if (grp) {
        emit_group_backward(e, l, grp, N, need_dx);
        return;
    }
    emit_proj_backward(e, l, PROJ_Q, N, need_dx, true);
    emit_proj_backward(e, l, PROJ_K, N, need_dx, false);
    emit_proj_backward(e, l, PROJ_V, N, need_dx, false);
}

/* The LM head's products run in bf16 (its compute type). */
static bool lmhead_bf16(const Emit *e) {
    if (e->views) return e->views[1].compute == DTYPE_BF16;
    return e->m->d.run_dtype == DTYPE_BF16;
}

/* lmhead_xent over `rows` counted positions: rows / chunk full chunks and
 * the remainder (padded to lmhead_product_rows), each product once per
 * chunk (sinks that sum FLOPs see every one). */
static void emit_lmhead(const Emit *e, long rows, bool grad) {
    const Dims *d = &e->m->d;
    int chunk = d->chunk;
    long full = rows / chunk, rest = rows % chunk;
    for (long c = 0; c <= full; c++) {
        long counted = c < full ? chunk : rest;
        if (counted <= 0) continue;
        int n = lmhead_product_rows((int)counted, chunk);
        bool bf = lmhead_bf16(e);
        frozen_forward(e, 1, n, d->C, d->V, false, !bf, -1, PRODUCT_LMHEAD);
        if (!grad) continue;
        /* lmhead_xent's transposed input gradient: an fp32 weight multiplied as stored (not quantized: unless
         * 16-bit weights are widened in fp32 products, d->panel_cols) */
        bool tr = e->views ? lmhead_dinp_transposed(&e->views[1]) : !bf && d->panel_cols == 0;
        if (tr) put(e, lmhead_dinp_transposed_shape(n, d->C, d->V), -1, PRODUCT_LMHEAD);
        else frozen_dinp(e, 1, n, d->C, d->V, 0.0f, bf ? (size_t)d->V : 0, -1, PRODUCT_LMHEAD);
    }
}

/* dora_update_norms: once per step (training and evaluation alike). */
static void emit_dora_norms(const Emit *e) {
    const Model *m = e->m;
    const Dims *d = &m->d;
    if (m->spec.type != TUNE_DORA) return;
    for (int l = d->lo; l < d->L; l++)
        for (int p = 0; p < PROJ_COUNT; p++) {
            if (!(m->blocks[l].adapted >> p & 1u)) continue;
            int in, od;
            proj_shape(d, p, &in, &od);
            frozen_forward(e, matrix_of(l, p), d->r, in, od, false, true, l, PRODUCT_DORA_NORMS);
            put(e, matmul_shape_gemm(d->r, d->r, in, true, false, 1.0f, 0.0f), l, PRODUCT_DORA_NORMS);
            put(e, matmul_shape_gemm(d->r, od, d->r, false, false, 1.0f, 0.0f), l, PRODUCT_DORA_NORMS);
        }
}

static void emit_batch(const Emit *e, const ProductBatch *b) {
    const Model *m = e->m;
    const Dims *d = &m->d;
    int N = b->rows * b->tokens;
    if (b->decode) {
        /* decode.c: the prompt in chunks of dec_rows rows, then one row per token */
        emit_dora_norms(e);
        int left = b->tokens;
        while (left > 0) {
            int rows = left < d->dec_rows ? left : d->dec_rows;
            for (int l = 0; l < d->L; l++) emit_block_forward(e, l, rows, false);
            left -= rows;
        }
        for (int l = 0; l < d->L; l++) emit_block_forward(e, l, 1, false);
        frozen_forward(e, 1, 1, d->C, d->V, false, true, -1, PRODUCT_LMHEAD);
        return;
    }
    if (N <= 0 || b->lm_rows <= 0) return;   /* nothing counted: the model returns before any product */
    emit_dora_norms(e);
    for (int l = 0; l < d->L; l++) emit_block_forward(e, l, N, false);
    emit_lmhead(e, b->lm_rows, b->train);
    if (!b->train) return;
    for (int l = d->L - 1; l >= d->lo; l--) {
        emit_block_forward(e, l, N, true);
        emit_block_backward(e, l, N);
    }
}

int model_products(const ModelConfig *cfg, const ModelSpec *spec, const WeightsSummary *ws,
                   const FrozenWeight *views, const ProductBatch *batches, size_t n, ProductSink sink, void *ctx) {
    Model *m = mem_calloc(1, sizeof *m);
    if (!m) return -1;
    m->cfg = *cfg;
    m->spec = *spec;
    int rc = dims_init(&m->d, cfg, spec, ws->file_dtype);
    if (rc == 0) rc = dims_apply_summary(&m->d, spec, ws);
    if (rc == 0) {
        m->blocks = mem_calloc((size_t)m->d.L, sizeof *m->blocks);
        if (!m->blocks) rc = -1;
    }
    if (rc == 0) {
        for (int l = 0; l < m->d.L; l++) m->blocks[l].adapted = block_adapted_mask(m, l);
        Emit e = {m, m->d.quantized ? views : NULL, sink, ctx};
        for (size_t i = 0; i < n; i++) emit_batch(&e, &batches[i]);
    }
    mem_free(m->blocks);
    mem_free(m);
    return rc;
}

double model_attention_flops(const ModelConfig *cfg, int rows, int tokens, bool backward) {
    /* causal: query i attends to i + 1 keys; scores and the weighted sum of
     * values are two products of that size; the backward pass rebuilds the
     * scores and runs four more (dV, dP, dQ, dK) */
    double pairs = (double)rows * tokens * (tokens + 1) / 2.0;
    double fwd = 2.0 * 2.0 * pairs * cfg->num_attention_heads * cfg->head_dim;
    return backward ? 2.5 * fwd : fwd;
}

/* lmhead_xent.c: the LM head fused with cross-entropy, in chunks of rows so
 * the (N, V) logits never exist. Rows with row_weight 0 (prompt, padding)
 * are skipped before any product; the rows that count are gathered into a
 * (chunk, C) block, their logits computed, the loss and dlogits formed in
 * place, and dinp for those rows computed and scattered back.
 *
 * Scratch (lmhead_scratch_floats floats, all of it used by this file, none
 * through matmul_set_scratch):
 *   rows   (chunk, C)  gathered inputs (as bf16 in its first half for bf16 products)
 *   logits (chunk, V)  logits, then dlogits (for bf16 products, each row's
 *                      dlogits are rounded to bf16 in place, in the first half
 *                      of the row, then the rows are packed to (chunk, V)
 *                      bf16: a dense operand is what oneDNN's brgemm takes; a
 *                      row stride of 2V sends the product to its gemm:jit
 *                      implementation, whose packing buffers are malloc'ed
 *                      per thread and call, outside the memory plan)
 *   drows  (chunk, C)  dinp of the gathered rows before the scatter
 *
 * The products of a chunk run on lmhead_product_rows(n, chunk) rows: the n
 * gathered rows plus zero rows up to a multiple of 16. A last chunk's n
 * depends on the data (how many targets of a batch count), and every
 * distinct n would be a oneDNN primitive of its own, JIT-compiled and held
 * (up to the cache's 256); with the padding a run has at most chunk / 16
 * LM-head shapes per direction, which the memory planner counts. The padded
 * rows cost at most 15 rows of products per batch; their results are not
 * read.
 *
 * Soft-capped logits (Gemma 2's final_logit_softcapping: cap * tanh(z / cap))
 * are capped in place before the softmax; their dlogits take the factor
 * 1 - tanh^2 = 1 - (capped / cap)^2 from the capped value.
 *
 * Compiled twice in the portable build (kernels/isa.h): the softmax's
 * exponentials run on 16-float vectors, one register with AVX-512. */
#include <math.h>
#include <string.h>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/vec.h"
#include "base/error.h"

#ifndef LT_ISA_AVX512 /* once, in the baseline object */
int lmhead_product_rows(int n, int chunk) {
    int p = (n + 15) / 16 * 16;
    return p < chunk ? p : chunk;
}

/* With an fp32 weight multiplied as stored (no panels), the input gradient
 * of a chunk is computed transposed, dinp^T (C, n) = W^T (C, V) dlogits^T
 * (V, n): oneDNN runs that shape 20-25% faster than dlogits (n, V) W (V, C)
 * (AMD Zen 4, 2 threads, n = 256, V = 49152; in a training step 98 -> 142
 * GFLOP/s). In bf16 it was faster alone (+7-11%) but slower inside a step
 * (262 -> 248 GFLOP/s), so bf16 keeps the untransposed product. */
bool lmhead_dinp_transposed(const FrozenWeight *w) {
    return fw_is_direct(w) && w->compute == DTYPE_F32;
}
MatmulShape lmhead_dinp_transposed_shape(int np, int C, int V) {
    return matmul_shape_gemm(C, np, V, true, true, 1.0f, 0.0f);
}
size_t lmhead_scratch_floats(int chunk, int C, int V) {
    return (size_t)chunk * (2 * (size_t)C + (size_t)V);
}
#endif

/* Soft-capping in place: z = cap * tanh(z / cap). */
static void softcap_row(float *z, int V, float cap) {
    int j = 0;
    v16 c = splat16(cap);
    for (; j + 16 <= V; j += 16) store16(z + j, c * tanh16(load16(z + j) / c));
    for (; j < V; j++) z[j] = cap * tanhf(z[j] / cap);
}

/* Loss of one row and, if want_grad, its dlogits in place: scale * (softmax
 * - onehot), as floats, or (bf16_out) rounded to bf16 in the first half of
 * the row's memory. The bf16 writes trail the reads: block j's 32 bytes go
 * to [2j, 2j + 32), which the loop has read already. With soft-capping
 * (cap > 0) the row holds capped logits and the dlogits are those of the raw
 * logits: times 1 - (z / cap)^2. */
static double row_xent(float *z, int V, int target, float scale, int want_grad, int bf16_out, float cap) {
    if (cap > 0.0f) softcap_row(z, V, cap);
    v16 mv = splat16(-INFINITY);
    int j = 0;
    float mx = -INFINITY;
    for (; j + 16 <= V; j += 16) {
        v16 x = load16(z + j);
        v16i gt = x > mv;
        mv = (v16)(((v16i)x & gt) | ((v16i)mv & ~gt));
    }
    for (int t = 0; t < 16; t++) mx = mv[t] > mx ? mv[t] : mx;
    for (; j < V; j++) mx = z[j] > mx ? z[j] : mx;
    v16 sv = splat16(0.0f), m16 = splat16(mx);
    for (j = 0; j + 16 <= V; j += 16) sv += exp16(load16(z + j) - m16);
    double sum = 0.0;
    for (int t = 0; t < 16; t++) sum += sv[t];
    for (; j < V; j++) sum += expf(z[j] - mx);
    double lse = (double)mx + log(sum);
    double loss = lse - (double)z[target];
    if (!want_grad) return loss;
    v16 l16 = splat16((float)lse), s16 = splat16(scale);
    float icap = cap > 0.0f ? 1.0f / cap : 0.0f;
    v16 ic16 = splat16(icap), one = splat16(1.0f);
    if (!bf16_out) {
        for (j = 0; j + 16 <= V; j += 16) {
            v16 zv = load16(z + j);
            v16 g = exp16(zv - l16) * s16;
            if ((unsigned)(target - j) < 16u) g[target - j] -= scale;
            if (cap > 0.0f) g *= one - zv * ic16 * (zv * ic16);
            store16(z + j, g);
        }
        for (; j < V; j++) {
            float g = expf(z[j] - (float)lse) * scale;
            if (j == target) g -= scale;
            if (cap > 0.0f) g *= 1.0f - z[j] * icap * (z[j] * icap);
            z[j] = g;
        }
        return loss;
    }
    uint16_t *dst = (uint16_t *)(void *)z;
    for (j = 0; j + 16 <= V; j += 16) {
        v16 zv = load16(z + j);
        v16 g = exp16(zv - l16) * s16;
        if ((unsigned)(target - j) < 16u) g[target - j] -= scale;
        if (cap > 0.0f) g *= one - zv * ic16 * (zv * ic16);
        store16_bf16(dst + j, g);
    }
    for (; j < V; j++) {
        float g = expf(z[j] - (float)lse) * scale;
        if (j == target) g -= scale;
        if (cap > 0.0f) g *= 1.0f - z[j] * icap * (z[j] * icap);
        dst[j] = f32_to_bf16(g);
    }
    return loss;
}

double ISA_FN(lmhead_xent)(float *dinp, float *row_loss, const float *inp, const FrozenWeight *w,
                           const int *targets, const float *row_weight, float *scratch, float softcap, int chunk,
                           int N) {
    int C = w->cols, V = w->rows;
    bool bf = w->compute == DTYPE_BF16;
    if (chunk <= 0) die("lmhead_xent.c: chunk %d must be positive", chunk);
    float *rows = scratch, *logits = rows + (size_t)chunk * C, *drows = logits + (size_t)chunk * V;
    int idx[chunk];
    double total = 0.0;
    int want_grad = dinp != NULL;
    if (row_loss) for (int i = 0; i < N; i++) row_loss[i] = 0.0f;

    int next = 0;
    while (next < N) {
        int n = 0;
        for (; next < N && n < chunk; next++) {
            if (row_weight[next] == 0.0f) continue;
            if (targets[next] < 0 || targets[next] >= V)
                die("lmhead_xent.c: target %d of row %d outside the vocabulary (%d)", targets[next], next, V);
            idx[n++] = next;
        }
        if (n == 0) break;
        int np = lmhead_product_rows(n, chunk);
        if (bf) {
            uint16_t *rows16 = (uint16_t *)(void *)rows;
            #pragma omp parallel for schedule(static) if ((size_t)n * C > 32768)
            for (int r = 0; r < n; r++) {
                const float *src = inp + (size_t)idx[r] * C;
                uint16_t *dst = rows16 + (size_t)r * C;
                int c = 0;
                for (; c + 16 <= C; c += 16) store16_bf16(dst + c, load16(src + c));
                for (; c < C; c++) dst[c] = f32_to_bf16(src[c]);
            }
            memset(rows16 + (size_t)n * C, 0, (size_t)(np - n) * C * sizeof *rows16);
            fw_linear_forward(logits, NULL, rows16, w, NULL, np);
        } else {
            for (int r = 0; r < n; r++)
                memcpy(rows + (size_t)r * C, inp + (size_t)idx[r] * C, (size_t)C * sizeof(float));
            memset(rows + (size_t)n * C, 0, (size_t)(np - n) * C * sizeof *rows);
            fw_linear_forward(logits, rows, NULL, w, NULL, np);
        }
        double chunk_loss[chunk];
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < n; r++) {
            float *z = logits + (size_t)r * V;
            chunk_loss[r] = row_xent(z, V, targets[idx[r]], row_weight[idx[r]], want_grad, bf, softcap);
        }
        for (int r = 0; r < n; r++) { /* fixed order: deterministic sum */
            total += (double)row_weight[idx[r]] * chunk_loss[r];
            if (row_loss) row_loss[idx[r]] = (float)chunk_loss[r];
        }
        if (!want_grad) continue;
        /* the padded rows' logits are read as they are (their drows are not used) */
        bool tr = lmhead_dinp_transposed(w);
        if (bf) {
            /* row r's bf16 dlogits move from byte 4rV to 2rV: in ascending
             * order every destination lies in rows already moved */
            uint16_t *d16 = (uint16_t *)(void *)logits;
            for (int r = 1; r < np; r++) memmove(d16 + (size_t)r * V, d16 + 2 * (size_t)r * V, (size_t)V * 2);
            fw_linear_backward_dinp(drows, 0.0f, NULL, d16, (size_t)V, w, np);
        } else if (tr) {
            gemm_f32(drows, w->data, logits, C, np, V, true, true, 1.0f, 0.0f);
        } else {
            fw_linear_backward_dinp(drows, 0.0f, logits, NULL, 0, w, np);
        }
        if (tr) {
            /* drows holds dinp^T (C, np) */
            #pragma omp parallel for schedule(static) if ((size_t)n * C > 32768)
            for (int r = 0; r < n; r++) {
                float *dst = dinp + (size_t)idx[r] * C;
                for (int c = 0; c < C; c++) dst[c] += drows[(size_t)c * np + r];
            }
            continue;
        }
        #pragma omp parallel for schedule(static) if ((size_t)n * C > 32768)
        for (int r = 0; r < n; r++) {
            float *dst = dinp + (size_t)idx[r] * C;
            const float *src = drows + (size_t)r * C;
            for (int c = 0; c < C; c++) dst[c] += src[c];
        }
    }
    return total;
}

#ifndef LT_ISA_AVX512
void lmhead_logits(float *out, const float *inp, const FrozenWeight *w, float softcap, int N) {
    fw_linear_forward(out, inp, NULL, w, NULL, N);
    if (softcap > 0.0f) {
        for (int n = 0; n < N; n++) softcap_row(out + (size_t)n * w->rows, w->rows, softcap);
    }
}
#endif

/* frozen_weight.h: the shared frozen-weight path. A FrozenWeight describes
 * one frozen matrix W (rows = out features, cols = in features; y = x W^T)
 * stored in any format: plain F32 / BF16 / F16 elements, MLX's affine
 * quantization (packed uint32 codes with one scale and one bias per group of
 * the input dimension), and (reserved) ggml block types. Every product with
 * a frozen weight goes through this header:
 *
 *   fw_linear_forward        out (N, rows) = x (N, cols) W^T (+ bias)
 *   fw_linear_backward_dinp  dx (N, cols) = dout (N, rows) W (+ dx)
 *   fw_gather_rows           embedding lookup of a (possibly packed) table
 *   fw_row_norms2            ||W row||^2 (DoRA's base norms)
 *
 * How a product is computed. When the stored elements are already of the
 * compute type (F32 weights in an fp32 product, BF16 weights in a bf16
 * product) oneDNN multiplies them in place. Otherwise W is expanded tile by
 * tile into the panel scratch (fw_set_panel_scratch, a memory-plan entry of
 * fw_panel_scratch_bytes) and oneDNN multiplies each panel: the forward
 * pass takes panels of whole rows (output features), each product writing
 * its columns of out; the input gradient takes panels of whole columns
 * (input features, a multiple of the format's column alignment) when such a
 * panel fits, else panels of rows whose products are summed into dx. No
 * expanded copy of a whole matrix exists at any time. For a handful of rows
 * (decoding) a fused dequantize-and-dot kernel (fw_gemv) reads the packed
 * codes once and never expands them.
 *
 * Adding a format (e.g. ggml Q8_0 / Q4_K for GGUF bases):
 *   1. a FW_* value below, and its fields in FrozenWeight (reuse `bits`,
 *      `group` = block length in elements, `aux` for a sub-type id);
 *   2. an expand kernel in src/kernels/dequant_<format>.c declared in
 *      kernels/dequant.h: dst (nr, nc) = W[r0:r0+nr, c0:c0+nc] as F32 or
 *      BF16, c0 and nc multiples of fw_col_align(w) (nc may end at cols);
 *   3. its cases in fw_expand, fw_col_align, fw_storage_bytes
 *      (kernels/frozen_weight.c), and optionally a fused GEMV in fw_gemv.
 * Nothing else changes: the model, the LM head, the embedding, DoRA and the
 * memory plan see only FrozenWeight.
 *
 * Where the model builds them: weights_view (model/model_weights.c, the
 * stored matrix of a module) and load_matrix (model/model_load.c); the
 * planner's summary of a directory (model_weights_summary) says whether
 * some product runs in bf16 and the widest matrix that needs panels, and
 * the layout walk carves the panel scratch when Dims.panel_cols > 0
 * (dims_apply_summary, model/model_layout.c). Expanding bf16 weights into
 * fp32 panels on a CPU without fast bf16 products is fw_plain(data, BF16,
 * rows, cols, F32) plus a panel_cols for plain models there.
 *
 * The expanded values are the format's exact dequantized values rounded to
 * the compute type: for MLX affine with BF16 scales that is MLX's own
 * dequantized bf16 weight, bit for bit (see kernels/dequant.h). */
#ifndef LT_FROZEN_WEIGHT_H
#define LT_FROZEN_WEIGHT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"

typedef enum {
    FW_PLAIN = 0,   /* row-major (rows, cols) elements of `dtype`: F32, BF16 or F16 */
    FW_AFFINE,      /* MLX affine: code q of `bits` bits, w = scale * q + bias per group */
    FW_GGML,        /* ggml's types as a GGUF file stores them (aux = ggml type id, group = block length) */
    FW_FORMAT_COUNT
} FwFormat;

typedef struct {
    FwFormat fmt;
    int rows, cols;         /* logical (out, in) */
    const void *data;       /* PLAIN: elements; AFFINE: packed codes, row r at data + r * row_bytes */
    size_t row_bytes;       /* bytes of one stored row of data */
    DType dtype;            /* PLAIN: element type; AFFINE: type of scales and biases (the model dtype) */
    int bits;               /* AFFINE: 2, 3, 4, 5, 6 or 8 */
    int group;              /* AFFINE: elements per scale (32, 64, 128); GGML: block length */
    const void *scales;     /* AFFINE: (rows, cols / group) of dtype */
    const void *biases;     /* AFFINE: (rows, cols / group) of dtype */
    int aux;                /* GGML: block type id */
    const int32_t *row_map; /* GGML: the stored row of each logical row (a GGUF's permuted q/k), or NULL */
    DType compute;          /* F32 or BF16: type of expanded panels and of the product's operands */
} FrozenWeight;

/* A plain (rows, cols) matrix of dtype used in products of type compute. */
FrozenWeight fw_plain(const void *data, DType dtype, int rows, int cols, DType compute);
/* An MLX affine matrix: packed (rows, cols * bits / 32) uint32 codes, scales
 * and biases (rows, cols / group) of dtype. compute: BF16 when dtype is
 * BF16 (the dequantized values are bf16 numbers), else F32. */
FrozenWeight fw_affine(const void *packed, const void *scales, const void *biases, DType dtype,
                       int bits, int group, int rows, int cols);
/* A (rows, cols) matrix of ggml type `type` (any of base/ggml_types.h,
 * F32/F16/BF16 included) as a GGUF file stores it: row r at data + r *
 * ggml_row_bytes(type, cols), or at stored row row_map[r] when row_map is
 * given. Products expand panels of type compute (F32 or BF16). */
FrozenWeight fw_ggml(const void *data, int type, int rows, int cols, const int32_t *row_map, DType compute);
/* True when products multiply the stored elements directly (no panels). */
bool fw_is_direct(const FrozenWeight *w);
/* Bytes of storage: codes plus scales and biases. */
size_t fw_storage_bytes(const FrozenWeight *w);
/* Column ranges of fw_expand start at multiples of this (1 for plain). */
int fw_col_align(const FrozenWeight *w);

/* dst (nr, nc), row stride ld elements, of type out (F32 or BF16) =
 * W[r0:r0+nr, c0:c0+nc] dequantized. Single-threaded (callers split the
 * rows among threads). */
void fw_expand(const FrozenWeight *w, int r0, int nr, int c0, int nc, DType out, void *dst, size_t ld);

/* The panel scratch of the products that expand. One buffer of the run,
 * shared by every frozen product (they never overlap); sized by
 * fw_panel_scratch_bytes for the widest matrix. A product that needs a
 * panel and finds none dies with a message (a planning bug). */
size_t fw_panel_scratch_bytes(int max_cols);
void fw_set_panel_scratch(void *scratch, size_t bytes);

/* out (N, rows) = x (N, cols) W^T + bias (rows, or NULL). x16: x already
 * rounded to bf16 (used when w->compute is BF16; else x is rounded into the
 * matmul conversion scratch). x may be NULL when x16 is given and
 * w->compute is BF16. */
void fw_linear_forward(float *out, const float *x, const uint16_t *x16, const FrozenWeight *w,
                       const float *bias, int N);
/* dx (N, cols) = dout (N, rows) W + beta * dx, beta 0 (overwrite) or 1
 * (accumulate). dout16: dout already bf16 with rows ld16 elements apart
 * (used when w->compute is BF16), or NULL. */
void fw_linear_backward_dinp(float *dx, float beta, const float *dout, const uint16_t *dout16, size_t ld16,
                             const FrozenWeight *w, int N);
/* out (N, cols) = rows ids[0..N) of W as floats (embedding lookup). */
void fw_gather_rows(float *out, const int *ids, int N, const FrozenWeight *w);
/* out (rows) = sum over the row of the dequantized W^2, summed in double. */
void fw_row_norms2(float *out, const FrozenWeight *w);

/* Rows up to which fw_linear_forward uses the fused GEMV (decoding). */
#define FW_GEMV_MAX_ROWS 4
#endif

/* test_reference.c: the model against the PyTorch references of
 * tests/ref/data/<case>/ (every gradient case found there): loss, token
 * count, logits and every gradient tensor, printed as worst relative errors
 * (max|a-b| / max|ref|). fp32 cases must be within 1e-4. bf16 cases: the
 * reference rounds the inputs of bf16 GEMMs like the engine, but a slightly
 * different fp32 value can flip a bf16 rounding (2^-8 relative), so the
 * bounds are looser: loss 1e-3 relative, logits 3e-2, gradients 3e-2 worst
 * element and 1e-2 in norm. bf16 cases run twice where the CPU has bf16
 * products: in bf16, and in fp32 products on the bf16 weights widened panel
 * by panel (--weights-dtype f32), checked with the fp32 bounds against the
 * reference computed without the inputs' rounding (fp32_expected). Each run
 * is repeated with gradient checkpointing and must give bit-identical
 * gradients. */
#include "check.h"
#include "model_testutil.h"
#include "kernels/isa.h"
#include <math.h>

static double norm_rel(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) { double e = (double)a[i] - b[i]; d += e * e; s += (double)b[i] * b[i]; }
    return sqrt(d) / (sqrt(s) > 1e-30 ? sqrt(s) : 1e-30);
}

/* Runs one case; grads_out (heap) receives the concatenated gradients. */
static int run_case(const RefCase *rc, bool ckpt, int gdn_chunk, float **grads_out, size_t *grads_n, bool report) {
    ModelSpec spec = rc->spec;
    spec.grad_checkpoint = ckpt;
    spec.gdn_chunk = gdn_chunk;
    Model *m; Arena arena; size_t planned;
    if (load_planned(&m, &arena, &planned, rc->dir, &rc->cfg, &spec, rc->bf16 ? DTYPE_BF16 : DTYPE_F32) < 0) return -1;
    CHECK_MSG(arena.used == planned, "%s: arena used %zu, plan %zu", rc->name, arena.used, planned);
    char p[700];
    StFile in, ex;
    snprintf(p, sizeof p, "%s/inputs.safetensors", rc->dir);
    if (st_open(&in, p) < 0) return -1;
    /* fp32 products on bf16 weights: the reference without the inputs' rounding */
    bool widened = rc->bf16 && spec.weight_dtype == DTYPE_F32;
    snprintf(p, sizeof p, "%s/%s", rc->dir, widened ? "fp32_expected.safetensors" : "expected.safetensors");
    if (st_open(&ex, p) < 0) return -1;
    int B = rc->B, W = rc->W, T = W - 1;
    const StTensor *tt = st_find(&in, "tokens"), *lt = st_find(&in, "lengths"), *ot = st_find(&in, "offsets");
    CHECK(tt && lt && ot);
    if (!tt || !lt || !ot) return -1;
    const int32_t *tokens = tt->data, *lengths = lt->data, *offsets = ot->data;

    TrainableTensor *tl;
    size_t nt = model_trainables(m, &tl);
    CHECK(nt > 0);
    if (spec.type == TUNE_FULL) {
        Rng rng; rng_seed(&rng, 1);
        CHECK(model_init_trainables(m, &rng) == 0);
    } else {
        for (size_t i = 0; i < nt; i++) {
            const float *v = st_f32(&in, tl[i].name, tl[i].numel);
            CHECK_MSG(v != NULL, "%s: adapter %s missing from inputs", rc->name, tl[i].name);
            if (v) memcpy(tl[i].value, v, tl[i].numel * sizeof(float));
        }
    }
    model_zero_grad(m);
    double loss; long ntok;
    CHECK(model_forward_backward(m, tokens, B, W, lengths, offsets, 1.0f, NULL, &loss, &ntok) == 0);
    const float *el = st_f32(&ex, "loss", 1);
    const StTensor *en = st_find(&ex, "ntokens");
    CHECK(el && en);
    double worst_grad = 0, worst_norm = 0;
    const char *worst_name = "";
    size_t total = 0;
    for (size_t i = 0; i < nt; i++) total += tl[i].numel;
    float *g = mem_alloc(total * sizeof(float));
    size_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        memcpy(g + off, tl[i].grad, tl[i].numel * sizeof(float));
        off += tl[i].numel;
        char gn[128];
        snprintf(gn, sizeof gn, "grad.%s", tl[i].name);
        const float *ref = st_f32(&ex, gn, tl[i].numel);
        CHECK_MSG(ref != NULL, "%s: %s missing from expected", rc->name, gn);
        if (!ref) continue;
        double e = rel_error(tl[i].grad, ref, tl[i].numel), en2 = norm_rel(tl[i].grad, ref, tl[i].numel);
        if (report && getenv("VERBOSE")) printf("    %-52s %.2e  (norm %.2e)\n", tl[i].name, e, en2);
        if (e > worst_grad) { worst_grad = e; worst_name = tl[i].name; }
        if (en2 > worst_norm) worst_norm = en2;
    }
    *grads_out = g; *grads_n = total;
    if (report && el && en) {
        double loss_rel = fabs(loss - el[0]) / fabs(el[0]);
        CHECK(ntok == *(const int32_t *)en->data);
        /* logits of the inputs tokens[:, :-1] */
        int32_t *inp = mem_alloc((size_t)B * T * sizeof(int32_t));
        float *logits = mem_alloc((size_t)B * T * rc->cfg.vocab_size * sizeof(float));
        for (int b = 0; b < B; b++) memcpy(inp + (size_t)b * T, tokens + (size_t)b * W, (size_t)T * sizeof(int32_t));
        CHECK(model_logits(m, inp, B, T, logits) == 0);
        size_t nl = (size_t)B * T * rc->cfg.vocab_size;
        const float *rl = st_f32(&ex, "logits", nl);
        CHECK(rl != NULL);
        double lr = rl ? rel_error(logits, rl, nl) : 1;
        const char *path = !rc->bf16 ? "fp32" : rc->spec.weight_dtype == DTYPE_BF16 ? "bf16" : "bf16 in fp32";
        char label[300];
        snprintf(label, sizeof label, "%.200s%s", rc->name, gdn_chunk ? " (chunk " : "");
        if (gdn_chunk) snprintf(label + strlen(label), sizeof label - strlen(label), "%d)", gdn_chunk);
        printf("%-24s %-12s loss %.6f ref %.6f rel %.1e | logits %.1e | grads worst %.1e (%s) norm %.1e | %zu tensors\n",
               label, path, loss, el[0], loss_rel, lr, worst_grad, worst_name, worst_norm, nt);
        if (rc->bf16 && !widened) {
            CHECK(loss_rel <= 1e-3); CHECK(lr <= 3e-2); CHECK(worst_grad <= 3e-2); CHECK(worst_norm <= 1e-2);
        } else {
            CHECK(loss_rel <= 1e-4); CHECK(lr <= 1e-4); CHECK(worst_grad <= 1e-4);
        }
        mem_free(inp); mem_free(logits);
    }
    st_close(&in); st_close(&ex);
    model_free(m);
    arena_free(&arena);
    return 0;
}

int main(void) {
    printf("kernels: %s; bf16 products: %s\n", isa_describe(),
           matmul_bf16_supported() ? "yes" : "no (bf16 cases run as fp32)");
    /* tests/ref/data: plain models (tests/ref/gen_refs.py); tests/quant/data:
     * MLX-quantized ones, referenced on their dequantized weights
     * (tests/quant/gen_quant_refs.py) */
    static const char *roots[2] = {"tests/ref/data", "tests/quant/data"};
    static char names[96][256], root_of[96][32];
    int n = 0, ran = 0;
    for (int r = 0; r < 2; r++) {
        int k = refcase_list_in(roots[r], names + n, 96 - n);
        CHECK_MSG(k > 0, "no reference cases under %s (committed; see its generator)", roots[r]);
        for (int i = 0; i < k; i++) snprintf(root_of[n + i], 32, "%s", roots[r]);
        n += k;
    }
    for (int i = 0; i < n; i++) {
        RefCase rc;
        char dir[600];
        snprintf(dir, sizeof dir, "%.31s/%.255s", root_of[i], names[i]);
        if (refcase_read(&rc, dir, names[i]) < 0) { CHECK_MSG(0, "%s: %s", names[i], error_message()); continue; }
        if (rc.trajectory) continue;   /* optimizer trajectories: tests/train */
        /* bf16 cases run in both product dtypes: bf16 where oneDNN has bf16
         * products, and fp32 on the bf16 weights widened panel by panel */
        DType runs[2] = {rc.spec.weight_dtype, DTYPE_F32};
        int nruns = rc.bf16 && rc.spec.weight_dtype == DTYPE_BF16 ? 2 : 1;
        for (int v = 0; v < nruns; v++) {
            rc.spec.weight_dtype = runs[v];
            float *g0 = NULL, *g1 = NULL; size_t n0 = 0, n1 = 0;
            if (run_case(&rc, false, 0, &g0, &n0, true) < 0) {
                CHECK_MSG(0, "%s: %s", rc.name, error_message());
                continue;
            }
            if (run_case(&rc, true, 0, &g1, &n1, false) < 0) {
                CHECK_MSG(0, "%s (checkpointing): %s", rc.name, error_message());
                mem_free(g0);
                continue;
            }
            CHECK_MSG(n0 == n1 && memcmp(g0, g1, n0 * sizeof(float)) == 0, "%s: gradients differ with checkpointing",
                      rc.name);
            mem_free(g0); mem_free(g1);
            /* Qwen3.5: the Gated DeltaNet's chunk size changes the summation order only */
            for (int k = 0; rc.cfg.q35.on && k < 2; k++) {
                int chunk = k == 0 ? 8 : 5;
                float *g2 = NULL;
                size_t n2 = 0;
                if (run_case(&rc, false, chunk, &g2, &n2, true) < 0)
                    CHECK_MSG(0, "%s (chunk %d): %s", rc.name, chunk, error_message());
                mem_free(g2);
            }
            ran++;
        }
    }
    printf("%d reference cases\n", ran);
    CHECK(ran > 0);
    return check_finish("model/reference");
}

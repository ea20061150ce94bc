/* test_quant_fuse.c: fusing an adapter into an MLX-quantized base, for the
 * LoRA cases of tests/quant/data: with --dequantize the fused model's logits
 * equal base + adapter (the merge is exact up to fp32 rounding and, for a
 * bf16 model, the rounding of the merged weight to bf16); quantized again
 * (the default, as mlx_lm.fuse) the logits move by the requantization
 * error, which the reference measured on the same model (case.json
 * fuse_requantized: max |diff| and argmax agreement): ours must stay within
 * 1.25x that error and agree on the argmax as often, less one position. The
 * fused model is quantized again: it loads as a quantized model. Also the
 * memory plan's frozen weights are exactly the file's stored matrices. */
#include "check.h"
#include "model/model_testutil.h"
#include "base/fileio.h"
#include "model/adapter_io.h"
#include "model/fuse.h"
#include "kernels/matmul.h"
#include <unistd.h>

static float *logits_of(const char *model_dir, const char *adapter_dir, const int32_t *inp, int B, int T, int V) {
    Model *m;
    Arena arena;
    if (model_open_inference(&m, &arena, model_dir, adapter_dir, B, T, 0) < 0) {
        CHECK_MSG(0, "%s: %s", model_dir, error_message());
        return NULL;
    }
    float *l = mem_alloc((size_t)B * T * V * sizeof(float));
    CHECK(model_logits(m, inp, B, T, l) == 0);
    model_free(m);
    arena_free(&arena);
    return l;
}

static int write_adapter(const char *dir, const RefCase *rc, const StFile *in) {
    if (dir_ensure(dir) < 0) return -1;
    char p[800], cfg[512];
    snprintf(cfg, sizeof cfg, "{\"fine_tune_type\": \"lora\", \"num_layers\": %d, \"lora_parameters\": "
             "{\"rank\": %d, \"scale\": %g, \"dropout\": 0.0}}\n", rc->spec.num_layers, rc->spec.lora_rank,
             (double)rc->spec.lora_scale);
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    if (atomic_write_file(p, cfg, strlen(cfg)) < 0) return -1;
    StWriteTensor wt[128];
    size_t n = 0;
    for (size_t i = 0; i < in->n_tensors && n < 128; i++) {
        const StTensor *t = &in->tensors[i];
        size_t len = strlen(t->name);
        if (len < 7 || (strcmp(t->name + len - 7, ".lora_a") && strcmp(t->name + len - 7, ".lora_b"))) continue;
        wt[n] = (StWriteTensor){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1]}, t->data};
        n++;
    }
    snprintf(p, sizeof p, "%s/adapters.safetensors", dir);
    const char *mk[1] = {"format"}, *mv[1] = {"mlx"};
    return st_write(p, wt, n, mk, mv, 1);
}

static void fuse_case(const char *dir, const char *name, const char *tmp) {
    RefCase rc;
    if (refcase_read(&rc, dir, name) < 0) { CHECK_MSG(0, "%s: %s", name, error_message()); return; }
    char p[800];
    snprintf(p, sizeof p, "%s/case.json", dir);
    json_error_t je;
    json_t *cj = json_load_file(p, 0, &je);
    json_t *fr = json_object_get(cj, "fuse_requantized");
    if (!fr) { json_decref(cj); return; }
    double ref_err = json_number_value(json_object_get(fr, "logits_max_abs"));
    double ref_agree = json_number_value(json_object_get(fr, "argmax_agree"));
    json_decref(cj);
    StFile in;
    snprintf(p, sizeof p, "%s/inputs.safetensors", dir);
    if (st_open(&in, p) < 0) { CHECK_MSG(0, "%s", error_message()); return; }
    char adir[700], fq[700], fd[700];
    snprintf(adir, sizeof adir, "%.200s/%.200s_adapter", tmp, name);
    snprintf(fq, sizeof fq, "%.200s/%.200s_fused", tmp, name);
    snprintf(fd, sizeof fd, "%.200s/%.200s_fused_deq", tmp, name);
    CHECK_MSG(write_adapter(adir, &rc, &in) == 0, "%s", error_message());
    CHECK_MSG(fuse_model(dir, adir, fq, 0, false) == 0, "%s: fuse: %s", name, error_message());
    CHECK_MSG(fuse_model(dir, adir, fd, 0, true) == 0, "%s: fuse --dequantize: %s", name, error_message());
    int B = rc.B, T = rc.W - 1, V = rc.cfg.vocab_size;
    const int32_t *tokens = st_find(&in, "tokens")->data;
    int32_t *inp = mem_alloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) memcpy(inp + (size_t)b * T, tokens + (size_t)b * rc.W, (size_t)T * sizeof(int32_t));
    float *l0 = logits_of(dir, adir, inp, B, T, V), *lq = logits_of(fq, NULL, inp, B, T, V);
    float *ld = logits_of(fd, NULL, inp, B, T, V);
    if (l0 && lq && ld) {
        size_t n = (size_t)B * T * V;
        double deq_err = max_abs_diff(ld, l0, n), q_err = max_abs_diff(lq, l0, n), scale = max_abs(l0, n);
        int agree = 0;
        for (int i = 0; i < B * T; i++) {
            int a = 0, b = 0;
            for (int v = 1; v < V; v++) {
                if (l0[(size_t)i * V + v] > l0[(size_t)i * V + a]) a = v;
                if (lq[(size_t)i * V + v] > lq[(size_t)i * V + b]) b = v;
            }
            agree += a == b;
        }
        double agree_frac = (double)agree / (B * T);
        printf("%-22s dequantized fuse: logits max |diff| %.2e (of %.2f) | re-quantized: %.3e (reference %.3e), "
               "argmax agrees %.3f (reference %.3f)\n", name, deq_err, scale, q_err, ref_err, agree_frac, ref_agree);
        double deq_tol = rc.bf16 ? 2e-2 * scale : 1e-4 * scale;
        CHECK_MSG(deq_err <= deq_tol, "%s: dequantized fuse differs from base + adapter by %.3g", name, deq_err);
        CHECK_MSG(q_err <= 1.25 * ref_err + 1e-3, "%s: re-quantized fuse error %.3g over 1.25 x %.3g", name, q_err,
                  ref_err);
        CHECK_MSG(agree >= (int)(ref_agree * B * T + 0.5) - 1, "%s: argmax agrees at %d of %d positions", name, agree,
                  B * T);
    }
    /* the plan counts the stored matrices: codes, scales and biases of every
     * quantized module, plain matrices as stored */
    StModel st;
    if (st_model_open(&st, dir, true) == 0) {
        size_t stored = 0;
        for (size_t f = 0; f < st.n_files; f++)
            for (size_t i = 0; i < st.files[f].n_tensors; i++) {
                const StTensor *t = &st.files[f].tensors[i];
                size_t len = strlen(t->name);
                bool matrix = t->ndim == 2 && len > 7 && !strcmp(t->name + len - 7, ".weight");
                const char *tail = t->name + (len > 7 ? len - 7 : 0);
                bool qparts = len > 7 && (!strcmp(tail, ".scales") || !strcmp(tail, ".biases"));
                if (matrix || qparts) stored += t->end - t->begin;
            }
        st_model_close(&st);
        MemPlan plan = {0};
        CHECK(model_plan_weights(dir, &rc.cfg, &rc.spec, &plan) == 0);
        CHECK_MSG(plan_class_bytes(&plan, MEM_FROZEN_WEIGHTS) == stored, "%s: plan counts %zu frozen bytes, "
                  "the file stores %zu", name, plan_class_bytes(&plan, MEM_FROZEN_WEIGHTS), stored);
        plan_free(&plan);
    }
    /* the re-quantized model is quantized: its config keeps the quantization */
    WeightsSummary ws;
    CHECK(model_weights_summary(fq, &rc.cfg, &ws) == 0 && ws.quantized);
    CHECK(model_weights_summary(fd, &rc.cfg, &ws) == 0 && !ws.quantized);
    mem_free(l0); mem_free(lq); mem_free(ld); mem_free(inp);
    st_close(&in);
}

int main(void) {
    char tmp[] = "/tmp/lmtune_qfuse_XXXXXX";
    if (!mkdtemp(tmp)) return 1;
    static char names[32][256];
    int n = refcase_list_in("tests/quant/data", names, 32);
    for (int i = 0; i < n; i++) {
        char dir[600];
        snprintf(dir, sizeof dir, "tests/quant/data/%.255s", names[i]);
        fuse_case(dir, names[i], tmp);
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    matmul_release_all();
    CHECK(n >= 3);
    return check_finish("quant/fuse");
}

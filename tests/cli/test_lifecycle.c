/* test_lifecycle.c: the adapter lifecycle against the PyTorch references of
 * tests/ref/data: (1) generation with the KV cache: model_decode's logits of
 * a prompt equal model_logits' last row (1e-5 relative) and, fed the
 * reference tokens one by one, follow the reference logits (their argmax
 * is the greedy pick at every position; with longrope, from the positions
 * where the prefix is long enough to use the reference's factors); a greedy continuation computed with
 * the cache equals the argmax of full recomputation; (2) fuse: the fused
 * directory gives the same logits (1e-4 relative) and the same greedy tokens
 * as base + adapter, for LoRA and DoRA on fp32 bases and, looser, a bf16
 * base; (3) the PEFT export of the reference MLX adapter equals the
 * PyTorch-written PEFT tensors and its config, and lmtune's logits with the
 * adapter equal the reference logits computed with PEFT's convention; (4)
 * the new families' PEFT and GGUF LoRA exports (check_family_exports). */
#include "check.h"
#include "formats/model_tensors.h"
#include "../model/model_testutil.h"
#include "base/fileio.h"
#include "model/adapter_io.h"
#include "model/fuse.h"
#include "model/sampler.h"
#include "model/gguf_export.h"
#include "formats/gguf.h"
#include "kernels/ggml_quants.h"
#include <math.h>
#include <stdlib.h>

static char tmp[256];

static double rms_rel(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) { double e = (double)a[i] - b[i]; d += e * e; s += (double)b[i] * b[i]; }
    return sqrt(d / (s > 1e-30 ? s : 1e-30));
}
static int argmax(const float *x, int n) { int b = 0; for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i; return b; }

/* Writes DIR/adapters.safetensors (the LoRA tensors of the case's
 * inputs.safetensors, plus DoRA magnitudes when dora) and adapter_config.json. */
static int write_adapter_dir(const RefCase *rc, const char *dir, bool dora) {
    char p[900];
    snprintf(p, sizeof p, "%s/inputs.safetensors", rc->dir);
    StFile in;
    TRY(st_open(&in, p));
    TRY(dir_ensure(dir));
    StWriteTensor *wt = mem_calloc(2 * in.n_tensors + 1, sizeof *wt);
    char (*names)[128] = mem_calloc(2 * in.n_tensors + 1, sizeof *names);
    float **mags = mem_calloc(in.n_tensors + 1, sizeof *mags);
    size_t k = 0, nm = 0;
    StModel base;
    TRY(st_model_open(&base, rc->dir, false));
    for (size_t i = 0; i < in.n_tensors; i++) {
        const StTensor *t = &in.tensors[i];
        size_t len = strlen(t->name);
        if (len < 7 || strcmp(t->name + len - 7, ".lora_a") != 0) continue;
        char bname[128];
        snprintf(bname, sizeof bname, "%.*s.lora_b", (int)(len - 7), t->name);
        const StTensor *tb = st_find(&in, bname);
        if (!tb) return error_set("%s: %s without lora_b", p, t->name);
        wt[k++] = (StWriteTensor){t->name, DTYPE_F32, 2, {t->shape[0], t->shape[1]}, t->data};
        wt[k++] = (StWriteTensor){tb->name, DTYPE_F32, 2, {tb->shape[0], tb->shape[1]}, tb->data};
        char mname[128];
        snprintf(mname, sizeof mname, "%.*s.m", (int)(len - 7), t->name);
        const StTensor *case_m = st_find(&in, mname);
        if (case_m) {   /* a DoRA reference case: its own magnitudes */
            wt[k++] = (StWriteTensor){case_m->name, DTYPE_F32, 1, {case_m->shape[0]}, case_m->data};
            dora = true;
        } else if (dora) {
            /* m = the row norms of the merged weight, times 1 +- 0.2, so that
             * the rescaling is not the identity. */
            char wname[160];
            snprintf(wname, sizeof wname, "%.*s.weight", (int)(len - 7), t->name);
            /* adapter keys are module paths; the file may name the layers otherwise (Qwen3.5) */
            ModelConfig *cfg = mem_alloc(sizeof *cfg);
            *cfg = rc->cfg;
            const char *ap = model_tensors_resolve(cfg, &base) == 0 ? model_adapter_prefix(cfg) : "";
            if (*ap && !strncmp(wname, ap, strlen(ap))) {
                char rest[160];
                snprintf(rest, sizeof rest, "%s", wname + strlen(ap));
                snprintf(wname, sizeof wname, "%s%s", model_file_prefix(cfg), rest);
            }
            mem_free(cfg);
            const StTensor *w = st_model_find(&base, wname);
            if (!w) return error_set("%s: no base weight %s", rc->dir, wname);
            int64_t out = w->shape[0], inn = w->shape[1], r = t->shape[1];
            float *wf = mem_alloc((size_t)(out * inn) * sizeof(float));
            dtype_to_f32(wf, w->data, w->dtype, (size_t)(out * inn));
            float *m = mags[nm] = mem_alloc((size_t)out * sizeof(float));
            const float *A = t->data, *B = tb->data;
            for (int64_t o = 0; o < out; o++) {
                double ss = 0;
                for (int64_t i2 = 0; i2 < inn; i2++) {
                    double v = wf[o * inn + i2];
                    for (int64_t q = 0; q < r; q++) v += rc->spec.lora_scale * (double)A[i2 * r + q] * B[q * out + o];
                    ss += v * v;
                }
                m[o] = (float)(sqrt(ss) * (1.0 + 0.2 * sin(3.0 * (double)o + nm)));
            }
            mem_free(wf);
            snprintf(names[nm], sizeof names[nm], "%.*s.m", (int)(len - 7), t->name);
            wt[k++] = (StWriteTensor){names[nm], DTYPE_F32, 1, {out}, m};
            nm++;
        }
    }
    snprintf(p, sizeof p, "%s/adapters.safetensors", dir);
    int rcw = st_write(p, wt, k, NULL, NULL, 0);
    char json[512];
    snprintf(json, sizeof json,
             "{\"fine_tune_type\": \"%s\", \"num_layers\": %d, \"lora_parameters\": {\"rank\": %d, \"scale\": %.9g, \"dropout\": 0.0}}",
             dora ? "dora" : "lora", rc->spec.num_layers, rc->spec.lora_rank, rc->spec.lora_scale);
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    if (rcw == 0) rcw = atomic_write_file(p, json, strlen(json));
    for (size_t i = 0; i < nm; i++) mem_free(mags[i]);
    mem_free(mags); mem_free(names); mem_free(wt);
    st_model_close(&base);
    st_close(&in);
    return rcw;
}

/* Greedy continuation of `prompt` by n tokens with the KV cache. */
static int greedy_cached(Model *m, const int32_t *prompt, int np, int n, int32_t *out) {
    int V = model_config(m)->vocab_size;
    float *lg = mem_alloc((size_t)V * sizeof(float));
    TRY(model_decode(m, prompt, np, 0, lg));
    for (int i = 0; i < n; i++) {
        out[i] = argmax(lg, V);
        if (i + 1 < n) TRY(model_decode(m, &out[i], 1, np + i, lg));
    }
    mem_free(lg);
    return 0;
}

/* (1) KV-cache decoding against full recomputation and the reference. */
static void check_decode(const RefCase *rc) {
    bool lora = rc->spec.type == TUNE_LORA || rc->spec.type == TUNE_DORA;
    char adir[700];
    snprintf(adir, sizeof adir, "%s/%s_adapter", tmp, rc->name);
    if (lora) CHECK(write_adapter_dir(rc, adir, false) == 0);
    int T = rc->W - 1, V = rc->cfg.vocab_size;
    Model *m; Arena arena;
    if (model_open_inference(&m, &arena, rc->dir, lora ? adir : NULL, 1, T + 8, T + 8, 0) < 0) { CHECK_MSG(0, "%s: %s", rc->name, error_message()); return; }
    char p[700];
    StFile in, ex;
    snprintf(p, sizeof p, "%s/inputs.safetensors", rc->dir);
    CHECK(st_open(&in, p) == 0);
    snprintf(p, sizeof p, "%s/expected.safetensors", rc->dir);
    CHECK(st_open(&ex, p) == 0);
    const int32_t *tokens = st_find(&in, "tokens")->data, *lengths = st_find(&in, "lengths")->data;
    const float *ref = st_f32(&ex, "logits", (size_t)rc->B * T * V);
    CHECK(ref != NULL);
    int len = lengths[0];             /* row 0: real tokens 0..len-1 */
    float *full = mem_alloc((size_t)(T + 8) * V * sizeof(float)), *lg = mem_alloc((size_t)V * sizeof(float));
    /* prompt of k tokens: decode's logits = last row of model_logits */
    int k = len / 2;
    CHECK(model_logits(m, tokens, 1, k, full) == 0);
    CHECK(model_decode(m, tokens, k, 0, lg) == 0);
    double prompt_rel = rel_error(lg, full + (size_t)(k - 1) * V, V);
    /* teacher-forced: one token at a time, against the reference row */
    double worst_ref = 0, worst_rms = 0;
    int argmax_agree = 0, argmax_total = 0;
    /* longrope picks its factors by the sequence's length: the reference
     * (length T) and a decoded prefix of at most original_max_position
     * positions use different factors, so only longer prefixes compare */
    const RopeScaling *rs = &rc->cfg.rope_scaling;
    int first = rs->type == ROPE_SCALING_LONGROPE && T > rs->original_max_position ? rs->original_max_position : 0;
    for (int j = k - 1; j < len - 1; j++) {
        if (j >= k) CHECK(model_decode(m, &tokens[j], 1, j, lg) == 0);
        if (j < first) continue;
        const float *r = ref + (size_t)j * V;
        double e = rel_error(lg, r, V), s = rms_rel(lg, r, V);
        if (e > worst_ref) worst_ref = e;
        if (s > worst_rms) worst_rms = s;
        argmax_agree += argmax(lg, V) == argmax(r, V);
        argmax_total++;
    }
    /* greedy continuation with the cache = argmax of full recomputation */
    enum { NGEN = 8 };
    int32_t seq[64];
    memcpy(seq, tokens, (size_t)k * sizeof(int32_t));
    CHECK(greedy_cached(m, tokens, k, NGEN, seq + k) == 0);
    CHECK(model_logits(m, seq, 1, k + NGEN - 1, full) == 0);
    int cont_agree = 0;
    for (int i = 0; i < NGEN; i++) cont_agree += argmax(full + (size_t)(k - 1 + i) * V, V) == seq[k + i];
    printf("decode %-24s prompt vs logits %.2g, vs reference worst %.2g rms %.2g, argmax %d/%d, greedy %d/%d\n",
           rc->name, prompt_rel, worst_ref, worst_rms, argmax_agree, argmax_total, cont_agree, NGEN);
    CHECK_MSG(prompt_rel <= (rc->bf16 ? 1e-4 : 1e-5), "%s: decode vs model_logits %.3g", rc->name, prompt_rel);
    if (rc->bf16) {
        CHECK_MSG(worst_rms <= 1e-2, "%s: rms %.3g", rc->name, worst_rms);
        CHECK(argmax_agree >= argmax_total - 1);
        CHECK(cont_agree >= NGEN - 1);
    } else {
        CHECK_MSG(worst_ref <= 1e-4, "%s: decode vs reference %.3g", rc->name, worst_ref);
        CHECK(argmax_agree == argmax_total);
        CHECK(cont_agree == NGEN);
    }
    mem_free(full); mem_free(lg);
    st_close(&in); st_close(&ex);
    model_free(m); arena_free(&arena);
}

/* (2) the fused model against base + adapter: logits of both rows of the
 * case and greedy continuations of four prompts. */
static void check_fuse(const RefCase *rc, bool dora) {
    char adir[700], fdir[700];
    snprintf(adir, sizeof adir, "%s/%s_%s", tmp, rc->name, dora ? "dora" : "lora");
    snprintf(fdir, sizeof fdir, "%s/%s_%s_fused", tmp, rc->name, dora ? "dora" : "lora");
    CHECK(write_adapter_dir(rc, adir, dora) == 0);
    CHECK_MSG(fuse_model(rc->dir, adir, fdir, 0, false) == 0, "%s", error_message());
    int T = rc->W - 1, V = rc->cfg.vocab_size, B = rc->B;
    Model *ma, *mf; Arena aa, af;
    if (model_open_inference(&ma, &aa, rc->dir, adir, B, T, T + 8, 0) < 0) { CHECK_MSG(0, "%s", error_message()); return; }
    if (model_open_inference(&mf, &af, fdir, NULL, B, T, T + 8, 0) < 0) { CHECK_MSG(0, "%s", error_message()); return; }
    char p[700];
    StFile in;
    snprintf(p, sizeof p, "%s/inputs.safetensors", rc->dir);
    CHECK(st_open(&in, p) == 0);
    const int32_t *tokens = st_find(&in, "tokens")->data;
    size_t n = (size_t)B * T * V;
    float *la = mem_alloc(n * sizeof(float)), *lf = mem_alloc(n * sizeof(float));
    int32_t *inp = mem_alloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0; b < B; b++) memcpy(inp + (size_t)b * T, tokens + (size_t)b * rc->W, (size_t)T * sizeof(int32_t));
    CHECK(model_logits(ma, inp, B, T, la) == 0);
    CHECK(model_logits(mf, inp, B, T, lf) == 0);
    double worst = rel_error(lf, la, n), rms = rms_rel(lf, la, n);
    int same = 0, total = 0;
    for (int pr = 0; pr < 4; pr++) {
        int np = 2 + 3 * pr;
        int32_t ga[8], gf[8];
        const int32_t *prompt = tokens + (size_t)(pr % B) * rc->W + pr;
        CHECK(greedy_cached(ma, prompt, np, 8, ga) == 0);
        CHECK(greedy_cached(mf, prompt, np, 8, gf) == 0);
        for (int i = 0; i < 8; i++) { total++; if (ga[i] != gf[i]) break; same++; }
    }
    printf("fuse %-7s %-24s logits worst rel %.2g rms rel %.2g, greedy tokens equal %d/%d\n",
           dora ? "dora" : "lora", rc->name, worst, rms, same, total);
    if (rc->bf16) {
        /* the fused weight is stored in bf16: W + dW rounded once (2^-9
         * relative per weight), where base + adapter keeps dW in fp32 */
        CHECK_MSG(rms <= 2e-2, "%s: bf16 fused rms %.3g", rc->name, rms);
    } else {
        CHECK_MSG(worst <= 1e-4, "%s: fused vs adapter %.3g", rc->name, worst);
        CHECK(same == total);
    }
    mem_free(la); mem_free(lf); mem_free(inp);
    st_close(&in);
    model_free(ma); arena_free(&aa);
    model_free(mf); arena_free(&af);
}

/* (3) the PEFT export of the peft_export case. */
static void check_peft(void) {
    RefCase rc;
    if (refcase_read(&rc, "tests/ref/data/peft_export", "peft_export") < 0) { CHECK_MSG(0, "%s", error_message()); return; }
    char adir[700], pdir[700], p[900];
    snprintf(adir, sizeof adir, "%s/peft_adapter", tmp);
    snprintf(pdir, sizeof pdir, "%s/peft_out", tmp);
    CHECK(write_adapter_dir(&rc, adir, false) == 0);
    CHECK_MSG(export_peft(rc.dir, adir, pdir) == 0, "%s", error_message());
    StFile ex, pf;
    snprintf(p, sizeof p, "%s/expected.safetensors", rc.dir);
    CHECK(st_open(&ex, p) == 0);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", pdir);
    CHECK(st_open(&pf, p) == 0);
    int compared = 0, mismatched = 0;
    for (size_t i = 0; i < ex.n_tensors; i++) {
        const StTensor *e = &ex.tensors[i];
        if (strncmp(e->name, "base_model.model.", 17) != 0) continue;
        const StTensor *t = st_find(&pf, e->name);
        CHECK_MSG(t != NULL, "PEFT export lacks %s", e->name);
        if (!t) continue;
        compared++;
        bool same = t->dtype == e->dtype && t->ndim == e->ndim && t->nelem == e->nelem &&
                    !memcmp(t->shape, e->shape, sizeof t->shape[0] * t->ndim) &&
                    !memcmp(t->data, e->data, t->nelem * 4);
        if (!same) { mismatched++; fprintf(stderr, "PEFT tensor %s differs\n", e->name); }
    }
    CHECK(compared == 14 && mismatched == 0);
    CHECK(pf.n_tensors == (size_t)compared);
    /* adapter_config.json against the case's PEFT config */
    snprintf(p, sizeof p, "%s/case.json", rc.dir);
    json_error_t je;
    json_t *cj = json_load_file(p, 0, &je), *want = json_object_get(cj, "peft");
    snprintf(p, sizeof p, "%s/adapter_config.json", pdir);
    json_t *got = json_load_file(p, 0, &je);
    CHECK(want && got);
    if (want && got) {
        CHECK(json_integer_value(json_object_get(got, "r")) == json_integer_value(json_object_get(want, "r")));
        CHECK_NEAR(json_number_value(json_object_get(got, "lora_alpha")), json_number_value(json_object_get(want, "lora_alpha")), 1e-6);
        CHECK(!strcmp(json_string_value(json_object_get(got, "peft_type")), "LORA"));
        CHECK(!strcmp(json_string_value(json_object_get(got, "task_type")), "CAUSAL_LM"));
        CHECK(json_equal(json_object_get(got, "layers_to_transform"), json_object_get(want, "layers_to_transform")));
        json_t *gt = json_object_get(got, "target_modules"), *wtm = json_object_get(want, "target_modules");
        CHECK(json_array_size(gt) == json_array_size(wtm));
        size_t i; json_t *v;
        json_array_foreach(wtm, i, v) {
            bool found = false; size_t j; json_t *g;
            json_array_foreach(gt, j, g) found |= json_equal(g, v);
            CHECK_MSG(found, "target_modules lacks %s", json_string_value(v));
        }
        CHECK(json_is_string(json_object_get(got, "base_model_name_or_path")));
    }
    json_decref(cj); json_decref(got);
    /* lmtune with the MLX adapter = the reference's PEFT-convention logits */
    int T = rc.W - 1, V = rc.cfg.vocab_size, B = rc.B;
    Model *m; Arena arena;
    if (model_open_inference(&m, &arena, rc.dir, adir, B, T, 0, 0) == 0) {
        StFile in;
        snprintf(p, sizeof p, "%s/inputs.safetensors", rc.dir);
        CHECK(st_open(&in, p) == 0);
        const int32_t *tokens = st_find(&in, "tokens")->data;
        int32_t *inp = mem_alloc((size_t)B * T * sizeof(int32_t));
        for (int b = 0; b < B; b++) memcpy(inp + (size_t)b * T, tokens + (size_t)b * rc.W, (size_t)T * sizeof(int32_t));
        size_t n = (size_t)B * T * V;
        float *lg = mem_alloc(n * sizeof(float));
        const float *ref = st_f32(&ex, "logits_peft", n);
        CHECK(ref != NULL);
        CHECK(model_logits(m, inp, B, T, lg) == 0);
        if (ref) {
            double e = rel_error(lg, ref, n);
            printf("peft export: %d tensors identical to the reference's; logits vs PEFT-convention reference worst rel %.2g\n", compared, e);
            CHECK(e <= 1e-4);
        }
        mem_free(lg); mem_free(inp);
        st_close(&in);
        model_free(m); arena_free(&arena);
    } else CHECK_MSG(0, "%s", error_message());
    st_close(&ex); st_close(&pf);
}

/* (4) PEFT exports of the new families' adapters: phi3's fused
 * projections under their own keys (target_modules qkv_proj, gate_up_proj)
 * and the multimodal gemma3's weight prefix in the PEFT names. Every PEFT
 * tensor is the transposed MLX tensor. Their GGUF LoRA export uses
 * llama.cpp's architecture name and tensor names (phi3's fused LoRA on
 * blk.N.attn_qkv / ffn_up, as convert_lora_to_gguf.py names it; the
 * multimodal gemma3's adapter keys read through its prefix): every pair is
 * there, lora_a the transposed MLX lora_a. A model llama.cpp's graph cannot
 * run (gguf_refusal: the ref case's SmolLM3 has its NoPE layer at 1, llama.cpp
 * at every 4th) is refused with that reason and writes no file. */
static void check_family_exports(const char *name, const char *peft_prefix, const char *arch, int n_targets,
                                 const char *target, const char *gguf_refusal) {
    char dir[600], adir[700], pdir[700], gpath[700], p[900];
    snprintf(dir, sizeof dir, "tests/ref/data/%s", name);
    RefCase rc;
    if (refcase_read(&rc, dir, name) < 0) {
        CHECK_MSG(0, "%s", error_message());
        return;
    }
    snprintf(adir, sizeof adir, "%s/%s_export_adapter", tmp, name);
    snprintf(pdir, sizeof pdir, "%s/%s_peft", tmp, name);
    snprintf(gpath, sizeof gpath, "%s/%s.gguf", tmp, name);
    CHECK(write_adapter_dir(&rc, adir, false) == 0);
    CHECK_MSG(export_peft(rc.dir, adir, pdir) == 0, "%s", error_message());
    int grc = gguf_export_adapter(rc.dir, adir, gpath);
    if (gguf_refusal) {
        CHECK(grc < 0);
        CHECK_MSG(strstr(error_message(), gguf_refusal) != NULL, "%s: GGUF refusal: %s", name, error_message());
        CHECK_MSG(!file_exists(gpath), "%s: a refused GGUF export left %s", name, gpath);
    } else {
        CHECK_MSG(grc == 0, "%s: GGUF adapter export: %s", name, error_message());
    }
    GgufFile gg;
    bool have_gguf = grc == 0 && gguf_open(&gg, gpath) == 0;
    if (have_gguf) {
        char *a = NULL;
        CHECK(gguf_get_str(&gg, "general.architecture", true, &a) == 0 && a && !strcmp(a, arch));
        mem_free(a);
    }
    int gguf_pairs = 0, gguf_bad = 0;
    StFile ad, pf;
    snprintf(p, sizeof p, "%s/adapters.safetensors", adir);
    CHECK(st_open(&ad, p) == 0);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", pdir);
    CHECK(st_open(&pf, p) == 0);
    int pairs = 0, bad = 0;
    for (size_t i = 0; i < ad.n_tensors; i++) {
        const StTensor *a = &ad.tensors[i];
        size_t len = strlen(a->name);
        if (len < 7 || strcmp(a->name + len - 7, ".lora_a")) continue;
        const char *rest = strstr(a->name, "layers.");
        char pn[300];
        snprintf(pn, sizeof pn, "base_model.model.%s%.*s.lora_A.weight", peft_prefix, (int)(len - 7 - (rest - a->name)),
                 rest);
        const StTensor *t = st_find(&pf, pn);
        CHECK_MSG(t != NULL, "%s: PEFT export lacks %s", name, pn);
        if (!t) continue;
        pairs++;
        int64_t in = a->shape[0], r = a->shape[1];
        bool same = t->ndim == 2 && t->shape[0] == r && t->shape[1] == in;
        for (int64_t x = 0; same && x < in; x++)
            for (int64_t k = 0; k < r; k++)
                same &= ((const float *)t->data)[k * in + x] == ((const float *)a->data)[x * r + k];
        bad += !same;
        if (!have_gguf) continue;
        /* the GGUF pair: blk.N.<llama.cpp name>.weight.lora_a, ne [in, r] (memory A^T) */
        int layer = atoi(rest + 7);
        const char *key = strchr(rest + 7, '.') + 1;
        static const char *const KEYS[][2] = {
            {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"},
            {"self_attn.o_proj", "attn_output"}, {"self_attn.qkv_proj", "attn_qkv"}, {"mlp.gate_proj", "ffn_gate"},
            {"mlp.up_proj", "ffn_up"}, {"mlp.gate_up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"},
        };
        const char *gk = NULL;
        for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++)
            if (!strncmp(key, KEYS[k][0], strlen(KEYS[k][0])) && key[strlen(KEYS[k][0])] == '.') gk = KEYS[k][1];
        char gn[160];
        snprintf(gn, sizeof gn, "blk.%d.%s.weight.lora_a", layer, gk ? gk : "?");
        const GgufTensorInfo *gt = gguf_find_tensor(&gg, gn);
        CHECK_MSG(gt != NULL, "%s: the GGUF adapter lacks %s", name, gn);
        if (!gt) continue;
        gguf_pairs++;
        same = gt->type == GGML_TYPE_F32 && gt->n_dims == 2 && gt->ne[0] == in && gt->ne[1] == r;
        for (int64_t x = 0; same && x < in; x++)
            for (int64_t k = 0; k < r; k++)
                same &= ((const float *)gt->data)[k * in + x] == ((const float *)a->data)[x * r + k];
        gguf_bad += !same;
    }
    CHECK_MSG(pairs > 0 && bad == 0, "%s: %d PEFT lora_A tensors, %d differ from the MLX lora_a", name, pairs, bad);
    if (have_gguf) {
        CHECK_MSG(gguf_pairs == pairs && gguf_bad == 0 && gg.n_tensors == (size_t)(2 * pairs),
                  "%s: GGUF adapter: %d of %d lora_a found, %d differ, %zu tensors", name, gguf_pairs, pairs, gguf_bad,
                  gg.n_tensors);
        gguf_close(&gg);
    }
    snprintf(p, sizeof p, "%s/adapter_config.json", pdir);
    json_error_t je;
    json_t *got = json_load_file(p, 0, &je);
    json_t *tm = json_object_get(got, "target_modules");
    bool has = false;
    size_t i;
    json_t *v;
    json_array_foreach(tm, i, v) has |= !strcmp(json_string_value(v), target);
    CHECK_MSG((int)json_array_size(tm) == n_targets && has, "%s: target_modules", name);
    json_decref(got);
    printf("exports %-22s PEFT %d pairs under %s; GGUF %s\n", name, pairs, peft_prefix,
           gguf_refusal ? "refused" : "LoRA adapter, llama.cpp names");
    st_close(&ad);
    st_close(&pf);
}

int main(void) {
    strcpy(tmp, "/tmp/lmtune-lifecycle-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    char names[32][256];
    int n = refcase_list(names, 32);
    CHECK(n >= 8);
    for (int i = 0; i < n; i++) {
        char dir[600];
        snprintf(dir, sizeof dir, "tests/ref/data/%.255s", names[i]);
        RefCase rc;
        if (refcase_read(&rc, dir, names[i]) < 0) { CHECK_MSG(0, "%s", error_message()); continue; }
        if (rc.trajectory) continue;
        check_decode(&rc);
        if (rc.spec.type == TUNE_LORA) {
            check_fuse(&rc, false);
            if (!rc.bf16 || !strcmp(rc.name, "llama3_rope_lora_bf16")) check_fuse(&rc, true);
        }
    }
    check_peft();
    check_family_exports("phi3_longrope_lora", "model.", "phi3", 4, "gate_up_proj", NULL);
    check_family_exports("gemma3_mm_lora", "language_model.model.", "gemma3", 4, "o_proj", NULL);
    check_family_exports("smollm3_nope_lora", "model.", "smollm3", 7, "down_proj",
                         "llama.cpp's smollm3 skips RoPE on every 4th layer (3, 7, 11, ...); layer 1 has no RoPE here");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) return 1;
    return check_finish("cli/lifecycle");
}

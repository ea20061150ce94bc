/* eval_run.c: see eval_run.h. */
#include "cli/eval_run.h"
#include <math.h>
#include <stdio.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "dist/dist.h"
#include "formats/hf_config.h"
#include "cli/train_args.h"
#include "memory/infer_plan.h"
#include "model/adapter_io.h"
#include "tokenizer/tokenizer.h"
#include "train/sources.h"
#include "train/trainer.h"

/* --weights-dtype: the frozen products' dtype (*out), as lmtune
 * train chooses it: auto measures bf16 weights' products both ways on this
 * evaluation's shapes (forward only; an Intel Xeon with AVX512_BF16 and no
 * AMX runs bf16 products at ~0.55x fp32, AMD Zen 4 at ~1.8x); every worker
 * takes rank 0's choice. why: the "Frozen products:" line. */
static int choose_products(const EvalRequest *r, const ModelConfig *cfg, DType *out, char *why, size_t cap) {
    const char *choice = r->weights_dtype ? r->weights_dtype : "auto";
    int named = weights_dtype_named(choice, out);
    TRY(named);
    if (named) {
        snprintf(why, cap, "%s (--weights-dtype %s)", *out == DTYPE_BF16 ? "bf16" : "fp32", choice);
        return 0;
    }
    ModelSpec probe = {.type = TUNE_NONE, .num_layers = -1, .training = false};
    long rows = (long)r->batch_size * r->max_seq_length;
    TRY(model_auto_weights_dtype(r->model, cfg, &probe, (int)(rows < 256 ? rows : 256), out, why, cap));
    return weights_dtype_agree(out);
}

/* mlx_lm.lora's progress lines: on stdout, rank 0 only (cli_ui.rprint). */
static void log_line(const EvalRequest *r, const char *text) {
    if (r->mlx_log) log_info("%s", text);
}

int eval_run(const EvalRequest *r) {
    if (!r->model) return error_set("--model is required (a model directory)");
    log_line(r, "Loading pretrained model");
    Tokenizer *tok = NULL;
    TRY(model_tokenizer_load(&tok, r->model));
    DatasetOptions dopt = r->data_options;
    char *tmpl = NULL;
    int rc = -1;
    Dataset test;
    bool have_test = false, present;
    Model *m = NULL;
    Arena arena = {0};
    DataSource src;
    bool have_src = false;
    const char *adapter = r->adapter_path && r->adapter_path[0] ? r->adapter_path : NULL;
    if (r->chat_template) {
        size_t n;
        if (file_read_all(r->chat_template, 64u << 20, &tmpl, &n) < 0) {
            error_prefix("--chat-template");
            goto out;
        }
        dopt.chat_template = tmpl;
    }
    ModelConfig cfg;
    if (model_config_load(r->model, &cfg) < 0) goto out;
    if (cfg.n_eos > 0) dopt.eos_fallback = cfg.eos_token_ids[0];   /* text data, a tokenizer without EOS */
    log_line(r, "Loading datasets");
    if (dataset_load_split(&test, r->data, "test", tok, &dopt, &present) < 0) goto out;
    have_test = true;
    if (dopt.mask_prompt) dataset_warn_no_targets(&test, r->max_seq_length);
    /* planned before any weight is loaded (memory/infer_plan.h) */
    /* the probe first: the baseline is measured after it has freed its buffers */
    char products[512];
    DType products_dtype;
    if (choose_products(r, &cfg, &products_dtype, products, sizeof products) < 0) goto out;
    /* on stderr: mlx_lm.lora --test's stdout is its four lines, which train --test keeps */
    if (dist_rank() == 0) fprintf(stderr, "Frozen products: %s\n", products);
    InferRequest req = {INFER_EVAL, r->model, adapter, &test, r->batch_size, r->max_seq_length, r->test_batches,
                        r->seed, 0, 0, dist_world(), r->threads, infer_baseline_now(&test), r->memory_limit, 0,
                        true, products_dtype};
    if (r->plan) {
        rc = infer_print_plan(&req, true, stdout);
        goto out;
    }
    if (infer_open(&req, &m, &arena, NULL) < 0) goto out;
    if (data_source_init(&src, NULL, NULL, &test, r->batch_size, r->max_seq_length, dist_rank(), dist_world(),
                         r->seed) < 0)
        goto out;
    have_src = true;
    log_line(r, "Testing");
    Trainee tr = model_trainee(m);
    BatchSource bs = data_source_iface(&src);
    double loss;
    long ntok;
    bool have;
    if (train_evaluate(&tr, &bs, SPLIT_TEST, r->test_batches, &loss, &ntok, &have) < 0) goto out;
    if (dist_rank() == 0) printf("Test loss %.3f, Test ppl %.3f.\n", loss, exp(loss));
    rc = 0;
out:
    if (have_src) data_source_free(&src);
    if (m) model_free(m);
    arena_free(&arena);
    if (have_test) dataset_free(&test);
    mem_free(tmpl);
    tokenizer_free(tok);
    return rc;
}

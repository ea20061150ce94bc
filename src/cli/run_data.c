/* run_data.c: see run_data.h. */
#include "cli/run_data.h"
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "kernels/matmul.h"
#include "base/sys.h"

void run_data_options(const TrainArgs *a, DatasetOptions *o) {
    dataset_options_default(o);
    o->mask_prompt = a->mask_prompt;
    o->skip_bad_lines = a->skip_bad_lines;
    o->prompt_feature = a->prompt_feature;
    o->completion_feature = a->completion_feature;
    o->text_feature = a->text_feature;
    o->chat_feature = a->chat_feature;
}

int run_data_load_model(RunData *d, const TrainArgs *a) {
    memset(d, 0, sizeof *d);
    TRY(model_config_load(a->model, &d->cfg));
    return model_tokenizer_load(&d->tok, a->model);
}

int run_data_load_splits(RunData *d, const TrainArgs *a, int world) {
    DatasetOptions o;
    run_data_options(a, &o);
    if (d->cfg.n_eos > 0) o.eos_fallback = d->cfg.eos_token_ids[0];
    if (a->chat_template) {
        size_t n;
        if (file_read_all(a->chat_template, 64u << 20, &d->chat_template, &n) < 0)
            return error_prefix("--chat-template");
        o.chat_template = d->chat_template;
    }
    bool present;
    TRY(dataset_load_split(&d->train, a->data, "train", d->tok, &o, &present));
    d->have_train = true;
    TRY(dataset_load_split(&d->valid, a->data, "valid", d->tok, &o, &d->have_valid));
    if (a->test) {
        TRY(dataset_load_split(&d->test, a->data, "test", d->tok, &o, &present));
        d->have_test = true;
    }
    if (a->mask_prompt) {
        dataset_warn_no_targets(&d->train, a->max_seq_length);
        if (d->have_valid) dataset_warn_no_targets(&d->valid, a->max_seq_length);
        if (d->have_test) dataset_warn_no_targets(&d->test, a->max_seq_length);
    }
    d->in.cfg = &d->cfg;
    d->in.train = &d->train;
    d->in.valid = d->have_valid ? &d->valid : NULL;
    d->in.test = d->have_test ? &d->test : NULL;
    d->in.world = world;
    /* oneDNN and the OpenMP threads warmed up, the GEMM rates measured and
     * everything the probe made released: then the baseline */
    sys_warm_code();
    matmul_probe();
    d->in.baseline = run_baseline_now(&d->in);
    return 0;
}

int run_data_load(RunData *d, const TrainArgs *a, int world) {
    TRY(run_data_load_model(d, a));
    return run_data_load_splits(d, a, world);
}

void run_data_free(RunData *d) {
    if (d->have_train) dataset_free(&d->train);
    if (d->have_valid) dataset_free(&d->valid);
    if (d->have_test) dataset_free(&d->test);
    if (d->tok) tokenizer_free(d->tok);
    mem_free(d->chat_template);
    memset(d, 0, sizeof *d);
}

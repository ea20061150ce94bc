/* run_data.c: see run_data.h. */
#include "cli/run_data.h"
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"

int run_data_load(RunData *d, const TrainArgs *a, int world) {
    memset(d, 0, sizeof *d);
    TRY(model_config_load(a->model, &d->cfg));
    TRY(model_tokenizer_load(&d->tok, a->model));
    DatasetOptions o;
    dataset_options_default(&o);
    o.mask_prompt = a->mask_prompt;
    o.skip_bad_lines = a->skip_bad_lines;
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
    d->in.cfg = &d->cfg;
    d->in.train = &d->train;
    d->in.valid = d->have_valid ? &d->valid : NULL;
    d->in.test = d->have_test ? &d->test : NULL;
    d->in.world = world;
    d->in.baseline = run_baseline_now(&d->in);
    return 0;
}

void run_data_free(RunData *d) {
    if (d->have_train) dataset_free(&d->train);
    if (d->have_valid) dataset_free(&d->valid);
    if (d->have_test) dataset_free(&d->test);
    if (d->tok) tokenizer_free(d->tok);
    mem_free(d->chat_template);
    memset(d, 0, sizeof *d);
}

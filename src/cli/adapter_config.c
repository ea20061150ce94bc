/* adapter_config.c: see adapter_config.h. The MLX-LM keys are those of
 * lora.py's argparse namespace plus CONFIG_DEFAULTS (HEAD 0.32: with
 * trust_remote_code; v0.31.3 lacks only that key), plus the data keys of
 * tuner/datasets.py when given. */
#include "cli/adapter_config.h"
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

/* MLX-LM's utils._parse_size: digits, then "", M, G, MB or GB (decimal). */
static json_t *size_value(const char *text) {
    if (!text) return json_integer(0);
    size_t split = 0;
    while (text[split] && (isdigit((unsigned char)text[split]) || text[split] == '.')) split++;
    char suffix[8];
    size_t k = 0;
    for (const char *p = text + split; *p && k + 1 < sizeof suffix; p++)
        if (!isspace((unsigned char)*p)) suffix[k++] = (char)toupper((unsigned char)*p);
    suffix[k] = 0;
    double unit = !strcmp(suffix, "") ? 1 : !strcmp(suffix, "M") || !strcmp(suffix, "MB") ? 1e6
                : !strcmp(suffix, "G") || !strcmp(suffix, "GB") ? 1e9 : 0;
    if (split == 0 || unit == 0) return json_string(text);
    return json_integer((json_int_t)(strtod(text, NULL) * unit));
}

static json_t *lora_parameters(const TrainArgs *a) {
    if (!strcmp(a->fine_tune_type, "full")) return json_null();   /* lora.py: args.lora_parameters = None */
    json_t *lp = json_object();
    json_object_set_new(lp, "rank", json_integer(a->lora.rank));
    json_object_set_new(lp, "dropout", json_real(a->lora.dropout));
    json_object_set_new(lp, "scale", json_real(a->lora.scale));
    if (a->lora.n_keys) {
        json_t *keys = json_array();
        for (int k = 0; k < a->lora.n_keys; k++) json_array_append_new(keys, json_string(a->lora.keys[k]));
        json_object_set_new(lp, "keys", keys);
    }
    return lp;
}

/* CONFIG_DEFAULTS["optimizer_config"], or the YAML's mapping as given. */
static json_t *optimizer_config(const TrainArgs *a) {
    if (a->optimizer_config_json) return json_deep_copy(a->optimizer_config_json);
    return json_pack("{s:{}, s:{}, s:{}, s:{}, s:{}}", "adam", "adamw", "muon", "sgd", "adafactor");
}

static bool set(const TrainArgs *a, const char *flag) { return train_args_was_set(a, flag); }

static int by_name(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }

/* Appends src's members to dst in key order (jansson keeps insertion order). */
static int append_sorted(json_t *dst, json_t *src) {
    size_t n = json_object_size(src), i = 0;
    const char **keys = mem_calloc(n ? n : 1, sizeof *keys);
    if (!keys) return -1;
    const char *key;
    json_t *value;
    json_object_foreach(src, key, value) keys[i++] = key;
    qsort(keys, n, sizeof *keys, by_name);
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) rc = json_object_set(dst, keys[k], json_object_get(src, keys[k]));
    mem_free((void *)keys);
    return rc;
}

int adapter_config_write(const TrainArgs *a, int iters, const char *dir, DType products) {
    json_t *mlx = json_object(), *ours = json_object();
    if (!mlx || !ours) {
        json_decref(mlx);
        json_decref(ours);
        return error_set("adapter_config.json: out of memory");
    }
#define S(j, k, v) json_object_set_new(j, k, str_or_null(v))
#define I(j, k, v) json_object_set_new(j, k, json_integer(v))
#define F(j, k, v) json_object_set_new(j, k, json_real(v))
#define B(j, k, v) json_object_set_new(j, k, json_boolean(v))
    S(mlx, "adapter_path", a->adapter_path);
    I(mlx, "batch_size", a->batch_size);
    json_object_set_new(mlx, "clear_cache_threshold", size_value(a->clear_cache_threshold));
    S(mlx, "config", a->config);
    S(mlx, "data", a->data);
    S(mlx, "fine_tune_type", a->fine_tune_type);
    I(mlx, "grad_accumulation_steps", a->grad_accumulation_steps);
    B(mlx, "grad_checkpoint", strcmp(a->grad_checkpoint, "off") != 0);
    I(mlx, "iters", iters);
    F(mlx, "learning_rate", a->learning_rate);
    json_object_set_new(mlx, "lora_parameters", lora_parameters(a));
    json_object_set_new(mlx, "lr_schedule", a->lr_schedule_json ? json_deep_copy(a->lr_schedule_json) : json_null());
    B(mlx, "mask_prompt", a->mask_prompt);
    I(mlx, "max_seq_length", a->max_seq_length);
    S(mlx, "model", a->model_name ? a->model_name : a->model);
    I(mlx, "num_layers", a->num_layers);
    S(mlx, "optimizer", a->optimizer);
    json_object_set_new(mlx, "optimizer_config", optimizer_config(a));
    S(mlx, "project_name", a->project_name);
    S(mlx, "report_to", a->report_to);
    S(mlx, "resume_adapter_file", a->resume_adapter_file);
    I(mlx, "save_every", a->save_every);
    I(mlx, "seed", (json_int_t)a->seed);
    I(mlx, "steps_per_eval", a->steps_per_eval);
    I(mlx, "steps_per_report", a->steps_per_report);
    B(mlx, "test", a->test);
    I(mlx, "test_batches", a->test_batches);
    B(mlx, "train", a->train);
    B(mlx, "trust_remote_code", a->trust_remote_code);
    I(mlx, "val_batches", a->val_batches);
    /* the data keys exist in MLX-LM's namespace only when the YAML gave them */
    if (set(a, "prompt-feature")) S(mlx, "prompt_feature", a->prompt_feature);
    if (set(a, "completion-feature")) S(mlx, "completion_feature", a->completion_feature);
    if (set(a, "text-feature")) S(mlx, "text_feature", a->text_feature);
    if (set(a, "chat-feature")) S(mlx, "chat_feature", a->chat_feature);
    S(ours, "chat_template", a->chat_template);
    F(ours, "epochs", a->epochs);
    S(ours, "frozen_products", products == DTYPE_BF16 ? "bf16" : "f32");
    if (strcmp(a->grad_checkpoint, "off") && strcmp(a->grad_checkpoint, "all")) {
        /* which blocks, beside MLX-LM's boolean, when not every one */
        BlockSet blocks;
        bool all, none, autom;
        json_t *list = json_array();
        if (train_args_checkpoint(a->grad_checkpoint, &blocks, &all, &none, &autom) == 0)
            for (int l = 0; l < MODEL_MAX_BLOCKS; l++)
                if (block_set_has(&blocks, l)) json_array_append_new(list, json_integer(l));
        error_clear();
        json_object_set_new(ours, "grad_checkpoint_blocks", list);
    }
    S(ours, "loss_normalization", a->loss_normalization);
    F(ours, "max_grad_norm", a->max_grad_norm);
    S(ours, "metrics_file", a->metrics_file);
    B(ours, "skip_bad_lines", a->skip_bad_lines);
    S(ours, "weights_dtype", a->weights_dtype);
#undef S
#undef I
#undef F
#undef B
    /* MLX-LM's keys sorted (save_config sorts them), then lmtune's, sorted */
    json_t *sorted = json_object();
    int rc = sorted ? append_sorted(sorted, mlx) : -1;
    if (rc == 0) rc = append_sorted(sorted, ours);
    char *text = rc == 0 ? json_dumps(sorted, JSON_INDENT(4) | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(sorted);
    json_decref(mlx);
    json_decref(ours);
    if (!text && rc < 0) {
        return error_prefix("adapter_config.json");   /* our allocator's message (size) stays */
    }
    if (!text) {
        return error_set("adapter_config.json: out of memory");
    }
    char *path = path_join(dir, "adapter_config.json");
    rc = path ? atomic_write_file(path, text, strlen(text)) : -1;
    mem_free(path);
    free(text);
    return rc;
}

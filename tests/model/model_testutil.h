/* model_testutil.h: helpers the model tests share (header-only, so the
 * Makefile does not link them into every other test): reading a reference
 * case of tests/ref/data, building a ModelSpec from its case.json, and
 * loading a model into an arena sized by its own plan. */
#ifndef LT_MODEL_TESTUTIL_H
#define LT_MODEL_TESTUTIL_H
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/alloc.h"
#include "base/arena.h"
#include "base/error.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "kernels/matmul.h"
#include "memory/plan.h"
#include "model/model.h"

typedef struct {
    char dir[600];
    char name[256];
    ModelConfig cfg;
    ModelSpec spec;
    bool bf16;
    int B, W;
    bool trajectory;
} RefCase;

static inline unsigned keys_mask(json_t *keys) {
    unsigned mask = 0;
    size_t i; json_t *k;
    json_array_foreach(keys, i, k) {
        for (int p = 0; p < PROJ_COUNT; p++)
            if (!strcmp(json_string_value(k), PROJ_KEYS[p])) mask |= 1u << p;
    }
    return mask;
}

static inline int refcase_read(RefCase *rc, const char *dir, const char *name) {
    memset(rc, 0, sizeof *rc);
    snprintf(rc->dir, sizeof rc->dir, "%.590s", dir);
    snprintf(rc->name, sizeof rc->name, "%.255s", name);
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (hf_config_load(&rc->cfg, p) < 0) return -1;
    snprintf(p, sizeof p, "%s/case.json", dir);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) return error_set("%s: %s", p, je.text);
    const char *ft = json_string_value(json_object_get(j, "fine_tune_type"));
    ModelSpec *s = &rc->spec;
    s->type = !ft ? TUNE_LORA : !strcmp(ft, "full") ? TUNE_FULL : !strcmp(ft, "dora") ? TUNE_DORA : TUNE_LORA;
    s->num_layers = (int)json_integer_value(json_object_get(j, "num_layers"));
    json_t *lora = json_object_get(j, "lora");
    if (json_is_object(lora)) {
        s->lora_rank = (int)json_integer_value(json_object_get(lora, "rank"));
        s->lora_scale = (float)json_number_value(json_object_get(lora, "scale"));
        s->lora_dropout = (float)json_number_value(json_object_get(lora, "dropout"));
        s->lora_keys = keys_mask(json_object_get(lora, "keys"));
    }
    const char *wd = json_string_value(json_object_get(j, "weights_dtype"));
    rc->bf16 = wd && !strcmp(wd, "bfloat16");
    rc->B = (int)json_integer_value(json_object_get(j, "batch"));
    rc->W = (int)json_integer_value(json_object_get(j, "width"));
    rc->trajectory = json_object_get(j, "updates") != NULL;
    json_decref(j);
    s->max_rows = rc->B; s->max_tokens = rc->W - 1;
    /* bf16 weights are multiplied as stored where the CPU has bf16 products,
     * else in fp32 products on panels they are widened into */
    s->weight_dtype = rc->bf16 && matmul_bf16_supported() ? DTYPE_BF16 : DTYPE_F32;
    s->training = true;
    s->lmhead_chunk = 8;   /* several chunks even for these tiny batches */
    return 0;
}

/* Case directories (those with a case.json) under root, sorted; returns how many. */
static inline int refcase_list_in(const char *root, char names[][256], int max) {
    DIR *dp = opendir(root);
    if (!dp) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) && n < max) {
        if (e->d_name[0] == '.') continue;
        char p[700];
        snprintf(p, sizeof p, "%s/%.255s/case.json", root, e->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        fclose(f);
        snprintf(names[n++], 256, "%.255s", e->d_name);
    }
    closedir(dp);
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && strcmp(names[k - 1], names[k]) > 0; k--) {
            char t[256]; memcpy(t, names[k], 256); memcpy(names[k], names[k - 1], 256); memcpy(names[k - 1], t, 256);
        }
    return n;
}
static inline int refcase_list(char names[][256], int max) { return refcase_list_in("tests/ref/data", names, max); }

/* Plans the spec, makes an arena of exactly the plan's bytes, loads. */
static inline int load_planned(Model **m, Arena *arena, size_t *planned, const char *dir,
                        const ModelConfig *cfg, const ModelSpec *spec, DType file_dtype) {
    MemPlan plan = {0};
    Carver cv = {NULL, &plan};
    *planned = 0;
    WeightsSummary ws;   /* from the headers: a quantized model is planned as stored */
    if (model_weights_summary(dir, cfg, &ws) < 0) return -1;
    if (!ws.quantized && ws.file_dtype != file_dtype)
        return error_set("%s: matrices are %s, not %s", dir, dtype_name(ws.file_dtype), dtype_name(file_dtype));
    if (model_layout_summary(cfg, spec, &ws, &cv) < 0) { plan_free(&plan); return -1; }
    *planned = plan_arena_bytes(&plan);
    plan_free(&plan);
    if (arena_init(arena, *planned ? *planned : 64) < 0) return -1;
    if (model_load(m, dir, spec, arena) < 0) { arena_free(arena); return -1; }
    return 0;
}

static inline const float *st_f32(const StFile *f, const char *name, size_t n) {
    const StTensor *t = st_find(f, name);
    if (!t || t->dtype != DTYPE_F32 || t->nelem != n) return NULL;
    return (const float *)t->data;
}
#endif

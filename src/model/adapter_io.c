/* adapter_io.c: adapter directories and files into a Model (see adapter_io.h). */
#include "model/adapter_io.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/matmul.h"
#include <stdio.h>
#include <string.h>

int adapter_spec_from_dir(const char *adapter_dir, ModelSpec *spec) {
    AdapterConfig ac;
    TRY(adapter_config_load(&ac, adapter_dir));
    spec->type = ac.type;
    spec->num_layers = ac.num_layers;
    spec->lora_rank = ac.rank;
    spec->lora_scale = ac.scale;
    spec->lora_dropout = 0.0f; /* inference */
    spec->lora_keys = 0;
    if (ac.type == TUNE_FULL) return 0;
    char *path = path_join(adapter_dir, "adapters.safetensors");
    if (!path) return -1;
    StFile f;
    int rc = st_open_header(&f, path);
    mem_free(path);
    TRY(rc);
    for (size_t i = 0; i < f.n_tensors; i++)
        for (int p = 0; p < PROJ_COUNT; p++) {
            char needle[64];
            snprintf(needle, sizeof needle, ".%s.lora_a", PROJ_KEYS[p]);
            if (strstr(f.tensors[i].name, needle)) spec->lora_keys |= 1u << p;
        }
    st_close(&f);
    if (!spec->lora_keys) return error_set("%s/adapters.safetensors: no lora_a tensor found", adapter_dir);
    return 0;
}

int adapter_load_file(Model *m, const char *file, bool strict) {
    StFile f;
    TRY(st_open(&f, file));
    TrainableTensor *tt;
    size_t n = model_trainables(m, &tt);
    int rc = -1;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const StTensor *t = &f.tensors[i];
        size_t j = 0;
        while (j < n && strcmp(tt[j].name, t->name)) j++;
        if (j == n) {
            error_set("Adapter at %s contains incompatible tensors:\n  %s: not an adapter parameter in the model", file,
                      t->name);
            goto out;
        }
        bool same = t->ndim == tt[j].ndim && t->nelem == tt[j].numel;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == tt[j].shape[d];
        if (!same || (t->dtype != DTYPE_F32 && t->dtype != DTYPE_BF16 && t->dtype != DTYPE_F16)) {
            char got[64] = "", want[64] = "";
            for (int d = 0; d < t->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
            for (int d = 0; d < tt[j].ndim; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                         (long long)tt[j].shape[d]);
            error_set("Adapter at %s contains incompatible tensors:\n  %s: adapter shape (%s) does not match model "
                      "parameter shape (%s)",
                      file, t->name, got, want);
            goto out;
        }
    }
    for (size_t j = 0; j < n; j++) {
        const StTensor *t = st_find(&f, tt[j].name);
        if (!t) {
            if (strict) {
                error_set("%s: missing adapter tensor %s", file, tt[j].name);
                goto out;
            }
            continue;
        }
        dtype_to_f32(tt[j].value, t->data, t->dtype, tt[j].numel);
    }
    rc = 0;
out:
    st_close(&f);
    return rc;
}

int model_plan_inference(MemPlan *plan, ModelSpec *spec, const char *model_dir, const char *adapter_dir,
                         int rows, int tokens, int kv_tokens, int max_positions) {
    memset(plan, 0, sizeof *plan);
    ModelConfig cfg;
    TRY(model_config_load(model_dir, &cfg));
    TRY(model_config_resolve(model_dir, &cfg));   /* plan for the weights' layout as the load will see it */
    memset(spec, 0, sizeof *spec);
    spec->type = TUNE_NONE;
    spec->num_layers = -1;
    spec->max_rows = rows;
    spec->max_tokens = tokens;
    spec->kv_cache_tokens = kv_tokens;
    spec->max_positions = max_positions;
    /* the matrices are used as stored (the safetensors headers or the GGUF
     * tensors say how, not config.json's torch_dtype): BF16 where oneDNN has
     * bf16 products, else F32 (F16 is always widened) */
    DType file_dtype;
    TRY(model_file_dtype(model_dir, &cfg, &file_dtype));
    spec->weight_dtype = matmul_weight_dtype(file_dtype);
    spec->training = false;
    if (adapter_dir) TRY(adapter_spec_from_dir(adapter_dir, spec));
    WeightsSummary ws;
    TRY(model_weights_summary(model_dir, &cfg, &ws));
    Carver cv = {NULL, plan};
    TRY(model_layout_summary(&cfg, spec, &ws, &cv));
    return model_plan_weights(model_dir, &cfg, spec, plan);
}

int model_open_inference(Model **out, Arena *arena, const char *model_dir, const char *adapter_dir,
                         int rows, int tokens, int kv_tokens, int max_positions) {
    MemPlan plan;
    ModelSpec spec;
    if (model_plan_inference(&plan, &spec, model_dir, adapter_dir, rows, tokens, kv_tokens, max_positions) < 0) {
        plan_free(&plan);
        return -1;
    }
    size_t bytes = plan_arena_bytes(&plan);
    plan_free(&plan);
    TRY(arena_init(arena, bytes));
    if (model_load(out, model_dir, &spec, arena) < 0) {
        arena_free(arena);
        return -1;
    }
    if (adapter_dir) {
        char *file = path_join(adapter_dir, "adapters.safetensors");
        int lrc = file ? adapter_load_file(*out, file, true) : -1;
        mem_free(file);
        if (lrc < 0) {
            model_free(*out);
            *out = NULL;
            arena_free(arena);
            return -1;
        }
    }
    return 0;
}

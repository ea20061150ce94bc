/* trainable_shapes.c: the trainable tensor list of a spec (see the header);
 * mirrors the model's enumeration (model_layout.c) block by block. */
#include "train/trainable_shapes.h"
#include <stdio.h>
#include <string.h>
#include "base/error.h"

static size_t add(TrainableTensor *list, size_t i, int ndim, int64_t a, int64_t b, const char *fmt, int layer, const char *what) {
    if (list) {
        TrainableTensor *t = &list[i];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, fmt, layer, what);
        t->ndim = ndim;
        t->shape[0] = a;
        t->shape[1] = ndim == 2 ? b : 0;
        t->numel = (size_t)a * (ndim == 2 ? (size_t)b : 1);
    }
    return i + 1;
}

size_t train_trainable_shapes(const ModelConfig *cfg, const ModelSpec *spec, TrainableTensor *list) {
    if (spec->type == TUNE_NONE) return 0;
    const int L = cfg->num_hidden_layers, C = cfg->hidden_size, F = cfg->intermediate_size;
    const int QD = cfg->num_attention_heads * cfg->head_dim, KVD = cfg->num_key_value_heads * cfg->head_dim;
    int nl = spec->num_layers <= 0 || spec->num_layers > L ? L : spec->num_layers;
    size_t i = 0;
    char name[48];
    for (int l = L - nl; l < L; l++) {
        for (int p = 0; p < PROJ_COUNT; p++) {
            int in = C, out = C;
            switch (p) {
            case PROJ_Q: out = QD; break;
            case PROJ_K: case PROJ_V: out = KVD; break;
            case PROJ_O: in = QD; break;
            case PROJ_GATE: case PROJ_UP: out = F; break;
            default: in = F; break;
            }
            if (spec->type == TUNE_FULL) {
                if (p == 0) i = add(list, i, 1, C, 0, "model.layers.%d.%s", l, "input_layernorm.weight");
                snprintf(name, sizeof name, "%s.weight", PROJ_KEYS[p]);
                i = add(list, i, 2, out, in, "model.layers.%d.%s", l, name);
                if (cfg->attention_bias && p <= PROJ_V) {
                    snprintf(name, sizeof name, "%s.bias", PROJ_KEYS[p]);
                    i = add(list, i, 1, out, 0, "model.layers.%d.%s", l, name);
                }
                if (p == PROJ_V && cfg->qk_norm) {
                    i = add(list, i, 1, cfg->head_dim, 0, "model.layers.%d.%s", l, "self_attn.q_norm.weight");
                    i = add(list, i, 1, cfg->head_dim, 0, "model.layers.%d.%s", l, "self_attn.k_norm.weight");
                }
                if (p == PROJ_O) i = add(list, i, 1, C, 0, "model.layers.%d.%s", l, "post_attention_layernorm.weight");
            } else {
                if (!(spec->lora_keys >> p & 1u)) continue;
                snprintf(name, sizeof name, "%s.lora_a", PROJ_KEYS[p]);
                i = add(list, i, 2, in, spec->lora_rank, "model.layers.%d.%s", l, name);
                snprintf(name, sizeof name, "%s.lora_b", PROJ_KEYS[p]);
                i = add(list, i, 2, spec->lora_rank, out, "model.layers.%d.%s", l, name);
                if (spec->type == TUNE_DORA) {
                    snprintf(name, sizeof name, "%s.m", PROJ_KEYS[p]);
                    i = add(list, i, 1, out, 0, "model.layers.%d.%s", l, name);
                }
            }
        }
    }
    return i;
}

int train_trainables_match(const TrainableTensor *a, size_t na, const TrainableTensor *b, size_t nb) {
    if (na != nb) return error_set("internal: %zu trainable tensors planned, the model has %zu", na, nb);
    for (size_t i = 0; i < na; i++) {
        bool same = !strcmp(a[i].name, b[i].name) && a[i].ndim == b[i].ndim && a[i].shape[0] == b[i].shape[0] &&
                    (a[i].ndim == 1 || a[i].shape[1] == b[i].shape[1]);
        if (!same) return error_set("internal: planned trainable tensor %zu is %s, the model's is %s", i, a[i].name, b[i].name);
    }
    return 0;
}

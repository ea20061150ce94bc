/* qwen35_tensors.c: the tensors of a Qwen3.5 text decoder and how a
 * directory stores them (see qwen35_config.h for the two layouts).
 *
 * Per layer (transformers' names, after the text prefix):
 *   both kinds      input_layernorm.weight (C), post_attention_layernorm.weight (C),
 *                   mlp.{gate,up}_proj.weight (F, C), mlp.down_proj.weight (C, F)
 *   full attention  self_attn.q_proj.weight (2 H D, C): per head the query, then
 *                   its output gate; k_proj / v_proj (KVH D, C); o_proj (C, H D);
 *                   q_norm / k_norm (D)
 *   Gated DeltaNet  linear_attn.in_proj_qkv.weight (2 Hk Dk + Hv Dv, C),
 *                   in_proj_z (Hv Dv, C), in_proj_b / in_proj_a (Hv, C),
 *                   conv1d.weight (C', 1, K) [MLX: (C', K, 1)], A_log (Hv),
 *                   dt_bias (Hv), norm.weight (Dv), out_proj.weight (C, Hv Dv)
 * plus embed_tokens (V, C), norm (C) and, untied, the LM head (V, C).
 * A published checkpoint also holds the vision tower (model.visual.*) and
 * the multi-token-prediction head (mtp.*): text fine-tuning never reads
 * them, and a loader that checks only these names ignores them. */
#include "formats/model_tensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdio.h>
#include <string.h>

static void add(ModelTensorSpec *s, size_t *k, const char *prefix, int layer, const char *suffix, int ndim,
                int64_t d0, int64_t d1, int64_t d2) {
    ModelTensorSpec *t = &s[(*k)++];
    if (layer >= 0) snprintf(t->name, sizeof t->name, "%slayers.%d.%s", prefix, layer, suffix);
    else snprintf(t->name, sizeof t->name, "%s%s", prefix, suffix);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->shape[2] = ndim > 2 ? d2 : 0;
}

/* projection p's weight, shaped by hf_proj_shape */
static void add_proj(ModelTensorSpec *s, size_t *k, const ModelConfig *c, int layer, int p) {
    char suffix[48];
    int64_t out, in;
    hf_proj_shape(c, p, &out, &in);
    snprintf(suffix, sizeof suffix, "%s.weight", PROJ_KEYS[p]);
    add(s, k, c->q35.prefix, layer, suffix, 2, out, in, 0);
}

int qwen35_tensor_specs(const ModelConfig *c, ModelTensorSpec **out, size_t *n) {
    const Qwen35Config *q = &c->q35;
    int64_t C = c->hidden_size, V = c->vocab_size, L = c->num_hidden_layers, D = c->head_dim;
    int64_t CC, K = q->conv_kernel, in;
    hf_proj_shape(c, PROJ_LQKV, &CC, &in); /* conv channels: in_proj_qkv's outputs */
    ModelTensorSpec *s = mem_calloc(3 + (size_t)L * 14, sizeof *s);
    if (!s) return -1;
    size_t k = 0;
    const char *p = q->prefix;
    add(s, &k, p, -1, "embed_tokens.weight", 2, V, C, 0);
    for (int i = 0; i < (int)L; i++) {
        add(s, &k, p, i, "input_layernorm.weight", 1, C, 0, 0);
        if (q->linear[i]) {
            add_proj(s, &k, c, i, PROJ_LQKV);
            add_proj(s, &k, c, i, PROJ_LZ);
            add_proj(s, &k, c, i, PROJ_LB);
            add_proj(s, &k, c, i, PROJ_LA);
            if (q->layout == Q35_LAYOUT_MLX) add(s, &k, p, i, "linear_attn.conv1d.weight", 3, CC, K, 1);
            else add(s, &k, p, i, "linear_attn.conv1d.weight", 3, CC, 1, K);
            add(s, &k, p, i, "linear_attn.A_log", 1, q->v_heads, 0, 0);
            add(s, &k, p, i, "linear_attn.dt_bias", 1, q->v_heads, 0, 0);
            add(s, &k, p, i, "linear_attn.norm.weight", 1, q->v_dim, 0, 0);
            add_proj(s, &k, c, i, PROJ_LOUT);
        } else {
            add_proj(s, &k, c, i, PROJ_Q); /* query and output gate */
            add_proj(s, &k, c, i, PROJ_K);
            add_proj(s, &k, c, i, PROJ_V);
            add_proj(s, &k, c, i, PROJ_O);
            add(s, &k, p, i, "self_attn.q_norm.weight", 1, D, 0, 0);
            add(s, &k, p, i, "self_attn.k_norm.weight", 1, D, 0, 0);
        }
        add(s, &k, p, i, "post_attention_layernorm.weight", 1, C, 0, 0);
        add_proj(s, &k, c, i, PROJ_GATE);
        add_proj(s, &k, c, i, PROJ_UP);
        add_proj(s, &k, c, i, PROJ_DOWN);
    }
    add(s, &k, p, -1, "norm.weight", 1, C, 0, 0);
    if (!c->tie_word_embeddings) add(s, &k, "", -1, q->head_name, 2, V, C, 0);
    *out = s;
    *n = k;
    return 0;
}

/* Where the text weights are: the config's default first, then the other
 * layouts (a nested config may come with MLX-LM's names, a flat one with the
 * nested names). MLX-LM's files are recognised by their conv1d weights
 * (C', K, 1), as mlx_lm's own sanitize does. */
int qwen35_detect_layout(ModelConfig *c, const StModel *m) {
    Qwen35Config *q = &c->q35;
    const char *cands[4] = {q->prefix, "model.language_model.", "language_model.model.", "model."};
    char nm[128];
    int found = -1;
    for (int i = 0; i < 4 && found < 0; i++) {
        snprintf(nm, sizeof nm, "%sembed_tokens.weight", cands[i]);
        if (st_model_find(m, nm)) found = i;
    }
    if (found < 0)
        return error_set("%s: tensor %sembed_tokens.weight is missing (also looked for the text weights under "
                         "model.language_model., language_model.model. and model.)", m->dir, q->prefix);
    char pfx[32];
    snprintf(pfx, sizeof pfx, "%s", cands[found]);
    snprintf(q->prefix, sizeof q->prefix, "%s", pfx);
    bool mlx_names = !strcmp(pfx, "language_model.model.");
    snprintf(q->head_name, sizeof q->head_name, "%s", mlx_names ? "language_model.lm_head.weight" : "lm_head.weight");
    q->layout = Q35_LAYOUT_HF;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        if (!q->linear[i]) continue;
        snprintf(nm, sizeof nm, "%slayers.%d.linear_attn.conv1d.weight", pfx, i);
        const StTensor *t = st_model_find(m, nm);
        if (t && t->ndim == 3 && t->shape[2] == 1 && t->shape[1] != 1) q->layout = Q35_LAYOUT_MLX;
        break;
    }
    return 0;
}

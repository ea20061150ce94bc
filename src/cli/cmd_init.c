/* cmd_init.c: `lmtune init`: writes a randomly initialised model directory
 * (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
 * from a preset or a config.json. No weights can be downloaded on the
 * machines lmtune is tested on, so the tests, the benchmarks and the demo
 * build their models with it. The tokenizer is a byte-level BPE learned from
 * --tokenizer-text files (or bytes only without them). `--init fan-in`
 * rescales every matrix to std 1/sqrt(fan-in) (the embedding: 1/sqrt(hidden)):
 * HF's N(0, 0.02^2) shrinks the signal of a narrow model at every matrix,
 * and with the frozen tied embedding capping the logits near 5, such a
 * model takes thousands of steps to learn anything that depends on the
 * prompt; the demo's model learns in minutes with the scaled init. The
 * flags are an args table (cli/args.h), parsed, checked and listed by
 * --help as every command's. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

static const char *CHATML_TEMPLATE =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

typedef struct {
    const char *preset, *config, *out, *dtype, *init;
    uint64_t seed;
    int layers, vocab_size;
    ArgStringList tokenizer_text;
    ArgResult parsed;
} InitArgs;

#define OFF(f) offsetof(InitArgs, f)
static const ArgSpec INIT_SPECS[] = {
    {"preset", 0, ARG_CHOICE, OFF(preset), "NAME", "architecture preset",
     "tiny|smollm2-135m|qwen2.5-0.5b|qwen3-0.6b|llama-3.2-1b|llama-3.1-8b|"
     "gemma-3-270m|gemma-3-1b|phi-4-mini|smollm3-3b|qwen3.5-0.8b|qwen3.5-2b|qwen3.5-4b|tiny-qwen3.5",
     ARG_UNBOUNDED},
    {"config", 0, ARG_STRING, OFF(config), "FILE", "a config.json to take the architecture from instead", NULL,
     ARG_UNBOUNDED},
    {"out", 0, ARG_STRING, OFF(out), "DIR", "output directory (created)", NULL, ARG_UNBOUNDED},
    {"dtype", 0, ARG_CHOICE, OFF(dtype), "T", "weight dtype in model.safetensors", "f32|bf16", ARG_UNBOUNDED},
    {"seed", 0, ARG_U64, OFF(seed), "N", "random seed", NULL, ARG_UNBOUNDED},
    {"init", 0, ARG_CHOICE, OFF(init), "SCALE", "weight scale, explained below", "hf|fan-in", ARG_UNBOUNDED},
    {"layers", 0, ARG_INT, OFF(layers), "N", "override num_hidden_layers; 0: keep the architecture's", NULL,
     ARG_AT_LEAST(0, "a non-negative integer")},
    {"tokenizer-text", 0, ARG_STRING_LIST, OFF(tokenizer_text), "FILE", "learn a byte-level BPE tokenizer from FILE",
     NULL, ARG_UNBOUNDED},
    {"vocab-size", 0, ARG_INT, OFF(vocab_size), "N", "tokenizer vocabulary when learning one (see below)", NULL, 259,
     "an integer in 259..1000000", 1000000, 0},
};
#undef OFF
static const ArgTable INIT_TABLE = {
    "init", "init (--preset NAME | --config config.json) --out DIR [flags]",
    INIT_SPECS, sizeof INIT_SPECS / sizeof INIT_SPECS[0], false, NULL, NULL,
    "Creates a randomly initialised Hugging Face model directory.\n"
    "--init: hf = N(0, 0.02^2) everywhere; fan-in = std 1/sqrt(fan-in) per matrix,\n"
    "  which small models learn from much faster.\n"
    "--vocab-size: the model's vocab_size becomes max(preset, tokenizer) for presets,\n"
    "  or exactly N for the tiny preset; without --tokenizer-text the tokenizer has\n"
    "  the 256 bytes and 3 special tokens only.\n",
};

/* Rewrites DIR/model.safetensors with every matrix scaled from std 0.02 to
 * std 1/sqrt(columns) (embedding rows (V, C): 1/sqrt(C) as well). */
static int rescale_fan_in(const char *dir) {
    char *path = path_join(dir, "model.safetensors");
    if (!path) return -1;
    StFile f;
    if (st_open(&f, path) < 0) {
        mem_free(path);
        return -1;
    }
    StWriteTensor *wt = mem_calloc(f.n_tensors + 1, sizeof *wt);
    float **owned = mem_calloc(f.n_tensors + 1, sizeof *owned);
    int rc = -1;
    if (!wt || !owned) goto out;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const StTensor *t = &f.tensors[i];
        wt[i] = (StWriteTensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(wt[i].shape, t->shape, sizeof t->shape);
        if (t->ndim != 2) continue;
        float *w = owned[i] = mem_alloc(t->nelem * sizeof(float) + 1);
        if (!w) goto out;
        dtype_to_f32(w, t->data, t->dtype, t->nelem);
        float k = (float)(1.0 / sqrt((double)t->shape[1]) / 0.02);
        for (size_t e = 0; e < t->nelem; e++) w[e] *= k;
        dtype_from_f32(w, t->dtype, w, t->nelem);
        wt[i].data = w;
    }
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    rc = st_write(path, wt, f.n_tensors, mk, mv, 1);
out:
    for (size_t i = 0; owned && i < f.n_tensors; i++) mem_free(owned[i]);
    mem_free(owned);
    mem_free(wt);
    st_close(&f);
    mem_free(path);
    return rc;
}

static int append_file(char **text, size_t *len, const char *path) {
    char *buf;
    size_t n;
    TRY(file_read_all(path, 256u << 20, &buf, &n));
    char *grown = mem_realloc(*text, *len + n + 2);
    if (!grown) {
        mem_free(buf);
        return -1;
    }
    memcpy(grown + *len, buf, n);
    *len += n;
    grown[(*len)++] = '\n';
    grown[*len] = 0;
    *text = grown;
    mem_free(buf);
    return 0;
}

int cmd_init(int argc, char **argv) {
    InitArgs a = {.dtype = "f32", .init = "hf", .seed = 0, .vocab_size = 512};
    if (args_parse(&INIT_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    if (!a.out) die("--out is required (the directory to create)");
    if (a.preset && a.config) die("--preset and --config both given: give one of them");
    if (!a.preset && !a.config) die("--preset or --config is required (a preset name or a config.json)");
    DType dtype = !strcmp(a.dtype, "bf16") ? DTYPE_BF16 : DTYPE_F32;
    const char *preset = a.preset, *out = a.out;

    ModelConfig cfg;
    if (preset) { if (model_preset(preset, &cfg) < 0) die_with_error(); }
    else if (hf_config_load(&cfg, a.config) < 0) die_with_error();
    if (a.layers > 0) {
        /* the first N layers keep their kinds (sliding, NoPE); later ones are plain */
        if (a.layers > HF_MAX_LAYERS) die("--layers %d: at most %d", a.layers, HF_MAX_LAYERS);
        cfg.num_hidden_layers = a.layers;
        memset(cfg.layer_flags + a.layers, 0, sizeof cfg.layer_flags - (size_t)a.layers);
    }
    if (dir_ensure(out) < 0) die_with_error();

    char *text = NULL;
    size_t len = 0;
    for (int i = 0; i < a.tokenizer_text.count; i++)
        if (append_file(&text, &len, a.tokenizer_text.items[i]) < 0) die_with_error();
    int tok_vocab = a.tokenizer_text.count ? a.vocab_size : 256 + 3;
    if (tokenizer_write_bytelevel(out, text ? text : "", len, tok_vocab, CHATML_TEMPLATE) < 0) die_with_error();
    mem_free(text);
    Tokenizer *tok;
    char *tok_path = path_join(out, "tokenizer.json");
    if (!tok_path || tokenizer_load(&tok, out) < 0) die_with_error();
    int real_vocab = tokenizer_vocab_size(tok);
    if (preset && (!strcmp(preset, "tiny") || !strcmp(preset, "tiny-qwen3.5"))) cfg.vocab_size = real_vocab;
    else if (cfg.vocab_size < real_vocab) cfg.vocab_size = real_vocab;
    cfg.eos_token_ids[0] = tokenizer_eos_id(tok);
    cfg.n_eos = 1;
    cfg.bos_token_id = -1;
    tokenizer_free(tok);
    mem_free(tok_path);
    cfg.torch_dtype = dtype;
    if (model_init_random(out, &cfg, dtype, a.seed) < 0) die_with_error();
    if (!strcmp(a.init, "fan-in") && rescale_fan_in(out) < 0) die_with_error();
    printf("Initialised %s model in %s: %d layers, hidden %d, vocab %d, %s weights (%s init), tokenizer vocab %d\n",
           cfg.model_type, out, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size, a.dtype, a.init, real_vocab);
    return 0;
}

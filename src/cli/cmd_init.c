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
 * prompt; the demo's model learns in minutes with the scaled init. */
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include <math.h>
#include "tokenizer/tokenizer.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CHATML_TEMPLATE =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static void usage(FILE *out) {
    fprintf(out,
        "usage: lmtune init (--preset NAME | --config config.json) --out DIR [flags]\n\n"
        "Creates a randomly initialised Hugging Face model directory.\n\n"
        "  --preset NAME          tiny, smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, llama-3.2-1b\n"
        "  --config FILE          a config.json to take the architecture from instead\n"
        "  --out DIR              output directory (created)\n"
        "  --dtype f32|bf16       weight dtype in model.safetensors (default f32)\n"
        "  --seed N               random seed (default 0)\n"
        "  --init hf|fan-in       weight scale: hf = N(0, 0.02^2) everywhere (default);\n"
        "                         fan-in = std 1/sqrt(fan-in) per matrix, which small\n"
        "                         models learn from much faster\n"
        "  --layers N             override num_hidden_layers\n"
        "  --tokenizer-text FILE  learn a byte-level BPE tokenizer from FILE (repeatable)\n"
        "  --vocab-size N         tokenizer vocabulary when learning one (default 512);\n"
        "                         the model's vocab_size becomes max(preset, tokenizer)\n"
        "                         for presets, or exactly N for the tiny preset\n");
}

/* Rewrites DIR/model.safetensors with every matrix scaled from std 0.02 to
 * std 1/sqrt(columns) (embedding rows (V, C): 1/sqrt(C) as well). */
static int rescale_fan_in(const char *dir) {
    char *path = path_join(dir, "model.safetensors");
    if (!path) return -1;
    StFile f;
    if (st_open(&f, path) < 0) { mem_free(path); return -1; }
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
    mem_free(owned); mem_free(wt);
    st_close(&f);
    mem_free(path);
    return rc;
}

static int append_file(char **text, size_t *len, const char *path) {
    char *buf; size_t n;
    TRY(file_read_all(path, 256u << 20, &buf, &n));
    char *grown = mem_realloc(*text, *len + n + 2);
    if (!grown) { mem_free(buf); return -1; }
    memcpy(grown + *len, buf, n);
    *len += n;
    grown[(*len)++] = '\n';
    grown[*len] = 0;
    *text = grown;
    mem_free(buf);
    return 0;
}

int cmd_init(int argc, char **argv) {
    const char *preset = NULL, *config = NULL, *out = NULL, *dtype_s = "f32", *init = "hf";
    const char *texts[16]; int n_texts = 0;
    long seed = 0, vocab = 512, layers = 0;
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'}, {"config", required_argument, 0, 'c'},
        {"out", required_argument, 0, 'o'}, {"dtype", required_argument, 0, 'd'},
        {"seed", required_argument, 0, 's'}, {"tokenizer-text", required_argument, 0, 't'},
        {"vocab-size", required_argument, 0, 'v'}, {"layers", required_argument, 0, 'l'},
        {"init", required_argument, 0, 'i'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': preset = optarg; break;
        case 'c': config = optarg; break;
        case 'o': out = optarg; break;
        case 'd': dtype_s = optarg; break;
        case 's': seed = atol(optarg); break;
        case 'v': vocab = atol(optarg); break;
        case 'l': layers = atol(optarg); break;
        case 'i': init = optarg; break;
        case 't': if (n_texts == 16) die("--tokenizer-text: at most 16 files"); texts[n_texts++] = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) die("init: unexpected argument '%s' (see lmtune init --help)", argv[optind]);
    if (!out || (!preset == !config)) { usage(stderr); return 2; }
    DType dtype;
    if (!strcmp(dtype_s, "f32")) dtype = DTYPE_F32;
    else if (!strcmp(dtype_s, "bf16")) dtype = DTYPE_BF16;
    else die("--dtype: expected f32 or bf16, got \"%s\"", dtype_s);
    if (strcmp(init, "hf") && strcmp(init, "fan-in")) die("--init: expected hf or fan-in, got \"%s\"", init);
    if (vocab < 256 + 3 || vocab > 1000000) die("--vocab-size: expected 259..1000000, got %ld", vocab);

    ModelConfig cfg;
    if (preset) { if (model_preset(preset, &cfg) < 0) die_with_error(); }
    else if (hf_config_load(&cfg, config) < 0) die_with_error();
    if (layers > 0) cfg.num_hidden_layers = (int)layers;
    if (dir_ensure(out) < 0) die_with_error();

    char *text = NULL; size_t len = 0;
    for (int i = 0; i < n_texts; i++) if (append_file(&text, &len, texts[i]) < 0) die_with_error();
    int tok_vocab = n_texts ? (int)vocab : 256 + 3;
    if (tokenizer_write_bytelevel(out, text ? text : "", len, tok_vocab, CHATML_TEMPLATE) < 0) die_with_error();
    mem_free(text);
    Tokenizer *tok;
    char *tok_path = path_join(out, "tokenizer.json");
    if (!tok_path || tokenizer_load(&tok, out) < 0) die_with_error();
    int real_vocab = tokenizer_vocab_size(tok);
    if (preset && !strcmp(preset, "tiny")) cfg.vocab_size = real_vocab;
    else if (cfg.vocab_size < real_vocab) cfg.vocab_size = real_vocab;
    cfg.eos_token_ids[0] = tokenizer_eos_id(tok); cfg.n_eos = 1;
    cfg.bos_token_id = -1;
    tokenizer_free(tok);
    mem_free(tok_path);
    cfg.torch_dtype = dtype;
    if (model_init_random(out, &cfg, dtype, (uint64_t)seed) < 0) die_with_error();
    if (!strcmp(init, "fan-in") && rescale_fan_in(out) < 0) die_with_error();
    printf("Initialised %s model in %s: %d layers, hidden %d, vocab %d, %s weights (%s init), tokenizer vocab %d\n",
           cfg.model_type, out, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size, dtype_s, init, real_vocab);
    return 0;
}

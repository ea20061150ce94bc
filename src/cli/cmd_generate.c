/* cmd_generate.c: `lmtune generate`: samples from a model, with or without an
 * adapter, as mlx_lm.generate: the chat template is applied by default, the
 * text streams as it is produced, and a summary follows. The prompt is fed
 * once (prefill) and every new token reuses the KV cache. */
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "model/adapter_io.h"
#include "model/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
        "usage: lmtune generate --model DIR --prompt TEXT [flags]\n\n"
        "  --model DIR               model directory\n"
        "  --adapter-path DIR        adapter to apply (optional)\n"
        "  -p, --prompt TEXT         prompt; - reads it from stdin\n"
        "  -m, --max-tokens N        tokens to generate (default 100)\n"
        "  --temp T                  sampling temperature (default 0: greedy)\n"
        "  --top-p P                 nucleus sampling (default 1.0: off)\n"
        "  --min-p P                 min-p sampling (default 0: off)\n"
        "  --seed N                  sampling seed (default 0)\n"
        "  --system-prompt TEXT      system message for chat models\n"
        "  --ignore-chat-template    feed the prompt as raw text\n"
        "  --chat-template FILE      use this template instead of the model's\n"
        "  --quiet                   print only the generated text\n");
}

static char *read_stdin(void) {
    size_t cap = 4096, n = 0;
    char *buf = mem_alloc(cap);
    if (!buf) return NULL;
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += got;
        if (n + 1 == cap) { char *g = mem_realloc(buf, cap * 2); if (!g) { mem_free(buf); return NULL; } buf = g; cap *= 2; }
    }
    buf[n] = 0;
    return buf;
}

/* Renders the chat prompt; NULL when the model has no template (raw text then). */
static char *chat_prompt(const Tokenizer *tok, const char *template_file, const char *system, const char *prompt) {
    const char *src = tokenizer_chat_template(tok);
    char *owned = NULL;
    if (template_file) { if (file_read_all(template_file, 1 << 20, &owned, NULL) < 0) die_with_error(); src = owned; }
    if (!src) return NULL;
    ChatTemplate *ct;
    if (chat_template_compile(&ct, src, template_file ? template_file : "tokenizer_config.json: chat_template") < 0) die_with_error();
    json_t *messages = json_array();
    if (system) json_array_append_new(messages, json_pack("{s:s,s:s}", "role", "system", "content", system));
    json_array_append_new(messages, json_pack("{s:s,s:s}", "role", "user", "content", prompt));
    const char *bos = tokenizer_bos_token(tok), *eos = tokenizer_eos_token(tok);
    char *text; size_t len;
    if (chat_template_apply(ct, messages, NULL, true, bos ? bos : "", eos ? eos : "", &text, &len) < 0) die_with_error();
    json_decref(messages);
    chat_template_free(ct);
    mem_free(owned);
    return text;
}

static bool is_eos(const ModelConfig *cfg, const Tokenizer *tok, int32_t id) {
    for (int i = 0; i < cfg->n_eos; i++) if (cfg->eos_token_ids[i] == id) return true;
    return id == tokenizer_eos_id(tok);
}

/* Bytes of `s` that form complete UTF-8 characters (a trailing partial
 * sequence waits for the next token). */
static size_t complete_utf8(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) { i--; back++; }
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return (back + 1 >= need) ? n : i - 1;
}

int cmd_generate(int argc, char **argv) {
    const char *model_dir = NULL, *adapter = NULL, *prompt = NULL, *system = NULL, *template_file = NULL;
    long max_tokens = 100, seed = 0;
    float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
    int ignore_template = 0, quiet = 0;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'M'}, {"adapter-path", required_argument, 0, 'a'},
        {"prompt", required_argument, 0, 'p'}, {"max-tokens", required_argument, 0, 'm'},
        {"temp", required_argument, 0, 't'}, {"top-p", required_argument, 0, 'P'},
        {"min-p", required_argument, 0, 'n'}, {"seed", required_argument, 0, 's'},
        {"system-prompt", required_argument, 0, 'S'}, {"ignore-chat-template", no_argument, 0, 'i'},
        {"chat-template", required_argument, 0, 'c'}, {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "hp:m:", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'M': model_dir = optarg; break;
        case 'a': adapter = optarg; break;
        case 'p': prompt = optarg; break;
        case 'm': max_tokens = strtol(optarg, &end, 10); if (*end || max_tokens < 1) die("--max-tokens: expected a positive integer, got \"%s\"", optarg); break;
        case 't': temp = strtof(optarg, &end); if (*end || temp < 0) die("--temp: expected a number >= 0, got \"%s\"", optarg); break;
        case 'P': top_p = strtof(optarg, &end); if (*end || top_p <= 0 || top_p > 1) die("--top-p: expected a number in (0, 1], got \"%s\"", optarg); break;
        case 'n': min_p = strtof(optarg, &end); if (*end || min_p < 0 || min_p >= 1) die("--min-p: expected a number in [0, 1), got \"%s\"", optarg); break;
        case 's': seed = strtol(optarg, &end, 10); if (*end) die("--seed: expected an integer, got \"%s\"", optarg); break;
        case 'S': system = optarg; break;
        case 'i': ignore_template = 1; break;
        case 'c': template_file = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) die("generate: unexpected argument '%s' (see lmtune generate --help)", argv[optind]);
    if (!model_dir || !prompt) { usage(stderr); return 2; }
    char *prompt_owned = NULL;
    if (!strcmp(prompt, "-")) { prompt_owned = read_stdin(); if (!prompt_owned) die_with_error(); prompt = prompt_owned; }

    Tokenizer *tok;
    if (tokenizer_load(&tok, model_dir) < 0) die_with_error();
    char *text = ignore_template ? NULL : chat_prompt(tok, template_file, system, prompt);
    int32_t *ids; size_t n_ids;
    if (tokenizer_encode(tok, text ? text : prompt, strlen(text ? text : prompt), text == NULL, &ids, &n_ids) < 0) die_with_error();
    if (n_ids == 0) die("generate: the prompt encodes to no tokens");

    Model *model; Arena arena;
    if (model_open_inference(&model, &arena, model_dir, adapter, 1, (int)n_ids, (int)(n_ids + max_tokens)) < 0) die_with_error();
    const ModelConfig *cfg = model_config(model);
    int V = cfg->vocab_size;
    float *logits = mem_alloc((size_t)V * sizeof(float));
    int32_t *out_ids = mem_alloc((size_t)max_tokens * sizeof(int32_t));
    Sampler sampler;
    if (!logits || !out_ids || sampler_init(&sampler, V, temp, top_p, min_p, (uint64_t)seed) < 0) die_with_error();

    if (!quiet) printf("==========\n");
    double t0 = time_now();
    if (model_decode(model, ids, (int)n_ids, 0, logits) < 0) die_with_error();
    double t_prompt = time_now() - t0;
    size_t printed = 0;
    long n_gen = 0;
    double t1 = time_now();
    for (; n_gen < max_tokens; ) {
        int32_t next = sampler_pick(&sampler, logits, V);
        if (is_eos(cfg, tok, next)) break;
        out_ids[n_gen++] = next;
        char *piece; size_t plen;
        if (tokenizer_decode(tok, out_ids, (size_t)n_gen, true, &piece, &plen) < 0) die_with_error();
        size_t ready = complete_utf8(piece, plen);
        if (ready > printed) { fwrite(piece + printed, 1, ready - printed, stdout); fflush(stdout); printed = ready; }
        mem_free(piece);
        if (n_gen == max_tokens) break;
        if (model_decode(model, &next, 1, (int)(n_ids + n_gen - 1), logits) < 0) die_with_error();
    }
    double t_gen = time_now() - t1;
    char *all; size_t alen;
    if (tokenizer_decode(tok, out_ids, (size_t)n_gen, true, &all, &alen) < 0) die_with_error();
    if (alen > printed) fwrite(all + printed, 1, alen - printed, stdout);
    mem_free(all);
    printf("\n");
    if (!quiet) {
        printf("==========\n");
        printf("Prompt: %zu tokens, %.3f tokens-per-sec\n", n_ids, n_ids / (t_prompt > 0 ? t_prompt : 1e-9));
        printf("Generation: %ld tokens, %.3f tokens-per-sec\n", n_gen, n_gen / (t_gen > 0 ? t_gen : 1e-9));
        printf("Peak memory: %.3f GB\n", rss_peak_bytes() / 1e9);
    }
    sampler_free(&sampler);
    mem_free(logits); mem_free(out_ids); mem_free(ids); mem_free(text); mem_free(prompt_owned);
    model_free(model);
    arena_free(&arena);
    tokenizer_free(tok);
    return 0;
}

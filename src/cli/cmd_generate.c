/* cmd_generate.c: `lmtune generate`: samples from a model, with or without an
 * adapter, as mlx_lm.generate: the chat template is applied by default, the
 * text streams as it is produced, and a summary follows. The prompt is fed
 * once (prefill) and every new token reuses the KV cache. The flags are an
 * args table (cli/args.h), parsed, checked and listed by --help as every
 * command's. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/adapter_io.h"
#include "model/sampler.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *model, *adapter_path, *prompt, *system_prompt, *chat_template;
    int max_tokens;
    double temp, top_p, min_p;
    uint64_t seed;
    bool ignore_chat_template, quiet;
    ArgResult parsed;
} GenerateArgs;

#define OFF(f) offsetof(GenerateArgs, f)
static const ArgSpec GENERATE_SPECS[] = {
    {"model", 0, ARG_STRING, OFF(model), "DIR", "model directory", NULL, ARG_UNBOUNDED},
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR", "adapter to apply; none: the base model", NULL, ARG_UNBOUNDED},
    {"prompt", 'p', ARG_STRING, OFF(prompt), "TEXT", "prompt; - reads it from stdin", NULL, ARG_UNBOUNDED},
    {"max-tokens", 'm', ARG_INT, OFF(max_tokens), "N", "tokens to generate", NULL, ARG_AT_LEAST(1, "a positive integer")},
    {"temp", 0, ARG_DOUBLE, OFF(temp), "T", "sampling temperature; 0: greedy", NULL, ARG_AT_LEAST(0, "a number >= 0")},
    {"top-p", 0, ARG_DOUBLE, OFF(top_p), "P", "nucleus sampling; 1: off", NULL, 0, "a number in (0, 1]", 1, ARG_OPEN_MIN},
    {"min-p", 0, ARG_DOUBLE, OFF(min_p), "P", "min-p sampling; 0: off", NULL, 0, "a number in [0, 1)", 1, ARG_OPEN_MAX},
    {"seed", 0, ARG_U64, OFF(seed), "N", "sampling seed", NULL, ARG_UNBOUNDED},
    {"system-prompt", 0, ARG_STRING, OFF(system_prompt), "TEXT", "system message for chat models", NULL, ARG_UNBOUNDED},
    {"ignore-chat-template", 0, ARG_BOOL, OFF(ignore_chat_template), NULL, "feed the prompt as raw text", NULL, ARG_UNBOUNDED},
    {"chat-template", 0, ARG_STRING, OFF(chat_template), "FILE", "use this Jinja template instead of the model's", NULL, ARG_UNBOUNDED},
    {"quiet", 0, ARG_BOOL, OFF(quiet), NULL, "print only the generated text", NULL, ARG_UNBOUNDED},
};
#undef OFF
static const ArgTable GENERATE_TABLE = {
    "generate", "generate --model DIR --prompt TEXT [flags]",
    GENERATE_SPECS, sizeof GENERATE_SPECS / sizeof GENERATE_SPECS[0], false, NULL, NULL, NULL,
};

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
    GenerateArgs a = {.max_tokens = 100, .temp = 0.0, .top_p = 1.0, .min_p = 0.0, .seed = 0};
    if (args_parse(&GENERATE_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    if (!a.model) die("--model is required (a model directory)");
    if (!a.prompt) die("--prompt is required (the text, or - to read it from stdin)");
    const char *model_dir = a.model, *prompt = a.prompt;
    long max_tokens = a.max_tokens;
    char *prompt_owned = NULL;
    if (!strcmp(prompt, "-")) { prompt_owned = read_stdin(); if (!prompt_owned) die_with_error(); prompt = prompt_owned; }

    Tokenizer *tok;
    if (model_tokenizer_load(&tok, model_dir) < 0) die_with_error();
    char *text = a.ignore_chat_template ? NULL : chat_prompt(tok, a.chat_template, a.system_prompt, prompt);
    int32_t *ids; size_t n_ids;
    if (tokenizer_encode(tok, text ? text : prompt, strlen(text ? text : prompt), text == NULL, &ids, &n_ids) < 0) die_with_error();
    if (n_ids == 0) die("generate: the prompt encodes to no tokens");
    if (n_ids + (size_t)max_tokens > (size_t)INT_MAX)
        die("generate: the prompt (%zu tokens) plus --max-tokens %ld exceeds %d positions", n_ids, max_tokens, INT_MAX);

    Model *model; Arena arena;
    if (model_open_inference(&model, &arena, model_dir, a.adapter_path, 1, (int)n_ids, (int)(n_ids + max_tokens)) < 0) die_with_error();
    const ModelConfig *cfg = model_config(model);
    int V = cfg->vocab_size;
    float *logits = mem_alloc((size_t)V * sizeof(float));
    int32_t *out_ids = mem_alloc((size_t)max_tokens * sizeof(int32_t));
    Sampler sampler;
    if (!logits || !out_ids || sampler_init(&sampler, V, (float)a.temp, (float)a.top_p, (float)a.min_p, a.seed) < 0) die_with_error();

    if (!a.quiet) printf("==========\n");
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
    if (!a.quiet) {
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

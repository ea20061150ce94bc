/* cmd_generate.c: `lmtune generate`: samples from a model, with or without an
 * adapter, as mlx_lm.generate: the chat template is applied by default (with
 * MLX-LM's enable_thinking and --chat-template-config's variables, and a
 * --prefill-response continued as transformers' continue_final_message
 * does), the text streams as it is produced, and a summary follows. The
 * prompt is fed once (prefill) and every new token reuses the KV cache
 * (rotating with --max-kv-size). Stops at the EOS ids of
 * generation_config.json, else config.json, else the tokenizer, plus
 * --extra-eos-token. Without --seed every run draws a fresh seed. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "formats/hf_config.h"
#include "memory/infer_plan.h"
#include "model/adapter_io.h"
#include "model/sampler.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const char *model, *adapter_path, *prompt, *system_prompt, *chat_template, *prefill_response;
    const char *chat_template_config;
    ArgStringList extra_eos_token;
    int max_tokens, top_k, min_tokens_to_keep, max_kv_size;
    double temp, top_p, min_p, xtc_probability, xtc_threshold;
    uint64_t seed;
    bool ignore_chat_template, use_default_chat_template, quiet, verbose, trust_remote_code, plan;
    size_t memory_limit;
    ArgResult parsed;
} GenerateArgs;

#define OFF(f) offsetof(GenerateArgs, f)
static const ArgSpec GENERATE_SPECS[] = {
    {"model", 0, ARG_STRING, OFF(model), "DIR", "model directory, or a Hugging Face repo id in the local cache", NULL,
     ARG_UNBOUNDED},
    {"adapter-path", 0, ARG_STRING, OFF(adapter_path), "DIR", "adapter to apply; none: the base model", NULL,
     ARG_UNBOUNDED},
    {"prompt", 'p', ARG_STRING, OFF(prompt), "TEXT",
     "prompt (\\n and \\t in it are a newline and a tab); - reads stdin", NULL, ARG_UNBOUNDED},
    {"max-tokens", 'm', ARG_INT, OFF(max_tokens), "N", "tokens to generate", NULL,
     ARG_AT_LEAST(1, "a positive integer")},
    {"temp", 0, ARG_DOUBLE, OFF(temp), "T", "sampling temperature; 0: greedy", NULL, ARG_AT_LEAST(0, "a number >= 0")},
    {"top-p", 0, ARG_DOUBLE, OFF(top_p), "P", "nucleus sampling; 0 or 1: off", NULL, 0, "a number in [0, 1]", 1, 0},
    {"min-p", 0, ARG_DOUBLE, OFF(min_p), "P", "min-p sampling; 0: off", NULL, 0, "a number in [0, 1]", 1, 0},
    {"top-k", 0, ARG_INT, OFF(top_k), "K", "sample from the K most likely tokens; 0: off", NULL,
     ARG_AT_LEAST(0, "a non-negative integer")},
    {"min-tokens-to-keep", 0, ARG_INT, OFF(min_tokens_to_keep), "N", "tokens min-p always keeps", NULL,
     ARG_AT_LEAST(1, "a positive integer")},
    {"xtc-probability", 0, ARG_DOUBLE, OFF(xtc_probability), "P", "probability of XTC sampling at each token; 0: off",
     NULL, 0, "a number in [0, 1]", 1, 0},
    {"xtc-threshold", 0, ARG_DOUBLE, OFF(xtc_threshold), "P", "XTC drops the tokens above it but the least likely",
     NULL, 0, "a number in [0, 0.5]", 0.5, 0},
    {"seed", 0, ARG_U64, OFF(seed), "N", "sampling seed; none: a fresh one every run", NULL, ARG_UNBOUNDED},
    {"max-kv-size", 0, ARG_INT, OFF(max_kv_size), "N",
     "KV cache positions; past them the first 4 stay and the oldest others are overwritten", NULL,
     ARG_AT_LEAST(5, "an integer >= 5")},
    {"extra-eos-token", 0, ARG_STRING_LIST, OFF(extra_eos_token), "TOKEN",
     "also stop at this token (a string or an id)", NULL, ARG_UNBOUNDED},
    {"system-prompt", 0, ARG_STRING, OFF(system_prompt), "TEXT", "system message for chat models", NULL, ARG_UNBOUNDED},
    {"prefill-response", 0, ARG_STRING, OFF(prefill_response), "TEXT", "start of the answer, which the model continues",
     NULL, ARG_UNBOUNDED},
    {"chat-template-config", 0, ARG_STRING, OFF(chat_template_config), "JSON",
     "template variables as a JSON object, e.g. {\"enable_thinking\": false}", NULL, ARG_UNBOUNDED},
    {"ignore-chat-template", 0, ARG_BOOL, OFF(ignore_chat_template), NULL, "feed the prompt as raw text", NULL,
     ARG_UNBOUNDED},
    {"use-default-chat-template", 0, ARG_BOOL, OFF(use_default_chat_template), NULL,
     "accepted for mlx_lm.generate, which does not use it either", NULL, ARG_UNBOUNDED},
    {"chat-template", 0, ARG_STRING, OFF(chat_template), "FILE", "use this Jinja template instead of the model's", NULL,
     ARG_UNBOUNDED},
    {"verbose", 0, ARG_TRUE_FALSE, OFF(verbose), "True|False", "False: print only the generated text", NULL,
     ARG_UNBOUNDED},
    {"quiet", 0, ARG_BOOL, OFF(quiet), NULL, "the same as --verbose False", NULL, ARG_UNBOUNDED},
    {"trust-remote-code", 0, ARG_BOOL, OFF(trust_remote_code), NULL, "refused: lmtune runs no model code", NULL,
     ARG_UNBOUNDED},
    {"memory-limit", 0, ARG_SIZE, OFF(memory_limit), "SIZE",
     "refuse, before loading any weight, a generation whose plan (KV cache included) exceeds SIZE", NULL,
     ARG_UNBOUNDED},
    {"plan", 0, ARG_BOOL, OFF(plan), NULL, "print the memory plan (every buffer) and stop before loading weights", NULL,
     ARG_UNBOUNDED},
};
#undef OFF
static const ArgTable GENERATE_TABLE = {
    "generate", "generate --model DIR [--prompt TEXT] [flags]",
    GENERATE_SPECS, sizeof GENERATE_SPECS / sizeof GENERATE_SPECS[0], false, NULL, NULL, NULL,
};

static char *read_stdin(void) {
    size_t cap = 4096, n = 0;
    char *buf = mem_alloc(cap);
    if (!buf) return NULL;
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *g = mem_realloc(buf, cap * 2);
            if (!g) {
                mem_free(buf);
                return NULL;
            }
            buf = g;
            cap *= 2;
        }
    }
    buf[n] = 0;
    return buf;
}

/* mlx_lm.generate: prompt.replace("\\n", "\n").replace("\\t", "\t"). */
static char *unescape_prompt(const char *p) {
    char *out = mem_alloc(strlen(p) + 1);
    if (!out) return NULL;
    char *o = out;
    for (const char *s = p; *s; s++) {
        if (s[0] == '\\' && (s[1] == 'n' || s[1] == 't')) {
            *o++ = s[1] == 'n' ? '\n' : '\t';
            s++;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
    return out;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* transformers' continue_final_message: the rendering cut right after the
 * last occurrence of the final message's stripped content, keeping its
 * trailing spaces when the template kept them. */
static int continue_final_message(char *text, const char *final) {
    size_t a = 0, b = strlen(final);
    while (a < b && is_space(final[a])) a++;
    while (b > a && is_space(final[b - 1])) b--;
    const size_t stripped = b - a, lstripped = strlen(final + a);
    if (stripped == 0) return 0;
    char *last = NULL;
    for (char *p = text; *p; p++)
        if (!strncmp(p, final + a, stripped)) last = p;
    if (!last)
        return error_set("--prefill-response: continue_final_message is set but the final message does not appear "
                         "in the chat after applying the chat template");
    bool kept = a == 0 && !strncmp(last, final, lstripped);
    last[kept ? lstripped : stripped] = 0;
    return 0;
}

/* The chat prompt; NULL (and no error) when the model has no template. */
static int chat_prompt(const Tokenizer *tok, const GenerateArgs *a, const char *prompt, json_t *template_vars,
                       char **out) {
    *out = NULL;
    const char *src = tokenizer_chat_template(tok);
    char *owned = NULL;
    if (a->chat_template) {
        TRY(file_read_all(a->chat_template, 1 << 20, &owned, NULL));
        src = owned;
    }
    if (!src) return 0;
    ChatTemplate *ct;
    const char *origin = a->chat_template ? a->chat_template : "tokenizer_config.json: chat_template";
    if (chat_template_compile(&ct, src, origin) < 0) {
        mem_free(owned);
        return -1;
    }
    json_t *messages = json_array();
    if (a->system_prompt)
        json_array_append_new(messages, json_pack("{s:s,s:s}", "role", "system", "content", a->system_prompt));
    json_array_append_new(messages, json_pack("{s:s,s:s}", "role", "user", "content", prompt));
    bool prefill = a->prefill_response != NULL;
    if (prefill)
        json_array_append_new(messages, json_pack("{s:s,s:s}", "role", "assistant", "content", a->prefill_response));
    const char *bos = tokenizer_bos_token(tok), *eos = tokenizer_eos_token(tok);
    size_t len;
    int rc = chat_template_apply_ex(ct, messages, NULL, !prefill, bos ? bos : "", eos ? eos : "", template_vars, out,
                                    &len);
    if (rc == 0 && prefill) rc = continue_final_message(*out, a->prefill_response);
    json_decref(messages);
    chat_template_free(ct);
    mem_free(owned);
    return rc;
}

/* The stop ids: generation_config.json's eos_token_id, else config.json's,
 * else the tokenizer's; then --extra-eos-token (an id, or a token). */
static int stop_ids(const char *model_dir, const Tokenizer *tok, const ArgStringList *extra, int32_t *ids, int cap,
                    int *n) {
    ModelConfig cfg;
    TRY(model_config_load(model_dir, &cfg));
    /* a GGUF file has no generation_config.json beside it: its metadata's EOS */
    if (!model_is_gguf(model_dir)) TRY(hf_generation_config_eos(&cfg, model_dir));
    *n = 0;
    for (int i = 0; i < cfg.n_eos && *n < cap; i++) ids[(*n)++] = cfg.eos_token_ids[i];
    if (*n == 0 && tokenizer_eos_id(tok) >= 0) ids[(*n)++] = tokenizer_eos_id(tok);
    for (int k = 0; k < extra->count && *n < cap; k++) {
        char *end;
        long id = strtol(extra->items[k], &end, 10);
        if (!*extra->items[k] || *end) id = tokenizer_token_to_id(tok, extra->items[k]);
        if (id < 0 || id >= tokenizer_vocab_size(tok))
            return error_set("--extra-eos-token: '%s' is not a token for this tokenizer", extra->items[k]);
        ids[(*n)++] = (int32_t)id;
    }
    return 0;
}

static bool in_set(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++) if (ids[i] == id) return true;
    return false;
}

/* Bytes of `s` that form complete UTF-8 characters (a trailing partial
 * sequence waits for the next token). */
static size_t complete_utf8(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return (back + 1 >= need) ? n : i - 1;
}

/* A seed for a run without --seed: a fresh one each time, as MLX's. */
static uint64_t fresh_seed(void) {
    uint64_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&s, sizeof s, 1, f) != 1) s = 0;
        fclose(f);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return s ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
}

/* The prompt's products, when it has at least this many tokens, run in the
 * dtype a start-up probe of products of this many rows finds faster
 * (model_auto_weights_dtype, ~0.1 s):
 * on an Intel Xeon with AVX512_BF16 and no AMX, bf16 products run at ~0.55x
 * fp32, so a bf16 model's long prompt is read faster in fp32 products on
 * widened weights. Shorter prompts (a chat turn) keep the stored dtype,
 * where the probe would cost more than it saves; decoding is a GEMV on the
 * stored weights either way. */
enum { PROBE_MIN_PROMPT = 256 };

static bool prompt_products(const char *model_dir, size_t n_ids, bool verbose, DType *out) {
    if (n_ids < PROBE_MIN_PROMPT) return false;
    ModelConfig cfg;
    if (model_config_load(model_dir, &cfg) < 0) die_with_error();
    ModelSpec probe = {.type = TUNE_NONE, .num_layers = -1, .training = false};
    char why[512];
    if (model_auto_weights_dtype(model_dir, &cfg, &probe, PROBE_MIN_PROMPT, out, why, sizeof why) < 0)
        die_with_error();
    if (verbose) fprintf(stderr, "Frozen products: %s\n", why);
    return true;
}

int cmd_generate(int argc, char **argv) {
    GenerateArgs a = {.prompt = "hello", .max_tokens = 100, .temp = 0.0, .top_p = 1.0, .min_p = 0.0,
                      .min_tokens_to_keep = 1, .xtc_threshold = 0.1, .verbose = true};
    if (args_parse(&GENERATE_TABLE, &a, argc, argv, &a.parsed) < 0) die_with_error();
    if (a.parsed.help) return 0;
    if (a.trust_remote_code) {
        args_refuse_remote_code();
        die_with_error();
    }
    if (!a.model) die("--model is required (a model directory)");
    if (args_resolve_model(&a.model) < 0) die_with_error();
    bool verbose = a.verbose && !a.quiet;
    const char *model_dir = a.model;
    long max_tokens = a.max_tokens;
    char *prompt = unescape_prompt(a.prompt);
    if (!prompt) die_with_error();
    if (!strcmp(prompt, "-")) {
        mem_free(prompt);
        prompt = read_stdin();
        if (!prompt) die_with_error();
    }
    json_t *template_vars = NULL;
    if (a.chat_template_config) {
        json_error_t jerr;
        template_vars = json_loads(a.chat_template_config, 0, &jerr);
        if (!json_is_object(template_vars))
            die("--chat-template-config: expected a JSON object such as {\"enable_thinking\": false}, got %s",
                a.chat_template_config);
    }

    Tokenizer *tok;
    if (model_tokenizer_load(&tok, model_dir) < 0) die_with_error();
    /* MLX-LM's TokenizerWrapper: enable_thinking unless the caller sets it */
    if (!template_vars) template_vars = json_object();
    if (!json_object_get(template_vars, "enable_thinking"))
        json_object_set_new(template_vars, "enable_thinking", json_boolean(tokenizer_has_thinking(tok)));
    char *text = NULL;
    if (!a.ignore_chat_template && chat_prompt(tok, &a, prompt, template_vars, &text) < 0) die_with_error();
    json_decref(template_vars);
    int32_t *ids;
    size_t n_ids;
    const char *feed = text ? text : prompt;
    if (tokenizer_encode(tok, feed, strlen(feed), text == NULL, &ids, &n_ids) < 0) die_with_error();
    if (n_ids == 0) die("generate: the prompt encodes to no tokens");
    if (n_ids + (size_t)max_tokens > (size_t)INT_MAX)
        die("generate: the prompt (%zu tokens) plus --max-tokens %ld exceeds %d positions", n_ids, max_tokens, INT_MAX);
    int32_t stop[64];
    int n_stop;
    if (stop_ids(model_dir, tok, &a.extra_eos_token, stop, 64, &n_stop) < 0) die_with_error();

    /* planned before any weight is loaded: the prompt, the KV cache of
     * prompt + max-tokens positions (at most --max-kv-size, which rotates),
     * the decode products (memory/infer_plan.h) */
    Model *model;
    Arena arena;
    DType products = DTYPE_F32;
    bool chosen = prompt_products(model_dir, n_ids, verbose, &products);   /* before the baseline is measured */
    InferRequest req = {INFER_GENERATE, model_dir, a.adapter_path, NULL, 0, 0, 0, 0, (int)n_ids, max_tokens, 1, 0,
                        infer_baseline_now(NULL), a.memory_limit, a.max_kv_size, chosen, products};
    if (a.plan) {
        int prc = infer_print_plan(&req, true, stdout);
        mem_free(ids);
        mem_free(text);
        mem_free(prompt);
        tokenizer_free(tok);
        if (prc < 0) die_with_error();
        return 0;
    }
    if (infer_open(&req, &model, &arena, NULL) < 0) die_with_error();
    const ModelConfig *cfg = model_config(model);
    int V = cfg->vocab_size;
    float *logits = mem_alloc((size_t)V * sizeof(float));
    int32_t *out_ids = mem_alloc((size_t)max_tokens * sizeof(int32_t));
    /* XTC never drops "\n" or a stop token (mlx_lm.generate's xtc_special_tokens) */
    int32_t special[80];
    int n_special = 0;
    int32_t *nl = NULL;
    size_t n_nl = 0;
    if (tokenizer_encode(tok, "\n", 1, true, &nl, &n_nl) < 0) die_with_error();
    for (size_t i = 0; i < n_nl && n_special < 16; i++) special[n_special++] = nl[i];
    mem_free(nl);
    for (int i = 0; i < n_stop; i++) special[n_special++] = stop[i];
    SamplerConfig sc;
    sampler_config_default(&sc);
    sc.temp = (float)a.temp;
    sc.top_p = (float)a.top_p;
    sc.min_p = (float)a.min_p;
    sc.min_tokens_to_keep = a.min_tokens_to_keep;
    sc.top_k = a.top_k;
    sc.xtc_probability = (float)a.xtc_probability;
    sc.xtc_threshold = (float)a.xtc_threshold;
    sc.xtc_special = special;
    sc.n_xtc_special = n_special;
    bool seeded = args_was_set(&GENERATE_TABLE, &a.parsed, "seed");
    Sampler sampler;
    if (!logits || !out_ids || sampler_init(&sampler, V, &sc, seeded ? a.seed : fresh_seed()) < 0) die_with_error();

    if (verbose) printf("==========\n");
    double t0 = time_now();
    if (model_decode(model, ids, (int)n_ids, 0, logits) < 0) die_with_error();
    double t_prompt = time_now() - t0;
    size_t printed = 0;
    long n_gen = 0, n_text = 0; /* tokens generated; those of them the tokenizer can name (out_ids) */
    bool stopped = false;
    double t1 = time_now();
    while (n_gen < max_tokens) {
        int32_t next = sampler_pick(&sampler, logits, V);
        if (in_set(stop, n_stop, next)) {
            stopped = true;
            break;
        }
        n_gen++;
        if (tokenizer_id_to_token(tok, next)) {
            out_ids[n_text++] = next;
            char *piece;
            size_t plen;
            if (tokenizer_decode(tok, out_ids, (size_t)n_text, true, &piece, &plen) < 0) die_with_error();
            size_t ready = complete_utf8(piece, plen);
            if (verbose && ready > printed) {
                fwrite(piece + printed, 1, ready - printed, stdout);
                fflush(stdout);
                printed = ready;
            }
            mem_free(piece);
        } else if (n_gen - n_text == 1) {
            /* The model's vocabulary can be larger than the tokenizer's
             * (Qwen2.5: 151936 rows for 151665 tokens; a model made by
             * `lmtune init` without --tokenizer-text: the preset's rows for
             * 259 byte tokens). Such an id has no text: Hugging Face's decode
             * skips it, and so does this one, said once on stderr (stdout
             * carries the text). */
            fprintf(stderr, "[WARNING] Token id %d has no entry in the tokenizer (%d ids; the model has %d): "
                    "left out of the text, as any such token after it\n", (int)next, tokenizer_vocab_size(tok), V);
        }
        if (n_gen == max_tokens) break;
        if (model_decode(model, &next, 1, (int)(n_ids + n_gen - 1), logits) < 0) die_with_error();
    }
    double t_gen = time_now() - t1;
    char *all;
    size_t alen;
    if (tokenizer_decode(tok, out_ids, (size_t)n_text, true, &all, &alen) < 0) die_with_error();
    if (!verbose) {
        /* mlx_lm.generate --verbose False: print(response) */
        fwrite(all, 1, alen, stdout);
        printf("\n");
    } else {
        if (alen > printed) fwrite(all + printed, 1, alen - printed, stdout);
        printf("\n==========\n");
        if (alen == 0) {
            printf("No text generated for this prompt\n");
        } else {
            /* MLX-LM counts the stop token it sampled */
            long counted = n_gen + (stopped ? 1 : 0);
            printf("Prompt: %zu tokens, %.3f tokens-per-sec\n", n_ids, n_ids / (t_prompt > 0 ? t_prompt : 1e-9));
            printf("Generation: %ld tokens, %.3f tokens-per-sec\n", counted, counted / (t_gen > 0 ? t_gen : 1e-9));
            printf("Peak memory: %.3f GB\n", rss_peak_bytes() / 1e9);
        }
    }
    mem_free(all);
    sampler_free(&sampler);
    mem_free(logits);
    mem_free(out_ids);
    mem_free(ids);
    mem_free(text);
    mem_free(prompt);
    args_release();
    model_free(model);
    arena_free(&arena);
    tokenizer_free(tok);
    return 0;
}

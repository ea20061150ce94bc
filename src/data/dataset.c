/* dataset.c: loads one JSONL split into a Dataset (dataset.h). The format is
 * detected from the first record as MLX-LM does; every later record must
 * have that format's fields. Each example is tokenized once: text with the
 * tokenizer's special tokens plus a final EOS; chat and completions through
 * the chat template (which writes its special tokens as text, so they are
 * encoded without adding any), the prompt offset being the token length of
 * the prompt-only rendering. */
#include "data/dataset.h"
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "data/jsonl.h"
#include "template/chat_template.h"

#define UNSUPPORTED_FORMAT "Unsupported data format, check the supported formats here:\n" \
    "https://github.com/ml-explore/mlx-lm/blob/main/mlx_lm/LORA.md#Data."
#define BAD_LINES_KEPT 3   /* bad-line messages quoted in the summary */

void dataset_options_default(DatasetOptions *o) {
    memset(o, 0, sizeof *o);
    o->prompt_feature = "prompt";
    o->completion_feature = "completion";
    o->chat_feature = "messages";
    o->text_feature = "text";
    o->eos_fallback = -1;
}

const char *dataset_format_name(DataFormat f) {
    return f == DATA_TEXT ? "text" : f == DATA_COMPLETIONS ? "completions" : "chat";
}

/* State of one load: the growing Dataset, the template, the bad-line log. */
typedef struct {
    Dataset *d;
    const Tokenizer *tok;
    const DatasetOptions *o;
    ChatTemplate *tmpl;
    json_t *extra;    /* MLX-LM's template variables: {"enable_thinking": has_thinking} */
    bool detected;
    long detected_line;
    size_t token_cap, example_cap;
    char *bad[BAD_LINES_KEPT];
    const char *path;
    long line_no;
    bool fatal;       /* the last error is not about one line (memory, setup) */
} Loader;

static int push_example(Loader *L, const int32_t *ids, size_t n, int32_t offset) {
    Dataset *d = L->d;
    size_t need;
    if (!size_add(d->n_tokens, n, &need)) return error_set("%s: too many tokens", L->path);
    if (need > L->token_cap) {
        size_t cap = L->token_cap ? L->token_cap : 4096, bytes;
        while (cap < need) cap *= 2;
        if (!size_mul(cap, sizeof(int32_t), &bytes)) return error_set("%s: too many tokens", L->path);
        int32_t *grown = mem_realloc(d->tokens, bytes);
        if (!grown) return L->fatal = true, -1;
        d->tokens = grown;
        L->token_cap = cap;
    }
    if (d->n + 2 > L->example_cap) {
        size_t cap = L->example_cap ? L->example_cap * 2 : 256;
        size_t *starts = mem_realloc(d->starts, cap * sizeof *starts);
        if (!starts) return L->fatal = true, -1;
        d->starts = starts;
        int32_t *offsets = mem_realloc(d->offsets, cap * sizeof *offsets);
        if (!offsets) return L->fatal = true, -1;
        d->offsets = offsets;
        L->example_cap = cap;
    }
    memcpy(d->tokens + d->n_tokens, ids, n * sizeof *ids);
    d->n_tokens += n;
    d->offsets[d->n] = offset;
    d->n++;
    d->starts[d->n] = d->n_tokens;
    return 0;
}

/* A string field of the record: -1 + "PATH:N: ..." when missing or not a string. */
static int get_string(Loader *L, json_t *rec, const char *key, const char **out) {
    json_t *v = json_object_get(rec, key);
    if (!v)
        return error_set("%s:%ld: missing \"%s\" (the data is in %s format, detected from line %ld)", L->path,
                         L->line_no, key, dataset_format_name(L->d->format), L->detected_line);
    if (!json_is_string(v)) return error_set("%s:%ld: \"%s\" is not a string", L->path, L->line_no, key);
    *out = json_string_value(v);
    return 0;
}

static int encode(Loader *L, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n) {
    if (tokenizer_encode(L->tok, text, len, add_special, ids, n) < 0)
        return error_prefix("%s:%ld: tokenizing", L->path, L->line_no);
    return 0;
}

/* Token count of the template applied to `messages` (and the ids if wanted). */
static int render_and_encode(Loader *L, json_t *messages, json_t *tools, bool add_generation_prompt,
                             int32_t **ids, size_t *n) {
    char *text = NULL;
    size_t len = 0;
    if (chat_template_apply_ex(L->tmpl, messages, tools, add_generation_prompt, tokenizer_bos_token(L->tok),
                               tokenizer_eos_token(L->tok), L->extra, &text, &len) < 0)
        return error_prefix("%s:%ld: chat template", L->path, L->line_no);
    int rc = encode(L, text, len, false, ids, n);
    mem_free(text);
    return rc;
}

static int prefix_length(Loader *L, json_t *messages, json_t *tools, bool add_generation_prompt, int32_t *offset) {
    int32_t *ids = NULL;
    size_t n = 0;
    TRY(render_and_encode(L, messages, tools, add_generation_prompt, &ids, &n));
    mem_free(ids);
    if (n > INT32_MAX) return error_set("%s:%ld: prompt too long", L->path, L->line_no);
    *offset = (int32_t)n;
    return 0;
}

static int process_text(Loader *L, json_t *rec) {
    const char *text;
    TRY(get_string(L, rec, L->o->text_feature, &text));
    size_t len = strlen(text);
    if (len == 0) return error_set("%s:%ld: \"%s\" is empty", L->path, L->line_no, L->o->text_feature);
    int32_t *ids = NULL;
    size_t n = 0;
    TRY(encode(L, text, len, true, &ids, &n));
    /* MLX-LM appends the tokenizer's EOS; a tokenizer without one (no
     * tokenizer_config.json) falls back to config.json's eos_token_id */
    int32_t eos = tokenizer_eos_id(L->tok);
    if (eos < 0) eos = L->o->eos_fallback;
    if (eos >= 0 && (n == 0 || ids[n - 1] != eos)) {
        int32_t *grown = mem_realloc(ids, (n + 1) * sizeof *ids);
        if (!grown) {
            mem_free(ids);
            return L->fatal = true, -1;
        }
        ids = grown;
        ids[n++] = eos;
    }
    int rc = n ? push_example(L, ids, n, 0) : error_set("%s:%ld: no tokens", L->path, L->line_no);
    mem_free(ids);
    return rc;
}

/* Tokens of the full conversation, and with --mask-prompt the length of the
 * prompt part; `prompt_messages` is NULL when masking is off. */
static int process_conversation(Loader *L, json_t *messages, json_t *tools, json_t *prompt_messages,
                                bool prompt_generation) {
    int32_t offset = 0;
    if (prompt_messages) TRY(prefix_length(L, prompt_messages, tools, prompt_generation, &offset));
    int32_t *ids = NULL;
    size_t n = 0;
    TRY(render_and_encode(L, messages, tools, false, &ids, &n));
    int rc = n ? push_example(L, ids, n, offset)
               : error_set("%s:%ld: the chat template rendered no tokens", L->path, L->line_no);
    mem_free(ids);
    return rc;
}

static json_t *message(const char *role, const char *content) {
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

static int get_tools(Loader *L, json_t *rec, json_t **tools) {
    *tools = json_object_get(rec, "tools");
    if (*tools && json_is_null(*tools)) *tools = NULL;
    if (*tools && !json_is_array(*tools)) return error_set("%s:%ld: \"tools\" is not a list", L->path, L->line_no);
    return 0;
}

static int process_completions(Loader *L, json_t *rec) {
    const char *prompt, *completion;
    json_t *tools;
    TRY(get_string(L, rec, L->o->prompt_feature, &prompt));
    TRY(get_string(L, rec, L->o->completion_feature, &completion));
    TRY(get_tools(L, rec, &tools));
    json_t *conv = json_pack("[o, o]", message("user", prompt), message("assistant", completion));
    json_t *user = L->o->mask_prompt ? json_pack("[o]", message("user", prompt)) : NULL;
    int rc;
    if (!conv || (L->o->mask_prompt && !user))
        rc = error_set("%s:%ld: out of memory", L->path, L->line_no), L->fatal = true;
    else rc = process_conversation(L, conv, tools, user, true);
    json_decref(conv);
    json_decref(user);
    return rc;
}

static int process_chat(Loader *L, json_t *rec) {
    const char *key = L->o->chat_feature;
    json_t *messages = json_object_get(rec, key), *tools;
    if (!messages)
        return error_set("%s:%ld: missing \"%s\" (the data is in chat format, detected from line %ld)", L->path,
                         L->line_no, key, L->detected_line);
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return error_set("%s:%ld: \"%s\" is not a non-empty list", L->path, L->line_no, key);
    size_t count = json_array_size(messages);
    for (size_t i = 0; i < count; i++) {
        json_t *m = json_array_get(messages, i);
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return error_set("%s:%ld: %s[%zu] is not an object with a string \"role\"", L->path, L->line_no, key, i);
    }
    TRY(get_tools(L, rec, &tools));
    json_t *prompt = NULL;
    bool generation = false;
    if (L->o->mask_prompt) {
        const char *last_role = json_string_value(json_object_get(json_array_get(messages, count - 1), "role"));
        generation = strcmp(last_role, "assistant") == 0;
        prompt = json_array();
        for (size_t i = 0; prompt && i + 1 < count; i++) json_array_append(prompt, json_array_get(messages, i));
        if (!prompt) return L->fatal = true, error_set("%s:%ld: out of memory", L->path, L->line_no);
    }
    int rc = process_conversation(L, messages, tools, prompt, generation);
    json_decref(prompt);
    return rc;
}

/* The first record fixes the format, exactly as MLX-LM's create_dataset. */
static int detect_format(Loader *L, json_t *rec) {
    const DatasetOptions *o = L->o;
    if (json_object_get(rec, o->prompt_feature) && json_object_get(rec, o->completion_feature))
        L->d->format = DATA_COMPLETIONS;
    else if (json_object_get(rec, o->chat_feature))
        L->d->format = DATA_CHAT;
    else if (json_object_get(rec, o->text_feature))
        L->d->format = DATA_TEXT;
    else
        return error_set("%s:%ld: " UNSUPPORTED_FORMAT, L->path, L->line_no);
    L->detected = true;
    L->detected_line = L->line_no;
    return 0;
}

/* Mode-independent setup once the format is known: errors here are not
 * about one line, so they are never skipped. */
static int prepare_format(Loader *L) {
    if (L->d->format == DATA_TEXT) {
        if (L->o->mask_prompt) return error_set("%s: Prompt masking not supported for text dataset.", L->path);
        return 0;
    }
    const char *source = L->o->chat_template ? L->o->chat_template : tokenizer_chat_template(L->tok);
    if (!source || !*source)
        return error_set("%s: %s data needs a chat template, and the tokenizer has no chat_template "
                         "(tokenizer_config.json); give one with --chat-template",
                         L->path, dataset_format_name(L->d->format));
    if (chat_template_compile(&L->tmpl, source, "chat_template") < 0)
        return error_prefix("%s: chat template", L->path);
    L->extra = json_pack("{s:b}", "enable_thinking", tokenizer_has_thinking(L->tok));
    if (!L->extra) return L->fatal = true, error_set("%s: out of memory", L->path);
    return 0;
}

/* -1 with L->fatal unset: this line is bad; with L->fatal set: give up. */
static int process_line(Loader *L, const char *line, size_t len) {
    json_error_t jerr;
    json_t *rec = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!rec) return error_set("%s:%ld: not valid JSON: %s (column %d)", L->path, L->line_no, jerr.text, jerr.column);
    int rc = 0;
    if (!json_is_object(rec)) rc = error_set("%s:%ld: not a JSON object", L->path, L->line_no);
    else if (!L->detected && detect_format(L, rec) < 0) rc = -1;
    else if (L->detected_line == L->line_no && prepare_format(L) < 0) rc = -1, L->fatal = true;
    else if (L->d->format == DATA_TEXT) rc = process_text(L, rec);
    else if (L->d->format == DATA_COMPLETIONS) rc = process_completions(L, rec);
    else rc = process_chat(L, rec);
    json_decref(rec);
    return rc;
}

/* Counts a bad line in skip mode (0), or fails in strict mode (-1). */
static int bad_line(Loader *L) {
    if (!L->o->skip_bad_lines) return -1;
    if (L->d->bad_lines < BAD_LINES_KEPT && !(L->bad[L->d->bad_lines] = mem_strdup(error_message()))) return -1;
    L->d->bad_lines++;
    return 0;
}

static void bad_line_summary(const Loader *L, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "first: ");
    for (size_t i = 0; i < L->d->bad_lines && i < BAD_LINES_KEPT && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "; " : "", L->bad[i] ? L->bad[i] : "?");
}

/* Loads PATH; an empty file (or only blank lines) gives n == 0 without error. */
static int load_file(Dataset *d, const char *path, const Tokenizer *tok, const DatasetOptions *o) {
    DatasetOptions defaults;
    if (!o) {
        dataset_options_default(&defaults);
        o = &defaults;
    }
    memset(d, 0, sizeof *d);
    Loader L = {.d = d, .tok = tok, .o = o, .path = path};
    JsonlReader r;
    int rc = -1;
    if (jsonl_open(&r, path, o->max_line_bytes) < 0) return -1;
    d->path = mem_strdup(path);
    d->starts = mem_calloc(1, sizeof *d->starts);
    if (!d->path || !d->starts) goto done;
    for (;;) {
        const char *line;
        size_t len;
        int got = jsonl_next(&r, &line, &len);
        L.line_no = r.line_no;
        if (got < 0) goto done;
        if (got == JSONL_EOF) break;
        if (got == JSONL_BAD) {
            if (bad_line(&L) < 0) goto done;
            continue;
        }
        if (process_line(&L, line, len) < 0 && (L.fatal || bad_line(&L) < 0)) goto done;
    }
    d->blank_lines = r.blank_lines;
    if (d->n == 0 && d->bad_lines > 0) {
        char summary[1024];
        bad_line_summary(&L, summary, sizeof summary);
        error_set("%s: every line is bad (%zu bad lines; %s)", path, d->bad_lines, summary);
        goto done;
    }
    if (d->bad_lines > 0) {
        char summary[1024];
        bad_line_summary(&L, summary, sizeof summary);
        log_warning("%s: skipped %zu bad lines (%s)", path, d->bad_lines, summary);
    }
    rc = 0;
done:
    jsonl_close(&r);
    chat_template_free(L.tmpl);
    json_decref(L.extra);
    for (int i = 0; i < BAD_LINES_KEPT; i++) mem_free(L.bad[i]);
    if (rc < 0) dataset_free(d);
    return rc;
}

int dataset_load(Dataset *d, const char *path, const Tokenizer *tok, const DatasetOptions *o) {
    TRY(load_file(d, path, tok, o));
    if (d->n == 0) {
        dataset_free(d);
        return error_set("%s: no examples (empty file, or only blank lines)", path);
    }
    return 0;
}

/* MLX-LM's messages (tuner/datasets.py, load_local_dataset and load_dataset). */
int dataset_load_split(Dataset *d, const char *dir, const char *name, const Tokenizer *tok,
                       const DatasetOptions *o, bool *present) {
    memset(d, 0, sizeof *d);
    if (present) *present = false;
    char *path = path_join(dir, name);
    TRY_PTR(path);
    size_t k = strlen(path);
    char *file = mem_realloc(path, k + 7);
    if (!file) {
        mem_free(path);
        return -1;
    }
    memcpy(file + k, ".jsonl", 7);
    int rc = file_exists(file) ? load_file(d, file, tok, o) : 0;
    if (rc == 0 && d->n == 0) {
        dataset_free(d);
        if (strcmp(name, "train") == 0)
            rc = error_set("%s: Training set not found or empty. Must provide training set for fine-tuning.", file);
        else if (strcmp(name, "test") == 0)
            rc = error_set("%s: Test set not found or empty. Must provide test set for evaluation.", file);
        else if (strcmp(name, "valid") == 0)
            log_info("Warning: Validation set not found or empty. Training will proceed without validation.");
        else
            rc = error_set("%s: data set not found or empty", file);
    } else if (rc == 0 && present) {
        *present = true;
    }
    mem_free(file);
    return rc;
}

void dataset_free(Dataset *d) {
    mem_free(d->path);
    mem_free(d->tokens);
    mem_free(d->starts);
    mem_free(d->offsets);
    memset(d, 0, sizeof *d);
}

size_t dataset_count_no_targets(const Dataset *d, int max_seq_length) {
    size_t none = 0;
    for (size_t i = 0; d->offsets && i < d->n; i++) {
        size_t len = dataset_len(d, i), kept = len < (size_t)max_seq_length ? len : (size_t)max_seq_length;
        /* targets are the positions s with offset <= s < kept */
        if (d->offsets[i] > 0 && (size_t)d->offsets[i] >= kept) none++;
    }
    return none;
}

void dataset_warn_no_targets(const Dataset *d, int max_seq_length) {
    size_t none = dataset_count_no_targets(d, max_seq_length);
    if (none)
        log_warning("%s: %zu of %zu examples have no target left: their prompt is at least --max-seq-length %d "
                    "tokens, so with --mask-prompt nothing of them is trained or evaluated", d->path, none, d->n,
                    max_seq_length);
}

size_t dataset_bytes(const Dataset *d) {
    return d->n_tokens * sizeof *d->tokens + (d->n + 1) * sizeof *d->starts + d->n * sizeof *d->offsets;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

uint64_t dataset_fingerprint(const Dataset *d) {
    uint64_t h = 0xcbf29ce484222325ull, n = d->n;
    h = fnv1a(h, &n, sizeof n);
    for (size_t i = 0; i < d->n; i++) {
        uint64_t len = dataset_len(d, i);
        int32_t offset = d->offsets ? d->offsets[i] : 0;
        h = fnv1a(h, &len, sizeof len);
        h = fnv1a(h, &offset, sizeof offset);
    }
    return fnv1a(h, d->tokens, d->n_tokens * sizeof *d->tokens);
}

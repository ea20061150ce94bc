/* test_dataset.c: the three JSONL formats tokenized with a small byte-level
 * tokenizer and a ChatML-like template, --mask-prompt offsets, MLX-LM's
 * messages for missing splits, and every JSONL item of the bad-input
 * checklist (reference/bad-inputs.md) with its exact error. */
#include <stdint.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"
#include "check.h"
#include "data/batching.h"
#include "data/capture.h"
#include "data/dataset.h"
#include "data/jsonl.h"
#include "data/tiny_tokenizer.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

static const char *CHATML =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

static char tmp_dir[64];
static Tokenizer *tok, *tok_no_template;
static char path_buf[4][512];
static int path_slot;

static const char *file_path(const char *name) {
    char *p = path_buf[path_slot++ % 4];
    snprintf(p, 512, "%s/%s", tmp_dir, name);
    return p;
}
static const char *write_bytes(const char *name, const char *data, size_t len) {
    const char *p = file_path(name);
    FILE *f = fopen(p, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
    return p;
}
static const char *write_text(const char *name, const char *text) { return write_bytes(name, text, strlen(text)); }

static DatasetOptions opts(bool mask, bool skip) {
    DatasetOptions o;
    dataset_options_default(&o);
    o.mask_prompt = mask;
    o.skip_bad_lines = skip;
    return o;
}

/* Loads `text` written to a file; returns the dataset_load status. */
static int load_text(Dataset *d, const char *text, bool mask, bool skip) {
    DatasetOptions o = opts(mask, skip);
    return dataset_load(d, write_text("case.jsonl", text), tok, &o);
}
static int load_bytes(Dataset *d, const char *data, size_t len, bool skip) {
    DatasetOptions o = opts(false, skip);
    return dataset_load(d, write_bytes("case.jsonl", data, len), tok, &o);
}

/* The expected ids of one example, computed through the public tokenizer
 * and template APIs. */
static size_t encode_count(const char *text, size_t len, bool add_special, int32_t **ids) {
    size_t n = 0;
    CHECK(tokenizer_encode(tok, text, len, add_special, ids, &n) == 0);
    return n;
}
static size_t render_count(json_t *messages, bool generation, int32_t **ids) {
    ChatTemplate *t;
    char *text;
    size_t len;
    CHECK(chat_template_compile(&t, tokenizer_chat_template(tok), "test") == 0);
    CHECK(chat_template_apply(t, messages, NULL, generation, tokenizer_bos_token(tok), tokenizer_eos_token(tok),
                              &text, &len) == 0);
    size_t n = encode_count(text, len, false, ids);
    mem_free(text);
    chat_template_free(t);
    return n;
}
static bool same_ids(const Dataset *d, size_t i, const int32_t *ids, size_t n) {
    return dataset_len(d, i) == n && memcmp(d->tokens + d->starts[i], ids, n * sizeof *ids) == 0;
}

static void test_text_format(void) {
    Dataset d;
    CHECK(load_text(&d, "{\"text\": \"hello world\"}\n{\"text\": \"a second line\", \"other\": 3}\n", false, false) == 0);
    CHECK(d.format == DATA_TEXT && d.n == 2 && d.bad_lines == 0);
    const char *texts[2] = {"hello world", "a second line"};
    for (size_t i = 0; i < 2; i++) {
        int32_t *ids;
        size_t n = encode_count(texts[i], strlen(texts[i]), true, &ids);
        CHECK(dataset_len(&d, i) == n + (n == 0 || ids[n - 1] != tokenizer_eos_id(tok)));
        CHECK(memcmp(d.tokens + d.starts[i], ids, n * sizeof *ids) == 0);
        CHECK(d.tokens[d.starts[i + 1] - 1] == tokenizer_eos_id(tok)); /* EOS appended */
        CHECK(d.offsets[i] == 0);
        mem_free(ids);
    }
    CHECK(d.n_tokens == d.starts[2]);
    /* The fingerprint follows the ids and the offsets. */
    uint64_t fp = dataset_fingerprint(&d);
    CHECK(fp == dataset_fingerprint(&d));
    d.tokens[1]++;
    CHECK(fp != dataset_fingerprint(&d));
    d.tokens[1]--;
    d.offsets[1] = 1;
    CHECK(fp != dataset_fingerprint(&d));
    d.offsets[1] = 0;
    int32_t *the;
    CHECK(encode_count("the", 3, false, &the) == 1 && the[0] == 257); /* the hand-written merges apply */
    mem_free(the);
    CHECK(dataset_bytes(&d) >= d.n_tokens * 4);
    dataset_free(&d);
    /* --mask-prompt is refused for text, as MLX-LM does. */
    CHECK(load_text(&d, "{\"text\": \"hello\"}\n", true, false) < 0);
    CHECK_ERROR_CONTAINS("Prompt masking not supported for text dataset.");
    CHECK(load_text(&d, "{\"text\": \"hello\"}\n", true, true) < 0); /* not a line problem: never skipped */
    CHECK_ERROR_CONTAINS("Prompt masking not supported for text dataset.");
}

static void test_completions_format(void) {
    const char *line = "{\"prompt\": \"What is two plus two?\", \"completion\": \"Four.\"}\n";
    for (int mask = 0; mask < 2; mask++) {
        Dataset d;
        CHECK(load_text(&d, line, mask, false) == 0);
        CHECK(d.format == DATA_COMPLETIONS && d.n == 1);
        json_t *full = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "user", "content", "What is two plus two?", "role",
                                 "assistant", "content", "Four.");
        json_t *user = json_pack("[{s:s,s:s}]", "role", "user", "content", "What is two plus two?");
        int32_t *ids, *prompt_ids;
        size_t n = render_count(full, false, &ids), np = render_count(user, true, &prompt_ids);
        CHECK(same_ids(&d, 0, ids, n)); /* no extra EOS: the template ends the turn */
        CHECK(d.offsets[0] == (mask ? (int32_t)np : 0));
        CHECK(np > 0 && np < n);
        if (mask) CHECK(memcmp(ids, prompt_ids, np * sizeof *ids) == 0); /* the offset ends the prompt */
        mem_free(ids);
        mem_free(prompt_ids);
        json_decref(full);
        json_decref(user);
        dataset_free(&d);
    }
    /* Completions need a chat template: clear error, unless one is given. */
    DatasetOptions o = opts(false, false);
    Dataset d;
    const char *p = write_text("comp.jsonl", line);
    CHECK(dataset_load(&d, p, tok_no_template, &o) < 0);
    CHECK_ERROR_CONTAINS("comp.jsonl: completions data needs a chat template, and the tokenizer has no chat_template");
    o.chat_template = CHATML;
    CHECK(dataset_load(&d, p, tok_no_template, &o) == 0 && d.n == 1);
    dataset_free(&d);
    /* Detection: prompt+completion wins over messages and text. */
    CHECK(load_text(&d, "{\"text\": \"t\", \"messages\": [{\"role\": \"user\", \"content\": \"m\"}], "
                        "\"prompt\": \"p\", \"completion\": \"c\"}\n", false, false) == 0);
    CHECK(d.format == DATA_COMPLETIONS);
    dataset_free(&d);
    /* A later line without the detected format's fields names line and field. */
    CHECK(load_text(&d, "{\"prompt\": \"p\", \"completion\": \"c\"}\n{\"prompt\": \"p\"}\n", false, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:2: missing \"completion\" (the data is in completions format, detected from line 1)");
    CHECK(load_text(&d, "{\"prompt\": \"p\", \"completion\": 5}\n", false, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:1: \"completion\" is not a string");
}

static void test_chat_format(void) {
    const char *lines =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}, "
        "{\"role\": \"assistant\", \"content\": \"Hello there\"}]}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Q1\"}, {\"role\": \"assistant\", \"content\": \"A1\"}, "
        "{\"role\": \"user\", \"content\": \"Q2\"}]}\n";
    Dataset d;
    CHECK(load_text(&d, lines, true, false) == 0);
    CHECK(d.format == DATA_CHAT && d.n == 2);
    json_t *m0 = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "role", "system", "content", "Be brief.", "role", "user",
                           "content", "Hi", "role", "assistant", "content", "Hello there");
    json_t *m1 = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "role", "user", "content", "Q1", "role", "assistant",
                           "content", "A1", "role", "user", "content", "Q2");
    json_t *all[2] = {m0, m1};
    for (size_t i = 0; i < 2; i++) {
        int32_t *ids, *prompt_ids;
        size_t n = render_count(all[i], false, &ids);
        json_t *prompt = json_array();
        for (size_t k = 0; k + 1 < json_array_size(all[i]); k++) json_array_append(prompt, json_array_get(all[i], k));
        /* add_generation_prompt = (last role == "assistant"): true for line 1, false for line 2 */
        size_t np = render_count(prompt, i == 0, &prompt_ids);
        CHECK(same_ids(&d, i, ids, n));
        CHECK_MSG(d.offsets[i] == (int32_t)np, "line %zu: offset %d, prompt-only rendering %zu", i + 1, d.offsets[i], np);
        CHECK(memcmp(ids, prompt_ids, np * sizeof *ids) == 0);
        mem_free(ids);
        mem_free(prompt_ids);
        json_decref(prompt);
    }
    json_decref(m0);
    json_decref(m1);
    dataset_free(&d);
    CHECK(load_text(&d, "{\"messages\": []}\n", false, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:1: \"messages\" is not a non-empty list");
    CHECK(load_text(&d, "{\"messages\": [{\"content\": \"x\"}]}\n", false, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:1: messages[0] is not an object with a string \"role\"");
    CHECK(load_text(&d, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": 3}\n", false, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:1: \"tools\" is not a list");
}

static void test_splits(void) {
    DatasetOptions o = opts(false, false);
    Dataset d;
    bool present = true;
    char warn[1024];
    /* Missing files. */
    CHECK(dataset_load(&d, file_path("nope.jsonl"), tok, &o) < 0);
    CHECK_ERROR_CONTAINS("nope.jsonl: No such file or directory");
    CHECK(dataset_load_split(&d, tmp_dir, "train", tok, &o, &present) < 0 && !present);
    CHECK_ERROR_CONTAINS("train.jsonl: Training set not found or empty. Must provide training set for fine-tuning.");
    CHECK(dataset_load_split(&d, tmp_dir, "test", tok, &o, &present) < 0);
    CHECK_ERROR_CONTAINS("test.jsonl: Test set not found or empty. Must provide test set for evaluation.");
    stderr_begin();
    int rc = dataset_load_split(&d, tmp_dir, "valid", tok, &o, &present);
    stderr_end(warn, sizeof warn);
    CHECK(rc == 0 && !present && d.n == 0);
    CHECK(strcmp(warn, "Warning: Validation set not found or empty. Training will proceed without validation.\n") == 0);
    /* Empty files, and files with only blank lines (MLX-LM: IndexError). */
    write_text("train.jsonl", "");
    CHECK(dataset_load_split(&d, tmp_dir, "train", tok, &o, &present) < 0);
    CHECK_ERROR_CONTAINS("Training set not found or empty. Must provide training set for fine-tuning.");
    CHECK(dataset_load(&d, file_path("train.jsonl"), tok, &o) < 0);
    CHECK_ERROR_CONTAINS("train.jsonl: no examples (empty file, or only blank lines)");
    write_text("valid.jsonl", "\n   \n\t\r\n");
    stderr_begin();
    rc = dataset_load_split(&d, tmp_dir, "valid", tok, &o, &present);
    stderr_end(warn, sizeof warn);
    CHECK(rc == 0 && !present && strstr(warn, "Validation set not found or empty") != NULL);
    /* Present. */
    write_text("train.jsonl", "{\"text\": \"abc\"}\n");
    CHECK(dataset_load_split(&d, tmp_dir, "train", tok, &o, &present) == 0 && present && d.n == 1);
    dataset_free(&d);
}

static void test_line_forms(void) {
    Dataset d, ref;
    CHECK(load_text(&ref, "{\"text\": \"one\"}\n{\"text\": \"two\"}\n", false, false) == 0);
    /* Blank and whitespace-only lines: skipped and counted. */
    CHECK(load_text(&d, "\n{\"text\": \"one\"}\n   \n\t\n{\"text\": \"two\"}\n\n", false, false) == 0);
    CHECK(d.n == 2 && d.blank_lines == 4 && d.bad_lines == 0);
    CHECK(d.n_tokens == ref.n_tokens && memcmp(d.tokens, ref.tokens, ref.n_tokens * 4) == 0);
    dataset_free(&d);
    /* CRLF, a BOM on the first line, no final newline: same ids. */
    const char *variants[] = {
        "{\"text\": \"one\"}\r\n{\"text\": \"two\"}\r\n",
        "\xEF\xBB\xBF{\"text\": \"one\"}\n{\"text\": \"two\"}\n",
        "{\"text\": \"one\"}\n{\"text\": \"two\"}",
        "\xEF\xBB\xBF{\"text\": \"one\"}\r\n{\"text\": \"two\"}",
    };
    for (size_t v = 0; v < 4; v++) {
        CHECK_MSG(load_text(&d, variants[v], false, false) == 0, "variant %zu: %s", v, error_message());
        CHECK(d.n == 2 && d.n_tokens == ref.n_tokens && memcmp(d.tokens, ref.tokens, ref.n_tokens * 4) == 0);
        dataset_free(&d);
    }
    dataset_free(&ref);
    /* A BOM elsewhere is not stripped: the line is not JSON. */
    CHECK(load_text(&d, "{\"text\": \"one\"}\n\xEF\xBB\xBF{\"text\": \"two\"}\n", false, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:2: not valid JSON");
}

static void test_bad_lines(void) {
    struct { const char *data; size_t len; const char *error; } cases[] = {
        {"{\"text\": \"ok\"}\nnot json\n", 0, "case.jsonl:2: not valid JSON"},
        {"{\"text\": \"ok\"}\n{\"text\": \"ok\"\n", 0, "case.jsonl:2: not valid JSON"},
        {"{\"text\": \"ok\"}\n[1, 2]\n", 0, "case.jsonl:2: not a JSON object"},
        {"{\"text\": \"ok\"}\n42\n", 0, "case.jsonl:2: not a JSON object"},
        {"{\"text\": \"ok\"}\n\"text\"\n", 0, "case.jsonl:2: not a JSON object"},
        {"{\"text\": \"ok\"}\n{\"txt\": \"x\"}\n", 0,
         "case.jsonl:2: missing \"text\" (the data is in text format, detected from line 1)"},
        {"{\"text\": \"ok\"}\n{\"text\": 7}\n", 0, "case.jsonl:2: \"text\" is not a string"},
        {"{\"text\": \"ok\"}\n{\"text\": null}\n", 0, "case.jsonl:2: \"text\" is not a string"},
        {"{\"text\": \"ok\"}\n{\"text\": \"\"}\n", 0, "case.jsonl:2: \"text\" is empty"},
        {"{\"text\": \"ok\"}\n{\"text\": \"a\", \"text\": \"b\"}\n", 0, "case.jsonl:2: not valid JSON: duplicate object key"},
        {"{\"text\": \"ok\"}\n{\"text\": \"\xff\"}\n", 0, "case.jsonl:2: invalid UTF-8 at column 11"},
        {"{\"text\": \"ok\"}\n{\"text\": \"\xc0\xaf\"}\n", 0, "case.jsonl:2: invalid UTF-8 at column 11"},       /* overlong '/' */
        {"{\"text\": \"ok\"}\n{\"text\": \"\xe0\x80\xaf\"}\n", 0, "case.jsonl:2: invalid UTF-8 at column 11"},   /* overlong */
        {"{\"text\": \"ok\"}\n{\"text\": \"\xed\xa0\x80\"}\n", 0, "case.jsonl:2: invalid UTF-8 at column 11"},   /* surrogate */
        {"{\"text\": \"ok\"}\n{\"text\": \"\xf4\x90\x80\x80\"}\n", 0, "case.jsonl:2: invalid UTF-8 at column 11"}, /* > U+10FFFF */
        {"{\"text\": \"ok\"}\n{\"text\": \"ab\xe2\x82\"}\n", 0, "case.jsonl:2: invalid UTF-8 at column 13"},   /* truncated */
        {"{\"text\": \"ok\"}\n{\"text\": \"a\0b\"}\n", 29, "case.jsonl:2: NUL byte at column 12"},
        {"{\"text\": \"ok\"}\n{\"text\": \"a\\u0000b\"}\n", 0, "case.jsonl:2: not valid JSON"},
        {"{\"foo\": 1}\n{\"text\": \"ok\"}\n", 0,
         "case.jsonl:1: Unsupported data format, check the supported formats here:\n"
         "https://github.com/ml-explore/mlx-lm/blob/main/mlx_lm/LORA.md#Data."},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t len = cases[c].len ? cases[c].len : strlen(cases[c].data);
        Dataset d;
        /* Strict: the error names the file and line. */
        CHECK_MSG(load_bytes(&d, cases[c].data, len, false) < 0, "case %zu loaded", c);
        CHECK_MSG(strstr(error_message(), cases[c].error) != NULL, "case %zu: expected \"%s\", got \"%s\"", c,
                  cases[c].error, error_message());
        /* Skip: the bad line is counted, the good one kept, a summary printed. */
        char warn[4096];
        stderr_begin();
        int rc = load_bytes(&d, cases[c].data, len, true);
        stderr_end(warn, sizeof warn);
        CHECK_MSG(rc == 0 && d.n == 1 && d.bad_lines == 1, "case %zu skip: rc %d n %zu: %s", c, rc, d.n, error_message());
        CHECK_MSG(strstr(warn, "[WARNING] ") && strstr(warn, "skipped 1 bad lines") && strstr(warn, cases[c].error),
                  "case %zu: warning \"%s\"", c, warn);
        if (rc == 0) dataset_free(&d);
    }
}

static void test_skip_and_all_bad(void) {
    const char *mixed = "{\"text\": \"a\"}\nnope\n{\"text\": 1}\n{\"text\": \"b\"}\n[]\n{\"text\": \"c\"}\n{}\n";
    Dataset d;
    CHECK(load_text(&d, mixed, false, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:2: not valid JSON");
    char warn[4096];
    stderr_begin();
    int rc = load_text(&d, mixed, false, true);
    stderr_end(warn, sizeof warn);
    CHECK(rc == 0 && d.n == 3 && d.bad_lines == 4);
    CHECK(strstr(warn, "skipped 4 bad lines (first: ") && strstr(warn, "case.jsonl:2:") && strstr(warn, "case.jsonl:3:") &&
          strstr(warn, "case.jsonl:5:") && !strstr(warn, "case.jsonl:7:")); /* the first three */
    dataset_free(&d);
    /* Every line bad: an error in both modes. */
    CHECK(load_text(&d, "nope\n[1]\n{\"text\": \"\"}\n", false, true) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl: every line is bad (3 bad lines; first: ");
    CHECK_ERROR_CONTAINS("case.jsonl:1: not valid JSON");
    CHECK_ERROR_CONTAINS("case.jsonl:3: \"text\" is empty)");
    CHECK(load_text(&d, "nope\n[1]\n", false, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:1: not valid JSON");
    /* Skip mode finds the format from the first good record. */
    stderr_begin();
    rc = load_text(&d, "{\"x\": 1}\n{\"text\": \"a\"}\n{\"prompt\": \"p\", \"completion\": \"c\"}\n", false, true);
    stderr_end(warn, sizeof warn);
    CHECK(rc == 0 && d.format == DATA_TEXT && d.n == 1 && d.bad_lines == 2);
    if (rc == 0) dataset_free(&d);
}

static void test_deep_nesting(void) {
    size_t depth = 100000, len = 2 * depth + 64;
    char *line = mem_alloc(len);
    size_t k = (size_t)sprintf(line, "{\"text\": \"ok\", \"x\": ");
    for (size_t i = 0; i < depth; i++) line[k++] = '[';
    for (size_t i = 0; i < depth; i++) line[k++] = ']';
    line[k++] = '}';
    line[k++] = '\n';
    Dataset d;
    CHECK(load_bytes(&d, line, k, false) < 0);
    CHECK_ERROR_CONTAINS("case.jsonl:1: JSON nested deeper than 512 levels");
    /* Brackets inside strings do not count; 500 levels are fine. */
    CHECK(jsonl_nesting_depth("{\"a\": \"[[[[\"}", 13, 512) == 1);
    k = (size_t)sprintf(line, "{\"text\": \"ok\", \"x\": ");
    for (size_t i = 0; i < 500; i++) line[k++] = '[';
    for (size_t i = 0; i < 500; i++) line[k++] = ']';
    k += (size_t)sprintf(line + k, "}\n");
    CHECK(load_bytes(&d, line, k, false) == 0 && d.n == 1);
    dataset_free(&d);
    mem_free(line);
}

/* A 100 MB line: refused with file:line and the limit, read in bounded
 * memory (the reader keeps at most the limit, never the whole line). */
static void test_huge_line(void) {
    const char *p = file_path("huge.jsonl");
    FILE *f = fopen(p, "wb");
    fputs("{\"text\": \"short\"}\n{\"text\": \"", f);
    char *chunk = mem_alloc(1 << 20);
    memset(chunk, 'a', 1 << 20);
    for (int i = 0; i < 100; i++) fwrite(chunk, 1, 1 << 20, f);
    fputs("\"}\n{\"text\": \"after\"}\n", f);
    fclose(f);
    mem_free(chunk);
    DatasetOptions o = opts(false, true);
    o.max_line_bytes = 1 << 20;
    Dataset d;
    char warn[4096];
    size_t before = rss_peak_bytes();
    stderr_begin();
    int rc = dataset_load(&d, p, tok, &o);
    stderr_end(warn, sizeof warn);
    size_t small_peak = rss_peak_bytes();
    CHECK(rc == 0 && d.n == 2 && d.bad_lines == 1);
    CHECK(strstr(warn, "huge.jsonl:2: line longer than the limit of 1048576 bytes") != NULL);
    if (rc == 0) dataset_free(&d);
    o = opts(false, false); /* default limit: 64 MiB */
    CHECK(dataset_load(&d, p, tok, &o) < 0);
    CHECK_ERROR_CONTAINS("huge.jsonl:2: line longer than the limit of 67108864 bytes");
    size_t peak = rss_peak_bytes();
    printf("100 MB line: peak RSS %.1f MB before, %.1f MB with a 1 MiB limit, %.1f MB with the 64 MiB default\n",
           before / 1e6, small_peak / 1e6, peak / 1e6);
    CHECK(small_peak < before + (16u << 20));
#ifndef __SANITIZE_ADDRESS__ /* ASan's realloc copies and quarantines the old blocks */
    CHECK(peak < before + (90u << 20)); /* the limit plus slack, not the 100 MB line */
#else
    (void)peak;
#endif
}

static void test_batch_size(void) {
    Dataset d;
    CHECK(load_text(&d, "{\"text\": \"a\"}\n{\"text\": \"b\"}\n", false, false) == 0);
    BatchIter it;
    CHECK(batch_iter_init(&it, &d, 4, 2048, 0, 1, 0, true) < 0);
    CHECK(strcmp(error_message(), "Dataset must have at least batch_size=4 examples but only has 2.") == 0);
    dataset_free(&d);
}

/* Padding share with the real sort vs file order on chat data of varied length. */
static void test_padding_report(void) {
    const char *p = file_path("varied.jsonl");
    FILE *f = fopen(p, "wb");
    Rng r;
    rng_seed(&r, 3);
    static const char *words[] = {"the", "model", "learns", "from", "data", "quickly", "and", "well", "answer", "query"};
    for (int i = 0; i < 1000; i++) {
        int nq = 3 + (int)rng_below(&r, 30), na = 5 + (int)rng_below(&r, 400);
        fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"", f);
        for (int w = 0; w < nq; w++) fprintf(f, "%s%s", w ? " " : "", words[rng_below(&r, 10)]);
        fputs("\"}, {\"role\": \"assistant\", \"content\": \"", f);
        for (int w = 0; w < na; w++) fprintf(f, "%s%s", w ? " " : "", words[rng_below(&r, 10)]);
        fputs("\"}]}\n", f);
    }
    fclose(f);
    DatasetOptions o = opts(true, false);
    Dataset d;
    CHECK(dataset_load(&d, p, tok, &o) == 0 && d.n == 1000);
    double sorted = batch_padding_share(&d, 4, 2048, true), file = batch_padding_share(&d, 4, 2048, false);
    printf("padding share, 1000 chat lines (%zu tokens), B=4: sorted %.1f%%, file order %.1f%%\n", d.n_tokens,
           100 * sorted, 100 * file);
    CHECK(sorted < file);
    dataset_free(&d);
}

/* Every allocation failing in turn (jsonl, jansson excluded, tokenizer,
 * template, dataset arrays): an error, never a crash or a partial Dataset. */
static void test_alloc_failures(void) {
    const char *p = write_text("fail.jsonl",
                               "{\"text\": \"one two\"}\n{\"text\": \"three\"}\n{\"text\": \"four five six\"}\n");
    const char *pc = write_text("failc.jsonl", "{\"prompt\": \"p\", \"completion\": \"c\"}\n");
    const char *paths[2] = {p, pc};
    for (int f = 0; f < 2; f++) {
        DatasetOptions o = opts(f == 1, false);
        int failures = 0, ok = 0;
        for (long k = 1; k < 400 && !ok; k++) {
            Dataset d;
            mem_fail_at(k);
            int rc = dataset_load(&d, paths[f], tok, &o);
            mem_fail_at(0);
            if (rc == 0) { ok = 1; CHECK(d.n == (f ? 1u : 3u)); dataset_free(&d); }
            else { failures++; CHECK(d.tokens == NULL && d.n == 0); }
        }
        CHECK(ok && failures >= 4);
    }
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/lmtune_data_XXXXXX");
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); return 1; }
    char tok_dir[128], plain_dir[128];
    snprintf(tok_dir, sizeof tok_dir, "%s/tok", tmp_dir);
    snprintf(plain_dir, sizeof plain_dir, "%s/tok_plain", tmp_dir);
    if (write_tokenizer(tok_dir, CHATML) < 0 || tokenizer_load(&tok, tok_dir) < 0 ||
        write_tokenizer(plain_dir, NULL) < 0 ||
        tokenizer_load(&tok_no_template, plain_dir) < 0) {
        fprintf(stderr, "tokenizer setup: %s\n", error_message());
        return 1;
    }
    test_text_format();
    test_completions_format();
    test_chat_format();
    test_splits();
    test_line_forms();
    test_bad_lines();
    test_skip_and_all_bad();
    test_deep_nesting();
    test_batch_size();
    test_padding_report();
    test_alloc_failures();
    test_huge_line();
    tokenizer_free(tok);
    tokenizer_free(tok_no_template);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
    return check_finish("data/dataset");
}

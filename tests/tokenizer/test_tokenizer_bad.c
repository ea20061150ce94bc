/* test_tokenizer_bad.c: broken and hostile tokenizer files. Every case must
 * fail to load with a one-line error naming the file and the field (or load
 * and behave, for the cases that are valid): truncated JSON, ids outside the
 * vocab, merges in both formats and with unknown tokens, \u0000 and lone
 * surrogates, unsupported components, bad tokenizer_config.json, invalid
 * UTF-8 input and out-of-range ids, and a large file that must load in
 * bounded time. */
#include "check.h"
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char dir[256];
static char json_path[300], config_path[300];

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    fwrite(text, 1, strlen(text), f);
    fclose(f);
}

/* A small valid BPE with no pre-tokenizer; `model_extra`, `top_extra` are
 * spliced in (each starting with a comma, or empty). */
static char *make_json(const char *vocab, const char *merges, const char *added, const char *model_extra, const char *top_extra) {
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"version\": \"1.0\", \"added_tokens\": [%s], \"model\": {\"type\": \"BPE\", \"vocab\": {%s}, \"merges\": [%s]%s}%s}",
             added, vocab, merges, model_extra, top_extra);
    return buf;
}
#define VOCAB "\"a\": 0, \"b\": 1, \"ab\": 2, \"c\": 3"

/* Loads `json` (and `config` when not NULL); returns the load status. */
static int load_text(Tokenizer **t, const char *json, const char *config) {
    write_text(json_path, json);
    if (config) write_text(config_path, config);
    *t = NULL;
    int rc = tokenizer_load_files(t, json_path, config ? config_path : NULL);
    if (rc == 0) return 0;
    CHECK_MSG(*t == NULL, "failed load left a tokenizer");
    return rc;
}

static void expect_fail(const char *json, const char *config, const char *needle1, const char *needle2) {
    Tokenizer *t;
    int rc = load_text(&t, json, config);
    CHECK_MSG(rc < 0, "expected failure with \"%s\"", needle1);
    if (rc < 0) {
        CHECK_ERROR_CONTAINS(needle1);
        if (needle2) CHECK_ERROR_CONTAINS(needle2);
    } else tokenizer_free(t);
}

static void test_valid_minimal(void) {
    Tokenizer *t;
    /* Merges as "a b" strings and as ["a", "b"] pairs give the same model. */
    const char *forms[] = { "\"a b\"", "[\"a\", \"b\"]" };
    for (int f = 0; f < 2; f++) {
        CHECK(load_text(&t, make_json(VOCAB, forms[f], "", "", ""), NULL) == 0);
        if (!t) continue;
        int32_t *ids; size_t n;
        CHECK(tokenizer_encode(t, "abcab", 5, false, &ids, &n) == 0);
        CHECK(n == 3 && ids[0] == 2 && ids[1] == 3 && ids[2] == 2);
        char *s; size_t len;
        CHECK(tokenizer_decode(t, ids, n, false, &s, &len) == 0);
        /* No decoder: tokens are joined by spaces (as the reference does). */
        CHECK(len == 7 && !strcmp(s, "ab c ab"));
        mem_free(s); mem_free(ids);
        CHECK(tokenizer_vocab_size(t) == 4);
        CHECK(tokenizer_token_to_id(t, "ab") == 2 && tokenizer_token_to_id(t, "zz") == -1);
        CHECK(tokenizer_id_to_token(t, 3) && !strcmp(tokenizer_id_to_token(t, 3), "c"));
        CHECK(tokenizer_id_to_token(t, 4) == NULL && tokenizer_id_to_token(t, -1) == NULL);
        CHECK(tokenizer_bos_id(t) == -1 && tokenizer_eos_id(t) == -1 && tokenizer_chat_template(t) == NULL);
        /* A character outside the vocab with no unk token and no byte fallback. */
        CHECK(tokenizer_encode(t, "ax", 2, false, &ids, &n) < 0);
        CHECK_ERROR_CONTAINS("not in the vocab");
        CHECK_ERROR_CONTAINS("unk_token");
        /* Invalid UTF-8 names the byte offset. */
        CHECK(tokenizer_encode(t, "ab\xC3(", 4, false, &ids, &n) < 0);
        CHECK_ERROR_CONTAINS("invalid UTF-8 at byte offset 2");
        CHECK(tokenizer_encode(t, "a\xED\xA0\x80", 4, false, &ids, &n) < 0); /* UTF-8 encoded surrogate */
        CHECK_ERROR_CONTAINS("byte offset 1");
        CHECK(tokenizer_encode(t, "", 0, true, &ids, &n) == 0 && n == 0);
        mem_free(ids);
        int32_t bad[2] = { 0, 4 };
        CHECK(tokenizer_decode(t, bad, 2, false, &s, &len) < 0);
        CHECK_ERROR_CONTAINS("token id 4 at position 1");
        bad[1] = -3;
        CHECK(tokenizer_decode(t, bad, 2, false, &s, &len) < 0);
        tokenizer_free(t);
    }
    /* unk token and byte fallback. */
    CHECK(load_text(&t, make_json(VOCAB ", \"<unk>\": 4, \"<0x78>\": 5", "\"a b\"", "", ", \"unk_token\": \"<unk>\", \"byte_fallback\": true", ""), NULL) == 0);
    if (t) {
        int32_t *ids; size_t n;
        CHECK(tokenizer_encode(t, "axy", 3, false, &ids, &n) == 0);
        CHECK(n == 3 && ids[0] == 0 && ids[1] == 5 && ids[2] == 4); /* x has <0x78>, y falls to <unk> */
        mem_free(ids);
        tokenizer_free(t);
    }
}

static void test_bad_json(void) {
    char *good = mem_strdup(make_json(VOCAB, "\"a b\"", "", "", ""));
    /* Truncated at many points: always a clean error naming the file. */
    for (size_t cut = 1; cut < strlen(good); cut += 7) {
        char *part = mem_strndup(good, cut);
        Tokenizer *t;
        int rc = load_text(&t, part, NULL);
        CHECK_MSG(rc < 0, "truncated at %zu loaded", cut);
        if (rc < 0) CHECK_ERROR_CONTAINS(json_path);
        else tokenizer_free(t);
        mem_free(part);
    }
    mem_free(good);
    expect_fail("", NULL, json_path, "invalid JSON");
    expect_fail("[1, 2]", NULL, json_path, "not a JSON object");
    expect_fail("{\"version\": \"1.0\"}", NULL, json_path, "model");
    Tokenizer *t;
    CHECK(tokenizer_load_files(&t, "/nonexistent/dir/tokenizer.json", NULL) < 0);
    CHECK_ERROR_CONTAINS("/nonexistent/dir/tokenizer.json");
    CHECK(tokenizer_load(&t, "/nonexistent/dir") < 0);
    CHECK_ERROR_CONTAINS("/nonexistent/dir/tokenizer.json");
    /* \u0000 and lone surrogates inside token strings. */
    expect_fail(make_json("\"a\": 0, \"b\\u0000\": 1", "", "", "", ""), NULL, json_path, "\\u0000");
    expect_fail(make_json("\"a\": 0, \"\\ud800\": 1", "", "", "", ""), NULL, json_path, "nvalid Unicode");
    expect_fail(make_json("\"a\": 0, \"\\udc00x\": 1", "", "", "", ""), NULL, json_path, NULL);
    expect_fail(make_json(VOCAB, "", "{\"id\": 9, \"content\": \"\\ud83d\", \"special\": true}", "", ""), NULL, json_path, NULL);
}

/* Ids with holes are a valid vocab (HF keeps a map): the gpt-4o / Phi-4
 * file has its special tokens at 200018 and up. Encoding works; decoding a
 * hole is one clear error. */
static void test_sparse_ids(void) {
    Tokenizer *t;
    CHECK(load_text(&t, make_json("\"a\": 0, \"b\": 1, \"ab\": 7", "\"a b\"",
                                  "{\"id\": 40, \"content\": \"<s>\", \"special\": true}", "", ""), NULL) == 0);
    if (!t) return;
    CHECK(tokenizer_vocab_size(t) == 41);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tokenizer_encode(t, "ab<s>b", 6, false, &ids, &n) == 0);
    CHECK(n == 3 && ids && ids[0] == 7 && ids[1] == 40 && ids[2] == 1);
    mem_free(ids);
    char *out;
    size_t len;
    int32_t hole = 5;
    CHECK(tokenizer_decode(t, &hole, 1, false, &out, &len) < 0);
    CHECK_ERROR_CONTAINS("token id 5 at position 0 is not in the vocab");
    tokenizer_free(t);
}

static void test_bad_ids(void) {
    expect_fail(make_json("\"a\": 0, \"b\": 16777216", "", "", "", ""), NULL, json_path,
                "model.vocab[\"b\"]: id 16777216 is outside [0, 16777216)");
    expect_fail(make_json("\"a\": 0, \"b\": -1", "", "", "", ""), NULL, "model.vocab[\"b\"]", "outside");
    expect_fail(make_json("\"a\": 0, \"b\": 0", "", "", "", ""), NULL, "model.vocab[", "also used");
    expect_fail(make_json("\"a\": 0, \"b\": \"1\"", "", "", "", ""), NULL, "model.vocab[\"b\"]", "not an integer");
    expect_fail(make_json("", "", "", "", ""), NULL, "model.vocab", "empty");
    expect_fail(make_json(VOCAB, "", "{\"id\": 99999999, \"content\": \"<s>\", \"special\": true}", "", ""), NULL,
                json_path, "added_tokens[0].id: 99999999 is outside");
    expect_fail(make_json(VOCAB, "", "{\"id\": -2, \"content\": \"<s>\"}", "", ""), NULL, "added_tokens[0].id", NULL);
    expect_fail(make_json(VOCAB, "", "{\"content\": \"<s>\"}", "", ""), NULL, "added_tokens[0].id", "missing");
    expect_fail(make_json(VOCAB, "", "{\"id\": 4, \"content\": \"\"}", "", ""), NULL, "added_tokens[0].content", "empty");
    expect_fail(make_json(VOCAB, "", "{\"id\": 4, \"content\": 5}", "", ""), NULL, "added_tokens[0].content", "string");
    /* Merges referencing unknown tokens, malformed merges. */
    expect_fail(make_json(VOCAB, "\"a b\", \"a z\"", "", "", ""), NULL, json_path, "model.merges[1]: \"z\" is not in model.vocab");
    expect_fail(make_json(VOCAB, "[\"q\", \"b\"]", "", "", ""), NULL, "model.merges[0]: \"q\"", NULL);
    expect_fail(make_json(VOCAB, "\"ab\"", "", "", ""), NULL, "model.merges[0]", "left right");
    expect_fail(make_json(VOCAB, "\"a b c\"", "", "", ""), NULL, "model.merges[0]", NULL);
    expect_fail(make_json(VOCAB, "[\"a\"]", "", "", ""), NULL, "model.merges[0]", NULL);
    expect_fail(make_json(VOCAB, "7", "", "", ""), NULL, "model.merges[0]", NULL);
    expect_fail(make_json(VOCAB, "\"b a\"", "", "", ""), NULL, "model.merges[0]", "merge result \"ba\"");
    expect_fail(make_json(VOCAB, "", "", ", \"unk_token\": \"<unk>\"", ""), NULL, "model.unk_token", "not in model.vocab");
}

static void test_unsupported(void) {
    expect_fail(make_json(VOCAB, "", "", ", \"dropout\": 0.1", ""), NULL, "model.dropout", NULL);
    expect_fail("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", NULL, json_path, "model.type: \"Unigram\"");
    expect_fail(make_json(VOCAB, "", "", "", ", \"normalizer\": {\"type\": \"NFKC\"}"), NULL, json_path, "normalizer.type: normalizer \"NFKC\" is not supported");
    expect_fail(make_json(VOCAB, "", "", "", ", \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Lowercase\"}]}"),
                NULL, "normalizer.normalizers[1].type", "Lowercase");
    expect_fail(make_json(VOCAB, "", "", "", ", \"pre_tokenizer\": {\"type\": \"Whitespace\"}"), NULL, "pre_tokenizer.type", "Whitespace");
    expect_fail(make_json(VOCAB, "", "", "", ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": \"Isolated\"}"),
                NULL, "pre_tokenizer.pattern", "invalid regex");
    expect_fail(make_json(VOCAB, "", "", "", ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}"),
                NULL, "pre_tokenizer.behavior", "Sideways");
    expect_fail(make_json(VOCAB, "", "", "", ", \"post_processor\": {\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 2], \"cls\": [\"<s>\", 0]}"),
                NULL, "post_processor.type", "\"RobertaProcessing\" is not supported");
    expect_fail(make_json(VOCAB, "", "", "", ", \"post_processor\": {\"type\": \"BertProcessing\"}"), NULL, "post_processor.type", "BertProcessing");
    expect_fail(make_json(VOCAB, "", "", "", ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<nope>\"}}]}"),
                NULL, "post_processor.single[0]", "<nope>");
    expect_fail(make_json(VOCAB, "", "", "", ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], "
                                            "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [40]}}}"),
                NULL, "post_processor.special_tokens.<s>.ids[0]", NULL);
    expect_fail(make_json(VOCAB, "", "", "", ", \"decoder\": {\"type\": \"WordPiece\"}"), NULL, "decoder.type", "WordPiece");
}

static void test_template_and_config(void) {
    Tokenizer *t;
    const char *json = make_json(VOCAB ", \"<s>\": 4, \"</s>\": 5", "\"a b\"",
                                 "{\"id\": 4, \"content\": \"<s>\", \"special\": true}, {\"id\": 5, \"content\": \"</s>\", \"special\": true}", "",
                                 ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
                                 " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}],"
                                 " \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [4], \"tokens\": [\"<s>\"]}}}");
    char *json_copy = mem_strdup(json);
    const char *config = "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"</s>\", \"add_bos_token\": true,"
                         " \"model_max_length\": 1000000000000000019884624838656,"
                         " \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", \"template\": \"D\"}]}";
    CHECK(load_text(&t, json_copy, config) == 0);
    if (t) {
        int32_t *ids; size_t n;
        CHECK(tokenizer_encode(t, "ab</s>c", 7, true, &ids, &n) == 0);
        CHECK(n == 5 && ids[0] == 4 && ids[1] == 2 && ids[2] == 5 && ids[3] == 3 && ids[4] == 5);
        char *s; size_t len;
        CHECK(tokenizer_decode(t, ids, n, true, &s, &len) == 0);
        CHECK(!strcmp(s, "ab c"));
        mem_free(s); mem_free(ids);
        CHECK(tokenizer_bos_id(t) == 4 && tokenizer_eos_id(t) == 5 && tokenizer_pad_id(t) == 5);
        CHECK(!strcmp(tokenizer_bos_token(t), "<s>") && !strcmp(tokenizer_eos_token(t), "</s>"));
        CHECK(tokenizer_add_bos_token(t) && !tokenizer_add_eos_token(t));
        CHECK(tokenizer_chat_template(t) && !strcmp(tokenizer_chat_template(t), "D"));
        CHECK(tokenizer_is_special(t, 4) && !tokenizer_is_special(t, 2) && !tokenizer_is_special(t, 99));
        tokenizer_free(t);
    }
    expect_fail(json_copy, "{\"eos_token\": \"<|missing|>\"}", config_path, "eos_token: \"<|missing|>\" is not a token");
    expect_fail(json_copy, "{\"eos_token\": 5}", config_path, "eos_token");
    expect_fail(json_copy, "{\"bos_token\": \"<s>\", ", config_path, "invalid JSON");
    expect_fail(json_copy, "{\"chat_template\": 3}", config_path, "chat_template");
    expect_fail(json_copy, "{\"add_bos_token\": \"yes\"}", config_path, "add_bos_token");
    mem_free(json_copy);
}

/* Pre-token boundaries decide which merges may happen: with merges a+b,
 * b+a, b+b, 1+2, each Split behaviour shows in the ids. */
static void expect_ids(const char *pre_tokenizer, const char *text, const char *want) {
    char json[2048];
    snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"ba\": 3, \"bb\": 4, "
             "\"1\": 5, \"2\": 6, \"12\": 7}, \"merges\": [\"a b\", \"b a\", \"b b\", \"1 2\"]}, \"pre_tokenizer\": %s}", pre_tokenizer);
    Tokenizer *t;
    if (load_text(&t, json, NULL) < 0) { fprintf(stderr, "%s\n", error_message()); CHECK(0); return; }
    int32_t *ids; size_t n;
    CHECK(tokenizer_encode(t, text, strlen(text), false, &ids, &n) == 0);
    char got[256] = ""; size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof got - 16; i++) k += (size_t)snprintf(got + k, sizeof got - k, "%s%s", i ? " " : "", tokenizer_id_to_token(t, ids[i]));
    CHECK_MSG(!strcmp(got, want), "%s on \"%s\": got \"%s\", want \"%s\"", pre_tokenizer, text, got, want);
    mem_free(ids);
    tokenizer_free(t);
}

static void test_split_behaviours(void) {
#define SPLIT(b, inv) "{\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, \"behavior\": \"" b "\", \"invert\": " inv "}"
    expect_ids(SPLIT("Isolated", "false"), "aba", "a b a");
    expect_ids(SPLIT("Removed", "false"), "aba", "a a");
    expect_ids(SPLIT("MergedWithPrevious", "false"), "aba", "ab a");
    expect_ids(SPLIT("MergedWithNext", "false"), "aba", "a ba");
    expect_ids(SPLIT("Contiguous", "false"), "abba", "a bb a");
    expect_ids(SPLIT("Isolated", "false"), "abba", "a b b a");
    expect_ids(SPLIT("Isolated", "true"), "aba", "b");
    expect_ids("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"b+\"}, \"behavior\": \"Isolated\", \"invert\": false}", "abba", "a bb a");
    expect_ids("{\"type\": \"Digits\", \"individual_digits\": true}", "a12b", "a 1 2 b");
    expect_ids("{\"type\": \"Digits\", \"individual_digits\": false}", "a12b", "a 12 b");
    expect_ids("{\"type\": \"Sequence\", \"pretokenizers\": [" SPLIT("Isolated", "false") ", {\"type\": \"Digits\", \"individual_digits\": true}]}", "ab12", "a b 1 2");
    expect_ids("null", "ab12ba", "ab 12 ba");
#undef SPLIT
}

/* Name of token k: k in base 20, most significant digit first, digits
 * 'c'..'v'; so name(k) = name(k / 20) + name(k % 20) for k >= 20. */
static size_t token_name(size_t k, char *out) {
    char tmp[16]; size_t p = 0;
    do { tmp[p++] = (char)('c' + k % 20); k /= 20; } while (k);
    for (size_t i = 0; i < p; i++) out[i] = tmp[p - 1 - i];
    out[p] = 0;
    return p;
}

/* A tokenizer.json of `n` tokens and n - 20 merges (about 30 bytes per
 * token): it must load in bounded time (no quadratic step). */
static void test_large_file(size_t n) {
    size_t cap = n * 64 + 4096, len = 0;
    char *buf = mem_alloc(cap);
    char name[16], left[16], right[16];
    len += (size_t)sprintf(buf + len, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (size_t k = 0; k < n; k++) {
        token_name(k, name);
        len += (size_t)sprintf(buf + len, "%s\"%s\": %zu", k ? ", " : "", name, k);
    }
    len += (size_t)sprintf(buf + len, "}, \"merges\": [");
    for (size_t k = 20; k < n; k++) {
        token_name(k / 20, left); token_name(k % 20, right);
        len += (size_t)sprintf(buf + len, k > 20 ? ", [\"%s\", \"%s\"]" : "[\"%s\", \"%s\"]", left, right);
    }
    len += (size_t)sprintf(buf + len, "]}}");
    CHECK(len < cap);
    Tokenizer *t;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = load_text(&t, buf, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    printf("large tokenizer.json: %.1f MB, %zu tokens, loaded in %.2fs\n", len / 1e6, n, secs);
    if (rc < 0) printf("  error: %s\n", error_message());
    CHECK(rc == 0);
    CHECK_MSG(secs < 30, "loading took %.1fs", secs);
    if (t) {
        CHECK(tokenizer_vocab_size(t) == (int)n);
        tokenizer_free(t);
    }
    mem_free(buf);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/lmtune_tok_bad_XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(json_path, sizeof json_path, "%s/tokenizer.json", dir);
    snprintf(config_path, sizeof config_path, "%s/tokenizer_config.json", dir);
    test_valid_minimal();
    test_bad_json();
    test_bad_ids();
    test_sparse_ids();
    test_unsupported();
    test_template_and_config();
    test_split_behaviours();
    test_large_file(getenv("LMTUNE_TOK_LARGE") ? (size_t)atol(getenv("LMTUNE_TOK_LARGE")) : 300000);
    unlink(json_path); unlink(config_path); rmdir(dir);
    return check_finish("tokenizer_bad");
}

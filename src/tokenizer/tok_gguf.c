/* tok_gguf.c: a loaded tokenizer as GGUF metadata in llama.cpp's terms
 * (see tok_gguf.h). The pre-tokenizer name is not guessed from a hash of
 * sample encodings as the converter does, but read off the pre-tokenizer's
 * own stages: each name below is a llama.cpp pre-tokenizer type whose
 * regexes (llama-vocab.cpp, llm_tokenizer_bpe) split text exactly as these
 * Hugging Face stages do. */
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
#define GPT4O_RE "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
                 "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+" \
                 "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
                 "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* One known pre-tokenizer: Split(split_re, Isolated) or Digits(individual)
 * first when set, then ByteLevel (with the GPT-2 regex when bytelevel_re). */
typedef struct {
    const char *name;
    const char *split_re;
    bool digits;
    bool bytelevel_re;
    int ignore_merges;      /* 0 / 1: must match the BPE model's flag; -1: either */
} PreName;

static const PreName PRE_NAMES[] = {
    {"gpt-2", NULL, false, true, 0},
    {"gpt-2", GPT2_RE, false, false, 0},
    {"llama-bpe", LLAMA3_RE, false, false, 1},
    {"smaug-bpe", LLAMA3_RE, false, false, 0},
    {"qwen2", QWEN2_RE, false, false, 0},
    {"gpt-4o", GPT4O_RE, false, false, 0},
    {"smollm", NULL, true, true, 0},
};

static const PreTokenizer *stage(const PreTokenizer *p, size_t i, size_t *n) {
    if (p->kind == PRE_SEQUENCE) {
        *n = p->n_children;
        return i < p->n_children ? &p->children[i] : NULL;
    }
    *n = 1;
    return i == 0 ? p : NULL;
}

static bool bytelevel_ok(const PreTokenizer *b, bool with_re) {
    if (!b || b->kind != PRE_BYTELEVEL || b->add_prefix_space) return false;
    if (!with_re) return !b->has_regex;
    return b->has_regex && b->pattern && !strcmp(b->pattern, GPT2_RE);
}

static const char *bpe_pre_name(const Tokenizer *t) {
    const PreTokenizer *p = t->pre_tokenizer;
    if (!p) return NULL;
    for (size_t k = 0; k < sizeof PRE_NAMES / sizeof PRE_NAMES[0]; k++) {
        const PreName *pn = &PRE_NAMES[k];
        size_t n;
        size_t want = (pn->split_re || pn->digits) ? 2 : 1;
        stage(p, 0, &n);
        if (n != want) continue;
        if (pn->ignore_merges >= 0 && (pn->ignore_merges != 0) != t->ignore_merges) continue;
        const PreTokenizer *first = stage(p, 0, &n);
        if (pn->split_re) {
            /* Isolated, or Removed with invert (keep the matches, drop the rest: the same where, as in
             * these regexes, the matches cover the text) */
            bool keep = (first->behavior == SPLIT_ISOLATED && !first->invert)
                        || (first->behavior == SPLIT_REMOVED && first->invert);
            bool ok = first->kind == PRE_SPLIT && keep && first->pattern && !strcmp(first->pattern, pn->split_re);
            if (!ok) continue;
        }
        if (pn->digits && (first->kind != PRE_DIGITS || !first->individual_digits)) continue;
        if (bytelevel_ok(stage(p, want - 1, &n), pn->bytelevel_re)) return pn->name;
    }
    return NULL;
}

static bool is_metaspace(const char *s, size_t n) {
    return n == 3 && !memcmp(s, "\xE2\x96\x81", 3);
}

static bool is_space_to_metaspace(const Normalizer *b) {
    return b->kind == NORM_REPLACE && !b->has_regex && b->a_len == 1 && b->a[0] == ' ' && is_metaspace(b->b, b->b_len);
}

/* Llama 2's sentencepiece layout: Prepend("▁") + Replace(" ", "▁") and no
 * pre-tokenizer, or no normalizer and Metaspace("▁", prepend first/always,
 * no split). Both are llama.cpp's SPM with add_space_prefix. Gemma's:
 * Replace(" ", "▁") alone, and no pre-tokenizer or a Split on " " (which
 * finds no space left after the normalizer): SPM without add_space_prefix
 * (*space_prefix false), as Gemma{2,3}Model.set_vocab writes it. */
static bool is_spm_layout(const Tokenizer *t, bool *space_prefix) {
    if (!t->byte_fallback || t->byte_level) return false;
    const Normalizer *n = t->normalizer;
    const PreTokenizer *p = t->pre_tokenizer;
    *space_prefix = true;
    if (n && !p && n->kind == NORM_SEQUENCE && n->n_children == 2) {
        const Normalizer *a = &n->children[0];
        return a->kind == NORM_PREPEND && is_metaspace(a->a, a->a_len) && is_space_to_metaspace(&n->children[1]);
    }
    if (!n && p && p->kind == PRE_METASPACE)
        return is_metaspace(p->replacement, p->replacement_len) && p->prepend_scheme != PREPEND_NEVER && !p->split;
    bool split_space = p && p->kind == PRE_SPLIT && !p->invert && p->pattern && !strcmp(p->pattern, " ");
    if (n && is_space_to_metaspace(n) && (!p || split_space)) {
        *space_prefix = false;
        return true;
    }
    return false;
}

/* Added tokens beyond the model's embedding (Gemma 3's tokenizer.json has
 * <image_soft_token> at 262144 for a vocab_size of 262144): the converter
 * leaves them out ("id is out of range"), as here; any other token past
 * the embedding is an error. */
static int32_t tokens_in_model(const Tokenizer *t, int32_t vocab_size) {
    if (t->vocab_size <= vocab_size) return t->vocab_size;
    for (int32_t id = vocab_size; id < t->vocab_size; id++)
        if (!t->added[id]) return t->vocab_size;
    return vocab_size;
}

typedef struct {
    int32_t rank, a, b, merged;
} Merge;

static int cmp_rank(const void *x, const void *y) {
    const Merge *a = x;
    const Merge *b = y;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* The merges in rank order (heap). */
static int sorted_merges(const Tokenizer *t, Merge **out, size_t *n) {
    Merge *m = mem_calloc(t->merges.count + 1, sizeof *m);
    if (!m) return -1;
    size_t k = 0;
    for (size_t i = 0; i < t->merges.capacity; i++) {
        const PairEntry *e = &t->merges.slots[i];
        if (e->key == UINT64_MAX || k == t->merges.count) continue;   /* empty slot (tok_maps.c) */
        m[k].rank = e->rank;
        m[k].a = (int32_t)(e->key >> 32);
        m[k].b = (int32_t)(uint32_t)e->key;
        m[k].merged = e->merged;
        k++;
    }
    qsort(m, k, sizeof *m, cmp_rank);
    *out = m;
    *n = k;
    return 0;
}

static bool is_byte_token(const char *s) {
    unsigned v;
    char tail;
    return strlen(s) == 6 && sscanf(s, "<0x%2X%c", &v, &tail) == 2 && tail == '>';
}

static int fill_tokens(const Tokenizer *t, TokGgufMeta *m, bool spm) {
    for (int32_t id = 0; id < m->n; id++) {
        const char *tok = id < t->vocab_size ? t->id_to_token[id] : NULL;
        char pad[32];
        int type = GGUF_TOKEN_NORMAL;
        if (!tok) {
            snprintf(pad, sizeof pad, "[PAD%d]", (int)id);
            tok = pad;
            type = GGUF_TOKEN_UNUSED;
        } else if (id == t->unk_id && spm) {
            type = GGUF_TOKEN_UNKNOWN;
        } else if (t->added[id] || t->special[id]) {
            type = t->special[id] ? GGUF_TOKEN_CONTROL : GGUF_TOKEN_USER_DEFINED;
        } else if (spm && is_byte_token(tok)) {
            type = GGUF_TOKEN_BYTE;
        }
        m->types[id] = type;
        m->tokens[id] = mem_strdup(tok);
        if (!m->tokens[id]) return -1;
    }
    return 0;
}

/* SPM scores: -(rank of the first merge making the token); tokens no merge
 * makes (characters, bytes, specials) score below every merged token. */
static void fill_scores(const Merge *mg, size_t n_merges, TokGgufMeta *m) {
    for (int32_t id = 0; id < m->n; id++) m->scores[id] = -1e9f;
    for (size_t i = n_merges; i-- > 0;)
        if (mg[i].merged < m->n) m->scores[mg[i].merged] = -(float)mg[i].rank;
    for (int32_t id = 0; id < m->n; id++)
        if (m->types[id] != GGUF_TOKEN_NORMAL) m->scores[id] = 0.0f;
}

static int fill_merges(const Tokenizer *t, const Merge *mg, size_t n_merges, TokGgufMeta *m) {
    m->merges = mem_calloc(n_merges + 1, sizeof *m->merges);
    if (!m->merges) return -1;
    for (size_t i = 0; i < n_merges; i++) {
        const char *a = t->id_to_token[mg[i].a];
        const char *b = t->id_to_token[mg[i].b];
        if (strchr(a, ' ') || strchr(b, ' '))
            return error_set("%s: merge %d (\"%s\" \"%s\") holds a space, which GGUF's \"left right\" merges cannot "
                             "carry", t->json_path, (int)mg[i].rank, a, b);
        size_t la = strlen(a);
        size_t lb = strlen(b);
        char *s = mem_alloc(la + lb + 2);
        if (!s) return -1;
        memcpy(s, a, la);
        s[la] = ' ';
        memcpy(s + la + 1, b, lb + 1);
        m->merges[i] = s;
        m->n_merges = i + 1;
    }
    return 0;
}

/* add_bos: the post-processor's single template starts with BOS, or
 * tokenizer_config.json's add_bos_token. */
static void special_flags(const Tokenizer *t, TokGgufMeta *m) {
    const PostProcessor *pp = &t->post;
    m->add_bos = t->add_bos_token;
    m->add_eos = t->add_eos_token;
    if (pp->present && pp->n_single > 0) {
        const TemplateItem *first = &pp->single[0];
        const TemplateItem *last = &pp->single[pp->n_single - 1];
        if (!first->is_sequence_a && first->n_ids > 0) m->add_bos = true;
        if (!last->is_sequence_a && last->n_ids > 0 && pp->n_single > 1) m->add_eos = true;
    }
}

int tokenizer_gguf_meta(const Tokenizer *t, int32_t vocab_size, int32_t eos_fallback, TokGgufMeta *m) {
    memset(m, 0, sizeof *m);
    if (tokens_in_model(t, vocab_size) > vocab_size)
        return error_set("%s: the tokenizer has %d tokens but the model's embedding only %d rows", t->json_path,
                         (int)t->vocab_size, (int)vocab_size);
    bool space_prefix;
    bool spm = is_spm_layout(t, &space_prefix);
    if (spm) {
        m->model = "llama";
        m->pre = "default";
        m->add_space_prefix = space_prefix;
    } else {
        bool norm_ok = !t->normalizer || t->normalizer->kind == NORM_NFC;
        m->model = "gpt2";
        m->pre = t->byte_level && norm_ok ? bpe_pre_name(t) : NULL;
        if (!m->pre)
            return error_set("%s: llama.cpp has no tokenizer that splits text as this one does (GGUF knows byte-level "
                             "BPE with the GPT-2, Llama 3, Qwen2, SmolLM or GPT-4o pre-tokenizer, and Llama 2's and "
                             "Gemma's sentencepiece BPE)", t->json_path);
    }
    m->n = vocab_size;
    m->tokens = mem_calloc((size_t)vocab_size + 1, sizeof *m->tokens);
    m->types = mem_calloc((size_t)vocab_size + 1, sizeof *m->types);
    if (!m->tokens || !m->types) goto fail;
    if (fill_tokens(t, m, spm) < 0) goto fail;
    Merge *mg;
    size_t n_merges;
    if (sorted_merges(t, &mg, &n_merges) < 0) goto fail;
    int rc = 0;
    if (spm) {
        m->scores = mem_calloc((size_t)vocab_size + 1, sizeof *m->scores);
        if (m->scores) fill_scores(mg, n_merges, m);
        else rc = -1;
    } else {
        rc = fill_merges(t, mg, n_merges, m);
    }
    mem_free(mg);
    if (rc < 0) goto fail;
    m->bos = t->bos_id < vocab_size ? t->bos_id : -1;
    m->eos = t->eos_id >= 0 ? t->eos_id : eos_fallback;
    m->eos = m->eos < vocab_size ? m->eos : -1;
    m->pad = t->pad_id < vocab_size ? t->pad_id : -1;
    m->unk = t->unk_id < vocab_size ? t->unk_id : -1;
    special_flags(t, m);
    m->chat_template = t->chat_template;
    return 0;
fail:
    tokenizer_gguf_meta_free(m);
    return -1;
}

void tokenizer_gguf_meta_free(TokGgufMeta *m) {
    for (int32_t i = 0; m->tokens && i < m->n; i++) mem_free(m->tokens[i]);
    for (size_t i = 0; m->merges && i < m->n_merges; i++) mem_free(m->merges[i]);
    mem_free(m->tokens);
    mem_free(m->types);
    mem_free(m->scores);
    mem_free(m->merges);
    memset(m, 0, sizeof *m);
}

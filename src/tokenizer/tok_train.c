/* tok_train.c: the demo's tokenizer generator. Learns byte-level BPE merges
 * from a text the simple greedy way (GPT-2 regex pre-tokenization, word
 * counts, repeatedly merge the most frequent adjacent pair; ties go to the
 * smallest pair of ids, so the result is deterministic) and writes a
 * tokenizer.json + tokenizer_config.json that this loader and the
 * Hugging Face / transformers.js loaders read. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"
#include "base/fileio.h"
#include <jansson.h>
#include <string.h>

static const char *SPECIALS[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
enum { N_SPECIALS = 3 };

/* Pair counts: open addressing, key (a << 32 | b), int64 counts. */
typedef struct {
    uint64_t *keys;
    int64_t *counts;
    size_t cap, n;
} PairCounts;
#define NO_KEY UINT64_MAX
static int counts_reset(PairCounts *p, size_t expected) {
    size_t cap = 1024;
    while (cap < expected * 2) cap *= 2;
    if (cap != p->cap) {
        mem_free(p->keys);
        mem_free(p->counts);
        p->keys = mem_alloc(cap * sizeof *p->keys);
        p->counts = mem_alloc(cap * sizeof *p->counts);
        if (!p->keys || !p->counts) return -1;
        p->cap = cap;
    }
    for (size_t i = 0; i < cap; i++) p->keys[i] = NO_KEY;
    p->n = 0;
    return 0;
}
static void counts_add(PairCounts *p, uint64_t key, int64_t c) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & (p->cap - 1);
    while (p->keys[i] != NO_KEY && p->keys[i] != key) i = (i + 1) & (p->cap - 1);
    if (p->keys[i] == NO_KEY) {
        p->keys[i] = key;
        p->counts[i] = 0;
        p->n++;
    }
    p->counts[i] += c;
}

typedef struct {
    StrMap words; /* word bytes -> index */
    int64_t *freq;
    size_t n_words, cap_words;
} WordCounts;
typedef struct {
    WordCounts *wc;
    const char *text;
} CountCtx;
static int count_word(size_t start, size_t end, void *vctx) {
    CountCtx *c = vctx;
    if (end == start) return 0;
    int32_t idx = strmap_get(&c->wc->words, c->text + start, end - start);
    if (idx >= 0) {
        c->wc->freq[idx]++;
        return 0;
    }
    if (c->wc->n_words == c->wc->cap_words) {
        size_t nc = c->wc->cap_words ? c->wc->cap_words * 2 : 1024;
        int64_t *q = mem_realloc(c->wc->freq, nc * sizeof *q);
        if (!q) return -1;
        c->wc->freq = q;
        c->wc->cap_words = nc;
    }
    TRY(strmap_put(&c->wc->words, c->text + start, end - start, (int32_t)c->wc->n_words));
    c->wc->freq[c->wc->n_words++] = 1;
    return 0;
}

static int write_json(const char *dir, const char *name, json_t *root) {
    char *path = path_join(dir, name);
    if (!path) return -1;
    char *text = json_dumps(root, JSON_INDENT(2));
    int rc = text ? atomic_write_file(path, text, strlen(text)) : error_set("%s: cannot serialize JSON", path);
    free(text); /* jansson's own allocation */
    mem_free(path);
    return rc;
}

/* Builds both JSON documents from the learned vocab and merges. */
static int write_files(const char *out_dir, char **tokens, size_t n_tokens, const int32_t *merges, size_t n_merges,
                       const char *chat_template) {
    int rc = -1;
    json_t *root = json_object(), *model = json_object(), *vocab = json_object(), *mlist = json_array();
    json_t *added = json_array(), *config = json_object();
    if (!root || !model || !vocab || !mlist || !added || !config) {
        error_set("tokenizer_write_bytelevel: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_tokens; i++) json_object_set_new(vocab, tokens[i], json_integer((json_int_t)i));
    for (size_t i = 0; i < n_merges; i++)
        json_array_append_new(mlist, json_pack("[ss]", tokens[merges[2 * i]], tokens[merges[2 * i + 1]]));
    for (int s = 0; s < N_SPECIALS; s++)
        json_array_append_new(added,
                              json_pack("{s:I,s:s,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)(n_tokens + (size_t)s),
                                        "content", SPECIALS[s], "single_word", 0, "lstrip", 0, "rstrip", 0,
                                        "normalized", 0, "special", 1));
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    json_object_set_new(root, "added_tokens", added);
    added = NULL;
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(
        root, "pre_tokenizer",
        json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1));
    json_object_set_new(
        root, "post_processor",
        json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0));
    json_object_set_new(
        root, "decoder",
        json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1));
    json_object_set_new(model, "type", json_string("BPE"));
    json_object_set_new(model, "dropout", json_null());
    json_object_set_new(model, "unk_token", json_null());
    json_object_set_new(model, "continuing_subword_prefix", json_null());
    json_object_set_new(model, "end_of_word_suffix", json_null());
    json_object_set_new(model, "fuse_unk", json_false());
    json_object_set_new(model, "byte_fallback", json_false());
    json_object_set_new(model, "ignore_merges", json_false());
    json_object_set_new(model, "vocab", vocab);
    vocab = NULL;
    json_object_set_new(model, "merges", mlist);
    mlist = NULL;
    json_object_set_new(root, "model", model);
    model = NULL;

    json_object_set_new(config, "add_bos_token", json_false());
    json_object_set_new(config, "add_eos_token", json_false());
    json_object_set_new(config, "bos_token", json_null());
    json_object_set_new(config, "eos_token", json_string(SPECIALS[2]));
    json_object_set_new(config, "pad_token", json_string(SPECIALS[0]));
    json_object_set_new(config, "unk_token", json_null());
    json_object_set_new(config, "additional_special_tokens", json_pack("[ss]", SPECIALS[1], SPECIALS[2]));
    json_object_set_new(config, "clean_up_tokenization_spaces", json_false());
    json_object_set_new(config, "model_max_length", json_integer(32768));
    json_object_set_new(config, "tokenizer_class", json_string("PreTrainedTokenizerFast"));
    json_object_set_new(config, "chat_template", chat_template ? json_string(chat_template) : json_null());
    if (dir_ensure(out_dir) < 0) goto done;
    if (write_json(out_dir, "tokenizer.json", root) < 0) goto done;
    if (write_json(out_dir, "tokenizer_config.json", config) < 0) goto done;
    rc = 0;
done:
    json_decref(root);
    json_decref(model);
    json_decref(vocab);
    json_decref(mlist);
    json_decref(added);
    json_decref(config);
    return rc;
}

int tokenizer_write_bytelevel(const char *out_dir, const char *train_text, size_t len, int vocab_size,
                              const char *chat_template) {
    if (vocab_size < 256 + N_SPECIALS || vocab_size > (1 << 20))
        return error_set("tokenizer_write_bytelevel: vocab_size %d is outside [%d, %d]", vocab_size, 256 + N_SPECIALS,
                         1 << 20);
    if (len && !train_text) return error_set("tokenizer_write_bytelevel: NULL text");
    size_t bad = utf8_first_invalid(train_text, len);
    if (bad < len) return error_set("tokenizer_write_bytelevel: training text: invalid UTF-8 at byte offset %zu", bad);
    int rc = -1;
    TokRegex re = {0};
    WordCounts wc = {0};
    PairCounts pc = {0};
    int32_t **syms = NULL;
    size_t *n_syms = NULL;
    char **tokens = NULL;
    size_t n_tokens = 0;
    int32_t *merges = NULL;
    size_t n_merges = 0;
    StrMap tok_ids = {0};
    size_t max_merges = (size_t)vocab_size - 256 - N_SPECIALS;

    if (strmap_init(&wc.words, 1024) < 0 || strmap_init(&tok_ids, (size_t)vocab_size) < 0) goto done;
    if (tok_regex_compile(&re, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
                          false, "tokenizer_write_bytelevel: GPT-2 regex") < 0)
        goto done;
    CountCtx cc = {&wc, train_text};
    if (len && tok_regex_foreach(&re, train_text, len, count_word, &cc) < 0) goto done;
    /* Base vocab: the 256 bytes, id = byte, as their GPT-2 chars. */
    tokens = mem_calloc((size_t)vocab_size, sizeof *tokens);
    merges = mem_calloc(2 * max_merges + 2, sizeof *merges);
    syms = mem_calloc(wc.n_words + 1, sizeof *syms);
    n_syms = mem_calloc(wc.n_words + 1, sizeof *n_syms);
    if (!tokens || !merges || !syms || !n_syms) goto done;
    for (int b = 0; b < 256; b++) {
        char ch[5] = {0};
        utf8_encode(byte_to_unicode((uint8_t)b), ch);
        if (!(tokens[b] = mem_strdup(ch)) || strmap_put(&tok_ids, ch, strlen(ch), b) < 0) goto done;
    }
    n_tokens = 256;
    for (size_t w = 0; w < wc.n_words; w++) {
        size_t wl = wc.words.key_len[w];
        const char *word = wc.words.pool + wc.words.key_off[w];
        if (!(syms[w] = mem_alloc((wl ? wl : 1) * sizeof **syms))) goto done;
        for (size_t i = 0; i < wl; i++) syms[w][i] = (uint8_t)word[i];
        n_syms[w] = wl;
    }
    while (n_merges < max_merges) {
        size_t total = 0;
        for (size_t w = 0; w < wc.n_words; w++) total += n_syms[w];
        if (counts_reset(&pc, total) < 0) goto done;
        for (size_t w = 0; w < wc.n_words; w++)
            for (size_t i = 0; i + 1 < n_syms[w]; i++)
                counts_add(&pc, ((uint64_t)(uint32_t)syms[w][i] << 32) | (uint32_t)syms[w][i + 1], wc.freq[w]);
        uint64_t best = NO_KEY;
        int64_t best_count = 0;
        for (size_t i = 0; i < pc.cap; i++)
            if (pc.keys[i] != NO_KEY && pc.counts[i] >= 2 &&
                (pc.counts[i] > best_count || (pc.counts[i] == best_count && pc.keys[i] < best))) {
                best = pc.keys[i];
                best_count = pc.counts[i];
            }
        if (best == NO_KEY) break; /* no pair occurs twice: nothing more to learn */
        int32_t a = (int32_t)(best >> 32), b = (int32_t)(best & 0xFFFFFFFFu);
        size_t la = strlen(tokens[a]), lb = strlen(tokens[b]);
        char *joined = mem_alloc(la + lb + 1);
        if (!joined) goto done;
        memcpy(joined, tokens[a], la);
        memcpy(joined + la, tokens[b], lb);
        joined[la + lb] = 0;
        int32_t id = strmap_get(&tok_ids, joined, la + lb);
        if (id < 0) {
            id = (int32_t)n_tokens;
            if (strmap_put(&tok_ids, joined, la + lb, id) < 0) {
                mem_free(joined);
                goto done;
            }
            tokens[n_tokens++] = joined;
        } else
            mem_free(joined);
        merges[2 * n_merges] = a;
        merges[2 * n_merges + 1] = b;
        n_merges++;
        for (size_t w = 0; w < wc.n_words; w++) {
            size_t k = 0;
            for (size_t i = 0; i < n_syms[w]; i++) {
                if (i + 1 < n_syms[w] && syms[w][i] == a && syms[w][i + 1] == b) {
                    syms[w][k++] = id;
                    i++;
                } else
                    syms[w][k++] = syms[w][i];
            }
            n_syms[w] = k;
        }
    }
    rc = write_files(out_dir, tokens, n_tokens, merges, n_merges, chat_template);
done:
    if (rc < 0) error_prefix("tokenizer_write_bytelevel: %s", out_dir);
    tok_regex_free(&re);
    if (syms)
        for (size_t w = 0; w < wc.n_words; w++) mem_free(syms[w]);
    mem_free(syms);
    mem_free(n_syms);
    if (tokens)
        for (size_t i = 0; i < n_tokens; i++) mem_free(tokens[i]);
    mem_free(tokens);
    mem_free(merges);
    strmap_free(&wc.words);
    mem_free(wc.freq);
    strmap_free(&tok_ids);
    mem_free(pc.keys);
    mem_free(pc.counts);
    return rc;
}

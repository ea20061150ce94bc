/* tok_internal.h: the private structures shared by the tokenizer files: the
 * hash maps, the piece list every stage passes on, and one struct per
 * pipeline stage as read from tokenizer.json. Not for use outside
 * src/tokenizer/. */
#ifndef LT_TOK_INTERNAL_H
#define LT_TOK_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tokenizer/tokenizer.h"

/* ---- string -> int32 map (open addressing; keys copied into a pool) ---- */
typedef struct {
    uint32_t *slots;     /* entry index + 1, 0 = empty; capacity slots */
    size_t capacity;     /* power of two */
    uint64_t *hashes;    /* per entry */
    size_t *key_off;     /* per entry, into pool */
    uint32_t *key_len;
    int32_t *values;
    size_t count, entries_cap;
    char *pool; size_t pool_len, pool_cap;
} StrMap;
int strmap_init(StrMap *m, size_t expected);
void strmap_free(StrMap *m);
uint64_t tok_hash_bytes(const void *p, size_t n);
/* Sets key -> value (overwrites). Returns 0, or -1 on allocation failure. */
int strmap_put(StrMap *m, const char *key, size_t len, int32_t value);
/* Value, or -1 when absent. */
int32_t strmap_get(const StrMap *m, const char *key, size_t len);
void strmap_clear(StrMap *m);

/* ---- (left id, right id) -> (rank, merged id) ---- */
typedef struct { uint64_t key; int32_t rank; int32_t merged; } PairEntry;
typedef struct { PairEntry *slots; size_t capacity, count; } PairMap;
int pairmap_init(PairMap *m, size_t expected);
void pairmap_free(PairMap *m);
/* 1 when the pair was already present (then overwritten: the last
 * duplicate wins, as in transformers.js), 0 when added. */
int pairmap_put(PairMap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
const PairEntry *pairmap_get(const PairMap *m, int32_t a, int32_t b);

/* ---- a list of byte strings in one growing buffer (pre-tokens, decoder
 * pieces). Spans are offsets, so appending never invalidates them. ---- */
typedef struct { size_t off, len; } Span;
typedef struct {
    char *buf; size_t buf_len, buf_cap;
    Span *items; size_t n, cap;
} PieceList;
void pieces_free(PieceList *p);
void pieces_reset(PieceList *p);
int pieces_push_span(PieceList *p, size_t off, size_t len);
/* Copies bytes into the buffer and adds them as one piece. */
int pieces_push_bytes(PieceList *p, const char *bytes, size_t len);
/* Appends bytes to the buffer only (to build a piece); returns its offset
 * through *off when off is not NULL. */
int pieces_append(PieceList *p, const char *bytes, size_t len);
static inline const char *piece_ptr(const PieceList *p, size_t i) { return p->buf + p->items[i].off; }

/* ---- UTF-8 and Unicode (tok_unicode.c) ---- */
/* Decodes one code point of valid UTF-8 at s (len > 0); returns its length. */
int utf8_decode(const unsigned char *s, size_t len, uint32_t *cp);
int utf8_encode(uint32_t cp, char out[4]);
/* Appends bytes to out with every ill-formed subsequence replaced by U+FFFD,
 * exactly as the WHATWG UTF-8 decoder (TextDecoder, fatal=false) does. */
int utf8_append_replacing(PieceList *out, const char *bytes, size_t len);
/* NFC of valid UTF-8 text into out (as one piece appended to out's buffer,
 * not a list item): *off and *out_len locate it. */
int unicode_nfc(PieceList *out, const char *s, size_t len, size_t *off, size_t *out_len);
/* Whitespace as JavaScript's String.trim sees it. */
bool unicode_is_js_space(uint32_t cp);
/* GPT-2 byte <-> unicode map: the code point standing for each byte. */
uint32_t byte_to_unicode(uint8_t b);
/* The byte a code point stands for, or -1. */
int unicode_to_byte(uint32_t cp);

/* ---- regex (PCRE2) with JavaScript-compatible \s and (?i:'s|...) ---- */
typedef struct { pcre2_code *code; bool jit; } TokRegex;
/* source names the file and field for errors. literal: pattern is a plain
 * string. */
int tok_regex_compile(TokRegex *r, const char *pattern, bool literal, const char *source);
void tok_regex_free(TokRegex *r);
/* Finds all matches like JavaScript's matchAll (empty matches advance one
 * code point). Calls fn(start, end, ctx) per match; stops on fn < 0. */
int tok_regex_foreach(const TokRegex *r, const char *s, size_t len,
                      int (*fn)(size_t start, size_t end, void *ctx), void *ctx);

/* ---- normalizers ---- */
typedef enum { NORM_SEQUENCE, NORM_PREPEND, NORM_REPLACE, NORM_NFC } NormKind;
typedef struct Normalizer {
    NormKind kind;
    char *a; size_t a_len;     /* prepend text, or the replaced pattern */
    char *b; size_t b_len;     /* replacement content */
    TokRegex regex; bool has_regex; /* Replace with a Regex pattern */
    struct Normalizer *children; size_t n_children;
} Normalizer;
void normalizer_free(Normalizer *n);
/* Resets out and leaves the normalized text in out->buf[0, out->buf_len). */
int normalizer_apply(const Normalizer *n, const char *s, size_t len, PieceList *out);

/* ---- pre-tokenizers ---- */
typedef enum { PRE_SEQUENCE, PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE, PRE_DIGITS } PreKind;
typedef enum { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } SplitBehavior;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } PrependScheme;
typedef struct PreTokenizer {
    PreKind kind;
    TokRegex regex;            /* Split, ByteLevel with use_regex */
    bool has_regex;
    char *pattern;             /* the regex's source (Split, ByteLevel with use_regex): GGUF's pre-tokenizer name */
    SplitBehavior behavior;
    bool invert;
    bool add_prefix_space;     /* ByteLevel, Metaspace */
    char *replacement; size_t replacement_len; /* Metaspace */
    PrependScheme prepend_scheme;
    bool split;                /* Metaspace */
    bool individual_digits;
    struct PreTokenizer *children; size_t n_children;
} PreTokenizer;
void pretokenizer_free(PreTokenizer *p);
/* Splits text into pre-tokens appended to out; section_index is the index
 * of this text among the added-token sections (Metaspace "first"). The
 * ByteLevel byte mapping itself is left to the BPE model (t->byte_level). */
int pretokenizer_apply(const PreTokenizer *p, const char *s, size_t len, PieceList *out, size_t section_index);
bool pretokenizer_has_bytelevel(const PreTokenizer *p);

/* ---- decoders ---- */
typedef enum { DEC_SEQUENCE, DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE } DecKind;
typedef struct Decoder {
    DecKind kind;
    char *a; size_t a_len;     /* Replace pattern / Strip content / Metaspace replacement */
    char *b; size_t b_len;     /* Replace content */
    int start, stop;           /* Strip */
    bool strip_first_space;    /* Metaspace: add_prefix_space or prepend_scheme != never */
    struct Decoder *children; size_t n_children;
} Decoder;
void decoder_free(Decoder *d);

/* ---- post-processor ---- */
typedef struct { bool is_sequence_a; int32_t *ids; size_t n_ids; } TemplateItem;
typedef struct {
    bool present;                 /* TemplateProcessing found (maybe inside a Sequence) */
    TemplateItem *single; size_t n_single;
} PostProcessor;

/* ---- added tokens: a byte trie, longest match first ---- */
typedef struct { int32_t first_child, next_sibling, token; uint8_t byte; } TrieNode;
typedef struct {
    char *content; size_t len; int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} AddedToken;

/* ---- BPE cache: raw pre-token bytes -> ids ---- */
typedef struct {
    pthread_mutex_t lock;
    StrMap map;              /* value = index into spans */
    int32_t *ids; size_t n_ids, cap_ids;
    size_t *starts; uint32_t *counts; size_t n, cap;
} BpeCache;

struct Tokenizer {
    char *json_path, *config_path;
    /* vocab: id -> token, token -> id (model vocab and added tokens) */
    char **id_to_token; int32_t vocab_size;
    StrMap token_to_id;
    uint8_t *special;            /* per id: 1 when special */
    uint8_t *added;              /* per id: 1 when an added token */
    /* BPE model */
    PairMap merges;
    int32_t unk_id;
    bool byte_fallback, ignore_merges;
    int32_t byte_fallback_ids[256]; /* <0xNN>, -1 when absent */
    int32_t byte_level_ids[256];    /* the vocab id of each byte's unicode char */
    /* pipeline */
    Normalizer *normalizer;
    PreTokenizer *pre_tokenizer;
    bool byte_level;             /* a ByteLevel pre-tokenizer maps bytes */
    /* No pre-tokenizer and no token has U+2581 after another character:
     * BPE never merges across "x|▁", so a section may be cut there (exact,
     * and it lets the cache work on sentencepiece-style words). */
    bool split_before_metaspace;
    PostProcessor post;
    Decoder *decoder;
    /* added tokens */
    AddedToken *added_tokens; size_t n_added;
    TrieNode *trie; size_t n_trie, cap_trie;
    uint8_t added_first_byte[256];
    /* tokenizer_config.json */
    char *bos_token, *eos_token, *pad_token, *unk_token, *chat_template;
    int32_t bos_id, eos_id, pad_id;
    bool add_bos_token, add_eos_token;
    BpeCache *cache;
};

/* tok_load.c: a tokenizer from a tokenizer.json document and (or NULL) a
 * tokenizer_config.json document, both borrowed; name stands for the file
 * in errors. */
int tokenizer_from_json(Tokenizer **out, json_t *tokenizer, json_t *config, const char *name);

/* tok_bpe.c */
int bpe_cache_create(BpeCache **out);
void bpe_cache_free(BpeCache *c);
/* Appends the ids of one pre-token (raw bytes; byte-mapped when t->byte_level). */
typedef struct BpeWork BpeWork;
BpeWork *bpe_work_new(void);
void bpe_work_free(BpeWork *w);
int bpe_encode_piece(const Tokenizer *t, BpeWork *w, const char *piece, size_t len,
                     int32_t **ids, size_t *n, size_t *cap);
int ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id);

/* tok_added.c */
int added_trie_build(Tokenizer *t);
/* Length of the longest added token starting at s (0 when none); *id gets it. */
size_t added_match(const Tokenizer *t, const char *s, size_t len, int32_t *id);
const AddedToken *added_find(const Tokenizer *t, int32_t id);

/* tok_decoder.c */
int decoder_run(const Tokenizer *t, const Decoder *d, PieceList *tokens, PieceList *scratch);

#endif

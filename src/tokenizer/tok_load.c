/* tok_load.c: reading tokenizer.json and tokenizer_config.json (jansson)
 * into a Tokenizer: vocab, merges (as "a b" strings or ["a","b"] pairs),
 * added tokens, the normalizer / pre-tokenizer / post-processor / decoder
 * descriptions, and the config's special token strings and chat template.
 * Everything read from the files is checked; errors name the file and the
 * field ("PATH: model.merges[12]: \"x\" is not in model.vocab"). Also the
 * small accessors of the public API. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define METASPACE "\xE2\x96\x81" /* U+2581, sentencepiece's space */
#define MAX_VOCAB (1 << 24) /* ids beyond 16M are a broken file, not a vocab */

typedef struct {
    const char *path;
    Tokenizer *t;
} Ctx;

/* flags: JSON_DECODE_INT_AS_REAL for tokenizer_config.json, whose
 * model_max_length is often 1e30 written as an integer. */
static json_t *load_json(const char *path, size_t flags) {
    /* One read and json_loadb: jansson's own file reader goes through getc. */
    char *text;
    size_t size;
    if (file_read_all(path, (size_t)1 << 31, &text, &size) < 0) return NULL;
    json_error_t err;
    json_t *root = json_loadb(text, size, flags, &err);
    mem_free(text);
    if (!root) {
        /* jansson quotes the input near the error: keep the message one line. */
        for (char *p = err.text; *p; p++) if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
        error_set("%s: invalid JSON at line %d column %d: %s", path, err.line, err.column, err.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        error_set("%s: top level is not a JSON object", path);
        return NULL;
    }
    return root;
}

/* ----------------------------------------------------------- small getters */
static int get_bool(const Ctx *c, json_t *obj, const char *field, const char *where, bool def, bool *out) {
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return error_set("%s: %s.%s: expected true or false", c->path, where, field);
    *out = json_is_true(v);
    return 0;
}
/* A string field; *out NULL when absent or null (allowed only if !required). */
static int get_str(const Ctx *c, json_t *obj, const char *field, const char *where, bool required, const char **out) {
    json_t *v = json_object_get(obj, field);
    *out = NULL;
    if (!v || json_is_null(v)) return required ? error_set("%s: %s.%s: missing", c->path, where, field) : 0;
    if (!json_is_string(v)) return error_set("%s: %s.%s: expected a string", c->path, where, field);
    *out = json_string_value(v);
    return 0;
}
static int get_int(const Ctx *c, json_t *obj, const char *field, const char *where, long long def, long long *out) {
    json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) return error_set("%s: %s.%s: expected an integer", c->path, where, field);
    *out = json_integer_value(v);
    return 0;
}
static int dup_str(const char *s, char **out, size_t *len) {
    *out = mem_strdup(s ? s : "");
    if (!*out) return -1;
    if (len) *len = strlen(*out);
    return 0;
}
/* A {"String": s} or {"Regex": r} pattern. */
static int get_pattern(const Ctx *c, json_t *obj, const char *where, const char **s, bool *is_regex) {
    json_t *p = json_object_get(obj, "pattern");
    if (!json_is_object(p))
        return error_set("%s: %s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", c->path, where);
    json_t *v = json_object_get(p, "String");
    *is_regex = false;
    if (!v) {
        v = json_object_get(p, "Regex");
        *is_regex = true;
    }
    if (!json_is_string(v))
        return error_set("%s: %s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", c->path, where);
    *s = json_string_value(v);
    return 0;
}
static const char *type_of(json_t *obj) {
    json_t *v = json_object_get(obj, "type");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* ------------------------------------------------------------- normalizer */
static int parse_normalizer(const Ctx *c, json_t *j, const char *where, Normalizer *n) {
    memset(n, 0, sizeof *n);
    if (!json_is_object(j)) return error_set("%s: %s: expected an object", c->path, where);
    const char *type = type_of(j);
    if (!type) return error_set("%s: %s.type: missing", c->path, where);
    char sub[256];
    if (!strcmp(type, "Sequence")) {
        n->kind = NORM_SEQUENCE;
        json_t *arr = json_object_get(j, "normalizers");
        if (!json_is_array(arr)) return error_set("%s: %s.normalizers: expected an array", c->path, where);
        size_t k = json_array_size(arr);
        n->children = mem_calloc(k ? k : 1, sizeof *n->children);
        if (!n->children) return -1;
        for (size_t i = 0; i < k; i++) {
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", where, i);
            n->n_children = i + 1;
            TRY(parse_normalizer(c, json_array_get(arr, i), sub, &n->children[i]));
        }
        return 0;
    }
    if (!strcmp(type, "Prepend")) {
        const char *s;
        n->kind = NORM_PREPEND;
        TRY(get_str(c, j, "prepend", where, true, &s));
        return dup_str(s, &n->a, &n->a_len);
    }
    if (!strcmp(type, "Replace")) {
        const char *pat, *content;
        bool is_regex;
        n->kind = NORM_REPLACE;
        TRY(get_pattern(c, j, where, &pat, &is_regex));
        TRY(get_str(c, j, "content", where, true, &content));
        TRY(dup_str(pat, &n->a, &n->a_len));
        TRY(dup_str(content, &n->b, &n->b_len));
        if (is_regex) {
            snprintf(sub, sizeof sub, "%s: %s.pattern", c->path, where);
            TRY(tok_regex_compile(&n->regex, pat, false, sub));
            n->has_regex = true;
        }
        return 0;
    }
    if (!strcmp(type, "NFC")) {
        n->kind = NORM_NFC;
        return 0;
    }
    return error_set("%s: %s.type: normalizer \"%s\" is not supported (supported: Sequence, Prepend, Replace, NFC)",
                     c->path, where, type);
}

/* ---------------------------------------------------------- pre-tokenizer */
static const char *GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int parse_pretokenizer(const Ctx *c, json_t *j, const char *where, PreTokenizer *p) {
    memset(p, 0, sizeof *p);
    if (!json_is_object(j)) return error_set("%s: %s: expected an object", c->path, where);
    const char *type = type_of(j);
    if (!type) return error_set("%s: %s.type: missing", c->path, where);
    char sub[256];
    if (!strcmp(type, "Sequence")) {
        p->kind = PRE_SEQUENCE;
        json_t *arr = json_object_get(j, "pretokenizers");
        if (!json_is_array(arr)) return error_set("%s: %s.pretokenizers: expected an array", c->path, where);
        size_t k = json_array_size(arr);
        p->children = mem_calloc(k ? k : 1, sizeof *p->children);
        if (!p->children) return -1;
        for (size_t i = 0; i < k; i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", where, i);
            p->n_children = i + 1;
            TRY(parse_pretokenizer(c, json_array_get(arr, i), sub, &p->children[i]));
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const char *pat, *behavior;
        bool is_regex;
        p->kind = PRE_SPLIT;
        TRY(get_pattern(c, j, where, &pat, &is_regex));
        TRY(get_str(c, j, "behavior", where, true, &behavior));
        TRY(get_bool(c, j, "invert", where, false, &p->invert));
        static const struct {
            const char *name;
            SplitBehavior b;
        } names[] = {{"Isolated", SPLIT_ISOLATED},
                     {"Removed", SPLIT_REMOVED},
                     {"MergedWithPrevious", SPLIT_MERGED_PREV},
                     {"MergedWithNext", SPLIT_MERGED_NEXT},
                     {"Contiguous", SPLIT_CONTIGUOUS}};
        size_t i = 0;
        while (i < sizeof names / sizeof names[0] && strcmp(names[i].name, behavior)) i++;
        if (i == sizeof names / sizeof names[0])
            return error_set("%s: %s.behavior: unknown split behavior \"%s\"", c->path, where, behavior);
        p->behavior = names[i].b;
        snprintf(sub, sizeof sub, "%s: %s.pattern", c->path, where);
        TRY(tok_regex_compile(&p->regex, pat, !is_regex, sub));
        p->has_regex = true;
        p->pattern = mem_strdup(pat);
        return p->pattern ? 0 : -1;
    }
    if (!strcmp(type, "ByteLevel")) {
        bool use_regex = true;
        p->kind = PRE_BYTELEVEL;
        TRY(get_bool(c, j, "add_prefix_space", where, false, &p->add_prefix_space));
        TRY(get_bool(c, j, "use_regex", where, true, &use_regex));
        if (use_regex) {
            snprintf(sub, sizeof sub, "%s: %s (GPT-2 regex)", c->path, where);
            TRY(tok_regex_compile(&p->regex, GPT2_REGEX, false, sub));
            p->has_regex = true;
            p->pattern = mem_strdup(GPT2_REGEX);
            if (!p->pattern) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *rep, *scheme;
        p->kind = PRE_METASPACE;
        TRY(get_str(c, j, "replacement", where, false, &rep));
        TRY(dup_str(rep ? rep : "\xE2\x96\x81", &p->replacement, &p->replacement_len));
        if (p->replacement_len == 0) return error_set("%s: %s.replacement: empty", c->path, where);
        TRY(get_str(c, j, "prepend_scheme", where, false, &scheme));
        p->prepend_scheme = PREPEND_ALWAYS;
        if (scheme && !strcmp(scheme, "first")) p->prepend_scheme = PREPEND_FIRST;
        else if (scheme && !strcmp(scheme, "never")) p->prepend_scheme = PREPEND_NEVER;
        else if (scheme && strcmp(scheme, "always"))
            return error_set("%s: %s.prepend_scheme: unknown scheme \"%s\"", c->path, where, scheme);
        TRY(get_bool(c, j, "add_prefix_space", where, p->prepend_scheme != PREPEND_NEVER, &p->add_prefix_space));
        TRY(get_bool(c, j, "split", where, true, &p->split));
        return 0;
    }
    if (!strcmp(type, "Digits")) {
        p->kind = PRE_DIGITS;
        return get_bool(c, j, "individual_digits", where, false, &p->individual_digits);
    }
    return error_set(
        "%s: %s.type: pre-tokenizer \"%s\" is not supported (supported: Sequence, Split, ByteLevel, Metaspace, Digits)",
        c->path, where, type);
}

/* ---------------------------------------------------------------- decoder */
static int parse_decoder(const Ctx *c, json_t *j, const char *where, Decoder *d) {
    memset(d, 0, sizeof *d);
    if (!json_is_object(j)) return error_set("%s: %s: expected an object", c->path, where);
    const char *type = type_of(j);
    if (!type) return error_set("%s: %s.type: missing", c->path, where);
    if (!strcmp(type, "Sequence")) {
        d->kind = DEC_SEQUENCE;
        json_t *arr = json_object_get(j, "decoders");
        if (!json_is_array(arr)) return error_set("%s: %s.decoders: expected an array", c->path, where);
        size_t k = json_array_size(arr);
        d->children = mem_calloc(k ? k : 1, sizeof *d->children);
        if (!d->children) return -1;
        for (size_t i = 0; i < k; i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", where, i);
            d->n_children = i + 1;
            TRY(parse_decoder(c, json_array_get(arr, i), sub, &d->children[i]));
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        d->kind = DEC_BYTELEVEL;
        return 0;
    }
    if (!strcmp(type, "ByteFallback")) {
        d->kind = DEC_BYTEFALLBACK;
        return 0;
    }
    if (!strcmp(type, "Fuse")) {
        d->kind = DEC_FUSE;
        return 0;
    }
    if (!strcmp(type, "Replace")) {
        const char *pat, *content;
        bool is_regex;
        d->kind = DEC_REPLACE;
        TRY(get_pattern(c, j, where, &pat, &is_regex));
        if (is_regex)
            return error_set("%s: %s.pattern: a Regex pattern in the Replace decoder is not supported", c->path, where);
        TRY(get_str(c, j, "content", where, true, &content));
        TRY(dup_str(pat, &d->a, &d->a_len));
        return dup_str(content, &d->b, &d->b_len);
    }
    if (!strcmp(type, "Strip")) {
        const char *content;
        long long start = 0, stop = 0;
        d->kind = DEC_STRIP;
        TRY(get_str(c, j, "content", where, true, &content));
        TRY(get_int(c, j, "start", where, 0, &start));
        TRY(get_int(c, j, "stop", where, 0, &stop));
        if (start < 0 || stop < 0 || start > 1000 || stop > 1000)
            return error_set("%s: %s: start/stop out of range", c->path, where);
        d->start = (int)start;
        d->stop = (int)stop;
        return dup_str(content, &d->a, &d->a_len);
    }
    if (!strcmp(type, "Metaspace")) {
        const char *rep, *scheme;
        bool add_prefix = true;
        d->kind = DEC_METASPACE;
        TRY(get_str(c, j, "replacement", where, false, &rep));
        TRY(dup_str(rep ? rep : "\xE2\x96\x81", &d->a, &d->a_len));
        TRY(get_str(c, j, "prepend_scheme", where, false, &scheme));
        TRY(get_bool(c, j, "add_prefix_space", where, !(scheme && !strcmp(scheme, "never")), &add_prefix));
        d->strip_first_space = add_prefix;
        return 0;
    }
    return error_set("%s: %s.type: decoder \"%s\" is not supported (supported: Sequence, ByteLevel, Replace, "
                     "ByteFallback, Fuse, Strip, Metaspace)",
                     c->path, where, type);
}

/* --------------------------------------------------------- post-processor */
static int parse_template(const Ctx *c, json_t *j, const char *where, PostProcessor *pp) {
    json_t *single = json_object_get(j, "single");
    json_t *specials = json_object_get(j, "special_tokens");
    if (!json_is_array(single)) return error_set("%s: %s.single: expected an array", c->path, where);
    size_t k = json_array_size(single);
    pp->single = mem_calloc(k ? k : 1, sizeof *pp->single);
    if (!pp->single) return -1;
    pp->present = true;
    for (size_t i = 0; i < k; i++) {
        json_t *item = json_array_get(single, i);
        TemplateItem *ti = &pp->single[i];
        pp->n_single = i + 1;
        json_t *seq = json_object_get(item, "Sequence"), *sp = json_object_get(item, "SpecialToken");
        if (json_is_object(seq)) {
            json_t *id = json_object_get(seq, "id");
            if (!json_is_string(id) || strcmp(json_string_value(id), "A"))
                return error_set("%s: %s.single[%zu].Sequence.id: expected \"A\"", c->path, where, i);
            ti->is_sequence_a = true;
            continue;
        }
        json_t *name = json_is_object(sp) ? json_object_get(sp, "id") : NULL;
        if (!json_is_string(name))
            return error_set("%s: %s.single[%zu]: expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}",
                             c->path, where, i);
        const char *nm = json_string_value(name);
        json_t *entry = json_is_object(specials) ? json_object_get(specials, nm) : NULL;
        json_t *ids = json_is_object(entry) ? json_object_get(entry, "ids") : NULL;
        if (json_is_array(ids)) {
            size_t m = json_array_size(ids);
            ti->ids = mem_calloc(m ? m : 1, sizeof *ti->ids);
            if (!ti->ids) return -1;
            for (size_t q = 0; q < m; q++) {
                json_t *v = json_array_get(ids, q);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->t->vocab_size)
                    return error_set("%s: %s.special_tokens.%s.ids[%zu]: not a token id below the vocab size %d",
                                     c->path, where, nm, q, (int)c->t->vocab_size);
                ti->ids[q] = (int32_t)json_integer_value(v);
            }
            ti->n_ids = m;
        } else {
            int32_t id = strmap_get(&c->t->token_to_id, nm, strlen(nm));
            if (id < 0)
                return error_set(
                    "%s: %s.single[%zu]: special token \"%s\" is neither in special_tokens nor in the vocab", c->path,
                    where, i, nm);
            ti->ids = mem_alloc(sizeof *ti->ids);
            if (!ti->ids) return -1;
            ti->ids[0] = id;
            ti->n_ids = 1;
        }
    }
    return 0;
}

static int parse_post(const Ctx *c, json_t *j, const char *where, PostProcessor *pp) {
    if (!j || json_is_null(j)) return 0;
    if (!json_is_object(j)) return error_set("%s: %s: expected an object", c->path, where);
    const char *type = type_of(j);
    if (!type) return error_set("%s: %s.type: missing", c->path, where);
    if (!strcmp(type, "ByteLevel")) return 0; /* offsets only; ids unchanged */
    if (!strcmp(type, "TemplateProcessing")) {
        if (pp->present) return error_set("%s: %s: more than one TemplateProcessing", c->path, where);
        return parse_template(c, j, where, pp);
    }
    if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(j, "processors");
        if (!json_is_array(arr)) return error_set("%s: %s.processors: expected an array", c->path, where);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.processors[%zu]", where, i);
            TRY(parse_post(c, json_array_get(arr, i), sub, pp));
        }
        return 0;
    }
    return error_set(
        "%s: %s.type: post-processor \"%s\" is not supported (supported: TemplateProcessing, ByteLevel, Sequence)",
        c->path, where, type);
}

/* ------------------------------------------------------------ vocab, model */
static int set_token(Tokenizer *t, int32_t id, const char *s) {
    char *copy = mem_strdup(s);
    if (!copy) return -1;
    mem_free(t->id_to_token[id]);
    t->id_to_token[id] = copy;
    return strmap_put(&t->token_to_id, s, strlen(s), id);
}

static int parse_model(const Ctx *c, json_t *root) {
    Tokenizer *t = c->t;
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return error_set("%s: model: missing or not an object", c->path);
    const char *type = type_of(model);
    if (type && strcmp(type, "BPE"))
        return error_set("%s: model.type: \"%s\" is not supported (only BPE)", c->path, type);
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return error_set("%s: model.vocab: missing or not an object", c->path);
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return error_set("%s: added_tokens: expected an array", c->path);
    size_t n_vocab = json_object_size(vocab), n_added = json_is_array(added) ? json_array_size(added) : 0;
    if (n_vocab == 0) return error_set("%s: model.vocab: empty", c->path);
    if (n_vocab + n_added > MAX_VOCAB)
        return error_set("%s: model.vocab: %zu tokens is more than the %d supported", c->path, n_vocab + n_added,
                         MAX_VOCAB);
    /* Sizes first: ids of the model vocab, then of added tokens. Ids need
     * not be contiguous (HF's vocab is a map: the gpt-4o / Phi-4 file keeps
     * its special tokens at 200018 and up with unused ids below); the id
     * table is sized by the largest, and decode refuses the holes. */
    long long max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val)) return error_set("%s: model.vocab[\"%s\"]: id is not an integer", c->path, key);
        long long id = json_integer_value(val);
        if (id < 0 || id >= MAX_VOCAB)
            return error_set("%s: model.vocab[\"%s\"]: id %lld is outside [0, %d)", c->path, key, id, MAX_VOCAB);
        if (id > max_id) max_id = id;
    }
    for (size_t i = 0; i < n_added; i++) {
        json_t *a = json_array_get(added, i);
        json_t *id = json_is_object(a) ? json_object_get(a, "id") : NULL;
        if (!json_is_integer(id)) return error_set("%s: added_tokens[%zu].id: missing or not an integer", c->path, i);
        long long v = json_integer_value(id);
        if (v < 0 || v >= MAX_VOCAB)
            return error_set("%s: added_tokens[%zu].id: %lld is outside [0, %d)", c->path, i, v, MAX_VOCAB);
        if (v > max_id) max_id = v;
    }
    t->vocab_size = (int32_t)(max_id + 1);
    t->id_to_token = mem_calloc((size_t)t->vocab_size, sizeof *t->id_to_token);
    t->special = mem_calloc((size_t)t->vocab_size, 1);
    t->added = mem_calloc((size_t)t->vocab_size, 1);
    if (!t->id_to_token || !t->special || !t->added) return -1;
    TRY(strmap_init(&t->token_to_id, n_vocab + n_added));
    json_object_foreach(vocab, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        if (t->id_to_token[id])
            return error_set("%s: model.vocab[\"%s\"]: id %d is also used by \"%s\"", c->path, key, (int)id,
                             t->id_to_token[id]);
        TRY(set_token(t, id, key));
    }
    /* Added tokens. */
    t->added_tokens = mem_calloc(n_added ? n_added : 1, sizeof *t->added_tokens);
    if (!t->added_tokens) return -1;
    for (size_t i = 0; i < n_added; i++) {
        json_t *a = json_array_get(added, i);
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        const char *content;
        AddedToken *at = &t->added_tokens[i];
        TRY(get_str(c, a, "content", where, true, &content));
        if (!content[0]) return error_set("%s: %s.content: empty", c->path, where);
        at->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        TRY(get_bool(c, a, "special", where, false, &at->special));
        TRY(get_bool(c, a, "lstrip", where, false, &at->lstrip));
        TRY(get_bool(c, a, "rstrip", where, false, &at->rstrip));
        TRY(get_bool(c, a, "single_word", where, false, &at->single_word));
        TRY(get_bool(c, a, "normalized", where, false, &at->normalized));
        TRY(dup_str(content, &at->content, &at->len));
        t->n_added = i + 1;
        TRY(set_token(t, at->id, content));
        t->added[at->id] = 1;
        if (at->special) t->special[at->id] = 1;
    }
    /* Options. */
    const char *unk, *suffix;
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && (!json_is_number(dropout) || json_number_value(dropout) != 0.0))
        return error_set("%s: model.dropout: BPE dropout is not supported (encoding must be deterministic)", c->path);
    TRY(get_str(c, model, "continuing_subword_prefix", "model", false, &suffix));
    if (suffix && suffix[0])
        return error_set("%s: model.continuing_subword_prefix: \"%s\" is not supported", c->path, suffix);
    TRY(get_str(c, model, "end_of_word_suffix", "model", false, &suffix));
    if (suffix && suffix[0]) return error_set("%s: model.end_of_word_suffix: \"%s\" is not supported", c->path, suffix);
    TRY(get_bool(c, model, "byte_fallback", "model", false, &t->byte_fallback));
    TRY(get_bool(c, model, "ignore_merges", "model", false, &t->ignore_merges));
    TRY(get_str(c, model, "unk_token", "model", false, &unk));
    t->unk_id = -1;
    if (unk) {
        t->unk_id = strmap_get(&t->token_to_id, unk, strlen(unk));
        if (t->unk_id < 0) return error_set("%s: model.unk_token: \"%s\" is not in model.vocab", c->path, unk);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_fallback_ids[b] = strmap_get(&t->token_to_id, name, 6);
    }
    /* Merges: ranks in file order; both parts and their concatenation must be tokens. */
    json_t *merges = json_object_get(model, "merges");
    if (merges && !json_is_null(merges) && !json_is_array(merges))
        return error_set("%s: model.merges: expected an array", c->path);
    size_t n_merges = json_is_array(merges) ? json_array_size(merges) : 0;
    TRY(pairmap_init(&t->merges, n_merges));
    char *joined = NULL;
    size_t joined_cap = 0;
    int rc = 0;
    for (size_t i = 0; i < n_merges && rc == 0; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == a || !sp[1]) {
                rc = error_set("%s: model.merges[%zu]: \"%s\" is not \"left right\"", c->path, i, a);
                break;
            }
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            lb = json_string_length(json_array_get(m, 1));
        } else {
            rc = error_set("%s: model.merges[%zu]: expected \"left right\" or [\"left\", \"right\"]", c->path, i);
            break;
        }
        int32_t ia = strmap_get(&t->token_to_id, a, la), ib = strmap_get(&t->token_to_id, b, lb);
        if (ia < 0) {
            rc = error_set("%s: model.merges[%zu]: \"%.*s\" is not in model.vocab", c->path, i, (int)la, a);
            break;
        }
        if (ib < 0) {
            rc = error_set("%s: model.merges[%zu]: \"%.*s\" is not in model.vocab", c->path, i, (int)lb, b);
            break;
        }
        if (la + lb + 1 > joined_cap) {
            joined_cap = (la + lb + 1) * 2;
            char *q = mem_realloc(joined, joined_cap);
            if (!q) {
                rc = -1;
                break;
            }
            joined = q;
        }
        memcpy(joined, a, la);
        memcpy(joined + la, b, lb);
        int32_t im = strmap_get(&t->token_to_id, joined, la + lb);
        if (im < 0) {
            rc = error_set("%s: model.merges[%zu]: the merge result \"%.*s\" is not in model.vocab", c->path, i,
                           (int)(la + lb), joined);
            break;
        }
        if (pairmap_put(&t->merges, ia, ib, (int32_t)i, im) < 0) rc = -1;
    }
    mem_free(joined);
    return rc;
}

/* -------------------------------------------------------- tokenizer_config */
/* A special token in the config: a string, {"content": ...} or null. */
static int config_token(const Ctx *c, json_t *root, const char *field, char **out) {
    json_t *v = json_object_get(root, field);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) return error_set("%s: %s: expected a string, {\"content\": ...} or null", c->path, field);
    *out = mem_strdup(json_string_value(v));
    return *out ? 0 : -1;
}
static int config_token_id(const Ctx *c, const char *field, const char *tok, int32_t *id) {
    *id = -1;
    if (!tok) return 0;
    *id = strmap_get(&c->t->token_to_id, tok, strlen(tok));
    if (*id < 0) return error_set("%s: %s: \"%s\" is not a token of %s", c->path, field, tok, c->t->json_path);
    return 0;
}

static int parse_config(const Ctx *c, json_t *root) {
    Tokenizer *t = c->t;
    TRY(config_token(c, root, "bos_token", &t->bos_token));
    TRY(config_token(c, root, "eos_token", &t->eos_token));
    TRY(config_token(c, root, "pad_token", &t->pad_token));
    TRY(config_token(c, root, "unk_token", &t->unk_token));
    TRY(config_token_id(c, "bos_token", t->bos_token, &t->bos_id));
    TRY(config_token_id(c, "eos_token", t->eos_token, &t->eos_id));
    TRY(config_token_id(c, "pad_token", t->pad_token, &t->pad_id));
    TRY(get_bool(c, root, "add_bos_token", "tokenizer_config", false, &t->add_bos_token));
    TRY(get_bool(c, root, "add_eos_token", "tokenizer_config", false, &t->add_eos_token));
    json_t *ct = json_object_get(root, "chat_template");
    if (json_is_string(ct)) {
        t->chat_template = mem_strdup(json_string_value(ct));
        if (!t->chat_template) return -1;
    } else if (json_is_array(ct)) {
        for (size_t i = 0; i < json_array_size(ct); i++) {
            json_t *e = json_array_get(ct, i);
            json_t *name = json_object_get(e, "name"), *tmpl = json_object_get(e, "template");
            if (!json_is_string(name) || !json_is_string(tmpl))
                return error_set("%s: chat_template[%zu]: expected {\"name\": ..., \"template\": ...}", c->path, i);
            if (!strcmp(json_string_value(name), "default")) {
                t->chat_template = mem_strdup(json_string_value(tmpl));
                if (!t->chat_template) return -1;
            }
        }
    } else if (ct && !json_is_null(ct))
        return error_set("%s: chat_template: expected a string or a list of {name, template}", c->path);
    json_t *extra = json_object_get(root, "additional_special_tokens");
    if (json_is_array(extra)) {
        for (size_t i = 0; i < json_array_size(extra); i++) {
            json_t *v = json_array_get(extra, i);
            if (json_is_object(v)) v = json_object_get(v, "content");
            if (!json_is_string(v))
                return error_set("%s: additional_special_tokens[%zu]: expected a string", c->path, i);
            int32_t id = strmap_get(&t->token_to_id, json_string_value(v), json_string_length(v));
            if (id >= 0) t->special[id] = 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ load */
/* Parses a tokenizer.json document (root: borrowed; `path` names it in errors). */
static int parse_tokenizer_root(Tokenizer *t, json_t *root, const char *path) {
    Ctx c = { path, t };
    int rc = parse_model(&c, root);
    json_t *j;
    if (rc == 0 && (j = json_object_get(root, "normalizer")) && !json_is_null(j)) {
        t->normalizer = mem_calloc(1, sizeof *t->normalizer);
        rc = t->normalizer ? parse_normalizer(&c, j, "normalizer", t->normalizer) : -1;
    }
    if (rc == 0 && (j = json_object_get(root, "pre_tokenizer")) && !json_is_null(j)) {
        t->pre_tokenizer = mem_calloc(1, sizeof *t->pre_tokenizer);
        rc = t->pre_tokenizer ? parse_pretokenizer(&c, j, "pre_tokenizer", t->pre_tokenizer) : -1;
    }
    if (rc == 0) rc = parse_post(&c, json_object_get(root, "post_processor"), "post_processor", &t->post);
    if (rc == 0 && (j = json_object_get(root, "decoder")) && !json_is_null(j)) {
        t->decoder = mem_calloc(1, sizeof *t->decoder);
        rc = t->decoder ? parse_decoder(&c, j, "decoder", t->decoder) : -1;
    }
    if (rc < 0) return -1;
    t->byte_level = pretokenizer_has_bytelevel(t->pre_tokenizer);
    for (int b = 0; b < 256; b++) {
        char ch[4];
        int k = utf8_encode(byte_to_unicode((uint8_t)b), ch);
        t->byte_level_ids[b] = strmap_get(&t->token_to_id, ch, (size_t)k);
    }
    t->split_before_metaspace = !t->pre_tokenizer;
    for (int32_t id = 0; id < t->vocab_size && t->split_before_metaspace; id++) {
        const char *tok = t->id_to_token[id];
        if (!tok || t->added[id]) continue;
        for (const char *m = strstr(tok, METASPACE); m && t->split_before_metaspace; m = strstr(m + 3, METASPACE))
            if (m > tok && (m - tok < 3 || memcmp(m - 3, METASPACE, 3) != 0)) t->split_before_metaspace = false;
    }
    TRY(added_trie_build(t));
    return bpe_cache_create(&t->cache);
}

static int load_json_tokenizer(Tokenizer *t, const char *path) {
    json_t *root = load_json(path, 0);
    if (!root) return -1;
    int rc = parse_tokenizer_root(t, root, path);
    json_decref(root);
    return rc;
}

int tokenizer_from_json(Tokenizer **out, json_t *tokenizer, json_t *config, const char *name) {
    *out = NULL;
    Tokenizer *t = mem_calloc(1, sizeof *t);
    if (!t) return -1;
    t->bos_id = -1;
    t->eos_id = -1;
    t->pad_id = -1;
    t->unk_id = -1;
    t->json_path = mem_strdup(name);
    int rc = t->json_path ? parse_tokenizer_root(t, tokenizer, name) : -1;
    if (rc == 0 && config) {
        Ctx c = { name, t };
        rc = parse_config(&c, config);
    }
    if (rc < 0) {
        tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int tokenizer_load_files(Tokenizer **out, const char *tokenizer_json, const char *tokenizer_config_json) {
    *out = NULL;
    Tokenizer *t = mem_calloc(1, sizeof *t);
    if (!t) return -1;
    t->bos_id = t->eos_id = t->pad_id = t->unk_id = -1;
    t->json_path = mem_strdup(tokenizer_json);
    int rc = t->json_path ? load_json_tokenizer(t, tokenizer_json) : -1;
    if (rc == 0 && tokenizer_config_json) {
        t->config_path = mem_strdup(tokenizer_config_json);
        json_t *root = t->config_path ? load_json(tokenizer_config_json, JSON_DECODE_INT_AS_REAL) : NULL;
        if (!root) rc = -1;
        else {
            Ctx c = { tokenizer_config_json, t };
            rc = parse_config(&c, root);
            json_decref(root);
        }
    }
    if (rc < 0) {
        tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

/* Newer checkpoints keep the template beside the config, in
 * chat_template.jinja (raw text) or chat_template.json ({"chat_template": ...}). */
static int load_side_template(Tokenizer *t, const char *model_dir) {
    char *jinja = path_join(model_dir, "chat_template.jinja");
    char *json = path_join(model_dir, "chat_template.json");
    int rc = jinja && json ? 0 : -1;
    if (rc == 0 && file_exists(jinja)) {
        size_t size;
        rc = file_read_all(jinja, (size_t)1 << 26, &t->chat_template, &size);
    } else if (rc == 0 && file_exists(json)) {
        json_t *root = load_json(json, 0);
        json_t *v = root ? json_object_get(root, "chat_template") : NULL;
        if (!root) rc = -1;
        else if (!json_is_string(v)) rc = error_set("%s: chat_template: expected a string", json);
        else if (!(t->chat_template = mem_strdup(json_string_value(v)))) rc = -1;
        json_decref(root);
    }
    mem_free(jinja);
    mem_free(json);
    return rc;
}

int tokenizer_load(Tokenizer **out, const char *model_dir) {
    *out = NULL;
    char *json = path_join(model_dir, "tokenizer.json");
    char *config = path_join(model_dir, "tokenizer_config.json");
    int rc = -1;
    if (json && config) rc = tokenizer_load_files(out, json, file_exists(config) ? config : NULL);
    if (rc == 0 && !(*out)->chat_template && load_side_template(*out, model_dir) < 0) {
        tokenizer_free(*out);
        *out = NULL;
        rc = -1;
    }
    mem_free(json);
    mem_free(config);
    return rc;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    if (t->id_to_token) for (int32_t i = 0; i < t->vocab_size; i++) mem_free(t->id_to_token[i]);
    mem_free(t->id_to_token);
    strmap_free(&t->token_to_id);
    mem_free(t->special);
    mem_free(t->added);
    pairmap_free(&t->merges);
    if (t->normalizer) {
        normalizer_free(t->normalizer);
        mem_free(t->normalizer);
    }
    if (t->pre_tokenizer) {
        pretokenizer_free(t->pre_tokenizer);
        mem_free(t->pre_tokenizer);
    }
    if (t->decoder) {
        decoder_free(t->decoder);
        mem_free(t->decoder);
    }
    for (size_t i = 0; i < t->post.n_single; i++) mem_free(t->post.single[i].ids);
    mem_free(t->post.single);
    for (size_t i = 0; i < t->n_added; i++) mem_free(t->added_tokens[i].content);
    mem_free(t->added_tokens);
    mem_free(t->trie);
    mem_free(t->bos_token);
    mem_free(t->eos_token);
    mem_free(t->pad_token);
    mem_free(t->unk_token);
    mem_free(t->chat_template);
    mem_free(t->json_path);
    mem_free(t->config_path);
    bpe_cache_free(t->cache);
    mem_free(t);
}

/* -------------------------------------------------------------- accessors */
int tokenizer_vocab_size(const Tokenizer *t) { return t->vocab_size; }
int32_t tokenizer_token_to_id(const Tokenizer *t, const char *token) {
    return strmap_get(&t->token_to_id, token, strlen(token));
}
const char *tokenizer_id_to_token(const Tokenizer *t, int32_t id) {
    return id >= 0 && id < t->vocab_size ? t->id_to_token[id] : NULL;
}
int32_t tokenizer_bos_id(const Tokenizer *t) { return t->bos_id; }
int32_t tokenizer_eos_id(const Tokenizer *t) { return t->eos_id; }
int32_t tokenizer_pad_id(const Tokenizer *t) { return t->pad_id >= 0 ? t->pad_id : t->eos_id; }
const char *tokenizer_bos_token(const Tokenizer *t) { return t->bos_token; }
const char *tokenizer_eos_token(const Tokenizer *t) { return t->eos_token; }
const char *tokenizer_pad_token(const Tokenizer *t) { return t->pad_token ? t->pad_token : t->eos_token; }
bool tokenizer_add_bos_token(const Tokenizer *t) { return t->add_bos_token; }
bool tokenizer_add_eos_token(const Tokenizer *t) { return t->add_eos_token; }
const char *tokenizer_chat_template(const Tokenizer *t) { return t->chat_template; }
bool tokenizer_is_special(const Tokenizer *t, int32_t id) { return id >= 0 && id < t->vocab_size && t->special[id]; }
bool tokenizer_has_thinking(const Tokenizer *t) {
    static const char *const pairs[][2] = {
        {"<think>", "</think>"}, {"<longcat_think>", "</longcat_think>"}, {"<|channel>", "<channel|>"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (tokenizer_token_to_id(t, pairs[i][0]) >= 0 && tokenizer_token_to_id(t, pairs[i][1]) >= 0) return true;
    return false;
}

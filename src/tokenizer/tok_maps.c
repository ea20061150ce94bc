/* tok_maps.c: the small containers of the tokenizer: a string -> int32 hash
 * map (vocab, BPE cache), a token-pair -> merge map (BPE ranks) and the piece
 * list that carries text between pipeline stages. Open addressing with
 * linear probing; capacities are powers of two and at most half full. */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <string.h>

/* ---------------------------------------------------------------- hashing */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}
uint64_t tok_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0x100000001b3ULL);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ mix64(v)) * 0x100000001b3ULL;
        s += 8;
        n -= 8;
    }
    uint64_t tail = 0;
    for (size_t i = 0; i < n; i++) tail |= (uint64_t)s[i] << (8 * i);
    return mix64(h ^ tail ^ (uint64_t)n << 59);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---------------------------------------------------------------- StrMap */
int strmap_init(StrMap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->capacity = pow2_at_least(expected * 2 + 1);
    m->slots = mem_calloc(m->capacity, sizeof *m->slots);
    return m->slots ? 0 : -1;
}
void strmap_free(StrMap *m) {
    mem_free(m->slots);
    mem_free(m->hashes);
    mem_free(m->key_off);
    mem_free(m->key_len);
    mem_free(m->values);
    mem_free(m->pool);
    memset(m, 0, sizeof *m);
}
void strmap_clear(StrMap *m) {
    if (m->slots) memset(m->slots, 0, m->capacity * sizeof *m->slots);
    m->count = 0;
    m->pool_len = 0;
}
static int strmap_grow(StrMap *m) {
    size_t cap = m->capacity * 2;
    uint32_t *slots = mem_calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t e = 0; e < m->count; e++) {
        size_t i = m->hashes[e] & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)(e + 1);
    }
    mem_free(m->slots);
    m->slots = slots;
    m->capacity = cap;
    return 0;
}
static int grow_array(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = mem_realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}
int32_t strmap_get(const StrMap *m, const char *key, size_t len) {
    uint64_t h = tok_hash_bytes(key, len);
    size_t mask = m->capacity - 1, i = h & mask;
    for (;;) {
        uint32_t e = m->slots[i];
        if (!e) return -1;
        e--;
        if (m->hashes[e] == h && m->key_len[e] == len && memcmp(m->pool + m->key_off[e], key, len) == 0)
            return m->values[e];
        i = (i + 1) & mask;
    }
}
int strmap_put(StrMap *m, const char *key, size_t len, int32_t value) {
    uint64_t h = tok_hash_bytes(key, len);
    size_t mask = m->capacity - 1, i = h & mask;
    for (;;) {
        uint32_t e = m->slots[i];
        if (!e) break;
        e--;
        if (m->hashes[e] == h && m->key_len[e] == len && memcmp(m->pool + m->key_off[e], key, len) == 0) {
            m->values[e] = value;
            return 0;
        }
        i = (i + 1) & mask;
    }
    if (len > UINT32_MAX || m->count >= UINT32_MAX - 1) return error_set("tokenizer: map: key or map too large");
    if (m->count + 1 > m->entries_cap) {
        size_t c = m->entries_cap ? m->entries_cap * 2 : 16;
        void *h = mem_realloc(m->hashes, c * sizeof *m->hashes);
        if (!h) return -1;
        m->hashes = h;
        void *o = mem_realloc(m->key_off, c * sizeof *m->key_off);
        if (!o) return -1;
        m->key_off = o;
        void *l = mem_realloc(m->key_len, c * sizeof *m->key_len);
        if (!l) return -1;
        m->key_len = l;
        void *v = mem_realloc(m->values, c * sizeof *m->values);
        if (!v) return -1;
        m->values = v;
        m->entries_cap = c;
    }
    if (grow_array((void **)&m->pool, &m->pool_cap, m->pool_len + len + 1, 1) < 0) return -1;
    memcpy(m->pool + m->pool_len, key, len);
    m->pool[m->pool_len + len] = 0;
    size_t e = m->count++;
    m->hashes[e] = h;
    m->key_off[e] = m->pool_len;
    m->key_len[e] = (uint32_t)len;
    m->values[e] = value;
    m->pool_len += len + 1;
    m->slots[i] = (uint32_t)(e + 1);
    if (m->count * 2 > m->capacity) return strmap_grow(m);
    return 0;
}

/* ---------------------------------------------------------------- PairMap */
#define PAIR_EMPTY UINT64_MAX
static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
int pairmap_init(PairMap *m, size_t expected) {
    m->capacity = pow2_at_least(expected * 2 + 1);
    m->count = 0;
    m->slots = mem_alloc(m->capacity * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < m->capacity; i++) m->slots[i].key = PAIR_EMPTY;
    return 0;
}
void pairmap_free(PairMap *m) {
    mem_free(m->slots);
    memset(m, 0, sizeof *m);
}
int pairmap_put(PairMap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    if ((m->count + 1) * 2 > m->capacity) {
        PairMap bigger = {0};
        bigger.capacity = m->capacity * 2;
        bigger.slots = mem_alloc(bigger.capacity * sizeof *bigger.slots);
        if (!bigger.slots) return -1;
        for (size_t i = 0; i < bigger.capacity; i++) bigger.slots[i].key = PAIR_EMPTY;
        for (size_t i = 0; i < m->capacity; i++) {
            if (m->slots[i].key == PAIR_EMPTY) continue;
            size_t j = mix64(m->slots[i].key) & (bigger.capacity - 1);
            while (bigger.slots[j].key != PAIR_EMPTY) j = (j + 1) & (bigger.capacity - 1);
            bigger.slots[j] = m->slots[i];
        }
        bigger.count = m->count;
        mem_free(m->slots);
        *m = bigger;
    }
    uint64_t k = pair_key(a, b);
    size_t mask = m->capacity - 1, i = mix64(k) & mask;
    while (m->slots[i].key != PAIR_EMPTY) {
        if (m->slots[i].key == k) {
            m->slots[i].rank = rank;
            m->slots[i].merged = merged;
            return 1;
        }
        i = (i + 1) & mask;
    }
    m->slots[i].key = k;
    m->slots[i].rank = rank;
    m->slots[i].merged = merged;
    m->count++;
    return 0;
}
const PairEntry *pairmap_get(const PairMap *m, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    size_t mask = m->capacity - 1, i = mix64(k) & mask;
    for (;;) {
        const PairEntry *e = &m->slots[i];
        if (e->key == k) return e;
        if (e->key == PAIR_EMPTY) return NULL;
        i = (i + 1) & mask;
    }
}

/* ---------------------------------------------------------------- PieceList */
void pieces_free(PieceList *p) {
    mem_free(p->buf);
    mem_free(p->items);
    memset(p, 0, sizeof *p);
}
void pieces_reset(PieceList *p) {
    p->buf_len = 0;
    p->n = 0;
}
int pieces_push_span(PieceList *p, size_t off, size_t len) {
    if (grow_array((void **)&p->items, &p->cap, p->n + 1, sizeof *p->items) < 0) return -1;
    p->items[p->n].off = off;
    p->items[p->n].len = len;
    p->n++;
    return 0;
}
int pieces_append(PieceList *p, const char *bytes, size_t len) {
    size_t need;
    if (!size_add(p->buf_len, len + 1, &need)) return error_set("tokenizer: text too large");
    if (grow_array((void **)&p->buf, &p->buf_cap, need, 1) < 0) return -1;
    if (len) memcpy(p->buf + p->buf_len, bytes, len);
    p->buf_len += len;
    p->buf[p->buf_len] = 0;
    return 0;
}
int pieces_push_bytes(PieceList *p, const char *bytes, size_t len) {
    size_t off = p->buf_len;
    TRY(pieces_append(p, bytes, len));
    return pieces_push_span(p, off, len);
}

/* tok_bpe.c: the BPE model. Each pre-token starts as one symbol per byte
 * (byte-level: each byte's GPT-2 unicode char) or per UTF-8 character; the
 * pair with the lowest merge rank (leftmost among equals) is merged until no
 * pair has a rank. A binary heap keyed by (rank, position) keeps this
 * O(n log n) for long pre-tokens. Symbols outside the vocab become
 * <0xNN> byte tokens (byte_fallback) or the unk token. Results are cached
 * per pre-token string (mutex-guarded; cleared when it grows too large). */
#include "tokenizer/tok_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <string.h>

#define CACHE_MAX_KEY 256
#define CACHE_MAX_ENTRIES 200000
#define CACHE_MAX_IDS (4u << 20)

typedef struct {
    int32_t id, prev, next;
    uint32_t start, len;
} Sym;
typedef struct {
    int32_t rank, pos, merged;
} HeapItem;
struct BpeWork {
    Sym *syms;
    size_t cap_syms;
    HeapItem *heap;
    size_t n_heap, cap_heap;
    char *mapped;
    size_t cap_mapped;
    int32_t *out;
    size_t n_out, cap_out;
};

int ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        int32_t *q = mem_realloc(*ids, c * sizeof *q);
        if (!q) return -1;
        *ids = q;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

BpeWork *bpe_work_new(void) { return mem_calloc(1, sizeof(BpeWork)); }
void bpe_work_free(BpeWork *w) {
    if (!w) return;
    mem_free(w->syms);
    mem_free(w->heap);
    mem_free(w->mapped);
    mem_free(w->out);
    mem_free(w);
}

int bpe_cache_create(BpeCache **out) {
    BpeCache *c = mem_calloc(1, sizeof *c);
    if (!c) return -1;
    if (strmap_init(&c->map, 1024) < 0) {
        mem_free(c);
        return -1;
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}
void bpe_cache_free(BpeCache *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->lock);
    strmap_free(&c->map);
    mem_free(c->ids);
    mem_free(c->starts);
    mem_free(c->counts);
    mem_free(c);
}

/* ------------------------------------------------------------------ heap */
static inline bool heap_less(const HeapItem *a, const HeapItem *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}
static int heap_push(BpeWork *w, HeapItem it) {
    if (w->n_heap == w->cap_heap) {
        size_t c = w->cap_heap ? w->cap_heap * 2 : 64;
        HeapItem *q = mem_realloc(w->heap, c * sizeof *q);
        if (!q) return -1;
        w->heap = q;
        w->cap_heap = c;
    }
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&it, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = it;
    return 0;
}
static HeapItem heap_pop(BpeWork *w) {
    HeapItem top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const HeapItem *best = &last;
        if (l < n && heap_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (r < n && heap_less(&w->heap[r], best)) {
            m = r;
        }
        if (m == i) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n) w->heap[i] = last;
    return top;
}
static int push_pair(const Tokenizer *t, BpeWork *w, int32_t pos) {
    int32_t next = w->syms[pos].next;
    if (next < 0 || w->syms[pos].id < 0 || w->syms[next].id < 0) return 0;
    const PairEntry *e = pairmap_get(&t->merges, w->syms[pos].id, w->syms[next].id);
    if (!e) return 0;
    return heap_push(w, (HeapItem){e->rank, pos, e->merged});
}

/* The byte-level string of a piece (each byte as its GPT-2 char). */
static int map_bytes(BpeWork *w, const char *piece, size_t len, size_t *out_len) {
    if (w->cap_mapped < 2 * len + 1) {
        size_t c = 2 * len + 64;
        char *q = mem_realloc(w->mapped, c);
        if (!q) return -1;
        w->mapped = q;
        w->cap_mapped = c;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += (size_t)utf8_encode(byte_to_unicode((uint8_t)piece[i]), w->mapped + n);
    *out_len = n;
    return 0;
}

static int emit_unknown(const Tokenizer *t, BpeWork *w, const char *bytes, size_t len) {
    if (t->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < len; i++)
            if (t->byte_fallback_ids[(uint8_t)bytes[i]] < 0) all = false;
        if (all) {
            for (size_t i = 0; i < len; i++)
                TRY(ids_push(&w->out, &w->n_out, &w->cap_out, t->byte_fallback_ids[(uint8_t)bytes[i]]));
            return 0;
        }
    }
    if (t->unk_id < 0)
        return error_set("tokenizer: \"%.*s\" is not in the vocab and %s has no model.unk_token", (int)len, bytes,
                         t->json_path);
    return ids_push(&w->out, &w->n_out, &w->cap_out, t->unk_id);
}

static int bpe_compute(const Tokenizer *t, BpeWork *w, const char *piece, size_t len) {
    w->n_out = 0;
    if (t->ignore_merges) {
        const char *key = piece;
        size_t klen = len;
        if (t->byte_level) {
            TRY(map_bytes(w, piece, len, &klen));
            key = w->mapped;
        }
        int32_t id = strmap_get(&t->token_to_id, key, klen);
        if (id >= 0) return ids_push(&w->out, &w->n_out, &w->cap_out, id);
    }
    if (w->cap_syms < len) {
        Sym *q = mem_realloc(w->syms, len * sizeof *q);
        if (!q) return -1;
        w->syms = q;
        w->cap_syms = len;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        Sym *s = &w->syms[n];
        if (t->byte_level) {
            s->id = t->byte_level_ids[(uint8_t)piece[i]];
            s->start = (uint32_t)i;
            s->len = 1;
            i++;
        } else {
            unsigned char c = (unsigned char)piece[i];
            size_t cl = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            if (cl > len - i) cl = len - i;
            s->id = strmap_get(&t->token_to_id, piece + i, cl);
            s->start = (uint32_t)i;
            s->len = (uint32_t)cl;
            i += cl;
        }
        s->prev = (int32_t)n - 1;
        s->next = (int32_t)n + 1;
        n++;
    }
    if (n == 0) return 0;
    w->syms[n - 1].next = -1;
    w->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) TRY(push_pair(t, w, (int32_t)i));
    while (w->n_heap) {
        HeapItem it = heap_pop(w);
        Sym *a = &w->syms[it.pos];
        if (a->len == 0 || a->next < 0) continue;
        Sym *b = &w->syms[a->next];
        const PairEntry *e = pairmap_get(&t->merges, a->id, b->id);
        if (!e || e->rank != it.rank || e->merged != it.merged) continue; /* stale */
        a->id = it.merged;
        a->len += b->len;
        a->next = b->next;
        if (b->next >= 0) w->syms[b->next].prev = it.pos;
        b->len = 0;
        if (a->prev >= 0) TRY(push_pair(t, w, a->prev));
        TRY(push_pair(t, w, it.pos));
    }
    for (int32_t i = 0; i >= 0; i = w->syms[i].next) {
        const Sym *s = &w->syms[i];
        if (s->id >= 0) {
            TRY(ids_push(&w->out, &w->n_out, &w->cap_out, s->id));
            continue;
        }
        if (t->byte_level) {
            /* The symbol is one byte standing as its GPT-2 char. */
            char ch[4];
            int k = utf8_encode(byte_to_unicode((uint8_t)piece[s->start]), ch);
            TRY(emit_unknown(t, w, ch, (size_t)k));
        } else
            TRY(emit_unknown(t, w, piece + s->start, s->len));
    }
    return 0;
}

int bpe_encode_piece(const Tokenizer *t, BpeWork *w, const char *piece, size_t len, int32_t **ids, size_t *n,
                     size_t *cap) {
    BpeCache *c = t->cache;
    bool cacheable = c && len <= CACHE_MAX_KEY;
    if (cacheable) {
        pthread_mutex_lock(&c->lock);
        int32_t e = strmap_get(&c->map, piece, len);
        if (e >= 0) {
            size_t start = c->starts[e], count = c->counts[e];
            int rc = 0;
            for (size_t i = 0; i < count && rc == 0; i++) rc = ids_push(ids, n, cap, c->ids[start + i]);
            pthread_mutex_unlock(&c->lock);
            return rc;
        }
        pthread_mutex_unlock(&c->lock);
    }
    TRY(bpe_compute(t, w, piece, len));
    for (size_t i = 0; i < w->n_out; i++) TRY(ids_push(ids, n, cap, w->out[i]));
    if (!cacheable) return 0;
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    if (c->map.count >= CACHE_MAX_ENTRIES || c->n_ids + w->n_out > CACHE_MAX_IDS) {
        strmap_clear(&c->map);
        c->n = 0;
        c->n_ids = 0;
    }
    if (strmap_get(&c->map, piece, len) < 0) {
        size_t need_ids = c->n_ids + w->n_out;
        if (need_ids > c->cap_ids) {
            size_t nc = c->cap_ids ? c->cap_ids : 4096;
            while (nc < need_ids) nc *= 2;
            int32_t *q = mem_realloc(c->ids, nc * sizeof *q);
            if (!q)
                rc = -1;
            else {
                c->ids = q;
                c->cap_ids = nc;
            }
        }
        if (rc == 0 && c->n == c->cap) {
            size_t nc = c->cap ? c->cap * 2 : 1024;
            size_t *qs = mem_realloc(c->starts, nc * sizeof *qs);
            if (!qs)
                rc = -1;
            else {
                c->starts = qs;
                uint32_t *qc = mem_realloc(c->counts, nc * sizeof *qc);
                if (!qc)
                    rc = -1;
                else {
                    c->counts = qc;
                    c->cap = nc;
                }
            }
        }
        if (rc == 0) {
            memcpy(c->ids + c->n_ids, w->out, w->n_out * sizeof *w->out);
            c->starts[c->n] = c->n_ids;
            c->counts[c->n] = (uint32_t)w->n_out;
            rc = strmap_put(&c->map, piece, len, (int32_t)c->n);
            if (rc == 0) {
                c->n++;
                c->n_ids += w->n_out;
            }
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

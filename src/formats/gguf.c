/* gguf.c: the checking GGUF reader (see gguf.h). Every count read from the
 * file is bounded by the bytes left before anything is allocated from it,
 * every length and size is overflow-checked, keys and tensor names must be
 * unique, offsets must follow each other as ggml's gguf.cpp requires
 * (aligned, in order, no gap, no overlap), and the data must lie inside
 * the file. The writer is gguf_write.c. */
#include "formats/gguf.h"
#include "base/alloc.h"
#include "base/error.h"
#include "formats/one_line.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAX_NAME 64             /* ggml's GGML_MAX_NAME: names are shorter */
#define GGUF_MIN_KV_BYTES 13         /* key length (8) + 1 key byte + type (4) */
#define GGUF_MIN_TENSOR_BYTES 33     /* name (8 + 1), n_dims (4), ne (8), type (4), offset (8) */

typedef struct {
    const uint8_t *p;
    size_t n, pos;
    const char *name;
} Cur;

static size_t left(const Cur *c) { return c->n - c->pos; }

static int need(Cur *c, size_t k, const char *what) {
    if (k > left(c))
        return error_set("%s: truncated at byte %zu reading %s", c->name, c->pos, what);
    return 0;
}

static int rd(Cur *c, void *dst, size_t k, const char *what) {
    TRY(need(c, k, what));
    memcpy(dst, c->p + c->pos, k);
    c->pos += k;
    return 0;
}

static int rd_str(Cur *c, GgufStr *s, const char *what) {
    uint64_t n;
    TRY(rd(c, &n, 8, what));
    if (n > left(c))
        return error_set("%s: %s: string length %llu runs past the end of the file", c->name, what,
                         (unsigned long long)n);
    s->p = (const char *)c->p + c->pos;
    s->n = n;
    c->pos += n;
    return 0;
}

static size_t scalar_size(int t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL:
        return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
        return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32:
        return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

size_t gguf_scalar_size(int type) { return scalar_size(type); }

/* Widens one little-endian scalar into kv's u / i / f. */
static void widen(GgufKV *kv, int t, const uint8_t *p) {
    uint64_t u = 0;
    memcpy(&u, p, scalar_size(t));
    kv->u = u;
    switch (t) {
    case GGUF_TYPE_INT8:
        kv->i = (int8_t)u;
        break;
    case GGUF_TYPE_INT16:
        kv->i = (int16_t)u;
        break;
    case GGUF_TYPE_INT32:
        kv->i = (int32_t)u;
        break;
    case GGUF_TYPE_INT64:
        kv->i = (int64_t)u;
        break;
    default:
        kv->i = (int64_t)u;
        break;
    }
    if (t == GGUF_TYPE_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        kv->f = f;
    } else if (t == GGUF_TYPE_FLOAT64) {
        memcpy(&kv->f, p, 8);
    }
}

static bool is_signed(int t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

static bool is_integer(int t) {
    return scalar_size(t) && t != GGUF_TYPE_FLOAT32 && t != GGUF_TYPE_FLOAT64 && t != GGUF_TYPE_BOOL;
}

static int read_kv(Cur *c, GgufKV *kv, size_t index) {
    GgufStr key;
    int32_t t;
    char what[40];
    snprintf(what, sizeof what, "key %zu", index);
    TRY(rd_str(c, &key, what));
    if (key.n == 0) return error_set("%s: key %zu is empty", c->name, index);
    if (memchr(key.p, 0, key.n)) return error_set("%s: key %zu holds a NUL byte", c->name, index);
    kv->key = mem_strndup(key.p, key.n);
    if (!kv->key) return -1;
    TRY(rd(c, &t, 4, kv->key));
    kv->type = t;
    if (t == GGUF_TYPE_STRING) return rd_str(c, &kv->str, kv->key);
    if (t == GGUF_TYPE_ARRAY) {
        int32_t et;
        TRY(rd(c, &et, 4, kv->key));
        TRY(rd(c, &kv->arr_n, 8, kv->key));
        kv->arr_type = et;
        if (et == GGUF_TYPE_STRING) {
            /* every string takes at least its 8-byte length */
            if (kv->arr_n > left(c) / 8)
                return error_set("%s: key %s: %llu strings cannot fit in the %zu bytes left", c->name, kv->key,
                                 (unsigned long long)kv->arr_n, left(c));
            kv->arr_str = mem_calloc(kv->arr_n + 1, sizeof *kv->arr_str);
            if (!kv->arr_str) return -1;
            for (uint64_t k = 0; k < kv->arr_n; k++) TRY(rd_str(c, &kv->arr_str[k], kv->key));
            return 0;
        }
        size_t es = scalar_size(et);
        if (es == 0)
            return error_set("%s: key %s: array element type %d is not valid%s", c->name, kv->key, (int)et,
                             et == GGUF_TYPE_ARRAY ? " (nested arrays)" : "");
        if (kv->arr_n > left(c) / es)
            return error_set("%s: key %s: %llu elements run past the end of the file", c->name, kv->key,
                             (unsigned long long)kv->arr_n);
        kv->arr = c->p + c->pos;
        c->pos += (size_t)kv->arr_n * es;
        return 0;
    }
    size_t sz = scalar_size(t);
    if (sz == 0) return error_set("%s: key %s: value type %d is not valid", c->name, kv->key, (int)t);
    TRY(need(c, sz, kv->key));
    widen(kv, t, c->p + c->pos);
    c->pos += sz;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Refuses a repeated name among n (sorted copy of the pointers). */
static int check_unique(const char *file, char **names, size_t n, const char *what) {
    if (n < 2) return 0;
    char **s = mem_calloc(n, sizeof *s);
    if (!s) return -1;
    memcpy(s, names, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_str);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++)
        if (!strcmp(s[i - 1], s[i])) rc = error_set("%s: duplicate %s \"%s\"", file, what, s[i]);
    mem_free(s);
    return rc;
}

static int read_tensor_info(Cur *c, GgufTensorInfo *t, size_t index) {
    GgufStr nm;
    uint32_t nd;
    int32_t type;
    char what[40];
    snprintf(what, sizeof what, "the name of tensor %zu", index);
    TRY(rd_str(c, &nm, what));
    if (nm.n >= GGUF_MAX_NAME || memchr(nm.p, 0, nm.n))
        return error_set("%s: tensor %zu: name of %llu bytes (at most %d, no NUL)", c->name, index,
                         (unsigned long long)nm.n, GGUF_MAX_NAME - 1);
    t->name = mem_strndup(nm.p, nm.n);
    if (!t->name) return -1;
    TRY(rd(c, &nd, 4, t->name));
    if (nd < 1 || nd > 4) return error_set("%s: tensor %s: %u dimensions (1 to 4)", c->name, t->name, nd);
    t->n_dims = (int)nd;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        TRY(rd(c, &t->ne[d], 8, t->name));
        if (t->ne[d] < 0)
            return error_set("%s: tensor %s: dimension %u is negative (%lld)", c->name, t->name, d,
                             (long long)t->ne[d]);
    }
    TRY(rd(c, &type, 4, t->name));
    TRY(rd(c, &t->offset, 8, t->name));
    t->type = type;
    if (!ggml_type_supported(type))
        return error_set("%s: tensor %s: ggml type %d is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                         "Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)", c->name, t->name, (int)type);
    size_t n = 1;
    for (int d = 0; d < 4; d++)
        if (!size_mul(n, (size_t)t->ne[d], &n) || n > (size_t)INT64_MAX)
            return error_set("%s: tensor %s: the element count overflows", c->name, t->name);
    t->nelem = (int64_t)n;
    int bs = ggml_block_size(type);
    if (t->ne[0] % bs != 0)
        return error_set("%s: tensor %s: %lld elements per row is not a multiple of %s's block of %d",
                         c->name, t->name, (long long)t->ne[0], ggml_type_name(type), bs);
    size_t rows = t->ne[0] ? n / (size_t)t->ne[0] : 0;
    size_t bytes;
    if (!size_mul(ggml_row_bytes(type, t->ne[0]), rows, &bytes))
        return error_set("%s: tensor %s: the byte size overflows", c->name, t->name);
    t->bytes = bytes;
    return 0;
}

static int parse(GgufFile *g, Cur *c) {
    uint8_t magic[4];
    int64_t n_t, n_kv;
    if (rd(c, magic, 4, "the magic") < 0) return -1;
    if (memcmp(magic, "GGUF", 4))
        return error_set("%s: not a GGUF file (magic %02x %02x %02x %02x)", c->name, magic[0], magic[1], magic[2],
                         magic[3]);
    TRY(rd(c, &g->version, 4, "the version"));
    if (g->version != 2 && g->version != 3)
        return error_set("%s: GGUF version %u is not supported (2 and 3 are)%s", c->name, g->version,
                         g->version > 0xffff ? "; a big-endian file?" : "");
    TRY(rd(c, &n_t, 8, "the tensor count"));
    TRY(rd(c, &n_kv, 8, "the key-value count"));
    if (n_kv < 0 || (uint64_t)n_kv > left(c) / GGUF_MIN_KV_BYTES)
        return error_set("%s: %lld key-values cannot fit in the %zu bytes left", c->name, (long long)n_kv, left(c));
    g->kv = mem_calloc((size_t)n_kv + 1, sizeof *g->kv);
    if (!g->kv) return -1;
    for (int64_t i = 0; i < n_kv; i++) {
        TRY(read_kv(c, &g->kv[i], (size_t)i));
        g->n_kv = (size_t)i + 1;
    }
    char **names = mem_calloc(g->n_kv + 1, sizeof *names);
    if (!names) return -1;
    for (size_t i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    int rc = check_unique(c->name, names, g->n_kv, "key");
    mem_free(names);
    TRY(rc);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufKV *al = gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32)
            return error_set("%s: key general.alignment must be a UINT32 (type %d)", c->name, al->type);
        if (al->u == 0 || (al->u & (al->u - 1)))
            return error_set("%s: general.alignment %llu is not a power of two", c->name, (unsigned long long)al->u);
        g->alignment = (uint32_t)al->u;
    }
    if (n_t < 0 || (uint64_t)n_t > left(c) / GGUF_MIN_TENSOR_BYTES)
        return error_set("%s: %lld tensors cannot fit in the %zu bytes left", c->name, (long long)n_t, left(c));
    g->tensors = mem_calloc((size_t)n_t + 1, sizeof *g->tensors);
    if (!g->tensors) return -1;
    for (int64_t i = 0; i < n_t; i++) {
        TRY(read_tensor_info(c, &g->tensors[i], (size_t)i));
        g->n_tensors = (size_t)i + 1;
    }
    names = mem_calloc(g->n_tensors + 1, sizeof *names);
    if (!names) return -1;
    for (size_t i = 0; i < g->n_tensors; i++) names[i] = g->tensors[i].name;
    rc = check_unique(c->name, names, g->n_tensors, "tensor name");
    mem_free(names);
    TRY(rc);
    if (g->n_tensors == 0) {
        g->data_start = c->pos;
        return 0;
    }
    size_t a = g->alignment;
    g->data_start = (c->pos + a - 1) / a * a;
    if (g->data_start > c->n)
        return error_set("%s: the tensor data would start at byte %zu, past the end of the file (%zu bytes)", c->name,
                         g->data_start, c->n);
    /* offsets follow each other: each one is the padded end of the one before */
    size_t expect = 0;
    size_t end = 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        GgufTensorInfo *t = &g->tensors[i];
        if (t->offset != expect)
            return error_set("%s: tensor %s: offset %llu, expected %zu (tensors must be in order, aligned to %zu, "
                             "without gaps or overlaps)", c->name, t->name, (unsigned long long)t->offset, expect, a);
        size_t e;
        if (!size_add(expect, t->bytes, &e) || !size_add(e, a - 1, &expect))
            return error_set("%s: tensor %s: the data size overflows", c->name, t->name);
        expect = expect / a * a;
        end = e;
        size_t file_end;
        if (!size_add(g->data_start, e, &file_end) || file_end > c->n)
            return error_set("%s: tensor %s: data (%zu bytes at offset %llu) runs past the end of the file", c->name,
                             t->name, t->bytes, (unsigned long long)t->offset);
        t->data = c->p + g->data_start + t->offset;
    }
    size_t padded_end = g->data_start + expect;
    if (c->n > padded_end)
        return error_set("%s: %zu bytes after the tensor data (the data ends at byte %zu)", c->name,
                         c->n - padded_end, g->data_start + end);
    return 0;
}

int gguf_parse(GgufFile *g, const void *data, size_t size, const char *name) {
    memset(g, 0, sizeof *g);
    g->name = name;
    Cur c = {data, size, 0, name};
    if (parse(g, &c) < 0) {
        gguf_close(g);
        return error_one_line();
    }
    return 0;
}

int gguf_open(GgufFile *g, const char *path) {
    MappedFile m;
    memset(g, 0, sizeof *g);
    TRY(file_map(&m, path));
    int rc = gguf_parse(g, m.data, m.size, m.path);
    if (rc < 0) {
        file_unmap(&m);
        return -1;
    }
    g->map = m;
    g->name = g->map.path;
    return 0;
}

void gguf_close(GgufFile *g) {
    for (size_t i = 0; g->kv && i < g->n_kv + 1; i++) {
        mem_free(g->kv[i].key);
        mem_free(g->kv[i].arr_str);
    }
    for (size_t i = 0; g->tensors && i < g->n_tensors + 1; i++) mem_free(g->tensors[i].name);
    mem_free(g->kv);
    mem_free(g->tensors);
    if (g->map.path) file_unmap(&g->map);
    memset(g, 0, sizeof *g);
}

const GgufKV *gguf_find_kv(const GgufFile *g, const char *key) {
    for (size_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const GgufTensorInfo *gguf_find_tensor(const GgufFile *g, const char *name) {
    for (size_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static const GgufKV *get(const GgufFile *g, const char *key, bool required, int *rc) {
    const GgufKV *kv = gguf_find_kv(g, key);
    *rc = 0;
    if (!kv && required) *rc = error_set("%s: key %s is missing", g->name, key);
    return kv;
}

int gguf_get_int(const GgufFile *g, const char *key, bool required, int64_t lo, int64_t hi, int64_t *out) {
    int rc;
    const GgufKV *kv = get(g, key, required, &rc);
    if (!kv) return rc;
    if (!is_integer(kv->type)) return error_set("%s: key %s must be an integer (type %d)", g->name, key, kv->type);
    bool neg = is_signed(kv->type) && kv->i < 0;
    if ((!neg && kv->u > (uint64_t)INT64_MAX) || kv->i < lo || kv->i > hi) {
        if (neg)
            return error_set("%s: key %s: %lld is out of range [%lld, %lld]", g->name, key, (long long)kv->i,
                             (long long)lo, (long long)hi);
        return error_set("%s: key %s: %llu is out of range [%lld, %lld]", g->name, key, (unsigned long long)kv->u,
                         (long long)lo, (long long)hi);
    }
    *out = kv->i;
    return 0;
}

int gguf_get_f64(const GgufFile *g, const char *key, bool required, double *out) {
    int rc;
    const GgufKV *kv = get(g, key, required, &rc);
    if (!kv) return rc;
    if (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64)
        return error_set("%s: key %s must be a float (type %d)", g->name, key, kv->type);
    *out = kv->f;
    return 0;
}

int gguf_get_bool(const GgufFile *g, const char *key, bool required, bool *out) {
    int rc;
    const GgufKV *kv = get(g, key, required, &rc);
    if (!kv) return rc;
    if (kv->type != GGUF_TYPE_BOOL) return error_set("%s: key %s must be a bool (type %d)", g->name, key, kv->type);
    *out = kv->u != 0;
    return 0;
}

int gguf_get_str(const GgufFile *g, const char *key, bool required, char **out) {
    int rc;
    const GgufKV *kv = get(g, key, required, &rc);
    if (!kv) return rc;
    if (kv->type != GGUF_TYPE_STRING) return error_set("%s: key %s must be a string (type %d)", g->name, key, kv->type);
    if (memchr(kv->str.p, 0, kv->str.n)) return error_set("%s: key %s holds a NUL byte", g->name, key);
    *out = mem_strndup(kv->str.p, kv->str.n);
    return *out ? 0 : -1;
}

double gguf_arr_f64(const GgufKV *kv, uint64_t i) {
    GgufKV one = {0};
    widen(&one, kv->arr_type, kv->arr + i * scalar_size(kv->arr_type));
    if (kv->arr_type == GGUF_TYPE_FLOAT32 || kv->arr_type == GGUF_TYPE_FLOAT64) return one.f;
    return is_signed(kv->arr_type) ? (double)one.i : (double)one.u;
}

int64_t gguf_arr_i64(const GgufKV *kv, uint64_t i) {
    GgufKV one = {0};
    widen(&one, kv->arr_type, kv->arr + i * scalar_size(kv->arr_type));
    if (kv->arr_type == GGUF_TYPE_FLOAT32 || kv->arr_type == GGUF_TYPE_FLOAT64)
        return one.f >= -9e18 && one.f <= 9e18 ? (int64_t)one.f : 0;
    return one.i;
}

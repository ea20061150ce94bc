/* gguf.c: GGUF v3 writer and checking reader (see gguf.h). */
#include "formats/gguf.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/one_line.h"
#include <stdio.h>
#include <string.h>

static int w_u32(FILE *f, uint32_t v) { return fwrite(&v, 4, 1, f) == 1 ? 0 : -1; }
static int w_u64(FILE *f, uint64_t v) { return fwrite(&v, 8, 1, f) == 1 ? 0 : -1; }
static int w_str(FILE *f, const char *s) {
    uint64_t n = strlen(s);
    if (w_u64(f, n) < 0) return -1;
    return n == 0 || fwrite(s, 1, n, f) == n ? 0 : -1;
}
static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int gguf_write(const char *path, const GgufKV *kvs, size_t n_kv, const GgufTensor *ts, size_t n_t) {
    AtomicFile af;
    TRY(atomic_open(&af, path));
    FILE *f = af.fp;
    int bad = 0;
    bad |= fwrite("GGUF", 1, 4, f) != 4;
    bad |= w_u32(f, 3) | w_u64(f, n_t) | w_u64(f, n_kv);
    for (size_t i = 0; i < n_kv && !bad; i++) {
        bad |= w_str(f, kvs[i].key) | w_u32(f, (uint32_t)kvs[i].type);
        switch (kvs[i].type) {
        case GGUF_TYPE_STRING: bad |= w_str(f, kvs[i].str); break;
        case GGUF_TYPE_FLOAT32: bad |= fwrite(&kvs[i].f32, 4, 1, f) != 1; break;
        case GGUF_TYPE_UINT32: bad |= w_u32(f, kvs[i].u32); break;
        default: atomic_abort(&af); return error_set("%s: GGUF key %s: unsupported value type %d", path, kvs[i].key, kvs[i].type);
        }
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < n_t && !bad; i++) {
        bad |= w_str(f, ts[i].name) | w_u32(f, (uint32_t)ts[i].n_dims);
        uint64_t n = 1;
        for (int d = 0; d < ts[i].n_dims; d++) { bad |= w_u64(f, ts[i].ne[d]); n *= ts[i].ne[d]; }
        bad |= w_u32(f, GGML_TYPE_F32) | w_u64(f, offset);
        offset = align_up(offset + n * 4, GGUF_DEFAULT_ALIGNMENT);
    }
    static const char zeros[GGUF_DEFAULT_ALIGNMENT];
    long pos = ftell(f);
    if (pos < 0) bad = 1;
    else { size_t pad = align_up((uint64_t)pos, GGUF_DEFAULT_ALIGNMENT) - (uint64_t)pos; bad |= pad && fwrite(zeros, 1, pad, f) != pad; }
    for (size_t i = 0; i < n_t && !bad; i++) {
        uint64_t n = 1;
        for (int d = 0; d < ts[i].n_dims; d++) n *= ts[i].ne[d];
        bad |= n && fwrite(ts[i].data, 4, n, f) != n;
        size_t pad = align_up(n * 4, GGUF_DEFAULT_ALIGNMENT) - n * 4;
        bad |= pad && fwrite(zeros, 1, pad, f) != pad;
    }
    if (bad) { atomic_abort(&af); return error_set("%s: write failed", path); }
    return atomic_commit(&af);
}

/* ---- checking reader ---- */
typedef struct { const unsigned char *p; size_t n, pos; const char *path; } Cursor;
static int need(Cursor *c, size_t k, const char *what) {
    if (k > c->n - c->pos) return error_set("%s: truncated at byte %zu reading %s", c->path, c->pos, what);
    return 0;
}
static int r_u32(Cursor *c, uint32_t *v, const char *what) { TRY(need(c, 4, what)); memcpy(v, c->p + c->pos, 4); c->pos += 4; return 0; }
static int r_u64(Cursor *c, uint64_t *v, const char *what) { TRY(need(c, 8, what)); memcpy(v, c->p + c->pos, 8); c->pos += 8; return 0; }
static int r_str(Cursor *c, char **out, const char *what) {
    uint64_t n; TRY(r_u64(c, &n, what));
    if (n > (1u << 20)) return error_set("%s: %s: string length %llu is absurd", c->path, what, (unsigned long long)n);
    TRY(need(c, n, what));
    *out = mem_strndup((const char *)c->p + c->pos, n);
    if (!*out) return -1;
    c->pos += n;
    return 0;
}
static size_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

int gguf_read_check(const char *path, GgufInfo *g) {
    memset(g, 0, sizeof *g);
    MappedFile m;
    TRY(file_map(&m, path));
    Cursor c = {m.data, m.size, 0, path};
    int rc = -1;
    uint32_t magic;
    if (r_u32(&c, &magic, "magic") < 0) goto out;
    if (memcmp(&magic, "GGUF", 4) != 0) { error_set("%s: bad magic", path); goto out; }
    if (r_u32(&c, &g->version, "version") < 0 || r_u64(&c, &g->n_tensors, "tensor count") < 0 || r_u64(&c, &g->n_kv, "kv count") < 0) goto out;
    if (g->version != 3) { error_set("%s: version %u, expected 3", path, g->version); goto out; }
    if (g->n_kv > 100000 || g->n_tensors > 1000000) { error_set("%s: absurd counts", path); goto out; }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    g->kv_keys = mem_calloc(g->n_kv + 1, sizeof(char *)); g->kv_types = mem_calloc(g->n_kv + 1, sizeof(int));
    g->kv_strings = mem_calloc(g->n_kv + 1, sizeof(char *)); g->kv_f32 = mem_calloc(g->n_kv + 1, sizeof(float));
    if (!g->kv_keys || !g->kv_types || !g->kv_strings || !g->kv_f32) goto out;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        uint32_t t;
        if (r_str(&c, &g->kv_keys[i], "kv key") < 0 || r_u32(&c, &t, "kv type") < 0) goto out;
        g->kv_types[i] = (int)t;
        if (t == GGUF_TYPE_STRING) { if (r_str(&c, &g->kv_strings[i], g->kv_keys[i]) < 0) goto out; }
        else if (t == GGUF_TYPE_ARRAY) {
            uint32_t et; uint64_t n;
            if (r_u32(&c, &et, "array type") < 0 || r_u64(&c, &n, "array length") < 0) goto out;
            for (uint64_t k = 0; k < n; k++) {
                if (et == GGUF_TYPE_STRING) { char *s; if (r_str(&c, &s, "array string") < 0) goto out; mem_free(s); }
                else {
                    size_t sz = scalar_size(et);
                    if (!sz) { error_set("%s: %s: bad array type %u", path, g->kv_keys[i], et); goto out; }
                    if (need(&c, sz, "array element") < 0) goto out;
                    c.pos += sz;
                }
            }
        } else {
            size_t sz = scalar_size(t);
            if (!sz) { error_set("%s: key %s: unknown value type %u", path, g->kv_keys[i], t); goto out; }
            if (need(&c, sz, g->kv_keys[i]) < 0) goto out;
            if (t == GGUF_TYPE_FLOAT32) memcpy(&g->kv_f32[i], c.p + c.pos, 4);
            if (t == GGUF_TYPE_UINT32 && !strcmp(g->kv_keys[i], "general.alignment")) memcpy(&g->alignment, c.p + c.pos, 4);
            c.pos += sz;
        }
    }
    if (g->alignment == 0 || (g->alignment & (g->alignment - 1))) { error_set("%s: alignment %u is not a power of two", path, g->alignment); goto out; }
    size_t nt = g->n_tensors + 1;
    g->t_names = mem_calloc(nt, sizeof(char *)); g->t_ndims = mem_calloc(nt, 4); g->t_ne = mem_calloc(nt, sizeof *g->t_ne);
    g->t_types = mem_calloc(nt, 4); g->t_offsets = mem_calloc(nt, 8);
    if (!g->t_names || !g->t_ndims || !g->t_ne || !g->t_types || !g->t_offsets) goto out;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (r_str(&c, &g->t_names[i], "tensor name") < 0 || r_u32(&c, &g->t_ndims[i], "n_dims") < 0) goto out;
        if (g->t_ndims[i] < 1 || g->t_ndims[i] > 4) { error_set("%s: tensor %s: n_dims %u", path, g->t_names[i], g->t_ndims[i]); goto out; }
        for (uint32_t d = 0; d < g->t_ndims[i]; d++) if (r_u64(&c, &g->t_ne[i][d], "ne") < 0) goto out;
        if (r_u32(&c, &g->t_types[i], "tensor type") < 0 || r_u64(&c, &g->t_offsets[i], "tensor offset") < 0) goto out;
        if (g->t_offsets[i] % g->alignment) { error_set("%s: tensor %s: offset %llu not aligned to %u", path, g->t_names[i], (unsigned long long)g->t_offsets[i], g->alignment); goto out; }
    }
    g->data_start = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    /* No tensors: the file may end right after the infos, without padding. */
    if (g->n_tensors == 0 && g->data_start > m.size) g->data_start = m.size;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        size_t n = g->t_types[i] == GGML_TYPE_F32 ? 4 : 2, end;
        bool overflow = false;
        for (uint32_t d = 0; d < g->t_ndims[i]; d++) overflow |= !size_mul(n, g->t_ne[i][d], &n);
        overflow |= !size_add(g->data_start, g->t_offsets[i], &end) || !size_add(end, n, &end);
        if (overflow || end > m.size) { error_set("%s: tensor %s: data past the end of the file", path, g->t_names[i]); goto out; }
    }
    rc = 0;
out:
    file_unmap(&m);
    if (rc < 0) { gguf_info_free(g); error_one_line(); }  /* names from the file may hold newlines */
    return rc;
}

void gguf_info_free(GgufInfo *g) {
    for (uint64_t i = 0; g->kv_keys && i < g->n_kv; i++) { mem_free(g->kv_keys[i]); if (g->kv_strings) mem_free(g->kv_strings[i]); }
    for (uint64_t i = 0; g->t_names && i < g->n_tensors; i++) mem_free(g->t_names[i]);
    mem_free(g->kv_keys); mem_free(g->kv_types); mem_free(g->kv_strings); mem_free(g->kv_f32);
    mem_free(g->t_names); mem_free(g->t_ndims); mem_free(g->t_ne); mem_free(g->t_types); mem_free(g->t_offsets);
    memset(g, 0, sizeof *g);
}

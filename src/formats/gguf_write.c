/* gguf_write.c: the GGUF v3 writer (see gguf.h). The header (key-values
 * and tensor infos) is written first with each tensor's offset computed
 * from the sizes before it, padded to 32 bytes; then each tensor's data,
 * taken as given or produced on demand into one buffer reused for every
 * tensor. The file is a temporary until it is complete, fsynced and
 * renamed (base/fileio.h). */
#include "formats/gguf.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include <stdio.h>
#include <string.h>

static int w(FILE *f, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int w_u32(FILE *f, uint32_t v) { return w(f, &v, 4); }
static int w_u64(FILE *f, uint64_t v) { return w(f, &v, 8); }

static int w_str(FILE *f, const char *s) {
    uint64_t n = strlen(s);
    if (w_u64(f, n) < 0) return -1;
    return w(f, s, n);
}

static uint64_t align_up(uint64_t x) {
    return (x + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT * GGUF_DEFAULT_ALIGNMENT;
}

size_t gguf_tensor_bytes(const GgufTensorOut *t) {
    size_t row = ggml_row_bytes(t->type, (int64_t)t->ne[0]);
    if (t->ne[0] > 0 && row == 0) {
        error_set("GGUF tensor %s: %llu elements per row do not fit %s blocks", t->name,
                  (unsigned long long)t->ne[0], ggml_type_name(t->type) ? ggml_type_name(t->type) : "?");
        return 0;
    }
    size_t n = row;
    for (int d = 1; d < t->n_dims; d++) {
        if (!size_mul(n, t->ne[d], &n)) {
            error_set("GGUF tensor %s: the size overflows", t->name);
            return 0;
        }
    }
    return n;
}

static int w_strn(FILE *f, const GgufStr *s) {
    if (w_u64(f, s->n) < 0) return -1;
    return w(f, s->p, s->n);
}

/* A key-value of a read file, written back byte for byte: a scalar's bytes
 * are the low bytes of its widened `u` (gguf.c copies them there), an array
 * of scalars is still packed in the source mapping. */
static int w_kv_copy(FILE *f, const GgufKV *kv, const char *path) {
    int bad = w_str(f, kv->key) | w_u32(f, (uint32_t)kv->type);
    if (kv->type == GGUF_TYPE_STRING) return bad | w_strn(f, &kv->str);
    if (kv->type != GGUF_TYPE_ARRAY) {
        size_t sz = gguf_scalar_size(kv->type);
        if (sz == 0) return error_set("%s: GGUF key %s: unsupported value type %d", path, kv->key, kv->type);
        return bad | w(f, &kv->u, sz);
    }
    bad |= w_u32(f, (uint32_t)kv->arr_type) | w_u64(f, kv->arr_n);
    if (kv->arr_type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < kv->arr_n && !bad; i++) bad |= w_strn(f, &kv->arr_str[i]);
        return bad;
    }
    size_t es = gguf_scalar_size(kv->arr_type);
    if (es == 0) return error_set("%s: GGUF key %s: unsupported array type %d", path, kv->key, kv->arr_type);
    return bad | w(f, kv->arr, (size_t)kv->arr_n * es);
}

static int w_kv(FILE *f, const GgufKVOut *kv, const char *path) {
    if (kv->from) return w_kv_copy(f, kv->from, path);
    int bad = w_str(f, kv->key) | w_u32(f, (uint32_t)kv->type);
    switch (kv->type) {
    case GGUF_TYPE_STRING:
        return bad | w_str(f, kv->str);
    case GGUF_TYPE_UINT32:
        return bad | w_u32(f, kv->u32);
    case GGUF_TYPE_INT32:
        return bad | w(f, &kv->i32, 4);
    case GGUF_TYPE_FLOAT32:
        return bad | w(f, &kv->f32, 4);
    case GGUF_TYPE_BOOL: {
        uint8_t b = kv->b ? 1 : 0;
        return bad | w(f, &b, 1);
    }
    case GGUF_TYPE_ARRAY:
        bad |= w_u32(f, (uint32_t)kv->arr_type) | w_u64(f, kv->n);
        if (kv->arr_type == GGUF_TYPE_STRING) {
            for (size_t i = 0; i < kv->n && !bad; i++) bad |= w_str(f, kv->strs[i]);
            return bad;
        }
        if (kv->arr_type == GGUF_TYPE_FLOAT32) return bad | w(f, kv->f32s, kv->n * 4);
        if (kv->arr_type == GGUF_TYPE_INT32) return bad | w(f, kv->i32s, kv->n * 4);
        if (kv->arr_type == GGUF_TYPE_BOOL) return bad | w(f, kv->bools, kv->n);
        return error_set("%s: GGUF key %s: unsupported array type %d", path, kv->key, kv->arr_type);
    default:
        return error_set("%s: GGUF key %s: unsupported value type %d", path, kv->key, kv->type);
    }
}

int gguf_write(const char *path, const GgufKVOut *kvs, size_t n_kv, const GgufTensorOut *ts, size_t n_t) {
    static const char zeros[GGUF_DEFAULT_ALIGNMENT];
    size_t max_bytes = 0;
    for (size_t i = 0; i < n_t; i++) {
        size_t b = gguf_tensor_bytes(&ts[i]);
        if (b == 0 && ts[i].ne[0] > 0) return error_prefix("%s", path);
        if (!ts[i].data && b > max_bytes) max_bytes = b;
    }
    AtomicFile af;
    TRY(atomic_open(&af, path));
    FILE *f = af.fp;
    uint8_t *buf = NULL;
    int bad = w(f, "GGUF", 4) | w_u32(f, 3) | w_u64(f, n_t) | w_u64(f, n_kv);
    for (size_t i = 0; i < n_kv && !bad; i++)
        if (w_kv(f, &kvs[i], path) < 0) bad = 1;
    uint64_t offset = 0;
    for (size_t i = 0; i < n_t && !bad; i++) {
        bad |= w_str(f, ts[i].name) | w_u32(f, (uint32_t)ts[i].n_dims);
        for (int d = 0; d < ts[i].n_dims; d++) bad |= w_u64(f, ts[i].ne[d]);
        bad |= w_u32(f, (uint32_t)ts[i].type) | w_u64(f, offset);
        offset = align_up(offset + gguf_tensor_bytes(&ts[i]));
    }
    long pos = ftell(f);
    if (pos < 0) bad = 1;
    if (!bad && n_t > 0) bad |= w(f, zeros, align_up((uint64_t)pos) - (uint64_t)pos);
    for (size_t i = 0; i < n_t && !bad; i++) {
        size_t bytes = gguf_tensor_bytes(&ts[i]);
        const void *data = ts[i].data;
        if (!data && bytes) {
            if (!buf && !(buf = mem_alloc(max_bytes))) {
                atomic_abort(&af);
                return -1;
            }
            if (ts[i].produce(ts[i].ctx, ts[i].index, buf, bytes) < 0) {
                mem_free(buf);
                atomic_abort(&af);
                return error_prefix("%s", path);
            }
            data = buf;
        }
        bad |= w(f, data, bytes);
        bad |= w(f, zeros, align_up(bytes) - bytes);
    }
    mem_free(buf);
    if (bad) {
        atomic_abort(&af);
        return error_set("%s: write failed", path);
    }
    return atomic_commit(&af);
}

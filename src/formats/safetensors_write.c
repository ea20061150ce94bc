/* safetensors_write.c: the safetensors writer (see safetensors.h). Tensors
 * go in the given order, contiguous from offset 0; the header JSON carries
 * __metadata__ first when given and is space-padded so the data starts at a
 * multiple of 8 (as the reference writer does since #148). The file is
 * written through AtomicFile (temporary file, fsync, rename): a failure
 * leaves any previous file untouched. */
#include "safetensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include <errno.h>
#include <jansson.h>
#include <string.h>

/* Byte size of a tensor to write; -1 + error when it is not well formed. */
static int write_size(const char *path, const StWriteTensor *t, size_t *bytes) {
    if (!t->name || !*t->name) return error_set("%s: a tensor has an empty name", path);
    if (strcmp(t->name, "__metadata__") == 0) return error_set("%s: \"__metadata__\" cannot be a tensor name", path);
    if ((unsigned)t->dtype >= DTYPE_COUNT) return error_set("%s: tensor \"%s\": invalid dtype", path, t->name);
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
        return error_set("%s: tensor \"%s\": rank %d out of range", path, t->name, t->ndim);
    size_t nelem = 1, nbits;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) return error_set("%s: tensor \"%s\": negative dimension", path, t->name);
        if (!size_mul(nelem, (size_t)t->shape[d], &nelem))
            return error_set("%s: tensor \"%s\": size overflows", path, t->name);
    }
    if (!size_mul(nelem, (size_t)dtype_bits(t->dtype), &nbits))
        return error_set("%s: tensor \"%s\": size overflows", path, t->name);
    if (nbits % 8)
        return error_set("%s: tensor \"%s\": %zu elements of %s are not a whole number of bytes", path, t->name, nelem,
                         dtype_name(t->dtype));
    *bytes = nbits / 8;
    if (*bytes && !t->data) return error_set("%s: tensor \"%s\": no data", path, t->name);
    return 0;
}

/* Header JSON (compact, insertion order kept by jansson >= 2.8); heap string
 * from jansson (free with free()). */
static char *build_header(const char *path, const StWriteTensor *ts, size_t n,
                          const char *const *mk, const char *const *mv, size_t n_meta) {
    json_t *root = json_object();
    bool ok = root != NULL;
    if (ok && n_meta) {
        json_t *meta = json_object();
        ok = meta && json_object_set_new(root, "__metadata__", meta) == 0;
        for (size_t i = 0; ok && i < n_meta; i++) {
            if (json_object_get(meta, mk[i])) {
                json_decref(root);
                error_set("%s: metadata key \"%s\" given twice", path, mk[i]);
                return NULL;
            }
            ok = json_object_set_new(meta, mk[i], json_string(mv[i])) == 0;
        }
    }
    size_t offset = 0;
    for (size_t i = 0; ok && i < n; i++) {
        size_t bytes;
        if (write_size(path, &ts[i], &bytes) < 0) {
            json_decref(root);
            return NULL;
        }
        if (json_object_get(root, ts[i].name)) {
            json_decref(root);
            error_set("%s: tensor \"%s\" given twice", path, ts[i].name);
            return NULL;
        }
        json_t *e = json_object(), *shape = json_array();
        ok = e && shape && json_object_set_new(root, ts[i].name, e) == 0;
        if (!ok) {
            json_decref(shape);
            break;
        }
        ok = json_object_set_new(e, "dtype", json_string(dtype_name(ts[i].dtype))) == 0;
        for (int d = 0; ok && d < ts[i].ndim; d++) ok = json_array_append_new(shape, json_integer(ts[i].shape[d])) == 0;
        ok = ok && json_object_set_new(e, "shape", shape) == 0;
        if (!ok) break;
        ok = json_object_set_new(e, "data_offsets",
                                 json_pack("[II]", (json_int_t)offset, (json_int_t)(offset + bytes))) == 0;
        offset += bytes;
    }
    char *s = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!s) error_set("%s: cannot build the header (out of memory or invalid UTF-8 in a name)", path);
    return s;
}

int st_write(const char *path, const StWriteTensor *tensors, size_t n,
             const char *const *meta_keys, const char *const *meta_values, size_t n_meta) {
    char *json = build_header(path, tensors, n, meta_keys, meta_values, n_meta);
    if (!json) return -1;
    size_t len = strlen(json), padded = (len + 7) / 8 * 8;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    AtomicFile af;
    if (atomic_open(&af, path) < 0) {
        free(json);
        return -1;
    }
    bool ok = fwrite(len8, 1, 8, af.fp) == 8 && fwrite(json, 1, len, af.fp) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', af.fp) != EOF;
    free(json);
    for (size_t i = 0; ok && i < n; i++) {
        size_t bytes = 0;
        write_size(path, &tensors[i], &bytes); /* validated while building the header */
        ok = bytes == 0 || fwrite(tensors[i].data, 1, bytes, af.fp) == bytes;
    }
    if (!ok) {
        error_set("%s: write failed: %s", path, strerror(errno));
        atomic_abort(&af);
        return -1;
    }
    return atomic_commit(&af);
}

/* safetensors.c: the safetensors reader (see safetensors.h). It applies the
 * reference parser's checks (safetensors/src/tensor.rs) in the same order:
 * header length (too small, too large, past the end), UTF-8, JSON and field
 * types, then, walking tensors sorted by byte offset, contiguity, size
 * overflow, whole bytes and size vs shape, and last that the data buffer
 * ends exactly at the end of the file. It also rejects duplicate names,
 * which the reference lets through (serde keeps the last one). Every error
 * is one line: "PATH: tensor "NAME": problem". */
#include "safetensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include "one_line.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "[64, 32]" into buf (truncated if tiny; messages only). */
const char *st_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

/* Byte offset of the first invalid UTF-8 sequence, or -1 when valid. The
 * rules are Rust's str::from_utf8: no overlong forms, no surrogates, nothing
 * above U+10FFFF. */
static long utf8_first_error(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else
            return (long)i;
        if (n - i < len) return (long)i;
        if (s[i + 1] < lo || s[i + 1] > hi) return (long)i;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return (long)i;
        i += len;
    }
    return -1;
}

static void free_tensors(StFile *f) {
    for (size_t i = 0; i < f->n_tensors; i++) mem_free(f->tensors[i].name);
    mem_free(f->tensors);
    f->tensors = NULL;
    f->n_tensors = 0;
    for (size_t i = 0; i < f->n_meta; i++) {
        mem_free(f->meta_keys[i]);
        mem_free(f->meta_values[i]);
    }
    mem_free(f->meta_keys);
    mem_free(f->meta_values);
    f->meta_keys = f->meta_values = NULL;
    f->n_meta = 0;
}

void st_close(StFile *f) {
    free_tensors(f);
    file_unmap(&f->map);
    mem_free(f->path);
    memset(f, 0, sizeof *f);
}

/* A non-negative JSON integer as size_t; false for anything else (floats,
 * strings, negatives), as serde's usize. */
static bool json_to_size(const json_t *v, size_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t x = json_integer_value(v);
    if (x < 0) return false;
    *out = (size_t)x;
    return true;
}

static int parse_metadata(StFile *f, const json_t *meta) {
    if (json_is_null(meta)) return 0; /* serde reads null as "no metadata" */
    if (!json_is_object(meta)) return error_set("%s: __metadata__ must be an object of strings", f->path);
    size_t n = json_object_size(meta);
    f->meta_keys = mem_calloc(n ? n : 1, sizeof(char *));
    f->meta_values = mem_calloc(n ? n : 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_values) return error_prefix("%s", f->path);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)meta, key, val) {
        if (!json_is_string(val))
            return error_set("%s: __metadata__: value of \"%s\" must be a string", f->path, key);
        f->meta_keys[f->n_meta] = mem_strdup(key);
        f->meta_values[f->n_meta] = mem_strdup(json_string_value(val));
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1]) return error_prefix("%s", f->path);
    }
    return 0;
}

/* One entry `name: {dtype, shape, data_offsets}`; unknown fields are ignored
 * as the reference does. */
static int parse_entry(StFile *f, StTensor *t, const char *name, const json_t *e) {
    const char *p = f->path;
    if (!json_is_object(e)) return error_set("%s: tensor \"%s\": entry must be an object", p, name);
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
           *off = json_object_get(e, "data_offsets");
    if (!dt) return error_set("%s: tensor \"%s\": missing field \"dtype\"", p, name);
    if (!json_is_string(dt)) return error_set("%s: tensor \"%s\": field \"dtype\" must be a string", p, name);
    if (dtype_from_name(json_string_value(dt), &t->dtype) < 0)
        return error_set("%s: tensor \"%s\": unknown dtype \"%s\" (names are case-sensitive, e.g. F32, BF16)", p, name,
                         json_string_value(dt));
    if (!sh) return error_set("%s: tensor \"%s\": missing field \"shape\"", p, name);
    if (!json_is_array(sh))
        return error_set("%s: tensor \"%s\": field \"shape\" must be an array of non-negative integers", p, name);
    size_t rank = json_array_size(sh);
    if (rank > ST_MAX_DIMS)
        return error_set("%s: tensor \"%s\": rank %zu is more than the supported %d", p, name, rank, ST_MAX_DIMS);
    t->ndim = (int)rank;
    for (size_t i = 0; i < rank; i++) {
        size_t d;
        if (!json_to_size(json_array_get(sh, i), &d))
            return error_set("%s: tensor \"%s\": shape[%zu] must be a non-negative integer", p, name, i);
        t->shape[i] = (int64_t)d;
    }
    if (!off) return error_set("%s: tensor \"%s\": missing field \"data_offsets\"", p, name);
    if (!json_is_array(off))
        return error_set("%s: tensor \"%s\": field \"data_offsets\" must be [begin, end]", p, name);
    if (json_array_size(off) != 2)
        return error_set("%s: tensor \"%s\": field \"data_offsets\" must be [begin, end] (2 integers, got %zu)", p,
                         name, json_array_size(off));
    if (!json_to_size(json_array_get(off, 0), &t->begin))
        return error_set("%s: tensor \"%s\": data_offsets[0] must be a non-negative integer", p, name);
    if (!json_to_size(json_array_get(off, 1), &t->end))
        return error_set("%s: tensor \"%s\": data_offsets[1] must be a non-negative integer", p, name);
    t->name = mem_strdup(name);
    if (!t->name) return error_prefix("%s", p);
    return 0;
}

static int by_offset(const void *a, const void *b, void *file) {
    const StTensor *ts = ((const StFile *)file)->tensors;
    const StTensor *x = &ts[*(const size_t *)a], *y = &ts[*(const size_t *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}
static int by_name(const void *a, const void *b) {
    return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

/* The reference's validate(): in offset order, each tensor starts where the
 * previous ended, its element count and bit count do not overflow, it fills
 * whole bytes and exactly its byte range. Sets *data_end to the last end. */
static int validate_offsets(StFile *f, size_t *data_end) {
    const char *p = f->path;
    size_t n = f->n_tensors;
    size_t *order = mem_calloc(n ? n : 1, sizeof *order);
    if (!order) return error_prefix("%s", p);
    for (size_t i = 0; i < n; i++) order[i] = i;
    qsort_r(order, n, sizeof *order, by_offset, f);
    size_t start = 0;
    const StTensor *prev = NULL;
    int rc = 0;
    char sbuf[160];
    for (size_t k = 0; k < n && rc == 0; k++) {
        StTensor *t = &f->tensors[order[k]];
        if (t->end < t->begin)
            rc = error_set("%s: tensor \"%s\": data_offsets end %zu < begin %zu", p, t->name, t->end, t->begin);
        else if (prev && t->begin == prev->begin && t->end == prev->end && t->end > t->begin)
            rc = error_set("%s: tensors \"%s\" and \"%s\" share the byte range [%zu, %zu)", p, prev->name, t->name,
                           t->begin, t->end);
        else if (t->begin < start)
            rc = error_set("%s: tensor \"%s\": data_offsets [%zu, %zu) overlap tensor \"%s\" [%zu, %zu)", p, t->name,
                           t->begin, t->end, prev->name, prev->begin, prev->end);
        else if (t->begin > start) {
            if (prev)
                rc = error_set(
                    "%s: tensor \"%s\": data_offsets begin %zu leaves a gap after tensor \"%s\" which ends at %zu", p,
                    t->name, t->begin, prev->name, start);
            else
                rc = error_set("%s: tensor \"%s\": data_offsets begin %zu leaves a gap at the start of the data (the "
                               "first tensor must begin at 0)",
                               p, t->name, t->begin);
        }
        if (rc) break;
        start = t->end;
        prev = t;
        size_t nelem = 1, nbits;
        bool ok = true;
        for (int d = 0; d < t->ndim && ok; d++) ok = size_mul(nelem, (size_t)t->shape[d], &nelem);
        if (ok) ok = size_mul(nelem, (size_t)dtype_bits(t->dtype), &nbits);
        if (!ok) {
            rc = error_set("%s: tensor \"%s\": shape %s of %s overflows the size computation", p, t->name,
                           st_format_shape(sbuf, sizeof sbuf, t->ndim, t->shape), dtype_name(t->dtype));
            break;
        }
        t->nelem = nelem;
        if (nbits % 8 != 0) {
            rc = error_set("%s: tensor \"%s\": %zu elements of %s (%d bits each) are not a whole number of bytes", p,
                           t->name, nelem, dtype_name(t->dtype), dtype_bits(t->dtype));
            break;
        }
        if (t->end - t->begin != nbits / 8)
            rc = error_set("%s: tensor \"%s\": data_offsets [%zu, %zu) hold %zu bytes but shape %s of %s needs %zu", p,
                           t->name, t->begin, t->end, t->end - t->begin,
                           st_format_shape(sbuf, sizeof sbuf, t->ndim, t->shape), dtype_name(t->dtype), nbits / 8);
    }
    mem_free(order);
    *data_end = start;
    return rc;
}

/* Parses and validates `header` (N bytes) of a file of `file_size` bytes. */
static int parse_header(StFile *f, const unsigned char *header, size_t n, size_t file_size) {
    f->file_size = file_size;
    const char *p = f->path;
    long bad = utf8_first_error(header, n);
    if (bad >= 0) return error_set("%s: header is not valid UTF-8 (byte %ld of the header)", p, bad);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)header, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key) {
            /* jansson's text ends with: near '"name"' */
            const char *near = strstr(jerr.text, "near '");
            const char *key = near ? near + 6 : "?";
            size_t len = strlen(key);
            if (len && key[len - 1] == '\'') len--;
            return error_set("%s: header: duplicate key %.*s (line %d, column %d); each tensor name must appear once",
                             p, (int)len, key, jerr.line, jerr.column);
        }
        return error_set("%s: header is not valid JSON: %s (line %d, column %d)", p, jerr.text, jerr.line, jerr.column);
    }
    int rc = 0;
    if (!json_is_object(root)) {
        rc = error_set("%s: header is not a JSON object", p);
        goto done;
    }
    size_t count = json_object_size(root);
    f->tensors = mem_calloc(count ? count : 1, sizeof *f->tensors);
    if (!f->tensors) {
        rc = error_prefix("%s", p);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) rc = parse_metadata(f, val);
        else {
            rc = parse_entry(f, &f->tensors[f->n_tensors], key, val);
            if (f->tensors[f->n_tensors].name) f->n_tensors++;
        }
        if (rc) goto done;
    }
    size_t data_end = 0, total = 0;
    if ((rc = validate_offsets(f, &data_end)) != 0) goto done;
    if (!size_add(data_end, 8 + n, &total) || total != file_size) {
        rc = error_set("%s: the data should end at byte %zu (8 + header %zu + last tensor end %zu) but the file has "
                       "%zu bytes (%s)",
                       p, total, n, data_end, file_size, total < file_size ? "trailing bytes" : "file is truncated");
        goto done;
    }
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, by_name);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0) {
            rc = error_set("%s: duplicate tensor name \"%s\"", p, f->tensors[i].name);
            goto done;
        }
done:
    json_decref(root);
    return rc;
}

/* The 8-byte little-endian N, checked against the limit and the file size. */
static int check_header_length(const char *p, const unsigned char *first8, size_t file_size, size_t *n_out) {
    if (file_size < 8)
        return error_set("%s: file is %zu bytes, too small for the 8-byte header length", p, file_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | first8[i];
    if (n > ST_MAX_HEADER)
        return error_set("%s: header length %llu exceeds the limit of %llu bytes", p, (unsigned long long)n,
                         ST_MAX_HEADER);
    size_t stop;
    if (!size_add((size_t)n, 8, &stop) || stop > file_size)
        return error_set("%s: header length %llu runs past the end of the file (%zu bytes)", p, (unsigned long long)n,
                         file_size);
    *n_out = (size_t)n;
    return 0;
}

int st_open(StFile *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = mem_strdup(path);
    if (!f->path) return -1;
    if (file_map(&f->map, path) < 0) {
        st_close(f);
        return -1;
    }
    size_t n;
    if (check_header_length(path, f->map.data, f->map.size, &n) < 0 ||
        parse_header(f, f->map.data + 8, n, f->map.size) < 0) {
        st_close(f);
        return error_one_line();
    }
    f->header_len = n;
    const unsigned char *buffer = f->map.data + 8 + n;
    for (size_t i = 0; i < f->n_tensors; i++) f->tensors[i].data = buffer + f->tensors[i].begin;
    return 0;
}

static int read_exact(int fd, void *buf, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

int st_open_header(StFile *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = mem_strdup(path);
    if (!f->path) return -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        error_set("%s: cannot open: %s", path, strerror(errno));
        st_close(f);
        return -1;
    }
    struct stat st;
    unsigned char first8[8] = {0}, *header = NULL;
    size_t n = 0, size = 0;
    int rc = 0;
    if (fstat(fd, &st) < 0) rc = error_set("%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rc = error_set("%s: not a regular file", path);
    else size = (size_t)st.st_size;
    if (!rc && size >= 8 && read_exact(fd, first8, 8, 0) < 0)
        rc = error_set("%s: read error: %s", path, strerror(errno));
    if (!rc) rc = check_header_length(path, first8, size, &n);
    if (!rc && !(header = mem_alloc(n))) rc = error_prefix("%s", path);
    if (!rc && read_exact(fd, header, n, 8) < 0) rc = error_set("%s: read error: %s", path, strerror(errno));
    close(fd);
    if (!rc) rc = parse_header(f, header, n, size);
    mem_free(header);
    if (rc) {
        st_close(f);
        return error_one_line();
    }
    f->header_len = n;
    return 0;
}

const StTensor *st_find(const StFile *f, const char *name) {
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0) return &f->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

size_t st_tensor_count_nonfinite(const StTensor *t) {
    if (!t->data) return 0;
    size_t bad = 0;
    switch (t->dtype) {
    case DTYPE_F32:
        for (size_t i = 0; i < t->nelem; i++) {
            float x;
            memcpy(&x, (const char *)t->data + 4 * i, 4);
            bad += !isfinite(x);
        }
        break;
    case DTYPE_F64:
        for (size_t i = 0; i < t->nelem; i++) {
            double x;
            memcpy(&x, (const char *)t->data + 8 * i, 8);
            bad += !isfinite(x);
        }
        break;
    case DTYPE_BF16: /* exponent all ones: Inf or NaN */
        for (size_t i = 0; i < t->nelem; i++) {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            bad += (h & 0x7f80) == 0x7f80;
        }
        break;
    case DTYPE_F16:
        for (size_t i = 0; i < t->nelem; i++) {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            bad += (h & 0x7c00) == 0x7c00;
        }
        break;
    default: break;
    }
    return bad;
}

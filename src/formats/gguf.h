/* gguf.h: GGUF v3, the file format of llama.cpp: a reader that checks the
 * whole file before anything is used (as ggml's gguf.cpp does, and every
 * check of shared/reference/bad-inputs.md: counts that size allocations,
 * string and array lengths, offsets, alignment, overflow), and an atomic
 * writer for models and LoRA adapters.
 *
 * Layout: magic "GGUF", u32 version, u64 tensor count, u64 key-value count,
 * the key-values (string key, u32 value type, value), the tensor infos
 * (name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset), padding to
 * the alignment (general.alignment, default 32), then the tensor data, each
 * tensor at its offset from the data start, padded to the alignment. ne[0]
 * is the contiguous dimension: a PyTorch (out, in) matrix has ne = {in, out}. */
#ifndef LT_GGUF_H
#define LT_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "base/fileio.h"
#include "base/ggml_types.h"

enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};
#define GGUF_DEFAULT_ALIGNMENT 32

/* ---- reader ---- */

typedef struct {
    const char *p;       /* into the mapped file; not NUL-terminated */
    uint64_t n;
} GgufStr;

typedef struct {
    char *key;           /* heap, NUL-terminated */
    int type;            /* GGUF_TYPE_* */
    /* scalars, widened: integers and bool in u (unsigned) or i (signed),
     * floats in f */
    uint64_t u;
    int64_t i;
    double f;
    GgufStr str;         /* STRING */
    int arr_type;        /* ARRAY: element type (never ARRAY: nesting is refused) */
    uint64_t arr_n;      /* ARRAY: element count */
    const uint8_t *arr;  /* ARRAY of scalars: packed little-endian elements, in the map */
    GgufStr *arr_str;    /* ARRAY of strings: heap (arr_n) */
} GgufKV;

typedef struct {
    char *name;          /* heap */
    int type;            /* GGML_TYPE_*, one lmtune can read */
    int n_dims;          /* 1..4 */
    int64_t ne[4];       /* unused dimensions are 1 */
    int64_t nelem;
    uint64_t offset;     /* from the data start */
    size_t bytes;
    const void *data;    /* in the map */
} GgufTensorInfo;

typedef struct {
    MappedFile map;      /* map.path names the file in errors */
    const char *name;    /* file name for errors */
    uint32_t version;
    uint32_t alignment;
    size_t n_kv;
    GgufKV *kv;
    size_t n_tensors;
    GgufTensorInfo *tensors;
    size_t data_start;
} GgufFile;

/* Maps and checks PATH. Every problem is one error line naming the file and
 * the key or tensor. On failure nothing stays allocated. */
int gguf_open(GgufFile *g, const char *path);
/* The same checks on a buffer (fuzzing, tests); the buffer must outlive g. */
int gguf_parse(GgufFile *g, const void *data, size_t size, const char *name);
void gguf_close(GgufFile *g);

const GgufKV *gguf_find_kv(const GgufFile *g, const char *key);
const GgufTensorInfo *gguf_find_tensor(const GgufFile *g, const char *name);
/* Bytes of one value of a scalar GGUF_TYPE_*; 0 for STRING, ARRAY and
 * invalid types. */
size_t gguf_scalar_size(int type);
/* Typed access with errors naming the file and key. An absent key is an
 * error when `required`, else leaves *out unchanged and returns 0. Integer
 * getters accept any integer type whose value fits. */
int gguf_get_int(const GgufFile *g, const char *key, bool required, int64_t lo, int64_t hi, int64_t *out);
int gguf_get_f64(const GgufFile *g, const char *key, bool required, double *out);
int gguf_get_bool(const GgufFile *g, const char *key, bool required, bool *out);
/* A heap, NUL-terminated copy (a string holding a NUL byte is an error). */
int gguf_get_str(const GgufFile *g, const char *key, bool required, char **out);
/* Element i of a numeric array, widened. */
double gguf_arr_f64(const GgufKV *kv, uint64_t i);
int64_t gguf_arr_i64(const GgufKV *kv, uint64_t i);

/* ---- writer ---- */

typedef struct {
    const char *key;
    int type;                 /* STRING, UINT32, INT32, FLOAT32, BOOL, or ARRAY */
    const GgufKV *from;       /* or, when set, this key-value of an open file written as it was read
                               * (any type; key and type taken from it) */
    const char *str;
    uint32_t u32;
    int32_t i32;
    float f32;
    bool b;
    int arr_type;             /* ARRAY: STRING, FLOAT32, INT32 or BOOL */
    size_t n;                 /* ARRAY length */
    const char *const *strs;
    const float *f32s;
    const int32_t *i32s;
    const uint8_t *bools;     /* BOOL array: one byte each, 0 or 1 */
} GgufKVOut;

/* One tensor to write: `data` already in `type` (bytes = ggml_row_bytes of
 * ne[0] times the other dimensions), or, when data is NULL, produce() fills
 * dst (bytes long) when the tensor is written, so a whole model is never
 * held converted in memory at once. */
typedef struct {
    const char *name;
    int n_dims;
    uint64_t ne[4];
    int type;                 /* GGML_TYPE_* */
    const void *data;
    int (*produce)(void *ctx, size_t index, void *dst, size_t bytes);
    void *ctx;
    size_t index;
} GgufTensorOut;

/* Bytes of a tensor's data, or 0 (with an error) when ne[0] does not fit the
 * type's blocks or the size overflows. */
size_t gguf_tensor_bytes(const GgufTensorOut *t);
/* Writes PATH atomically (temporary file, fsync, rename). The one buffer
 * produce() fills is as large as the largest produced tensor. */
int gguf_write(const char *path, const GgufKVOut *kvs, size_t n_kv, const GgufTensorOut *ts, size_t n_t);
#endif

/* gguf.h: a writer (and a checking reader, for tests) of GGUF v3 files, the
 * format llama.cpp loads; lmtune writes LoRA adapters in it
 * (general.type = "adapter"). Layout: magic "GGUF", version, tensor count,
 * key-value count, key-values, tensor infos, padding to the alignment, data. */
#ifndef LT_GGUF_H
#define LT_GGUF_H
#include <stddef.h>
#include <stdint.h>

enum { GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8, GGUF_TYPE_UINT16, GGUF_TYPE_INT16, GGUF_TYPE_UINT32,
       GGUF_TYPE_INT32, GGUF_TYPE_FLOAT32, GGUF_TYPE_BOOL, GGUF_TYPE_STRING, GGUF_TYPE_ARRAY,
       GGUF_TYPE_UINT64, GGUF_TYPE_INT64, GGUF_TYPE_FLOAT64 };
enum { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_BF16 = 30 };
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct {
    const char *key;
    int type;            /* GGUF_TYPE_STRING, FLOAT32, UINT32 supported by the writer */
    const char *str;
    float f32;
    uint32_t u32;
} GgufKV;

typedef struct {
    const char *name;
    int n_dims;
    uint64_t ne[4];      /* ggml order: ne[0] is the contiguous dimension */
    const float *data;   /* F32 */
} GgufTensor;

int gguf_write(const char *path, const GgufKV *kvs, size_t n_kv, const GgufTensor *tensors, size_t n_tensors);

/* Reader used by tests: parses and checks the whole file against the
 * specification (magic, version, types, tensor infos, offsets, alignment). */
typedef struct {
    uint32_t version;
    uint64_t n_tensors, n_kv;
    uint32_t alignment;
    char **kv_keys; int *kv_types; char **kv_strings; float *kv_f32; /* per kv */
    char **t_names; uint32_t *t_ndims; uint64_t (*t_ne)[4]; uint32_t *t_types; uint64_t *t_offsets;
    size_t data_start;
} GgufInfo;
int gguf_read_check(const char *path, GgufInfo *info);
void gguf_info_free(GgufInfo *info);
#endif

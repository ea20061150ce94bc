/* safetensors.h: the safetensors format. The reader maps the file and checks
 * every rule of the reference parser (and rejects duplicate names, which it
 * lets through); the writer writes a temporary file, fsyncs and renames.
 * A model directory may hold one file or shards listed in
 * model.safetensors.index.json. */
#ifndef LT_SAFETENSORS_H
#define LT_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "base/dtype.h"
#include "base/fileio.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER 100000000ull

typedef struct {
    char *name;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nelem;
    size_t begin, end;      /* byte range relative to the data buffer */
    const void *data;       /* into the mapping; NULL when header-only */
} StTensor;

typedef struct {
    MappedFile map;         /* whole file, or empty when opened header-only */
    char *path;
    size_t header_len;      /* N: tensor data starts at byte 8 + N */
    size_t file_size;       /* bytes, also when opened header-only */
    StTensor *tensors;      /* sorted by name */
    size_t n_tensors;
    char **meta_keys, **meta_values; /* __metadata__ (strings only) */
    size_t n_meta;
} StFile;

/* Opens and validates. Errors: "PATH: <problem>" naming the tensor or field. */
int st_open(StFile *f, const char *path);
/* Reads and validates only the header (for `lmtune plan`); data pointers are NULL. */
int st_open_header(StFile *f, const char *path);
void st_close(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key);
/* Number of NaN/Inf elements of a float tensor (F32, F64, BF16, F16); 0 for
 * other dtypes and header-only files. The format allows them; callers flag. */
size_t st_tensor_count_nonfinite(const StTensor *t);
/* "[64, 32]" into buf, for messages. */
const char *st_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape);

/* A model directory's weights: model.safetensors, or the shards of
 * model.safetensors.index.json (a shard that is missing, or a tensor listed
 * twice or not where the index says, is an error). */
typedef struct {
    StFile *files;
    size_t n_files;
    char *dir;
} StModel;
int st_model_open(StModel *m, const char *dir, bool header_only);
/* Same, and tells which file holds the tensor (NULL when absent). */
const StTensor *st_model_find_in(const StModel *m, const char *name, const StFile **file);
void st_model_close(StModel *m);
/* NULL when absent (no error set). */
const StTensor *st_model_find(const StModel *m, const char *name);
/* Sets a "DIR: tensor NAME: ..." error and returns -1 unless the tensor
 * exists with this dtype-class (F32/BF16/F16 accepted) and exactly this shape. */
int st_model_expect(const StModel *m, const char *name, int ndim, const int64_t *shape, const StTensor **out);

/* Writer: tensors are written in the given order, header space-padded to 8. */
typedef struct {
    const char *name;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;       /* nelem * dtype size bytes */
} StWriteTensor;
int st_write(const char *path, const StWriteTensor *tensors, size_t n,
             const char *const *meta_keys, const char *const *meta_values, size_t n_meta);
#endif

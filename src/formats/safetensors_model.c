/* safetensors_model.c: a model directory's weights (see safetensors.h):
 * model.safetensors, or else the shards named by the `weight_map` of
 * model.safetensors.index.json (the order transformers tries them). Each
 * shard is opened once; the index must agree with the shards: a shard that
 * is missing, a tensor listed but not in its shard, or one tensor in two
 * shards is an error naming the file. */
#include "safetensors.h"
#include "base/alloc.h"
#include "base/error.h"
#include "one_line.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_INDEX_BYTES (64u << 20)

void st_model_close(StModel *m) {
    for (size_t i = 0; i < m->n_files; i++) st_close(&m->files[i]);
    mem_free(m->files);
    mem_free(m->dir);
    memset(m, 0, sizeof *m);
}

const StTensor *st_model_find_in(const StModel *m, const char *name, const StFile **file) {
    for (size_t i = 0; i < m->n_files; i++) {
        const StTensor *t = st_find(&m->files[i], name);
        if (t) {
            if (file) *file = &m->files[i];
            return t;
        }
    }
    if (file) *file = NULL;
    return NULL;
}

const StTensor *st_model_find(const StModel *m, const char *name) { return st_model_find_in(m, name, NULL); }

static int open_one(StFile *f, const char *path, bool header_only) {
    return header_only ? st_open_header(f, path) : st_open(f, path);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct {
    const char *name;
    size_t file;
} NameAt;
static int cmp_name_at(const void *a, const void *b) {
    const NameAt *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->file < y->file ? -1 : x->file > y->file);
}

/* No two shards hold the same tensor name. */
static int check_unique_across_shards(const StModel *m) {
    size_t total = 0;
    for (size_t i = 0; i < m->n_files; i++) total += m->files[i].n_tensors;
    NameAt *all = mem_calloc(total ? total : 1, sizeof *all);
    if (!all) return error_prefix("%s", m->dir);
    size_t k = 0;
    for (size_t i = 0; i < m->n_files; i++)
        for (size_t j = 0; j < m->files[i].n_tensors; j++) all[k++] = (NameAt){m->files[i].tensors[j].name, i};
    qsort(all, total, sizeof *all, cmp_name_at);
    int rc = 0;
    for (size_t i = 1; i < total && !rc; i++)
        if (strcmp(all[i - 1].name, all[i].name) == 0)
            rc = error_set("%s: tensor \"%s\" is in two shards: %s and %s", m->dir, all[i].name,
                           m->files[all[i - 1].file].path, m->files[all[i].file].path);
    mem_free(all);
    return rc;
}

static int open_sharded(StModel *m, const char *index_path, bool header_only) {
    char *text = NULL;
    size_t len = 0;
    TRY(file_read_all(index_path, ST_MAX_INDEX_BYTES, &text, &len));
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    mem_free(text);
    if (!root)
        return error_set("%s: not valid JSON: %s (line %d, column %d)", index_path, jerr.text, jerr.line, jerr.column);
    int rc = 0;
    char **shards = NULL;
    size_t n_shards = 0;
    json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        rc = error_set("%s: missing object field \"weight_map\"", index_path);
        goto done;
    }
    if (json_object_size(map) == 0) {
        rc = error_set("%s: \"weight_map\" is empty", index_path);
        goto done;
    }
    shards = mem_calloc(json_object_size(map), sizeof *shards);
    if (!shards) {
        rc = error_prefix("%s", index_path);
        goto done;
    }
    const char *name;
    json_t *val;
    json_object_foreach(map, name, val) {
        const char *s = json_string_value(val);
        if (!s || !*s) {
            rc = error_set("%s: weight_map: tensor \"%s\": the shard must be a non-empty string", index_path, name);
            goto done;
        }
        if (strchr(s, '/') || strcmp(s, "..") == 0 || strcmp(s, ".") == 0) {
            rc = error_set(
                "%s: weight_map: tensor \"%s\": shard \"%s\" must be a plain file name in the model directory",
                index_path, name, s);
            goto done;
        }
        shards[n_shards++] = (char *)s;
    }
    /* distinct shard names, each opened once, in sorted order */
    qsort(shards, n_shards, sizeof *shards, cmp_str);
    size_t distinct = 0;
    for (size_t i = 0; i < n_shards; i++)
        if (distinct == 0 || strcmp(shards[distinct - 1], shards[i]) != 0) shards[distinct++] = shards[i];
    m->files = mem_calloc(distinct, sizeof *m->files);
    if (!m->files) {
        rc = error_prefix("%s", index_path);
        goto done;
    }
    for (size_t i = 0; i < distinct && !rc; i++) {
        char *path = path_join(m->dir, shards[i]);
        if (!path) {
            rc = error_prefix("%s", index_path);
            break;
        }
        if (!file_exists(path)) rc = error_set("%s: shard \"%s\" does not exist (%s)", index_path, shards[i], path);
        else if (open_one(&m->files[i], path, header_only) < 0) rc = -1;
        else m->n_files = i + 1;
        mem_free(path);
    }
    if (rc) goto done;
    /* every listed tensor is in the shard the index names */
    json_object_foreach(map, name, val) {
        const char *s = json_string_value(val);
        size_t lo = 0, hi = distinct;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (strcmp(shards[mid], s) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (!st_find(&m->files[lo], name)) {
            rc = error_set("%s: tensor \"%s\" is listed in shard \"%s\" but that file does not contain it", index_path,
                           name, s);
            goto done;
        }
    }
    rc = check_unique_across_shards(m);
done:
    mem_free(shards);
    json_decref(root);
    return rc;
}

int st_model_open(StModel *m, const char *dir, bool header_only) {
    memset(m, 0, sizeof *m);
    m->dir = mem_strdup(dir);
    if (!m->dir) return -1;
    char *single = path_join(dir, "model.safetensors");
    char *index = path_join(dir, "model.safetensors.index.json");
    int rc = 0;
    if (!single || !index) rc = -1;
    else if (file_exists(single)) {
        m->files = mem_calloc(1, sizeof *m->files);
        if (!m->files || open_one(&m->files[0], single, header_only) < 0) rc = -1;
        else m->n_files = 1;
    } else if (file_exists(index)) rc = open_sharded(m, index, header_only);
    else if (!dir_exists(dir)) rc = error_set("%s: model directory does not exist", dir);
    else rc = error_set("%s: no model.safetensors or model.safetensors.index.json in the model directory", dir);
    mem_free(single);
    mem_free(index);
    if (rc) {
        st_model_close(m);
        return error_one_line();
    }
    return 0;
}

int st_model_expect(const StModel *m, const char *name, int ndim, const int64_t *shape, const StTensor **out) {
    char want[160], got[160];
    const StFile *file;
    const StTensor *t = st_model_find_in(m, name, &file);
    if (out) *out = t;
    if (!t)
        return error_set("%s: tensor \"%s\" is missing (config.json implies shape %s)", m->dir, name,
                         st_format_shape(want, sizeof want, ndim, shape));
    if (t->dtype != DTYPE_F32 && t->dtype != DTYPE_BF16 && t->dtype != DTYPE_F16)
        return error_set("%s: tensor \"%s\": dtype %s is not supported (expected F32, BF16 or F16)", file->path, name,
                         dtype_name(t->dtype));
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same)
        return error_set("%s: tensor \"%s\": shape %s but config.json implies %s", file->path, name,
                         st_format_shape(got, sizeof got, t->ndim, t->shape),
                         st_format_shape(want, sizeof want, ndim, shape));
    return 0;
}

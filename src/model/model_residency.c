/* model_residency.c: which bytes of the weight files a run keeps resident,
 * counted the same way for the plan (model_plan_weights, headers only) and
 * settled at load (model_keep_resident). In place, from the mapping, a run
 * reads its frozen matrices, the LM head and, of the input embedding, only
 * the rows of the token ids it will see (the embedding is the whole matrix
 * when tied to the LM head, or when the ids are not known: generation).
 * Everything copied out of the files (norms and biases to fp32, converted
 * matrices, full fine-tuning's masters) is read with pread instead, so it
 * never enters the resident set. The resident set of each file is then the
 * pages those byte ranges touch, whatever the kernel's fault-around and
 * large folios map (file_map_keep). */
#include "model/model_internal.h"
#include "base/alloc.h"
#include "base/error.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef enum { GROUP_BLOCKS, GROUP_LMHEAD, GROUP_EMBED, GROUP_COUNT } RangeGroup;

typedef struct {
    ByteRange *r;
    size_t n, cap;
} Ranges;

static int ranges_push(Ranges *rs, size_t begin, size_t end) {
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? 2 * rs->cap : 64;
        ByteRange *p = mem_realloc(rs->r, cap * sizeof *p);
        if (!p) return -1;
        rs->r = p;
        rs->cap = cap;
    }
    rs->r[rs->n].begin = begin;
    rs->r[rs->n].end = end;
    rs->n++;
    return 0;
}

/* Where the file holding `name` is in the model and where its bytes are. */
static const StTensor *locate(const StModel *st, const char *name, size_t *file, size_t *base) {
    const StFile *f;
    const StTensor *t = st_model_find_in(st, name, &f);
    if (!t) return NULL;
    *file = (size_t)(f - st->files);
    *base = 8 + f->header_len;
    return t;
}

static int add_tensor(Ranges *per_file, const StModel *st, const char *name) {
    size_t file, base;
    const StTensor *t = locate(st, name, &file, &base);
    if (!t) return error_set("%s: tensor %s is missing", st->dir, name);
    return ranges_push(&per_file[file], base + t->begin, base + t->end);
}

/* Rows of the embedding the run reads: every row, or those set in rows_used. */
static int add_embedding(Ranges *per_file, const StModel *st, const Dims *d, const uint64_t *rows_used,
                         size_t *rows) {
    size_t file, base;
    const StTensor *t = locate(st, "model.embed_tokens.weight", &file, &base);
    if (!t) return error_set("%s: tensor model.embed_tokens.weight is missing", st->dir);
    if (!rows_used) {
        *rows = (size_t)d->V;
        return ranges_push(&per_file[file], base + t->begin, base + t->end);
    }
    size_t row_bytes = (t->end - t->begin) / (size_t)d->V;
    *rows = 0;
    for (int v = 0; v < d->V; v++) {
        if (!(rows_used[v >> 6] >> (v & 63) & 1u)) continue;
        size_t b = base + t->begin + (size_t)v * row_bytes;
        TRY(ranges_push(&per_file[file], b, b + row_bytes));
        (*rows)++;
    }
    return 0;
}

/* The ranges of each group, per file: groups[g * n_files + file]. */
static int collect(const StModel *st, const ModelConfig *cfg, const ModelSpec *spec, const Dims *d,
                   Ranges *groups, size_t *embed_rows) {
    *embed_rows = 0;
    size_t nf = st->n_files;
    if (d->convert) return 0;   /* every matrix is converted into the arena */
    char nm[160];
    for (int l = 0; l < d->L; l++) {
        if (spec->type == TUNE_FULL && l >= d->lo) continue;  /* copied to fp32 masters */
        for (int p = 0; p < PROJ_COUNT; p++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s.weight", l, PROJ_KEYS[p]);
            TRY(add_tensor(groups + GROUP_BLOCKS * nf, st, nm));
        }
    }
    if (cfg->tie_word_embeddings) return add_embedding(groups + GROUP_LMHEAD * nf, st, d, NULL, embed_rows);
    TRY(add_tensor(groups + GROUP_LMHEAD * nf, st, "lm_head.weight"));
    return add_embedding(groups + GROUP_EMBED * nf, st, d, spec->embed_rows, embed_rows);
}

static void free_groups(Ranges *groups, size_t nf) {
    if (!groups) return;
    for (size_t i = 0; i < GROUP_COUNT * nf; i++) mem_free(groups[i].r);
    mem_free(groups);
}

/* The ranges of groups 0..g in file f, merged into one list (heap). */
static ByteRange *gather(const Ranges *groups, size_t nf, int g, size_t f, size_t *n) {
    size_t total = 0;
    for (int k = 0; k <= g; k++) total += groups[k * nf + f].n;
    ByteRange *all = mem_alloc((total ? total : 1) * sizeof *all);
    if (!all) return NULL;
    *n = 0;
    for (int k = 0; k <= g; k++) {
        const Ranges *rs = &groups[k * nf + f];
        if (!rs->n) continue;
        memcpy(all + *n, rs->r, rs->n * sizeof *all);
        *n += rs->n;
    }
    return all;
}

int model_plan_weights(const char *model_dir, const ModelConfig *cfg, const ModelSpec *spec, MemPlan *plan) {
    StModel st;
    TRY(st_model_open(&st, model_dir, true));
    int rc = 0;
    Dims d;
    const StTensor *e = st_model_find(&st, "model.embed_tokens.weight");
    if (!e) rc = error_set("%s: tensor model.embed_tokens.weight is missing", model_dir);
    if (rc == 0) rc = dims_init(&d, cfg, spec, e->dtype);
    size_t nf = st.n_files;
    Ranges *groups = mem_calloc(GROUP_COUNT * nf, sizeof *groups);
    if (!groups) rc = -1;
    size_t embed_rows = 0;
    if (rc == 0) rc = collect(&st, cfg, spec, &d, groups, &embed_rows);
    /* each group is charged the pages it adds to the groups before it, so
     * a page two tensors share is counted once */
    size_t pg = file_page_size(), pages_by_group[GROUP_COUNT] = {0};
    for (size_t f = 0; rc == 0 && f < nf; f++) {
        size_t before = 0;
        for (int g = 0; g < GROUP_COUNT && rc == 0; g++) {
            size_t n;
            ByteRange *all = gather(groups, nf, g, f, &n);
            if (!all) {
                rc = -1;
                break;
            }
            size_t upto = file_pages_covering(all, n, st.files[f].file_size);
            mem_free(all);
            pages_by_group[g] += upto - before;
            before = upto;
        }
    }
    char nm[96];
    int frozen = spec->type == TUNE_FULL ? d.lo : d.L;
    if (rc == 0 && pages_by_group[GROUP_BLOCKS]) {
        snprintf(nm, sizeof nm, "%d blocks' matrices (mapped file, %s)", frozen, dtype_name(d.file_dtype));
        rc = plan_note(plan, MEM_FROZEN_WEIGHTS, nm, pages_by_group[GROUP_BLOCKS] * pg, false);
    }
    if (rc == 0 && pages_by_group[GROUP_LMHEAD]) {
        const char *what = cfg->tie_word_embeddings ? "embedding = LM head" : "lm_head.weight";
        snprintf(nm, sizeof nm, "%s (mapped file)", what);
        rc = plan_note(plan, MEM_FROZEN_WEIGHTS, nm, pages_by_group[GROUP_LMHEAD] * pg, false);
    }
    if (rc == 0 && pages_by_group[GROUP_EMBED]) {
        snprintf(nm, sizeof nm, "embedding: the pages of the %zu of %d rows the data reads", embed_rows, d.V);
        rc = plan_note(plan, MEM_FROZEN_WEIGHTS, nm, pages_by_group[GROUP_EMBED] * pg, false);
    }
    free_groups(groups, nf);
    st_model_close(&st);
    return rc;
}

int model_keep_resident(Model *m) {
    if (!m->st_open) return 0;
    size_t nf = m->st.n_files;
    Ranges *groups = mem_calloc(GROUP_COUNT * nf, sizeof *groups);
    if (!groups) return -1;
    size_t rows;
    int rc = collect(&m->st, &m->cfg, &m->spec, &m->d, groups, &rows);
    for (size_t f = 0; rc == 0 && f < nf; f++) {
        size_t n;
        ByteRange *all = gather(groups, nf, GROUP_COUNT - 1, f, &n);
        rc = all ? file_map_keep(&m->st.files[f].map, all, n) : -1;
        mem_free(all);
    }
    free_groups(groups, nf);
    return rc;
}

/* n elements of src (dtype st) to dst (dtype dt), in parallel pieces. */
static void convert_chunk(void *dst, DType dt, const void *src, DType st, size_t n) {
    enum { PIECE = 4096 };
    size_t pieces = (n + PIECE - 1) / PIECE;
    size_t ss = (size_t)dtype_bits(st) / 8, ds = (size_t)dtype_bits(dt) / 8;
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < pieces; c++) {
        float buf[PIECE];
        size_t b = c * PIECE, k = n - b < PIECE ? n - b : PIECE;
        dtype_to_f32(buf, (const char *)src + b * ss, st, k);
        dtype_from_f32((char *)dst + b * ds, dt, buf, k);
    }
}

int model_read_tensor(const Model *m, const StTensor *t, void *dst, DType dst_type, size_t n) {
    const StFile *f = NULL;
    for (size_t i = 0; i < m->st.n_files && !f; i++)
        if (t >= m->st.files[i].tensors && t < m->st.files[i].tensors + m->st.files[i].n_tensors) f = &m->st.files[i];
    if (!f) return error_set("%s: tensor %s is not in the model's files", m->st.dir, t->name);
    size_t es = (size_t)dtype_bits(t->dtype) / 8, ds = (size_t)dtype_bits(dst_type) / 8;
    if (n * es != t->end - t->begin)
        return error_set("%s: tensor %s has %zu bytes, %zu expected", f->path, t->name, t->end - t->begin, n * es);
    int fd = open(f->path, O_RDONLY);
    if (fd < 0) return error_set("%s: cannot open: %s", f->path, strerror(errno));
    /* chunks of 64 Ki elements through a heap buffer of at most 256 KiB: a
     * transient far below what the run holds later (its primitives alone) */
    enum { CH = 1 << 16 };
    unsigned char *buf = mem_alloc((size_t)CH * es);
    int rc = buf ? 0 : -1;
    size_t base = 8 + f->header_len + t->begin;
    for (size_t done = 0; rc == 0 && done < n; done += CH) {
        size_t k = n - done < CH ? n - done : CH, want = k * es, got = 0;
        while (got < want) {
            ssize_t r = pread(fd, buf + got, want - got, (off_t)(base + done * es + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                const char *why = r < 0 ? strerror(errno) : "short file";
                rc = error_set("%s: cannot read tensor %s: %s", f->path, t->name, why);
                break;
            }
            got += (size_t)r;
        }
        if (rc < 0) break;
        if (dst_type == t->dtype) memcpy((unsigned char *)dst + done * ds, buf, want);
        else convert_chunk((unsigned char *)dst + done * ds, dst_type, buf, t->dtype, k);
    }
    mem_free(buf);
    close(fd);
    return rc;
}

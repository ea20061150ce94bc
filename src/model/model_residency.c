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
#include "formats/model_tensors.h"
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

/* The stored tensors of a module: module.weight, or its codes, scales and
 * biases when it is MLX-quantized. */
static int module_tensors(const StModel *st, const QuantConfig *qc, const char *module, int rows, int cols,
                          const StTensor *t[3], int *n) {
    QuantParams qp;
    int q = qc ? quant_module(qc, st, module, &qp) : 0;
    TRY(q);
    if (q == 1) {
        QuantTensors qt;
        TRY(quant_module_tensors(st, module, rows, cols, &qp, &qt));
        t[0] = qt.codes;
        t[1] = qt.scales;
        t[2] = qt.biases;
        *n = 3;
        return 0;
    }
    char name[200];
    snprintf(name, sizeof name, "%s.weight", module);
    t[0] = st_model_find(st, name);
    if (!t[0]) return error_set("%s: tensor %s is missing", st->dir, name);
    *n = 1;
    return 0;
}

static size_t file_of(const StModel *st, const StTensor *t) {
    for (size_t i = 0; i < st->n_files; i++)
        if (t >= st->files[i].tensors && t < st->files[i].tensors + st->files[i].n_tensors) return i;
    return 0;
}

/* A module's stored tensors: every byte, or only the rows set in rows_used. */
static int add_module(Ranges *per_file, const StModel *st, const QuantConfig *qc, const char *module, int rows,
                      int cols, const uint64_t *rows_used, size_t *rows_read) {
    const StTensor *t[3];
    int n = 0;
    TRY(module_tensors(st, qc, module, rows, cols, t, &n));
    if (rows_read) *rows_read = 0;
    for (int i = 0; i < n; i++) {
        size_t f = file_of(st, t[i]);
        size_t base = 8 + st->files[f].header_len;
        if (!rows_used) {
            TRY(ranges_push(&per_file[f], base + t[i]->begin, base + t[i]->end));
            if (rows_read) *rows_read = (size_t)rows;
            continue;
        }
        size_t row_bytes = (t[i]->end - t[i]->begin) / (size_t)rows;
        size_t count = 0;
        for (int v = 0; v < rows; v++) {
            if (!(rows_used[v >> 6] >> (v & 63) & 1u)) continue;
            size_t b = base + t[i]->begin + (size_t)v * row_bytes;
            TRY(ranges_push(&per_file[f], b, b + row_bytes));
            count++;
        }
        if (rows_read) *rows_read = count;
    }
    return 0;
}

/* The ranges of each group, per file: groups[g * n_files + file]. */
static int collect(const StModel *st, const QuantConfig *qc, const ModelConfig *cfg, const ModelSpec *spec,
                   const Dims *d, Ranges *groups, size_t *embed_rows) {
    *embed_rows = 0;
    size_t nf = st->n_files;
    if (d->convert) return 0;   /* every matrix is converted into the arena */
    char module[160], embed[160], head[160];
    for (int l = 0; l < d->L; l++) {
        if (spec->type == TUNE_FULL && l >= d->lo) continue;  /* copied to fp32 masters */
        unsigned projs = layer_projs(cfg, l);   /* the block kind's projections (Qwen3.5) */
        for (int p = 0; p < PROJ_COUNT; p++) {
            if (!(projs >> p & 1u)) continue;
            int in, out;
            proj_shape(d, p, &in, &out);
            model_module_name(cfg, module, sizeof module, "model.layers.%d.%s", l, PROJ_KEYS[p]);
            TRY(add_module(groups + GROUP_BLOCKS * nf, st, qc, module, out, in, NULL, NULL));
        }
    }
    model_module_name(cfg, embed, sizeof embed, "model.embed_tokens");
    if (cfg->tie_word_embeddings)
        return add_module(groups + GROUP_LMHEAD * nf, st, qc, embed, d->V, d->C, NULL, embed_rows);
    model_module_name(cfg, head, sizeof head, "lm_head");
    TRY(add_module(groups + GROUP_LMHEAD * nf, st, qc, head, d->V, d->C, NULL, NULL));
    return add_module(groups + GROUP_EMBED * nf, st, qc, embed, d->V, d->C, spec->embed_rows, embed_rows);
}

/* The same groups for a GGUF file (one file): each matrix's ggml blocks as
 * stored, the embedding's rows of the ids the run reads. Norms and biases
 * are converted at load; the metadata (the tokenizer's tables) is read at
 * start-up: neither is kept. */
static int gguf_add(Ranges *rs, const GgufFile *g, const GgufArch *a, const char *module,
                    const uint64_t *rows_used, size_t *rows_read) {
    char name[200];
    snprintf(name, sizeof name, "%s.weight", module);
    const GgufTensorInfo *t = gguf_model_tensor(g, a, name);
    if (!t) return error_set("%s: tensor for %s is missing", g->name, name);
    size_t base = g->data_start + t->offset;
    int64_t rows = t->n_dims >= 2 ? t->ne[1] : 1;
    if (rows_read) *rows_read = (size_t)rows;
    if (!rows_used) return ranges_push(rs, base, base + t->bytes);
    size_t row_bytes = t->bytes / (size_t)rows, count = 0;
    for (int64_t v = 0; v < rows; v++) {
        if (!(rows_used[v >> 6] >> (v & 63) & 1u)) continue;
        size_t b = base + (size_t)v * row_bytes;
        TRY(ranges_push(rs, b, b + row_bytes));
        count++;
    }
    if (rows_read) *rows_read = count;
    return 0;
}

static int collect_gguf(const GgufFile *g, const GgufArch *a, const ModelConfig *cfg, const ModelSpec *spec,
                        const Dims *d, Ranges *groups, size_t *embed_rows) {
    *embed_rows = 0;
    char module[160];
    for (int l = 0; l < d->L; l++) {
        unsigned projs = layer_projs(cfg, l);
        for (int p = 0; p < PROJ_COUNT; p++) {
            if (!(projs >> p & 1u)) continue;
            snprintf(module, sizeof module, "model.layers.%d.%s", l, PROJ_KEYS[p]);
            TRY(gguf_add(&groups[GROUP_BLOCKS], g, a, module, NULL, NULL));
        }
    }
    if (cfg->tie_word_embeddings) return gguf_add(&groups[GROUP_LMHEAD], g, a, "model.embed_tokens", NULL, embed_rows);
    TRY(gguf_add(&groups[GROUP_LMHEAD], g, a, "lm_head", NULL, NULL));
    return gguf_add(&groups[GROUP_EMBED], g, a, "model.embed_tokens", spec->embed_rows, embed_rows);
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
    WeightsSummary ws;
    TRY(model_weights_summary(model_dir, cfg, &ws));
    bool gguf = ws.gguf;
    QuantConfig qc = {0};
    StModel st = {0};
    GgufFile gg = {0};
    ModelConfig *resolved = NULL;
    int rc = 0;
    if (gguf) {
        TRY(gguf_open(&gg, model_dir));
    } else {
        char *cfg_path = path_join(model_dir, "config.json");
        TRY_PTR(cfg_path);
        rc = quant_config_load(&qc, cfg_path);
        mem_free(cfg_path);
        TRY(rc);
        if (st_model_open(&st, model_dir, true) < 0) {
            quant_config_free(&qc);
            return -1;
        }
        if (cfg->q35.on) {
            /* Qwen3.5: the names and layout of the files (model_tensors_resolve) */
            resolved = mem_alloc(sizeof *resolved);
            rc = resolved ? 0 : -1;
            if (rc == 0) {
                *resolved = *cfg;
                rc = model_tensors_resolve(resolved, &st);
                cfg = resolved;
            }
        }
    }
    Dims d;
    if (rc == 0) rc = dims_init(&d, cfg, spec, ws.file_dtype);
    if (rc == 0) rc = dims_apply_summary(&d, spec, &ws);
    size_t nf = gguf ? 1 : st.n_files;
    Ranges *groups = mem_calloc(GROUP_COUNT * nf, sizeof *groups);
    if (!groups) rc = -1;
    size_t embed_rows = 0;
    const GgufArch *arch = gguf ? gguf_arch_for(cfg->model_type) : NULL;
    if (rc == 0 && gguf && !arch) rc = -1;
    if (rc == 0 && gguf) rc = collect_gguf(&gg, arch, cfg, spec, &d, groups, &embed_rows);
    else if (rc == 0) rc = collect(&st, &qc, cfg, spec, &d, groups, &embed_rows);
    /* each group is charged the pages it adds to the groups before it, so
     * a page two tensors share is counted once */
    size_t pg = file_page_size(), pages_by_group[GROUP_COUNT] = {0};
    for (size_t f = 0; rc == 0 && f < nf; f++) {
        size_t before = 0;
        size_t file_size = gguf ? gg.map.size : st.files[f].file_size;
        for (int g = 0; g < GROUP_COUNT && rc == 0; g++) {
            size_t n;
            ByteRange *all = gather(groups, nf, g, f, &n);
            if (!all) {
                rc = -1;
                break;
            }
            size_t upto = file_pages_covering(all, n, file_size);
            mem_free(all);
            pages_by_group[g] += upto - before;
            before = upto;
        }
    }
    char nm[96];
    int frozen = spec->type == TUNE_FULL ? d.lo : d.L;
    if (rc == 0 && pages_by_group[GROUP_BLOCKS]) {
        if (gguf)
            snprintf(nm, sizeof nm, "%d blocks' matrices (mapped GGUF file, %d-%d bits per weight with scales)",
                     frozen, ws.bits_min, ws.bits_max);
        else if (ws.quantized)
            snprintf(nm, sizeof nm, "%d blocks' matrices (mapped file, %d-%d-bit codes + %s scales/biases)", frozen,
                     ws.bits_min, ws.bits_max, dtype_name(ws.file_dtype));
        else
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
    if (gguf) gguf_close(&gg);
    else st_model_close(&st);
    quant_config_free(&qc);
    mem_free(resolved);
    return rc;
}

int model_keep_resident(Model *m) {
    if (!m->st_open && !m->gguf) return 0;
    size_t nf = m->gguf ? 1 : m->st.n_files;
    Ranges *groups = mem_calloc(GROUP_COUNT * nf, sizeof *groups);
    if (!groups) return -1;
    size_t rows;
    int rc;
    if (m->gguf) rc = collect_gguf(&m->gg, m->gg_arch, &m->cfg, &m->spec, &m->d, groups, &rows);
    else rc = collect(&m->st, &m->qc, &m->cfg, &m->spec, &m->d, groups, &rows);
    for (size_t f = 0; rc == 0 && f < nf; f++) {
        size_t n;
        ByteRange *all = gather(groups, nf, GROUP_COUNT - 1, f, &n);
        const MappedFile *map = m->gguf ? &m->gg.map : &m->st.files[f].map;
        rc = all ? file_map_keep(map, all, n) : -1;
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

/* checkpoint.c: adapters in MLX-LM's safetensors layout and the full
 * training state for an exact resume (see checkpoint.h). Scalars go in the
 * safetensors metadata as text; doubles as hex floats so they round-trip. */
#include "train/checkpoint.h"
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "formats/safetensors.h"

static const char *const MLX_META_KEYS[] = {"format"};
static const char *const MLX_META_VALUES[] = {"mlx"};

int checkpoint_save_adapters(const char *path, const TrainableTensor *t, size_t n) {
    StWriteTensor *w = mem_calloc(n ? n : 1, sizeof *w);
    TRY_PTR(w);
    for (size_t i = 0; i < n; i++) {
        w[i].name = t[i].name;
        w[i].dtype = DTYPE_F32;
        w[i].ndim = t[i].ndim;
        for (int d = 0; d < t[i].ndim; d++) w[i].shape[d] = t[i].shape[d];
        w[i].data = t[i].value;
    }
    int rc = st_write(path, w, n, MLX_META_KEYS, MLX_META_VALUES, 1);
    mem_free(w);
    return rc;
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    /* Python tuple style, as MLX-LM prints shapes: (8,) or (16, 8). */
    size_t k = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, ndim == 1 ? ",)" : ")");
}

static TrainableTensor *find_tensor(TrainableTensor *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++) if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

static bool same_shape(const StTensor *s, const TrainableTensor *t) {
    if (s->ndim != t->ndim) return false;
    for (int d = 0; d < t->ndim; d++) if (s->shape[d] != t->shape[d]) return false;
    return true;
}

int checkpoint_load_adapters(const char *path, TrainableTensor *t, size_t n) {
    if (!file_exists(path)) return error_set("The adapter path does not exist: %s", path);
    StFile f;
    TRY(st_open(&f, path));
    /* Collect every incompatible tensor first, as MLX-LM lists them all. */
    size_t cap = 256, len = 0;
    char *msg = mem_alloc(cap);
    if (!msg) {
        st_close(&f);
        return -1;
    }
    msg[0] = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const StTensor *s = &f.tensors[i];
        const TrainableTensor *p = find_tensor(t, n, s->name);
        char line[512];
        if (!p) {
            snprintf(line, sizeof line, "\n  %s: not an adapter parameter in the model", s->name);
        } else if (!same_shape(s, p)) {
            char a[96], b[96];
            shape_text(a, sizeof a, s->ndim, s->shape);
            shape_text(b, sizeof b, p->ndim, p->shape);
            snprintf(line, sizeof line, "\n  %s: adapter shape %s does not match model parameter shape %s", s->name, a,
                     b);
        } else if (s->dtype != DTYPE_F32 && s->dtype != DTYPE_BF16 && s->dtype != DTYPE_F16) {
            snprintf(line, sizeof line, "\n  %s: dtype %s is not a floating-point type", s->name, dtype_name(s->dtype));
        } else {
            continue;
        }
        size_t l = strlen(line);
        if (len + l + 1 > cap) {
            char *grown = mem_realloc(msg, (cap = 2 * (len + l + 1)));
            if (!grown) {
                mem_free(msg);
                st_close(&f);
                return -1;
            }
            msg = grown;
        }
        memcpy(msg + len, line, l + 1);
        len += l;
    }
    if (len) {
        error_set("Adapter at %s contains incompatible tensors:%s", path, msg);
        mem_free(msg);
        st_close(&f);
        return -1;
    }
    mem_free(msg);
    for (size_t i = 0; i < f.n_tensors; i++) {
        const StTensor *s = &f.tensors[i];
        TrainableTensor *p = find_tensor(t, n, s->name);
        dtype_to_f32(p->value, s->data, s->dtype, p->numel);
    }
    st_close(&f);
    return 0;
}

/* ---- training state ---- */

void checkpoint_fingerprint(const char *description, const TrainableTensor *t, size_t n,
                            const OptimizerConfig *opt, char out[17]) {
    uint64_t h = 1469598103934665603ull;
#define FNV(ptr, len) \
    do { \
        const unsigned char *p_ = (const unsigned char *)(ptr); \
        for (size_t k_ = 0; k_ < (len); k_++) { \
            h ^= p_[k_]; \
            h *= 1099511628211ull; \
        } \
    } while (0)
    if (description) FNV(description, strlen(description));
    for (size_t i = 0; i < n; i++) {
        FNV(t[i].name, strlen(t[i].name));
        FNV(&t[i].ndim, sizeof t[i].ndim);
        FNV(t[i].shape, sizeof(int64_t) * (size_t)t[i].ndim);
    }
    FNV(&opt->kind, sizeof opt->kind);
#undef FNV
    snprintf(out, 17, "%016" PRIx64, h);
}

/* FNV-1a 64 over the tensors' names and bytes, in file order: a flipped byte
 * or a torn write in a state is detected on load. */
static uint64_t content_hash(const StWriteTensor *w, size_t n, const StFile *f) {
    uint64_t h = 1469598103934665603ull;
#define MIX(ptr, len) \
    do { \
        const unsigned char *p_ = (const unsigned char *)(ptr); \
        size_t l_ = (len); \
        for (size_t k_ = 0; k_ < l_; k_++) { \
            h ^= p_[k_]; \
            h *= 1099511628211ull; \
        } \
    } while (0)
    if (w) {
        for (size_t i = 0; i < n; i++) {
            size_t numel = 1;
            for (int d = 0; d < w[i].ndim; d++) numel *= (size_t)w[i].shape[d];
            MIX(w[i].name, strlen(w[i].name));
            MIX(w[i].data, numel * sizeof(float));
        }
    } else {
        /* The reader keeps tensors sorted by name; hash in the writer's
         * order, which is recorded as the order of data offsets. */
        size_t *order = mem_calloc(f->n_tensors ? f->n_tensors : 1, sizeof *order);
        if (!order) return 0;
        for (size_t i = 0; i < f->n_tensors; i++) order[i] = i;
        for (size_t i = 1; i < f->n_tensors; i++)
            for (size_t j = i; j > 0 && f->tensors[order[j - 1]].begin > f->tensors[order[j]].begin; j--) {
                size_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        for (size_t i = 0; i < f->n_tensors; i++) {
            const StTensor *t = &f->tensors[order[i]];
            MIX(t->name, strlen(t->name));
            MIX(t->data, t->end - t->begin);
        }
        mem_free(order);
    }
#undef MIX
    return h;
}

#define MAX_META 24
typedef struct {
    const char *keys[MAX_META];
    char values[MAX_META][96];
    const char *vptr[MAX_META];
    size_t n;
} Meta;
static void meta_add(Meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_add(Meta *m, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->values[m->n], sizeof m->values[m->n], fmt, ap);
    va_end(ap);
    m->keys[m->n] = key;
    m->vptr[m->n] = m->values[m->n];
    m->n++;
}

int checkpoint_save_state(const char *path, const TrainState *s, const Optimizer *opt,
                          const TrainableTensor *t, size_t n, const char *fingerprint) {
    /* Tensors: param/NAME, grad/NAME (only mid-accumulation), opt/NAME/KEY. */
    size_t cap = n * 6 + 1, k = 0;
    StWriteTensor *w = mem_calloc(cap, sizeof *w);
    char (*names)[160] = mem_calloc(cap, sizeof *names);
    if (!w || !names) {
        mem_free(w);
        mem_free(names);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(names[k], sizeof names[k], "param/%s", t[i].name);
        w[k] = (StWriteTensor){names[k], DTYPE_F32, t[i].ndim, {t[i].shape[0], t[i].shape[1], t[i].shape[2]},
                               t[i].value};
        k++;
        if (s->accum_count > 0) {
            snprintf(names[k], sizeof names[k], "grad/%s", t[i].name);
            w[k] = (StWriteTensor){names[k], DTYPE_F32, t[i].ndim, {t[i].shape[0], t[i].shape[1], t[i].shape[2]},
                                   t[i].grad};
            k++;
        }
        OptStateView v[4];
        int nv = optimizer_state_views(opt, i, v);
        for (int j = 0; j < nv; j++) {
            snprintf(names[k], sizeof names[k], "opt/%s/%s", t[i].name, v[j].key);
            w[k] = (StWriteTensor){names[k], DTYPE_F32, 1, {(int64_t)v[j].numel}, v[j].data};
            k++;
        }
    }
    Meta m = {0};
    meta_add(&m, "format", "lmtune-training-state");
    meta_add(&m, "version", "1");
    meta_add(&m, "fingerprint", "%s", fingerprint);
    meta_add(&m, "optimizer", "%s", optimizer_name(opt->cfg.kind));
    meta_add(&m, "updates", "%" PRIu64, opt->step);
    meta_add(&m, "iteration", "%" PRIu64, s->iteration);
    meta_add(&m, "micro_batches", "%" PRIu64, s->micro_batches);
    meta_add(&m, "accum_count", "%d", s->accum_count);
    meta_add(&m, "accum_tokens", "%a", s->accum_tokens);
    meta_add(&m, "accum_bad", "%d", s->accum_bad ? 1 : 0);
    meta_add(&m, "dropout_rng", "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64,
             s->dropout_rng.s[0], s->dropout_rng.s[1], s->dropout_rng.s[2], s->dropout_rng.s[3]);
    meta_add(&m, "skipped_total", "%" PRIu64, s->skipped_total);
    meta_add(&m, "nonfinite_streak", "%d", s->nonfinite_streak);
    meta_add(&m, "trained_tokens", "%" PRIu64, s->trained_tokens);
    meta_add(&m, "window_loss", "%a", s->window_loss);
    meta_add(&m, "window_tokens", "%ld", s->window_tokens);
    meta_add(&m, "window_steps", "%d", s->window_steps);
    meta_add(&m, "window_loss_steps", "%d", s->window_loss_steps);
    meta_add(&m, "window_grad_norms", "%a %a %d %d", s->window_norm_sum, s->window_norm_max, s->window_updates,
             s->window_clipped);
    meta_add(&m, "content_hash", "%016" PRIx64, content_hash(w, k, NULL));
    /* Keep the previous state as a second name of the same file (a hard
     * link): the new one replaces `path` atomically, the old one stays
     * reachable as .prev, and the load falls back to it if the newest is
     * damaged. A failed write leaves `path` itself unchanged. */
    char *prev = mem_alloc(strlen(path) + 8);
    if (!prev) {
        mem_free(w);
        mem_free(names);
        return -1;
    }
    sprintf(prev, "%s.prev", path);
    if (file_exists(path)) {
        unlink(prev);
        if (link(path, prev) != 0) unlink(prev);   /* no hard links here: no fallback copy */
    }
    mem_free(prev);
    int rc = st_write(path, w, k, m.keys, m.vptr, m.n);
    mem_free(w);
    mem_free(names);
    return rc;
}

static int meta_u64(const StFile *f, const char *path, const char *key, uint64_t *out) {
    const char *v = st_meta(f, key);
    char *end;
    if (!v || !*v) return error_set("%s: metadata \"%s\" is missing", path, key);
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || errno) return error_set("%s: metadata \"%s\" is not an unsigned integer: \"%s\"", path, key, v);
    *out = x;
    return 0;
}
static int meta_double(const StFile *f, const char *path, const char *key, double *out) {
    const char *v = st_meta(f, key);
    char *end;
    if (!v || !*v) return error_set("%s: metadata \"%s\" is missing", path, key);
    *out = strtod(v, &end);
    if (*end) return error_set("%s: metadata \"%s\" is not a number: \"%s\"", path, key, v);
    return 0;
}

static int load_tensor(const StFile *f, const char *path, const char *name, float *dst, size_t numel) {
    const StTensor *s = st_find(f, name);
    if (!s) return error_set("%s: tensor \"%s\" is missing", path, name);
    if (s->dtype != DTYPE_F32 || s->nelem != numel)
        return error_set("%s: tensor \"%s\" has %zu %s elements, expected %zu F32", path, name, s->nelem,
                         dtype_name(s->dtype), numel);
    memcpy(dst, s->data, numel * sizeof(float));
    return 0;
}

static int load_state_file(const char *path, TrainState *s, Optimizer *opt,
                           TrainableTensor *t, size_t n, const char *fingerprint) {
    StFile f;
    TRY(st_open(&f, path));
    int rc = -1;
    const char *fmt = st_meta(&f, "format"), *fp = st_meta(&f, "fingerprint"), *on = st_meta(&f, "optimizer");
    if (!fmt || strcmp(fmt, "lmtune-training-state")) {
        error_set("%s: not an lmtune training state", path);
        goto out;
    }
    const char *hash = st_meta(&f, "content_hash");
    char want[17];
    snprintf(want, sizeof want, "%016" PRIx64, content_hash(NULL, 0, &f));
    if (!hash || strcmp(hash, want)) {
        error_set("%s: damaged (content hash mismatch)", path);
        goto out;
    }
    if (!fp || strcmp(fp, fingerprint)) {
        error_set("%s: the saved state belongs to another run (base model, trainable layout or optimizer differ: "
                  "fingerprint %s, this run %s); start without --resume or use another --adapter-path",
                  path, fp ? fp : "none", fingerprint);
        goto out;
    }
    if (!on || strcmp(on, optimizer_name(opt->cfg.kind))) {
        error_set("%s: saved with optimizer %s, this run uses %s", path, on ? on : "?", optimizer_name(opt->cfg.kind));
        goto out;
    }
    memset(s, 0, sizeof *s);
    uint64_t accum_count, accum_bad, streak, wt, ws, wls;
    if (meta_u64(&f, path, "updates", &opt->step) < 0 || meta_u64(&f, path, "iteration", &s->iteration) < 0 ||
        meta_u64(&f, path, "micro_batches", &s->micro_batches) < 0 ||
        meta_u64(&f, path, "accum_count", &accum_count) < 0 ||
        meta_double(&f, path, "accum_tokens", &s->accum_tokens) < 0 ||
        meta_u64(&f, path, "accum_bad", &accum_bad) < 0 || meta_u64(&f, path, "skipped_total", &s->skipped_total) < 0 ||
        meta_u64(&f, path, "nonfinite_streak", &streak) < 0 ||
        meta_u64(&f, path, "trained_tokens", &s->trained_tokens) < 0 ||
        meta_double(&f, path, "window_loss", &s->window_loss) < 0 || meta_u64(&f, path, "window_tokens", &wt) < 0 ||
        meta_u64(&f, path, "window_steps", &ws) < 0 || meta_u64(&f, path, "window_loss_steps", &wls) < 0)
        goto out;
    if (s->iteration > INT32_MAX || accum_count > INT32_MAX || streak > INT32_MAX || wt > INT32_MAX ||
        ws > INT32_MAX || wls > INT32_MAX) {
        error_set("%s: a counter of the training state is out of range (the file is damaged)", path);
        goto out;
    }
    s->accum_count = (int)accum_count;
    s->accum_bad = accum_bad != 0;
    s->nonfinite_streak = (int)streak;
    s->window_tokens = (long)wt;
    s->window_steps = (int)ws;
    s->window_loss_steps = (int)wls;
    /* The report window's gradient norms (only for the history; absent in
     * states written before lmtune kept them: the window then starts empty). */
    const char *gn = st_meta(&f, "window_grad_norms");
    if (gn && (sscanf(gn, "%la %la %d %d", &s->window_norm_sum, &s->window_norm_max, &s->window_updates,
                      &s->window_clipped) != 4 || s->window_updates < 0 || s->window_clipped < 0)) {
        error_set("%s: metadata \"window_grad_norms\" is malformed: \"%s\"", path, gn);
        goto out;
    }
    const char *r = st_meta(&f, "dropout_rng");
    if (!r || strlen(r) != 64) {
        error_set("%s: metadata \"dropout_rng\" is missing or malformed", path);
        goto out;
    }
    for (int i = 0; i < 4; i++) {
        char part[17];
        memcpy(part, r + 16 * i, 16);
        part[16] = 0;
        s->dropout_rng.s[i] = strtoull(part, NULL, 16);
    }
    for (size_t i = 0; i < n; i++) {
        char name[160];
        snprintf(name, sizeof name, "param/%s", t[i].name);
        if (load_tensor(&f, path, name, t[i].value, t[i].numel) < 0) goto out;
        if (s->accum_count > 0) {
            snprintf(name, sizeof name, "grad/%s", t[i].name);
            if (load_tensor(&f, path, name, t[i].grad, t[i].numel) < 0) goto out;
        } else {
            memset(t[i].grad, 0, t[i].numel * sizeof(float));
        }
        OptStateView v[4];
        int nv = optimizer_state_views(opt, i, v);
        for (int j = 0; j < nv; j++) {
            snprintf(name, sizeof name, "opt/%s/%s", t[i].name, v[j].key);
            if (load_tensor(&f, path, name, v[j].data, v[j].numel) < 0) goto out;
        }
    }
    rc = 0;
out:
    st_close(&f);
    return rc;
}

int checkpoint_load_state(const char *path, TrainState *s, Optimizer *opt,
                          TrainableTensor *t, size_t n, const char *fingerprint) {
    char *prev = mem_alloc(strlen(path) + 8);
    TRY_PTR(prev);
    sprintf(prev, "%s.prev", path);
    bool have = file_exists(path), have_prev = file_exists(prev);
    int rc;
    if (!have && !have_prev) {
        rc = error_set("%s: no training state to resume from (run without --resume first, or check --adapter-path)",
                       path);
    } else if (have && load_state_file(path, s, opt, t, n, fingerprint) == 0) {
        rc = 0;
    } else if (have_prev && (!have || (!strstr(error_message(), "belongs to another run") &&
                                       !strstr(error_message(), "out of memory")))) {
        /* The newest state is missing or damaged (a torn write, a flipped
         * byte): the previous one resumes as exactly, from an earlier step. */
        char first[512];
        if (have) snprintf(first, sizeof first, "%s", error_message());
        else snprintf(first, sizeof first, "%s is missing", path);
        rc = load_state_file(prev, s, opt, t, n, fingerprint);
        if (rc == 0) log_warning("%s; resuming from the previous state %s", first, prev);
    } else {
        rc = -1;
    }
    mem_free(prev);
    return rc;
}

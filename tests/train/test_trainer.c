/* test_trainer.c: the training loop on a small synthetic problem whose
 * gradients are exact (a factored bigram model, logits = E[x] U + b, with
 * dropout on E[x]), so every property of the loop can be checked without
 * the decoder: accumulation equals one big batch, exact resume (by --iters
 * stop and by SIGTERM, with dropout and mid-accumulation), the non-finite
 * guard, clipping, validation over a fixed subset, MLX-LM's log lines, the
 * metrics file, MLX-format adapters both ways, and that it learns. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "check.h"
#include "formats/safetensors.h"
#include "train/checkpoint.h"
#include "train/report.h"
#include "train/trainer.h"

enum { V = 11, R = 4, NSEQ = 24, MAXLEN = 12 };

/* ---- the synthetic model ---- */
typedef struct {
    float E[V * R], U[R * V], b[V];
    float gE[V * R], gU[R * V], gb[V];
    TrainableTensor params[3];
    float dropout;
    int calls;
    int stop_at_call;   /* raise SIGTERM-like stop at this forward_backward call */
} Toy;

static void toy_init(Toy *t, float dropout) {
    memset(t, 0, sizeof *t);
    Rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < V * R; i++) t->E[i] = rng_uniform_range(&r, -0.5f, 0.5f);
    for (int i = 0; i < R * V; i++) t->U[i] = rng_uniform_range(&r, -0.5f, 0.5f);
    t->dropout = dropout;
    t->params[0] = (TrainableTensor){"model.layers.0.self_attn.q_proj.lora_a", t->E, t->gE, V * R, 2, {V, R}};
    t->params[1] = (TrainableTensor){"model.layers.0.self_attn.q_proj.lora_b", t->U, t->gU, R * V, 2, {R, V}};
    t->params[2] = (TrainableTensor){"model.layers.0.self_attn.q_proj.m", t->b, t->gb, V, 1, {V, 0}};
}

/* Loss over counted targets; with grad_scale > 0 adds grad_scale * d(mean)/dparams. */
static int toy_run(Toy *t, const Batch *bt, float grad_scale, Rng *rng, bool train, double *loss_sum, long *count) {
    double sum = 0;
    long n = 0;
    for (int r = 0; r < bt->rows; r++)
        for (int j = 0; j + 1 < bt->width; j++) {
            int s = j + 1;
            if (s < bt->offsets[r] || s >= bt->lengths[r]) continue;
            n++;
        }
    for (int r = 0; r < bt->rows; r++)
        for (int j = 0; j + 1 < bt->width; j++) {
            int s = j + 1;
            if (s < bt->offsets[r] || s >= bt->lengths[r]) continue;
            int x = bt->tokens[r * bt->width + j], y = bt->tokens[r * bt->width + s];
            float h[R], mask[R], logits[V], maxl = -1e30f;
            for (int k = 0; k < R; k++) {
                mask[k] = 1;
                if (train && t->dropout > 0) mask[k] = rng_uniform(rng) < t->dropout ? 0 : 1 / (1 - t->dropout);
                h[k] = t->E[x * R + k] * mask[k];
            }
            for (int v = 0; v < V; v++) {
                float z = t->b[v];
                for (int k = 0; k < R; k++) z += h[k] * t->U[k * V + v];
                logits[v] = z;
                if (z > maxl) maxl = z;
            }
            double se = 0;
            for (int v = 0; v < V; v++) se += exp(logits[v] - maxl);
            double lse = maxl + log(se);
            sum += lse - logits[y];
            if (grad_scale == 0) continue;
            float w = grad_scale / (float)n;
            for (int v = 0; v < V; v++) {
                float d = (float)(exp(logits[v] - lse)) - (v == y ? 1.0f : 0.0f);
                d *= w;
                t->gb[v] += d;
                for (int k = 0; k < R; k++) {
                    t->gU[k * V + v] += h[k] * d;
                    t->gE[x * R + k] += t->U[k * V + v] * d * mask[k];
                }
            }
        }
    *loss_sum = sum;
    *count = n;
    return 0;
}

static int toy_fb(void *self, const Batch *b, float grad_scale, Rng *rng, double *loss, long *n) {
    Toy *t = self;
    double s;
    t->calls++;
    if (t->stop_at_call && t->calls == t->stop_at_call) train_request_stop(SIGTERM);
    TRY(toy_run(t, b, grad_scale, rng, true, &s, n));
    *loss = *n ? s / *n : 0;
    return 0;
}
static int toy_loss(void *self, const Batch *b, double *loss_sum, long *n) {
    return toy_run(self, b, 0, NULL, false, loss_sum, n);
}
static Trainee toy_trainee(Toy *t) { return (Trainee){t, t->params, 3, toy_fb, toy_loss}; }

/* ---- the synthetic data ---- */
typedef struct {
    int32_t seq[NSEQ][MAXLEN];
    int len[NSEQ], off[NSEQ];
    int B;              /* rows per batch */
    int group;          /* sequences per batch = B (B * 2 for the "big batch" source) */
    bool shuffle;
    Rng rng;
    int order[NSEQ], n_batches, pos;
    int eval_order[NSEQ], eval_n, eval_pos, eval_split;
    int32_t tokens[2 * NSEQ * MAXLEN], lengths[NSEQ], offsets[NSEQ];
    Batch batch;
} Data;

static void data_init(Data *d, int B, bool shuffle, bool equal_lengths, uint64_t seed) {
    memset(d, 0, sizeof *d);
    Rng r;
    rng_seed(&r, 99);
    for (int i = 0; i < NSEQ; i++) {
        d->len[i] = equal_lengths ? MAXLEN : 6 + (int)rng_below(&r, MAXLEN - 5);
        d->off[i] = equal_lengths ? 0 : (int)rng_below(&r, 3);
        int x = (int)rng_below(&r, V);
        for (int t = 0; t < d->len[i]; t++) {
            d->seq[i][t] = x;
            x = rng_uniform(&r) < 0.9f ? (3 * x + 1) % V : (int)rng_below(&r, V);
        }
    }
    d->B = B;
    d->group = B;
    d->shuffle = shuffle;
    rng_seed(&d->rng, seed);
    d->n_batches = NSEQ / B;
    d->pos = d->n_batches;  /* start a new epoch at the first call */
}

static Batch *make_batch(Data *d, const int *seqs, int rows) {
    int W = 0;
    for (int i = 0; i < rows; i++) if (d->len[seqs[i]] > W) W = d->len[seqs[i]];
    Batch *b = &d->batch;
    b->rows = rows;
    b->width = W;
    b->tokens = d->tokens;
    b->lengths = d->lengths;
    b->offsets = d->offsets;
    b->n_loss_tokens = 0;
    memset(d->tokens, 0, sizeof d->tokens);
    for (int i = 0; i < rows; i++) {
        int s = seqs[i];
        memcpy(d->tokens + i * W, d->seq[s], sizeof(int32_t) * (size_t)d->len[s]);
        d->lengths[i] = d->len[s];
        d->offsets[i] = d->off[s];
        b->n_loss_tokens += d->len[s] - (d->off[s] > 1 ? d->off[s] : 1);
    }
    return b;
}

static int data_train_next(void *self, Batch **out) {
    Data *d = self;
    int groups = NSEQ / d->group;
    if (d->pos >= groups) {
        for (int i = 0; i < groups; i++) d->order[i] = i;
        if (d->shuffle) rng_shuffle_int(&d->rng, d->order, groups);
        d->pos = 0;
    }
    int g = d->order[d->pos++], seqs[NSEQ];
    for (int i = 0; i < d->group; i++) seqs[i] = g * d->group + i;
    *out = make_batch(d, seqs, d->group);
    return 1;
}

/* Validation: a fixed seeded subset of batches of B rows (the last 8 sequences). */
static int data_eval_begin(void *self, EvalSplit split, int num_batches) {
    Data *d = self;
    int total = 8 / d->B;
    d->eval_n = num_batches < 0 || num_batches > total ? total : num_batches;
    Rng r;
    rng_seed(&r, 1234 + (uint64_t)split);
    for (int i = 0; i < total; i++) d->eval_order[i] = i;
    rng_shuffle_int(&r, d->eval_order, total);
    d->eval_pos = 0;
    d->eval_split = split;
    return 1;
}
static int data_eval_next(void *self, Batch **out) {
    Data *d = self;
    if (d->eval_pos >= d->eval_n) return 0;
    int g = d->eval_order[d->eval_pos++], seqs[NSEQ];
    for (int i = 0; i < d->B; i++) seqs[i] = NSEQ - 8 + g * d->B + i;
    *out = make_batch(d, seqs, d->B);
    return 1;
}
static BatchSource data_source(Data *d) { return (BatchSource){d, data_train_next, data_eval_begin, data_eval_next}; }

/* ---- helpers ---- */
static Optimizer make_opt(Arena *arena, OptimizerKind kind, Toy *t) {
    OptimizerConfig oc;
    optimizer_config_default(&oc);
    oc.kind = kind;
    Carver cv = {arena, NULL};
    Optimizer o;
    CHECK(optimizer_layout(&o, &oc, t->params, 3, &cv) == 0);
    return o;
}

static TrainConfig base_cfg(FILE *out) {
    TrainConfig c;
    train_config_default(&c);
    c.out = out;
    c.batch_size = 2;
    c.iters = 12;
    c.steps_per_report = 4;
    c.steps_per_eval = 6;
    c.save_every = 5;
    c.val_batches = 2;
    c.fingerprint = "toy-bigram";
    schedule_init(&c.schedule, NULL, 0.05);
    return c;
}

static bool files_equal(const char *a, const char *b) {
    char *x, *y;
    size_t nx, ny;
    if (file_read_all(a, 0, &x, &nx) < 0) return false;
    if (file_read_all(b, 0, &y, &ny) < 0) { mem_free(x); return false; }
    bool eq = nx == ny && !memcmp(x, y, nx);
    mem_free(x);
    mem_free(y);
    return eq;
}

static char tmpdir[256];
static char *sub(const char *name) {
    static char bufs[8][512];
    static int k = 0;
    char *p = bufs[k++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

/* Runs one training on a fresh toy model. Returns the train_run status. */
static int run_toy(TrainConfig *c, float dropout, OptimizerKind kind, Toy *t, Data *d, int stop_at_call, TrainResult *res) {
    toy_init(t, dropout);
    t->stop_at_call = stop_at_call;
    data_init(d, c->batch_size, true, false, 5);
    Arena arena;
    CHECK(arena_init(&arena, 1 << 16) == 0);
    Optimizer o = make_opt(&arena, kind, t);
    Trainee tr = toy_trainee(t);
    BatchSource src = data_source(d);
    int rc = train_run(&tr, &src, &o, c, res);
    optimizer_free(&o);
    arena_free(&arena);
    train_request_stop(0);
    return rc;
}

/* ---- tests ---- */

static void test_accumulation(void) {
    /* A = 2 micro-batches of B = 2 equal-length rows vs one batch of 4 rows. */
    for (int tokens_mode = 0; tokens_mode < 2; tokens_mode++) {
        Toy t1, t2;
        Data d1, d2;
        toy_init(&t1, 0);
        toy_init(&t2, 0);
        data_init(&d1, 2, false, true, 1);
        data_init(&d2, 4, false, true, 1);
        Arena a1, a2;
        CHECK(arena_init(&a1, 1 << 16) == 0 && arena_init(&a2, 1 << 16) == 0);
        Optimizer o1 = make_opt(&a1, OPT_SGD, &t1), o2 = make_opt(&a2, OPT_SGD, &t2);  /* SGD: linear in the gradient, so a wrong scale shows */
        FILE *devnull = fopen("/dev/null", "w");
        TrainConfig c1 = base_cfg(devnull), c2 = base_cfg(devnull);
        c1.save_every = c2.save_every = 1000;
        c1.loss_tokens = c2.loss_tokens = tokens_mode;
        c1.iters = 12; c1.grad_accum = 2; c1.batch_size = 2;
        c2.iters = 6; c2.grad_accum = 1; c2.batch_size = 4;
        Trainee tr1 = toy_trainee(&t1), tr2 = toy_trainee(&t2);
        BatchSource s1 = data_source(&d1), s2 = data_source(&d2);
        d2.group = 4;
        TrainResult r1, r2;
        CHECK(train_run(&tr1, &s1, &o1, &c1, &r1) == 0);
        CHECK(train_run(&tr2, &s2, &o2, &c2, &r2) == 0);
        CHECK(r1.updates == 6 && r2.updates == 6);
        double e = fmax(rel_error(t1.E, t2.E, V * R), fmax(rel_error(t1.U, t2.U, R * V), rel_error(t1.b, t2.b, V)));
        printf("accumulation (%s): 6 updates of 2x2 vs 4 rows, rel diff %.3g\n", tokens_mode ? "tokens" : "mean", e);
        CHECK(e <= 1e-5);
        CHECK(rel_error(t1.E, (float[V * R]){0}, V * R) > 0);
        fclose(devnull);
        optimizer_free(&o1); optimizer_free(&o2);
        arena_free(&a1); arena_free(&a2);
    }
}

static void test_log_and_files(void) {
    char *log = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&log, &len);
    TrainConfig c = base_cfg(out);
    c.adapter_path = sub("run_log");
    c.metrics_file = sub("metrics.jsonl");
    c.grad_accum = 2;
    Toy t;
    Data d;
    TrainResult res;
    CHECK(run_toy(&c, 0, OPT_ADAM, &t, &d, 0, &res) == 0);
    fclose(out);
    printf("---- log ----\n%s-------------\n", log);
    char want[1024];
    CHECK(strstr(log, "Starting training..., iters: 12\n") != NULL);
    CHECK(strstr(log, "Effective batch size: 2 x 2 x 1 = 4\n") != NULL);
    CHECK(strstr(log, "Iter 1: Val loss ") && strstr(log, "Iter 6: Val loss ") && strstr(log, "Iter 12: Val loss "));
    CHECK(strstr(log, "Iter 4: Train loss ") && strstr(log, "Iter 8: Train loss ") && strstr(log, "Iter 12: Train loss "));
    CHECK(strstr(log, "Iter 5: Train loss ") == NULL);
    snprintf(want, sizeof want, "Iter 5: Saved adapter weights to %s/adapters.safetensors and %s/0000005_adapters.safetensors.\n",
             c.adapter_path, c.adapter_path);
    CHECK(strstr(log, want) != NULL);
    snprintf(want, sizeof want, "Saved final weights to %s/adapters.safetensors.\n", c.adapter_path);
    CHECK(strstr(log, want) != NULL);
    /* The train line's exact shape. */
    const char *line = strstr(log, "Iter 4: Train loss ");
    float loss, lr, its, tps, peak;
    unsigned long long toks;
    CHECK(line && sscanf(line, "Iter 4: Train loss %f, Learning Rate %e, It/sec %f, Tokens/sec %f, Trained Tokens %llu, Peak mem %f GB",
                         &loss, &lr, &its, &tps, &toks, &peak) == 6);
    CHECK_NEAR(lr, 0.05, 1e-9);
    CHECK(peak > 0.0005 && peak < 100 && toks > 0 && its > 0);
    const char *vline = strstr(log, "Iter 1: Val loss ");
    float vl, vt;
    CHECK(vline && sscanf(vline, "Iter 1: Val loss %f, Val took %fs", &vl, &vt) == 2);
    /* Validation is over a fixed subset: the same batches each time, so its
     * value before any update equals a direct evaluation of the fresh model. */
    Toy fresh;
    toy_init(&fresh, 0);
    Trainee ft = toy_trainee(&fresh);
    BatchSource src = data_source(&d);
    double l1, l2;
    long n1, n2;
    bool present;
    CHECK(train_evaluate(&ft, &src, SPLIT_VALID, 2, &l1, &n1, &present) == 0 && present);
    CHECK(train_evaluate(&ft, &src, SPLIT_VALID, 2, &l2, &n2, &present) == 0);
    CHECK(l1 == l2 && n1 == n2);
    CHECK_NEAR(vl, l1, 6e-4);
    /* Files. */
    CHECK(file_exists(sub("run_log/adapters.safetensors")) && file_exists(sub("run_log/0000005_adapters.safetensors")));
    CHECK(file_exists(sub("run_log/0000010_adapters.safetensors")) && file_exists(sub("run_log/" STATE_FILE)));
    CHECK(!file_exists(sub("run_log/0000012_adapters.safetensors")));
    /* Ours has exactly MLX-LM's keys, shapes, dtypes and metadata. */
    StFile f;
    CHECK(st_open(&f, sub("run_log/adapters.safetensors")) == 0);
    CHECK(f.n_tensors == 3 && st_meta(&f, "format") && !strcmp(st_meta(&f, "format"), "mlx"));
    const StTensor *ta = st_find(&f, "model.layers.0.self_attn.q_proj.lora_a");
    const StTensor *tb = st_find(&f, "model.layers.0.self_attn.q_proj.lora_b");
    const StTensor *tm = st_find(&f, "model.layers.0.self_attn.q_proj.m");
    CHECK(ta && ta->dtype == DTYPE_F32 && ta->ndim == 2 && ta->shape[0] == V && ta->shape[1] == R);
    CHECK(tb && tb->dtype == DTYPE_F32 && tb->ndim == 2 && tb->shape[0] == R && tb->shape[1] == V);
    CHECK(tm && tm->dtype == DTYPE_F32 && tm->ndim == 1 && tm->shape[0] == V);
    CHECK(ta && !memcmp(ta->data, t.E, sizeof t.E));
    st_close(&f);
    /* Metrics: 3 reports + 3 evaluations, one JSON object per line. */
    char *m;
    size_t mn;
    CHECK(file_read_all(sub("metrics.jsonl"), 0, &m, &mn) == 0);
    int lines = 0, train_lines = 0;
    for (char *p = m; *p; p++) if (*p == '\n') lines++;
    for (char *p = m; (p = strstr(p, "\"train_loss\"")); p++) train_lines++;
    CHECK(lines == 6 && train_lines == 3);
    CHECK(strstr(m, "\"iterations_per_second\"") && strstr(m, "\"tokens_per_second\"") && strstr(m, "\"trained_tokens\"")
          && strstr(m, "\"peak_memory\"") && strstr(m, "\"learning_rate\"") && strstr(m, "\"val_loss\""));
    mem_free(m);
    /* The run's history in the adapter directory: the same records between
     * a start and an end event (report.h). */
    CHECK(file_read_all(sub("run_log/" HISTORY_FILE), 0, &m, &mn) == 0);
    lines = 0;
    train_lines = 0;
    for (char *p = m; *p; p++) if (*p == '\n') lines++;
    for (char *p = m; (p = strstr(p, "\"train_loss\"")); p++) train_lines++;
    CHECK(lines == 8 && train_lines == 3);
    CHECK(!strncmp(m, "{\"event\": \"start\", \"iteration\": 0, \"iters\": 12, \"resumed\": false", 60));
    CHECK(strstr(m, "{\"event\": \"end\", \"iteration\": 12, \"status\": \"completed\"") != NULL);
    CHECK(strstr(m, "\"grad_norm\": ") && strstr(m, "\"clipped_updates\": 0"));
    mem_free(m);
    free(log);
}

static void test_resume(void) {
    FILE *devnull = fopen("/dev/null", "w");
    Toy t;
    Data d;
    TrainResult res;
    /* Straight: 12 iterations, A = 2, dropout on (the RNG must be restored). */
    TrainConfig c = base_cfg(devnull);
    c.grad_accum = 2;
    c.adapter_path = sub("straight");
    CHECK(run_toy(&c, 0.2f, OPT_ADAMW, &t, &d, 0, &res) == 0 && res.updates == 6);
    /* Stopped by --iters 5 (mid-accumulation), then --resume to 12. */
    c.adapter_path = sub("split");
    c.iters = 5;
    CHECK(run_toy(&c, 0.2f, OPT_ADAMW, &t, &d, 0, &res) == 0 && res.iterations == 5 && res.updates == 2);
    c.iters = 12;
    c.resume = true;
    CHECK(run_toy(&c, 0.2f, OPT_ADAMW, &t, &d, 0, &res) == 0 && res.iterations == 12 && res.updates == 6);
    CHECK_MSG(files_equal(sub("straight/adapters.safetensors"), sub("split/adapters.safetensors")),
              "adapters after --iters 5 + --resume differ from the straight run");
    /* Stopped by SIGTERM during iteration 8 (the step finishes, state saved). */
    c.adapter_path = sub("signal");
    c.resume = false;
    CHECK(run_toy(&c, 0.2f, OPT_ADAMW, &t, &d, 8, &res) == 0 && res.stop_signal == SIGTERM && res.iterations == 8);
    c.resume = true;
    CHECK(run_toy(&c, 0.2f, OPT_ADAMW, &t, &d, 0, &res) == 0 && res.iterations == 12);
    CHECK_MSG(files_equal(sub("straight/adapters.safetensors"), sub("signal/adapters.safetensors")),
              "adapters after SIGTERM + --resume differ from the straight run");
    CHECK(files_equal(sub("straight/0000010_adapters.safetensors"), sub("signal/0000010_adapters.safetensors")));
    /* A state from another run (other fingerprint) is refused. */
    c.fingerprint = "another-model";
    CHECK(run_toy(&c, 0.2f, OPT_ADAMW, &t, &d, 0, &res) < 0);
    CHECK_ERROR_CONTAINS("belongs to another run");
    c.fingerprint = "toy-bigram";
    c.adapter_path = sub("nothing_here");
    CHECK(run_toy(&c, 0.2f, OPT_ADAMW, &t, &d, 0, &res) < 0);
    CHECK_ERROR_CONTAINS("no training state to resume from");
    fclose(devnull);
}

static void test_nonfinite_guard(void) {
    char *log = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&log, &len);
    TrainConfig c = base_cfg(out);
    Toy t;
    Data d;
    TrainResult res;
    setenv("LMTUNE_INJECT_NAN_AT_STEP", "3", 1);
    CHECK(run_toy(&c, 0, OPT_ADAM, &t, &d, 0, &res) == 0);
    fflush(out);
    CHECK(res.skipped_updates == 1 && res.updates == 11);
    CHECK(strstr(log, "Iter 3: non-finite loss, update skipped (1 in a row, 1 in total)") != NULL);
    bool finite = true;
    for (int i = 0; i < V * R; i++) finite &= isfinite(t.E[i]) && isfinite(t.U[i]);
    CHECK(finite);
    /* An infinite gradient with a finite loss. */
    unsetenv("LMTUNE_INJECT_NAN_AT_STEP");
    setenv("LMTUNE_INJECT_INF_GRAD_AT_STEP", "5", 1);
    CHECK(run_toy(&c, 0, OPT_ADAM, &t, &d, 0, &res) == 0);
    unsetenv("LMTUNE_INJECT_INF_GRAD_AT_STEP");
    fflush(out);
    CHECK(res.skipped_updates == 1 && res.updates == 11);
    CHECK(strstr(log, "Iter 5: non-finite gradient, update skipped (1 in a row, 1 in total)") != NULL);
    finite = true;
    for (int i = 0; i < V * R; i++) finite &= isfinite(t.E[i]) && isfinite(t.U[i]);
    CHECK(finite);
    setenv("LMTUNE_INJECT_NAN_AT_STEP", "3-20", 1);
    CHECK(run_toy(&c, 0, OPT_ADAM, &t, &d, 0, &res) < 0);
    CHECK_ERROR_CONTAINS("training stopped at iteration 7: 5 updates in a row had a non-finite loss or gradient");
    unsetenv("LMTUNE_INJECT_NAN_AT_STEP");
    fclose(out);
    free(log);
}

static void test_clipping(void) {
    /* SGD, lr 1, no momentum: one update moves the weights by exactly the clipped gradient. */
    FILE *devnull = fopen("/dev/null", "w");
    TrainConfig c = base_cfg(devnull);
    c.iters = 1;
    c.max_grad_norm = 0.01;
    schedule_init(&c.schedule, NULL, 1.0);
    Toy t, t0;
    Data d;
    TrainResult res;
    toy_init(&t0, 0);
    CHECK(run_toy(&c, 0, OPT_SGD, &t, &d, 0, &res) == 0 && res.updates == 1);
    double moved = 0;
    for (int i = 0; i < V * R; i++) moved += (double)(t.E[i] - t0.E[i]) * (t.E[i] - t0.E[i]) + (double)(t.U[i] - t0.U[i]) * (t.U[i] - t0.U[i]);
    for (int i = 0; i < V; i++) moved += (double)(t.b[i] - t0.b[i]) * (t.b[i] - t0.b[i]);
    CHECK_NEAR(sqrt(moved), 0.01, 1e-5);
    fclose(devnull);
}

/* Learning rate 0: the weights do not move, whatever the optimizer. */
static void test_lr_zero(void) {
    FILE *devnull = fopen("/dev/null", "w");
    const OptimizerKind kinds[] = {OPT_ADAM, OPT_ADAMW, OPT_SGD};
    for (int k = 0; k < 3; k++) {
        TrainConfig c = base_cfg(devnull);
        schedule_init(&c.schedule, NULL, 0.0);
        Toy t, t0;
        Data d;
        TrainResult res;
        toy_init(&t0, 0);
        CHECK(run_toy(&c, 0, kinds[k], &t, &d, 0, &res) == 0 && res.updates == 12);
        CHECK(!memcmp(t.E, t0.E, sizeof t.E) && !memcmp(t.U, t0.U, sizeof t.U) && !memcmp(t.b, t0.b, sizeof t.b));
    }
    fclose(devnull);
}

static void test_learns(void) {
    FILE *devnull = fopen("/dev/null", "w");
    TrainConfig c = base_cfg(devnull);
    c.iters = 300;
    c.steps_per_eval = 300;
    c.steps_per_report = 100;
    c.val_batches = -1;
    schedule_init(&c.schedule, NULL, 0.02);
    Toy t;
    Data d;
    TrainResult res;
    Toy fresh;
    toy_init(&fresh, 0);
    data_init(&d, 2, true, false, 5);
    Trainee ft = toy_trainee(&fresh);
    BatchSource src = data_source(&d);
    double before, after;
    long n;
    bool present;
    CHECK(train_evaluate(&ft, &src, SPLIT_VALID, -1, &before, &n, &present) == 0);
    CHECK(run_toy(&c, 0, OPT_ADAM, &t, &d, 0, &res) == 0);
    after = res.last_val_loss;
    printf("learning: val loss %.3f -> %.3f after 300 Adam steps\n", before, after);
    CHECK(after < before - 0.7);
    fclose(devnull);
}

static void test_mlx_adapter_file(void) {
    /* An adapter written byte by byte as MLX writes it (safetensors, format mlx). */
    Toy t;
    toy_init(&t, 0);
    const char *hdr_fmt = "{\"__metadata__\":{\"format\":\"mlx\"},"
        "\"model.layers.0.self_attn.q_proj.lora_a\":{\"dtype\":\"F32\",\"shape\":[11,4],\"data_offsets\":[0,176]},"
        "\"model.layers.0.self_attn.q_proj.lora_b\":{\"dtype\":\"F32\",\"shape\":[4,11],\"data_offsets\":[176,352]}}";
    char hdr[512];
    snprintf(hdr, sizeof hdr, "%s", hdr_fmt);
    size_t hl = strlen(hdr);
    while (hl % 8) hdr[hl++] = ' ';
    hdr[hl] = 0;
    float a[V * R], b[R * V];
    for (int i = 0; i < V * R; i++) { a[i] = 0.01f * i; b[i] = -0.02f * i; }
    const char *path = sub("mlx_adapters.safetensors");
    FILE *f = fopen(path, "wb");
    uint64_t n = hl;
    fwrite(&n, 8, 1, f);
    fwrite(hdr, 1, hl, f);
    fwrite(a, sizeof a, 1, f);
    fwrite(b, sizeof b, 1, f);
    fclose(f);
    float b_before[V];
    memcpy(b_before, t.b, sizeof b_before);
    CHECK(checkpoint_load_adapters(path, t.params, 3) == 0);
    CHECK(!memcmp(t.E, a, sizeof a) && !memcmp(t.U, b, sizeof b) && !memcmp(t.b, b_before, sizeof b_before));
    /* Wrong shape and a foreign name: MLX-LM's message, every tensor listed. */
    Toy small;
    toy_init(&small, 0);
    small.params[0].shape[1] = 2;
    small.params[0].numel = V * 2;
    snprintf(small.params[1].name, sizeof small.params[1].name, "model.layers.1.mlp.up_proj.lora_b");
    CHECK(checkpoint_load_adapters(path, small.params, 3) < 0);
    CHECK_ERROR_CONTAINS("contains incompatible tensors:\n  model.layers.0.self_attn.q_proj.lora_a: adapter shape (11, 4) does not match model parameter shape (11, 2)");
    CHECK_ERROR_CONTAINS("\n  model.layers.0.self_attn.q_proj.lora_b: not an adapter parameter in the model");
    CHECK(checkpoint_load_adapters(sub("none.safetensors"), t.params, 3) < 0);
    CHECK_ERROR_CONTAINS("The adapter path does not exist");
}

/* A save that fails half-way (as a kill during the write would) leaves the
 * previous adapters in place and loadable: writes are temp + fsync + rename. */
static void test_failed_save_keeps_previous(void) {
    FILE *devnull = fopen("/dev/null", "w");
    TrainConfig c = base_cfg(devnull);
    c.adapter_path = sub("failsave");
    Toy t;
    Data d;
    TrainResult res;
    fileio_fail_write_at(4);   /* saves at 5: commits 1-3; at 10 the first commit fails */
    CHECK(run_toy(&c, 0, OPT_ADAM, &t, &d, 0, &res) < 0);
    CHECK_ERROR_CONTAINS("adapters.safetensors");
    fileio_fail_write_at(0);
    CHECK(files_equal(sub("failsave/adapters.safetensors"), sub("failsave/0000005_adapters.safetensors")));
    Toy back;
    toy_init(&back, 0);
    CHECK(checkpoint_load_adapters(sub("failsave/adapters.safetensors"), back.params, 3) == 0);
    {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", sub("failsave"));
        CHECK(system(cmd) != 0);   /* no temporary file left behind */
    }
    fclose(devnull);
}

/* Allocation failure at every site of save/load, and damaged state files:
 * always an error message, never a crash or a half-loaded state. */
static void test_faults(void) {
    Toy t;
    toy_init(&t, 0);
    Arena arena;
    CHECK(arena_init(&arena, 1 << 16) == 0);
    Optimizer o = make_opt(&arena, OPT_ADAM, &t);
    TrainState st = {.iteration = 3, .micro_batches = 3, .accum_count = 1};
    const char *ap = sub("fault_adapters.safetensors"), *sp = sub("fault_state.safetensors");
    CHECK(checkpoint_save_adapters(ap, t.params, 3) == 0 && checkpoint_save_state(sp, &st, &o, t.params, 3, "fp") == 0);
    int failures = 0;
    for (long n = 1; n <= 60; n++) {
        mem_fail_at(n);
        int a = checkpoint_save_adapters(ap, t.params, 3);
        mem_fail_at(n);
        int b = checkpoint_save_state(sp, &st, &o, t.params, 3, "fp");
        mem_fail_at(n);
        TrainState back;
        int c = checkpoint_load_state(sp, &back, &o, t.params, 3, "fp");
        mem_fail_at(n);
        int d = checkpoint_load_adapters(ap, t.params, 3);
        mem_fail_at(0);
        failures += (a < 0) + (b < 0) + (c < 0) + (d < 0);
        if (a < 0 || b < 0 || c < 0 || d < 0) CHECK(error_message()[0] != 0);
        /* The files on disk stay whole whatever failed. */
        TrainState ok;
        CHECK(checkpoint_load_state(sp, &ok, &o, t.params, 3, "fp") == 0 && ok.iteration == 3);
    }
    CHECK(failures > 0);
    /* A flipped byte in the newest state: detected, the previous one is used. */
    {
        TrainState s4 = st;
        s4.iteration = 4;
        CHECK(checkpoint_save_state(sp, &st, &o, t.params, 3, "fp") == 0);
        CHECK(checkpoint_save_state(sp, &s4, &o, t.params, 3, "fp") == 0);
        FILE *fp = fopen(sp, "r+b");
        fseek(fp, -5, SEEK_END);
        int ch = fgetc(fp);
        fseek(fp, -5, SEEK_END);
        fputc(ch ^ 0x10, fp);
        fclose(fp);
        TrainState back;
        CHECK(checkpoint_load_state(sp, &back, &o, t.params, 3, "fp") == 0 && back.iteration == 3);
        char prev[600];
        snprintf(prev, sizeof prev, "%s.prev", sp);
        unlink(prev);
        CHECK(checkpoint_load_state(sp, &back, &o, t.params, 3, "fp") < 0);
        CHECK_ERROR_CONTAINS("damaged (content hash mismatch)");
    }
    /* Damaged state: truncated, and not a state at all. */
    char *data;
    size_t n;
    CHECK(file_read_all(sp, 0, &data, &n) == 0);
    FILE *f = fopen(sp, "wb");
    fwrite(data, 1, n / 2, f);
    fclose(f);
    TrainState back;
    CHECK(checkpoint_load_state(sp, &back, &o, t.params, 3, "fp") < 0);
    CHECK_ERROR_CONTAINS(sp);
    mem_free(data);
    CHECK(checkpoint_load_state(ap, &back, &o, t.params, 3, "fp") < 0);
    CHECK_ERROR_CONTAINS("not an lmtune training state");
    optimizer_free(&o);
    arena_free(&arena);
}

static void test_config_errors(void) {
    TrainConfig c = base_cfg(stdout);
    c.grad_accum = 0;
    Toy t;
    Data d;
    TrainResult res;
    CHECK(run_toy(&c, 0, OPT_ADAM, &t, &d, 0, &res) < 0);
    CHECK_ERROR_CONTAINS("grad_accumulation_steps must be at least 1");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lmtune_test_trainer_%d", (int)getpid());
    CHECK(dir_ensure(tmpdir) == 0);
    test_accumulation();
    test_log_and_files();
    test_resume();
    test_nonfinite_guard();
    test_clipping();
    test_lr_zero();
    test_learns();
    test_mlx_adapter_file();
    test_failed_save_keeps_previous();
    test_faults();
    test_config_errors();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_finish("train/trainer");
}

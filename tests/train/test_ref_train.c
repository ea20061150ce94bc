/* test_ref_train.c: the trainer on the real decoder against the PyTorch
 * references of tests/ref/data/train_adam and train_sgd (10 MLX-semantics
 * updates on alternating batches: the losses before each update and the
 * final adapters, relative 1e-4); gradient checkpointing on and off giving
 * identical bits; and accumulation of 2 micro-batches of 1 row against one
 * batch of 2 rows with equal token counts (relative 1e-5). */
#include <math.h>
#include "base/alloc.h"
#include "base/error.h"
#include "check.h"
#include "model/model_testutil.h"
#include "train/sources.h"
#include "train/trainer.h"

typedef struct {
    Batch batches[2];
    int n, next;
} FixedSource;

static int fixed_next(void *self, Batch **out) {
    FixedSource *s = self;
    *out = &s->batches[s->next++ % s->n];
    return 1;
}
static int no_eval(void *self, EvalSplit split, int n) { (void)self; (void)split; (void)n; return 0; }
static int no_next(void *self, Batch **out) { (void)self; (void)out; return 0; }

/* Wraps the model trainee to record each micro-batch loss. */
typedef struct { Trainee inner; double losses[64]; int n; } Recorder;
static int rec_fb(void *self, const Batch *b, float scale, Rng *rng, double *loss, long *n) {
    Recorder *r = self;
    TRY(r->inner.forward_backward(r->inner.self, b, scale, rng, loss, n));
    if (r->n < 64) r->losses[r->n++] = *loss;
    return 0;
}

static void batch_from(Batch *b, const StFile *in, int k, int B, int W) {
    char name[32];
    snprintf(name, sizeof name, "tokens_%d", k);
    b->tokens = (int32_t *)st_find(in, name)->data;
    snprintf(name, sizeof name, "lengths_%d", k);
    b->lengths = (int32_t *)st_find(in, name)->data;
    snprintf(name, sizeof name, "offsets_%d", k);
    b->offsets = (int32_t *)st_find(in, name)->data;
    b->rows = B;
    b->width = W;
    b->n_loss_tokens = 0;
    for (int r = 0; r < B; r++) b->n_loss_tokens += batch_row_loss_tokens(b->offsets[r], b->lengths[r]);
}

/* Runs `iters` micro-batches of the case; leaves the trained values in out (heap). */
static int run_case(const RefCase *rc, bool ckpt, OptimizerKind kind, float lr, Batch *batches, int n_batches,
                    int iters, int accum, double *losses, float **out, size_t *out_n) {
    ModelSpec spec = rc->spec;
    spec.grad_checkpoint = ckpt;
    Model *m;
    Arena arena;
    size_t planned;
    char path[700];
    if (load_planned(&m, &arena, &planned, rc->dir, &rc->cfg, &spec, DTYPE_F32) < 0) return -1;
    Trainee tr = model_trainee(m);
    StFile in;
    snprintf(path, sizeof path, "%s/inputs.safetensors", rc->dir);
    CHECK(st_open(&in, path) == 0);
    for (size_t i = 0; i < tr.n_params; i++) {
        const float *v = st_f32(&in, tr.params[i].name, tr.params[i].numel);
        CHECK_MSG(v != NULL, "%s missing from inputs", tr.params[i].name);
        if (v) memcpy(tr.params[i].value, v, tr.params[i].numel * sizeof(float));
    }
    st_close(&in);
    OptimizerConfig oc;
    optimizer_config_default(&oc);
    oc.kind = kind;
    oc.sgd.momentum = 0.9;
    Arena oa;
    CHECK(arena_init(&oa, 1 << 20) == 0);
    Carver cv = {&oa, NULL};
    Optimizer opt;
    CHECK(optimizer_layout(&opt, &oc, tr.params, tr.n_params, &cv) == 0);
    FixedSource fs = {.n = n_batches};
    for (int i = 0; i < n_batches; i++) fs.batches[i] = batches[i];
    BatchSource src = {&fs, fixed_next, no_eval, no_next};
    Recorder rec = {.inner = tr};
    Trainee wrapped = tr;
    wrapped.self = &rec;
    wrapped.forward_backward = rec_fb;
    TrainConfig c;
    train_config_default(&c);
    FILE *devnull = fopen("/dev/null", "w");
    c.out = devnull;
    c.iters = iters;
    c.grad_accum = accum;
    c.steps_per_report = 1000;
    c.steps_per_eval = 1000;
    c.save_every = 0;
    c.val_batches = 0;
    c.batch_size = batches[0].rows;
    schedule_init(&c.schedule, NULL, lr);
    TrainResult res;
    int rc2 = train_run(&wrapped, &src, &opt, &c, &res);
    fclose(devnull);
    if (losses) memcpy(losses, rec.losses, sizeof(double) * (size_t)rec.n);
    size_t total = 0;
    for (size_t i = 0; i < tr.n_params; i++) total += tr.params[i].numel;
    *out = mem_alloc(total * sizeof(float));
    *out_n = total;
    size_t k = 0;
    for (size_t i = 0; i < tr.n_params; i++) { memcpy(*out + k, tr.params[i].value, tr.params[i].numel * 4); k += tr.params[i].numel; }
    optimizer_free(&opt);
    arena_free(&oa);
    model_free(m);
    arena_free(&arena);
    return rc2;
}

static void trajectory(const char *name, OptimizerKind kind, float lr) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/ref/data/%s", name);
    RefCase rc;
    if (refcase_read(&rc, dir, name) < 0) { CHECK_MSG(0, "%s: %s", dir, error_message()); return; }
    StFile in, ex;
    char path[700];
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    CHECK(st_open(&in, path) == 0);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    CHECK(st_open(&ex, path) == 0);
    Batch batches[2];
    for (int k = 0; k < 2; k++) batch_from(&batches[k], &in, k, rc.B, rc.W);
    double losses[10];
    float *w, *w_ckpt;
    size_t n, n2;
    CHECK(run_case(&rc, false, kind, lr, batches, 2, 10, 1, losses, &w, &n) == 0);
    const float *ref_losses = st_f32(&ex, "losses", 10);
    double worst_loss = 0;
    for (int k = 0; ref_losses && k < 10; k++) worst_loss = fmax(worst_loss, fabs(losses[k] - ref_losses[k]) / fabs(ref_losses[k]));
    /* Final adapters, tensor by tensor in the model's order. */
    ModelSpec spec = rc.spec;
    Model *m;
    Arena arena;
    size_t planned;
    CHECK(load_planned(&m, &arena, &planned, dir, &rc.cfg, &spec, DTYPE_F32) == 0);
    TrainableTensor *t;
    size_t nt = model_trainables(m, &t), k = 0;
    double worst_w = 0;
    for (size_t i = 0; i < nt; i++) {
        const float *ref = st_f32(&ex, t[i].name, t[i].numel);
        CHECK_MSG(ref != NULL, "%s missing from expected", t[i].name);
        if (ref) worst_w = fmax(worst_w, rel_error(w + k, ref, t[i].numel));
        k += t[i].numel;
    }
    model_free(m);
    arena_free(&arena);
    printf("%s: 10 updates vs PyTorch: losses rel %.3g (first %.6f ref %.6f), final adapters rel %.3g\n", name,
           worst_loss, losses[0], ref_losses ? ref_losses[0] : NAN, worst_w);
    CHECK(ref_losses && worst_loss <= 1e-4);
    CHECK(worst_w <= 1e-4);
    /* Gradient checkpointing changes no bit. */
    CHECK(run_case(&rc, true, kind, lr, batches, 2, 10, 1, NULL, &w_ckpt, &n2) == 0);
    CHECK(n == n2 && !memcmp(w, w_ckpt, n * sizeof(float)));
    printf("%s: checkpointing on/off: %s\n", name, n == n2 && !memcmp(w, w_ckpt, n * sizeof(float)) ? "identical bits" : "DIFFERENT");
    mem_free(w);
    mem_free(w_ckpt);
    st_close(&in);
    st_close(&ex);
}

static void accumulation(void) {
    const char *dir = "tests/ref/data/train_adam";
    RefCase rc;
    if (refcase_read(&rc, dir, "train_adam") < 0) { CHECK_MSG(0, "%s", error_message()); return; }
    StFile in;
    char path[700];
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    CHECK(st_open(&in, path) == 0);
    const int W = rc.W;
    /* Two full-length rows (equal token counts), no prompt masking. */
    int32_t tok2[2 * 64], len2[2] = {W, W}, off2[2] = {0, 0};
    memcpy(tok2, st_find(&in, "tokens_0")->data, sizeof(int32_t) * 2 * (size_t)W);
    for (int i = 0; i < 2 * W; i++) if (tok2[i] == 0) tok2[i] = 1 + i % 100;
    Batch big = {2, W, tok2, len2, off2, 0}, small[2] = {{1, W, tok2, len2, off2, 0}, {1, W, tok2 + W, len2 + 1, off2 + 1, 0}};
    big.n_loss_tokens = 2 * (W - 1);
    small[0].n_loss_tokens = small[1].n_loss_tokens = W - 1;
    float *a, *b;
    size_t na, nb;
    CHECK(run_case(&rc, false, OPT_SGD, 0.1f, &big, 1, 3, 1, NULL, &a, &na) == 0);   /* SGD: linear in the gradient */
    CHECK(run_case(&rc, false, OPT_SGD, 0.1f, small, 2, 6, 2, NULL, &b, &nb) == 0);
    double e = na == nb ? rel_error(b, a, na) : 1;
    printf("accumulation on the decoder: 3 updates of 2 x 1 row vs 2 rows: rel diff %.3g\n", e);
    CHECK(e <= 1e-5);
    mem_free(a);
    mem_free(b);
    st_close(&in);
}

/* The trainable list planned from config + spec (model_trainable_list, what
 * the planner sizes the moments from) equals the loaded model's, and one
 * arena of the model + optimizer plan is consumed exactly. */
static void planned_trainables(void) {
    const char *cases[] = {"qwen2_bias_untied_full", "qwen3_qknorm_full_bf16", "llama_bias_lora_bf16", "mistral_lora", "train_adam"};
    const TuneType types[] = {TUNE_LORA, TUNE_DORA, TUNE_FULL};
    const int layers[] = {1, -1};
    const unsigned keys[] = {PROJ_ALL, (1u << PROJ_Q) | (1u << PROJ_V) | (1u << PROJ_DOWN)};
    int checked = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/ref/data/%s", cases[c]);
        RefCase rc;
        if (refcase_read(&rc, dir, cases[c]) < 0) { CHECK_MSG(0, "%s", error_message()); continue; }
        for (int ti = 0; ti < 3; ti++) for (int li = 0; li < 2; li++) for (int ki = 0; ki < 2; ki++) {
            if (types[ti] == TUNE_FULL && ki) continue;
            ModelSpec spec = rc.spec;
            spec.type = types[ti];
            spec.num_layers = layers[li];
            spec.lora_keys = keys[ki];
            if (spec.lora_rank == 0) { spec.lora_rank = 3; spec.lora_scale = 2; }
            size_t n;
            TrainableTensor *shapes;
            if (model_trainable_list(&rc.cfg, &spec, &shapes, &n) < 0) { CHECK_MSG(0, "%s", error_message()); continue; }
            DType file_dtype = rc.bf16 ? DTYPE_BF16 : DTYPE_F32;
            MemPlan plan = {0};
            Carver pl = {NULL, &plan};
            OptimizerConfig oc;
            optimizer_config_default(&oc);
            oc.kind = ti == 2 ? OPT_ADAFACTOR : OPT_ADAMW;
            Optimizer probe;
            CHECK(model_layout_dtype(&rc.cfg, &spec, file_dtype, &pl) == 0);
            CHECK(optimizer_layout(&probe, &oc, shapes, n, &pl) == 0);
            optimizer_free(&probe);
            Arena arena;
            CHECK(arena_init(&arena, plan_arena_bytes(&plan)) == 0);
            Model *m;
            if (model_load(&m, dir, &spec, &arena) < 0) { CHECK_MSG(0, "%s: %s", cases[c], error_message()); plan_free(&plan); arena_free(&arena); mem_free(shapes); continue; }
            TrainableTensor *t;
            size_t nt = model_trainables(m, &t);
            bool same = n == nt;
            for (size_t i = 0; same && i < n; i++)
                same = !strcmp(shapes[i].name, t[i].name) && shapes[i].ndim == t[i].ndim && shapes[i].numel == t[i].numel &&
                       shapes[i].shape[0] == t[i].shape[0] && shapes[i].shape[1] == t[i].shape[1];
            CHECK_MSG(same, "%s type %d layers %d: planned trainables differ from the model's", cases[c], ti, layers[li]);
            Carver cv = {&arena, NULL};
            Optimizer o;
            CHECK(optimizer_layout(&o, &oc, t, nt, &cv) == 0);
            CHECK_MSG(arena.used == arena.capacity, "%s: planned %zu, carved %zu", cases[c], arena.capacity, arena.used);
            optimizer_free(&o);
            model_free(m);
            arena_free(&arena);
            plan_free(&plan);
            mem_free(shapes);
            checked++;
        }
    }
    printf("planned trainables = model's, one arena exactly consumed: %d configurations\n", checked);
}

int main(void) {
    planned_trainables();
    trajectory("train_adam", OPT_ADAM, 0.01f);
    trajectory("train_sgd", OPT_SGD, 0.1f);
    accumulation();
    return check_finish("train/ref_train");
}

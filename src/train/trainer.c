/* trainer.c: the training loop (see trainer.h). Order per iteration, as in
 * MLX-LM's trainer.py: validation (iteration 1, every steps_per_eval, the
 * last), the micro-batch step, the update every grad_accum micro-batches,
 * the report (every steps_per_report and the last), the save (every
 * save_every), then a final save. */
#include "train/trainer.h"
#include <math.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/alloc.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/sys.h"
#include "base/profile.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/report.h"

static volatile sig_atomic_t g_stop_signal = 0;

static void on_signal(int signo) { g_stop_signal = signo; }

void train_install_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;   /* a second signal kills at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}
int train_pending_signal(void) { return g_stop_signal; }
void train_request_stop(int signo) { g_stop_signal = signo; }

void train_config_default(TrainConfig *c) {
    memset(c, 0, sizeof *c);
    c->iters = 1000;
    c->grad_accum = 1;
    c->batch_size = 4;
    c->steps_per_report = 10;
    c->steps_per_eval = 200;
    c->save_every = 100;
    c->val_batches = 25;
    schedule_init(&c->schedule, NULL, 1e-5);
    c->out = stdout;
}

int train_evaluate(Trainee *tr, BatchSource *src, EvalSplit split, int num_batches,
                   double *loss, long *n_tokens, bool *present) {
    *loss = NAN;
    *n_tokens = 0;
    int started = src->eval_begin(src->self, split, num_batches);
    TRY(started);
    *present = started == 1;
    if (!*present) return 0;
    double sums[2] = {0, 0};  /* loss sum, token count */
    for (;;) {
        Batch *b;
        int r = src->eval_next(src->self, &b);
        TRY(r);
        if (r == 0) break;
        double s;
        long n;
        TRY(tr->loss(tr->self, b, &s, &n));
        sums[0] += s;
        sums[1] += (double)n;
        rss_snapshot_if_peak();
    }
    TRY(dist_all_sum_doubles(sums, 2));
    *n_tokens = (long)sums[1];
    *loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
    return 0;
}

/* Test hooks, read from the environment once per run, when the loop starts
 * (a release run pays one NULL test per step for them):
 *   LMTUNE_INJECT_NAN_AT_STEP="3" (or "3,7" or "3-9"): those iterations
 *     report a NaN loss and gradient (the non-finite guard's tests);
 *   LMTUNE_INJECT_INF_GRAD_AT_STEP: a finite loss but an infinite gradient;
 *   LMTUNE_TEST_STEP_DELAY_MS=n: sleep n ms after each iteration, so a test
 *     can deliver a signal in the middle of a run of a tiny model. */
typedef struct {
    const char *nan_at;
    const char *inf_grad_at;
    long delay_ms;
} TestHooks;

static TestHooks test_hooks_read(void) {
    TestHooks h;
    h.nan_at = getenv("LMTUNE_INJECT_NAN_AT_STEP");
    h.inf_grad_at = getenv("LMTUNE_INJECT_INF_GRAD_AT_STEP");
    const char *ms = getenv("LMTUNE_TEST_STEP_DELAY_MS");
    h.delay_ms = ms ? strtol(ms, NULL, 10) : 0;
    return h;
}

/* Whether iteration it is in an injection spec ("3", "3,7", "3-9"). */
static bool inject_at(const char *spec, int it) {
    if (!spec) return false;
    const char *p = spec;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) return false;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p) return false;
        }
        if (it >= a && it <= b) return true;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    return false;
}

static void test_step_delay(long n) {
    if (n <= 0) return;
    struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void zero_grads(Trainee *tr) {
    for (size_t i = 0; i < tr->n_params; i++) memset(tr->params[i].grad, 0, tr->params[i].numel * sizeof(float));
}

static double grad_norm(const Trainee *tr) {
    double acc = 0;
    for (size_t i = 0; i < tr->n_params; i++) {
        const float *g = tr->params[i].grad;
        for (size_t j = 0; j < tr->params[i].numel; j++) acc += (double)g[j] * g[j];
    }
    return sqrt(acc);
}

static void scale_grads(Trainee *tr, float divisor) {
    for (size_t i = 0; i < tr->n_params; i++) {
        float *g = tr->params[i].grad;
        for (size_t j = 0; j < tr->params[i].numel; j++) g[j] /= divisor;
    }
}

typedef struct {
    Trainee *tr;
    BatchSource *src;
    Optimizer *opt;
    const TrainConfig *cfg;
    Reporter rep;
    TrainState st;
    char fingerprint[17];
    char *adapters_file, *state_file;
    double window_time;     /* seconds of training steps in the report window (not saved) */
    bool profile;           /* LMTUNE_PROFILE: time the steps by kernel class */
    int profiled_steps;
    double profiled_time;   /* wall (LMTUNE_PROFILE=cpu: CPU) seconds of the profiled steps */
    TestHooks hooks;        /* read when the loop starts */
} Loop;

/* One update from the accumulated gradients; returns -1 only on errors
 * (a skipped non-finite update is not an error until too many in a row). */
static int apply_update(Loop *L, int it) {
    Trainee *tr = L->tr;
    const TrainConfig *cfg = L->cfg;
    if (cfg->loss_tokens) {
        /* Grads hold the sum over micro-batches of n_i * grad(mean_i): divide
         * by the token count of the whole update, across workers. */
        double total = L->st.accum_tokens;
        TRY(sum_gradients(tr->params, tr->n_params));
        TRY(dist_all_sum_doubles(&total, 1));
        if (total > 0) scale_grads(tr, (float)total);
    } else {
        TRY(average_gradients(tr->params, tr->n_params));
        if (cfg->grad_accum > 1) scale_grads(tr, (float)cfg->grad_accum);
    }
    double norm = grad_norm(tr);
    /* Every worker must take the same decision: a NaN loss on one skips the
     * update on all (the reduced gradients, hence the norm, are already equal). */
    double bad = L->st.accum_bad ? 1 : 0;
    TRY(dist_all_sum_doubles(&bad, 1));
    L->st.accum_bad = bad > 0;
    if (L->st.accum_bad || !isfinite(norm)) {
        L->st.skipped_total++;
        L->st.nonfinite_streak++;
        zero_grads(tr);
        if (dist_rank() == 0)
            TRY(report_skip(&L->rep, it, L->st.accum_bad, L->st.nonfinite_streak,
                            (unsigned long long)L->st.skipped_total));
        if (L->st.nonfinite_streak >= TRAIN_MAX_NONFINITE_IN_A_ROW)
            return error_set("training stopped at iteration %d: %d updates in a row had a non-finite loss or "
                             "gradient; lower --learning-rate, set --max-grad-norm, or check the data",
                             it, L->st.nonfinite_streak);
        return 0;
    }
    L->st.nonfinite_streak = 0;
    L->st.window_updates++;
    L->st.window_norm_sum += norm;
    if (norm > L->st.window_norm_max) L->st.window_norm_max = norm;
    if (cfg->max_grad_norm > 0 && norm > cfg->max_grad_norm) {
        L->st.window_clipped++;
        float coef = (float)(cfg->max_grad_norm / (norm + 1e-6));
        for (size_t i = 0; i < tr->n_params; i++) {
            float *g = tr->params[i].grad;
            for (size_t j = 0; j < tr->params[i].numel; j++) g[j] *= coef;
        }
    }
    float lr = (float)schedule_lr(&cfg->schedule, L->opt->step);
    TRY(optimizer_update(L->opt, tr->params, tr->n_params, lr));
    zero_grads(tr);
    return 0;
}

static int save_all(Loop *L, int it, bool numbered) {
    if (!L->cfg->adapter_path || dist_rank() != 0) return 0;
    Trainee *tr = L->tr;
    TRY(checkpoint_save_adapters(L->adapters_file, tr->params, tr->n_params));
    if (numbered) {
        char name[64];
        snprintf(name, sizeof name, "%07d_adapters.safetensors", it);
        char *path = path_join(L->cfg->adapter_path, name);
        TRY_PTR(path);
        int rc = checkpoint_save_adapters(path, tr->params, tr->n_params);
        if (rc == 0) report_saved(&L->rep, it, L->adapters_file, path);
        mem_free(path);
        TRY(rc);
    }
    return checkpoint_save_state(L->state_file, &L->st, L->opt, tr->params, tr->n_params, L->fingerprint);
}

static double reported_lr(const Loop *L) {
    /* MLX's optimizer.learning_rate holds the value of the last update. */
    uint64_t s = L->opt->step;
    return schedule_lr(&L->cfg->schedule, s > 0 ? s - 1 : 0);
}

/* LMTUNE_PROFILE: wall (or CPU) seconds per step by kernel class, over every step
 * of the run but the first; "other" is what no class timed (batch
 * assembly, token checks, the loop itself). */
static void report_profile(Loop *L) {
    double per = 1.0 / L->profiled_steps, step = L->profiled_time * per, timed = 0;
    report_line(&L->rep, "Profile: %s seconds per training step, mean of %d steps (the first step excluded)",
                profile_uses_cpu_time() ? "CPU" : "wall", L->profiled_steps);
    for (int k = 0; k < PROF_COUNT; k++) {
        double s = profile_seconds[k] * per;
        timed += s;
        report_line(&L->rep, "  %-36s %8.4f s %6.1f%%", profile_name((ProfKind)k), s, step > 0 ? 100 * s / step : 0);
    }
    report_line(&L->rep, "  %-36s %8.4f s %6.1f%%", "other", step - timed, step > 0 ? 100 * (step - timed) / step : 0);
    report_line(&L->rep, "  %-36s %8.4f s", "step", step);
}

static int run_loop(Loop *L, TrainResult *res) {
    Trainee *tr = L->tr;
    BatchSource *src = L->src;
    const TrainConfig *cfg = L->cfg;
    TrainState *st = &L->st;
    const int A = cfg->grad_accum;
    int it = (int)st->iteration;
    bool have_valid = true;
    const int first_it = it + 1;
    res->iterations = it;
    res->updates = L->opt->step;
    while (it < cfg->iters) {
        it++;
        if (have_valid && cfg->val_batches != 0 && (it == 1 || it % cfg->steps_per_eval == 0 || it == cfg->iters)) {
            double t0 = time_now(), vloss;
            long vtok;
            TRY(train_evaluate(tr, src, SPLIT_VALID, cfg->val_batches, &vloss, &vtok, &have_valid));
            if (have_valid) {
                double seconds = time_now() - t0;
                /* the tokens trained before this evaluation, over every worker */
                double window_tokens = (double)st->window_tokens;
                TRY(dist_all_sum_doubles(&window_tokens, 1));
                res->last_val_loss = vloss;
                if (dist_rank() == 0) {
                    ValReport v = {it, vloss, seconds, st->trained_tokens + (unsigned long long)window_tokens};
                    TRY(report_val(&L->rep, &v));
                    TRY(report_sync(&L->rep));
                    if (cfg->on_history) TRY(cfg->on_history(cfg->history_ctx));
                }
            }
        }
        /* the first step of a run creates oneDNN's primitives and touches the arena */
        profile_active = L->profile && it > first_it;
        double t0 = time_now(), tp = prof_begin();
        Batch *b;
        int r = src->train_next(src->self, &b);
        TRY(r);
        if (r == 0) return error_set("the training data ended (the training stream must not end)");
        st->micro_batches++;
        float scale = cfg->loss_tokens ? (float)b->n_loss_tokens : 1.0f;
        double loss;
        long ntok;
        TRY(tr->forward_backward(tr->self, b, scale, &st->dropout_rng, &loss, &ntok));
        if (cfg->loss_tokens && ntok != b->n_loss_tokens)
            return error_set("internal: the batch counts %ld loss tokens but the model counted %ld", b->n_loss_tokens,
                             ntok);
        if (inject_at(L->hooks.nan_at, it)) {
            loss = NAN;
            if (tr->n_params) tr->params[0].grad[0] = NAN;
        }
        if (inject_at(L->hooks.inf_grad_at, it) && tr->n_params) tr->params[0].grad[0] = INFINITY;
        if (isfinite(loss)) {
            st->window_loss += loss;
            st->window_loss_steps++;
        } else
            st->accum_bad = true;
        st->window_tokens += ntok;
        st->accum_tokens += (double)ntok;
        st->accum_count++;
        if (st->accum_count == A) {
            double tu = prof_begin();
            TRY(apply_update(L, it));
            prof_end(PROF_UPDATE, tu);
            st->accum_count = 0;
            st->accum_tokens = 0;
            st->accum_bad = false;
        }
        st->window_steps++;
        st->iteration = (uint64_t)it;
        rss_snapshot_if_peak();
        double dt = time_now() - t0;
        if (profile_active) {
            L->profiled_steps++;
            L->profiled_time += profile_clock() - tp;
            profile_active = false;
        }
        L->window_time += dt;
        const double window_time = L->window_time;
        if (dist_rank() == 0 && st->window_loss_steps > 0)
            report_progress(&L->rep, it, cfg->iters, st->window_loss / st->window_loss_steps,
                            window_time > 0 ? st->window_tokens / window_time : 0);
        if (it % cfg->steps_per_report == 0 || it == cfg->iters) {
            double sums[2] = {st->window_loss, (double)st->window_tokens};
            double steps[1] = {(double)st->window_loss_steps};
            TRY(dist_all_sum_doubles(sums, 2));
            TRY(dist_all_sum_doubles(steps, 1));
            st->trained_tokens += (uint64_t)sums[1];
            TrainReport t = {
                .iteration = it,
                .train_loss = steps[0] > 0 ? sums[0] / steps[0] : NAN,
                .learning_rate = reported_lr(L),
                /* MLX-LM's arithmetic, also for a short last window: steps_per_report / time */
                .iterations_per_second = window_time > 0 ? cfg->steps_per_report / window_time : 0,
                .tokens_per_second = window_time > 0 ? sums[1] / window_time : 0,
                .trained_tokens = st->trained_tokens,
                .peak_memory_gb = (double)rss_peak_bytes() / 1e9,
                .arena_high_water = cfg->arena ? cfg->arena->high : 0,
                .plan_total = cfg->plan_total,
                .skipped_updates = st->skipped_total,
                .updates = st->window_updates,
                .grad_norm_mean = st->window_updates ? st->window_norm_sum / st->window_updates : NAN,
                .grad_norm_max = st->window_updates ? st->window_norm_max : NAN,
                .clipped = st->window_clipped,
                .world = dist_world(),
                .comm_seconds = dist_comm_seconds(),
                .comm_calls = dist_comm_calls(),
            };
            if (dist_rank() == 0) TRY(report_train(&L->rep, &t));
            st->window_loss = 0;
            st->window_tokens = 0;
            st->window_steps = 0;
            st->window_loss_steps = 0;
            st->window_norm_sum = 0;
            st->window_norm_max = 0;
            st->window_updates = 0;
            st->window_clipped = 0;
            L->window_time = 0;
        }
        if (cfg->save_every > 0 && it % cfg->save_every == 0) TRY(save_all(L, it, true));
        res->iterations = it;
        res->updates = L->opt->step;
        res->skipped_updates = st->skipped_total;
        test_step_delay(L->hooks.delay_ms);
        /* Workers stop together: a signal seen by any stops all after this iteration. */
        double stop = g_stop_signal;
        if (dist_world() > 1) TRY(dist_all_sum_doubles(&stop, 1));
        if (stop > 0) {
            res->stop_signal = g_stop_signal ? g_stop_signal : SIGTERM;
            if (dist_rank() == 0)
                report_line(&L->rep, "Iter %d: stopped by signal %d; saving the adapters and the training state "
                            "(continue with --resume)", it, res->stop_signal);
            break;
        }
    }
    return 0;
}

/* The end of the history: an "end" record (completed, stopped by a signal,
 * or the error that stopped the run), fsynced, and the CLI's report. A
 * failure here fails a run that had succeeded; after an error, the first
 * error is the one reported. Returns the run's status. */
static int finish_history(Loop *L, const TrainResult *res, int rc) {
    char first_error[1024] = "";
    if (rc < 0) snprintf(first_error, sizeof first_error, "%s", error_message());
    EndReport e = {
        .iteration = res->iterations,
        .updates = L->opt->step,
        .skipped_updates = L->st.skipped_total,
        .status = rc < 0 ? "error" : res->stop_signal ? "stopped" : "completed",
        .signal = res->stop_signal,
        .message = rc < 0 ? first_error : NULL,
        .world = dist_world(),
        .comm_seconds = dist_comm_seconds(),
        .comm_calls = dist_comm_calls(),
    };
    int hrc = report_end(&L->rep, &e);
    if (hrc == 0) hrc = report_sync(&L->rep);
    if (hrc == 0 && L->cfg->on_history) hrc = L->cfg->on_history(L->cfg->history_ctx);
    if (rc < 0) {
        error_set("%s", first_error);
        return -1;
    }
    return hrc;
}

int train_run(Trainee *tr, BatchSource *src, Optimizer *opt, const TrainConfig *cfg, TrainResult *res) {
    memset(res, 0, sizeof *res);
    res->last_val_loss = NAN;
    if (cfg->grad_accum < 1) return error_set("grad_accumulation_steps must be at least 1");
    if (cfg->iters < 0) return error_set("--iters must be at least 0, got %d", cfg->iters);
    if (cfg->steps_per_report < 1)
        return error_set("--steps-per-report must be at least 1, got %d", cfg->steps_per_report);
    if (cfg->steps_per_eval < 1) return error_set("--steps-per-eval must be at least 1, got %d", cfg->steps_per_eval);
    Loop L;
    memset(&L, 0, sizeof L);
    L.tr = tr;
    L.src = src;
    L.opt = opt;
    L.cfg = cfg;
    char *history_path = NULL;
    bool started = false;
    checkpoint_fingerprint(cfg->fingerprint, tr->params, tr->n_params, &opt->cfg, L.fingerprint);
    int rc = -1;
    if (cfg->adapter_path) {
        if (dir_ensure(cfg->adapter_path) < 0) return -1;
        if (dist_rank() == 0 && atomic_remove_stale(cfg->adapter_path) < 0) return -1;
        L.adapters_file = path_join(cfg->adapter_path, ADAPTERS_FILE);
        L.state_file = path_join(cfg->adapter_path, STATE_FILE);
        if (!L.adapters_file || !L.state_file) goto out;
    }
    if (cfg->adapter_path && dist_rank() == 0) {
        history_path = path_join(cfg->adapter_path, HISTORY_FILE);
        if (!history_path) goto out;
    }
    if (report_open(&L.rep, cfg->out, history_path, cfg->resume, dist_rank() == 0 ? cfg->metrics_file : NULL) < 0)
        goto out;
    rng_seed(&L.st.dropout_rng, cfg->seed ^ 0x6c6d74756e65ull);  /* "lmtune": independent of the data order */
    if (cfg->resume) {
        if (!L.state_file) {
            error_set("--resume needs --adapter-path");
            goto out;
        }
        if (checkpoint_load_state(L.state_file, &L.st, opt, tr->params, tr->n_params, L.fingerprint) < 0) goto out;
        /* Replay the training stream to where the state left it. */
        for (uint64_t i = 0; i < L.st.micro_batches; i++) {
            Batch *b;
            int r = src->train_next(src->self, &b);
            if (r < 0) goto out;
            if (r == 0) {
                error_set("--resume: the training data ended while replaying");
                goto out;
            }
        }
        if (dist_rank() == 0)
            report_line(&L.rep, "Resuming from %s at iteration %llu (%llu updates)", L.state_file,
                        (unsigned long long)L.st.iteration, (unsigned long long)opt->step);
    } else {
        zero_grads(tr);
    }
    if (dist_rank() == 0) {
        report_line(&L.rep, "Starting training..., iters: %d", cfg->iters);
        if (dist_world() > 1) report_line(&L.rep, "Node %d of %d", dist_rank(), dist_world());
        /* --batch-size is global (MLX-LM splits it across workers): each
         * worker's micro-batch has batch_size / world rows. */
        int per_worker = cfg->batch_size / dist_world();
        report_line(&L.rep, "Effective batch size: %d x %d x %d = %d", per_worker, cfg->grad_accum,
                    dist_world(), per_worker * cfg->grad_accum * dist_world());
        StartReport start = {(int)L.st.iteration, cfg->iters, cfg->resume, opt->step, dist_world()};
        if (report_start(&L.rep, &start) < 0) goto out;
    }
    started = true;
    res->iterations = (int)L.st.iteration;
    L.profile = profile_requested();
    L.hooks = test_hooks_read();
    /* A failure keeps what the run had learned: the last good adapters stay
     * on disk from the last save. */
    if (run_loop(&L, res) < 0) goto out;
    if (L.profile && L.profiled_steps > 0 && dist_rank() == 0) report_profile(&L);
    if (cfg->adapter_path && dist_rank() == 0) {
        if (save_all(&L, res->iterations, false) < 0) goto out;
        report_line(&L.rep, "Saved final weights to %s.", L.adapters_file);
    }
    rc = 0;
out:
    if (started && dist_rank() == 0) rc = finish_history(&L, res, rc);
    if (report_close(&L.rep) < 0 && rc == 0) rc = -1;
    mem_free(history_path);
    mem_free(L.adapters_file);
    mem_free(L.state_file);
    return rc;
}

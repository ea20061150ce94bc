/* dist.c: the single-process implementation of dist.h (identity), and the
 * MPI one behind LT_USE_MPI. */
#include "dist/dist.h"
#include "base/error.h"
#include "base/sys.h"
#include <stdbool.h>

static double comm_seconds = 0;
static long comm_calls = 0;
double dist_comm_seconds(void) { return comm_seconds; }
long dist_comm_calls(void) { return comm_calls; }

#ifdef LT_USE_MPI
#include <mpi.h>
#include <stdlib.h>
static int g_rank = 0, g_world = 1, g_inited = 0;
/* Launched by mpirun/mpiexec (Open MPI or a PMI launcher)? A plain
 * `lmtune train` stays a single process and skips MPI_Init's start-up. */
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}
int dist_init(int *argc, char ***argv) {
    if (g_inited || !launched_by_mpi()) return 0;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return error_set("MPI_Init failed");
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    g_inited = 1;
    log_set_quiet(g_rank != 0);   /* MLX-LM's rprint: rank 0 prints */
    return 0;
}
void dist_finalize(void) {
    if (g_inited) MPI_Finalize();
    g_inited = 0;
}
int dist_rank(void) { return g_rank; }
int dist_world(void) { return g_world; }
int dist_all_sum_floats(float *x, size_t n) {
    if (g_world == 1 || n == 0) return 0;
    double t0 = time_now();
    /* Chunks of DIST_ALLREDUCE_CHUNK floats: Open MPI's in-place all-reduce
     * works through a temporary buffer as large as its message (half of it
     * with two workers, measured), so a whole gradient block in one call
     * would hold another gradient-sized buffer; in chunks it holds at most
     * one chunk's, which the memory plan counts. (Also: MPI counts are ints.) */
    const size_t chunk = DIST_ALLREDUCE_CHUNK;
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        if (MPI_Allreduce(MPI_IN_PLACE, x + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            return error_set("rank %d: MPI_Allreduce failed", g_rank);
    }
    comm_seconds += time_now() - t0;
    comm_calls++;
    return 0;
}
int dist_all_sum_doubles(double *x, size_t n) {
    if (g_world == 1 || n == 0) return 0;
    if (MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        return error_set("rank %d: MPI_Allreduce failed", g_rank);
    return 0;
}
#else
int dist_init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}
void dist_finalize(void) {}
int dist_rank(void) { return 0; }
int dist_world(void) { return 1; }
int dist_all_sum_floats(float *x, size_t n) {
    (void)x;
    (void)n;
    return 0;
}
int dist_all_sum_doubles(double *x, size_t n) {
    (void)x;
    (void)n;
    return 0;
}
#endif

/* The model carves all gradients as one block (tensors at increasing
 * offsets, padding between them kept at zero), so one all-reduce over the
 * whole block replaces one per tensor: latency is paid once per update, as
 * MLX-LM's >= 32 MiB concatenated groups do, without the copy. */
static bool one_block(const TrainableTensor *t, size_t n) {
    for (size_t i = 1; i < n; i++)
        if (t[i].grad < t[i - 1].grad + t[i - 1].numel || t[i].grad > t[i - 1].grad + t[i - 1].numel + 64) return false;
    return n > 0;
}

int sum_gradients(TrainableTensor *t, size_t n) {
    if (dist_world() == 1) return 0;
    if (one_block(t, n)) return dist_all_sum_floats(t[0].grad, (size_t)(t[n - 1].grad + t[n - 1].numel - t[0].grad));
    for (size_t i = 0; i < n; i++) TRY(dist_all_sum_floats(t[i].grad, t[i].numel));
    return 0;
}

int average_gradients(TrainableTensor *t, size_t n) {
    int world = dist_world();
    if (world == 1) return 0;
    TRY(sum_gradients(t, n));
    const float inv = 1.0f / (float)world;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < t[i].numel; j++) t[i].grad[j] *= inv;
    return 0;
}

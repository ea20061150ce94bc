/* dist.h: data parallelism across worker processes. Built with Open MPI
 * (LT_USE_MPI: `make` when Open MPI is installed) and launched by mpirun,
 * the calls are all-reduces over MPI_COMM_WORLD; in a single process (no
 * mpirun, or `make MPI=0`) there is one worker and every call is the
 * identity. Only rank 0 prints and saves. */
#ifndef LT_DIST_H
#define LT_DIST_H
#include <stddef.h>
#include "base/trainable.h"

int dist_init(int *argc, char ***argv);
void dist_finalize(void);
int dist_rank(void);
int dist_world(void);
/* In place: every worker ends with the sum over workers. */
int dist_all_sum_floats(float *x, size_t n);
int dist_all_sum_doubles(double *x, size_t n);
/* Seconds spent inside all-reduces so far, and how many were made. */
double dist_comm_seconds(void);
long dist_comm_calls(void);
/* MLX-LM's average_gradients: sum the gradients over workers, divide by the
 * number of workers (nothing to do for one worker). */
int average_gradients(TrainableTensor *t, size_t n);
/* Sum only (for token-weighted normalisation, divided by the global count). */
int sum_gradients(TrainableTensor *t, size_t n);
#endif

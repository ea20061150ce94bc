/* dist.h: data parallelism across worker processes. Without LT_USE_MPI (the
 * default build) there is one worker and every call is the identity; with
 * MPI (make MPI=1, later) the same calls become all-reduces in a fixed
 * reduction order. Only rank 0 prints and saves. */
#ifndef LT_DIST_H
#define LT_DIST_H
#include <stddef.h>
#include "model/model.h"   /* TrainableTensor */

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

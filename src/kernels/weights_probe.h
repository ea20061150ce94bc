/* weights_probe.h: how fast this CPU runs a run's frozen products in fp32
 * and in bf16, measured at start-up on the run's own shapes (a few tens of
 * milliseconds), so that --weights-dtype auto takes the faster path (see
 * model/weights_dtype.c). Which one is faster is a property of the CPU, not
 * of its ISA alone: oneDNN 2.6's AVX512-BF16 products run at ~1.8x fp32 on
 * AMD Zen 4 and at ~0.6x on an Intel Xeon with AVX512_BF16 and no AMX.
 *
 * The two paths are timed as the run would use them on bf16 weights: bf16
 * products on the stored weights (the activations rounded to bf16), and fp32
 * products on panels the weights are widened into (frozen_weight.h). Every
 * shape's forward product and input gradient run with `rows` rows on a slice
 * of at most PROBE_MAX_WEIGHTS weights of random data, the two paths
 * alternating, twice each after a warm-up; the faster of the two
 * counts, in process CPU seconds (steadier than the wall clock on a shared
 * machine). Nothing of the run is touched: the probe brings its own buffers
 * and scratch, frees them, and releases the primitives it created. */
#ifndef LT_WEIGHTS_PROBE_H
#define LT_WEIGHTS_PROBE_H
#include <stdbool.h>
#include <stddef.h>

#define PROBE_MAX_WEIGHTS (1 << 19)

/* One kind of frozen product: W (out, in); fwd and bwd are how many forward
 * products and input gradients of it a step runs. */
typedef struct {
    int in, out;
    double fwd, bwd;
} ProbeShape;

typedef struct {
    int rows;             /* rows of every probe product */
    double gflops_f32;    /* the step's frozen products, fp32 on widened panels */
    double gflops_bf16;   /* the same in bf16 */
    double seconds;       /* wall seconds the probe took */
} ProbeResult;

/* Times the shapes; 0, or -1 with the error set (out of memory). */
int weights_probe(const ProbeShape *shapes, int n, int rows, ProbeResult *res);
#endif

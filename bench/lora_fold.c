/* lora_fold.c: would folding the LoRA B side into the frozen products pay?
 * For each projection group of a block (LoRA on every linear, SmolLM2-135M
 * shapes by default), the products of a step as lmtune runs them against
 * the same work as one augmented product per projection:
 *   forward   now:  out = x W^T, then out += s (xA) B      (K = r, read-modify-write of out)
 *             fold: out = [x | xA_1 .. xA_g] [W | 0 .. sB^T .. 0]^T   (K = in + g r)
 *   backward  now:  dx (+)= dy W, then dxa = s dy B^T       (N = r)
 *             fold: [dx | dxa_1 .. dxa_g] (+)= dy [W | 0 .. sB^T .. 0]   (N = in + g r)
 * (g: the projections sharing the input, whose xA sit side by side in the
 * augmented input). The fold's own costs (writing xA into the input's spare
 * columns, B into the weight's) are left out, so the table favours it.
 * Usage: lora_fold [reps] [rows] [rank]; products in bf16 (bf16 inputs,
 * fp32 accumulation, as lmtune's auto on AVX512_BF16) and fp32. Medians of
 * reps after one warm-up, wall ms per block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/dtype.h"
#include "kernels/matmul.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A group: projections reading one input of width in. */
typedef struct {
    const char *name;
    int in, g, out[3];
} Group;

static const Group GROUPS[] = {
    {"q,k,v", 576, 3, {576, 192, 192}},
    {"o", 576, 1, {576}},
    {"gate,up", 576, 2, {1536, 1536}},
    {"down", 1536, 1, {576}},
};
enum { NGROUPS = sizeof GROUPS / sizeof GROUPS[0], VARIANTS = 4 };

typedef struct {
    const Group *gr;
    DType dt;
    int N, r;
    void *x, *w[3], *dy[3];   /* x (N, in + g r), w[p] (out_p, in + g r), dy[p] (N, out_p) */
    float *out, *dx, *xa, *b; /* out (N, max out), dx (N, in + g r), xa (N, r), b (r, max out) */
} Ctx;

/* variant 0: forward now, 1: forward fold, 2: backward now, 3: backward fold */
static void run_variant(const Ctx *c, int v) {
    const Group *gr = c->gr;
    int ka = gr->in + gr->g * c->r;
    for (int p = 0; p < gr->g; p++) {
        int od = gr->out[p];
        float beta = p == 0 ? 0.0f : 1.0f;   /* members after the first accumulate into dx */
        switch (v) {
        case 0:
            matmul_strided(c->out, (size_t)od, c->x, (size_t)ka, false, c->w[p], (size_t)ka, true, c->dt, NULL,
                           c->N, od, gr->in, 1.0f, 0.0f);
            gemm_f32(c->out, c->xa, c->b, c->N, od, c->r, false, false, 20.0f, 1.0f);
            break;
        case 1:
            matmul_strided(c->out, (size_t)od, c->x, (size_t)ka, false, c->w[p], (size_t)ka, true, c->dt, NULL,
                           c->N, od, ka, 1.0f, 0.0f);
            break;
        case 2:
            matmul_strided(c->dx, (size_t)ka, c->dy[p], (size_t)od, false, c->w[p], (size_t)ka, false, c->dt, NULL,
                           c->N, gr->in, od, 1.0f, beta);
            gemm_f32(c->xa, c->out, c->b, c->N, c->r, od, false, true, 20.0f, 0.0f);
            break;
        default:
            matmul_strided(c->dx, (size_t)ka, c->dy[p], (size_t)od, false, c->w[p], (size_t)ka, false, c->dt, NULL,
                           c->N, ka, od, 1.0f, beta);
        }
    }
}

static void *filled(size_t n, DType dt) {
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) f[i] = (float)((i * 2654435761u) % 1000) * 1e-4f - 0.05f;
    if (dt == DTYPE_F32) return f;
    uint16_t *h = malloc(n * sizeof *h);
    matmul_f32_to_bf16(h, f, n);
    free(f);
    return h;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15, N = argc > 2 ? atoi(argv[2]) : 2048, r = argc > 3 ? atoi(argv[3]) : 8;
    if (reps < 1 || reps > 64 || N < 1 || r < 1) {
        fprintf(stderr, "usage: lora_fold [reps 1-64] [rows] [rank]\n");
        return 2;
    }
    printf("LoRA B folded into the frozen products? rows %d, rank %d, wall ms per block, median of %d\n", N, r, reps);
    printf("%-6s %-8s %9s %9s %7s %9s %9s %7s\n", "dtype", "group", "fwd now", "fwd fold", "ratio", "bwd now",
           "bwd fold", "ratio");
    double tot[2][VARIANTS] = {{0}};
    for (int d = 0; d < 2; d++) {
        DType dt = d == 0 ? DTYPE_BF16 : DTYPE_F32;
        if (dt == DTYPE_BF16 && !matmul_bf16_supported()) continue;
        for (int gi = 0; gi < NGROUPS; gi++) {
            const Group *gr = &GROUPS[gi];
            int ka = gr->in + gr->g * r, mo = 0;
            for (int p = 0; p < gr->g; p++) mo = gr->out[p] > mo ? gr->out[p] : mo;
            Ctx c = {.gr = gr, .dt = dt, .N = N, .r = r};
            c.x = filled((size_t)N * ka, dt);
            for (int p = 0; p < gr->g; p++) {
                c.w[p] = filled((size_t)gr->out[p] * ka, dt);
                c.dy[p] = filled((size_t)N * gr->out[p], dt);
            }
            c.out = filled((size_t)N * mo, DTYPE_F32);
            c.dx = filled((size_t)N * ka, DTYPE_F32);
            c.xa = filled((size_t)N * r, DTYPE_F32);
            c.b = filled((size_t)r * mo, DTYPE_F32);
            double med[VARIANTS];
            for (int v = 0; v < VARIANTS; v++) run_variant(&c, v);   /* warm-up: primitives created */
            double t[VARIANTS][64];
            for (int k = 0; k < reps; k++)   /* variants interleaved: a noisy host drifts slowly */
                for (int v = 0; v < VARIANTS; v++) {
                    double t0 = now();
                    run_variant(&c, v);
                    t[v][k] = now() - t0;
                }
            for (int v = 0; v < VARIANTS; v++) {
                qsort(t[v], (size_t)reps, sizeof t[v][0], cmp);
                med[v] = t[v][reps / 2] * 1e3;
                tot[d][v] += med[v];
            }
            printf("%-6s %-8s %9.2f %9.2f %6.2fx %9.2f %9.2f %6.2fx\n", d == 0 ? "bf16" : "f32", gr->name, med[0],
                   med[1], med[0] / med[1], med[2], med[3], med[2] / med[3]);
            free(c.x);
            for (int p = 0; p < gr->g; p++) free(c.w[p]), free(c.dy[p]);
            free(c.out), free(c.dx), free(c.xa), free(c.b);
        }
        printf("%-6s %-8s %9.2f %9.2f %6.2fx %9.2f %9.2f %6.2fx\n", d == 0 ? "bf16" : "f32", "block", tot[d][0],
               tot[d][1], tot[d][0] / tot[d][1], tot[d][2], tot[d][3], tot[d][2] / tot[d][3]);
    }
    printf("ratio = now / fold: above 1, the fold would be faster\n");
    matmul_release_all();
    return 0;
}

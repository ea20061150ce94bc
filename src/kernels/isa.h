/* isa.h: which instruction set lmtune's own kernels run with, chosen once
 * at start-up from CPUID, so one binary runs on every x86-64 machine of a
 * job (matrix products need no choice here: oneDNN picks its own kernels).
 *
 * The default build is compiled for a portable baseline (x86-64-v3: AVX2,
 * FMA) and compiles the kernels whose speed depends on AVX-512 a second
 * time with AVX-512 enabled (Makefile: ISA_SRC): attention's register-blocked
 * tiles, the LM head's softmax, the rounding of activations to bf16, the
 * expansion and fused GEMVs of bf16 and MLX affine-quantized weights, the
 * chunked gated delta rule (Gated DeltaNet), and the gated MLP activations
 * (GLU). Attention's bf16 tile products (AttnParams.bf16) live in the
 * AVX-512 variant and also need AVX512_BF16, checked here too
 * (attention_bf16_supported in kernels/ops.h).
 * Their entry points are then named through ISA_FN (name_base in the
 * baseline object, name_avx512 in the other) and kernels/isa.c defines the
 * public name, which calls the variant chosen at start-up. Both variants do
 * the same operations in the same order with fused multiply-adds, so they
 * give the same bits (tests/kernels/test_isa.c checks it).
 *
 * `make NATIVE=1` compiles everything once with -march=native and no
 * dispatch (ISA_FN(name) is name); so do non-x86 targets, where the
 * kernels' generic vectors map to the target's own.
 *
 * LMTUNE_NO_AVX512=1 (any value but 0) disables the AVX-512 variants and
 * caps oneDNN at AVX2 (no bf16 products: matmul_bf16_supported() is then
 * false), so a machine with AVX-512 runs the paths of one without. */
#ifndef LT_KERNELS_ISA_H
#define LT_KERNELS_ISA_H
#include <stdbool.h>

#if defined(LT_ISA_DISPATCH) && defined(LT_ISA_AVX512)
#define ISA_FN(name) name##_avx512
#elif defined(LT_ISA_DISPATCH)
#define ISA_FN(name) name##_base
#else
#define ISA_FN(name) name
#endif

/* Detects the CPU and reads LMTUNE_NO_AVX512, once (thread-safe); every
 * other function here calls it. Call it before oneDNN's first use. */
void isa_init(void);
/* True when the AVX-512 variants of the kernels run. */
bool isa_avx512(void);
/* What runs, for logs and tests: e.g. "x86-64-v3 + AVX-512 kernels",
 * "x86-64-v3 (AVX-512 disabled by LMTUNE_NO_AVX512)", "native". */
const char *isa_describe(void);
#endif

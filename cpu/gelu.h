/* gelu.h: GELU over a span of floats for the CPU backend's gelu op,
 * out[i] = 0.5 x (1 + erf(x / sqrt 2)) with fastmath.h's sm_erff.
 *
 * On a CPU with AVX-512F an explicit kernel (gelu.c) runs the portable
 * loop's operations in the order gcc -O2 compiles them for AVX-512F, 32
 * values an iteration, and gives the same bits in the shipped build;
 * elsewhere the portable loop, whose vectorisation the compiler chooses.
 * Private to cpu/ (tests may include it).
 */
#ifndef SM_CPU_GELU_H
#define SM_CPU_GELU_H

#include <stddef.h>

/* out[i] = GELU(in[i]) for i < n; out may be in. */
void cpu_gelu_span(float *out, const float *in, size_t n);

/* The portable loop, whatever the CPU (for tests). */
void cpu_gelu_span_portable(float *out, const float *in, size_t n);

#endif

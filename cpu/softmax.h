/* softmax.h: the row softmax of the CPU attention (inference and
 * training share it, so the two compute the same probabilities).
 *
 * cpu_softmax_row(x, n, T, scale): x[j] = exp(scale (x[j] - max)) / sum over
 * j in [0, n) (the keys that are not padding); x[n, T) set to 0. On a CPU
 * with AVX-512F whole rows run in 16-lane vectors with masked tails (the
 * portable loop leaves up to 15 elements of each pass to scalar code, which
 * was most of its time on ~84-key rows); elsewhere the portable loop, whose
 * vectorisation the compiler chooses. Both use sm_expf's arithmetic
 * (fastmath.h, < 2 ulp); they may differ in the last bits of the sum.
 * Private to cpu/ (tests may include it).
 */
#ifndef SM_CPU_SOFTMAX_H
#define SM_CPU_SOFTMAX_H

/* In-place softmax of scale * x over x[0, n), n >= 1; x[n, T) set to 0. */
void cpu_softmax_row(float *x, int n, int T, float scale);

/* The same with row_max, the largest of x[0, n) (a NaN skipped), known
 * to the caller: the AVX-512F version skips its own pass for it. */
void cpu_softmax_row_max(float *x, int n, int T, float scale, float row_max);

/* cpu_softmax_row_max on `rows` rows x + r T, r < rows, whose largest
 * keys are row_max[r]: the same bits, the rows of a block interleaved
 * (SOFTMAX_BLOCK_ROWS at a time) so that one row's sum and division
 * overlap the next row's pass. */
#define SOFTMAX_BLOCK_ROWS 8
void cpu_softmax_rows_max(float *x, int rows, int n, int T, float scale, const float *row_max);

/* The portable version, whatever the CPU (for tests). */
void cpu_softmax_row_portable(float *x, int n, int T, float scale);

#endif

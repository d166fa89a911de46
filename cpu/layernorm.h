/* layernorm.h: LayerNorm over rows for the CPU backend's layernorm op:
 * out = (x - mean) rstd w + b per row of C, rstd = 1 / sqrt(var + eps), the
 * mean and the (biased) variance over the row.
 *
 * On a CPU with AVX-512F and C a multiple of 16, a kernel (layernorm.c)
 * runs 16 rows at a time with the portable row's operations in the order
 * gcc -O2 compiles them for AVX-512F, so the two give the same bits in the
 * shipped build; elsewhere the portable row, whose vectorisation the
 * compiler chooses. Private to cpu/ (tests may include it).
 */
#ifndef SM_CPU_LAYERNORM_H
#define SM_CPU_LAYERNORM_H

/* Rows [0, R) of in (R x C) into out (which may be in); mean and rstd, if
 * not NULL, get each row's mean and 1 / sqrt(var + eps). */
void cpu_layernorm_rows(float *out, float *mean, float *rstd, const float *in, const float *w,
                        const float *b, int R, int C, float eps);

/* One row by the portable loop, whatever the CPU (for tests). */
void cpu_layernorm_row_portable(float *out, float *mean_out, float *rstd_out, const float *x,
                                const float *w, const float *b, int C, float eps);

#endif

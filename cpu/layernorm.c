/* layernorm.c: LayerNorm over rows (layernorm.h): the portable row and,
 * for CPUs with AVX-512F, the same operations 16 rows at a time.
 *
 * The portable row compiled for AVX-512F (its target_clones) spent about
 * 3% of the built-in model's cycles at batch 1, most of it waiting: each
 * of its two sums over a row is one vector of 16 partial sums that gcc
 * stores to the stack and adds up lane by lane, 0 + s[0] + s[1] + ... +
 * s[15], a chain of 16 dependent scalar adds reading back a vector store,
 * then a division and a square root, all before the row's next pass can
 * start. The kernel here keeps those steps and their order: per row, the
 * partial sums in 16 lanes in index order (x[i] added to lane i mod 16;
 * for the variance d = x - mean, then d * d + s fused), and the lanes
 * added in order from 0; but it holds the partial sums of 16 rows at once,
 * transposes them (transpose16.h) so that vector l has lane l of every
 * row, and adds those 16 vectors in order: the 16 rows' chains run side by
 * side in the lanes of one chain. The mean is sum / C, rstd 1 / sqrt(var /
 * C + eps) (division and square root correctly rounded, scalar or
 * vector alike), and out = (x - mean) rstd w + b with the last multiply
 * and add fused, as gcc -O2 contracts the portable loop's AVX-512F clone
 * (-ffp-contract=fast): in the shipped build the two give the same bits
 * (the tests pin the kernel to those steps written out in scalar code).
 */
#include "cpu/layernorm.h"

#include <math.h>
#include <stddef.h>

#include "cpu/features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512_LAYERNORM 1
#define AVX512F_FN __attribute__((target("avx512f")))
#include "cpu/transpose16.h"
#endif

#define BLOCK_ROWS 16 /* rows whose sums share one chain of vector adds */

__attribute__((target_clones("avx512f", "avx2", "default"))) void
cpu_layernorm_row_portable(float *out, float *mean_out, float *rstd_out, const float *x,
                           const float *w, const float *b, int C, float eps)
{
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < C; i++) sum += x[i];
    float mean = sum / C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int i = 0; i < C; i++) {
        float d = x[i] - mean;
        var += d * d;
    }
    float rstd = 1.0f / sqrtf(var / C + eps);
#pragma omp simd
    for (int i = 0; i < C; i++) out[i] = (x[i] - mean) * rstd * w[i] + b[i];
    if (mean_out) *mean_out = mean;
    if (rstd_out) *rstd_out = rstd;
}

#ifdef HAVE_AVX512_LAYERNORM
/* Lane r of the result: 0 + s[r][0] + s[r][1] + ... + s[r][15], in that
 * order, for the rows' partial sums s[r] (rows past the block's are 0). */
AVX512F_FN static inline __m512 lane_sums(__m512 s[BLOCK_ROWS])
{
    transpose16(s);
    __m512 total = _mm512_setzero_ps();
    for (int l = 0; l < 16; l++) total = _mm512_add_ps(total, s[l]);
    return total;
}

/* Rows [0, rows) of x, rows <= BLOCK_ROWS, C a multiple of 16. */
AVX512F_FN static void layernorm_block(float *out, float *mean_out, float *rstd_out, const float *x,
                                       const float *w, const float *b, int rows, int C, float eps)
{
    __m512 s[BLOCK_ROWS];
    float mean[BLOCK_ROWS], rstd[BLOCK_ROWS];
    const __m512 n = _mm512_set1_ps((float)C);

    for (int r = 0; r < BLOCK_ROWS; r++) {
        s[r] = _mm512_setzero_ps();
        if (r >= rows) continue;
        const float *xr = x + (size_t)r * C;
        for (int i = 0; i < C; i += 16) s[r] = _mm512_add_ps(s[r], _mm512_loadu_ps(xr + i));
    }
    _mm512_storeu_ps(mean, _mm512_div_ps(lane_sums(s), n));

    for (int r = 0; r < BLOCK_ROWS; r++) {
        s[r] = _mm512_setzero_ps();
        if (r >= rows) continue;
        const float *xr = x + (size_t)r * C;
        const __m512 m = _mm512_set1_ps(mean[r]);
        for (int i = 0; i < C; i += 16) {
            __m512 d = _mm512_sub_ps(_mm512_loadu_ps(xr + i), m);
            s[r] = _mm512_fmadd_ps(d, d, s[r]);
        }
    }
    __m512 var = _mm512_div_ps(lane_sums(s), n);
    _mm512_storeu_ps(rstd, _mm512_div_ps(_mm512_set1_ps(1.0f),
                                         _mm512_sqrt_ps(_mm512_add_ps(var, _mm512_set1_ps(eps)))));

    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * C;
        float *o = out + (size_t)r * C;
        const __m512 m = _mm512_set1_ps(mean[r]), rs = _mm512_set1_ps(rstd[r]);
        for (int i = 0; i < C; i += 16) {
            __m512 y = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + i), m), rs);
            _mm512_storeu_ps(o + i,
                             _mm512_fmadd_ps(y, _mm512_loadu_ps(w + i), _mm512_loadu_ps(b + i)));
        }
        if (mean_out) mean_out[r] = mean[r];
        if (rstd_out) rstd_out[r] = rstd[r];
    }
}
#endif

void cpu_layernorm_rows(float *out, float *mean, float *rstd, const float *in, const float *w,
                        const float *b, int R, int C, float eps)
{
#ifdef HAVE_AVX512_LAYERNORM
    if (C >= 16 && C % 16 == 0 && cpu_has(CPU_AVX512F)) {
        for (int r = 0; r < R; r += BLOCK_ROWS) {
            int rows = R - r < BLOCK_ROWS ? R - r : BLOCK_ROWS;
            layernorm_block(out + (size_t)r * C, mean ? mean + r : NULL, rstd ? rstd + r : NULL,
                            in + (size_t)r * C, w, b, rows, C, eps);
        }
        return;
    }
#endif
    for (int r = 0; r < R; r++)
        cpu_layernorm_row_portable(out + (size_t)r * C, mean ? mean + r : NULL,
                                   rstd ? rstd + r : NULL, in + (size_t)r * C, w, b, C, eps);
}

/* softmax.c: the attention row softmax of softmax.h, an AVX-512F
 * version picked at run time and a portable one. */
#include "cpu/softmax.h"

#include <math.h>

#include "cpu/fastmath.h"
#include "cpu/features.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512_SOFTMAX 1
#define AVX512 __attribute__((target("avx512f")))
#endif

__attribute__((target_clones("avx512f", "avx2", "default"))) void
cpu_softmax_row_portable(float *x, int n, int T, float scale)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        float e = sm_expf((x[j] - mx) * scale);
        x[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < n; j++) x[j] *= inv;
#pragma omp simd
    for (int j = n; j < T; j++) x[j] = 0.0f;
}

#ifdef HAVE_AVX512_SOFTMAX
/* sm_expf on 16 lanes for x <= 88.3 (the softmax's x is <= 0): the same
 * reduction and polynomial, with 2^n applied by vscalefps; lanes below
 * -87.3 are 0 as there (so they need no clamp: whatever the reduction
 * makes of them is dropped) and a NaN stays NaN. */
AVX512 static inline __m512 exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.7f);
    __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    /* operand order keeps a NaN (min returns the second operand then) */
    x = _mm512_min_ps(hi, x);
    const __m512 shifter = _mm512_set1_ps(12582912.0f);
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), shifter),
                             shifter);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps((__mmask16)~underflow, y, n);
}

/* The row's largest element (a NaN skipped, as in the portable loop). */
AVX512 static float row_max_avx512(const float *x, int n)
{
    const int full = n & ~15;
    const __mmask16 tail = (__mmask16)((1u << (n - full)) - 1);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < full; j += 16) vmax = _mm512_max_ps(_mm512_loadu_ps(x + j), vmax);
    if (tail) vmax = _mm512_mask_max_ps(vmax, tail, _mm512_maskz_loadu_ps(tail, x + full), vmax);
    return _mm512_reduce_max_ps(vmax);
}

/* The pass that exponentiates x[0, n) in place; returns the sum. */
AVX512 static inline __attribute__((always_inline)) float
exp_pass_avx512(float *x, int n, float scale, float row_max)
{
    const int full = n & ~15;
    const __mmask16 tail = (__mmask16)((1u << (n - full)) - 1);
    const __m512 mx = _mm512_set1_ps(row_max);
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 vsum = _mm512_setzero_ps();
    for (int j = 0; j < full; j += 16) {
        __m512 e = exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), mx), vs));
        _mm512_storeu_ps(x + j, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (tail) {
        __m512 e = exp16(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + full), mx),
                                       vs));
        e = _mm512_maskz_mov_ps(tail, e);
        _mm512_mask_storeu_ps(x + full, tail, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    return _mm512_reduce_add_ps(vsum);
}

/* x[0, n) times inv; the padding keys x[n, T) zeros. */
AVX512 static inline __attribute__((always_inline)) void scale_pass_avx512(float *x, int n, int T,
                                                                           float inv_sum)
{
    const int full = n & ~15;
    const __mmask16 tail = (__mmask16)((1u << (n - full)) - 1);
    const __m512 inv = _mm512_set1_ps(inv_sum);
    for (int j = 0; j < full; j += 16)
        _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), inv));
    if (tail)
        _mm512_mask_storeu_ps(x + full, tail,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, x + full), inv));
    /* whole vectors of zeros where they fit */
    int j = n;
    const __m512 zero = _mm512_setzero_ps();
    for (; j + 16 <= T; j += 16) _mm512_storeu_ps(x + j, zero);
    if (j < T) _mm512_mask_storeu_ps(x + j, (__mmask16)((1u << (T - j)) - 1), zero);
}

AVX512 static void softmax_row_max_avx512(float *x, int n, int T, float scale, float row_max)
{
    scale_pass_avx512(x, n, T, 1.0f / exp_pass_avx512(x, n, scale, row_max));
}

/* Rows of a block: every row's exponentials first, then every row's
 * scaling, so that no row's sum, division and scaling wait on the pass
 * just before them (one row at a time, those waits were about a third
 * of the softmax's time on 128-key rows). Each row's arithmetic is
 * softmax_row_max_avx512's, in the same order: the same bits. */
AVX512 static void softmax_rows_max_avx512(float *x, int rows, int n, int T, float scale,
                                           const float *row_max)
{
    float inv[SOFTMAX_BLOCK_ROWS];
    for (int r = 0; r < rows; r++)
        inv[r] = 1.0f / exp_pass_avx512(x + (size_t)r * T, n, scale, row_max[r]);
    for (int r = 0; r < rows; r++) scale_pass_avx512(x + (size_t)r * T, n, T, inv[r]);
}

#endif

void cpu_softmax_row(float *x, int n, int T, float scale)
{
#ifdef HAVE_AVX512_SOFTMAX
    if (cpu_has(CPU_AVX512F)) {
        softmax_row_max_avx512(x, n, T, scale, row_max_avx512(x, n));
        return;
    }
#endif
    cpu_softmax_row_portable(x, n, T, scale);
}

void cpu_softmax_row_max(float *x, int n, int T, float scale, float row_max)
{
#ifdef HAVE_AVX512_SOFTMAX
    if (cpu_has(CPU_AVX512F)) {
        softmax_row_max_avx512(x, n, T, scale, row_max);
        return;
    }
#endif
    cpu_softmax_row_portable(x, n, T, scale);
}

void cpu_softmax_rows_max(float *x, int rows, int n, int T, float scale, const float *row_max)
{
#ifdef HAVE_AVX512_SOFTMAX
    if (cpu_has(CPU_AVX512F)) {
        for (int r0 = 0; r0 < rows; r0 += SOFTMAX_BLOCK_ROWS) {
            int m = rows - r0 < SOFTMAX_BLOCK_ROWS ? rows - r0 : SOFTMAX_BLOCK_ROWS;
            softmax_rows_max_avx512(x + (size_t)r0 * T, m, n, T, scale, row_max + r0);
        }
        return;
    }
#endif
    for (int r = 0; r < rows; r++) cpu_softmax_row_portable(x + (size_t)r * T, n, T, scale);
}

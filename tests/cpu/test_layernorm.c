/* test_layernorm.c: LayerNorm over rows (cpu/layernorm.c).
 *
 * The rows the CPU backend runs (the AVX-512F kernel where the CPU has it
 * and C is a multiple of 16) against the steps of layernorm.h written here
 * in scalar code, bit for bit: each sum in 16 lanes (x[i] into lane i mod
 * 16, the variance's d * d + s an fmaf), the lanes added in order from 0,
 * mean = sum / C, rstd = 1 / sqrt(var / C + eps), out = fmaf((x - mean)
 * rstd, w, b). Widths 16 .. 768, row counts around the kernel's blocks of
 * 16, in place, the mean and rstd outputs, nothing written past the rows,
 * and rows of zeros, of one repeated value, of huge values, with an
 * infinity or a NaN (NaN where the steps give NaN). (The portable loop's
 * AVX-512F clone, as gcc -O2 contracts it, computes the same steps; the
 * -O1 sanitizer build may contract it otherwise.) Then every width,
 * multiples of 16 or not, and the portable row against a double-precision
 * LayerNorm.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cpu/features.h"
#include "cpu/layernorm.h"

static uint64_t rng_state = RNG_GOLDEN;

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng_next(&rng_state) >> 40) / 16777216.0f;
}

/* 0 + s[0] + s[1] + ... + s[15]. */
static float lanes_in_order(const float s[16])
{
    float t = 0.0f;
    for (int l = 0; l < 16; l++) t += s[l];
    return t;
}

/* One row by the steps (C a multiple of 16). */
static void row_steps(float *out, float *mean_out, float *rstd_out, const float *x,
                      const float *w, const float *b, int C, float eps)
{
    float s[16] = {0};
    for (int i = 0; i < C; i++) s[i % 16] += x[i];
    float mean = lanes_in_order(s) / (float)C;
    memset(s, 0, sizeof s);
    for (int i = 0; i < C; i++) {
        float d = x[i] - mean;
        s[i % 16] = fmaf(d, d, s[i % 16]);
    }
    float rstd = 1.0f / sqrtf(lanes_in_order(s) / (float)C + eps);
    for (int i = 0; i < C; i++) out[i] = fmaf((x[i] - mean) * rstd, w[i], b[i]);
    *mean_out = mean;
    *rstd_out = rstd;
}

/* Equal bits, or NaN in both. */
static int same(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y || (isnan(a) && isnan(b));
}

static void assert_rows_same(const float *got, const float *want, int R, int C, const char *what)
{
    for (int i = 0; i < R * C; i++) {
        if (same(got[i], want[i])) continue;
        fprintf(stderr, "%s, C %d, row %d, column %d: %.9g against the steps' %.9g\n", what, C,
                i / C, i % C, (double)got[i], (double)want[i]);
        fail();
    }
}

static void fill(float *v, int n, float lo, float hi)
{
    for (int i = 0; i < n; i++) v[i] = uniform(lo, hi);
}

/* cpu_layernorm_rows on x (R x C) against the steps, out of place and in
 * place, mean and rstd given and not. */
static void check_rows(const float *x, const float *w, const float *b, int R, int C, float eps)
{
    size_t n = (size_t)R * C;
    float *got = malloc((n + 1) * sizeof *got), *want = malloc(n * sizeof *want);
    float *inplace = malloc(n * sizeof *inplace);
    float *mean = malloc((R + 1) * sizeof *mean), *rstd = malloc((R + 1) * sizeof *rstd);
    float *mean_want = malloc(R * sizeof *mean_want), *rstd_want = malloc(R * sizeof *rstd_want);
    assert_true(got && want && inplace && mean && rstd && mean_want && rstd_want);
    for (int r = 0; r < R; r++)
        row_steps(want + (size_t)r * C, mean_want + r, rstd_want + r, x + (size_t)r * C, w, b, C,
                  eps);

    got[n] = mean[R] = rstd[R] = 7.25f;
    cpu_layernorm_rows(got, mean, rstd, x, w, b, R, C, eps);
    assert_rows_same(got, want, R, C, "out");
    assert_rows_same(mean, mean_want, R, 1, "mean");
    assert_rows_same(rstd, rstd_want, R, 1, "rstd");
    assert_true(got[n] == 7.25f && mean[R] == 7.25f && rstd[R] == 7.25f);

    memcpy(inplace, x, n * sizeof *x);
    cpu_layernorm_rows(inplace, NULL, NULL, inplace, w, b, R, C, eps);
    assert_rows_same(inplace, want, R, C, "in place");
    free(got);
    free(want);
    free(inplace);
    free(mean);
    free(rstd);
    free(mean_want);
    free(rstd_want);
}

/* The steps are the AVX-512F kernel's. Without AVX-512F (cpu_has, as
 * cpu_layernorm_rows asks it) the rows run the portable loop, whose lane
 * order the compiler picks for that CPU's clone: nothing here to pin its
 * bits to, so those checks are skipped, saying why, and
 * test_against_double checks its values. */
static int kernel_runs(void)
{
    if (cpu_has(CPU_AVX512F)) return 1;
    fprintf(stderr, "skipped: cpu_has(CPU_AVX512F) is 0 on this CPU, so cpu_layernorm_rows runs "
                    "the portable loop, whose bits the steps do not describe; "
                    "test_against_double checks its values\n");
    return 0;
}

static void test_random_rows(void **state)
{
    (void)state;
    if (!kernel_runs()) skip();
    const int widths[] = {16, 32, 128, 384, 768};
    const int rows[] = {1, 2, 15, 16, 17, 31, 33, 128};
    float *w = malloc(768 * sizeof *w), *b = malloc(768 * sizeof *b);
    float *x = malloc(128 * 768 * sizeof *x);
    assert_true(w && b && x);
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
        int C = widths[k];
        fill(w, C, 0.5f, 1.5f);
        fill(b, C, -0.2f, 0.2f);
        for (size_t q = 0; q < sizeof rows / sizeof *rows; q++) {
            int R = rows[q];
            /* rows offset from zero, as residual sums are */
            for (int r = 0; r < R; r++) fill(x + (size_t)r * C, C, -3.0f + r, 5.0f + r);
            check_rows(x, w, b, R, C, 1e-12f);
            check_rows(x, w, b, R, C, 1e-5f);
        }
    }
    free(w);
    free(b);
    free(x);
}

static void test_special_rows(void **state)
{
    (void)state;
    enum { C = 64, R = 8 };
    float w[C], b[C], x[R * C];
    fill(w, C, 0.5f, 1.5f);
    fill(b, C, -0.2f, 0.2f);
    fill(x, R * C, -1.0f, 1.0f);
    memset(x, 0, C * sizeof *x);                     /* zeros: var 0 */
    for (int i = 0; i < C; i++) x[C + i] = 3.25f;    /* one value */
    for (int i = 0; i < C; i++) x[2 * C + i] *= 1e20f; /* the squares overflow */
    x[3 * C + 5] = INFINITY;
    x[4 * C + 63] = NAN;
    x[5 * C + 0] = -FLT_MAX;
    for (int i = 0; i < C; i++) x[6 * C + i] = i % 2 ? 1e-30f : -1e-30f;
    check_rows(x, w, b, R, C, 1e-12f);
    /* a NaN or an infinity stays in its own row */
    float out[R * C];
    cpu_layernorm_rows(out, NULL, NULL, x, w, b, R, C, 1e-12f);
    for (int i = 0; i < C; i++) assert_true(isfinite(out[7 * C + i]) && out[i] == b[i]);
    for (int i = 0; i < C; i++) assert_true(isnan(out[3 * C + i]) && isnan(out[4 * C + i]));
}

/* Every width, and the portable row, within float's error of a
 * double-precision LayerNorm. */
static void test_against_double(void **state)
{
    (void)state;
    enum { R = 19, MAXC = 800 };
    float *x = malloc(R * MAXC * sizeof *x), *out = malloc(R * MAXC * sizeof *out);
    float w[MAXC], b[MAXC], row[MAXC];
    assert_true(x && out);
    fill(w, MAXC, 0.5f, 1.5f);
    fill(b, MAXC, -0.2f, 0.2f);
    const int widths[] = {1, 7, 16, 40, 100, 128, 200, 384, 777, 800};
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
        int C = widths[k];
        fill(x, R * C, -4.0f, 6.0f);
        cpu_layernorm_rows(out, NULL, NULL, x, w, b, R, C, 1e-5f);
        for (int r = 0; r < R; r++) {
            const float *xr = x + (size_t)r * C;
            double m = 0, v = 0;
            for (int i = 0; i < C; i++) m += xr[i];
            m /= C;
            for (int i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
            double rs = 1.0 / sqrt(v / C + 1e-5);
            float mean, rstd;
            cpu_layernorm_row_portable(row, &mean, &rstd, xr, w, b, C, 1e-5f);
            assert_true(fabs(mean - m) <= 1e-5 && fabs(rstd - rs) <= 1e-5 * rs);
            for (int i = 0; i < C; i++) {
                double want = (xr[i] - m) * rs * w[i] + b[i];
                double tol = 1e-5 * (1.0 + fabs(want));
                if (!(fabs(out[(size_t)r * C + i] - want) <= tol) ||
                    !(fabs(row[i] - want) <= tol)) {
                    fprintf(stderr, "C %d row %d col %d: %.9g and %.9g, double %.9g\n", C, r, i,
                            (double)out[(size_t)r * C + i], (double)row[i], want);
                    fail();
                }
            }
        }
    }
    free(x);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_rows),
        cmocka_unit_test(test_special_rows),
        cmocka_unit_test(test_against_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_gelu.c: GELU over a span (cpu/gelu.c).
 *
 * The span the CPU backend runs (the AVX-512F kernel where the CPU has it)
 * against sm_erff's steps written here with each x2 p + c an fmaf, bit for
 * bit: a million values over [-12, 12], the values around the erf clamp at
 * x = +-4 sqrt 2, zeros, denormals, huge and infinite values and NaN (NaN
 * where the steps give NaN), for every length 0 .. 67 (the kernel's tails)
 * and in place. (The portable loop's AVX-512F clone, as gcc -O2 contracts
 * it, computes the same steps; the -O1 sanitizer build contracts it
 * otherwise.) Then the span and the portable loop against a
 * double-precision GELU within 1e-6 (1 + |x|) (sm_erff's error).
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
#include "cpu/gelu.h"

static uint64_t rng_state = RNG_GOLDEN;

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng_next(&rng_state) >> 40) / 16777216.0f;
}

/* GELU by sm_erff's steps (cpu/fastmath.h), each x2 * p + c fused. */
static float gelu_steps(float x)
{
    float a = x * 0.70710678118654752f;
    a = a > 4.0f ? 4.0f : a;
    a = a < -4.0f ? -4.0f : a;
    float x2 = a * a;
    float p = fmaf(x2, -2.72614225801306e-10f, 2.77068142495902e-08f);
    p = fmaf(x2, p, -2.10102402082508e-06f);
    p = fmaf(x2, p, -5.69250639462346e-05f);
    p = fmaf(x2, p, -7.34990630326855e-04f);
    p = fmaf(x2, p, -2.95459980854025e-03f);
    p = fmaf(x2, p, -1.60960333262415e-02f);
    p = a * p;
    float q = fmaf(x2, -1.45660718464996e-05f, -2.13374055278905e-04f);
    q = fmaf(x2, q, -1.68282697438203e-03f);
    q = fmaf(x2, q, -7.37332916720468e-03f);
    q = fmaf(x2, q, -1.42647390514189e-02f);
    float erf = p / q;
    float half_x = 0.5f * x;
    return half_x * (1.0f + erf);
}

/* Equal bits, or NaN in both. */
static void assert_same(const float *a, const float *b, size_t n, const float *in)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y;
        memcpy(&x, &a[i], 4);
        memcpy(&y, &b[i], 4);
        if (x == y || (isnan(a[i]) && isnan(b[i]))) continue;
        fprintf(stderr, "x = %.9g (%a): %.9g against the steps' %.9g\n", (double)in[i],
                (double)in[i], (double)a[i], (double)b[i]);
        fail();
    }
}

static void check_same(const float *in, size_t n)
{
    float *got = malloc((n + 1) * sizeof *got), *want = malloc((n + 1) * sizeof *want);
    float *inplace = malloc((n + 1) * sizeof *inplace);
    assert_true(got && want && inplace);
    got[n] = want[n] = 7.25f;
    cpu_gelu_span(got, in, n);
    for (size_t i = 0; i < n; i++) want[i] = gelu_steps(in[i]);
    assert_same(got, want, n, in);
    assert_true(got[n] == 7.25f); /* nothing past the span */
    memcpy(inplace, in, n * sizeof *in);
    cpu_gelu_span(inplace, inplace, n);
    assert_same(inplace, want, n, in);
    free(got);
    free(want);
    free(inplace);
}

static void test_random_values(void **state)
{
    (void)state;
    size_t n = 1u << 20;
    float *in = malloc(n * sizeof *in);
    assert_non_null(in);
    for (size_t i = 0; i < n; i++) in[i] = uniform(-12.0f, 12.0f);
    check_same(in, n);
    for (size_t len = 0; len <= 67; len++) check_same(in + 1000 + len, len);
    free(in);
}

static void test_special_values(void **state)
{
    (void)state;
    const float edge = 4.0f * 1.41421356237309505f;
    float in[64];
    size_t n = 0;
    const float fixed[] = {0.0f,     -0.0f,     1.0f,   -1.0f,   FLT_MIN, -FLT_MIN,
                           1e-40f,   -1e-40f,   1e-30f, -1e-30f, FLT_MAX, -FLT_MAX,
                           INFINITY, -INFINITY, NAN,    -NAN,    3.0f,    -3.0f,
                           1e10f,    -1e10f,    0.5f,   -0.5f,   100.0f,  -100.0f};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) in[n++] = fixed[i];
    for (int s = -1; s <= 1; s += 2) {
        float x = s * edge;
        for (int k = 0; k < 8; k++) {
            in[n++] = x;
            x = nextafterf(x, 0.0f);
        }
        x = s * edge;
        for (int k = 0; k < 8; k++) in[n++] = x = nextafterf(x, s * INFINITY);
    }
    assert_true(n <= 64);
    check_same(in, n);
}

static void test_against_double(void **state)
{
    (void)state;
    enum { N = 200001 };
    float *in = malloc(N * sizeof *in), *fast = malloc(N * sizeof *fast);
    float *portable = malloc(N * sizeof *portable);
    assert_true(in && fast && portable);
    for (int i = 0; i < N; i++) in[i] = -10.0f + 20.0f * (float)i / (N - 1);
    cpu_gelu_span(fast, in, N);
    cpu_gelu_span_portable(portable, in, N);
    for (int i = 0; i < N; i++) {
        double x = in[i], want = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        double tol = 1e-6 * (1.0 + fabs(x));
        if (!(fabs(fast[i] - want) <= tol) || !(fabs(portable[i] - want) <= tol)) {
            fprintf(stderr, "x = %.9g: %.9g and %.9g, double %.9g\n", x, (double)fast[i],
                    (double)portable[i], want);
            fail();
        }
    }
    free(in);
    free(fast);
    free(portable);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_values),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_against_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

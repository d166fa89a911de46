/* test_softmax.c: the attention row softmax (cpu/softmax.c).
 *
 * Both versions (the one picked for this CPU and the portable one) against a
 * double-precision softmax over every row length 1..100 with padded widths
 * n..n+19 and scales 0.1..1: each probability within 4e-7 + 4e-6 relative,
 * the padding set to 0 and nothing past the row touched. Then rows with
 * -inf keys (probability 0), a single key (1), equal keys (1/n), a NaN key
 * (the whole row NaN in both), and huge logits (no overflow). The same
 * for cpu_softmax_row_max given the row's largest key as the attention
 * kernel finds it, which must also equal cpu_softmax_row bit for bit, and
 * cpu_softmax_rows_max over blocks of rows (fewer, as many and more rows
 * than a block, a NaN row and a row of -inf keys among them), which must
 * equal cpu_softmax_row_max row by row, padding included, bit for bit.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/rng.h"
#include "cpu/softmax.h"

#define MAX_T 128
#define GUARD 7.25f /* a value no softmax writes */

typedef void (*softmax_fn)(float *x, int n, int T, float scale);

static uint64_t rng_state = RNG_GOLDEN;

/* Uniform in [lo, hi): splitmix64's top 24 bits. */
static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng_next(&rng_state) >> 40) / 16777216.0f;
}

/* Runs f on row (n keys, width T) inside a guarded buffer; checks the
 * padding and the guards; returns the row in out. */
static void run_row(softmax_fn f, const float *row, int n, int T, float scale, float *out)
{
    float buf[MAX_T + 32];
    for (int j = 0; j < MAX_T + 32; j++) buf[j] = GUARD;
    memcpy(buf + 16, row, (size_t)T * sizeof *row);
    f(buf + 16, n, T, scale);
    for (int j = 0; j < 16; j++) assert_true(buf[j] == GUARD);
    for (int j = 16 + T; j < MAX_T + 32; j++) assert_true(buf[j] == GUARD);
    for (int j = n; j < T; j++) assert_true(buf[16 + j] == 0.0f);
    memcpy(out, buf + 16, (size_t)T * sizeof *out);
}

/* cpu_softmax_row_max with the largest of x[0, n), a NaN skipped. */
static void softmax_given_max(float *x, int n, int T, float scale)
{
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    cpu_softmax_row_max(x, n, T, scale, mx);
}

static void check_against_double(softmax_fn f)
{
    float row[MAX_T], got[MAX_T];
    double ref[MAX_T];
    for (int n = 1; n <= 100; n++)
        for (int T = n; T < n + 20 && T <= MAX_T; T += 3)
            for (float scale = 0.1f; scale <= 1.0f; scale += 0.3f) {
                for (int j = 0; j < T; j++) row[j] = uniform(-12.0f, 12.0f);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
                for (int j = 0; j < n; j++) sum += ref[j] = exp(((double)row[j] - mx) * scale);
                run_row(f, row, n, T, scale, got);
                for (int j = 0; j < n; j++) {
                    double want = ref[j] / sum;
                    if (!(fabs(got[j] - want) <= 4e-7 + 4e-6 * want)) {
                        fprintf(stderr, "n %d T %d scale %g key %d: got %.9g want %.9g\n", n, T,
                                (double)scale, j, (double)got[j], want);
                        fail();
                    }
                }
            }
}

static void test_picked_vs_double(void **state)
{
    (void)state;
    check_against_double(cpu_softmax_row);
}

static void test_portable_vs_double(void **state)
{
    (void)state;
    check_against_double(cpu_softmax_row_portable);
}

static void test_given_max_vs_double(void **state)
{
    (void)state;
    check_against_double(softmax_given_max);
}

/* Given the max, the same bits as finding it. */
static void test_given_max_same_bits(void **state)
{
    (void)state;
    float a[MAX_T], b[MAX_T];
    for (int n = 1; n <= MAX_T; n++) {
        for (int j = 0; j < n; j++) a[j] = b[j] = uniform(-20.0f, 20.0f);
        cpu_softmax_row(a, n, n, 0.125f);
        softmax_given_max(b, n, n, 0.125f);
        assert_memory_equal(a, b, (size_t)n * sizeof *a);
    }
}

/* Rows of a block: each row the bits of cpu_softmax_row_max, nothing past
 * the last row touched. */
static void test_rows_same_bits(void **state)
{
    (void)state;
    enum { MAX_ROWS = 19 };
    static float a[MAX_ROWS * (MAX_T + 7) + 1], b[MAX_ROWS * (MAX_T + 7)];
    const int counts[] = {1, 3, 8, 9, 16, 19}, lengths[] = {1, 5, 16, 33, 100, 121};
    float mx[MAX_ROWS];
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
        for (size_t q = 0; q < sizeof lengths / sizeof *lengths; q++)
            for (int pad = 0; pad <= 7; pad += 7) {
                int rows = counts[c], n = lengths[q], T = n + pad;
                for (int i = 0; i < rows * T; i++) a[i] = uniform(-20.0f, 20.0f);
                if (rows > 2) a[T + n / 2] = NAN;
                if (rows > 3)
                    for (int j = 0; j < n; j++) a[2 * T + j] = -INFINITY;
                a[rows * T] = GUARD;
                for (int r = 0; r < rows; r++) {
                    mx[r] = -INFINITY;
                    for (int j = 0; j < n; j++)
                        mx[r] = a[r * T + j] > mx[r] ? a[r * T + j] : mx[r];
                }
                memcpy(b, a, (size_t)rows * T * sizeof *a);
                cpu_softmax_rows_max(a, rows, n, T, 0.125f, mx);
                for (int r = 0; r < rows; r++) cpu_softmax_row_max(b + r * T, n, T, 0.125f, mx[r]);
                assert_memory_equal(a, b, (size_t)rows * T * sizeof *a);
                assert_true(a[rows * T] == GUARD);
            }
}

static void check_special_rows(softmax_fn f)
{
    float row[40], got[40];
    /* -inf keys get 0, the rest share the mass */
    for (int j = 0; j < 40; j++) row[j] = j % 3 ? -INFINITY : 1.0f;
    run_row(f, row, 37, 40, 0.5f, got);
    for (int j = 0; j < 37; j++) assert_true(fabsf(got[j] - (j % 3 ? 0.0f : 1.0f / 13)) < 1e-7f);
    /* one key */
    row[0] = -3.0f;
    run_row(f, row, 1, 40, 1.0f, got);
    assert_true(got[0] == 1.0f);
    /* equal keys */
    for (int j = 0; j < 40; j++) row[j] = 2.5f;
    run_row(f, row, 33, 33, 1.0f, got);
    for (int j = 0; j < 33; j++) assert_true(fabsf(got[j] - 1.0f / 33) < 1e-7f);
    /* huge logits: exp never overflows, the largest key wins */
    for (int j = 0; j < 40; j++) row[j] = j == 20 ? 3e38f : -3e38f;
    run_row(f, row, 40, 40, 1.0f, got);
    for (int j = 0; j < 40; j++) assert_true(got[j] == (j == 20 ? 1.0f : 0.0f));
    /* a NaN key makes the row NaN */
    for (int j = 0; j < 40; j++) row[j] = uniform(-1.0f, 1.0f);
    row[17] = NAN;
    run_row(f, row, 35, 40, 1.0f, got);
    for (int j = 0; j < 35; j++) assert_true(isnan(got[j]));
}

static void test_special_rows(void **state)
{
    (void)state;
    check_special_rows(cpu_softmax_row);
    check_special_rows(cpu_softmax_row_portable);
    check_special_rows(softmax_given_max);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_picked_vs_double),    cmocka_unit_test(test_portable_vs_double),
        cmocka_unit_test(test_given_max_vs_double), cmocka_unit_test(test_given_max_same_bits),
        cmocka_unit_test(test_rows_same_bits),      cmocka_unit_test(test_special_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

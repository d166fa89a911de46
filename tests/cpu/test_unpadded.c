/* test_unpadded.c: the CPU backend's slots for inference without padding
 * rows (backend.h: unpad_rows, pad_rows, attention_unpadded).
 *
 * Batches of sequences with mixed lengths (one full, one of a single
 * token, lengths outside [1, T] clamped as attention clamps them, the
 * last one short):
 * unpad_rows packs the real rows in order and pad_rows puts them back with
 * zero padding rows, both in place, nothing past the rows touched; and
 * attention_unpadded on the packed rows gives every real row the bits
 * attention (or attention_bf16, when bf16 is set) gives it on the padded
 * rows, for head sizes the AVX-512F kernels run (32, 64) and one they
 * decline (8: the BLAS products), with one and two threads, and writes
 * nothing past the R rows (a head that cleared "padding" rows there would
 * clear the next sequence's); and a batch of more sequences than one
 * attention run takes.
 * The slots of a pass that reads only the [CLS] rows (first_rows,
 * attention_first), on padded and on packed rows: first_rows moves each
 * sequence's first row to row b in place and writes no other row;
 * attention_first gives row b the bits attention gives sequence b's first
 * row (to rounding where the BLAS products compute it: the product of one
 * row is not the same call as that of all) and writes nothing past B rows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/errors.h"
#include "core/rng.h"
#include "cpu/backend_cpu.h"

#define GUARD 7.25f /* a value no slot writes */

static uint64_t rng_state = RNG_GOLDEN;

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng_next(&rng_state) >> 40) / 16777216.0f;
}

enum { B = 6, T = 23 };
/* lengths as given, and as the slots clamp them to [1, T] */
static const int given[B] = {T, 9, 1, 0, 40, 5}, real[B] = {T, 9, 1, 1, T, 5};

static int real_rows(void)
{
    int R = 0;
    for (int b = 0; b < B; b++) R += real[b];
    return R;
}

static backend *cpu_backend(int threads)
{
    backend *be;
    char err[SM_ERR_MAX] = "";
    assert_int_equal(backend_cpu_create(threads, &be, err), SM_OK);
    assert_true(be->unpad_rows && be->pad_rows && be->attention_unpadded);
    assert_true(be->first_rows && be->attention_first);
    return be;
}

static void test_unpad_then_pad(void **state)
{
    (void)state;
    backend *be = cpu_backend(1);
    const int widths[] = {1, 7, 32};
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
        int C = widths[k], R = real_rows();
        size_t n = (size_t)B * T * C;
        float *x = malloc((n + 1) * sizeof *x), *orig = malloc(n * sizeof *orig);
        assert_true(x && orig);
        for (size_t i = 0; i < n; i++) orig[i] = x[i] = uniform(-1.0f, 1.0f);
        x[n] = GUARD;
        assert_int_equal(be->unpad_rows(be, x, given, B, T, C), SM_OK);
        int row = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < real[b]; t++, row++)
                assert_memory_equal(x + (size_t)row * C, orig + ((size_t)b * T + t) * C,
                                    C * sizeof *x);
        assert_int_equal(row, R);
        assert_true(x[n] == GUARD);
        assert_int_equal(be->pad_rows(be, x, given, B, T, C), SM_OK);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    size_t i = ((size_t)b * T + t) * C + c;
                    assert_true(t < real[b] ? x[i] == orig[i] : x[i] == 0.0f);
                }
        assert_true(x[n] == GUARD);
        free(x);
        free(orig);
    }
    be->destroy(be);
}

/* attention_unpadded against attention (bf16: attention_bf16) on the same
 * rows, padded. */
static void check_attention(backend *be, int H, int d, int bf16)
{
    int C = H * d, R = real_rows();
    size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C, na = (size_t)B * H * T * T;
    float *qkv = malloc(n3 * sizeof *qkv), *packed = malloc(n3 * sizeof *packed);
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    float *att = malloc(na * sizeof *att);
    assert_true(qkv && packed && want && got && att);
    for (size_t i = 0; i < n3; i++) qkv[i] = uniform(-2.0f, 2.0f);
    if (bf16) assert_int_equal(be->attention_bf16(be, want, att, qkv, given, B, T, H, d, 0.3f), 0);
    else assert_int_equal(be->attention(be, want, att, qkv, given, B, T, H, d, 0.3f), 0);

    memcpy(packed, qkv, n3 * sizeof *qkv);
    assert_int_equal(be->unpad_rows(be, packed, given, B, T, 3 * C), SM_OK);
    for (size_t i = 0; i < n; i++) got[i] = GUARD;
    assert_int_equal(
        be->attention_unpadded(be, got, att, packed, given, B, T, H, d, 0.3f, bf16), SM_OK);
    int row = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < real[b]; t++, row++)
            assert_memory_equal(got + (size_t)row * C, want + ((size_t)b * T + t) * C,
                                C * sizeof *got);
    for (size_t i = (size_t)R * C; i < n; i++) assert_true(got[i] == GUARD);
    free(qkv);
    free(packed);
    free(want);
    free(got);
    free(att);
}

static void test_attention_rows(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        backend *be = cpu_backend(threads);
        check_attention(be, 2, 32, 0);
        check_attention(be, 3, 64, 0);
        check_attention(be, 4, 8, 0);
        check_attention(be, 2, 32, 1);
        check_attention(be, 3, 64, 1);
        be->destroy(be);
    }
}

static void test_first_rows(void **state)
{
    (void)state;
    backend *be = cpu_backend(1);
    const int widths[] = {1, 7, 32};
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++)
        for (int packed = 0; packed <= 1; packed++) {
            int C = widths[k];
            size_t n = (size_t)B * T * C;
            float *x = malloc((n + 1) * sizeof *x), *orig = malloc(n * sizeof *orig);
            assert_true(x && orig);
            for (size_t i = 0; i < n; i++) orig[i] = x[i] = uniform(-1.0f, 1.0f);
            x[n] = GUARD;
            if (packed) {
                assert_int_equal(be->unpad_rows(be, x, given, B, T, C), SM_OK);
                memcpy(orig, x, n * sizeof *x);
            }
            assert_int_equal(be->first_rows(be, x, given, B, T, C, packed), SM_OK);
            size_t from = 0;
            for (int b = 0; b < B; b++) {
                size_t row = packed ? from : (size_t)b * T;
                assert_memory_equal(x + (size_t)b * C, orig + row * C, C * sizeof *x);
                from += (size_t)real[b];
            }
            assert_memory_equal(x + (size_t)B * C, orig + (size_t)B * C,
                                (n - (size_t)B * C) * sizeof *x);
            assert_true(x[n] == GUARD);
            free(x);
            free(orig);
        }
    be->destroy(be);
}

/* attention_first against attention (bf16: attention_bf16) on the padded
 * rows, its qkv padded or packed. */
static void check_attention_first(backend *be, int H, int d, int bf16, int packed)
{
    int C = H * d;
    size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C, na = (size_t)B * H * T * T;
    float *qkv = malloc(n3 * sizeof *qkv), *in = malloc(n3 * sizeof *in);
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    float *att = malloc(na * sizeof *att);
    assert_true(qkv && in && want && got && att);
    for (size_t i = 0; i < n3; i++) in[i] = qkv[i] = uniform(-2.0f, 2.0f);
    if (bf16) assert_int_equal(be->attention_bf16(be, want, att, qkv, given, B, T, H, d, 0.3f), 0);
    else assert_int_equal(be->attention(be, want, att, qkv, given, B, T, H, d, 0.3f), 0);

    if (packed) assert_int_equal(be->unpad_rows(be, in, given, B, T, 3 * C), SM_OK);
    for (size_t i = 0; i < n; i++) got[i] = GUARD;
    assert_int_equal(
        be->attention_first(be, got, att, in, given, B, T, H, d, 0.3f, bf16, packed), SM_OK);
    for (int b = 0; b < B; b++) {
        const float *w = want + (size_t)b * T * C, *g = got + (size_t)b * C;
        if (d % 16 == 0) assert_memory_equal(g, w, C * sizeof *got);
        else
            for (int c = 0; c < C; c++) assert_true(fabsf(g[c] - w[c]) <= 1e-5f * (1 + fabsf(w[c])));
    }
    for (size_t i = (size_t)B * C; i < n; i++) assert_true(got[i] == GUARD);
    free(qkv);
    free(in);
    free(want);
    free(got);
    free(att);
}

static void test_attention_first(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        backend *be = cpu_backend(threads);
        for (int packed = 0; packed <= 1; packed++) {
            check_attention_first(be, 2, 32, 0, packed);
            check_attention_first(be, 3, 64, 0, packed);
            check_attention_first(be, 4, 8, 0, packed);
            check_attention_first(be, 2, 32, 1, packed);
            check_attention_first(be, 3, 64, 1, packed);
        }
        be->destroy(be);
    }
}

/* More sequences than one run of attention_unpadded takes (it keeps their
 * first rows on the stack, 512 at a time). */
static void test_many_sequences(void **state)
{
    (void)state;
    enum { NB = 1100, NT = 5, H = 2, D = 16, C = H * D };
    backend *be = cpu_backend(2);
    int *lengths = malloc(NB * sizeof *lengths), R = 0;
    size_t n3 = (size_t)NB * NT * 3 * C, n = (size_t)NB * NT * C;
    float *qkv = malloc(n3 * sizeof *qkv), *packed = malloc(n3 * sizeof *packed);
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    float *att = malloc((size_t)NB * H * NT * NT * sizeof *att);
    assert_true(lengths && qkv && packed && want && got && att);
    for (int b = 0; b < NB; b++) R += lengths[b] = 1 + (int)(rng_next(&rng_state) % NT);
    for (size_t i = 0; i < n3; i++) packed[i] = qkv[i] = uniform(-2.0f, 2.0f);
    assert_int_equal(be->attention(be, want, att, qkv, lengths, NB, NT, H, D, 0.25f), SM_OK);
    assert_int_equal(be->unpad_rows(be, packed, lengths, NB, NT, 3 * C), SM_OK);
    for (size_t i = 0; i < n; i++) got[i] = GUARD;
    assert_int_equal(
        be->attention_unpadded(be, got, att, packed, lengths, NB, NT, H, D, 0.25f, 0), SM_OK);
    assert_int_equal(be->pad_rows(be, got, lengths, NB, NT, C), SM_OK);
    assert_memory_equal(got, want, n * sizeof *got); /* padding rows: 0 in both */
    /* and of their first rows only */
    for (size_t i = 0; i < n; i++) got[i] = GUARD;
    assert_int_equal(
        be->attention_first(be, got, att, packed, lengths, NB, NT, H, D, 0.25f, 0, 1), SM_OK);
    for (int b = 0; b < NB; b++)
        assert_memory_equal(got + (size_t)b * C, want + (size_t)b * NT * C, C * sizeof *got);
    for (size_t i = (size_t)NB * C; i < n; i++) assert_true(got[i] == GUARD);
    free(lengths);
    free(qkv);
    free(packed);
    free(want);
    free(got);
    free(att);
    be->destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unpad_then_pad),
        cmocka_unit_test(test_attention_rows),
        cmocka_unit_test(test_first_rows),
        cmocka_unit_test(test_attention_first),
        cmocka_unit_test(test_many_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

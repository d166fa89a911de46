/* attention_test_util.h: what the tests of the two attention kernels
 * (tests/cpu/test_attention.c, tests/cpu/test_attention_bf16.c) share: one
 * head's buffers, laid out as the encoder's fused QKV rows (H heads of d,
 * the head under test h), and the checks of what a kernel must leave
 * alone.
 *
 * head_case_open: qkv (T rows of 3 C) random from the caller's stream for
 * the len real rows and NaN in the padding rows (never to be read); out
 * (T x C) and att (T x T) filled with HEAD_SENTINEL. head_case_declined:
 * nothing written (a kernel that says 0). head_case_outside: the padding
 * rows of the head's output 0, each real row's probabilities past len 0,
 * and the other heads' columns untouched. head_rows_check: a kernel's
 * first-rows form against its whole one; head_rows_all: that for a set of
 * head sizes, lengths and row counts.
 */
#ifndef ATTENTION_TEST_UTIL_H
#define ATTENTION_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#define HEAD_SENTINEL 7.0f /* a value no kernel writes */

typedef struct head_case {
    int d, C, ld, h, len, T;
    float *qkv, *out, *att;
    const float *q, *k, *v; /* head h's slices of qkv */
    float scale;            /* 1 / sqrt(d) */
} head_case;

static void head_case_open(head_case *c, int d, int H, int h, int len, int T, float (*rnd)(void))
{
    c->d = d, c->C = H * d, c->ld = 3 * c->C, c->h = h, c->len = len, c->T = T;
    c->qkv = malloc((size_t)T * c->ld * sizeof *c->qkv);
    c->out = malloc((size_t)T * c->C * sizeof *c->out);
    c->att = malloc((size_t)T * T * sizeof *c->att);
    assert_true(c->qkv && c->out && c->att);
    for (int i = 0; i < T * c->ld; i++) c->qkv[i] = i < len * c->ld ? 2.0f * rnd() : NAN;
    for (int i = 0; i < T * c->C; i++) c->out[i] = HEAD_SENTINEL;
    for (int i = 0; i < T * T; i++) c->att[i] = HEAD_SENTINEL;
    c->q = c->qkv + h * d;
    c->k = c->qkv + c->C + h * d;
    c->v = c->qkv + 2 * c->C + h * d;
    c->scale = 1.0f / sqrtf((float)d);
}

static void head_case_declined(const head_case *c)
{
    for (int i = 0; i < c->T * c->C; i++) assert_true(c->out[i] == HEAD_SENTINEL);
    for (int i = 0; i < c->T * c->T; i++) assert_true(c->att[i] == HEAD_SENTINEL);
}

static void head_case_outside(const head_case *c)
{
    int d = c->d, C = c->C, h = c->h, T = c->T;
    for (int t = 0; t < c->len; t++)
        for (int u = c->len; u < T; u++) assert_true(c->att[t * T + u] == 0.0f);
    for (int t = c->len; t < T; t++)
        for (int i = 0; i < d; i++) assert_true(c->out[t * C + h * d + i] == 0.0f);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < C; j++)
            if (j < h * d || j >= (h + 1) * d) assert_true(c->out[t * C + j] == HEAD_SENTINEL);
}

typedef int (*head_fn)(float *out, int ldo, float *att, const float *q, const float *k,
                       const float *v, int ldqkv, int len, int T, int d, float scale);
typedef int (*head_rows_fn)(float *out, int ldo, float *att, const float *q, const float *k,
                            const float *v, int ldqkv, int len, int T, int d, float scale,
                            int rows);

/* rows_fn for the first `rows` query rows of a case gives those rows the
 * bits whole gives them (output and probabilities) and writes no other
 * row; it declines rows outside [1, len] with nothing written. Both
 * run on c's inputs, the first-rows form into a copy of c's sentinels. */
static void head_rows_check(head_case *c, head_fn whole, head_rows_fn rows_fn, int rows)
{
    int d = c->d, C = c->C, h = c->h, T = c->T, len = c->len;
    float *out = malloc((size_t)T * C * sizeof *out), *att = malloc((size_t)T * T * sizeof *att);
    assert_true(out && att);
    for (int i = 0; i < T * C; i++) out[i] = HEAD_SENTINEL;
    for (int i = 0; i < T * T; i++) att[i] = HEAD_SENTINEL;
    if (!whole(c->out + h * d, C, c->att, c->q, c->k, c->v, c->ld, len, T, d, c->scale)) {
        assert_int_equal(rows_fn(out + h * d, C, att, c->q, c->k, c->v, c->ld, len, T, d,
                                 c->scale, rows),
                         0);
        goto end;
    }
    assert_int_equal(
        rows_fn(out + h * d, C, att, c->q, c->k, c->v, c->ld, len, T, d, c->scale, 0), 0);
    assert_int_equal(
        rows_fn(out + h * d, C, att, c->q, c->k, c->v, c->ld, len, T, d, c->scale, len + 1), 0);
    assert_int_equal(
        rows_fn(out + h * d, C, att, c->q, c->k, c->v, c->ld, len, T, d, c->scale, rows), 1);
    for (int t = 0; t < T; t++) {
        int done = t < rows;
        for (int j = 0; j < C; j++) {
            float want = done && j >= h * d && j < (h + 1) * d ? c->out[t * C + j] : HEAD_SENTINEL;
            assert_memory_equal(&out[t * C + j], &want, sizeof want);
        }
        for (int u = 0; u < T; u++) {
            float want = done ? c->att[t * T + u] : HEAD_SENTINEL;
            assert_memory_equal(&att[t * T + u], &want, sizeof want);
        }
    }
end:
    free(out);
    free(att);
}

static void head_case_close(head_case *c)
{
    free(c->qkv);
    free(c->out);
    free(c->att);
}

/* head_rows_check for one row (an inference pass's [CLS] rows), part of a
 * block, a block and one more, all but one, and all; padded rows; every
 * head size. */
static void head_rows_all(head_fn whole, head_rows_fn rows_fn, float (*rnd)(void))
{
    const int sizes[] = {16, 32, 48, 64}, lens[][2] = {{1, 1}, {37, 40}, {130, 130}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
            int len = lens[l][0], T = lens[l][1];
            const int rows[] = {1, 3, 8, 9, len - 1, len};
            for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
                if (rows[r] < 1 || rows[r] > len) continue;
                head_case c;
                head_case_open(&c, sizes[i], 3, 1, len, T, rnd);
                head_rows_check(&c, whole, rows_fn, rows[r]);
                head_case_close(&c);
            }
        }
}

#endif

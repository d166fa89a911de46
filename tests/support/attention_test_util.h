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
 * and the other heads' columns untouched.
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

static void head_case_close(head_case *c)
{
    free(c->qkv);
    free(c->out);
    free(c->att);
}

#endif

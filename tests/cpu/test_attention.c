/* test_attention.c: one (sequence, head) of inference attention with the
 * AVX-512F kernel (cpu/attention.c) against a double-precision reference:
 * scores, the masked softmax and the weighted values, for d = 16, 32, 48
 * and 64, lengths that are and are not multiples of the kernel's tiles
 * (1 .. 130), padded rows (T > len; their inputs NaN: never read), and
 * rows laid out as the encoder's fused QKV buffer (stride 3 C, the head at
 * an offset). The probabilities
 * it leaves in att (len x len, zero beyond len in each row) and the zero
 * rows of the output past len are checked as the training backward and the
 * next layer read them. Where the kernel declines (no AVX-512F, another
 * head size) it must write nothing and say 0. Large scores run through the
 * BF16 kernel too (tests/cpu/test_attention_bf16.c has the rest of its
 * checks). The first-rows form (cpu_attention_head_rows) gives its rows
 * the whole head's bits and writes no other row.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/features.h"
#include "support/attention_test_util.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float rnd(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(g_rng >> 11) % 2000001 - 1000000) * 1e-6f;
}

/* Reference attention in double: probs (len x len) and out (len x d). */
static void reference(double *probs, double *out, const float *q, const float *k, const float *v,
                      int ld, int len, int d, float scale)
{
    for (int t = 0; t < len; t++) {
        double mx = -INFINITY, sum = 0;
        for (int u = 0; u < len; u++) {
            double s = 0;
            for (int i = 0; i < d; i++) s += (double)q[t * ld + i] * k[u * ld + i];
            probs[t * len + u] = s * scale;
            if (probs[t * len + u] > mx) mx = probs[t * len + u];
        }
        for (int u = 0; u < len; u++) sum += probs[t * len + u] = exp(probs[t * len + u] - mx);
        for (int u = 0; u < len; u++) probs[t * len + u] /= sum;
        for (int i = 0; i < d; i++) {
            double o = 0;
            for (int u = 0; u < len; u++) o += probs[t * len + u] * v[u * ld + i];
            out[t * d + i] = o;
        }
    }
}

static void check_case(int d, int H, int h, int len, int T)
{
    head_case c;
    head_case_open(&c, d, H, h, len, T, rnd);
    int C = c.C;
    float *out = c.out, *att = c.att;
    double *probs = malloc((size_t)len * len * sizeof *probs);
    double *ref = malloc((size_t)len * d * sizeof *ref);
    assert_true(probs && ref);
    reference(probs, ref, c.q, c.k, c.v, c.ld, len, d, c.scale);

    int done = cpu_attention_head(out + h * d, C, att, c.q, c.k, c.v, c.ld, len, T, d, c.scale);
    if (!done) {
        head_case_declined(&c);
        goto end;
    }
    for (int t = 0; t < len; t++) {
        for (int u = 0; u < len; u++)
            if (!(fabs(att[t * T + u] - probs[t * len + u]) <= 2e-6 + 1e-5 * probs[t * len + u]))
                fail_msg("d %d len %d T %d: p[%d][%d] %.9g, reference %.9g", d, len, T, t, u,
                         att[t * T + u], probs[t * len + u]);
        for (int i = 0; i < d; i++) {
            double want = ref[t * d + i], got = out[t * C + h * d + i];
            if (!(fabs(got - want) <= 1e-5 * (1 + fabs(want))))
                fail_msg("d %d len %d T %d: out[%d][%d] %.9g, reference %.9g", d, len, T, t, i, got,
                         want);
        }
    }
    /* zeros past len, the other heads' columns untouched */
    head_case_outside(&c);
end:
    head_case_close(&c);
    free(probs);
    free(ref);
}

static void test_against_reference(void **state)
{
    (void)state;
    if (!cpu_has(CPU_AVX512F)) print_message("no AVX-512F: the kernel must decline\n");
    static const int lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 83, 128, 130};
    static const int ds[] = {16, 32, 48, 64};
    for (size_t a = 0; a < sizeof ds / sizeof *ds; a++)
        for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) {
            check_case(ds[a], 4, 2, lens[b], lens[b]);
            check_case(ds[a], 3, 0, lens[b], lens[b] + 5);
        }
}

typedef int (*head_fn)(float *out, int ldo, float *att, const float *q, const float *k,
                       const float *v, int ldqkv, int len, int T, int d, float scale);

/* Large scores: the softmax subtracts the row maximum (no overflow); for
 * the FP32 kernel and the BF16 one (attention_bf16.c), whose values are
 * rounded to BF16 (tol). */
static void large_scores(head_fn head, int T, float tol)
{
    int d = 64, len = T, ld = 3 * d;
    float *qkv = calloc((size_t)T * ld, sizeof *qkv), *out = calloc((size_t)T * d, sizeof *out);
    float *att = calloc((size_t)T * T, sizeof *att);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < d; i++) {
            qkv[t * ld + i] = 30.0f;                    /* q */
            qkv[t * ld + d + i] = t == 3 ? 1.0f : 0.0f; /* k: row 3 stands out */
            qkv[t * ld + 2 * d + i] = (float)t;         /* v */
        }
    if (head(out, d, att, qkv, qkv + d, qkv + 2 * d, ld, len, T, d, 1.0f)) {
        for (int t = 0; t < len; t++) {
            assert_true(isfinite(att[t * T + 3]) && att[t * T + 3] > 0.999f);
            assert_true(fabsf(out[t * d] - 3.0f) < tol);
        }
    }
    free(qkv);
    free(out);
    free(att);
}

static void test_large_scores(void **state)
{
    (void)state;
    large_scores(cpu_attention_head, 20, 1e-3f);
    large_scores(cpu_attention_head_bf16, 21, 1e-2f); /* an odd length: a zero key */
}

/* Head sizes the kernel does not take: nothing written, 0. */
static void test_declines(void **state)
{
    (void)state;
    check_case(24, 2, 1, 17, 20);
    check_case(80, 2, 0, 9, 9);
    float x[8] = {0}, o[8], a[4];
    for (int i = 0; i < 8; i++) o[i] = 7.0f;
    assert_int_equal(cpu_attention_head(o, 8, a, x, x, x, 8, 0, 1, 16, 1.0f), 0);
    for (int i = 0; i < 8; i++) assert_true(o[i] == 7.0f);
}

/* The first rows only (head_rows_all). */
static void test_first_rows(void **state)
{
    (void)state;
    head_rows_all(cpu_attention_head, cpu_attention_head_rows, rnd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_rows),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_large_scores),
        cmocka_unit_test(test_declines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

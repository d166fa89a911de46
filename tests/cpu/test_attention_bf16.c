/* test_attention_bf16.c: one (sequence, head) of inference attention with
 * its products in BF16 (cpu/attention_bf16.c) against a double-precision
 * reference of the same operands: q, k and v rounded to BF16
 * (gemm_bf16_round) give the scores, the kernel's own FP32 probabilities
 * rounded to BF16 the outputs, so what is left is FP32 summation and the
 * tolerance is FP32's: a pair or key laid out wrong, a dimension or key
 * dropped or a padding lane read would fail it. For d = 16, 32, 48 and 64,
 * lengths around the tiles and pairs (odd lengths: a zero key after the
 * last), padded rows (T > len), rows laid out as the encoder's fused QKV
 * buffer (its padding rows NaN: never read), a length past the stack
 * buffer (the heap copy), and against the FP32 kernel (within BF16's
 * rounding, and not equal to it: the rounding happens); large scores are
 * in tests/cpu/test_attention.c. Where the kernel declines (no
 * AVX512-BF16, another head size) it must write nothing and say 0. The
 * first-rows form (cpu_attention_head_bf16_rows) gives its rows the whole
 * head's bits and writes no other row.
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
#include "cpu/gemm_bf16.h"
#include "support/attention_test_util.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float rnd(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(g_rng >> 11) % 2000001 - 1000000) * 1e-6f;
}

static double bf(float x)
{
    return gemm_bf16_to_float(gemm_bf16_round(x));
}

static int bf16_cpu(void)
{
    return cpu_has(CPU_AVX512F | CPU_AVX512BW_VL | CPU_AVX512_BF16);
}

/* Probabilities of the BF16-rounded q and k in double (len x len), and
 * |score| sums (the scale of each score's rounding). */
static void reference_probs(double *probs, double *mag, const float *q, const float *k, int ld,
                            int len, int d, float scale)
{
    for (int t = 0; t < len; t++) {
        double mx = -INFINITY, sum = 0;
        for (int u = 0; u < len; u++) {
            double s = 0, m = 0;
            for (int i = 0; i < d; i++) {
                double x = bf(q[t * ld + i]) * bf(k[u * ld + i]);
                s += x;
                m += fabs(x);
            }
            probs[t * len + u] = s * scale;
            mag[t * len + u] = m * scale;
            if (probs[t * len + u] > mx) mx = probs[t * len + u];
        }
        for (int u = 0; u < len; u++) sum += probs[t * len + u] = exp(probs[t * len + u] - mx);
        for (int u = 0; u < len; u++) probs[t * len + u] /= sum;
    }
}

static void check_case(int d, int H, int h, int len, int T)
{
    head_case c;
    head_case_open(&c, d, H, h, len, T, rnd);
    int C = c.C, ld = c.ld;
    float *out = c.out, *att = c.att;
    const float *v = c.v;
    double *probs = malloc((size_t)len * len * sizeof *probs);
    double *mag = malloc((size_t)len * len * sizeof *mag);
    assert_true(probs && mag);
    reference_probs(probs, mag, c.q, c.k, ld, len, d, c.scale);

    int done = cpu_attention_head_bf16(out + h * d, C, att, c.q, c.k, v, ld, len, T, d, c.scale);
    assert_int_equal(done, bf16_cpu());
    if (!done) {
        head_case_declined(&c);
        goto end;
    }
    for (int t = 0; t < len; t++) {
        /* a score off by e moves p by about p e: FP32 sums of the same
         * products are within 1e-6 of their magnitude */
        for (int u = 0; u < len; u++) {
            double p = probs[t * len + u], e = 2e-6 + 1e-5 * p + 4e-6 * mag[t * len + u] * p;
            if (!(fabs(att[t * T + u] - p) <= e))
                fail_msg("d %d len %d T %d: p[%d][%d] %.9g, reference %.9g", d, len, T, t, u,
                         att[t * T + u], p);
        }
        for (int i = 0; i < d; i++) {
            double want = 0, m = 0;
            for (int u = 0; u < len; u++) {
                double x = bf(att[t * T + u]) * bf(v[u * ld + i]);
                want += x;
                m += fabs(x);
            }
            double got = out[t * C + h * d + i];
            if (!(fabs(got - want) <= 1e-6 * (1 + m)))
                fail_msg("d %d len %d T %d: out[%d][%d] %.9g, reference %.9g", d, len, T, t, i, got,
                         want);
        }
    }
    head_case_outside(&c);
end:
    head_case_close(&c);
    free(probs);
    free(mag);
}

static void test_against_reference(void **state)
{
    (void)state;
    if (!bf16_cpu()) print_message("no AVX512-BF16: the kernel must decline\n");
    static const int lens[] = {1,  2,  3,  7,  8,  9,  15, 16,  17, 31,
                               32, 33, 34, 63, 64, 65, 83, 128, 130};
    static const int ds[] = {16, 32, 48, 64};
    for (size_t a = 0; a < sizeof ds / sizeof *ds; a++)
        for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) {
            check_case(ds[a], 4, 2, lens[b], lens[b]);
            check_case(ds[a], 3, 0, lens[b], lens[b] + 5);
        }
    check_case(64, 2, 1, 300, 301); /* beyond the stack buffer */
}

/* Against the FP32 kernel: within BF16's rounding, and not the same. */
static void test_against_fp32(void **state)
{
    (void)state;
    int d = 64, H = 2, C = H * d, ld = 3 * C, T = 90, len = 83;
    float *qkv = malloc((size_t)T * ld * sizeof *qkv);
    float *o16 = calloc((size_t)T * C, sizeof *o16), *o32 = calloc((size_t)T * C, sizeof *o32);
    float *a16 = calloc((size_t)T * T, sizeof *a16), *a32 = calloc((size_t)T * T, sizeof *a32);
    assert_true(qkv && o16 && o32 && a16 && a32);
    for (int i = 0; i < T * ld; i++) qkv[i] = 2.0f * rnd();
    float scale = 1.0f / sqrtf((float)d);
    if (cpu_attention_head_bf16(o16, C, a16, qkv, qkv + C, qkv + 2 * C, ld, len, T, d, scale) &&
        cpu_attention_head(o32, C, a32, qkv, qkv + C, qkv + 2 * C, ld, len, T, d, scale)) {
        double worst = 0;
        int differ = 0;
        for (int t = 0; t < len; t++)
            for (int i = 0; i < d; i++) {
                double e = fabs((double)o16[t * C + i] - o32[t * C + i]);
                worst = e > worst ? e : worst;
                differ += o16[t * C + i] != o32[t * C + i];
            }
        print_message("BF16 against FP32 attention: largest output difference %.3g\n", worst);
        assert_true(worst < 5e-2);
        assert_true(differ > len * d / 2);
    }
    free(qkv);
    free(o16);
    free(o32);
    free(a16);
    free(a32);
}

/* Head sizes the kernel does not take, and no keys: nothing written, 0. */
static void test_declines(void **state)
{
    (void)state;
    float x[96] = {0}, o[96], a[16];
    for (int i = 0; i < 96; i++) o[i] = 7.0f;
    assert_int_equal(cpu_attention_head_bf16(o, 24, a, x, x, x, 24, 2, 2, 24, 1.0f), 0);
    assert_int_equal(cpu_attention_head_bf16(o, 80, a, x, x, x, 80, 1, 1, 80, 1.0f), 0);
    assert_int_equal(cpu_attention_head_bf16(o, 16, a, x, x, x, 16, 0, 1, 16, 1.0f), 0);
    for (int i = 0; i < 96; i++) assert_true(o[i] == 7.0f);
}

/* The first rows only (head_rows_all). */
static void test_first_rows(void **state)
{
    (void)state;
    head_rows_all(cpu_attention_head_bf16, cpu_attention_head_bf16_rows, rnd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_rows),
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_against_fp32),
        cmocka_unit_test(test_declines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

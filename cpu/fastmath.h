/* fastmath.h: exp and erf for float that compilers can vectorise.
 *
 * libm's expf/erff are scalar calls unless the build uses fast-math, which we
 * do not ship. These inline versions use only +, *, / and bit casts, so the
 * loops that call them vectorise in every target_clones variant.
 * Accuracy (checked against libm in tests/cpu/test_fastmath.c):
 *   sm_expf: < 2 ulp on [-87, 88]; returns 0 below -87.3 and +inf from
 *            about 88.38 up (libm overflows only past 88.72); its callers
 *            pass x <= 0 (softmax) or bounded arguments.
 *   sm_erff: < 1e-6 absolute on all of R.
 * Private to cpu/.
 */
#ifndef SM_FASTMATH_H
#define SM_FASTMATH_H

#include <stdint.h>
#include <string.h>

static inline float sm_expf(float x)
{
    const float lo = -87.3f, hi = 88.7f;
    int underflow = x < lo;
    x = x < lo ? lo : x;
    x = x > hi ? hi : x;
    /* x = n ln2 + r, |r| <= ln2/2; n rounded with the 1.5 * 2^23 trick. */
    const float shifter = 12582912.0f;
    float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    /* Cephes expf polynomial. */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    /* 2^n from the exponent bits; a NaN x (n NaN) takes exponent 0 here and
     * stays NaN through y (converting NaN to an integer is undefined) */
    int32_t ni = n == n ? (int32_t)n : 0;
    uint32_t bits = (uint32_t)(ni + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    y = y * scale;
    return underflow ? 0.0f : y;
}

/* Rational approximation of erf on [-4, 4] (odd numerator, even
 * denominator); outside that range erf is +-1 in float. */
static inline float sm_erff(float a)
{
    float x = a > 4.0f ? 4.0f : a;
    x = x < -4.0f ? -4.0f : x;
    float x2 = x * x;
    float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = x2 * p + -2.10102402082508e-06f;
    p = x2 * p + -5.69250639462346e-05f;
    p = x2 * p + -7.34990630326855e-04f;
    p = x2 * p + -2.95459980854025e-03f;
    p = x2 * p + -1.60960333262415e-02f;
    p = x * p;
    float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
    q = x2 * q + -1.68282697438203e-03f;
    q = x2 * q + -7.37332916720468e-03f;
    q = x2 * q + -1.42647390514189e-02f;
    return p / q;
}

#endif

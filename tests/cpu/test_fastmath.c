/* test_fastmath.c: cpu/fastmath.h's exp and erf against libm in double.
 *
 * The accuracy fastmath.h states: sm_expf within 2 ulp of exp on [-87, 88]
 * 0 below -87.3 and +inf past 88.4; sm_erff within 1e-6 of erf everywhere (checked on a
 * dense sweep of [-10, 10] and at the extremes).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "cpu/fastmath.h"

/* |got - want| in units of the float spacing at want. */
static double ulps(float got, double want)
{
    float w = (float)want;
    double ulp = (double)nextafterf(fabsf(w), INFINITY) - (double)fabsf(w);
    return fabs((double)got - want) / ulp;
}

static void test_expf_within_2_ulp(void **state)
{
    (void)state;
    double worst = 0, at = 0;
    for (float x = -87.0f; x <= 88.0f; x = nextafterf(x, INFINITY) + 1e-4f) {
        double u = ulps(sm_expf(x), exp((double)x));
        if (u > worst) worst = u, at = x;
    }
    printf("sm_expf: worst %.3f ulp at %.6g\n", worst, at);
    assert_true(worst < 2.0);
    assert_true(sm_expf(-87.4f) == 0.0f);
    assert_true(sm_expf(-1000.0f) == 0.0f);
    assert_true(sm_expf(0.0f) == 1.0f);
    assert_true(isfinite(sm_expf(88.0f)));
    assert_true(isinf(sm_expf(89.0f))); /* as fastmath.h says */
}

static void test_erff_within_1e6(void **state)
{
    (void)state;
    double worst = 0, at = 0;
    for (float x = -10.0f; x <= 10.0f; x += 1.0f / 4096) {
        double d = fabs((double)sm_erff(x) - erf((double)x));
        if (d > worst) worst = d, at = x;
    }
    printf("sm_erff: worst %.3g at %.6g\n", worst, at);
    assert_true(worst < 1e-6);
    assert_true(fabs(sm_erff(1e30f) - 1.0) < 1e-6);
    assert_true(fabs(sm_erff(-1e30f) + 1.0) < 1e-6);
    assert_true(sm_erff(0.0f) == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_within_2_ulp),
        cmocka_unit_test(test_erff_within_1e6),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

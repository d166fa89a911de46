/* grad_test_util.h: finite-difference helpers shared by the gradient tests
 * (tests/model/test_grad.c, tests/model/test_mlm_grad.c).
 *
 * Define GRAD_SEED (the random stream's seed) before including. urand()
 * draws from [-1, 1); check_grad() compares an analytic float gradient
 * with central differences of a double-precision loss:
 * |ours - fd| <= TOL * max(|fd|, rms of fd). setup/teardown hold a
 * two-thread CPU backend in g_be.
 */
#ifndef GRAD_TEST_UTIL_H
#define GRAD_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/errors.h"
#include "core/rng.h"
#include "cpu/backend_cpu.h"

#define TOL 1e-3
#define FD_H 1e-5

static backend *g_be;

static uint64_t g_rng = GRAD_SEED;
static inline double urand(void) /* [-1, 1) */
{
    g_rng = rng_mix64(g_rng);
    return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

static inline float *frand(size_t n, double scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(urand() * scale);
    return x;
}

static inline double *to_double(const float *x, size_t n)
{
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

typedef double (*loss_fn)(void *ctx);

/* Compares analytic (float, n) with central differences of f in x. */
static inline void check_grad(const char *what, double *x, size_t n, const float *analytic,
                              loss_fn f, void *ctx)
{
    double *fd = malloc(n * sizeof *fd), ss = 0;
    for (size_t i = 0; i < n; i++) {
        double save = x[i];
        x[i] = save + FD_H;
        double lp = f(ctx);
        x[i] = save - FD_H;
        double lm = f(ctx);
        x[i] = save;
        fd[i] = (lp - lm) / (2 * FD_H);
        ss += fd[i] * fd[i];
    }
    double rms = sqrt(ss / (double)n), worst = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = fabs(fd[i]) > rms ? fabs(fd[i]) : rms;
        double rel = ref > 0 ? fabs(analytic[i] - fd[i]) / ref : fabs(analytic[i]);
        if (!(rel <= TOL))
            fail_msg("%s[%zu]: backward %.9g, finite difference %.9g", what, i,
                     (double)analytic[i], fd[i]);
        if (rel > worst) worst = rel;
    }
    print_message("  %-28s %5zu elements, worst relative %.1e\n", what, n, worst);
    free(fd);
}

static inline int setup(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    return backend_cpu_create(2, &g_be, err);
}

static inline int teardown(void **state)
{
    (void)state;
    g_be->destroy(g_be);
    return 0;
}

#endif

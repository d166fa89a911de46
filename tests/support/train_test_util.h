/* train_test_util.h: helpers shared by the training tests against PyTorch
 * (tests/model/test_train.c, tests/model/test_mlm.c).
 *
 * load_golden() reads a losses.txt the fixture scripts wrote (hyper-
 * parameters, the first step's gradient norm, one loss a step).
 * check_tensor() compares one gradient tensor with PyTorch's:
 * |ours - torch| <= tol * max(|torch|, rms of that tensor, 1e-6 * gmax).
 * counter/stop_interrupt: a progress tally and an interrupt that says stop
 * after stop_after polls.
 */
#ifndef TRAIN_TEST_UTIL_H
#define TRAIN_TEST_UTIL_H

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
#include "cpu/backend_cpu.h"

#define GRAD_TOL 1e-3
#define LOSS_TOL 1e-4
#define MAX_EX 16
#define MAX_T 64

typedef struct golden {
    float lr, wd, clip, beta1, beta2, eps;
    int warmup, steps;
    double losses[32];
    int n_losses;
    double grad_norm;
} golden;

static inline void load_golden(const char *path, golden *g)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256];
    memset(g, 0, sizeof *g);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "hyper ", 6)) {
            assert_int_equal(sscanf(line + 6, "%f %f %d %d %f %f %f %f", &g->lr, &g->wd,
                                    &g->warmup, &g->steps, &g->clip, &g->beta1, &g->beta2,
                                    &g->eps), 8);
        } else if (!strncmp(line, "grad_norm ", 10)) {
            g->grad_norm = strtod(line + 10, NULL);
        } else {
            assert_true(g->n_losses < 32);
            g->losses[g->n_losses++] = strtod(line, NULL);
        }
    }
    fclose(f);
    assert_int_equal(g->n_losses, g->steps);
}

static inline backend *cpu_backend(int threads)
{
    char err[SM_ERR_MAX] = "";
    backend *be;
    assert_int_equal(backend_cpu_create(threads, &be, err), SM_OK);
    return be;
}

/* Largest |x[i]|. */
static inline double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t k = 0; k < n; k++)
        if (fabs(x[k]) > m) m = fabs(x[k]);
    return m;
}

/* Root mean square of x. */
static inline double rms_of(const float *x, size_t n)
{
    double ss = 0;
    for (size_t k = 0; k < n; k++) ss += (double)x[k] * x[k];
    return sqrt(ss / (double)n);
}

/* Largest |a[i] - b[i]|. */
static inline double max_abs_diff(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

/* The worst relative difference of ours from want (PyTorch's), over one
 * tensor; reports it with TRAIN_VERBOSE, and when over tol reports the
 * element and counts the tensor in *bad. */
static inline double check_tensor(const char *name, const float *ours, const float *want,
                                  size_t numel, double gmax, double tol, int *bad)
{
    double rms = rms_of(want, numel);
    if (rms < 1e-6 * gmax) rms = 1e-6 * gmax;
    double tensor_worst = 0;
    size_t at = 0;
    for (size_t k = 0; k < numel; k++) {
        double a = ours[k], b = want[k];
        double ref = fabs(b) > rms ? fabs(b) : rms;
        double rel = ref > 0 ? fabs(a - b) / ref : fabs(a - b) * 1e30;
        if (!(rel <= tensor_worst)) {
            tensor_worst = rel;
            at = k;
        }
    }
    if (getenv("TRAIN_VERBOSE")) print_message("  %-55s %.2e\n", name, tensor_worst);
    if (!(tensor_worst <= tol)) {
        print_error("gradient %s[%zu]: ours %.9g, torch %.9g (relative %.3g)\n", name, at,
                    (double)ours[at], (double)want[at], tensor_worst);
        (*bad)++;
    }
    return tensor_worst;
}

typedef struct counter {
    int calls, epochs_seen, polls, stop_after;
    long last_step, predicted;
} counter;

static inline int stop_interrupt(void *user)
{
    counter *c = user;
    return ++c->polls > c->stop_after;
}

#endif

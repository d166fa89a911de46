/* lbfgs.c: limited-memory BFGS with a backtracking line search (lbfgs.h).
 * Owns only the arrays of one run.
 */
#include "train/lbfgs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

void lbfgs_options_default(lbfgs_options *o)
{
    o->max_iter = 200;
    o->history = 8;
    o->gtol = 1e-6;
    o->ftol = 1e-9;
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static double max_abs(const double *a, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* d = -H g by the two-loop recursion over pairs (s, y) oldest .. newest. */
static void direction(const double *g, size_t n, double **s, double **y, const double *rho,
                      int count, int newest, int H, double *alpha, double *d)
{
    for (size_t i = 0; i < n; i++) d[i] = -g[i];
    for (int j = 0; j < count; j++) {
        int k = (newest - j + H) % H;
        alpha[k] = rho[k] * dot(s[k], d, n);
        for (size_t i = 0; i < n; i++) d[i] -= alpha[k] * y[k][i];
    }
    if (count) {
        double yy = dot(y[newest], y[newest], n);
        double gamma = yy > 0 ? 1.0 / (rho[newest] * yy) : 1.0;
        for (size_t i = 0; i < n; i++) d[i] *= gamma;
    }
    for (int j = count - 1; j >= 0; j--) {
        int k = (newest - j + H) % H;
        double beta = rho[k] * dot(y[k], d, n);
        for (size_t i = 0; i < n; i++) d[i] += (alpha[k] - beta) * s[k][i];
    }
}

int lbfgs_minimize(lbfgs_fn fn, void *ctx, double *x, size_t n, const lbfgs_options *o,
                   lbfgs_result *res, char *err)
{
    int H = o->history > 0 ? o->history : 1, rc, count = 0, newest = H - 1;
    double *g = malloc(n * sizeof *g), *d = malloc(n * sizeof *d);
    double *xn = malloc(n * sizeof *xn), *gn = malloc(n * sizeof *gn);
    double *rho = calloc((size_t)H, sizeof *rho), *alpha = calloc((size_t)H, sizeof *alpha);
    double **s = calloc((size_t)H, sizeof *s), **y = calloc((size_t)H, sizeof *y);
    double f, fn_;
    memset(res, 0, sizeof *res);
    if (!g || !d || !xn || !gn || !rho || !alpha || !s || !y) goto nomem;
    for (int k = 0; k < H; k++)
        if (!(s[k] = malloc(n * sizeof **s)) || !(y[k] = malloc(n * sizeof **y))) goto nomem;

    if ((rc = fn(ctx, x, &f, g, err))) goto end;
    res->evaluations = 1;
    for (int it = 0; it < o->max_iter; it++) {
        if (max_abs(g, n) <= o->gtol) break;
        direction(g, n, s, y, rho, count, newest, H, alpha, d);
        double gd = dot(g, d, n);
        if (gd >= 0) { /* not a descent direction: restart from the gradient */
            count = 0;
            for (size_t i = 0; i < n; i++) d[i] = -g[i];
            gd = dot(g, d, n);
        }
        double step = count ? 1.0 : 1.0 / sqrt(dot(g, g, n));
        int accepted = 0;
        for (int ls = 0; ls < 40; ls++) {
            for (size_t i = 0; i < n; i++) xn[i] = x[i] + step * d[i];
            if ((rc = fn(ctx, xn, &fn_, gn, err))) goto end;
            res->evaluations++;
            if (fn_ <= f + 1e-4 * step * gd) {
                accepted = 1;
                break;
            }
            step *= 0.5;
        }
        res->iterations = it + 1;
        if (!accepted) break; /* no decrease along d: as good as it gets */
        int k = (newest + 1) % H;
        for (size_t i = 0; i < n; i++) {
            s[k][i] = xn[i] - x[i];
            y[k][i] = gn[i] - g[i];
        }
        double sy = dot(s[k], y[k], n);
        if (sy > 1e-300) {
            rho[k] = 1.0 / sy;
            newest = k;
            if (count < H) count++;
        }
        double drop = f - fn_;
        memcpy(x, xn, n * sizeof *x);
        memcpy(g, gn, n * sizeof *g);
        f = fn_;
        if (drop <= o->ftol * (fabs(f) > 1 ? fabs(f) : 1)) break;
    }
    res->f = f;
    res->gmax = max_abs(g, n);
    rc = SM_OK;
    goto end;
nomem:
    rc = sm_error(err, SM_ERR_NOMEM, "out of memory for L-BFGS over %zu parameters", n);
end:
    for (int k = 0; s && y && k < H; k++) {
        free(s[k]);
        free(y[k]);
    }
    free(s);
    free(y);
    free(rho);
    free(alpha);
    free(gn);
    free(xn);
    free(d);
    free(g);
    return rc;
}

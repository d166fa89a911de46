/* lbfgs.h: limited-memory BFGS for smooth convex objectives in double
 * (the wide part's logistic regression and the wide/deep mix).
 *
 * Minimises f(x) over x in R^n given a callback that writes f and its
 * gradient. Two-loop recursion over the last `history` (s, y) pairs, a
 * backtracking line search with the Armijo condition (c = 1e-4, halving,
 * the first step 1 / ||g|| and then 1), pairs with s.y <= 0 skipped. Stops
 * when max |g| <= gtol, when f falls by less than ftol x max(|f|, 1)
 * over an iteration, after max_iter iterations, or when the callback
 * fails (its code is returned). Owns only its temporary arrays.
 */
#ifndef SM_LBFGS_H
#define SM_LBFGS_H

#include <stddef.h>

/* f and g at x; a non-zero return ends the run with that code. */
typedef int (*lbfgs_fn)(void *ctx, const double *x, double *f, double *g, char *err);

typedef struct lbfgs_options {
    int max_iter; /* 200 */
    int history;  /* 8 */
    double gtol;  /* 1e-6 */
    double ftol;  /* 1e-9 */
} lbfgs_options;

typedef struct lbfgs_result {
    int iterations;
    int evaluations;
    double f;    /* at the returned x */
    double gmax; /* max |g| there */
} lbfgs_result;

void lbfgs_options_default(lbfgs_options *o);
/* x[0..n) is the start and gets the minimiser. */
int lbfgs_minimize(lbfgs_fn fn, void *ctx, double *x, size_t n, const lbfgs_options *o,
                   lbfgs_result *res, char *err);

#endif

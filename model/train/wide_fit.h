/* wide_fit.h: fitting a wide part (wide.h) to labelled texts, and fitting
 * the mix of the wide part with the encoder.
 *
 * The wide part is a multinomial logistic regression on the texts' tf-idf
 * n-gram vectors: with rows (x_i, y_i), i < n, it minimises
 *
 *   L(W, b) = (1/n) sum_i CE(softmax(o_i + W x_i + b), y_i) + (l2 / 2) ||W||^2
 *
 * (o_i a fixed offset per row, zero unless given; b is not penalised) by
 * L-BFGS (lbfgs.h), a convex problem: the same rows give the same
 * minimiser whatever the start. l2 = 1 / (C n) is scikit-learn's
 * LogisticRegression(C) written per row. The idf vector is taken from the
 * texts a fit sees: idf_b = ln((1 + n) / (1 + df_b)) + 1 (TfidfTransformer,
 * smooth_idf), df_b the number of texts with an n-gram in bucket b.
 *
 * The mix: on rows the encoder did not train on, the scalars a (the
 * encoder's share), c (the wide part's) and a bias d that make
 * softmax(a e_i + c z_i + d) fit the labels best (the same loss, plus a
 * penalty of one row's weight, (1 / 2n) ((a - 1)^2 + c^2 + |d|^2), toward
 * the encoder alone, which keeps the mix finite on few or separable rows),
 * where e_i are the encoder's logits and z_i the wide part's;
 * bert_model_apply_mix folds them into the model's head and wide part, so
 * the mix is also the model's calibration.
 */
#ifndef SM_WIDE_FIT_H
#define SM_WIDE_FIT_H

#include <stddef.h>

#include "encoder/bert.h"
#include "encoder/wide.h"
#include "train/lbfgs.h"

/* The texts' feature vectors under a wide part, with their labels. */
typedef struct wide_rows {
    int n, K;
    size_t *start; /* (n + 1): row i is idx/val[start[i] .. start[i + 1]) */
    int *idx;      /* buckets */
    float *val;    /* x values */
    int *label;    /* (n) in [0, K) */
} wide_rows;

/* Sets w's idf from texts[0..n) (NULL texts count as empty); w must have
 * idf on. stop, when not NULL, is asked every 256 texts and inside long
 * ones (ngram_count_text); non-zero ends with SM_ERR_INTERRUPTED. The same
 * for wide_rows_make. */
int wide_fit_idf(wide_part *w, const char *const *texts, const size_t *lens, int n,
                 int (*stop)(void *user), void *user, char *err);
/* The rows of texts[0..n) (labels in [0, w->K)) under w's features. */
int wide_rows_make(const wide_part *w, const char *const *texts, const size_t *lens,
                   const int *labels, int n, int (*stop)(void *user), void *user, wide_rows **out,
                   char *err);
void wide_rows_free(wide_rows *r);

/* L and its gradient at w's weights: gW (K, buckets) and gb (K) are
 * overwritten. offset (n, K) may be NULL. */
int wide_loss_grad(const wide_part *w, const wide_rows *r, const float *offset, double l2,
                   double *loss, double *gW, double *gb, char *err);

typedef struct wide_fit_options {
    double l2;               /* the penalty (1e-5) */
    lbfgs_options lbfgs;     /* lbfgs_options_default, max_iter 300 */
    int (*stop)(void *user); /* asked at every evaluation; may be NULL */
    void *user;
} wide_fit_options;

void wide_fit_options_default(wide_fit_options *o);

/* Fits w's weight and bias to r (w's current values are the start);
 * offset (r->n, K) may be NULL. */
int wide_fit(wide_part *w, const wide_rows *r, const float *offset, const wide_fit_options *o,
             lbfgs_result *res, char *err);

/* Mean cross-entropy and accuracy of softmax(logits) (n, K) on labels. */
void wide_score(const float *logits, const int *labels, int n, int K, double *loss,
                double *accuracy);

/* The mix (a, c, d[K]) for encoder logits enc (n, K) and wide logits wide
 * (n, K) on labels. */
int wide_fit_mix(const float *enc, const float *wide, const int *labels, int n, int K, double *a,
                 double *c, double *d, char *err);
/* Folds a mix into m: the classifier's weight and bias times a, plus d;
 * the wide part's weight and bias times c. m must have a head and a wide
 * part. */
int bert_model_apply_mix(bert_model *m, double a, double c, const double *d, char *err);

#endif

/* wide_stage.h: the built-in model's wide part (model/encoder/wide.h),
 * the last stage of the recipe.
 *
 * 1. The wide part is fitted on the training rows (the calibration rows
 *    excluded): its idf from their texts, then the logistic regression
 *    (model/train/wide_fit.h) for each penalty of a small grid, warm-started
 *    from the previous one. With stack > 0 it is fitted on top of the
 *    encoder: the encoder's logits for each training row times stack are a
 *    fixed offset of the regression, so the wide part learns what the
 *    encoder gets wrong rather than the labels alone.
 * 2. For each penalty, the mix (the encoder's share a, the wide part's c and
 *    a bias d) is fitted on the calibration rows, which neither part trained
 *    on; the penalty whose mixed model has the lowest log-loss there wins.
 * 3. The winner's mix is folded into the model (bert_model_apply_mix), so
 *    it is also the model's calibration (it replaces the temperature).
 *
 * Prints each step's figures on stderr. Owns nothing it returns.
 */
#ifndef SM_WIDE_STAGE_H
#define SM_WIDE_STAGE_H

#include "encoder/bert.h"
#include "recipe/reviews.h"

typedef struct wide_stage_report {
    double l2;                                  /* the chosen penalty */
    double a, c, d[2];                          /* the mix */
    double calib_loss;                          /* mixed log-loss on the calibration rows */
    double calib_loss_encoder, calib_loss_wide; /* each part alone, its own
                                                   best temperature-free fit */
    double seconds;
} wide_stage_report;

/* Gives m (2 labels, a head, no wide part) a wide part of cfg fitted on
 * fit and mixed on calib. ws is a workspace for m on the CPU. */
int wide_stage_run(bert_model *m, bert_workspace *ws, const review_set *fit,
                   const review_set *calib, int max_length, const sm_wide_config *cfg,
                   const double *l2s, int n_l2, double stack, wide_stage_report *rep, char *err);

/* Accuracy on set of each part of m alone: the encoder with its head
 * (wide part removed) and the wide part (its logits alone). */
int wide_stage_part_accuracy(bert_model *m, bert_workspace *ws, const review_set *set,
                             int max_length, double *encoder, double *wide, char *err);

/* A teacher's P(positive) from the n-gram model alone (recipe stage 2 with
 * --ngram-teacher): for each row of fit, out of fold (the model of `folds`
 * folds, fold = row index mod folds, that did not see the row), and for
 * each text of extra (may be empty), the model fitted on all of fit.
 * p_fit (fit->n) and p_extra (extra->n). */
int wide_stage_teacher(const review_set *fit, const review_set *extra, int folds,
                       const sm_wide_config *cfg, double l2, float *p_fit, float *p_extra,
                       char *err);

#endif

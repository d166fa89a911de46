/* train_wide.h: train()'s wide part (train_wide.c), between train.c and
 * train_wide.c only.
 */
#ifndef SX_TRAIN_WIDE_H
#define SX_TRAIN_WIDE_H

#include "ext/train_options.h"

/* What the fit did, for the report. */
typedef struct sx_wide_report {
    int done; /* a wide part was fitted */
    double l2;
    double mix_encoder, mix_wide;                  /* a and c (1, 1 when not fitted) */
    int mixed;                                     /* the mix was fitted on the validation rows */
    double valid_encoder, valid_wide, valid_mixed; /* validation accuracy (NAN: none) */
    double seconds;
} sx_wide_report;

/* The rows train() read: texts back to back (row i ends at end[i]) and
 * their label indices in the head's order during training. */
typedef struct sx_wide_rows {
    const char *texts;
    const size_t *end;
    const int *label;
    int n;
} sx_wide_rows;

/* Gives m (trained, its head in the rows' label order) a wide part fitted
 * on the training rows of the split o->t makes and mixed on its validation
 * rows (train.c's header: "The wide part"); be runs the encoder on the
 * validation rows; stop is asked between steps. SQLITE_OK or an error
 * naming train() in *errmsg. */
int sx_train_fit_wide(const sx_train_options *o, const sx_wide_rows *rows, int max_length,
                      bert_model *m, backend *be, int (*stop)(void *user), void *user,
                      sx_wide_report *rep, char **errmsg);

#endif

/* train_int8.h: train()'s INT8 check (train_int8.c), between train.c and
 * train_int8.c only.
 */
#ifndef SX_TRAIN_INT8_H
#define SX_TRAIN_INT8_H

#include "ext/train_wide.h"

/* At most this many validation rows are classified both ways. */
#define SX_INT8_CHECK_MAX_ROWS 4000

/* Classifies (up to SX_INT8_CHECK_MAX_ROWS of) the validation rows of the
 * split o->t makes on the CPU, with m's FP32 weights and with its encoder's
 * linear layers in INT8, as precision auto would run it, and sets
 * m->cfg.int8_check from the accuracies and the label agreement
 * (model/format/int8_check.h). No validation rows, or weights INT8 cannot
 * hold: the check stays unset and *why says so. threads as the
 * connection's setting (0: all cores); stop is asked between batches.
 * SQLITE_OK or an error naming train() in *errmsg. */
int sx_train_check_int8(const sx_train_options *o, const sx_wide_rows *rows, int max_length,
                        bert_model *m, int threads, int (*stop)(void *user), void *user, char *why,
                        size_t why_cap, char **errmsg);

#endif

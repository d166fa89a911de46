/* int8_check.h: a model's INT8 check as config.json carries it: how the
 * model classified held-out rows with FP32 and with INT8 linear layers,
 * and the rule by which precision auto runs it in INT8.
 *
 * Under our own key (transformers keeps unknown keys and ignores them):
 *
 *   "int8_check": {"rows": 812, "accuracy_fp32": 0.9113,
 *                  "accuracy_int8": 0.9101, "agreement": 0.9951}
 *
 *   rows           held-out rows classified both ways (1 .. 2^31 - 1)
 *   accuracy_fp32  share of them labelled right with FP32 weights
 *   accuracy_int8  the same with the encoder's linear layers in INT8
 *   agreement      share of them given the same label both ways
 *
 * train() measures it on its validation rows and writes it (ext/
 * train_int8.c); it travels with the model (database, sentiment_export).
 * The rule (sm_int8_check_passes): at least SM_INT8_CHECK_MIN_ROWS rows,
 * agreement at least SM_INT8_CHECK_MIN_AGREEMENT, and INT8 accuracy no more
 * than SM_INT8_CHECK_MARGIN below FP32's. A config may claim what it likes:
 * the check is the model author's statement, as its weights are. Every
 * value is checked (shares in [0, 1]); an error names the key. Owns
 * nothing: sm_int8_check is a plain value.
 */
#ifndef SM_INT8_CHECK_H
#define SM_INT8_CHECK_H

#include <stddef.h>

#include "format/json_in.h"

#define SM_INT8_CHECK_MIN_ROWS 200
#define SM_INT8_CHECK_MIN_AGREEMENT 0.99
#define SM_INT8_CHECK_MARGIN 0.003 /* 0.3 accuracy points */

typedef struct sm_int8_check {
    int set; /* 1: the config has one */
    int rows;
    double accuracy_fp32, accuracy_int8, agreement;
} sm_int8_check;

/* config.json's "int8_check" value (v not NULL) into out, set 1. */
int sm_int8_check_from_json(const json_in_value *v, sm_int8_check *out, char *err);
/* The value as JSON text (malloc'd), what sm_int8_check_from_json reads. */
int sm_int8_check_to_json(const sm_int8_check *c, char **out, char *err);
/* 1 when c lets precision auto use INT8 (the rule above), else 0; why
 * (may be NULL) gets one line saying which way and why, e.g. "held-out
 * accuracy 0.9101 in int8, 0.9113 in fp32, same label on 99.5% of 812
 * rows". */
int sm_int8_check_passes(const sm_int8_check *c, char *why, size_t cap);

#endif

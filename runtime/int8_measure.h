/* int8_measure.h: a model's INT8 check measured (runtime/int8_measure.c):
 * labelled texts classified on this machine's CPU twice, with the FP32
 * weights and with the encoder's linear layers packed as INT8 (what
 * precision auto runs on a CPU with AVX512-VNNI; other CPUs compute the
 * same INT8 bits in plain C, more slowly), the right labels and the equal
 * labels counted batch by batch into an sm_int8_check
 * (model/format/int8_check.h), whose rule then says whether auto may run
 * the model in INT8.
 *
 * Room: runtime/. Called by ext/train_int8.c (train()'s validation rows)
 * and ext/evaluate.c (sentiment_int8_check() on a labelled table).
 *
 * Errors: model/'s convention: SM_OK, else an SM_* status with one line in
 * err (SM_ERR_MAX bytes); ext/ converts (sx_from_sm).
 */
#ifndef RUNTIME_INT8_MEASURE_H
#define RUNTIME_INT8_MEASURE_H

#include <stddef.h>

#include "encoder/bert.h"
#include "format/int8_check.h"

typedef struct rt_int8_measure rt_int8_measure;

/* Starts measuring model m (the caller keeps it alive until
 * rt_int8_measure_free) on a CPU backend of `threads` threads (0: all
 * cores), texts cut to max_length tokens. SM_ERR_INVALID or
 * SM_ERR_UNSUPPORTED when INT8 cannot hold the weights (err says why, e.g.
 * a weight that is not finite); SM_ERR_NOMEM. */
int rt_int8_measure_begin(const bert_model *m, int threads, int max_length, rt_int8_measure **out,
                          char *err);
/* Classifies n texts both ways and counts them: labels[i] is the index of
 * text i's right label, or -1 for a label the model does not have (never
 * right). stop (may be NULL) is asked between batches: SM_ERR_INTERRUPTED. */
int rt_int8_measure_add(rt_int8_measure *q, const char *const *texts, const size_t *lens,
                        const int *labels, int n, int (*stop)(void *user), void *user, char *err);
/* The figures so far: set 1 once a row was added, else all 0. */
sm_int8_check rt_int8_measure_result(const rt_int8_measure *q);
void rt_int8_measure_free(rt_int8_measure *q);

#endif

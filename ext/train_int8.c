/* train_int8.c: train()'s INT8 check: the trained model (wide part
 * included) classifies up to SX_INT8_CHECK_MAX_ROWS of its validation rows
 * on the CPU with FP32 and with INT8 linear layers (runtime/
 * int8_measure.h), and the accuracies and the share of equal labels become
 * the model's "int8_check" (model/format/int8_check.h), stored in its
 * config.json. Whether auto then uses INT8 for the model is int8_check.h's
 * rule, applied where the model is run (runtime/device.c). Owns only
 * temporaries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "ext/errors.h"
#include "ext/train_int8.h"
#include "runtime/int8_measure.h"

/* The first `cap` rows with is_valid set: texts, lengths and labels. */
static int take_valid(const sx_wide_rows *r, const unsigned char *is_valid, int cap,
                      const char ***texts, size_t **lens, int **labels, int *n)
{
    *texts = malloc(((size_t)cap + 1) * sizeof **texts);
    *lens = malloc(((size_t)cap + 1) * sizeof **lens);
    *labels = malloc(((size_t)cap + 1) * sizeof **labels);
    if (!*texts || !*lens || !*labels) return SM_ERR_NOMEM;
    size_t start = 0;
    *n = 0;
    for (int i = 0; i < r->n && *n < cap; i++) {
        if (is_valid[i]) {
            (*texts)[*n] = r->texts + start;
            (*lens)[*n] = r->end[i] - start;
            (*labels)[(*n)++] = r->label[i];
        }
        start = r->end[i];
    }
    return SM_OK;
}

int sx_train_check_int8(const sx_train_options *o, const sx_wide_rows *rows, int max_length,
                        bert_model *m, int threads, int (*stop)(void *user), void *user, char *why,
                        size_t why_cap, char **errmsg)
{
    char err[SM_ERR_MAX];
    unsigned char *is_valid = malloc((size_t)rows->n + 1);
    const char **texts = NULL;
    size_t *lens = NULL;
    int *labels = NULL, n = 0, rc;
    rt_int8_measure *q = NULL;

    m->cfg.int8_check.set = 0;
    snprintf(why, why_cap, "no validation rows");
    if (!is_valid) goto nomem;
    if ((rc = trainer_valid_rows(rows->n, &o->t, is_valid, err))) goto fail;
    if (take_valid(rows, is_valid, SX_INT8_CHECK_MAX_ROWS, &texts, &lens, &labels, &n)) goto nomem;
    if (n == 0) {
        rc = SQLITE_OK;
        goto end;
    }
    rc = rt_int8_measure_begin(m, threads, max_length, &q, err);
    if (rc == SM_ERR_INVALID || rc == SM_ERR_UNSUPPORTED) { /* weights INT8 cannot hold */
        snprintf(why, why_cap, "int8 not possible: %s", err);
        rc = SQLITE_OK;
        goto end;
    }
    if (rc || (rc = rt_int8_measure_add(q, texts, lens, labels, n, stop, user, err))) goto fail;
    m->cfg.int8_check = rt_int8_measure_result(q);
    sm_int8_check_passes(&m->cfg.int8_check, why, why_cap);
    rc = SQLITE_OK;
    goto end;
nomem:
    rc = sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory checking int8");
    goto end;
fail:
    rc = sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "checking int8: %s; nothing was stored", err);
end:
    rt_int8_measure_free(q);
    free(texts);
    free(lens);
    free(labels);
    free(is_valid);
    return rc;
}

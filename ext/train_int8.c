/* train_int8.c: train()'s INT8 check: the trained model (wide part
 * included) classifies its validation rows on the CPU twice, with FP32
 * weights and with the encoder's linear layers packed as INT8 (what
 * precision auto runs on a CPU with AVX512-VNNI; other CPUs compute the
 * same INT8 bits in plain C, more slowly), and the accuracies and the share
 * of equal labels become the model's "int8_check" (model/format/
 * int8_check.h), stored in its config.json. Whether auto then uses INT8
 * for the model is int8_check.h's rule, applied where the model is run
 * (runtime/device.c). Owns only temporaries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "ext/errors.h"
#include "ext/train_int8.h"
#include "runtime/device.h"

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

static int argmax(const float *p, int K)
{
    int best = 0;
    for (int k = 1; k < K; k++)
        if (p[k] > p[best]) best = k;
    return best;
}

int sx_train_check_int8(const sx_train_options *o, const sx_wide_rows *rows, int max_length,
                        bert_model *m, int threads, int (*stop)(void *user), void *user, char *why,
                        size_t why_cap, char **errmsg)
{
    char err[SM_ERR_MAX];
    unsigned char *is_valid = malloc((size_t)rows->n + 1);
    const char **texts = NULL;
    size_t *lens = NULL;
    int *labels = NULL, n = 0, K = m->cfg.num_labels, rc;
    float *p32 = NULL, *p8 = NULL;
    backend *be = NULL;
    bert_workspace *ws = NULL;
    bert_packed_params *pp = NULL;
    bert_precision plan[BERT_PACK_N];
    bert_text_opts to = {stop, user, 0};

    m->cfg.int8_check.set = 0;
    snprintf(why, why_cap, "no validation rows");
    if (!is_valid) goto nomem;
    if ((rc = trainer_valid_rows(rows->n, &o->t, is_valid, err))) goto fail;
    if (take_valid(rows, is_valid, SX_INT8_CHECK_MAX_ROWS, &texts, &lens, &labels, &n)) goto nomem;
    if (n == 0) {
        rc = SQLITE_OK;
        goto end;
    }
    p32 = malloc((size_t)n * K * sizeof *p32);
    p8 = malloc((size_t)n * K * sizeof *p8);
    if (!p32 || !p8) goto nomem;
    bert_pack_plan(BERT_INT8, plan);
    if ((rc = rt_device_create_cpu(threads, &be, err)) ||
        (rc = bert_workspace_create(be, &m->cfg, 32, max_length, &ws, err)))
        goto fail;
    rc = bert_params_pack(be, &m->cfg, &m->p, plan, &pp, err);
    if (rc == SM_ERR_INVALID || rc == SM_ERR_UNSUPPORTED) { /* weights INT8 cannot hold */
        snprintf(why, why_cap, "int8 not possible: %s", err);
        rc = SQLITE_OK;
        goto end;
    }
    if (rc ||
        (rc = bert_classify_texts_opts(m, &m->p, ws, texts, lens, n, max_length, 32, p32, NULL, &to,
                                       err)) ||
        (rc = bert_classify_texts_opts(m, &pp->p, ws, texts, lens, n, max_length, 32, p8, NULL, &to,
                                       err)))
        goto fail;
    int right32 = 0, right8 = 0, same = 0;
    for (int i = 0; i < n; i++) {
        int a = argmax(p32 + (size_t)i * K, K), b = argmax(p8 + (size_t)i * K, K);
        right32 += a == labels[i];
        right8 += b == labels[i];
        same += a == b;
    }
    m->cfg.int8_check = (sm_int8_check){1, n, (double)right32 / n, (double)right8 / n,
                                        (double)same / n};
    sm_int8_check_passes(&m->cfg.int8_check, why, why_cap);
    rc = SQLITE_OK;
    goto end;
nomem:
    rc = sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory checking int8");
    goto end;
fail:
    rc = sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "checking int8: %s; nothing was stored", err);
end:
    bert_packed_params_free(pp);
    bert_workspace_free(ws);
    if (be) be->destroy(be);
    free(p8);
    free(p32);
    free(texts);
    free(lens);
    free(labels);
    free(is_valid);
    return rc;
}

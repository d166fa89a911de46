/* int8_measure.c: a model's INT8 check measured (int8_measure.h). Owns a
 * CPU backend, one workspace, the INT8-packed copy of the weights and two
 * probability buffers, all freed by rt_int8_measure_free; the model is the
 * caller's.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/errors.h"
#include "runtime/device.h"
#include "runtime/int8_measure.h"

/* Texts per encoder call. */
#define MEASURE_BATCH 32

struct rt_int8_measure {
    const bert_model *m;
    int max_length;
    backend *be;
    bert_workspace *ws;
    bert_packed_params *int8;
    float *p32, *p8; /* MEASURE_BATCH x num_labels */
    int64_t rows, right32, right8, same;
};

void rt_int8_measure_free(rt_int8_measure *q)
{
    if (!q) return;
    bert_packed_params_free(q->int8);
    bert_workspace_free(q->ws);
    if (q->be) q->be->destroy(q->be);
    free(q->p32);
    free(q->p8);
    free(q);
}

int rt_int8_measure_begin(const bert_model *m, int threads, int max_length, rt_int8_measure **out,
                          char *err)
{
    bert_precision plan[BERT_PACK_N];
    rt_int8_measure *q = calloc(1, sizeof *q);
    int K = m->cfg.num_labels, rc;

    *out = NULL;
    if (!q) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    q->m = m;
    q->max_length = max_length;
    q->p32 = malloc((size_t)MEASURE_BATCH * K * sizeof *q->p32);
    q->p8 = malloc((size_t)MEASURE_BATCH * K * sizeof *q->p8);
    if (!q->p32 || !q->p8) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory");
        goto fail;
    }
    bert_pack_plan(BERT_INT8, plan);
    if ((rc = rt_device_create_cpu(threads, &q->be, err)) ||
        (rc = bert_workspace_create(q->be, &m->cfg, MEASURE_BATCH, max_length, &q->ws, err)) ||
        (rc = bert_params_pack(q->be, &m->cfg, &m->p, plan, &q->int8, err)))
        goto fail;
    *out = q;
    return SM_OK;
fail:
    rt_int8_measure_free(q);
    return rc;
}

static int argmax(const float *p, int K)
{
    int best = 0;
    for (int k = 1; k < K; k++)
        if (p[k] > p[best]) best = k;
    return best;
}

int rt_int8_measure_add(rt_int8_measure *q, const char *const *texts, const size_t *lens,
                        const int *labels, int n, int (*stop)(void *user), void *user, char *err)
{
    const bert_model *m = q->m;
    bert_text_opts to = {stop, user, 0};
    int K = m->cfg.num_labels, rc;

    for (int at = 0; at < n; at += MEASURE_BATCH) {
        int b = n - at < MEASURE_BATCH ? n - at : MEASURE_BATCH;
        /* the classify calls ask only between their own batches */
        if (stop && stop(user)) return sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
        if ((rc = bert_classify_texts_opts(m, &m->p, q->ws, texts + at, lens + at, b, q->max_length,
                                           MEASURE_BATCH, q->p32, NULL, &to, err)) ||
            (rc = bert_classify_texts_opts(m, &q->int8->p, q->ws, texts + at, lens + at, b,
                                           q->max_length, MEASURE_BATCH, q->p8, NULL, &to, err)))
            return rc;
        for (int i = 0; i < b; i++) {
            int a = argmax(q->p32 + (size_t)i * K, K), c = argmax(q->p8 + (size_t)i * K, K);
            q->right32 += a == labels[at + i];
            q->right8 += c == labels[at + i];
            q->same += a == c;
        }
        q->rows += b;
    }
    return SM_OK;
}

sm_int8_check rt_int8_measure_result(const rt_int8_measure *q)
{
    sm_int8_check c = {0};
    if (!q->rows) return c;
    double n = (double)q->rows;
    c.set = 1;
    c.rows = q->rows > INT_MAX ? INT_MAX : (int)q->rows;
    c.accuracy_fp32 = (double)q->right32 / n;
    c.accuracy_int8 = (double)q->right8 / n;
    c.agreement = (double)q->same / n;
    return c;
}

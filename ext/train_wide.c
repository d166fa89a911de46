/* train_wide.c: train()'s option "wide": a wide part (model/encoder/wide.h)
 * fitted on the rows train() read and mixed with the trained encoder.
 *
 * The split is trainer_run's (the same seed, the same validation rows):
 *   1. the idf from the training rows' texts, then the logistic regression
 *      (model/train/wide_fit.h) on them, the wide part on its own: a convex
 *      problem that L-BFGS solves in seconds, where the encoder's few epochs
 *      of AdamW at its small learning rate would leave a 2^18-weight sparse
 *      layer far from its optimum (which is why it is fitted on its own,
 *      not jointly with the encoder);
 *   2. the encoder's logits for the validation rows, which neither part
 *      trained on;
 *   3. for each penalty l2 = 1 / (C x training rows), C = 1, 4, 16 (warm
 *      starts, strongest first; or the "l2" given), the wide logits of the
 *      validation rows and the mix (a, c, d) fitted on them
 *      (wide_fit_mix); the penalty whose mixed model has the lowest
 *      validation log-loss wins, and its mix is folded into the model.
 * With no validation rows, or one label among them, no mix is fitted (a =
 * c = 1, d = 0: the two parts' logits are summed) and C = 4. On few rows
 * the mix's penalty (wide_fit.h) keeps it near the encoder alone. A mix
 * with a negative share is not used (the sum is kept).
 * Owns only temporaries.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "ext/errors.h"
#include "ext/train_wide.h"
#include "train/wide_fit.h"

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct part {
    const char **texts;
    size_t *lens;
    int *labels;
    int n;
} part;

static void part_free(part *p)
{
    free(p->texts);
    free(p->lens);
    free(p->labels);
}

/* The rows with is_valid == want. */
static int take(const sx_wide_rows *r, const unsigned char *is_valid, int want, part *p)
{
    p->texts = malloc(((size_t)r->n + 1) * sizeof *p->texts);
    p->lens = malloc(((size_t)r->n + 1) * sizeof *p->lens);
    p->labels = malloc(((size_t)r->n + 1) * sizeof *p->labels);
    if (!p->texts || !p->lens || !p->labels) return SM_ERR_NOMEM;
    size_t start = 0;
    for (int i = 0; i < r->n; i++) {
        if (is_valid[i] == want) {
            p->texts[p->n] = r->texts + start;
            p->lens[p->n] = r->end[i] - start;
            p->labels[p->n++] = r->label[i];
        }
        start = r->end[i];
    }
    return SM_OK;
}

/* The encoder's log-probabilities (its logits up to a shift) for p. */
static int encoder_logits(bert_model *m, backend *be, const part *p, int max_length,
                          int (*stop)(void *user), void *user, float *out, char *err)
{
    bert_device_params *dp = NULL;
    bert_workspace *ws = NULL;
    int K = m->cfg.num_labels, rc;
    bert_text_opts o = {stop, user, 0};
    if ((rc = bert_params_to_backend(be, m, &dp, err)) ||
        (rc = bert_workspace_create(be, &m->cfg, 32, max_length, &ws, err)) ||
        (rc = bert_classify_texts_opts(m, &dp->p, ws, p->texts, p->lens, p->n, max_length, 32, out,
                                       NULL, &o, err)))
        goto end;
    for (size_t j = 0; j < (size_t)p->n * K; j++) out[j] = logf(out[j] > 1e-30f ? out[j] : 1e-30f);
end:
    bert_workspace_free(ws);
    bert_device_params_free(dp);
    return rc;
}

static double accuracy_of(const float *z, const int *labels, int n, int K)
{
    double loss, acc;
    wide_score(z, labels, n, K, &loss, &acc);
    return acc;
}

int sx_train_fit_wide(const sx_train_options *o, const sx_wide_rows *rows, int max_length,
                      bert_model *m, backend *be, int (*stop)(void *user), void *user,
                      sx_wide_report *rep, char **errmsg)
{
    char err[SM_ERR_MAX];
    unsigned char *is_valid = malloc((size_t)rows->n + 1);
    part tr = {0}, va = {0};
    wide_part *w = NULL, *best = NULL;
    wide_rows *fit = NULL;
    float *enc = NULL, *z = NULL, *mixed = NULL;
    int K = m->cfg.num_labels, rc;
    double t0 = seconds(), best_loss = INFINITY, best_d[BERT_MAX_LABELS];
    memset(rep, 0, sizeof *rep);
    rep->valid_encoder = rep->valid_wide = rep->valid_mixed = NAN;
    if (!is_valid) goto nomem;
    if ((rc = trainer_valid_rows(rows->n, &o->t, is_valid, err))) goto fail;
    if (take(rows, is_valid, 0, &tr) || take(rows, is_valid, 1, &va)) goto nomem;
    int distinct = 0;
    for (int i = 1; i < va.n && !distinct; i++) distinct = va.labels[i] != va.labels[0];
    int mix = distinct;

    if ((rc = wide_part_create(&o->wide_cfg, K, &w, err)) ||
        (rc = wide_fit_idf(w, tr.texts, tr.lens, tr.n, stop, user, err)) ||
        (rc = wide_rows_make(w, tr.texts, tr.lens, tr.labels, tr.n, stop, user, &fit, err)))
        goto fail;
    enc = malloc(((size_t)va.n + 1) * K * sizeof *enc);
    z = malloc(((size_t)va.n + 1) * K * sizeof *z);
    mixed = malloc(((size_t)va.n + 1) * K * sizeof *mixed);
    if (!enc || !z || !mixed) goto nomem;
    if (va.n && (rc = encoder_logits(m, be, &va, max_length, stop, user, enc, err))) goto fail;
    if (va.n) rep->valid_encoder = accuracy_of(enc, va.labels, va.n, K);

    static const double k_C[] = {1, 4, 16};
    int n_try = o->wide_l2 > 0 || !mix ? 1 : 3;
    for (int g = 0; g < n_try; g++) {
        wide_fit_options fo;
        lbfgs_result res;
        wide_fit_options_default(&fo);
        fo.l2 = o->wide_l2 > 0 ? o->wide_l2 : 1.0 / ((mix ? k_C[g] : 4.0) * tr.n);
        fo.stop = stop;
        fo.user = user;
        if ((rc = wide_fit(w, fit, NULL, &fo, &res, err))) goto fail;
        double a = 1, c = 1, d[BERT_MAX_LABELS] = {0}, loss = 0, acc;
        if (va.n) {
            memset(z, 0, (size_t)va.n * K * sizeof *z);
            if ((rc = wide_add_logits_texts(w, va.texts, va.lens, va.n, z, stop, user, err)))
                goto fail;
        }
        if (mix && (rc = wide_fit_mix(enc, z, va.labels, va.n, K, &a, &c, d, err))) goto fail;
        if (!(a >= 0 && c >= 0)) { /* a negative share: keep the plain sum */
            a = c = 1;
            memset(d, 0, sizeof d);
        }
        for (size_t j = 0; j < (size_t)va.n * K; j++)
            mixed[j] = (float)(a * enc[j] + c * z[j] + d[j % K]);
        if (va.n) wide_score(mixed, va.labels, va.n, K, &loss, &acc);
        if (!best || loss < best_loss) {
            best_loss = loss;
            rep->l2 = fo.l2;
            rep->mix_encoder = a;
            rep->mix_wide = c;
            rep->mixed = mix;
            memcpy(best_d, d, (size_t)K * sizeof *d);
            if (va.n) {
                rep->valid_wide = accuracy_of(z, va.labels, va.n, K);
                rep->valid_mixed = acc;
            }
            wide_part_free(best);
            best = NULL;
            if ((rc = wide_part_clone(w, &best, err))) goto fail;
        }
    }
    wide_part_free(m->wide);
    m->wide = best;
    m->cfg.wide = best->cfg;
    best = NULL;
    if ((rc = bert_model_apply_mix(m, rep->mix_encoder, rep->mix_wide, best_d, err))) goto fail;
    rep->done = 1;
    rep->seconds = seconds() - t0;
    rc = SQLITE_OK;
    goto end;
nomem:
    rc = sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory fitting the wide part");
    goto end;
fail:
    rc = sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "the wide part: %s; nothing was stored", err);
end:
    free(mixed);
    free(z);
    free(enc);
    wide_rows_free(fit);
    wide_part_free(best);
    wide_part_free(w);
    part_free(&tr);
    part_free(&va);
    free(is_valid);
    return rc;
}

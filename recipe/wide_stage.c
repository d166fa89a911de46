/* wide_stage.c: the built-in model's wide part fitted, mixed and folded in
 * (wide_stage.h). Owns only temporaries.
 */
#include "recipe/wide_stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "train/wide_fit.h"

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The texts, lengths and labels of a set (views). */
static int set_arrays(const review_set *s, const char ***texts, size_t **lens, int **labels,
                      char *err)
{
    *texts = malloc(((size_t)s->n + 1) * sizeof **texts);
    *lens = malloc(((size_t)s->n + 1) * sizeof **lens);
    *labels = malloc(((size_t)s->n + 1) * sizeof **labels);
    if (!*texts || !*lens || !*labels) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    for (int i = 0; i < s->n; i++) {
        (*texts)[i] = s->rows[i].text;
        (*lens)[i] = strlen(s->rows[i].text);
        (*labels)[i] = s->rows[i].label;
    }
    return SM_OK;
}

/* The encoder's log-probabilities (its logits up to a shift) for texts. */
static int encoder_logits(bert_model *m, bert_workspace *ws, const char **texts, const size_t *lens,
                          int n, int max_length, float *out, char *err)
{
    wide_part *w = m->wide;
    m->wide = NULL;
    int rc = SM_OK, K = m->cfg.num_labels;
    for (int first = 0; first < n && !rc; first += 512) {
        int b = n - first < 512 ? n - first : 512;
        rc = bert_classify_texts(m, &m->p, ws, texts + first, lens + first, b, max_length, 32,
                                 out + (size_t)first * K, NULL, err);
    }
    m->wide = w;
    for (size_t j = 0; !rc && j < (size_t)n * K; j++)
        out[j] = logf(out[j] > 1e-30f ? out[j] : 1e-30f);
    return rc;
}

int wide_stage_run(bert_model *m, bert_workspace *ws, const review_set *fit,
                   const review_set *calib, int max_length, const sm_wide_config *cfg,
                   const double *l2s, int n_l2, double stack, wide_stage_report *rep, char *err)
{
    const char **ft = NULL, **ct = NULL;
    size_t *fl = NULL, *cl = NULL;
    int *fy = NULL, *cy = NULL, K = m->cfg.num_labels, rc;
    float *enc = NULL, *z = NULL, *mixed = NULL, *offset = NULL;
    wide_rows *rows = NULL;
    wide_part *w = NULL, *best = NULL;
    double t0 = seconds_now(), acc;
    memset(rep, 0, sizeof *rep);
    rep->calib_loss = INFINITY;
    if (m->wide || K != 2)
        return sm_error(err, SM_ERR_INVALID,
                        "wide stage: needs a 2-label model without a wide part");
    if ((rc = set_arrays(fit, &ft, &fl, &fy, err)) || (rc = set_arrays(calib, &ct, &cl, &cy, err)))
        goto end;
    if ((rc = wide_part_create(cfg, K, &w, err))) goto end;
    if ((rc = wide_fit_idf(w, ft, fl, fit->n, NULL, NULL, err))) goto end;
    if ((rc = wide_rows_make(w, ft, fl, fy, fit->n, NULL, NULL, &rows, err))) goto end;
    fprintf(stderr, "wide: %d buckets, %d training rows, %zu features (%.1f s)\n", cfg->buckets,
            fit->n, rows->start[rows->n], seconds_now() - t0);

    if (stack > 0) { /* the encoder's logits on the training rows, scaled */
        double t1 = seconds_now();
        offset = malloc((size_t)fit->n * K * sizeof *offset);
        if (!offset) {
            rc = sm_error(err, SM_ERR_NOMEM, "out of memory");
            goto end;
        }
        if ((rc = encoder_logits(m, ws, ft, fl, fit->n, max_length, offset, err))) goto end;
        for (size_t j = 0; j < (size_t)fit->n * K; j++) offset[j] = (float)(stack * offset[j]);
        fprintf(stderr, "wide: stacked on the encoder's logits x %g (%.0f s)\n", stack,
                seconds_now() - t1);
    }
    enc = malloc((size_t)calib->n * K * sizeof *enc);
    z = malloc((size_t)calib->n * K * sizeof *z);
    mixed = malloc((size_t)calib->n * K * sizeof *mixed);
    if (!enc || !z || !mixed) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory");
        goto end;
    }
    if ((rc = encoder_logits(m, ws, ct, cl, calib->n, max_length, enc, err))) goto end;
    wide_score(enc, cy, calib->n, K, &rep->calib_loss_encoder, &acc);
    fprintf(stderr, "wide: encoder alone on %d calibration rows: log-loss %.4f, accuracy %.4f\n",
            calib->n, rep->calib_loss_encoder, acc);

    for (int g = 0; g < n_l2; g++) {
        wide_fit_options o;
        lbfgs_result res;
        wide_fit_options_default(&o);
        o.l2 = l2s[g];
        double t1 = seconds_now(), a, c, d[2], loss, wloss, wacc;
        if ((rc = wide_fit(w, rows, offset, &o, &res, err))) goto end;
        memset(z, 0, (size_t)calib->n * K * sizeof *z);
        if ((rc = wide_add_logits_texts(w, ct, cl, calib->n, z, NULL, NULL, err))) goto end;
        wide_score(z, cy, calib->n, K, &wloss, &wacc);
        if ((rc = wide_fit_mix(enc, z, cy, calib->n, K, &a, &c, d, err))) goto end;
        for (size_t j = 0; j < (size_t)calib->n * K; j++)
            mixed[j] = (float)(a * enc[j] + c * z[j] + d[j % K]);
        wide_score(mixed, cy, calib->n, K, &loss, &acc);
        fprintf(stderr,
                "wide: l2 %g: %d iterations, training loss %.4f (%.1f s); calibration rows: "
                "wide alone log-loss %.4f accuracy %.4f; mixed (a %.3f, c %.3f) log-loss %.4f "
                "accuracy %.4f\n",
                o.l2, res.iterations, res.f, seconds_now() - t1, wloss, wacc, a, c, loss, acc);
        if (loss < rep->calib_loss) {
            rep->calib_loss = loss;
            rep->calib_loss_wide = wloss;
            rep->l2 = o.l2;
            rep->a = a;
            rep->c = c;
            rep->d[0] = d[0];
            rep->d[1] = d[1];
            wide_part_free(best);
            best = NULL;
            if ((rc = wide_part_clone(w, &best, err))) goto end;
        }
    }
    if (!best) {
        rc = sm_error(err, SM_ERR_INVALID, "wide stage: no penalty to try");
        goto end;
    }
    m->wide = best;
    m->cfg.wide = best->cfg;
    best = NULL;
    if ((rc = bert_model_apply_mix(m, rep->a, rep->c, rep->d, err))) goto end;
    rep->seconds = seconds_now() - t0;
    fprintf(stderr, "wide: chose l2 %g, mix a %.4f c %.4f d %.4f %.4f (%.0f s)\n", rep->l2, rep->a,
            rep->c, rep->d[0], rep->d[1], rep->seconds);
end:
    wide_part_free(best);
    wide_part_free(w);
    wide_rows_free(rows);
    free(offset);
    free(mixed);
    free(z);
    free(enc);
    free(ft);
    free(fl);
    free(fy);
    free(ct);
    free(cl);
    free(cy);
    return rc;
}

/* P(positive) of texts under w into p. */
static int positive_of(const wide_part *w, const char **texts, const size_t *lens, int n, float *p,
                       char *err)
{
    float *z = calloc((size_t)n * 2 + 2, sizeof *z);
    if (!z) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    int rc = wide_add_logits_texts(w, texts, lens, n, z, NULL, NULL, err);
    for (int i = 0; !rc && i < n; i++)
        p[i] = (float)(1.0 / (1.0 + exp((double)z[2 * i] - z[2 * i + 1])));
    free(z);
    return rc;
}

/* A wide part fitted on the rows i of (texts, labels) with keep(i). */
static int fit_subset(const sm_wide_config *cfg, double l2, const char **texts, const size_t *lens,
                      const int *labels, int n, int folds, int fold, wide_part **out, char *err)
{
    const char **t = malloc(((size_t)n + 1) * sizeof *t);
    size_t *l = malloc(((size_t)n + 1) * sizeof *l);
    int *y = malloc(((size_t)n + 1) * sizeof *y), m = 0, rc;
    wide_rows *rows = NULL;
    if (!t || !l || !y) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (int i = 0; i < n; i++)
        if (fold < 0 || i % folds != fold) {
            t[m] = texts[i];
            l[m] = lens[i];
            y[m++] = labels[i];
        }
    wide_fit_options o;
    lbfgs_result res;
    wide_fit_options_default(&o);
    o.l2 = l2;
    if ((rc = wide_part_create(cfg, 2, out, err)) ||
        (rc = wide_fit_idf(*out, t, l, m, NULL, NULL, err)) ||
        (rc = wide_rows_make(*out, t, l, y, m, NULL, NULL, &rows, err)) ||
        (rc = wide_fit(*out, rows, NULL, &o, &res, err)))
        goto end;
    fprintf(stderr, "wide teacher: fold %d: %d rows, %d iterations, loss %.4f\n", fold, m,
            res.iterations, res.f);
end:
    wide_rows_free(rows);
    free(t);
    free(l);
    free(y);
    return rc;
}

int wide_stage_teacher(const review_set *fit, const review_set *extra, int folds,
                       const sm_wide_config *cfg, double l2, float *p_fit, float *p_extra,
                       char *err)
{
    const char **ft = NULL, **et = NULL;
    size_t *fl = NULL, *el = NULL;
    int *fy = NULL, *ey = NULL, rc;
    wide_part *w = NULL;
    const char **sub = NULL;
    size_t *subl = NULL;
    float *subp = NULL;
    if ((rc = set_arrays(fit, &ft, &fl, &fy, err)) || (rc = set_arrays(extra, &et, &el, &ey, err)))
        goto end;
    sub = malloc(((size_t)fit->n + 1) * sizeof *sub);
    subl = malloc(((size_t)fit->n + 1) * sizeof *subl);
    subp = malloc(((size_t)fit->n + 1) * sizeof *subp);
    if (!sub || !subl || !subp) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory");
        goto end;
    }
    for (int f = 0; f < folds; f++) {
        if ((rc = fit_subset(cfg, l2, ft, fl, fy, fit->n, folds, f, &w, err))) goto end;
        int m = 0;
        for (int i = f; i < fit->n; i += folds) {
            sub[m] = ft[i];
            subl[m++] = fl[i];
        }
        if ((rc = positive_of(w, sub, subl, m, subp, err))) goto end;
        for (int i = f, k = 0; i < fit->n; i += folds) p_fit[i] = subp[k++];
        wide_part_free(w);
        w = NULL;
    }
    if (extra->n) {
        if ((rc = fit_subset(cfg, l2, ft, fl, fy, fit->n, 1, -1, &w, err)) ||
            (rc = positive_of(w, et, el, extra->n, p_extra, err)))
            goto end;
    }
end:
    wide_part_free(w);
    free(sub);
    free(subl);
    free(subp);
    free(ft);
    free(fl);
    free(fy);
    free(et);
    free(el);
    free(ey);
    return rc;
}

int wide_stage_part_accuracy(bert_model *m, bert_workspace *ws, const review_set *set,
                             int max_length, double *encoder, double *wide, char *err)
{
    const char **t = NULL;
    size_t *l = NULL;
    int *y = NULL, K = m->cfg.num_labels, rc;
    float *enc = NULL, *z = NULL;
    double loss;
    *encoder = *wide = NAN;
    if (!m->wide) return SM_OK;
    if ((rc = set_arrays(set, &t, &l, &y, err))) goto end;
    enc = malloc(((size_t)set->n + 1) * K * sizeof *enc);
    z = calloc(((size_t)set->n + 1) * K, sizeof *z);
    if (!enc || !z) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory");
        goto end;
    }
    if ((rc = encoder_logits(m, ws, t, l, set->n, max_length, enc, err)) ||
        (rc = wide_add_logits_texts(m->wide, t, l, set->n, z, NULL, NULL, err)))
        goto end;
    wide_score(enc, y, set->n, K, &loss, encoder);
    wide_score(z, y, set->n, K, &loss, wide);
end:
    free(enc);
    free(z);
    free(t);
    free(l);
    free(y);
    return rc;
}

/* wide_fit.c: the wide part's idf, rows, loss, L-BFGS fit and the
 * wide/deep mix (wide_fit.h). Owns the arrays of a wide_rows and the
 * temporaries of a fit.
 */
#include "train/wide_fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

int wide_fit_idf(wide_part *w, const char *const *texts, const size_t *lens, int n,
                 int (*stop)(void *user), void *user, char *err)
{
    if (!w->idf) return sm_error(err, SM_ERR_INVALID, "wide: idf is off for this wide part");
    int B = w->cfg.buckets, rc;
    ngram_counts *nc = NULL;
    uint32_t *df = calloc((size_t)B, sizeof *df);
    if (!df) return sm_error(err, SM_ERR_NOMEM, "out of memory for %d document counts", B);
    if ((rc = ngram_counts_create(&w->cfg, &nc, err))) goto end;
    for (int i = 0; i < n; i++) {
        if (!texts[i]) continue;
        if (i % 256 == 255 && stop && stop(user)) {
            rc = sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
            goto end;
        }
        if ((rc = ngram_count_text(&w->cfg, texts[i], lens[i], nc, stop, user, err))) goto end;
        for (int t = 0; t < nc->n_touched; t++) df[nc->touched[t]]++;
    }
    for (int b = 0; b < B; b++) w->idf[b] = (float)(log((1.0 + n) / (1.0 + df[b])) + 1.0);
end:
    ngram_counts_free(nc);
    free(df);
    return rc;
}

void wide_rows_free(wide_rows *r)
{
    if (!r) return;
    free(r->start);
    free(r->idx);
    free(r->val);
    free(r->label);
    free(r);
}

int wide_rows_make(const wide_part *w, const char *const *texts, const size_t *lens,
                   const int *labels, int n, int (*stop)(void *user), void *user, wide_rows **out,
                   char *err)
{
    int rc = SM_OK;
    ngram_counts *nc = NULL;
    double *val = NULL;
    size_t cap = 0;
    *out = NULL;
    wide_rows *r = calloc(1, sizeof *r);
    if (!r) goto nomem;
    r->n = n;
    r->K = w->K;
    r->start = malloc(((size_t)n + 1) * sizeof *r->start);
    r->label = malloc(((size_t)n ? (size_t)n : 1) * sizeof *r->label);
    val = malloc((size_t)w->cfg.buckets * sizeof *val);
    if (!r->start || !r->label || !val) goto nomem;
    if ((rc = ngram_counts_create(&w->cfg, &nc, err))) goto end;
    r->start[0] = 0;
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= w->K) {
            rc = sm_error(err, SM_ERR_INVALID, "wide: row %d has label %d; expected 0..%d", i + 1,
                          labels[i], w->K - 1);
            goto end;
        }
        r->label[i] = labels[i];
        if (i % 256 == 255 && stop && stop(user)) {
            rc = sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
            goto end;
        }
        int m = 0;
        if (texts[i]) {
            if ((rc = ngram_count_text(&w->cfg, texts[i], lens[i], nc, stop, user, err))) goto end;
            m = wide_features(w, nc, val);
        }
        size_t used = r->start[i];
        if (used + (size_t)m > cap) {
            size_t ncap = cap * 2 + (size_t)m + 4096;
            int *ni = realloc(r->idx, ncap * sizeof *ni);
            if (ni) r->idx = ni;
            float *nv = realloc(r->val, ncap * sizeof *nv);
            if (nv) r->val = nv;
            if (!ni || !nv) goto nomem;
            cap = ncap;
        }
        for (int t = 0; t < m; t++) {
            r->idx[used + t] = nc->touched[t];
            r->val[used + t] = (float)val[t];
        }
        r->start[i + 1] = used + (size_t)m;
    }
    *out = r;
    r = NULL;
    goto end;
nomem:
    rc = sm_error(err, SM_ERR_NOMEM, "out of memory for the n-gram features of %d texts", n);
end:
    ngram_counts_free(nc);
    free(val);
    wide_rows_free(r);
    return rc;
}

/* Softmax of z (K) into p; returns log of the normaliser minus max. */
static double softmax_d(const double *z, int K, double *p)
{
    double mx = z[0], sum = 0.0;
    for (int k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
    for (int k = 0; k < K; k++) sum += (p[k] = exp(z[k] - mx));
    for (int k = 0; k < K; k++) p[k] /= sum;
    /* cppcheck-suppress invalidFunctionArg ; K >= 1: the largest term is exp(0) = 1 */
    return mx + log(sum);
}

/* L and its gradient for weights W (K, B) and bias b (K) in double. */
static int loss_grad(const wide_rows *r, int B, const double *W, const double *b,
                     const float *offset, double l2, double *loss, double *gW, double *gb,
                     char *err)
{
    int K = r->K;
    double *z = malloc(2 * (size_t)K * sizeof *z);
    if (!z) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    double *p = z + K, sum = 0.0, inv_n = r->n ? 1.0 / r->n : 0.0;
    memset(gW, 0, (size_t)K * B * sizeof *gW);
    memset(gb, 0, (size_t)K * sizeof *gb);
    for (int i = 0; i < r->n; i++) {
        size_t s0 = r->start[i], s1 = r->start[i + 1];
        for (int k = 0; k < K; k++) {
            const double *row = W + (size_t)k * B;
            double acc = b[k] + (offset ? offset[(size_t)i * K + k] : 0.0);
            for (size_t t = s0; t < s1; t++) acc += row[r->idx[t]] * r->val[t];
            z[k] = acc;
        }
        double lse = softmax_d(z, K, p);
        sum += lse - z[r->label[i]];
        p[r->label[i]] -= 1.0;
        for (int k = 0; k < K; k++) {
            double dz = p[k] * inv_n;
            double *grow = gW + (size_t)k * B;
            gb[k] += dz;
            for (size_t t = s0; t < s1; t++) grow[r->idx[t]] += dz * r->val[t];
        }
    }
    double ww = 0.0;
    for (size_t j = 0; j < (size_t)K * B; j++) {
        ww += W[j] * W[j];
        gW[j] += l2 * W[j];
    }
    *loss = sum * inv_n + 0.5 * l2 * ww;
    free(z);
    return SM_OK;
}

int wide_loss_grad(const wide_part *w, const wide_rows *r, const float *offset, double l2,
                   double *loss, double *gW, double *gb, char *err)
{
    size_t nW = (size_t)w->K * w->cfg.buckets;
    double *x = malloc((nW + (size_t)w->K) * sizeof *x);
    if (!x) return sm_error(err, SM_ERR_NOMEM, "out of memory for the wide part's weights");
    for (size_t j = 0; j < nW; j++) x[j] = w->weight[j];
    for (int k = 0; k < w->K; k++) x[nW + k] = w->bias[k];
    int rc = loss_grad(r, w->cfg.buckets, x, x + nW, offset, l2, loss, gW, gb, err);
    free(x);
    return rc;
}

void wide_fit_options_default(wide_fit_options *o)
{
    memset(o, 0, sizeof *o);
    o->l2 = 1e-5;
    lbfgs_options_default(&o->lbfgs);
    o->lbfgs.max_iter = 300;
}

typedef struct fit_ctx {
    const wide_rows *r;
    int B;
    const float *offset;
    const wide_fit_options *o;
} fit_ctx;

static int fit_fn(void *ctx, const double *x, double *f, double *g, char *err)
{
    const fit_ctx *c = ctx;
    if (c->o->stop && c->o->stop(c->o->user))
        return sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
    size_t nW = (size_t)c->r->K * c->B;
    return loss_grad(c->r, c->B, x, x + nW, c->offset, c->o->l2, f, g, g + nW, err);
}

int wide_fit(wide_part *w, const wide_rows *r, const float *offset, const wide_fit_options *o,
             lbfgs_result *res, char *err)
{
    if (r->K != w->K)
        return sm_error(err, SM_ERR_INVALID, "wide: rows of %d labels for a wide part of %d", r->K,
                        w->K);
    if (!(o->l2 >= 0) || !isfinite(o->l2))
        return sm_error(err, SM_ERR_INVALID, "wide: l2 %g: expected a number >= 0", o->l2);
    size_t nW = (size_t)w->K * w->cfg.buckets, n = nW + (size_t)w->K;
    double *x = malloc(n * sizeof *x);
    if (!x) return sm_error(err, SM_ERR_NOMEM, "out of memory for the wide part's weights");
    for (size_t j = 0; j < nW; j++) x[j] = w->weight[j];
    for (int k = 0; k < w->K; k++) x[nW + k] = w->bias[k];
    fit_ctx c = {r, w->cfg.buckets, offset, o};
    int rc = lbfgs_minimize(fit_fn, &c, x, n, &o->lbfgs, res, err);
    if (!rc) {
        for (size_t j = 0; j < nW; j++) w->weight[j] = (float)x[j];
        for (int k = 0; k < w->K; k++) w->bias[k] = (float)x[nW + k];
    }
    free(x);
    return rc;
}

void wide_score(const float *logits, const int *labels, int n, int K, double *loss,
                double *accuracy)
{
    double sum = 0.0;
    int right = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * K;
        double mx = z[0], s = 0.0;
        int top = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > mx) mx = z[top = k];
        for (int k = 0; k < K; k++) s += exp((double)z[k] - mx);
        /* cppcheck-suppress invalidFunctionArg ; K >= 1: the largest term is exp(0) = 1 */
        sum += mx + log(s) - z[labels[i]];
        right += top == labels[i];
    }
    *loss = n ? sum / n : 0.0;
    *accuracy = n ? (double)right / n : 0.0;
}

typedef struct mix_ctx {
    const float *enc, *wide;
    const int *labels;
    int n, K;
} mix_ctx;

/* x = (a, c, d[K]) */
static int mix_fn(void *ctx, const double *x, double *f, double *g, char *err)
{
    const mix_ctx *m = ctx;
    int K = m->K;
    double *z = malloc(2 * (size_t)K * sizeof *z), sum = 0.0;
    if (!z) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    double *p = z + K;
    memset(g, 0, (2 + (size_t)K) * sizeof *g);
    for (int i = 0; i < m->n; i++) {
        const float *e = m->enc + (size_t)i * K, *v = m->wide + (size_t)i * K;
        for (int k = 0; k < K; k++) z[k] = x[0] * e[k] + x[1] * v[k] + x[2 + k];
        sum += softmax_d(z, K, p) - z[m->labels[i]];
        p[m->labels[i]] -= 1.0;
        for (int k = 0; k < K; k++) {
            g[0] += p[k] * e[k] / m->n;
            g[1] += p[k] * v[k] / m->n;
            g[2 + k] += p[k] / m->n;
        }
    }
    /* a weak pull toward the encoder alone (a = 1, c = 0, d = 0), worth one
     * row: it keeps the mix finite on few or separable rows */
    double lam = 1.0 / m->n, pen = (x[0] - 1) * (x[0] - 1);
    g[0] += lam * (x[0] - 1);
    for (int j = 1; j < 2 + K; j++) {
        pen += x[j] * x[j];
        g[j] += lam * x[j];
    }
    *f = sum / m->n + 0.5 * lam * pen;
    free(z);
    return SM_OK;
}

int wide_fit_mix(const float *enc, const float *wide, const int *labels, int n, int K, double *a,
                 double *c, double *d, char *err)
{
    if (n < 1 || K < 1) return sm_error(err, SM_ERR_INVALID, "wide: no rows to fit the mix on");
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= K)
            return sm_error(err, SM_ERR_INVALID, "wide: row %d has label %d; expected 0..%d", i + 1,
                            labels[i], K - 1);
    double *x = calloc(2 + (size_t)K, sizeof *x);
    if (!x) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    x[0] = x[1] = 1.0;
    mix_ctx m = {enc, wide, labels, n, K};
    lbfgs_options o;
    lbfgs_result res;
    lbfgs_options_default(&o);
    o.max_iter = 500;
    o.gtol = 1e-9;
    int rc = lbfgs_minimize(mix_fn, &m, x, 2 + (size_t)K, &o, &res, err);
    if (!rc) {
        *a = x[0];
        *c = x[1];
        for (int k = 0; k < K; k++) d[k] = x[2 + k];
    }
    free(x);
    return rc;
}

int bert_model_apply_mix(bert_model *m, double a, double c, const double *d, char *err)
{
    int K = m->cfg.num_labels, C = m->cfg.hidden_size;
    m->cfg.int8_check.set = 0; /* the outputs change: an INT8 check no longer holds */
    if (!m->has_head || !m->p.cls_w || !m->wide)
        return sm_error(err, SM_ERR_INVALID, "wide: the mix needs a head and a wide part");
    if (!isfinite(a) || !isfinite(c))
        return sm_error(err, SM_ERR_INVALID, "wide: mix %g, %g is not finite", a, c);
    for (size_t j = 0; j < (size_t)K * C; j++) m->p.cls_w[j] = (float)(a * m->p.cls_w[j]);
    for (int k = 0; k < K; k++) m->p.cls_b[k] = (float)(a * m->p.cls_b[k] + (d ? d[k] : 0.0));
    wide_part *w = m->wide;
    for (size_t j = 0; j < (size_t)K * w->cfg.buckets; j++)
        w->weight[j] = (float)(c * w->weight[j]);
    for (int k = 0; k < K; k++) w->bias[k] = (float)(c * w->bias[k]);
    return SM_OK;
}

/* wide.c: the wide part's logits (wide.h). Owns the arrays of a
 * wide_part.
 */
#include "encoder/wide.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

int wide_part_create(const sm_wide_config *cfg, int K, wide_part **out, char *err)
{
    int rc;
    *out = NULL;
    if ((rc = sm_wide_config_check(cfg, err))) return rc;
    if (K < 1) return sm_error(err, SM_ERR_INVALID, "wide: %d labels: expected at least 1", K);
    wide_part *w = calloc(1, sizeof *w);
    if (!w) goto nomem;
    w->cfg = *cfg;
    w->cfg.set = 1;
    w->K = K;
    w->weight = calloc((size_t)K * (size_t)cfg->buckets, sizeof *w->weight);
    w->bias = calloc((size_t)K, sizeof *w->bias);
    if (cfg->idf) w->idf = malloc((size_t)cfg->buckets * sizeof *w->idf);
    if (!w->weight || !w->bias || (cfg->idf && !w->idf)) goto nomem;
    for (int b = 0; cfg->idf && b < cfg->buckets; b++) w->idf[b] = 1.0f;
    *out = w;
    return SM_OK;
nomem:
    wide_part_free(w);
    return sm_error(err, SM_ERR_NOMEM, "out of memory for a wide part of %d x %d", K, cfg->buckets);
}

int wide_part_clone(const wide_part *src, wide_part **out, char *err)
{
    int rc = wide_part_create(&src->cfg, src->K, out, err);
    if (rc) return rc;
    wide_part *w = *out;
    memcpy(w->weight, src->weight, (size_t)src->K * src->cfg.buckets * sizeof *w->weight);
    memcpy(w->bias, src->bias, (size_t)src->K * sizeof *w->bias);
    if (src->idf) memcpy(w->idf, src->idf, (size_t)src->cfg.buckets * sizeof *w->idf);
    return SM_OK;
}

void wide_part_free(wide_part *w)
{
    if (!w) return;
    free(w->weight);
    free(w->bias);
    free(w->idf);
    free(w);
}

size_t wide_part_num_params(const wide_part *w)
{
    size_t B = (size_t)w->cfg.buckets;
    return (size_t)w->K * B + (size_t)w->K + (w->idf ? B : 0);
}

int wide_features(const wide_part *w, const ngram_counts *nc, double *val)
{
    double ss = 0.0;
    int n = nc->n_touched;
    for (int i = 0; i < n; i++) {
        int b = nc->touched[i];
        double v = (double)nc->count[i];
        if (w->cfg.sublinear_tf) v = 1.0 + log(v);
        if (w->idf) v *= (double)w->idf[b];
        val[i] = v;
        ss += v * v;
    }
    if (w->cfg.l2_norm && ss > 0.0) {
        double inv = 1.0 / sqrt(ss);
        for (int i = 0; i < n; i++) val[i] *= inv;
    }
    return n;
}

int wide_add_logits(const wide_part *w, ngram_counts *nc, double *val, const char *text, size_t len,
                    float *logits, int (*stop)(void *user), void *user, char *err)
{
    int rc, n = 0;
    if (text) {
        if ((rc = ngram_count_text(&w->cfg, text, len, nc, stop, user, err))) return rc;
        n = wide_features(w, nc, val);
    }
    size_t B = (size_t)w->cfg.buckets;
    for (int k = 0; k < w->K; k++) {
        const float *row = w->weight + (size_t)k * B;
        double z = w->bias[k];
        for (int i = 0; i < n; i++) z += (double)row[nc->touched[i]] * val[i];
        logits[k] += (float)z;
    }
    return SM_OK;
}

int wide_add_logits_texts(const wide_part *w, const char *const *texts, const size_t *lens, int n,
                          float *logits, int (*stop)(void *user), void *user, char *err)
{
    ngram_counts *nc = NULL;
    int rc = ngram_counts_create(&w->cfg, &nc, err);
    double *val = NULL;
    size_t val_cap = 0;
    for (int i = 0; !rc && i < n; i++) {
        if (i % 256 == 255 && stop && stop(user)) {
            rc = sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
            break;
        }
        /* val as long as the text's n-grams can be many */
        size_t need = texts[i] ? lens[i] * (size_t)(w->cfg.ngram_max - w->cfg.ngram_min + 1) : 0;
        if (need > (size_t)w->cfg.buckets) need = (size_t)w->cfg.buckets;
        if (need > val_cap) {
            free(val);
            val_cap = need;
            if (!(val = malloc(val_cap * sizeof *val))) {
                rc = sm_error(err, SM_ERR_NOMEM, "out of memory for the wide features");
                break;
            }
        }
        rc = wide_add_logits(w, nc, val, texts[i], texts[i] ? lens[i] : 0,
                             logits + (size_t)i * w->K, stop, user, err);
    }
    free(val);
    ngram_counts_free(nc);
    return rc;
}

typedef struct explain_walk {
    const wide_part *w;
    const ngram_counts *nc;
    const double *val;
    int k;
    wide_span_fn span;
    void *arg;
} explain_walk;

static int explain_each(void *arg, int bucket, size_t from, size_t to)
{
    const explain_walk *e = arg;
    int i = ngram_counts_find(e->nc, bucket);
    if (i < 0) return 0; /* cannot happen: the same text was counted */
    double term = (double)e->w->weight[(size_t)e->k * e->w->cfg.buckets + bucket] * e->val[i];
    e->span(e->arg, from, to, term / e->nc->count[i]);
    return 0;
}

int wide_explain(const wide_part *w, const char *text, size_t len, int k, float *logits,
                 wide_span_fn span, void *arg, int (*stop)(void *user), void *user, char *err)
{
    ngram_counts *nc = NULL;
    double *val = NULL;
    int rc;
    if (k < 0 || k >= w->K)
        return sm_error(err, SM_ERR_INVALID, "wide: label %d is not in [0, %d)", k, w->K);
    if ((rc = ngram_counts_create(&w->cfg, &nc, err))) return rc;
    if ((rc = ngram_count_text(&w->cfg, text, len, nc, stop, user, err))) goto end;
    val = malloc(((size_t)nc->n_touched + 1) * sizeof *val);
    if (!val) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory for the wide features");
        goto end;
    }
    int n = wide_features(w, nc, val);
    for (int j = 0; j < w->K; j++) {
        const float *row = w->weight + (size_t)j * w->cfg.buckets;
        double z = w->bias[j];
        for (int i = 0; i < n; i++) z += (double)row[nc->touched[i]] * val[i];
        logits[j] = (float)z;
    }
    explain_walk e = {w, nc, val, k, span, arg};
    rc = ngram_walk(&w->cfg, text, len, explain_each, &e, stop, user, err);
end:
    free(val);
    ngram_counts_free(nc);
    return rc;
}

/* explain.c: token attributions by integrated gradients and gradient x
 * input (explain.h), on the training passes of bert_train.c.
 *
 * Owns the explainer: a training workspace without lanes, a gradient arena
 * the backward adds parameter gradients to (never read: only the gradient
 * of the embeddings' sum, bert_train_grad_out, is used), the parameters on
 * the backend (the model's own arena on a host-memory backend), the
 * interpolation offsets on the backend and their host copies.
 *
 * A pass runs R inputs through the encoder as one batch: the baseline's
 * token ids, and as encoder_pass.r0_delta the offset α_r (x - b) on each
 * token's word embedding, so input r's embeddings are b + α_r (x - b). The
 * logit gradient of input r is w_r on the target (1/m for the steps of
 * integrated gradients), so the embedding gradients summed over the pass's
 * rows add up to the mean over the steps.
 */
#include "train/explain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "encoder/ws_arena.h" /* TRY_BACKEND */
#include "tokenize/tokenizer.h"
#include "train/bert_train.h"
#include "train/bert_train_ws.h"

struct bert_explainer {
    backend *be;
    const bert_model *m;
    int max_batch, max_seq, C, K;
    bert_params p, g;
    float *dev_params; /* NULL on a host-memory backend: p views m's arena */
    float *dev_grads;
    float *dev_delta; /* (max_batch, max_seq, C) */
    bert_train_ws *ws;
    /* host */
    int *ids_base;  /* (max_seq) the baseline's ids */
    int *ids;       /* (max_batch, max_seq) one pass's ids */
    int *lengths;   /* (max_batch) */
    int *labels;    /* (max_batch) */
    float *diff;    /* (max_seq, C) x_t - b_t */
    float *delta;   /* (max_batch, max_seq, C) */
    float *dx;      /* (max_batch, max_seq, C) */
    double *grad;   /* (max_seq, C) Σ over steps of w_r ∂z/∂e_t */
    float *logits;  /* (max_batch, K) */
    float *dlogits; /* (max_batch, K) */
    float *probs;   /* (K) */
    float *attr;    /* (max_seq) */
};

void bert_explainer_free(bert_explainer *x)
{
    if (!x) return;
    backend *be = x->be;
    bert_train_ws_free(x->ws);
    if (x->dev_params) bert_params_release(&x->p); /* else x->p is m's own */
    bert_params_release(&x->g);
    if (x->dev_params) be->free(be, x->dev_params);
    if (x->dev_grads) be->free(be, x->dev_grads);
    if (x->dev_delta) be->free(be, x->dev_delta);
    free(x->ids_base);
    free(x->ids);
    free(x->lengths);
    free(x->labels);
    free(x->diff);
    free(x->delta);
    free(x->dx);
    free(x->grad);
    free(x->logits);
    free(x->dlogits);
    free(x->probs);
    free(x->attr);
    free(x);
}

/* dst(n floats, backend memory) = 0, from a small zero buffer. */
static int zero_backend(backend *be, float *dst, size_t n, char *err)
{
    enum { CHUNK = 1 << 16 };
    static const float zeros[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        TRY_BACKEND(be->upload(be, dst + i, zeros, k * sizeof(float)));
    }
    return SM_OK;
}

static int nomem(char *err)
{
    return sm_error(err, SM_ERR_NOMEM, "out of memory creating an explainer");
}

int bert_explainer_create(backend *be, const bert_model *m, int max_batch, int max_seq,
                          bert_explainer **out, char *err)
{
    const bert_config *cfg = &m->cfg;
    int rc;
    *out = NULL;
    if (!m->has_head || cfg->num_labels < 1)
        return sm_error(err, SM_ERR_INVALID,
                        "the model has no classification head: there is no label to explain");
    if (max_batch < 2) max_batch = 2;
    bert_explainer *x = calloc(1, sizeof *x);
    if (!x) return nomem(err);
    x->be = be;
    x->m = m;
    x->max_batch = max_batch;
    x->max_seq = max_seq;
    x->C = cfg->hidden_size;
    x->K = cfg->num_labels;
    size_t NC = (size_t)max_batch * max_seq * x->C;
    if ((rc = bert_train_ws_create_encoder(be, cfg, max_batch, max_seq, &x->ws, err))) goto fail;
    if (be->host_memory) {
        x->p = m->p;
    } else {
        x->dev_params = be->alloc(be, m->n_floats * sizeof(float));
        if (!x->dev_params) goto oom;
        if ((rc = be->upload(be, x->dev_params, m->arena, m->n_floats * sizeof(float)))) {
            rc = sm_error(err, rc, "%s backend: uploading the parameters failed", be->name);
            goto fail;
        }
        if ((rc = bert_params_bind(cfg, 1, x->dev_params, &x->p, err))) goto fail;
    }
    x->dev_grads = be->alloc(be, m->n_floats * sizeof(float));
    x->dev_delta = be->alloc(be, NC * sizeof(float));
    if (!x->dev_grads || !x->dev_delta) goto oom;
    if ((rc = zero_backend(be, x->dev_grads, m->n_floats, err))) goto fail;
    if ((rc = bert_params_bind(cfg, 1, x->dev_grads, &x->g, err))) goto fail;
    x->ids_base = malloc((size_t)max_seq * sizeof *x->ids_base);
    x->ids = malloc((size_t)max_batch * max_seq * sizeof *x->ids);
    x->lengths = malloc((size_t)max_batch * sizeof *x->lengths);
    x->labels = malloc((size_t)max_batch * sizeof *x->labels);
    x->diff = malloc((size_t)max_seq * x->C * sizeof *x->diff);
    x->delta = malloc(NC * sizeof *x->delta);
    x->dx = malloc(NC * sizeof *x->dx);
    x->grad = malloc((size_t)max_seq * x->C * sizeof *x->grad);
    x->logits = malloc((size_t)max_batch * x->K * sizeof *x->logits);
    x->dlogits = malloc((size_t)max_batch * x->K * sizeof *x->dlogits);
    x->probs = malloc((size_t)x->K * sizeof *x->probs);
    x->attr = malloc((size_t)max_seq * sizeof *x->attr);
    if (!x->ids_base || !x->ids || !x->lengths || !x->labels || !x->diff || !x->delta || !x->dx ||
        !x->grad || !x->logits || !x->dlogits || !x->probs || !x->attr)
        goto oom;
    *out = x;
    return SM_OK;
oom:
    rc = nomem(err);
fail:
    bert_explainer_free(x);
    return rc;
}

/* One pass over R inputs: rows' ids in x->ids, their offsets (when
 * with_delta) in x->delta, logits into x->logits; with backward, the
 * gradient of Σ_r w[r] z_target(input r) per token summed into x->grad. */
static int run_pass(bert_explainer *x, int R, int T, int target, int with_delta, const float *w,
                    int backward, char *err)
{
    backend *be = x->be;
    const bert_config *cfg = &x->m->cfg;
    int K = x->K, C = x->C;
    size_t NC = (size_t)R * T * C;
    double loss;
    int rc;
    for (int r = 0; r < R; r++) {
        x->lengths[r] = T;
        x->labels[r] = target;
    }
    bert_targets tg = {.labels = x->labels};
    if ((rc = bert_train_check_batch(cfg, &x->p, x->ws, x->ids, x->lengths, &tg, R, T, err)))
        return rc;
    x->ws->r0_delta = NULL;
    if (with_delta) {
        TRY_BACKEND(be->upload(be, x->dev_delta, x->delta, NC * sizeof(float)));
        x->ws->r0_delta = x->dev_delta;
    }
    rc = bert_train_forward_one(cfg, &x->p, x->ws, x->ids, x->lengths, &tg, R, T, NULL, &loss,
                                x->logits, err);
    if (!rc && backward) {
        memset(x->dlogits, 0, (size_t)R * K * sizeof *x->dlogits);
        for (int r = 0; r < R; r++) x->dlogits[(size_t)r * K + target] = w[r];
        rc = bert_train_backward_dlogits(cfg, &x->p, &x->g, x->ws, x->dlogits, err);
        if (!rc) rc = be->download(be, x->dx, bert_train_grad_out(x->ws), NC * sizeof(float));
        if (!rc) rc = be->synchronize(be);
        if (!rc)
            for (int r = 0; r < R; r++)
                for (size_t i = 0; i < (size_t)T * C; i++)
                    x->grad[i] += x->dx[(size_t)r * T * C + i];
    }
    x->ws->r0_delta = NULL;
    return rc;
}

int bert_explain(bert_explainer *x, const int *ids, int T, int target, explain_method method,
                 int steps, int (*stop)(void *user), void *user, bert_explanation *out, char *err)
{
    const bert_model *m = x->m;
    const bert_config *cfg = &m->cfg;
    int C = x->C, K = x->K, rc;
    float w[2] = {1.0f, 0.0f};

    memset(out, 0, sizeof *out);
    if (T < 2 || T > x->max_seq)
        return sm_error(err, SM_ERR_INVALID, "explain: %d tokens; expected 2..%d", T, x->max_seq);
    if (target < -1 || target >= K)
        return sm_error(err, SM_ERR_INVALID, "explain: label %d is not in [0, %d)", target, K);
    if (method == EXPLAIN_INTEGRATED_GRADIENTS && (steps < 1 || steps > 1024))
        return sm_error(err, SM_ERR_INVALID, "explain: %d steps; expected 1..1024", steps);
    for (int t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= cfg->vocab_size)
            return sm_error(err, SM_ERR_INVALID,
                            "explain: token id %d at %d is outside the vocabulary (%d)", ids[t], t,
                            cfg->vocab_size);
    int pad = tokenizer_pad_id(m->tok);
    if (pad < 0 || pad >= cfg->vocab_size) pad = 0;

    /* the baseline: [CLS] pad ... pad [SEP] */
    for (int t = 0; t < T; t++) x->ids_base[t] = t == 0 || t == T - 1 ? ids[t] : pad;
    for (int t = 0; t < T; t++) {
        const float *xe = m->p.word_emb + (size_t)ids[t] * C;
        const float *be_ = m->p.word_emb + (size_t)x->ids_base[t] * C;
        for (int c = 0; c < C; c++) x->diff[(size_t)t * C + c] = xe[c] - be_[c];
    }
    memset(x->grad, 0, (size_t)T * C * sizeof *x->grad);

    /* pass 1: the text and the baseline, as they are; the gradient at the
     * text when that is the method */
    memcpy(x->ids, ids, (size_t)T * sizeof *ids);
    memcpy(x->ids + T, x->ids_base, (size_t)T * sizeof *ids);
    int gi = method == EXPLAIN_GRADIENT_X_INPUT;
    if (target < 0) {
        /* the predicted label first (a pass without the gradient) */
        if ((rc = run_pass(x, 2, T, 0, 0, w, 0, err))) return rc;
        target = 0;
        for (int k = 1; k < K; k++)
            if (x->logits[k] > x->logits[target]) target = k;
        if (gi && (rc = run_pass(x, 2, T, target, 0, w, 1, err))) return rc;
    } else if ((rc = run_pass(x, 2, T, target, 0, w, gi, err))) {
        return rc;
    }
    out->target = target;
    out->logit = x->logits[target];
    out->baseline_logit = x->logits[K + target];
    double mx = x->logits[0], sum = 0;
    for (int k = 1; k < K; k++) mx = fmax(mx, x->logits[k]);
    for (int k = 0; k < K; k++) sum += exp(x->logits[k] - mx);
    for (int k = 0; k < K; k++) x->probs[k] = (float)(exp(x->logits[k] - mx) / sum);

    /* integrated gradients: the steps in passes of up to max_batch */
    if (!gi) {
        float wr[1024]; /* R <= steps <= 1024 */
        for (int k0 = 0; k0 < steps; k0 += x->max_batch) {
            if (stop && stop(user)) return sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
            int R = steps - k0 < x->max_batch ? steps - k0 : x->max_batch;
            for (int r = 0; r < R; r++) {
                float alpha = (float)((k0 + r + 0.5) / steps);
                memcpy(x->ids + (size_t)r * T, x->ids_base, (size_t)T * sizeof *ids);
                float *d = x->delta + (size_t)r * T * C;
                for (size_t i = 0; i < (size_t)T * C; i++) d[i] = alpha * x->diff[i];
                wr[r] = 1.0f / (float)steps;
            }
            if ((rc = run_pass(x, R, T, target, 1, wr, 1, err))) return rc;
        }
    }

    /* a_t = (x_t - b_t) · the mean gradient */
    double total = 0;
    for (int t = 0; t < T; t++) {
        double a = 0;
        for (int c = 0; c < C; c++)
            a += (double)x->diff[(size_t)t * C + c] * x->grad[(size_t)t * C + c];
        x->attr[t] = (float)a;
        total += a;
    }
    out->probs = x->probs;
    out->attr = x->attr;
    out->attr_sum = total;
    return SM_OK;
}

/* classifier.c: texts in, class probabilities out.
 *
 * bert_classify_texts() tokenizes a set of texts into one compact id arena,
 * orders them by token count so each batch pads little, runs the encoder once
 * per batch of at most batch_size, and writes softmax probabilities back in
 * the caller's order. On a CPU backend with several threads, whole batches
 * run concurrently on the workspace's lanes (one single-threaded forward per
 * thread of thread_pool.h, no waiting inside a pass). It owns only
 * temporary buffers freed before return.
 */
#define _GNU_SOURCE /* qsort_r */
#include "bert.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "thread_pool.h"

typedef struct encoded {
    int *ids;        /* all sequences back to back */
    size_t *start;   /* (n) offset of sequence i in ids */
    int *len;        /* (n) token count including [CLS] and [SEP] */
    int *order;      /* (n) indices sorted by len */
} encoded;

static void encoded_free(encoded *e)
{
    free(e->ids);
    free(e->start);
    free(e->len);
    free(e->order);
}

/* Orders sequence indices by token count; ties keep input order. */
static int by_length_r(const void *a, const void *b, void *lens)
{
    int ia = *(const int *)a, ib = *(const int *)b;
    const int *len = lens;
    int d = len[ia] - len[ib];
    return d ? d : ia - ib;
}

static int encode_all(const tokenizer *tok, const char *const *texts,
                      const size_t *lens, int n, int max_length, encoded *e,
                      int *truncated, char *err)
{
    size_t cap = (size_t)n * 64 + 16, used = 0;
    e->ids = malloc(cap * sizeof *e->ids);
    e->start = malloc((size_t)n * sizeof *e->start);
    e->len = malloc((size_t)n * sizeof *e->len);
    e->order = malloc((size_t)n * sizeof *e->order);
    if (!e->ids || !e->start || !e->len || !e->order) goto nomem;
    for (int i = 0; i < n; i++) {
        if (cap - used < (size_t)max_length) {
            cap = cap * 2 + (size_t)max_length;
            int *grown = realloc(e->ids, cap * sizeof *e->ids);
            if (!grown) goto nomem;
            e->ids = grown;
        }
        int count, cut;
        const char *text = texts[i] ? texts[i] : "";
        int rc = tokenizer_encode(tok, text, texts[i] ? lens[i] : 0, max_length,
                                  e->ids + used, &count, &cut, err);
        if (rc) return rc;
        e->start[i] = used;
        e->len[i] = count;
        e->order[i] = i;
        if (truncated) truncated[i] = cut;
        used += (size_t)count;
    }
    qsort_r(e->order, (size_t)n, sizeof *e->order, by_length_r, e->len);
    return SM_OK;
nomem:
    return sm_error(err, SM_ERR_NOMEM, "out of memory tokenizing %d texts", n);
}

static void softmax(float *x, int K)
{
    float mx = x[0];
    for (int k = 1; k < K; k++) mx = x[k] > mx ? x[k] : mx;
    double sum = 0.0;
    for (int k = 0; k < K; k++) sum += exp((double)x[k] - mx);
    for (int k = 0; k < K; k++) x[k] = (float)(exp((double)x[k] - mx) / sum);
}

/* Pads batch [first, first + B) of the length order into ids(B,T), runs the
 * encoder on ws and writes the softmaxed rows of probs. ids/lengths/logits
 * are scratch for one batch. */
static int run_batch(const bert_model *m, const bert_params *p, bert_workspace *ws,
                     const encoded *e, int first, int B, int *ids, int *lengths,
                     float *logits, float *probs, char *err)
{
    int K = m->cfg.num_labels, pad = tokenizer_pad_id(m->tok);
    const int *batch = e->order + first;
    int T = e->len[batch[B - 1]]; /* sorted: the last is the longest */
    for (int b = 0; b < B; b++) {
        int i = batch[b];
        int *row = ids + (size_t)b * T;
        memcpy(row, e->ids + e->start[i], (size_t)e->len[i] * sizeof *row);
        for (int t = e->len[i]; t < T; t++) row[t] = pad;
        lengths[b] = e->len[i];
    }
    int rc = bert_forward(&m->cfg, p, ws, ids, lengths, B, T, logits, NULL, err);
    if (rc) return rc;
    for (int b = 0; b < B; b++) {
        float *out = probs + (size_t)batch[b] * K;
        memcpy(out, logits + (size_t)b * K, (size_t)K * sizeof *out);
        softmax(out, K);
    }
    return SM_OK;
}

/* The batches of a bert_classify_texts on lanes: lane k's scratch is
 * ids + k * per_lane, lengths + k * batch_size, logits + k * batch_size * K. */
typedef struct lanes_job {
    const bert_model *m;
    const bert_params *p;
    bert_workspace **lane_ws;
    const encoded *e;
    int n, batch_size, K;
    size_t per_lane;
    int *ids, *lengths;
    float *logits, *probs;
    atomic_int rc; /* the first failing batch's code; its message in err */
    char *err;
} lanes_job;

static void lane_batch(void *ctx, int bi, int lane)
{
    lanes_job *j = ctx;
    if (atomic_load_explicit(&j->rc, memory_order_relaxed)) return;
    char lane_err[SM_ERR_MAX];
    int first = bi * j->batch_size;
    int B = j->n - first < j->batch_size ? j->n - first : j->batch_size;
    int rc = run_batch(j->m, j->p, j->lane_ws[lane], j->e, first, B, j->ids + lane * j->per_lane,
                       j->lengths + (size_t)lane * j->batch_size,
                       j->logits + (size_t)lane * j->batch_size * j->K, j->probs, lane_err);
    int none = SM_OK;
    if (rc && atomic_compare_exchange_strong(&j->rc, &none, rc) && j->err)
        memcpy(j->err, lane_err, SM_ERR_MAX);
}

/* How many batches to run at once: one per thread of a CPU backend (each on
 * its own single-threaded lane), else one. */
static int lane_count(const bert_workspace *ws, int n_batches)
{
    const backend *be = bert_workspace_backend(ws);
    if (strcmp(be->name, "cpu") || n_batches < 2) return 1;
    int t = backend_cpu_threads(be);
    return t < n_batches ? t : n_batches;
}

int bert_classify_texts(const bert_model *m, const bert_params *p,
                        bert_workspace *ws, const char *const *texts,
                        const size_t *lens, int n, int max_length,
                        int batch_size, float *probs, int *truncated,
                        char *err)
{
    encoded e = {0};
    int *ids = NULL, *lengths = NULL;
    float *logits = NULL;
    bert_workspace **lane_ws = &ws;
    int K = m->cfg.num_labels, rc;
    int limit = bert_max_length(&m->cfg);

    if (n <= 0) return SM_OK;
    if (max_length <= 0 || max_length > limit) max_length = limit;
    if (max_length < 2)
        return sm_error(err, SM_ERR_INVALID, "max_length %d: must be at least 2", max_length);
    if (batch_size < 1)
        return sm_error(err, SM_ERR_INVALID, "batch_size %d: must be at least 1", batch_size);

    if ((rc = encode_all(m->tok, texts, lens, n, max_length, &e, truncated, err))) goto end;
    int n_batches = (n + batch_size - 1) / batch_size;
    int lanes = lane_count(ws, n_batches);
    if (lanes > 1 && bert_workspace_lanes(ws, &m->cfg, lanes, &lane_ws, err) != SM_OK) {
        lanes = 1; /* no memory for lanes: run the batches one by one */
        lane_ws = &ws;
    }
    size_t per_lane = (size_t)batch_size * max_length;
    ids = malloc((size_t)lanes * per_lane * sizeof *ids);
    lengths = malloc((size_t)lanes * batch_size * sizeof *lengths);
    logits = malloc((size_t)lanes * batch_size * K * sizeof *logits);
    if (!ids || !lengths || !logits) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory for a batch of %d", batch_size);
        goto end;
    }
    /* Batches are independent: with lanes, each thread takes the next one
     * and runs it start to finish on its own lane. The first error wins.
     * One lane runs the batches in order and stops at the first error. */
    rc = SM_OK;
    if (lanes == 1) {
        for (int bi = 0; bi < n_batches && !rc; bi++) {
            int first = bi * batch_size;
            int B = n - first < batch_size ? n - first : batch_size;
            rc = run_batch(m, p, lane_ws[0], &e, first, B, ids, lengths, logits, probs, err);
        }
        goto end;
    }
    lanes_job j = {m, p, lane_ws, &e, n, batch_size, K, per_lane, ids, lengths, logits, probs,
                   SM_OK, err};
    tp_for_dynamic(lanes, n_batches, lane_batch, &j);
    rc = atomic_load(&j.rc);
end:
    free(logits);
    free(lengths);
    free(ids);
    encoded_free(&e);
    return rc;
}

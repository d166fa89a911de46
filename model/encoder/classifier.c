/* classifier.c: texts in, class probabilities or sentence embeddings out.
 *
 * bert_classify_texts() tokenizes a set of texts into one compact id arena,
 * orders them by token count so each batch pads little, runs the encoder once
 * per batch of at most batch_size, and writes softmax probabilities back in
 * the caller's order. On a backend with lanes (the CPU: one per thread),
 * whole batches run concurrently on the workspace's lanes (lanes.h,
 * lanes_for_each: one single-threaded forward per lane, no waiting inside a
 * pass). bert_embed_texts()
 * batches the same way and pools each text's last hidden state (pooling.h)
 * instead of running the head. It owns only temporary buffers freed before
 * return.
 */
#define _GNU_SOURCE /* qsort_r */
#include "bert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "lanes.h"

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
                      int *truncated, const bert_stop *stop, char *err)
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
        if (stop && stop->stop && stop->stop(stop->user))
            return sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
        int rc = tokenizer_encode_stoppable(tok, text, texts[i] ? lens[i] : 0, max_length,
                                            e->ids + used, &count, &cut,
                                            stop ? stop->stop : NULL, stop ? stop->user : NULL,
                                            err);
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
 * encoder on ws and writes the rows of out: softmaxed probabilities (K
 * wide), or with embed the pooled embeddings (C wide). ids/lengths/scratch
 * are for one batch: scratch holds logits(B,K), or with embed the hidden
 * state (B,T,C). */
static int run_batch(const bert_model *m, const bert_params *p, bert_workspace *ws,
                     const encoded *e, int first, int B, int embed, int *ids, int *lengths,
                     float *scratch, float *out, char *err)
{
    int K = m->cfg.num_labels, C = m->cfg.hidden_size, pad = tokenizer_pad_id(m->tok);
    const int *batch = e->order + first;
    int T = e->len[batch[B - 1]]; /* sorted: the last is the longest */
    for (int b = 0; b < B; b++) {
        int i = batch[b];
        int *row = ids + (size_t)b * T;
        memcpy(row, e->ids + e->start[i], (size_t)e->len[i] * sizeof *row);
        for (int t = e->len[i]; t < T; t++) row[t] = pad;
        lengths[b] = e->len[i];
    }
    int rc = embed ? bert_forward_hidden(&m->cfg, p, ws, ids, lengths, B, T, scratch, err)
                   : bert_forward(&m->cfg, p, ws, ids, lengths, B, T, scratch, NULL, err);
    if (rc) return rc;
    for (int b = 0; b < B; b++) {
        if (embed) {
            sm_pool_sequence(&m->cfg.pooling, scratch + (size_t)b * T * C, lengths[b], C,
                             out + (size_t)batch[b] * C);
            continue;
        }
        float *row = out + (size_t)batch[b] * K;
        memcpy(row, scratch + (size_t)b * K, (size_t)K * sizeof *row);
        softmax(row, K);
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
    int n, batch_size, embed;
    size_t per_lane, per_scratch;
    int *ids, *lengths;
    float *scratch, *out;
} lanes_job;

static int lane_batch(void *ctx, int bi, int lane, char *err)
{
    const lanes_job *j = ctx;
    int first = bi * j->batch_size;
    int B = j->n - first < j->batch_size ? j->n - first : j->batch_size;
    return run_batch(j->m, j->p, j->lane_ws[lane], j->e, first, B, j->embed,
                     j->ids + lane * j->per_lane, j->lengths + (size_t)lane * j->batch_size,
                     j->scratch + lane * j->per_scratch, j->out, err);
}

/* How many batches to run at once: one per lane of the backend (the CPU:
 * one per thread, each lane single-threaded), else one. */
static int lane_count(const bert_workspace *ws, int n_batches)
{
    const backend *be = bert_workspace_backend(ws);
    if (n_batches < 2) return 1;
    int t = be->lanes(be);
    return t < n_batches ? t : n_batches;
}

/* bert_classify_texts (embed 0: out is probs) and bert_embed_texts (embed
 * 1: out is emb). */
static int run_texts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                     const char *const *texts, const size_t *lens, int n, int max_length,
                     int batch_size, int embed, float *out, int *truncated,
                     const bert_stop *stop, char *err)
{
    encoded e = {0};
    int *ids = NULL, *lengths = NULL;
    float *scratch = NULL;
    bert_workspace **lane_ws = &ws;
    int rc;
    int limit = bert_max_length(&m->cfg);

    if (n <= 0) return SM_OK;
    if (max_length <= 0 || max_length > limit) max_length = limit;
    if (max_length < 2)
        return sm_error(err, SM_ERR_INVALID, "max_length %d: must be at least 2", max_length);
    if (batch_size < 1)
        return sm_error(err, SM_ERR_INVALID, "batch_size %d: must be at least 1", batch_size);

    if ((rc = encode_all(m->tok, texts, lens, n, max_length, &e, truncated, stop, err))) goto end;
    int n_batches = (n + batch_size - 1) / batch_size;
    int lanes = lane_count(ws, n_batches);
    if (lanes > 1 && bert_workspace_lanes(ws, &m->cfg, lanes, &lane_ws, err) != SM_OK) {
        lanes = 1; /* no memory for lanes: run the batches one by one */
        lane_ws = &ws;
    }
    size_t per_lane = (size_t)batch_size * max_length;
    /* per lane: logits(batch, K), or the hidden state (batch, T, C) */
    size_t per_scratch = embed ? per_lane * (size_t)m->cfg.hidden_size
                               : (size_t)batch_size * m->cfg.num_labels;
    ids = malloc((size_t)lanes * per_lane * sizeof *ids);
    lengths = malloc((size_t)lanes * batch_size * sizeof *lengths);
    scratch = malloc((size_t)lanes * per_scratch * sizeof *scratch);
    if (!ids || !lengths || !scratch) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory for a batch of %d", batch_size);
        goto end;
    }
    /* Batches are independent: with lanes, each thread takes the next one
     * and runs it start to finish on its own lane. The first error wins.
     * One lane runs the batches in order and stops at the first error. */
    rc = SM_OK;
    if (lanes == 1) {
        for (int bi = 0; bi < n_batches && !rc; bi++) {
            if (bi && stop && stop->stop && stop->stop(stop->user)) {
                rc = sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
                break;
            }
            int first = bi * batch_size;
            int B = n - first < batch_size ? n - first : batch_size;
            rc = run_batch(m, p, lane_ws[0], &e, first, B, embed, ids, lengths, scratch, out,
                           err);
        }
        goto end;
    }
    lanes_job j = {m, p, lane_ws, &e, n, batch_size, embed, per_lane, per_scratch, ids,
                   lengths, scratch, out};
    rc = lanes_for_each(lanes, n_batches, lane_batch, &j, err);
end:
    free(scratch);
    free(lengths);
    free(ids);
    encoded_free(&e);
    return rc;
}

int bert_classify_texts(const bert_model *m, const bert_params *p,
                        bert_workspace *ws, const char *const *texts,
                        const size_t *lens, int n, int max_length,
                        int batch_size, float *probs, int *truncated,
                        char *err)
{
    return run_texts(m, p, ws, texts, lens, n, max_length, batch_size, 0, probs, truncated,
                     NULL, err);
}

int bert_classify_texts_stoppable(const bert_model *m, const bert_params *p,
                                  bert_workspace *ws, const char *const *texts,
                                  const size_t *lens, int n, int max_length, int batch_size,
                                  float *probs, int *truncated, const bert_stop *stop,
                                  char *err)
{
    return run_texts(m, p, ws, texts, lens, n, max_length, batch_size, 0, probs, truncated,
                     stop, err);
}

int bert_embed_texts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                     const char *const *texts, const size_t *lens, int n, int max_length,
                     int batch_size, float *emb, int *truncated, char *err)
{
    return run_texts(m, p, ws, texts, lens, n, max_length, batch_size, 1, emb, truncated,
                     NULL, err);
}

int bert_embed_texts_stoppable(const bert_model *m, const bert_params *p, bert_workspace *ws,
                               const char *const *texts, const size_t *lens, int n,
                               int max_length, int batch_size, float *emb, int *truncated,
                               const bert_stop *stop, char *err)
{
    return run_texts(m, p, ws, texts, lens, n, max_length, batch_size, 1, emb, truncated,
                     stop, err);
}

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
 *
 * Long texts in windows (bert_text_opts.windows > 1): a text longer than
 * max_length becomes several sequences, [CLS] + a window of its tokens +
 * [SEP], each window max_length - 2 tokens and starting 5/6 of one after the
 * last (overlapping by a sixth), as many as it takes up to the limit; the
 * sequences are batched like texts, and a text's probabilities are the
 * softmax of the mean of its windows' logits. Tokenizing stops once the
 * windows are full, so a text of any size costs at most that many
 * sequences.
 *
 * A model with a wide part (wide.h) adds its logits, from the whole text,
 * to each text's (mean) encoder logits before the softmax.
 */
#define _GNU_SOURCE /* qsort_r */
#include "encoder/bert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "encoder/lanes.h"

typedef struct encoded {
    int *ids;         /* all sequences back to back */
    size_t used, cap; /* ints of ids */
    size_t *start;    /* (n_seq) offset of sequence i in ids */
    int *len;         /* (n_seq) token count including [CLS] and [SEP] */
    int *order;       /* (n_seq) indices sorted by len */
    int *owner;       /* (n_seq) the text sequence i is (a window of) */
    int n_seq, seq_cap;
} encoded;

static void encoded_free(encoded *e)
{
    free(e->ids);
    free(e->start);
    free(e->len);
    free(e->order);
    free(e->owner);
}

/* Room for one more sequence of up to max_len ids. */
static int encoded_reserve(encoded *e, int max_len)
{
    if (e->cap - e->used < (size_t)max_len) {
        size_t cap = e->cap * 2 + (size_t)max_len;
        int *g = realloc(e->ids, cap * sizeof *g);
        if (!g) return SM_ERR_NOMEM;
        e->ids = g;
        e->cap = cap;
    }
    if (e->n_seq == e->seq_cap) {
        int cap = e->seq_cap * 2 + 16;
        size_t *st = realloc(e->start, (size_t)cap * sizeof *st);
        if (st) e->start = st;
        int *ln = realloc(e->len, (size_t)cap * sizeof *ln);
        if (ln) e->len = ln;
        int *od = realloc(e->order, (size_t)cap * sizeof *od);
        if (od) e->order = od;
        int *ow = realloc(e->owner, (size_t)cap * sizeof *ow);
        if (ow) e->owner = ow;
        if (!st || !ln || !od || !ow) return SM_ERR_NOMEM;
        e->seq_cap = cap;
    }
    return SM_OK;
}

/* Appends the sequence ids[0..count) of text `owner`. */
static void encoded_add(encoded *e, const int *ids, int count, int owner)
{
    memcpy(e->ids + e->used, ids, (size_t)count * sizeof *ids);
    e->start[e->n_seq] = e->used;
    e->len[e->n_seq] = count;
    e->order[e->n_seq] = e->n_seq;
    e->owner[e->n_seq] = owner;
    e->n_seq++;
    e->used += (size_t)count;
}

/* Orders sequence indices by token count; ties keep input order. */
static int by_length_r(const void *a, const void *b, void *lens)
{
    int ia = *(const int *)a, ib = *(const int *)b;
    const int *len = lens;
    int d = len[ia] - len[ib];
    return d ? d : ia - ib;
}

/* Tokenizes every text into e: one sequence a text, or with windows > 1
 * a text's windows (the top of this file). scratch holds the tokens of one
 * text with windows. */
static int encode_all(const tokenizer *tok, const char *const *texts, const size_t *lens, int n,
                      int max_length, int windows, encoded *e, int *truncated,
                      const bert_text_opts *o, char *err)
{
    int L = max_length - 2, S = L * BERT_WINDOW_STEP_NUM / BERT_WINDOW_STEP_DEN;
    if (S < 1) S = 1;
    int all = windows > 1 ? L + (windows - 1) * S + 2 : max_length;
    int *tmp = windows > 1 ? malloc((size_t)all * sizeof *tmp) : NULL;
    int *seq = windows > 1 ? malloc((size_t)max_length * sizeof *seq) : NULL;
    int rc = SM_OK;
    if (windows > 1 && (!tmp || !seq)) goto nomem;
    for (int i = 0; i < n; i++) {
        int count, cut;
        const char *text = texts[i] ? texts[i] : "";
        if (o && o->stop && o->stop(o->user)) {
            rc = sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
            goto end;
        }
        if (encoded_reserve(e, all) != SM_OK) goto nomem;
        int *dst = windows > 1 ? tmp : e->ids + e->used;
        rc = tokenizer_encode_stoppable(tok, text, texts[i] ? lens[i] : 0, all, dst, &count, &cut,
                                        o ? o->stop : NULL, o ? o->user : NULL, err);
        if (rc) goto end;
        if (windows <= 1 || count <= max_length) {
            if (windows > 1) memcpy(e->ids + e->used, tmp, (size_t)count * sizeof *tmp);
            encoded_add(e, e->ids + e->used, count, i);
            if (truncated) truncated[i] = cut;
            continue;
        }
        /* [CLS] t_0 .. t_{k-1} [SEP] in windows of L tokens, S apart, the
         * last one ending at the end */
        int k = count - 2;
        for (int w0 = 0;; w0 += S) {
            int w1 = w0 + L < k ? w0 + L : k;
            seq[0] = tmp[0];
            memcpy(seq + 1, tmp + 1 + w0, (size_t)(w1 - w0) * sizeof *seq);
            seq[w1 - w0 + 1] = tmp[count - 1];
            if (encoded_reserve(e, max_length) != SM_OK) goto nomem;
            encoded_add(e, seq, w1 - w0 + 2, i);
            if (w1 == k) break;
        }
        if (truncated) truncated[i] = 1; /* longer than one window */
    }
    qsort_r(e->order, (size_t)e->n_seq, sizeof *e->order, by_length_r, e->len);
    goto end;
nomem:
    rc = sm_error(err, SM_ERR_NOMEM, "out of memory tokenizing %d texts", n);
end:
    free(tmp);
    free(seq);
    return rc;
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
        /* the sequence's logits; run_texts averages and softmaxes */
        memcpy(out + (size_t)batch[b] * K, scratch + (size_t)b * K, (size_t)K * sizeof *out);
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

/* probs(n,K) = the mean logits of each text's sequences. */
static int average_windows(const encoded *e, const float *logits, int n, int K, float *probs,
                           char *err)
{
    if (e->n_seq == n) { /* one sequence a text */
        for (int q = 0; q < n; q++)
            memcpy(probs + (size_t)e->owner[q] * K, logits + (size_t)q * K,
                   (size_t)K * sizeof *probs);
    } else {
        double *sum = calloc((size_t)n * K, sizeof *sum);
        int *count = calloc((size_t)n, sizeof *count);
        if (!sum || !count) {
            free(sum);
            free(count);
            return sm_error(err, SM_ERR_NOMEM, "out of memory averaging windows");
        }
        for (int q = 0; q < e->n_seq; q++) {
            int i = e->owner[q];
            count[i]++;
            for (int k = 0; k < K; k++) sum[(size_t)i * K + k] += logits[(size_t)q * K + k];
        }
        for (int i = 0; i < n; i++)
            for (int k = 0; k < K; k++)
                probs[(size_t)i * K + k] = (float)(sum[(size_t)i * K + k] / count[i]);
        free(sum);
        free(count);
    }
    return SM_OK;
}

/* bert_classify_texts (embed 0: out is probs) and bert_embed_texts (embed
 * 1: out is emb). */
static int run_texts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                     const char *const *texts, const size_t *lens, int n, int max_length,
                     int batch_size, int embed, float *out, int *truncated, const bert_text_opts *o,
                     char *err)
{
    encoded e = {0};
    int *ids = NULL, *lengths = NULL;
    float *scratch = NULL, *logits = NULL;
    bert_workspace **lane_ws = &ws;
    int rc, K = m->cfg.num_labels;
    int limit = bert_max_length(&m->cfg);
    int windows = embed || !o ? 0 : o->windows;

    if (n <= 0) return SM_OK;
    if (max_length <= 0 || max_length > limit) max_length = limit;
    if (max_length < 2)
        return sm_error(err, SM_ERR_INVALID, "max_length %d: must be at least 2", max_length);
    if (batch_size < 1)
        return sm_error(err, SM_ERR_INVALID, "batch_size %d: must be at least 1", batch_size);
    if (windows < 0 || windows > 1024)
        return sm_error(err, SM_ERR_INVALID, "windows %d: must be 0..1024", windows);

    if ((rc = encode_all(m->tok, texts, lens, n, max_length, windows, &e, truncated, o, err)))
        goto end;
    int N = e.n_seq; /* sequences: n, or more with windows */
    int n_batches = (N + batch_size - 1) / batch_size;
    int lanes = lane_count(ws, n_batches);
    if (lanes > 1 && bert_workspace_lanes(ws, &m->cfg, lanes, &lane_ws, err) != SM_OK) {
        lanes = 1; /* no memory for lanes: run the batches one by one */
        lane_ws = &ws;
    }
    size_t per_lane = (size_t)batch_size * max_length;
    /* per lane: logits(batch, K), or the hidden state (batch, T, C) */
    size_t per_scratch = embed ? per_lane * (size_t)m->cfg.hidden_size : (size_t)batch_size * K;
    ids = malloc((size_t)lanes * per_lane * sizeof *ids);
    lengths = malloc((size_t)lanes * batch_size * sizeof *lengths);
    scratch = malloc((size_t)lanes * per_scratch * sizeof *scratch);
    /* each sequence's logits, averaged per text at the end */
    logits = embed ? NULL : malloc((size_t)N * K * sizeof *logits);
    if (!ids || !lengths || !scratch || (!embed && !logits)) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory for a batch of %d", batch_size);
        goto end;
    }
    float *dst = embed ? out : logits;
    /* Batches are independent: with lanes, each thread takes the next one
     * and runs it start to finish on its own lane. The first error wins.
     * One lane runs the batches in order and stops at the first error. */
    rc = SM_OK;
    if (lanes == 1) {
        for (int bi = 0; bi < n_batches && !rc; bi++) {
            if (bi && o && o->stop && o->stop(o->user)) {
                rc = sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
                break;
            }
            int first = bi * batch_size;
            int B = N - first < batch_size ? N - first : batch_size;
            rc = run_batch(m, p, lane_ws[0], &e, first, B, embed, ids, lengths, scratch, dst, err);
        }
    } else {
        lanes_job j = {m,        p,           lane_ws, &e,      N,       batch_size, embed,
                       per_lane, per_scratch, ids,     lengths, scratch, dst};
        rc = lanes_for_each(lanes, n_batches, lane_batch, &j, err);
    }
    if (!rc && !embed) rc = average_windows(&e, logits, n, K, out, err);
    if (!rc && !embed && m->wide)
        rc = wide_add_logits_texts(m->wide, texts, lens, n, out, o ? o->stop : NULL,
                                   o ? o->user : NULL, err);
    if (!rc && !embed)
        for (int i = 0; i < n; i++) softmax(out + (size_t)i * K, K);
end:
    free(logits);
    free(scratch);
    free(lengths);
    free(ids);
    encoded_free(&e);
    return rc;
}

int bert_classify_texts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                        const char *const *texts, const size_t *lens, int n, int max_length,
                        int batch_size, float *probs, int *truncated, char *err)
{
    return run_texts(m, p, ws, texts, lens, n, max_length, batch_size, 0, probs, truncated, NULL,
                     err);
}

int bert_classify_texts_opts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                             const char *const *texts, const size_t *lens, int n, int max_length,
                             int batch_size, float *probs, int *truncated, const bert_text_opts *o,
                             char *err)
{
    return run_texts(m, p, ws, texts, lens, n, max_length, batch_size, 0, probs, truncated, o, err);
}

int bert_embed_texts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                     const char *const *texts, const size_t *lens, int n, int max_length,
                     int batch_size, float *emb, int *truncated, char *err)
{
    return run_texts(m, p, ws, texts, lens, n, max_length, batch_size, 1, emb, truncated, NULL,
                     err);
}

int bert_embed_texts_opts(const bert_model *m, const bert_params *p, bert_workspace *ws,
                          const char *const *texts, const size_t *lens, int n, int max_length,
                          int batch_size, float *emb, int *truncated, const bert_text_opts *o,
                          char *err)
{
    return run_texts(m, p, ws, texts, lens, n, max_length, batch_size, 1, emb, truncated, o, err);
}

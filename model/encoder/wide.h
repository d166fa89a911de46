/* wide.h: a model's wide part, a linear layer over a text's hashed
 * character n-grams whose logits are added to the encoder's (wide & deep).
 *
 * For a text, with counts c_b of its n-grams per bucket b (ngram_hash.h):
 *
 *   v_b = tf(c_b) * idf_b       tf(c) = 1 + ln c ("sublinear") or c ("raw");
 *                               idf_b = wide.idf[b], or 1 without idf
 *   x   = v / ||v||_2           (with "norm": "l2"; x = 0 for a text with no
 *                               n-gram, so its logits are the bias)
 *   z_k = wide.bias[k] + sum_b wide.weight[k, b] x_b
 *
 * which is scikit-learn's HashingVectorizer(analyzer="char",
 * alternate_sign=False, norm=None) + TfidfTransformer(sublinear_tf=True,
 * smooth_idf=True) + a linear model's decision function, in double. The
 * wide part reads the whole text, however long (max_length cuts only the
 * encoder's tokens). The model's logits are the encoder's plus z: the
 * shares of the two are in their weights (a fitted mix scales both).
 *
 * Tensors in model.safetensors: wide.weight (K, buckets), wide.bias (K),
 * wide.idf (buckets, with idf), loaded and saved by bert_load.c. A
 * wide_part owns its three arrays; it lives in host memory on every
 * backend (a text's few hundred n-grams are cheaper to sum here than to
 * ship).
 */
#ifndef SM_WIDE_H
#define SM_WIDE_H

#include <stddef.h>

#include "format/wide_config.h"
#include "tokenize/ngram_hash.h"

typedef struct wide_part {
    sm_wide_config cfg;
    int K;         /* labels */
    float *weight; /* (K, buckets) */
    float *bias;   /* (K) */
    float *idf;    /* (buckets), NULL without idf */
} wide_part;

/* A wide part of cfg's shape for K labels: zero weights and bias, idf 1. */
int wide_part_create(const sm_wide_config *cfg, int K, wide_part **out, char *err);
int wide_part_clone(const wide_part *src, wide_part **out, char *err);
void wide_part_free(wide_part *w);
/* Scalar parameters: K x buckets + K (+ buckets with idf). */
size_t wide_part_num_params(const wide_part *w);

/* One text's feature vector x: the n-gram counts of nc (ngram_count_text
 * of that text) weighted and normalised in place: idx[0..n) the buckets
 * (nc->touched, first-seen order), val[0..n) their values. val must hold
 * nc->n_touched doubles. Returns n. */
int wide_features(const wide_part *w, const ngram_counts *nc, double *val);

/* logits[0..K) += z for text[0..len). nc is a counter of w's buckets;
 * val holds at most min(buckets, len x n-gram orders) doubles, what the
 * text can have. stop as ngram_count_text. */
int wide_add_logits(const wide_part *w, ngram_counts *nc, double *val, const char *text, size_t len,
                    float *logits, int (*stop)(void *user), void *user, char *err);

/* The same for n texts: logits(n, K) += z of each (texts[i] NULL: the
 * bias). Allocates its own counters. */
int wide_add_logits_texts(const wide_part *w, const char *const *texts, const size_t *lens, int n,
                          float *logits, int (*stop)(void *user), void *user, char *err);

/* The wide part's side of an explanation, for label k of text[0..len):
 * logits (K) gets the wide logits z (bias included), and each n-gram
 * occurrence's share of z_k - bias_k is given to span(arg, from, to,
 * share), [from, to) its bytes in text: bucket b's exact term
 * weight[k, b] x_b split evenly among the occurrences of b (an n-gram that
 * occurs twice, or two that share a bucket). The shares sum to
 * z_k - bias_k. stop as ngram_count_text. */
typedef void (*wide_span_fn)(void *arg, size_t from, size_t to, double share);
int wide_explain(const wide_part *w, const char *text, size_t len, int k, float *logits,
                 wide_span_fn span, void *arg, int (*stop)(void *user), void *user, char *err);

#endif

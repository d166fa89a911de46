/* wide_config.h: the settings of a model's wide part, a hashed character
 * n-gram linear layer whose logits are added to the encoder's (wide &
 * deep), as config.json carries them.
 *
 * A model with a wide part has, in its config.json, under our own key
 * (transformers keeps unknown keys and ignores them):
 *
 *   "wide": {"features": "char_ngrams", "ngram_range": [1, 3],
 *            "buckets": 262144, "hash": "murmur3_32", "lowercase": "ascii",
 *            "tf": "sublinear", "idf": true, "norm": "l2"}
 *
 * and in model.safetensors the tensors wide.weight (K, buckets), wide.bias
 * (K) and, with "idf": true, wide.idf (buckets). What each setting does
 * (model/tokenize/ngram_hash.h, model/encoder/wide.h):
 *
 *   features     "char_ngrams": every run of ngram_range[0]..[1] code
 *                points of the text, after runs of two or more white-space
 *                characters become one space (scikit-learn's "char" analyzer)
 *   hash         "murmur3_32": MurmurHash3 x86_32, seed 0, of the n-gram's
 *                UTF-8 bytes; bucket |h| mod buckets (h as a signed 32-bit
 *                integer), as scikit-learn's HashingVectorizer
 *                (alternate_sign=False)
 *   buckets      1 .. 2^24
 *   lowercase    "ascii" (A-Z folded before hashing) or "none"
 *   tf           "sublinear" (a bucket's count c becomes 1 + ln c) or "raw"
 *   idf          multiply by wide.idf (TfidfTransformer's smooth idf)
 *   norm         "l2" (the vector divided by its Euclidean norm) or "none"
 *
 * Every key is required except lowercase (default "ascii"); an unknown value
 * is an error naming the key. Owns nothing: sm_wide_config is a plain value.
 */
#ifndef SM_WIDE_CONFIG_H
#define SM_WIDE_CONFIG_H

#include "format/json_in.h"

#define SM_WIDE_MAX_BUCKETS (1 << 24)
#define SM_WIDE_MAX_NGRAM 8

typedef struct sm_wide_config {
    int set;       /* 1: the model has a wide part */
    int ngram_min; /* 1 <= ngram_min <= ngram_max <= SM_WIDE_MAX_NGRAM */
    int ngram_max;
    int buckets;      /* 1 .. SM_WIDE_MAX_BUCKETS */
    int lowercase;    /* 1: ASCII A-Z folded to a-z */
    int sublinear_tf; /* 1: 1 + ln(count) */
    int idf;          /* 1: weighted by the wide.idf tensor */
    int l2_norm;      /* 1: unit Euclidean norm */
} sm_wide_config;

/* No wide part (set 0). */
void sm_wide_config_none(sm_wide_config *c);
/* The settings train() uses unless told otherwise: 1-3-grams, 2^18
 * buckets, ASCII lower case, sublinear tf, idf, l2 (set 1). */
void sm_wide_config_default(sm_wide_config *c);
/* config.json's "wide" value (v not NULL) into out, set 1. */
int sm_wide_config_from_json(const json_in_value *v, sm_wide_config *out, char *err);
/* The "wide" value as JSON text (malloc'd, NUL-terminated), what
 * sm_wide_config_from_json reads back. */
int sm_wide_config_to_json(const sm_wide_config *c, char **out, char *err);
/* SM_OK when c's values are in range (what from_json checks), else
 * SM_ERR_INVALID naming the value. */
int sm_wide_config_check(const sm_wide_config *c, char *err);

#endif

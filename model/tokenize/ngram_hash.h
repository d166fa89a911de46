/* ngram_hash.h: a text's hashed character n-grams, the wide part's
 * features (wide_config.h says which settings mean what).
 *
 * The text is read as code points the way Python's
 * bytes.decode("utf-8", errors="replace") reads it (utf8.h: invalid bytes
 * become U+FFFD), ASCII A-Z folded when lowercase is set, and every run of
 * two or more white-space characters (Python's str.isspace: the ASCII
 * ones, U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
 * U+2029, U+202F, U+205F, U+3000) replaced by one space, as scikit-learn's
 * "char" analyzer does. Each run of ngram_min..ngram_max consecutive code
 * points is one n-gram; its UTF-8 bytes are hashed with MurmurHash3 x86_32
 * (seed 0) and it counts once in bucket |h| mod buckets (h signed; h =
 * INT32_MIN goes to (INT32_MAX - (buckets - 1)) mod buckets, as
 * scikit-learn's _hashing_fast does). A text of N code points has at most
 * (ngram_max - ngram_min + 1) N n-grams: time linear in the text, memory
 * linear in its distinct buckets.
 *
 * ngram_counts owns its arrays; one is reused text after text (each
 * ngram_count_text starts from zero), not shared between threads.
 */
#ifndef SM_NGRAM_HASH_H
#define SM_NGRAM_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "format/wide_config.h"

/* MurmurHash3 x86_32 of key[0..len) with seed, as a signed integer. */
int32_t ngram_murmur3_32(const void *key, size_t len, uint32_t seed);
/* The bucket of hash h among n buckets (the rule above). */
int ngram_bucket(int32_t h, int n);

typedef struct ngram_counts {
    int buckets;
    int *touched;    /* (n_touched) the buckets with a count, first-seen order */
    uint32_t *count; /* (n_touched) their counts */
    int n_touched;
    /* private: an open-addressing map bucket -> index into touched, sized
     * by the text (at most twice its distinct buckets), not by buckets */
    int *slot; /* (cap) index + 1, 0 empty */
    size_t cap, list_cap;
} ngram_counts;

/* Counters for cfg->buckets buckets (the map grows with the texts). */
int ngram_counts_create(const sm_wide_config *cfg, ngram_counts **out, char *err);
void ngram_counts_free(ngram_counts *nc);

/* Calls each(arg, bucket, from, to) for every n-gram of text[0..len) in
 * order of its last code point: its bucket and the bytes [from, to) of the
 * text it was read from (a folded white-space run counts whole). A non-zero
 * return ends the walk with SM_ERR_NOMEM. stop as below. */
typedef int (*ngram_fn)(void *arg, int bucket, size_t from, size_t to);
int ngram_walk(const sm_wide_config *cfg, const char *text, size_t len, ngram_fn each, void *arg,
               int (*stop)(void *user), void *user, char *err);
/* The index in nc->touched of bucket, or -1 when the last text had none. */
int ngram_counts_find(const ngram_counts *nc, int bucket);

/* Counts the n-grams of text[0..len) into nc (cleared first). stop, when
 * not NULL, is asked every 64 KB of text; non-zero ends the count with
 * SM_ERR_INTERRUPTED. */
int ngram_count_text(const sm_wide_config *cfg, const char *text, size_t len, ngram_counts *nc,
                     int (*stop)(void *user), void *user, char *err);

#endif

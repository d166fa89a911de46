/* soft_labels.h: a teacher's probabilities, keyed by a hash of the
 * normalised text, so that the student stage of the built-in model's recipe
 * runs without the teacher.
 *
 * File (little-endian): "SMSOFT1\n", u32 n, u32 0, then n u64 keys in
 * strictly increasing order, then n u16 values round(65535 * P(positive)).
 * A key is review_hash(review_normalize(text)) (reviews.h). 10 bytes a text.
 */
#ifndef SM_SOFT_LABELS_H
#define SM_SOFT_LABELS_H

#include <stdint.h>

typedef struct soft_labels {
    uint64_t *key; /* (n) sorted */
    uint16_t *p;   /* (n) */
    int n;
} soft_labels;

/* The key of a text (normalised first); 0 when out of memory. */
uint64_t soft_labels_key(const char *text);
/* Reads `p<TAB>text` lines (no header; p in [0, 1]) and writes the file;
 * a text seen twice keeps its first value. *n_out: texts written. */
int soft_labels_write_tsv(const char *tsv, const char *out, int *n_out, char *err);
/* Loads and checks a file (size, order, count). Owns s's arrays. */
int soft_labels_load(const char *path, soft_labels *s, char *err);
/* 1 and *p = P(positive) when text's key is in s, else 0. */
int soft_labels_find(const soft_labels *s, const char *text, float *p);
void soft_labels_free(soft_labels *s);

#endif

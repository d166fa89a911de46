/* token_dataset.h: rows of token ids appended one by one, what the
 * fine-tuning set (train_dataset.h, a label per row) and the pretraining set
 * (pretrain.h, no labels) are made of, the length order the training
 * loops sort rows by and the length a batch of rows is padded to.
 *
 * Ids are stored back to back as 16-bit integers when the vocabulary has at
 * most 65536 entries, else 32-bit; each row has a start, a length and, in a
 * labelled set, a label. Internal to model/.
 */
#ifndef SM_TOKEN_DATASET_H
#define SM_TOKEN_DATASET_H

#include <stddef.h>

typedef struct token_dataset {
    int vocab_size;
    unsigned char wide;     /* ids stored as int32 (else uint16) */
    unsigned char labelled; /* a label per row */
    void *ids;              /* all rows back to back */
    size_t n_ids, cap_ids;
    size_t *start; /* (rows) */
    int *len;      /* (rows) */
    int *label;    /* (rows) in a labelled set, else NULL */
    int rows, cap_rows;
} token_dataset;

/* Allocates a zeroed object of `size` bytes, a struct whose first member
 * is a token_dataset, and starts an empty set in it (vocab_size >= 1). */
int token_dataset_create(size_t size, int vocab_size, int labelled, void **out, char *err);
/* Frees what the set holds (not the object around it). */
void token_dataset_release(token_dataset *ds);
/* Appends ids[0..n) as the model sees them ([CLS] ... [SEP], n in
 * 2..65536, each in [0, vocab_size)) and, in a labelled set, the label
 * index (>= 0); an unlabelled set ignores label. */
int token_dataset_add(token_dataset *ds, const int *ids, int n, int label, char *err);
/* Copies row i's ids, cut to max_len by keeping the first max_len - 1 and
 * the last ([SEP]). Returns the count. */
int token_dataset_row_ids(const token_dataset *ds, int i, int *out, int max_len);
/* The padded length of a batch of rows idx[0..B): its longest row cut to
 * max_len, and at least 2. */
int token_dataset_batch_len(const token_dataset *ds, const int *idx, int B, int max_len);
/* Sorts row indices a[0..n) by length, ties by index (deterministic). */
void token_dataset_sort_by_len(const token_dataset *ds, int *a, int n);

#endif

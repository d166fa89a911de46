/* token_dataset.c: the token-id rows behind train_dataset and
 * pretrain_dataset: appending (16- or 32-bit ids, labels when kept),
 * reading a row cut to a length, and sorting rows by length. Owns the id,
 * start, length and label arrays, grown by doubling.
 */
#define _GNU_SOURCE /* qsort_r */
#include "train/token_dataset.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "format/config.h"

int token_dataset_create(size_t size, int vocab_size, int labelled, void **out, char *err)
{
    *out = NULL;
    if (vocab_size < 1)
        return sm_error(err, SM_ERR_INVALID, "dataset: vocabulary size %d", vocab_size);
    token_dataset *ds = calloc(1, size);
    if (!ds) return sm_error(err, SM_ERR_NOMEM, "out of memory creating a dataset");
    ds->vocab_size = vocab_size;
    ds->wide = vocab_size > 65536;
    ds->labelled = labelled != 0;
    *out = ds;
    return SM_OK;
}

void token_dataset_release(token_dataset *ds)
{
    free(ds->ids);
    free(ds->start);
    free(ds->len);
    free(ds->label);
}

int token_dataset_add(token_dataset *ds, const int *ids, int n, int label, char *err)
{
    if (n < 2 || n > 65536)
        return sm_error(err, SM_ERR_INVALID, "dataset: a row of %d ids (expected 2..65536)", n);
    if (ds->labelled && (label < 0 || label >= BERT_MAX_LABELS))
        return sm_error(err, SM_ERR_INVALID, "dataset: label index %d", label);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= ds->vocab_size)
            return sm_error(err, SM_ERR_INVALID, "dataset: token id %d outside the vocabulary (%d)",
                            ids[i], ds->vocab_size);
    size_t esz = ds->wide ? 4 : 2;
    if (ds->n_ids + (size_t)n > ds->cap_ids) {
        size_t cap = ds->cap_ids ? ds->cap_ids * 2 : 4096;
        while (cap < ds->n_ids + (size_t)n) cap *= 2;
        void *p = realloc(ds->ids, cap * esz);
        if (!p) goto nomem;
        ds->ids = p;
        ds->cap_ids = cap;
    }
    if (ds->rows == ds->cap_rows) {
        int cap = ds->cap_rows ? ds->cap_rows * 2 : 256;
        if (cap < ds->cap_rows) goto nomem;
        size_t *s = realloc(ds->start, (size_t)cap * sizeof *s);
        if (!s) goto nomem;
        ds->start = s;
        int *l = realloc(ds->len, (size_t)cap * sizeof *l);
        if (!l) goto nomem;
        ds->len = l;
        if (ds->labelled) {
            int *lb = realloc(ds->label, (size_t)cap * sizeof *lb);
            if (!lb) goto nomem;
            ds->label = lb;
        }
        ds->cap_rows = cap;
    }
    if (ds->wide) {
        memcpy((int32_t *)ds->ids + ds->n_ids, ids, (size_t)n * sizeof(int32_t));
    } else {
        uint16_t *dst = (uint16_t *)ds->ids + ds->n_ids;
        for (int i = 0; i < n; i++) dst[i] = (uint16_t)ids[i];
    }
    ds->start[ds->rows] = ds->n_ids;
    ds->len[ds->rows] = n;
    if (ds->labelled) ds->label[ds->rows] = label;
    ds->rows++;
    ds->n_ids += (size_t)n;
    return SM_OK;
nomem:
    return sm_error(err, SM_ERR_NOMEM, "out of memory adding row %d to the dataset", ds->rows + 1);
}

int token_dataset_row_ids(const token_dataset *ds, int i, int *out, int max_len)
{
    int n = ds->len[i];
    size_t s = ds->start[i];
    int keep = n <= max_len ? n : max_len - 1;
    for (int k = 0; k < keep; k++)
        out[k] = ds->wide ? ((const int32_t *)ds->ids)[s + k] : ((const uint16_t *)ds->ids)[s + k];
    if (n > max_len) {
        size_t last = s + (size_t)n - 1;
        out[keep++] = ds->wide ? ((const int32_t *)ds->ids)[last]
                               : ((const uint16_t *)ds->ids)[last];
    }
    return keep;
}

int token_dataset_batch_len(const token_dataset *ds, const int *idx, int B, int max_len)
{
    int T = 2;
    for (int b = 0; b < B; b++) {
        int n = ds->len[idx[b]] < max_len ? ds->len[idx[b]] : max_len;
        T = n > T ? n : T;
    }
    return T;
}

static int by_len_r(const void *a, const void *b, void *ctx)
{
    const token_dataset *ds = ctx;
    int ia = *(const int *)a, ib = *(const int *)b;
    int d = ds->len[ia] - ds->len[ib];
    return d ? d : ia - ib;
}

void token_dataset_sort_by_len(const token_dataset *ds, int *a, int n)
{
    qsort_r(a, (size_t)n, sizeof *a, by_len_r, (void *)ds);
}

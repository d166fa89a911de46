/* train_dataset.c: the labelled dataset fine-tuning trains on
 * (train_dataset.h): a token_dataset with a label per row and, for
 * distillation, soft targets per row. Owns its rows' memory.
 */
#include "train/train_dataset.h"

#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "train/bert_train.h"
#include "train/token_dataset.h"

struct train_dataset {
    token_dataset t; /* labelled; a row without a label holds its soft argmax */
    /* soft targets (train_dataset_add_soft): all rows have them or none */
    int soft_k;    /* labels per row, 0 = no soft targets */
    float *soft;   /* (rows, soft_k) */
    uint8_t *hard; /* (rows) 1: the row has a hard label too */
    int soft_cap;  /* rows allocated in soft and hard */
};

int train_dataset_create(int vocab_size, train_dataset **out, char *err)
{
    void *ds;
    int rc = token_dataset_create(sizeof **out, vocab_size, 1, &ds, err);
    *out = ds;
    return rc;
}

void train_dataset_free(train_dataset *ds)
{
    if (!ds) return;
    token_dataset_release(&ds->t);
    free(ds->soft);
    free(ds->hard);
    free(ds);
}

int train_dataset_add(train_dataset *ds, const int *ids, int n, int label, char *err)
{
    if (ds->soft_k)
        return sm_error(err, SM_ERR_INVALID,
                        "dataset: every row needs soft targets once one row has them");
    return token_dataset_add(&ds->t, ids, n, label, err);
}

int train_dataset_add_soft(train_dataset *ds, const int *ids, int n, int label, const float *probs,
                           int k, char *err)
{
    if (ds->t.rows && !ds->soft_k)
        return sm_error(err, SM_ERR_INVALID,
                        "dataset: soft targets on row %d, but the rows before have none",
                        ds->t.rows + 1);
    if (k < 2 || k > BERT_MAX_LABELS || (ds->soft_k && k != ds->soft_k))
        return sm_error(err, SM_ERR_INVALID, "dataset: %d soft targets per row (expected %d)", k,
                        ds->soft_k ? ds->soft_k : 2);
    int rc = bert_targets_check_row(probs, k, "dataset", err), arg = 0;
    if (rc) return rc;
    for (int j = 1; j < k; j++)
        if (probs[j] > probs[arg]) arg = j;
    if (label < -1 || label >= k)
        return sm_error(err, SM_ERR_INVALID, "dataset: label index %d (expected -1..%d)", label,
                        k - 1);
    if (ds->t.rows == ds->soft_cap) {
        int cap = ds->soft_cap ? 2 * ds->soft_cap : 1024;
        float *soft = realloc(ds->soft, (size_t)cap * k * sizeof *soft);
        if (soft) ds->soft = soft;
        uint8_t *hard = soft ? realloc(ds->hard, (size_t)cap) : NULL;
        if (!hard) return sm_error(err, SM_ERR_NOMEM, "out of memory adding a training row");
        ds->hard = hard;
        ds->soft_cap = cap;
    }
    if ((rc = token_dataset_add(&ds->t, ids, n, label >= 0 ? label : arg, err))) return rc;
    ds->soft_k = k;
    memcpy(ds->soft + (size_t)(ds->t.rows - 1) * k, probs, (size_t)k * sizeof *probs);
    ds->hard[ds->t.rows - 1] = label >= 0;
    return SM_OK;
}

int train_dataset_rows(const train_dataset *ds)
{
    return ds->t.rows;
}

size_t train_dataset_bytes(const train_dataset *ds)
{
    const token_dataset *t = &ds->t;
    return t->cap_ids * (t->wide ? 4 : 2) +
           (size_t)t->cap_rows * (sizeof *t->start + sizeof *t->len + sizeof *t->label) +
           (size_t)ds->soft_cap * (ds->soft_k * sizeof *ds->soft + 1) + sizeof *ds;
}

double train_dataset_bytes_per_row(const train_dataset *ds)
{
    /* What a row costs once the buffers are full: its ids plus the index. */
    const token_dataset *t = &ds->t;
    if (!t->rows) return 0;
    return (double)t->n_ids * (t->wide ? 4 : 2) / t->rows +
           (double)(sizeof *t->start + sizeof *t->len + sizeof *t->label) +
           (ds->soft_k ? ds->soft_k * sizeof *ds->soft + 1.0 : 0.0);
}

int train_dataset_row(const train_dataset *ds, int i, int *ids, int cap, int *n, int *label)
{
    if (i < 0 || i >= ds->t.rows) return SM_ERR_INVALID;
    if (cap < ds->t.len[i]) return SM_ERR_INVALID;
    *n = token_dataset_row_ids(&ds->t, i, ids, cap);
    *label = ds->t.label[i];
    return SM_OK;
}

const token_dataset *train_dataset_tokens(const train_dataset *ds)
{
    return &ds->t;
}

const float *train_dataset_soft(const train_dataset *ds, int *k, const uint8_t **hard)
{
    *k = ds->soft_k;
    *hard = ds->soft_k ? ds->hard : NULL;
    return ds->soft_k ? ds->soft : NULL;
}

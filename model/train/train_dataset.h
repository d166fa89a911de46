/* train_dataset.h: the labelled examples fine-tuning trains on
 * (train_dataset.c), collected row by row as they arrive: token ids from
 * tokenizer_encode and a label index (the text is not kept), or, for
 * knowledge distillation, soft targets too. trainer_run (trainer.h) reads
 * them.
 */
#ifndef SM_TRAIN_DATASET_H
#define SM_TRAIN_DATASET_H

#include <stddef.h>
#include <stdint.h>

/* Token ids and labels, appended row by row. Ids are stored as 16-bit
 * integers when the vocabulary has at most 65536 entries, else 32-bit. */
typedef struct train_dataset train_dataset;

int train_dataset_create(int vocab_size, train_dataset **out, char *err);
void train_dataset_free(train_dataset *ds);
/* Appends one example: ids[0..n) as the model sees them ([CLS] ... [SEP],
 * n >= 2, each in [0, vocab_size)) and label index >= 0. */
int train_dataset_add(train_dataset *ds, const int *ids, int n, int label, char *err);
/* Appends one example with soft targets probs[0..k) (a distribution over
 * the k labels, e.g. a teacher's probabilities) for knowledge distillation,
 * and label index in [0, k) or -1 (none: the row has the soft loss only).
 * A dataset's rows all have soft targets or none. */
int train_dataset_add_soft(train_dataset *ds, const int *ids, int n, int label, const float *probs,
                           int k, char *err);
int train_dataset_rows(const train_dataset *ds);
/* Memory the dataset holds, and the average per row (bytes). */
size_t train_dataset_bytes(const train_dataset *ds);
double train_dataset_bytes_per_row(const train_dataset *ds);
/* Row i: pointer-free read access (ids copied into out, up to cap). */
int train_dataset_row(const train_dataset *ds, int i, int *ids, int cap, int *n, int *label);

/* ---- for trainer_run (internal to model/) ---- */

struct token_dataset;
/* The rows as token_dataset.h has them: ids, lengths and labels (a row
 * without a label holds its soft targets' argmax). */
const struct token_dataset *train_dataset_tokens(const train_dataset *ds);
/* The soft targets: their count per row in *k (0: none, and NULL is
 * returned), (rows, k) floats, and in *hard (rows) 1 for a row that has a
 * label too. */
const float *train_dataset_soft(const train_dataset *ds, int *k, const uint8_t **hard);

#endif

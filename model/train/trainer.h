/* trainer.h: fine-tuning (or training from scratch) on tokenized examples,
 * what the train() aggregate drives.
 *
 * A caller (1) collects rows into a train_dataset as they arrive (token ids
 * from tokenizer_encode and a label index; the text is not kept), (2) gets a
 * model whose head fits the label set (trainer_prepare_head on a loaded
 * base, or bert_model_create_scratch for "base": "none"), (3) calls
 * trainer_run, which holds out a seeded validation split, trains with AdamW
 * (warm-up + linear decay, clipping, optional gradient accumulation), keeps
 * the epoch with the best validation accuracy and writes those parameters
 * back into the model. Same seed, same rows in the same order, same thread
 * count -> the same model, bit for bit, on the CPU.
 */
#ifndef SM_TRAINER_H
#define SM_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "bert.h"
#include "loop_options.h"

/* ---- examples ----------------------------------------------------------- */

/* Token ids and labels, appended row by row. Ids are stored as 16-bit
 * integers when the vocabulary has at most 65536 entries, else 32-bit. */
typedef struct train_dataset train_dataset;

int train_dataset_create(int vocab_size, train_dataset **out, char *err);
void train_dataset_free(train_dataset *ds);
/* Appends one example: ids[0..n) as the model sees them ([CLS] ... [SEP],
 * n >= 2, each in [0, vocab_size)) and label index >= 0. */
int train_dataset_add(train_dataset *ds, const int *ids, int n, int label,
                      char *err);
/* Appends one example with soft targets probs[0..k) (a distribution over
 * the k labels, e.g. a teacher's probabilities) for knowledge distillation,
 * and label index in [0, k) or -1 (none: the row has the soft loss only).
 * A dataset's rows all have soft targets or none. */
int train_dataset_add_soft(train_dataset *ds, const int *ids, int n, int label,
                           const float *probs, int k, char *err);
int train_dataset_rows(const train_dataset *ds);
/* Memory the dataset holds, and the average per row (bytes). */
size_t train_dataset_bytes(const train_dataset *ds);
double train_dataset_bytes_per_row(const train_dataset *ds);
/* Row i: pointer-free read access (ids copied into out, up to cap). */
int train_dataset_row(const train_dataset *ds, int i, int *ids, int cap,
                      int *n, int *label);

/* ---- the model's head and from-scratch models ---------------------------- */

/* Fits m's classification head to `labels` (n names, n >= 2). When m has a
 * head with exactly this set of labels (in any order) it is kept and
 * *kept = 1; the caller then maps names with bert_config_label_index.
 * Otherwise a fresh head replaces it (weights normal(0, 0.02), seeded; bias
 * 0; labels in the order given), *kept = 0: the classifier (K, C), and for
 * a RoBERTa / XLM-RoBERTa encoder without a head also classifier.dense,
 * as transformers builds RobertaForSequenceClassification on an encoder.
 * A fresh head drops m's wide part (its rows are the old labels'). */
int trainer_prepare_head(bert_model *m, int n, const char *const *labels,
                         uint64_t seed, int *kept, char *err);

typedef struct bert_shape {
    int layers;        /* e.g. 4 */
    int hidden;        /* e.g. 256; a multiple of heads */
    int heads;         /* e.g. 4 */
    int intermediate;  /* e.g. 1024 */
    int max_length;    /* positions, e.g. 128 */
} bert_shape;

/* A randomly initialised BERT (as transformers initialises one: normal(0,
 * 0.02) weights and embeddings, zero biases, LayerNorm (1, 0)) with the given
 * shape, vocabulary (vocab.txt text; see vocab_builder.h) and labels. */
int bert_model_create_scratch(const bert_shape *shape, const char *vocab,
                              size_t vocab_len, int do_lower_case, int n_labels,
                              const char *const *labels, uint64_t seed,
                              bert_model **out, char *err);

/* ---- training ------------------------------------------------------------ */

typedef struct trainer_progress {
    loop_report loop;          /* step, loss, rate, timing (loop_options.h) */
    double valid_accuracy;     /* at an epoch's end: validation accuracy,
                                  NAN with no split */
} trainer_progress;

typedef struct trainer_options {
    /* epochs 3, lr 5e-5, valid_fraction 0.1 (0 = none: the last epoch is
     * kept), the rest loop_options_default's */
    loop_options loop;
    /* With soft targets in the dataset, the distillation loss of
     * bert_train.h: weight of the soft term (0.5) and temperature (1).
     * Validation accuracy counts a row without a label as right when the
     * model's top label is its targets' top label. */
    float distill_alpha, distill_temperature;
    /* Called with loop.user after every optimizer step and at the end of
     * every epoch; nonzero return stops training (SM_ERR_INTERRUPTED). May
     * be NULL. */
    int (*progress)(void *user, const trainer_progress *p);
} trainer_options;

void trainer_options_default(trainer_options *o);

typedef struct trainer_result {
    int epochs;               /* epochs completed */
    double *train_loss;       /* (epochs) mean training loss, malloc'd */
    double *valid_accuracy;   /* (epochs) NAN where there is no split */
    int best_epoch;           /* 1-based: the parameters the model now has */
    double best_accuracy;     /* NAN with no split */
    int n_train, n_valid;
    long steps;
    double seconds;           /* whole run, validation included */
    double examples_per_sec;  /* training examples / training time */
    size_t device_bytes;      /* memory held on the backend while training */
} trainer_result;

void trainer_result_free(trainer_result *r);

/* Trains m (which must have a head with one class per label index used in
 * ds) on backend be. On success m holds the best epoch's parameters; on any
 * error, interrupt included, m is left as it was. Labels outside
 * [0, num_labels) and datasets with fewer than 2 training rows are errors.
 * A non-finite loss stops training with SM_ERR_INVALID naming the step. */
int trainer_run(bert_model *m, backend *be, const train_dataset *ds,
                const trainer_options *opt, trainer_result *res, char *err);
/* The rows trainer_run holds out for validation from n rows under opt:
 * is_valid (n bytes) 1 for those. */
int trainer_valid_rows(int n, const trainer_options *opt, unsigned char *is_valid, char *err);

#endif

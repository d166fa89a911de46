/* trainer.h: fine-tuning (or training from scratch) on tokenized examples,
 * what the train() aggregate drives (trainer.c).
 *
 * A caller (1) collects rows into a train_dataset as they arrive (token ids
 * from tokenizer_encode and a label index; the text is not kept:
 * train_dataset.h), (2) gets a model whose head fits the label set
 * (model_init.h: trainer_prepare_head on a loaded base, or
 * bert_model_create_scratch for "base": "none"), (3) calls
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

#include "core/backend.h"
#include "encoder/bert.h"
#include "train/loop_options.h"
#include "train/model_init.h"
#include "train/train_dataset.h"

/* ---- training ------------------------------------------------------------ */

typedef struct trainer_progress {
    loop_report loop;      /* step, loss, rate, timing (loop_options.h) */
    double valid_accuracy; /* at an epoch's end: validation accuracy,
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
    int epochs;             /* epochs completed */
    double *train_loss;     /* (epochs) mean training loss, malloc'd */
    double *valid_accuracy; /* (epochs) NAN where there is no split */
    int best_epoch;         /* 1-based: the parameters the model now has */
    double best_accuracy;   /* NAN with no split */
    int n_train, n_valid;
    long steps;
    double seconds;          /* whole run, validation included */
    double examples_per_sec; /* training examples / training time */
    size_t device_bytes;     /* memory held on the backend while training */
} trainer_result;

void trainer_result_free(trainer_result *r);

/* Trains m (which must have a head with one class per label index used in
 * ds) on backend be. On success m holds the best epoch's parameters; on any
 * error, interrupt included, m is left as it was. Labels outside
 * [0, num_labels) and datasets with fewer than 2 training rows are errors.
 * A non-finite loss stops training with SM_ERR_INVALID naming the step. */
int trainer_run(bert_model *m, backend *be, const train_dataset *ds, const trainer_options *opt,
                trainer_result *res, char *err);
/* The rows trainer_run holds out for validation from n rows under opt:
 * is_valid (n bytes) 1 for those. */
int trainer_valid_rows(int n, const trainer_options *opt, unsigned char *is_valid, char *err);

#endif

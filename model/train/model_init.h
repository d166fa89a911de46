/* model_init.h: the models fine-tuning starts from (model_init.c): a loaded
 * base whose classification head is fitted to the training labels, or a
 * model made from scratch (train()'s "base": "none", the built-in model's
 * recipe).
 */
#ifndef SM_MODEL_INIT_H
#define SM_MODEL_INIT_H

#include <stddef.h>
#include <stdint.h>

#include "encoder/bert.h"

/* Fits m's classification head to `labels` (n names, n >= 2). When m has a
 * head with exactly this set of labels (in any order) it is kept and
 * *kept = 1; the caller then maps names with bert_config_label_index.
 * Otherwise a fresh head replaces it (weights normal(0, 0.02), seeded; bias
 * 0; labels in the order given), *kept = 0: the classifier (K, C), and for
 * a RoBERTa / XLM-RoBERTa encoder without a head also classifier.dense,
 * as transformers builds RobertaForSequenceClassification on an encoder.
 * A fresh head drops m's wide part (its rows are the old labels'). */
int trainer_prepare_head(bert_model *m, int n, const char *const *labels, uint64_t seed, int *kept,
                         char *err);

typedef struct bert_shape {
    int layers;       /* e.g. 4 */
    int hidden;       /* e.g. 256; a multiple of heads */
    int heads;        /* e.g. 4 */
    int intermediate; /* e.g. 1024 */
    int max_length;   /* positions, e.g. 128 */
} bert_shape;

/* A randomly initialised BERT (as transformers initialises one: normal(0,
 * 0.02) weights and embeddings, zero biases, LayerNorm (1, 0)) with the given
 * shape, vocabulary (vocab.txt text; see vocab_builder.h) and labels. */
int bert_model_create_scratch(const bert_shape *shape, const char *vocab, size_t vocab_len,
                              int do_lower_case, int n_labels, const char *const *labels,
                              uint64_t seed, bert_model **out, char *err);

#endif

/* pretrain.h: masked-language-model pretraining of the encoder on unlabeled
 * text, before fine-tuning (trainer.h).
 *
 * A driver (1) collects texts into a pretrain_dataset (token ids only),
 * (2) has a model (bert_model_create_scratch, bert_model_load_dir, or
 * bert_mlm_load_dir to continue from an MLM checkpoint with its head) and
 * an MLM head (bert_mlm_head_create for a fresh one), (3) calls
 * pretrain_run, which masks every row afresh each epoch as transformers'
 * DataCollatorForLanguageModeling does (15% of the non-special tokens; of
 * those 80% [MASK], 10% a random token, 10% unchanged), trains encoder and
 * head with AdamW (warm-up + linear decay, clipping, accumulation) on the
 * mean cross-entropy over the predicted positions, and writes the result
 * back into the model and head; (4) saves with pretrain_save_safetensors.
 * Fine-tuning then starts from that model: trainer_prepare_head gives it a
 * fresh classifier, trainer_run trains it. The pooler is not trained here
 * (MLM does not use it) and keeps its values.
 *
 * Masks are a function of (seed, epoch, row) and dropout of (seed, micro
 * step), so the same seed, rows and thread count give the same model, bit
 * for bit, on the CPU.
 */
#ifndef SM_PRETRAIN_H
#define SM_PRETRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "encoder/bert.h"
#include "train/bert_mlm.h"
#include "train/loop_options.h"

/* ---- unlabeled rows --------------------------------------------------------- */

typedef struct pretrain_dataset pretrain_dataset;

int pretrain_dataset_create(int vocab_size, pretrain_dataset **out, char *err);
void pretrain_dataset_free(pretrain_dataset *ds);
/* Appends ids[0..n) as the model sees them ([CLS] ... [SEP], n >= 2). */
int pretrain_dataset_add(pretrain_dataset *ds, const int *ids, int n, char *err);
/* Tokenizes text (cut to max_length tokens) and appends it; empty texts
 * ([CLS] [SEP] only) are skipped. */
int pretrain_dataset_add_text(pretrain_dataset *ds, const tokenizer *tok, const char *text,
                              size_t len, int max_length, char *err);
int pretrain_dataset_rows(const pretrain_dataset *ds);
size_t pretrain_dataset_tokens(const pretrain_dataset *ds);

/* ---- the loop ----------------------------------------------------------------- */

typedef struct pretrain_progress {
    loop_report loop;  /* step, rate, timing (loop_options.h); its
                                   loss is per predicted token and denom
                                   the step's predicted positions */
    double valid_loss; /* at an epoch's end: held-out MLM loss,
                                   NAN with no split */
} pretrain_progress;

typedef struct pretrain_options {
    /* epochs 1, lr 1e-4, valid_fraction 0 (else rows held out, scored after
     * each epoch with fixed masks), the rest loop_options_default's */
    loop_options loop;
    float mask_prob;         /* 0.15 */
    float mask_token_frac;   /* 0.8 of the predicted become [MASK] */
    float random_token_frac; /* 0.1 a random token; the rest unchanged */
    int max_predictions;     /* predicted positions per micro-batch the head's
                                buffers hold; 0 = automatic (the mean plus 6
                                standard deviations when every position can
                                be masked). Any beyond it in a micro-batch
                                are not predicted (their tokens restored) */
    /* Called with loop.user after every optimizer step and at the end of
     * every epoch; nonzero stops (SM_ERR_INTERRUPTED). May be NULL. */
    int (*progress)(void *user, const pretrain_progress *p);
} pretrain_options;

void pretrain_options_default(pretrain_options *o);

typedef struct pretrain_result {
    int epochs;         /* epochs run (the last may be partial with max_steps) */
    double *train_loss; /* (epochs) mean loss per predicted token, malloc'd */
    double *valid_loss; /* (epochs) NAN where there is no split */
    long steps;
    long predicted;     /* predicted positions trained on */
    long skipped_steps; /* steps with no predicted position (no update) */
    int n_train, n_valid;
    double seconds;
    double examples_per_sec;
    size_t device_bytes; /* held on the backend while training */
} pretrain_result;

void pretrain_result_free(pretrain_result *r);

/* Pretrains m's encoder and head on ds on backend be. On success m (all
 * but the pooler and any classifier) and head hold the trained parameters;
 * on any error, interrupt included, both are left as they were. A
 * non-finite loss stops with SM_ERR_INVALID naming the step. */
int pretrain_run(bert_model *m, bert_mlm_head *head, backend *be, const pretrain_dataset *ds,
                 const pretrain_options *o, pretrain_result *res, char *err);

/* The pretraining arena: the encoder's rows of bert_param_table (no
 * classifier), then the head's (bert_mlm_param_table) from *head_offset.
 * specs lists what the optimizer updates: every row but the pooler's. */
int pretrain_param_table(const bert_config *cfg, bert_param_spec **specs, int *n_specs,
                         size_t *total, size_t *head_offset, char *err);

/* Serialises m (the names bert_model_save_safetensors writes, classifier
 * included when m has one) and, when head is non-NULL, the MLM head under
 * transformers' names (cls.predictions.*; the tied decoder weight is not
 * stored twice). bert_model_load_buffers reads it as a base for
 * fine-tuning (ignoring the head); bert_mlm_load_buffers reads both back. */
int pretrain_save_safetensors(const bert_model *m, const bert_mlm_head *head, int dtype, void **out,
                              size_t *out_len, char *err);

#endif

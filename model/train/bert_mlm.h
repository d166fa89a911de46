/* bert_mlm.h: the masked-language-model head, its training pass, and the
 * masking procedure, for pretraining the encoder on unlabeled text
 * (pretrain.h drives them).
 *
 * The head is transformers' BertOnlyMLMHead: transform = dense(C,C) + erf
 * GELU + LayerNorm (the config's eps), then the decoder, a linear map to the
 * vocabulary whose weight IS the word-embedding table (V,C), tied, plus its
 * own bias (V). Its tensors live in a small arena of their own laid out by
 * bert_mlm_param_table, under the names transformers saves:
 *
 *   cls.predictions.transform.dense.weight      (C, C)
 *   cls.predictions.transform.dense.bias        (C)
 *   cls.predictions.transform.LayerNorm.weight  (C)
 *   cls.predictions.transform.LayerNorm.bias    (C)
 *   cls.predictions.bias                        (V)  the decoder's bias
 *
 * The loss is cross-entropy over the predicted positions only (label -100
 * elsewhere), summed here; the caller divides by the number of predicted
 * positions of the optimizer step (transformers' mean). The V-wide logits
 * are computed only for the predicted rows: they are gathered from the
 * encoder output (M,C) first, so the decoder costs M·V·C, not B·T·V·C.
 * Shapes: B batch, T padded tokens, C hidden, V vocab, N = B*T, M predicted.
 */
#ifndef SM_BERT_MLM_H
#define SM_BERT_MLM_H

#include <stdint.h>

#include "encoder/bert.h"
#include "format/safetensors.h"
#include "tokenize/tokenizer.h"
#include "train/bert_train.h"

#define MLM_IGNORE (-100) /* the label of a position that is not predicted */

typedef struct bert_mlm_params {
    float *dense_w;     /* (C, C) transform.dense */
    float *dense_b;     /* (C) */
    float *ln_w, *ln_b; /* (C) transform.LayerNorm */
    float *bias;        /* (V) decoder bias; the decoder weight is word_emb */
} bert_mlm_params;

/* The head's size table (offsets from 0, in floats). */
int bert_mlm_param_table(const bert_config *cfg, bert_param_spec **specs, int *n_specs,
                         size_t *total, char *err);
/* Points p at the tensors of an arena laid out by bert_mlm_param_table. */
void bert_mlm_params_bind(const bert_config *cfg, float *arena, bert_mlm_params *p);

/* A head on the host: arena (n_floats) and views into it. */
typedef struct bert_mlm_head {
    float *arena;
    size_t n_floats;
    bert_mlm_params p;
} bert_mlm_head;

/* A fresh head as transformers initialises one: dense normal(0, 0.02)
 * (seeded), biases 0, LayerNorm (1, 0). */
int bert_mlm_head_create(const bert_config *cfg, uint64_t seed, bert_mlm_head **out, char *err);
void bert_mlm_head_free(bert_mlm_head *h);
/* Reads the head from a checkpoint, checking shapes: the names above
 * (cls.predictions.decoder.bias is taken when cls.predictions.bias is
 * absent; a stored cls.predictions.decoder.weight, the tied copy older
 * files carry, must be (V,C) and is not used). *out is NULL when the
 * checkpoint has no head. */
int bert_mlm_head_from_safetensors(const bert_config *cfg, const safetensors *st,
                                   bert_mlm_head **out, char *err);

/* Loads a masked-language-model checkpoint: a Hugging Face directory whose
 * model.safetensors is what transformers' BertForMaskedLM.save_pretrained
 * writes (no pooler: it is then initialised as transformers does, normal(0,
 * 0.02) from seed and zero bias) or what pretrain_save_safetensors writes.
 * *head gets the MLM head, or NULL when the file has none. */
int bert_mlm_load_dir(const char *dir, uint64_t seed, bert_model **model, bert_mlm_head **head,
                      char *err);
int bert_mlm_load_buffers(const char *config_json, size_t config_len, const char *vocab,
                          size_t vocab_len, const void *safetensors, size_t st_len, uint64_t seed,
                          bert_model **model, bert_mlm_head **head, char *err);

/* ---- masking (transformers DataCollatorForLanguageModeling) ------------- */

typedef struct mlm_masking {
    float prob;        /* 0.15: share of maskable positions predicted */
    float mask_frac;   /* 0.8: of those, replaced by [MASK] */
    float random_frac; /* 0.1: replaced by a token drawn uniformly from the
                           whole vocabulary; the rest stay unchanged */
    int mask_id;       /* [MASK] */
    int vocab_size;
    int special[8]; /* never predicted: [PAD] [UNK] [CLS] [SEP] [MASK] */
    int n_special;
} mlm_masking;

/* The defaults above for tok's vocabulary. Fails when it has no [MASK]. */
int mlm_masking_init(const tokenizer *tok, mlm_masking *mk, char *err);

/* Masks one sequence ids[0..n): writes the model's input ids (n) and the
 * labels (n: the original id where predicted, MLM_IGNORE elsewhere); returns
 * the number of predicted positions. Every draw is a function of (key,
 * position) only (rng.h), so a sequence masks the same way whatever
 * batch it is in and on any backend. */
int mlm_mask(const mlm_masking *mk, uint64_t key, const int *ids, int n, int *inputs, int *labels);

/* ---- the training pass ----------------------------------------------------- */

/* The encoder's training workspace plus the head's buffers for up to
 * max_predictions predicted rows per forward pass. */
typedef struct bert_mlm_ws bert_mlm_ws;

int bert_mlm_ws_create(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                       int max_predictions, bert_mlm_ws **out, char *err);
void bert_mlm_ws_free(bert_mlm_ws *ws);
size_t bert_mlm_ws_bytes(const bert_mlm_ws *ws);

/* Forward pass in training mode. ids(B,T), lengths(B) and labels(B,T) are
 * host memory; labels are MLM_IGNORE or a token id, and MLM_IGNORE at
 * padding (t >= lengths[b]). At most max_predictions labels may be set.
 * *loss_sum = Σ over predicted positions of the cross-entropy (host double,
 * in order); *n_predicted = their count (0 is allowed: loss 0). */
int bert_mlm_forward(const bert_config *cfg, const bert_params *p, const bert_mlm_params *h,
                     bert_mlm_ws *ws, const int *ids, const int *lengths, const int *labels, int B,
                     int T, const bert_dropout *drop, double *loss_sum, int *n_predicted,
                     char *err);

/* Backward of the last bert_mlm_forward: adds to g (encoder gradients, a
 * bert_param_table arena; g->word_emb receives both the input-embedding and
 * the tied decoder contributions) and gh (head gradients) the gradient of
 * loss_scale * loss_sum. For the mean over an optimizer step's predicted
 * positions, loss_scale = 1 / (their count over all its micro-batches). */
int bert_mlm_backward(const bert_config *cfg, const bert_params *p, const bert_mlm_params *h,
                      const bert_params *g, const bert_mlm_params *gh, bert_mlm_ws *ws,
                      float loss_scale, char *err);

#endif

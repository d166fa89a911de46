/* config.h: a BERT-family config.json (BERT, ERNIE 3.0, RoBERTa-wwm-zh,
 * RoBERTa, XLM-RoBERTa) in C.
 *
 * Parses the keys the encoder needs, checks every value's type and range, and
 * writes a config back out (for saving fine-tuned models). Owns the id2label
 * strings. Unknown keys are ignored, as transformers does.
 */
#ifndef SM_CONFIG_H
#define SM_CONFIG_H

#include <stddef.h>

#include "format/int8_check.h"
#include "format/pooling.h"
#include "format/wide_config.h"

#define BERT_MAX_LABELS 1024
#define BERT_LABEL_MAX 128 /* bytes, including the NUL */

typedef struct bert_config {
    char model_type[32]; /* "bert", "ernie", "roberta", "xlm-roberta"
                                   (default "bert"), as config.json says */
    int vocab_size;
    int hidden_size;         /* C */
    int num_hidden_layers;   /* L */
    int num_attention_heads; /* H; hidden_size % H == 0 */
    int intermediate_size;   /* F */
    int max_position_embeddings;
    int type_vocab_size;       /* >= 1 */
    int use_task_id;           /* ERNIE 3.0: task-type embeddings present */
    int task_type_vocab_size;  /* rows of the task-type table when use_task_id */
    int pad_token_id;          /* default 0 */
    int position_offset;       /* RoBERTa: pad_token_id + 1; otherwise 0 */
    float layer_norm_eps;      /* default 1e-12 */
    float hidden_dropout_prob; /* used only in training */
    float attention_probs_dropout_prob;
    float classifier_dropout; /* < 0: use hidden_dropout_prob */
    int do_lower_case;        /* from config.json if present, else 1 */
    int num_labels;           /* from id2label, else num_labels, else 2 */
    char **id2label;          /* num_labels strings, owned */
    sm_pooling pooling;       /* sentence embedding (pooling.h): the
                                   "embedding_pooling" key, or modules.json */
    sm_wide_config wide;      /* the wide part's settings (wide_config.h):
                                   the "wide" key; set 0 when absent */
    sm_int8_check int8_check; /* held-out accuracy in FP32 and INT8
                                   (int8_check.h): the "int8_check" key;
                                   set 0 when absent */
} bert_config;

/* Parses config.json text. On failure *cfg is left empty (safe to free). */
int bert_config_parse(const char *json, size_t len, bert_config *cfg, char *err);
/* Sets defaults (bert, labels LABEL_0..) for building a config in code. */
void bert_config_init(bert_config *cfg);
/* Replaces the label set (copies the strings). */
int bert_config_set_labels(bert_config *cfg, int n, const char *const *labels, char *err);
/* Serialises to config.json text; *out is malloc'd, NUL-terminated. */
int bert_config_to_json(const bert_config *cfg, char **out, char *err);
/* 1 for "roberta" and "xlm-roberta": positions offset by pad_token_id + 1,
 * tensors under "roberta.", and transformers' RobertaClassificationHead
 * (classifier.dense, tanh, classifier.out_proj on <s>, no pooler) as the
 * classification head (see bert.h). */
int bert_config_is_roberta(const bert_config *cfg);
/* Index of a label name, or -1. */
int bert_config_label_index(const bert_config *cfg, const char *label);
void bert_config_free(bert_config *cfg);

#endif

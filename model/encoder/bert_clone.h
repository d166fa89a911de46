/* bert_clone.h: a private copy of a model, and a head's classes put in a
 * new order (bert_clone.c). Used where a shared, read-only model (a cached
 * one) is to be trained: the trainer changes its copy only.
 */
#ifndef SM_BERT_CLONE_H
#define SM_BERT_CLONE_H

#include "encoder/bert.h"

/* A deep copy of src: the config (labels and pooling setting included),
 * the parameter arena with the views bound into the copy's own arena, the
 * tokenizer and the tokenizer.json it keeps. The copy shares no memory
 * with src (either may be changed or freed while the other is used) and
 * computes exactly as src does: the same logits, bit for bit. *out is NULL
 * on error (SM_ERR_NOMEM, or SM_ERR_INVALID for a model whose arena does
 * not have the size its config gives). */
int bert_model_clone(const bert_model *src, bert_model **out, char *err);

/* Puts m's classes in the order order[0..num_labels): class j becomes the
 * label order[j], a permutation of m's labels. The head's rows (cls_w,
 * cls_b) move with their labels, so every label keeps its logit; id2label
 * becomes order. A label that is not in the head ("label 'x' is not in the
 * head"), one named twice, or a model without a head is SM_ERR_INVALID;
 * on any error m is unchanged. */
int bert_model_permute_head(bert_model *m, const char *const *order, char *err);

#endif

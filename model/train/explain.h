/* explain.h: why a classifier gave a text its label: each token's
 * attribution to one label's logit, by the gradient of that logit with
 * respect to the token's word embedding.
 *
 * The baseline is the same text with every token between [CLS] and [SEP]
 * replaced by the padding token (positions and segment types kept): the
 * input that says nothing. With x_t and b_t the word embeddings of token t
 * in the text and in the baseline, and z(e) the label's logit:
 *   integrated gradients (Sundararajan et al. 2017), m steps:
 *     a_t = (x_t - b_t) · (1/m) Σ_k ∂z/∂e_t at e = b + α_k (x - b),
 *     α_k = (k + 1/2) / m, k = 0..m-1 (the midpoint rule)
 *   gradient x input (the fast one, IG with one step at α = 1):
 *     a_t = (x_t - b_t) · ∂z/∂e_t at e = x
 * [CLS] and [SEP] are the same in both inputs, so their attribution is 0.
 * Integrated gradients is complete up to the rule's error: Σ_t a_t =
 * z(x) - z(b) + O(1/m²); bert_explanation reports both sides.
 *
 * The passes are the training passes (bert_train.h) with dropout off, run
 * on the explainer's backend, in chunks of at most max_batch interpolated
 * inputs. Nothing is allocated per call.
 */
#ifndef SM_EXPLAIN_H
#define SM_EXPLAIN_H

#include "core/backend.h"
#include "encoder/bert.h"

typedef enum { EXPLAIN_INTEGRATED_GRADIENTS, EXPLAIN_GRADIENT_X_INPUT } explain_method;

/* What explaining one text found. attr has T entries (the explainer's). */
typedef struct bert_explanation {
    int target;           /* the label explained */
    float *probs;         /* (K) the text's probabilities (softmax of its logits) */
    float logit;          /* z(x), the target's logit for the text */
    float baseline_logit; /* z(b) */
    float *attr;          /* (T) per token, [CLS] first */
    double attr_sum;      /* Σ_t attr[t], in double */
} bert_explanation;

typedef struct bert_explainer bert_explainer;

/* An explainer for m on be (a backend that can train) for texts of up to
 * max_seq tokens, running up to max_batch inputs per pass. m must have a
 * classification head, and must outlive the explainer. */
int bert_explainer_create(backend *be, const bert_model *m, int max_batch, int max_seq,
                          bert_explainer **out, char *err);
void bert_explainer_free(bert_explainer *x);

/* Explains ids[0..T) ([CLS] ... [SEP], as bert_encode gives them) for label
 * target (-1: the predicted one) with method and, for integrated gradients,
 * steps interpolation steps (1..1024). stop (may be NULL) is asked between
 * passes: non-zero ends with SM_ERR_INTERRUPTED. The result's arrays belong
 * to the explainer and stay valid until its next call. */
int bert_explain(bert_explainer *x, const int *ids, int T, int target, explain_method method,
                 int steps, int (*stop)(void *user), void *user, bert_explanation *out, char *err);

#endif

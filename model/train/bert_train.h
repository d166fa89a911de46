/* bert_train.h: the encoder's training pass: forward with dropout that keeps
 * every activation the backward needs, softmax cross-entropy, and the
 * backward pass into a gradient arena.
 *
 * Gradients live in an arena laid out by bert_param_table exactly like the
 * parameters (same offsets), so bert_params_bind() on the gradient arena
 * gives the gradient of every tensor under the same field name. Parameter
 * gradients accumulate (+=): zero the arena once per optimizer step, and
 * micro-batches add up. Shapes: B batch, T padded tokens, C hidden, H heads,
 * d = C/H, F intermediate, K labels, N = B*T.
 */
#ifndef SM_BERT_TRAIN_H
#define SM_BERT_TRAIN_H

#include <stdint.h>

#include "encoder/bert.h"

/* bert_dropout (bert.h): the training forward's dropout. */

/* Fills d from the config (classifier_dropout < 0 means hidden_dropout_prob).
 * override >= 0 replaces all three probabilities. */
void bert_dropout_from_config(const bert_config *cfg, float override, uint64_t seed,
                              bert_dropout *d);

/* Training activations and gradient scratch for up to max_batch x max_seq
 * tokens on one backend; allocated once, nothing is allocated per step. */
typedef struct bert_train_ws bert_train_ws;

/* On a CPU backend with several threads, the workspace splits each batch
 * into one part per thread ("lanes"), each run start to finish on its own
 * single-threaded backend with its own activations, their parameter
 * gradients summed in lane order: no thread waits on another inside a pass,
 * and a run is still bit-for-bit repeatable for a given thread count. The
 * dropout masks are the whole batch's whatever the split. */
int bert_train_ws_create(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                         bert_train_ws **out, char *err);
/* The same without lanes, for the encoder alone (bert_train_encode). */
int bert_train_ws_create_encoder(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                                 bert_train_ws **out, char *err);
void bert_train_ws_free(bert_train_ws *ws);
/* Bytes the workspace holds on its backend. */
size_t bert_train_ws_bytes(const bert_train_ws *ws);

/* Forward pass in training mode. ids(B,T), lengths(B) and labels(B) are host
 * memory; positions t >= lengths[b] are padding, labels in [0, K). Sets
 * *loss_sum to the sum over the batch of the per-example cross-entropy
 * (host double, summed in order). logits (B,K host) may be NULL. drop may be
 * NULL (no dropout). Needs a head. */
int bert_train_forward(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                       const int *ids, const int *lengths, const int *labels, int B, int T,
                       const bert_dropout *drop, double *loss_sum, float *logits, char *err);

/* What the loss compares the logits with. Without soft targets: softmax
 * cross-entropy on labels. With them (knowledge distillation, Hinton et al.
 * 2015): loss_b = (1 - alpha) * CE(labels[b]) + alpha * T^2 *
 * KL(q_b || softmax(z_b / T)), where q_b = softmax(log(soft_b) / T) is the
 * teacher's distribution at temperature T; a row whose label is -1 has the
 * soft term only. */
typedef struct bert_targets {
    const int *labels; /* (B) host: in [0, K); -1 allowed with soft */
    const float *soft; /* (B,K) host: each row a distribution, or NULL */
    float alpha;       /* weight of the soft term, 0..1 */
    float temperature; /* T > 0 */
} bert_targets;

/* SM_OK when p[0..K) is a distribution (each in [0, 1], summing to 1
 * within 1e-3), else SM_ERR_INVALID with a message starting with `what`. */
int bert_targets_check_row(const float *p, int K, const char *what, char *err);

/* bert_train_forward with soft targets; *loss_sum sums the loss above. */
int bert_train_forward_targets(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                               const int *ids, const int *lengths, const bert_targets *tg, int B,
                               int T, const bert_dropout *drop, double *loss_sum, float *logits,
                               char *err);

/* Backward of the last bert_train_forward on ws: adds to the gradients g
 * (views of a gradient arena on the same backend) the gradient of
 * loss_scale * Σ_b loss_b. For the mean over a batch of n examples split in
 * micro-batches, loss_scale = 1/n for every micro-batch. */
int bert_train_backward(const bert_config *cfg, const bert_params *p, const bert_params *g,
                        bert_train_ws *ws, float loss_scale, char *err);

/* The encoder alone, for other heads (the masked-language-model head of
 * bert_mlm.c). bert_train_encode runs the training forward pass through the
 * embeddings and every layer, saving what the backward needs, and sets
 * *x_out to the last layer's output (N,C), backend memory valid until the
 * next forward on ws. The head's backward then writes dL/d(x_out) into
 * bert_train_grad_out(ws) (N,C, backend memory) and calls
 * bert_train_encode_backward, which adds the encoder's parameter gradients
 * to g. The pooler and classifier are not used (their gradients stay). */
int bert_train_encode(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                      const int *ids, const int *lengths, int B, int T, const bert_dropout *drop,
                      const float **x_out, char *err);
float *bert_train_grad_out(bert_train_ws *ws);
int bert_train_encode_backward(const bert_config *cfg, const bert_params *p, const bert_params *g,
                               bert_train_ws *ws, char *err);

#endif

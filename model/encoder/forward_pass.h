/* forward_pass.h: the encoder's forward pass, written once for inference
 * (inference.c) and training (bert_train.c). Internal to model/.
 *
 * The pass reads token ids and lengths already on the backend and writes
 * the activations its caller lays out in an encoder_acts. The two callers
 * differ only in that layout and in the pass options:
 * - inference (inference.c): one set of layer buffers reused in place by every
 *   layer, no statistics saved, no dropout, packed weights where the
 *   parameters carry them;
 * - training (bert_train.c): one set per layer, so that the backward pass
 *   finds each layer's inputs, LayerNorm statistics saved, dropout at every
 *   site (also at probability 0, so each saved dropout output exists), FP32
 *   weights only.
 * Shapes: B batch, T padded tokens, C hidden, H heads, d = C/H, F
 * intermediate, K labels; N = B*T token rows.
 */
#ifndef SM_ENCODER_H
#define SM_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "encoder/bert.h"

/* Dropout sites: 0 the embeddings, 1 + 3l .. 3 + 3l layer l, the last the
 * classifier input, the one before it the dense input of a RoBERTa head. */
#define SITE_EMB 0u
#define SITE_ATTN(l) (1u + 3u * (unsigned)(l))
#define SITE_HID1(l) (2u + 3u * (unsigned)(l))
#define SITE_HID2(l) (3u + 3u * (unsigned)(l))
#define SITE_CLS_IN 4094u
#define SITE_CLS 4095u

/* One layer's buffers: what it reads, writes and (training) saves for its
 * backward. In the inference layout x_in, x1 and the layer's output are
 * one buffer, r1 and r2 another, h and g a third. */
typedef struct layer_acts {
    float *x_in;          /* (N,C) layer input */
    float *qkv;           /* (N,3C) */
    float *att;           /* (B,H,T,T) attention probabilities, before dropout */
    float *merged;        /* (N,C) attention output, input of attention.output.dense */
    float *r1;            /* (N,C) dropout(dense) + x_in: input of LN1 */
    float *mean1, *rstd1; /* (N) or NULL: not saved */
    float *x1;            /* (N,C) LN1 output: FFN input */
    float *h;             /* (N,F) intermediate before GELU */
    float *g;             /* (N,F) GELU(h): input of output.dense */
    float *r2;            /* (N,C) dropout(output.dense) + x1: input of LN2 */
    float *mean2, *rstd2; /* (N) or NULL: not saved */
} layer_acts;

/* Where a pass reads and writes, all backend memory. */
typedef struct encoder_acts {
    const int *ids;       /* (N) token ids, uploaded */
    const int *lengths;   /* (B) real tokens per sequence, uploaded */
    float *r0;            /* (N,C) word + position + type [+ task] */
    float *mean0, *rstd0; /* (N) embedding LayerNorm statistics, or NULL */
    layer_acts *layers;   /* per_layer ? L : 1 entries */
    int per_layer;        /* 1: layer l's output is layer l+1's x_in (saved);
                           * 0: one set, every layer in place on x_in */
    float *x_out;         /* (N,C) last hidden state */
    float *att_drop;      /* (B,H,T,T) dropped probabilities (training) */
    /* the head */
    float *cls;         /* (B,C) [CLS] rows */
    float *cls_drop;    /* (B,C) dropout(cls), a RoBERTa head's dense input (training) */
    float *pooled;      /* (B,C) tanh(dense(cls)) */
    float *pooled_drop; /* (B,C) dropout(pooled), the classifier input (training) */
    float *logits;      /* (B,K) */
} encoder_acts;

/* How a pass runs. */
typedef struct encoder_pass {
    /* NULL: inference (no dropout, packed weights used where present);
     * else training with these probabilities and keys */
    const bert_dropout *drop;
    /* the first row of this part of the caller's batch (a lane's), which
     * moves its dropout keys on so that its masks are the whole batch's */
    int row0;
    /* (N,C) backend memory or NULL: added to word + position + type before
     * the embedding LayerNorm (the interpolated inputs of integrated
     * gradients, model/train/explain.c) */
    const float *r0_delta;
    /* > 0 (inference only): the sum of the batch's lengths, R < B T; on a
     * backend with the slots for it (unpad_rows, pad_rows,
     * attention_unpadded) the layers then run R rows without the padding
     * ones, whose work changes nothing else (every op is row by row but
     * attention, which skips padded keys). The real rows get the same
     * values; x_out's padding rows are 0. 0: B T rows. */
    int unpadded_rows;
    /* 1 (inference only): the caller reads only each sequence's first row
     * of the last hidden state (the head's [CLS] vectors). On a backend
     * with the slots for it (first_rows, attention_first) the last layer
     * then computes those B rows only, the pass leaves them in a->cls
     * (where encoder_head_forward takes them) and x_out is not written;
     * they get the same values as in a whole pass. 0: every row. */
    int cls_only;
} encoder_pass;

/* The dropout key of a site for a pass whose masks are per_row elements a
 * row: the same function for the forward and the backward. */
uint64_t encoder_dropout_key(const encoder_pass *ps, unsigned site, size_t per_row);

/* SM_OK when the batch's tokens fit the model: T positions, ids in the
 * vocabulary, lengths in [1, T]; else an error starting "what: ". ids and
 * lengths are host memory. */
int encoder_check_tokens(const bert_config *cfg, const int *ids, const int *lengths, int B, int T,
                         const char *what, char *err);

/* Embeddings and every layer: a->ids -> a->x_out(N,C) (or a->cls(B,C):
 * encoder_pass.cls_only). */
int encoder_forward(backend *be, const bert_config *cfg, const bert_params *p,
                    const encoder_acts *a, const encoder_pass *ps, int B, int T, char *err);

/* The head on a->x_out: cls, pooled = tanh(cls · Wpᵀ + bp) (a RoBERTa head
 * drops cls out first in training) and, when with_logits, logits =
 * dropout(pooled) · Wcᵀ + bc. */
int encoder_head_forward(backend *be, const bert_config *cfg, const bert_params *p,
                         const encoder_acts *a, const encoder_pass *ps, int B, int T,
                         int with_logits, char *err);

#endif

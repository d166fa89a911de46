/* bert_train_ws.h: the training workspace's layout and the one-workspace
 * passes of bert_train.c, for bert_train_lanes.c (bert_train.h's entry
 * points: a batch split across the backend's lanes, or run whole).
 * Internal to model/.
 */
#ifndef SM_BERT_TRAIN_WS_H
#define SM_BERT_TRAIN_WS_H

#include <stddef.h>

#include "encoder/forward_pass.h"
#include "encoder/lanes.h"
#include "train/bert_train.h"

struct bert_train_ws {
    backend *be;
    int max_batch, max_seq, L, C, F, H, K;
    float *arena; /* every float buffer below */
    size_t arena_floats;
    int *iarena; /* ids, lengths, labels */
    /* saved activations */
    float *r0;            /* (N,C) word + position + type [+ task] */
    float *mean0, *rstd0; /* (N) embedding LayerNorm statistics */
    layer_acts *layers;   /* L entries; layer l's output is layer l+1's x_in */
    float *x_out;         /* (N,C) last layer output */
    float *cls;           /* (B,C) [CLS] rows */
    float *cls_drop;      /* (B,C) dropout(cls), the dense input of a RoBERTa head */
    float *pooled;        /* (B,C) tanh(dense(cls)) */
    float *pooled_drop;   /* (B,C) classifier input */
    float *logits;        /* (B,K) */
    float *probs;         /* (B,K) */
    float *probs_t;       /* (B,K) softmax(logits / T), with soft targets */
    float *q;             /* (B,K) the soft targets at temperature T */
    float *losses;        /* (B) */
    /* scratch */
    float *att_drop;    /* (B,H,T,T) dropped probabilities */
    float *datt;        /* (B,H,T,T) */
    float *dx;          /* (N,C) gradient of the residual stream */
    float *dtmp;        /* (N,C) a gradient through a dropout */
    float *dmerged;     /* (N,C) */
    float *dqkv;        /* (N,3C) */
    float *dffn;        /* (N,F) */
    float *dcls;        /* (B,C) */
    float *dpooled;     /* (B,C) */
    float *dlogits;     /* (B,K) */
    int *ids;           /* (N) */
    int *lengths;       /* (B) */
    int *labels;        /* (B) */
    encoder_acts acts;  /* the saved activations as the forward pass (forward_pass.h) writes them */
    float *host_losses; /* (B) host copy of losses */
    float *host_q;      /* (B,K) host: the targets tempered, before upload */
    /* the last forward's loss: soft targets (distill 1) with alpha and T */
    int distill;
    float alpha, temperature;
    /* the last forward */
    int B, T, ready;
    bert_dropout drop;
    /* in a lane: the first row of its part of the caller's batch, which
     * offsets its dropout masks so that they are the whole batch's */
    int row0;
    /* (N,C) backend memory or NULL: added to the embeddings' sum by the
     * next forward (encoder_pass.r0_delta; explain.c) */
    const float *r0_delta;
    /* lanes (bert_train_lanes.c); n_lanes 0: none, the ops run on be */
    int n_lanes, lanes_used;
    lane_set lanes;          /* the single-lane backends (lanes.h) */
    bert_train_ws **lane_ws; /* (n_lanes) */
    float **lane_grad;   /* (n_lanes) gradient arenas; [0] NULL: lane 0 adds into the caller's */
    bert_params *lane_g; /* (n_lanes) views of lane_grad */
    size_t grad_floats;  /* floats per gradient arena */
    size_t
        reduce_from; /* the first float lanes sum into the caller's (embeddings.LayerNorm.weight) */
};

/* ---- one workspace on one backend (bert_train.c) ---- */

/* A workspace for batches up to max_batch x max_seq, with its activation
 * arena when with_arena (a workspace whose lanes hold the activations has
 * none until bert_train_ws_arena). No lanes. */
int bert_train_ws_create_one(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                             int with_arena, bert_train_ws **out, char *err);
/* Frees what bert_train_ws_create_one made (not the lanes). */
void bert_train_ws_release(bert_train_ws *ws);
/* The bytes of its own arenas. */
size_t bert_train_ws_own_bytes(const bert_train_ws *ws);
/* SM_OK when the batch fits ws and the model, and the targets are sound. */
int bert_train_check_batch(const bert_config *cfg, const bert_params *p, const bert_train_ws *ws,
                           const int *ids, const int *lengths, const bert_targets *tg, int B, int T,
                           char *err);
/* The forward of a checked batch on ws (bert_train_forward_targets' work). */
int bert_train_forward_one(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                           const int *ids, const int *lengths, const bert_targets *tg, int B, int T,
                           const bert_dropout *drop, double *loss_sum, float *logits, char *err);
/* The whole backward of ws's last forward, the embeddings' scatter included. */
int bert_train_backward_one(const bert_config *cfg, const bert_params *p, const bert_params *g,
                            bert_train_ws *ws, float loss_scale, char *err);
/* The backward of one lane's last forward down to the embeddings' scatter,
 * which it leaves for the caller (bert_train_scatter_embeddings). */
int bert_train_backward_lane(const bert_config *cfg, const bert_params *p, const bert_params *g,
                             bert_train_ws *ws, float loss_scale, char *err);
/* The backward of ws's last forward from given logit gradients dlogits
 * (B,K host) instead of a loss's: the head and the encoder, leaving
 * dL/d(word + position + type) (N,C) in bert_train_grad_out(ws) and
 * adding parameter gradients to g; no embedding scatter (explain.c). */
int bert_train_backward_dlogits(const bert_config *cfg, const bert_params *p, const bert_params *g,
                                bert_train_ws *ws, const float *dlogits, char *err);
/* Adds ws's embedding gradient rows (after the backward) into g on be. */
int bert_train_scatter_embeddings(backend *be, const bert_config *cfg, const bert_params *p,
                                  const bert_params *g, bert_train_ws *ws, char *err);
/* Allocates ws's own activation arena if it has none yet (a workspace with
 * lanes gets it on the first bert_train_encode). */
int bert_train_ws_arena(bert_train_ws *ws, char *err);

#endif

/* bert_train.c: the training workspace, the loss, and the backward pass of
 * one workspace on one backend, written once against the backend table;
 * the forward is forward_pass.c's (the inference pass's), with dropout and
 * every layer's activations saved. bert_train_lanes.c, above it, splits a batch
 * across lanes and holds bert_train.h's entry points for a whole batch; the
 * pretraining passes (bert_train_encode*) are here.
 *
 * Each layer's backward runs in exact reverse order of forward_pass.c's
 * layer_forward. Parameter gradients
 * accumulate (+=) into views of a gradient arena (see bert_train.h);
 * activation gradients are written. The workspace owns one activation arena
 * and one int arena, carved once at creation.
 */
#include "train/bert_train.h"
#include "train/bert_train_ws.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "encoder/forward_pass.h"
#include "encoder/ws_arena.h"

void bert_dropout_from_config(const bert_config *cfg, float override, uint64_t seed,
                              bert_dropout *d)
{
    memset(d, 0, sizeof *d);
    d->hidden = cfg->hidden_dropout_prob;
    d->attention = cfg->attention_probs_dropout_prob;
    d->classifier = cfg->classifier_dropout >= 0 ? cfg->classifier_dropout
                                                 : cfg->hidden_dropout_prob;
    if (override >= 0) d->hidden = d->attention = d->classifier = override;
    d->seed = seed;
}

void bert_train_ws_release(bert_train_ws *ws)
{
    if (!ws) return;
    ws_arena_free(ws->be, ws->arena, ws->iarena);
    free(ws->layers);
    free(ws->host_losses);
    free(ws->host_q);
    free(ws);
}

size_t bert_train_ws_own_bytes(const bert_train_ws *ws)
{
    return ws->arena
               ? ws->arena_floats * sizeof(float) +
                     ((size_t)ws->max_batch * ws->max_seq + 2 * (size_t)ws->max_batch) * sizeof(int)
               : 0;
}

/* Every float buffer of the workspace, in arena order. */
static void plan_buffers(void *ctx, ws_carver *c)
{
    bert_train_ws *ws = ctx;
    size_t N = (size_t)ws->max_batch * ws->max_seq, B = ws->max_batch, C = ws->C, F = ws->F;
    size_t att = B * ws->H * (size_t)ws->max_seq * ws->max_seq, K = ws->K;
    ws->r0 = ws_carve(c, N * C);
    ws->mean0 = ws_carve(c, N);
    ws->rstd0 = ws_carve(c, N);
    for (int l = 0; l < ws->L; l++) {
        layer_acts *a = &ws->layers[l];
        a->x_in = ws_carve(c, N * C);
        a->qkv = ws_carve(c, N * 3 * C);
        a->att = ws_carve(c, att);
        a->merged = ws_carve(c, N * C);
        a->r1 = ws_carve(c, N * C);
        a->mean1 = ws_carve(c, N);
        a->rstd1 = ws_carve(c, N);
        a->x1 = ws_carve(c, N * C);
        a->h = ws_carve(c, N * F);
        a->g = ws_carve(c, N * F);
        a->r2 = ws_carve(c, N * C);
        a->mean2 = ws_carve(c, N);
        a->rstd2 = ws_carve(c, N);
    }
    ws->x_out = ws_carve(c, N * C);
    ws->cls = ws_carve(c, B * C);
    ws->cls_drop = ws_carve(c, B * C);
    ws->pooled = ws_carve(c, B * C);
    ws->pooled_drop = ws_carve(c, B * C);
    ws->logits = ws_carve(c, B * K);
    ws->probs = ws_carve(c, B * K);
    ws->probs_t = ws_carve(c, B * K);
    ws->q = ws_carve(c, B * K);
    ws->losses = ws_carve(c, B);
    ws->att_drop = ws_carve(c, att);
    ws->datt = ws_carve(c, att);
    ws->dx = ws_carve(c, N * C);
    ws->dtmp = ws_carve(c, N * C);
    ws->dmerged = ws_carve(c, N * C);
    ws->dqkv = ws_carve(c, N * 3 * C);
    ws->dffn = ws_carve(c, N * F);
    ws->dcls = ws_carve(c, B * C);
    ws->dpooled = ws_carve(c, B * C);
    ws->dlogits = ws_carve(c, B * K);
}

int bert_train_ws_create_one(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                             int with_arena, bert_train_ws **out, char *err)
{
    *out = NULL;
    if (max_batch < 1 || max_seq < 2 || max_batch > (1 << 16) || max_seq > 8192)
        return sm_error(err, SM_ERR_INVALID,
                        "training workspace: batch %d x sequence %d is out of range", max_batch,
                        max_seq);
    if (!be->linear_backward)
        return sm_error(err, SM_ERR_UNSUPPORTED, "the %s backend cannot train", be->name);
    bert_train_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return sm_error(err, SM_ERR_NOMEM, "out of memory creating a training workspace");
    ws->be = be;
    ws->max_batch = max_batch;
    ws->max_seq = max_seq;
    ws->L = cfg->num_hidden_layers;
    ws->C = cfg->hidden_size;
    ws->F = cfg->intermediate_size;
    ws->H = cfg->num_attention_heads;
    ws->K = cfg->num_labels;
    ws->layers = calloc((size_t)(ws->L ? ws->L : 1), sizeof *ws->layers);
    ws->host_losses = malloc((size_t)max_batch * sizeof *ws->host_losses);
    ws->host_q = malloc((size_t)max_batch * (ws->K > 0 ? ws->K : 1) * sizeof *ws->host_q);
    if (!ws->layers || !ws->host_losses || !ws->host_q) goto nomem;

    int rc = with_arena ? bert_train_ws_arena(ws, err) : SM_OK;
    if (rc) {
        bert_train_ws_release(ws);
        return rc;
    }
    *out = ws;
    return SM_OK;
nomem:
    bert_train_ws_release(ws);
    return sm_error(err, SM_ERR_NOMEM, "out of memory creating a training workspace");
}

int bert_train_ws_arena(bert_train_ws *ws, char *err)
{
    if (ws->arena) return SM_OK;
    backend *be = ws->be;
    size_t N = (size_t)ws->max_batch * ws->max_seq, B = ws->max_batch;
    if (ws_arena_alloc(be, plan_buffers, ws, N + 2 * B, &ws->arena, &ws->arena_floats,
                       &ws->iarena)) {
        size_t mib = ws->arena_floats * sizeof(float) >> 20;
        ws_arena_free(be, ws->arena, ws->iarena);
        ws->arena = NULL;
        ws->iarena = NULL;
        return sm_error(err, SM_ERR_NOMEM,
                        "out of memory: a %s training workspace for batch %d x %d tokens needs "
                        "about %zu MiB; lower batch_size or max_length",
                        be->name, ws->max_batch, ws->max_seq, mib);
    }
    ws->ids = ws->iarena;
    ws->lengths = ws->iarena + N;
    ws->labels = ws->iarena + N + B;
    ws->acts = (encoder_acts){.ids = ws->ids,
                              .lengths = ws->lengths,
                              .r0 = ws->r0,
                              .mean0 = ws->mean0,
                              .rstd0 = ws->rstd0,
                              .layers = ws->layers,
                              .per_layer = 1,
                              .x_out = ws->x_out,
                              .att_drop = ws->att_drop,
                              .cls = ws->cls,
                              .cls_drop = ws->cls_drop,
                              .pooled = ws->pooled,
                              .pooled_drop = ws->pooled_drop,
                              .logits = ws->logits};
    return SM_OK;
}

/* The pass options of ws's last forward, for its backward's dropout keys. */
static encoder_pass pass_of(const bert_train_ws *ws)
{
    return (encoder_pass){.drop = &ws->drop, .row0 = ws->row0, .r0_delta = ws->r0_delta};
}

static uint64_t key_of(const bert_train_ws *ws, unsigned site, size_t per_row)
{
    encoder_pass ps = pass_of(ws);
    return encoder_dropout_key(&ps, site, per_row);
}

/* ---- one encoder layer's backward ----------------------------------------
 * dx(N,C) holds dL/dx_out on entry and dL/dx_in on return; the layer's
 * forward is forward_pass.c's. */

static int layer_backward(const bert_config *cfg, const bert_layer_params *lp,
                          const bert_layer_params *lg, bert_train_ws *ws, layer_acts *a, int l,
                          char *err)
{
    (void)cfg;
    backend *be = ws->be;
    int B = ws->B, T = ws->T, C = ws->C, H = ws->H, d = C / H, F = ws->F, N = B * T;
    const bert_dropout *dr = &ws->drop;
    float scale = 1.0f / sqrtf((float)d);
    size_t NC = (size_t)N * C;
    float *dx = ws->dx;

    /* x_out = LN2(r2): dx <- dL/dr2 (also dL/dx1 through the residual) */
    TRY_BACKEND(be->layernorm_backward(be, dx, lg->ln2_w, lg->ln2_b, dx, a->r2, a->mean2, a->rstd2,
                                       lp->ln2_w, N, C));
    /* r2 = dropout(g · W2ᵀ + b2) + x1 */
    float *dp = dx;
    if (dr->hidden > 0) {
        TRY_BACKEND(be->dropout(be, ws->dtmp, dx, NC, dr->hidden,
                                key_of(ws, SITE_HID2(l), (size_t)T * C)));
        dp = ws->dtmp;
    }
    TRY_BACKEND(be->linear_backward(be, ws->dffn, lg->ffn_out_w, lg->ffn_out_b, dp, a->g,
                                    lp->ffn_out_w, N, F, C, 0));
    /* g = GELU(h); h = x1 · W1ᵀ + b1: dx += dh · W1 */
    TRY_BACKEND(be->gelu_backward(be, ws->dffn, ws->dffn, a->h, (size_t)N * F));
    TRY_BACKEND(be->linear_backward(be, dx, lg->ffn_in_w, lg->ffn_in_b, ws->dffn, a->x1,
                                    lp->ffn_in_w, N, C, F, 1));
    /* x1 = LN1(r1): dx <- dL/dr1 */
    TRY_BACKEND(be->layernorm_backward(be, dx, lg->ln1_w, lg->ln1_b, dx, a->r1, a->mean1, a->rstd1,
                                       lp->ln1_w, N, C));
    /* r1 = dropout(merged · Woᵀ + bo) + x_in */
    dp = dx;
    if (dr->hidden > 0) {
        TRY_BACKEND(be->dropout(be, ws->dtmp, dx, NC, dr->hidden,
                                key_of(ws, SITE_HID1(l), (size_t)T * C)));
        dp = ws->dtmp;
    }
    TRY_BACKEND(be->linear_backward(be, ws->dmerged, lg->attn_out_w, lg->attn_out_b, dp, a->merged,
                                    lp->attn_out_w, N, C, C, 0));
    /* merged = attention(qkv) */
    TRY_BACKEND(be->attention_backward(be, ws->dqkv, ws->datt, ws->att_drop, ws->dmerged, a->att,
                                       a->qkv, ws->lengths, B, T, H, d, scale, dr->attention,
                                       key_of(ws, SITE_ATTN(l), (size_t)H * T * T)));
    /* qkv = x_in · Wqkvᵀ + bqkv: dx += dqkv · Wqkv */
    TRY_BACKEND(be->linear_backward(be, dx, lg->qkv_w, lg->qkv_b, ws->dqkv, a->x_in, lp->qkv_w, N,
                                    C, 3 * C, 1));
    return SM_OK;
}

/* ---- the whole model ---------------------------------------------------- */

/* Checks the inputs of a training forward pass against ws and cfg. */
static int check_inputs(const bert_config *cfg, const bert_train_ws *ws, const int *ids,
                        const int *lengths, int B, int T, char *err)
{
    if (B < 1 || T < 1 || B > ws->max_batch || T > ws->max_seq)
        return sm_error(err, SM_ERR_INVALID,
                        "training: batch %d x %d tokens exceeds the workspace (%d x %d)", B, T,
                        ws->max_batch, ws->max_seq);
    return encoder_check_tokens(cfg, ids, lengths, B, T, "training", err);
}

/* Embeddings and layers: ids (host, checked) -> ws->x_out(N,C), each
 * layer's activations saved (forward_pass.c). */
static int encoder_forward_saved(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                                 const int *ids, const int *lengths, int B, int T,
                                 const bert_dropout *drop, char *err)
{
    backend *be = ws->be;
    ws->B = B;
    ws->T = T;
    if (drop) ws->drop = *drop;
    else memset(&ws->drop, 0, sizeof ws->drop);
    TRY_BACKEND(be->upload(be, ws->ids, ids, (size_t)B * T * sizeof(int)));
    TRY_BACKEND(be->upload(be, ws->lengths, lengths, (size_t)B * sizeof(int)));
    encoder_pass ps = pass_of(ws);
    return encoder_forward(be, cfg, p, &ws->acts, &ps, B, T, err);
}

/* q = softmax(log(soft) / T) row by row into ws->host_q: the targets at
 * temperature T (soft itself when T is 1). */
static void temper_targets(bert_train_ws *ws, const float *soft, int B, int K, float T)
{
    for (int b = 0; b < B; b++) {
        const float *s = soft + (size_t)b * K;
        float *q = ws->host_q + (size_t)b * K;
        double sum = 0.0;
        for (int k = 0; k < K; k++) sum += q[k] = s[k] > 0 ? (float)pow(s[k], 1.0 / T) : 0.0f;
        for (int k = 0; k < K; k++) q[k] = (float)(q[k] / sum);
    }
}

int bert_targets_check_row(const float *p, int K, const char *what, char *err)
{
    double sum = 0.0;
    for (int k = 0; k < K; k++) {
        if (!(p[k] >= 0 && p[k] <= 1))
            return sm_error(err, SM_ERR_INVALID,
                            "%s: soft target %g of label %d is not a probability", what, p[k], k);
        sum += p[k];
    }
    if (fabs(sum - 1.0) > 1e-3)
        return sm_error(err, SM_ERR_INVALID, "%s: soft targets sum to %g, not 1", what, sum);
    return SM_OK;
}

static int check_targets(const bert_targets *tg, int B, int K, char *err)
{
    int soft = tg->soft != NULL;
    if (soft && (!(tg->alpha >= 0 && tg->alpha <= 1) || !(tg->temperature > 0)))
        return sm_error(err, SM_ERR_INVALID,
                        "training: distillation weight %g (0..1) or temperature %g (> 0) is out "
                        "of range",
                        tg->alpha, tg->temperature);
    for (int b = 0; b < B; b++) {
        int y = tg->labels[b];
        if (y >= K || y < (soft ? -1 : 0))
            return sm_error(err, SM_ERR_INVALID,
                            "training: label %d of example %d is not in [0, %d)", y, b, K);
        char what[48];
        snprintf(what, sizeof what, "training: example %d", b);
        int rc = soft ? bert_targets_check_row(tg->soft + (size_t)b * K, K, what, err) : SM_OK;
        if (rc) return rc;
    }
    return SM_OK;
}

int bert_train_check_batch(const bert_config *cfg, const bert_params *p, const bert_train_ws *ws,
                           const int *ids, const int *lengths, const bert_targets *tg, int B, int T,
                           char *err)
{
    int rc = check_inputs(cfg, ws, ids, lengths, B, T, err);
    if (rc) return rc;
    if (!p->cls_w || cfg->num_labels != ws->K)
        return sm_error(err, SM_ERR_INVALID, "training: the model needs a %d-label head", ws->K);
    return check_targets(tg, B, ws->K, err);
}

int bert_train_forward_one(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                           const int *ids, const int *lengths, const bert_targets *tg, int B, int T,
                           const bert_dropout *drop, double *loss_sum, float *logits, char *err)
{
    backend *be = ws->be;
    int K = ws->K, rc;

    ws->ready = 0;
    if ((rc = encoder_forward_saved(cfg, p, ws, ids, lengths, B, T, drop, err))) return rc;
    TRY_BACKEND(be->upload(be, ws->labels, tg->labels, (size_t)B * sizeof(int)));
    ws->distill = tg->soft != NULL;
    ws->alpha = tg->alpha;
    ws->temperature = tg->temperature;
    if (ws->distill) {
        temper_targets(ws, tg->soft, B, K, tg->temperature);
        TRY_BACKEND(be->upload(be, ws->q, ws->host_q, (size_t)B * K * sizeof(float)));
    }

    /* pooled(B,C) = tanh(dense(x[:,0,:])), logits(B,K) = dropout(pooled) · Wcᵀ + bc
     * (forward_pass.c); losses(B) = cross-entropy, or with soft targets the
     * distillation loss */
    encoder_pass ps = pass_of(ws);
    if ((rc = encoder_head_forward(be, cfg, p, &ws->acts, &ps, B, T, 1, err))) return rc;
    if (ws->distill)
        TRY_BACKEND(be->distill_loss(be, ws->losses, ws->probs, ws->probs_t, ws->logits, ws->labels,
                                     ws->q, B, K, ws->temperature, ws->alpha));
    else TRY_BACKEND(be->cross_entropy(be, ws->losses, ws->probs, ws->logits, ws->labels, B, K));
    TRY_BACKEND(be->download(be, ws->host_losses, ws->losses, (size_t)B * sizeof(float)));
    if (logits) TRY_BACKEND(be->download(be, logits, ws->logits, (size_t)B * K * sizeof(float)));
    TRY_BACKEND(be->synchronize(be));
    double sum = 0.0;
    for (int b = 0; b < B; b++) sum += ws->host_losses[b];
    *loss_sum = sum;
    ws->ready = 1;
    return SM_OK;
}

int bert_train_encode(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                      const int *ids, const int *lengths, int B, int T, const bert_dropout *drop,
                      const float **x_out, char *err)
{
    ws->ready = 0;
    int rc = check_inputs(cfg, ws, ids, lengths, B, T, err);
    if (!rc) rc = bert_train_ws_arena(ws, err);
    if (!rc) rc = encoder_forward_saved(cfg, p, ws, ids, lengths, B, T, drop, err);
    if (rc) return rc;
    *x_out = ws->x_out;
    ws->ready = 2;
    return SM_OK;
}

float *bert_train_grad_out(bert_train_ws *ws)
{
    return ws->dx;
}

/* Layers and the embedding LayerNorm backward: ws->dx(N,C) holds
 * dL/dx_out on entry and dL/d(word + position + type) on return. */
static int encoder_backward(const bert_config *cfg, const bert_params *p, const bert_params *g,
                            bert_train_ws *ws, char *err)
{
    backend *be = ws->be;
    int T = ws->T, C = ws->C, N = ws->B * T, L = ws->L;
    const bert_dropout *dr = &ws->drop;
    for (int l = L - 1; l >= 0; l--) {
        int rc = layer_backward(cfg, &p->layers[l], &g->layers[l], ws, &ws->layers[l], l, err);
        if (rc) return rc;
    }
    /* x_in[0] = dropout(LN(r0)); r0 = embeddings */
    TRY_BACKEND(be->dropout(be, ws->dx, ws->dx, (size_t)N * C, dr->hidden,
                            key_of(ws, SITE_EMB, (size_t)T * C)));
    TRY_BACKEND(be->layernorm_backward(be, ws->dx, g->emb_ln_w, g->emb_ln_b, ws->dx, ws->r0,
                                       ws->mean0, ws->rstd0, p->emb_ln_w, N, C));
    return SM_OK;
}

int bert_train_scatter_embeddings(backend *be, const bert_config *cfg, const bert_params *p,
                                  const bert_params *g, bert_train_ws *ws, char *err)
{
    TRY_BACKEND(be->embed_backward(be, g->word_emb, g->pos_emb, g->type_emb,
                                   p->task_emb ? g->task_emb : NULL, ws->dx, ws->ids, NULL, ws->B,
                                   ws->T, ws->C, cfg->position_offset));
    return SM_OK;
}

static int head_backward(const bert_config *cfg, const bert_params *p, const bert_params *g,
                         bert_train_ws *ws, char *err);

/* The loss's backward, the classifier head's, then the encoder's down to
 * the embedding LayerNorm. */
static int head_and_encoder_backward(const bert_config *cfg, const bert_params *p,
                                     const bert_params *g, bert_train_ws *ws, float loss_scale,
                                     char *err)
{
    backend *be = ws->be;
    int B = ws->B, K = ws->K;

    if (ws->ready != 1)
        return sm_error(err, SM_ERR_INVALID, "training: backward without a forward pass");
    ws->ready = 0;
    /* losses = cross-entropy(logits), or the distillation loss */
    if (ws->distill)
        TRY_BACKEND(be->distill_backward(be, ws->dlogits, ws->probs, ws->probs_t, ws->labels, ws->q,
                                         B, K, ws->temperature, ws->alpha, loss_scale));
    else
        TRY_BACKEND(be->cross_entropy_backward(be, ws->dlogits, ws->probs, ws->labels, B, K,
                                               loss_scale));
    return head_backward(cfg, p, g, ws, err);
}

/* From ws->dlogits (B,K) down: the classifier head, then the encoder to the
 * embedding LayerNorm; ws->dx is then dL/d(word + position + type). */
static int head_backward(const bert_config *cfg, const bert_params *p, const bert_params *g,
                         bert_train_ws *ws, char *err)
{
    backend *be = ws->be;
    int B = ws->B, T = ws->T, C = ws->C, K = ws->K;
    const bert_dropout *dr = &ws->drop;

    /* logits = dropout(pooled) · Wcᵀ + bc */
    TRY_BACKEND(be->linear_backward(be, ws->dpooled, g->cls_w, g->cls_b, ws->dlogits,
                                    ws->pooled_drop, p->cls_w, B, C, K, 0));
    TRY_BACKEND(be->dropout(be, ws->dpooled, ws->dpooled, (size_t)B * C, dr->classifier,
                            key_of(ws, SITE_CLS, (size_t)C)));
    /* pooled = tanh(cls · Wpᵀ + bp), cls dropped out first for RoBERTa */
    int roberta = bert_config_is_roberta(cfg);
    TRY_BACKEND(be->tanh_backward(be, ws->dpooled, ws->dpooled, ws->pooled, (size_t)B * C));
    TRY_BACKEND(be->linear_backward(be, ws->dcls, g->pool_w, g->pool_b, ws->dpooled,
                                    roberta ? ws->cls_drop : ws->cls, p->pool_w, B, C, C, 0));
    if (roberta)
        TRY_BACKEND(be->dropout(be, ws->dcls, ws->dcls, (size_t)B * C, dr->classifier,
                                key_of(ws, SITE_CLS_IN, (size_t)C)));
    /* cls = x_out[:,0,:] */
    TRY_BACKEND(be->scatter_cls(be, ws->dx, ws->dcls, B, T, C));
    return encoder_backward(cfg, p, g, ws, err);
}

int bert_train_backward_dlogits(const bert_config *cfg, const bert_params *p, const bert_params *g,
                                bert_train_ws *ws, const float *dlogits, char *err)
{
    backend *be = ws->be;
    if (ws->ready != 1)
        return sm_error(err, SM_ERR_INVALID, "training: backward without a forward pass");
    ws->ready = 0;
    TRY_BACKEND(be->upload(be, ws->dlogits, dlogits, (size_t)ws->B * ws->K * sizeof(float)));
    return head_backward(cfg, p, g, ws, err);
}

int bert_train_backward_lane(const bert_config *cfg, const bert_params *p, const bert_params *g,
                             bert_train_ws *ws, float loss_scale, char *err)
{
    return head_and_encoder_backward(cfg, p, g, ws, loss_scale, err);
}

int bert_train_backward_one(const bert_config *cfg, const bert_params *p, const bert_params *g,
                            bert_train_ws *ws, float loss_scale, char *err)
{
    backend *be = ws->be;
    int rc = head_and_encoder_backward(cfg, p, g, ws, loss_scale, err);
    if (!rc) rc = bert_train_scatter_embeddings(be, cfg, p, g, ws, err);
    if (!rc) TRY_BACKEND(be->synchronize(be));
    return rc;
}

int bert_train_encode_backward(const bert_config *cfg, const bert_params *p, const bert_params *g,
                               bert_train_ws *ws, char *err)
{
    if (ws->ready != 2)
        return sm_error(err, SM_ERR_INVALID,
                        "training: encoder backward without bert_train_encode");
    ws->ready = 0;
    int rc = encoder_backward(cfg, p, g, ws, err);
    if (!rc) rc = bert_train_scatter_embeddings(ws->be, cfg, p, g, ws, err);
    backend *be = ws->be;
    if (!rc) TRY_BACKEND(be->synchronize(be));
    return rc;
}

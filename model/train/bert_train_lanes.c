/* bert_train_lanes.c: bert_train.h's entry points for a whole batch
 * (workspace create/free, forward, backward), which split the batch across
 * the backend's lanes (backend.h; the CPU's: one per thread) or run it whole
 * on the workspace's backend (bert_train.c, below this file).
 *
 * With T lanes, rows [B*i/T, B*(i+1)/T) of a batch go to lane i, which
 * runs the whole forward and backward on a single-threaded backend with
 * its own activations: one fork and one join per pass instead of one per
 * op. Each lane's dropout keys are moved on by its first row (key_of in
 * bert_train.c), so the masks are the whole batch's. Parameter gradients:
 * lane 0 adds into the caller's arena, lane i > 0 into its own, which is
 * then added to the caller's in lane order by the caller's backend and
 * cleared (from embeddings.LayerNorm.weight to the end of the table); the
 * embedding tables' rows are scattered from every lane's gradient, lane by
 * lane, by the caller's backend, in the token order a single lane would
 * use. The same lane count therefore gives the same bits on every run.
 */
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "train/bert_train_ws.h"

static int lane_count(const bert_train_ws *ws, const bert_config *cfg)
{
    if (cfg->num_labels < 1) return 0;
    int n = ws->be->lanes(ws->be);
    if (n > ws->max_batch) n = ws->max_batch;
    return n > 1 ? n : 0;
}

/* Lanes: on a backend with several (the CPU: one per thread), one
 * single-lane backend each, with its own workspace for its part of the batch
 * and (but lane 0) its own gradient arena. Fills the lane fields of ws
 * (n_lanes stays 0 when lanes do not apply). */
static int lanes_create(bert_train_ws *ws, const bert_config *cfg, char *err)
{
    int n = lane_count(ws, cfg);
    if (!n) return SM_OK;
    bert_param_spec *specs = NULL;
    int n_specs, rc = bert_param_table(cfg, 1, &specs, &n_specs, &ws->grad_floats, err);
    if (rc) return rc;
    for (int i = 0; i < n_specs; i++)
        if (!strcmp(specs[i].name, "embeddings.LayerNorm.weight"))
            ws->reduce_from = specs[i].offset;
    free(specs);
    ws->lane_ws = calloc((size_t)n, sizeof *ws->lane_ws);
    ws->lane_grad = calloc((size_t)n, sizeof *ws->lane_grad);
    ws->lane_g = calloc((size_t)n, sizeof *ws->lane_g);
    if (!ws->lane_ws || !ws->lane_grad || !ws->lane_g)
        return sm_error(err, SM_ERR_NOMEM, "out of memory creating %d training lanes", n);
    ws->n_lanes = n;
    if ((rc = lane_set_grow(&ws->lanes, ws->be, n, err))) return rc;
    int rows = (ws->max_batch + n - 1) / n;
    for (int i = 0; i < n; i++) {
        if ((rc = bert_train_ws_create_one(ws->lanes.be[i], cfg, rows, ws->max_seq, 1,
                                           &ws->lane_ws[i], err)))
            return rc;
        if (i == 0) continue;
        /* Zeroed pages: the embedding tables' part is never touched. */
        ws->lane_grad[i] = calloc(ws->grad_floats, sizeof(float));
        if (!ws->lane_grad[i])
            return sm_error(err, SM_ERR_NOMEM, "out of memory for the gradients of %d lanes", n);
        if ((rc = bert_params_bind(cfg, 1, ws->lane_grad[i], &ws->lane_g[i], err))) return rc;
    }
    return SM_OK;
}

static void lanes_free(bert_train_ws *ws)
{
    for (int i = 0; i < ws->n_lanes; i++) {
        if (ws->lane_ws) bert_train_ws_release(ws->lane_ws[i]);
        if (ws->lane_g) bert_params_release(&ws->lane_g[i]);
        if (ws->lane_grad) free(ws->lane_grad[i]);
    }
    lane_set_free(&ws->lanes);
    free(ws->lane_ws);
    free(ws->lane_grad);
    free(ws->lane_g);
    ws->lane_ws = NULL;
    ws->lane_grad = NULL;
    ws->lane_g = NULL;
    ws->n_lanes = 0;
}

static size_t lanes_bytes(const bert_train_ws *ws)
{
    size_t bytes = 0;
    for (int i = 0; i < ws->n_lanes; i++) {
        if (ws->lane_ws && ws->lane_ws[i]) bytes += bert_train_ws_own_bytes(ws->lane_ws[i]);
        if (i) bytes += (ws->grad_floats - ws->reduce_from) * sizeof(float);
    }
    return bytes;
}

/* One pass of every lane: the arguments. */
typedef struct lanes_pass {
    const bert_config *cfg;
    const bert_params *p, *g;
    bert_train_ws *ws;
    const int *ids, *lengths;
    const bert_targets *tg;
    int B, T;
    const bert_dropout *drop;
    float *logits, loss_scale;
} lanes_pass;

/* Lane i of n: its rows of the batch (lane_rows) forward. */
static int forward_lane(void *ctx, int i, int n, char *err)
{
    const lanes_pass *j = ctx;
    int T = j->T, r0, r1;
    lane_rows(j->B, i, n, &r0, &r1);
    bert_train_ws *lw = j->ws->lane_ws[i];
    double lane_loss;
    lw->row0 = r0;
    bert_targets tg = *j->tg;
    tg.labels += r0;
    if (tg.soft) tg.soft += (size_t)r0 * j->ws->K;
    return bert_train_forward_one(j->cfg, j->p, lw, j->ids + (size_t)r0 * T, j->lengths + r0, &tg,
                                  r1 - r0, T, j->drop, &lane_loss,
                                  j->logits ? j->logits + (size_t)r0 * j->ws->K : NULL, err);
}

static int lanes_forward(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                         const int *ids, const int *lengths, const bert_targets *tg, int B, int T,
                         const bert_dropout *drop, double *loss_sum, float *logits, char *err)
{
    int n = ws->n_lanes < B ? ws->n_lanes : B;
    ws->ready = 0;
    lanes_pass j = {cfg, p, NULL, ws, ids, lengths, tg, B, T, drop, logits, 0.0f};
    int rc = lanes_run(n, forward_lane, &j, err);
    if (rc) return rc;
    /* The loss summed over the rows in order, as one lane would. */
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        const bert_train_ws *lw = ws->lane_ws[i];
        for (int b = 0; b < lw->B; b++) sum += lw->host_losses[b];
    }
    *loss_sum = sum;
    ws->lanes_used = n;
    ws->B = B;
    ws->T = T;
    ws->ready = 1;
    return SM_OK;
}

/* g[reduce_from, grad_floats) += each lane's, in lane order, by the
 * caller's backend, and the lanes' cleared: every element is summed in lane
 * order, whatever the threads. */
static int reduce_lanes(bert_train_ws *ws, const bert_params *g, int n, char *err)
{
    backend *be = ws->be;
    size_t len = ws->grad_floats - ws->reduce_from;
    for (int i = 1; i < n; i++) {
        float *src = ws->lane_g[i].emb_ln_w;
        int rc = be->add(be, g->emb_ln_w, g->emb_ln_w, src, len);
        if (!rc) rc = be->zero(be, src, len * sizeof *src);
        if (rc)
            return sm_error(err, rc, "%s backend: adding the lanes' gradients failed", be->name);
    }
    return SM_OK;
}

/* Lane i: its rows backward, into the caller's gradients (lane 0) or its own. */
static int backward_lane(void *ctx, int i, int n, char *err)
{
    const lanes_pass *j = ctx;
    (void)n;
    return bert_train_backward_lane(j->cfg, j->p, i ? &j->ws->lane_g[i] : j->g, j->ws->lane_ws[i],
                                    j->loss_scale, err);
}

static int lanes_backward(const bert_config *cfg, const bert_params *p, const bert_params *g,
                          bert_train_ws *ws, float loss_scale, char *err)
{
    if (ws->ready != 1)
        return sm_error(err, SM_ERR_INVALID, "training: backward without a forward pass");
    ws->ready = 0;
    int n = ws->lanes_used;
    lanes_pass j = {cfg, p, g, ws, NULL, NULL, NULL, 0, 0, NULL, NULL, loss_scale};
    int rc = lanes_run(n, backward_lane, &j, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        int r = bert_train_scatter_embeddings(ws->be, cfg, p, g, ws->lane_ws[i], err);
        if (r) return r;
    }
    return n > 1 ? reduce_lanes(ws, g, n, err) : SM_OK;
}

/* ---- bert_train.h's entry points for a whole batch ---- */

int bert_train_ws_create(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                         bert_train_ws **out, char *err)
{
    bert_train_ws *ws;
    int rc = bert_train_ws_create_one(be, cfg, max_batch, max_seq, 0, &ws, err);
    if (rc) return rc;
    /* With lanes, the activations live in the lanes; the workspace's own
     * arena is made only if bert_train_encode needs it. */
    rc = lanes_create(ws, cfg, err);
    if (!rc && !ws->n_lanes) rc = bert_train_ws_arena(ws, err);
    if (rc) {
        bert_train_ws_free(ws);
        return rc;
    }
    *out = ws;
    return SM_OK;
}

int bert_train_ws_create_encoder(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                                 bert_train_ws **out, char *err)
{
    return bert_train_ws_create_one(be, cfg, max_batch, max_seq, 1, out, err);
}

void bert_train_ws_free(bert_train_ws *ws)
{
    if (!ws) return;
    lanes_free(ws);
    bert_train_ws_release(ws);
}

size_t bert_train_ws_bytes(const bert_train_ws *ws)
{
    return bert_train_ws_own_bytes(ws) + lanes_bytes(ws);
}

int bert_train_forward(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                       const int *ids, const int *lengths, const int *labels, int B, int T,
                       const bert_dropout *drop, double *loss_sum, float *logits, char *err)
{
    bert_targets tg = {labels, NULL, 0.0f, 1.0f};
    return bert_train_forward_targets(cfg, p, ws, ids, lengths, &tg, B, T, drop, loss_sum, logits,
                                      err);
}

int bert_train_forward_targets(const bert_config *cfg, const bert_params *p, bert_train_ws *ws,
                               const int *ids, const int *lengths, const bert_targets *tg, int B,
                               int T, const bert_dropout *drop, double *loss_sum, float *logits,
                               char *err)
{
    ws->ready = 0;
    int rc = bert_train_check_batch(cfg, p, ws, ids, lengths, tg, B, T, err);
    if (rc) return rc;
    if (ws->n_lanes)
        return lanes_forward(cfg, p, ws, ids, lengths, tg, B, T, drop, loss_sum, logits, err);
    return bert_train_forward_one(cfg, p, ws, ids, lengths, tg, B, T, drop, loss_sum, logits, err);
}

int bert_train_backward(const bert_config *cfg, const bert_params *p, const bert_params *g,
                        bert_train_ws *ws, float loss_scale, char *err)
{
    if (ws->n_lanes) return lanes_backward(cfg, p, g, ws, loss_scale, err);
    return bert_train_backward_one(cfg, p, g, ws, loss_scale, err);
}

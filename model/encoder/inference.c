/* inference.c: the activation workspace and the forward pass's entry
 * points (bert.h), the layers themselves being forward_pass.c's, shared with
 * training.
 *
 * Written against the backend table (backend.h), so the same code runs
 * on the CPU and on a GPU backend. Shapes: B batch, T padded tokens, C hidden,
 * H heads, d = C/H, F intermediate, K labels; N = B*T token rows.
 * The workspace owns every activation buffer, sized once for the largest
 * batch it will see, or on a backend that bounds a pass's rows for the
 * largest pass (token_rows); a forward pass allocates nothing (but lanes,
 * created on the first multi-threaded CPU pass). On a CPU backend with several threads
 * a batch is split into one part per thread, each run on its own
 * single-threaded lane, so threads never wait on each other inside a pass;
 * small batches use the threads inside each operation instead. A backend
 * that bounds a pass's rows (pass_rows: the CPU, so that the activations
 * stay in its caches) gets a larger batch, or a lane's part of it, as
 * several passes of whole sequences, one after another.
 */
#include "encoder/bert.h"

#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "encoder/forward_pass.h"
#include "encoder/lanes.h"
#include "encoder/ws_arena.h"

struct bert_workspace {
    backend *be;
    int max_batch, max_seq;
    int C, F, H, K;
    size_t rows; /* token rows of the buffers below (token_rows) */
    /* token-level activations (N = rows: the batch's B T, or a pass's) */
    float *x;      /* (N, C) residual stream, the layer input and output */
    float *qkv;    /* (N, 3C) */
    float *att;    /* (B, H, T, T) attention probabilities: N H max_seq floats */
    float *merged; /* (N, C) attention output before the projection */
    float *proj;   /* (N, C) a projection before the residual add */
    float *ffn;    /* (N, F) */
    /* sequence-level */
    float *cls;    /* (B, C) */
    float *pooled; /* (B, C) */
    float *logits; /* (B, K) */
    int *ids;      /* (N) token ids on the backend */
    int *lengths;  /* (B) */
    float *arena;  /* every float buffer above, one allocation (ws_arena.h) */
    size_t arena_floats;
    int *iarena; /* ids, then lengths */
    /* the buffers above as the encoder pass sees them (forward_pass.h): one
     * layer set reused in place by every layer */
    layer_acts layer;
    encoder_acts acts;
    /* lanes (CPU only, see bert_workspace_lanes): single-threaded backends
     * and workspaces of the same size, created on first use */
    lane_set lanes;           /* lanes.h */
    bert_workspace **lane_ws; /* one workspace per lane ... */
    int n_lane_ws;            /* ... for the first n_lane_ws lanes */
};

static void workspace_release(bert_workspace *ws)
{
    ws_arena_free(ws->be, ws->arena, ws->iarena);
    ws->arena = NULL;
    ws->iarena = NULL;
}

/* A pass's activations per token row of a batch of T tokens: x, qkv, att,
 * merged, proj and ffn, C + 3C + H T + C + C + F floats. */
static size_t row_bytes(const bert_workspace *ws, int T)
{
    return (6 * (size_t)ws->C + (size_t)ws->H * T + (size_t)ws->F) * sizeof(float);
}

/* Token rows the workspace holds: max_batch x max_seq; on a backend that
 * bounds a pass's rows (pass_rows: the CPU) the most a pass of any T <=
 * max_seq can have (pass_sequences: a pass of T tokens has at most
 * pass_rows(row_bytes(T)) rows, which is largest at T = 1, or one sequence
 * of T rows), where that is fewer. A batch larger than that runs as
 * several passes: BERT-base at 32 x 128 tokens reserves 272 rows (about
 * 10 MiB) instead of 4,096 (about 150 MiB) per lane, of which a pass never
 * touched more than the 272. */
static size_t token_rows(const bert_workspace *ws)
{
    size_t all = (size_t)ws->max_batch * ws->max_seq;
    if (!ws->be || !ws->be->pass_rows) return all;
    size_t most = (size_t)ws->be->pass_rows(ws->be, row_bytes(ws, 1));
    if (most < (size_t)ws->max_seq) most = (size_t)ws->max_seq;
    return most < all ? most : all;
}

/* Every float buffer of the workspace, in arena order. */
static void plan_buffers(void *ctx, ws_carver *c)
{
    bert_workspace *ws = ctx;
    size_t N = ws->rows, C = ws->C, B = ws->max_batch;
    ws->x = ws_carve(c, N * C);
    ws->qkv = ws_carve(c, N * 3 * C);
    /* B T <= N rows of a pass, each with H rows of T <= max_seq
     * probabilities */
    ws->att = ws_carve(c, N * ws->H * (size_t)ws->max_seq);
    ws->merged = ws_carve(c, N * C);
    ws->proj = ws_carve(c, N * C);
    ws->ffn = ws_carve(c, N * (size_t)ws->F);
    ws->cls = ws_carve(c, B * C);
    ws->pooled = ws_carve(c, B * C);
    ws->logits = ws_carve(c, B * (size_t)ws->K);
}

/* The workspace's size fields (ws->be set first); rows + max_batch ints
 * (ids, lengths) beside the floats. */
static void set_sizes(bert_workspace *ws, const bert_config *cfg, int max_batch, int max_seq)
{
    ws->max_batch = max_batch;
    ws->max_seq = max_seq;
    ws->C = cfg->hidden_size;
    ws->F = cfg->intermediate_size;
    ws->H = cfg->num_attention_heads;
    ws->K = cfg->num_labels;
    ws->rows = token_rows(ws);
}

size_t bert_workspace_bytes(const backend *be, const bert_config *cfg, int max_batch, int max_seq)
{
    bert_workspace ws = {0};
    ws.be = (backend *)be;
    set_sizes(&ws, cfg, max_batch, max_seq);
    ws_carver c = {NULL, 0};
    plan_buffers(&ws, &c);
    size_t ints = ws.rows + (size_t)max_batch;
    return c.at * sizeof(float) + ints * sizeof(int);
}

void bert_workspace_free(bert_workspace *ws)
{
    if (!ws) return;
    for (int i = 0; i < ws->n_lane_ws; i++) bert_workspace_free(ws->lane_ws[i]);
    free(ws->lane_ws);
    lane_set_free(&ws->lanes);
    workspace_release(ws);
    free(ws);
}

int bert_workspace_lanes(bert_workspace *ws, const bert_config *cfg, int n, bert_workspace ***lanes,
                         char *err)
{
    *lanes = NULL;
    if (n > ws->n_lane_ws) {
        bert_workspace **lw = realloc(ws->lane_ws, (size_t)n * sizeof *lw);
        if (!lw) return sm_error(err, SM_ERR_NOMEM, "out of memory creating %d lanes", n);
        ws->lane_ws = lw;
        int rc = lane_set_grow(&ws->lanes, ws->be, n, err);
        if (rc) return rc;
        for (; ws->n_lane_ws < n; ws->n_lane_ws++)
            if ((rc = bert_workspace_create(ws->lanes.be[ws->n_lane_ws], cfg, ws->max_batch,
                                            ws->max_seq, &lw[ws->n_lane_ws], err)))
                return rc;
    }
    *lanes = ws->lane_ws;
    return SM_OK;
}

backend *bert_workspace_backend(const bert_workspace *ws)
{
    return ws->be;
}

int bert_workspace_create(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                          bert_workspace **out, char *err)
{
    *out = NULL;
    if (max_batch < 1 || max_seq < 2 || max_batch > (1 << 20) || max_seq > 65536)
        return sm_error(err, SM_ERR_INVALID, "workspace: batch %d x sequence %d is out of range",
                        max_batch, max_seq);
    bert_workspace *ws = calloc(1, sizeof *ws);
    if (!ws) return sm_error(err, SM_ERR_NOMEM, "out of memory creating a workspace");
    ws->be = be;
    set_sizes(ws, cfg, max_batch, max_seq);
    size_t N = ws->rows;
    if (ws_arena_alloc(be, plan_buffers, ws, N + (size_t)max_batch, &ws->arena, &ws->arena_floats,
                       &ws->iarena)) {
        size_t bytes = ws->arena_floats * sizeof(float) + (N + (size_t)max_batch) * sizeof(int);
        bert_workspace_free(ws);
        return sm_error(err, SM_ERR_NOMEM,
                        "out of memory: a %s workspace for batch %d x %d tokens needs about %zu "
                        "MiB",
                        be->name, max_batch, max_seq, bytes >> 20);
    }
    ws->ids = ws->iarena;
    ws->lengths = ws->iarena + N;
    ws->layer = (layer_acts){.x_in = ws->x,
                             .qkv = ws->qkv,
                             .att = ws->att,
                             .merged = ws->merged,
                             .r1 = ws->proj,
                             .x1 = ws->x,
                             .h = ws->ffn,
                             .g = ws->ffn,
                             .r2 = ws->proj};
    ws->acts = (encoder_acts){.ids = ws->ids,
                              .lengths = ws->lengths,
                              .r0 = ws->x,
                              .layers = &ws->layer,
                              .per_layer = 0,
                              .x_out = ws->x,
                              .cls = ws->cls,
                              .pooled = ws->pooled,
                              .logits = ws->logits};
    *out = ws;
    return SM_OK;
}

/* SM_OK when be has the ops that layer lp's packed weights need. */
static int packed_ops_check(backend *be, const bert_layer_params *lp, char *err)
{
    const backend_packed *pw[] = {lp->qkv_pw, lp->attn_out_pw, lp->ffn_in_pw, lp->ffn_out_pw};
    for (size_t i = 0; i < sizeof pw / sizeof *pw; i++) {
        if (!pw[i] || be->linear_packed) continue;
        if (pw[i]->kind == BACKEND_PACK_BF16)
            return sm_error(err, SM_ERR_UNSUPPORTED,
                            "forward: the %s backend has no bf16 linear layers; use fp32 weights",
                            be->name);
        if (pw[i]->kind == BACKEND_PACK_INT8)
            return sm_error(err, SM_ERR_UNSUPPORTED,
                            "forward: the %s backend has no int8 linear layers; use fp32 weights",
                            be->name);
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "forward: the %s backend has no packed f32 linear layers; use "
                        "unpacked fp32 weights",
                        be->name);
    }
    return SM_OK;
}

/* Lanes for one forward pass of B sequences: on a backend with lanes (the
 * CPU: one per thread) a batch of at least two sequences per lane is split
 * into one part per lane, each run start to finish on a single-threaded
 * lane (no barrier inside the pass; see bert_workspace_lanes). 1 = no
 * split. */
static int forward_lanes(const bert_workspace *ws, int B)
{
    int t = ws->be->lanes(ws->be);
    return t > 1 && B >= 2 * t ? t : 1;
}

/* Sequences of T tokens per pass on this backend (pass_rows, backend.h;
 * row_bytes); never more rows than the workspace holds (token_rows). */
static int pass_sequences(const bert_workspace *ws, int T)
{
    if (!ws->be->pass_rows) return ws->max_batch;
    int rows = ws->be->pass_rows(ws->be, row_bytes(ws, T));
    if ((size_t)rows > ws->rows) rows = (int)ws->rows;
    return rows / T < 1 ? 1 : rows / T;
}

static int forward(const bert_config *cfg, const bert_params *p, bert_workspace *ws, const int *ids,
                   const int *lengths, int B, int T, float *logits, float *pooled_out,
                   float *hidden_out, char *err);
static int forward_one(const bert_config *cfg, const bert_params *p, bert_workspace *ws,
                       const int *ids, const int *lengths, int B, int T, float *logits,
                       float *pooled_out, float *hidden_out, char *err);

typedef struct forward_lanes_job {
    const bert_config *cfg;
    const bert_params *p;
    bert_workspace **lane_ws;
    const int *ids, *lengths;
    int B, T, K, C;
    float *logits, *pooled_out, *hidden_out;
} forward_lanes_job;

/* Lane i of n: its rows of the batch (lane_rows). */
static int forward_lane(void *ctx, int i, int n, char *err)
{
    const forward_lanes_job *j = ctx;
    int lo, hi;
    lane_rows(j->B, i, n, &lo, &hi);
    return forward(j->cfg, j->p, j->lane_ws[i], j->ids + (size_t)lo * j->T, j->lengths + lo,
                   hi - lo, j->T, j->logits ? j->logits + (size_t)lo * j->K : NULL,
                   j->pooled_out ? j->pooled_out + (size_t)lo * j->C : NULL,
                   j->hidden_out ? j->hidden_out + (size_t)lo * j->T * j->C : NULL, err);
}

static int forward_on_lanes(const bert_config *cfg, const bert_params *p, bert_workspace *ws,
                            int lanes, const int *ids, const int *lengths, int B, int T,
                            float *logits, float *pooled_out, float *hidden_out, char *err)
{
    bert_workspace **lane_ws;
    int rc = bert_workspace_lanes(ws, cfg, lanes, &lane_ws, err);
    if (rc) return rc;
    forward_lanes_job j = {cfg, p,     lane_ws, ids,    lengths,    B,
                           T,   ws->K, ws->C,   logits, pooled_out, hidden_out};
    return lanes_run(lanes, forward_lane, &j, err);
}

/* The batch (checked) as passes of `part` sequences, one after another
 * on ws. */
static int forward_in_passes(const bert_config *cfg, const bert_params *p, bert_workspace *ws,
                             int part, const int *ids, const int *lengths, int B, int T,
                             float *logits, float *pooled_out, float *hidden_out, char *err)
{
    int K = ws->K, C = ws->C;
    for (int b0 = 0; b0 < B; b0 += part) {
        int n = B - b0 < part ? B - b0 : part;
        int rc = forward_one(cfg, p, ws, ids + (size_t)b0 * T, lengths + b0, n, T,
                             logits ? logits + (size_t)b0 * K : NULL,
                             pooled_out ? pooled_out + (size_t)b0 * C : NULL,
                             hidden_out ? hidden_out + (size_t)b0 * T * C : NULL, err);
        if (rc) return rc;
    }
    return SM_OK;
}

int bert_forward(const bert_config *cfg, const bert_params *p, bert_workspace *ws, const int *ids,
                 const int *lengths, int B, int T, float *logits, float *pooled_out, char *err)
{
    return forward(cfg, p, ws, ids, lengths, B, T, logits, pooled_out, NULL, err);
}

int bert_forward_hidden(const bert_config *cfg, const bert_params *p, bert_workspace *ws,
                        const int *ids, const int *lengths, int B, int T, float *hidden_out,
                        char *err)
{
    return forward(cfg, p, ws, ids, lengths, B, T, NULL, NULL, hidden_out, err);
}

/* The pass behind both: logits (B,K), pooled_out (B,C) and hidden_out
 * (B,T,C), each written when not NULL. The arguments are checked here,
 * then the batch runs on lanes, in passes or as one pass (forward_one). */
static int forward(const bert_config *cfg, const bert_params *p, bert_workspace *ws, const int *ids,
                   const int *lengths, int B, int T, float *logits, float *pooled_out,
                   float *hidden_out, char *err)
{
    backend *be = ws->be;

    if (B < 1 || T < 1 || B > ws->max_batch || T > ws->max_seq)
        return sm_error(err, SM_ERR_INVALID,
                        "forward: batch %d x %d tokens exceeds the workspace (%d x %d)", B, T,
                        ws->max_batch, ws->max_seq);
    if (T + cfg->position_offset > cfg->max_position_embeddings)
        return sm_error(err, SM_ERR_INVALID, "forward: %d tokens exceed max_position_embeddings %d",
                        T, cfg->max_position_embeddings);
    if (logits && !p->cls_w)
        return sm_error(err, SM_ERR_INVALID,
                        "the model has no classification head (classifier.weight); "
                        "fine-tune it on labeled data first");
    if (cfg->num_hidden_layers > 0) {
        int rc = packed_ops_check(be, &p->layers[0], err);
        if (rc) return rc;
    }
    int rc = encoder_check_tokens(cfg, ids, lengths, B, T, "forward", err);
    if (rc) return rc;

    int lanes = forward_lanes(ws, B);
    if (lanes > 1)
        return forward_on_lanes(cfg, p, ws, lanes, ids, lengths, B, T, logits, pooled_out,
                                hidden_out, err);
    int part = pass_sequences(ws, T);
    if (part < B)
        return forward_in_passes(cfg, p, ws, part, ids, lengths, B, T, logits, pooled_out,
                                 hidden_out, err);
    return forward_one(cfg, p, ws, ids, lengths, B, T, logits, pooled_out, hidden_out, err);
}

/* One pass of B sequences (checked by forward) through ws. */
static int forward_one(const bert_config *cfg, const bert_params *p, bert_workspace *ws,
                       const int *ids, const int *lengths, int B, int T, float *logits,
                       float *pooled_out, float *hidden_out, char *err)
{
    backend *be = ws->be;
    int C = ws->C, K = ws->K, N = B * T, rc;

    TRY_BACKEND(be->upload(be, ws->ids, ids, (size_t)N * sizeof(int)));
    TRY_BACKEND(be->upload(be, ws->lengths, lengths, (size_t)B * sizeof(int)));
    /* x(N,C): the encoder, every layer in place, the padding rows left out
     * where the backend can (forward_pass.h; x's are 0 then) */
    int real = 0;
    for (int b = 0; b < B; b++) real += lengths[b];
    encoder_pass ps = {.drop = NULL, .row0 = 0, .unpadded_rows = real, .cls_only = !hidden_out};
    if ((rc = encoder_forward(be, cfg, p, &ws->acts, &ps, B, T, err))) return rc;
    /* hidden_out(B,T,C) = x, the last hidden state */
    if (hidden_out) TRY_BACKEND(be->download(be, hidden_out, ws->x, (size_t)N * C * sizeof(float)));
    if (!logits && !pooled_out) {
        TRY_BACKEND(be->synchronize(be));
        return SM_OK;
    }
    /* pooled(B,C) = tanh(x[:,0,:] · Wpᵀ + bp); logits(B,K) = pooled · Wcᵀ + bc */
    if ((rc = encoder_head_forward(be, cfg, p, &ws->acts, &ps, B, T, logits != NULL, err)))
        return rc;
    if (pooled_out)
        TRY_BACKEND(be->download(be, pooled_out, ws->pooled, (size_t)B * C * sizeof(float)));
    if (logits) TRY_BACKEND(be->download(be, logits, ws->logits, (size_t)B * K * sizeof(float)));
    TRY_BACKEND(be->synchronize(be));
    return SM_OK;
}

int bert_max_length(const bert_config *cfg)
{
    return cfg->max_position_embeddings - cfg->position_offset;
}

/* bert_mlm.c: the masked-language-model head (size table, fresh and loaded
 * heads), the masking procedure, and the head's forward/backward on top of
 * the encoder's training pass, written once against the backend table.
 *
 * The workspace owns the encoder's training workspace and the head's
 * buffers for max_predictions rows, carved once; nothing is allocated per
 * step. Parameter gradients accumulate (+=), activation gradients are
 * written, and the backward runs in exact reverse order of the forward.
 */
#include "train/bert_mlm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/rng.h"
#include "encoder/ws_arena.h"
#include "format/model_dir.h"

/* ---- the head's parameters ------------------------------------------------ */

static const char *const k_names[] = {
    "cls.predictions.transform.dense.weight",
    "cls.predictions.transform.dense.bias",
    "cls.predictions.transform.LayerNorm.weight",
    "cls.predictions.transform.LayerNorm.bias",
    "cls.predictions.bias",
};
enum { N_HEAD = 5 };

int bert_mlm_param_table(const bert_config *cfg, bert_param_spec **specs, int *n_specs,
                         size_t *total, char *err)
{
    int C = cfg->hidden_size, V = cfg->vocab_size;
    const int shape[N_HEAD][2] = {{C, C}, {C, 0}, {C, 0}, {C, 0}, {V, 0}};
    bert_param_spec *s = calloc(N_HEAD, sizeof *s);
    *specs = NULL;
    if (!s) return sm_error(err, SM_ERR_NOMEM, "out of memory building the MLM head's table");
    size_t at = 0;
    for (int i = 0; i < N_HEAD; i++) {
        snprintf(s[i].name, sizeof s[i].name, "%s", k_names[i]);
        s[i].ndim = shape[i][1] ? 2 : 1;
        s[i].shape[0] = shape[i][0];
        s[i].shape[1] = shape[i][1];
        s[i].numel = (size_t)shape[i][0] * (shape[i][1] ? (size_t)shape[i][1] : 1);
        s[i].offset = at;
        at += s[i].numel;
    }
    *specs = s;
    *n_specs = N_HEAD;
    *total = at;
    return SM_OK;
}

void bert_mlm_params_bind(const bert_config *cfg, float *arena, bert_mlm_params *p)
{
    size_t C = (size_t)cfg->hidden_size;
    p->dense_w = arena;
    p->dense_b = p->dense_w + C * C;
    p->ln_w = p->dense_b + C;
    p->ln_b = p->ln_w + C;
    p->bias = p->ln_b + C;
}

static size_t head_floats(const bert_config *cfg)
{
    size_t C = (size_t)cfg->hidden_size;
    return C * C + 3 * C + (size_t)cfg->vocab_size;
}

static int head_alloc(const bert_config *cfg, bert_mlm_head **out, char *err)
{
    bert_mlm_head *h = calloc(1, sizeof *h);
    if (h) {
        h->n_floats = head_floats(cfg);
        h->arena = calloc(h->n_floats, sizeof *h->arena);
    }
    if (!h || !h->arena) {
        free(h);
        return sm_error(err, SM_ERR_NOMEM, "out of memory for the MLM head");
    }
    bert_mlm_params_bind(cfg, h->arena, &h->p);
    *out = h;
    return SM_OK;
}

void bert_mlm_head_free(bert_mlm_head *h)
{
    if (!h) return;
    free(h->arena);
    free(h);
}

int bert_mlm_head_create(const bert_config *cfg, uint64_t seed, bert_mlm_head **out, char *err)
{
    *out = NULL;
    bert_mlm_head *h;
    int rc = head_alloc(cfg, &h, err);
    if (rc) return rc;
    size_t C = (size_t)cfg->hidden_size;
    uint64_t s = rng_mix64(seed ^ 0x3A5C0DEull);
    rng_fill_normal(h->p.dense_w, C * C, 0.02, &s);
    for (size_t i = 0; i < C; i++) h->p.ln_w[i] = 1.0f;
    *out = h;
    return SM_OK;
}

static int check_shape(const st_tensor *t, int ndim, int64_t r, int64_t c, char *err)
{
    if (t->ndim == ndim && t->shape[0] == r && (ndim == 1 || t->shape[1] == c)) return SM_OK;
    if (ndim == 2)
        return sm_error(err, SM_ERR_FORMAT, "tensor '%s': expected shape [%lld, %lld]", t->name,
                        (long long)r, (long long)c);
    return sm_error(err, SM_ERR_FORMAT, "tensor '%s': expected shape [%lld]", t->name,
                    (long long)r);
}

int bert_mlm_head_from_safetensors(const bert_config *cfg, const safetensors *st,
                                   bert_mlm_head **out, char *err)
{
    *out = NULL;
    int present = 0;
    for (int i = 0; i < N_HEAD; i++) present += safetensors_find(st, k_names[i]) != NULL;
    const st_tensor *dec_b = safetensors_find(st, "cls.predictions.decoder.bias");
    const st_tensor *dec_w = safetensors_find(st, "cls.predictions.decoder.weight");
    if (!present && !dec_b && !dec_w) return SM_OK;
    int C = cfg->hidden_size, V = cfg->vocab_size, rc;
    if (dec_w && (rc = check_shape(dec_w, 2, V, C, err))) return rc;
    bert_mlm_head *h;
    if ((rc = head_alloc(cfg, &h, err))) return rc;
    float *dst[N_HEAD] = {h->p.dense_w, h->p.dense_b, h->p.ln_w, h->p.ln_b, h->p.bias};
    for (int i = 0; i < N_HEAD; i++) {
        const st_tensor *t = safetensors_find(st, k_names[i]);
        if (!t && i == N_HEAD - 1) t = dec_b;
        if (!t) {
            rc = sm_error(err, SM_ERR_FORMAT, "model.safetensors: missing tensor '%s'", k_names[i]);
            goto fail;
        }
        if ((rc = check_shape(t, i ? 1 : 2, i == N_HEAD - 1 ? V : C, C, err))) goto fail;
        if ((rc = st_tensor_to_f32(t, dst[i], err))) goto fail;
        if ((rc = bert_check_finite(t->name, dst[i], (size_t)t->numel, err))) goto fail;
    }
    *out = h;
    return SM_OK;
fail:
    bert_mlm_head_free(h);
    return rc;
}

int bert_mlm_load_buffers(const char *config_json, size_t config_len, const char *vocab,
                          size_t vocab_len, const void *st_bytes, size_t st_len, uint64_t seed,
                          bert_model **model, bert_mlm_head **head, char *err)
{
    *model = NULL;
    *head = NULL;
    bert_model *m;
    int rc = bert_model_load_buffers_mlm(config_json, config_len, vocab, vocab_len, st_bytes,
                                         st_len, seed, &m, err);
    if (rc) return rc;
    safetensors st = {0};
    if ((rc = safetensors_open_buffer(st_bytes, st_len, &st, err)) ||
        (rc = bert_mlm_head_from_safetensors(&m->cfg, &st, head, err))) {
        safetensors_close(&st);
        bert_model_free(m);
        return rc;
    }
    safetensors_close(&st);
    *model = m;
    return SM_OK;
}

int bert_mlm_load_dir(const char *dir, uint64_t seed, bert_model **model, bert_mlm_head **head,
                      char *err)
{
    model_dir d;
    *model = NULL;
    *head = NULL;
    int rc = model_dir_open_vocab_stoppable(dir, NULL, NULL, &d, err);
    if (!rc)
        rc = bert_mlm_load_buffers(d.config, d.config_len, d.vocab, d.vocab_len, d.st.base,
                                   d.st.size, seed, model, head, err);
    model_dir_close(&d);
    return rc;
}

/* ---- masking ------------------------------------------------------------------ */

int mlm_masking_init(const tokenizer *tok, mlm_masking *mk, char *err)
{
    memset(mk, 0, sizeof *mk);
    mk->prob = 0.15f;
    mk->mask_frac = 0.8f;
    mk->random_frac = 0.1f;
    mk->mask_id = tokenizer_mask_id(tok);
    mk->vocab_size = tokenizer_vocab_size(tok);
    if (mk->mask_id < 0)
        return sm_error(err, SM_ERR_INVALID,
                        "masked-language modelling needs a [MASK] token; the vocabulary has none");
    int ids[5] = {tokenizer_pad_id(tok), tokenizer_unk_id(tok), tokenizer_cls_id(tok),
                  tokenizer_sep_id(tok), mk->mask_id};
    for (int i = 0; i < 5; i++)
        if (ids[i] >= 0) mk->special[mk->n_special++] = ids[i];
    return SM_OK;
}

/* Draw streams of one position: which positions, then how each is replaced. */
#define MLM_STREAM_REPLACE 0x6D6C6D5245504Cull

int mlm_mask(const mlm_masking *mk, uint64_t key, const int *ids, int n, int *inputs, int *labels)
{
    uint32_t select = dropout_threshold(mk->prob);
    uint32_t to_mask = dropout_threshold(mk->mask_frac);
    /* of the rest, random_frac / (1 - mask_frac) become random tokens, as
     * transformers scales it */
    float rest = 1.0f - mk->mask_frac;
    uint32_t to_random = dropout_threshold(rest > 0 ? mk->random_frac / rest : 0.0f);
    if (rest > 0 && mk->random_frac >= rest) to_random = 0xFFFFFFFFu;
    uint64_t key2 = rng_mix64(key ^ MLM_STREAM_REPLACE);
    int count = 0;
    for (int t = 0; t < n; t++) {
        int id = ids[t], special = 0;
        inputs[t] = id;
        labels[t] = MLM_IGNORE;
        for (int k = 0; k < mk->n_special; k++) special |= id == mk->special[k];
        if (special || dropout_keep(key, (uint64_t)t, select)) continue;
        labels[t] = id;
        count++;
        uint64_t r = rng_element(key2, (uint64_t)t);
        if ((uint32_t)(r >> 32) < to_mask) {
            inputs[t] = mk->mask_id;
        } else if ((uint32_t)r < to_random) {
            uint64_t w = rng_mix64(r ^ 0x52414E44ull);
            inputs[t] = (int)(((unsigned __int128)w * (uint64_t)mk->vocab_size) >> 64);
        }
    }
    return count;
}

/* ---- the training pass -------------------------------------------------------- */

struct bert_mlm_ws {
    backend *be;
    bert_train_ws *enc;
    int max_batch, max_seq, max_pred, C, V;
    float *arena;
    size_t arena_floats;
    int *iarena;
    /* saved activations, M = predicted rows of the last forward */
    float *hm;          /* (M,C) gathered encoder output */
    float *t;           /* (M,C) transform.dense output */
    float *u;           /* (M,C) GELU(t) */
    float *mean, *rstd; /* (M) transform.LayerNorm statistics */
    float *y;           /* (M,C) LayerNorm(u): the decoder's input */
    float *logits;      /* (M,V); the backward writes dlogits here */
    float *probs;       /* (M,V) */
    float *losses;      /* (M) */
    /* scratch */
    float *dy;   /* (M,C) dL/dy, then dL/du, then dL/dt (in place) */
    float *dhm;  /* (M,C) */
    int *rows;   /* (M) row b*T + t of each predicted position */
    int *labels; /* (M) */
    int *host_rows, *host_labels;
    float *host_losses;
    int B, T, M, ready;
};

void bert_mlm_ws_free(bert_mlm_ws *ws)
{
    if (!ws) return;
    ws_arena_free(ws->be, ws->arena, ws->iarena);
    bert_train_ws_free(ws->enc);
    free(ws->host_rows);
    free(ws->host_labels);
    free(ws->host_losses);
    free(ws);
}

size_t bert_mlm_ws_bytes(const bert_mlm_ws *ws)
{
    return bert_train_ws_bytes(ws->enc) + ws->arena_floats * sizeof(float) +
           2 * (size_t)ws->max_pred * sizeof(int);
}

/* The head's float buffers, in arena order. */
static void plan_buffers(void *ctx, ws_carver *c)
{
    bert_mlm_ws *ws = ctx;
    size_t M = (size_t)ws->max_pred, C = ws->C, V = ws->V;
    ws->hm = ws_carve(c, M * C);
    ws->t = ws_carve(c, M * C);
    ws->u = ws_carve(c, M * C);
    ws->mean = ws_carve(c, M);
    ws->rstd = ws_carve(c, M);
    ws->y = ws_carve(c, M * C);
    ws->logits = ws_carve(c, M * V);
    ws->probs = ws_carve(c, M * V);
    ws->losses = ws_carve(c, M);
    ws->dy = ws_carve(c, M * C);
    ws->dhm = ws_carve(c, M * C);
}

int bert_mlm_ws_create(backend *be, const bert_config *cfg, int max_batch, int max_seq,
                       int max_predictions, bert_mlm_ws **out, char *err)
{
    *out = NULL;
    if (max_predictions < 1 || (long long)max_predictions > (long long)max_batch * max_seq)
        return sm_error(err, SM_ERR_INVALID,
                        "MLM workspace: max_predictions %d is not in [1, batch x sequence]",
                        max_predictions);
    if (!be->gather_rows || !be->scatter_rows)
        return sm_error(err, SM_ERR_UNSUPPORTED, "the %s backend cannot pretrain", be->name);
    bert_mlm_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return sm_error(err, SM_ERR_NOMEM, "out of memory creating an MLM workspace");
    ws->be = be;
    int rc = bert_train_ws_create_encoder(be, cfg, max_batch, max_seq, &ws->enc, err);
    if (rc) {
        free(ws);
        return rc;
    }
    ws->max_batch = max_batch;
    ws->max_seq = max_seq;
    ws->max_pred = max_predictions;
    ws->C = cfg->hidden_size;
    ws->V = cfg->vocab_size;
    size_t M = (size_t)max_predictions;
    ws->host_rows = malloc(M * sizeof *ws->host_rows);
    ws->host_labels = malloc(M * sizeof *ws->host_labels);
    ws->host_losses = malloc(M * sizeof *ws->host_losses);
    if (!ws->host_rows || !ws->host_labels || !ws->host_losses) goto nomem;
    if (ws_arena_alloc(be, plan_buffers, ws, 2 * M, &ws->arena, &ws->arena_floats, &ws->iarena))
        goto nomem;
    ws->rows = ws->iarena;
    ws->labels = ws->iarena + M;
    *out = ws;
    return SM_OK;
nomem:;
    size_t mib = ws->arena_floats * sizeof(float) >> 20;
    bert_mlm_ws_free(ws);
    return sm_error(err, SM_ERR_NOMEM,
                    "out of memory: the MLM head's buffers for %d predicted positions need "
                    "about %zu MiB; lower batch_size or max_length",
                    max_predictions, mib);
}

int bert_mlm_forward(const bert_config *cfg, const bert_params *p, const bert_mlm_params *h,
                     bert_mlm_ws *ws, const int *ids, const int *lengths, const int *labels, int B,
                     int T, const bert_dropout *drop, double *loss_sum, int *n_predicted, char *err)
{
    backend *be = ws->be;
    int C = ws->C, V = ws->V, M = 0;
    ws->ready = 0;
    *loss_sum = 0;
    *n_predicted = 0;
    if (B < 1 || T < 1 || B > ws->max_batch || T > ws->max_seq)
        return sm_error(err, SM_ERR_INVALID,
                        "pretraining: batch %d x %d tokens exceeds the workspace (%d x %d)", B, T,
                        ws->max_batch, ws->max_seq);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int lab = labels[b * T + t];
            if (lab == MLM_IGNORE) continue;
            if (lab < 0 || lab >= V)
                return sm_error(err, SM_ERR_INVALID,
                                "pretraining: label %d at example %d, position %d is neither "
                                "-100 nor a token id below %d",
                                lab, b, t, V);
            if (t >= lengths[b])
                return sm_error(err, SM_ERR_INVALID,
                                "pretraining: example %d predicts padding position %d (length %d)",
                                b, t, lengths[b]);
            if (M == ws->max_pred)
                return sm_error(err, SM_ERR_INVALID,
                                "pretraining: more than %d predicted positions in one batch",
                                ws->max_pred);
            ws->host_rows[M] = b * T + t;
            ws->host_labels[M] = lab;
            M++;
        }
    const float *x_out;
    int rc = bert_train_encode(cfg, p, ws->enc, ids, lengths, B, T, drop, &x_out, err);
    if (rc) return rc;
    ws->B = B;
    ws->T = T;
    ws->M = M;
    if (M) {
        TRY_BACKEND(be->upload(be, ws->rows, ws->host_rows, (size_t)M * sizeof(int)));
        TRY_BACKEND(be->upload(be, ws->labels, ws->host_labels, (size_t)M * sizeof(int)));
        /* hm(M,C) = x_out[rows] */
        TRY_BACKEND(be->gather_rows(be, ws->hm, x_out, ws->rows, M, C));
        /* y(M,C) = LN(GELU(hm · Wdᵀ + bd)) */
        TRY_BACKEND(be->linear(be, ws->t, ws->hm, h->dense_w, h->dense_b, M, C, C));
        TRY_BACKEND(be->gelu(be, ws->u, ws->t, (size_t)M * C));
        TRY_BACKEND(be->layernorm(be, ws->y, ws->mean, ws->rstd, ws->u, h->ln_w, h->ln_b, M, C,
                                  cfg->layer_norm_eps));
        /* logits(M,V) = y · word_embᵀ + bias; losses(M) = cross-entropy */
        TRY_BACKEND(be->linear(be, ws->logits, ws->y, p->word_emb, h->bias, M, C, V));
        TRY_BACKEND(be->cross_entropy(be, ws->losses, ws->probs, ws->logits, ws->labels, M, V));
        TRY_BACKEND(be->download(be, ws->host_losses, ws->losses, (size_t)M * sizeof(float)));
        TRY_BACKEND(be->synchronize(be));
    }
    double sum = 0.0;
    for (int i = 0; i < M; i++) sum += ws->host_losses[i];
    *loss_sum = sum;
    *n_predicted = M;
    ws->ready = 1;
    return SM_OK;
}

int bert_mlm_backward(const bert_config *cfg, const bert_params *p, const bert_mlm_params *h,
                      const bert_params *g, const bert_mlm_params *gh, bert_mlm_ws *ws,
                      float loss_scale, char *err)
{
    backend *be = ws->be;
    int C = ws->C, V = ws->V, M = ws->M, N = ws->B * ws->T;
    if (!ws->ready)
        return sm_error(err, SM_ERR_INVALID, "pretraining: backward without a forward pass");
    ws->ready = 0;
    if (!M) return SM_OK; /* nothing predicted: no gradient */
    /* losses = cross-entropy(logits): dlogits written over the logits */
    float *dlogits = ws->logits;
    TRY_BACKEND(be->cross_entropy_backward(be, dlogits, ws->probs, ws->labels, M, V, loss_scale));
    /* logits = y · word_embᵀ + bias: the tied weight's decoder share */
    TRY_BACKEND(be->linear_backward(be, ws->dy, g->word_emb, gh->bias, dlogits, ws->y, p->word_emb,
                                    M, C, V, 0));
    /* y = LN(u); u = GELU(t) (in place in dy) */
    TRY_BACKEND(be->layernorm_backward(be, ws->dy, gh->ln_w, gh->ln_b, ws->dy, ws->u, ws->mean,
                                       ws->rstd, h->ln_w, M, C));
    TRY_BACKEND(be->gelu_backward(be, ws->dy, ws->dy, ws->t, (size_t)M * C));
    /* t = hm · Wdᵀ + bd */
    TRY_BACKEND(be->linear_backward(be, ws->dhm, gh->dense_w, gh->dense_b, ws->dy, ws->hm,
                                    h->dense_w, M, C, C, 0));
    /* hm = x_out[rows]: the encoder's output gradient, 0 off the predicted rows */
    TRY_BACKEND(be->scatter_rows(be, bert_train_grad_out(ws->enc), ws->dhm, ws->rows, M, N, C));
    return bert_train_encode_backward(cfg, p, g, ws->enc, err);
}

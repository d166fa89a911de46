/* forward_pass.c: the encoder's forward pass, once for inference and training
 * (forward_pass.h), written against the backend table.
 *
 * Owns no memory: every buffer comes from the caller's encoder_acts. One
 * post-LN BERT layer is
 *   qkv = x_in · Wqkvᵀ + bqkv
 *   merged = per head dropout(softmax(q kᵀ / sqrt d, padding masked)) v
 *   x1 = LN1(dropout(merged · Woᵀ + bo) + x_in)
 *   x_out = LN2(dropout(GELU(x1 · W1ᵀ + b1) · W2ᵀ + b2) + x1)
 * and the embeddings are x = dropout(LN(word + position + type [+ task]
 * [+ a caller's offset, encoder_pass.r0_delta])).
 *
 * An inference pass whose batch has padding runs, on a backend that can
 * (the CPU), only the sequences' real rows (encoder_pass.unpadded_rows):
 * the rows are packed together after the embeddings, each layer's
 * row-wise ops run on them, attention within each sequence, and the last
 * hidden state is laid out (B,T,C) again with zero padding rows. Every
 * op but attention is row by row and attention never reads a padding row,
 * so the real rows get the same values, for less work: classify's
 * batches of reviews are about 15% padding.
 *
 * An inference pass whose caller reads only the [CLS] rows
 * (encoder_pass.cls_only: logits and pooled vectors, not hidden states)
 * runs, on a backend that can, its last layer for each sequence's first
 * row only: every row's keys and values are still needed, so the qkv
 * product runs on every row, then attention for the first query row of
 * each sequence, and the output product, LayerNorms and FFN on B rows,
 * which are the [CLS] vectors (a->cls). On BERT-base that leaves out 9 of
 * the last layer's 12 C² multiply-adds a token: 6% of the encoder's.
 */
#include "encoder/forward_pass.h"

#include <math.h>

#include "core/errors.h"
#include "core/rng.h"
#include "encoder/ws_arena.h" /* TRY_BACKEND */

uint64_t encoder_dropout_key(const encoder_pass *ps, unsigned site, size_t per_row)
{
    const bert_dropout *d = ps->drop;
    return rng_element_key(dropout_key(d->seed, d->step, site), (uint64_t)ps->row0 * per_row);
}

int encoder_check_tokens(const bert_config *cfg, const int *ids, const int *lengths, int B, int T,
                         const char *what, char *err)
{
    if (T + cfg->position_offset > cfg->max_position_embeddings)
        return sm_error(err, SM_ERR_INVALID, "%s: %d tokens exceed max_position_embeddings %d",
                        what, T, cfg->max_position_embeddings);
    for (int i = 0; i < B * T; i++)
        if (ids[i] < 0 || ids[i] >= cfg->vocab_size)
            return sm_error(err, SM_ERR_INVALID,
                            "%s: token id %d at %d is outside the vocabulary (%d)", what, ids[i], i,
                            cfg->vocab_size);
    for (int b = 0; b < B; b++)
        if (lengths[b] < 1 || lengths[b] > T)
            return sm_error(err, SM_ERR_INVALID, "%s: length %d of example %d is not in [1, %d]",
                            what, lengths[b], b, T);
    return SM_OK;
}

/* out(R,N) = in(R,K) · Wᵀ + b, by W's packed copy pw when there is one. */
static int linear(backend *be, float *out, const float *in, const float *W,
                  const backend_packed *pw, const float *b, int R, int K, int N)
{
    if (pw) return be->linear_packed(be, out, in, pw, b, R, K, N);
    return be->linear(be, out, in, W, b, R, K, N);
}

/* Whether a packed weight (NULL: none) is of a reduced-precision kind,
 * whose layer's attention may run its products in BF16 (attention_bf16). */
static int reduced_kind(const backend_packed *pw)
{
    return pw && (pw->kind == BACKEND_PACK_BF16 || pw->kind == BACKEND_PACK_INT8);
}

/* x = dropout(x) in place at a site of a training pass; nothing at
 * inference. */
static int dropout(backend *be, const encoder_pass *ps, float *x, size_t n, float prob,
                   unsigned site, size_t per_row)
{
    if (!ps->drop) return SM_OK;
    return be->dropout(be, x, x, n, prob, encoder_dropout_key(ps, site, per_row));
}

/* The rows this pass runs: ps->unpadded_rows where it may (an inference
 * pass on a backend with the slots), else B T. */
static int layer_rows(const backend *be, const encoder_pass *ps, int B, int T)
{
    int unpadded = !ps->drop && !ps->r0_delta && ps->unpadded_rows > 0 &&
                   ps->unpadded_rows < B * T && be->unpad_rows && be->pad_rows &&
                   be->attention_unpadded;
    return unpadded ? ps->unpadded_rows : B * T;
}

/* Whether the last layer runs each sequence's first row only (cls_only
 * asked, on a backend with the slots); its output is then a->cls. */
static int cls_rows_only(const backend *be, const bert_config *cfg, const encoder_pass *ps)
{
    return ps->cls_only && !ps->drop && cfg->num_hidden_layers > 0 && be->first_rows &&
           be->attention_first;
}

/* Layer l: a->x_in -> x_out, N rows (B T, or fewer: no padding rows);
 * cls: the last layer of a cls_rows_only pass, whose x_out is (B,C). */
static int layer_forward(backend *be, const bert_config *cfg, const bert_layer_params *lp,
                         const encoder_acts *e, layer_acts *a, float *x_out, int l,
                         const encoder_pass *ps, int B, int T, int N, int cls, char *err)
{
    int C = cfg->hidden_size, H = cfg->num_attention_heads, d = C / H;
    int F = cfg->intermediate_size;
    float scale = 1.0f / sqrtf((float)d);
    const bert_dropout *dr = ps->drop;
    int packed = dr == NULL; /* training runs FP32 weights only (backend.h) */
    int bf16 = packed && reduced_kind(lp->qkv_pw) && be->attention_bf16 != NULL;

    /* qkv(N,3C) = x_in · Wqkvᵀ + bqkv */
    TRY_BACKEND(linear(be, a->qkv, a->x_in, lp->qkv_w, packed ? lp->qkv_pw : NULL, lp->qkv_b, N, C,
                       3 * C));
    /* merged(N,C) = per head dropout(softmax(q kᵀ / sqrt(d))) v; for the
     * [CLS] rows only, merged(B,C) and x_in's first rows moved to its first
     * B rows, the N rows of what follows */
    if (cls) {
        TRY_BACKEND(be->attention_first(be, a->merged, a->att, a->qkv, e->lengths, B, T, H, d,
                                        scale, bf16, N < B * T));
        TRY_BACKEND(be->first_rows(be, a->x_in, e->lengths, B, T, C, N < B * T));
        N = B;
    } else if (dr)
        TRY_BACKEND(be->attention_train(be, a->merged, a->att, e->att_drop, a->qkv, e->lengths, B,
                                        T, H, d, scale, dr->attention,
                                        encoder_dropout_key(ps, SITE_ATTN(l), (size_t)H * T * T)));
    else if (N < B * T)
        TRY_BACKEND(be->attention_unpadded(be, a->merged, a->att, a->qkv, e->lengths, B, T, H, d,
                                           scale, bf16));
    else if (bf16)
        TRY_BACKEND(be->attention_bf16(be, a->merged, a->att, a->qkv, e->lengths, B, T, H, d,
                                       scale));
    else TRY_BACKEND(be->attention(be, a->merged, a->att, a->qkv, e->lengths, B, T, H, d, scale));
    size_t NC = (size_t)N * C;
    /* r1(N,C) = dropout(merged · Woᵀ + bo) + x_in; x1 = LN1(r1) */
    TRY_BACKEND(linear(be, a->r1, a->merged, lp->attn_out_w, packed ? lp->attn_out_pw : NULL,
                       lp->attn_out_b, N, C, C));
    TRY_BACKEND(dropout(be, ps, a->r1, NC, dr ? dr->hidden : 0, SITE_HID1(l), (size_t)T * C));
    TRY_BACKEND(be->add(be, a->r1, a->r1, a->x_in, NC));
    TRY_BACKEND(be->layernorm(be, a->x1, a->mean1, a->rstd1, a->r1, lp->ln1_w, lp->ln1_b, N, C,
                              cfg->layer_norm_eps));
    /* h(N,F) = x1 · W1ᵀ + b1; g = GELU(h) */
    TRY_BACKEND(linear(be, a->h, a->x1, lp->ffn_in_w, packed ? lp->ffn_in_pw : NULL, lp->ffn_in_b,
                       N, C, F));
    TRY_BACKEND(be->gelu(be, a->g, a->h, (size_t)N * F));
    /* r2(N,C) = dropout(g · W2ᵀ + b2) + x1; x_out = LN2(r2) */
    TRY_BACKEND(linear(be, a->r2, a->g, lp->ffn_out_w, packed ? lp->ffn_out_pw : NULL,
                       lp->ffn_out_b, N, F, C));
    TRY_BACKEND(dropout(be, ps, a->r2, NC, dr ? dr->hidden : 0, SITE_HID2(l), (size_t)T * C));
    TRY_BACKEND(be->add(be, a->r2, a->r2, a->x1, NC));
    TRY_BACKEND(be->layernorm(be, x_out, a->mean2, a->rstd2, a->r2, lp->ln2_w, lp->ln2_b, N, C,
                              cfg->layer_norm_eps));
    return SM_OK;
}

int encoder_forward(backend *be, const bert_config *cfg, const bert_params *p,
                    const encoder_acts *e, const encoder_pass *ps, int B, int T, char *err)
{
    int C = cfg->hidden_size, N = layer_rows(be, ps, B, T), L = cfg->num_hidden_layers;
    const bert_dropout *dr = ps->drop;

    /* x_in[0](N,C) = dropout(LN(word + position + type [+ task])), the
     * padding rows dropped first when N < B T */
    float *x0 = L ? e->layers[0].x_in : e->x_out;
    TRY_BACKEND(be->embed(be, e->r0, e->ids, NULL, p->word_emb, p->pos_emb, p->type_emb,
                          p->task_emb, B, T, C, cfg->position_offset));
    if (ps->r0_delta) TRY_BACKEND(be->add(be, e->r0, e->r0, ps->r0_delta, (size_t)N * C));
    if (N < B * T) TRY_BACKEND(be->unpad_rows(be, e->r0, e->lengths, B, T, C));
    TRY_BACKEND(be->layernorm(be, x0, e->mean0, e->rstd0, e->r0, p->emb_ln_w, p->emb_ln_b, N, C,
                              cfg->layer_norm_eps));
    TRY_BACKEND(dropout(be, ps, x0, (size_t)N * C, dr ? dr->hidden : 0, SITE_EMB, (size_t)T * C));
    int cls = cls_rows_only(be, cfg, ps);
    for (int l = 0; l < L; l++) {
        layer_acts *a = &e->layers[e->per_layer ? l : 0];
        int last = l + 1 == L;
        float *out = last ? (cls ? e->cls : e->x_out) : e->layers[e->per_layer ? l + 1 : 0].x_in;
        int rc = layer_forward(be, cfg, &p->layers[l], e, a, out, l, ps, B, T, N, last && cls, err);
        if (rc) return rc;
    }
    if (N < B * T && !cls) TRY_BACKEND(be->pad_rows(be, e->x_out, e->lengths, B, T, C));
    return SM_OK;
}

int encoder_head_forward(backend *be, const bert_config *cfg, const bert_params *p,
                         const encoder_acts *e, const encoder_pass *ps, int B, int T,
                         int with_logits, char *err)
{
    int C = cfg->hidden_size, K = cfg->num_labels;
    const bert_dropout *dr = ps->drop;

    /* pooled(B,C) = tanh(x[:,0,:] · Wpᵀ + bp); a RoBERTa head
     * (RobertaClassificationHead) drops out x[:,0,:] first:
     * pooled = tanh(dropout(x[:,0,:]) · Wdᵀ + bd) */
    if (!cls_rows_only(be, cfg, ps)) TRY_BACKEND(be->gather_cls(be, e->cls, e->x_out, B, T, C));
    const float *head_in = e->cls;
    if (dr && bert_config_is_roberta(cfg)) {
        TRY_BACKEND(be->dropout(be, e->cls_drop, e->cls, (size_t)B * C, dr->classifier,
                                encoder_dropout_key(ps, SITE_CLS_IN, (size_t)C)));
        head_in = e->cls_drop;
    }
    TRY_BACKEND(be->linear(be, e->pooled, head_in, p->pool_w, p->pool_b, B, C, C));
    TRY_BACKEND(be->tanh(be, e->pooled, e->pooled, (size_t)B * C));
    if (!with_logits) return SM_OK;
    /* logits(B,K) = dropout(pooled) · Wcᵀ + bc */
    const float *cls_in = e->pooled;
    if (dr) {
        TRY_BACKEND(be->dropout(be, e->pooled_drop, e->pooled, (size_t)B * C, dr->classifier,
                                encoder_dropout_key(ps, SITE_CLS, (size_t)C)));
        cls_in = e->pooled_drop;
    }
    TRY_BACKEND(be->linear(be, e->logits, cls_in, p->cls_w, p->cls_b, B, C, K));
    return SM_OK;
}

/* bert_packed.c: a model's encoder weights packed for inference by a
 * backend (pack_weight, backend.h): BF16, INT8 or packed FP32.
 *
 * Makes and owns the packed copies of each layer's four matrices and the
 * bert_params view that points at them (bert.h, bert_params_pack);
 * everything else in the view is borrowed from the FP32 parameters. Also
 * says which matrices a precision setting packs (bert_pack_plan).
 */
#include "encoder/bert.h"

#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

void bert_pack_plan(bert_precision precision, bert_precision plan[BERT_PACK_N])
{
    for (int i = 0; i < BERT_PACK_N; i++) plan[i] = precision;
}

/* The backend's kind for a precision of a plan; 0 for BERT_FP32. */
static int pack_kind(bert_precision precision)
{
    switch (precision) {
    case BERT_BF16: return BACKEND_PACK_BF16;
    case BERT_INT8: return BACKEND_PACK_INT8;
    case BERT_FP32_PACKED: return BACKEND_PACK_F32;
    default: return 0;
    }
}

bert_precision bert_precision_of_pack_kind(int kind)
{
    switch (kind) {
    case BACKEND_PACK_BF16: return BERT_BF16;
    case BACKEND_PACK_INT8: return BERT_INT8;
    case BACKEND_PACK_F32: return BERT_FP32_PACKED;
    default: return BERT_FP32;
    }
}

void bert_packed_params_free(bert_packed_params *pp)
{
    if (!pp) return;
    for (int i = 0; i < pp->n_w; i++) backend_packed_free(pp->w[i]);
    free(pp->w);
    free(pp->p.layers);
    free(pp);
}

int bert_params_pack(backend *be, const bert_config *cfg, const bert_params *src,
                     const bert_precision plan[BERT_PACK_N], bert_packed_params **out, char *err)
{
    int L = cfg->num_hidden_layers, C = cfg->hidden_size, F = cfg->intermediate_size, rc;
    *out = NULL;
    for (int i = 0; i < BERT_PACK_N; i++)
        if (plan[i] < BERT_FP32 || plan[i] >= BERT_N_PRECISIONS)
            return sm_error(err, SM_ERR_INVALID, "packing: unknown precision %d", (int)plan[i]);
    for (int i = 0; i < BERT_PACK_N; i++)
        if (plan[i] != BERT_FP32 && (!be || !be->pack_weight || !be->linear_packed))
            return sm_error(err, SM_ERR_UNSUPPORTED,
                            "packing: the %s backend has no packed weights; use fp32 weights",
                            be ? be->name : "(no)");
    bert_packed_params *pp = calloc(1, sizeof *pp);
    if (!pp) return sm_error(err, SM_ERR_NOMEM, "out of memory packing weights");
    pp->p = *src;
    pp->p.layers = L > 0 ? malloc((size_t)L * sizeof *pp->p.layers) : NULL;
    pp->w = L > 0 ? calloc((size_t)L * BERT_PACK_N, sizeof *pp->w) : NULL;
    if (L > 0 && (!pp->p.layers || !pp->w)) {
        bert_packed_params_free(pp);
        return sm_error(err, SM_ERR_NOMEM, "out of memory packing weights");
    }
    if (L > 0) memcpy(pp->p.layers, src->layers, (size_t)L * sizeof *pp->p.layers);
    for (int l = 0; l < L; l++) {
        bert_layer_params *lp = &pp->p.layers[l];
        struct {
            const float *W;
            int N, K;
            const backend_packed **dst;
        } mats[BERT_PACK_N] = {
            [BERT_PACK_QKV] = {lp->qkv_w, 3 * C, C, &lp->qkv_pw},
            [BERT_PACK_ATTN_OUT] = {lp->attn_out_w, C, C, &lp->attn_out_pw},
            [BERT_PACK_FFN_IN] = {lp->ffn_in_w, F, C, &lp->ffn_in_pw},
            [BERT_PACK_FFN_OUT] = {lp->ffn_out_w, C, F, &lp->ffn_out_pw},
        };
        for (int i = 0; i < BERT_PACK_N; i++) {
            backend_packed **pw = &pp->w[pp->n_w++];
            int kind = pack_kind(plan[i]);
            if (kind &&
                (rc = be->pack_weight(be, kind, mats[i].W, mats[i].N, mats[i].K, pw, err))) {
                *pw = NULL;
                bert_packed_params_free(pp);
                return rc;
            }
            *mats[i].dst = *pw;
        }
    }
    *out = pp;
    return SM_OK;
}

/* bert_packed.c: a model's encoder weights packed for inference: BF16
 * (gemm_bf16.h), INT8 (gemm_int8.h) or FP32 (gemm_f32.h).
 *
 * Makes and owns the packed copies of each layer's four matrices and the
 * bert_params view that points at them (bert.h, bert_params_pack);
 * everything else in the view is borrowed from the FP32 parameters. Also
 * says which matrices a precision setting packs (bert_pack_plan) and what
 * FP32 inference on the CPU runs (bert_fp32_packing).
 */
#include "bert.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "gemm_bf16.h"
#include "gemm_f32.h"
#include "gemm_int8.h"

void bert_pack_plan(bert_precision precision, bert_precision plan[BERT_PACK_N])
{
    for (int i = 0; i < BERT_PACK_N; i++) plan[i] = precision;
}

bert_precision bert_fp32_packing(void)
{
    const char *env = getenv("SENTIMENT_FP32_PACKED");
    if (env && !strcmp(env, "0")) return BERT_FP32;
    if (env && !strcmp(env, "1")) return BERT_FP32_PACKED;
    return gemm_f32_supported() ? BERT_FP32_PACKED : BERT_FP32;
}

void bert_packed_params_free(bert_packed_params *pp)
{
    if (!pp) return;
    for (int i = 0; i < pp->n_w; i++) {
        gemm_bf16_free((gemm_bf16_weight *)pp->w[i].bf16);
        gemm_int8_free((gemm_int8_weight *)pp->w[i].int8);
        gemm_f32_free((gemm_f32_weight *)pp->w[i].f32);
    }
    free(pp->w);
    free(pp->p.layers);
    free(pp);
}

/* Packs W(N,K) as kind into *pw (left empty for BERT_FP32). */
static int pack_one(bert_precision kind, const float *W, int N, int K, bert_packed_weight *pw,
                    char *err)
{
    int rc = SM_OK;
    memset(pw, 0, sizeof *pw);
    if (kind == BERT_BF16) {
        gemm_bf16_weight *w;
        if (!(rc = gemm_bf16_pack(W, N, K, &w, err))) pw->bf16 = w;
    } else if (kind == BERT_INT8) {
        gemm_int8_weight *w;
        if (!(rc = gemm_int8_pack(W, N, K, &w, err))) pw->int8 = w;
    } else if (kind == BERT_FP32_PACKED) {
        gemm_f32_weight *w;
        if (!(rc = gemm_f32_pack(W, N, K, &w, err))) pw->f32 = w;
    }
    return rc;
}

int bert_params_pack(const bert_config *cfg, const bert_params *src,
                     const bert_precision plan[BERT_PACK_N], bert_packed_params **out,
                     char *err)
{
    int L = cfg->num_hidden_layers, C = cfg->hidden_size, F = cfg->intermediate_size, rc;
    *out = NULL;
    for (int i = 0; i < BERT_PACK_N; i++)
        if (plan[i] < BERT_FP32 || plan[i] >= BERT_N_PRECISIONS)
            return sm_error(err, SM_ERR_INVALID, "packing: unknown precision %d", (int)plan[i]);
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
            bert_packed_weight *dst;
        } mats[BERT_PACK_N] = {
            [BERT_PACK_QKV] = {lp->qkv_w, 3 * C, C, &lp->qkv_pw},
            [BERT_PACK_ATTN_OUT] = {lp->attn_out_w, C, C, &lp->attn_out_pw},
            [BERT_PACK_FFN_IN] = {lp->ffn_in_w, F, C, &lp->ffn_in_pw},
            [BERT_PACK_FFN_OUT] = {lp->ffn_out_w, C, F, &lp->ffn_out_pw},
        };
        for (int i = 0; i < BERT_PACK_N; i++) {
            bert_packed_weight *pw = &pp->w[pp->n_w++];
            if ((rc = pack_one(plan[i], mats[i].W, mats[i].N, mats[i].K, pw, err))) {
                bert_packed_params_free(pp);
                return rc;
            }
            *mats[i].dst = *pw;
        }
    }
    *out = pp;
    return SM_OK;
}

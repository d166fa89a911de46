/* bert_bf16.c: a model's encoder weights rounded to BF16 for inference.
 *
 * Makes and owns the packed BF16 copies of each layer's four matrices and
 * the bert_params view that points at them (bert.h, bert_params_bf16);
 * everything else in the view is borrowed from the FP32 parameters.
 */
#include "bert.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "gemm_bf16.h"

void bert_bf16_params_free(bert_bf16_params *bp)
{
    if (!bp) return;
    for (int i = 0; i < bp->n_w; i++) gemm_bf16_free(bp->w[i]);
    free(bp->w);
    free(bp->p.layers);
    free(bp);
}

int bert_params_bf16(const bert_config *cfg, const bert_params *src,
                     bert_bf16_params **out, char *err)
{
    int L = cfg->num_hidden_layers, C = cfg->hidden_size, F = cfg->intermediate_size, rc;
    *out = NULL;
    bert_bf16_params *bp = calloc(1, sizeof *bp);
    if (!bp) return sm_error(err, SM_ERR_NOMEM, "out of memory making bf16 weights");
    bp->p = *src;
    bp->p.layers = L > 0 ? malloc((size_t)L * sizeof *bp->p.layers) : NULL;
    bp->w = L > 0 ? calloc((size_t)L * 4, sizeof *bp->w) : NULL;
    if (L > 0 && (!bp->p.layers || !bp->w)) {
        bert_bf16_params_free(bp);
        return sm_error(err, SM_ERR_NOMEM, "out of memory making bf16 weights");
    }
    if (L > 0) memcpy(bp->p.layers, src->layers, (size_t)L * sizeof *bp->p.layers);
    for (int l = 0; l < L; l++) {
        bert_layer_params *lp = &bp->p.layers[l];
        struct {
            const float *W;
            int N, K;
            const struct gemm_bf16_weight **dst;
        } mats[4] = {
            {lp->qkv_w, 3 * C, C, &lp->qkv_w16},
            {lp->attn_out_w, C, C, &lp->attn_out_w16},
            {lp->ffn_in_w, F, C, &lp->ffn_in_w16},
            {lp->ffn_out_w, C, F, &lp->ffn_out_w16},
        };
        for (int i = 0; i < 4; i++) {
            gemm_bf16_weight *w;
            if ((rc = gemm_bf16_pack(mats[i].W, mats[i].N, mats[i].K, &w, err))) {
                bert_bf16_params_free(bp);
                return rc;
            }
            bp->w[bp->n_w++] = w;
            *mats[i].dst = w;
        }
    }
    *out = bp;
    return SM_OK;
}

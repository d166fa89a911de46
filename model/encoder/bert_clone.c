/* bert_clone.c: copies of a bert_model, member by member, and the head's
 * classes reordered (bert_clone.h).
 *
 * What a bert_model owns, and so what a copy copies: the config's label
 * strings (the rest of bert_config, the pooling setting too, is plain
 * values), the F32 arena of n_floats parameters, the views into it
 * (bert_params, bound again into the copy's arena by the same size table,
 * and its layers array), the tokenizer (tokenizer_clone) and the
 * tokenizer.json bytes it was read from, and the wide part (wide_part_clone).
 * Nothing is serialised: the arena
 * is copied as it is, so the copy's arithmetic is the source's.
 */
#include "encoder/bert_clone.h"

#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

/* id2label copied string by string (not through bert_config_set_labels:
 * the copy must hold what the source holds, checked or not). */
static int copy_config(const bert_config *src, bert_config *dst, char *err)
{
    *dst = *src;
    dst->id2label = NULL;
    dst->num_labels = 0;
    if (!src->id2label) return SM_OK;
    dst->id2label = calloc(src->num_labels ? (size_t)src->num_labels : 1, sizeof *dst->id2label);
    if (!dst->id2label) return sm_error(err, SM_ERR_NOMEM, "out of memory copying the labels");
    for (int i = 0; i < src->num_labels; i++, dst->num_labels++) {
        if (!src->id2label[i]) continue;
        if (!(dst->id2label[i] = strdup(src->id2label[i]))) {
            dst->num_labels = i;
            return sm_error(err, SM_ERR_NOMEM, "out of memory copying the labels");
        }
    }
    return SM_OK;
}

int bert_model_clone(const bert_model *src, bert_model **out, char *err)
{
    bert_param_spec *specs = NULL;
    int n_specs = 0, rc;
    size_t total = 0;

    *out = NULL;
    /* the arena must be what the views are bound from */
    if ((rc = bert_param_table(&src->cfg, src->has_head, &specs, &n_specs, &total, err))) return rc;
    free(specs);
    if (total != src->n_floats)
        return sm_error(err, SM_ERR_INVALID,
                        "cannot copy the model: its arena holds %zu parameters, its config "
                        "%zu",
                        src->n_floats, total);
    bert_model *m = calloc(1, sizeof *m);
    if (!m) return sm_error(err, SM_ERR_NOMEM, "out of memory copying a model");
    if ((rc = copy_config(&src->cfg, &m->cfg, err))) goto fail;
    m->has_head = src->has_head;
    m->n_floats = src->n_floats;
    m->arena = malloc((m->n_floats ? m->n_floats : 1) * sizeof *m->arena);
    if (!m->arena) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory: %zu parameters", m->n_floats);
        goto fail;
    }
    memcpy(m->arena, src->arena, m->n_floats * sizeof *m->arena);
    if ((rc = bert_params_bind(&m->cfg, m->has_head, m->arena, &m->p, err))) goto fail;
    if (src->tok && (rc = tokenizer_clone(src->tok, &m->tok, err))) goto fail;
    if (src->tokenizer_json) {
        m->tokenizer_json = malloc(src->tokenizer_json_len + 1);
        if (!m->tokenizer_json) {
            rc = sm_error(err, SM_ERR_NOMEM, "out of memory copying tokenizer.json");
            goto fail;
        }
        memcpy(m->tokenizer_json, src->tokenizer_json, src->tokenizer_json_len);
        m->tokenizer_json[src->tokenizer_json_len] = 0;
        m->tokenizer_json_len = src->tokenizer_json_len;
    }
    if (src->wide && (rc = wide_part_clone(src->wide, &m->wide, err))) goto fail;
    *out = m;
    return SM_OK;
fail:
    bert_model_free(m);
    return rc;
}

int bert_model_permute_head(bert_model *m, const char *const *order, char *err)
{
    int K = m->cfg.num_labels, C = m->cfg.hidden_size, rc;
    int *from = NULL;
    float *w = NULL, *b = NULL, *ww = NULL;
    size_t WB = m->wide ? (size_t)m->wide->cfg.buckets : 0;

    if (!m->p.cls_w || !m->p.cls_b)
        return sm_error(err, SM_ERR_INVALID, "the model has no classification head");
    from = calloc(K ? (size_t)K : 1, sizeof *from);
    w = malloc((K ? (size_t)K : 1) * C * sizeof *w);
    b = malloc((K ? (size_t)K : 1) * sizeof *b);
    if (m->wide) ww = malloc((size_t)K * WB * sizeof *ww);
    if (!from || !w || !b || (m->wide && !ww)) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory");
        goto end;
    }
    /* every check before anything changes */
    for (int j = 0; j < K; j++) {
        int i = order[j] ? bert_config_label_index(&m->cfg, order[j]) : -1;
        if (i < 0) {
            rc = sm_error(err, SM_ERR_INVALID, "label '%s' is not in the head",
                          order[j] ? order[j] : "(null)");
            goto end;
        }
        for (int k = 0; k < j; k++)
            if (from[k] == i) {
                rc = sm_error(err, SM_ERR_INVALID, "label '%s' is named twice", order[j]);
                goto end;
            }
        from[j] = i;
    }
    for (int j = 0; j < K; j++) {
        memcpy(w + (size_t)j * C, m->p.cls_w + (size_t)from[j] * C, (size_t)C * sizeof *w);
        b[j] = m->p.cls_b[from[j]];
    }
    for (int j = 0; m->wide && j < K; j++)
        memcpy(ww + (size_t)j * WB, m->wide->weight + (size_t)from[j] * WB, WB * sizeof *ww);
    /* the labels first: replacing them is the step that can fail */
    if ((rc = bert_config_set_labels(&m->cfg, K, order, err))) goto end;
    memcpy(m->p.cls_w, w, (size_t)K * C * sizeof *w);
    memcpy(m->p.cls_b, b, (size_t)K * sizeof *b);
    if (m->wide) { /* the wide part's rows follow the head's */
        /* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): ww was made for m->wide */
        memcpy(m->wide->weight, ww, (size_t)K * WB * sizeof *ww);
        for (int j = 0; j < K; j++) b[j] = m->wide->bias[from[j]];
        memcpy(m->wide->bias, b, (size_t)K * sizeof *b);
    }
end:
    free(ww);
    free(from);
    free(w);
    free(b);
    return rc;
}

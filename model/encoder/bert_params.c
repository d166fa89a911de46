/* bert_params.c: the parameter size table and the views into the arena.
 *
 * bert_param_table() is the single description of where every tensor lives
 * in the float arena; loading, saving, binding the bert_params views and (for
 * training) the gradient and optimizer arenas all walk this one table.
 * Within a layer, query/key/value weights and then their biases are adjacent
 * so they act as one (3C, C) matrix and one (3C) bias.
 *
 * The head is the table's last rows. BERT and ERNIE: pooler.dense (C, C),
 * then classifier (K, C). RoBERTa and XLM-RoBERTa with a head:
 * classifier.dense (C, C) and classifier.out_proj (K, C), transformers'
 * RobertaClassificationHead, which has no pooler: out_proj(tanh(dense(h of
 * <s>))) is exactly classifier(pooler(h of [CLS])), so the two share the
 * pool_w/cls_w slots and the forward pass; only training's dropout differs
 * (bert_train.c). A RoBERTa encoder without a head keeps "pooler.dense".
 */
#include "encoder/bert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

typedef struct table_builder {
    bert_param_spec *specs;
    int n, cap;
    size_t total;
} table_builder;

static int add_spec(table_builder *tb, const char *name, int rows, int cols)
{
    if (tb->n == tb->cap) {
        int cap = tb->cap ? tb->cap * 2 : 64;
        bert_param_spec *s = realloc(tb->specs, (size_t)cap * sizeof *s);
        if (!s) return SM_ERR_NOMEM;
        tb->specs = s;
        tb->cap = cap;
    }
    bert_param_spec *s = &tb->specs[tb->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = cols ? 2 : 1;
    s->shape[0] = rows;
    s->shape[1] = cols;
    s->numel = (size_t)rows * (cols ? (size_t)cols : 1);
    /* Packed with no gaps, so query/key/value (and their biases) are one
     * contiguous block. */
    s->offset = tb->total;
    tb->total += s->numel;
    return SM_OK;
}

int bert_param_table(const bert_config *cfg, int with_head, bert_param_spec **specs, int *n_specs,
                     size_t *total, char *err)
{
    table_builder tb = {0};
    int C = cfg->hidden_size, F = cfg->intermediate_size;
    int rc = SM_OK;
    char name[96];

    *specs = NULL;
    *n_specs = 0;
    *total = 0;
#define ADD(nm, r, c)                                        \
    do {                                                     \
        if ((rc = add_spec(&tb, (nm), (r), (c)))) goto fail; \
    } while (0)
    ADD("embeddings.word_embeddings.weight", cfg->vocab_size, C);
    ADD("embeddings.position_embeddings.weight", cfg->max_position_embeddings, C);
    ADD("embeddings.token_type_embeddings.weight", cfg->type_vocab_size, C);
    if (cfg->use_task_id)
        ADD("embeddings.task_type_embeddings.weight", cfg->task_type_vocab_size, C);
    ADD("embeddings.LayerNorm.weight", C, 0);
    ADD("embeddings.LayerNorm.bias", C, 0);
    for (int l = 0; l < cfg->num_hidden_layers; l++) {
        static const char *const per_layer[][2] = {
            {"attention.self.query.weight", "CC"},
            {"attention.self.key.weight", "CC"},
            {"attention.self.value.weight", "CC"},
            {"attention.self.query.bias", "C"},
            {"attention.self.key.bias", "C"},
            {"attention.self.value.bias", "C"},
            {"attention.output.dense.weight", "CC"},
            {"attention.output.dense.bias", "C"},
            {"attention.output.LayerNorm.weight", "C"},
            {"attention.output.LayerNorm.bias", "C"},
            {"intermediate.dense.weight", "FC"},
            {"intermediate.dense.bias", "F"},
            {"output.dense.weight", "CF"},
            {"output.dense.bias", "C"},
            {"output.LayerNorm.weight", "C"},
            {"output.LayerNorm.bias", "C"},
        };
        for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
            const char *shape = per_layer[i][1];
            int rows = shape[0] == 'F' ? F : C;
            int cols = shape[1] == 0 ? 0 : (shape[1] == 'F' ? F : C);
            snprintf(name, sizeof name, "encoder.layer.%d.%s", l, per_layer[i][0]);
            ADD(name, rows, cols);
        }
    }
    if (with_head && bert_config_is_roberta(cfg)) {
        /* RobertaClassificationHead: the same two matrices in the same
         * slots (pool_w/b, cls_w/b), under the head's names */
        ADD("classifier.dense.weight", C, C);
        ADD("classifier.dense.bias", C, 0);
        ADD("classifier.out_proj.weight", cfg->num_labels, C);
        ADD("classifier.out_proj.bias", cfg->num_labels, 0);
    } else {
        ADD("pooler.dense.weight", C, C);
        ADD("pooler.dense.bias", C, 0);
        if (with_head) {
            ADD("classifier.weight", cfg->num_labels, C);
            ADD("classifier.bias", cfg->num_labels, 0);
        }
    }
#undef ADD
    *specs = tb.specs;
    *n_specs = tb.n;
    *total = tb.total;
    return SM_OK;
fail:
    free(tb.specs);
    return sm_error(err, rc, "out of memory building the parameter table");
}

int bert_params_bind(const bert_config *cfg, int with_head, float *arena, bert_params *p, char *err)
{
    bert_param_spec *specs;
    int n;
    size_t total;
    int rc = bert_param_table(cfg, with_head, &specs, &n, &total, err);
    if (rc) return rc;
    memset(p, 0, sizeof *p);
    p->layers = calloc((size_t)cfg->num_hidden_layers, sizeof *p->layers);
    if (!p->layers) {
        free(specs);
        return sm_error(err, SM_ERR_NOMEM, "out of memory binding parameters");
    }
    /* The table order is fixed above; walk it in step. */
    int i = 0;
#define NEXT() (arena + specs[i++].offset)
    p->word_emb = NEXT();
    p->pos_emb = NEXT();
    p->type_emb = NEXT();
    p->task_emb = cfg->use_task_id ? NEXT() : NULL;
    p->emb_ln_w = NEXT();
    p->emb_ln_b = NEXT();
    for (int l = 0; l < cfg->num_hidden_layers; l++) {
        bert_layer_params *lp = &p->layers[l];
        lp->qkv_w = NEXT();
        i += 2; /* key, value weights follow query's */
        lp->qkv_b = NEXT();
        i += 2;
        lp->attn_out_w = NEXT();
        lp->attn_out_b = NEXT();
        lp->ln1_w = NEXT();
        lp->ln1_b = NEXT();
        lp->ffn_in_w = NEXT();
        lp->ffn_in_b = NEXT();
        lp->ffn_out_w = NEXT();
        lp->ffn_out_b = NEXT();
        lp->ln2_w = NEXT();
        lp->ln2_b = NEXT();
    }
    p->pool_w = NEXT();
    p->pool_b = NEXT();
    if (with_head) {
        p->cls_w = NEXT();
        p->cls_b = NEXT();
    }
#undef NEXT
    free(specs);
    return SM_OK;
}

void bert_params_release(bert_params *p)
{
    if (!p) return;
    free(p->layers);
    p->layers = NULL;
}

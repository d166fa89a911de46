/* model_init.c: the models fine-tuning starts from (model_init.h): a
 * base's classification head fitted to the labels (kept, or a fresh one),
 * and a randomly initialised model for training from scratch. New weights
 * are seeded splitmix64 draws (rng.h). Allocates only what it hands to the
 * model.
 */
#include "train/model_init.h"

#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/rng.h"
#include "tokenize/tokenizer.h"

int trainer_prepare_head(bert_model *m, int n, const char *const *labels, uint64_t seed, int *kept,
                         char *err)
{
    *kept = 0;
    if (n < 2 || n > BERT_MAX_LABELS)
        return sm_error(err, SM_ERR_INVALID, "training needs 2..%d distinct labels, got %d",
                        BERT_MAX_LABELS, n);
    if (m->has_head && m->cfg.num_labels == n) {
        int same = 1;
        for (int i = 0; i < n && same; i++) same = bert_config_label_index(&m->cfg, labels[i]) >= 0;
        if (same) {
            *kept = 1;
            return SM_OK;
        }
    }
    bert_config tmp = m->cfg;
    tmp.num_labels = n;
    bert_param_spec *specs = NULL, *base_specs = NULL;
    int n_specs, n_base, rc;
    size_t total, base_total;
    if ((rc = bert_param_table(&tmp, 1, &specs, &n_specs, &total, err))) return rc;
    if ((rc = bert_param_table(&tmp, 0, &base_specs, &n_base, &base_total, err))) {
        free(specs);
        return rc;
    }
    free(base_specs);
    float *arena = malloc(total * sizeof *arena);
    if (!arena) {
        free(specs);
        return sm_error(err, SM_ERR_NOMEM, "out of memory for a new head (%zu parameters)", total);
    }
    memcpy(arena, m->arena, base_total * sizeof *arena);
    /* The head is the table's last two rows: classifier.weight (K,C), bias
     * (K) (classifier.out_proj for RoBERTa). */
    uint64_t s = rng_mix64(seed ^ 0x4EAD5EEDull);
    const bert_param_spec *w = &specs[n_specs - 2], *b = &specs[n_specs - 1];
    rng_fill_normal(arena + w->offset, w->numel, 0.02, &s);
    memset(arena + b->offset, 0, b->numel * sizeof *arena);
    if (bert_config_is_roberta(&m->cfg) && !m->has_head) {
        /* RobertaClassificationHead on an encoder: classifier.dense is new
         * too (transformers initialises it; an encoder's pooler, if it had
         * one, is not part of the classifier), normal(0, 0.02), bias 0. A
         * head with other labels keeps its dense layer, as transformers
         * keeps every tensor whose shape still fits. */
        const bert_param_spec *dw = &specs[n_specs - 4], *db = &specs[n_specs - 3];
        rng_fill_normal(arena + dw->offset, dw->numel, 0.02, &s);
        memset(arena + db->offset, 0, db->numel * sizeof *arena);
    }
    free(specs);

    bert_params p;
    if ((rc = bert_params_bind(&tmp, 1, arena, &p, err))) {
        free(arena);
        return rc;
    }
    if ((rc = bert_config_set_labels(&m->cfg, n, labels, err))) {
        bert_params_release(&p);
        free(arena);
        return rc;
    }
    bert_params_release(&m->p);
    free(m->arena);
    m->arena = arena;
    m->n_floats = total;
    m->p = p;
    m->has_head = 1;
    /* a wide part's rows are the old labels': it goes with the old head */
    wide_part_free(m->wide);
    m->wide = NULL;
    m->cfg.wide.set = 0;
    m->cfg.int8_check.set = 0;
    return SM_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int bert_model_create_scratch(const bert_shape *shape, const char *vocab, size_t vocab_len,
                              int do_lower_case, int n_labels, const char *const *labels,
                              uint64_t seed, bert_model **out, char *err)
{
    *out = NULL;
    if (shape->layers < 1 || shape->layers > 48 || shape->hidden < 8 || shape->hidden > 4096 ||
        shape->heads < 1 || shape->hidden % shape->heads || shape->intermediate < 1 ||
        shape->intermediate > 16384 || shape->max_length < 2 || shape->max_length > 8192)
        return sm_error(err, SM_ERR_INVALID,
                        "model shape: layers %d (1..48), hidden %d (8..4096, a multiple of heads "
                        "%d), intermediate %d (1..16384), max_length %d (2..8192)",
                        shape->layers, shape->hidden, shape->heads, shape->intermediate,
                        shape->max_length);
    bert_model *m = calloc(1, sizeof *m);
    if (!m) return sm_error(err, SM_ERR_NOMEM, "out of memory creating a model");
    bert_config_init(&m->cfg);
    int rc = tokenizer_load_buffer(vocab, vocab_len, do_lower_case, &m->tok, err);
    if (rc) goto fail;
    m->cfg.vocab_size = tokenizer_vocab_size(m->tok);
    m->cfg.hidden_size = shape->hidden;
    m->cfg.num_hidden_layers = shape->layers;
    m->cfg.num_attention_heads = shape->heads;
    m->cfg.intermediate_size = shape->intermediate;
    m->cfg.max_position_embeddings = shape->max_length;
    m->cfg.pad_token_id = tokenizer_pad_id(m->tok);
    m->cfg.do_lower_case = do_lower_case;
    if ((rc = bert_config_set_labels(&m->cfg, n_labels, labels, err))) goto fail;

    bert_param_spec *specs;
    int n;
    size_t total;
    if ((rc = bert_param_table(&m->cfg, 1, &specs, &n, &total, err))) goto fail;
    m->arena = malloc(total * sizeof *m->arena);
    if (!m->arena) {
        free(specs);
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory: %zu parameters", total);
        goto fail;
    }
    m->n_floats = total;
    uint64_t s = rng_mix64(seed ^ 0x5C4A7C4ull);
    for (int i = 0; i < n; i++) {
        float *x = m->arena + specs[i].offset;
        if (ends_with(specs[i].name, "LayerNorm.weight")) {
            for (size_t k = 0; k < specs[i].numel; k++) x[k] = 1.0f;
        } else if (ends_with(specs[i].name, ".bias")) {
            memset(x, 0, specs[i].numel * sizeof *x);
        } else {
            rng_fill_normal(x, specs[i].numel, 0.02, &s);
        }
    }
    /* transformers zeroes the padding token's embedding */
    memset(m->arena + specs[0].offset + (size_t)m->cfg.pad_token_id * shape->hidden, 0,
           (size_t)shape->hidden * sizeof(float));
    free(specs);
    m->has_head = 1;
    if ((rc = bert_params_bind(&m->cfg, 1, m->arena, &m->p, err))) goto fail;
    *out = m;
    return SM_OK;
fail:
    bert_model_free(m);
    return rc;
}

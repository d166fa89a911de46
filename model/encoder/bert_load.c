/* bert_load.c: Hugging Face checkpoint <-> bert_model.
 *
 * Loads config.json + the tokenizer (vocab.txt or tokenizer.json) +
 * model.safetensors (from a directory or from memory) into one F32 arena
 * laid out by bert_param_table, checking every tensor's dtype, shape and
 * finiteness (a NaN or infinite weight is an error), and saves a model back
 * as safetensors with the same names (a non-finite weight is an error there
 * too). Accepts the "bert.", "ernie." and "roberta." prefixes (or none),
 * the old LayerNorm gamma/beta names, and ignores only the position_ids
 * buffer and pre-training heads ("cls.", "lm_head."); any other unknown
 * tensor is an error.
 *
 * A model whose config.json has a "wide" key (wide_config.h) has its wide
 * part's tensors too: wide.weight (K, buckets), wide.bias (K) and, with
 * idf, wide.idf (buckets), read into m->wide and written back under the
 * same names (transformers ignores them, with a warning; see
 * sentiment_export). Without the key they are unexpected tensors.
 *
 * RoBERTa and XLM-RoBERTa (bert_config_is_roberta): the head is
 * RobertaClassificationHead, classifier.dense + classifier.out_proj with no
 * pooler (a "roberta.pooler" next to it is ignored, as transformers does);
 * the head this project wrote before, the pooler + "classifier.weight",
 * loads into the same slots. An encoder without a head (XLMRobertaModel,
 * such as multilingual-e5) may lack the pooler: it is then initialised as
 * transformers initialises a missing one, and train() replaces it with a
 * new classifier.dense anyway (trainer_prepare_head).
 *
 * A directory's sentence-transformers modules.json and Pooling config
 * (pooling.h) give the model its pooling setting. Owns nothing beyond the
 * bert_model it returns.
 */
#include "encoder/bert.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/rng.h"
#include "format/model_dir.h"
#include "format/safetensors.h"

static const char *const k_prefixes[] = {"bert.", "ernie.", "roberta.", ""};

static const char *save_prefix(const bert_config *cfg)
{
    if (!strcmp(cfg->model_type, "ernie")) return "ernie.";
    if (bert_config_is_roberta(cfg)) return "roberta.";
    return "bert.";
}

/* The checkpoint name for a table entry: the head is unprefixed. */
static void checkpoint_name(char *out, size_t cap, const char *prefix, const char *name)
{
    if (!strncmp(name, "classifier.", 11)) snprintf(out, cap, "%s", name);
    else snprintf(out, cap, "%s%s", prefix, name);
}

void bert_checkpoint_name(const bert_config *cfg, const char *spec_name, char *out, size_t cap)
{
    checkpoint_name(out, cap, save_prefix(cfg), spec_name);
}

/* Finds a tensor by name, also under the legacy LayerNorm.gamma/beta names. */
static const st_tensor *find_tensor(const safetensors *st, const char *name)
{
    const st_tensor *t = safetensors_find(st, name);
    if (t) return t;
    const char *ln = strstr(name, "LayerNorm.");
    if (!ln) return NULL;
    char alt[160];
    const char *leaf = ln + 10;
    const char *legacy = !strcmp(leaf, "weight") ? "gamma" : !strcmp(leaf, "bias") ? "beta" : NULL;
    if (!legacy) return NULL;
    snprintf(alt, sizeof alt, "%.*s%s", (int)(leaf - name), name, legacy);
    return safetensors_find(st, alt);
}

/* A table entry's tensor in st: its checkpoint name, else (RoBERTa's head)
 * the name this project saved it under before it wrote transformers'
 * RobertaClassificationHead names: the pooler and "classifier.weight". */
static const st_tensor *find_entry(const safetensors *st, const char *prefix, const char *spec_name)
{
    char name[160];
    checkpoint_name(name, sizeof name, prefix, spec_name);
    const st_tensor *t = find_tensor(st, name);
    if (t || strncmp(spec_name, "classifier.", 11)) return t;
    if (!strncmp(spec_name, "classifier.dense.", 17))
        snprintf(name, sizeof name, "%spooler.dense.%s", prefix, spec_name + 17);
    else if (!strncmp(spec_name, "classifier.out_proj.", 20))
        snprintf(name, sizeof name, "classifier.%s", spec_name + 20);
    else return NULL;
    return find_tensor(st, name);
}

/* Tensors a checkpoint may hold that the model does not use. */
static int ignorable(const char *name, const char *prefix, int roberta_head)
{
    char buf[160];
    if (!strncmp(name, "cls.", 4)) return 1;     /* BERT MLM / NSP pre-training heads */
    if (!strncmp(name, "lm_head.", 8)) return 1; /* RoBERTa's MLM head */
    snprintf(buf, sizeof buf, "%sembeddings.position_ids", prefix);
    if (!strcmp(name, buf)) return 1;
    /* RobertaForSequenceClassification has no pooler; transformers drops
     * one found next to its head */
    snprintf(buf, sizeof buf, "%spooler.dense.", prefix);
    return roberta_head && !strncmp(name, buf, strlen(buf));
}

static void format_shape(char *out, size_t cap, int ndim, const int64_t *shape)
{
    size_t used = 0;
    used += (size_t)snprintf(out + used, cap - used, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < cap) snprintf(out + used, cap - used, "]");
}

/* normal(0, stddev) from a splitmix64 stream (a missing pooler's weights). */
static void init_normal(float *x, size_t n, double stddev, uint64_t seed)
{
    uint64_t s = seed;
    rng_fill_normal(x, n, stddev, &s);
}

int bert_check_finite(const char *name, const float *x, size_t n, char *err)
{
    /* One pass over the bits, in blocks: a float is NaN or infinite when
     * its exponent is all ones. The loop over a block vectorises; only a
     * block that has one is searched again. */
    const uint32_t *u = (const uint32_t *)(const void *)x;
    for (size_t b = 0; b < n; b += 1024) {
        size_t e = n - b < 1024 ? n : b + 1024;
        uint32_t any = 0;
        for (size_t i = b; i < e; i++) any |= (uint32_t)((u[i] & 0x7F800000u) == 0x7F800000u);
        if (!any) continue;
        for (size_t i = b; i < e; i++) {
            if ((u[i] & 0x7F800000u) != 0x7F800000u) continue;
            return sm_error(err, SM_ERR_FORMAT, "tensor '%s' has %s at element %zu", name,
                            isnan(x[i]) ? "a NaN"
                            : x[i] > 0  ? "an infinite value (+inf)"
                                        : "an infinite value (-inf)",
                            i);
        }
    }
    return SM_OK;
}

/* One wide-part tensor of st into x (numel floats, shape [d0] or [d0, d1]). */
static int load_wide_tensor(const safetensors *st, const char *name, int ndim, int d0, int d1,
                            float *x, char *err)
{
    const st_tensor *t = safetensors_find(st, name);
    char want[64], got[64];
    int64_t shape[2] = {d0, d1};
    if (!t)
        return sm_error(err, SM_ERR_FORMAT,
                        "model.safetensors: missing tensor '%s' (config.json has 'wide')", name);
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        format_shape(want, sizeof want, ndim, shape);
        format_shape(got, sizeof got, t->ndim, t->shape);
        return sm_error(err, SM_ERR_FORMAT,
                        "tensor '%s': expected shape %s, got %s (check config.json's 'wide')", name,
                        want, got);
    }
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16 && t->dtype != ST_F64)
        return sm_error(err, SM_ERR_FORMAT, "tensor '%s': dtype %s, expected F32, F16 or BF16",
                        name, st_dtype_name(t->dtype));
    int rc = st_tensor_to_f32(t, x, err);
    if (!rc) rc = bert_check_finite(name, x, (size_t)d0 * (ndim == 2 ? (size_t)d1 : 1), err);
    return rc;
}

/* m->wide from st when the config has a wide part. */
static int load_wide(bert_model *m, const safetensors *st, char *err)
{
    const sm_wide_config *wc = &m->cfg.wide;
    int rc, K = m->cfg.num_labels;
    if (!wc->set) return SM_OK;
    if ((rc = wide_part_create(wc, K, &m->wide, err))) return rc;
    if ((rc = load_wide_tensor(st, "wide.weight", 2, K, wc->buckets, m->wide->weight, err)) ||
        (rc = load_wide_tensor(st, "wide.bias", 1, K, 0, m->wide->bias, err)) ||
        (wc->idf && (rc = load_wide_tensor(st, "wide.idf", 1, wc->buckets, 0, m->wide->idf, err))))
        return rc;
    return SM_OK;
}

/* A wide-part tensor name the model reads (so not unexpected). */
static int is_wide_tensor(const bert_model *m, const char *name)
{
    if (!m->cfg.wide.set) return 0;
    return !strcmp(name, "wide.weight") || !strcmp(name, "wide.bias") ||
           (m->cfg.wide.idf && !strcmp(name, "wide.idf"));
}

/* Copies every table tensor from st into m->arena. With pooler_optional a
 * missing pooler is initialised (normal(0, 0.02) from seed, zero bias). */
static int load_tensors(bert_model *m, const safetensors *st, int pooler_optional, uint64_t seed,
                        char *err)
{
    const char *prefix = NULL;
    for (size_t i = 0; i < sizeof k_prefixes / sizeof *k_prefixes; i++) {
        char probe[160];
        snprintf(probe, sizeof probe, "%sembeddings.word_embeddings.weight", k_prefixes[i]);
        if (safetensors_find(st, probe)) {
            prefix = k_prefixes[i];
            break;
        }
    }
    if (!prefix)
        return sm_error(err, SM_ERR_FORMAT,
                        "model.safetensors: no tensor 'bert.embeddings.word_embeddings.weight' "
                        "(nor with an 'ernie.', 'roberta.' or no prefix)");

    int roberta = bert_config_is_roberta(&m->cfg);
    m->has_head = safetensors_find(st, "classifier.weight") != NULL ||
                  (roberta && safetensors_find(st, "classifier.out_proj.weight") != NULL);
    /* an encoder without a head may lack the pooler: RobertaModel built
     * with add_pooling_layer=False, multilingual-e5 converted without it */
    if (roberta && !m->has_head) pooler_optional = 1;
    bert_param_spec *specs = NULL;
    int n = 0, rc;
    size_t total;
    if ((rc = bert_param_table(&m->cfg, m->has_head, &specs, &n, &total, err))) return rc;
    m->arena = calloc(total ? total : 1, sizeof *m->arena);
    m->n_floats = total;
    if (!m->arena) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory: %zu parameters", total);
        goto end;
    }

    int matched = 0;
    for (int i = 0; i < n; i++) {
        char name[160], want[64], got[64];
        checkpoint_name(name, sizeof name, prefix, specs[i].name);
        const st_tensor *t = find_entry(st, prefix, specs[i].name);
        if (!t && pooler_optional && !strncmp(specs[i].name, "pooler.", 7)) {
            float *x = m->arena + specs[i].offset;
            if (specs[i].ndim == 2) init_normal(x, specs[i].numel, 0.02, seed);
            else memset(x, 0, specs[i].numel * sizeof *x);
            continue;
        }
        if (!t) {
            rc = sm_error(err, SM_ERR_FORMAT, "model.safetensors: missing tensor '%s'", name);
            goto end;
        }
        int64_t shape[2] = {specs[i].shape[0], specs[i].shape[1]};
        int ok = t->ndim == specs[i].ndim && t->shape[0] == shape[0] &&
                 (specs[i].ndim == 1 || t->shape[1] == shape[1]);
        if (!ok) {
            format_shape(want, sizeof want, specs[i].ndim, shape);
            format_shape(got, sizeof got, t->ndim, t->shape);
            rc = sm_error(err, SM_ERR_FORMAT,
                          "tensor '%s': expected shape %s, got %s (check config.json)", t->name,
                          want, got);
            goto end;
        }
        if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16 && t->dtype != ST_F64) {
            rc = sm_error(err, SM_ERR_FORMAT, "tensor '%s': dtype %s, expected F32, F16 or BF16",
                          t->name, st_dtype_name(t->dtype));
            goto end;
        }
        if ((rc = st_tensor_to_f32(t, m->arena + specs[i].offset, err))) goto end;
        if ((rc = bert_check_finite(t->name, m->arena + specs[i].offset, specs[i].numel, err)))
            goto end;
        matched++;
    }

    /* Everything in the file must have been used or be known to be ignorable. */
    if (matched != st->n_tensors) {
        int roberta_head = roberta && m->has_head;
        for (int j = 0; j < st->n_tensors; j++) {
            const char *tn = st->tensors[j].name;
            int used = 0;
            for (int i = 0; i < n && !used; i++)
                used = find_entry(st, prefix, specs[i].name) == &st->tensors[j];
            if (!used && (ignorable(tn, prefix, roberta_head) || is_wide_tensor(m, tn))) continue;
            if (!used) {
                rc = sm_error(err, SM_ERR_FORMAT,
                              "model.safetensors: unexpected tensor '%s' for a %d-layer %s model",
                              tn, m->cfg.num_hidden_layers, m->cfg.model_type);
                goto end;
            }
        }
    }
    rc = bert_params_bind(&m->cfg, m->has_head, m->arena, &m->p, err);
end:
    free(specs);
    return rc;
}

/* The tokenizer of f: tokenizer.json when given, else vocab.txt. A model
 * keeps its tokenizer.json to be stored and exported with. */
static int load_tokenizer(bert_model *m, const bert_files *f, char *err)
{
    int rc;
    const char *what = f->tokenizer_json ? "tokenizer.json" : "vocab.txt";
    if (f->tokenizer_json) {
        if ((rc = tokenizer_load_json_buffer(f->tokenizer_json, f->tokenizer_json_len, &m->tok,
                                             err)))
            return rc;
        m->tokenizer_json = malloc(f->tokenizer_json_len + 1);
        if (!m->tokenizer_json)
            return sm_error(err, SM_ERR_NOMEM, "out of memory keeping tokenizer.json");
        memcpy(m->tokenizer_json, f->tokenizer_json, f->tokenizer_json_len);
        m->tokenizer_json[f->tokenizer_json_len] = 0;
        m->tokenizer_json_len = f->tokenizer_json_len;
    } else if ((rc = tokenizer_load_buffer(f->vocab, f->vocab_len, m->cfg.do_lower_case, &m->tok,
                                           err))) {
        return rc;
    }
    if (tokenizer_vocab_size(m->tok) > m->cfg.vocab_size)
        return sm_error(err, SM_ERR_FORMAT, "%s has %d tokens but config.json says vocab_size %d",
                        what, tokenizer_vocab_size(m->tok), m->cfg.vocab_size);
    return SM_OK;
}

static int load_files(const bert_files *f, int pooler_optional, uint64_t seed, bert_model **out,
                      char *err)
{
    safetensors st = {0};
    int rc;
    *out = NULL;
    bert_model *m = calloc(1, sizeof *m);
    if (!m) return sm_error(err, SM_ERR_NOMEM, "out of memory loading a model");
    if ((rc = bert_config_parse(f->config, f->config_len, &m->cfg, err))) goto fail;
    if ((rc = load_tokenizer(m, f, err))) goto fail;
    if ((rc = safetensors_open_buffer(f->safetensors, f->safetensors_len, &st, err))) goto fail;
    if ((rc = load_tensors(m, &st, pooler_optional, seed, err))) goto fail;
    if ((rc = load_wide(m, &st, err))) goto fail;
    safetensors_close(&st);
    *out = m;
    return SM_OK;
fail:
    safetensors_close(&st);
    bert_model_free(m);
    return rc;
}

int bert_model_load_files(const bert_files *f, bert_model **out, char *err)
{
    return load_files(f, 0, 0, out, err);
}

int bert_model_load_buffers(const char *config_json, size_t config_len, const char *vocab,
                            size_t vocab_len, const void *st_bytes, size_t st_len, bert_model **out,
                            char *err)
{
    bert_files f = {config_json, config_len, vocab, vocab_len, NULL, 0, st_bytes, st_len};
    return load_files(&f, 0, 0, out, err);
}

int bert_model_load_buffers_mlm(const char *config_json, size_t config_len, const char *vocab,
                                size_t vocab_len, const void *st_bytes, size_t st_len,
                                uint64_t seed, bert_model **out, char *err)
{
    bert_files f = {config_json, config_len, vocab, vocab_len, NULL, 0, st_bytes, st_len};
    return load_files(&f, 1, seed, out, err);
}

int bert_model_load_dir(const char *dir, bert_model **out, char *err)
{
    return bert_model_load_dir_stoppable(dir, NULL, NULL, out, err);
}

int bert_model_load_dir_stoppable(const char *dir, int (*stop)(void *user), void *user,
                                  bert_model **out, char *err)
{
    model_dir d;
    sm_pooling pooling;
    int has_pooling = 0;
    *out = NULL;
    int rc = model_dir_open_stoppable(dir, stop, user, &d, err);
    if (!rc && stop && stop(user)) rc = sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
    if (!rc) rc = sm_pooling_read_dir(dir, &pooling, &has_pooling, err);
    if (!rc && stop && stop(user)) rc = sm_error(err, SM_ERR_INTERRUPTED, "interrupted");
    if (!rc) {
        bert_files f = {d.config,         d.config_len,         d.vocab,   d.vocab_len,
                        d.tokenizer_json, d.tokenizer_json_len, d.st.base, d.st.size};
        rc = bert_model_load_files(&f, out, err);
    }
    model_dir_close(&d);
    /* modules.json, when there is one, says how the model pools */
    if (!rc && has_pooling) rc = bert_model_set_pooling(*out, &pooling, err);
    if (rc) {
        bert_model_free(*out);
        *out = NULL;
    }
    return rc;
}

int bert_model_set_pooling(bert_model *m, const sm_pooling *pooling, char *err)
{
    if (pooling->dim && pooling->dim != m->cfg.hidden_size)
        return sm_error(err, SM_ERR_FORMAT,
                        "%s/config.json: word_embedding_dimension %d, but the encoder's "
                        "hidden_size is %d",
                        SM_POOLING_DIR, pooling->dim, m->cfg.hidden_size);
    m->cfg.pooling = *pooling;
    m->cfg.pooling.set = 1;
    return SM_OK;
}

int bert_model_tokenizer_file(const bert_model *m, const char **name, char **text, size_t *len,
                              char *err)
{
    *text = NULL;
    *len = 0;
    if (m->tokenizer_json) {
        *name = "tokenizer.json";
        if (!(*text = malloc(m->tokenizer_json_len + 1)))
            return sm_error(err, SM_ERR_NOMEM, "out of memory copying tokenizer.json");
        memcpy(*text, m->tokenizer_json, m->tokenizer_json_len);
        (*text)[m->tokenizer_json_len] = 0;
        *len = m->tokenizer_json_len;
        return SM_OK;
    }
    *name = "vocab.txt";
    int n = tokenizer_vocab_size(m->tok);
    size_t cap = 1;
    for (int i = 0; i < n; i++) {
        const char *t = tokenizer_token(m->tok, i);
        cap += (t ? strlen(t) : 0) + 1;
    }
    char *p = *text = malloc(cap);
    if (!p) return sm_error(err, SM_ERR_NOMEM, "out of memory writing vocab.txt");
    for (int i = 0; i < n; i++) {
        const char *t = tokenizer_token(m->tok, i);
        size_t l = t ? strlen(t) : 0;
        memcpy(p, t ? t : "", l);
        p += l;
        *p++ = '\n';
    }
    *p = 0;
    *len = (size_t)(p - *text);
    return SM_OK;
}

void bert_model_free(bert_model *m)
{
    if (!m) return;
    bert_params_release(&m->p);
    free(m->arena);
    tokenizer_free(m->tok);
    free(m->tokenizer_json);
    wide_part_free(m->wide);
    bert_config_free(&m->cfg);
    free(m);
}

size_t bert_model_num_params(const bert_model *m)
{
    return m->n_floats + (m->wide ? wide_part_num_params(m->wide) : 0);
}

int bert_model_save_safetensors(const bert_model *m, int dtype, void **out, size_t *out_len,
                                char *err)
{
    bert_param_spec *specs = NULL;
    st_write_entry *entries = NULL;
    char(*names)[160] = NULL;
    int n = 0, rc;
    size_t total;
    *out = NULL;
    *out_len = 0;
    if ((rc = bert_param_table(&m->cfg, m->has_head, &specs, &n, &total, err))) return rc;
    const wide_part *w = m->wide;
    if (!w != !m->cfg.wide.set || (w && w->K != m->cfg.num_labels)) {
        rc = sm_error(err, SM_ERR_INVALID, "the model's wide part does not match its config");
        goto end;
    }
    int n_wide = w ? (w->idf ? 3 : 2) : 0;
    entries = calloc((size_t)(n + n_wide), sizeof *entries);
    names = calloc((size_t)n, sizeof *names);
    if (!entries || !names) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory saving a model");
        goto end;
    }
    for (int i = 0; i < n; i++) {
        checkpoint_name(names[i], sizeof names[i], save_prefix(&m->cfg), specs[i].name);
        if ((rc = bert_check_finite(names[i], m->arena + specs[i].offset, specs[i].numel, err)))
            goto end;
        entries[i].name = names[i];
        entries[i].data = m->arena + specs[i].offset;
        entries[i].ndim = specs[i].ndim;
        entries[i].shape[0] = specs[i].shape[0];
        entries[i].shape[1] = specs[i].shape[1];
    }
    if (w) {
        size_t B = (size_t)w->cfg.buckets;
        st_write_entry *e = entries + n;
        e[0] = (st_write_entry){
            .name = "wide.weight", .data = w->weight, .ndim = 2, .shape = {w->K, (int)B}};
        e[1] = (st_write_entry){
            .name = "wide.bias", .data = w->bias, .ndim = 1, .shape = {w->K, 0}};
        if (w->idf)
            e[2] = (st_write_entry){
                .name = "wide.idf", .data = w->idf, .ndim = 1, .shape = {(int)B, 0}};
        for (int i = 0; i < n_wide; i++)
            if ((rc = bert_check_finite(e[i].name, e[i].data,
                                        (size_t)e[i].shape[0] * (e[i].ndim == 2 ? B : 1), err)))
                goto end;
    }
    rc = safetensors_serialize(entries, n + n_wide, (st_dtype)dtype, (uint8_t **)out, out_len, err);
end:
    free(names);
    free(entries);
    free(specs);
    return rc;
}

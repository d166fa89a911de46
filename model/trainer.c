/* trainer.c: the training loop behind train(): dataset of token ids, head
 * preparation, from-scratch models, and trainer_run (split, epochs of AdamW
 * steps with gradient accumulation, validation, best-epoch selection).
 *
 * Everything random (split, shuffling, dropout, new weights) comes from
 * splitmix64 streams keyed by the seed, and every backend op is
 * deterministic, so a run repeats bit for bit. Owns, while it runs, the
 * device arenas (parameters, gradients, optimizer moments), one training
 * workspace and a host copy of the best parameters; none is allocated per
 * step.
 */
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bert_train.h"
#include "dropout_rng.h"
#include "errors.h"
#include "optimizer.h"
#include "token_dataset.h"
#include "tokenizer.h"

/* ---- random numbers ------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    return dropout_mix64(*s);
}

/* Uniform in [0, n). */
static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(s) * n) >> 64);
}

static double rng_normal(uint64_t *s)
{
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void shuffle(int *a, int n, uint64_t *s)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(s, (uint64_t)i + 1);
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- dataset -------------------------------------------------------------- */

struct train_dataset {
    token_dataset t; /* labelled */
};

int train_dataset_create(int vocab_size, train_dataset **out, char *err)
{
    void *ds;
    int rc = token_dataset_create(sizeof **out, vocab_size, 1, &ds, err);
    *out = ds;
    return rc;
}

void train_dataset_free(train_dataset *ds)
{
    if (!ds) return;
    token_dataset_release(&ds->t);
    free(ds);
}

int train_dataset_add(train_dataset *ds, const int *ids, int n, int label, char *err)
{
    return token_dataset_add(&ds->t, ids, n, label, err);
}

int train_dataset_rows(const train_dataset *ds)
{
    return ds->t.rows;
}

size_t train_dataset_bytes(const train_dataset *ds)
{
    const token_dataset *t = &ds->t;
    return t->cap_ids * (t->wide ? 4 : 2) +
           (size_t)t->cap_rows * (sizeof *t->start + sizeof *t->len + sizeof *t->label) +
           sizeof *ds;
}

double train_dataset_bytes_per_row(const train_dataset *ds)
{
    /* What a row costs once the buffers are full: its ids plus the index. */
    const token_dataset *t = &ds->t;
    if (!t->rows) return 0;
    return (double)t->n_ids * (t->wide ? 4 : 2) / t->rows +
           (double)(sizeof *t->start + sizeof *t->len + sizeof *t->label);
}

int train_dataset_row(const train_dataset *ds, int i, int *ids, int cap, int *n, int *label)
{
    if (i < 0 || i >= ds->t.rows) return SM_ERR_INVALID;
    if (cap < ds->t.len[i]) return SM_ERR_INVALID;
    *n = token_dataset_row_ids(&ds->t, i, ids, cap);
    *label = ds->t.label[i];
    return SM_OK;
}

/* ---- heads and from-scratch models ---------------------------------------- */

static void init_normal(float *x, size_t n, double stddev, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_normal(s) * stddev);
}

int trainer_prepare_head(bert_model *m, int n, const char *const *labels, uint64_t seed,
                         int *kept, char *err)
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
    /* The head is the table's last two rows: classifier.weight (K,C), bias (K). */
    uint64_t s = dropout_mix64(seed ^ 0x4EAD5EEDull);
    const bert_param_spec *w = &specs[n_specs - 2], *b = &specs[n_specs - 1];
    init_normal(arena + w->offset, w->numel, 0.02, &s);
    memset(arena + b->offset, 0, b->numel * sizeof *arena);
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
    uint64_t s = dropout_mix64(seed ^ 0x5C4A7C4ull);
    for (int i = 0; i < n; i++) {
        float *x = m->arena + specs[i].offset;
        if (ends_with(specs[i].name, "LayerNorm.weight")) {
            for (size_t k = 0; k < specs[i].numel; k++) x[k] = 1.0f;
        } else if (ends_with(specs[i].name, ".bias")) {
            memset(x, 0, specs[i].numel * sizeof *x);
        } else {
            init_normal(x, specs[i].numel, 0.02, &s);
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

/* ---- the loop --------------------------------------------------------------- */

void trainer_options_default(trainer_options *o)
{
    memset(o, 0, sizeof *o);
    o->epochs = 3;
    o->lr = 5e-5f;
    o->batch_size = 32;
    o->accumulation = 1;
    o->max_length = 128;
    o->valid_fraction = 0.1f;
    o->seed = 42;
    o->weight_decay = 0.01f;
    o->warmup_ratio = 0.1f;
    o->grad_clip = 1.0f;
    o->dropout = -1.0f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->group_by_length = 1;
}

void trainer_result_free(trainer_result *r)
{
    if (!r) return;
    free(r->train_loss);
    free(r->valid_accuracy);
    r->train_loss = r->valid_accuracy = NULL;
}

/* Everything trainer_run holds; freed in one place. */
typedef struct run_state {
    backend *be;
    float *params, *grads;   /* device arenas */
    float *best;             /* host copy of the best parameters */
    bert_params p, g;        /* device views */
    adamw *opt;
    bert_train_ws *ws;
    int *perm, *train_idx, *valid_idx, *batches, *ids, *lengths, *labels;
    float *logits;
    int max_len, micro, pad, K;
} run_state;

static void run_state_free(run_state *st)
{
    backend *be = st->be;
    if (st->params) be->free(be, st->params);
    if (st->grads) be->free(be, st->grads);
    free(st->best);
    bert_params_release(&st->p);
    bert_params_release(&st->g);
    adamw_free(st->opt);
    bert_train_ws_free(st->ws);
    free(st->perm);
    free(st->train_idx);
    free(st->valid_idx);
    free(st->batches);
    free(st->ids);
    free(st->lengths);
    free(st->labels);
    free(st->logits);
}

/* Pads rows idx[0..B) into st->ids (B,T); returns T. */
static int build_batch(run_state *st, const train_dataset *ds, const int *idx, int B)
{
    int T = 2;
    for (int b = 0; b < B; b++) {
        int n = ds->t.len[idx[b]] < st->max_len ? ds->t.len[idx[b]] : st->max_len;
        T = n > T ? n : T;
    }
    for (int b = 0; b < B; b++) {
        int *row = st->ids + (size_t)b * T;
        int n = token_dataset_row_ids(&ds->t, idx[b], row, st->max_len);
        for (int t = n; t < T; t++) row[t] = st->pad;
        st->lengths[b] = n;
        st->labels[b] = ds->t.label[idx[b]];
    }
    return T;
}

static int evaluate(run_state *st, const bert_model *m, const train_dataset *ds, int n_valid,
                    double *accuracy, char *err)
{
    int correct = 0;
    for (int first = 0; first < n_valid; first += st->micro) {
        int B = n_valid - first < st->micro ? n_valid - first : st->micro;
        int T = build_batch(st, ds, st->valid_idx + first, B);
        double loss;
        int rc = bert_train_forward(&m->cfg, &st->p, st->ws, st->ids, st->lengths, st->labels, B,
                                    T, NULL, &loss, st->logits, err);
        if (rc) return rc;
        for (int b = 0; b < B; b++) {
            const float *z = st->logits + (size_t)b * st->K;
            int arg = 0;
            for (int k = 1; k < st->K; k++)
                if (z[k] > z[arg]) arg = k;
            correct += arg == st->labels[b];
        }
    }
    *accuracy = (double)correct / n_valid;
    return SM_OK;
}

int trainer_run(bert_model *m, backend *be, const train_dataset *ds, const trainer_options *o,
                trainer_result *res, char *err)
{
    run_state st = {.be = be};
    int rc = SM_OK;
    double t0 = now_sec(), train_time = 0;
    long examples_done = 0;

    memset(res, 0, sizeof *res);
    res->best_accuracy = NAN;
    if (o->epochs < 1 || o->epochs > 10000)
        return sm_error(err, SM_ERR_INVALID, "epochs %d: expected 1..10000", o->epochs);
    if (!(o->lr > 0 && o->lr < 1))
        return sm_error(err, SM_ERR_INVALID, "lr %g: expected a number in (0, 1)", (double)o->lr);
    if (o->batch_size < 1 || o->batch_size > 65536)
        return sm_error(err, SM_ERR_INVALID, "batch_size %d: expected 1..65536", o->batch_size);
    if (o->accumulation < 1 || o->accumulation > o->batch_size)
        return sm_error(err, SM_ERR_INVALID, "accumulation %d: expected 1..batch_size (%d)",
                        o->accumulation, o->batch_size);
    if (o->max_length != 0 && o->max_length < 2)
        return sm_error(err, SM_ERR_INVALID, "max_length %d: expected at least 2", o->max_length);
    if (!(o->valid_fraction >= 0 && o->valid_fraction < 1))
        return sm_error(err, SM_ERR_INVALID, "valid_fraction %g: expected 0 <= f < 1",
                        (double)o->valid_fraction);
    if (!(o->weight_decay >= 0 && o->weight_decay < 1))
        return sm_error(err, SM_ERR_INVALID, "weight_decay %g: expected 0 <= w < 1",
                        (double)o->weight_decay);
    if (!(o->warmup_ratio >= 0 && o->warmup_ratio <= 1))
        return sm_error(err, SM_ERR_INVALID, "warmup_ratio %g: expected 0..1",
                        (double)o->warmup_ratio);
    if (isnan(o->grad_clip))
        return sm_error(err, SM_ERR_INVALID, "grad_clip: not a number");
    if (!(o->dropout < 1))
        return sm_error(err, SM_ERR_INVALID, "dropout %g: expected < 1 (negative: the config's)",
                        (double)o->dropout);
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1 && o->eps > 0))
        return sm_error(err, SM_ERR_INVALID, "AdamW betas (%g, %g) and eps %g out of range",
                        (double)o->beta1, (double)o->beta2, (double)o->eps);
    if (!m->has_head || !m->p.cls_w)
        return sm_error(err, SM_ERR_INVALID, "training: the model has no classification head");
    st.K = m->cfg.num_labels;
    int n = ds->t.rows;
    for (int i = 0; i < n; i++)
        if (ds->t.label[i] >= st.K)
            return sm_error(err, SM_ERR_INVALID,
                            "training: row %d has label index %d but the model has %d labels",
                            i + 1, ds->t.label[i], st.K);
    if (ds->t.vocab_size > m->cfg.vocab_size)
        return sm_error(err, SM_ERR_INVALID,
                        "training: the dataset's vocabulary (%d) is larger than the model's (%d)",
                        ds->t.vocab_size, m->cfg.vocab_size);
    st.max_len = bert_max_length(&m->cfg);
    if (o->max_length && o->max_length < st.max_len) st.max_len = o->max_length;
    st.pad = m->tok ? tokenizer_pad_id(m->tok) : m->cfg.pad_token_id;

    /* The split: a seeded permutation; the first n_valid rows are held out. */
    int n_valid = 0;
    if (o->valid_fraction > 0) {
        n_valid = (int)floor(n * (double)o->valid_fraction + 0.5);
        if (n_valid < 1) n_valid = 1;
    }
    int n_train = n - n_valid;
    if (n_train < 2)
        return sm_error(err, SM_ERR_INVALID,
                        "training: %d rows leave %d for training after holding out %d for "
                        "validation; need at least 2",
                        n, n_train, n_valid);
    st.micro = (o->batch_size + o->accumulation - 1) / o->accumulation;
    long steps_per_epoch = (n_train + o->batch_size - 1) / o->batch_size;
    long total_steps = steps_per_epoch * o->epochs;
    long warmup = (long)ceil(total_steps * (double)o->warmup_ratio);

    st.perm = malloc((size_t)n * sizeof *st.perm);
    st.train_idx = malloc((size_t)n_train * sizeof *st.train_idx);
    st.valid_idx = malloc((size_t)(n_valid ? n_valid : 1) * sizeof *st.valid_idx);
    st.batches = malloc((size_t)steps_per_epoch * sizeof *st.batches);
    st.ids = malloc((size_t)st.micro * st.max_len * sizeof *st.ids);
    st.lengths = malloc((size_t)st.micro * sizeof *st.lengths);
    st.labels = malloc((size_t)st.micro * sizeof *st.labels);
    st.logits = malloc((size_t)st.micro * st.K * sizeof *st.logits);
    st.best = malloc(m->n_floats * sizeof *st.best);
    res->train_loss = malloc((size_t)o->epochs * sizeof *res->train_loss);
    res->valid_accuracy = malloc((size_t)o->epochs * sizeof *res->valid_accuracy);
    if (!st.perm || !st.train_idx || !st.valid_idx || !st.batches || !st.ids || !st.lengths ||
        !st.labels || !st.logits || !st.best || !res->train_loss || !res->valid_accuracy) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory setting up training");
        goto end;
    }
    uint64_t split_rng = dropout_mix64(o->seed ^ 0x5011700ull);
    for (int i = 0; i < n; i++) st.perm[i] = i;
    shuffle(st.perm, n, &split_rng);
    memcpy(st.valid_idx, st.perm, (size_t)n_valid * sizeof *st.perm);
    memcpy(st.train_idx, st.perm + n_valid, (size_t)n_train * sizeof *st.perm);
    token_dataset_sort_by_len(&ds->t, st.valid_idx, n_valid);
    token_dataset_sort_by_len(&ds->t, st.train_idx, n_train); /* a canonical order before shuffling */

    /* Device state. */
    st.params = be->alloc(be, m->n_floats * sizeof(float));
    st.grads = be->alloc(be, m->n_floats * sizeof(float));
    if (!st.params || !st.grads) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of %s memory for %zu parameters and gradients",
                      be->name, m->n_floats);
        goto end;
    }
    if ((rc = be->upload(be, st.params, m->arena, m->n_floats * sizeof(float)))) {
        rc = sm_error(err, rc, "%s backend: uploading the parameters failed", be->name);
        goto end;
    }
    if ((rc = bert_params_bind(&m->cfg, 1, st.params, &st.p, err))) goto end;
    if ((rc = bert_params_bind(&m->cfg, 1, st.grads, &st.g, err))) goto end;
    if ((rc = adamw_create(be, &m->cfg, 1, &st.opt, err))) goto end;
    if ((rc = bert_train_ws_create(be, &m->cfg, st.micro, st.max_len, &st.ws, err))) goto end;
    res->device_bytes = 4 * m->n_floats * sizeof(float) + bert_train_ws_bytes(st.ws);

    adamw_hparams hp = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->grad_clip};
    bert_dropout drop;
    bert_dropout_from_config(&m->cfg, o->dropout, o->seed, &drop);
    res->n_train = n_train;
    res->n_valid = n_valid;
    res->best_epoch = 0;
    long step = 0;
    uint64_t micro_step = 0;
    double best_acc = -1;
    for (int epoch = 1; epoch <= o->epochs; epoch++) {
        /* This epoch's batches: shuffle; optionally sort windows of 50
         * batches by length so each batch pads little; shuffle the batch
         * order. */
        uint64_t erng = dropout_mix64(o->seed ^ dropout_mix64(0xE90C0000ull + (uint64_t)epoch));
        shuffle(st.train_idx, n_train, &erng);
        if (o->group_by_length) {
            int window = o->batch_size * 50;
            for (int w = 0; w < n_train; w += window)
                token_dataset_sort_by_len(&ds->t, st.train_idx + w, n_train - w < window ? n_train - w : window);
        }
        for (long s = 0; s < steps_per_epoch; s++) st.batches[s] = (int)s;
        shuffle(st.batches, (int)steps_per_epoch, &erng);

        double epoch_loss = 0;
        for (long s = 0; s < steps_per_epoch; s++) {
            double ts = now_sec();
            int first = st.batches[s] * o->batch_size;
            int count = n_train - first < o->batch_size ? n_train - first : o->batch_size;
            if ((rc = be->zero(be, st.grads, m->n_floats * sizeof(float)))) {
                rc = sm_error(err, rc, "%s backend: clearing gradients failed", be->name);
                goto end;
            }
            double loss_sum = 0;
            for (int mf = 0; mf < count; mf += st.micro) {
                if (o->interrupt && o->interrupt(o->user)) {
                    rc = sm_error(err, SM_ERR_INTERRUPTED, "training interrupted at epoch %d, step %ld",
                                  epoch, step + 1);
                    goto end;
                }
                int B = count - mf < st.micro ? count - mf : st.micro;
                int T = build_batch(&st, ds, st.train_idx + first + mf, B);
                double l;
                drop.step = micro_step++;
                if ((rc = bert_train_forward(&m->cfg, &st.p, st.ws, st.ids, st.lengths, st.labels,
                                             B, T, &drop, &l, NULL, err)))
                    goto end;
                if (!isfinite(l)) {
                    rc = sm_error(err, SM_ERR_INVALID,
                                  "training diverged: the loss is %s at epoch %d, step %ld; "
                                  "try a lower lr",
                                  isnan(l) ? "NaN" : "infinite", epoch, step + 1);
                    goto end;
                }
                loss_sum += l;
                if ((rc = bert_train_backward(&m->cfg, &st.p, &st.g, st.ws, 1.0f / (float)count,
                                              err)))
                    goto end;
            }
            float lr = lr_linear_schedule(o->lr, step, warmup, total_steps);
            float norm;
            if ((rc = adamw_step(st.opt, st.params, st.grads, &hp, lr, &norm, err))) goto end;
            step++;
            examples_done += count;
            epoch_loss += loss_sum;
            train_time += now_sec() - ts;
            if (o->progress) {
                trainer_progress pr = {0};
                pr.epoch = epoch;
                pr.epochs = o->epochs;
                pr.step = step;
                pr.total_steps = total_steps;
                pr.loss = loss_sum / count;
                pr.lr = lr;
                pr.grad_norm = norm;
                pr.examples_per_sec = train_time > 0 ? examples_done / train_time : 0;
                pr.elapsed_sec = now_sec() - t0;
                pr.eta_sec = pr.elapsed_sec / step * (double)(total_steps - step);
                pr.valid_accuracy = NAN;
                if (o->progress(o->user, &pr)) {
                    rc = sm_error(err, SM_ERR_INTERRUPTED, "training stopped at epoch %d, step %ld",
                                  epoch, step);
                    goto end;
                }
            }
        }
        double acc = NAN;
        if (n_valid) {
            if ((rc = evaluate(&st, m, ds, n_valid, &acc, err))) goto end;
        }
        res->train_loss[epoch - 1] = epoch_loss / n_train;
        res->valid_accuracy[epoch - 1] = acc;
        res->epochs = epoch;
        /* Keep the best epoch (the first of equals); without a split, the last. */
        if (!n_valid || acc > best_acc) {
            best_acc = n_valid ? acc : best_acc;
            res->best_epoch = epoch;
            res->best_accuracy = acc;
            if ((rc = be->download(be, st.best, st.params, m->n_floats * sizeof(float))) ||
                (rc = be->synchronize(be))) {
                rc = sm_error(err, rc, "%s backend: reading the parameters back failed", be->name);
                goto end;
            }
        }
        if (o->progress) {
            trainer_progress pr = {0};
            pr.epoch = epoch;
            pr.epochs = o->epochs;
            pr.step = step;
            pr.total_steps = total_steps;
            pr.loss = res->train_loss[epoch - 1];
            pr.lr = lr_linear_schedule(o->lr, step, warmup, total_steps);
            pr.examples_per_sec = train_time > 0 ? examples_done / train_time : 0;
            pr.elapsed_sec = now_sec() - t0;
            pr.eta_sec = pr.elapsed_sec / step * (double)(total_steps - step);
            pr.epoch_done = 1;
            pr.epoch_loss = res->train_loss[epoch - 1];
            pr.valid_accuracy = acc;
            if (o->progress(o->user, &pr)) {
                rc = sm_error(err, SM_ERR_INTERRUPTED, "training stopped after epoch %d", epoch);
                goto end;
            }
        }
    }
    memcpy(m->arena, st.best, m->n_floats * sizeof *m->arena);
    res->steps = step;
    res->seconds = now_sec() - t0;
    res->examples_per_sec = train_time > 0 ? examples_done / train_time : 0;
    rc = SM_OK;
end:
    run_state_free(&st);
    if (rc) {
        trainer_result_free(res);
        res->epochs = 0;
    }
    return rc;
}

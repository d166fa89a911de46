/* trainer.c: fine-tuning behind train(): the labelled dataset, head
 * preparation, from-scratch models, and trainer_run, whose loop drives the
 * run through train_loop.h (epochs, steps, micro-batches, the update) with
 * its own classification batches and loss, validation accuracy and
 * best-epoch selection.
 *
 * Everything random (split, shuffling, dropout, new weights) comes from
 * splitmix64 streams keyed by the seed, and every backend op is
 * deterministic, so a run repeats bit for bit. Owns, while it runs, one
 * training workspace, host batch buffers and a host copy of the best
 * parameters (the loop owns the device arenas); none is allocated per step.
 */
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_train.h"
#include "errors.h"
#include "optimizer.h"
#include "rng.h"
#include "token_dataset.h"
#include "tokenizer.h"
#include "train_loop.h"

/* ---- random numbers ------------------------------------------------------ */


/* ---- dataset -------------------------------------------------------------- */

struct train_dataset {
    token_dataset t; /* labelled; a row without a label holds its soft argmax */
    /* soft targets (train_dataset_add_soft): all rows have them or none */
    int soft_k;      /* labels per row, 0 = no soft targets */
    float *soft;     /* (rows, soft_k) */
    uint8_t *hard;   /* (rows) 1: the row has a hard label too */
    int soft_cap;    /* rows allocated in soft and hard */
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
    free(ds->soft);
    free(ds->hard);
    free(ds);
}

int train_dataset_add(train_dataset *ds, const int *ids, int n, int label, char *err)
{
    if (ds->soft_k)
        return sm_error(err, SM_ERR_INVALID,
                        "dataset: every row needs soft targets once one row has them");
    return token_dataset_add(&ds->t, ids, n, label, err);
}

int train_dataset_add_soft(train_dataset *ds, const int *ids, int n, int label,
                           const float *probs, int k, char *err)
{
    if (ds->t.rows && !ds->soft_k)
        return sm_error(err, SM_ERR_INVALID,
                        "dataset: soft targets on row %d, but the rows before have none",
                        ds->t.rows + 1);
    if (k < 2 || k > BERT_MAX_LABELS || (ds->soft_k && k != ds->soft_k))
        return sm_error(err, SM_ERR_INVALID, "dataset: %d soft targets per row (expected %d)", k,
                        ds->soft_k ? ds->soft_k : 2);
    int rc = bert_targets_check_row(probs, k, "dataset", err), arg = 0;
    if (rc) return rc;
    for (int j = 1; j < k; j++)
        if (probs[j] > probs[arg]) arg = j;
    if (label < -1 || label >= k)
        return sm_error(err, SM_ERR_INVALID, "dataset: label index %d (expected -1..%d)", label,
                        k - 1);
    if (ds->t.rows == ds->soft_cap) {
        int cap = ds->soft_cap ? 2 * ds->soft_cap : 1024;
        float *soft = realloc(ds->soft, (size_t)cap * k * sizeof *soft);
        if (soft) ds->soft = soft;
        uint8_t *hard = soft ? realloc(ds->hard, (size_t)cap) : NULL;
        if (!hard) return sm_error(err, SM_ERR_NOMEM, "out of memory adding a training row");
        ds->hard = hard;
        ds->soft_cap = cap;
    }
    if ((rc = token_dataset_add(&ds->t, ids, n, label >= 0 ? label : arg, err))) return rc;
    ds->soft_k = k;
    memcpy(ds->soft + (size_t)(ds->t.rows - 1) * k, probs, (size_t)k * sizeof *probs);
    ds->hard[ds->t.rows - 1] = label >= 0;
    return SM_OK;
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
           (size_t)ds->soft_cap * (ds->soft_k * sizeof *ds->soft + 1) + sizeof *ds;
}

double train_dataset_bytes_per_row(const train_dataset *ds)
{
    /* What a row costs once the buffers are full: its ids plus the index. */
    const token_dataset *t = &ds->t;
    if (!t->rows) return 0;
    return (double)t->n_ids * (t->wide ? 4 : 2) / t->rows +
           (double)(sizeof *t->start + sizeof *t->len + sizeof *t->label) +
           (ds->soft_k ? ds->soft_k * sizeof *ds->soft + 1.0 : 0.0);
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

/* ---- the loop --------------------------------------------------------------- */

void trainer_options_default(trainer_options *o)
{
    memset(o, 0, sizeof *o);
    loop_options_default(&o->loop);
    o->loop.epochs = 3;
    o->loop.lr = 5e-5f;
    o->loop.valid_fraction = 0.1f;
    o->distill_alpha = 0.5f;
    o->distill_temperature = 1.0f;
}

void trainer_result_free(trainer_result *r)
{
    if (!r) return;
    free(r->train_loss);
    free(r->valid_accuracy);
    r->train_loss = r->valid_accuracy = NULL;
}

/* What trainer_run holds besides the loop; freed in one place. */
typedef struct run_state {
    train_loop *L;
    bert_model *m;
    const train_dataset *ds;
    const trainer_options *o;
    trainer_result *res;
    float *best;             /* host copy of the best parameters */
    bert_params p, g;        /* views of the loop's device arenas */
    bert_train_ws *ws;
    int *ids, *lengths, *labels; /* (micro, max_len), (micro), (micro) */
    float *soft;             /* (micro, K) soft targets of the batch, or NULL */
    float *logits;           /* (micro, K) */
    int K;
    double best_acc;         /* -1 before the first epoch */
    double acc;              /* the last epoch's, NAN with no split */
} run_state;

static void run_state_free(run_state *st)
{
    free(st->best);
    bert_params_release(&st->p);
    bert_params_release(&st->g);
    bert_train_ws_free(st->ws);
    free(st->ids);
    free(st->lengths);
    free(st->labels);
    free(st->soft);
    free(st->logits);
}

/* Pads rows idx[0..B) into st->ids (B,T); returns T. */
static int build_batch(run_state *st, const int *idx, int B)
{
    const token_dataset *ds = &st->ds->t;
    int T = 2, max_len = st->L->max_len;
    for (int b = 0; b < B; b++) {
        int n = ds->len[idx[b]] < max_len ? ds->len[idx[b]] : max_len;
        T = n > T ? n : T;
    }
    for (int b = 0; b < B; b++) {
        int *row = st->ids + (size_t)b * T;
        int n = token_dataset_row_ids(ds, idx[b], row, max_len);
        for (int t = n; t < T; t++) row[t] = st->L->pad;
        st->lengths[b] = n;
        st->labels[b] = ds->label[idx[b]];
        if (!st->soft) continue;
        int K = st->K;
        memcpy(st->soft + (size_t)b * K, st->ds->soft + (size_t)idx[b] * K, K * sizeof(float));
        if (!st->ds->hard[idx[b]]) st->labels[b] = -1;
    }
    return T;
}

/* The batch's loss on st's rows: cross-entropy, or distillation with soft
 * targets. */
static int batch_forward(run_state *st, int B, int T, const bert_dropout *drop, double *loss,
                         float *logits, char *err)
{
    bert_targets tg = {st->labels, st->soft, st->o->distill_alpha, st->o->distill_temperature};
    return bert_train_forward_targets(&st->m->cfg, &st->p, st->ws, st->ids, st->lengths, &tg, B,
                                      T, drop, loss, logits, err);
}

static int evaluate(run_state *st, double *accuracy, char *err)
{
    int correct = 0, n_valid = st->L->n_valid, micro = st->L->micro;
    for (int first = 0; first < n_valid; first += micro) {
        int B = n_valid - first < micro ? n_valid - first : micro;
        int T = build_batch(st, st->L->valid_idx + first, B);
        double loss;
        int rc = batch_forward(st, B, T, NULL, &loss, st->logits, err);
        if (rc) return rc;
        /* a row without a label is right when it agrees with its targets' top label */
        for (int b = 0; b < B; b++) {
            const float *z = st->logits + (size_t)b * st->K;
            int arg = 0;
            for (int k = 1; k < st->K; k++)
                if (z[k] > z[arg]) arg = k;
            correct += arg == st->ds->t.label[st->L->valid_idx[first + b]];
        }
    }
    *accuracy = (double)correct / n_valid;
    return SM_OK;
}

/* ---- a micro-batch, progress and the epoch's end --------------------------------- */

/* The loss sum of micro-batch mb, with its dropout. */
static int micro_forward(run_state *st, const loop_micro *mb, double *loss, char *err)
{
    int T = build_batch(st, mb->idx, mb->rows);
    return batch_forward(st, mb->rows, T, mb->drop, loss, NULL, err);
}

/* Tells the caller's progress callback r (with the validation accuracy at
 * an epoch's end); its nonzero answer stops training. */
static int report(run_state *st, const loop_report *r, char *err)
{
    if (!st->o->progress) return SM_OK;
    trainer_progress pr = {0};
    pr.loop = *r;
    pr.valid_accuracy = r->epoch_done ? st->acc : NAN;
    return st->o->progress(st->o->loop.user, &pr) ? loop_stopped(st->L, r, err) : SM_OK;
}

/* After an epoch's steps: validation, what is kept, progress. */
static int end_epoch(run_state *st, int epoch, char *err)
{
    trainer_result *res = st->res;
    int n_valid = st->L->n_valid, rc;
    loop_report r;
    st->acc = NAN;
    if (n_valid && (rc = evaluate(st, &st->acc, err))) return rc;
    res->train_loss[epoch - 1] = loop_epoch_loss(st->L);
    res->valid_accuracy[epoch - 1] = st->acc;
    res->epochs = epoch;
    /* Keep the best epoch (the first of equals); without a split, the last. */
    if (!n_valid || st->acc > st->best_acc) {
        st->best_acc = n_valid ? st->acc : st->best_acc;
        res->best_epoch = epoch;
        res->best_accuracy = st->acc;
        if ((rc = loop_download(st->L, st->best, err))) return rc;
    }
    loop_epoch_report(st->L, &r);
    return report(st, &r, err);
}

int trainer_run(bert_model *m, backend *be, const train_dataset *ds, const trainer_options *o,
                trainer_result *res, char *err)
{
    train_loop L = {.be = be};
    run_state st = {.L = &L, .m = m, .ds = ds, .o = o, .res = res, .best_acc = -1};
    const loop_options *lo = &o->loop;
    int rc = SM_OK;


    memset(res, 0, sizeof *res);
    res->best_accuracy = NAN;
    if ((rc = loop_check_sizes(lo, err)) || (rc = loop_check_optimizer(lo, err))) return rc;
    /* new weights: an INT8 check of the old ones no longer holds */
    m->cfg.int8_check.set = 0;
    if (!m->has_head || !m->p.cls_w)
        return sm_error(err, SM_ERR_INVALID, "training: the model has no classification head");
    st.K = m->cfg.num_labels;
    if (ds->soft_k && ds->soft_k != st.K)
        return sm_error(err, SM_ERR_INVALID,
                        "training: the rows have %d soft targets but the model has %d labels",
                        ds->soft_k, st.K);
    if (ds->soft_k && (!(o->distill_alpha >= 0 && o->distill_alpha <= 1) ||
                       !(o->distill_temperature > 0)))
        return sm_error(err, SM_ERR_INVALID,
                        "training: distillation weight %g (0..1) or temperature %g (> 0) is out "
                        "of range", o->distill_alpha, o->distill_temperature);
    for (int i = 0; i < ds->t.rows; i++)
        if (ds->t.label[i] >= st.K)
            return sm_error(err, SM_ERR_INVALID,
                            "training: row %d has label index %d but the model has %d labels",
                            i + 1, ds->t.label[i], st.K);
    if (ds->t.vocab_size > m->cfg.vocab_size)
        return sm_error(err, SM_ERR_INVALID,
                        "training: the dataset's vocabulary (%d) is larger than the model's (%d)",
                        ds->t.vocab_size, m->cfg.vocab_size);
    loop_init(&L, "training", lo, be, &ds->t, m);
    if (L.n_train < 2)
        return sm_error(err, SM_ERR_INVALID,
                        "training: %d rows leave %d for training after holding out %d for "
                        "validation; need at least 2",
                        ds->t.rows, L.n_train, L.n_valid);

    if ((rc = loop_split(&L, err))) goto end;
    st.ids = malloc((size_t)L.micro * L.max_len * sizeof *st.ids);
    st.lengths = malloc((size_t)L.micro * sizeof *st.lengths);
    st.labels = malloc((size_t)L.micro * sizeof *st.labels);
    st.logits = malloc((size_t)L.micro * st.K * sizeof *st.logits);
    if (ds->soft_k && !(st.soft = malloc((size_t)L.micro * st.K * sizeof *st.soft))) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory setting up training");
        goto end;
    }
    st.best = malloc(m->n_floats * sizeof *st.best);
    res->train_loss = malloc((size_t)o->loop.epochs * sizeof *res->train_loss);
    res->valid_accuracy = malloc((size_t)o->loop.epochs * sizeof *res->valid_accuracy);
    if (!st.ids || !st.lengths || !st.labels || !st.logits || !st.best || !res->train_loss ||
        !res->valid_accuracy) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory setting up training");
        goto end;
    }

    /* Device state: the model's arena as it is, head included. */
    if ((rc = loop_arenas(&L, m->n_floats, err))) goto end;
    if ((rc = loop_upload(&L, 0, m->arena, m->n_floats, err))) goto end;
    if ((rc = bert_params_bind(&m->cfg, 1, L.params, &st.p, err))) goto end;
    if ((rc = bert_params_bind(&m->cfg, 1, L.grads, &st.g, err))) goto end;
    if ((rc = adamw_create(be, &m->cfg, 1, &L.opt, err))) goto end;
    if ((rc = bert_train_ws_create(be, &m->cfg, L.micro, L.max_len, &st.ws, err))) goto end;
    res->device_bytes = 4 * m->n_floats * sizeof(float) + bert_train_ws_bytes(st.ws);
    res->n_train = L.n_train;
    res->n_valid = L.n_valid;
    res->best_epoch = 0;

    /* The run: each step's rows in micro-batches, loss divided by the rows. */
    for (int epoch = 1; loop_epoch_begin(&L, epoch); epoch++) {
        loop_step s;
        loop_report r;
        while (loop_next_step(&L, &s)) {
            if ((rc = loop_step_begin(&L, &s, s.count, err))) goto end;
            for (int k = 0; k < s.n_micro; k++) {
                loop_micro mb;
                double loss;
                if ((rc = loop_micro_batch(&L, &s, k, &mb, err)) ||
                    (rc = micro_forward(&st, &mb, &loss, err)) ||
                    (rc = loop_add_loss(&L, &s, loss, err)) ||
                    (rc = bert_train_backward(&m->cfg, &st.p, &st.g, st.ws, s.scale, err)))
                    goto end;
            }
            if ((rc = loop_step_end(&L, &s, &r, err)) || (rc = report(&st, &r, err))) goto end;
        }
        if ((rc = end_epoch(&st, epoch, err))) goto end;
    }
    memcpy(m->arena, st.best, m->n_floats * sizeof *m->arena);
    res->steps = L.step;
    res->seconds = loop_elapsed(&L);
    res->examples_per_sec = loop_examples_per_sec(&L);
    rc = SM_OK;
end:
    run_state_free(&st);
    loop_free(&L);
    if (rc) {
        trainer_result_free(res);
        res->epochs = 0;
    }
    return rc;
}

int trainer_valid_rows(int n, const trainer_options *opt, unsigned char *is_valid, char *err)
{
    return loop_valid_rows(n, &opt->loop, is_valid, err);
}

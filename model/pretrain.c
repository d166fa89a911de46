/* pretrain.c: masked-language-model pretraining: the unlabeled dataset,
 * the pretraining loop (masking, epochs of AdamW steps over encoder and MLM
 * head, held-out loss) and saving encoder + head as safetensors.
 *
 * Owns, while it runs, one device arena each for parameters, gradients and
 * the optimizer moments, laid out by pretrain_param_table (encoder, then
 * head), one MLM workspace and host batch buffers; none is allocated per
 * step. Everything random comes from splitmix64 streams keyed by the seed.
 */
#include "pretrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dropout_rng.h"
#include "errors.h"
#include "optimizer.h"
#include "safetensors.h"
#include "token_dataset.h"
#include "tokenizer.h"

static uint64_t rng_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    return dropout_mix64(*s);
}

static void shuffle(int *a, int n, uint64_t *s)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(((unsigned __int128)rng_next(s) * (uint64_t)(i + 1)) >> 64);
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

/* ---- dataset ------------------------------------------------------------------ */

struct pretrain_dataset {
    token_dataset t; /* unlabelled */
};

int pretrain_dataset_create(int vocab_size, pretrain_dataset **out, char *err)
{
    void *ds;
    int rc = token_dataset_create(sizeof **out, vocab_size, 0, &ds, err);
    *out = ds;
    return rc;
}

void pretrain_dataset_free(pretrain_dataset *ds)
{
    if (!ds) return;
    token_dataset_release(&ds->t);
    free(ds);
}

int pretrain_dataset_add(pretrain_dataset *ds, const int *ids, int n, char *err)
{
    return token_dataset_add(&ds->t, ids, n, 0, err);
}

int pretrain_dataset_add_text(pretrain_dataset *ds, const tokenizer *tok, const char *text,
                              size_t len, int max_length, char *err)
{
    if (max_length < 2 || max_length > 65536)
        return sm_error(err, SM_ERR_INVALID, "dataset: max_length %d (expected 2..65536)",
                        max_length);
    int *ids = malloc((size_t)max_length * sizeof *ids), n = 0, cut = 0;
    if (!ids) return sm_error(err, SM_ERR_NOMEM, "out of memory tokenizing");
    int rc = tokenizer_encode(tok, text, len, max_length, ids, &n, &cut, err);
    if (!rc && n > 2) rc = pretrain_dataset_add(ds, ids, n, err);
    free(ids);
    return rc;
}

int pretrain_dataset_rows(const pretrain_dataset *ds)
{
    return ds->t.rows;
}

size_t pretrain_dataset_tokens(const pretrain_dataset *ds)
{
    return ds->t.n_ids;
}

/* ---- the arena ---------------------------------------------------------------- */

int pretrain_param_table(const bert_config *cfg, bert_param_spec **specs, int *n_specs,
                         size_t *total, size_t *head_offset, char *err)
{
    bert_param_spec *enc = NULL, *head = NULL;
    int ne, nh, rc;
    size_t te, th;
    *specs = NULL;
    if ((rc = bert_param_table(cfg, 0, &enc, &ne, &te, err))) return rc;
    if ((rc = bert_mlm_param_table(cfg, &head, &nh, &th, err))) {
        free(enc);
        return rc;
    }
    bert_param_spec *all = malloc((size_t)(ne + nh) * sizeof *all);
    if (!all) {
        free(enc);
        free(head);
        return sm_error(err, SM_ERR_NOMEM, "out of memory building the pretraining table");
    }
    int n = 0;
    for (int i = 0; i < ne; i++)
        if (strncmp(enc[i].name, "pooler.", 7)) all[n++] = enc[i];
    for (int i = 0; i < nh; i++) {
        all[n] = head[i];
        all[n++].offset += te;
    }
    free(enc);
    free(head);
    *specs = all;
    *n_specs = n;
    *total = te + th;
    *head_offset = te;
    return SM_OK;
}

/* ---- the loop ----------------------------------------------------------------- */

void pretrain_options_default(pretrain_options *o)
{
    memset(o, 0, sizeof *o);
    o->epochs = 1;
    o->lr = 1e-4f;
    o->batch_size = 32;
    o->accumulation = 1;
    o->max_length = 128;
    o->mask_prob = 0.15f;
    o->mask_token_frac = 0.8f;
    o->random_token_frac = 0.1f;
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

void pretrain_result_free(pretrain_result *r)
{
    if (!r) return;
    free(r->train_loss);
    free(r->valid_loss);
    r->train_loss = r->valid_loss = NULL;
}

/* The mask key of row `row` in epoch `epoch` (0: the held-out rows). */
static uint64_t mask_key(uint64_t seed, int epoch, int row)
{
    return dropout_mix64(dropout_mix64(seed ^ 0x4D4C4D4D41534Bull) ^
                         dropout_mix64(((uint64_t)(unsigned)epoch << 32) | (unsigned)row));
}

typedef struct run_state {
    backend *be;
    float *params, *grads;   /* device arenas, pretrain_param_table layout */
    bert_params p, g;
    bert_mlm_params hp, hg;
    adamw *opt;
    bert_mlm_ws *ws;
    int *perm, *train_idx, *valid_idx, *batches;
    int *raw;                /* (max_len) */
    int *ids, *labels;       /* (batch_size, max_len) the step's masked rows */
    int *lengths;            /* (batch_size) */
    int *T;                  /* (accumulation) padded length of each micro-batch */
    int *count;              /* (accumulation) predicted positions of each */
    float *host;             /* (total) host copy read back at the end */
    mlm_masking mk;
    int max_len, micro, max_pred, pad;
    size_t total, head_offset, enc_floats;
} run_state;

static void run_state_free(run_state *st)
{
    backend *be = st->be;
    if (st->params) be->free(be, st->params);
    if (st->grads) be->free(be, st->grads);
    bert_params_release(&st->p);
    bert_params_release(&st->g);
    adamw_free(st->opt);
    bert_mlm_ws_free(st->ws);
    free(st->perm);
    free(st->train_idx);
    free(st->valid_idx);
    free(st->batches);
    free(st->raw);
    free(st->ids);
    free(st->labels);
    free(st->lengths);
    free(st->T);
    free(st->count);
    free(st->host);
}

/* Masks rows idx[0..B) into the micro-batch at slot (ids, labels, lengths,
 * padded to T); returns the predicted count, capped at max_pred. */
static int build_batch(run_state *st, const pretrain_dataset *ds, const int *idx, int B,
                       int epoch, uint64_t seed, int slot, int *T_out)
{
    int T = 2;
    for (int b = 0; b < B; b++) {
        int n = ds->t.len[idx[b]] < st->max_len ? ds->t.len[idx[b]] : st->max_len;
        T = n > T ? n : T;
    }
    int *ids = st->ids + (size_t)slot * st->micro * st->max_len;
    int *labels = st->labels + (size_t)slot * st->micro * st->max_len;
    int *lengths = st->lengths + (size_t)slot * st->micro;
    int pad = st->pad, count = 0;
    for (int b = 0; b < B; b++) {
        int *row = ids + (size_t)b * T, *lab = labels + (size_t)b * T;
        int n = token_dataset_row_ids(&ds->t, idx[b], st->raw, st->max_len);
        mlm_mask(&st->mk, mask_key(seed, epoch, idx[b]), st->raw, n, row, lab);
        for (int t = 0; t < n; t++) {
            if (lab[t] == MLM_IGNORE) continue;
            if (count == st->max_pred) { /* beyond the head's buffers: not predicted */
                row[t] = st->raw[t];
                lab[t] = MLM_IGNORE;
            } else {
                count++;
            }
        }
        for (int t = n; t < T; t++) {
            row[t] = pad;
            lab[t] = MLM_IGNORE;
        }
        lengths[b] = n;
    }
    *T_out = T;
    return count;
}

static int evaluate(run_state *st, const bert_model *m, const pretrain_dataset *ds, int n_valid,
                    uint64_t seed, double *loss, char *err)
{
    double sum = 0;
    long count = 0;
    for (int first = 0; first < n_valid; first += st->micro) {
        int B = n_valid - first < st->micro ? n_valid - first : st->micro, T, n;
        build_batch(st, ds, st->valid_idx + first, B, 0, seed, 0, &T);
        double l;
        int rc = bert_mlm_forward(&m->cfg, &st->p, &st->hp, st->ws, st->ids, st->lengths,
                                  st->labels, B, T, NULL, &l, &n, err);
        if (rc) return rc;
        sum += l;
        count += n;
    }
    *loss = count ? sum / (double)count : NAN;
    return SM_OK;
}

int pretrain_run(bert_model *m, bert_mlm_head *head, backend *be, const pretrain_dataset *ds,
                 const pretrain_options *o, pretrain_result *res, char *err)
{
    run_state st = {.be = be};
    bert_param_spec *specs = NULL;
    int n_specs, rc = SM_OK;
    double t0 = now_sec(), train_time = 0;
    long examples_done = 0;

    memset(res, 0, sizeof *res);
    if (o->epochs < 1 || o->epochs > 10000)
        return sm_error(err, SM_ERR_INVALID, "epochs %d: expected 1..10000", o->epochs);
    if (o->max_steps < 0)
        return sm_error(err, SM_ERR_INVALID, "max_steps %ld: expected >= 0 (0: all epochs)",
                        o->max_steps);
    if (!(o->lr > 0 && o->lr < 1))
        return sm_error(err, SM_ERR_INVALID, "lr %g: expected a number in (0, 1)", (double)o->lr);
    if (o->batch_size < 1 || o->batch_size > 65536)
        return sm_error(err, SM_ERR_INVALID, "batch_size %d: expected 1..65536", o->batch_size);
    if (o->accumulation < 1 || o->accumulation > o->batch_size)
        return sm_error(err, SM_ERR_INVALID, "accumulation %d: expected 1..batch_size (%d)",
                        o->accumulation, o->batch_size);
    if (o->max_length != 0 && o->max_length < 2)
        return sm_error(err, SM_ERR_INVALID, "max_length %d: expected at least 2", o->max_length);
    if (!(o->mask_prob > 0 && o->mask_prob < 1))
        return sm_error(err, SM_ERR_INVALID, "mask_prob %g: expected 0 < p < 1",
                        (double)o->mask_prob);
    if (!(o->mask_token_frac >= 0 && o->random_token_frac >= 0 &&
          o->mask_token_frac + o->random_token_frac <= 1))
        return sm_error(err, SM_ERR_INVALID,
                        "mask_token_frac %g and random_token_frac %g: expected two shares "
                        "adding up to at most 1",
                        (double)o->mask_token_frac, (double)o->random_token_frac);
    if (o->max_predictions < 0)
        return sm_error(err, SM_ERR_INVALID, "max_predictions %d: expected >= 0",
                        o->max_predictions);
    if (!(o->valid_fraction >= 0 && o->valid_fraction < 1))
        return sm_error(err, SM_ERR_INVALID, "valid_fraction %g: expected 0 <= f < 1",
                        (double)o->valid_fraction);
    if (!(o->weight_decay >= 0 && o->weight_decay < 1))
        return sm_error(err, SM_ERR_INVALID, "weight_decay %g: expected 0 <= w < 1",
                        (double)o->weight_decay);
    if (!(o->warmup_ratio >= 0 && o->warmup_ratio <= 1))
        return sm_error(err, SM_ERR_INVALID, "warmup_ratio %g: expected 0..1",
                        (double)o->warmup_ratio);
    if (isnan(o->grad_clip)) return sm_error(err, SM_ERR_INVALID, "grad_clip: not a number");
    if (!(o->dropout < 1))
        return sm_error(err, SM_ERR_INVALID, "dropout %g: expected < 1 (negative: the config's)",
                        (double)o->dropout);
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1 && o->eps > 0))
        return sm_error(err, SM_ERR_INVALID, "AdamW betas (%g, %g) and eps %g out of range",
                        (double)o->beta1, (double)o->beta2, (double)o->eps);
    if (!m->tok)
        return sm_error(err, SM_ERR_INVALID, "pretraining: the model has no vocabulary");
    if (ds->t.vocab_size > m->cfg.vocab_size)
        return sm_error(err, SM_ERR_INVALID,
                        "pretraining: the dataset's vocabulary (%d) is larger than the model's (%d)",
                        ds->t.vocab_size, m->cfg.vocab_size);
    if ((rc = mlm_masking_init(m->tok, &st.mk, err))) return rc;
    st.mk.prob = o->mask_prob;
    st.mk.mask_frac = o->mask_token_frac;
    st.mk.random_frac = o->random_token_frac;
    st.mk.vocab_size = m->cfg.vocab_size < st.mk.vocab_size ? m->cfg.vocab_size : st.mk.vocab_size;
    st.pad = tokenizer_pad_id(m->tok);
    st.max_len = bert_max_length(&m->cfg);
    if (o->max_length && o->max_length < st.max_len) st.max_len = o->max_length;

    int n = ds->t.rows, n_valid = 0;
    if (o->valid_fraction > 0) {
        n_valid = (int)floor(n * (double)o->valid_fraction + 0.5);
        if (n_valid < 1) n_valid = 1;
    }
    int n_train = n - n_valid;
    if (n_train < 1)
        return sm_error(err, SM_ERR_INVALID,
                        "pretraining: %d rows leave none for training after holding out %d", n,
                        n_valid);
    st.micro = (o->batch_size + o->accumulation - 1) / o->accumulation;
    int slots = (o->batch_size + st.micro - 1) / st.micro;
    long steps_per_epoch = (n_train + o->batch_size - 1) / o->batch_size;
    long total_steps = steps_per_epoch * o->epochs;
    if (o->max_steps && o->max_steps < total_steps) total_steps = o->max_steps;
    long warmup = (long)ceil(total_steps * (double)o->warmup_ratio);
    /* The head's rows per micro-batch: the mean plus 6 standard deviations
     * of the predicted count when every position is maskable. */
    double N = (double)st.micro * st.max_len, pm = o->mask_prob;
    st.max_pred = o->max_predictions ? o->max_predictions
                                     : (int)ceil(N * pm + 6 * sqrt(N * pm * (1 - pm)) + 8);
    if (st.max_pred > (int)N) st.max_pred = (int)N;

    size_t tile = (size_t)slots * st.micro * st.max_len;
    st.perm = malloc((size_t)n * sizeof *st.perm);
    st.train_idx = malloc((size_t)n_train * sizeof *st.train_idx);
    st.valid_idx = malloc((size_t)(n_valid ? n_valid : 1) * sizeof *st.valid_idx);
    st.batches = malloc((size_t)steps_per_epoch * sizeof *st.batches);
    st.raw = malloc((size_t)st.max_len * sizeof *st.raw);
    st.ids = malloc(tile * sizeof *st.ids);
    st.labels = malloc(tile * sizeof *st.labels);
    st.lengths = malloc((size_t)slots * st.micro * sizeof *st.lengths);
    st.T = malloc((size_t)slots * sizeof *st.T);
    st.count = malloc((size_t)slots * sizeof *st.count);
    res->train_loss = malloc((size_t)o->epochs * sizeof *res->train_loss);
    res->valid_loss = malloc((size_t)o->epochs * sizeof *res->valid_loss);
    if (!st.perm || !st.train_idx || !st.valid_idx || !st.batches || !st.raw || !st.ids ||
        !st.labels || !st.lengths || !st.T || !st.count || !res->train_loss || !res->valid_loss) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory setting up pretraining");
        goto end;
    }
    uint64_t split_rng = dropout_mix64(o->seed ^ 0x5011700ull);
    for (int i = 0; i < n; i++) st.perm[i] = i;
    shuffle(st.perm, n, &split_rng);
    memcpy(st.valid_idx, st.perm, (size_t)n_valid * sizeof *st.perm);
    memcpy(st.train_idx, st.perm + n_valid, (size_t)n_train * sizeof *st.perm);
    token_dataset_sort_by_len(&ds->t, st.valid_idx, n_valid);
    token_dataset_sort_by_len(&ds->t, st.train_idx, n_train);

    /* Device state: encoder then head in one arena. */
    if ((rc = pretrain_param_table(&m->cfg, &specs, &n_specs, &st.total, &st.head_offset, err)))
        goto end;
    st.enc_floats = st.head_offset;
    if (head->n_floats != st.total - st.head_offset || m->n_floats < st.enc_floats) {
        rc = sm_error(err, SM_ERR_INVALID, "pretraining: the MLM head does not fit the model");
        goto end;
    }
    st.host = malloc(st.total * sizeof *st.host);
    st.params = be->alloc(be, st.total * sizeof(float));
    st.grads = be->alloc(be, st.total * sizeof(float));
    if (!st.host || !st.params || !st.grads) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of %s memory for %zu parameters and gradients",
                      be->name, st.total);
        goto end;
    }
    if ((rc = be->upload(be, st.params, m->arena, st.enc_floats * sizeof(float))) ||
        (rc = be->upload(be, st.params + st.head_offset, head->arena,
                         head->n_floats * sizeof(float)))) {
        rc = sm_error(err, rc, "%s backend: uploading the parameters failed", be->name);
        goto end;
    }
    if ((rc = bert_params_bind(&m->cfg, 0, st.params, &st.p, err))) goto end;
    if ((rc = bert_params_bind(&m->cfg, 0, st.grads, &st.g, err))) goto end;
    bert_mlm_params_bind(&m->cfg, st.params + st.head_offset, &st.hp);
    bert_mlm_params_bind(&m->cfg, st.grads + st.head_offset, &st.hg);
    if ((rc = adamw_create_table(be, specs, n_specs, st.total, &st.opt, err))) goto end;
    if ((rc = bert_mlm_ws_create(be, &m->cfg, st.micro, st.max_len, st.max_pred, &st.ws, err)))
        goto end;
    res->device_bytes = 4 * st.total * sizeof(float) + bert_mlm_ws_bytes(st.ws);

    adamw_hparams hp = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->grad_clip};
    bert_dropout drop;
    bert_dropout_from_config(&m->cfg, o->dropout, o->seed, &drop);
    res->n_train = n_train;
    res->n_valid = n_valid;
    long step = 0;
    uint64_t micro_step = 0;
    for (int epoch = 1; epoch <= o->epochs && step < total_steps; epoch++) {
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
        long epoch_pred = 0;
        for (long s = 0; s < steps_per_epoch && step < total_steps; s++) {
            double ts = now_sec();
            int first = st.batches[s] * o->batch_size;
            int count = n_train - first < o->batch_size ? n_train - first : o->batch_size;
            /* Mask the whole step first: the loss is the mean over all its
             * predicted positions. */
            long predicted = 0;
            int used = 0;
            for (int mf = 0; mf < count; mf += st.micro, used++) {
                int B = count - mf < st.micro ? count - mf : st.micro;
                st.count[used] = build_batch(&st, ds, st.train_idx + first + mf, B, epoch, o->seed,
                                             used, &st.T[used]);
                predicted += st.count[used];
            }
            if ((rc = be->zero(be, st.grads, st.total * sizeof(float)))) {
                rc = sm_error(err, rc, "%s backend: clearing gradients failed", be->name);
                goto end;
            }
            double loss_sum = 0;
            for (int k = 0, mf = 0; k < used; k++, mf += st.micro) {
                if (o->interrupt && o->interrupt(o->user)) {
                    rc = sm_error(err, SM_ERR_INTERRUPTED,
                                  "pretraining interrupted at epoch %d, step %ld", epoch, step + 1);
                    goto end;
                }
                int B = count - mf < st.micro ? count - mf : st.micro, got;
                size_t at = (size_t)k * st.micro * st.max_len;
                double l;
                drop.step = micro_step++;
                if ((rc = bert_mlm_forward(&m->cfg, &st.p, &st.hp, st.ws, st.ids + at,
                                           st.lengths + (size_t)k * st.micro, st.labels + at, B,
                                           st.T[k], &drop, &l, &got, err)))
                    goto end;
                if (!isfinite(l)) {
                    rc = sm_error(err, SM_ERR_INVALID,
                                  "pretraining diverged: the loss is %s at epoch %d, step %ld; "
                                  "try a lower lr",
                                  isnan(l) ? "NaN" : "infinite", epoch, step + 1);
                    goto end;
                }
                loss_sum += l;
                if (got && (rc = bert_mlm_backward(&m->cfg, &st.p, &st.hp, &st.g, &st.hg, st.ws,
                                                   1.0f / (float)predicted, err)))
                    goto end;
            }
            float lr = lr_linear_schedule(o->lr, step, warmup, total_steps);
            float norm = 0;
            if (predicted) {
                if ((rc = adamw_step(st.opt, st.params, st.grads, &hp, lr, &norm, err))) goto end;
            } else {
                res->skipped_steps++;
            }
            step++;
            examples_done += count;
            epoch_loss += loss_sum;
            epoch_pred += predicted;
            res->predicted += predicted;
            train_time += now_sec() - ts;
            if (o->progress) {
                pretrain_progress pr = {0};
                pr.epoch = epoch;
                pr.epochs = o->epochs;
                pr.step = step;
                pr.total_steps = total_steps;
                pr.loss = predicted ? loss_sum / (double)predicted : NAN;
                pr.predicted = predicted;
                pr.lr = lr;
                pr.grad_norm = norm;
                pr.examples_per_sec = train_time > 0 ? examples_done / train_time : 0;
                pr.elapsed_sec = now_sec() - t0;
                pr.eta_sec = pr.elapsed_sec / step * (double)(total_steps - step);
                pr.valid_loss = NAN;
                if (o->progress(o->user, &pr)) {
                    rc = sm_error(err, SM_ERR_INTERRUPTED,
                                  "pretraining stopped at epoch %d, step %ld", epoch, step);
                    goto end;
                }
            }
        }
        double vloss = NAN;
        if (n_valid && (rc = evaluate(&st, m, ds, n_valid, o->seed, &vloss, err))) goto end;
        res->train_loss[epoch - 1] = epoch_pred ? epoch_loss / (double)epoch_pred : NAN;
        res->valid_loss[epoch - 1] = vloss;
        res->epochs = epoch;
        if (o->progress) {
            pretrain_progress pr = {0};
            pr.epoch = epoch;
            pr.epochs = o->epochs;
            pr.step = step;
            pr.total_steps = total_steps;
            pr.loss = res->train_loss[epoch - 1];
            pr.predicted = epoch_pred;
            pr.lr = lr_linear_schedule(o->lr, step, warmup, total_steps);
            pr.examples_per_sec = train_time > 0 ? examples_done / train_time : 0;
            pr.elapsed_sec = now_sec() - t0;
            pr.eta_sec = pr.elapsed_sec / step * (double)(total_steps - step);
            pr.epoch_done = 1;
            pr.epoch_loss = res->train_loss[epoch - 1];
            pr.valid_loss = vloss;
            if (o->progress(o->user, &pr)) {
                rc = sm_error(err, SM_ERR_INTERRUPTED, "pretraining stopped after epoch %d", epoch);
                goto end;
            }
        }
    }
    if ((rc = be->download(be, st.host, st.params, st.total * sizeof(float))) ||
        (rc = be->synchronize(be))) {
        rc = sm_error(err, rc, "%s backend: reading the parameters back failed", be->name);
        goto end;
    }
    /* Everything but the pooler (not trained, equal anyway) goes back. */
    memcpy(m->arena, st.host, st.enc_floats * sizeof *m->arena);
    memcpy(head->arena, st.host + st.head_offset, head->n_floats * sizeof *head->arena);
    res->steps = step;
    res->seconds = now_sec() - t0;
    res->examples_per_sec = train_time > 0 ? examples_done / train_time : 0;
    rc = SM_OK;
end:
    free(specs);
    run_state_free(&st);
    if (rc) {
        pretrain_result_free(res);
        res->epochs = 0;
    }
    return rc;
}

/* ---- saving ---------------------------------------------------------------------- */

int pretrain_save_safetensors(const bert_model *m, const bert_mlm_head *head, int dtype,
                              void **out, size_t *out_len, char *err)
{
    bert_param_spec *specs = NULL, *hspecs = NULL;
    st_write_entry *entries = NULL;
    char (*names)[160] = NULL;
    int n = 0, nh = 0, rc;
    size_t total, htotal;
    *out = NULL;
    *out_len = 0;
    const char *prefix = !strcmp(m->cfg.model_type, "ernie")     ? "ernie."
                         : !strcmp(m->cfg.model_type, "roberta") ? "roberta."
                                                                 : "bert.";
    if ((rc = bert_param_table(&m->cfg, m->has_head, &specs, &n, &total, err))) return rc;
    if (head && (rc = bert_mlm_param_table(&m->cfg, &hspecs, &nh, &htotal, err))) goto end;
    entries = calloc((size_t)(n + nh), sizeof *entries);
    names = calloc((size_t)(n + nh), sizeof *names);
    if (!entries || !names) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory saving a model");
        goto end;
    }
    for (int i = 0; i < n + nh; i++) {
        const bert_param_spec *s = i < n ? &specs[i] : &hspecs[i - n];
        if (i >= n || !strncmp(s->name, "classifier.", 11))
            snprintf(names[i], sizeof names[i], "%s", s->name);
        else
            snprintf(names[i], sizeof names[i], "%s%s", prefix, s->name);
        entries[i].name = names[i];
        entries[i].data = (i < n ? m->arena : head->arena) + s->offset;
        entries[i].ndim = s->ndim;
        entries[i].shape[0] = s->shape[0];
        entries[i].shape[1] = s->shape[1];
    }
    rc = safetensors_serialize(entries, n + nh, (st_dtype)dtype, (uint8_t **)out, out_len, err);
end:
    free(names);
    free(entries);
    free(specs);
    free(hspecs);
    return rc;
}

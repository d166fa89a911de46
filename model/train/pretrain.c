/* pretrain.c: masked-language-model pretraining: the unlabeled dataset,
 * pretrain_run, which runs the training loop (train_loop.h's loop_run:
 * epochs, steps, micro-batches, the update) with its own masking, MLM loss
 * over encoder and head and held-out loss; and saving encoder + head as
 * safetensors.
 *
 * The loop's device arenas are laid out by pretrain_param_table (encoder,
 * then head). Owns, while it runs, one MLM workspace, host batch buffers
 * and a host copy of the trained parameters; none is allocated per step.
 * Masks come from splitmix64 streams keyed by the seed.
 */
#include "train/pretrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/rng.h"
#include "format/safetensors.h"
#include "tokenize/tokenizer.h"
#include "train/optimizer.h"
#include "train/token_dataset.h"
#include "train/train_loop.h"

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
    loop_options_default(&o->loop);
    o->loop.epochs = 1;
    o->loop.lr = 1e-4f;
    o->mask_prob = 0.15f;
    o->mask_token_frac = 0.8f;
    o->random_token_frac = 0.1f;
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
    return rng_mix64(rng_mix64(seed ^ 0x4D4C4D4D41534Bull) ^
                     rng_mix64(((uint64_t)(unsigned)epoch << 32) | (unsigned)row));
}

/* What pretrain_run holds besides the loop; freed in one place. */
typedef struct run_state {
    train_loop *L;
    const bert_model *m;
    const pretrain_dataset *ds;
    const pretrain_options *o;
    pretrain_result *res;
    bert_params p, g;       /* views of the loop's arenas: the encoder */
    bert_mlm_params hp, hg; /* and the head */
    bert_mlm_ws *ws;
    int *raw;          /* (max_len) */
    int *ids, *labels; /* (batch_size, max_len) the step's masked rows */
    int *lengths;      /* (batch_size) */
    int *T;            /* (accumulation) padded length of each micro-batch */
    int *count;        /* (accumulation) predicted positions of each */
    float *host;       /* (total) host copy read back at the end */
    mlm_masking mk;
    int max_pred;
    int got; /* the last micro-batch's predicted positions */
    size_t head_offset, enc_floats;
    double vloss; /* the last epoch's held-out loss, NAN with no split */
} run_state;

static void run_state_free(run_state *st)
{
    bert_params_release(&st->p);
    bert_params_release(&st->g);
    bert_mlm_ws_free(st->ws);
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
static int build_batch(run_state *st, const int *idx, int B, int epoch, int slot, int *T_out)
{
    const token_dataset *ds = &st->ds->t;
    int max_len = st->L->max_len, micro = st->L->micro;
    int T = token_dataset_batch_len(ds, idx, B, max_len);
    int *ids = st->ids + (size_t)slot * micro * max_len;
    int *labels = st->labels + (size_t)slot * micro * max_len;
    int *lengths = st->lengths + (size_t)slot * micro;
    int pad = st->L->pad, count = 0;
    for (int b = 0; b < B; b++) {
        int *row = ids + (size_t)b * T, *lab = labels + (size_t)b * T;
        int n = token_dataset_row_ids(ds, idx[b], st->raw, max_len);
        mlm_mask(&st->mk, mask_key(st->o->loop.seed, epoch, idx[b]), st->raw, n, row, lab);
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

static int evaluate(run_state *st, double *loss, char *err)
{
    double sum = 0;
    long count = 0;
    int n_valid = st->L->n_valid, micro = st->L->micro;
    for (int first = 0; first < n_valid; first += micro) {
        int B = n_valid - first < micro ? n_valid - first : micro, T, n;
        build_batch(st, st->L->valid_idx + first, B, 0, 0, &T);
        double l;
        int rc = bert_mlm_forward(&st->m->cfg, &st->p, &st->hp, st->ws, st->ids, st->lengths,
                                  st->labels, B, T, NULL, &l, &n, err);
        if (rc) return rc;
        sum += l;
        count += n;
    }
    *loss = count ? sum / (double)count : NAN;
    return SM_OK;
}

/* ---- the loop's hooks: a step, its micro-batches, progress, the epoch's end ---- */

/* Masks every micro-batch of step s into its slot first: the loss is the
 * mean over all the step's predicted positions, whose count it returns. */
static long mask_step(void *user, const loop_step *s)
{
    run_state *st = user;
    long predicted = 0;
    for (int k = 0; k < s->n_micro; k++) {
        const int *idx;
        int B;
        loop_micro_rows(st->L, s, k, &idx, &B);
        st->count[k] = build_batch(st, idx, B, s->epoch, k, &st->T[k]);
        predicted += st->count[k];
    }
    return predicted;
}

/* The MLM loss sum of micro-batch k of a step, masked into slot k by
 * mask_step; st->got: its predicted positions. */
static int micro_forward(void *user, int k, const loop_micro *mb, double *loss, char *err)
{
    run_state *st = user;
    size_t at = (size_t)k * st->L->micro * st->L->max_len;
    return bert_mlm_forward(&st->m->cfg, &st->p, &st->hp, st->ws, st->ids + at,
                            st->lengths + (size_t)k * st->L->micro, st->labels + at, mb->rows,
                            st->T[k], mb->drop, loss, &st->got, err);
}

/* Backward of the last micro_forward, which predicted st->got positions. */
static int micro_backward(void *user, float scale, char *err)
{
    run_state *st = user;
    if (!st->got) return SM_OK; /* nothing predicted: no gradient */
    return bert_mlm_backward(&st->m->cfg, &st->p, &st->hp, &st->g, &st->hg, st->ws, scale, err);
}

/* Tells the caller's progress callback r (with the held-out loss at an
 * epoch's end); its nonzero answer stops pretraining. */
static int report(void *user, const loop_report *r, char *err)
{
    run_state *st = user;
    if (!st->o->progress) return SM_OK;
    pretrain_progress pr = {0};
    pr.loop = *r;
    pr.valid_loss = r->epoch_done ? st->vloss : NAN;
    return st->o->progress(st->o->loop.user, &pr) ? loop_stopped(st->L, r, err) : SM_OK;
}

/* After an epoch's steps: held-out loss, the epoch's results, progress. */
static int end_epoch(void *user, int epoch, char *err)
{
    run_state *st = user;
    loop_report r;
    int rc;
    st->vloss = NAN;
    if (st->L->n_valid && (rc = evaluate(st, &st->vloss, err))) return rc;
    st->res->train_loss[epoch - 1] = loop_epoch_loss(st->L);
    st->res->valid_loss[epoch - 1] = st->vloss;
    st->res->epochs = epoch;
    loop_epoch_report(st->L, &r);
    return report(st, &r, err);
}

static const loop_hooks k_hooks = {.divisor = mask_step,
                                   .forward = micro_forward,
                                   .backward = micro_backward,
                                   .step_done = report,
                                   .epoch_done = end_epoch};

int pretrain_run(bert_model *m, bert_mlm_head *head, backend *be, const pretrain_dataset *ds,
                 const pretrain_options *o, pretrain_result *res, char *err)
{
    train_loop L = {.be = be};
    run_state st = {.L = &L, .m = m, .ds = ds, .o = o, .res = res};
    const loop_options *lo = &o->loop;
    bert_param_spec *specs = NULL;
    int n_specs, rc = SM_OK;
    m->cfg.int8_check.set = 0; /* new weights: an INT8 check no longer holds */

    memset(res, 0, sizeof *res);
    if ((rc = loop_check_sizes(lo, err))) return rc;
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
    if ((rc = loop_check_optimizer(lo, err))) return rc;
    if (!m->tok) return sm_error(err, SM_ERR_INVALID, "pretraining: the model has no vocabulary");
    if (ds->t.vocab_size > m->cfg.vocab_size)
        return sm_error(
            err, SM_ERR_INVALID,
            "pretraining: the dataset's vocabulary (%d) is larger than the model's (%d)",
            ds->t.vocab_size, m->cfg.vocab_size);
    if ((rc = mlm_masking_init(m->tok, &st.mk, err))) return rc;
    st.mk.prob = o->mask_prob;
    st.mk.mask_frac = o->mask_token_frac;
    st.mk.random_frac = o->random_token_frac;
    st.mk.vocab_size = m->cfg.vocab_size < st.mk.vocab_size ? m->cfg.vocab_size : st.mk.vocab_size;

    loop_init(&L, "pretraining", lo, be, &ds->t, m);
    if (L.n_train < 1)
        return sm_error(err, SM_ERR_INVALID,
                        "pretraining: %d rows leave none for training after holding out %d",
                        ds->t.rows, L.n_valid);
    int slots = (o->loop.batch_size + L.micro - 1) / L.micro;
    /* The head's rows per micro-batch: the mean plus 6 standard deviations
     * of the predicted count when every position is maskable. */
    double N = (double)L.micro * L.max_len, pm = o->mask_prob;
    st.max_pred = o->max_predictions ? o->max_predictions
                                     : (int)ceil(N * pm + 6 * sqrt(N * pm * (1 - pm)) + 8);
    if (st.max_pred > (int)N) st.max_pred = (int)N;

    if ((rc = loop_split(&L, err))) goto end;
    size_t tile = (size_t)slots * L.micro * L.max_len;
    st.raw = malloc((size_t)L.max_len * sizeof *st.raw);
    st.ids = malloc(tile * sizeof *st.ids);
    st.labels = malloc(tile * sizeof *st.labels);
    st.lengths = malloc((size_t)slots * L.micro * sizeof *st.lengths);
    st.T = malloc((size_t)slots * sizeof *st.T);
    st.count = malloc((size_t)slots * sizeof *st.count);
    res->train_loss = malloc((size_t)o->loop.epochs * sizeof *res->train_loss);
    res->valid_loss = malloc((size_t)o->loop.epochs * sizeof *res->valid_loss);
    if (!st.raw || !st.ids || !st.labels || !st.lengths || !st.T || !st.count || !res->train_loss ||
        !res->valid_loss) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of memory setting up pretraining");
        goto end;
    }

    /* Device state: encoder then head in one arena. */
    size_t total;
    if ((rc = pretrain_param_table(&m->cfg, &specs, &n_specs, &total, &st.head_offset, err)))
        goto end;
    st.enc_floats = st.head_offset;
    if (head->n_floats != total - st.head_offset || m->n_floats < st.enc_floats) {
        rc = sm_error(err, SM_ERR_INVALID, "pretraining: the MLM head does not fit the model");
        goto end;
    }
    st.host = malloc(total * sizeof *st.host);
    if (!st.host) {
        rc = sm_error(err, SM_ERR_NOMEM, "out of %s memory for %zu parameters and gradients",
                      be->name, total);
        goto end;
    }
    if ((rc = loop_arenas(&L, total, err))) goto end;
    if ((rc = loop_upload(&L, 0, m->arena, st.enc_floats, err))) goto end;
    if ((rc = loop_upload(&L, st.head_offset, head->arena, head->n_floats, err))) goto end;
    if ((rc = bert_params_bind(&m->cfg, 0, L.params, &st.p, err))) goto end;
    if ((rc = bert_params_bind(&m->cfg, 0, L.grads, &st.g, err))) goto end;
    bert_mlm_params_bind(&m->cfg, L.params + st.head_offset, &st.hp);
    bert_mlm_params_bind(&m->cfg, L.grads + st.head_offset, &st.hg);
    if ((rc = adamw_create_table(be, specs, n_specs, total, &L.opt, err))) goto end;
    if ((rc = bert_mlm_ws_create(be, &m->cfg, L.micro, L.max_len, st.max_pred, &st.ws, err)))
        goto end;
    res->device_bytes = 4 * total * sizeof(float) + bert_mlm_ws_bytes(st.ws);
    res->n_train = L.n_train;
    res->n_valid = L.n_valid;

    /* The run: each step masked whole, its loss divided by the predicted
     * positions, then its micro-batches from their slots. */
    if ((rc = loop_run(&L, &k_hooks, &st, err))) goto end;
    if ((rc = loop_download(&L, st.host, err))) goto end;
    /* Everything but the pooler (not trained, equal anyway) goes back. */
    memcpy(m->arena, st.host, st.enc_floats * sizeof *m->arena);
    memcpy(head->arena, st.host + st.head_offset, head->n_floats * sizeof *head->arena);
    res->steps = L.step;
    res->seconds = loop_elapsed(&L);
    res->examples_per_sec = loop_examples_per_sec(&L);
    rc = SM_OK;
end:
    res->predicted = L.denom_done;
    res->skipped_steps = L.skipped_steps;
    free(specs);
    run_state_free(&st);
    loop_free(&L);
    if (rc) {
        pretrain_result_free(res);
        res->epochs = 0;
    }
    return rc;
}

/* ---- saving ---------------------------------------------------------------------- */

int pretrain_save_safetensors(const bert_model *m, const bert_mlm_head *head, int dtype, void **out,
                              size_t *out_len, char *err)
{
    bert_param_spec *specs = NULL, *hspecs = NULL;
    st_write_entry *entries = NULL;
    char(*names)[160] = NULL;
    int n = 0, nh = 0, rc;
    size_t total, htotal;
    *out = NULL;
    *out_len = 0;
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
        if (i >= n) snprintf(names[i], sizeof names[i], "%s", s->name);
        else bert_checkpoint_name(&m->cfg, s->name, names[i], sizeof names[i]);
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

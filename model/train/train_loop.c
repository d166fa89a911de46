/* train_loop.c: the loop trainer_run and pretrain_run run (loop_run) and
 * its pieces: option checks, the seeded split and batch orders, the device
 * arenas and the epochs of optimizer steps with schedule, accumulation,
 * interrupts, divergence checks and progress reports.
 *
 * Owns, while a run lasts, the row orders, the parameter and gradient
 * arenas and the optimizer; nothing is allocated per step. Calls down (the
 * backend table, optimizer.h, token_dataset.h, bert_dropout), and back up
 * only through the caller's loop_hooks, in loop_run.
 */
#include "train/train_loop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "core/rng.h"
#include "tokenize/tokenizer.h"

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

/* ---- options ------------------------------------------------------------------- */

void loop_options_default(loop_options *o)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 32;
    o->accumulation = 1;
    o->max_length = 128;
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

int loop_check_sizes(const loop_options *o, char *err)
{
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
    return SM_OK;
}

int loop_check_optimizer(const loop_options *o, char *err)
{
    if (!(o->valid_fraction >= 0 && o->valid_fraction < 1))
        return sm_error(err, SM_ERR_INVALID, "valid_fraction %g: expected 0 <= f < 1",
                        (double)o->valid_fraction);
    if (!(o->weight_decay >= 0 && o->weight_decay < 1))
        return sm_error(err, SM_ERR_INVALID, "weight_decay %g: expected 0 <= w < 1",
                        (double)o->weight_decay);
    if (!(o->warmup_ratio >= 0 && o->warmup_ratio <= 1))
        return sm_error(err, SM_ERR_INVALID, "warmup_ratio %g: expected 0..1",
                        (double)o->warmup_ratio);
    if (!(o->head_lr >= 0 && o->head_lr < 1))
        return sm_error(err, SM_ERR_INVALID, "head_lr %g: expected 0 <= lr < 1 (0: lr)",
                        (double)o->head_lr);
    if (isnan(o->grad_clip)) return sm_error(err, SM_ERR_INVALID, "grad_clip: not a number");
    if (!(o->dropout < 1))
        return sm_error(err, SM_ERR_INVALID, "dropout %g: expected < 1 (negative: the config's)",
                        (double)o->dropout);
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1 && o->eps > 0))
        return sm_error(err, SM_ERR_INVALID, "AdamW betas (%g, %g) and eps %g out of range",
                        (double)o->beta1, (double)o->beta2, (double)o->eps);
    return SM_OK;
}

/* ---- setup --------------------------------------------------------------------- */

void loop_init(train_loop *L, const char *what, const loop_options *o, backend *be,
               const token_dataset *ds, const bert_model *m)
{
    memset(L, 0, sizeof *L);
    L->t0 = now_sec();
    L->what = what;
    L->o = *o;
    L->be = be;
    L->ds = ds;
    L->max_len = bert_max_length(&m->cfg);
    if (o->max_length && o->max_length < L->max_len) L->max_len = o->max_length;
    L->pad = m->tok ? tokenizer_pad_id(m->tok) : m->cfg.pad_token_id;
    int n = ds->rows;
    if (o->valid_fraction > 0) {
        L->n_valid = (int)floor(n * (double)o->valid_fraction + 0.5);
        if (L->n_valid < 1) L->n_valid = 1;
    }
    L->n_train = n - L->n_valid;
    L->micro = (o->batch_size + o->accumulation - 1) / o->accumulation;
    L->steps_per_epoch = (L->n_train + o->batch_size - 1) / o->batch_size;
    L->total_steps = L->steps_per_epoch * o->epochs;
    if (o->max_steps && o->max_steps < L->total_steps) L->total_steps = o->max_steps;
    L->warmup = (long)ceil(L->total_steps * (double)o->warmup_ratio);
    L->hp = (adamw_hparams){o->lr,           o->beta1,     o->beta2,  o->eps,
                            o->weight_decay, o->grad_clip, o->head_lr};
    bert_dropout_from_config(&m->cfg, o->dropout, o->seed, &L->drop);
}

/* The seeded order whose first n_valid rows are the validation split. */
static void split_order(int n, uint64_t seed, int *perm)
{
    uint64_t split_rng = rng_mix64(seed ^ 0x5011700ull);
    for (int i = 0; i < n; i++) perm[i] = i;
    shuffle(perm, n, &split_rng);
}

int loop_valid_rows(int n, const loop_options *o, unsigned char *is_valid, char *err)
{
    int n_valid = 0;
    if (o->valid_fraction > 0) {
        n_valid = (int)floor(n * (double)o->valid_fraction + 0.5);
        if (n_valid < 1) n_valid = 1;
    }
    int *perm = malloc((size_t)(n ? n : 1) * sizeof *perm);
    if (!perm) return sm_error(err, SM_ERR_NOMEM, "out of memory splitting %d rows", n);
    split_order(n, o->seed, perm);
    memset(is_valid, 0, (size_t)n);
    for (int i = 0; i < n_valid && i < n; i++) is_valid[perm[i]] = 1;
    free(perm);
    return SM_OK;
}

int loop_split(train_loop *L, char *err)
{
    int n = L->ds->rows, n_valid = L->n_valid, n_train = L->n_train;
    L->perm = malloc((size_t)n * sizeof *L->perm);
    L->train_idx = malloc((size_t)n_train * sizeof *L->train_idx);
    L->valid_idx = malloc((size_t)(n_valid ? n_valid : 1) * sizeof *L->valid_idx);
    L->batches = malloc((size_t)L->steps_per_epoch * sizeof *L->batches);
    if (!L->perm || !L->train_idx || !L->valid_idx || !L->batches)
        return sm_error(err, SM_ERR_NOMEM, "out of memory setting up %s", L->what);
    split_order(n, L->o.seed, L->perm);
    memcpy(L->valid_idx, L->perm, (size_t)n_valid * sizeof *L->perm);
    memcpy(L->train_idx, L->perm + n_valid, (size_t)n_train * sizeof *L->perm);
    token_dataset_sort_by_len(L->ds, L->valid_idx, n_valid);
    token_dataset_sort_by_len(L->ds, L->train_idx, n_train); /* canonical before shuffling */
    return SM_OK;
}

int loop_arenas(train_loop *L, size_t total, char *err)
{
    backend *be = L->be;
    L->total = total;
    L->params = be->alloc(be, total * sizeof(float));
    L->grads = be->alloc(be, total * sizeof(float));
    if (!L->params || !L->grads)
        return sm_error(err, SM_ERR_NOMEM, "out of %s memory for %zu parameters and gradients",
                        be->name, total);
    return SM_OK;
}

int loop_upload(train_loop *L, size_t offset, const float *src, size_t n, char *err)
{
    backend *be = L->be;
    int rc = be->upload(be, L->params + offset, src, n * sizeof(float));
    if (rc) return sm_error(err, rc, "%s backend: uploading the parameters failed", be->name);
    return SM_OK;
}

int loop_download(train_loop *L, float *dst, char *err)
{
    backend *be = L->be;
    int rc = be->download(be, dst, L->params, L->total * sizeof(float));
    if (!rc) rc = be->synchronize(be);
    if (rc) return sm_error(err, rc, "%s backend: reading the parameters back failed", be->name);
    return SM_OK;
}

void loop_free(train_loop *L)
{
    backend *be = L->be;
    if (L->params) be->free(be, L->params);
    if (L->grads) be->free(be, L->grads);
    adamw_free(L->opt);
    free(L->perm);
    free(L->train_idx);
    free(L->valid_idx);
    free(L->batches);
    L->params = L->grads = NULL;
    L->opt = NULL;
    L->perm = L->train_idx = L->valid_idx = L->batches = NULL;
}

double loop_examples_per_sec(const train_loop *L)
{
    return L->train_time > 0 ? L->examples_done / L->train_time : 0;
}

double loop_elapsed(const train_loop *L)
{
    return now_sec() - L->t0;
}

/* ---- the epochs ------------------------------------------------------------------ */

/* Epoch `epoch`'s batches: shuffle; optionally sort windows of 50 batches
 * by length so each batch pads little; shuffle the batch order. */
static void order_epoch(train_loop *L, int epoch)
{
    const loop_options *o = &L->o;
    int n_train = L->n_train;
    uint64_t erng = rng_mix64(o->seed ^ rng_mix64(0xE90C0000ull + (uint64_t)epoch));
    shuffle(L->train_idx, n_train, &erng);
    if (o->group_by_length) {
        int window = o->batch_size * 50;
        for (int w = 0; w < n_train; w += window)
            token_dataset_sort_by_len(L->ds, L->train_idx + w,
                                      n_train - w < window ? n_train - w : window);
    }
    for (long s = 0; s < L->steps_per_epoch; s++) L->batches[s] = (int)s;
    shuffle(L->batches, (int)L->steps_per_epoch, &erng);
}

/* A report of the loop's state after a step (or an epoch) whose mean loss
 * is loss over denom. */
static void report(const train_loop *L, int epoch, double loss, long denom, double lr,
                   loop_report *r)
{
    memset(r, 0, sizeof *r);
    r->epoch = epoch;
    r->epochs = L->o.epochs;
    r->step = L->step;
    r->total_steps = L->total_steps;
    r->loss = loss;
    r->denom = denom;
    r->lr = lr;
    r->examples_per_sec = loop_examples_per_sec(L);
    r->elapsed_sec = loop_elapsed(L);
    r->eta_sec = r->elapsed_sec / L->step * (double)(L->total_steps - L->step);
}

int loop_epoch_begin(train_loop *L, int epoch)
{
    if (epoch > L->o.epochs || L->step >= L->total_steps) return 0;
    order_epoch(L, epoch);
    L->epoch = epoch;
    L->epoch_step = 0;
    L->epoch_loss = 0;
    L->epoch_denom = 0;
    return 1;
}

int loop_next_step(train_loop *L, loop_step *s)
{
    int batch = L->o.batch_size;
    if (L->epoch_step >= L->steps_per_epoch || L->step >= L->total_steps) return 0;
    memset(s, 0, sizeof *s);
    s->t0 = now_sec();
    int first = L->batches[L->epoch_step++] * batch;
    s->epoch = L->epoch;
    s->idx = L->train_idx + first;
    s->count = L->n_train - first < batch ? L->n_train - first : batch;
    s->n_micro = (s->count + L->micro - 1) / L->micro;
    return 1;
}

int loop_step_begin(train_loop *L, loop_step *s, long divisor, char *err)
{
    backend *be = L->be;
    int rc;
    s->divisor = divisor;
    s->scale = divisor ? 1.0f / (float)divisor : 0.0f;
    if ((rc = be->zero(be, L->grads, L->total * sizeof(float))))
        return sm_error(err, rc, "%s backend: clearing gradients failed", be->name);
    return SM_OK;
}

void loop_micro_rows(const train_loop *L, const loop_step *s, int k, const int **idx, int *rows)
{
    int first = k * L->micro;
    *idx = s->idx + first;
    *rows = s->count - first < L->micro ? s->count - first : L->micro;
}

int loop_micro_batch(train_loop *L, const loop_step *s, int k, loop_micro *mb, char *err)
{
    const loop_options *o = &L->o;
    if (o->interrupt && o->interrupt(o->user))
        return sm_error(err, SM_ERR_INTERRUPTED, "%s interrupted at epoch %d, step %ld", L->what,
                        s->epoch, L->step + 1);
    loop_micro_rows(L, s, k, &mb->idx, &mb->rows);
    L->drop.step = L->micro_step++;
    mb->drop = &L->drop;
    return SM_OK;
}

int loop_add_loss(const train_loop *L, loop_step *s, double loss, char *err)
{
    if (!isfinite(loss))
        return sm_error(err, SM_ERR_INVALID,
                        "%s diverged: the loss is %s at epoch %d, step %ld; try a lower lr",
                        L->what, isnan(loss) ? "NaN" : "infinite", s->epoch, L->step + 1);
    s->loss_sum += loss;
    return SM_OK;
}

int loop_step_end(train_loop *L, const loop_step *s, loop_report *r, char *err)
{
    const loop_options *o = &L->o;
    float lr = lr_linear_schedule(o->lr, L->step, L->warmup, L->total_steps);
    float norm = 0;
    int rc;
    if (s->divisor) {
        if ((rc = adamw_step(L->opt, L->params, L->grads, &L->hp, lr, &norm, err))) return rc;
    } else {
        L->skipped_steps++;
    }
    L->step++;
    L->examples_done += s->count;
    L->denom_done += s->divisor;
    L->epoch_loss += s->loss_sum;
    L->epoch_denom += s->divisor;
    L->train_time += now_sec() - s->t0;
    report(L, s->epoch, s->divisor ? s->loss_sum / (double)s->divisor : NAN, s->divisor, lr, r);
    r->grad_norm = norm;
    return SM_OK;
}

double loop_epoch_loss(const train_loop *L)
{
    return L->epoch_denom ? L->epoch_loss / (double)L->epoch_denom : NAN;
}

void loop_epoch_report(const train_loop *L, loop_report *r)
{
    const loop_options *o = &L->o;
    double loss = loop_epoch_loss(L);
    report(L, L->epoch, loss, L->epoch_denom,
           lr_linear_schedule(o->lr, L->step, L->warmup, L->total_steps), r);
    r->epoch_done = 1;
    r->epoch_loss = loss;
}

int loop_stopped(const train_loop *L, const loop_report *r, char *err)
{
    if (r->epoch_done)
        return sm_error(err, SM_ERR_INTERRUPTED, "%s stopped after epoch %d", L->what, r->epoch);
    return sm_error(err, SM_ERR_INTERRUPTED, "%s stopped at epoch %d, step %ld", L->what, r->epoch,
                    r->step);
}

/* ---- the run ----------------------------------------------------------------------- */

int loop_run(train_loop *L, const loop_hooks *h, void *user, char *err)
{
    int rc;
    for (int epoch = 1; loop_epoch_begin(L, epoch); epoch++) {
        loop_step s;
        loop_report r;
        while (loop_next_step(L, &s)) {
            if ((rc = loop_step_begin(L, &s, h->divisor(user, &s), err))) return rc;
            for (int k = 0; k < s.n_micro; k++) {
                loop_micro mb;
                double loss;
                if ((rc = loop_micro_batch(L, &s, k, &mb, err)) ||
                    (rc = h->forward(user, k, &mb, &loss, err)) ||
                    (rc = loop_add_loss(L, &s, loss, err)) ||
                    (rc = h->backward(user, s.scale, err)))
                    return rc;
            }
            if ((rc = loop_step_end(L, &s, &r, err)) || (rc = h->step_done(user, &r, err)))
                return rc;
        }
        if ((rc = h->epoch_done(user, epoch, err))) return rc;
    }
    return SM_OK;
}

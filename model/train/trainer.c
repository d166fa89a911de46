/* trainer.c: fine-tuning behind train(): trainer_run, which runs the
 * training loop (train_loop.h's loop_run: epochs, steps, micro-batches, the
 * update) with its own classification batches and loss, validation
 * accuracy and best-epoch selection. Its rows are a train_dataset
 * (train_dataset.c), its model a base with a fitted head or one made from
 * scratch (model_init.c).
 *
 * Everything random (split, shuffling, dropout) comes from splitmix64
 * streams keyed by the seed, and every backend op is deterministic, so a
 * run repeats bit for bit. Owns, while it runs, one training workspace,
 * host batch buffers and a host copy of the best parameters (the loop owns
 * the device arenas); none is allocated per step.
 */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "train/bert_train.h"
#include "train/optimizer.h"
#include "train/token_dataset.h"
#include "train/train_loop.h"

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
    const token_dataset *rows; /* the dataset's rows and labels */
    const float *targets;      /* (rows, K) the dataset's soft targets, or NULL */
    const uint8_t *hard;       /* (rows) with targets: 1 where a row has a label */
    const trainer_options *o;
    trainer_result *res;
    float *best;      /* host copy of the best parameters */
    bert_params p, g; /* views of the loop's device arenas */
    bert_train_ws *ws;
    int *ids, *lengths, *labels; /* (micro, max_len), (micro), (micro) */
    float *soft;                 /* (micro, K) soft targets of the batch, or NULL */
    float *logits;               /* (micro, K) */
    int K;
    double best_acc; /* -1 before the first epoch */
    double acc;      /* the last epoch's, NAN with no split */
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
    const token_dataset *ds = st->rows;
    int max_len = st->L->max_len, T = token_dataset_batch_len(ds, idx, B, max_len);
    for (int b = 0; b < B; b++) {
        int *row = st->ids + (size_t)b * T;
        int n = token_dataset_row_ids(ds, idx[b], row, max_len);
        for (int t = n; t < T; t++) row[t] = st->L->pad;
        st->lengths[b] = n;
        st->labels[b] = ds->label[idx[b]];
        if (!st->soft) continue;
        int K = st->K;
        memcpy(st->soft + (size_t)b * K, st->targets + (size_t)idx[b] * K, K * sizeof(float));
        if (!st->hard[idx[b]]) st->labels[b] = -1;
    }
    return T;
}

/* The batch's loss on st's rows: cross-entropy, or distillation with soft
 * targets. */
static int batch_forward(run_state *st, int B, int T, const bert_dropout *drop, double *loss,
                         float *logits, char *err)
{
    bert_targets tg = {st->labels, st->soft, st->o->distill_alpha, st->o->distill_temperature};
    return bert_train_forward_targets(&st->m->cfg, &st->p, st->ws, st->ids, st->lengths, &tg, B, T,
                                      drop, loss, logits, err);
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
            correct += arg == st->rows->label[st->L->valid_idx[first + b]];
        }
    }
    *accuracy = (double)correct / n_valid;
    return SM_OK;
}

/* ---- the loop's hooks: a step, a micro-batch, progress, the epoch's end ------------ */

/* A step's loss is divided by its rows. */
static long step_divisor(void *user, const loop_step *s)
{
    (void)user;
    return s->count;
}

/* The loss sum of micro-batch mb, with its dropout. */
static int micro_forward(void *user, int k, const loop_micro *mb, double *loss, char *err)
{
    run_state *st = user;
    (void)k;
    int T = build_batch(st, mb->idx, mb->rows);
    return batch_forward(st, mb->rows, T, mb->drop, loss, NULL, err);
}

static int micro_backward(void *user, float scale, char *err)
{
    run_state *st = user;
    return bert_train_backward(&st->m->cfg, &st->p, &st->g, st->ws, scale, err);
}

/* Tells the caller's progress callback r (with the validation accuracy at
 * an epoch's end); its nonzero answer stops training. */
static int report(void *user, const loop_report *r, char *err)
{
    run_state *st = user;
    if (!st->o->progress) return SM_OK;
    trainer_progress pr = {0};
    pr.loop = *r;
    pr.valid_accuracy = r->epoch_done ? st->acc : NAN;
    return st->o->progress(st->o->loop.user, &pr) ? loop_stopped(st->L, r, err) : SM_OK;
}

/* After an epoch's steps: validation, what is kept, progress. */
static int end_epoch(void *user, int epoch, char *err)
{
    run_state *st = user;
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

static const loop_hooks k_hooks = {.divisor = step_divisor,
                                   .forward = micro_forward,
                                   .backward = micro_backward,
                                   .step_done = report,
                                   .epoch_done = end_epoch};

/* ---- trainer_run's steps ------------------------------------------------------------ */

/* What trainer_run refuses, after the loop's options, before anything is
 * allocated: a model without a head, rows that do not fit the model, a
 * distillation setting out of range. */
static int check_model_rows(const bert_model *m, const train_dataset *ds, const trainer_options *o,
                            char *err)
{
    const token_dataset *rows = train_dataset_tokens(ds);
    const uint8_t *hard;
    int K = m->cfg.num_labels, soft_k;
    train_dataset_soft(ds, &soft_k, &hard);
    if (!m->has_head || !m->p.cls_w)
        return sm_error(err, SM_ERR_INVALID, "training: the model has no classification head");
    if (soft_k && soft_k != K)
        return sm_error(err, SM_ERR_INVALID,
                        "training: the rows have %d soft targets but the model has %d labels",
                        soft_k, K);
    if (soft_k &&
        (!(o->distill_alpha >= 0 && o->distill_alpha <= 1) || !(o->distill_temperature > 0)))
        return sm_error(err, SM_ERR_INVALID,
                        "training: distillation weight %g (0..1) or temperature %g (> 0) is out "
                        "of range",
                        o->distill_alpha, o->distill_temperature);
    for (int i = 0; i < rows->rows; i++)
        if (rows->label[i] >= K)
            return sm_error(err, SM_ERR_INVALID,
                            "training: row %d has label index %d but the model has %d labels",
                            i + 1, rows->label[i], K);
    if (rows->vocab_size > m->cfg.vocab_size)
        return sm_error(err, SM_ERR_INVALID,
                        "training: the dataset's vocabulary (%d) is larger than the model's (%d)",
                        rows->vocab_size, m->cfg.vocab_size);
    return SM_OK;
}

/* The host buffers: a micro-batch's rows, targets and logits, the best
 * parameters, the per-epoch results. */
static int alloc_host(run_state *st, char *err)
{
    const train_loop *L = st->L;
    trainer_result *res = st->res;
    int epochs = st->o->loop.epochs;
    st->ids = malloc((size_t)L->micro * L->max_len * sizeof *st->ids);
    st->lengths = malloc((size_t)L->micro * sizeof *st->lengths);
    st->labels = malloc((size_t)L->micro * sizeof *st->labels);
    st->logits = malloc((size_t)L->micro * st->K * sizeof *st->logits);
    if (st->targets && !(st->soft = malloc((size_t)L->micro * st->K * sizeof *st->soft)))
        return sm_error(err, SM_ERR_NOMEM, "out of memory setting up training");
    st->best = malloc(st->m->n_floats * sizeof *st->best);
    res->train_loss = malloc((size_t)epochs * sizeof *res->train_loss);
    res->valid_accuracy = malloc((size_t)epochs * sizeof *res->valid_accuracy);
    if (!st->ids || !st->lengths || !st->labels || !st->logits || !st->best || !res->train_loss ||
        !res->valid_accuracy)
        return sm_error(err, SM_ERR_NOMEM, "out of memory setting up training");
    return SM_OK;
}

/* Device state: the model's arena as it is, head included, its gradients,
 * the optimizer and the training workspace. */
static int arm_device(run_state *st, char *err)
{
    train_loop *L = st->L;
    bert_model *m = st->m;
    backend *be = L->be;
    int rc;
    if ((rc = loop_arenas(L, m->n_floats, err))) return rc;
    if ((rc = loop_upload(L, 0, m->arena, m->n_floats, err))) return rc;
    if ((rc = bert_params_bind(&m->cfg, 1, L->params, &st->p, err))) return rc;
    if ((rc = bert_params_bind(&m->cfg, 1, L->grads, &st->g, err))) return rc;
    if ((rc = adamw_create(be, &m->cfg, 1, &L->opt, err))) return rc;
    if ((rc = bert_train_ws_create(be, &m->cfg, L->micro, L->max_len, &st->ws, err))) return rc;
    st->res->device_bytes = 4 * m->n_floats * sizeof(float) + bert_train_ws_bytes(st->ws);
    return SM_OK;
}

int trainer_run(bert_model *m, backend *be, const train_dataset *ds, const trainer_options *o,
                trainer_result *res, char *err)
{
    train_loop L = {.be = be};
    run_state st = {.L = &L, .m = m, .o = o, .res = res, .best_acc = -1};
    int soft_k, rc = SM_OK;

    memset(res, 0, sizeof *res);
    res->best_accuracy = NAN;
    if ((rc = loop_check_sizes(&o->loop, err)) || (rc = loop_check_optimizer(&o->loop, err)))
        return rc;
    /* new weights: an INT8 check of the old ones no longer holds */
    m->cfg.int8_check.set = 0;
    if ((rc = check_model_rows(m, ds, o, err))) return rc;
    st.K = m->cfg.num_labels;
    st.rows = train_dataset_tokens(ds);
    st.targets = train_dataset_soft(ds, &soft_k, &st.hard);
    loop_init(&L, "training", &o->loop, be, st.rows, m);
    if (L.n_train < 2)
        return sm_error(err, SM_ERR_INVALID,
                        "training: %d rows leave %d for training after holding out %d for "
                        "validation; need at least 2",
                        st.rows->rows, L.n_train, L.n_valid);

    if ((rc = loop_split(&L, err)) || (rc = alloc_host(&st, err)) || (rc = arm_device(&st, err)))
        goto end;
    res->n_train = L.n_train;
    res->n_valid = L.n_valid;
    res->best_epoch = 0;
    /* The run: each step's rows in micro-batches, loss divided by the rows. */
    if ((rc = loop_run(&L, &k_hooks, &st, err))) goto end;
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

/* train_loop.h: what fine-tuning (trainer.c) and masked-LM pretraining
 * (pretrain.c) share: the checks of their common options, the seeded
 * validation split, each epoch's batch order, the device arenas for
 * parameters and gradients with their optimizer, and the pieces of an
 * epoch of AdamW steps (warm-up + linear decay, gradient accumulation,
 * interrupt polling, divergence checks, progress with timing and ETA).
 * trainer_run and pretrain_run both run it with loop_run, handing it what
 * the two differ in (batches, loss, validation, what is kept) as
 * loop_hooks, the only calls back up (the order is below, at "the run").
 * Internal to model/.
 *
 * Orders are splitmix64 streams keyed by the seed: the split from
 * (seed, 0x5011700), epoch e's shuffles from (seed, 0xE90C0000 + e); dropout
 * is keyed by (seed, micro step). A step is one optimizer step over
 * batch_size rows, cut into micro-batches of ceil(batch_size / accumulation).
 */
#ifndef SM_TRAIN_LOOP_H
#define SM_TRAIN_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "encoder/bert.h"
#include "train/bert_train.h"
#include "train/loop_options.h"
#include "train/optimizer.h"
#include "train/token_dataset.h"

/* epochs, max_steps, lr, batch_size, accumulation, max_length. */
int loop_check_sizes(const loop_options *o, char *err);
/* valid_fraction, weight_decay, warmup_ratio, grad_clip, dropout, the AdamW
 * betas and eps. */
int loop_check_optimizer(const loop_options *o, char *err);

/* The loop's state, laid out by loop_init; freed by loop_free. */
typedef struct train_loop {
    const char *what; /* "training" or "pretraining": starts messages */
    loop_options o;
    backend *be;
    const token_dataset *ds;
    int max_len; /* tokens per row: o.max_length capped by the model */
    int pad;     /* the padding id */
    int micro;   /* rows per micro-batch */
    int n_train, n_valid;
    long steps_per_epoch, total_steps, warmup;
    int *perm;                  /* (rows) the seeded permutation */
    int *train_idx, *valid_idx; /* (n_train), (n_valid) rows, by length */
    int *batches;               /* (steps_per_epoch) this epoch's batch order */
    float *params, *grads;      /* (total) device arenas */
    size_t total;
    adamw *opt;         /* created by the caller for its table */
    adamw_hparams hp;   /* from o */
    bert_dropout drop;  /* its step is the micro-batch's (loop_micro_batch) */
    int epoch;          /* the epoch under way (loop_epoch_begin) */
    long epoch_step;    /* its steps begun */
    double epoch_loss;  /* its steps' loss sums ... */
    long epoch_denom;   /* ... and divisors */
    long step;          /* optimizer steps taken */
    long skipped_steps; /* steps with a zero divisor: no update */
    long examples_done, denom_done;
    uint64_t micro_step;
    double t0, train_time; /* start; seconds spent in steps */
} train_loop;

/* Plans a run of ds on m (nothing is allocated): the split sizes, the
 * micro-batch size and the step counts (max_steps cuts total_steps). The
 * caller checks n_train. */
void loop_init(train_loop *L, const char *what, const loop_options *o, backend *be,
               const token_dataset *ds, const bert_model *m);
/* Allocates the row orders and makes the split: a seeded permutation whose
 * first n_valid rows are held out; both parts sorted by length. */
int loop_split(train_loop *L, char *err);
/* The same split of n rows without a run: is_valid[i] (n bytes) is 1 for
 * the rows loop_split holds out under o (valid_fraction, seed). */
int loop_valid_rows(int n, const loop_options *o, unsigned char *is_valid, char *err);
/* Allocates the parameter and gradient arenas, total floats each. */
int loop_arenas(train_loop *L, size_t total, char *err);
/* Copies n host floats into the parameter arena at offset. */
int loop_upload(train_loop *L, size_t offset, const float *src, size_t n, char *err);
/* Reads the whole parameter arena back into dst (total floats) and waits. */
int loop_download(train_loop *L, float *dst, char *err);
void loop_free(train_loop *L);

/* ---- the run ---------------------------------------------------------------------
 *
 * loop_run, in this order (each call that takes err returns a status; the
 * run stops at the first that is not SM_OK), the hooks being the caller's:
 *
 *   for (int epoch = 1; loop_epoch_begin(L, epoch); epoch++) {
 *       loop_step s;
 *       loop_report r;
 *       while (loop_next_step(L, &s)) {
 *           loop_step_begin(L, &s, divisor(&s), err);  gradients cleared
 *           for (int k = 0; k < s.n_micro; k++) {
 *               loop_micro mb;
 *               loop_micro_batch(L, &s, k, &mb, err); interrupt polled
 *               forward(k, &mb, &loss): rows mb.idx[0..mb.rows) with mb.drop, their loss sum
 *               loop_add_loss(L, &s, loss, err);      a non-finite loss stops
 *               backward(s.scale): adds s.scale * d(loss sum) to L->grads
 *           }
 *           loop_step_end(L, &s, &r, err);            clipping, AdamW, schedule
 *           step_done(&r): progress with r; to stop: loop_stopped(L, &r, err)
 *       }
 *       epoch_done(epoch): validation with loop_epoch_loss(L);
 *           loop_epoch_report(L, &r); progress
 *   }
 *
 * The pieces are public too, for a caller (a test) that runs them itself.
 */

/* One optimizer step, from loop_next_step to loop_step_end. */
typedef struct loop_step {
    int epoch;      /* 1-based */
    const int *idx; /* (count) the step's rows, into L->train_idx */
    int count;
    int n_micro;     /* its micro-batches: ceil(count / L->micro) */
    long divisor;    /* what its loss sum is divided by (loop_step_begin) */
    float scale;     /* 1 / divisor, 0 when divisor is 0: the backward's */
    double loss_sum; /* the micro-batches' so far (loop_add_loss) */
    double t0;       /* when it began: step time */
} loop_step;

/* One micro-batch of a step. */
typedef struct loop_micro {
    const int *idx; /* (rows) its rows, a slice of the step's */
    int rows;
    const bert_dropout *drop; /* its dropout key */
} loop_micro;

/* Starts epoch `epoch` (1-based) and returns 1, or returns 0 when the run
 * is over (epoch past o.epochs, or total_steps taken). Shuffles the
 * training rows, optionally sorts windows of 50 batches by length so each
 * batch pads little, shuffles the batch order. */
int loop_epoch_begin(train_loop *L, int epoch);
/* Fills s with the next step of the epoch and returns 1, or returns 0 at
 * the epoch's end or once total_steps are taken. */
int loop_next_step(train_loop *L, loop_step *s);
/* Clears the gradients for step s, whose loss sum is divided by divisor
 * (rows, or predicted positions); a step with 0 makes no update. */
int loop_step_begin(train_loop *L, loop_step *s, long divisor, char *err);
/* Micro-batch k (0 <= k < s->n_micro) of step s: its rows only, for work
 * done before its forward pass (masking, say). */
void loop_micro_rows(const train_loop *L, const loop_step *s, int k, const int **idx, int *rows);
/* Starts micro-batch k of step s: polls o.interrupt (SM_ERR_INTERRUPTED
 * when it says stop), then fills mb with its rows and dropout key. */
int loop_micro_batch(train_loop *L, const loop_step *s, int k, loop_micro *mb, char *err);
/* Adds a micro-batch's loss sum to the step's; a NaN or infinite loss is
 * SM_ERR_INVALID naming the epoch and step. */
int loop_add_loss(const train_loop *L, loop_step *s, double loss, char *err);
/* Ends step s: the AdamW update (clipped, at the scheduled lr) unless its
 * divisor is 0, the counts and times; r gets the step's report. */
int loop_step_end(train_loop *L, const loop_step *s, loop_report *r, char *err);
/* The epoch's mean loss so far, NAN when its divisor is 0. */
double loop_epoch_loss(const train_loop *L);
/* The report at the epoch's end (epoch_done 1). */
void loop_epoch_report(const train_loop *L, loop_report *r);
/* SM_ERR_INTERRUPTED with the message for a progress callback that said
 * stop on report r. */
int loop_stopped(const train_loop *L, const loop_report *r, char *err);

/* What a run does that the loop does not, called by loop_run with its
 * user pointer, in the order above. */
typedef struct loop_hooks {
    /* Step s's divisor (its rows, or predicted positions), and whatever the
     * step needs before its micro-batches (masking, say). */
    long (*divisor)(void *user, const loop_step *s);
    /* Micro-batch k of the step: the forward pass, its loss sum in *loss. */
    int (*forward)(void *user, int k, const loop_micro *mb, double *loss, char *err);
    /* The backward pass of the last forward, adding scale * d(loss sum). */
    int (*backward)(void *user, float scale, char *err);
    /* After each step: its report r (progress). */
    int (*step_done)(void *user, const loop_report *r, char *err);
    /* After an epoch's steps: validation, what is kept, progress. */
    int (*epoch_done)(void *user, int epoch, char *err);
} loop_hooks;

/* Runs every epoch of the planned, split and armed loop L (loop_split,
 * loop_arenas, the optimizer in L->opt), calling back through h. */
int loop_run(train_loop *L, const loop_hooks *h, void *user, char *err);

/* Training examples per second of step time so far. */
double loop_examples_per_sec(const train_loop *L);
/* Seconds since loop_init. */
double loop_elapsed(const train_loop *L);

#endif

/* train_loop.h: what fine-tuning (trainer.c) and masked-LM pretraining
 * (pretrain.c) share: the checks of their common options, the seeded
 * validation split, each epoch's batch order, the device arenas for
 * parameters and gradients with their optimizer, and the epochs of AdamW
 * steps (warm-up + linear decay, gradient accumulation, interrupt polling,
 * divergence checks, progress with timing and ETA). What the two differ in
 * (batches, loss, validation, what is kept) comes in through loop_hooks.
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

#include "backend.h"
#include "bert.h"
#include "bert_train.h"
#include "optimizer.h"
#include "token_dataset.h"

/* The options trainer_options and pretrain_options share (same meaning). */
typedef struct loop_options {
    int epochs;
    long max_steps;           /* 0: all epochs */
    float lr;
    float head_lr;            /* the classification head's peak rate; 0: lr */
    int batch_size, accumulation, max_length;
    float valid_fraction;
    uint64_t seed;
    float weight_decay, warmup_ratio, grad_clip, dropout;
    float beta1, beta2, eps;
    int group_by_length;
    int (*interrupt)(void *user);
    void *user;
} loop_options;

/* A loop_options from a trainer_options or pretrain_options pointer (the
 * fields have the same names); head_lr, trainer_options' own, is set by
 * trainer_run. */
#define LOOP_OPTIONS(o, max_steps_)                                                         \
    ((loop_options){.epochs = (o)->epochs, .max_steps = (max_steps_), .lr = (o)->lr,      \
                    .batch_size = (o)->batch_size, .accumulation = (o)->accumulation,     \
                    .max_length = (o)->max_length, .valid_fraction = (o)->valid_fraction, \
                    .seed = (o)->seed, .weight_decay = (o)->weight_decay,                 \
                    .warmup_ratio = (o)->warmup_ratio, .grad_clip = (o)->grad_clip,       \
                    .dropout = (o)->dropout, .beta1 = (o)->beta1, .beta2 = (o)->beta2,    \
                    .eps = (o)->eps, .group_by_length = (o)->group_by_length,             \
                    .interrupt = (o)->interrupt, .user = (o)->user})

/* Sets the defaults trainer_options and pretrain_options share: 32 rows
 * per step in one micro-batch, 128 tokens, seed 42, AdamW (0.9, 0.999,
 * 1e-8) with weight decay 0.01, 10% warm-up, clipping at 1.0, the config's
 * dropout, batches grouped by length. */
#define LOOP_OPTIONS_DEFAULT(o)      \
    do {                             \
        (o)->batch_size = 32;        \
        (o)->accumulation = 1;       \
        (o)->max_length = 128;       \
        (o)->seed = 42;              \
        (o)->weight_decay = 0.01f;   \
        (o)->warmup_ratio = 0.1f;    \
        (o)->grad_clip = 1.0f;       \
        (o)->dropout = -1.0f;        \
        (o)->beta1 = 0.9f;           \
        (o)->beta2 = 0.999f;         \
        (o)->eps = 1e-8f;            \
        (o)->group_by_length = 1;    \
    } while (0)

/* epochs, max_steps, lr, batch_size, accumulation, max_length. */
int loop_check_sizes(const loop_options *o, char *err);
/* valid_fraction, weight_decay, warmup_ratio, grad_clip, dropout, the AdamW
 * betas and eps. */
int loop_check_optimizer(const loop_options *o, char *err);

/* What a progress callback is told; trainer_progress and pretrain_progress
 * add their own fields. */
typedef struct loop_report {
    int epoch, epochs;        /* 1-based */
    long step, total_steps;   /* optimizer steps done */
    double loss;              /* the step's mean loss (at an epoch's end, the epoch's) */
    long denom;               /* its divisor: examples or predicted positions */
    double lr;
    float grad_norm;          /* before clipping; 0 at an epoch's end */
    double examples_per_sec;  /* training examples so far / training time */
    double elapsed_sec, eta_sec;
    int epoch_done;           /* 1 at an epoch's end: */
    double epoch_loss;        /*   its mean loss */
} loop_report;

/* Copies the fields every progress struct shares from loop_report *r. */
#define LOOP_PROGRESS(pr, r)                           \
    do {                                               \
        (pr).epoch = (r)->epoch;                       \
        (pr).epochs = (r)->epochs;                     \
        (pr).step = (r)->step;                         \
        (pr).total_steps = (r)->total_steps;           \
        (pr).loss = (r)->loss;                         \
        (pr).lr = (r)->lr;                             \
        (pr).grad_norm = (r)->grad_norm;               \
        (pr).examples_per_sec = (r)->examples_per_sec; \
        (pr).elapsed_sec = (r)->elapsed_sec;           \
        (pr).eta_sec = (r)->eta_sec;                   \
        (pr).epoch_done = (r)->epoch_done;             \
        (pr).epoch_loss = (r)->epoch_loss;             \
    } while (0)

/* The loop's state, laid out by loop_init; freed by loop_free. */
typedef struct train_loop {
    const char *what;         /* "training" or "pretraining": starts messages */
    loop_options o;
    backend *be;
    const token_dataset *ds;
    int max_len;              /* tokens per row: o.max_length capped by the model */
    int pad;                  /* the padding id */
    int micro;                /* rows per micro-batch */
    int n_train, n_valid;
    long steps_per_epoch, total_steps, warmup;
    int *perm;                /* (rows) the seeded permutation */
    int *train_idx, *valid_idx; /* (n_train), (n_valid) rows, by length */
    int *batches;             /* (steps_per_epoch) this epoch's batch order */
    float *params, *grads;    /* (total) device arenas */
    size_t total;
    adamw *opt;               /* created by the caller for its table */
    bert_dropout drop;
    long step;                /* optimizer steps taken */
    long skipped_steps;       /* steps with a zero divisor: no update */
    long examples_done, denom_done;
    uint64_t micro_step;
    double t0, train_time;    /* start; seconds spent in steps */
} train_loop;

/* Plans a run of ds on m (nothing is allocated): the split sizes, the
 * micro-batch size and the step counts (max_steps cuts total_steps). The
 * caller checks n_train. */
void loop_init(train_loop *L, const char *what, const loop_options *o, backend *be,
               const token_dataset *ds, const bert_model *m);
/* Allocates the row orders and makes the split: a seeded permutation whose
 * first n_valid rows are held out; both parts sorted by length. */
int loop_split(train_loop *L, char *err);
/* Allocates the parameter and gradient arenas, total floats each. */
int loop_arenas(train_loop *L, size_t total, char *err);
/* Copies n host floats into the parameter arena at offset. */
int loop_upload(train_loop *L, size_t offset, const float *src, size_t n, char *err);
/* Reads the whole parameter arena back into dst (total floats) and waits. */
int loop_download(train_loop *L, float *dst, char *err);
void loop_free(train_loop *L);

/* The parts of a run that differ; ctx is theirs. */
typedef struct loop_hooks {
    void *ctx;
    /* May be NULL. Called with a step's rows idx[0..count) before its
     * gradients are cleared; returns what the step's loss sum is divided by
     * (without the hook: count). A step with 0 makes no update. */
    long (*step_begin)(void *ctx, int epoch, const int *idx, int count);
    /* Forward pass of the step's micro-batch k, rows idx[0..B), with
     * dropout drop: *loss = its loss sum. */
    int (*forward)(void *ctx, int k, const int *idx, int B, const bert_dropout *drop,
                   double *loss, char *err);
    /* Backward of the last forward: adds scale * d(loss sum) to L->grads. */
    int (*backward)(void *ctx, float scale, char *err);
    /* After an epoch's steps: validation and what to keep. train_loss is
     * the epoch's mean loss, NAN when its divisor is 0. */
    int (*epoch_end)(void *ctx, int epoch, double train_loss, char *err);
    /* After every step and every epoch_end; nonzero stops training
     * (SM_ERR_INTERRUPTED). */
    int (*progress)(void *ctx, const loop_report *r);
} loop_hooks;

/* Runs the epochs: each shuffles the training rows, optionally sorts
 * windows of 50 batches by length, shuffles the batch order, then takes
 * its steps until total_steps. o.interrupt is polled before every
 * micro-batch; a non-finite loss stops with SM_ERR_INVALID naming the
 * step. */
int loop_run(train_loop *L, const loop_hooks *h, char *err);

/* Training examples per second of step time so far. */
double loop_examples_per_sec(const train_loop *L);
/* Seconds since loop_init. */
double loop_elapsed(const train_loop *L);

#endif

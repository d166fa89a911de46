/* loop_options.h: the options and the progress report fine-tuning
 * (trainer.h) and masked-LM pretraining (pretrain.h) share, each embedded
 * once in theirs (trainer_options.loop, pretrain_options.loop,
 * trainer_progress.loop, pretrain_progress.loop) and handed to
 * train_loop.c as it is.
 */
#ifndef SM_LOOP_OPTIONS_H
#define SM_LOOP_OPTIONS_H

#include <stdint.h>

typedef struct loop_options {
    int epochs;              /* fine-tuning 3, pretraining 1 */
    long max_steps;          /* 0: all epochs; else stop after this many
                                optimizer steps (the schedule spans them) */
    float lr;                /* peak rate: fine-tuning 5e-5, pretraining 1e-4 */
    float head_lr;           /* 0: lr; else the classification head's peak
                                rate (its own AdamW group, same schedule);
                                train() sets it for fresh heads */
    int batch_size;          /* 32 rows per optimizer step */
    int accumulation;        /* 1: micro-batches per step (memory holds
                                ceil(batch_size / accumulation) rows) */
    int max_length;          /* 128 tokens; 0 = the model's maximum */
    float valid_fraction;    /* held out: fine-tuning 0.1 (0: none, the last
                                epoch is kept), pretraining 0 */
    uint64_t seed;           /* 42: split, order, masks, dropout, fresh heads */
    float weight_decay;      /* 0.01, not on biases and LayerNorm weights */
    float warmup_ratio;      /* 0.1 of the steps */
    float grad_clip;         /* 1.0; <= 0 disables */
    float dropout;           /* < 0: the config's probabilities; else all */
    float beta1, beta2, eps; /* AdamW: 0.9, 0.999, 1e-8 */
    int group_by_length;     /* 1: batches of similar lengths (less padding) */
    /* Polled before every micro-batch; nonzero stops promptly
     * (SM_ERR_INTERRUPTED). May be NULL. */
    int (*interrupt)(void *user);
    void *user; /* for interrupt and the progress callbacks */
} loop_options;

/* Zeroes o and sets the defaults both share: 32 rows per step in one
 * micro-batch, 128 tokens, seed 42, AdamW (0.9, 0.999, 1e-8) with weight
 * decay 0.01, 10% warm-up, clipping at 1.0, the config's dropout, batches
 * grouped by length. epochs, lr and valid_fraction are the caller's. */
void loop_options_default(loop_options *o);

/* What a progress callback is told after every optimizer step and at the
 * end of every epoch; trainer_progress and pretrain_progress add their own
 * fields beside it. */
typedef struct loop_report {
    int epoch, epochs;       /* 1-based */
    long step, total_steps;  /* optimizer steps done, 1-based */
    double loss;             /* the step's mean loss (at an epoch's end, the epoch's) */
    long denom;              /* its divisor: examples, or predicted positions */
    double lr;               /* the step's learning rate */
    float grad_norm;         /* before clipping; 0 at an epoch's end */
    double examples_per_sec; /* training examples so far / training time */
    double elapsed_sec, eta_sec;
    int epoch_done;    /* 1 at an epoch's end: */
    double epoch_loss; /*   its mean training loss */
} loop_report;

#endif

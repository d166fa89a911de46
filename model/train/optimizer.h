/* optimizer.h: AdamW over the parameter arena, the learning-rate schedule
 * and global gradient-norm clipping.
 *
 * The first and second moments live in two arenas of the parameter arena's
 * layout (bert_param_table). Weight decay is decoupled (AdamW) and applies to
 * every tensor except biases and LayerNorm weights, the Hugging Face Trainer
 * rule; the update is torch.optim.AdamW's, bias correction included.
 * Two parameter groups, as torch's param_groups: the classification head
 * (classifier.weight, classifier.bias) may have its own learning rate
 * (adamw_hparams.head_lr), everything else has lr.
 */
#ifndef SM_OPTIMIZER_H
#define SM_OPTIMIZER_H

#include <stddef.h>

#include "core/backend.h"
#include "format/config.h"

typedef struct adamw_hparams {
    float lr;           /* peak learning rate */
    float beta1, beta2; /* 0.9, 0.999 */
    float eps;          /* 1e-8 */
    float weight_decay; /* e.g. 0.01; 0 disables */
    float grad_clip;    /* max global L2 norm; <= 0 disables */
    float head_lr;      /* peak learning rate of the classification head
                            (tensors named classifier.*); 0: lr. The head
                            follows the same schedule, scaled by head_lr / lr */
} adamw_hparams;

/* Fills the torch defaults: lr 5e-5, betas (0.9, 0.999), eps 1e-8, weight
 * decay 0.01, clipping at 1.0; head_lr 0 (the head at lr). */
void adamw_hparams_default(adamw_hparams *h);

typedef struct adamw adamw;

/* Optimizer state for the parameter table of cfg (with_head: the classifier
 * rows are included) on backend be; moments start at zero. */
int adamw_create(backend *be, const bert_config *cfg, int with_head, adamw **out, char *err);
/* The same for an arena of `total` floats laid out by any size table (e.g.
 * the encoder plus the masked-language-model head): only the tensors listed
 * in specs are updated; floats between them (a tensor left out) keep their
 * values, though they count in the gradient norm. */
struct bert_param_spec;
int adamw_create_table(backend *be, const struct bert_param_spec *specs, int n_specs, size_t total,
                       adamw **out, char *err);
void adamw_free(adamw *o);
/* Floats in each arena (parameters, gradients, m, v). */
size_t adamw_numel(const adamw *o);
/* Steps taken so far (torch's `step`). */
int adamw_steps(const adamw *o);
/* Zeroes the moments and the step count. */
int adamw_reset(adamw *o, char *err);

/* Global L2 norm of the gradient arena (n floats of backend memory), in a
 * fixed summation order. */
int grad_global_norm(adamw *o, const float *grads, float *norm, char *err);

/* One optimizer step at learning rate lr (the head's: lr * head_lr / h->lr
 * when h->head_lr > 0): clips the gradients in place to
 * h->grad_clip (torch.nn.utils.clip_grad_norm_: scale by
 * clip / (norm + 1e-6) when that is below 1), then AdamW. *norm_out (may be
 * NULL) gets the norm before clipping. A non-finite norm is an error and
 * leaves the parameters untouched. */
int adamw_step(adamw *o, float *params, float *grads, const adamw_hparams *h, float lr,
               float *norm_out, char *err);

/* Linear warm-up from 0 over `warmup` steps, then linear decay to 0 at
 * `total` (transformers.get_linear_schedule_with_warmup): the rate for
 * 0-based step `step`. */
float lr_linear_schedule(float peak, long step, long warmup, long total);

#endif

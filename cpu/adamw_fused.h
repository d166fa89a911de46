/* adamw_fused.h: AdamW over a whole parameter arena in one pass: the CPU
 * backend's adamw_step slot (adamw_fused.c). Private to cpu/.
 */
#ifndef SM_OPTIMIZER_CPU_H
#define SM_OPTIMIZER_CPU_H

#include <stddef.h>

#include "core/backend.h"

/* grads *= coef (clipping; 1: none, and grads is then only read), then one
 * AdamW step (t >= 1, as the backend's adamw op) on each run, with
 * weight_decay where run.decay, at learning rate lr, or head_lr where
 * run.head; total is the arena's size; floats outside the runs are left
 * alone. The backend's adamw and adamw_step slots are both this. */
void adamw_cpu_fused(int threads, float *params, float *grads, float *m, float *v,
                     const backend_adamw_run *runs, int n_runs, size_t total, float coef, float lr,
                     float head_lr, float beta1, float beta2, float eps, float weight_decay, int t);

#endif

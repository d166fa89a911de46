/* optimizer.c: AdamW with decoupled weight decay, gradient clipping and the
 * linear warm-up/decay schedule, written against the backend table.
 *
 * The parameter table is reduced at creation to runs of adjacent tensors
 * that share a weight-decay setting, so a step is a handful of backend calls
 * over contiguous ranges (the backend's adamw_step: on the CPU one fused
 * pass, cpu/adamw_fused.c). Owns the m and v arenas and a one-float
 * scratch.
 */
#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "encoder/bert.h"
typedef backend_adamw_run decay_run;

struct adamw {
    backend *be;
    size_t n;       /* floats per arena */
    float *m, *v;   /* (n) moments, backend memory */
    float *scratch; /* (1) backend memory */
    decay_run *runs;
    int n_runs;
    int t; /* steps taken */
};

void adamw_hparams_default(adamw_hparams *h)
{
    h->lr = 5e-5f;
    h->beta1 = 0.9f;
    h->beta2 = 0.999f;
    h->eps = 1e-8f;
    h->weight_decay = 0.01f;
    h->grad_clip = 1.0f;
    h->head_lr = 0.0f;
}

static int is_head(const char *name)
{
    return !strncmp(name, "classifier.", 11);
}

static int no_decay(const char *name)
{
    size_t n = strlen(name);
    return (n >= 5 && !strcmp(name + n - 5, ".bias")) || strstr(name, "LayerNorm.weight");
}

void adamw_free(adamw *o)
{
    if (!o) return;
    if (o->m) o->be->free(o->be, o->m);
    if (o->v) o->be->free(o->be, o->v);
    if (o->scratch) o->be->free(o->be, o->scratch);
    free(o->runs);
    free(o);
}

size_t adamw_numel(const adamw *o)
{
    return o->n;
}

int adamw_steps(const adamw *o)
{
    return o->t;
}

int adamw_reset(adamw *o, char *err)
{
    backend *be = o->be;
    int rc = be->zero(be, o->m, o->n * sizeof(float));
    if (!rc) rc = be->zero(be, o->v, o->n * sizeof(float));
    if (rc) return sm_error(err, rc, "%s backend: clearing the optimizer state failed", be->name);
    o->t = 0;
    return SM_OK;
}

int adamw_create_table(backend *be, const bert_param_spec *specs, int n_specs, size_t total,
                       adamw **out, char *err)
{
    *out = NULL;
    if (!be->adamw_step)
        return sm_error(err, SM_ERR_UNSUPPORTED, "the %s backend cannot train", be->name);
    adamw *o = calloc(1, sizeof *o);
    if (!o) goto nomem;
    o->be = be;
    o->n = total;
    o->runs = calloc((size_t)(n_specs ? n_specs : 1), sizeof *o->runs);
    if (!o->runs) goto nomem;
    for (int i = 0; i < n_specs; i++) {
        int decay = !no_decay(specs[i].name), head = is_head(specs[i].name);
        decay_run *last = o->n_runs ? &o->runs[o->n_runs - 1] : NULL;
        if (last && last->decay == decay && last->head == head &&
            last->offset + last->n == specs[i].offset) {
            last->n += specs[i].numel;
        } else {
            o->runs[o->n_runs++] = (decay_run){specs[i].offset, specs[i].numel, decay, head};
        }
    }
    o->m = be->alloc(be, total * sizeof(float));
    o->v = be->alloc(be, total * sizeof(float));
    o->scratch = be->alloc(be, sizeof(float));
    if (!o->m || !o->v || !o->scratch) goto nomem;
    int rc = adamw_reset(o, err);
    if (rc) {
        adamw_free(o);
        return rc;
    }
    *out = o;
    return SM_OK;
nomem:
    adamw_free(o);
    return sm_error(err, SM_ERR_NOMEM, "out of memory for the optimizer state (%zu parameters)",
                    total);
}

int adamw_create(backend *be, const bert_config *cfg, int with_head, adamw **out, char *err)
{
    bert_param_spec *specs = NULL;
    int n_specs, rc;
    size_t total;
    *out = NULL;
    if (!be->adamw_step)
        return sm_error(err, SM_ERR_UNSUPPORTED, "the %s backend cannot train", be->name);
    if ((rc = bert_param_table(cfg, with_head, &specs, &n_specs, &total, err))) return rc;
    rc = adamw_create_table(be, specs, n_specs, total, out, err);
    free(specs);
    return rc;
}

int grad_global_norm(adamw *o, const float *grads, float *norm, char *err)
{
    backend *be = o->be;
    float sq;
    int rc = be->sumsq(be, o->scratch, grads, o->n);
    if (!rc) rc = be->download(be, &sq, o->scratch, sizeof sq);
    if (!rc) rc = be->synchronize(be);
    if (rc) return sm_error(err, rc, "%s backend: gradient norm failed", be->name);
    *norm = sqrtf(sq);
    return SM_OK;
}

int adamw_step(adamw *o, float *params, float *grads, const adamw_hparams *h, float lr,
               float *norm_out, char *err)
{
    backend *be = o->be;
    float norm;
    int rc = grad_global_norm(o, grads, &norm, err);
    if (rc) return rc;
    if (norm_out) *norm_out = norm;
    if (!isfinite(norm))
        return sm_error(err, SM_ERR_INVALID,
                        "the gradient norm is not finite (%g): training diverged; "
                        "try a lower learning rate",
                        (double)norm);
    float coef = 1.0f;
    if (h->grad_clip > 0) {
        float c = h->grad_clip / (norm + 1e-6f);
        if (c < 1.0f) coef = c;
    }
    /* the head's rate: the same schedule, scaled (float math as torch's
     * per-group lr would be: one multiply) */
    float head_lr = lr;
    if (h->head_lr > 0 && h->lr > 0 && h->head_lr != h->lr)
        head_lr = (float)((double)lr * ((double)h->head_lr / (double)h->lr));
    o->t++;
    rc = be->adamw_step(be, params, grads, o->m, o->v, o->runs, o->n_runs, o->n, coef, lr, head_lr,
                        h->beta1, h->beta2, h->eps, h->weight_decay, o->t);
    if (rc) return sm_error(err, rc, "%s backend: AdamW failed", be->name);
    return SM_OK;
}

float lr_linear_schedule(float peak, long step, long warmup, long total)
{
    if (step < warmup) return (float)((double)peak * (double)step / (double)warmup);
    long span = total - warmup > 1 ? total - warmup : 1;
    double f = (double)(total - step) / (double)span;
    return f > 0 ? (float)(peak * f) : 0.0f;
}

/* bert_device.c: a model's parameters copied onto a backend once.
 *
 * The parameter arena is uploaded as one block and the bert_params views are
 * bound to the copy by the same size table as on the host
 * (bert_params_bind), so the forward pass sees backend memory laid out
 * exactly like the host arena. Owns the device copy and the view array.
 */
#include "encoder/bert.h"

#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

void bert_device_params_free(bert_device_params *dp)
{
    if (!dp) return;
    if (dp->owned && dp->arena) dp->be->free(dp->be, dp->arena);
    bert_params_release(&dp->p);
    free(dp);
}

int bert_params_to_backend(backend *be, const bert_model *m, bert_device_params **out, char *err)
{
    *out = NULL;
    bert_device_params *dp = calloc(1, sizeof *dp);
    if (!dp) return sm_error(err, SM_ERR_NOMEM, "out of memory binding parameters");
    dp->be = be;
    dp->n_floats = m->n_floats;
    size_t bytes = m->n_floats * sizeof(float);
    int rc;
    if (be->host_memory) {
        /* the backend reads host memory: no copy */
        dp->arena = m->arena;
    } else {
        dp->arena = be->alloc(be, bytes);
        if (!dp->arena) {
            free(dp);
            return sm_error(err, SM_ERR_NOMEM,
                            "out of memory: the model's parameters need %.1f MiB on the %s "
                            "backend",
                            (double)bytes / 1048576.0, be->name);
        }
        dp->owned = 1;
        if ((rc = be->upload(be, dp->arena, m->arena, bytes)) || (rc = be->synchronize(be))) {
            bert_device_params_free(dp);
            return sm_error(err, rc, "%s backend: uploading the model's parameters failed",
                            be->name);
        }
    }
    if ((rc = bert_params_bind(&m->cfg, m->has_head, dp->arena, &dp->p, err))) {
        bert_device_params_free(dp);
        return rc;
    }
    *out = dp;
    return SM_OK;
}

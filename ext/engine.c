/* engine.c: one connection's inference engine.
 *
 * Owns the connection's backend (made from its device and threads settings
 * on first use) and a few activation workspaces, one per recently used
 * model, each sized for the largest batch and length asked of it so far (a
 * workspace is never shared between connections, hence never between
 * threads). On a GPU backend the slot also holds the model's parameters
 * uploaded to the device (freed with the slot); the CPU backend reads the
 * cached host copy directly. sx_engine_classify() is the one place SQL-facing code calls the
 * encoder: texts in, probabilities out, rows and truncations counted.
 */
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "sentiment_ext.h"

static void slot_clear(sx_ws_slot *s)
{
    bert_workspace_free(s->ws);
    bert_device_params_free(s->dp);
    sx_registry_release(s->model);
    memset(s, 0, sizeof *s);
}

void sx_engine_reset(sx_conn *c)
{
    for (int i = 0; i < SX_MAX_WORKSPACES; i++) slot_clear(&c->ws[i]);
    if (c->be) c->be->destroy(c->be);
    c->be = NULL;
    c->be_desc[0] = 0;
}

int sx_engine_backend(sx_conn *c, const char *fn, char **errmsg)
{
    if (c->be) return 0;
    return sx_device_create(fn, c->device, c->threads, &c->be, c->be_desc,
                            sizeof c->be_desc, errmsg);
}

int sx_engine_max_length(const sx_conn *c, const bert_model *m)
{
    int mx = bert_max_length(&m->cfg);
    if (c->max_length > 0 && c->max_length < mx) return c->max_length;
    return mx;
}

/* A workspace for model m that holds batch x seq, and m's parameters as
 * the backend sees them. */
static int workspace_for(sx_conn *c, const char *fn, sx_model *m, int batch,
                         int seq, bert_workspace **out, const bert_params **params,
                         char **errmsg)
{
    char err[SM_ERR_MAX];
    sx_ws_slot *slot = NULL;
    int i;

    for (i = 0; i < SX_MAX_WORKSPACES; i++)
        if (c->ws[i].model == m) { slot = &c->ws[i]; break; }
    if (slot && slot->batch >= batch && slot->seq >= seq) {
        slot->last_used = ++c->tick;
        *out = slot->ws;
        *params = slot->dp ? &slot->dp->p : &m->bert->p;
        return 0;
    }
    if (slot) { /* grow: keep the larger of old and new sizes */
        if (slot->batch > batch) batch = slot->batch;
        if (slot->seq > seq) seq = slot->seq;
        slot_clear(slot);
    } else {
        for (i = 0; i < SX_MAX_WORKSPACES; i++)
            if (!c->ws[i].model) { slot = &c->ws[i]; break; }
        if (!slot) {
            slot = &c->ws[0];
            for (i = 1; i < SX_MAX_WORKSPACES; i++)
                if (c->ws[i].last_used < slot->last_used) slot = &c->ws[i];
            slot_clear(slot);
        }
    }
    if (bert_workspace_create(c->be, &m->bert->cfg, batch, seq, &slot->ws, err) != SM_OK) {
        slot->ws = NULL;
        *errmsg = sqlite3_mprintf("%s: cannot allocate a workspace for %d x %d tokens: %s",
                                  fn, batch, seq, err);
        return 1;
    }
    if (strcmp(c->be->name, "cpu") &&
        bert_params_to_backend(c->be, m->bert, &slot->dp, err) != SM_OK) {
        slot->dp = NULL;
        bert_workspace_free(slot->ws);
        slot->ws = NULL;
        *errmsg = sqlite3_mprintf("%s: %s", fn, err);
        return 1;
    }
    sx_registry_retain(m);
    slot->model = m;
    slot->batch = batch;
    slot->seq = seq;
    slot->last_used = ++c->tick;
    *out = slot->ws;
    *params = slot->dp ? &slot->dp->p : &m->bert->p;
    return 0;
}

int sx_engine_parallel_batches(const sx_conn *c)
{
    if (!c->be || strcmp(c->be->name, "cpu")) return 1;
    return backend_cpu_threads(c->be);
}

int sx_engine_classify(sx_conn *c, const char *fn, sx_model *m,
                       const char *const *texts, const size_t *lens, int n,
                       int batch_size, float *probs, int *truncated,
                       char **errmsg)
{
    char err[SM_ERR_MAX];
    bert_workspace *ws;
    const bert_params *params;
    int *trunc = truncated, one = 0, rc = 1;
    int bs = batch_size > 0 ? batch_size : c->batch_size;
    int seq = sx_engine_max_length(c, m->bert);

    if (n <= 0) return 0;
    if (!trunc) {
        trunc = n == 1 ? &one : sqlite3_malloc64((sqlite3_uint64)n * sizeof *trunc);
        if (!trunc) {
            *errmsg = sqlite3_mprintf("%s: out of memory", fn);
            return 1;
        }
    }
    if (bs > n) bs = n;
    if (sx_engine_backend(c, fn, errmsg)) goto end;
    if (workspace_for(c, fn, m, bs, seq, &ws, &params, errmsg)) goto end;
    if (bert_classify_texts(m->bert, params, ws, texts, lens, n, seq, bs,
                            probs, trunc, err) != SM_OK) {
        *errmsg = sqlite3_mprintf("%s: %s", fn, err);
        goto end;
    }
    c->rows += n;
    for (int i = 0; i < n; i++) c->truncated += trunc[i] != 0;
    rc = 0;
end:
    if (trunc != truncated && trunc != &one) sqlite3_free(trunc);
    return rc;
}

/* engine.c: one connection's inference engine (runtime/engine.h).
 *
 * Owns the connection's backend (made from its device, threads and
 * precision settings on first use) and a few activation workspaces, one per
 * recently used model, each sized for the largest batch and length asked of
 * it so far (a workspace is never shared between connections, hence never
 * between threads). The model's parameters come from the registry: the
 * cached host copy on the CPU (with its packed BF16 or INT8 copy when the
 * precision is bf16 or int8), the copy uploaded once per model and GPU on a GPU
 * (rt_registry_params), shared by every connection on that GPU; the packed
 * copy the backend's linear_pack_kind asks for (rt_registry_params_packed)
 * made once per model, memory and kind.
 *
 * On a GPU a workspace is sized by free device memory: when the estimate of
 * its activations and the plugin's scratch (ws_bytes) exceeds
 * RT_GPU_MEM_SHARE of what is free, the batch shrinks to the largest that
 * fits (the setting is unchanged; classify just runs more batches), and
 * when even one row does not, the error says how much was needed and how
 * much is free. A workspace that runs out of memory in a pass (its lanes'
 * workspaces, made on first use at its size, did not fit) is dropped, and one
 * that could not be made is not kept, so one out-of-memory at a large
 * batch_size leaves the connection working at a smaller one. Failures on a GPU carry the plugin's last error, which says
 * what CUDA reported. rt_engine_classify() and rt_engine_embed() are the
 * one place the SQL surface runs the encoder: texts in, probabilities or
 * pooled embeddings out, rows and truncations counted, and texts that are
 * mostly not Chinese (rt_text_not_chinese) counted too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "runtime/device.h"
#include "runtime/engine.h"
#include "runtime/text_script.h"

/* The share of free GPU memory one workspace may take. */
#define RT_GPU_MEM_SHARE 0.8

static void slot_clear(rt_ws_slot *s)
{
    bert_workspace_free(s->ws);
    rt_registry_release(s->model);
    memset(s, 0, sizeof *s);
}

void rt_engine_reset(rt_engine *e)
{
    for (int i = 0; i < RT_MAX_WORKSPACES; i++) slot_clear(&e->ws[i]);
    if (e->be) e->be->destroy(e->be);
    e->be = NULL;
    e->desc[0] = 0;
}

int rt_engine_backend(rt_engine *e, const rt_settings *s, char *err)
{
    if (e->be) return SM_OK;
    return rt_device_create(s->device, s->threads, s->precision, &e->be, e->desc, sizeof e->desc,
                            err);
}

int rt_engine_max_length(const rt_settings *s, const bert_model *m)
{
    int mx = bert_max_length(&m->cfg);
    if (s->max_length > 0 && s->max_length < mx) return s->max_length;
    return mx;
}

/* err as the failed call wrote it, followed by " (why)" when the backend
 * keeps a reason for its last failure (a GPU's: what CUDA reported). */
static int fail_with_reason(const rt_engine *e, int rc, char *err, const char *what)
{
    const char *why = rt_device_last_error(e->be);
    return sm_error(err, rc, "%s%s%s%s", what, *why ? " (" : "", why, *why ? ")" : "");
}

/* Device memory for a batch x seq workspace: its activations
 * (bert_workspace_bytes) plus the scratch the backend says it may grow to
 * in a forward pass (forward_scratch_bytes: a GPU's BF16 operand copies,
 * per-head attention copies, cuBLAS's workspace). */
static double ws_bytes(const backend *be, const bert_config *cfg, int batch, int seq)
{
    double act = (double)bert_workspace_bytes(be, cfg, batch, seq);
    if (!be->forward_scratch_bytes) return act;
    return act + (double)be->forward_scratch_bytes(be, batch, seq, cfg->hidden_size,
                                                   cfg->intermediate_size,
                                                   cfg->num_attention_heads);
}

/* On a backend with memory of its own (a GPU), the largest batch <= *batch
 * whose workspace fits in RT_GPU_MEM_SHARE of free memory; SM_ERR_NOMEM
 * when not even one row fits. Nothing changes when the backend cannot say
 * what is free (the CPU: host memory). */
static int fit_batch(rt_engine *e, const bert_config *cfg, int *batch, int seq, char *err)
{
    size_t fr = 0, tot = 0;
    int b = *batch;
    if (rt_device_mem_info(e->be, &fr, &tot) != SM_OK) return SM_OK;
    double room = RT_GPU_MEM_SHARE * (double)fr;
    if (ws_bytes(e->be, cfg, b, seq) > room) { /* the largest batch that fits */
        int lo = 1, hi = b - 1;
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            if (ws_bytes(e->be, cfg, mid, seq) <= room) lo = mid;
            else hi = mid - 1;
        }
        b = lo > 0 ? lo : 1;
    }
    if (ws_bytes(e->be, cfg, b, seq) > room)
        return sm_error(err, SM_ERR_DEVICE,
                        "not enough GPU memory on cuda:%d: one row of %d tokens needs about "
                        "%.1f MiB, %.1f MiB is free of %.1f MiB (at most %d%% of what is free "
                        "is used); lower sentiment_config('max_length') or free GPU memory",
                        e->be->device_index(e->be), seq, ws_bytes(e->be, cfg, 1, seq) / 1048576.0,
                        (double)fr / 1048576.0, (double)tot / 1048576.0,
                        (int)(RT_GPU_MEM_SHARE * 100 + 0.5));
    *batch = b;
    return SM_OK;
}

/* m's parameters as e's backend reads them: packed as its linear_pack_kind
 * asks (once per model, memory and kind), else the plain copy. */
static int params_for(rt_engine *e, const rt_settings *s, rt_model *m, int int8_vetted,
                      const bert_params **p, char *err)
{
    backend *be = e->be;
    int kind = be->linear_pack_kind ? be->linear_pack_kind(be, int8_vetted) : 0;
    int rc = kind ? rt_registry_params_packed(m, be, kind, p, err)
                  : rt_registry_params(m, be, p, err);
    /* auto falls back to fp32 where the weights cannot be packed (e.g. not
     * finite); a precision the user named reports why. Out of memory is an
     * error, not a fall-back: the same query must not answer differently
     * because memory was short once. */
    int named = s->precision && s->precision[0] && strcmp(s->precision, "auto");
    if (rc != SM_OK && rc != SM_ERR_NOMEM && kind && !named) rc = rt_registry_params(m, be, p, err);
    return rc;
}

/* The slot for model m: its own, else a free one, else the least recently
 * used (cleared). *own says which. */
static rt_ws_slot *slot_for(rt_engine *e, const rt_model *m, int *own)
{
    rt_ws_slot *slot = NULL;
    int i;
    *own = 0;
    for (i = 0; i < RT_MAX_WORKSPACES; i++)
        if (e->ws[i].model == m) {
            *own = 1;
            return &e->ws[i];
        }
    for (i = 0; i < RT_MAX_WORKSPACES; i++)
        if (!e->ws[i].model) return &e->ws[i];
    slot = &e->ws[0];
    for (i = 1; i < RT_MAX_WORKSPACES; i++)
        if (e->ws[i].last_used < slot->last_used) slot = &e->ws[i];
    slot_clear(slot);
    return slot;
}

/* A workspace for model m that holds up to *batch x seq (*batch may come
 * back smaller when GPU memory is short), and m's parameters as the
 * backend sees them. */
static int workspace_for(rt_engine *e, const rt_settings *s, rt_model *m, int *batch, int seq,
                         bert_workspace **out, const bert_params **params, char *err)
{
    char why[SM_ERR_MAX];
    const bert_params *p = NULL;
    int want = *batch, asked = *batch, own, rc;
    rt_ws_slot *slot = slot_for(e, m, &own);
    sm_int8_check check = rt_registry_int8_check(m);
    int vetted = rt_device_int8_vetted(m->key, &check, NULL, 0);

    if (own && slot->asked >= want && slot->seq >= seq && slot->int8_vetted == vetted) {
        slot->last_used = ++e->tick;
        if (*batch > slot->batch) *batch = slot->batch;
        *out = slot->ws;
        *params = slot->params;
        return SM_OK;
    }
    if (own) { /* grow: keep the larger of old and new sizes */
        if (slot->asked > want) want = asked = slot->asked;
        if (slot->seq > seq) seq = slot->seq;
        slot_clear(slot);
    }
    /* the weights first (once per model and GPU), then the activations in
     * what memory is left */
    if ((rc = params_for(e, s, m, vetted, &p, err)) != SM_OK) return rc;
    if ((rc = fit_batch(e, &m->bert->cfg, &want, seq, err)) != SM_OK) return rc;
    if ((rc = bert_workspace_create(e->be, &m->bert->cfg, want, seq, &slot->ws, why)) != SM_OK) {
        char what[SM_ERR_MAX];
        slot->ws = NULL;
        snprintf(what, sizeof what, "cannot allocate a workspace for %d x %d tokens: %.400s", want,
                 seq, why);
        return fail_with_reason(e, rc, err, what);
    }
    rt_registry_retain(m);
    slot->model = m;
    slot->params = p;
    slot->batch = want;
    slot->asked = asked;
    slot->seq = seq;
    slot->int8_vetted = vetted;
    slot->last_used = ++e->tick;
    if (*batch > want) *batch = want;
    *out = slot->ws;
    *params = p;
    return SM_OK;
}

/* Forgets model m's workspace after an out-of-memory inside a pass (its
 * lanes' workspaces are made on first use at the workspace's batch size, so
 * keeping it would fail the same way at any smaller batch_size): the next
 * call makes one of the size it asks for, and the memory is given back. */
static void drop_workspace(rt_engine *e, const rt_model *m)
{
    for (int i = 0; i < RT_MAX_WORKSPACES; i++)
        if (e->ws[i].model == m) slot_clear(&e->ws[i]);
}

int rt_engine_parallel_batches(const rt_engine *e)
{
    return e->be ? e->be->lanes(e->be) : 1;
}

/* rt_engine_classify (embed 0: out is probs) and rt_engine_embed (embed 1:
 * out is emb). */
static int run_engine(rt_engine *e, const rt_settings *s, rt_model *m, const rt_texts *in,
                      int embed, float *out, int *truncated, char *err)
{
    char why[SM_ERR_MAX];
    bert_workspace *ws = NULL;
    const bert_params *params = NULL;
    int n = in->n, *trunc = truncated, one = 0, rc;
    int bs = in->batch_size > 0 ? in->batch_size : s->batch_size;
    int seq = rt_engine_max_length(s, m->bert);

    if (n <= 0) return SM_OK;
    if (!trunc) {
        trunc = n == 1 ? &one : malloc((size_t)n * sizeof *trunc);
        if (!trunc) return sm_error(err, SM_ERR_NOMEM, "out of memory");
    }
    if (bs > n) bs = n;
    if ((rc = rt_engine_backend(e, s, err)) != SM_OK) goto end;
    if ((rc = workspace_for(e, s, m, &bs, seq, &ws, &params, err)) != SM_OK) goto end;
    bert_text_opts opts = {in->stop, in->stop_ctx,
                           in->windows >= 0 ? in->windows : s->long_text_windows};
    rc = embed ? bert_embed_texts_opts(m->bert, params, ws, in->texts, in->lens, n, seq, bs, out,
                                       trunc, &opts, why)
               : bert_classify_texts_opts(m->bert, params, ws, in->texts, in->lens, n, seq, bs, out,
                                          trunc, &opts, why);
    if (rc == SM_ERR_NOMEM) drop_workspace(e, m);
    if (rc != SM_OK) {
        rc = fail_with_reason(e, rc, err, why);
        goto end;
    }
    e->rows += n;
    for (int i = 0; i < n; i++) {
        e->truncated += trunc[i] != 0;
        e->not_chinese += rt_text_not_chinese(in->texts[i], in->lens[i]);
    }
end:
    if (trunc != truncated && trunc != &one) free(trunc);
    return rc;
}

int rt_engine_classify(rt_engine *e, const rt_settings *s, rt_model *m, const rt_texts *in,
                       float *probs, int *truncated, char *err)
{
    return run_engine(e, s, m, in, 0, probs, truncated, err);
}

int rt_engine_embed(rt_engine *e, const rt_settings *s, rt_model *m, const rt_texts *in, float *emb,
                    int *truncated, char *err)
{
    return run_engine(e, s, m, in, 1, emb, truncated, err);
}

/* engine.c: one connection's inference engine.
 *
 * Owns the connection's backend (made from its device, threads and
 * precision settings on first use) and a few activation workspaces, one per
 * recently used model, each sized for the largest batch and length asked of
 * it so far (a workspace is never shared between connections, hence never
 * between threads). The model's parameters come from the registry: the
 * cached host copy on the CPU (with its packed BF16 or INT8 copy when the
 * precision is bf16 or int8), the copy uploaded once per model and GPU on a GPU
 * (sx_registry_params), shared by every connection on that GPU; the packed
 * copy the backend's linear_pack_kind asks for (sx_registry_params_packed)
 * made once per model, memory and kind.
 *
 * On a GPU a workspace is sized by free device memory: when the estimate of
 * its activations and the plugin's scratch (ws_bytes) exceeds
 * SX_GPU_MEM_SHARE of what is free, the batch shrinks to the largest that
 * fits (the setting is unchanged; classify just runs more batches), and
 * when even one row does not, the error says how much was needed and how
 * much is free. A workspace that runs out of memory in a pass (its lanes'
 * workspaces, made on first use at its size, did not fit) is dropped, and one
 * that could not be made is not kept, so one out-of-memory at a large
 * batch_size leaves the connection working at a smaller one. Failures on a GPU carry the plugin's last error, which says
 * what CUDA reported. sx_engine_classify() and sx_engine_embed() are the
 * one place SQL-facing code calls the encoder: texts in, probabilities or
 * pooled embeddings out, rows and truncations counted, and texts that are
 * mostly not Chinese (sx_text_not_chinese) counted too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/errors.h"
#include "ext/sentiment_ext.h"

/* The share of free GPU memory one workspace may take. */
#define SX_GPU_MEM_SHARE 0.8

static void slot_clear(sx_ws_slot *s)
{
    bert_workspace_free(s->ws);
    sx_registry_release(s->model);
    memset(s, 0, sizeof *s);
}

void sx_engine_reset(sx_conn *c)
{
    for (int i = 0; i < SX_MAX_WORKSPACES; i++) slot_clear(&c->ws[i]);
    if (c->be) c->be->destroy(c->be);
    c->be = NULL;
    c->gpu = -1;
    c->be_desc[0] = 0;
}

int sx_engine_backend(sx_conn *c, const char *fn, char **errmsg)
{
    if (c->be) return SQLITE_OK;
    return sx_device_create(fn, c->device, c->threads, c->precision, &c->be, &c->gpu, c->be_desc,
                            sizeof c->be_desc, errmsg);
}

int sx_engine_max_length(const sx_conn *c, const bert_model *m)
{
    int mx = bert_max_length(&m->cfg);
    if (c->max_length > 0 && c->max_length < mx) return c->max_length;
    return mx;
}

/* " (why)" when the backend's last op failed (a GPU's can), else "". */
static char *gpu_reason(const sx_conn *c)
{
    const char *why = sx_device_last_error(c->be);
    return *why ? sqlite3_mprintf(" (%s)", why) : NULL;
}

/* Device memory for a batch x seq workspace: its activations
 * (bert_workspace_bytes) plus the scratch the backend says it may grow to
 * in a forward pass (forward_scratch_bytes: a GPU's BF16 operand copies,
 * per-head attention copies, cuBLAS's workspace). */
static double ws_bytes(const backend *be, const bert_config *cfg, int batch, int seq)
{
    double act = (double)bert_workspace_bytes(cfg, batch, seq);
    if (!be->forward_scratch_bytes) return act;
    return act + (double)be->forward_scratch_bytes(be, batch, seq, cfg->hidden_size,
                                                   cfg->intermediate_size,
                                                   cfg->num_attention_heads);
}

/* On a backend with memory of its own (a GPU), the largest batch <= *batch
 * whose workspace fits in SX_GPU_MEM_SHARE of free memory; SQLITE_ERROR
 * when not even one row fits. Nothing changes when the backend cannot say
 * what is free (the CPU: host memory). */
static int fit_batch(sx_conn *c, const char *fn, const bert_config *cfg, int *batch, int seq,
                     char **errmsg)
{
    size_t fr = 0, tot = 0;
    int b = *batch;
    if (sx_device_mem_info(c->be, &fr, &tot) != SQLITE_OK) return SQLITE_OK;
    double room = SX_GPU_MEM_SHARE * (double)fr;
    if (ws_bytes(c->be, cfg, b, seq) > room) { /* the largest batch that fits */
        int lo = 1, hi = b - 1;
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            if (ws_bytes(c->be, cfg, mid, seq) <= room) lo = mid;
            else hi = mid - 1;
        }
        b = lo > 0 ? lo : 1;
    }
    if (ws_bytes(c->be, cfg, b, seq) > room)
        return sx_fail(errmsg, SQLITE_ERROR, fn,
                       "not enough GPU memory on cuda:%d: one row of %d tokens needs about "
                       "%.1f MiB, %.1f MiB is free of %.1f MiB (at most %d%% of what is free "
                       "is used); lower sentiment_config('max_length') or free GPU memory",
                       c->gpu, seq, ws_bytes(c->be, cfg, 1, seq) / 1048576.0,
                       (double)fr / 1048576.0, (double)tot / 1048576.0,
                       (int)(SX_GPU_MEM_SHARE * 100 + 0.5));
    *batch = b;
    return SQLITE_OK;
}

/* A workspace for model m that holds up to *batch x seq (*batch may come
 * back smaller when GPU memory is short), and m's parameters as the
 * backend sees them. */
static int workspace_for(sx_conn *c, const char *fn, sx_model *m, int *batch, int seq,
                         bert_workspace **out, const bert_params **params, char **errmsg)
{
    char err[SM_ERR_MAX];
    sx_ws_slot *slot = NULL;
    const bert_params *p = NULL;
    int i, want = *batch, asked = *batch, rc;

    for (i = 0; i < SX_MAX_WORKSPACES; i++)
        if (c->ws[i].model == m) {
            slot = &c->ws[i];
            break;
        }
    if (slot && slot->asked >= want && slot->seq >= seq) {
        slot->last_used = ++c->tick;
        if (*batch > slot->batch) *batch = slot->batch;
        *out = slot->ws;
        *params = slot->params;
        return SQLITE_OK;
    }
    if (slot) { /* grow: keep the larger of old and new sizes */
        if (slot->asked > want) want = asked = slot->asked;
        if (slot->seq > seq) seq = slot->seq;
        slot_clear(slot);
    } else {
        for (i = 0; i < SX_MAX_WORKSPACES; i++)
            if (!c->ws[i].model) {
                slot = &c->ws[i];
                break;
            }
        if (!slot) {
            slot = &c->ws[0];
            for (i = 1; i < SX_MAX_WORKSPACES; i++)
                if (c->ws[i].last_used < slot->last_used) slot = &c->ws[i];
            slot_clear(slot);
        }
    }
    /* the weights first (once per model and GPU), then the activations in
     * what memory is left */
    int kind = c->be->linear_pack_kind
                   ? c->be->linear_pack_kind(c->be,
                                             sx_device_int8_vetted(m->key, &m->bert->cfg, NULL, 0))
                   : 0;
    int rc_params = kind ? sx_registry_params_packed(m, c->be, kind, &p, err)
                         : sx_registry_params(m, c->be, &p, err);
    /* auto falls back to fp32 where the weights cannot be packed (e.g. not
     * finite); a precision the user named reports why. Out of memory is an
     * error, not a fall-back: the same query must not answer differently
     * because memory was short once. */
    int named = c->precision[0] && strcmp(c->precision, "auto");
    if (rc_params != SM_OK && rc_params != SM_ERR_NOMEM && kind && !named)
        rc_params = sx_registry_params(m, c->be, &p, err);
    if (rc_params != SM_OK) return sx_from_sm(rc_params, fn, err, errmsg);
    if ((rc = fit_batch(c, fn, &m->bert->cfg, &want, seq, errmsg)) != SQLITE_OK) return rc;
    if ((rc = bert_workspace_create(c->be, &m->bert->cfg, want, seq, &slot->ws, err)) != SM_OK) {
        char *why = gpu_reason(c);
        slot->ws = NULL;
        rc = sx_fail(errmsg, sx_rc_from_sm(rc), fn,
                     "cannot allocate a workspace for %d x %d tokens: %s%s", want, seq, err,
                     why ? why : "");
        sqlite3_free(why);
        return rc;
    }
    sx_registry_retain(m);
    slot->model = m;
    slot->params = p;
    slot->batch = want;
    slot->asked = asked;
    slot->seq = seq;
    slot->last_used = ++c->tick;
    if (*batch > want) *batch = want;
    *out = slot->ws;
    *params = p;
    return SQLITE_OK;
}

/* Forgets model m's workspace after an out-of-memory inside a pass (its
 * lanes' workspaces are made on first use at the workspace's batch size, so
 * keeping it would fail the same way at any smaller batch_size): the next
 * call makes one of the size it asks for, and the memory is given back. */
static void drop_workspace(sx_conn *c, sx_model *m)
{
    for (int i = 0; i < SX_MAX_WORKSPACES; i++)
        if (c->ws[i].model == m) slot_clear(&c->ws[i]);
}

int sx_engine_parallel_batches(const sx_conn *c)
{
    return c->be ? c->be->lanes(c->be) : 1;
}

/* Han (Chinese) ideographs: the CJK Unified Ideographs blocks and their
 * extensions, the compatibility ideographs and the ideographic number zero. */
static int is_han(utf8proc_int32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x323AF) || (cp >= 0xF900 && cp <= 0xFAFF) || cp == 0x3007;
}

/* Letters looked at: the model reads at most max_length tokens, and the
 * cost stays bounded for a text of any size. */
#define SX_SCRIPT_LETTERS 4096

int sx_text_not_chinese(const char *text, size_t len)
{
    size_t i = 0, letters = 0, han = 0;
    while (i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                              (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0) { /* an invalid byte: not a letter */
            i++;
            continue;
        }
        i += (size_t)k;
        utf8proc_category_t cat = utf8proc_category(cp);
        if (cat < UTF8PROC_CATEGORY_LU || cat > UTF8PROC_CATEGORY_LO) continue;
        letters++;
        han += is_han(cp);
        if (letters == SX_SCRIPT_LETTERS) break; /* the part the model reads, and a bound */
    }
    return letters > 0 && 2 * han < letters;
}

/* sx_engine_classify (embed 0: out is probs) and sx_engine_embed (embed 1:
 * out is emb). */
static int run_engine(sx_conn *c, const char *fn, sx_model *m, const char *const *texts,
                      const size_t *lens, int n, int batch_size, int windows, int embed, float *out,
                      int *truncated, char **errmsg)
{
    char err[SM_ERR_MAX];
    bert_workspace *ws = NULL;
    const bert_params *params = NULL;
    int *trunc = truncated, one = 0, rc;
    int bs = batch_size > 0 ? batch_size : c->batch_size;
    int seq = sx_engine_max_length(c, m->bert);

    if (n <= 0) return SQLITE_OK;
    if (!trunc) {
        trunc = n == 1 ? &one : sqlite3_malloc64((sqlite3_uint64)n * sizeof *trunc);
        if (!trunc) return sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
    }
    if (bs > n) bs = n;
    if ((rc = sx_engine_backend(c, fn, errmsg)) != SQLITE_OK) goto end;
    if ((rc = workspace_for(c, fn, m, &bs, seq, &ws, &params, errmsg)) != SQLITE_OK) goto end;
    /* sqlite3_interrupt and the progress handler are heard between texts,
     * inside a long text's tokenizing and between batches */
    sx_poll poll;
    sx_poll_begin(&poll, c->db);
    bert_text_opts opts = {sx_poll_stop, &poll, windows >= 0 ? windows : c->long_text_windows};
    rc = embed ? bert_embed_texts_opts(m->bert, params, ws, texts, lens, n, seq, bs, out, trunc,
                                       &opts, err)
               : bert_classify_texts_opts(m->bert, params, ws, texts, lens, n, seq, bs, out, trunc,
                                          &opts, err);
    sx_poll_end(&poll);
    if (rc == SM_ERR_NOMEM) drop_workspace(c, m);
    if (rc != SM_OK) {
        char *why = gpu_reason(c);
        rc = sx_fail(errmsg, sx_rc_from_sm(rc), fn, "%s%s", err, why ? why : "");
        sqlite3_free(why);
        goto end;
    }
    c->rows += n;
    for (int i = 0; i < n; i++) {
        c->truncated += trunc[i] != 0;
        c->not_chinese += sx_text_not_chinese(texts[i], lens[i]);
    }
end:
    if (trunc != truncated && trunc != &one) sqlite3_free(trunc);
    return rc;
}

int sx_engine_classify(sx_conn *c, const char *fn, sx_model *m, const char *const *texts,
                       const size_t *lens, int n, int batch_size, float *probs, int *truncated,
                       char **errmsg)
{
    return run_engine(c, fn, m, texts, lens, n, batch_size, -1, 0, probs, truncated, errmsg);
}

int sx_engine_classify_long(sx_conn *c, const char *fn, sx_model *m, const char *const *texts,
                            const size_t *lens, int n, int batch_size, int windows, float *probs,
                            int *truncated, char **errmsg)
{
    return run_engine(c, fn, m, texts, lens, n, batch_size, windows, 0, probs, truncated, errmsg);
}

int sx_engine_embed(sx_conn *c, const char *fn, sx_model *m, const char *const *texts,
                    const size_t *lens, int n, int batch_size, float *emb, int *truncated,
                    char **errmsg)
{
    return run_engine(c, fn, m, texts, lens, n, batch_size, -1, 1, emb, truncated, errmsg);
}

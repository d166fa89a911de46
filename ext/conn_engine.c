/* conn_engine.c: a connection's door to the runtime engine.
 *
 * The SQL objects classify texts through these calls; the engine itself
 * (backend, workspaces, batching) is runtime/engine.c and knows no SQLite.
 * Here, the boundary: the connection's sentiment_config settings become the
 * engine's rt_settings, sqlite3_interrupt and the progress handler become
 * its stop callback (an sx_poll, begun and ended around each call on the
 * calling thread), and the runtime's SM_* status and message become an
 * SQLite code and "fn: message" (sx_from_sm).
 */
#include <stdio.h>

#include "core/errors.h"
#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/errors.h"

/* The engine's view of c's settings (valid while c is unchanged). */
static rt_settings settings_of(const sx_conn *c)
{
    rt_settings s = {c->device,     c->threads,    c->precision,
                     c->batch_size, c->max_length, c->long_text_windows};
    return s;
}

void sx_engine_reset(sx_conn *c)
{
    rt_engine_reset(&c->engine);
}

int sx_engine_backend(sx_conn *c, const char *fn, char **errmsg)
{
    char err[SM_ERR_MAX];
    rt_settings s = settings_of(c);
    return sx_from_sm(rt_engine_backend(&c->engine, &s, err), fn, err, errmsg);
}

int sx_engine_max_length(const sx_conn *c, const bert_model *m)
{
    rt_settings s = settings_of(c);
    return rt_engine_max_length(&s, m);
}

int sx_engine_parallel_batches(const sx_conn *c)
{
    return rt_engine_parallel_batches(&c->engine);
}

/* One engine run (embed 0: classify into out, 1: embed into out). */
static int run(sx_conn *c, const char *fn, rt_model *m, const char *const *texts,
               const size_t *lens, int n, int batch_size, int windows, int embed, float *out,
               int *truncated, char **errmsg)
{
    char err[SM_ERR_MAX];
    rt_settings s = settings_of(c);
    sx_poll poll;
    rt_texts in = {texts, lens, n, batch_size, windows, sx_poll_stop, &poll};
    int rc;
    sx_poll_begin(&poll, c->db);
    rc = embed ? rt_engine_embed(&c->engine, &s, m, &in, out, truncated, err)
               : rt_engine_classify(&c->engine, &s, m, &in, out, truncated, err);
    sx_poll_end(&poll);
    return sx_from_sm(rc, fn, err, errmsg);
}

int sx_engine_classify(sx_conn *c, const char *fn, rt_model *m, const char *const *texts,
                       const size_t *lens, int n, int batch_size, float *probs, int *truncated,
                       char **errmsg)
{
    return run(c, fn, m, texts, lens, n, batch_size, -1, 0, probs, truncated, errmsg);
}

int sx_engine_classify_long(sx_conn *c, const char *fn, rt_model *m, const char *const *texts,
                            const size_t *lens, int n, int batch_size, int windows, float *probs,
                            int *truncated, char **errmsg)
{
    return run(c, fn, m, texts, lens, n, batch_size, windows, 0, probs, truncated, errmsg);
}

int sx_engine_embed(sx_conn *c, const char *fn, rt_model *m, const char *const *texts,
                    const size_t *lens, int n, int batch_size, float *emb, int *truncated,
                    char **errmsg)
{
    return run(c, fn, m, texts, lens, n, batch_size, -1, 1, emb, truncated, errmsg);
}

int sx_engine_int8_begin(sx_conn *c, const char *fn, rt_model *m, rt_int8_measure **out,
                         char **errmsg)
{
    char err[SM_ERR_MAX];
    int rc = rt_int8_measure_begin(m->bert, c->threads, sx_engine_max_length(c, m->bert), out, err);
    if (rc == SM_ERR_INVALID || rc == SM_ERR_UNSUPPORTED) {
        char why[SM_ERR_MAX];
        snprintf(why, sizeof why, "int8 cannot run this model: %.400s", err);
        return sx_from_sm(rc, fn, why, errmsg);
    }
    return sx_from_sm(rc, fn, err, errmsg);
}

int sx_engine_int8_add(sx_conn *c, const char *fn, rt_int8_measure *q, const char *const *texts,
                       const size_t *lens, const int *labels, int n, char **errmsg)
{
    char err[SM_ERR_MAX];
    sx_poll poll;
    sx_poll_begin(&poll, c->db);
    int rc = rt_int8_measure_add(q, texts, lens, labels, n, sx_poll_stop, &poll, err);
    sx_poll_end(&poll);
    return sx_from_sm(rc, fn, err, errmsg);
}

/* conn_engine.h: a connection's door to the runtime engine (conn_engine.c).
 * Room: ext/. Called by the SQL objects that classify or embed (functions.c,
 * classify_vtab.c, batch_window.c, clauses_vtab.c, embed.c, evaluate.c (also
 * its INT8 check),
 * explain.c, train.c, config.c; sentiment.c resets it when a connection
 * closes).
 */
#ifndef EXT_CONN_ENGINE_H
#define EXT_CONN_ENGINE_H

#include <stddef.h>

#include "encoder/bert.h"
#include "ext/conn.h"
#include "runtime/int8_measure.h"
#include "runtime/registry.h"

/* Drops backend and workspaces (after a device or threads change). */
void sx_engine_reset(sx_conn *c);
/* Makes sure c->engine.be exists (SQLITE_OK, or an error naming fn). */
int sx_engine_backend(sx_conn *c, const char *fn, char **errmsg);
/* Classifies n texts (none NULL or blank) with one engine call: probs gets
 * n x num_labels, truncated (may be NULL) gets n flags. batch_size <= 0 uses
 * the connection's. Counts rows and truncations. */
int sx_engine_classify(sx_conn *c, const char *fn, rt_model *m, const char *const *texts,
                       const size_t *lens, int n, int batch_size, float *probs, int *truncated,
                       char **errmsg);
/* The same with the long-text reading given: windows -1 the connection's
 * setting (sentiment_config('long_text')), 0 truncate, else up to that many
 * windows (bert_text_opts.windows). */
int sx_engine_classify_long(sx_conn *c, const char *fn, rt_model *m, const char *const *texts,
                            const size_t *lens, int n, int batch_size, int windows, float *probs,
                            int *truncated, char **errmsg);
/* The same batching for sentence embeddings (rt_engine_embed). */
int sx_engine_embed(sx_conn *c, const char *fn, rt_model *m, const char *const *texts,
                    const size_t *lens, int n, int batch_size, float *emb, int *truncated,
                    char **errmsg);
/* How many batches one sx_engine_classify call runs at once (one per lane
 * of the backend, else 1). Callers that read rows in batches read this
 * many batches per call. */
int sx_engine_parallel_batches(const sx_conn *c);
/* The INT8 check of m (runtime/int8_measure.h) with this connection's
 * threads and max_length for m, the interrupt and progress handler heard
 * between batches; errors name fn. The measurement holds m's bert model:
 * free it (rt_int8_measure_free) before releasing m. */
int sx_engine_int8_begin(sx_conn *c, const char *fn, rt_model *m, rt_int8_measure **out,
                         char **errmsg);
int sx_engine_int8_add(sx_conn *c, const char *fn, rt_int8_measure *q, const char *const *texts,
                       const size_t *lens, const int *labels, int n, char **errmsg);
/* The effective max_length for a model on this connection. */
int sx_engine_max_length(const sx_conn *c, const bert_model *m);

#endif

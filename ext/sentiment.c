/* sentiment.c: the SQLite entry point of the sentiment extension.
 *
 * Load it from the sqlite3 shell with `.load ./build/sentiment`, from C
 * with sqlite3_load_extension(db, "build/sentiment", 0, &err), from Python
 * with conn.enable_load_extension(True); conn.load_extension(
 * "build/sentiment"). The entry point is sqlite3_sentiment_init. Loading
 * registers, on that connection:
 *
 *   sentiment(text [, model])          label of the top class
 *   sentiment_score(text [, model])    P(positive) (binary) / P(top label)
 *   sentiment_probs(text [, model])    JSON {label: probability}
 *   sentiment_tokens(text [, model])   JSON array of WordPiece tokens
 *   sentiment_embed(text [, model [, prompt]])  pooled embedding, float32 BLOB
 *   sentiment_batch(text [, model]) OVER (ROWS BETWEEN CURRENT ROW AND
 *                                  255 FOLLOWING)  window form, batched
 *   classify(source, column [, model]) batched table-valued function
 *   sentiment_models                   every model this connection can use
 *   sentiment_load(name, dir)          register a model directory (DIRECTONLY)
 *   sentiment_save(name [, model])     store a model in the database (DIRECTONLY)
 *   sentiment_drop(name [, version])   remove a stored model (DIRECTONLY)
 *   sentiment_export(name, dir)        write a stored model as a directory (DIRECTONLY)
 *   sentiment_evaluate(text, label [, model [, labels]])    aggregate: accuracy, F1, ...
 *   sentiment_int8_check(text, label [, model [, labels]])  aggregate: FP32 vs INT8,
 *                                      the model's INT8 check (DIRECTONLY)
 *   train(name, text, label [, options])  aggregate: fine-tune, store
 *   sentiment_config(key [, value])    device, threads, batch_size, ...
 *   sentiment_device(), sentiment_version(), sentiment_debug()
 *
 * Each file of ext/ documents its part in its header comment:
 * functions.c (scalars), embed.c, classify_vtab.c, batch_window.c, models_vtab.c,
 * config.c, models.c (name lookup), storage.c (the model table).
 *
 * Loading the extension writes nothing to the database. State kept per
 * connection (configuration, registered models, the inference workspace) is
 * freed when the connection closes; the model cache is process-wide and
 * outlives connections, so this shared object pins itself in memory.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/errors.h"
#include "ext/models.h"
#include "ext/register.h"

SQLITE_EXTENSION_INIT1

void sx_conn_ref(sx_conn *c)
{
    c->refs++;
}

/* The one destructor of per-connection state: every function and module is
 * registered with a reference, and the last one dropped frees it. SQLite
 * calls destructors on the connection's thread, so refs needs no lock. */
void sx_conn_unref(void *p)
{
    sx_conn *c = p;
    if (!c || --c->refs > 0) return;
    sx_engine_reset(c);
    sx_model_unregister_all(c);
    sqlite3_free(c);
}

int sx_register_funcs(sqlite3 *db, sx_conn *c, const sx_func *f, size_t n)
{
    int rc = SQLITE_OK;
    for (size_t i = 0; i < n && rc == SQLITE_OK; i++) {
        sx_conn_ref(c);
        rc = sqlite3_create_function_v2(db, f[i].name, f[i].nArg, f[i].flags, c, f[i].xFunc, NULL,
                                        NULL, sx_conn_unref);
    }
    return rc;
}

static sx_conn *conn_new(sqlite3 *db)
{
    sx_conn *c = sqlite3_malloc(sizeof *c);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->db = db;
    c->refs = 1;
    strcpy(c->device, "auto");
    c->threads = 0;
    c->batch_size = 32;
    c->max_length = 0;
    c->progress = SX_PROGRESS_AUTO;
    return c;
}

/* Keeps this object loaded after the connection that loaded it closes:
 * cached models and BLAS threads live in it. */
static void pin_self(void)
{
    Dl_info info;
    if (dladdr((void *)pin_self, &info) && info.dli_fname)
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

typedef int (*sx_register_fn)(sqlite3 *db, sx_conn *c);

static const struct {
    const char *what;
    sx_register_fn reg;
} aRegister[] = {
    {"scalar functions", sx_register_functions},
    {"sentiment_embed", sx_register_embed},
    {"sentiment_config", sx_register_config},
    {"sentiment_batch", sx_register_batch_window},
    {"classify", sx_register_classify},
    {"sentiment_models", sx_register_models_vtab},
    {"train, sentiment_evaluate", sx_register_training},
    {"sentiment_drop, sentiment_export, sentiment_use", sx_register_store_functions},
    {"sentiment_explain", sx_register_explain},
    {"sentiment_clauses", sx_register_clauses},
};

__attribute__((visibility("default"))) int sqlite3_sentiment_init(sqlite3 *db, char **pzErrMsg,
                                                                  const sqlite3_api_routines *pApi)
{
    int rc = SQLITE_OK;
    sx_conn *c;

    SQLITE_EXTENSION_INIT2(pApi);
    pin_self();
    c = conn_new(db);
    if (!c) return SQLITE_NOMEM;
    for (size_t i = 0; i < sizeof aRegister / sizeof aRegister[0]; i++) {
        rc = aRegister[i].reg(db, c);
        if (rc != SQLITE_OK) {
            /* *pzErrMsg is the loader's, set only here (sx_fail would free it) */
            char *msg = NULL;
            rc = sx_fail(&msg, rc, "sentiment", "cannot register %s: %s", aRegister[i].what,
                         sqlite3_errstr(rc));
            if (pzErrMsg) *pzErrMsg = msg;
            else sqlite3_free(msg);
            break;
        }
    }
    sx_conn_unref(c); /* drop the init's own reference */
    return rc;
}

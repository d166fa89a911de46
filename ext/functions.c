/* functions.c: the scalar SQL functions of the sentiment extension.
 *
 *   sentiment(text [, model])        -> TEXT   label of the top class
 *   sentiment_score(text [, model])  -> REAL   P(positive) when the model's
 *                                              labels are exactly negative and
 *                                              positive, else P(top label)
 *   sentiment_probs(text [, model])  -> TEXT   JSON {"negative":0.1,...} in
 *                                              class-id order
 *   sentiment_tokens(text [, model]) -> TEXT   JSON array of the WordPiece
 *                                              tokens (as BertTokenizer.
 *                                              tokenize: no [CLS]/[SEP], not
 *                                              truncated)
 *   sentiment_load(name, dir)        -> TEXT   registers the Hugging Face
 *                                              model directory dir (config.json,
 *                                              model.safetensors, tokenizer.json
 *                                              or vocab.txt; tokenizer.json is
 *                                              used when both are there)
 *                                              as `name` on this connection and
 *                                              loads it; returns a summary.
 *                                              dir NULL unregisters `name`.
 *                                              'default' overrides the built-in
 *                                              model for this connection.
 *   sentiment_save(name [, model])   -> INT    stores `model` in this database
 *                                              as a new version of `name`
 *                                              (sentiment_model_store, created
 *                                              on first use); returns the
 *                                              version number. Without `model`
 *                                              it stores what `name` means on
 *                                              this connection: the model
 *                                              registered under it with
 *                                              sentiment_load(), else its
 *                                              latest stored version (a
 *                                              copy); a name that is neither
 *                                              is an error (store the
 *                                              built-in model with
 *                                              sentiment_save(name, 'default'))
 *   sentiment_device()               -> TEXT   where inference runs, e.g.
 *                                              "cpu: 2 threads, OpenBLAS 0.3.21,
 *                                              fp32 (AVX-512F kernel)" or
 *                                              "cuda:0 NVIDIA H200, bf16"
 *   sentiment_version()              -> TEXT   the bare version, "0.1.0", as
 *                                              vec_version() does
 *   sentiment_debug()                -> TEXT   JSON: build fingerprint (version,
 *                                              commit, compiler, SQLite, BLAS,
 *                                              built-in model), device, precision
 *                                              setting, model cache
 *                                              (entries, loads, evictions) and
 *                                              this connection's counters (rows
 *                                              classified, rows truncated,
 *                                              rows mostly not Chinese)
 *
 * Inputs. NULL text gives NULL, and so does blank text: text that
 * tokenizes to nothing (empty; white space; NUL, control and format
 * characters such as U+200B and U+FEFF; invalid UTF-8 only; words of
 * combining marks only: tokenizer_text_blank). That holds for every
 * function here, sentiment_tokens() too (NULL, not '[]'), for classify's
 * label, score and probs, sentiment_batch(), and train() and
 * sentiment_evaluate() skip such rows. INTEGER and
 * REAL values are classified as their text form, as SQLite converts them
 * ('42', '4.5'). A BLOB is taken as UTF-8 bytes; invalid UTF-8 anywhere is
 * repaired (U+FFFD, then dropped as BertTokenizer does), never an error.
 * Text longer than the model's maximum length (sentiment_config
 * 'max_length') is truncated and counted in sentiment_debug()'s
 * connection.truncated. Text whose letters are mostly not Han characters
 * (English, Russian, kana: rt_text_not_chinese) is classified like any
 * other, with no warning in the result, and counted in
 * connection.not_chinese: a Chinese model's label for it means little.
 *
 * JSON results (sentiment_probs, sentiment_tokens, sentiment_debug, like
 * train()'s and sentiment_evaluate()'s reports and classify's probs) carry
 * SQLite's JSON subtype, so json_object('p', sentiment_probs(x)) nests an
 * object rather than a quoted string.
 *
 * Models. `model` is a name from sentiment_models, looked up exactly;
 * `name@N` picks version N of a database model (models.c). A NULL model
 * name is an error. The model argument is resolved once per statement when
 * it is a constant.
 *
 * Errors name the function, the value and what was expected, e.g.
 *   sentiment(): no model named 'hotle'; known: default, hotel
 * sentiment_load and sentiment_save read files or write tables, so they are
 * SQLITE_DIRECTONLY (not usable from triggers, views or schema).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "ext/args.h"
#include "ext/builtin.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/errors.h"
#include "ext/functions.h"
#include "ext/models.h"
#include "ext/register.h"
#include "ext/results.h"
#include "ext/storage.h"
#include "ext/version.h"
#include "format/safetensors.h"
#include "runtime/device.h"
#include "runtime/registry.h"

#ifndef SENTIMENT_COMMIT
#define SENTIMENT_COMMIT "unknown"
#endif

enum { OUT_LABEL, OUT_SCORE, OUT_PROBS, OUT_TOKENS };

static const char *const k_fn_names[] = {"sentiment()", "sentiment_score()", "sentiment_probs()",
                                         "sentiment_tokens()"};

static void release_model(void *p)
{
    rt_registry_release(p);
}

/* The model named by argv[i] (or default when i >= argc), referenced.
 * *cached says whether it came from (and is owned by) the auxdata. */
static rt_model *model_arg(sqlite3_context *ctx, sx_conn *c, const char *fn, int argc,
                           sqlite3_value **argv, int i, int *cached)
{
    char *errmsg = NULL;
    rt_model *m = NULL;
    const char *name = NULL;

    *cached = 0;
    if (i < argc) {
        m = sqlite3_get_auxdata(ctx, i);
        if (m) {
            *cached = 1;
            return m;
        }
        if (sqlite3_value_type(argv[i]) == SQLITE_NULL) {
            sx_fail(&errmsg, SQLITE_ERROR, fn,
                    "model name is NULL; expected a name from sentiment_models, e.g. 'default'");
            goto end;
        }
        if (sx_arg_name(argv[i], fn, "model name", &name, &errmsg) != SQLITE_OK) goto end;
    }
    sx_model_resolve(c, fn, name, &m, &errmsg);
end:
    if (errmsg) {
        sqlite3_result_error(ctx, errmsg, -1);
        sqlite3_free(errmsg);
    } else if (!m) {
        sqlite3_result_error_nomem(ctx);
    }
    return m;
}

/* Hands a resolved model to the statement's auxdata (for the next rows). */
static void model_done(sqlite3_context *ctx, rt_model *m, int argc, int i, int cached)
{
    if (cached || !m) return;
    if (i < argc) sqlite3_set_auxdata(ctx, i, m, release_model);
    else rt_registry_release(m);
}

rt_model *sx_model_arg(sqlite3_context *ctx, sx_conn *c, const char *fn, int argc,
                       sqlite3_value **argv, int i, int *cached)
{
    return model_arg(ctx, c, fn, argc, argv, i, cached);
}

void sx_model_arg_done(sqlite3_context *ctx, rt_model *m, int argc, int i, int cached)
{
    if (i < argc) model_done(ctx, m, argc, i, cached);
    else rt_registry_release(m);
}

static void tokens_result(sqlite3_context *ctx, const char *fn, rt_model *m, const char *text,
                          size_t len)
{
    char err[SM_ERR_MAX];
    int n = 0, *ids = NULL, rc;
    sqlite3_str *s = NULL;
    const tokenizer *tok = m->bert->tok;
    sx_poll poll;

    /* A long text is tokenized twice (count, then ids), each pass asking
     * the interrupt and the progress handler as it goes. */
    sx_poll_begin(&poll, sqlite3_context_db_handle(ctx));
    rc = tokenizer_tokenize_stoppable(tok, text, len, NULL, 0, &n, sx_poll_stop, &poll, err);
    if (rc == SM_OK) {
        ids = sqlite3_malloc64((sqlite3_uint64)(n > 0 ? n : 1) * sizeof *ids);
        if (ids)
            rc = tokenizer_tokenize_stoppable(tok, text, len, ids, n, &n, sx_poll_stop, &poll, err);
    }
    sx_poll_end(&poll);
    if (rc != SM_OK) goto fail;
    if (!ids) goto nomem;
    s = sqlite3_str_new(NULL);
    sqlite3_str_appendchar(s, 1, '[');
    for (int i = 0; i < n; i++) {
        const char *t = tokenizer_token(tok, ids[i]);
        if (i) sqlite3_str_appendchar(s, 1, ',');
        sx_json_string(s, t ? t : "[UNK]");
    }
    sqlite3_str_appendchar(s, 1, ']');
    if (sqlite3_str_errcode(s)) goto nomem;
    sx_result_json(ctx, sqlite3_str_finish(s));
    sqlite3_free(ids);
    return;
fail : {
    char *msg = NULL;
    sx_from_sm(rc, fn, err, &msg);
    if (msg) sqlite3_result_error(ctx, msg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(msg);
    sqlite3_free(ids);
    return;
}
nomem:
    sqlite3_free(sqlite3_str_finish(s));
    sqlite3_free(ids);
    sqlite3_result_error_nomem(ctx);
}

/* sentiment(), sentiment_score(), sentiment_probs(), sentiment_tokens(). */
static void classify_one(sqlite3_context *ctx, int argc, sqlite3_value **argv, int out)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char *fn = k_fn_names[out];
    char *errmsg = NULL;
    float stack_probs[16], *probs = stack_probs;
    rt_model *m = NULL;
    int cached = 0, k, top;
    size_t len = 0;
    const char *text;

    if (sx_value_text(argv[0], &text, &len) != SQLITE_OK) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (!text) return; /* NULL result */
    m = model_arg(ctx, c, fn, argc, argv, 1, &cached);
    if (!m) return;
    if (out == OUT_TOKENS) {
        tokens_result(ctx, fn, m, text, len);
        goto end;
    }
    k = m->bert->cfg.num_labels;
    if (k > (int)(sizeof stack_probs / sizeof *stack_probs)) {
        probs = sqlite3_malloc64((sqlite3_uint64)k * sizeof *probs);
        if (!probs) {
            sqlite3_result_error_nomem(ctx);
            goto end;
        }
    }
    if (sx_engine_classify(c, fn, m, &text, &len, 1, 1, probs, NULL, &errmsg) != SQLITE_OK) {
        if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
        else sqlite3_result_error_nomem(ctx);
        goto end;
    }
    top = sx_argmax(probs, k);
    switch (out) {
    case OUT_LABEL:
        sqlite3_result_text(ctx, m->bert->cfg.id2label[top], -1, SQLITE_TRANSIENT);
        break;
    case OUT_SCORE: sqlite3_result_double(ctx, sx_score(&m->bert->cfg, probs)); break;
    default: {
        sx_result_json(ctx, sx_probs_json(&m->bert->cfg, probs));
    }
    }
end:
    sqlite3_free(errmsg);
    if (probs != stack_probs) sqlite3_free(probs);
    if (argc == 1) rt_registry_release(m);
    else model_done(ctx, m, argc, 1, cached);
}

static void fn_sentiment(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    classify_one(ctx, argc, argv, OUT_LABEL);
}

static void fn_score(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    classify_one(ctx, argc, argv, OUT_SCORE);
}

static void fn_probs(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    classify_one(ctx, argc, argv, OUT_PROBS);
}

static void fn_tokens(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    classify_one(ctx, argc, argv, OUT_TOKENS);
}

/* A one-line description of a loaded model. */
static char *model_summary(const char *name, const bert_model *m, const char *from)
{
    sqlite3_str *s = sqlite3_str_new(NULL);
    const bert_config *cfg = &m->cfg;
    sqlite3_str_appendf(s, "%s: %s, %d label%s (", name, cfg->model_type, cfg->num_labels,
                        cfg->num_labels == 1 ? "" : "s");
    for (int i = 0; i < cfg->num_labels; i++)
        sqlite3_str_appendf(s, "%s%s", i ? ", " : "", cfg->id2label[i]);
    sqlite3_str_appendf(s, "), %d layers, hidden %d, %lld parameters, from %s",
                        cfg->num_hidden_layers, cfg->hidden_size,
                        (long long)bert_model_num_params(m), from);
    return sqlite3_str_finish(s);
}

/* sentiment_load(name, dir) */
static void fn_load(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char *fn = "sentiment_load()";
    char *errmsg = NULL, *summary = NULL;
    const char *name, *path;
    int rc;
    (void)argc;

    if (sx_admin_refused(ctx, c, fn)) return;

    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "expected a model name (TEXT) as the first argument, got %s",
                     sqlite3_value_type(argv[0]) == SQLITE_NULL ? "NULL" : "a non-text value");
        goto end;
    }
    if ((rc = sx_arg_name(argv[0], fn, "model name", &name, &errmsg)) != SQLITE_OK) goto end;
    if (sqlite3_value_type(argv[1]) == SQLITE_NULL) {
        if ((rc = sx_model_register(c, fn, name, NULL, &errmsg)) != SQLITE_OK) goto end;
        summary = sqlite3_mprintf("%s: unregistered", name);
        goto end;
    }
    if (sqlite3_value_type(argv[1]) != SQLITE_TEXT) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "expected a model directory path (TEXT) as the second argument");
        goto end;
    }
    rc = sx_arg_name(argv[1], fn, "model directory path", &path, &errmsg);
    if (rc != SQLITE_OK) goto end;
    if ((rc = sx_model_register(c, fn, name, path, &errmsg)) != SQLITE_OK) goto end;
    for (sx_file_reg *r = c->files; r; r = r->next)
        if (!strcmp(r->name, name)) summary = model_summary(name, r->model->bert, r->path);
end:
    if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else if (summary) sqlite3_result_text(ctx, summary, -1, SQLITE_TRANSIENT);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
    sqlite3_free(summary);
}

/* sentiment_save(name [, model]) */
static void fn_save(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char *fn = "sentiment_save()";
    char err[SM_ERR_MAX];
    char *errmsg = NULL, *config = NULL, *tok_text = NULL, *labels = NULL;
    const char *tok_name = NULL;
    void *weights = NULL;
    size_t weights_len = 0, tok_len = 0;
    rt_model *m = NULL;
    int cached = 0, rc;
    int64_t version = 0;
    const char *name;

    if (sx_admin_refused(ctx, c, fn)) return;

    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "expected a model name (TEXT) as the first argument");
        goto end;
    }
    if ((rc = sx_arg_name(argv[0], fn, "model name", &name, &errmsg)) != SQLITE_OK) goto end;
    if ((rc = sx_model_name_check(fn, name, 1, &errmsg)) != SQLITE_OK) goto end;
    if (argc == 1) {
        /* what the name means on this connection, never another model */
        int src = sx_model_source(c, name);
        if (src == SX_SRC_FILE) rc = sx_model_resolve(c, fn, name, &m, &errmsg);
        else if (src == SX_SRC_DATABASE) rc = sx_model_acquire_stored(c, fn, name, 0, &m, &errmsg);
        else
            rc = sx_fail(&errmsg, SQLITE_NOTFOUND, fn,
                         "no model named '%s' is registered or stored to save; "
                         "sentiment_save('%s', 'default') stores the built-in model under that "
                         "name",
                         name, name);
        if (rc != SQLITE_OK) goto end;
    } else {
        m = model_arg(ctx, c, fn, argc, argv, 1, &cached);
        if (!m) return; /* error already set */
    }
    /* the config as loaded, with the INT8 check auto follows now (one
     * sentiment_int8_check() measured travels with the saved model) */
    bert_config cfg = m->bert->cfg;
    cfg.int8_check = rt_registry_int8_check(m);
    if ((rc = bert_config_to_json(&cfg, &config, err)) != SM_OK ||
        (rc = bert_model_save_safetensors(m->bert, ST_F32, &weights, &weights_len, err)) != SM_OK ||
        (rc = bert_model_tokenizer_file(m->bert, &tok_name, &tok_text, &tok_len, err)) != SM_OK) {
        rc = sx_fail(&errmsg, sx_rc_from_sm(rc), fn, "cannot serialise the model: %s", err);
        goto end;
    }
    {
        sqlite3_str *s = sqlite3_str_new(NULL);
        sqlite3_str_appendchar(s, 1, '[');
        for (int i = 0; i < m->bert->cfg.num_labels; i++) {
            if (i) sqlite3_str_appendchar(s, 1, ',');
            sx_json_string(s, m->bert->cfg.id2label[i]);
        }
        sqlite3_str_appendchar(s, 1, ']');
        labels = sqlite3_str_finish(s);
    }
    if (!labels) {
        rc = sx_fail(&errmsg, SQLITE_NOMEM, fn, "out of memory");
        goto end;
    }
    int is_json = !strcmp(tok_name, "tokenizer.json");
    rc = sx_store_put(c->db, name, config, strlen(config), is_json ? NULL : tok_text, tok_len,
                      is_json ? tok_text : NULL, tok_len, labels, NULL, weights, weights_len,
                      &version, &errmsg);
    if (rc != SQLITE_OK) {
        if (errmsg) rc = sx_fail(&errmsg, rc, fn, "%s", errmsg);
        goto end;
    }
    sx_model_drop_memory(c, name); /* a model train() could not store, now stored */
end:
    if (rc == SQLITE_OK) sqlite3_result_int64(ctx, version);
    else if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
    free(config);
    free(weights);
    free(tok_text);
    sqlite3_free(labels);
    model_done(ctx, m, argc, 1, cached);
}

static void fn_device(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    char *errmsg = NULL;
    (void)argc;
    (void)argv;
    if (sx_engine_backend(c, "sentiment_device()", &errmsg) != SQLITE_OK) {
        if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
        else sqlite3_result_error_nomem(ctx);
        sqlite3_free(errmsg);
        return;
    }
    sqlite3_result_text(ctx, c->engine.desc, -1, SQLITE_TRANSIENT);
}

static void fn_version(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    sqlite3_result_text(ctx, SX_VERSION, -1, SQLITE_STATIC);
}

static void fn_debug(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    rt_registry_stats st;
    sx_builtin b;
    sqlite3_str *s = sqlite3_str_new(NULL);
    int nfiles = 0;
    (void)argc;
    (void)argv;

    rt_registry_stats_get(&st);
    for (sx_file_reg *r = c->files; r; r = r->next) nfiles++;
    sqlite3_str_appendf(s,
                        "{\"version\":\"%s\",\"commit\":\"%s\",\"compiler\":\"gcc %s\","
                        "\"sqlite\":\"%s\",\"blas\":",
                        SX_VERSION, SENTIMENT_COMMIT, __VERSION__, sqlite3_libversion());
    sx_json_string(s, rt_device_blas());
    sqlite3_str_appendf(s,
                        ",\"builtin_model\":%s,\"device\":", sx_builtin_get(&b) ? "true" : "false");
    sx_json_string(s, c->device);
    sqlite3_str_appendall(s, ",\"precision\":");
    sx_json_string(s, c->precision[0] ? c->precision : "auto");
    sqlite3_str_appendall(s, ",\"backend\":");
    if (c->engine.be) sx_json_string(s, c->engine.desc);
    else sqlite3_str_appendall(s, "null");
    sqlite3_str_appendf(s,
                        ",\"cache\":{\"entries\":%d,\"in_use\":%d,\"loads\":%lld,"
                        "\"evictions\":%lld}",
                        st.entries, st.referenced, (long long)st.loads, (long long)st.evictions);
    sqlite3_str_appendf(s,
                        ",\"connection\":{\"rows\":%lld,\"truncated\":%lld,"
                        "\"not_chinese\":%lld,\"registered_models\":%d}}",
                        (long long)c->engine.rows, (long long)c->engine.truncated,
                        (long long)c->engine.not_chinese, nfiles);
    if (sqlite3_str_errcode(s)) {
        sqlite3_free(sqlite3_str_finish(s));
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sx_result_json(ctx, sqlite3_str_finish(s));
}

#define SX_SAFE (SQLITE_UTF8 | SQLITE_INNOCUOUS)
#define SX_SAFE_JSON (SX_SAFE | SX_JSON_FLAGS)
#define SX_DIRECT (SQLITE_UTF8 | SQLITE_DIRECTONLY)

static const sx_func aFunc[] = {
    {"sentiment", 1, SX_SAFE, fn_sentiment},
    {"sentiment", 2, SX_SAFE, fn_sentiment},
    {"sentiment_score", 1, SX_SAFE, fn_score},
    {"sentiment_score", 2, SX_SAFE, fn_score},
    {"sentiment_probs", 1, SX_SAFE_JSON, fn_probs},
    {"sentiment_probs", 2, SX_SAFE_JSON, fn_probs},
    {"sentiment_tokens", 1, SX_SAFE_JSON, fn_tokens},
    {"sentiment_tokens", 2, SX_SAFE_JSON, fn_tokens},
    {"sentiment_load", 2, SX_DIRECT, fn_load},
    {"sentiment_save", 1, SX_DIRECT, fn_save},
    {"sentiment_save", 2, SX_DIRECT, fn_save},
    {"sentiment_device", 0, SX_SAFE, fn_device},
    {"sentiment_version", 0, SX_SAFE | SQLITE_DETERMINISTIC, fn_version},
    {"sentiment_debug", 0, SX_SAFE_JSON, fn_debug},
};

int sx_register_functions(sqlite3 *db, sx_conn *c)
{
    return sx_register_funcs(db, c, aFunc, sizeof aFunc / sizeof *aFunc);
}

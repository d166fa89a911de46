/* storage.c: models kept inside a database (the sentiment_model_store table).
 *
 * The schema is sql/schema.sql (the same text is below; a test keeps the
 * two equal). The table is created only when a model is first stored, never
 * because the extension was loaded or a model was looked up. Only the main
 * database is searched. Reads go through prepared statements on the
 * caller's connection; sx_store_put() inserts inside a savepoint, so a
 * failed store leaves the database as it was.
 */
#include <string.h>

#include "errors.h"
#include "sentiment_ext.h"

static const char k_schema[] =
    "CREATE TABLE IF NOT EXISTS sentiment_model_store(\n"
    "  name TEXT NOT NULL,\n"
    "  version INTEGER NOT NULL,\n"
    "  uid TEXT NOT NULL UNIQUE DEFAULT (lower(hex(randomblob(16)))),\n"
    "  config TEXT NOT NULL,\n"
    "  vocab TEXT NOT NULL,\n"
    "  labels TEXT NOT NULL,\n"
    "  metrics TEXT,\n"
    "  created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),\n"
    "  safetensors BLOB NOT NULL,\n"
    "  PRIMARY KEY (name, version)\n"
    ")";

int sx_store_exists(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int found = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT 1 FROM main.sqlite_schema WHERE type = 'table' AND name = '"
                           SX_STORE_TABLE "'",
                           -1, &st, NULL) == SQLITE_OK)
        found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

int sx_store_ensure(sqlite3 *db, char **errmsg)
{
    if (sx_store_exists(db)) return SQLITE_OK;
    int rc = sqlite3_exec(db, k_schema, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        *errmsg = sqlite3_mprintf("cannot create table " SX_STORE_TABLE ": %s",
                                  sqlite3_errmsg(db));
    return rc;
}

int sx_store_find(sqlite3 *db, const char *name, int64_t version, char **uid,
                  int64_t *found_version, char **errmsg)
{
    sqlite3_stmt *st = NULL;
    int rc;

    *uid = NULL;
    if (!sx_store_exists(db)) return SQLITE_NOTFOUND;
    rc = sqlite3_prepare_v2(db,
                            version > 0
                                ? "SELECT uid, version FROM main." SX_STORE_TABLE
                                  " WHERE name = ?1 AND version = ?2"
                                : "SELECT uid, version FROM main." SX_STORE_TABLE
                                  " WHERE name = ?1 ORDER BY version DESC LIMIT 1",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (version > 0) sqlite3_bind_int64(st, 2, version);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *u = (const char *)sqlite3_column_text(st, 0);
        *found_version = sqlite3_column_int64(st, 1);
        *uid = sqlite3_mprintf("%s", u ? u : "");
        rc = *uid ? SQLITE_OK : SQLITE_NOMEM;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_NOTFOUND;
    }
end:
    if (rc != SQLITE_OK && rc != SQLITE_NOTFOUND)
        *errmsg = sqlite3_mprintf("cannot read " SX_STORE_TABLE ": %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

int sx_store_load(sqlite3 *db, const char *uid, bert_model **out, char *err)
{
    sqlite3_stmt *st = NULL;
    int rc;

    *out = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT config, vocab, safetensors FROM main." SX_STORE_TABLE
                           " WHERE uid = ?1",
                           -1, &st, NULL) != SQLITE_OK) {
        rc = sm_error(err, SM_ERR_IO, "cannot read " SX_STORE_TABLE ": %s", sqlite3_errmsg(db));
        goto end;
    }
    sqlite3_bind_text(st, 1, uid, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) {
        rc = sm_error(err, SM_ERR_IO, "stored model %s disappeared", uid);
        goto end;
    }
    {
        /* Text first, then the blob: each pointer is valid until the next
         * sqlite3_column_* call on the same column. */
        const char *config = (const char *)sqlite3_column_text(st, 0);
        size_t config_len = (size_t)sqlite3_column_bytes(st, 0);
        const char *vocab = (const char *)sqlite3_column_text(st, 1);
        size_t vocab_len = (size_t)sqlite3_column_bytes(st, 1);
        const void *w = sqlite3_column_blob(st, 2);
        size_t w_len = (size_t)sqlite3_column_bytes(st, 2);
        if (!config || !vocab || !w) {
            rc = sm_error(err, SM_ERR_FORMAT, "config, vocab or safetensors is empty");
            goto end;
        }
        rc = bert_model_load_buffers(config, config_len, vocab, vocab_len, w, w_len, out, err);
    }
end:
    sqlite3_finalize(st);
    return rc;
}

int sx_store_put(sqlite3 *db, const char *name, const char *config,
                 size_t config_len, const char *vocab, size_t vocab_len,
                 const char *labels, const char *metrics, const void *weights,
                 size_t weights_len, int64_t *version, char **errmsg)
{
    sqlite3_stmt *st = NULL;
    int rc, in_savepoint = 0;

    rc = sqlite3_exec(db, "SAVEPOINT sentiment_store", NULL, NULL, NULL);
    if (rc != SQLITE_OK) goto end;
    in_savepoint = 1;
    rc = sx_store_ensure(db, errmsg);
    if (rc != SQLITE_OK) goto end;
    rc = sqlite3_prepare_v2(db,
                            "INSERT INTO main." SX_STORE_TABLE
                            "(name, version, config, vocab, labels, metrics, safetensors) "
                            "SELECT ?1, coalesce(max(version), 0) + 1, ?2, ?3, ?4, ?5, ?6 "
                            "FROM main." SX_STORE_TABLE " WHERE name = ?1 "
                            "RETURNING version",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text64(st, 2, config, config_len, SQLITE_STATIC, SQLITE_UTF8);
    sqlite3_bind_text64(st, 3, vocab, vocab_len, SQLITE_STATIC, SQLITE_UTF8);
    sqlite3_bind_text(st, 4, labels, -1, SQLITE_STATIC);
    if (metrics) sqlite3_bind_text(st, 5, metrics, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 6, weights, weights_len, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) goto end;
    *version = sqlite3_column_int64(st, 0);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
end:
    if (rc != SQLITE_OK && !*errmsg)
        *errmsg = sqlite3_mprintf("cannot store model '%s': %s", name, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    if (in_savepoint) {
        if (rc != SQLITE_OK) sqlite3_exec(db, "ROLLBACK TO sentiment_store", NULL, NULL, NULL);
        sqlite3_exec(db, "RELEASE sentiment_store", NULL, NULL, NULL);
    }
    return rc;
}

void sx_store_append_names(sqlite3 *db, sqlite3_str *s, int *count)
{
    sqlite3_stmt *st = NULL;
    if (!sx_store_exists(db)) return;
    if (sqlite3_prepare_v2(db,
                           "SELECT DISTINCT name FROM main." SX_STORE_TABLE " ORDER BY name",
                           -1, &st, NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *n = (const char *)sqlite3_column_text(st, 0);
        if (!n) continue;
        sqlite3_str_appendf(s, "%s%s", (*count)++ ? ", " : "", n);
    }
    sqlite3_finalize(st);
}

char *sx_store_family(sqlite3 *db, const char *name)
{
    const char *file = sqlite3_db_filename(db, "main");
    return sqlite3_mprintf("db:%s:%s", file ? file : "", name);
}

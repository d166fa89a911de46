/* storage.c: models kept inside a database (the sentiment_model_store table).
 *
 * The schema is sql/schema.sql (the same text is below; a test keeps the
 * two equal): the store table, the training log table, and the triggers
 * that keep the log's rows with their model when a stored version is
 * deleted or renamed. The tables are created only when a model is first
 * stored, never because the extension was loaded or a model was looked up;
 * a database made by an earlier release gets the log table and the
 * triggers the next time a model is stored, copied or dropped
 * (sx_store_ensure creates whatever is missing, and adds the tokenizer
 * column, which holds a model's tokenizer.json, to a store table made
 * before there was one; rows without it are vocab.txt models). Only the
 * main database is
 * searched. Reads go through prepared statements on the caller's
 * connection; sx_store_put(), sx_store_copy() and sx_store_drop() write
 * inside a savepoint, so a failed write leaves the database as it was.
 *
 * train() stores from inside the SELECT that reads its rows; the
 * sx_store_probe_write / sx_store_train_* functions (at the end) are the
 * SQL of that: main's write lock taken one try at a time, the savepoint
 * the model and its training log are written in, the sentiment_train_log
 * rows. Whether and how long to wait between tries is train.c's.
 *
 * A stored model's identity in the process-wide cache is the SHA-256 of
 * the bytes it is built from (sx_store_row_open), never anything the
 * database says about itself (its uid column is informational only).
 *
 * The transaction rule. After any function here returns, the connection's
 * transaction state is what it was before the call, and a version number
 * is reported only after the commit that stored it returned SQLITE_OK:
 *   - called in autocommit mode, a write is a transaction of its own (an
 *     outermost savepoint); when anything in it fails, the commit included
 *     (SQLITE_BUSY from a reader in a rollback-journal database, SQLITE_FULL,
 *     SQLITE_IOERR), the whole transaction is rolled back (ROLLBACK, which
 *     never needs a lock: a RELEASE after ROLLBACK TO would be a second
 *     commit that can fail the same way and leave the transaction open);
 *   - called inside the caller's transaction, a write is a nested savepoint,
 *     undone with ROLLBACK TO on failure; the caller's transaction stays
 *     open, and its COMMIT is the caller's. When SQLite itself rolled that
 *     transaction back after an I/O error, out of memory or a full disk,
 *     the error says so (nothing of it is left to keep).
 * sx_store_txn_begin / sx_store_txn_end are that rule, for every write here
 * and for sentiment_use (store_functions.c).
 *
 * The objects are trusted only as SQLite trusts them: a view, index or
 * trigger in the way of one of the store's names is an error naming it
 * (never created over, never looped on), and a stored version that is not
 * an INTEGER, or the largest INTEGER, is an error rather than a next
 * version that would be a REAL.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/errors.h"
#include "ext/conn.h"
#include "ext/errors.h"
#include "ext/storage.h"
#include "format/sha256.h"

static const char k_schema_store[] =
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
    "  tokenizer BLOB,\n"
    "  PRIMARY KEY (name, version)\n"
    ")";

/* What a database made by an earlier release lacks in the store table. */
static const char k_add_tokenizer[] = "ALTER TABLE main." SX_STORE_TABLE
                                      " ADD COLUMN tokenizer BLOB";

static const char k_schema_log[] = "CREATE TABLE IF NOT EXISTS sentiment_train_log(\n"
                                   "  model TEXT NOT NULL,\n"
                                   "  version INTEGER NOT NULL,\n"
                                   "  kind TEXT NOT NULL,\n"
                                   "  epoch INTEGER NOT NULL,\n"
                                   "  step INTEGER NOT NULL,\n"
                                   "  loss REAL,\n"
                                   "  lr REAL,\n"
                                   "  grad_norm REAL,\n"
                                   "  valid_accuracy REAL,\n"
                                   "  examples_per_sec REAL,\n"
                                   "  seconds REAL\n"
                                   ")";

static const char k_schema_delete[] =
    "CREATE TRIGGER IF NOT EXISTS sentiment_model_store_delete\n"
    "AFTER DELETE ON sentiment_model_store\n"
    "BEGIN\n"
    "  DELETE FROM sentiment_train_log WHERE model = old.name AND version = old.version;\n"
    "END";

static const char k_schema_rename[] =
    "CREATE TRIGGER IF NOT EXISTS sentiment_model_store_rename\n"
    "AFTER UPDATE OF name, version ON sentiment_model_store\n"
    "BEGIN\n"
    "  UPDATE sentiment_train_log SET model = new.name, version = new.version\n"
    "  WHERE model = old.name AND version = old.version;\n"
    "END";

static const struct {
    const char *type, *name, *sql;
} k_objects[] = {
    {"table", SX_STORE_TABLE, k_schema_store},
    {"table", "sentiment_train_log", k_schema_log},
    {"trigger", "sentiment_model_store_delete", k_schema_delete},
    {"trigger", "sentiment_model_store_rename", k_schema_rename},
};

/* The type ('table', 'view', 'index', 'trigger') of the object of main
 * named name, sqlite3_mprintf'd, or NULL when there is none. */
static char *object_type(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st = NULL;
    char *type = NULL;
    if (sqlite3_prepare_v2(db, "SELECT type FROM main.sqlite_schema WHERE name = ?1 COLLATE NOCASE",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            type = sqlite3_mprintf("%s", (const char *)sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return type;
}

/* 1 when main has the object, 0 when it has not, -1 when that cannot be
 * read (then the caller reports sqlite3_errmsg). */
static int object_exists(sqlite3 *db, const char *type, const char *name)
{
    sqlite3_stmt *st = NULL;
    int found = -1;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM main.sqlite_schema WHERE type = ?1 AND name = ?2", -1,
                           &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, type, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_finalize(st);
    return found;
}

int sx_store_exists(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int found = 0;
    if (sqlite3_prepare_v2(
            db,
            "SELECT 1 FROM main.sqlite_schema WHERE type = 'table' AND name = '" SX_STORE_TABLE "'",
            -1, &st, NULL) == SQLITE_OK)
        found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

/* ---- the transaction rule (see the top of this file) ------------------- */

int sx_store_txn_begin(sqlite3 *db, sx_store_txn *t, const char *savepoint, char **errmsg)
{
    char sql[80];
    t->savepoint = savepoint;
    t->outer = sqlite3_get_autocommit(db);
    t->open = 0;
    snprintf(sql, sizeof sql, "SAVEPOINT %s", savepoint);
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) return sx_fail(errmsg, rc, NULL, "%s", sqlite3_errmsg(db));
    t->open = 1;
    return SQLITE_OK;
}

/* SQLITE_OK while t is still open: an I/O error, a full disk or out of
 * memory can make SQLite roll the whole transaction back, and a write run
 * after that would be a transaction of its own, outside t. */
int sx_store_txn_alive(sqlite3 *db, char **errmsg)
{
    if (!sqlite3_get_autocommit(db)) return SQLITE_OK;
    int rc = sqlite3_errcode(db) == SQLITE_OK ? SQLITE_ABORT : sqlite3_errcode(db);
    return sx_fail(errmsg, rc, NULL, "the transaction was rolled back by SQLite: %s",
                   sqlite3_errmsg(db));
}

/* Undoes t: the whole transaction when it is t's own, else the savepoint.
 * 1 when the caller's transaction had already been rolled back by SQLite. */
static int txn_undo(sqlite3 *db, sx_store_txn *t)
{
    char sql[96];
    if (t->outer) {
        if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return 0;
    }
    if (sqlite3_get_autocommit(db)) return 1;
    snprintf(sql, sizeof sql, "ROLLBACK TO %s; RELEASE %s", t->savepoint, t->savepoint);
    sqlite3_exec(db, sql, NULL, NULL, NULL);
    return 0;
}

int sx_store_txn_end(sqlite3 *db, sx_store_txn *t, int rc, const char *what, char **errmsg)
{
    char sql[80];
    if (!t->open) return rc;
    t->open = 0;
    if (rc == SQLITE_OK) {
        snprintf(sql, sizeof sql, "RELEASE %s", t->savepoint);
        int crc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        if (crc == SQLITE_OK && (!t->outer || sqlite3_get_autocommit(db))) return SQLITE_OK;
        if (crc == SQLITE_OK) crc = SQLITE_ERROR; /* still in a transaction: not committed */
        rc = sx_fail(errmsg, crc, NULL, "cannot commit %s: %s", what,
                     crc == SQLITE_ERROR && sqlite3_errcode(db) == SQLITE_OK
                         ? "the transaction did not end"
                         : sqlite3_errmsg(db));
    }
    if (txn_undo(db, t) && errmsg && *errmsg) {
        char *m = sqlite3_mprintf("%s (SQLite rolled back the enclosing transaction: none of "
                                  "its changes were kept)",
                                  *errmsg);
        if (m) {
            sqlite3_free(*errmsg);
            *errmsg = m;
        }
    }
    return rc;
}

int sx_store_list(sqlite3 *db, sqlite3_stmt **out)
{
    return sqlite3_prepare_v2(
        db,
        "SELECT name, version, uid, config, created, metrics FROM main." SX_STORE_TABLE
        " ORDER BY name, version",
        -1, out, NULL);
}

/* 1 when the store table has the tokenizer column, 0 when it has not, -1
 * when that cannot be read (out of memory, a locked schema). */
static int has_tokenizer_column(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int found = -1;
    if (sqlite3_prepare_v2(db,
                           "SELECT 1 FROM pragma_table_info('" SX_STORE_TABLE "', 'main') "
                           "WHERE name = 'tokenizer'",
                           -1, &st, NULL) == SQLITE_OK) {
        int rc = sqlite3_step(st);
        found = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_finalize(st);
    return found;
}

int sx_store_current(sqlite3 *db)
{
    for (size_t i = 0; i < sizeof k_objects / sizeof k_objects[0]; i++)
        if (object_exists(db, k_objects[i].type, k_objects[i].name) != 1) return 0;
    return has_tokenizer_column(db) == 1;
}

static int schema_read_error(sqlite3 *db, char **errmsg)
{
    int rc = sqlite3_errcode(db) == SQLITE_OK ? SQLITE_ERROR : sqlite3_errcode(db);
    return sx_fail(errmsg, rc, NULL, "cannot read the schema: %s", sqlite3_errmsg(db));
}

int sx_store_ensure(sqlite3 *db, char **errmsg)
{
    for (size_t i = 0; i < sizeof k_objects / sizeof k_objects[0]; i++) {
        int found = object_exists(db, k_objects[i].type, k_objects[i].name);
        if (found < 0) return schema_read_error(db, errmsg);
        if (found) continue;
        char *other = object_type(db, k_objects[i].name);
        if (other) {
            int rc = sx_fail(errmsg, SQLITE_ERROR, NULL,
                             "the database has %s %s named %s where the model store keeps a %s; "
                             "drop or rename it to store models here",
                             strchr("aeiou", other[0]) ? "an" : "a", other, k_objects[i].name,
                             k_objects[i].type);
            sqlite3_free(other);
            return rc;
        }
        /* unqualified, as in sql/schema.sql: CREATE puts them in main */
        int rc = sqlite3_exec(db, k_objects[i].sql, NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            return sx_fail(errmsg, rc, NULL, "cannot create %s %s: %s", k_objects[i].type,
                           k_objects[i].name, sqlite3_errmsg(db));
    }
    int has = has_tokenizer_column(db);
    if (has < 0) {
        int rc = sqlite3_errcode(db) == SQLITE_OK ? SQLITE_ERROR : sqlite3_errcode(db);
        return sx_fail(errmsg, rc, NULL, "cannot read the columns of " SX_STORE_TABLE ": %s",
                       sqlite3_errmsg(db));
    }
    if (!has) {
        int rc = sqlite3_exec(db, k_add_tokenizer, NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            return sx_fail(errmsg, rc, NULL,
                           "cannot add the tokenizer column to " SX_STORE_TABLE ": %s",
                           sqlite3_errmsg(db));
    }
    return SQLITE_OK;
}

/* The change stamp of main, read while a statement on it is open (so the
 * pager has checked the file for other connections' commits). */
static void stamp(sqlite3 *db, sx_store_ref *ref)
{
    unsigned int dv = 0;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_DATA_VERSION, &dv) != SQLITE_OK) dv = 0;
    ref->data_version = dv;
    ref->changes = sqlite3_total_changes64(db);
    ref->writing = sqlite3_txn_state(db, "main") == SQLITE_TXN_WRITE;
}

int sx_store_find_row(sqlite3 *db, const char *name, int64_t version, sx_store_ref *ref,
                      char **errmsg)
{
    sqlite3_stmt *st = NULL;
    int rc;

    memset(ref, 0, sizeof *ref);
    if (!sx_store_exists(db)) return SQLITE_NOTFOUND;
    rc = sqlite3_prepare_v2(
        db,
        version > 0 ? "SELECT rowid, version, length(safetensors) FROM main." SX_STORE_TABLE
                      " WHERE name = ?1 AND version = ?2"
                    : "SELECT rowid, version, length(safetensors) FROM main." SX_STORE_TABLE
                      " WHERE name = ?1 ORDER BY version DESC LIMIT 1",
        -1, &st, NULL);
    if (rc != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (version > 0) sqlite3_bind_int64(st, 2, version);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        ref->rowid = sqlite3_column_int64(st, 0);
        ref->version = sqlite3_column_int64(st, 1);
        ref->bytes = sqlite3_column_int64(st, 2);
        stamp(db, ref);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_NOTFOUND;
    }
end:
    if (rc != SQLITE_OK && rc != SQLITE_NOTFOUND)
        rc = sx_fail(errmsg, rc, NULL, "cannot read " SX_STORE_TABLE ": %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

static void hash_field(sha256_ctx *h, const void *p, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    sha256_update(h, len, sizeof len);
    sha256_update(h, p, n);
}

int sx_store_row_open(sqlite3 *db, int64_t rowid, sx_store_row *row, char *err)
{
    sha256_ctx h;
    uint8_t d[SHA256_DIGEST_LEN];
    char hex[SHA256_HEX_LEN + 1];
    int rc;

    memset(row, 0, sizeof *row);
    /* a table from an earlier release has no tokenizer column: NULL */
    int has = has_tokenizer_column(db);
    if (has < 0)
        return sm_error(err, sqlite3_errcode(db) == SQLITE_NOMEM ? SM_ERR_NOMEM : SM_ERR_IO,
                        "cannot read " SX_STORE_TABLE ": %s", sqlite3_errmsg(db));
    if (sqlite3_prepare_v2(db,
                           has ? "SELECT config, vocab, labels, safetensors, version, "
                                 "length(safetensors), tokenizer FROM main." SX_STORE_TABLE
                                 " WHERE rowid = ?1"
                               : "SELECT config, vocab, labels, safetensors, version, "
                                 "length(safetensors), NULL FROM main." SX_STORE_TABLE
                                 " WHERE rowid = ?1",
                           -1, &row->st, NULL) != SQLITE_OK)
        return sm_error(err, SM_ERR_IO, "cannot read " SX_STORE_TABLE ": %s", sqlite3_errmsg(db));
    sqlite3_bind_int64(row->st, 1, rowid);
    rc = sqlite3_step(row->st);
    if (rc != SQLITE_ROW) {
        rc = rc == SQLITE_DONE
                 ? sm_error(err, SM_ERR_IO, "the stored row disappeared while it was read")
                 : sm_error(err, SM_ERR_IO, "cannot read " SX_STORE_TABLE ": %s",
                            sqlite3_errmsg(db));
        sx_store_row_close(row);
        return rc;
    }
    /* Text first, then the blob: each pointer is valid until the next
     * sqlite3_column_* call on the same column. */
    row->config = (const char *)sqlite3_column_text(row->st, 0);
    row->config_len = (size_t)sqlite3_column_bytes(row->st, 0);
    row->vocab = (const char *)sqlite3_column_text(row->st, 1);
    row->vocab_len = (size_t)sqlite3_column_bytes(row->st, 1);
    row->labels = (const char *)sqlite3_column_text(row->st, 2);
    row->labels_len = (size_t)sqlite3_column_bytes(row->st, 2);
    row->weights = sqlite3_column_blob(row->st, 3);
    row->weights_len = (size_t)sqlite3_column_bytes(row->st, 3);
    if (sqlite3_column_type(row->st, 6) != SQLITE_NULL) {
        row->tokenizer = sqlite3_column_blob(row->st, 6);
        row->tokenizer_len = (size_t)sqlite3_column_bytes(row->st, 6);
        if (!row->tokenizer) row->tokenizer = ""; /* an empty BLOB: refused below */
    }
    row->ref.rowid = rowid;
    row->ref.version = sqlite3_column_int64(row->st, 4);
    row->ref.bytes = sqlite3_column_int64(row->st, 5);
    stamp(db, &row->ref);
    if (sqlite3_errcode(db) == SQLITE_NOMEM) {
        sx_store_row_close(row);
        return sm_error(err, SM_ERR_NOMEM, "out of memory reading the stored model");
    }
    /* everything the model is built from, each field with its length so
     * no two rows hash alike by moving bytes between fields */
    sha256_init(&h);
    sha256_update(&h, "sentiment_model_store 1", 24);
    hash_field(&h, row->config ? row->config : "", row->config ? row->config_len : 0);
    hash_field(&h, row->vocab ? row->vocab : "", row->vocab ? row->vocab_len : 0);
    hash_field(&h, row->labels ? row->labels : "", row->labels ? row->labels_len : 0);
    hash_field(&h, row->weights ? row->weights : "", row->weights ? row->weights_len : 0);
    /* NULL and an empty BLOB hash differently (only one loads) */
    hash_field(&h, row->tokenizer ? "T" : "", row->tokenizer ? 1 : 0);
    hash_field(&h, row->tokenizer ? row->tokenizer : "", row->tokenizer_len);
    sha256_final(&h, d);
    sha256_hex(d, hex);
    snprintf(row->key, sizeof row->key, "sha256:%s", hex);
    return SM_OK;
}

void sx_store_row_close(sx_store_row *row)
{
    sqlite3_finalize(row->st);
    memset(row, 0, sizeof *row);
}

int sx_store_row_load(const sx_store_row *row, bert_model **out, char *err)
{
    *out = NULL;
    if (row->tokenizer && !row->tokenizer_len)
        return sm_error(err, SM_ERR_FORMAT,
                        "the tokenizer column is an empty BLOB; expected "
                        "tokenizer.json or NULL");
    if (!row->config || !row->weights || !row->config_len || !row->weights_len ||
        (!row->tokenizer && (!row->vocab || !row->vocab_len)))
        return sm_error(err, SM_ERR_FORMAT, "config, vocab or safetensors is empty");
    bert_files f = {row->config,    row->config_len,    row->vocab,   row->vocab_len,
                    row->tokenizer, row->tokenizer_len, row->weights, row->weights_len};
    return bert_model_load_files(&f, out, err);
}

/* The version a new row of name gets: one more than the largest stored.
 * Refuses a store whose versions of name are not all INTEGERs or whose
 * largest is the largest INTEGER (one more would be a REAL). */
static int next_version(sqlite3 *db, const char *name, int64_t *next, char **errmsg)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT count(*) FILTER (WHERE typeof(version) != 'integer'), "
                                "coalesce(max(version), 0) FROM main." SX_STORE_TABLE
                                " WHERE name = ?1",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
    }
    if (rc != SQLITE_ROW) {
        rc = sx_fail(errmsg, rc == SQLITE_DONE ? SQLITE_ERROR : rc, NULL,
                     "cannot read the versions "
                     "of model '%s': %s",
                     name, sqlite3_errmsg(db));
    } else if (sqlite3_column_int64(st, 0) > 0) {
        rc = sx_fail(errmsg, SQLITE_MISMATCH, NULL,
                     "%lld stored versions of model '%s' are not "
                     "INTEGERs (" SX_STORE_TABLE ".version was written by something else); "
                     "expected whole numbers",
                     (long long)sqlite3_column_int64(st, 0), name);
    } else if (sqlite3_column_int64(st, 1) == INT64_MAX || sqlite3_column_int64(st, 1) < 0) {
        rc = sx_fail(errmsg, SQLITE_RANGE, NULL,
                     "model '%s' has version %lld, after which there "
                     "is no version number; store it under another name",
                     name, (long long)sqlite3_column_int64(st, 1));
    } else {
        *next = sqlite3_column_int64(st, 1) + 1;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Steps an INSERT ... RETURNING version to its end: SQLITE_OK with the
 * version, or an error (a trigger that ignored the row inserts none). */
static int step_insert(sqlite3_stmt *st, const char *name, int64_t *version, char **errmsg)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return sx_fail(errmsg, SQLITE_CONSTRAINT, NULL,
                       "cannot store model '%s': no row was "
                       "inserted (a trigger on " SX_STORE_TABLE " ignored it)",
                       name);
    if (rc != SQLITE_ROW) return rc;
    int64_t v = sqlite3_column_int64(st, 0);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) return rc == SQLITE_ROW ? SQLITE_ERROR : rc;
    *version = v;
    return SQLITE_OK;
}

/* What sx_store_copy and sx_store_put share around their INSERT, inside
 * the savepoint t has begun: the store's tables made, the next version of
 * name in *next, and the INSERT (sql) prepared into *st. */
static int insert_prepare(sqlite3 *db, const char *name, const char *sql, int64_t *next,
                          sqlite3_stmt **st, char **errmsg)
{
    int rc;
    if ((rc = sx_store_ensure(db, errmsg)) != SQLITE_OK) return rc;
    if ((rc = next_version(db, name, next, errmsg)) != SQLITE_OK) return rc;
    if ((rc = sx_store_txn_alive(db, errmsg)) != SQLITE_OK) return rc;
    return sqlite3_prepare_v2(db, sql, -1, st, NULL);
}

/* Ends an INSERT of version v of name that ended with rc: the message a
 * failure lacks, the statement finalized, the savepoint released or undone;
 * *version = v only once committed. */
static int insert_end(sqlite3 *db, sx_store_txn *t, sqlite3_stmt *st, int rc, const char *name,
                      int64_t v, int64_t *version, char **errmsg)
{
    char what[SX_NAME_MAX + 16];
    snprintf(what, sizeof what, "model '%s'", name);
    if (rc != SQLITE_OK && !*errmsg)
        rc = sx_fail(errmsg, rc, NULL, "cannot store model '%s': %s", name, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    rc = sx_store_txn_end(db, t, rc, what, errmsg);
    if (rc == SQLITE_OK) *version = v;
    return rc;
}

int sx_store_copy(sqlite3 *db, const char *name, int64_t from, int64_t *version, char **errmsg)
{
    sqlite3_stmt *st = NULL;
    sx_store_txn t;
    int64_t next = 0, v = 0;

    *version = 0;
    int rc = sx_store_txn_begin(db, &t, "sentiment_copy", errmsg);
    if (rc != SQLITE_OK) return rc;
    rc = insert_prepare(db, name,
                        "INSERT INTO main." SX_STORE_TABLE
                        "(name, version, config, vocab, labels, metrics, safetensors, "
                        "tokenizer) "
                        "SELECT name, ?3, config, vocab, labels, "
                        "CASE WHEN json_valid(metrics) AND json_type(metrics) = 'object' "
                        "THEN json_set(metrics, '$.restored_from', ?2) "
                        "ELSE json_object('restored_from', ?2) END, safetensors, tokenizer "
                        "FROM main." SX_STORE_TABLE " WHERE name = ?1 AND version = ?2 "
                        "RETURNING version",
                        &next, &st, errmsg);
    if (rc != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, from);
    sqlite3_bind_int64(st, 3, next);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        rc = sx_fail(errmsg, SQLITE_NOTFOUND, NULL, "no version %lld of model '%s'",
                     (long long)from, name);
    } else if (rc == SQLITE_ROW) {
        v = sqlite3_column_int64(st, 0);
        rc = sqlite3_step(st);
        if (rc == SQLITE_DONE) rc = SQLITE_OK;
    }
end:
    return insert_end(db, &t, st, rc, name, v, version, errmsg);
}

int sx_store_drop(sqlite3 *db, const char *name, int64_t version, int64_t *removed, char **errmsg)
{
    sqlite3_stmt *st = NULL;
    sx_store_txn t;
    int64_t n = 0;
    char what[SX_NAME_MAX + 32];

    *removed = 0;
    if (!sx_store_exists(db)) return SQLITE_NOTFOUND;
    snprintf(what, sizeof what, "dropping model '%s'", name);
    int rc = sx_store_txn_begin(db, &t, "sentiment_drop", errmsg);
    if (rc != SQLITE_OK) return rc;
    /* the log table and the triggers, for a database of an earlier release */
    rc = sx_store_ensure(db, errmsg);
    if (rc != SQLITE_OK) goto end;
    if ((rc = sx_store_txn_alive(db, errmsg)) != SQLITE_OK) goto end;
    rc = sqlite3_prepare_v2(db,
                            "DELETE FROM main." SX_STORE_TABLE
                            " WHERE name = ?1 AND (?2 = 0 OR version = ?2)",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, version);
    rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) goto end;
    n = sqlite3_changes64(db);
    sqlite3_finalize(st);
    st = NULL;
    if (n == 0) {
        rc = SQLITE_NOTFOUND;
        goto end;
    }
    /* the trigger removed the log rows; this covers a log whose rows were
     * written under a name the trigger did not see (renamed by hand) */
    rc = sqlite3_prepare_v2(
        db,
        "DELETE FROM main.sentiment_train_log WHERE model = ?1 AND "
        "(?2 = 0 OR version = ?2) AND NOT EXISTS (SELECT 1 FROM main." SX_STORE_TABLE
        " s WHERE s.name = ?1 AND s.version = "
        "sentiment_train_log.version)",
        -1, &st, NULL);
    if (rc != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, version);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
end:
    if (rc != SQLITE_OK && rc != SQLITE_NOTFOUND && !*errmsg)
        rc = sx_fail(errmsg, rc, NULL, "cannot drop model '%s': %s", name, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    rc = sx_store_txn_end(db, &t, rc, what, errmsg);
    if (rc == SQLITE_OK) *removed = n;
    return rc;
}

int sx_store_put(sqlite3 *db, const char *name, const char *config, size_t config_len,
                 const char *vocab, size_t vocab_len, const void *tokenizer_json,
                 size_t tokenizer_json_len, const char *labels, const char *metrics,
                 const void *weights, size_t weights_len, int64_t *version, char **errmsg)
{
    sqlite3_stmt *st = NULL;
    sx_store_txn t;
    int64_t next = 0, v = 0;

    *version = 0;
    int rc = sx_store_txn_begin(db, &t, "sentiment_store", errmsg);
    if (rc != SQLITE_OK) return rc;
    rc = insert_prepare(db, name,
                        "INSERT INTO main." SX_STORE_TABLE
                        "(name, version, config, vocab, labels, metrics, safetensors, "
                        "tokenizer) VALUES (?1, ?8, ?2, ?3, ?4, ?5, ?6, ?7) "
                        "RETURNING version",
                        &next, &st, errmsg);
    if (rc != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text64(st, 2, config, config_len, SQLITE_STATIC, SQLITE_UTF8);
    if (tokenizer_json) {
        sqlite3_bind_text(st, 3, "", 0, SQLITE_STATIC);
        sqlite3_bind_blob64(st, 7, tokenizer_json, tokenizer_json_len, SQLITE_STATIC);
    } else {
        sqlite3_bind_text64(st, 3, vocab, vocab_len, SQLITE_STATIC, SQLITE_UTF8);
    }
    sqlite3_bind_text(st, 4, labels, -1, SQLITE_STATIC);
    if (metrics) sqlite3_bind_text(st, 5, metrics, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 6, weights, weights_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 8, next);
    rc = step_insert(st, name, &v, errmsg);
end:
    return insert_end(db, &t, st, rc, name, v, version, errmsg);
}

void sx_store_append_names(sqlite3 *db, sqlite3_str *s, int *count)
{
    sqlite3_stmt *st = NULL;
    if (!sx_store_exists(db)) return;
    if (sqlite3_prepare_v2(db, "SELECT DISTINCT name FROM main." SX_STORE_TABLE " ORDER BY name",
                           -1, &st, NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *n = (const char *)sqlite3_column_text(st, 0);
        if (!n) continue;
        sqlite3_str_appendf(s, "%s%s", (*count)++ ? ", " : "", n);
    }
    sqlite3_finalize(st);
}

char *sx_store_family(sx_conn *c, const char *name)
{
    static uint64_t serial; /* guarded by the lock below */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    const char *file = sqlite3_db_filename(c->db, "main");
    if (file && *file) return sqlite3_mprintf("db:%s:%s", file, name);
    /* an in-memory or temporary database is its connection's own: name it
     * by a number no other connection of the process ever gets */
    pthread_mutex_lock(&lock);
    if (!c->serial) c->serial = ++serial;
    pthread_mutex_unlock(&lock);
    return sqlite3_mprintf("db:#%llu:%s", (unsigned long long)c->serial, name);
}

/* ---- writing from inside a running statement (train()) ------------------ */

/* Takes the write lock inside the caller's savepoint with a write that
 * changes nothing: the database header's user_version set to its value
 * (undoing it is no schema change, which would abort the running
 * statement). Returns the SQLite code; *ext the extended one, *errmsg
 * SQLite's message. */
static int take_write_lock(sqlite3 *db, int *ext, char **errmsg)
{
    sqlite3_stmt *st = NULL;
    char sql[64];
    int rc, v = 0;
    *ext = SQLITE_OK;
    rc = sqlite3_prepare_v2(db, "PRAGMA main.user_version", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            v = sqlite3_column_int(st, 0);
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK) {
        snprintf(sql, sizeof sql, "PRAGMA main.user_version = %d", v);
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        *ext = sqlite3_extended_errcode(db);
        rc = sx_fail(errmsg, rc, NULL, "%s", sqlite3_errmsg(db));
    }
    return rc;
}

int sx_store_probe_write(sqlite3 *db, int *no_savepoint, int *ext, char **errmsg)
{
    /* Inside the user's transaction the probe's no-op write is kept (it
     * changes no byte the user sees): rolling a savepoint back in a
     * transaction that changed the schema aborts every running statement,
     * this one included. Outside one, the probe is a transaction of its
     * own, and rolling it back touches only write cursors. */
    sx_store_txn t;
    int rc = sx_store_txn_begin(db, &t, "sentiment_train_probe", errmsg);
    *no_savepoint = rc != SQLITE_OK;
    if (rc != SQLITE_OK) return rc;
    rc = take_write_lock(db, ext, errmsg);
    if (t.outer) {
        /* nothing to keep: the whole probe transaction goes */
        sx_store_txn_end(db, &t, SQLITE_ABORT, "the lock probe", NULL);
        return rc;
    }
    return sx_store_txn_end(db, &t, rc, "the lock probe", errmsg);
}

int sx_store_train_begin(sqlite3 *db, sx_store_txn *t, int *ext, char **errmsg)
{
    int rc;
    /* twice at most: the second time the tables are there */
    for (int pass = 0;; pass++) {
        rc = sx_store_txn_begin(db, t, "sentiment_train", errmsg);
        if (rc != SQLITE_OK) return rc;
        rc = take_write_lock(db, ext, errmsg);
        if (rc == SQLITE_OK) rc = sx_store_txn_alive(db, errmsg);
        if (rc != SQLITE_OK || sx_store_current(db)) return rc;
        if (pass > 0)
            return sx_fail(errmsg, SQLITE_ERROR, NULL,
                           "the model store's tables are still "
                           "missing after creating them");
        /* The tables (or the column a table of an earlier release lacks)
         * are created and committed on their own: undoing a schema change
         * would abort the statement train() runs in. Then again, with the
         * tables there. */
        rc = sx_store_ensure(db, errmsg);
        rc = sx_store_txn_end(db, t, rc, "the model store's tables", errmsg);
        if (rc != SQLITE_OK) return rc;
    }
}

int sx_store_train_log(sqlite3 *db, const char *name, int64_t version, const sx_train_log_row *rows,
                       int n, char **errmsg)
{
    sqlite3_stmt *st = NULL;
    char *ignored = NULL;
    /* the log table with the store's other tables and triggers (one
     * schema, above); its own message gives way to the one below */
    int rc = sx_store_txn_alive(db, errmsg);
    if (rc != SQLITE_OK) return rc;
    rc = sx_store_ensure(db, &ignored);
    sqlite3_free(ignored);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db,
                                "INSERT INTO main.sentiment_train_log VALUES "
                                "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                                -1, &st, NULL);
    for (int i = 0; rc == SQLITE_OK && i < n; i++) {
        const sx_train_log_row *r = &rows[i];
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, version);
        sqlite3_bind_text(st, 3, r->kind ? "epoch" : "step", -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, r->epoch);
        sqlite3_bind_int64(st, 5, r->step);
        const double v[6] = {r->loss,   r->lr, r->grad_norm, r->valid_accuracy, r->examples_per_sec,
                             r->seconds};
        for (int k = 0; k < 6; k++) {
            if (isfinite(v[k])) sqlite3_bind_double(st, 6 + k, v[k]);
            else sqlite3_bind_null(st, 6 + k);
        }
        rc = sqlite3_step(st);
        if (rc == SQLITE_DONE) rc = SQLITE_OK;
        sqlite3_reset(st);
    }
    if (rc != SQLITE_OK)
        rc = sx_fail(errmsg, rc, NULL, "cannot write sentiment_train_log: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

int sx_store_train_commit(sqlite3 *db, sx_store_txn *t, char **errmsg)
{
    /* the commit itself failed (SQLite's busy handler already ran): rolled
     * back, the connection as it was before train() stored */
    return sx_store_txn_end(db, t, SQLITE_OK, "the model", errmsg);
}

void sx_store_train_rollback(sqlite3 *db, sx_store_txn *t)
{
    sx_store_txn_end(db, t, SQLITE_ABORT, "the model", NULL);
}

/* storage.h: the sentiment_model_store table inside a database and the
 * sentiment_train_log table (storage.c: its transaction rule, reads,
 * writes, and the writes train() makes from inside its own statement).
 * Room: ext/. Called by models.c, store_functions.c, models_vtab.c,
 * functions.c, train.c.
 */
#ifndef EXT_STORAGE_H
#define EXT_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "encoder/bert.h"
#include "ext/conn.h"

#define SX_STORE_TABLE "sentiment_model_store"

/* 1 when the main database has the store table (never creates it). */
int sx_store_exists(sqlite3 *db);
/* Every stored row as name, version, uid, config, created, metrics, ordered
 * by name and version: a statement for the caller to step and finalize. */
int sx_store_list(sqlite3 *db, sqlite3_stmt **out);
/* Creates the table if missing. */
int sx_store_ensure(sqlite3 *db, char **errmsg);

/* The transaction rule of storage.c (its header): a write of the store is
 * a transaction of its own in autocommit mode, else a savepoint nested in
 * the caller's; ending it with rc != SQLITE_OK, or a commit that fails,
 * rolls it back so the connection is left as it was. */
typedef struct sx_store_txn {
    const char *savepoint; /* a constant name */
    int outer;             /* the connection was in autocommit mode */
    int open;
} sx_store_txn;
int sx_store_txn_begin(sqlite3 *db, sx_store_txn *t, const char *savepoint, char **errmsg);
/* Commits (rc SQLITE_OK) or undoes t; returns rc, or the commit's error
 * ("cannot commit <what>: ...") with *errmsg. */
int sx_store_txn_end(sqlite3 *db, sx_store_txn *t, int rc, const char *what, char **errmsg);
/* SQLITE_OK while a transaction is open; after SQLite rolled it back (an
 * I/O error, a full disk, out of memory) an error saying so, so that no
 * write meant for it runs as a transaction of its own. */
int sx_store_txn_alive(sqlite3 *db, char **errmsg);

/* Where a stored version is, and the database's change stamp read inside
 * the same read transaction (see models.c for how the stamp is used). */
typedef struct sx_store_ref {
    int64_t rowid, version;
    int64_t bytes;         /* length of config + vocab + labels + safetensors */
    uint32_t data_version; /* SQLITE_FCNTL_DATA_VERSION of main */
    int64_t changes;       /* sqlite3_total_changes64 */
    int writing;           /* main had a write transaction open */
} sx_store_ref;
/* Finds name at version (0 = latest) without reading its bytes. Returns
 * SQLITE_OK, SQLITE_NOTFOUND, or an error with *errmsg. */
int sx_store_find_row(sqlite3 *db, const char *name, int64_t version, sx_store_ref *ref,
                      char **errmsg);
/* One stored row, read: its bytes (valid until sx_store_row_close), their
 * content hash as a registry key ("sha256:<hex>") and the change stamp. */
typedef struct sx_store_row {
    sqlite3_stmt *st;
    const char *config, *vocab, *labels;
    size_t config_len, vocab_len, labels_len;
    const char *tokenizer; /* tokenizer.json, or NULL (vocab.txt model) */
    size_t tokenizer_len;
    const void *weights;
    size_t weights_len;
    char key[SX_STORE_KEY_MAX];
    sx_store_ref ref;
} sx_store_row;
/* Reads row rowid of the store and hashes it; SM_OK or an error in err. */
int sx_store_row_open(sqlite3 *db, int64_t rowid, sx_store_row *row, char *err);
void sx_store_row_close(sx_store_row *row);
/* Parses a read row into a model (config + tokenizer.json or vocab +
 * safetensors, the checks of every load). */
int sx_store_row_load(const sx_store_row *row, bert_model **out, char *err);
/* Copies version `from` of name as its new latest version (metrics get
 * "restored_from"); the new number in *version. */
int sx_store_copy(sqlite3 *db, const char *name, int64_t from, int64_t *version, char **errmsg);
/* Removes version (0: every version) of name and its sentiment_train_log
 * rows, in one savepoint; *removed gets the number of versions removed. */
int sx_store_drop(sqlite3 *db, const char *name, int64_t version, int64_t *removed, char **errmsg);
/* Stores a new version of name; returns its number in *version. labels and
 * metrics are JSON text (metrics may be NULL). The tokenizer is
 * tokenizer_json (a BLOB in the tokenizer column, vocab then '') when it is
 * not NULL, else vocab (tokenizer NULL). */
int sx_store_put(sqlite3 *db, const char *name, const char *config, size_t config_len,
                 const char *vocab, size_t vocab_len, const void *tokenizer_json,
                 size_t tokenizer_json_len, const char *labels, const char *metrics,
                 const void *weights, size_t weights_len, int64_t *version, char **errmsg);
/* 1 when the store table, the log table, the triggers and the tokenizer
 * column all exist (sx_store_ensure has nothing to do). */
int sx_store_current(sqlite3 *db);

/* Writing from inside a running statement (train(), which stores from the
 * SELECT that reads its rows; see train.c for why it waits itself). Each
 * is one try and returns the SQLite code; on failure *errmsg
 * (sqlite3_mprintf'd) is SQLite's message or says what failed, and *ext,
 * where there is one, the extended code of a failed lock. */

/* One row of sentiment_train_log: an optimizer step or an epoch's end. */
typedef struct sx_train_log_row {
    int kind; /* 0 'step', 1 'epoch' */
    int epoch;
    long step;
    /* NaN or infinite: stored as NULL */
    double loss, lr, grad_norm, valid_accuracy, examples_per_sec, seconds;
} sx_train_log_row;

/* Can main be written now? Opens savepoint sentiment_train_probe, takes
 * the write lock with a write that changes nothing (user_version set to
 * itself) and gives it back; creates nothing. The no-op write is kept
 * inside a transaction of the caller's (rolling back there could abort the
 * running statement), rolled back otherwise. *no_savepoint is 1 when the
 * savepoint could not be opened (SQLite refuses one while a statement
 * writes: INSERT ... SELECT train(...)). */
int sx_store_probe_write(sqlite3 *db, int *no_savepoint, int *ext, char **errmsg);
/* Opens savepoint sentiment_train (t) and takes the write lock inside it.
 * When the store's tables are missing or out of date (sx_store_current),
 * creates them and commits that first (undoing a schema change would abort
 * the running statement), then opens the savepoint again; a view or other
 * object in the way of a table is an error, never a loop. t->open is 1
 * when the savepoint is open, also after a failure: then undo it with
 * sx_store_train_rollback. */
int sx_store_train_begin(sqlite3 *db, sx_store_txn *t, int *ext, char **errmsg);
/* Appends rows[0..n) to sentiment_train_log as version `version` of name
 * (creating the table if missing); "cannot write sentiment_train_log: ..." */
int sx_store_train_log(sqlite3 *db, const char *name, int64_t version, const sx_train_log_row *rows,
                       int n, char **errmsg);
/* Ends t with a commit (outside a transaction of the caller's); a commit
 * that fails is rolled back and its error returned ("cannot commit the
 * model: ..."). */
int sx_store_train_commit(sqlite3 *db, sx_store_txn *t, char **errmsg);
/* Rolls t back (the transaction when it is t's own) and closes it. */
void sx_store_train_rollback(sqlite3 *db, sx_store_txn *t);
/* Appends the distinct stored names, ", "-separated, to s. */
void sx_store_append_names(sqlite3 *db, sqlite3_str *s, int *count);
/* "db:<file>:<name>" ("db:#<n>:<name>" for an in-memory database, n
 * unique to the connection): what a newer version of name replaces. */
char *sx_store_family(sx_conn *c, const char *name);

#endif

/* sentiment_ext.h: what the files of ext/ share, and nothing else.
 *
 * ext/ is the SQLite glue: it knows SQLite and knows no math. The pieces:
 *
 *   sentiment.c       entry point, registration tables, per-connection state
 *   functions.c       the scalar functions (sentiment, sentiment_score, ...)
 *   embed.c           sentiment_embed(): pooled sentence embeddings as BLOBs
 *   config.c          sentiment_config(key [, value]) and its validation
 *   device.c          backends: the CPU, the CUDA plugin (dlopen), precision
 *   engine.c          one connection's backend + workspaces, batched classify
 *   registry.c        the process-wide model cache (reference counted)
 *   models.c          model names -> cache entries (lookup order, name@N)
 *   storage.c         the sentiment_model_store table inside a database
 *   store_functions.c sentiment_drop(), sentiment_export(), sentiment_use()
 *   builtin.c         the built-in model embedded with .incbin, when present
 *   classify_vtab.c   the classify table-valued function / virtual table
 *   schema_sql.c      SQL stored in a schema, prepared as SQLite treats views
 *   models_vtab.c     the sentiment_models eponymous virtual table
 *   batch_window.c    sentiment_batch(): the window-function form of classify
 *   explain.c         sentiment_explain(): token attributions as JSON
 *   clauses_vtab.c    sentiment_clauses: clause-level sentiment, a table-valued function
 *   results.c         JSON and BLOB results shared by the functions
 *   progress.c        the progress line long runs print on stderr
 *   evaluate.c        sentiment_evaluate(): accuracy, F1, confusion matrix
 *   train.c           train(): the fine-tuning aggregate
 *   train_options.c   train()'s options
 *   train_wide.c      train()'s option "wide": the wide part's fit and mix
 *   train_int8.c      train()'s INT8 check: validation rows in FP32 and INT8
 *   train_status.c    the sentiment_training table of running trainings
 *   args.c            name/path arguments (no NUL bytes), the interrupt and
 *                     progress-handler poll (sx_poll), the admin switch
 *   errors.c          the error convention below: sx_fail, sx_from_sm
 * and the headers: this one (shared by every file), train_options.h,
 * train_wide.h, train_int8.h (between train.c and its helpers only).
 *
 * Includes: model/ (any room), cpu/backend_cpu.h and gpu/sentiment_cuda.h
 * only, spelled with their room (scripts/include-views.sh); called by
 * SQLite through the registration tables of sentiment.c.
 *
 * Naming: everything shared is prefixed sx_.
 *
 * Errors. Every function of ext/ that can fail returns an SQLite result
 * code, SQLITE_OK on success, else the code that says what kind of failure
 * it was:
 *   SQLITE_NOMEM       out of memory
 *   SQLITE_INTERRUPT   sqlite3_interrupt() stopped it
 *   SQLITE_NOTFOUND    the model, version or stored row named does not exist
 *   SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, ...  SQLite's own code,
 *                      passed on from the call that failed (READONLY also
 *                      for a read-only main database, checked before a write)
 *   SQLITE_CANTOPEN, SQLITE_IOERR  a file could not be created or written
 *                      (sentiment_export)
 *   SQLITE_ERROR       anything else: a bad argument, a file or row that
 *                      does not load, a backend that failed
 * and, where it takes a `char **errmsg`, a message there, sqlite3_mprintf'd
 * and freed by the caller with sqlite3_free, of the form "fn: what went
 * wrong", fn being the name the user called ("sentiment()", "train()",
 * "classify()", "sentiment_models"):
 *   sentiment(): no model named 'hotle'; known: default, hotel
 * Files below the SQL surface that are given no fn (storage.c,
 * schema_sql.c, train.c's storing) write the message without the prefix
 * and their callers add it. *errmsg is set only on failure; a message
 * already there is freed when a new one is set, so *errmsg starts NULL. A
 * failure that leaves *errmsg NULL is out of memory (the message itself
 * could not be made), except SQLITE_NOTFOUND where a lookup documents that
 * it sets none (the caller says what was not found). A function whose only
 * failure is out of memory returns SQLITE_NOMEM and takes no errmsg.
 * sx_fail() formats a message and returns the code; sx_from_sm() turns a
 * model/ status (SM_*, model/core/errors.h) and its err buffer into both. The
 * SQL entry points (xFunc, xStep, xFinal, xFilter, ...) hand the message
 * to sqlite3_result_error() or pVtab->zErrMsg (a function's error reaches
 * SQLite as SQLITE_ERROR, whatever the code was), out of memory to
 * sqlite3_result_error_nomem() or SQLITE_NOMEM.
 *
 * The boundary. The runtime below (runtime/: the model cache, the engine,
 * the devices) keeps model/'s convention, an SM_* status and a char
 * err[SM_ERR_MAX] without a function name: it is shared by every
 * connection, outlives each and knows no SQLite. ext/ converts where it
 * calls it, with sx_from_sm(rc, fn, err, errmsg): conn_engine.c (the
 * engine), config.c (device and precision settings), models.c (the cache,
 * and the rt_loader callbacks it hands it: sx_store_row_open and
 * sx_store_row_load, which run under the cache's load lock and keep its
 * convention), store_functions.c and train.c (their acquires).
 * Predicates ("1 when ...") and functions returning a pointer (NULL when
 * out of memory) or a count are not error returns.
 */
#ifndef SENTIMENT_EXT_H
#define SENTIMENT_EXT_H

#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3

#include <stddef.h>
#include <stdint.h>

#include "encoder/bert.h"
#include "runtime/engine.h"
#include "runtime/registry.h"

#define SX_VERSION "0.1.0"

/* Longest model name accepted (bytes). */
#define SX_NAME_MAX 128
/* Windows a long text is read in with sentiment_config('long_text', 'windows'). */
#define SX_LONG_TEXT_WINDOWS 8


/* ------------------------------------------------------------------ */
/* errors.c: the error convention (above).                              */

/* Sets *errmsg (the old message freed) to "fn: " and the printf-style
 * message, or to the message alone when fn is NULL, and returns rc;
 * SQLITE_NOMEM with *errmsg NULL when the message cannot be allocated.
 * errmsg NULL: nothing is formatted, rc is returned. fmt's arguments may
 * include *errmsg itself (to prefix an inner message). fmt is checked as
 * printf's, so SQLite's own %q, %Q and %w are not taken: quote with
 * sqlite3_mprintf first. */
int sx_fail(char **errmsg, int rc, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The SQLite result code for a model/ status: SM_OK -> SQLITE_OK,
 * SM_ERR_NOMEM -> SQLITE_NOMEM, SM_ERR_INTERRUPTED -> SQLITE_INTERRUPT,
 * every other SM_ERR_* (I/O, format, invalid, unsupported, device) ->
 * SQLITE_ERROR. */
int sx_rc_from_sm(int sm_rc);
/* sx_rc_from_sm(sm_rc), and for a failure *errmsg "fn: err" (err as the
 * model/ call wrote it; "out of memory", "interrupted" or "failed" when it
 * is NULL or empty), as sx_fail. SM_OK touches nothing. */
int sx_from_sm(int sm_rc, const char *fn, const char *err, char **errmsg);

/* ------------------------------------------------------------------ */
/* sentiment.c / engine.c: per-connection state.                        */

/* A model registered on this connection by sentiment_load(), or kept in
 * memory by train() when it could not be stored (path NULL). */
typedef struct sx_file_reg {
    char *name;
    char *path;      /* canonical directory path; NULL: in memory */
    rt_model *model; /* loaded at registration, referenced */
    struct sx_file_reg *next;
} sx_file_reg;

/* What a connection last read of a stored model (models.c): the row, the
 * content hash of its bytes (the registry key) and the database's change
 * stamp when it was read; valid while the stamp is unchanged. */
#define SX_STORE_MEMO_MAX 8
#define SX_STORE_KEY_MAX 72 /* "sha256:" + 64 hex digits + NUL */
typedef struct sx_store_memo {
    int64_t rowid, version, bytes; /* bytes: the row's four columns, summed */
    uint32_t data_version;         /* SQLITE_FCNTL_DATA_VERSION of main */
    int64_t changes;               /* sqlite3_total_changes64 */
    uint64_t used;                 /* 0: empty slot */
    char key[SX_STORE_KEY_MAX];
} sx_store_memo;

enum { SX_PROGRESS_AUTO = 0, SX_PROGRESS_OFF = 1, SX_PROGRESS_ON = 2 };

typedef struct sx_conn {
    sqlite3 *db;
    int refs; /* one per registered function / module */
    /* configuration (config.c) */
    char device[32]; /* "auto", "cpu", "cuda", "cuda:N" */
    int threads;     /* 0 = all cores */
    int batch_size;
    int max_length;        /* 0 = the model's maximum */
    int progress;          /* SX_PROGRESS_* */
    int admin_off;         /* sentiment_config('admin_functions', 'off') was called */
    char precision[16];    /* "" or "auto", "fp32", "tf32", "bf16", "bf16-fast", "int8" */
    int long_text_windows; /* 0: long texts truncated; else SX_LONG_TEXT_WINDOWS */
    /* the runtime engine: backend, workspaces, counters (conn_engine.c) */
    rt_engine engine;
    /* models (models.c) */
    sx_file_reg *files;
    sx_store_memo memo[SX_STORE_MEMO_MAX];
    uint64_t memo_tick;
    uint64_t serial; /* names an in-memory database (storage.c) */
} sx_conn;

void sx_conn_ref(sx_conn *c);
void sx_conn_unref(void *c); /* the one destructor */

/* One scalar SQL function of a file's registration table. */
typedef struct sx_func {
    const char *name;
    int nArg;
    int flags; /* SQLITE_UTF8 | ...: SQLITE_DIRECTONLY, SQLITE_INNOCUOUS, ... */
    void (*xFunc)(sqlite3_context *, int, sqlite3_value **);
} sx_func;
/* Registers the n functions of f on db, each holding a reference to c
 * (sx_conn_unref drops it); stops at the first failure. */
int sx_register_funcs(sqlite3 *db, sx_conn *c, const sx_func *f, size_t n);

/* conn_engine.c: the connection's door to the runtime engine
 * (runtime/engine.h). Each builds the engine's settings from the
 * connection's, hears sqlite3_interrupt and the progress handler through
 * an sx_poll, and converts the runtime's SM_* status to the SQLite code
 * and a message naming fn (sx_from_sm). */

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
/* The effective max_length for a model on this connection. */
int sx_engine_max_length(const sx_conn *c, const bert_model *m);

/* ------------------------------------------------------------------ */
/* models.c: from a model name to a cache entry.                        */

enum { SX_SRC_BUILTIN = 1, SX_SRC_DATABASE = 2, SX_SRC_FILE = 3 };

/* Resolves name ("default" when NULL; "name@N" picks a database version)
 * and returns a referenced entry. SQLITE_NOTFOUND (with its message) when
 * there is no such model or version. */
int sx_model_resolve(sx_conn *c, const char *fn, const char *name, rt_model **out, char **errmsg);
/* The stored version `version` (0: latest) of name in the main database,
 * whatever this connection registered under that name; SQLITE_NOTFOUND
 * when it is not stored, an error when it does not load (used by
 * sentiment_use, sentiment_save, sentiment_export). */
int sx_model_acquire_stored(sx_conn *c, const char *fn, const char *name, int64_t version,
                            rt_model **out, char **errmsg);
/* A registry acquire for a model directory (used by sentiment_load). A
 * load stops, with "interrupted", when sqlite3_interrupt(db) is in effect
 * between its files (db may be NULL). */
int sx_model_acquire_dir(sqlite3 *db, const char *fn, const char *path, rt_model **out,
                         char **errmsg);
/* Registers / replaces / (path NULL) removes a connection's file model. */
int sx_model_register(sx_conn *c, const char *fn, const char *name, const char *path,
                      char **errmsg);
void sx_model_unregister_all(sx_conn *c);
/* Registers *model (handed over; *model is NULL afterwards, also on error)
 * on this connection as name, in memory (source 'memory'), replacing a
 * registration of that name. */
int sx_model_register_memory(sx_conn *c, const char *fn, const char *name, bert_model **model,
                             char **errmsg);
/* Drops the in-memory model called name, if there is one. */
void sx_model_drop_memory(sx_conn *c, const char *name);
/* The cache key for a file model directory, or NULL when unreadable. */
char *sx_model_dir_key(const char *path);
/* SQLITE_OK when name is acceptable for registering (for_store: storing,
 * where 'default' is reserved), else SQLITE_ERROR saying why. */
int sx_model_name_check(const char *fn, const char *name, int for_store, char **errmsg);
/* The "known: ..." list for error messages (sqlite3_mprintf'd). */
char *sx_model_known(sx_conn *c);
/* SX_SRC_FILE when name (no @N) is registered on this connection,
 * SX_SRC_DATABASE when it is stored in the main database, else 0. */
int sx_model_source(sx_conn *c, const char *name);

/* ------------------------------------------------------------------ */
/* builtin.c: the model compiled into sentiment.so (if any).            */

typedef struct sx_builtin {
    const char *config;
    size_t config_len;
    const char *vocab;
    size_t vocab_len;
    const void *weights;
    size_t weights_len;
} sx_builtin;
/* Fills *b and returns 1; 0 (and an empty *b) when this build has no
 * built-in model. */
int sx_builtin_get(sx_builtin *b);

/* ------------------------------------------------------------------ */
/* storage.c: the sentiment_model_store table.                          */

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

/* ------------------------------------------------------------------ */
/* Helpers shared by the SQL functions (functions.c).                   */

/* 1 when text is blank: it tokenizes to nothing (tokenizer_text_blank:
 * empty, white space, NUL and other control or format characters such as
 * U+200B and U+FEFF, invalid UTF-8 only, ...). Every function, classify,
 * sentiment_batch, train() and sentiment_evaluate() treat a blank text as
 * NULL, so they agree row for row. */
int sx_text_blank(const char *text, size_t len);
/* A text argument as bytes (*text NULL for NULL or blank input; a BLOB is
 * taken as UTF-8 bytes, numbers as their text). SQLITE_NOMEM on OOM. */
int sx_value_text(sqlite3_value *v, const char **text, size_t *len);
/* args.c: the TEXT of a name or path argument in *out (NULL for SQL
 * NULL): SQLITE_OK; SQLITE_ERROR with "fn: what contains a NUL byte" when
 * it holds one (never cut at the NUL); SQLITE_NOMEM. */
int sx_arg_name(sqlite3_value *v, const char *fn, const char *what, const char **out,
                char **errmsg);
/* 1 when a TEXT (or BLOB) value holds a NUL byte. */
int sx_arg_has_nul(sqlite3_value *v);
/* 1 while sqlite3_interrupt(db) is in effect (SQLite 3.40 has no
 * sqlite3_is_interrupted). */
int sx_db_interrupted(sqlite3 *db);
/* 1, with the error set on ctx, when the application turned this
 * connection's admin functions off (sentiment_config('admin_functions',
 * 'off')): the DIRECTONLY functions that read or write files, store or drop
 * models, train or change settings call it first (args.c). */
int sx_admin_refused(sqlite3_context *ctx, const sx_conn *c, const char *fn);
/* A stop check for long work inside one SQL call (args.c): 1 once
 * sqlite3_interrupt(db) is in effect or the connection's progress handler
 * asked to stop (it is called at least every 10 ms of polling work). sx_poll_stop has the
 * int (*)(void *) shape model/'s stop callbacks take. Begin and end on the
 * same thread, around the work; end before returning to SQLite, except in
 * an aggregate's context, which may keep one across its calls (its opcode
 * count then accumulates over the query) and ends it in xFinal. */
typedef struct sx_poll {
    sqlite3 *db;
    sqlite3_stmt *st, *heavy; /* prepared on first use */
    double last;              /* when the heavy one last ran (seconds) */
    int stopped;
} sx_poll;
void sx_poll_begin(sx_poll *p, sqlite3 *db);
int sx_poll_stop(void *poll);
void sx_poll_end(sx_poll *p);
/* Index of the top label (ties -> lowest index). */
int sx_argmax(const float *probs, int k);
/* P(positive) for a positive/negative model, else P(top label). */
double sx_score(const bert_config *cfg, const float *probs);
/* {"label": p, ...} as a sqlite3_malloc'd string. */
char *sx_probs_json(const bert_config *cfg, const float *probs);
/* Appends a JSON string literal. */
void sx_json_string(sqlite3_str *s, const char *text);
/* JSON results carry SQLite's JSON subtype ('J', what json1's functions
 * set and read), so json_object('p', sentiment_probs(x)) nests an object,
 * not an escaped string. Functions that return JSON are registered with
 * SX_JSON_FLAGS: SQLITE_RESULT_SUBTYPE where the headers define it (SQLite
 * 3.45 and later, where a function without it may lose the subtype), else
 * nothing. */
#define SX_JSON_SUBTYPE 74
#ifdef SQLITE_RESULT_SUBTYPE
#define SX_JSON_FLAGS SQLITE_RESULT_SUBTYPE
#else
#define SX_JSON_FLAGS 0
#endif
/* Sets json (a sqlite3_malloc'd string, handed over; NULL: out of memory)
 * as the result, with the JSON subtype. */
void sx_result_json(sqlite3_context *ctx, char *json);

/* embed.c: sentiment_embed(). sx_embedding_blob sets C floats as the
 * result, a little-endian float32 BLOB of 4 x C bytes (what sqlite-vec
 * reads). */
int sx_register_embed(sqlite3 *db, sx_conn *c);
void sx_embedding_blob(sqlite3_context *ctx, const float *v, int C);
/* functions.c: the model argument argv[i] of a scalar function (the
 * default model when i >= argc), resolved once per statement (auxdata);
 * NULL after setting an error result. sx_model_arg_done hands it back. */
rt_model *sx_model_arg(sqlite3_context *ctx, sx_conn *c, const char *fn, int argc,
                       sqlite3_value **argv, int i, int *cached);
void sx_model_arg_done(sqlite3_context *ctx, rt_model *m, int argc, int i, int cached);

/* Progress line on stderr (classify, sentiment_batch). */
typedef struct sx_progress {
    int active;
    double start, last;
    int64_t done, total; /* total < 0: unknown */
    const char *what;
} sx_progress;
void sx_progress_begin(sx_progress *p, const sx_conn *c, const char *what, int64_t total);
void sx_progress_update(sx_progress *p, int64_t done);
void sx_progress_end(sx_progress *p);

/* Module and function registration hooks of the other files. */
/* schema_sql.c: SQL from a database's schema, prepared as SQLite treats a
 * view's SQL (read only, safe functions, PRAGMA trusted_schema honoured).
 * On refusal returns SQLITE_ERROR with *why (sqlite3_free) saying what the
 * SQL does that is not allowed; SQLITE_NOMEM without a message. */
int sx_prepare_from_schema(sqlite3 *db, const char *sql, sqlite3_stmt **out, char **why);
/* 1 when nothing but white space, ';' and comments follows a statement. */
int sx_sql_tail_empty(const char *tail);

int sx_register_classify(sqlite3 *db, sx_conn *c);
int sx_register_models_vtab(sqlite3 *db, sx_conn *c);
int sx_register_functions(sqlite3 *db, sx_conn *c);
int sx_register_config(sqlite3 *db, sx_conn *c);
int sx_register_batch_window(sqlite3 *db, sx_conn *c);
/* sentiment_drop(), sentiment_export(), sentiment_use() (store_functions.c). */
int sx_register_store_functions(sqlite3 *db, sx_conn *c);
/* sentiment_explain() (explain.c), sentiment_clauses (clauses_vtab.c). */
int sx_register_explain(sqlite3 *db, sx_conn *c);
/* sentiment_explain's JSON for one text with options (JSON text or NULL):
 * SQLITE_OK with *json (sqlite3_malloc'd; NULL for blank text), or an error
 * naming fn. Shared with classify's explanation column. */
int sx_explain_json(sx_conn *c, const char *fn, rt_model *m, const char *text, size_t len,
                    const char *options, char **json, char **errmsg);
int sx_register_clauses(sqlite3 *db, sx_conn *c);

/* ------------------------------------------------------------------ */
/* train.c, evaluate.c, train_status.c: fine-tuning from SQL (train()'s */
/* options: train_options.c; its storing SQL: storage.c).               */

/* train(), sentiment_evaluate(), sentiment_training. */
int sx_register_training(sqlite3 *db, sx_conn *c);
int sx_register_evaluate(sqlite3 *db, sx_conn *c);
int sx_register_train_status(sqlite3 *db, sx_conn *c);
/* The process-wide list of running train() calls: begin returns a handle
 * (NULL when out of memory: the run is then not listed), update records a
 * trainer_progress (trainer.h), end removes it. NULL handles are ignored. */
struct trainer_progress;
void *sx_train_status_begin(const char *model, const char *base, int64_t rows);
void sx_train_status_update(void *h, const struct trainer_progress *p);
void sx_train_status_end(void *h);

#endif

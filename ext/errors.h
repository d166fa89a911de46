/* errors.h: the error convention of ext/, the SQL surface (errors.c).
 *
 * Room: ext/. Included by every ext/ file that can fail.
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
#ifndef EXT_ERRORS_H
#define EXT_ERRORS_H

#include "ext/sqlite_api.h"

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

#endif

/* models.h: from a model name to a cache entry (models.c): the lookup
 * order (a connection's registrations, the main database's store, the
 * built-in model), name@N versions, registering directories and in-memory
 * models. Room: ext/. Called by every SQL object that takes a model name.
 */
#ifndef EXT_MODELS_H
#define EXT_MODELS_H

#include <stdint.h>

#include "encoder/bert.h"
#include "ext/conn.h"

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

#endif

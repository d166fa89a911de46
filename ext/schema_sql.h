/* schema_sql.h: SQL that comes from a database's schema, prepared as
 * SQLite treats a view's (schema_sql.c). Room: ext/. Called by classify_vtab.c
 * (the SQL its first argument names, or a view's).
 */
#ifndef EXT_SCHEMA_SQL_H
#define EXT_SCHEMA_SQL_H

#include "ext/sqlite_api.h"

/* schema_sql.c: SQL from a database's schema, prepared as SQLite treats a
 * view's SQL (read only, safe functions, PRAGMA trusted_schema honoured).
 * On refusal returns SQLITE_ERROR with *why (sqlite3_free) saying what the
 * SQL does that is not allowed; SQLITE_NOMEM without a message. */
int sx_prepare_from_schema(sqlite3 *db, const char *sql, sqlite3_stmt **out, char **why);
/* 1 when nothing but white space, ';' and comments follows a statement. */
int sx_sql_tail_empty(const char *tail);

#endif

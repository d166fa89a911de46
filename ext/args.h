/* args.h: reading SQL arguments and hearing a stop (args.c): name and
 * path arguments without NUL bytes, sqlite3_interrupt and the progress
 * handler polled from long work (sx_poll), the admin switch. Room: ext/.
 * Called by the SQL objects.
 */
#ifndef EXT_ARGS_H
#define EXT_ARGS_H

#include <stddef.h>

#include "ext/conn.h"
#include "ext/sqlite_api.h"

/* The TEXT of a name or path argument in *out (NULL for SQL
 * NULL): SQLITE_OK; SQLITE_ERROR with "fn: what contains a NUL byte" when
 * it holds one (never cut at the NUL); SQLITE_NOMEM. */
int sx_arg_name(sqlite3_value *v, const char *fn, const char *what, const char **out,
                char **errmsg);
/* An aggregate's state of size bytes, allocated zeroed on its first row
 * (sqlite3_malloc'd; its pointer kept in the aggregate context, so xFinal
 * reads it as *(T **)sqlite3_aggregate_context(ctx, 0) and frees it);
 * *first is 1 on that row. NULL, with the out-of-memory error set on ctx,
 * when memory runs out. */
void *sx_agg_state(sqlite3_context *ctx, size_t size, int *first);
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

#endif

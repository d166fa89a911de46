/* args.c: checks on SQL arguments that name something (a model, a path, a
 * setting) and the connection's interrupt, shared by the functions.
 *
 * A TEXT value may hold a NUL byte (CAST(x'610062' AS TEXT)); C string code
 * would cut it at the NUL and act on another name ('a'), so such a name is
 * an error instead. sqlite3_is_interrupted() is SQLite 3.41+; on older
 * libraries the interrupt is seen by stepping a trivial statement, which
 * fails with SQLITE_INTERRUPT while sqlite3_interrupt() is in effect.
 */
#include <string.h>

#include "sentiment_ext.h"

int sx_arg_name(sqlite3_value *v, const char *fn, const char *what, const char **out,
                char **errmsg)
{
    const char *t = (const char *)sqlite3_value_text(v);
    *out = NULL;
    if (!t) return sqlite3_value_type(v) == SQLITE_NULL ? SQLITE_OK : SQLITE_NOMEM;
    if ((size_t)sqlite3_value_bytes(v) != strlen(t))
        return sx_fail(errmsg, SQLITE_ERROR, fn, "%s contains a NUL byte", what);
    *out = t;
    return SQLITE_OK;
}

int sx_arg_has_nul(sqlite3_value *v)
{
    const char *t = (const char *)sqlite3_value_text(v);
    return t && (size_t)sqlite3_value_bytes(v) != strlen(t);
}

int sx_db_interrupted(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int rc;
    if (!db) return 0;
    rc = sqlite3_prepare_v2(db, "SELECT 1", -1, &st, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_INTERRUPT;
}

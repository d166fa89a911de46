/* args.c: checks on SQL arguments that name something (a model, a path, a
 * setting) and the connection's interrupt, shared by the functions, and the
 * admin switch (sx_admin_refused), and an aggregate's per-query state
 * (sx_agg_state).
 *
 * A TEXT value may hold a NUL byte (CAST(x'610062' AS TEXT)); C string code
 * would cut it at the NUL and act on another name ('a'), so such a name is
 * an error instead. sqlite3_is_interrupted() is SQLite 3.41+; on older
 * libraries the interrupt is seen by stepping a trivial statement, which
 * fails with SQLITE_INTERRUPT while sqlite3_interrupt() is in effect.
 *
 * Long C work inside one SQL call (tokenizing a huge text, one batch) runs
 * no opcodes of the caller's statement, so a progress handler
 * (sqlite3_progress_handler, what Datasette's time limit is) would not be
 * called until it ends. An sx_poll steps statements of its own, kept
 * prepared for the whole piece of work: a trivial one (its opcodes count
 * toward the handler's N, and it fails with SQLITE_INTERRUPT while
 * sqlite3_interrupt() is in effect) and, at most every 10 ms, one that runs
 * some 4,000 opcodes, so that a handler with N up to that is called at
 * least that often however rarely the work polls (and larger N every few
 * such polls). A non-zero answer of the handler fails the step with
 * SQLITE_INTERRUPT, which the work then reports as "interrupted".
 */
#include <string.h>
#include <time.h>

#include "ext/args.h"
#include "ext/conn.h"
#include "ext/errors.h"

/* How often a poll runs the long statement, and the statement. */
#define POLL_HEAVY_SECONDS 0.010
static const char k_poll_heavy[] =
    "WITH RECURSIVE c(x) AS (VALUES(0) UNION ALL SELECT x + 1 FROM c WHERE x < 400) "
    "SELECT count(*) FROM c";

static double poll_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int sx_arg_name(sqlite3_value *v, const char *fn, const char *what, const char **out, char **errmsg)
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

int sx_admin_refused(sqlite3_context *ctx, const sx_conn *c, const char *fn)
{
    if (!c || !c->admin_off) return 0;
    char *msg = sqlite3_mprintf(
        "%s is turned off on this connection: it reads or writes files, stores models or "
        "changes settings, and the application that opened the database turned such functions "
        "off for the SQL it runs (sentiment_config('admin_functions', 'off'); on Datasette the "
        "site's owner turns them on with the plugin setting admin_functions of sqlite-sentiment)",
        fn);
    if (msg) sqlite3_result_error(ctx, msg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_result_error_code(ctx, SQLITE_AUTH);
    sqlite3_free(msg);
    return 1;
}

void sx_poll_begin(sx_poll *p, sqlite3 *db)
{
    memset(p, 0, sizeof *p);
    p->db = db;
    p->last = poll_clock();
}

/* Steps *st (prepared from sql on first use); 1 on SQLITE_INTERRUPT. */
static int poll_step(sqlite3 *db, sqlite3_stmt **st, const char *sql)
{
    if (!*st && sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK) {
        *st = NULL;
        return sx_db_interrupted(db);
    }
    int rc;
    while ((rc = sqlite3_step(*st)) == SQLITE_ROW) {}
    sqlite3_reset(*st);
    return rc == SQLITE_INTERRUPT;
}

int sx_poll_stop(void *poll)
{
    sx_poll *p = poll;
    if (!p || !p->db || p->stopped) return p && p->stopped;
    double t = poll_clock();
    if (t - p->last >= POLL_HEAVY_SECONDS) {
        p->last = t;
        p->stopped = poll_step(p->db, &p->heavy, k_poll_heavy);
    } else {
        p->stopped = poll_step(p->db, &p->st, "SELECT 1");
    }
    return p->stopped;
}

void sx_poll_end(sx_poll *p)
{
    sqlite3_finalize(p->st);
    sqlite3_finalize(p->heavy);
    p->st = p->heavy = NULL;
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

void *sx_agg_state(sqlite3_context *ctx, size_t size, int *first)
{
    void **pp = sqlite3_aggregate_context(ctx, sizeof *pp);

    *first = 0;
    if (!pp) goto nomem;
    if (!*pp) {
        if (!(*pp = sqlite3_malloc64(size))) goto nomem;
        memset(*pp, 0, size);
        *first = 1;
    }
    return *pp;
nomem:
    sqlite3_result_error_nomem(ctx);
    return NULL;
}

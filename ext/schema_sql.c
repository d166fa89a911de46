/* schema_sql.c: prepares SQL that came from a database's schema (the stored
 * arguments of a persistent classify table) under the rules SQLite applies
 * to the SQL of views and triggers, and checks that any source SQL is one
 * statement.
 *
 * Untrusted SQL may only read and call safe functions. While it is
 * prepared, an authorizer (sqlite3_set_authorizer) sees every action and
 * allows exactly:
 *   SQLITE_SELECT, SQLITE_RECURSIVE   the query itself, recursive CTEs
 *   SQLITE_READ                        columns of ordinary tables and views
 *                                      (a virtual table is refused when read
 *                                      directly: SQLite offers no way to ask
 *                                      whether a module is innocuous; reads a
 *                                      view makes are left to SQLite, which
 *                                      checks a view's own SQL itself)
 *   SQLITE_FUNCTION                    a function every overload of which is
 *                                      safe: never SQLITE_DIRECTONLY, and,
 *                                      when PRAGMA trusted_schema is OFF,
 *                                      SQLITE_INNOCUOUS. The flags are read
 *                                      from PRAGMA function_list, so the rule
 *                                      is SQLite's own for views.
 * Everything else (PRAGMA, ATTACH, writes, eponymous virtual tables such as
 * fsdir or pragma_*) is denied, and the statement must also pass
 * sqlite3_stmt_readonly().
 *
 * SQLite keeps one authorizer per connection and has no call that returns
 * the current one, so this one replaces an application's authorizer while
 * the statement is prepared and none is left installed afterwards. An
 * application that relies on its own authorizer must not use persistent
 * classify tables with stored sources (the eponymous form never touches the
 * authorizer). Installing or removing an authorizer expires the
 * connection's statements: running ones finish, others are re-prepared from
 * the same text on their next step, which is how the statement made here
 * runs too (same text, same schema, the same program).
 */
#include <string.h>
#include <strings.h>

#include "ext/errors.h"
#include "ext/schema_sql.h"

/* SQLITE_DBCONFIG_TRUSTED_SCHEMA and the function flags exist since 3.31. */
#ifndef SQLITE_DBCONFIG_TRUSTED_SCHEMA
#define SQLITE_DBCONFIG_TRUSTED_SCHEMA 1017
#endif
#ifndef SQLITE_INNOCUOUS
#define SQLITE_INNOCUOUS 0x000200000
#endif
#ifndef SQLITE_DIRECTONLY
#define SQLITE_DIRECTONLY 0x000080000
#endif

/* A set of names, compared without regard to ASCII case. */
typedef struct name_set {
    char **v;
    int n, cap;
} name_set;

static int set_has(const name_set *s, const char *db, const char *name)
{
    /* entries are "db\tname"; db NULL matches any schema */
    size_t ndb = db ? strlen(db) : 0;
    for (int i = 0; i < s->n; i++) {
        const char *tab = strchr(s->v[i], '\t');
        if (!tab || strcasecmp(tab + 1, name)) continue;
        if (!db || ((size_t)(tab - s->v[i]) == ndb && !strncasecmp(s->v[i], db, ndb))) return 1;
    }
    return 0;
}

static int set_add(name_set *s, const char *db, const char *name)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        char **v = sqlite3_realloc64(s->v, (sqlite3_uint64)cap * sizeof *v);
        if (!v) return SQLITE_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n] = sqlite3_mprintf("%s\t%s", db ? db : "", name);
    if (!s->v[s->n]) return SQLITE_NOMEM;
    s->n++;
    return SQLITE_OK;
}

static void set_free(name_set *s)
{
    for (int i = 0; i < s->n; i++) sqlite3_free(s->v[i]);
    sqlite3_free(s->v);
    memset(s, 0, sizeof *s);
}

typedef struct auth_ctx {
    int trusted_schema;
    name_set unsafe_functions; /* "\tname": some overload is unsafe here */
    name_set ordinary;         /* "db\tname": tables and views, not virtual */
    int calls;                 /* authorizer calls seen */
    char *denied;              /* what was refused first, for the message */
} auth_ctx;

static int deny(auth_ctx *a, char *what)
{
    if (!a->denied) a->denied = what;
    else sqlite3_free(what);
    return SQLITE_DENY;
}

static int authorize(void *p, int action, const char *a1, const char *a2, const char *db,
                     const char *inner)
{
    auth_ctx *a = p;
    a->calls++;
    switch (action) {
    case SQLITE_SELECT:
    case SQLITE_RECURSIVE: return SQLITE_OK;
    case SQLITE_READ:
        if (inner) return SQLITE_OK; /* inside a view: SQLite checks its SQL */
        if (a1 && set_has(&a->ordinary, db, a1)) return SQLITE_OK;
        return deny(a, sqlite3_mprintf("it reads '%s', which is not an ordinary table or view",
                                       a1 ? a1 : "?"));
    case SQLITE_FUNCTION:
        if (a2 && !set_has(&a->unsafe_functions, NULL, a2)) return SQLITE_OK;
        return deny(a, sqlite3_mprintf("it calls %s(), which is %s", a2 ? a2 : "?",
                                       a->trusted_schema ? "SQLITE_DIRECTONLY"
                                                         : "not SQLITE_INNOCUOUS "
                                                           "(PRAGMA trusted_schema is OFF)"));
    case SQLITE_PRAGMA: return deny(a, sqlite3_mprintf("it runs PRAGMA %s", a1 ? a1 : "?"));
    case SQLITE_ATTACH: return deny(a, sqlite3_mprintf("it attaches a database"));
    case SQLITE_UPDATE:
        /* SQLite records an eponymous virtual table (fsdir('/'), pragma_*)
         * in the schema when a statement first uses it */
        if (a1 && (!strcasecmp(a1, "sqlite_master") || !strcasecmp(a1, "sqlite_temp_master")))
            return deny(a, sqlite3_mprintf("it uses a table-valued function or virtual table"));
        return deny(a, sqlite3_mprintf("it writes to '%s'", a1 ? a1 : "?"));
    default:
        return deny(a, sqlite3_mprintf("it does more than read (action %d on '%s')", action,
                                       a1 ? a1 : ""));
    }
}

/* Fills the policy: unsafe function names and the ordinary tables/views. */
static int policy_read(sqlite3 *db, auth_ctx *a, char **why)
{
    sqlite3_stmt *st = NULL, *dbs = NULL;
    int rc, on = 1;

    if (sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, -1, &on) != SQLITE_OK) on = 0;
    a->trusted_schema = on != 0;

    rc = sqlite3_prepare_v2(db, "SELECT name, flags FROM pragma_function_list", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        rc = sx_fail(why, SQLITE_ERROR, NULL,
                     "this SQLite cannot list its functions (PRAGMA function_list: %s), so no "
                     "function can be allowed",
                     sqlite3_errmsg(db));
        goto end;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        sqlite3_int64 flags = sqlite3_column_int64(st, 1);
        int unsafe = (flags & SQLITE_DIRECTONLY) || (!on && !(flags & SQLITE_INNOCUOUS));
        if (name && unsafe && !set_has(&a->unsafe_functions, NULL, name) &&
            (rc = set_add(&a->unsafe_functions, NULL, name)) != SQLITE_OK)
            goto end;
    }
    if (rc != SQLITE_DONE) goto end;
    sqlite3_finalize(st);
    st = NULL;

    rc = sqlite3_prepare_v2(db, "SELECT name FROM pragma_database_list", -1, &dbs, NULL);
    if (rc != SQLITE_OK) goto end;
    while ((rc = sqlite3_step(dbs)) == SQLITE_ROW) {
        const char *schema = (const char *)sqlite3_column_text(dbs, 0);
        char *sql;
        if (!schema) continue;
        sql = sqlite3_mprintf("SELECT name FROM \"%w\".sqlite_schema WHERE type IN "
                              "('table', 'view') AND (sql IS NULL OR "
                              "sql NOT LIKE 'create virtual table%%') "
                              "UNION ALL VALUES ('sqlite_schema'), ('sqlite_master'), "
                              "('sqlite_temp_schema'), ('sqlite_temp_master')",
                              schema);
        if (!sql) {
            rc = SQLITE_NOMEM;
            goto end;
        }
        rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        sqlite3_free(sql);
        if (rc != SQLITE_OK) goto end;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *name = (const char *)sqlite3_column_text(st, 0);
            if (name && (rc = set_add(&a->ordinary, schema, name)) != SQLITE_OK) goto end;
        }
        if (rc != SQLITE_DONE) goto end;
        sqlite3_finalize(st);
        st = NULL;
    }
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
end:
    if (rc != SQLITE_OK && !*why)
        sx_fail(why, rc, NULL, "cannot read the schema to check it: %s",
                rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_finalize(dbs);
    return rc == SQLITE_OK && !*why ? SQLITE_OK : SQLITE_ERROR;
}

int sx_sql_tail_empty(const char *tail)
{
    const char *p = tail;
    while (p && *p) {
        if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == ';') {
            p++;
        } else if (p[0] == '-' && p[1] == '-') {
            while (*p && *p != '\n') p++;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            if (!e) return 1; /* an unterminated comment runs to the end */
            p = e + 2;
        } else {
            return 0;
        }
    }
    return 1;
}

int sx_prepare_from_schema(sqlite3 *db, const char *sql, sqlite3_stmt **out, char **why)
{
    auth_ctx a;
    const char *tail = NULL;
    int rc, failed = 1;

    *out = NULL;
    *why = NULL;
    memset(&a, 0, sizeof a);
    if (policy_read(db, &a, why) != SQLITE_OK) goto end;

    sqlite3_set_authorizer(db, authorize, &a);
    rc = sqlite3_prepare_v2(db, sql, -1, out, &tail);
    sqlite3_set_authorizer(db, NULL, NULL);
    if (rc != SQLITE_OK) {
        if (a.denied) {
            *why = a.denied;
            a.denied = NULL;
        } else {
            sx_fail(why, rc, NULL, "%s", sqlite3_errmsg(db));
        }
    } else if (!*out) {
        sx_fail(why, SQLITE_ERROR, NULL, "it holds no statement");
    } else if (!sx_sql_tail_empty(tail)) {
        sx_fail(why, SQLITE_ERROR, NULL, "it holds more than one statement");
    } else if (!sqlite3_stmt_readonly(*out)) {
        sx_fail(why, SQLITE_ERROR, NULL, "it does more than read");
    } else if (a.calls == 0) {
        /* our authorizer never ran: do not trust what was prepared */
        sx_fail(why, SQLITE_ERROR, NULL, "it could not be checked");
    } else {
        failed = 0;
    }
end:
    if (failed) {
        sqlite3_finalize(*out);
        *out = NULL;
    }
    sqlite3_free(a.denied);
    set_free(&a.unsafe_functions);
    set_free(&a.ordinary);
    return !failed ? SQLITE_OK : *why ? SQLITE_ERROR : SQLITE_NOMEM;
}

/* test_classify_schema.c: SQL stored in a database schema (the arguments of a
 * persistent classify table) is untrusted, as SQLite treats views: it may
 * read ordinary tables and views and call the functions a view may call,
 * nothing else, and PRAGMA trusted_schema is honoured. The verdicts are
 * compared with SQLite's own for a view holding the same expression.
 * Also: a source is one statement, in every form.
 */
#include "support/ext_test_util.h"

/* Calls of the application functions below: nonzero means stored SQL ran. */
static int g_calls;

static void fn_side_effect(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    g_calls++;
    sqlite3_result_text(ctx, "好", -1, SQLITE_STATIC);
}

/* An application's functions of each kind: unsafe (no flag), innocuous,
 * direct-only (like the shell's writefile() and load_extension()). */
static void add_app_functions(sqlite3 *db)
{
    assert_int_equal(sqlite3_create_function(db, "app_plain", -1, SQLITE_UTF8, NULL,
                                             fn_side_effect, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_create_function(db, "app_innocuous", -1,
                                             SQLITE_UTF8 | SQLITE_INNOCUOUS, NULL,
                                             fn_side_effect, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_create_function(db, "app_direct", -1,
                                             SQLITE_UTF8 | SQLITE_DIRECTONLY, NULL,
                                             fn_side_effect, NULL, NULL),
                     SQLITE_OK);
}

static sqlite3 *open_schema_db(int trusted)
{
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    add_app_functions(db);
    exec_ok(db, trusted ? "PRAGMA trusted_schema = ON" : "PRAGMA trusted_schema = OFF");
    g_calls = 0;
    return db;
}

/* 1 when the query runs to the end, 0 when it fails. */
static int runs(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    sqlite3_free(err);
    return rc == SQLITE_OK;
}

/* Creates a persistent table over `source` (a query text, SQL-quoted by the
 * caller) and says whether reading it works. */
static int stored_runs(sqlite3 *db, const char *quoted_source)
{
    char *sql = sqlite3_mprintf("DROP TABLE IF EXISTS st; "
                                "CREATE VIRTUAL TABLE st USING classify(%s, tiny)",
                                quoted_source);
    exec_ok(db, sql);
    sqlite3_free(sql);
    return runs(db, "SELECT * FROM st");
}

/* For each expression, the stored source 'SELECT 1, <expr>' runs exactly
 * when SQLite runs a view 'SELECT 1, <expr>', in both trusted_schema modes. */
static void test_stored_functions_match_views(void **state)
{
    static const char *const exprs[] = {
        "'好'",
        "upper('好')",
        "printf('%s', '好')",
        "sentiment('好', 'tiny')",
        "sentiment_score('好', 'tiny')",
        "json_extract('{\"a\":\"好\"}', '$.a')",
        "app_plain()",
        "app_innocuous()",
        "app_direct()",
        "load_extension('/nonexistent/evil.so')",
        "sentiment_config('threads', 1)",
        "sentiment_load('x', '" TINY_MODEL "')",
        "sentiment_save('x', 'tiny')",
        "(SELECT max(body) FROM t)",
        "random()",
    };
    (void)state;
    for (int trusted = 0; trusted <= 1; trusted++) {
        for (size_t i = 0; i < sizeof exprs / sizeof *exprs; i++) {
            sqlite3 *db = open_schema_db(trusted);
            char *view = sqlite3_mprintf("CREATE VIEW v AS SELECT 1 AS id, %s AS text", exprs[i]);
            exec_ok(db, view);
            sqlite3_free(view);
            int view_ok = runs(db, "SELECT * FROM v");
            int calls_by_view = g_calls;
            char *quoted = sqlite3_mprintf("%Q", exprs[i]);
            char *src = sqlite3_mprintf("'SELECT 1, ' || %s", quoted);
            /* the source text, as CREATE VIRTUAL TABLE stores it */
            char *text = sqlite3_mprintf("SELECT 1, %s", exprs[i]);
            char *arg = sqlite3_mprintf("%Q", text);
            g_calls = 0;
            int stored_ok = stored_runs(db, arg);
            if (stored_ok != view_ok || (!stored_ok && g_calls != 0)) {
                fail_msg("trusted_schema=%d, %s: view %s, stored source %s (calls %d/%d)", trusted,
                         exprs[i], view_ok ? "runs" : "is refused",
                         stored_ok ? "runs" : "is refused", calls_by_view, g_calls);
            }
            sqlite3_free(quoted);
            sqlite3_free(src);
            sqlite3_free(text);
            sqlite3_free(arg);
            sqlite3_close(db);
        }
    }
}

/* What the issue reproduced: no connection change, no model, no store. */
static void test_stored_side_effects_refused(void **state)
{
    (void)state;
    sqlite3 *db = open_schema_db(1);
    exec_ok(db, "SELECT sentiment_config('batch_size', 7)");
    exec_ok(db, "CREATE VIRTUAL TABLE c1 USING classify('SELECT 1, sentiment_config(''batch_size'', 3)')");
    expect_error(db, "SELECT * FROM c1",
                 "classify(): the source stored in table 'c1' is not run: it calls "
                 "sentiment_config(), which is SQLITE_DIRECTONLY");
    expect_text(db, "SELECT sentiment_config('batch_size')", "7");
    exec_ok(db, "CREATE VIRTUAL TABLE c2 USING classify('SELECT 1, sentiment_load(''evil'', "
                "''" TINY_MODEL "'')')");
    expect_error(db, "SELECT * FROM c2", "it calls sentiment_load(), which is SQLITE_DIRECTONLY");
    expect_error(db, "SELECT sentiment('好', 'evil')", "no model named 'evil'");
    exec_ok(db, "CREATE VIRTUAL TABLE c3 USING classify('SELECT 1, sentiment_save(''evil'', ''tiny'')')");
    expect_error(db, "SELECT * FROM c3", "it calls sentiment_save()");
    expect_text(db, "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'sentiment%'", "0");
    exec_ok(db, "CREATE VIRTUAL TABLE c4 USING classify('SELECT 1, train(''evil'', body, ''x'') "
                "FROM t')");
    expect_error(db, "SELECT * FROM c4", "it calls train()");
    exec_ok(db, "CREATE VIRTUAL TABLE c5 USING classify('SELECT 1, load_extension(''/tmp/evil.so'', "
                "''init'')')");
    expect_error(db, "SELECT * FROM c5", "it calls load_extension()");
    exec_ok(db, "CREATE VIRTUAL TABLE c6 USING classify('SELECT 1, app_direct()')");
    expect_error(db, "SELECT * FROM c6", "it calls app_direct(), which is SQLITE_DIRECTONLY");
    assert_int_equal(g_calls, 0);
    sqlite3_close(db);

    db = open_schema_db(0);
    exec_ok(db, "CREATE VIRTUAL TABLE c7 USING classify('SELECT 1, app_plain()')");
    expect_error(db, "SELECT * FROM c7",
                 "it calls app_plain(), which is not SQLITE_INNOCUOUS (PRAGMA trusted_schema is OFF)");
    assert_int_equal(g_calls, 0);
    exec_ok(db, "PRAGMA trusted_schema = ON");
    expect_text(db, "SELECT label IS NOT NULL FROM c7", "1"); /* SQLite's rule for views */
    assert_int_equal(g_calls, 1);
    sqlite3_close(db);
}

/* Stored SQL only reads ordinary tables and views. */
static void test_stored_reads_only(void **state)
{
    (void)state;
    sqlite3 *db = open_schema_db(1);
    exec_ok(db, "CREATE TABLE keep(x); INSERT INTO keep VALUES (1)");
    exec_ok(db, "CREATE VIRTUAL TABLE r1 USING classify('SELECT 1, ''a''; DELETE FROM keep')");
    expect_error(db, "SELECT * FROM r1", "it holds more than one statement");
    exec_ok(db, "CREATE VIRTUAL TABLE r2 USING classify('WITH x AS (SELECT 1) DELETE FROM keep')");
    expect_error(db, "SELECT * FROM r2", "the source stored in table 'r2' is not run");
    expect_text(db, "SELECT count(*) FROM keep", "1");
    exec_ok(db, "CREATE VIRTUAL TABLE r3 USING classify('SELECT 1, name FROM pragma_table_list')");
    expect_error(db, "SELECT * FROM r3", "it uses a table-valued function or virtual table");
    exec_ok(db, "CREATE VIRTUAL TABLE r4 USING classify('SELECT 1, value FROM json_each(''[1]'')')");
    expect_error(db, "SELECT * FROM r4", "is not run");
    /* a virtual table named as a stored table source */
    exec_ok(db, "CREATE VIRTUAL TABLE inner_labels USING classify(t, body, tiny)");
    exec_ok(db, "CREATE VIRTUAL TABLE r5 USING classify(inner_labels, label, tiny)");
    expect_error(db, "SELECT * FROM r5",
                 "it reads 'inner_labels', which is not an ordinary table or view");
    exec_ok(db, "CREATE VIRTUAL TABLE r6 USING classify(pragma_function_list, name, tiny)");
    expect_error(db, "SELECT * FROM r6", "is not run");
    /* what may run: tables, views, recursive CTEs, the schema table */
    exec_ok(db, "CREATE VIEW tv AS SELECT id, upper(body) AS body FROM t");
    exec_ok(db, "CREATE VIRTUAL TABLE ok1 USING classify(t, body, tiny)");
    expect_text(db, "SELECT count(*) FROM ok1", "20");
    exec_ok(db, "CREATE VIRTUAL TABLE ok2 USING classify(tv, body, tiny)");
    expect_text(db, "SELECT count(*) FROM ok2", "20");
    exec_ok(db, "CREATE VIRTUAL TABLE ok3 USING classify('SELECT id, body FROM tv', tiny)");
    expect_text(db, "SELECT count(*) FROM ok3", "20");
    exec_ok(db, "CREATE VIRTUAL TABLE ok4 USING classify('WITH RECURSIVE c(i) AS (SELECT 1 UNION "
                "ALL SELECT i + 1 FROM c WHERE i < 5) SELECT i, ''好'' FROM c', tiny)");
    expect_text(db, "SELECT count(*) FROM ok4", "5");
    exec_ok(db, "CREATE VIRTUAL TABLE ok5 USING classify('SELECT rowid, name FROM sqlite_schema', tiny)");
    expect_text(db, "SELECT count(*) > 0 FROM ok5", "1");
    exec_ok(db, "CREATE VIRTUAL TABLE ok6 USING classify('SELECT id, body FROM t;  -- done', tiny)");
    expect_text(db, "SELECT count(*) FROM ok6", "20");
    sqlite3_close(db);
}

/* The user's own query is trusted: the eponymous form and a source given
 * as a hidden-column argument keep working with any function. */
static void test_user_sources_trusted(void **state)
{
    (void)state;
    sqlite3 *db = open_schema_db(0);
    expect_text(db, "SELECT count(*) FROM classify('SELECT id, app_plain() FROM t', 'tiny')", "20");
    assert_int_equal(g_calls, 20);
    exec_ok(db, "CREATE VIRTUAL TABLE p USING classify(t, body, tiny)");
    expect_text(db, "SELECT count(*) FROM p WHERE source = 'SELECT 1, app_plain()'", "1");
    expect_error(db, "SELECT * FROM classify('SELECT 1, ''a''; DELETE FROM t', 'tiny')",
                 "classify(): the source must be one query; got more after it: 'DELETE FROM t'");
    expect_error(db, "SELECT * FROM classify('SELECT 1, ''a'';SELECT 2, ''b''', 'tiny')",
                 "the source must be one query");
    expect_text(db, "SELECT count(*) FROM t", "20");
    expect_text(db, "SELECT count(*) FROM classify('SELECT id, body FROM t; /* c */ ;', 'tiny')", "20");
    sqlite3_close(db);
}

/* A view or trigger of a schema cannot use classify at all. */
static void test_schema_cannot_use_classify(void **state)
{
    (void)state;
    sqlite3 *db = open_schema_db(1);
    exec_ok(db, "CREATE VIRTUAL TABLE p USING classify(t, body, tiny)");
    exec_ok(db, "CREATE VIEW pv AS SELECT * FROM p");
    expect_error(db, "SELECT * FROM pv", "unsafe use of virtual table");
    exec_ok(db, "CREATE VIEW ev AS SELECT * FROM classify('SELECT 1, app_plain()', 'tiny')");
    expect_error(db, "SELECT * FROM ev", "unsafe use of virtual table");
    exec_ok(db, "CREATE TABLE log(x); CREATE TRIGGER tr AFTER INSERT ON log BEGIN "
                "SELECT count(*) FROM classify('SELECT 1, app_plain()', 'tiny'); END");
    expect_error(db, "INSERT INTO log VALUES (1)", "unsafe use of virtual table");
    assert_int_equal(g_calls, 0);
    sqlite3_close(db);
}

/* The attack as written in a file: a table planted with writable_schema by
 * a connection without the extension, read by one with it. */
static void test_planted_table(void **state)
{
    const char *path = "build/tests/planted.db";
    sqlite3 *db = NULL;
    (void)state;
    remove(path);
    sqlite3_reset_auto_extension();
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_ok(db, "CREATE TABLE keep(x); INSERT INTO keep VALUES (1); PRAGMA writable_schema = ON; "
                "INSERT INTO sqlite_schema(type, name, tbl_name, rootpage, sql) VALUES "
                "('table', 'labels', 'labels', 0, 'CREATE VIRTUAL TABLE labels USING "
                "classify(''SELECT 1, app_plain()'')')");
    sqlite3_close(db);
    db = open_db_path(path);
    add_app_functions(db);
    g_calls = 0;
    exec_ok(db, "PRAGMA trusted_schema = OFF");
    expect_error(db, "SELECT * FROM labels",
                 "the source stored in table 'labels' is not run: it calls app_plain()");
    assert_int_equal(g_calls, 0);
    sqlite3_close(db);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stored_functions_match_views),
        cmocka_unit_test(test_stored_side_effects_refused),
        cmocka_unit_test(test_stored_reads_only),
        cmocka_unit_test(test_user_sources_trusted),
        cmocka_unit_test(test_schema_cannot_use_classify),
        cmocka_unit_test(test_planted_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

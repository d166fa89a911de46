/* test_admin_switch.c: sentiment_config('admin_functions', 'off') (config.c,
 * args.c sx_admin_refused): after it every function that reads or writes
 * files, stores, drops or trains models or changes settings fails with
 * SQLITE_AUTH and a message naming itself, for good on that connection;
 * classifying and reading settings go on; other connections are not
 * touched.
 */
#include "support/ext_test_util.h"

static void expect_refused(sqlite3 *db, const char *sql, const char *fn)
{
    sqlite3_stmt *st = prepare(db, sql);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {}
    if (rc != SQLITE_AUTH)
        fail_msg("%s: code %d (%s), want SQLITE_AUTH\n  %s", sql, rc, sqlite3_errmsg(db), sql);
    char want[128];
    snprintf(want, sizeof want, "%s is turned off on this connection", fn);
    if (!strstr(sqlite3_errmsg(db), want)) fail_msg("'%s' does not say '%s'", sqlite3_errmsg(db), want);
    sqlite3_finalize(st);
}

static void test_off_refuses_admin_functions(void **state)
{
    (void)state;
    sqlite3 *db = open_db(), *other = open_db();
    load_tiny(db);
    exec_ok(db, "CREATE TABLE d(t, y); INSERT INTO d VALUES ('好', 'positive'), ('差', 'negative')");
    expect_text(db, "SELECT sentiment_config('admin_functions')", "on");
    expect_text(db, "SELECT sentiment_config('admin_functions', 'off')", "off");
    expect_text(db, "SELECT sentiment_config('admin_functions')", "off");
    expect_refused(db, "SELECT sentiment_load('x', '" TINY_MODEL "')", "sentiment_load()");
    expect_refused(db, "SELECT sentiment_save('x', 'tiny')", "sentiment_save()");
    expect_refused(db, "SELECT sentiment_save('tiny')", "sentiment_save()");
    expect_refused(db, "SELECT sentiment_use('x', 1)", "sentiment_use()");
    expect_refused(db, "SELECT sentiment_drop('x')", "sentiment_drop()");
    expect_refused(db, "SELECT sentiment_export('x', '/tmp/nowhere')", "sentiment_export()");
    expect_refused(db, "SELECT train('m', t, y) FROM d", "train()");
    expect_refused(db, "SELECT sentiment_int8_check(t, y, 'tiny') FROM d",
                   "sentiment_int8_check()");
    expect_refused(db, "SELECT sentiment_config('threads', 2)", "sentiment_config()");
    /* for good: 'on' is refused like any other change */
    expect_refused(db, "SELECT sentiment_config('admin_functions', 'on')", "sentiment_config()");
    expect_text(db, "SELECT sentiment_config('admin_functions')", "off");
    /* inside a classify source as well (classify's own error, carrying the
     * refusal) */
    expect_error(db, "SELECT * FROM classify('SELECT 1, sentiment_save(''x'', ''tiny'')', 'tiny')",
                 "sentiment_save() is turned off on this connection");
    /* what visitors may do still works, with the model loaded before */
    expect_text(db, "SELECT sentiment('这家酒店很好', 'tiny') IN ('positive', 'negative')", "1");
    expect_text(db, "SELECT count(*) FROM classify('d', 't', 'tiny')", "2");
    expect_text(db, "SELECT sentiment_config('threads')", "1");
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'sentiment%'"), 0);
    /* another connection is its own */
    expect_text(other, "SELECT sentiment_config('admin_functions')", "on");
    expect_text(other, "SELECT sentiment_config('threads', 2)", "2");
    sqlite3_close(db);
    sqlite3_close(other);
}

static void test_bad_values(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    expect_error(db, "SELECT sentiment_config('admin_functions', 'no')",
                 "admin_functions must be on or off, got 'no'");
    expect_error(db, "SELECT sentiment_config('admin_functions', 0)",
                 "admin_functions must be on or off, got '0'");
    expect_text(db, "SELECT sentiment_config('admin_functions', 'on')", "on");
    expect_text(db, "SELECT sentiment_config('admin_functions')", "on");
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_refuses_admin_functions),
        cmocka_unit_test(test_bad_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_ext_classify.c: the classify virtual table and the sentiment_batch
 * window function, compared row by row with sentiment(); their errors; and
 * interrupting a long run.
 */
#include "support/ext_test_util.h"

/* Rows where classify (with the given arguments) disagrees with the
 * scalar functions, or is missing / extra. */
static int64_t mismatches(sqlite3 *db, const char *classify_call)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT count(*) FROM t) - (SELECT count(*) FROM %s) + "
             "(SELECT count(*) FROM t JOIN %s AS c ON c.id = t.id "
             " WHERE c.label IS NOT sentiment(t.body, 'tiny') "
             "    OR (c.score IS NULL) <> (sentiment_score(t.body, 'tiny') IS NULL) "
             "    OR abs(c.score - sentiment_score(t.body, 'tiny')) > 1e-5 "
             "    OR (c.probs IS NULL) <> (t.body IS NULL OR trim(t.body) = '' OR t.body = char(12288)) "
             "    OR abs(json_extract(c.probs, '$.positive') - "
             "           json_extract(sentiment_probs(t.body, 'tiny'), '$.positive')) > 1e-5)",
             classify_call, classify_call);
    return q_int(db, sql);
}

static void test_classify_equals_sentiment(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    int n = make_reviews(db);
    assert_int_equal(q_int(db, "SELECT count(*) FROM classify('t', 'body', 'tiny')"), n);
    /* batch sizes 1, 7 and 64, as a hidden-column argument and as a setting */
    assert_int_equal(mismatches(db, "classify('t', 'body', 'tiny', 1)"), 0);
    assert_int_equal(mismatches(db, "classify('t', 'body', 'tiny', 7)"), 0);
    assert_int_equal(mismatches(db, "classify('t', 'body', 'tiny', 64)"), 0);
    exec_ok(db, "SELECT sentiment_config('batch_size', 7)");
    assert_int_equal(mismatches(db, "classify('t', 'body', 'tiny')"), 0);
    /* source order, ids that join back, NULL rows present with NULL label */
    expect_text(db, "SELECT group_concat(id) = (SELECT group_concat(id) FROM t) FROM classify('t', 'body', 'tiny')",
                "1");
    expect_text(db, "SELECT group_concat(id) FROM classify('t', 'body', 'tiny') WHERE label IS NULL", "2,3,4,7");
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'tiny') WHERE truncated = 0", "16");
    /* the hidden columns echo the arguments */
    expect_text(db, "SELECT source || '/' || \"column\" || '/' || model || '/' || batch_size "
                    "FROM classify('t', 'body', 'tiny', 5) LIMIT 1",
                "t/body/tiny/5");
    /* the default model through the one-argument path */
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    assert_int_equal(mismatches(db, "classify('t', 'body')"), 0);
    /* several CPU threads: one batch per thread runs concurrently (lanes) */
    exec_ok(db, "SELECT sentiment_config('threads', 3)");
    assert_int_equal(mismatches(db, "classify('t', 'body', 'tiny', 2)"), 0);
    assert_int_equal(mismatches(db, "classify('t', 'body', 'tiny', 1)"), 0);
    sqlite3_close(db);
}

static void test_select_source(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    assert_int_equal(mismatches(db, "classify('SELECT id, body FROM t', 'tiny')"), 0);
    /* a third column is an error, not silently ignored */
    expect_error(db, "SELECT * FROM classify('SELECT id, ''x'' AS label, body FROM t', 'tiny')",
                 "classify(): the source query must return two columns (id, text); it returns 3: "
                 "id, label, body");
    expect_text(db, "SELECT group_concat(id) FROM classify('SELECT id, body FROM t WHERE id > 17', 'tiny')",
                "18,19,20");
    /* any expression as the text; ids of any type */
    expect_text(db, "SELECT count(*) FROM classify('SELECT ''r'' || id, body || ''！'' FROM t', 'tiny') c "
                    "JOIN t ON c.id = 'r' || t.id WHERE c.label IS sentiment(t.body || '！', 'tiny')",
                "20");
    expect_text(db, "SELECT count(*) FROM classify('WITH x(a, b) AS (VALUES (1, ''好''), (2, ''差'')) "
                    "SELECT a, b FROM x', 'tiny')",
                "2");
    expect_text(db, "SELECT label IS sentiment('好', 'tiny') FROM classify('VALUES (1, ''好'')', 'tiny')", "1");
    sqlite3_close(db);
}

static void test_persistent_table(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    int n = make_reviews(db);
    exec_ok(db, "CREATE VIRTUAL TABLE labels USING classify(t, body, tiny)");
    assert_int_equal(q_int(db, "SELECT count(*) FROM labels"), n);
    assert_int_equal(mismatches(db, "labels"), 0);
    /* WHERE id = ? classifies just that row */
    int64_t before = debug_int(db, "$.connection.rows");
    char *label = q_text(db, "SELECT label FROM labels WHERE id = 5");
    assert_int_equal(debug_int(db, "$.connection.rows"), before + 1);
    char *want = q_text(db, "SELECT sentiment(body, 'tiny') FROM t WHERE id = 5");
    assert_string_equal(label, want);
    free(label);
    free(want);
    expect_text(db, "SELECT count(*) FROM labels WHERE id = 999", "0");
    /* a persistent table over a query, quoted */
    exec_ok(db, "CREATE VIRTUAL TABLE q USING classify('SELECT id, body FROM t WHERE id % 2 = 0', \"tiny\")");
    expect_text(db, "SELECT count(*) FROM q", "10");
    before = debug_int(db, "$.connection.rows");
    expect_text(db, "SELECT count(*) FROM q WHERE id = 6", "1");
    assert_int_equal(debug_int(db, "$.connection.rows"), before + 1);
    /* labelling a table offline */
    exec_ok(db, "CREATE TABLE review_labels AS SELECT id, label, score FROM classify('t', 'body', 'tiny')");
    expect_text(db, "SELECT count(*) FROM review_labels", "20");
    exec_ok(db, "DROP TABLE labels");
    expect_error(db, "CREATE VIRTUAL TABLE bad USING classify(a, b, c, d)",
                 "classify(): expected CREATE VIRTUAL TABLE name USING classify(source [, column] [, model]), got 4");
    sqlite3_close(db);
}

static void test_classify_errors(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    expect_error(db, "SELECT * FROM classify('nope', 'body', 'tiny')",
                 "classify(): cannot read column 'body' of table 'nope': no such table: nope");
    expect_error(db, "SELECT * FROM classify('t', 'bdy', 'tiny')",
                 "classify(): cannot read column 'bdy' of table 't': no such column: bdy");
    expect_error(db, "SELECT * FROM classify('t')", "classify(): expected classify('t', column [, model])");
    expect_error(db, "SELECT * FROM classify", "classify(): expected classify(source, column [, model])");
    expect_error(db, "SELECT * FROM classify(NULL, 'body')", "classify(): expected classify(source, column");
    expect_error(db, "SELECT * FROM classify('SELECT id FROM t', 'tiny')",
                 "classify(): the source query must return two columns (id, text); it returns 1");
    expect_error(db, "SELECT * FROM classify('SELECT id, bdy FROM t', 'tiny')",
                 "classify(): cannot run the source query: no such column: bdy");
    expect_error(db, "SELECT * FROM classify('WITH x AS (SELECT 1) DELETE FROM t', 'tiny')",
                 "classify(): the source query must only read");
    expect_text(db, "SELECT count(*) FROM t", "20");
    expect_error(db, "SELECT * FROM classify('SELECT id, body FROM t', 'body', 'tiny')",
                 "classify(): a SELECT source takes its text from its second column");
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    expect_error(db, "SELECT * FROM classify('t', 'body', 'hotle')",
                 "classify(): no model named 'hotle'; known: default, tiny");
    expect_error(db, "SELECT * FROM classify('t', 'body', 'tiny', 0)",
                 "classify(): batch_size must be an integer from 1 to 4096, got '0'");
    expect_error(db, "SELECT * FROM classify('t', 'body', 'tiny', 'x')", "got 'x'");
    exec_ok(db, "CREATE TABLE w(k TEXT PRIMARY KEY, v) WITHOUT ROWID");
    expect_error(db, "SELECT * FROM classify('w', 'v', 'tiny')", "a WITHOUT ROWID table needs a SELECT source");
    expect_text(db, "SELECT count(*) FROM classify('SELECT k, v FROM w', 'tiny')", "0");
    /* an empty source gives no rows */
    exec_ok(db, "CREATE TABLE empty(x)");
    expect_text(db, "SELECT count(*) FROM classify('empty', 'x', 'tiny')", "0");
    sqlite3_close(db);
}

static void test_classify_long_and_odd_values(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, body);"
                "INSERT INTO t(body) VALUES (replace(hex(zeroblob(50000)), '00', '好的')), (42), (4.5),"
                "(x'e5be88e5a5bd'), (x'fffe41'), (x''), ('正常的一句话');");
    assert_int_equal(mismatches(db, "classify('t', 'body', 'tiny', 3)"), 0);
    expect_text(db, "SELECT group_concat(truncated) FROM classify('t', 'body', 'tiny')", "1,0,0,0,0,0");
    sqlite3_close(db);
}

static void test_ernie_classify(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('emo', '" ERNIE_MODEL "')");
    make_reviews(db);
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'emo', 4) c JOIN t USING (id) "
                    "WHERE c.label IS NOT sentiment(t.body, 'emo') "
                    "OR abs(c.score - sentiment_score(t.body, 'emo')) > 1e-5",
                "0");
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'emo') WHERE "
                    "(SELECT count(*) FROM json_each(probs)) = 3",
                "16");
    sqlite3_close(db);
}

static void test_window_equals_sentiment(void **state)
{
    (void)state;
    static const char *const frames[] = {
        "ROWS BETWEEN CURRENT ROW AND 0 FOLLOWING",
        "ROWS BETWEEN CURRENT ROW AND 2 FOLLOWING",
        "ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING",
        "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
        "PARTITION BY id % 3 ORDER BY id ROWS BETWEEN CURRENT ROW AND 4 FOLLOWING",
    };
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    for (size_t i = 0; i < sizeof frames / sizeof *frames; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT sum(w IS NOT sentiment(body, 'tiny')) FROM "
                 "(SELECT body, sentiment_batch(body, 'tiny') OVER (%s) AS w FROM t)",
                 frames[i]);
        if (q_int(db, sql) != 0) fail_msg("window labels differ with %s", frames[i]);
    }
    /* the one-argument form uses default; a window over an expression */
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    expect_text(db, "SELECT sum(w IS NOT sentiment(x)) FROM (SELECT body || '!' AS x, sentiment_batch(body || '!') "
                    "OVER (ROWS BETWEEN CURRENT ROW AND 5 FOLLOWING) AS w FROM t)",
                "0");
    /* batching: 20 rows with a 4-row frame take 5 engine calls' worth of rows */
    int64_t before = debug_int(db, "$.connection.rows");
    exec_ok(db, "SELECT sentiment_batch(body) OVER (ROWS BETWEEN CURRENT ROW AND 3 FOLLOWING) FROM t");
    assert_int_equal(debug_int(db, "$.connection.rows"), before + 16); /* 16 non-blank texts */
    sqlite3_close(db);
}

static void test_window_misuse(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    expect_error(db, "SELECT sentiment_batch(body, 'tiny') FROM t", "sentiment_batch(): use it as a window function");
    expect_error(db, "SELECT sentiment_batch(body, 'tiny') OVER (ORDER BY id) FROM t",
                 "OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING)");
    expect_error(db, "SELECT sentiment_batch(body, 'tiny') OVER (ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) FROM t",
                 "sentiment_batch(): use it as a window function");
    expect_error(db, "SELECT sentiment_batch(body, 'hotle') OVER (ROWS BETWEEN CURRENT ROW AND 9 FOLLOWING) FROM t",
                 "sentiment_batch(): no model named 'hotle'");
    expect_error(db, "SELECT sentiment_batch(body, NULL) OVER (ROWS BETWEEN CURRENT ROW AND 9 FOLLOWING) FROM t",
                 "sentiment_batch(): model name is NULL");
    /* an empty input never allocates the aggregate context */
    expect_text(db, "SELECT count(*) FROM (SELECT sentiment_batch(body, 'tiny') OVER "
                    "(ROWS BETWEEN CURRENT ROW AND 9 FOLLOWING) FROM t WHERE 0)",
                "0");
    sqlite3_close(db);
}

/* interrupt_at(id, n): calls sqlite3_interrupt() when id reaches n. */
static void interrupt_at(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    if (sqlite3_value_int64(argv[0]) == sqlite3_value_int64(argv[1]))
        sqlite3_interrupt(sqlite3_context_db_handle(ctx));
    sqlite3_result_value(ctx, argv[0]);
}

static void test_interrupt(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_config('progress', 'off')");
    assert_int_equal(sqlite3_create_function(db, "interrupt_at", 2, SQLITE_UTF8, NULL, interrupt_at, NULL, NULL),
                     SQLITE_OK);
    exec_ok(db, "CREATE TABLE big(id INTEGER PRIMARY KEY, body);"
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) "
                "INSERT INTO big SELECT i, '第' || i || '条评论：还不错' FROM n;");
    int64_t before = debug_int(db, "$.connection.rows");
    expect_error(db, "CREATE TABLE out AS SELECT * FROM classify("
                     "'SELECT interrupt_at(id, 300), body FROM big', 'tiny', NULL, 64)",
                 "interrupt");
    /* the statement ends as any interrupted one does */
    assert_int_equal(sqlite3_errcode(db), SQLITE_INTERRUPT);
    assert_string_equal(sqlite3_errmsg(db), "interrupted");
    int64_t done = debug_int(db, "$.connection.rows") - before;
    /* stopped between batches: at most the batches read before row 300 */
    assert_true(done >= 256 && done <= 320);
    /* the database is as it was */
    expect_text(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'out'", "0");
    /* and the connection works afterwards */
    expect_text(db, "SELECT count(*) FROM classify('big', 'body', 'tiny', 500) WHERE id <= 1000", "1000");
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify_equals_sentiment),
        cmocka_unit_test(test_select_source),
        cmocka_unit_test(test_persistent_table),
        cmocka_unit_test(test_classify_errors),
        cmocka_unit_test(test_classify_long_and_odd_values),
        cmocka_unit_test(test_ernie_classify),
        cmocka_unit_test(test_window_equals_sentiment),
        cmocka_unit_test(test_window_misuse),
        cmocka_unit_test(test_interrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

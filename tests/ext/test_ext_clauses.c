/* test_ext_clauses.c: sentiment_clauses(text [, model]) (ext/clauses_vtab.c):
 * the split rule, spans that substr() gives back, each clause's
 * probabilities equal to sentiment_probs() of the clause alone, one row per
 * clause of every row in a join, and bad input.
 */
#include "support/ext_test_util.h"

/* The clauses of text, "|"-joined, each as substr(text, start + 1, end -
 * start) after checking it equals the clause column. */
static char *clauses_of(sqlite3 *db, const char *text)
{
    sqlite3_stmt *st = prepare(db, "SELECT clause, substr(?1, start + 1, \"end\" - start), idx "
                                   "FROM sentiment_clauses(?1)");
    sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
    char buf[2048] = "";
    int i = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *c = (const char *)sqlite3_column_text(st, 0);
        const char *s = (const char *)sqlite3_column_text(st, 1);
        if (strcmp(c, s)) fail_msg("clause '%s' but its span gives '%s' (%s)", c, s, text);
        assert_int_equal(sqlite3_column_int(st, 2), i++);
        if (*buf) strcat(buf, "|");
        strcat(buf, c);
    }
    sqlite3_finalize(st);
    return strdup(buf);
}

static void expect_clauses(sqlite3 *db, const char *text, const char *want)
{
    char *got = clauses_of(db, text);
    if (strcmp(got, want)) fail_msg("'%s': got '%s', want '%s'", text, got, want);
    free(got);
}

static void test_split_rule(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    expect_clauses(db, "屏幕清晰，电池耐用，就是有点重", "屏幕清晰|电池耐用|就是有点重");
    expect_clauses(db, "房间很干净。服务好！会再来吗？会；下次：还住这", "房间很干净|服务好|会再来吗|会|下次|还住这");
    expect_clauses(db, "Good room. Bad food! OK?", "Good room|Bad food|OK");
    /* digits keep their point, comma and colon */
    expect_clauses(db, "价格3.5元, 10:30到的, 1,000条评论", "价格3.5元|10:30到的|1,000条评论");
    /* the enumeration comma and quotes do not split */
    expect_clauses(db, "屏幕、电池都好，“推荐”", "屏幕、电池都好|“推荐”");
    /* runs of punctuation, spaces, line breaks, ideographic spaces */
    expect_clauses(db, "  太慢了！！！\n\n  \xe3\x80\x80饭凉了……  差评  ", "太慢了|饭凉了|差评");
    expect_clauses(db, "没有标点的一句话", "没有标点的一句话");
    expect_clauses(db, "。。，，!!", "");
    expect_clauses(db, "", "");
    sqlite3_close(db);
}

/* Character spans: a 4-byte character counts one, an invalid byte one. */
static void test_spans_in_characters(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    expect_text(db, "SELECT group_concat(start || '-' || \"end\", ' ') FROM "
                    "sentiment_clauses('\xf0\x9f\x98\x80好吃，\xff太贵了')",
                "0-3 4-8");
    expect_text(db, "SELECT length('\xf0\x9f\x98\x80好吃，\xff太贵了')", "8");
    sqlite3_close(db);
}

/* Each clause is classified as a text of its own: the same probabilities as
 * sentiment_probs(clause), in one batch. */
static void test_same_as_sentiment(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    static const char *const texts[] = {"屏幕清晰，电池耐用，就是有点重",
                                        "房间干净整洁。前台服务热情，下次还来！",
                                        "外卖送得太慢了，饭都凉了，差评"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        for (int m = 0; m < 2; m++) {
            char sql[512];
            snprintf(sql, sizeof sql,
                     "SELECT count(*), sum(probs = sentiment_probs(clause%s)), "
                     "sum(label = sentiment(clause%s)), sum(abs(score - sentiment_score(clause%s)) "
                     "< 1e-9) FROM sentiment_clauses('%s'%s)",
                     m ? ", 'tiny'" : "", m ? ", 'tiny'" : "", m ? ", 'tiny'" : "", texts[i],
                     m ? ", 'tiny'" : "");
            sqlite3_stmt *st = prepare(db, sql);
            assert_int_equal(sqlite3_step(st), SQLITE_ROW);
            int n = sqlite3_column_int(st, 0);
            assert_true(n >= 3);
            for (int k = 1; k < 4; k++) assert_int_equal(sqlite3_column_int(st, k), n);
            sqlite3_finalize(st);
        }
    }
    expect_text(db, "SELECT json_type(probs) FROM sentiment_clauses('好吃') LIMIT 1", "object");
    sqlite3_close(db);
}

/* One row per clause of every row of a table, joined laterally. */
static void test_join(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    int n = make_reviews(db);
    assert_true(n > 10);
    expect_text(db,
                "SELECT count(DISTINCT t.id) FROM t, sentiment_clauses(t.body) c",
                "16"); /* every row with text: NULL, empty and blank ones give none */
    expect_text(db,
                "SELECT group_concat(c.clause, '|') FROM t, sentiment_clauses(t.body) c "
                "WHERE t.id = 5",
                "外卖送得太慢了|饭都凉了|差评");
    sqlite3_close(db);
}

static void test_bad_input(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    expect_text(db, "SELECT count(*) FROM sentiment_clauses(NULL)", "0");
    expect_text(db, "SELECT count(*) FROM sentiment_clauses(42)", "1");
    expect_error(db, "SELECT * FROM sentiment_clauses", "expected a text argument");
    expect_error(db, "SELECT * FROM sentiment_clauses('好吃', 'nope')", "no model named 'nope'");
    expect_error(db, "SELECT * FROM sentiment_clauses('好吃', NULL)", "the model name is NULL");
    expect_error(db, "SELECT * FROM sentiment_clauses('好吃', CAST(x'610062' AS TEXT))",
                 "contains a NUL byte");
    exec_ok(db, "SELECT sentiment_load('enc', 'tests/fixtures/models/bert_encoder')");
    expect_error(db, "SELECT * FROM sentiment_clauses('好吃', 'enc')", "no classification head");
    /* a huge text of one clause per character: bounded by the engine's batching */
    exec_ok(db, "CREATE TABLE big(t); INSERT INTO big SELECT group_concat('好，', '') FROM "
                "(WITH RECURSIVE c(i) AS (VALUES(1) UNION ALL SELECT i + 1 FROM c WHERE i < 2000) "
                "SELECT i FROM c)");
    expect_text(db, "SELECT count(*) FROM big, sentiment_clauses(big.t)", "2000");
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_rule),
        cmocka_unit_test(test_spans_in_characters),
        cmocka_unit_test(test_same_as_sentiment),
        cmocka_unit_test(test_join),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

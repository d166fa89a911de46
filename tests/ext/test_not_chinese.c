/* test_not_chinese.c: text that is mostly not Chinese is classified as any
 * other (the contract: one label per row, no error) and counted in
 * sentiment_debug()'s connection.not_chinese, by sentiment(), classify and
 * sentiment_batch alike; Chinese text, mixed text that is mostly Chinese,
 * and text without letters are not counted.
 */
#include "support/ext_test_util.h"

static int64_t not_chinese(sqlite3 *db)
{
    return debug_int(db, "$.connection.not_chinese");
}

static void test_counted(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int counted;
    } cases[] = {
        {"The room was dirty and the staff were rude", 1},
        {"Отличный отель", 1},
        {"とても良いホテルでした", 1}, /* kana outnumber the Han characters */
        {"Das Zimmer war sauber", 1},
        {"这家酒店很干净，服务也很周到", 0},
        {"房间很干净 ok", 0},            /* 5 Han letters, 2 Latin */
        {"wifi很好用，房间很干净", 0},
        {"12345 !!! 😀", 0},             /* no letters */
        {"很好 but the breakfast was cold", 1},
    };
    sqlite3 *db = open_db();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t before = not_chinese(db);
        char *sql = sqlite3_mprintf("SELECT sentiment(%Q)", cases[i].text);
        char *label = q_text(db, sql);
        sqlite3_free(sql);
        assert_non_null(label); /* classified all the same */
        free(label);
        if (not_chinese(db) - before != cases[i].counted)
            fail_msg("'%s': counted %lld, want %d", cases[i].text,
                     (long long)(not_chinese(db) - before), cases[i].counted);
    }
    /* batched paths count the same texts */
    exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT);"
                "INSERT INTO t(body) VALUES ('Great hotel, very clean'), ('酒店很干净'), "
                "(NULL), ('   '), ('Terrible service'), ('服务很差')");
    int64_t before = not_chinese(db);
    expect_text(db, "SELECT count(label) FROM classify('t', 'body')", "4");
    assert_int_equal(not_chinese(db) - before, 2);
    before = not_chinese(db);
    expect_text(db, "SELECT count(w) FROM (SELECT sentiment_batch(body) OVER "
                    "(ROWS BETWEEN CURRENT ROW AND 9 FOLLOWING) AS w FROM t)",
                "4");
    assert_int_equal(not_chinese(db) - before, 2);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

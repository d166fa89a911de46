/* test_window_bounded.c: sentiment_batch() over a frame of any size does
 * about one batch of work per result, so a progress handler (Datasette's
 * time limit) stops a whole-partition frame soon after it asks to, with
 * SQLITE_INTERRUPT; and the labels stay sentiment()'s, row for row, for
 * every frame, batch size and thread count.
 */
#include <time.h>

#include "support/ext_test_util.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Stops the statement once `limit` seconds have passed since `start`. */
typedef struct {
    double start, limit;
    int calls;
} deadline;

static int past_deadline(void *arg)
{
    deadline *d = arg;
    d->calls++;
    return now_s() - d->start > d->limit;
}

static void make_rows(sqlite3 *db, const char *table, int n)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "CREATE TABLE %s(id INTEGER PRIMARY KEY, body TEXT);"
             "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) "
             "INSERT INTO %s SELECT i, CASE i %% 3 WHEN 0 THEN '第' || i || '条：很好' "
             "WHEN 1 THEN '太差了' || i ELSE '一般' END FROM n;",
             table, n, table);
    exec_ok(db, sql);
}

static void test_progress_handler_stops_unbounded_frame(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_config('progress', 'off')");
    make_rows(db, "big", 130000);
    int64_t before = debug_int(db, "$.connection.rows");
    deadline d = {now_s(), 0.2, 0};
    sqlite3_progress_handler(db, 1000, past_deadline, &d);
    char *err = NULL;
    int rc = sqlite3_exec(db,
                          "SELECT count(w) FROM (SELECT sentiment_batch(body) OVER "
                          "(ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS w FROM big)",
                          NULL, NULL, &err);
    double took = now_s() - d.start;
    sqlite3_progress_handler(db, 0, NULL, NULL);
    int64_t done = debug_int(db, "$.connection.rows") - before;
    print_message("stopped after %.3f s, %lld of 130000 rows classified, %d handler calls: %s\n",
                  took, (long long)done, d.calls, err ? err : "(no error)");
    assert_int_equal(rc, SQLITE_INTERRUPT);
    assert_non_null(err);
    assert_string_equal(err, "interrupted");
    sqlite3_free(err);
    /* asked to stop at 0.2 s; one batch later at most (a generous margin) */
    assert_true(took < 5.0);
    assert_true(done < 130000);
    /* the connection works afterwards */
    expect_text(db, "SELECT count(w) FROM (SELECT sentiment_batch(body) OVER "
                    "(ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS w FROM big "
                    "WHERE id <= 100)",
                "100");
    sqlite3_close(db);
}

static void test_interrupt_stops_unbounded_frame(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_config('progress', 'off')");
    exec_ok(db, "SELECT sentiment_config('batch_size', 4)");
    make_rows(db, "big", 3000);
    int64_t before = debug_int(db, "$.connection.rows");
    sqlite3_stmt *st = prepare(db, "SELECT sentiment_batch(body) OVER "
                                   "(ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) FROM big");
    int rows = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (++rows == 10) sqlite3_interrupt(db);
    assert_int_equal(rc, SQLITE_INTERRUPT);
    sqlite3_finalize(st);
    /* ten results of four-row batches, and at most one batch more */
    int64_t done = debug_int(db, "$.connection.rows") - before;
    assert_true(done >= 10 && done <= 16);
    sqlite3_close(db);
}

/* Rows where sentiment_batch over frame disagrees with sentiment(). */
static int64_t window_mismatches(sqlite3 *db, const char *frame)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT sum(w IS NOT sentiment(body)) + (count(*) <> (SELECT count(*) FROM t)) "
             "FROM (SELECT body, sentiment_batch(body) OVER (%s) AS w FROM t)",
             frame);
    return q_int(db, sql);
}

static void test_labels_unchanged(void **state)
{
    (void)state;
    static const char *const frames[] = {
        "ROWS BETWEEN CURRENT ROW AND 0 FOLLOWING",
        "ROWS BETWEEN CURRENT ROW AND 6 FOLLOWING",
        "ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING",
        "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
        "PARTITION BY id % 4 ORDER BY id ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING",
        "PARTITION BY id % 3 ORDER BY id ROWS BETWEEN CURRENT ROW AND 9 FOLLOWING",
    };
    static const int batch_sizes[] = {1, 7, 32};
    static const int threads[] = {1, 2};
    sqlite3 *db = open_db();
    make_rows(db, "t", 300);
    exec_ok(db, "INSERT INTO t(body) VALUES (NULL), (''), ('  '), ('房间很干净'), (NULL)");
    int64_t texts = q_int(db, "SELECT count(*) FROM t WHERE trim(body) <> ''");
    for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT sentiment_config('threads', %d)", threads[ti]);
        exec_ok(db, sql);
        for (size_t b = 0; b < sizeof batch_sizes / sizeof *batch_sizes; b++) {
            snprintf(sql, sizeof sql, "SELECT sentiment_config('batch_size', %d)", batch_sizes[b]);
            exec_ok(db, sql);
            for (size_t f = 0; f < sizeof frames / sizeof *frames; f++) {
                int64_t before = debug_int(db, "$.connection.rows");
                int64_t bad = window_mismatches(db, frames[f]);
                /* every text classified once (sentiment() each row once too) */
                int64_t classified = debug_int(db, "$.connection.rows") - before;
                if (bad != 0 || classified != 2 * texts)
                    fail_msg("threads %d, batch_size %d, %s: %lld rows differ, %lld classified "
                             "for %lld texts",
                             threads[ti], batch_sizes[b], frames[f], (long long)bad,
                             (long long)classified, (long long)texts);
            }
        }
    }
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_labels_unchanged),
        cmocka_unit_test(test_interrupt_stops_unbounded_frame),
        cmocka_unit_test(test_progress_handler_stops_unbounded_frame),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

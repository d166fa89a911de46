/* test_ext_threads.c: several threads, each with its own connection,
 * registering the same model and classifying at the same time, give the
 * results one thread gives, with one model load in total.
 *
 * A separate program so that the process-wide cache starts empty.
 */
#include "support/ext_test_util.h"

#include <pthread.h>

#define N_THREADS 4
#define N_ROWS 200

typedef struct job {
    pthread_barrier_t *start;
    char *labels;   /* group_concat of classify labels */
    char *scalar;   /* group_concat of sentiment() labels */
    char *window;   /* group_concat of sentiment_batch labels */
    double score_sum;
    int rc;
} job;

static const char k_setup[] =
    "CREATE TABLE t(id INTEGER PRIMARY KEY, body);"
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) "
    "INSERT INTO t SELECT i, CASE i % 5 WHEN 0 THEN NULL WHEN 1 THEN '房间' || i || '号很干净' "
    "WHEN 2 THEN '外卖送了' || i || '分钟，太慢了' WHEN 3 THEN '' ELSE substr('质量不错，物流也快，好评！', 1, i % 13) END "
    "FROM n;";

/* Runs in each thread; no cmocka asserts here (they are not thread-safe). */
static char *text_of(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) != SQLITE_NULL)
        out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

static void *worker(void *arg)
{
    job *j = arg;
    sqlite3 *db = NULL;
    j->rc = 1;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) goto end;
    if (sqlite3_exec(db, k_setup, NULL, NULL, NULL) != SQLITE_OK) goto end;
    if (sqlite3_exec(db, "SELECT sentiment_config('threads', 1)", NULL, NULL, NULL) != SQLITE_OK) goto end;
    pthread_barrier_wait(j->start);
    if (sqlite3_exec(db, "SELECT sentiment_load('tiny', '" TINY_MODEL "')", NULL, NULL, NULL) != SQLITE_OK)
        goto end;
    j->labels = text_of(db, "SELECT group_concat(coalesce(label, '-')) FROM classify('t', 'body', 'tiny', 16)");
    j->scalar = text_of(db, "SELECT group_concat(coalesce(sentiment(body, 'tiny'), '-')) FROM t");
    j->window = text_of(db, "SELECT group_concat(coalesce(w, '-')) FROM (SELECT sentiment_batch(body, 'tiny') "
                            "OVER (ROWS BETWEEN CURRENT ROW AND 31 FOLLOWING) AS w FROM t)");
    char *s = text_of(db, "SELECT sum(score) FROM classify('t', 'body', 'tiny')");
    j->score_sum = s ? atof(s) : -1;
    free(s);
    j->rc = j->labels && j->scalar && j->window ? 0 : 1;
end:
    sqlite3_close(db);
    return NULL;
}

static void test_threads_share_one_model(void **state)
{
    (void)state;
    pthread_t th[N_THREADS];
    job jobs[N_THREADS];
    pthread_barrier_t start;

    sqlite3_auto_extension((void (*)(void))sqlite3_sentiment_init);
    sqlite3 *db = open_db();
    assert_int_equal(debug_int(db, "$.cache.loads"), 0);

    pthread_barrier_init(&start, NULL, N_THREADS);
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < N_THREADS; i++) {
        jobs[i].start = &start;
        assert_int_equal(pthread_create(&th[i], NULL, worker, &jobs[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);

    /* one load in total, however many connections asked at once */
    assert_int_equal(debug_int(db, "$.cache.loads"), 1);

    /* the same answers as this thread alone */
    exec_ok(db, k_setup);
    load_tiny(db);
    char *want = q_text(db, "SELECT group_concat(coalesce(sentiment(body, 'tiny'), '-')) FROM t");
    double want_sum = q_double(db, "SELECT sum(sentiment_score(body, 'tiny')) FROM t");
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(jobs[i].rc, 0);
        assert_string_equal(jobs[i].labels, want);
        assert_string_equal(jobs[i].scalar, want);
        assert_string_equal(jobs[i].window, want);
        assert_true(jobs[i].score_sum > want_sum - 1e-3 && jobs[i].score_sum < want_sum + 1e-3);
        free(jobs[i].labels);
        free(jobs[i].scalar);
        free(jobs[i].window);
    }
    free(want);
    assert_int_equal(debug_int(db, "$.cache.loads"), 1);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_one_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_ext_train_oom.c: every SQLite allocation of train(),
 * sentiment_evaluate(), sentiment_use() and sentiment_training can fail.
 *
 * As test_ext_oom.c: a script runs with the Nth SQLite allocation failing,
 * N = 1, 2, ... until it runs with no failure. No run may crash or leak,
 * the connection must work afterwards, and a model is stored only with
 * its whole training log (one savepoint). OOM_MAX=N stops after N runs.
 */
#include "support/oom_test_util.h"

/* Trained from scratch with a very small shape (a small blob, so each run
 * is cheap), then from the tiny fixture model, where allocations past the
 * first K_DENSE are failed one in K_STRIDE (OOM_ALL=1: every one). */
#define SCRATCH "'{\"base\":\"none\",\"layers\":1,\"hidden\":8,\"heads\":2,\"intermediate\":8," \
                "\"max_length\":16,\"epochs\":2,\"vocab_min_count\":1,\"batch_size\":4}'"
static const struct {
    const char *sql;
    int sparse; /* 1: dense then strided */
} k_script[] = {
    {"SELECT train('s', body, y, " SCRATCH ") FROM d", 0},
    {"SELECT train('s', body, y, '{\"base\":\"s\",\"epochs\":1,\"valid_fraction\":0}') FROM d", 0},
    {"SELECT sentiment_use('s', 1)", 0},
    {"SELECT train('m', body, y, '{\"base\":\"tiny\",\"epochs\":1,\"batch_size\":8}') FROM d", 1},
    {"SELECT sentiment_evaluate(body, y, 'tiny') FROM d", 0},
    {"SELECT sentiment_evaluate(body, y) FROM d", 0},
    {"SELECT count(*) FROM sentiment_training", 0},
    {"SELECT train('m', body, 'one', '{\"base\":\"tiny\"}') FROM d", 0},
    {"SELECT train('m', body, y, '{\"base\":\"tiny\",\"nope\":1}') FROM d", 0},
};
#define K_DENSE 200
#define K_STRIDE 25

/* Stored models are whole: each has its training log (restored copies
 * excepted) and parses. */
static void check_store(sqlite3 *db)
{
    if (!q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_model_store'")) return;
    int have_log = (int)q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_train_log'");
    int64_t trained = q_int(db, "SELECT count(*) FROM sentiment_model_store "
                                "WHERE json_extract(metrics, '$.restored_from') IS NULL");
    if (trained) {
        assert_true(have_log);
        assert_int_equal(q_int(db, "SELECT count(*) FROM sentiment_model_store AS s "
                                   "WHERE json_extract(metrics, '$.restored_from') IS NULL AND NOT EXISTS "
                                   "(SELECT 1 FROM sentiment_train_log AS l WHERE l.model = s.name "
                                   "AND l.version = s.version AND l.kind = 'epoch')"),
                         0);
    }
    expect_text(db, "SELECT count(*) FROM sentiment_models WHERE source = 'database' AND labels IS NULL", "0");
}

/* Rows in the model store and the training log. */
static int64_t stored_rows(sqlite3 *db)
{
    int64_t n = 0;
    if (q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_model_store'"))
        n += q_int(db, "SELECT count(*) FROM sentiment_model_store");
    if (q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_train_log'"))
        n += q_int(db, "SELECT count(*) FROM sentiment_train_log");
    return n;
}

/* Each statement runs with allocation n failing, n = 1, 2, ..., on one
 * connection, until it runs with no failure: a failed run must leave the
 * database as it was, so the next run starts from the same state. */
static void test_every_allocation_can_fail(void **state)
{
    (void)state;
    int runs = 0;

    oom_install();

    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    exec_ok(db, "CREATE TABLE d(body, y);"
                "INSERT INTO d VALUES ('很好很满意', 'positive'), ('太差了', 'negative'), "
                "('推荐', 'positive'), ('失望', 'negative'), ('干净舒服', 'positive'), "
                "('又脏又吵', 'negative'), ('划算', 'positive'), ('后悔', 'negative'), "
                "(NULL, 'positive'), ('还行', NULL);");
    for (size_t i = 0; i < sizeof k_script / sizeof *k_script; i++) {
        int step = 1;
        for (int n = 1;; n += step) {
            if (k_script[i].sparse && n >= K_DENSE && !getenv("OOM_ALL")) step = K_STRIDE;
            int64_t before = stored_rows(db);
            g_failed = 0;
            g_countdown = n;
            char *emsg = NULL;
            int rc = sqlite3_exec(db, k_script[i].sql, NULL, NULL, &emsg);
            /* an error from train() itself: nothing was written (a failure
             * after it returned, in the enclosing statement, comes after
             * the model was committed) */
            int from_train = rc != SQLITE_OK && emsg && !strncmp(emsg, "train():", 8);
            sqlite3_free(emsg);
            g_countdown = 0;
            runs++;
            /* the connection still works and the store is consistent */
            expect_text(db, "SELECT sentiment('很好', 'tiny') IN ('negative', 'positive')", "1");
            check_store(db);
            if (from_train) assert_int_equal(stored_rows(db), before);
            if (!g_failed || (getenv("OOM_MAX") && n >= atoi(getenv("OOM_MAX")))) break;
        }
    }
    sqlite3_close(db);
    print_message("%d runs, each with one allocation failing\n", runs);
    assert_true(runs > 100);
    oom_restore();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_allocation_can_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

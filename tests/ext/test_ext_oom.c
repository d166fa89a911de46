/* test_ext_oom.c: every SQLite allocation the extension makes can fail.
 *
 * Runs a script that touches every function and both virtual tables once
 * with the Nth SQLite allocation failing, for N = 1, 2, ... until the
 * script runs with no failure. Each run may end in an error ("out of
 * memory" or a message); none may crash or leak (make asan, valgrind), and
 * the connection must work afterwards. The model library allocates with
 * malloc and is not covered here. OOM_MAX=N in the environment stops after
 * N runs (for a quick look under valgrind).
 */
#include "support/oom_test_util.h"

static const char *const k_script[] = {
    "SELECT sentiment('房间很干净', 'tiny')",
    "SELECT sentiment_score('送餐太慢', 'tiny'), sentiment_probs('一般', 'tiny')",
    "SELECT sentiment_tokens('酒店 hello', 'tiny')",
    "SELECT count(*) FROM classify('t', 'body', 'tiny', 3)",
    "SELECT count(*) FROM classify('SELECT id, body FROM t WHERE id < 4', 'tiny')",
    "SELECT count(w) FROM (SELECT sentiment_batch(body, 'tiny') OVER "
    "(ROWS BETWEEN CURRENT ROW AND 2 FOLLOWING) AS w FROM t)",
    "SELECT count(*) FROM sentiment_models",
    "SELECT sentiment_save('hotel', 'tiny')",
    "SELECT sentiment('好', 'hotel')",
    "SELECT sentiment_config('batch_size', 5), sentiment_config('device')",
    "SELECT sentiment_device(), sentiment_version(), sentiment_debug()",
    "SELECT sentiment('x', 'nope')",
};

static void test_every_allocation_can_fail(void **state)
{
    (void)state;
    int runs = 0;

    oom_install();

    for (int n = 1;; n++) {
        sqlite3 *db = open_db();
        load_tiny(db);
        exec_ok(db, "SELECT sentiment_config('threads', 1)");
        exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, body);"
                    "INSERT INTO t(body) VALUES ('很好'), (NULL), ('太差了'), (''), ('还行吧');");
        g_failed = 0;
        g_countdown = n;
        for (size_t i = 0; i < sizeof k_script / sizeof *k_script; i++)
            sqlite3_exec(db, k_script[i], NULL, NULL, NULL);
        g_countdown = 0;
        /* the connection still works */
        expect_text(db, "SELECT sentiment('很好', 'tiny') IN ('negative', 'positive')", "1");
        sqlite3_close(db);
        runs++;
        if (!g_failed || (getenv("OOM_MAX") && n >= atoi(getenv("OOM_MAX")))) break;
    }
    print_message("script ran with allocation 1..%d failing\n", runs - 1);
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

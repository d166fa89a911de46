/* test_ext_errors.c: the error convention of ext/ (ext/errors.c, written
 * down in ext/errors.h): sx_fail's message form and codes, the old
 * message freed when a new one replaces it (make asan checks the frees),
 * a NULL errmsg, every model/ status through sx_rc_from_sm and sx_from_sm,
 * and, with each of sx_fail's allocations failing in turn, SQLITE_NOMEM
 * with no message. Then one message through an SQL function, to show an
 * entry point still hands it over whole.
 *
 * ext/sqlite_api.h routes sqlite3_* calls through the extension's API
 * table, which opening a connection with the extension sets (setup).
 */
#include "support/oom_test_util.h"

#include "core/errors.h"
#include "ext/errors.h"

/* From here on sqlite3_* go through sqlite3_api: set by loading. */
static int setup(void **state)
{
    (void)state;
    sqlite3 *db = open_db_defaults(":memory:");
    sqlite3_close(db);
    return sqlite3_api ? 0 : -1;
}

static void test_fail_formats_fn_and_message(void **state)
{
    (void)state;
    char *m = NULL;
    int rc = sx_fail(&m, SQLITE_ERROR, "sentiment()", "no model named '%s'; known: %s", "hotle",
                     "default, hotel");
    assert_int_equal(rc, SQLITE_ERROR);
    assert_string_equal(m, "sentiment(): no model named 'hotle'; known: default, hotel");
    sqlite3_free(m);

    /* no fn: the message alone, as storage.c writes it for its caller */
    m = NULL;
    rc = sx_fail(&m, SQLITE_BUSY, NULL, "cannot read %s: %s", "sentiment_model_store",
                 "database is locked");
    assert_int_equal(rc, SQLITE_BUSY);
    assert_string_equal(m, "cannot read sentiment_model_store: database is locked");
    sqlite3_free(m);

    /* the code comes back as given, whatever it is */
    const int codes[] = {SQLITE_NOMEM, SQLITE_INTERRUPT, SQLITE_NOTFOUND, SQLITE_READONLY,
                         SQLITE_LOCKED, SQLITE_BUSY_SNAPSHOT, SQLITE_IOERR};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        m = NULL;
        assert_int_equal(sx_fail(&m, codes[i], "train()", "x%d", (int)i), codes[i]);
        char want[32];
        snprintf(want, sizeof want, "train(): x%d", (int)i);
        assert_string_equal(m, want);
        sqlite3_free(m);
    }
}

static void test_fail_replaces_the_old_message(void **state)
{
    (void)state;
    char *m = NULL;
    /* an inner message, prefixed with the function's name by passing it
     * as an argument: formatted before it is freed; a '%' in it is text */
    assert_int_equal(sx_fail(&m, SQLITE_ERROR, NULL, "cannot store model '%s': %s", "a%sb",
                             "disk is 100% full"),
                     SQLITE_ERROR);
    assert_string_equal(m, "cannot store model 'a%sb': disk is 100% full");
    assert_int_equal(sx_fail(&m, SQLITE_FULL, "sentiment_save()", "%s", m), SQLITE_FULL);
    assert_string_equal(m, "sentiment_save(): cannot store model 'a%sb': disk is 100% full");
    /* an unrelated message replaces it; the old one is freed (asan) */
    assert_int_equal(sx_fail(&m, SQLITE_ERROR, "classify()", "second"), SQLITE_ERROR);
    assert_string_equal(m, "classify(): second");
    sqlite3_free(m);
    /* an empty message is a message, not out of memory */
    m = NULL;
    assert_int_equal(sx_fail(&m, SQLITE_ERROR, NULL, "%s", ""), SQLITE_ERROR);
    assert_non_null(m);
    assert_string_equal(m, "");
    sqlite3_free(m);
}

static void test_fail_without_errmsg(void **state)
{
    (void)state;
    assert_int_equal(sx_fail(NULL, SQLITE_BUSY, "train()", "locked %d", 1), SQLITE_BUSY);
    assert_int_equal(sx_fail(NULL, SQLITE_NOMEM, NULL, "out of memory"), SQLITE_NOMEM);
    assert_int_equal(sx_from_sm(SM_ERR_FORMAT, "sentiment_load()", "bad", NULL), SQLITE_ERROR);
}

static void test_rc_from_sm_maps_every_status(void **state)
{
    (void)state;
    static const struct {
        int sm, want;
    } k_map[] = {
        {SM_OK, SQLITE_OK},
        {SM_ERR_NOMEM, SQLITE_NOMEM},
        {SM_ERR_IO, SQLITE_ERROR},
        {SM_ERR_FORMAT, SQLITE_ERROR},
        {SM_ERR_INVALID, SQLITE_ERROR},
        {SM_ERR_UNSUPPORTED, SQLITE_ERROR},
        {SM_ERR_INTERRUPTED, SQLITE_INTERRUPT},
        {SM_ERR_DEVICE, SQLITE_ERROR},
        {SM_ERR_DEVICE + 1, SQLITE_ERROR}, /* a status added later: still an error */
        {-1, SQLITE_ERROR},
    };
    for (size_t i = 0; i < sizeof k_map / sizeof *k_map; i++) {
        if (sx_rc_from_sm(k_map[i].sm) != k_map[i].want)
            fail_msg("sx_rc_from_sm(%d) = %d, want %d", k_map[i].sm,
                     sx_rc_from_sm(k_map[i].sm), k_map[i].want);
    }
}

static void test_from_sm_message(void **state)
{
    (void)state;
    char *m = NULL;
    char err[SM_ERR_MAX];
    sm_error(err, SM_ERR_FORMAT, "tensor '%s': expected shape [%d], got [%d]", "w", 4, 5);
    assert_int_equal(sx_from_sm(SM_ERR_FORMAT, "sentiment_load()", err, &m), SQLITE_ERROR);
    assert_string_equal(m, "sentiment_load(): tensor 'w': expected shape [4], got [5]");

    /* the code follows the status; the message replaces the old one */
    assert_int_equal(sx_from_sm(SM_ERR_NOMEM, "train()", "out of memory caching", &m),
                     SQLITE_NOMEM);
    assert_string_equal(m, "train(): out of memory caching");
    assert_int_equal(sx_from_sm(SM_ERR_INTERRUPTED, NULL, "stopped", &m), SQLITE_INTERRUPT);
    assert_string_equal(m, "stopped");

    /* an empty or NULL err still says something */
    assert_int_equal(sx_from_sm(SM_ERR_NOMEM, "sentiment()", "", &m), SQLITE_NOMEM);
    assert_string_equal(m, "sentiment(): out of memory");
    assert_int_equal(sx_from_sm(SM_ERR_INTERRUPTED, "train()", NULL, &m), SQLITE_INTERRUPT);
    assert_string_equal(m, "train(): interrupted");
    assert_int_equal(sx_from_sm(SM_ERR_DEVICE, "classify()", "", &m), SQLITE_ERROR);
    assert_string_equal(m, "classify(): failed");

    /* SM_OK: success, *errmsg left as it was */
    char *before = m;
    assert_int_equal(sx_from_sm(SM_OK, "sentiment()", "ignored", &m), SQLITE_OK);
    assert_ptr_equal(m, before);
    sqlite3_free(m);
}

/* Fails each allocation sx_fail makes in turn: every run that hit a
 * failure returns SQLITE_NOMEM with *errmsg NULL (the old message freed),
 * and the run with none returns the code and the whole message. */
static void check_fail_under_oom(const char *fn, int sm)
{
    int failing_runs = 0;
    oom_install();
    for (int n = 1;; n++) {
        char *m = sqlite3_mprintf("old message");
        assert_non_null(m);
        g_failed = 0;
        g_countdown = n;
        int rc = sm ? sx_from_sm(sm, fn, "tensor 'w' is truncated", &m)
                    : sx_fail(&m, SQLITE_BUSY, fn, "cannot store model '%s': %s", "hotel",
                              "database is locked");
        g_countdown = 0;
        if (!g_failed) {
            assert_int_equal(rc, sm ? SQLITE_ERROR : SQLITE_BUSY);
            assert_non_null(m);
            assert_string_equal(m, sm ? "sentiment_load(): tensor 'w' is truncated"
                                   : fn ? "train(): cannot store model 'hotel': database is locked"
                                        : "cannot store model 'hotel': database is locked");
            sqlite3_free(m);
            break;
        }
        failing_runs++;
        assert_int_equal(rc, SQLITE_NOMEM);
        assert_null(m);
        assert_true(n < 10);
    }
    oom_restore();
    print_message("sx_%s (fn %s): %d allocation%s, each failing gave SQLITE_NOMEM and no message\n",
                  sm ? "from_sm" : "fail", fn ? fn : "NULL", failing_runs,
                  failing_runs == 1 ? "" : "s");
    /* the message, then "fn: " and it; without fn the message only */
    assert_int_equal(failing_runs, fn ? 2 : 1);
}

static void test_out_of_memory_gives_nomem_without_message(void **state)
{
    (void)state;
    check_fail_under_oom("train()", 0);
    check_fail_under_oom(NULL, 0);
    check_fail_under_oom("sentiment_load()", SM_ERR_FORMAT);
}

/* An entry point hands the message over whole: the form the functions'
 * messages have in the README (fn, the bad value, what is known). */
static void test_entry_point_reports_the_message(void **state)
{
    (void)state;
    sqlite3 *db = open_db_defaults(":memory:");
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT sentiment_config('threads', 'many')", -1,
                                        &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ERROR);
    assert_string_equal(sqlite3_errmsg(db), "sentiment_config(): threads must be an integer "
                                            "from 0 (all cores) to 1024, got 'many'");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_formats_fn_and_message),
        cmocka_unit_test(test_fail_replaces_the_old_message),
        cmocka_unit_test(test_fail_without_errmsg),
        cmocka_unit_test(test_rc_from_sm_maps_every_status),
        cmocka_unit_test(test_from_sm_message),
        cmocka_unit_test(test_out_of_memory_gives_nomem_without_message),
        cmocka_unit_test(test_entry_point_reports_the_message),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

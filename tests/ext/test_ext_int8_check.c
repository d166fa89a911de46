/* test_ext_int8_check.c: sentiment_int8_check(text, label [, model
 * [, labels]]) (ext/evaluate.c, runtime/int8_measure.c): its figures equal
 * what sentiment_evaluate() and sentiment() give under precision fp32 and
 * int8 on the same rows; the check it measures is what precision auto
 * follows from then on (auto's probabilities switch to int8's and back),
 * what sentiment_models.cpu_precision says, and what sentiment_save()
 * stores for a model loaded from a directory; bad input (no rows, NULL
 * texts, unknown model or labels, a model without a head, an interrupt,
 * admin functions off, a view) is an error or a documented result and
 * leaves the check as it was.
 *
 * The data are generated (support/rare_rows_test_util.h): a wide part
 * learns their labels in seconds ("epochs": 0).
 */
#include "support/ext_test_util.h"
#include "support/cpu_precision_test_util.h"
#include "support/rare_rows_test_util.h"

#include <math.h>
#include <string.h>

#include "cpu/backend_cpu.h"

static void set_precision(sqlite3 *db, const char *precision)
{
    char sql[100];
    snprintf(sql, sizeof sql, "SELECT sentiment_config('precision', '%s')", precision);
    exec_ok(db, sql);
}

/* Every row's probabilities as one text, under the given precision. */
static char *probs_under(sqlite3 *db, const char *model, const char *precision)
{
    char sql[200];
    set_precision(db, precision);
    snprintf(sql, sizeof sql, "SELECT group_concat(sentiment_probs(t, '%s'), ' ') FROM d", model);
    char *s = q_text(db, sql);
    assert_non_null(s);
    set_precision(db, "auto");
    return s;
}

/* A trained model 'q' with no INT8 check, and the table d it learned.
 * Each test its own seed: the cache is the process's, and equal weights
 * are one cached model, which carries the check measured last. */
static sqlite3 *trained_unchecked(int n, unsigned seed)
{
    sqlite3 *db = open_db();
    load_tiny(db);
    make_rare(db, "d", n, seed);
    char *r = q_text(db, "SELECT train('q', t, y, '{\"base\":\"tiny\",\"epochs\":0,"
                         "\"wide\":true,\"int8_check\":false}') FROM d");
    assert_non_null(r);
    free(r);
    return db;
}

static char *check_of(sqlite3 *db, const char *sql)
{
    char *r = q_text(db, sql);
    assert_non_null(r);
    return r;
}

/* The figures against the SQL functions: accuracy_fp32 and accuracy_int8
 * are sentiment_evaluate()'s accuracy under fp32 and int8, agreement the
 * share of rows where sentiment() agrees under both. */
static void test_figures_match_evaluate(void **state)
{
    (void)state;
    if (!backend_cpu_pack_native(BACKEND_PACK_INT8)) {
        /* the check runs anywhere (plain C), precision 'int8' does not */
        print_message("skipped: this CPU has no AVX512-VNNI, precision int8 cannot run\n");
        return;
    }
    sqlite3 *db = trained_unchecked(300, 7);
    /* a row the model gets wrong under both, to make accuracy < 1 */
    exec_ok(db, "UPDATE d SET y = CASE y WHEN 'positive' THEN 'negative' ELSE 'positive' END "
                "WHERE rowid % 10 = 0");
    char *r = check_of(db, "SELECT sentiment_int8_check(t, y, 'q') FROM d");
    assert_int_equal((int)jnum(db, r, "$.rows"), 300);
    assert_int_equal((int)jnum(db, r, "$.skipped"), 0);
    set_precision(db, "fp32");
    double acc32 = q_double(db, "SELECT json_extract(sentiment_evaluate(t, y, 'q'), "
                                "'$.accuracy') FROM d");
    exec_ok(db, "CREATE TEMP TABLE l32 AS SELECT rowid AS id, sentiment(t, 'q') AS l FROM d");
    set_precision(db, "int8");
    double acc8 = q_double(db, "SELECT json_extract(sentiment_evaluate(t, y, 'q'), "
                               "'$.accuracy') FROM d");
    exec_ok(db, "CREATE TEMP TABLE l8 AS SELECT rowid AS id, sentiment(t, 'q') AS l FROM d");
    set_precision(db, "auto");
    double agree = q_double(db, "SELECT avg(l32.l = l8.l) FROM l32 JOIN l8 USING (id)");
    assert_true(acc32 > 0.5 && acc32 < 1);
    assert_true(fabs(jnum(db, r, "$.accuracy_fp32") - acc32) < 1e-5);
    assert_true(fabs(jnum(db, r, "$.accuracy_int8") - acc8) < 1e-5);
    assert_true(fabs(jnum(db, r, "$.agreement") - agree) < 1e-5);
    free(r);
    sqlite3_close(db);
}

/* Auto follows the last check measured: fp32 before (not checked), int8
 * after a passing check, fp32 again after one on too few rows; the
 * connection's cached workspace does not keep the old choice. */
static void test_auto_follows_the_measured_check(void **state)
{
    (void)state;
    sqlite3 *db = trained_unchecked(300, 11);
    int native = backend_cpu_pack_native(BACKEND_PACK_INT8);
    char *cp = cpu_precision(db, "q");
    assert_true(starts(cp, "fp32: int8 not checked for this model"));
    free(cp);
    char *f32 = probs_under(db, "q", "fp32");
    char *a = probs_under(db, "q", "auto"); /* warms the workspace with fp32 weights */
    assert_int_equal(strcmp(a, f32), 0);
    free(a);

    char *r = check_of(db, "SELECT sentiment_int8_check(t, y, 'q') FROM d");
    assert_int_equal((int)jnum(db, r, "$.rows"), 300);
    assert_true(jnum(db, r, "$.agreement") >= 0.99);
    assert_int_equal((int)jnum(db, r, "$.auto"), 1);
    free(r);
    cp = cpu_precision(db, "q");
    assert_int_equal(starts(cp, "int8: held-out accuracy"), native);
    assert_non_null(strstr(cp, "of 300 rows"));
    free(cp);
    if (native) {
        char *i8 = probs_under(db, "q", "int8");
        assert_int_not_equal(strcmp(i8, f32), 0); /* the test can tell them apart */
        a = probs_under(db, "q", "auto");
        assert_int_equal(strcmp(a, i8), 0);
        free(a);
        free(i8);
    }

    r = check_of(db, "SELECT sentiment_int8_check(t, y, 'q') FROM (SELECT * FROM d LIMIT 10)");
    assert_int_equal((int)jnum(db, r, "$.rows"), 10);
    assert_int_equal((int)jnum(db, r, "$.auto"), 0);
    free(r);
    cp = cpu_precision(db, "q");
    assert_true(starts(cp, "fp32: too few rows to judge int8"));
    free(cp);
    a = probs_under(db, "q", "auto");
    assert_int_equal(strcmp(a, f32), 0);
    free(a);
    free(f32);
    sqlite3_close(db);
}

/* A model loaded from a directory: the check holds for the loaded model
 * and sentiment_save() stores it in the saved config.json. */
static void test_directory_model_check_saved(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    make_rare(db, "d", 240, 3);
    char *cp = cpu_precision(db, "tiny");
    assert_true(starts(cp, "fp32: int8 not checked for this model"));
    free(cp);
    char *r = check_of(db, "SELECT sentiment_int8_check(t, y, 'tiny') FROM d");
    assert_int_equal((int)jnum(db, r, "$.rows"), 240);
    cp = cpu_precision(db, "tiny");
    assert_non_null(strstr(cp, "of 240 rows"));
    free(cp);
    exec_ok(db, "SELECT sentiment_save('tiny_saved', 'tiny')");
    assert_int_equal(q_int(db, "SELECT json_extract(config, '$.int8_check.rows') FROM "
                               "sentiment_model_store WHERE name = 'tiny_saved'"),
                     240);
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT abs(json_extract(config, '$.int8_check.accuracy_int8') - %.17g) < 1e-6 "
             "FROM sentiment_model_store WHERE name = 'tiny_saved'",
             jnum(db, r, "$.accuracy_int8"));
    assert_int_equal(q_int(db, sql), 1);
    free(r);
    sqlite3_close(db);
}

static int stop_now(void *arg)
{
    (void)arg;
    return 1;
}

/* Bad input: documented results or clear errors, and the check as it was. */
static void test_bad_input(void **state)
{
    (void)state;
    sqlite3 *db = trained_unchecked(60, 13);
    char *r = check_of(db, "SELECT sentiment_int8_check(t, y, 'q') FROM d WHERE 0");
    assert_int_equal((int)jnum(db, r, "$.rows"), 0);
    assert_true(q_is_null(db, "SELECT json_extract(sentiment_int8_check(t, y, 'q'), "
                              "'$.accuracy_int8') FROM d WHERE 0"));
    free(r);
    /* NULL and blank texts, NULL labels: skipped, no check made */
    r = check_of(db, "SELECT sentiment_int8_check(CASE WHEN rowid % 2 THEN NULL ELSE ' ' END, y, "
                     "'q') FROM d");
    assert_int_equal((int)jnum(db, r, "$.rows"), 0);
    assert_int_equal((int)jnum(db, r, "$.skipped"), 60);
    free(r);
    char *cp = cpu_precision(db, "q");
    assert_true(starts(cp, "fp32: int8 not checked for this model"));
    free(cp);
    expect_error(db, "SELECT sentiment_int8_check(t, y, 'nosuch') FROM d",
                 "sentiment_int8_check(): no model named 'nosuch'");
    expect_error(db, "SELECT sentiment_int8_check(t, y, NULL) FROM d",
                 "sentiment_int8_check(): model name is NULL");
    expect_error(db, "SELECT sentiment_int8_check(t, 'zzz', 'q') FROM d",
                 "sentiment_int8_check(): not one row's label is a label of model 'q'");
    /* an encoder without a classification head has no labels to check */
    exec_ok(db, "SELECT sentiment_load('enc', 'tests/fixtures/models/bert_encoder')");
    expect_error(db, "SELECT sentiment_int8_check(t, y, 'enc') FROM d",
                 "sentiment_int8_check(): the model has no classification head");
    /* the labels argument maps the data's labels */
    r = check_of(db, "SELECT sentiment_int8_check(t, CASE y WHEN 'positive' THEN 'p' ELSE 'n' "
                     "END, 'q', '{\"p\":\"positive\",\"n\":\"negative\"}') FROM d");
    assert_int_equal((int)jnum(db, r, "$.rows"), 60);
    assert_int_equal((int)jnum(db, r, "$.unknown_labels"), 0);
    free(r);
    /* interrupted: an error, and the check as it was (that of 60 rows) */
    sqlite3_progress_handler(db, 1, stop_now, NULL);
    expect_error(db, "SELECT sentiment_int8_check(t, y, 'q') FROM (SELECT * FROM d LIMIT 30)",
                 "interrupted");
    sqlite3_progress_handler(db, 0, NULL, NULL);
    cp = cpu_precision(db, "q");
    assert_non_null(strstr(cp, "of 60 rows"));
    free(cp);
    /* it changes what auto runs: not from a view, not with admin off */
    exec_ok(db, "CREATE VIEW v AS SELECT sentiment_int8_check(t, y, 'q') FROM d");
    expect_error(db, "SELECT * FROM v", "unsafe use of sentiment_int8_check");
    exec_ok(db, "SELECT sentiment_config('admin_functions', 'off')");
    expect_error(db, "SELECT sentiment_int8_check(t, y, 'q') FROM d",
                 "sentiment_int8_check() is turned off on this connection");
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_figures_match_evaluate),
        cmocka_unit_test(test_auto_follows_the_measured_check),
        cmocka_unit_test(test_directory_model_check_saved),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

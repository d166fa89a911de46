/* test_ext_train_int8.c: train()'s INT8 check (ext/train_int8.c) and what
 * precision auto does with it (runtime/device.c, model/format/int8_check.h):
 * the report's "int8" object and the stored config's "int8_check" agree and
 * follow the rule; sentiment_models.cpu_precision says what auto runs and
 * why; auto gives the same probabilities as int8 exactly when the check
 * passes (a config claiming a passing or a failing check); "int8_check":
 * false, fine-tuning a checked base, and a malformed check in a stored
 * config.
 *
 * The data are generated here: the label is carried by characters the tiny
 * fixture model's vocabulary lacks, which its wide part learns at once
 * ("epochs": 0 fits only the wide part, in seconds).
 */
#include "support/ext_test_util.h"
#include "support/cpu_precision_test_util.h"
#include "support/rare_rows_test_util.h"

#include <math.h>
#include <string.h>

#include "cpu/backend_cpu.h"
#include "format/int8_check.h"

/* Every row's probabilities as one text, under the given precision. */
static char *probs_under(sqlite3 *db, const char *model, const char *precision)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT sentiment_config('precision', '%s')", precision);
    exec_ok(db, sql);
    snprintf(sql, sizeof sql,
             "SELECT group_concat(sentiment_probs(t, '%s'), ' ') FROM d",
             model);
    char *s = q_text(db, sql);
    assert_non_null(s);
    exec_ok(db, "SELECT sentiment_config('precision', 'auto')");
    return s;
}

static sqlite3 *trained(int n, const char *options)
{
    sqlite3 *db = open_db();
    load_tiny(db);
    make_rare(db, "d", n, 5);
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT train('q', t, y, '%s') FROM d", options);
    char *r = q_text(db, sql);
    assert_non_null(r);
    free(r);
    return db;
}

/* The report and the stored config carry the same check; its verdict is
 * the rule applied to its numbers; sentiment_models says the same. */
static void test_report_config_and_listing(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    make_rare(db, "d", 500, 5);
    char *r = q_text(db, "SELECT train('q', t, y, '{\"base\":\"tiny\",\"epochs\":0,\"wide\":true,"
                         "\"valid_fraction\":0.5}') FROM d");
    assert_non_null(r);
    sm_int8_check c = {1, (int)jnum(db, r, "$.int8.rows"), jnum(db, r, "$.int8.accuracy_fp32"),
                       jnum(db, r, "$.int8.accuracy_int8"), jnum(db, r, "$.int8.agreement")};
    assert_int_equal(c.rows, (int)jnum(db, r, "$.valid_rows"));
    assert_int_equal(c.rows, 250);
    assert_true(c.accuracy_fp32 >= 0.9); /* the wide part learns the rare characters */
    assert_true(c.agreement >= 0 && c.agreement <= 1);
    int passes = sm_int8_check_passes(&c, NULL, 0);
    assert_int_equal((int)jnum(db, r, "$.int8.auto"), passes);
    /* the stored config.json holds the same numbers */
    assert_int_equal(q_int(db, "SELECT json_extract(config, '$.int8_check.rows') FROM "
                               "sentiment_model_store WHERE name = 'q'"),
                     250);
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT abs(json_extract(config, '$.int8_check.agreement') - %.17g) < 1e-8 FROM "
             "sentiment_model_store WHERE name = 'q'",
             c.agreement);
    assert_int_equal(q_int(db, sql), 1);
    char *cp = cpu_precision(db, "q");
    int native = backend_cpu_pack_native(BACKEND_PACK_INT8);
    assert_int_equal(starts(cp, "int8: "), passes && native);
    assert_non_null(strstr(cp, "250 rows"));
    free(cp);
    /* the built-in model: checked on its dev sets */
    cp = cpu_precision(db, "default");
    assert_int_equal(starts(cp, "int8: "), native);
    free(cp);
    free(r);
    sqlite3_close(db);
}

/* Auto runs INT8 for a model exactly when its check passes: a config that
 * claims a passing check gives int8's probabilities under auto, one that
 * claims a failing check gives fp32's. */
static void test_auto_follows_the_check(void **state)
{
    (void)state;
    if (!backend_cpu_pack_native(BACKEND_PACK_INT8)) {
        print_message("skipped: this CPU has no AVX512-VNNI, auto never runs int8\n");
        return;
    }
    sqlite3 *db = trained(300, "{\"base\":\"tiny\",\"epochs\":0,\"wide\":true,"
                               "\"valid_fraction\":0.5}");
    exec_ok(db, "UPDATE sentiment_model_store SET config = json_set(config, '$.int8_check', "
                "json('{\"rows\":1000,\"accuracy_fp32\":0.9,\"accuracy_int8\":0.9,"
                "\"agreement\":1}')) WHERE name = 'q'");
    char *cp = cpu_precision(db, "q");
    assert_true(starts(cp, "int8: held-out accuracy 0.9000 in int8"));
    free(cp);
    char *a = probs_under(db, "q", "auto"), *i8 = probs_under(db, "q", "int8"),
         *f32 = probs_under(db, "q", "fp32");
    assert_string_equal(a, i8);
    assert_string_not_equal(i8, f32); /* the test can tell them apart */
    free(a);

    exec_ok(db, "UPDATE sentiment_model_store SET config = json_set(config, "
                "'$.int8_check.agreement', 0.5) WHERE name = 'q'");
    cp = cpu_precision(db, "q");
    assert_true(starts(cp, "fp32: int8 changes too many labels"));
    free(cp);
    a = probs_under(db, "q", "auto");
    assert_string_equal(a, f32);
    free(a);

    exec_ok(db, "UPDATE sentiment_model_store SET config = json_set(config, "
                "'$.int8_check.agreement', 1, '$.int8_check.accuracy_int8', 0.896) "
                "WHERE name = 'q'");
    cp = cpu_precision(db, "q");
    assert_true(starts(cp, "fp32: int8 loses accuracy"));
    free(cp);
    exec_ok(db, "UPDATE sentiment_model_store SET config = json_set(config, "
                "'$.int8_check.accuracy_int8', 0.8975, '$.int8_check.rows', 199) "
                "WHERE name = 'q'");
    cp = cpu_precision(db, "q");
    assert_true(starts(cp, "fp32: too few rows"));
    free(cp);
    free(i8);
    free(f32);
    sqlite3_close(db);
}

/* "int8_check": false stores none; fine-tuning a checked base does not
 * inherit the base's check. */
static void test_off_and_inheritance(void **state)
{
    (void)state;
    sqlite3 *db = trained(300, "{\"base\":\"tiny\",\"epochs\":0,\"wide\":true,"
                               "\"valid_fraction\":0.5}");
    assert_int_equal(q_int(db, "SELECT json_extract(config, '$.int8_check.rows') FROM "
                               "sentiment_model_store WHERE name = 'q'"),
                     150);
    char *r = q_text(db, "SELECT train('q2', t, y, '{\"base\":\"q\",\"epochs\":1,"
                         "\"int8_check\":false}') FROM d");
    assert_non_null(r);
    assert_int_equal((int)jnum(db, r, "$.int8.auto"), 0);
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, '$.int8.why')");
    sqlite3_bind_text(st, 1, r, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_non_null(strstr((const char *)sqlite3_column_text(st, 0), "not checked"));
    sqlite3_finalize(st);
    assert_true(q_is_null(db, "SELECT json_extract(config, '$.int8_check') FROM "
                              "sentiment_model_store WHERE name = 'q2'"));
    char *cp = cpu_precision(db, "q2");
    assert_true(starts(cp, "fp32: int8 not checked for this model"));
    free(cp);
    assert_int_equal(q_int(db, "SELECT json_extract(train('q3', t, y, '{\"base\":\"q\","
                               "\"epochs\":0,\"wide\":true,\"valid_fraction\":0.1}'), "
                               "'$.int8.rows') FROM d"),
                     30);
    free(r);
    sqlite3_close(db);
}

/* A stored config whose check is malformed: using the model is an error
 * naming the key; nothing crashes. */
static void test_malformed_check(void **state)
{
    (void)state;
    sqlite3 *db = trained(120, "{\"base\":\"tiny\",\"epochs\":0,\"wide\":true}");
    const char *bad[] = {
        "json_set(config, '$.int8_check.agreement', 1.5)",
        "json_set(config, '$.int8_check', 'yes')",
        "json_set(config, '$.int8_check', json('{\"rows\":0,\"accuracy_fp32\":0.9,"
        "\"accuracy_int8\":0.9,\"agreement\":1}'))",
        "json_set(config, '$.int8_check', json('{\"rows\":10,\"accuracy_fp32\":0.9,"
        "\"agreement\":1}'))",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char sql[400];
        snprintf(sql, sizeof sql,
                 "UPDATE sentiment_model_store SET config = %s WHERE name = 'q'", bad[i]);
        exec_ok(db, sql);
        expect_error(db, "SELECT sentiment('好', 'q')", "int8_check");
        exec_ok(db, "UPDATE sentiment_model_store SET config = json_remove(config, "
                    "'$.int8_check') WHERE name = 'q'");
    }
    char *s = q_text(db, "SELECT sentiment('好', 'q')");
    assert_non_null(s);
    free(s);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_config_and_listing),
        cmocka_unit_test(test_auto_follows_the_check),
        cmocka_unit_test(test_off_and_inheritance),
        cmocka_unit_test(test_malformed_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

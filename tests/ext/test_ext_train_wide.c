/* test_ext_train_wide.c: train()'s option "wide" (ext/train_wide.c) through
 * SQL: a wide part fitted alone ("epochs": 0) and after the encoder, what
 * the report, sentiment_models and sentiment_evaluate say, the stored
 * model against its export read back by the C library (the same
 * probabilities), a wide part kept, dropped and replaced with the head, and
 * bad options refused.
 *
 * The data are generated here: the label is carried by rare characters the
 * tiny fixture model's vocabulary does not have (so its encoder sees
 * [UNK]), which a character n-gram model learns at once.
 */
#include "support/ext_test_util.h"
#include "support/interrupt_test_util.h"
#include "support/rare_rows_test_util.h"

#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"

static sqlite3 *wide_db(void)
{
    sqlite3 *db = open_db();
    load_tiny(db);
    make_rare(db, "d", 200, 1);
    make_rare(db, "test", 100, 77);
    return db;
}

static double accuracy(sqlite3 *db, const char *model)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT json_extract(sentiment_evaluate(t, y, '%s'), '$.accuracy') FROM test", model);
    return q_double(db, sql);
}

/* "epochs": 0 fits only the wide part: the encoder's [UNK]s cannot carry
 * the label, the n-grams can. */
static void test_wide_only_learns_rare_characters(void **state)
{
    (void)state;
    sqlite3 *db = wide_db();
    double before = accuracy(db, "tiny");
    char *r = q_text(db, "SELECT train('w', t, y, '{\"base\":\"tiny\",\"epochs\":0,\"wide\":true}') "
                         "FROM d");
    assert_non_null(r);
    assert_int_equal((int)jnum(db, r, "$.wide.buckets"), 262144);
    assert_int_equal((int)jnum(db, r, "$.wide.ngram_range[1]"), 3);
    assert_int_equal((int)jnum(db, r, "$.train_rows"), 180);
    assert_int_equal((int)jnum(db, r, "$.valid_rows"), 20);
    assert_int_equal((int)jnum(db, r, "$.wide.mixed"), 1);
    assert_true(jnum(db, r, "$.wide.valid_accuracy_wide") >= 0.95);
    assert_true(jnum(db, r, "$.wide.mix_wide") > 0);
    double after = accuracy(db, "w");
    if (!(after >= 0.95 && after > before + 0.2))
        fail_msg("accuracy %.3f (the base alone %.3f)", after, before);
    /* sentiment_models and sentiment_evaluate say it has a wide part */
    expect_text(db, "SELECT json_extract(wide, '$.hash') FROM sentiment_models WHERE name = 'w'",
                "murmur3_32");
    assert_true(q_is_null(db, "SELECT wide FROM sentiment_models WHERE name = 'tiny'"));
    expect_text(db,
                "SELECT json_extract(sentiment_evaluate(t, y, 'w'), '$.wide.buckets') FROM test",
                "262144");
    assert_true(q_is_null(
        db, "SELECT json_extract(sentiment_evaluate(t, y, 'tiny'), '$.wide') FROM test"));
    free(r);
    sqlite3_close(db);
}

/* The encoder trained, then the wide part: both parts' validation
 * accuracies reported, the mix fitted. */
static void test_wide_after_encoder(void **state)
{
    (void)state;
    sqlite3 *db = wide_db();
    char *r = q_text(db, "SELECT train('w2', t, y, '{\"base\":\"tiny\",\"epochs\":2,\"lr\":1e-3,"
                         "\"wide\":{\"buckets\":4096,\"ngram_range\":[1,2],\"l2\":1e-3}}') FROM d");
    assert_non_null(r);
    assert_int_equal((int)jnum(db, r, "$.epochs"), 2);
    assert_int_equal((int)jnum(db, r, "$.wide.buckets"), 4096);
    assert_int_equal((int)jnum(db, r, "$.wide.ngram_range[1]"), 2);
    assert_float_equal(jnum(db, r, "$.wide.l2"), 1e-3, 1e-9);
    double enc = jnum(db, r, "$.wide.valid_accuracy_encoder");
    double mixed = jnum(db, r, "$.wide.valid_accuracy");
    assert_true(enc >= 0 && enc <= 1);
    assert_true(mixed >= 0.9);
    assert_true(accuracy(db, "w2") >= 0.9);
    free(r);
    sqlite3_close(db);
}

/* The stored model, exported and read back by the library, gives the
 * probabilities sentiment_probs gives: the wide part travels in
 * config.json and model.safetensors. */
static void test_export_round_trip(void **state)
{
    (void)state;
    char dir[] = "/tmp/sm_wide_export_XXXXXX", err[SM_ERR_MAX];
    assert_non_null(mkdtemp(dir));
    rmdir(dir);
    sqlite3 *db = wide_db();
    free(q_text(db, "SELECT train('w', t, y, '{\"base\":\"tiny\",\"epochs\":0,\"wide\":true}') "
                    "FROM d"));
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT sentiment_export('w', '%s')", dir);
    free(q_text(db, sql));
    bert_model *m = NULL;
    assert_int_equal(bert_model_load_dir(dir, &m, err), SM_OK);
    assert_non_null(m->wide);
    assert_int_equal(m->wide->cfg.buckets, 262144);
    backend *be = NULL;
    bert_workspace *ws = NULL;
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 8, 64, &ws, err), SM_OK);
    sqlite3_stmt *st = prepare(db, "SELECT t, json_extract(sentiment_probs(t, 'w'), '$.positive') "
                                   "FROM test LIMIT 10");
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *text = (const char *)sqlite3_column_text(st, 0);
        size_t len = strlen(text);
        float probs[2];
        assert_int_equal(bert_classify_texts(m, &m->p, ws, &text, &len, 1, 0, 8, probs, NULL, err),
                         SM_OK);
        assert_float_equal(probs[1], sqlite3_column_double(st, 1), 1e-5);
    }
    sqlite3_finalize(st);
    bert_workspace_free(ws);
    be->destroy(be);
    bert_model_free(m);
    char path[128];
    const char *files[] = {"config.json", "vocab.txt", "model.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
    sqlite3_close(db);
}

/* A base's wide part: kept by default with the head, dropped by
 * "wide": false, dropped with a new head. */
static void test_kept_dropped_replaced(void **state)
{
    (void)state;
    sqlite3 *db = wide_db();
    free(q_text(db, "SELECT train('w', t, y, '{\"base\":\"tiny\",\"epochs\":0,\"wide\":true}') "
                    "FROM d"));
    char *r = q_text(db, "SELECT train('k', t, y, '{\"base\":\"w\",\"epochs\":1}') FROM d");
    expect_text(db, "SELECT json_extract(metrics, '$.wide') FROM sentiment_models WHERE name = 'k'",
                "kept");
    assert_false(q_is_null(db, "SELECT wide FROM sentiment_models WHERE name = 'k'"));
    free(r);
    free(q_text(db, "SELECT train('f', t, y, '{\"base\":\"w\",\"epochs\":1,\"wide\":false}') FROM d"));
    assert_true(q_is_null(db, "SELECT wide FROM sentiment_models WHERE name = 'f'"));
    /* three labels: a new head, so the old wide part goes with the old one */
    exec_ok(db, "CREATE TABLE e AS SELECT t, CASE WHEN rowid % 3 = 0 THEN 'neutral' ELSE y END "
                "AS y FROM d");
    free(q_text(db, "SELECT train('n', t, y, '{\"base\":\"w\",\"epochs\":1}') FROM e"));
    assert_true(q_is_null(db, "SELECT wide FROM sentiment_models WHERE name = 'n'"));
    /* and with "wide": a new one of three rows; "epochs": 0 cannot keep a head it has not */
    expect_error(db, "SELECT train('n3', t, y, '{\"base\":\"w\",\"epochs\":0,\"wide\":true}') FROM e",
                 "option 'epochs' 0 keeps the base's encoder and head, but base 'w' has no head "
                 "for these 3 labels");
    free(q_text(db, "SELECT train('n3', t, y, '{\"base\":\"w\",\"epochs\":1,\"wide\":true}') FROM e"));
    expect_text(db, "SELECT json_array_length(labels) FROM sentiment_models WHERE name = 'n3'", "3");
    assert_false(q_is_null(db, "SELECT wide FROM sentiment_models WHERE name = 'n3'"));
    sqlite3_close(db);
}

/* sentiment_explain of a model with a wide part: the whole model's label
 * and score; each token's attribution is the encoder's (as the base alone
 * explains it, times the mix's encoder share, which scales its head) plus
 * its exact wide share; the shares and the unassigned rest sum to the wide
 * logit minus its bias. */
static void test_explain_with_wide(void **state)
{
    (void)state;
    sqlite3 *db = wide_db();
    free(q_text(db, "SELECT train('w', t, y, '{\"base\":\"tiny\",\"epochs\":0,\"wide\":true}') "
                    "FROM d"));
    sqlite3_stmt *st = prepare(db, "SELECT t FROM test LIMIT 6");
    while (sqlite3_step(st) == SQLITE_ROW) {
        char text[256], sql[4096];
        snprintf(text, sizeof text, "%s  还有 ABC", (const char *)sqlite3_column_text(st, 0));
        snprintf(sql, sizeof sql,
                 "WITH e AS (SELECT sentiment_explain('%s', 'w') AS j), "
                 "b AS (SELECT sentiment_explain('%s', 'tiny', json_object('label', "
                 "json_extract((SELECT j FROM e), '$.label'))) AS j) "
                 "SELECT json_extract(e.j, '$.label') = sentiment('%s', 'w'), "
                 "abs(json_extract(e.j, '$.score') - json_extract(sentiment_probs('%s', 'w'), "
                 "'$.' || json_extract(e.j, '$.label'))) < 1e-5, "
                 "(SELECT max(abs(json_extract(x.value, '$.attribution') - "
                 "json_extract(x.value, '$.wide') - json_extract(y.value, '$.attribution') * "
                 "(SELECT json_extract(metrics, '$.wide.mix_encoder') FROM sentiment_models "
                 "WHERE name = 'w'))) "
                 " FROM json_each(e.j, '$.tokens') x JOIN json_each(b.j, '$.tokens') y "
                 " ON x.key = y.key) < 1e-5, "
                 "abs((SELECT sum(json_extract(x.value, '$.wide')) FROM json_each(e.j, '$.tokens') x) "
                 " + json_extract(e.j, '$.wide.unassigned') - json_extract(e.j, '$.wide.logit') "
                 " + json_extract(e.j, '$.wide.bias')) < 1e-4 "
                 "FROM e, b",
                 text, text, text, text);
        expect_text(db, sql, "1");
        sqlite3_stmt *q = prepare(db, sql);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        for (int c = 0; c < 4; c++)
            if (sqlite3_column_int(q, c) != 1) fail_msg("check %d failed for '%s'", c, text);
        sqlite3_finalize(q);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* 30,000 rows whose wide part takes a while to fit. */
static sqlite3 *big_db(void)
{
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "CREATE TABLE big(t TEXT, y TEXT)");
    exec_ok(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30000) "
                "INSERT INTO big SELECT printf('%d 房间%s服务%d很好 %x 的确%d', i, "
                "char(20000 + i % 5000), i * 7, i * 13, i % 977), "
                "CASE WHEN i % 2 THEN 'positive' ELSE 'negative' END FROM n");
    return db;
}

#define BIG_TRAIN "SELECT train('x', t, y, '{\"base\":\"tiny\",\"epochs\":0,\"wide\":{\"l2\":1e-9}}') FROM big"

/* sqlite3_interrupt halfway through the training on 30,000 rows (the
 * time measured first, uninterrupted, in a database of its own, so the
 * interrupt lands inside the work on a fast machine or a slow one): an
 * error within a second, nothing stored. */
static void test_interrupt(void **state)
{
    (void)state;
    sqlite3 *probe = big_db();
    double t0 = now_s();
    char *r = q_text(probe, BIG_TRAIN);
    double full = now_s() - t0;
    assert_non_null(r);
    free(r);
    sqlite3_close(probe);

    sqlite3 *db = big_db();
    interrupter it = {db, (int)(full * 500), NULL, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, interrupt_later, &it), 0);
    expect_error(db, BIG_TRAIN, "interrupted");
    double stopped = now_s();
    pthread_join(th, NULL);
    if (stopped - it.when > 1.0) fail_msg("train() stopped %.2fs after sqlite3_interrupt", stopped - it.when);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = "
                               "'sentiment_model_store'"),
                     0);
    sqlite3_close(db);
}

static void test_bad_options(void **state)
{
    (void)state;
    sqlite3 *db = wide_db();
    static const struct {
        const char *opts, *msg;
    } bad[] = {
        {"{\"wide\":3}", "option 'wide' must be true, false or an object"},
        {"{\"wide\":{\"buckets\":0}}", "'buckets' must be an integer from 1 to 16777216; got 0"},
        {"{\"wide\":{\"buckets\":1.5}}", "'buckets' must be an integer"},
        {"{\"wide\":{\"ngram_range\":[0,2]}}", "'ngram_range' must be [min, max]"},
        {"{\"wide\":{\"ngram_range\":[3,2]}}", "'ngram_range' must be [min, max]"},
        {"{\"wide\":{\"ngram_range\":[1,9]}}", "'ngram_range' must be [min, max]"},
        {"{\"wide\":{\"l2\":-1}}", "'l2' must be a number greater than 0"},
        {"{\"wide\":{\"hash\":\"md5\"}}", "unknown key 'hash'"},
        {"{\"epochs\":0}", "option 'epochs' 0 trains no encoder: it needs \"wide\""},
        {"{\"epochs\":0,\"wide\":false}", "option 'epochs' 0 trains no encoder"},
        {"{\"epochs\":0,\"wide\":true,\"base\":\"none\"}", "option 'epochs' 0 trains no encoder"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT train('x', t, y, '%s') FROM d", bad[i].opts);
        expect_error(db, sql, bad[i].msg);
    }
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = "
                               "'sentiment_model_store'"),
                     0);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wide_only_learns_rare_characters),
        cmocka_unit_test(test_wide_after_encoder),
        cmocka_unit_test(test_export_round_trip),
        cmocka_unit_test(test_kept_dropped_replaced),
        cmocka_unit_test(test_explain_with_wide),
        cmocka_unit_test(test_interrupt),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

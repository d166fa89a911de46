/* test_ext_evaluate.c: sentiment_evaluate(text, label [, model]) against
 * figures computed by hand from the model's own predictions.
 *
 * The fixture model has random weights, so the test first asks sentiment()
 * what it predicts for each text, then writes gold labels that make the
 * confusion matrix known.
 */
#include "support/ext_test_util.h"

#include <math.h>

static const char *const k_texts[] = {
    "房间干净整洁，前台服务热情，下次还来。",
    "外卖送得太慢了，饭都凉了，差评。",
    "耳机音质不错，就是续航一般。",
    "酒店位置很好，离地铁站只有五分钟。",
    "包装破损，客服也不理人，非常失望。",
    "味道还可以，分量有点少。",
    "性价比很高，推荐购买！",
    "空调噪音太大，一晚上没睡好。",
    "快递很快，第二天就到了，东西也不错。",
    "菜品一般，价格偏贵，不会再点。",
};
#define N_TEXTS 10

static char *jget(sqlite3 *db, const char *json, const char *path)
{
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, ?2)");
    char *out = NULL;
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    if (sqlite3_column_type(st, 0) != SQLITE_NULL) out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

static void expect_json(sqlite3 *db, const char *json, const char *path, const char *want)
{
    char *got = jget(db, json, path);
    if (!got || strcmp(got, want)) fail_msg("%s: got '%s', want '%s' in %s", path, got ? got : "NULL", want, json);
    free(got);
}

static void expect_num(sqlite3 *db, const char *json, const char *path, double want)
{
    char *got = jget(db, json, path);
    if (!got) fail_msg("%s missing in %s", path, json);
    if (fabs(atof(got) - want) > 1e-5) fail_msg("%s: got %s, want %.6f in %s", path, got, want, json);
    free(got);
}

static const char *other(const char *label)
{
    return strcmp(label, "positive") ? "positive" : "negative";
}

static void test_hand_computed(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    char *pred[N_TEXTS];
    sqlite3_stmt *st = prepare(db, "SELECT sentiment(?1, 'tiny')");
    for (int i = 0; i < N_TEXTS; i++) {
        sqlite3_bind_text(st, 1, k_texts[i], -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        pred[i] = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);

    /* gold: rows 0-5 as predicted, 6-8 the other label, 9 a label the model
     * does not know; then three skipped rows */
    const char *gold[N_TEXTS];
    for (int i = 0; i < N_TEXTS; i++) gold[i] = i < 6 ? pred[i] : i < 9 ? other(pred[i]) : "neutral";
    exec_ok(db, "CREATE TABLE g(t, y)");
    st = prepare(db, "INSERT INTO g VALUES (?1, ?2)");
    for (int i = 0; i < N_TEXTS; i++) {
        sqlite3_bind_text(st, 1, k_texts[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, gold[i], -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    exec_ok(db, "INSERT INTO g VALUES (NULL, 'positive'), ('很好', NULL), ('  ', 'negative')");

    /* by hand: confusion over (negative, positive, neutral) x (negative, positive) */
    const char *names[3] = {"negative", "positive", "neutral"};
    long conf[3][2] = {{0}};
    for (int i = 0; i < N_TEXTS; i++) {
        int g = !strcmp(gold[i], "negative") ? 0 : !strcmp(gold[i], "positive") ? 1 : 2;
        int p = !strcmp(pred[i], "positive");
        conf[g][p]++;
    }
    char *r = q_text(db, "SELECT sentiment_evaluate(t, y, 'tiny') FROM g");
    assert_non_null(r);
    expect_json(db, r, "$.model", "tiny");
    expect_json(db, r, "$.rows", "10");
    expect_json(db, r, "$.skipped", "3");
    expect_json(db, r, "$.unknown_labels", "1");
    expect_num(db, r, "$.accuracy", 0.6);
    double f1_sum = 0;
    int f1_n = 0;
    char path[128];
    for (int l = 0; l < 3; l++) {
        long tp = l < 2 ? conf[l][l] : 0;
        long support = l < 2 ? conf[l][0] + conf[l][1] : conf[2][0] + conf[2][1];
        long predicted = l < 2 ? conf[0][l] + conf[1][l] + conf[2][l] : 0;
        if (!support && !predicted) {
            snprintf(path, sizeof path, "$.labels.%s", names[l]);
            char *none = jget(db, r, path);
            assert_null(none);
            continue;
        }
        double p = predicted ? (double)tp / predicted : 0, rc = support ? (double)tp / support : 0;
        double f1 = p + rc > 0 ? 2 * p * rc / (p + rc) : 0;
        f1_sum += f1;
        f1_n++;
        snprintf(path, sizeof path, "$.labels.%s.precision", names[l]);
        expect_num(db, r, path, p);
        snprintf(path, sizeof path, "$.labels.%s.recall", names[l]);
        expect_num(db, r, path, rc);
        snprintf(path, sizeof path, "$.labels.%s.f1", names[l]);
        expect_num(db, r, path, f1);
        snprintf(path, sizeof path, "$.labels.%s.support", names[l]);
        expect_num(db, r, path, (double)support);
        snprintf(path, sizeof path, "$.labels.%s.predicted", names[l]);
        expect_num(db, r, path, (double)predicted);
    }
    expect_num(db, r, "$.macro_f1", f1_sum / f1_n);
    expect_json(db, r, "$.confusion.labels", "[\"negative\",\"positive\",\"neutral\"]");
    char want[128];
    snprintf(want, sizeof want, "[[%ld,%ld,0],[%ld,%ld,0],[%ld,%ld,0]]", conf[0][0], conf[0][1], conf[1][0],
             conf[1][1], conf[2][0], conf[2][1]);
    expect_json(db, r, "$.confusion.matrix", want);
    free(r);

    /* every label of the model in the data, none unknown: a 2 x 2 matrix */
    r = q_text(db, "SELECT sentiment_evaluate(t, y, 'tiny') FROM g WHERE y <> 'neutral'");
    expect_json(db, r, "$.rows", "9");
    expect_num(db, r, "$.accuracy", 6.0 / 9);
    expect_json(db, r, "$.confusion.labels", "[\"negative\",\"positive\"]");
    free(r);
    for (int i = 0; i < N_TEXTS; i++) free(pred[i]);
    sqlite3_close(db);
}

/* More rows than one batch: the same answers as sentiment() row by row. */
static void test_batches_match_rows(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    exec_ok(db, "CREATE TABLE g(t, y)");
    sqlite3_stmt *st = prepare(db, "INSERT INTO g VALUES (?1 || ?2, CASE WHEN ?2 % 3 THEN 'positive' ELSE 'negative' END)");
    for (int i = 0; i < 150; i++) {
        sqlite3_bind_text(st, 1, k_texts[i % N_TEXTS], -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, i);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    int64_t rows_before = debug_int(db, "$.connection.rows");
    char *r = q_text(db, "SELECT sentiment_evaluate(t, y, 'tiny') FROM g");
    assert_int_equal(debug_int(db, "$.connection.rows") - rows_before, 150);
    expect_json(db, r, "$.rows", "150");
    double acc = q_double(db, "SELECT avg(sentiment(t, 'tiny') = y) FROM g");
    expect_num(db, r, "$.accuracy", acc);
    int64_t pp = q_int(db, "SELECT count(*) FROM g WHERE y = 'positive' AND sentiment(t, 'tiny') = 'positive'");
    int64_t np = q_int(db, "SELECT count(*) FROM g WHERE y = 'negative' AND sentiment(t, 'tiny') = 'positive'");
    expect_num(db, r, "$.confusion.matrix[1][1]", (double)pp);
    expect_num(db, r, "$.confusion.matrix[0][1]", (double)np);
    free(r);
    /* per group */
    exec_ok(db, "SELECT y, sentiment_evaluate(t, y, 'tiny') FROM g GROUP BY y");
    sqlite3_close(db);
}

static void test_edges_and_errors(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    make_reviews(db);
    /* no rows */
    expect_text(db, "SELECT json_extract(sentiment_evaluate(body, 'positive', 'tiny'), '$.rows') FROM t WHERE 0", "0");
    expect_text(db, "SELECT json_extract(sentiment_evaluate(body, 'positive', 'tiny'), '$.accuracy') IS NULL "
                    "FROM t WHERE 0",
                "1");
    /* only skipped rows */
    expect_text(db, "SELECT json_extract(sentiment_evaluate(NULL, 'positive', 'tiny'), '$.skipped') FROM t", "20");
    /* on a negative/positive model the INTEGER labels 0 and 1 mean negative
     * and positive (the public binary sets' convention), and the result says so */
    expect_text(db, "SELECT json_extract(sentiment_evaluate(body, 1, 'tiny'), '$.unknown_labels') FROM t", "0");
    expect_text(db, "SELECT json_extract(sentiment_evaluate(body, 1, 'tiny'), '$.label_map_by') FROM t",
                "convention");
    expect_text(db, "SELECT json_extract(sentiment_evaluate(body, 1, 'tiny'), '$.confusion.labels') FROM t",
                "[\"negative\",\"positive\"]");
    /* other integer labels are compared as text: when none is the model's,
     * an error rather than accuracy 0 */
    expect_error(db, "SELECT sentiment_evaluate(body, 7, 'tiny') FROM t",
                 "sentiment_evaluate(): not one row's label is a label of model 'tiny'");
    expect_error(db, "SELECT sentiment_evaluate(body, 'positive', 'nope') FROM t",
                 "sentiment_evaluate(): no model named 'nope'");
    expect_error(db, "SELECT sentiment_evaluate(body, 'positive', NULL) FROM t",
                 "sentiment_evaluate(): model name is NULL");
    expect_error(db, "SELECT sentiment_evaluate(body) FROM t", "wrong number of arguments");
    /* the two-argument form uses 'default' */
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    expect_text(db, "SELECT json_extract(sentiment_evaluate(body, 'positive'), '$.model') FROM t", "default");
    expect_text(db, "SELECT json_extract(sentiment_evaluate(body, 'positive'), '$.accuracy') = "
                    "json_extract(sentiment_evaluate(body, 'positive', 'tiny'), '$.accuracy') FROM t",
                "1");
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_computed),
        cmocka_unit_test(test_batches_match_rows),
        cmocka_unit_test(test_edges_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

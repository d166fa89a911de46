/* test_ext_explain.c: sentiment_explain() and classify's explanation column
 * (ext/explain.c): the JSON's shape and spans, the attributions against the
 * PyTorch golden file through SQL, completeness, options and their errors,
 * the polarity words of the built-in model, interruption, and classify's
 * column (equal to the function, computed only when named).
 */
#include "support/ext_test_util.h"

#include <math.h>
#include <time.h>

static char *explain(sqlite3 *db, const char *text, const char *model, const char *options)
{
    sqlite3_stmt *st = prepare(db, "SELECT sentiment_explain(?1, ?2, ?3)");
    sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, model, -1, SQLITE_STATIC);
    if (options) sqlite3_bind_text(st, 3, options, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) fail_msg("sentiment_explain('%s'): %s", text, sqlite3_errmsg(db));
    char *out = sqlite3_column_text(st, 0) ? strdup((const char *)sqlite3_column_text(st, 0)) : NULL;
    sqlite3_finalize(st);
    return out;
}

/* json_extract of a value of sentiment_explain's JSON, as a double. */
static double jnum(sqlite3 *db, const char *json, const char *path)
{
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, ?2)");
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    double v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void test_shape_and_spans(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    const char *text = "这家酒店很干净，服务也很周到。";
    char *js = explain(db, text, "tiny", NULL);
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, '$.method'), json_extract(?1, '$.steps'), "
                                   "json_extract(?1, '$.truncated'), json_array_length(?1, '$.tokens'), "
                                   "json_extract(?1, '$.label') IN ('negative', 'positive'), "
                                   "json_type(sentiment_explain(?2, 'tiny'))");
    sqlite3_bind_text(st, 1, js, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "integrated_gradients");
    assert_int_equal(sqlite3_column_int(st, 1), 32);
    assert_int_equal(sqlite3_column_int(st, 2), 0);
    assert_int_equal(sqlite3_column_int(st, 3), 15); /* one token per character */
    assert_int_equal(sqlite3_column_int(st, 4), 1);
    assert_string_equal((const char *)sqlite3_column_text(st, 5), "object");
    sqlite3_finalize(st);
    expect_text(db, "SELECT json_extract(sentiment_explain('这家酒店很干净，服务也很周到。', 'tiny'), "
                    "'$.text')", text);
    /* every span gives its token back */
    st = prepare(db, "SELECT count(*), sum(substr(?2, json_extract(t.value, '$.start') + 1, "
                     "json_extract(t.value, '$.end') - json_extract(t.value, '$.start')) = "
                     "json_extract(t.value, '$.token')) FROM json_each(?1, '$.tokens') t");
    sqlite3_bind_text(st, 1, js, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 15);
    assert_int_equal(sqlite3_column_int(st, 1), 15);
    sqlite3_finalize(st);
    free(js);
    /* spans in a text with spaces, English and full-width characters */
    js = explain(db, "Ｈｏｔｅｌ  很 good！", "tiny", "{\"method\":\"gxi\"}");
    st = prepare(db, "SELECT group_concat(json_extract(t.value, '$.start') || '-' || "
                     "json_extract(t.value, '$.end'), ' ') FROM json_each(?1, '$.tokens') t");
    sqlite3_bind_text(st, 1, js, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *spans = (const char *)sqlite3_column_text(st, 0);
    assert_non_null(spans);
    assert_non_null(strstr(spans, "7-8")); /* 很 */
    sqlite3_finalize(st);
    free(js);
    sqlite3_close(db);
}

/* The attributions through SQL equal PyTorch's (the golden file of
 * tests/model/test_explain.c, bert_tiny, 16 steps) to the 6 digits printed. */
static void test_attributions_match_pytorch(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    FILE *f = fopen("tests/fixtures/explain/bert_tiny.txt", "r");
    assert_non_null(f);
    char line[8192], text[1024] = "", method[8] = "";
    int checked = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "text\t", 5)) snprintf(text, sizeof text, "%.1000s", line + 5);
        else if (!strncmp(line, "method\t", 7)) sscanf(line + 7, "%7s", method);
        else if (!strncmp(line, "attr\t", 5)) {
            char *js = explain(db, text, "tiny",
                               !strcmp(method, "ig") ? "{\"steps\":16}" : "{\"method\":\"gxi\"}");
            double want[64], scale = 0;
            int n = 0;
            for (char *t = strtok(line + 5, "\t"); t; t = strtok(NULL, "\t")) want[n++] = atof(t);
            for (int i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
            /* tokens[i] is position i + 1 ([CLS] is 0) */
            for (int i = 1; i + 1 < n; i++) {
                char path[64];
                snprintf(path, sizeof path, "$.tokens[%d].attribution", i - 1);
                double got = jnum(db, js, path);
                if (fabs(got - want[i]) > 1e-4 * scale + 1e-6 * fabs(want[i]))
                    fail_msg("'%s' %s token %d: %.6g, PyTorch %.7g", text, method, i, got, want[i]);
                checked++;
            }
            free(js);
        }
    }
    fclose(f);
    assert_true(checked > 40);
    sqlite3_close(db);
}

static void test_completeness(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    const char *texts[] = {"房间很脏，服务也差", "这家酒店非常干净，推荐"};
    for (int i = 0; i < 2; i++) {
        char *js = explain(db, texts[i], "default", "{\"steps\":128}");
        double sum = jnum(db, js, "$.sum"), zx = jnum(db, js, "$.logit"),
               zb = jnum(db, js, "$.baseline_logit");
        if (fabs(sum - (zx - zb)) > 0.01 * fabs(zx - zb) + 1e-4)
            fail_msg("'%s': attributions sum to %.6g, logit - baseline %.6g", texts[i], sum, zx - zb);
        /* the tokens' attributions add up to "sum" */
        sqlite3_stmt *st = prepare(db, "SELECT sum(json_extract(value, '$.attribution')) FROM "
                                       "json_each(?1, '$.tokens')");
        sqlite3_bind_text(st, 1, js, -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_true(fabs(sqlite3_column_double(st, 0) - sum) < 1e-4 * (1 + fabs(sum)));
        sqlite3_finalize(st);
        free(js);
    }
    sqlite3_close(db);
}

/* The built-in model: a clear polarity word is among the three tokens most
 * attributed toward the label. */
static void test_polarity_words(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    static const char *const cases[][3] = {
        {"房间很脏，服务也差", "negative", "脏差"},
        {"太失望了，再也不来", "negative", "失望不"},
        {"酒店非常干净，服务热情", "positive", "干净热情"},
        {"东西很好，值得推荐", "positive", "好推荐值得"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *js = explain(db, cases[i][0], "default", NULL);
        sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, '$.label'), group_concat(t, '') "
                                       "FROM (SELECT json_extract(value, '$.token') AS t FROM "
                                       "json_each(?1, '$.tokens') ORDER BY json_extract(value, "
                                       "'$.attribution') DESC LIMIT 3)");
        sqlite3_bind_text(st, 1, js, -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        const char *label = (const char *)sqlite3_column_text(st, 0);
        const char *top = (const char *)sqlite3_column_text(st, 1);
        int found = 0;
        /* one of the words' characters among the top three */
        for (const char *w = cases[i][2]; *w; w += 3) {
            char ch[4] = {w[0], w[1], w[2], 0};
            found |= strstr(top, ch) != NULL;
        }
        if (strcmp(label, cases[i][1]) || !found)
            fail_msg("'%s': label %s, top tokens '%s'; want %s and one of %s\n%s", cases[i][0],
                     label, top, cases[i][1], cases[i][2], js);
        sqlite3_finalize(st);
        free(js);
    }
    sqlite3_close(db);
}

static void test_options(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_text(db, "SELECT json_extract(sentiment_explain('好', 'tiny', '{\"label\":\"negative\"}'), "
                    "'$.label')", "negative");
    expect_text(db, "SELECT json_extract(sentiment_explain('好', 'tiny', '{\"label\":1}'), '$.label')",
                "positive");
    expect_text(db, "SELECT json_extract(sentiment_explain('好', 'tiny', '{\"method\":\"gradient_x_input\"}'), "
                    "'$.method') || json_extract(sentiment_explain('好', 'tiny', '{\"method\":\"gxi\"}'), '$.steps')",
                "gradient_x_input1");
    expect_text(db, "SELECT json_extract(sentiment_explain('好', 'tiny', '{\"steps\":3}'), '$.steps')", "3");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', '{\"label\":\"meh\"}')",
                 "option label must be one of the model's labels ('negative', 'positive')");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', '{\"label\":2}')", "option label");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', '{\"steps\":0}')", "steps must be an integer from 1 to 1024");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', '{\"steps\":2.5}')", "steps must be an integer");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', '{\"method\":\"shap\"}')", "option method");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', '{\"stpes\":3}')", "unknown option 'stpes'");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', '[1]')", "options must be a JSON object");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', '{')", "options must be a JSON object");
    expect_error(db, "SELECT sentiment_explain('好', 'tiny', 42)", "options must be a JSON object");
    expect_error(db, "SELECT sentiment_explain('好', 'nope')", "no model named 'nope'");
    exec_ok(db, "SELECT sentiment_load('enc', 'tests/fixtures/models/bert_encoder')");
    expect_error(db, "SELECT sentiment_explain('好', 'enc')", "no classification head");
    /* NULL and blank text: NULL */
    assert_true(q_is_null(db, "SELECT sentiment_explain(NULL)"));
    assert_true(q_is_null(db, "SELECT sentiment_explain('   ', 'tiny')"));
    assert_true(q_is_null(db, "SELECT sentiment_explain('', 'tiny')"));
    /* invalid UTF-8 is repaired, never an error; "text" has as many
     * characters as SQLite counts in the input, each bad one U+FFFD */
    assert_false(q_is_null(db, "SELECT sentiment_explain(CAST(x'e5a5bdff' AS TEXT), 'tiny')"));
    expect_text(db, "WITH x(t) AS (SELECT CAST(x'22e5a5bdff80e5' AS TEXT) || '吃\"') "
                    "SELECT json_extract(sentiment_explain(t, 'tiny'), '$.text') = "
                    "'\"好' || char(65533, 65533) || '吃\"' AND length(t) = 6 FROM x",
                "1");
    expect_text(db, "SELECT json_extract(sentiment_explain('a\"b\\c', 'tiny'), '$.text')",
                "a\"b\\c");
    /* truncated to max_length */
    exec_ok(db, "SELECT sentiment_config('max_length', 8)");
    expect_text(db, "SELECT json_extract(sentiment_explain('这家酒店很干净，服务也很周到。', 'tiny'), "
                    "'$.truncated') || json_array_length(sentiment_explain('这家酒店很干净，服务也很周到。', "
                    "'tiny'), '$.tokens')", "16");
    sqlite3_close(db);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double g_deadline;

static int stop_after_deadline(void *user)
{
    (void)user;
    return now_s() > g_deadline;
}

/* A progress handler stops a long explanation between passes. */
static void test_interrupt(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    char sql[4096];
    char text[3000] = "";
    for (int i = 0; i < 120; i++) strcat(text, "房间很干净，");
    snprintf(sql, sizeof sql, "SELECT sentiment_explain('%s', 'default', '{\"steps\":1024}')", text);
    g_deadline = now_s() + 0.2;
    sqlite3_progress_handler(db, 100, stop_after_deadline, NULL);
    double t0 = now_s();
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    double took = now_s() - t0;
    assert_int_equal(rc, SQLITE_INTERRUPT);
    assert_non_null(strstr(err, "interrupted"));
    sqlite3_free(err);
    if (took > 10) fail_msg("took %.1f s to stop", took);
    sqlite3_progress_handler(db, 0, NULL, NULL);
    /* the connection works */
    expect_text(db, "SELECT sentiment('好')", "positive");
    sqlite3_close(db);
}

/* classify's hidden explanation column: the function's JSON, row by row,
 * computed only when named. */
static void test_classify_column(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    sqlite3_stmt *st = prepare(db, "SELECT count(*), sum(c.explanation = sentiment_explain(t.body, "
                                   "'tiny')), sum(c.explanation IS NULL), sum(json_extract(c.explanation, "
                                   "'$.label') = c.label) FROM classify('t', 'body', 'tiny') c JOIN t ON t.id = c.id");
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 20);
    assert_int_equal(sqlite3_column_int(st, 1), 16);
    assert_int_equal(sqlite3_column_int(st, 2), 4); /* NULL, empty and blank bodies */
    assert_true(sqlite3_column_int(st, 3) >= 15);    /* FP32 passes vs the classify label */
    sqlite3_finalize(st);
    /* not named: not computed (each explanation counts as a row classified) */
    int64_t before = debug_int(db, "$.connection.rows");
    expect_text(db, "SELECT count(label) FROM classify('t', 'body', 'tiny')", "16");
    assert_int_equal(debug_int(db, "$.connection.rows") - before, 16);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_and_spans),
        cmocka_unit_test(test_attributions_match_pytorch),
        cmocka_unit_test(test_completeness),
        cmocka_unit_test(test_polarity_words),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_interrupt),
        cmocka_unit_test(test_classify_column),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

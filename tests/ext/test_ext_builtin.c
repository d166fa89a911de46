/* test_ext_builtin.c: the built-in model, as a newcomer meets it.
 *
 * Copies sentiment.so alone into an empty temporary directory, changes
 * into it and loads it with sqlite3_load_extension, as the sqlite3 shell's
 * .load does: no model file, no fixture and no repository path is
 * reachable, so the model can only come from the library itself. Then
 * checks that clear-cut reviews, written for this test (none is from the
 * data sets the model was trained or evaluated on), get the right label
 * through sentiment(), sentiment_score() and classify, and that
 * sentiment_models lists the built-in model with its shape and labels.
 *
 * The library is $BUILD/sentiment.so (build/ by default; make asan runs
 * this against build-asan/).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

/* The shipped model's shape (model/builtin/config.json, model/builtin/README.md). */
#define BUILTIN_LAYERS 6
#define BUILTIN_HIDDEN 128
#define BUILTIN_HEADS 4

typedef struct review_case {
    const char *text;
    const char *label;
} review_case;

/* Hotels, products, takeaway, books and electronics; half each way. */
static const review_case k_cases[] = {
    {"房间很干净，前台服务热情", "positive"},
    {"这本书写得非常好，内容丰富，值得一读", "positive"},
    {"手机运行流畅，屏幕清晰，电池也很耐用，非常满意", "positive"},
    {"外卖送得很快，饭菜还是热的，味道很棒", "positive"},
    {"酒店位置方便，早餐丰富，下次还会再来", "positive"},
    {"质量很好，做工精细，物超所值", "positive"},
    {"房间又脏又小，空调还坏了，再也不会住了", "negative"},
    {"送餐太慢了，等了两个小时，菜都凉了", "negative"},
    {"电脑用了三天就死机，客服也不理人，非常失望", "negative"},
    {"这本书内容空洞，印刷很差，浪费钱", "negative"},
    {"质量太差了，穿了一次就破了，差评", "negative"},
    {"服务态度恶劣，价格还贵，不推荐", "negative"},
};
#define N_CASES (int)(sizeof k_cases / sizeof k_cases[0])

static char g_dir[256];
static char g_home[4096];

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    if (!in || !out) fail_msg("cannot copy %s to %s", from, to);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* An empty directory holding only sentiment.so, made the working directory. */
static int setup(void **state)
{
    (void)state;
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    char so[4096];
    if (!getcwd(g_home, sizeof g_home)) return -1;
    if (snprintf(so, sizeof so, "%s/%s/sentiment.so", g_home, build) >= (int)sizeof so) return -1;
    snprintf(g_dir, sizeof g_dir, "/tmp/sentiment-builtin-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char to[512];
    snprintf(to, sizeof to, "%s/sentiment.so", g_dir);
    copy_file(so, to);
    return chdir(g_dir);
}

static int teardown(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/sentiment.so", g_dir);
    unlink(path);
    rmdir(g_dir);
    return chdir(g_home);
}

static sqlite3 *open_loaded(void)
{
    sqlite3 *db = NULL;
    char *err = NULL;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    assert_int_equal(sqlite3_enable_load_extension(db, 1), SQLITE_OK);
    if (sqlite3_load_extension(db, "./sentiment.so", NULL, &err) != SQLITE_OK)
        fail_msg("load_extension: %s", err ? err : "?");
    return db;
}

/* The first column of the first row of sql with one text bound, as text. */
static char *query_text(sqlite3 *db, const char *sql, const char *arg)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("prepare: %s\n  %s", sqlite3_errmsg(db), sql);
    if (arg) sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) fail_msg("step: %s\n  %s", sqlite3_errmsg(db), sql);
    const char *v = (const char *)sqlite3_column_text(st, 0);
    char *out = strdup(v ? v : "(null)");
    sqlite3_finalize(st);
    return out;
}

static void test_nothing_but_the_library(void **state)
{
    (void)state;
    /* The working directory holds the library and nothing else. */
    assert_int_equal(access("model", F_OK), -1);
    assert_int_equal(access("tests", F_OK), -1);
    sqlite3 *db = open_loaded();
    char *builtin = query_text(db, "SELECT json_extract(sentiment_debug(), '$.builtin_model')", NULL);
    assert_string_equal(builtin, "1");
    free(builtin);
    sqlite3_close(db);
}

static void test_clear_cut_reviews(void **state)
{
    (void)state;
    sqlite3 *db = open_loaded();
    for (int i = 0; i < N_CASES; i++) {
        char *label = query_text(db, "SELECT sentiment(?1)", k_cases[i].text);
        char *score = query_text(db, "SELECT sentiment_score(?1) > 0.5", k_cases[i].text);
        if (strcmp(label, k_cases[i].label))
            fail_msg("'%s': expected %s, got %s", k_cases[i].text, k_cases[i].label, label);
        assert_string_equal(score, strcmp(k_cases[i].label, "positive") ? "0" : "1");
        free(label);
        free(score);
    }
    sqlite3_close(db);
}

/* The same texts through the batched path give the same labels. */
static void test_classify_agrees(void **state)
{
    (void)state;
    sqlite3 *db = open_loaded();
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE r(id INTEGER PRIMARY KEY, t TEXT)", NULL,
                                  NULL, NULL),
                     SQLITE_OK);
    sqlite3_stmt *ins = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO r(id, t) VALUES (?1, ?2)", -1, &ins, NULL),
                     SQLITE_OK);
    for (int i = 0; i < N_CASES; i++) {
        sqlite3_bind_int(ins, 1, i);
        sqlite3_bind_text(ins, 2, k_cases[i].text, -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT id, label FROM classify('r', 't') ORDER BY id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int id = sqlite3_column_int(st, 0);
        assert_true(id >= 0 && id < N_CASES);
        assert_string_equal((const char *)sqlite3_column_text(st, 1), k_cases[id].label);
        n++;
    }
    assert_int_equal(n, N_CASES);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void test_listed_in_sentiment_models(void **state)
{
    (void)state;
    sqlite3 *db = open_loaded();
    sqlite3_stmt *st = NULL;
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT name, version, source, labels, model_type, layers, "
                           "hidden_size, heads, max_length, parameters FROM sentiment_models",
                           -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "default");
    assert_int_equal(sqlite3_column_int(st, 1), 1);
    assert_string_equal((const char *)sqlite3_column_text(st, 2), "builtin");
    assert_string_equal((const char *)sqlite3_column_text(st, 3), "[\"negative\",\"positive\"]");
    assert_string_equal((const char *)sqlite3_column_text(st, 4), "bert");
    assert_int_equal(sqlite3_column_int(st, 5), BUILTIN_LAYERS);
    assert_int_equal(sqlite3_column_int(st, 6), BUILTIN_HIDDEN);
    assert_int_equal(sqlite3_column_int(st, 7), BUILTIN_HEADS);
    assert_int_equal(sqlite3_column_int(st, 8), 128);
    /* embeddings + 6 layers of 128: between 1 and 2 million with its vocabulary */
    sqlite3_int64 params = sqlite3_column_int64(st, 9);
    assert_true(params > 1000000 && params < 4000000);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE); /* the only model */
    sqlite3_finalize(st);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_but_the_library),
        cmocka_unit_test(test_clear_cut_reviews),
        cmocka_unit_test(test_classify_agrees),
        cmocka_unit_test(test_listed_in_sentiment_models),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

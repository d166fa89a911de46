/* test_ext_storage.c: models stored in the database, the model cache, and
 * loading the real build/sentiment.so with sqlite3_load_extension.
 */
#include "support/ext_test_util.h"

#include <unistd.h>

static char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void test_no_write_on_load(void **state)
{
    (void)state;
    char path[] = "/tmp/sentiment_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    sqlite3 *db = open_db_path(path);
    exec_ok(db, "CREATE TABLE r(x); INSERT INTO r VALUES ('很好')");
    int64_t changes = sqlite3_total_changes(db);
    load_tiny(db);
    exec_ok(db, "SELECT sentiment(x, 'tiny') FROM r");
    exec_ok(db, "SELECT * FROM sentiment_models");
    expect_error(db, "SELECT sentiment('x', 'hotel')", "no model named 'hotel'");
    expect_error(db, "SELECT sentiment('x', 'hotel@2')", "no model named 'hotel@2'");
    exec_ok(db, "SELECT * FROM classify('r', 'x', 'tiny')");
    expect_text(db, "SELECT group_concat(name) FROM sqlite_schema", "r");
    assert_int_equal(sqlite3_total_changes(db), changes);
    sqlite3_close(db);
    unlink(path);
}

static void test_schema_matches_sql_file(void **state)
{
    (void)state;
    char *schema = read_text_file("sql/schema.sql");
    sqlite3 *a = open_db(), *b = open_db();
    exec_ok(a, schema);
    load_tiny(b);
    expect_text(b, "SELECT sentiment_save('hotel', 'tiny')", "1");
    char *sa = q_text(a, "SELECT sql FROM sqlite_schema WHERE name = 'sentiment_model_store'");
    char *sb = q_text(b, "SELECT sql FROM sqlite_schema WHERE name = 'sentiment_model_store'");
    assert_non_null(sa);
    assert_non_null(sb);
    assert_string_equal(sa, sb);
    free(sa);
    free(sb);
    free(schema);
    sqlite3_close(a);
    sqlite3_close(b);
}

static void test_save_versions(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_text(db, "SELECT sentiment_save('hotel', 'tiny')", "1");
    expect_text(db, "SELECT sentiment_save('hotel', 'tiny')", "2");
    /* the built-in model (or what 'default' is registered as) by its name */
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    expect_text(db, "SELECT sentiment_save('shop', 'default')", "1");
    expect_text(db, "SELECT group_concat(name || version) FROM sentiment_model_store", "hotel1,hotel2,shop1");
    sqlite3_close(db);
}

static void test_database_models(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_load('emo', '" ERNIE_MODEL "')");
    expect_text(db, "SELECT sentiment_save('hotel', 'tiny')", "1");
    expect_text(db, "SELECT sentiment_save('hotel', 'emo')", "2");
    expect_text(db, "SELECT group_concat(name || '@' || version || ':' || source, ' ') FROM sentiment_models "
                    "WHERE source <> 'builtin'",
                "tiny@1:file emo@1:file hotel@1:database hotel@2:database");
    expect_text(db, "SELECT labels FROM sentiment_models WHERE name = 'hotel' AND version = 2",
                "[\"anger\",\"joy\",\"neutral\"]");
    expect_text(db, "SELECT count(*) FROM sentiment_models WHERE source = 'database' AND created LIKE '20__-__-__T__:__:__Z' "
                    "AND layers = 2 AND hidden_size = 64 AND heads = 4 AND max_length = 64 AND parameters > 0 "
                    "AND path IS NULL",
                "2");
    expect_text(db, "SELECT labels FROM " "sentiment_model_store WHERE version = 1", "[\"negative\",\"positive\"]");
    /* the latest version by default, name@N for another; same weights, same answers */
    expect_text(db, "SELECT sentiment('服务很好', 'hotel') = sentiment('服务很好', 'emo')", "1");
    expect_text(db, "SELECT sentiment_probs('服务很好', 'hotel@1') = sentiment_probs('服务很好', 'tiny')", "1");
    expect_text(db, "SELECT sentiment_probs('服务很好', 'hotel@2') = sentiment_probs('服务很好', 'emo')", "1");
    expect_error(db, "SELECT sentiment('x', 'hotel@3')", "sentiment(): no version 3 of model 'hotel'; the latest is 2");
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    expect_error(db, "SELECT sentiment('x', 'hote')",
                 "sentiment(): no model named 'hote'; known: default, tiny, emo, hotel");
    expect_error(db, "SELECT sentiment('x', 'hotel@0')", "no model named 'hotel@0'");
    /* classify and the window form on a database model */
    make_reviews(db);
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'hotel@1') c JOIN t USING (id) "
                    "WHERE c.label IS NOT sentiment(t.body, 'tiny')",
                "0");
    sqlite3_close(db);
}

static void test_cache_and_invalidation(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_text(db, "SELECT sentiment_save('hotel', 'tiny')", "1");
    /* the cache knows a stored model by its bytes: make these unlike the
     * other tests' copies of tiny (trailing white space in config.json) */
    exec_ok(db, "UPDATE sentiment_model_store SET config = config || ' '");
    int64_t loads = debug_int(db, "$.cache.loads");
    exec_ok(db, "SELECT sentiment('一', 'hotel')");
    assert_int_equal(debug_int(db, "$.cache.loads"), loads + 1);
    /* second and third queries do not reload, nor does another connection */
    exec_ok(db, "SELECT sentiment('二', 'hotel')");
    exec_ok(db, "SELECT * FROM classify('SELECT 1, ''三''', 'hotel')");
    assert_int_equal(debug_int(db, "$.cache.loads"), loads + 1);
    expect_text(db, "SELECT loaded FROM sentiment_models WHERE name = 'hotel'", "1");
    /* a newer version is a new load, and the old one leaves the cache */
    expect_text(db, "SELECT sentiment_save('hotel', 'tiny')", "2");
    exec_ok(db, "UPDATE sentiment_model_store SET config = config || '  ' WHERE version = 2");
    expect_text(db, "SELECT group_concat(loaded) FROM sentiment_models WHERE name = 'hotel'", "1,0");
    exec_ok(db, "SELECT sentiment('四', 'hotel')");
    assert_int_equal(debug_int(db, "$.cache.loads"), loads + 2);
    expect_text(db, "SELECT group_concat(loaded) FROM sentiment_models WHERE name = 'hotel'", "0,1");
    /* the old version is still usable by name@1 (loaded afresh) */
    exec_ok(db, "SELECT sentiment('五', 'hotel@1')");
    assert_int_equal(debug_int(db, "$.cache.loads"), loads + 3);
    /* registering the same directory twice shares one cache entry */
    int64_t l2 = debug_int(db, "$.cache.loads");
    exec_ok(db, "SELECT sentiment_load('tiny2', '" TINY_MODEL "')");
    assert_int_equal(debug_int(db, "$.cache.loads"), l2);
    sqlite3_close(db);
}

static void test_two_connections_share_cache(void **state)
{
    (void)state;
    sqlite3 *a = open_db(), *b = open_db();
    load_tiny(a);
    int64_t loads = debug_int(a, "$.cache.loads");
    load_tiny(b);
    exec_ok(b, "SELECT sentiment('好', 'tiny')");
    assert_int_equal(debug_int(b, "$.cache.loads"), loads);
    /* closing one connection does not disturb the other */
    sqlite3_close(a);
    expect_text(b, "SELECT sentiment('好', 'tiny') IS NOT NULL", "1");
    sqlite3_close(b);
}

static void test_corrupt_blob(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_text(db, "SELECT sentiment_save('hotel', 'tiny')", "1");
    /* garbage bytes, a truncated file, a broken config */
    exec_ok(db, "INSERT INTO sentiment_model_store(name, version, config, vocab, labels, safetensors) "
                "SELECT 'bad', 1, config, vocab, labels, x'0001020304' FROM sentiment_model_store;"
                "INSERT INTO sentiment_model_store(name, version, config, vocab, labels, safetensors) "
                "SELECT 'cut', 1, config, vocab, labels, substr(safetensors, 1, length(safetensors) / 2) "
                "FROM sentiment_model_store WHERE name = 'hotel';"
                "INSERT INTO sentiment_model_store(name, version, config, vocab, labels, safetensors) "
                "SELECT 'cfg', 1, '{\"hidden_size\": \"big\"', vocab, labels, safetensors "
                "FROM sentiment_model_store WHERE name = 'hotel';"
                "INSERT INTO sentiment_model_store(name, version, config, vocab, labels, safetensors) "
                "SELECT 'voc', 1, config, 'no special tokens', labels, safetensors "
                "FROM sentiment_model_store WHERE name = 'hotel';");
    expect_error(db, "SELECT sentiment('x', 'bad')",
                 "sentiment(): cannot load model 'bad' version 1 from the database: ");
    expect_error(db, "SELECT sentiment_score('x', 'cut')",
                 "sentiment_score(): cannot load model 'cut' version 1 from the database: ");
    expect_error(db, "SELECT * FROM classify('SELECT 1, ''x''', 'cfg')",
                 "classify(): cannot load model 'cfg' version 1 from the database: ");
    expect_error(db, "SELECT sentiment_batch('x', 'voc') OVER (ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING)",
                 "sentiment_batch(): cannot load model 'voc' version 1 from the database: ");
    /* listed, with NULL architecture where the config does not parse */
    expect_text(db, "SELECT count(*) FROM sentiment_models WHERE source = 'database'", "5");
    expect_text(db, "SELECT layers IS NULL AND labels IS NULL FROM sentiment_models WHERE name = 'cfg'", "1");
    /* the good model still works */
    expect_text(db, "SELECT sentiment('x', 'hotel') = sentiment('x', 'tiny')", "1");
    sqlite3_close(db);
}

static void test_database_file_carries_models(void **state)
{
    (void)state;
    char path[] = "/tmp/sentiment_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    sqlite3 *db = open_db_path(path);
    load_tiny(db);
    char *want = q_text(db, "SELECT sentiment_probs('房间很大', 'tiny')");
    expect_text(db, "SELECT sentiment_save('hotel', 'tiny')", "1");
    sqlite3_close(db);
    /* a new connection knows nothing of 'tiny' but finds 'hotel' in the file */
    db = open_db_path(path);
    char *got = q_text(db, "SELECT sentiment_probs('房间很大', 'hotel')");
    assert_string_equal(got, want);
    free(got);
    free(want);
    sqlite3_close(db);
    unlink(path);
}

static void test_load_extension_so(void **state)
{
    (void)state;
    const char *build = getenv("BUILD");
    char so[512], *err = NULL;
    sqlite3 *db = NULL, *ref = open_db();
    snprintf(so, sizeof so, "%s/sentiment", build && *build ? build : "build");
    /* a connection without the auto extension: sqlite3_open_v2 runs it, so
     * cancel the registration first */
    sqlite3_reset_auto_extension();
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    expect_error(db, "SELECT sentiment('x')", "no such function: sentiment");
    assert_int_equal(sqlite3_enable_load_extension(db, 1), SQLITE_OK);
    if (sqlite3_load_extension(db, so, NULL, &err) != SQLITE_OK) fail_msg("load_extension(%s): %s", so, err);
    expect_text(db, "SELECT sentiment_version()", "0.1.0");
    /* the same device for both (auto could pick a GPU for the .so) */
    exec_ok(db, "SELECT sentiment_config('device', 'cpu')");
    load_tiny(db);
    load_tiny(ref);
    char *a = q_text(db, "SELECT sentiment_probs('这家店的菜很好吃', 'tiny')");
    char *b = q_text(ref, "SELECT sentiment_probs('这家店的菜很好吃', 'tiny')");
    assert_string_equal(a, b);
    free(a);
    free(b);
    expect_text(db, "SELECT count(*) FROM classify('SELECT 1, ''好''', 'tiny')", "1");
    sqlite3_close(db);
    sqlite3_close(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_write_on_load),
        cmocka_unit_test(test_schema_matches_sql_file),
        cmocka_unit_test(test_save_versions),
        cmocka_unit_test(test_database_models),
        cmocka_unit_test(test_cache_and_invalidation),
        cmocka_unit_test(test_two_connections_share_cache),
        cmocka_unit_test(test_corrupt_blob),
        cmocka_unit_test(test_database_file_carries_models),
        cmocka_unit_test(test_load_extension_so),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

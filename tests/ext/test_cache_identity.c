/* test_cache_identity.c: a stored model's identity in the process-wide
 * cache is the hash of its bytes. Two databases with the same uid keep
 * their own models; an UPDATE of a stored row is seen by the same and by
 * other connections; a corrupted row is an error, never the old model;
 * sentiment_use verifies what it copies; sentiment_save(name) saves what
 * the name means; sentiment_drop and sentiment_export; the schema's
 * triggers keep sentiment_train_log with its models. A model directory's
 * identity covers every file it is read from: an edit of its
 * 1_Pooling/config.json or modules.json is seen by the next sentiment_load.
 */
#include "support/embed_test_util.h"
#include "support/ext_test_util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define BIN_LABELS "{\"negative\":"
#define EMO_LABELS "{\"anger\":"

static char *temp_db(void)
{
    char *path = strdup("/tmp/sentiment_cache_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    return path;
}

static void expect_prefix(sqlite3 *db, const char *sql, const char *prefix)
{
    char *got = q_text(db, sql);
    if (!got || strncmp(got, prefix, strlen(prefix)))
        fail_msg("expected %s... from %s, got %s", prefix, sql, got ? got : "NULL");
    free(got);
}

/* A database holding 'm' version 1 made from the model registered as
 * `from` (tiny: negative/positive, emo: anger/joy/neutral). */
static sqlite3 *db_with_model(const char *path, const char *from)
{
    sqlite3 *db = open_db_path(path);
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_load('emo', '" ERNIE_MODEL "')");
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT sentiment_save('m', '%s')", from);
    expect_text(db, sql, "1");
    return db;
}

static void test_same_uid_two_databases(void **state)
{
    (void)state;
    char *pa = temp_db(), *pb = temp_db();
    sqlite3 *a = db_with_model(pa, "tiny"), *b = db_with_model(pb, "emo");
    char *uid = q_text(a, "SELECT uid FROM sentiment_model_store");
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE sentiment_model_store SET uid = '%s'", uid);
    exec_ok(b, sql);
    for (int round = 0; round < 3; round++) {
        expect_prefix(a, "SELECT sentiment_probs('服务很好', 'm')", BIN_LABELS);
        expect_prefix(b, "SELECT sentiment_probs('服务很好', 'm')", EMO_LABELS);
    }
    /* a fresh connection to b, with a's model cached, gets b's */
    sqlite3 *b2 = open_db_path(pb);
    expect_prefix(b2, "SELECT sentiment_probs('服务很好', 'm')", EMO_LABELS);
    expect_text(b2, "SELECT count(*) FROM classify('SELECT 1, ''好''', 'm') WHERE probs LIKE '{\"anger\"%'", "1");
    sqlite3_close(b2);
    /* two in-memory databases too */
    sqlite3 *ma = db_with_model(":memory:", "tiny"), *mb = db_with_model(":memory:", "emo");
    exec_ok(mb, sql);
    exec_ok(ma, sql);
    expect_prefix(ma, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    expect_prefix(mb, "SELECT sentiment_probs('好', 'm')", EMO_LABELS);
    sqlite3_close(ma);
    sqlite3_close(mb);
    free(uid);
    sqlite3_close(a);
    sqlite3_close(b);
    unlink(pa);
    unlink(pb);
    free(pa);
    free(pb);
}

/* Replace m@1's bytes with those of the emo model (row 'e'). */
static const char k_swap[] =
    "UPDATE sentiment_model_store SET (config, vocab, labels, safetensors) = "
    "(SELECT config, vocab, labels, safetensors FROM sentiment_model_store WHERE name = 'e') "
    "WHERE name = 'm'";

static void test_update_seen_by_same_and_new_connection(void **state)
{
    (void)state;
    char *path = temp_db();
    sqlite3 *db = db_with_model(path, "tiny");
    sqlite3 *other = open_db_path(path);
    expect_text(db, "SELECT sentiment_save('e', 'emo')", "1");
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    expect_prefix(other, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    int64_t loads = debug_int(db, "$.cache.loads");
    exec_ok(db, "SELECT sentiment('好', 'm')"); /* unchanged: no reload */
    assert_int_equal(debug_int(db, "$.cache.loads"), loads);
    exec_ok(db, k_swap);
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", EMO_LABELS);
    /* another connection that had the old model, and a new one */
    expect_prefix(other, "SELECT sentiment_probs('好', 'm')", EMO_LABELS);
    sqlite3 *fresh = open_db_path(path);
    expect_prefix(fresh, "SELECT sentiment_probs('好', 'm')", EMO_LABELS);
    expect_text(fresh, "SELECT label IN ('anger', 'joy', 'neutral') FROM classify('SELECT 1, ''好''', 'm')", "1");
    sqlite3_close(fresh);
    sqlite3_close(other);
    sqlite3_close(db);
    unlink(path);
    free(path);
}

static void test_corrupt_blob_after_use(void **state)
{
    (void)state;
    char *path = temp_db();
    sqlite3 *db = db_with_model(path, "tiny");
    sqlite3 *other = open_db_path(path);
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    expect_prefix(other, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    exec_ok(db, "CREATE TABLE keep AS SELECT safetensors FROM sentiment_model_store");
    exec_ok(db, "UPDATE sentiment_model_store SET safetensors = randomblob(100)");
    expect_error(db, "SELECT sentiment('好', 'm')",
                 "sentiment(): cannot load model 'm' version 1 from the database: ");
    expect_error(other, "SELECT sentiment_probs('好', 'm')",
                 "sentiment_probs(): cannot load model 'm' version 1 from the database: ");
    sqlite3 *fresh = open_db_path(path);
    expect_error(fresh, "SELECT * FROM classify('SELECT 1, ''好''', 'm')",
                 "classify(): cannot load model 'm' version 1 from the database: ");
    /* truncated and empty BLOBs, a config that is not JSON */
    exec_ok(db, "UPDATE sentiment_model_store SET safetensors = substr((SELECT safetensors FROM keep), 1, 1000)");
    expect_error(other, "SELECT sentiment('好', 'm')", "cannot load model 'm' version 1 from the database: ");
    exec_ok(db, "UPDATE sentiment_model_store SET safetensors = x''");
    expect_error(other, "SELECT sentiment('好', 'm')", "config, vocab or safetensors is empty");
    /* the original bytes again: the model is back, for everyone */
    exec_ok(db, "UPDATE sentiment_model_store SET safetensors = (SELECT safetensors FROM keep)");
    expect_prefix(fresh, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    expect_prefix(other, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    exec_ok(db, "UPDATE sentiment_model_store SET config = '{\"hidden_size\": '");
    expect_error(fresh, "SELECT sentiment('好', 'm')", "cannot load model 'm' version 1 from the database: ");
    sqlite3_close(fresh);
    sqlite3_close(other);
    sqlite3_close(db);
    unlink(path);
    free(path);
}

/* Changes inside a transaction are seen, and so is their rollback. */
static void test_update_in_transaction_and_rollback(void **state)
{
    (void)state;
    sqlite3 *db = db_with_model(":memory:", "tiny");
    expect_text(db, "SELECT sentiment_save('e', 'emo')", "1");
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    exec_ok(db, "BEGIN");
    exec_ok(db, k_swap);
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", EMO_LABELS);
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", EMO_LABELS);
    exec_ok(db, "ROLLBACK");
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    exec_ok(db, "BEGIN");
    exec_ok(db, "SAVEPOINT s");
    exec_ok(db, "UPDATE sentiment_model_store SET safetensors = randomblob(64) WHERE name = 'm'");
    expect_error(db, "SELECT sentiment('好', 'm')", "cannot load model 'm' version 1 from the database: ");
    exec_ok(db, "ROLLBACK TO s");
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    exec_ok(db, "COMMIT");
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    sqlite3_close(db);
}

static void test_use_verifies_version(void **state)
{
    (void)state;
    sqlite3 *db = db_with_model(":memory:", "tiny");
    expect_text(db, "SELECT sentiment_save('m', 'tiny')", "2");
    exec_ok(db, "UPDATE sentiment_model_store SET safetensors = randomblob(100) WHERE version = 1");
    expect_error(db, "SELECT sentiment_use('m', 1)",
                 "sentiment_use(): cannot load model 'm' version 1 from the database: ");
    expect_text(db, "SELECT max(version) FROM sentiment_model_store", "2");
    exec_ok(db, "UPDATE sentiment_model_store SET config = 'not json' WHERE version = 2");
    expect_error(db, "SELECT sentiment_use('m', 2)", "sentiment_use(): cannot load model 'm' version 2");
    expect_text(db, "SELECT count(*) FROM sentiment_model_store", "2");
    expect_error(db, "SELECT sentiment_use('m', 3)", "sentiment_use(): no version 3 of model 'm'; the latest is 2");
    expect_error(db, "SELECT sentiment_use('nope', 1)", "sentiment_use(): no model named 'nope' is stored");
    /* a good version is copied */
    expect_text(db, "SELECT sentiment_save('m', 'tiny')", "3");
    expect_text(db, "SELECT sentiment_use('m', 3)", "4");
    expect_text(db, "SELECT json_extract(metrics, '$.restored_from') FROM sentiment_model_store WHERE version = 4", "3");
    expect_prefix(db, "SELECT sentiment_probs('好', 'm')", BIN_LABELS);
    sqlite3_close(db);
}

static void test_save_name_saves_what_it_means(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    exec_ok(db, "SELECT sentiment_load('bt', '" ERNIE_MODEL "')");
    expect_text(db, "SELECT sentiment_save('bt')", "1");
    expect_text(db, "SELECT labels FROM sentiment_model_store WHERE name = 'bt'", "[\"anger\",\"joy\",\"neutral\"]");
    expect_text(db, "SELECT sentiment_probs('好', 'bt@1') = sentiment_probs('好', 'bt')", "1");
    /* a stored name: its latest version again */
    exec_ok(db, "SELECT sentiment_load('bt', NULL)");
    expect_text(db, "SELECT sentiment_save('bt')", "2");
    expect_text(db, "SELECT count(DISTINCT safetensors) FROM sentiment_model_store WHERE name = 'bt'", "1");
    /* a name that means nothing */
    expect_error(db, "SELECT sentiment_save('nothing')",
                 "sentiment_save(): no model named 'nothing' is registered or stored to save; "
                 "sentiment_save('nothing', 'default') stores the built-in model");
    load_tiny(db);
    expect_text(db, "SELECT sentiment_save('bt', 'tiny')", "3");
    expect_text(db, "SELECT labels FROM sentiment_model_store WHERE version = 3", "[\"negative\",\"positive\"]");
    sqlite3_close(db);
}

static void add_log(sqlite3 *db, const char *model, int version, int rows)
{
    char sql[256];
    for (int i = 0; i < rows; i++) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO sentiment_train_log VALUES ('%s', %d, 'step', 0, %d, 0.5, 1e-4, 1, NULL, 10, 1)",
                 model, version, i);
        exec_ok(db, sql);
    }
}

static void test_drop(void **state)
{
    (void)state;
    sqlite3 *db = db_with_model(":memory:", "tiny");
    expect_text(db, "SELECT sentiment_save('m', 'tiny')", "2");
    expect_text(db, "SELECT sentiment_save('m', 'emo')", "3");
    expect_text(db, "SELECT sentiment_save('k', 'tiny')", "1");
    add_log(db, "m", 1, 2);
    add_log(db, "m", 2, 3);
    add_log(db, "k", 1, 1);
    expect_text(db, "SELECT sentiment_drop('m', 2)", "1");
    expect_text(db, "SELECT group_concat(version) FROM sentiment_model_store WHERE name = 'm'", "1,3");
    expect_text(db, "SELECT count(*) FROM sentiment_train_log WHERE model = 'm'", "2");
    expect_error(db, "SELECT sentiment('x', 'm@2')", "no version 2 of model 'm'; the latest is 3");
    expect_text(db, "SELECT sentiment_drop('m')", "2");
    expect_text(db, "SELECT count(*) FROM sentiment_model_store WHERE name = 'm'", "0");
    expect_text(db, "SELECT count(*) FROM sentiment_train_log WHERE model = 'm'", "0");
    expect_text(db, "SELECT count(*) FROM sentiment_train_log WHERE model = 'k'", "1");
    expect_error(db, "SELECT sentiment('x', 'm')", "no model named 'm'");
    /* a plain DELETE takes the log rows too */
    exec_ok(db, "DELETE FROM sentiment_model_store WHERE name = 'k'");
    expect_text(db, "SELECT count(*) FROM sentiment_train_log", "0");
    sqlite3_close(db);
}

static void test_drop_bad_input(void **state)
{
    (void)state;
    sqlite3 *db = db_with_model(":memory:", "tiny");
    expect_error(db, "SELECT sentiment_drop('nope')", "sentiment_drop(): no model named 'nope' is stored in this database");
    expect_error(db, "SELECT sentiment_drop('m', 5)", "sentiment_drop(): no version 5 of model 'm'; the latest is 1");
    expect_error(db, "SELECT sentiment_drop('tiny')",
                 "sentiment_drop(): model 'tiny' is registered with sentiment_load(), not stored");
    expect_error(db, "SELECT sentiment_drop(NULL)", "sentiment_drop(): expected a stored model name (TEXT)");
    expect_error(db, "SELECT sentiment_drop(42)", "sentiment_drop(): expected a stored model name (TEXT)");
    expect_error(db, "SELECT sentiment_drop('')", "sentiment_drop(): expected a stored model name (TEXT)");
    expect_error(db, "SELECT sentiment_drop(CAST(x'6d006d' AS TEXT))", "sentiment_drop(): model name contains a NUL byte");
    expect_error(db, "SELECT sentiment_drop('m', 0)", "sentiment_drop(): expected a version number (INTEGER >= 1)");
    expect_error(db, "SELECT sentiment_drop('m', '1')", "sentiment_drop(): expected a version number (INTEGER >= 1)");
    expect_error(db, "SELECT sentiment_drop('m', 1.5)", "sentiment_drop(): expected a version number (INTEGER >= 1)");
    expect_error(db, "SELECT sentiment_drop()", "wrong number of arguments to function sentiment_drop()");
    exec_ok(db, "CREATE TABLE t(x); CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT sentiment_drop('m'); END;");
    expect_error(db, "INSERT INTO t VALUES (1)", "unsafe use of sentiment_drop()");
    exec_ok(db, "CREATE VIEW v AS SELECT sentiment_export('m', '/tmp/never') AS x");
    expect_error(db, "SELECT * FROM v", "unsafe use of sentiment_export()");
    expect_text(db, "SELECT count(*) FROM sentiment_model_store", "1");
    sqlite3_close(db);
    /* a database without the store */
    db = open_db();
    expect_error(db, "SELECT sentiment_drop('m')", "sentiment_drop(): no model named 'm' is stored in this database");
    sqlite3_close(db);
}

static void test_drop_read_only(void **state)
{
    (void)state;
    char *path = temp_db();
    sqlite3 *db = db_with_model(path, "tiny");
    sqlite3_close(db);
    sqlite3_auto_extension((void (*)(void))sqlite3_sentiment_init);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    expect_error(db, "SELECT sentiment_drop('m')", "sentiment_drop(): the database is read-only");
    expect_text(db, "SELECT count(*) FROM sentiment_model_store", "1");
    sqlite3_close(db);
    unlink(path);
    free(path);
}

/* A database made before the log table and the triggers were part of the
 * schema: dropping (or storing) adds them. */
static void test_old_database_migrates(void **state)
{
    (void)state;
    sqlite3 *db = db_with_model(":memory:", "tiny");
    exec_ok(db, "DROP TRIGGER sentiment_model_store_delete; DROP TRIGGER sentiment_model_store_rename");
    add_log(db, "m", 1, 2);
    expect_text(db, "SELECT sentiment_save('m', 'tiny')", "2");
    expect_text(db, "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'", "2");
    exec_ok(db, "DROP TRIGGER sentiment_model_store_delete");
    expect_text(db, "SELECT sentiment_drop('m', 1)", "1");
    expect_text(db, "SELECT count(*) FROM sentiment_train_log", "0");
    expect_text(db, "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'", "2");
    /* renaming a version moves its log */
    add_log(db, "m", 2, 1);
    exec_ok(db, "UPDATE sentiment_model_store SET name = 'r' WHERE name = 'm'");
    expect_text(db, "SELECT model || version FROM sentiment_train_log", "r2");
    sqlite3_close(db);
}

static void test_schema_objects_match_sql_file(void **state)
{
    (void)state;
    FILE *f = fopen("sql/schema.sql", "rb");
    assert_non_null(f);
    char *schema = calloc(1, 1 << 16);
    size_t n = fread(schema, 1, (1 << 16) - 1, f);
    fclose(f);
    schema[n] = 0;
    sqlite3 *a = open_db(), *b = db_with_model(":memory:", "tiny");
    exec_ok(a, schema);
    const char *q = "SELECT group_concat(type || ' ' || name || ': ' || sql, char(10)) FROM "
                    "(SELECT * FROM sqlite_schema WHERE name LIKE 'sentiment%' ORDER BY name)";
    char *sa = q_text(a, q), *sb = q_text(b, q);
    assert_string_equal(sa, sb);
    assert_non_null(strstr(sa, "sentiment_train_log"));
    assert_non_null(strstr(sa, "trigger sentiment_model_store_delete"));
    free(sa);
    free(sb);
    free(schema);
    sqlite3_close(a);
    sqlite3_close(b);
}

static int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *de;
    if (!d) return -1;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void test_export_round_trip(void **state)
{
    (void)state;
    char root[] = "/tmp/sentiment_export_XXXXXX";
    char sql[512], dir[256];
    assert_non_null(mkdtemp(root));
    sqlite3 *db = db_with_model(":memory:", "tiny");
    expect_text(db, "SELECT sentiment_save('m', 'emo')", "2");
    /* a new directory, the latest version */
    snprintf(dir, sizeof dir, "%s/m", root);
    snprintf(sql, sizeof sql, "SELECT sentiment_export('m', '%s')", dir);
    expect_text(db, sql, dir);
    assert_int_equal(dir_entries(dir), 3);
    snprintf(sql, sizeof sql, "SELECT sentiment_load('back', '%s')", dir);
    exec_ok(db, sql);
    expect_text(db, "SELECT sentiment_probs('这家酒店很干净', 'back') = sentiment_probs('这家酒店很干净', 'm')", "1");
    expect_text(db, "SELECT sentiment_probs('这家酒店很干净', 'back') = sentiment_probs('这家酒店很干净', 'emo')", "1");
    /* an existing empty directory, an older version, a trailing slash */
    snprintf(dir, sizeof dir, "%s/m1", root);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(sql, sizeof sql, "SELECT sentiment_export('m@1', '%s/')", dir);
    expect_text(db, sql, dir);
    snprintf(sql, sizeof sql, "SELECT sentiment_load('back1', '%s')", dir);
    exec_ok(db, sql);
    expect_text(db, "SELECT sentiment_probs('房间很小', 'back1') = sentiment_probs('房间很小', 'tiny')", "1");
    /* nothing else was left in root */
    assert_int_equal(dir_entries(root), 2);
    sqlite3_close(db);
    snprintf(sql, sizeof sql, "rm -rf '%s'", root);
    assert_int_equal(system(sql), 0);
}

static void test_export_bad_input(void **state)
{
    (void)state;
    char root[] = "/tmp/sentiment_export_XXXXXX";
    char sql[512];
    assert_non_null(mkdtemp(root));
    sqlite3 *db = db_with_model(":memory:", "tiny");
    /* a non-empty directory, a file, a missing parent */
    snprintf(sql, sizeof sql, "SELECT sentiment_export('m', '%s/full')", root);
    exec_ok(db, sql);
    expect_error(db, sql, "is not empty; expected a new or an empty directory");
    snprintf(sql, sizeof sql, "touch '%s/file'", root);
    assert_int_equal(system(sql), 0);
    snprintf(sql, sizeof sql, "SELECT sentiment_export('m', '%s/file')", root);
    expect_error(db, sql, "exists and is not a directory");
    snprintf(sql, sizeof sql, "SELECT sentiment_export('m', '%s/no/such')", root);
    expect_error(db, sql, "the parent directory '");
    /* unknown names and versions, a registered-only name, bad arguments */
    snprintf(sql, sizeof sql, "SELECT sentiment_export('nope', '%s/a')", root);
    expect_error(db, sql, "sentiment_export(): no model named 'nope' is stored in this database");
    snprintf(sql, sizeof sql, "SELECT sentiment_export('m@7', '%s/a')", root);
    expect_error(db, sql, "sentiment_export(): no version 7 of model 'm'; the latest is 1");
    snprintf(sql, sizeof sql, "SELECT sentiment_export('tiny', '%s/a')", root);
    expect_error(db, sql, "sentiment_export(): no model named 'tiny' is stored in this database");
    expect_error(db, "SELECT sentiment_export('m', NULL)", "sentiment_export(): expected a directory path (TEXT)");
    expect_error(db, "SELECT sentiment_export('m', '')", "sentiment_export(): expected a directory path (TEXT)");
    expect_error(db, "SELECT sentiment_export('m', CAST(x'2f746d70002f78' AS TEXT))",
                 "sentiment_export(): directory path contains a NUL byte");
    expect_error(db, "SELECT sentiment_export(NULL, '/tmp/x')", "sentiment_export(): expected a stored model name (TEXT)");
    expect_error(db, "SELECT sentiment_export(1, '/tmp/x')", "sentiment_export(): expected a stored model name (TEXT)");
    /* a corrupt stored model writes nothing */
    exec_ok(db, "UPDATE sentiment_model_store SET safetensors = randomblob(100)");
    snprintf(sql, sizeof sql, "SELECT sentiment_export('m', '%s/bad')", root);
    expect_error(db, sql, "sentiment_export(): cannot load model 'm' version 1 from the database: ");
    assert_int_equal(dir_entries(root), 2); /* full, file */
    sqlite3_close(db);
    snprintf(sql, sizeof sql, "rm -rf '%s'", root);
    assert_int_equal(system(sql), 0);
}


/* Writes text to dir/name (replacing it). */
static void write_text(const char *dir, const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* hex(sentiment_embed(text, model)) after sentiment_load(model, dir). */
static char *load_and_embed(sqlite3 *db, const char *model, const char *dir)
{
    char sql[700];
    snprintf(sql, sizeof sql, "SELECT sentiment_load('%s', '%s')", model, dir);
    exec_ok(db, sql);
    snprintf(sql, sizeof sql, "SELECT hex(sentiment_embed('房间很干净，服务周到', '%s'))", model);
    return q_text(db, sql);
}

/* The same size as bert_cls's 1_Pooling/config.json, mean instead of CLS. */
static const char k_pool_mean[] =
    "{\n  \"word_embedding_dimension\": 64,\n  \"pooling_mode_cls_token\": false,\n"
    "  \"pooling_mode_mean_tokens\": true,\n  \"pooling_mode_max_tokens\": false,\n"
    "  \"pooling_mode_mean_sqrt_len_tokens\": false,\n"
    "  \"pooling_mode_weightedmean_tokens\": false,\n  \"pooling_mode_lasttoken\": false,\n"
    "  \"include_prompt\": true\n}\n";

static const char k_modules_norm[] =
    "[\n  {\"idx\": 0, \"name\": \"0\", \"path\": \"\", "
    "\"type\": \"sentence_transformers.models.Transformer\"},\n"
    "  {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", "
    "\"type\": \"sentence_transformers.models.Pooling\"},\n"
    "  {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", "
    "\"type\": \"sentence_transformers.models.Normalize\"}\n]\n";

static void test_model_dir_pooling_files_in_identity(void **state)
{
    (void)state;
    char dir[256], fresh[256];
    assert_int_equal(embed_variant_dir("bert_cls", "tests/fixtures/models/bert_encoder", dir,
                                       sizeof dir), 0);
    sqlite3 *db = open_db();
    char *cls = load_and_embed(db, "st", dir);
    assert_non_null(cls);

    /* the pooling's config edited: mean pooling, what a fresh copy gives */
    write_text(dir, "1_Pooling/config.json", k_pool_mean);
    char *mean = load_and_embed(db, "st", dir);
    assert_int_equal(embed_variant_dir("bert_cls", "tests/fixtures/models/bert_encoder", fresh,
                                       sizeof fresh), 0);
    write_text(fresh, "1_Pooling/config.json", k_pool_mean);
    char *want_mean = load_and_embed(db, "fresh", fresh);
    assert_string_not_equal(mean, cls);
    assert_string_equal(mean, want_mean);

    /* modules.json edited: a Normalize module after the pooling */
    write_text(dir, "modules.json", k_modules_norm);
    char *norm = load_and_embed(db, "st", dir);
    write_text(fresh, "modules.json", k_modules_norm);
    char *want_norm = load_and_embed(db, "fresh", fresh);
    assert_string_not_equal(norm, mean);
    assert_string_equal(norm, want_norm);

    /* another connection of the process is served the new files too */
    sqlite3 *db2 = open_db();
    char *other = load_and_embed(db2, "st", dir);
    assert_string_equal(other, want_norm);
    sqlite3_close(db2);

    free(cls);
    free(mean);
    free(want_mean);
    free(norm);
    free(want_norm);
    free(other);
    sqlite3_close(db);
    embed_dir_remove(dir);
    embed_dir_remove(fresh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_uid_two_databases),
        cmocka_unit_test(test_update_seen_by_same_and_new_connection),
        cmocka_unit_test(test_corrupt_blob_after_use),
        cmocka_unit_test(test_update_in_transaction_and_rollback),
        cmocka_unit_test(test_use_verifies_version),
        cmocka_unit_test(test_save_name_saves_what_it_means),
        cmocka_unit_test(test_drop),
        cmocka_unit_test(test_drop_bad_input),
        cmocka_unit_test(test_drop_read_only),
        cmocka_unit_test(test_old_database_migrates),
        cmocka_unit_test(test_schema_objects_match_sql_file),
        cmocka_unit_test(test_export_round_trip),
        cmocka_unit_test(test_export_bad_input),
        cmocka_unit_test(test_model_dir_pooling_files_in_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

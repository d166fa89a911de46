/* test_ext_train.c: the train() aggregate, sentiment_use(), the training log
 * and sentiment_training, through the SQLite C API.
 *
 * The data are generated here: each text mixes neutral words with two
 * words from a positive or a negative list, so the tiny fixture models
 * learn it in a few epochs (a fraction of a second each).
 */
#include "support/ext_test_util.h"
#include "support/interrupt_test_util.h"

#include <math.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static const char *const k_pos[] = {"好", "棒", "赞", "喜欢", "满意", "推荐", "干净", "舒服", "划算", "热情"};
static const char *const k_neg[] = {"差", "烂", "糟", "失望", "脏", "吵", "贵", "慢", "坏", "后悔"};
static const char *const k_filler[] = {"这家", "酒店", "房间", "服务", "东西", "外卖", "我们", "今天",
                                       "感觉", "真的", "还是", "有点"};

static unsigned lcg(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 16) & 0x7fff;
}

/* Table `name`(t TEXT, y) with n rows, alternately positive and negative;
 * y is 'positive'/'negative', or 1/0 (INTEGER) when int_labels, or the
 * given pair of label texts. */
static void make_labeled(sqlite3 *db, const char *name, int n, unsigned seed,
                         const char *pos_label, const char *neg_label, int int_labels)
{
    char sql[256], text[256];
    sqlite3_stmt *st;
    snprintf(sql, sizeof sql, "CREATE TABLE %s(t TEXT, y)", name);
    exec_ok(db, sql);
    snprintf(sql, sizeof sql, "INSERT INTO %s VALUES (?1, ?2)", name);
    st = prepare(db, sql);
    for (int i = 0; i < n; i++) {
        int pos = i % 2 == 0;
        const char *const *w = pos ? k_pos : k_neg;
        snprintf(text, sizeof text, "%s%s%s%s%s", k_filler[lcg(&seed) % 12], k_filler[lcg(&seed) % 12],
                 w[lcg(&seed) % 10], k_filler[lcg(&seed) % 12], w[lcg(&seed) % 10]);
        sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
        if (int_labels) sqlite3_bind_int(st, 2, pos);
        else sqlite3_bind_text(st, 2, pos ? pos_label : neg_label, -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
}

/* json_extract(json, path) as text (malloc'd, NULL for null). */
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

static double jnum(sqlite3 *db, const char *json, const char *path)
{
    char *got = jget(db, json, path);
    if (!got) fail_msg("%s missing in %s", path, json);
    double v = atof(got);
    free(got);
    return v;
}

static int64_t stored_versions(sqlite3 *db)
{
    if (!q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_model_store'")) return 0;
    return q_int(db, "SELECT count(*) FROM sentiment_model_store");
}

static int64_t log_rows(sqlite3 *db)
{
    if (!q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_train_log'")) return 0;
    return q_int(db, "SELECT count(*) FROM sentiment_train_log");
}

static sqlite3 *train_db(void)
{
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    return db;
}

#define TINY_OPTS "'{\"base\":\"tiny\",\"epochs\":4,\"lr\":3e-3,\"seed\":7}'"

/* Runs a train() query and returns its report (malloc'd). */
static char *train_ok(sqlite3 *db, const char *sql)
{
    char *r = q_text(db, sql);
    if (!r) fail_msg("train() returned NULL\n  %s", sql);
    return r;
}

static void test_train_then_classify(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    make_labeled(db, "d", 240, 1, "positive", "negative", 0);
    make_labeled(db, "test", 100, 99, "positive", "negative", 0);
    double before = q_double(db, "SELECT json_extract(sentiment_evaluate(t, y, 'tiny'), '$.accuracy') FROM test");
    char *r = train_ok(db, "SELECT train('hotel', t, y, " TINY_OPTS ") FROM d");
    expect_json(db, r, "$.model", "hotel");
    expect_json(db, r, "$.version", "1");
    expect_json(db, r, "$.base", "tiny");
    expect_json(db, r, "$.head", "kept");
    expect_json(db, r, "$.rows", "240");
    expect_json(db, r, "$.skipped", "0");
    expect_json(db, r, "$.truncated", "0");
    expect_json(db, r, "$.train_rows", "216");
    expect_json(db, r, "$.valid_rows", "24");
    expect_json(db, r, "$.labels", "[\"negative\",\"positive\"]");
    expect_json(db, r, "$.epochs", "4");
    expect_json(db, r, "$.max_length", "64");
    expect_json(db, r, "$.steps", "28");
    char *dev = q_text(db, "SELECT sentiment_device()");
    expect_json(db, r, "$.device", dev);
    free(dev);
    int best = (int)jnum(db, r, "$.best_epoch");
    assert_true(best >= 1 && best <= 4);
    assert_true(jnum(db, r, "$.best_accuracy") >= 0.95);
    assert_true(jnum(db, r, "$.seconds") > 0);
    assert_true(jnum(db, r, "$.examples_per_sec") > 0);
    assert_true(jnum(db, r, "$.train_loss[3]") < jnum(db, r, "$.train_loss[0]"));
    char path[64];
    snprintf(path, sizeof path, "$.valid_accuracy[%d]", best - 1);
    assert_true(fabs(jnum(db, r, path) - jnum(db, r, "$.best_accuracy")) < 1e-9);
    /* the stored model is used at once, from chance to > 95% on new rows */
    double after = q_double(db, "SELECT json_extract(sentiment_evaluate(t, y, 'hotel'), '$.accuracy') FROM test");
    if (!(before < 0.8 && after > 0.95)) fail_msg("accuracy before %.3f, after %.3f", before, after);
    expect_text(db, "SELECT sentiment('房间干净舒服，推荐', 'hotel')", "positive");
    expect_text(db, "SELECT sentiment('太吵了，很失望', 'hotel')", "negative");
    assert_int_equal(q_int(db, "SELECT count(*) FROM classify('test', 't', 'hotel') AS c "
                               "JOIN test ON test.rowid = c.id WHERE c.label = test.y"),
                     q_int(db, "SELECT sum(sentiment(t, 'hotel') = y) FROM test"));
    /* listed with its metrics */
    expect_text(db, "SELECT source || ' ' || version || ' ' || labels FROM sentiment_models WHERE name = 'hotel'",
                "database 1 [\"negative\",\"positive\"]");
    char *metrics = q_text(db, "SELECT metrics FROM sentiment_models WHERE name = 'hotel'");
    assert_non_null(metrics);
    expect_json(db, metrics, "$.rows", "240");
    expect_json(db, metrics, "$.base", "tiny");
    assert_null(jget(db, metrics, "$.version"));
    free(metrics);
    free(r);
    sqlite3_close(db);
}

/* Same seed, rows and threads: the same model, bit for bit. */
static void test_reproducible(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    make_labeled(db, "d", 64, 3, "positive", "negative", 0);
    char *a = train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":2,\"lr\":1e-3}') FROM d");
    char *b = train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":2,\"lr\":1e-3}') FROM d");
    expect_json(db, b, "$.version", "2");
    expect_text(db, "SELECT (SELECT safetensors FROM sentiment_model_store WHERE name = 'm' AND version = 1) = "
                    "(SELECT safetensors FROM sentiment_model_store WHERE name = 'm' AND version = 2)",
                "1");
    expect_text(db, "SELECT sentiment_probs('很好', 'm@1') = sentiment_probs('很好', 'm')", "1");
    free(a);
    free(b);
    sqlite3_close(db);
}

static void test_versions_and_use(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    make_labeled(db, "d", 64, 4, "positive", "negative", 0);
    free(train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1,\"lr\":1e-3}') FROM d"));
    free(train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":3,\"lr\":2e-3,\"seed\":5}') FROM d"));
    expect_text(db, "SELECT group_concat(version) FROM sentiment_models WHERE name = 'm'", "1,2");
    /* 'm' is the latest; 'm@1' the first */
    expect_text(db, "SELECT sentiment_probs('很好很满意', 'm') = sentiment_probs('很好很满意', 'm@2')", "1");
    expect_text(db, "SELECT sentiment_probs('很好很满意', 'm') = sentiment_probs('很好很满意', 'm@1')", "0");
    char *v1 = q_text(db, "SELECT sentiment_probs('很好很满意', 'm@1')");
    /* make version 1 current again: stored as version 3 */
    expect_text(db, "SELECT sentiment_use('m', 1)", "3");
    char *now = q_text(db, "SELECT sentiment_probs('很好很满意', 'm')");
    assert_string_equal(now, v1);
    expect_text(db, "SELECT json_extract(metrics, '$.restored_from') FROM sentiment_models "
                    "WHERE name = 'm' AND version = 3",
                "1");
    expect_text(db, "SELECT json_extract(metrics, '$.epochs') FROM sentiment_models WHERE name = 'm' AND version = 3",
                "1");
    expect_error(db, "SELECT sentiment_use('m', 9)", "sentiment_use(): no version 9 of model 'm'; the latest is 3");
    expect_error(db, "SELECT sentiment_use('nope', 1)", "sentiment_use(): no model named 'nope' is stored");
    expect_error(db, "SELECT sentiment_use('m', 'one')", "expected a version number");
    expect_error(db, "SELECT sentiment('x', 'm@4')", "no version 4 of model 'm'; the latest is 3");
    expect_text(db, "SELECT count(*) FROM sentiment_model_store", "3");
    free(v1);
    free(now);
    sqlite3_close(db);
}

static void test_fresh_head_and_labels(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    /* other label names than the base's: a fresh head, labels in byte order */
    make_labeled(db, "d", 64, 5, "好评", "差评", 0);
    char *r = train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":3,\"lr\":2e-3}') FROM d");
    expect_json(db, r, "$.head", "new");
    expect_json(db, r, "$.labels", "[\"好评\",\"差评\"]");
    expect_text(db, "SELECT labels FROM sentiment_models WHERE name = 'm'", "[\"好评\",\"差评\"]");
    expect_text(db, "SELECT sentiment('很好很满意推荐', 'm') IN ('好评', '差评')", "1");
    free(r);
    /* the base's labels in another first-appearance order: the head is kept
     * in the base's order */
    exec_ok(db, "CREATE TABLE e AS SELECT * FROM d");
    exec_ok(db, "UPDATE e SET y = CASE y WHEN '好评' THEN 'positive' ELSE 'negative' END");
    r = train_ok(db, "SELECT train('k', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM e");
    expect_json(db, r, "$.head", "kept");
    expect_json(db, r, "$.labels", "[\"negative\",\"positive\"]");
    free(r);
    /* integer labels: their text, in numeric order; a 3-label base */
    exec_ok(db, "SELECT sentiment_load('ernie', '" ERNIE_MODEL "')");
    exec_ok(db, "CREATE TABLE n(t, y)");
    exec_ok(db, "INSERT INTO n SELECT t, CASE WHEN y = '好评' THEN 10 ELSE 2 END FROM d");
    exec_ok(db, "INSERT INTO n SELECT '一般般吧' || rowid, 9 FROM d LIMIT 20");
    r = train_ok(db, "SELECT train('ints', t, y, '{\"base\":\"ernie\",\"epochs\":2,\"lr\":2e-3}') FROM n");
    expect_json(db, r, "$.head", "new");
    expect_json(db, r, "$.labels", "[\"2\",\"9\",\"10\"]");
    expect_json(db, r, "$.rows", "84");
    expect_text(db, "SELECT sentiment('很好很满意推荐', 'ints') IN ('2', '9', '10')", "1");
    expect_text(db, "SELECT model_type FROM sentiment_models WHERE name = 'ints'", "ernie");
    free(r);
    sqlite3_close(db);
}

static void test_null_rows_skipped(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    make_labeled(db, "d", 40, 6, "positive", "negative", 0);
    exec_ok(db, "INSERT INTO d VALUES (NULL, 'positive'), ('很好', NULL), ('', 'negative'), "
                "('   ', 'positive'), (NULL, NULL)");
    char *r = train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM d");
    expect_json(db, r, "$.rows", "40");
    expect_json(db, r, "$.skipped", "5");
    free(r);
    /* long texts are cut to max_length and counted */
    exec_ok(db, "INSERT INTO d VALUES (printf('%.300c', '好'), 'positive')");
    r = train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1,\"max_length\":16}') FROM d");
    expect_json(db, r, "$.truncated", "1");
    expect_json(db, r, "$.max_length", "16");
    free(r);
    sqlite3_close(db);
}

/* An error, nothing stored, and the connection still works. */
static void expect_train_error(sqlite3 *db, const char *sql, const char *want)
{
    int64_t before = stored_versions(db), logs = log_rows(db);
    expect_error(db, sql, want);
    assert_int_equal(stored_versions(db), before);
    assert_int_equal(log_rows(db), logs);
    expect_text(db, "SELECT 1 + 1", "2");
}

/* Overwrites the last n bytes of a stored model's safetensors with NaNs
 * (the data of its last tensors). */
static void poison_last_bytes(sqlite3 *db, const char *name, int n)
{
    sqlite3_stmt *st = prepare(db, "SELECT safetensors FROM sentiment_model_store WHERE name = ?1");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int len = sqlite3_column_bytes(st, 0);
    unsigned char *b = malloc((size_t)len);
    memcpy(b, sqlite3_column_blob(st, 0), (size_t)len);
    sqlite3_finalize(st);
    const float nan = NAN;
    for (int i = len - n; i + 4 <= len; i += 4) memcpy(b + i, &nan, 4);
    st = prepare(db, "UPDATE sentiment_model_store SET safetensors = ?2 WHERE name = ?1");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, b, len, free);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
}

static void test_errors(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    make_labeled(db, "d", 40, 8, "positive", "negative", 0);
    const char *const none_builtin = "no built-in model in this build to start from";
    char *ver = q_text(db, "SELECT json_extract(sentiment_debug(), '$.builtin_model')");
    if (strcmp(ver, "0") == 0)
        expect_train_error(db, "SELECT train('m', t, y) FROM d", none_builtin);
    free(ver);
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"nope\"}') FROM d",
                       "train(): unknown base model 'nope'; known: ");
    expect_train_error(db, "SELECT train('m', t, 'positive', '{\"base\":\"tiny\"}') FROM d",
                       "train(): every row has the label 'positive'; need at least 2 distinct labels");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\"}') FROM (SELECT * FROM d LIMIT 7)",
                       "train(): 7 usable rows (0 skipped for a NULL or empty text or a NULL label); "
                       "need at least 8");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\"}') FROM d WHERE 0",
                       "train(): no rows; need at least 8 rows");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epoch\":3}') FROM d",
                       "train(): unknown option 'epoch'; known: base, epochs, lr");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":0}') FROM d",
                       "train(): option 'epochs' 0 trains no encoder: it needs \"wide\" and a base model");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":\"3\"}') FROM d",
                       "train(): option 'epochs' must be an integer from 1 to 1000 (0 with \"wide\"); got \"3\"");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"lr\":1}') FROM d",
                       "train(): option 'lr' must be a number greater than 0 and less than 1; got 1");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"valid_fraction\":0.9}') FROM d",
                       "option 'valid_fraction' must be a number from 0 to 0.5; got 0.9");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"max_length\":100}') FROM d",
                       "option 'max_length' must be an integer from 8 to the model's maximum length "
                       "(64 for base 'tiny'); got 100");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"batch_size\":4,\"accumulation\":8}') FROM d",
                       "option 'accumulation' (8) must not exceed batch_size (4)");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"layers\":2}') FROM d",
                       "train(): option 'layers' applies only when training from scratch");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"none\",\"hidden\":30,\"heads\":4}') FROM d",
                       "option 'hidden' (30) must be a multiple of 'heads' (4)");
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"none\",\"vocab\":\"/no/such/vocab.txt\"}') FROM d",
                       "train(): option 'vocab': cannot read '/no/such/vocab.txt'");
    expect_train_error(db, "SELECT train('m', t, y, 'epochs=3') FROM d",
                       "train(): options must be a JSON object");
    expect_train_error(db, "SELECT train('m', t, y, '[1]') FROM d", "train(): options must be a JSON object");
    expect_train_error(db, "SELECT train('m', t, y, 3) FROM d", "train(): options must be a JSON object (TEXT)");
    expect_train_error(db, "SELECT train('m', t, 0.5, '{\"base\":\"tiny\"}') FROM d",
                       "train(): a label must be TEXT or INTEGER; got a REAL in row 1");
    expect_train_error(db, "SELECT train('default', t, y, '{\"base\":\"tiny\"}') FROM d",
                       "'default' is reserved");
    expect_train_error(db, "SELECT train(NULL, t, y, '{\"base\":\"tiny\"}') FROM d",
                       "train(): expected the name of the model to store (TEXT)");
    expect_train_error(db, "SELECT train('a@b', t, y, '{\"base\":\"tiny\"}') FROM d", "may not contain '@'");
    /* a stored base whose weights are NaN is refused when it is read */
    exec_ok(db, "SELECT sentiment_save('nanbase', 'tiny')");
    poison_last_bytes(db, "nanbase", 40000);
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"nanbase\"}') FROM d",
                       "train(): cannot load model 'nanbase' version 1 from the database: tensor "
                       "'bert.encoder.layer.1.output.dense.weight' has a NaN at element");
    expect_error(db, "SELECT sentiment_probs('很好', 'nanbase')", "has a NaN at element");
    /* inside a writing statement: refused on the first row */
    exec_ok(db, "CREATE TABLE reports(r)");
    expect_train_error(db, "INSERT INTO reports SELECT train('m', t, y, '{\"base\":\"tiny\"}') FROM d",
                       "train(): cannot store model 'm' from inside a statement that writes");
    expect_text(db, "SELECT count(*) FROM reports", "0");
    /* DIRECTONLY: not from a view or trigger */
    exec_ok(db, "CREATE VIEW v AS SELECT train('m', t, y, '{\"base\":\"tiny\"}') FROM d");
    expect_train_error(db, "SELECT * FROM v", "unsafe use of train()");
    sqlite3_close(db);
}

static void test_read_only(void **state)
{
    (void)state;
    char path[] = "/tmp/sentiment_train_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    sqlite3 *db = open_db_path(path);
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    load_tiny(db);
    make_labeled(db, "d", 32, 9, "positive", "negative", 0);
    free(train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM d"));
    sqlite3_close(db);
    db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    exec_ok(db, "SELECT sentiment_config('threads', 1)");
    load_tiny(db);
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM d",
                       "train(): the database is read-only; model 'm' cannot be stored");
    expect_error(db, "SELECT sentiment_use('m', 1)", "sentiment_use(): the database is read-only");
    expect_text(db, "SELECT count(*) FROM sentiment_model_store", "1");
    /* the stored model still works */
    expect_text(db, "SELECT sentiment('很好', 'm') IN ('negative', 'positive')", "1");
    sqlite3_close(db);
    unlink(path);
}

static void test_interrupt(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    make_labeled(db, "d", 200, 10, "positive", "negative", 0);
    pthread_t th;
    interrupter it = {db, 400, NULL, 0};
    assert_int_equal(pthread_create(&th, NULL, interrupt_later, &it), 0);
    /* 1000 epochs would take minutes */
    expect_train_error(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1000}') FROM d",
                       "interrupted");
    double stopped = now_s();
    pthread_join(th, NULL);
    if (stopped - it.when > 1.0) fail_msg("train() stopped %.2fs after sqlite3_interrupt", stopped - it.when);
    assert_int_equal(stored_versions(db), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sentiment_training"), 0);
    /* usable afterwards, training included */
    free(train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM d"));
    assert_int_equal(stored_versions(db), 1);
    sqlite3_close(db);
}

static void test_base_none(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    make_labeled(db, "d", 240, 11, "positive", "negative", 0);
    make_labeled(db, "test", 100, 98, "positive", "negative", 0);
    /* vocabulary built from the texts */
    char *r = train_ok(db, "SELECT train('scratch', t, y, '{\"base\":\"none\",\"layers\":1,\"hidden\":32,"
                           "\"heads\":2,\"intermediate\":64,\"max_length\":32,\"epochs\":8,\"lr\":3e-3,\"batch_size\":16,"
                           "\"vocab_min_count\":1}') FROM d");
    expect_json(db, r, "$.base", "none");
    expect_json(db, r, "$.head", "new");
    expect_json(db, r, "$.max_length", "32");
    expect_text(db, "SELECT layers || ' ' || hidden_size || ' ' || heads || ' ' || max_length FROM sentiment_models "
                    "WHERE name = 'scratch'",
                "1 32 2 32");
    /* every character of the training texts is in the vocabulary */
    expect_text(db, "SELECT sentiment_tokens('酒店很干净', 'scratch')", "[\"酒\",\"店\",\"[UNK]\",\"干\",\"净\"]");
    double acc = q_double(db, "SELECT json_extract(sentiment_evaluate(t, y, 'scratch'), '$.accuracy') FROM test");
    if (acc < 0.9) fail_msg("from scratch: accuracy %.3f", acc);
    free(r);
    /* a vocabulary file */
    r = train_ok(db, "SELECT train('scratch2', t, y, '{\"base\":\"none\",\"layers\":1,\"hidden\":32,"
                     "\"heads\":2,\"intermediate\":64,\"max_length\":32,\"epochs\":1,"
                     "\"vocab\":\"" TINY_MODEL "/vocab.txt\"}') FROM d");
    expect_text(db, "SELECT sentiment_tokens('酒店很干净', 'scratch2')", "[\"酒\",\"店\",\"很\",\"干\",\"净\"]");
    expect_text(db, "SELECT length(vocab) - length(replace(vocab, char(10), '')) FROM sentiment_model_store "
                    "WHERE name = 'scratch2'",
                "3130");
    free(r);
    sqlite3_close(db);
}

typedef struct trainer_thread {
    sqlite3 *db;
    int rc;
    char err[512];
} trainer_thread;

static void *train_in_thread(void *p)
{
    trainer_thread *t = p;
    char *err = NULL;
    t->rc = sqlite3_exec(t->db, "SELECT train('live', t, y, '{\"base\":\"tiny\",\"epochs\":1000}') FROM d",
                         NULL, NULL, &err);
    snprintf(t->err, sizeof t->err, "%s", err ? err : "");
    sqlite3_free(err);
    return NULL;
}

static void test_training_log_and_status(void **state)
{
    (void)state;
    sqlite3 *db = train_db();
    make_labeled(db, "d", 100, 12, "positive", "negative", 0);
    /* after: one row per step and per epoch, in the same version */
    char *r = train_ok(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":3,\"batch_size\":16}') FROM d");
    expect_json(db, r, "$.steps", "18");
    expect_text(db, "SELECT group_concat(kind || ':' || n) FROM (SELECT kind, count(*) AS n "
                    "FROM sentiment_train_log WHERE model = 'm' AND version = 1 GROUP BY kind ORDER BY kind)",
                "epoch:3,step:18");
    expect_text(db, "SELECT group_concat(step) FROM sentiment_train_log WHERE kind = 'epoch'", "6,12,18");
    expect_text(db, "SELECT count(*) FROM sentiment_train_log WHERE kind = 'step' AND "
                    "(loss IS NULL OR lr IS NULL OR grad_norm IS NULL OR valid_accuracy IS NOT NULL "
                    "OR examples_per_sec IS NULL OR seconds IS NULL)",
                "0");
    /* epoch rows carry the report's figures */
    char *acc = q_text(db, "SELECT group_concat(round(valid_accuracy, 4)) FROM sentiment_train_log WHERE kind = 'epoch'");
    {
        sqlite3_stmt *st = prepare(db, "SELECT group_concat(round(value, 4)) FROM json_each(?1, '$.valid_accuracy')");
        sqlite3_bind_text(st, 1, r, -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(st, 0), acc);
        sqlite3_finalize(st);
    }
    free(acc);
    free(r);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sentiment_training"), 0);

    /* while: another connection sees the run in sentiment_training */
    trainer_thread t = {db, 0, ""};
    pthread_t th;
    sqlite3 *other = open_db();
    assert_int_equal(pthread_create(&th, NULL, train_in_thread, &t), 0);
    int seen = 0;
    for (int i = 0; i < 500 && !seen; i++) {
        seen = q_int(other, "SELECT count(*) FROM sentiment_training WHERE model = 'live' AND step > 0 "
                            "AND epochs = 1000 AND base = 'tiny' AND rows = 100 AND loss > 0");
        if (!seen) usleep(10000);
    }
    sqlite3_interrupt(db);
    pthread_join(th, NULL);
    assert_true(seen);
    assert_int_equal(t.rc, SQLITE_ERROR);
    assert_non_null(strstr(t.err, "interrupted"));
    assert_int_equal(q_int(other, "SELECT count(*) FROM sentiment_training"), 0);
    expect_text(db, "SELECT count(*) FROM sentiment_train_log WHERE model = 'live'", "0");
    sqlite3_close(other);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_then_classify),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_versions_and_use),
        cmocka_unit_test(test_fresh_head_and_labels),
        cmocka_unit_test(test_null_rows_skipped),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_read_only),
        cmocka_unit_test(test_interrupt),
        cmocka_unit_test(test_base_none),
        cmocka_unit_test(test_training_log_and_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

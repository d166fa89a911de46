/* test_train_safety.c: what train() does when its result cannot be stored
 * (a locked database, with and without busy_timeout, WAL snapshots), when
 * the statement around it fails, the head's own learning rate, label maps
 * (train() and sentiment_evaluate()) and max_length limits.
 *
 * The databases are files under /tmp (a second connection holds the write
 * lock); texts are generated here.
 */
#include "cpu/backend_cpu.h"
#include "support/db_file_util.h"
#include "support/ext_test_util.h"

#include <math.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/errors.h"
#include "encoder/bert.h"
#include "train/optimizer.h"
#include "train/trainer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- files and data -------------------------------------------------------- */

static void db_path(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "/tmp/sentiment_train_safety_%d_%s.db", (int)getpid(), tag);
    remove_db(buf);
}

/* Table d(id, t, y): n rows, alternately positive and negative words; y is
 * 1/0 (INTEGER) when int_labels, else 'positive'/'negative'. */
static void make_data(sqlite3 *db, int n, int int_labels)
{
    static const char *const pos[] = {"好", "棒", "满意", "推荐", "干净"};
    static const char *const neg[] = {"差", "烂", "失望", "脏", "后悔"};
    static const char *const fill[] = {"这家", "酒店", "房间", "服务", "外卖", "今天"};
    char text[128];
    exec_ok(db, "CREATE TABLE d(id INTEGER PRIMARY KEY, t TEXT, y)");
    sqlite3_stmt *st = prepare(db, "INSERT INTO d(t, y) VALUES (?1, ?2)");
    for (int i = 0; i < n; i++) {
        int p = i % 2 == 0;
        snprintf(text, sizeof text, "%s%s%s%s", fill[i % 6], (p ? pos : neg)[i % 5],
                 fill[(i / 6) % 6], (p ? pos : neg)[(i / 5) % 5]);
        sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
        if (int_labels) sqlite3_bind_int(st, 2, p);
        else sqlite3_bind_text(st, 2, p ? "positive" : "negative", -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
}

static sqlite3 *train_conn(const char *path)
{
    sqlite3 *db = open_db_path(path);
    exec_ok(db, "SELECT sentiment_config('progress', 'off')");
    exec_ok(db, "SELECT sentiment_load('tiny', '" TINY_MODEL "')");
    return db;
}

static int64_t stored_versions(sqlite3 *db)
{
    return q_int(db, "SELECT count(*) FROM sentiment_models WHERE source = 'database'");
}

/* ---- a second connection holding the write lock ------------------------------ */

enum { HOLD_DURING_TRAINING, HOLD_NOW };

typedef struct holder {
    const char *path;
    int when;               /* HOLD_DURING_TRAINING: once training runs */
    int wal_write;          /* commit a write instead of holding the lock */
    int release_after_ms;   /* after training ended (or after taking it), then ROLLBACK;
                               < 0: hold until `release` is set */
    volatile int locked, released, release, failed;
    double released_at;
} holder;

static int training_runs(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int n = -1;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM sentiment_training", -1, &st, NULL) ==
            SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return n;
}

static void *hold_lock(void *p)
{
    holder *h = p;
    sqlite3 *db = NULL;
    if (sqlite3_open(h->path, &db) != SQLITE_OK) goto fail;
    sqlite3_busy_timeout(db, 5000);
    if (h->when == HOLD_DURING_TRAINING) {
        double t0 = now_s();
        while (training_runs(db) == 0) {
            if (now_s() - t0 > 20) goto fail;
            usleep(1000);
        }
    }
    if (h->wal_write) {
        if (sqlite3_exec(db, "INSERT INTO other VALUES (1)", NULL, NULL, NULL) != SQLITE_OK)
            goto fail;
        h->locked = 1;
        goto done;
    }
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) goto fail;
    h->locked = 1;
    if (h->release_after_ms >= 0) {
        if (h->when == HOLD_DURING_TRAINING)
            while (training_runs(db) > 0) usleep(1000);
        usleep((useconds_t)h->release_after_ms * 1000);
    } else {
        while (!h->release) usleep(1000);
    }
    h->released_at = now_s();
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    h->released = 1;
done:
    sqlite3_close(db);
    return NULL;
fail:
    h->failed = 1;
    sqlite3_close(db);
    return NULL;
}

#define TRAIN_SQL(name, epochs) \
    "SELECT train('" name "', t, y, '{\"base\":\"tiny\",\"epochs\":" #epochs ",\"lr\":3e-3}') FROM d"

/* The lock is taken while training runs and given back 400 ms after it
 * ended: the store waits (busy_timeout 10 s) and succeeds. */
static void test_store_waits_for_lock(void **state)
{
    (void)state;
    char path[256], *out;
    db_path(path, sizeof path, "wait");
    sqlite3 *db = train_conn(path);
    make_data(db, 200, 0);
    exec_ok(db, "PRAGMA busy_timeout = 10000");
    holder h = {.path = path, .when = HOLD_DURING_TRAINING, .release_after_ms = 400};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
    int rc = run_sql(db, TRAIN_SQL("m", 10), &out);
    double done = now_s();
    pthread_join(th, NULL);
    assert_false(h.failed);
    assert_true(h.locked && h.released);
    if (rc != SQLITE_OK) fail_msg("train() failed: %s", out);
    assert_true(done >= h.released_at); /* it waited for the lock */
    free(out);
    assert_int_equal(stored_versions(db), 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sentiment_models WHERE source = 'memory'"), 0);
    sqlite3_close(db);
    remove_db(path);
}

/* The lock is held until train() gave up: the error says what happened and
 * the model is usable in memory, then stored with sentiment_save(). */
static void test_store_lock_held_keeps_model(void **state)
{
    (void)state;
    char path[256], *out;
    db_path(path, sizeof path, "held");
    sqlite3 *db = train_conn(path);
    make_data(db, 200, 0);
    exec_ok(db, "PRAGMA busy_timeout = 300");
    holder h = {.path = path, .when = HOLD_DURING_TRAINING, .release_after_ms = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
    int rc = run_sql(db, TRAIN_SQL("m", 10), &out);
    h.release = 1;
    pthread_join(th, NULL);
    assert_false(h.failed);
    assert_int_not_equal(rc, SQLITE_OK);
    const char *want = "train(): model 'm' trained but not stored: database is locked (waited 300 "
                       "ms, the busy_timeout); it is usable on this connection as 'm' (source "
                       "'memory' in sentiment_models) until the connection closes; store it with "
                       "SELECT sentiment_save('m')";
    if (strcmp(out, want)) fail_msg("got '%s'\nwant '%s'", out, want);
    free(out);
    assert_int_equal(stored_versions(db), 0);
    expect_text(db, "SELECT source FROM sentiment_models WHERE name = 'm'", "memory");
    expect_text(db, "SELECT sentiment('这家酒店很好很满意', 'm') IN ('negative', 'positive')", "1");
    expect_text(db, "SELECT sentiment_save('m')", "1");
    expect_text(db, "SELECT group_concat(source) FROM sentiment_models WHERE name = 'm'", "database");
    sqlite3_close(db);
    remove_db(path);
}

/* busy_timeout 0: no wait at all, and the error says how to get one. */
static void test_store_lock_no_timeout(void **state)
{
    (void)state;
    char path[256], *out;
    db_path(path, sizeof path, "nowait");
    sqlite3 *db = train_conn(path);
    make_data(db, 200, 0);
    holder h = {.path = path, .when = HOLD_DURING_TRAINING, .release_after_ms = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
    int rc = run_sql(db, TRAIN_SQL("m", 10), &out);
    h.release = 1;
    pthread_join(th, NULL);
    assert_false(h.failed);
    assert_int_not_equal(rc, SQLITE_OK);
    if (!strstr(out, "trained but not stored: database is locked (busy_timeout is 0: not "
                     "waiting; set PRAGMA busy_timeout)"))
        fail_msg("got '%s'", out);
    free(out);
    expect_text(db, "SELECT source FROM sentiment_models WHERE name = 'm'", "memory");
    /* a later train() that stores replaces the in-memory model */
    free(q_text(db, TRAIN_SQL("m", 1)));
    expect_text(db, "SELECT group_concat(source) FROM sentiment_models WHERE name = 'm'", "database");
    sqlite3_close(db);
    remove_db(path);
}

/* Locked before the first row: an error before anything is trained, after
 * waiting busy_timeout. */
static void test_lock_checked_before_training(void **state)
{
    (void)state;
    char path[256], *out;
    db_path(path, sizeof path, "before");
    sqlite3 *db = train_conn(path);
    make_data(db, 200, 0);
    exec_ok(db, "PRAGMA busy_timeout = 200");
    holder h = {.path = path, .when = HOLD_NOW, .release_after_ms = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
    while (!h.locked && !h.failed) usleep(1000);
    double t0 = now_s();
    int rc = run_sql(db, TRAIN_SQL("m", 1000), &out);
    double took = now_s() - t0;
    h.release = 1;
    pthread_join(th, NULL);
    assert_int_not_equal(rc, SQLITE_OK);
    if (strcmp(out, "train(): model 'm' could not be stored in this database: database is "
                    "locked (waited 200 ms, the busy_timeout); nothing was trained"))
        fail_msg("got '%s'", out);
    if (took > 5) fail_msg("took %.1fs: it trained first", took);
    free(out);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'sentiment%'"), 0);
    sqlite3_close(db);
    remove_db(path);
}

/* Locked before the first row and given back after 300 ms: train() waits
 * and goes on. */
static void test_lock_released_before_training(void **state)
{
    (void)state;
    char path[256], *out;
    db_path(path, sizeof path, "released");
    sqlite3 *db = train_conn(path);
    make_data(db, 200, 0);
    exec_ok(db, "PRAGMA busy_timeout = 10000");
    holder h = {.path = path, .when = HOLD_NOW, .release_after_ms = 300};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
    while (!h.locked && !h.failed) usleep(1000);
    int rc = run_sql(db, TRAIN_SQL("m", 1), &out);
    pthread_join(th, NULL);
    if (rc != SQLITE_OK) fail_msg("train() failed: %s", out);
    free(out);
    assert_int_equal(stored_versions(db), 1);
    sqlite3_close(db);
    remove_db(path);
}

/* Inside the user's transaction, after a schema change in it: the first-row
 * check must not roll back (that would abort this very statement). */
static void test_train_in_transaction_after_schema_change(void **state)
{
    (void)state;
    char path[256], *out;
    db_path(path, sizeof path, "txn");
    sqlite3 *db = train_conn(path);
    make_data(db, 40, 0);
    exec_ok(db, "BEGIN; CREATE TABLE other(x)");
    int rc = run_sql(db, TRAIN_SQL("m", 1), &out);
    if (rc != SQLITE_OK) fail_msg("train() failed: %s", out);
    free(out);
    assert_int_equal(stored_versions(db), 1);
    exec_ok(db, "ROLLBACK"); /* the user's choice: the model goes with it */
    expect_text(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_model_store'",
                "0");
    /* a failing train() in such a transaction reports its own error */
    exec_ok(db, "BEGIN; CREATE TABLE other(x)");
    expect_error(db, "SELECT train('m', t, y) FROM (SELECT * FROM d LIMIT 3)", "need at least 8");
    exec_ok(db, "ROLLBACK");
    sqlite3_close(db);
    remove_db(path);
}

/* WAL: another connection commits while train() reads; its snapshot can
 * never become the writer, so it does not wait, and keeps the model. */
static void test_wal_snapshot_keeps_model(void **state)
{
    (void)state;
    char path[256], *out;
    db_path(path, sizeof path, "wal");
    sqlite3 *db = train_conn(path);
    exec_ok(db, "PRAGMA journal_mode = wal");
    exec_ok(db, "CREATE TABLE other(x)");
    make_data(db, 200, 0);
    exec_ok(db, "PRAGMA busy_timeout = 10000");
    holder h = {.path = path, .when = HOLD_DURING_TRAINING, .wal_write = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
    double t0 = now_s();
    int rc = run_sql(db, TRAIN_SQL("m", 10), &out);
    double took = now_s() - t0;
    pthread_join(th, NULL);
    assert_false(h.failed);
    assert_int_not_equal(rc, SQLITE_OK);
    if (!strstr(out, "trained but not stored: database is locked (another connection wrote to "
                     "the database after this statement began reading it; waiting cannot help)"))
        fail_msg("got '%s'", out);
    if (took > 8) fail_msg("took %.1fs: it waited", took);
    free(out);
    expect_text(db, "SELECT source FROM sentiment_models WHERE name = 'm'", "memory");
    expect_text(db, "SELECT sentiment_save('m')", "1");
    sqlite3_close(db);
    remove_db(path);
}

/* A statement that fails part-way for a reason of its own: SQLite runs
 * train()'s final step anyway, and gives it no way to tell (see train.c).
 * What happens is documented: the rows read before the error are trained
 * on and stored, and the stored version's metrics say how many. */
static void test_failed_statement_stores_rows_seen(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('tiny', '" TINY_MODEL "')");
    make_data(db, 40, 0);
    expect_error(db,
                 "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM "
                 "(SELECT t, CASE WHEN id = 30 THEN json('bad') ELSE y END AS y FROM d)",
                 "malformed JSON");
    expect_text(db, "SELECT json_extract(metrics, '$.rows') FROM sentiment_models WHERE name = 'm'",
                "29");
    sqlite3_close(db);
}

/* ---- the head's learning rate -------------------------------------------------- */

/* One AdamW step with every gradient 1: each parameter moves by its
 * group's rate (the first step of Adam is lr * g / (|g| + eps)). */
static void test_head_lr_groups(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    static const char vocab[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n好\n差\n";
    const char *labels[] = {"a", "b", "c"};
    bert_shape shape = {2, 16, 2, 32, 16};
    bert_model *m = NULL;
    backend *be = NULL;
    adamw *opt = NULL;
    assert_int_equal(bert_model_create_scratch(&shape, vocab, sizeof vocab - 1, 1, 3, labels, 1, &m,
                                               err),
                     SM_OK);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(adamw_create(be, &m->cfg, 1, &opt, err), SM_OK);
    size_t n = m->n_floats;
    float *grads = be->alloc(be, n * sizeof *grads), *before = malloc(n * sizeof *before);
    float *params = be->alloc(be, n * sizeof *params);
    assert_non_null(grads);
    assert_non_null(params);
    for (size_t i = 0; i < n; i++) grads[i] = 1.0f;
    memcpy(params, m->arena, n * sizeof *params);
    memcpy(before, params, n * sizeof *before);
    adamw_hparams h;
    adamw_hparams_default(&h);
    h.weight_decay = 0;
    h.grad_clip = 0;
    h.lr = 1e-3f;
    h.head_lr = 2e-2f;
    /* the step's rate is half the peak: the head's is scaled alike */
    assert_int_equal(adamw_step(opt, params, grads, &h, 5e-4f, NULL, err), SM_OK);
    bert_param_spec *specs;
    int n_specs;
    size_t total;
    assert_int_equal(bert_param_table(&m->cfg, 1, &specs, &n_specs, &total, err), SM_OK);
    assert_int_equal(total, n);
    int head_tensors = 0;
    for (int s = 0; s < n_specs; s++) {
        int head = !strncmp(specs[s].name, "classifier.", 11);
        double want = head ? 1e-2 : 5e-4;
        head_tensors += head;
        for (size_t k = 0; k < specs[s].numel; k++) {
            size_t i = specs[s].offset + k;
            double moved = (double)before[i] - (double)params[i];
            if (fabs(moved - want) > want * 1e-3)
                fail_msg("%s[%zu] moved %g, want %g", specs[s].name, k, moved, want);
        }
    }
    assert_int_equal(head_tensors, 2);
    /* head_lr 0 and head_lr == lr are the same single group, bit for bit */
    float *p2 = be->alloc(be, n * sizeof *p2), *p3 = be->alloc(be, n * sizeof *p3);
    adamw *o2, *o3;
    assert_int_equal(adamw_create(be, &m->cfg, 1, &o2, err), SM_OK);
    assert_int_equal(adamw_create(be, &m->cfg, 1, &o3, err), SM_OK);
    memcpy(p2, before, n * sizeof *p2);
    memcpy(p3, before, n * sizeof *p3);
    for (size_t i = 0; i < n; i++) grads[i] = (float)((int)(i % 7) - 3) * 0.1f;
    h.head_lr = 0;
    assert_int_equal(adamw_step(o2, p2, grads, &h, 5e-4f, NULL, err), SM_OK);
    for (size_t i = 0; i < n; i++) grads[i] = (float)((int)(i % 7) - 3) * 0.1f;
    h.head_lr = h.lr;
    assert_int_equal(adamw_step(o3, p3, grads, &h, 5e-4f, NULL, err), SM_OK);
    assert_memory_equal(p2, p3, n * sizeof *p2);
    free(specs);
    adamw_free(o2);
    adamw_free(o3);
    be->free(be, p2);
    be->free(be, p3);
    be->free(be, grads);
    be->free(be, params);
    free(before);
    adamw_free(opt);
    be->destroy(be);
    bert_model_free(m);
}

/* What train() reports as head_lr, and that a run repeats bit for bit. */
static void test_head_lr_defaults_and_determinism(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_config('progress', 'off')");
    exec_ok(db, "SELECT sentiment_load('tiny', '" TINY_MODEL "')");
    make_data(db, 64, 0);
    exec_ok(db, "CREATE TABLE e AS SELECT t, CASE y WHEN 'positive' THEN '好评' ELSE '差评' END AS y FROM d");
    /* a fresh head: 1e-3 */
    expect_text(db,
                "SELECT json_extract(train('f1', t, y, '{\"base\":\"tiny\",\"epochs\":2}'), '$.head_lr') "
                "FROM e",
                "0.001");
    /* the encoder's rate under a fresh head: 5e-5 x (768/64)^2, capped at 1e-3 */
    expect_text(db,
                "SELECT json_extract(train('f3', t, y, '{\"base\":\"tiny\",\"epochs\":1}'), '$.lr') "
                "FROM e",
                "0.001");
    /* ... and 5e-5 under a kept head */
    expect_text(db,
                "SELECT json_extract(train('k0', t, y, '{\"base\":\"tiny\",\"epochs\":1}'), '$.lr') "
                "= 5e-05 FROM d",
                "1");
    /* ... or lr when that is larger */
    expect_text(db,
                "SELECT json_extract(train('f2', t, y, '{\"base\":\"tiny\",\"epochs\":1,\"lr\":3e-3}'), "
                "'$.head_lr') FROM e",
                "0.003");
    /* a kept head: lr */
    expect_text(db,
                "SELECT json_extract(train('k', t, y, '{\"base\":\"tiny\",\"epochs\":1}'), '$.head_lr') "
                "= 5e-05 FROM d",
                "1");
    /* given */
    expect_text(db,
                "SELECT json_extract(train('g', t, y, '{\"base\":\"tiny\",\"epochs\":1,"
                "\"head_lr\":0.02}'), '$.head_lr') FROM d",
                "0.02");
    /* from scratch: lr */
    expect_text(db,
                "SELECT json_extract(train('s', t, y, '{\"base\":\"none\",\"epochs\":1,\"layers\":1,"
                "\"hidden\":16,\"heads\":2,\"max_length\":16,\"vocab_min_count\":1}'), '$.head_lr') FROM e",
                "0.0005");
    /* the same run twice: the same bytes */
    free(q_text(db, "SELECT train('r', t, y, '{\"base\":\"tiny\",\"epochs\":2,\"head_lr\":5e-3}') FROM e"));
    free(q_text(db, "SELECT train('r', t, y, '{\"base\":\"tiny\",\"epochs\":2,\"head_lr\":5e-3}') FROM e"));
    expect_text(db,
                "SELECT (SELECT safetensors FROM sentiment_model_store WHERE name = 'r' AND version = 1) = "
                "(SELECT safetensors FROM sentiment_model_store WHERE name = 'r' AND version = 2)",
                "1");
    /* and the head's rate matters: another head_lr, other bytes */
    free(q_text(db, "SELECT train('r', t, y, '{\"base\":\"tiny\",\"epochs\":2,\"head_lr\":1e-2}') FROM e"));
    expect_text(db,
                "SELECT (SELECT safetensors FROM sentiment_model_store WHERE name = 'r' AND version = 1) = "
                "(SELECT safetensors FROM sentiment_model_store WHERE name = 'r' AND version = 3)",
                "0");
    sqlite3_close(db);
}

/* ---- labels ----------------------------------------------------------------- */

/* 0/1 labels on a negative/positive base: the head is kept, 0 negative,
 * 1 positive, and the report says so. */
static void test_zero_one_labels_convention(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_config('progress', 'off')");
    exec_ok(db, "SELECT sentiment_load('tiny', '" TINY_MODEL "')");
    make_data(db, 64, 1);
    char *r = q_text(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM d");
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, '$.head'), json_extract(?1, '$.labels'), "
                                   "json_extract(?1, '$.label_map'), json_extract(?1, '$.label_map_by')");
    sqlite3_bind_text(st, 1, r, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal(sqlite3_column_text(st, 0), "kept");
    assert_string_equal(sqlite3_column_text(st, 1), "[\"negative\",\"positive\"]");
    assert_string_equal(sqlite3_column_text(st, 2), "{\"0\":\"negative\",\"1\":\"positive\"}");
    assert_string_equal(sqlite3_column_text(st, 3), "convention");
    sqlite3_finalize(st);
    free(r);
    /* {} keeps the data's labels: a fresh head with classes '0' and '1' */
    expect_text(db,
                "SELECT json_extract(train('raw', t, y, '{\"base\":\"tiny\",\"epochs\":1,\"labels\":{}}'), "
                "'$.labels') FROM d",
                "[\"0\",\"1\"]");
    /* an explicit map */
    expect_text(db,
                "SELECT json_extract(train('mapped', t, y, '{\"base\":\"tiny\",\"epochs\":1,"
                "\"labels\":{\"1\":\"negative\",\"0\":\"positive\"}}'), '$.head') FROM d",
                "kept");
    /* sentiment_evaluate: the same convention, and the map argument */
    expect_text(db, "SELECT json_extract(sentiment_evaluate(t, y, 'tiny'), '$.unknown_labels') FROM d", "0");
    expect_text(db, "SELECT json_extract(sentiment_evaluate(t, y, 'tiny'), '$.label_map_by') FROM d",
                "convention");
    expect_text(db,
                "SELECT json_extract(sentiment_evaluate(t, y, 'tiny', '{\"0\":\"positive\",\"1\":\"negative\"}'), "
                "'$.confusion.matrix') = json_extract(sentiment_evaluate(t, 1 - y, 'tiny'), "
                "'$.confusion.matrix') FROM d",
                "1");
    sqlite3_close(db);
}

/* sentiment_evaluate: no known label is an error, some unknown a warning. */
static void test_evaluate_unknown_labels(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('tiny', '" TINY_MODEL "')");
    make_data(db, 20, 0);
    expect_error(db, "SELECT sentiment_evaluate(t, 'x' || y, 'tiny') FROM d",
                 "sentiment_evaluate(): not one row's label is a label of model 'tiny' ('negative', "
                 "'positive'); the data's labels: 'xpositive', 'xnegative'; say what they mean with a "
                 "fourth argument");
    expect_text(db,
                "SELECT json_extract(sentiment_evaluate(t, CASE WHEN id < 3 THEN 'neutral' ELSE y END, "
                "'tiny'), '$.warning') FROM d",
                "2 of 20 rows have a label the model does not have (neutral), counted as errors; map "
                "labels with the fourth argument");
    expect_text(db, "SELECT json_extract(sentiment_evaluate(t, y, 'tiny'), '$.warning') IS NULL FROM d", "1");
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_waits_for_lock),
        cmocka_unit_test(test_store_lock_held_keeps_model),
        cmocka_unit_test(test_store_lock_no_timeout),
        cmocka_unit_test(test_lock_checked_before_training),
        cmocka_unit_test(test_lock_released_before_training),
        cmocka_unit_test(test_train_in_transaction_after_schema_change),
        cmocka_unit_test(test_wal_snapshot_keeps_model),
        cmocka_unit_test(test_failed_statement_stores_rows_seen),
        cmocka_unit_test(test_head_lr_groups),
        cmocka_unit_test(test_head_lr_defaults_and_determinism),
        cmocka_unit_test(test_zero_one_labels_convention),
        cmocka_unit_test(test_evaluate_unknown_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

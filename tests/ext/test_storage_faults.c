/* test_storage_faults.c: the transaction rule of ext/storage.c (its header)
 * under lock contention, failing file operations and crafted store tables.
 *
 * After every storing function (sentiment_save, train(), sentiment_use,
 * sentiment_drop) the connection must be in the transaction state it was in
 * before the call, a version must be reported only when it is in the file
 * after the connection closed, and the user's own writes before and after
 * the call must all be in the file. Checked:
 *   - with a second connection holding a read transaction past the busy
 *     timeout, in a rollback-journal database and in WAL;
 *   - with every file operation of the call failing in turn (fault_vfs.h:
 *     SQLITE_FULL, SQLITE_IOERR, a lock that stays SQLITE_BUSY), in
 *     autocommit mode and inside the user's transaction;
 *   - with a store whose versions are not INTEGERs or end at the largest
 *     one, and with views where the store keeps its tables.
 * The databases are files under /dev/shm (or /tmp).
 */
#include "support/db_file_util.h"
#include "support/ext_test_util.h"

#include <unistd.h>

#include "support/fault_vfs.h"

/* ---- files and connections ------------------------------------------------ */

/* In memory-backed /dev/shm when there is one (the sweeps below create a
 * few thousand databases; fsync there costs nothing), else /tmp. */
static void db_path(char *buf, size_t cap, const char *tag)
{
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(buf, cap, "%s/sentiment_storage_faults_%d_%s.db", dir, (int)getpid(), tag);
    remove_db(buf);
}

/* Table d(t, y) of n labelled rows for train(). */
static void make_data(sqlite3 *db, int n)
{
    static const char *const pos[] = {"好", "满意", "推荐", "干净"};
    static const char *const neg[] = {"差", "失望", "脏", "后悔"};
    char text[64];
    exec_ok(db, "CREATE TABLE d(t TEXT, y TEXT)");
    sqlite3_stmt *st = prepare(db, "INSERT INTO d VALUES (?1, ?2)");
    for (int i = 0; i < n; i++) {
        int p = i % 2 == 0;
        snprintf(text, sizeof text, "酒店%s房间%s", (p ? pos : neg)[i % 4], (p ? pos : neg)[(i / 4) % 4]);
        sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, p ? "positive" : "negative", -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
}

/* A connection with the tiny model as 'tiny', a user table u with one row,
 * the data table d, in WAL mode when wal. */
static sqlite3 *setup(const char *path, int wal)
{
    sqlite3 *db = open_db_path(path);
    exec_ok(db, "SELECT sentiment_config('progress', 'off')");
    load_tiny(db);
    /* large pages: a stored model is a few operations, not hundreds, so
     * failing each in turn stays quick */
    exec_ok(db, "PRAGMA page_size = 65536");
    if (wal) expect_text(db, "PRAGMA journal_mode = WAL", "wal");
    exec_ok(db, "CREATE TABLE IF NOT EXISTS u(x); INSERT INTO u VALUES (1)");
    if (!q_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'd'")) make_data(db, 16);
    exec_ok(db, "PRAGMA busy_timeout = 50");
    return db;
}

/* A plain connection (no extension) to read the file as it is on disk. */
static sqlite3 *plain(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, "unix"), SQLITE_OK);
    return db;
}

/* Stored versions of 'm' in the file (0 when there is no store). */
static int64_t file_versions(const char *path)
{
    if (file_int(path, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_model_store'") <= 0)
        return 0;
    return file_int(path, "SELECT count(*) FROM sentiment_model_store WHERE name = 'm'");
}

static int file_has_version(const char *path, int64_t v)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM sentiment_model_store WHERE name = 'm' AND version = %lld",
             (long long)v);
    return file_int(path, sql) == 1;
}

/* A second connection holding a read transaction (SHARED lock; a snapshot
 * in WAL) until closed. */
static sqlite3 *reader(const char *path)
{
    sqlite3 *db = plain(path);
    exec_ok(db, "BEGIN; SELECT count(*) FROM u");
    return db;
}

#define SAVE_SQL "SELECT sentiment_save('m', 'tiny')"
#define TRAIN_SQL "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM d"
#define USE_SQL "SELECT sentiment_use('m', 1)"
#define DROP_SQL "SELECT sentiment_drop('m', 1)"

/* After a call: the user's next autocommit write commits, and both rows of
 * u are in the file after close. */
static void user_write_survives(sqlite3 *db, const char *path)
{
    assert_int_equal(sqlite3_get_autocommit(db), 1);
    exec_ok(db, "INSERT INTO u VALUES (2)");
    sqlite3_close(db);
    assert_int_equal(file_int(path, "SELECT count(*) FROM u WHERE x IN (1, 2)"), 2);
    assert_int_equal(file_int(path, "SELECT count(*) FROM pragma_integrity_check WHERE "
                                    "integrity_check = 'ok'"), 1);
}

/* ---- a reader holding its lock past the busy timeout ------------------------ */

static void reader_case(const char *sql, int stored_before, int wal)
{
    char path[256], *out;
    db_path(path, sizeof path, "reader");
    sqlite3 *db = setup(path, wal);
    if (stored_before) free(q_text(db, SAVE_SQL));
    int64_t before = file_versions(path);
    sqlite3 *r = reader(path);
    int rc = run_sql(db, sql, &out);
    assert_int_equal(sqlite3_get_autocommit(db), 1);
    if (!wal) {
        if (rc == SQLITE_OK) fail_msg("%s succeeded (%s) while a reader held the database", sql, out);
        if (!strstr(out, "locked")) fail_msg("%s: '%s' does not say the database is locked", sql, out);
    }
    sqlite3_close(r);
    int64_t after = file_versions(path);
    if (rc == SQLITE_OK && strstr(sql, "drop")) {
        assert_int_equal(after, before - 1);
    } else if (rc == SQLITE_OK) {
        /* train() reports JSON with the version; the others the number */
        int64_t v = strstr(sql, "train") ? 0 : atoll(out);
        assert_int_equal(after, before + 1);
        if (v) assert_true(file_has_version(path, v));
    } else {
        assert_int_equal(after, before);
    }
    free(out);
    user_write_survives(db, path);
    remove_db(path);
}

static void test_reader_lock_rollback_journal(void **state)
{
    (void)state;
    reader_case(SAVE_SQL, 0, 0);
    reader_case(TRAIN_SQL, 0, 0);
    reader_case(USE_SQL, 1, 0);
    reader_case(DROP_SQL, 1, 0);
}

static void test_reader_lock_wal(void **state)
{
    (void)state;
    reader_case(SAVE_SQL, 0, 1);
    reader_case(TRAIN_SQL, 0, 1);
    reader_case(USE_SQL, 1, 1);
    reader_case(DROP_SQL, 1, 1);
}

/* train() could not store while the reader held on: the model stays in
 * memory, sentiment_save('m') fails the same way and keeps it, and stores
 * it once the reader is gone. */
static void test_train_then_save_keeps_model(void **state)
{
    (void)state;
    char path[256], *out;
    db_path(path, sizeof path, "keep");
    sqlite3 *db = setup(path, 0);
    sqlite3 *r = reader(path);
    assert_int_not_equal(run_sql(db, TRAIN_SQL, &out), SQLITE_OK);
    if (!strstr(out, "trained but not stored")) fail_msg("got '%s'", out);
    free(out);
    assert_int_not_equal(run_sql(db, "SELECT sentiment_save('m')", &out), SQLITE_OK);
    if (!strstr(out, "locked")) fail_msg("got '%s'", out);
    free(out);
    assert_int_equal(sqlite3_get_autocommit(db), 1);
    expect_text(db, "SELECT source FROM sentiment_models WHERE name = 'm'", "memory");
    sqlite3_close(r);
    expect_text(db, "SELECT sentiment_save('m')", "1");
    expect_text(db, "SELECT source FROM sentiment_models WHERE name = 'm'", "database");
    user_write_survives(db, path);
    assert_int_equal(file_versions(path), 1);
    remove_db(path);
}

/* ---- every file operation failing in turn -------------------------------- */

typedef struct fault_case {
    const char *sql;
    int stored_before; /* a version 1 exists first */
    int is_drop;
} fault_case;

/* One call with the k-th operation failing; returns whether the failure
 * was reached. */
static int fault_once(const fault_case *fc, int mode, long k, int in_txn)
{
    char path[256], *out;
    db_path(path, sizeof path, "fault");
    sqlite3 *db = setup(path, 0);
    if (fc->stored_before) free(q_text(db, SAVE_SQL));
    int64_t before = file_versions(path);
    if (in_txn) exec_ok(db, "BEGIN; INSERT INTO u VALUES (3)");
    fault_arm(mode, k);
    int rc = run_sql(db, fc->sql, &out);
    fault_disarm();
    int hit = fault_hits() > 0;
    int user_txn_lost = 0;
    if (in_txn) {
        if (sqlite3_get_autocommit(db)) {
            /* SQLite rolled the user's transaction back: the error says so */
            if (rc == SQLITE_OK || !strstr(out, "rolled back the enclosing transaction"))
                fail_msg("k=%ld mode=%d: the transaction ended and the result '%s' does not "
                         "say so", k, mode, out);
            user_txn_lost = 1;
        } else {
            exec_ok(db, "COMMIT");
        }
    }
    if (rc == SQLITE_OK && !hit && !in_txn && fc->is_drop) assert_string_equal(out, "1");
    int64_t after = file_versions(path);
    if (rc == SQLITE_OK && !user_txn_lost) {
        if (fc->is_drop) {
            assert_int_equal(after, before - 1);
        } else {
            if (after != before + 1) fail_msg("k=%ld mode=%d: reported '%s' but %lld versions "
                                              "are stored", k, mode, out, (long long)after);
            if (!strstr(fc->sql, "train")) assert_true(file_has_version(path, atoll(out)));
        }
    } else if (after != before) {
        fail_msg("k=%ld mode=%d in_txn=%d: failed with '%s' but the store changed (%lld -> %lld "
                 "versions)", k, mode, in_txn, out, (long long)before, (long long)after);
    }
    free(out);
    if (in_txn && !user_txn_lost) {
        assert_int_equal(file_int(path, "SELECT count(*) FROM u WHERE x = 3"), 1);
    }
    user_write_survives(db, path);
    remove_db(path);
    return hit;
}

static void fault_sweep(const fault_case *fc, int in_txn)
{
    static const int modes[] = {FAULT_FULL, FAULT_IOERR, FAULT_BUSY};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        long k;
        /* inside the user's transaction every lock is taken already */
        if (in_txn && modes[m] == FAULT_BUSY) continue;
        for (k = 1; k < 5000; k++)
            if (!fault_once(fc, modes[m], k, in_txn)) break;
        if (k == 5000) fail_msg("%s: never ran to its end", fc->sql);
        printf("%s, mode %d%s: %ld operations failed in turn\n", fc->sql, modes[m],
               in_txn ? ", in a transaction" : "", k - 1);
        if (k < 3)
            fail_msg("%s mode %d in_txn %d: only %ld operations counted", fc->sql, modes[m], in_txn,
                     k - 1);
    }
}

static void test_faults_save(void **state)
{
    (void)state;
    const fault_case fc = {SAVE_SQL, 0, 0};
    fault_sweep(&fc, 0);
    fault_sweep(&fc, 1);
}

static void test_faults_save_second_version(void **state)
{
    (void)state;
    const fault_case fc = {SAVE_SQL, 1, 0};
    fault_sweep(&fc, 0);
}

static void test_faults_train(void **state)
{
    (void)state;
    const fault_case fc = {TRAIN_SQL, 0, 0};
    fault_sweep(&fc, 0);
}

static void test_faults_use(void **state)
{
    (void)state;
    const fault_case fc = {USE_SQL, 1, 0};
    fault_sweep(&fc, 0);
    fault_sweep(&fc, 1);
}

static void test_faults_drop(void **state)
{
    (void)state;
    const fault_case fc = {DROP_SQL, 1, 1};
    fault_sweep(&fc, 0);
    fault_sweep(&fc, 1);
}

/* ---- crafted store tables ----------------------------------------------- */

static void test_version_at_int64_max(void **state)
{
    (void)state;
    char path[256];
    db_path(path, sizeof path, "vmax");
    sqlite3 *db = setup(path, 0);
    expect_text(db, SAVE_SQL, "1");
    exec_ok(db, "UPDATE sentiment_model_store SET version = 9223372036854775807");
    expect_error(db, SAVE_SQL, "version 9223372036854775807, after which there is no version");
    expect_error(db, "SELECT sentiment_use('m', 9223372036854775807)", "no version number");
    expect_error(db, TRAIN_SQL, "no version number");
    assert_int_equal(q_int(db, "SELECT count(*) FROM sentiment_model_store WHERE "
                               "typeof(version) != 'integer'"), 0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM sentiment_model_store"), 1);
    /* a REAL or TEXT version written by hand */
    exec_ok(db, "UPDATE sentiment_model_store SET version = 1.5");
    expect_error(db, SAVE_SQL, "are not INTEGERs");
    exec_ok(db, "UPDATE sentiment_model_store SET version = 'two'");
    expect_error(db, SAVE_SQL, "are not INTEGERs");
    assert_int_equal(q_int(db, "SELECT count(*) FROM sentiment_model_store"), 1);
    user_write_survives(db, path);
    remove_db(path);
}

/* A trigger that ignores the insert: an error, not a version that does
 * not exist. */
static void test_ignoring_trigger(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_text(db, SAVE_SQL, "1");
    exec_ok(db, "CREATE TRIGGER ign BEFORE INSERT ON sentiment_model_store "
                "BEGIN SELECT RAISE(IGNORE); END");
    expect_error(db, SAVE_SQL, "no row was inserted");
    assert_int_equal(q_int(db, "SELECT count(*) FROM sentiment_model_store"), 1);
    sqlite3_close(db);
}

/* Views where the store keeps its tables: an error naming the view, at
 * once (train() used to loop forever). */
static void test_views_in_the_way(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"CREATE VIEW sentiment_train_log AS SELECT 1 AS model", "a view named sentiment_train_log"},
        {"CREATE VIEW sentiment_model_store AS SELECT 1 AS name", "a view named sentiment_model_store"},
        {"CREATE TABLE x(a); CREATE INDEX sentiment_model_store_delete ON x(a)",
         "an index named sentiment_model_store_delete"},
    };
    alarm(120); /* a loop here would otherwise hang the suite */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256];
        db_path(path, sizeof path, "view");
        sqlite3 *db = setup(path, 0);
        exec_ok(db, cases[i][0]);
        expect_error(db, SAVE_SQL, cases[i][1]);
        assert_int_equal(sqlite3_get_autocommit(db), 1);
        expect_error(db, TRAIN_SQL, cases[i][1]);
        assert_int_equal(sqlite3_get_autocommit(db), 1);
        user_write_survives(db, path);
        remove_db(path);
    }
    alarm(0);
}

int main(void)
{
    fault_vfs_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_lock_rollback_journal),
        cmocka_unit_test(test_reader_lock_wal),
        cmocka_unit_test(test_train_then_save_keeps_model),
        cmocka_unit_test(test_version_at_int64_max),
        cmocka_unit_test(test_ignoring_trigger),
        cmocka_unit_test(test_views_in_the_way),
        cmocka_unit_test(test_faults_save),
        cmocka_unit_test(test_faults_save_second_version),
        cmocka_unit_test(test_faults_use),
        cmocka_unit_test(test_faults_drop),
        cmocka_unit_test(test_faults_train),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

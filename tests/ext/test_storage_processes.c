/* test_storage_processes.c: storing models from several processes at once
 * and on a full disk (RLIMIT_FSIZE), the transaction rule of ext/storage.c
 * seen from outside the process.
 *
 * Every case runs in forked children; the parent only prepares and reads
 * the database files with plain SQLite (it never loads the extension, so
 * each child starts from a process without BLAS threads).
 *   - three processes train into one rollback-journal database (and one in
 *     WAL) at the same time: every version one of them reports is in the
 *     file, and the file holds no version nobody reported;
 *   - another process holding a read transaction in a rollback-journal
 *     database: sentiment_save() and train() fail saying it is locked and
 *     leave autocommit, and the user's next write commits;
 *   - a full disk (the file-size limit just above the database's size, with
 *     SIGXFSZ ignored so a write fails with EFBIG, which SQLite reports as
 *     an I/O error): sentiment_save() and train() fail saying so, the
 *     connection is left in autocommit mode, the model train() made stays
 *     usable in memory and sentiment_save() keeps it while the disk is
 *     full, then stores it once there is room.
 */
#include "support/db_file_util.h"
#include "support/ext_test_util.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void db_path(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "/tmp/sentiment_storage_processes_%d_%s.db", (int)getpid(), tag);
    remove_db(buf);
}

/* The parent's setup: a table d(t, y) of labelled rows and u(x) with one
 * row, written with plain SQLite. */
static void make_db(const char *path, int wal)
{
    static const char *const pos[] = {"好", "满意", "推荐", "干净"};
    static const char *const neg[] = {"差", "失望", "脏", "后悔"};
    sqlite3 *db = NULL;
    char text[64];
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    if (wal) exec_ok(db, "PRAGMA journal_mode = WAL");
    exec_ok(db, "CREATE TABLE u(x); INSERT INTO u VALUES (1); CREATE TABLE d(t TEXT, y TEXT)");
    sqlite3_stmt *st = prepare(db, "INSERT INTO d VALUES (?1, ?2)");
    for (int i = 0; i < 32; i++) {
        int p = i % 2 == 0;
        snprintf(text, sizeof text, "酒店%s房间%s", (p ? pos : neg)[i % 4], (p ? pos : neg)[(i / 4) % 4]);
        sqlite3_bind_text(st, 1, text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, p ? "positive" : "negative", -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static sqlite3 *child_conn(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_auto_extension((void (*)(void))sqlite3_sentiment_init);
    if (sqlite3_open(path, &db) != SQLITE_OK) _exit(90);
    sqlite3_exec(db, "SELECT sentiment_config('threads', 1); SELECT sentiment_config('progress', "
                     "'off'); SELECT sentiment_load('tiny', '" TINY_MODEL "')",
                 NULL, NULL, NULL);
    return db;
}

/* Waits for pid for at most secs; kills it and fails the test after that. */
static int wait_child(pid_t pid, int secs)
{
    int status = 0;
    for (int i = 0; i < secs * 100; i++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return status;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    fail_msg("child %d did not finish in %d s", (int)pid, secs);
    return -1;
}

/* ---- several processes training into one database ------------------------- */

enum { N_TRAINERS = 3 };

/* Child i: its own busy timeout (one that gives up early among ones that
 * wait), starting when the parent closes the start pipe so the runs
 * overlap. */
static void trainer_child(const char *path, int i, int start_fd, int fd)
{
    static const char *const timeouts[N_TRAINERS] = {"PRAGMA busy_timeout = 100",
                                                     "PRAGMA busy_timeout = 400",
                                                     "PRAGMA busy_timeout = 2000"};
    sqlite3 *db = child_conn(path);
    char *out = NULL, line[256], c;
    sqlite3_exec(db, timeouts[i], NULL, NULL, NULL);
    if (read(start_fd, &c, 1) < 0) _exit(94);
    int rc = run_sql(db, "SELECT json_extract(train('m', t, y, '{\"base\":\"tiny\",\"epochs\":3}'), "
                           "'$.version') FROM d", &out);
    int autocommit = sqlite3_get_autocommit(db);
    snprintf(line, sizeof line, "%s %d %.200s\n", rc == SQLITE_OK ? "ok" : "err", autocommit,
             out ? out : "");
    if (write(fd, line, strlen(line)) < 0) _exit(91);
    free(out);
    sqlite3_close(db);
    _exit(0);
}

static void concurrent_trainers(int wal)
{
    char path[256], buf[4096];
    int fds[2], start[2];
    pid_t pids[N_TRAINERS];
    db_path(path, sizeof path, wal ? "train_wal" : "train_rj");
    make_db(path, wal);
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(pipe(start), 0);
    for (int i = 0; i < N_TRAINERS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(fds[0]);
            close(start[1]);
            trainer_child(path, i, start[0], fds[1]);
        }
    }
    close(fds[1]);
    close(start[0]);
    usleep(300000); /* the children have loaded the model */
    close(start[1]);
    for (int i = 0; i < N_TRAINERS; i++) {
        int st = wait_child(pids[i], 120);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    assert_true(n > 0);
    buf[n] = 0;
    int reported = 0;
    char sql[160];
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char kind[8];
        int autocommit = -1;
        long long v = 0;
        assert_int_equal(sscanf(line, "%7s %d", kind, &autocommit), 2);
        if (autocommit != 1) fail_msg("a trainer was left in a transaction: %s", line);
        if (!strcmp(kind, "ok")) {
            assert_int_equal(sscanf(line, "%*s %*d %lld", &v), 1);
            snprintf(sql, sizeof sql,
                     "SELECT count(*) FROM sentiment_model_store WHERE name = 'm' AND version = %lld", v);
            if (file_int(path, sql) != 1) fail_msg("version %lld was reported but not stored", v);
            reported++;
        } else if (!strstr(line, "locked") && !strstr(line, "busy")) {
            fail_msg("a trainer failed for another reason: %s", line);
        }
    }
    assert_true(reported >= 1);
    assert_int_equal(file_int(path, "SELECT count(*) FROM sentiment_model_store"), reported);
    assert_int_equal(file_int(path, "SELECT count(*) FROM u"), 1);
    remove_db(path);
}

/* Which trainer commits first varies from run to run: three rounds. */
static void test_trainers_rollback_journal(void **state)
{
    (void)state;
    for (int round = 0; round < 3; round++) concurrent_trainers(0);
}

static void test_trainers_wal(void **state)
{
    (void)state;
    concurrent_trainers(1);
}

/* ---- a full disk ---------------------------------------------------------- */

static void set_fsize(rlim_t bytes)
{
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = bytes;
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(92);
}

/* A write past RLIMIT_FSIZE fails with EFBIG, which SQLite's unix VFS
 * reports as an I/O error (ENOSPC would be "database or disk is full"). */
static int full_or_io(const char *msg)
{
    return strstr(msg, "full") || strstr(msg, "I/O error");
}

/* Exit codes say which check failed (the parent names it). */
static void full_disk_child(const char *path)
{
    struct rlimit rl;
    struct stat sb;
    char *out = NULL;
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &rl);
    sqlite3 *db = child_conn(path);
    if (stat(path, &sb) != 0) _exit(93);
    /* room for a page or two, not for a model */
    set_fsize((rlim_t)sb.st_size + 8192);
    if (run_sql(db, "SELECT sentiment_save('m', 'tiny')", &out) == SQLITE_OK) _exit(10);
    if (!full_or_io(out)) {
        fprintf(stderr, "sentiment_save on a full disk: %s\n", out);
        _exit(11);
    }
    free(out);
    if (!sqlite3_get_autocommit(db)) _exit(12);
    if (run_sql(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM d", &out) ==
        SQLITE_OK)
        _exit(13);
    if (!strstr(out, "trained but not stored") || !full_or_io(out)) _exit(14);
    free(out);
    if (!sqlite3_get_autocommit(db)) _exit(15);
    /* the advised sentiment_save fails too while the disk is full, and
     * keeps the trained model */
    if (run_sql(db, "SELECT sentiment_save('m')", &out) == SQLITE_OK) _exit(16);
    free(out);
    if (!sqlite3_get_autocommit(db)) _exit(17);
    if (run_sql(db, "SELECT source FROM sentiment_models WHERE name = 'm'", &out) != SQLITE_OK ||
        strcmp(out, "memory"))
        _exit(18);
    free(out);
    /* room again: it is stored, and the user's next write commits */
    set_fsize(rl.rlim_cur);
    if (run_sql(db, "SELECT sentiment_save('m')", &out) != SQLITE_OK || strcmp(out, "1")) _exit(19);
    free(out);
    if (sqlite3_exec(db, "INSERT INTO u VALUES (2)", NULL, NULL, NULL) != SQLITE_OK) _exit(20);
    sqlite3_close(db);
    _exit(0);
}

static void test_full_disk(void **state)
{
    (void)state;
    char path[256];
    db_path(path, sizeof path, "full");
    make_db(path, 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) full_disk_child(path);
    int st = wait_child(pid, 120);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the full-disk child failed check %d (see full_disk_child)",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
    assert_int_equal(file_int(path, "SELECT count(*) FROM sentiment_model_store WHERE name = 'm'"), 1);
    assert_int_equal(file_int(path, "SELECT count(*) FROM u"), 2);
    assert_int_equal(file_int(path, "SELECT count(*) FROM pragma_integrity_check WHERE "
                                    "integrity_check = 'ok'"), 1);
    remove_db(path);
}

/* ---- another process holding a read transaction ---------------------------- */

/* Holds a read transaction (a SHARED lock) on path from when it writes to
 * `ready` until `release` is readable. */
static void reader_child(const char *path, int ready, int release)
{
    sqlite3 *db = NULL;
    char c = 1;
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_exec(db, "BEGIN; SELECT count(*) FROM u", NULL, NULL, NULL) != SQLITE_OK)
        _exit(95);
    if (write(ready, &c, 1) != 1 || read(release, &c, 1) < 0) _exit(96);
    sqlite3_close(db);
    _exit(0);
}

/* While the reader holds on: each storing call fails saying the database is
 * locked and leaves autocommit; then, the reader gone, the user's write
 * commits and nothing was stored. Exit codes name the failed check. */
static void writer_child(const char *path, int release)
{
    static const char *const calls[] = {
        "SELECT sentiment_save('m', 'tiny')",
        "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1}') FROM d",
    };
    sqlite3 *db = child_conn(path);
    char *out = NULL, c = 1;
    sqlite3_exec(db, "PRAGMA busy_timeout = 100", NULL, NULL, NULL);
    for (int i = 0; i < 2; i++) {
        if (run_sql(db, calls[i], &out) == SQLITE_OK) _exit(30 + i);
        if (!strstr(out, "locked")) {
            fprintf(stderr, "%s: %s\n", calls[i], out);
            _exit(40 + i);
        }
        free(out);
        if (!sqlite3_get_autocommit(db)) _exit(50 + i);
    }
    if (write(release, &c, 1) != 1) _exit(97);
    close(release);
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_exec(db, "INSERT INTO u VALUES (2)", NULL, NULL, NULL) != SQLITE_OK) _exit(60);
    sqlite3_close(db);
    _exit(0);
}

static void test_reader_in_another_process(void **state)
{
    (void)state;
    char path[256], c;
    int ready[2], release[2];
    db_path(path, sizeof path, "reader");
    make_db(path, 0);
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    pid_t r = fork();
    assert_true(r >= 0);
    if (r == 0) {
        close(ready[0]);
        close(release[1]);
        reader_child(path, ready[1], release[0]);
    }
    close(ready[1]);
    close(release[0]);
    assert_int_equal(read(ready[0], &c, 1), 1);
    pid_t w = fork();
    assert_true(w >= 0);
    if (w == 0) writer_child(path, release[1]);
    close(release[1]);
    int sw = wait_child(w, 120), sr = wait_child(r, 120);
    if (!WIFEXITED(sw) || WEXITSTATUS(sw) != 0)
        fail_msg("the writer failed check %d (see writer_child)",
                 WIFEXITED(sw) ? WEXITSTATUS(sw) : -WTERMSIG(sw));
    assert_true(WIFEXITED(sr) && WEXITSTATUS(sr) == 0);
    assert_int_equal(file_int(path, "SELECT count(*) FROM u"), 2);
    assert_true(file_int(path, "SELECT count(*) FROM sentiment_model_store") <= 0);
    remove_db(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trainers_rollback_journal),
        cmocka_unit_test(test_trainers_wal),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_reader_in_another_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

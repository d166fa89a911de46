/* test_file_limits.c: files from outside are read only when they are regular
 * files within their size caps (model/format/file_read.h), through every path that
 * reads one: a model directory (bert_model_load_dir, sentiment_load), a
 * vocab file (tokenizer_load_file, train()'s "vocab" option) and
 * model.safetensors. A FIFO must be refused at once, never waited on: every
 * test runs under an alarm, and a hang fails the run.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "support/ext_test_util.h"

#include "core/errors.h"
#include "encoder/bert.h"
#include "format/file_read.h"
#include "format/safetensors.h"
#include "tokenize/tokenizer.h"

#define TEST_TIMEOUT_S 20

static const char *g_test = "?";

static void on_alarm(int sig)
{
    static const char msg[] = "test_file_limits: timed out (a read blocked or ran away): ";
    (void)sig;
    (void)!write(2, msg, sizeof msg - 1);
    (void)!write(2, g_test, strlen(g_test));
    (void)!write(2, "\n", 1);
    _exit(1);
}

/* A scratch model directory: the tiny model's three files as symlinks, so
 * a test replaces one of them with what it is testing. */
typedef struct fixture {
    char dir[256];
    char path[320]; /* scratch for file names */
} fixture;

static const char *fx_file(fixture *f, const char *name)
{
    snprintf(f->path, sizeof f->path, "%s/%s", f->dir, name);
    return f->path;
}

static void fx_link(fixture *f, const char *name, const char *target)
{
    unlink(fx_file(f, name));
    if (symlink(target, f->path) != 0) fail_msg("symlink %s: %s", f->path, strerror(errno));
}

static int setup(void **state)
{
    static const char *const files[] = {"config.json", "vocab.txt", "model.safetensors"};
    fixture *f = calloc(1, sizeof *f);
    char cwd[200], target[256];
    if (!f || !getcwd(cwd, sizeof cwd)) return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/sm_file_limits_XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    for (int i = 0; i < 3; i++) {
        snprintf(target, sizeof target, "%s/%s/%s", cwd, TINY_MODEL, files[i]);
        fx_link(f, files[i], target);
    }
    *state = f;
    alarm(TEST_TIMEOUT_S);
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char cmd[300];
    alarm(0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0) return -1;
    free(f);
    return 0;
}

/* Replaces name with a FIFO / a directory / a sparse file of size bytes. */
static void fx_fifo(fixture *f, const char *name)
{
    unlink(fx_file(f, name));
    if (mkfifo(f->path, 0600) != 0) fail_msg("mkfifo %s: %s", f->path, strerror(errno));
}

static void fx_dir(fixture *f, const char *name)
{
    unlink(fx_file(f, name));
    if (mkdir(f->path, 0700) != 0) fail_msg("mkdir %s: %s", f->path, strerror(errno));
}

static void fx_sparse(fixture *f, const char *name, off_t size)
{
    int fd;
    unlink(fx_file(f, name));
    fd = open(f->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, size) != 0) fail_msg("ftruncate %s: %s", f->path, strerror(errno));
    close(fd);
}

/* Peak resident memory of this process, in MB. */
static long peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

static void expect_load_dir_error(fixture *f, const char *want)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(f->dir, &m, err);
    assert_null(m);
    if (rc != SM_ERR_IO) fail_msg("rc %d, want SM_ERR_IO; err: %s", rc, err);
    if (!strstr(err, want)) fail_msg("error '%s' does not contain '%s'", err, want);
    assert_true(peak_rss_mb() < 1024);
}

/* ---- model/: bert_model_load_dir ---------------------------------------- */

static void test_load_dir_config_fifo(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_fifo(f, "config.json");
    expect_load_dir_error(f, "config.json': it is a FIFO (named pipe); expected a regular file");
}

static void test_load_dir_config_dev_zero(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_link(f, "config.json", "/dev/zero");
    expect_load_dir_error(f, "config.json': it is a character device; expected a regular file");
}

static void test_load_dir_config_directory(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_dir(f, "config.json");
    expect_load_dir_error(f, "config.json': it is a directory; expected a regular file");
}

static void test_load_dir_config_oversize(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_sparse(f, "config.json", (off_t)5 << 20);
    expect_load_dir_error(f, "config.json' is 5 MB; at most 4 MB is read");
}

static void test_load_dir_config_huge(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_sparse(f, "config.json", (off_t)2254857830LL); /* 2.1 GB, sparse */
    expect_load_dir_error(f, "config.json' is 2.1 GB; at most 4 MB is read");
}

static void test_load_dir_vocab_fifo(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_fifo(f, "vocab.txt");
    expect_load_dir_error(f, "vocab.txt': it is a FIFO (named pipe)");
}

static void test_load_dir_vocab_dev_zero(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_link(f, "vocab.txt", "/dev/zero");
    expect_load_dir_error(f, "vocab.txt': it is a character device");
}

static void test_load_dir_vocab_oversize(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_sparse(f, "vocab.txt", (off_t)300 << 20);
    expect_load_dir_error(f, "vocab.txt' is 300 MB; at most 256 MB is read");
}

static void test_load_dir_vocab_directory(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_dir(f, "vocab.txt");
    expect_load_dir_error(f, "vocab.txt': it is a directory");
}

static void test_load_dir_weights_fifo(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_fifo(f, "model.safetensors");
    expect_load_dir_error(f, "model.safetensors': it is a FIFO (named pipe)");
}

static void test_load_dir_weights_dev_zero(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_link(f, "model.safetensors", "/dev/zero");
    expect_load_dir_error(f, "model.safetensors': it is a character device");
}

static void test_load_dir_weights_directory(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_dir(f, "model.safetensors");
    expect_load_dir_error(f, "model.safetensors': it is a directory");
}

static void test_load_dir_config_socket(void **state)
{
    fixture *f = *state;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    g_test = __func__;
    unlink(fx_file(f, "config.json"));
    if (strlen(f->path) >= sizeof sa.sun_path) fail_msg("socket path too long: %s", f->path);
    memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail_msg("bind %s: %s", f->path, strerror(errno));
    expect_load_dir_error(f, "config.json': it is a socket");
    close(s);
}

static void test_load_dir_symlinks_to_regular_files_load(void **state)
{
    fixture *f = *state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    g_test = __func__;
    if (bert_model_load_dir(f->dir, &m, err) != SM_OK) fail_msg("load: %s", err);
    assert_non_null(m);
    bert_model_free(m);
}

static int stop_always(void *user)
{
    (*(int *)user)++;
    return 1;
}

static void test_load_dir_stop_before_first_file(void **state)
{
    fixture *f = *state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int calls = 0;
    g_test = __func__;
    fx_fifo(f, "config.json"); /* never opened */
    assert_int_equal(bert_model_load_dir_stoppable(f->dir, stop_always, &calls, &m, err),
                     SM_ERR_INTERRUPTED);
    assert_null(m);
    assert_int_equal(calls, 1);
    assert_string_equal(err, "interrupted");
}

/* ---- model/: the helper itself, tokenizer_load_file, safetensors ---------- */

static void test_file_read_exactly_at_cap(void **state)
{
    fixture *f = *state;
    char err[SM_ERR_MAX] = "", *buf = NULL;
    size_t len = 0;
    g_test = __func__;
    fx_sparse(f, "x.bin", 4096);
    assert_int_equal(sm_file_read(f->path, 4096, &buf, &len, err), SM_OK);
    assert_int_equal(len, 4096);
    assert_int_equal(buf[4096], '\0');
    free(buf);
}

static void test_file_read_one_byte_over_cap(void **state)
{
    fixture *f = *state;
    char err[SM_ERR_MAX] = "", *buf = NULL;
    size_t len = 0;
    g_test = __func__;
    fx_sparse(f, "x.bin", 4097);
    assert_int_equal(sm_file_read(f->path, 4096, &buf, &len, err), SM_ERR_IO);
    assert_null(buf);
    assert_non_null(strstr(err, "x.bin' is 4.0 KB; at most 4 KB is read"));
}

static void test_file_read_grows_past_cap(void **state)
{
    /* /proc files say size 0 to fstat; what is read is still capped */
    char err[SM_ERR_MAX] = "", *buf = NULL;
    size_t len = 0;
    (void)state;
    g_test = __func__;
    assert_int_equal(sm_file_read("/proc/self/status", 64, &buf, &len, err), SM_ERR_IO);
    assert_null(buf);
    assert_non_null(strstr(err, "'/proc/self/status' grew past 65 bytes; at most 64 bytes is read"));
    assert_int_equal(sm_file_read("/proc/self/status", 1 << 20, &buf, &len, err), SM_OK);
    assert_true(len > 64);
    free(buf);
}

static void test_file_read_missing(void **state)
{
    char err[SM_ERR_MAX] = "", *buf = NULL;
    size_t len = 0;
    (void)state;
    g_test = __func__;
    assert_int_equal(sm_file_read("/no/such/file.json", 1024, &buf, &len, err), SM_ERR_IO);
    assert_string_equal(err, "cannot read '/no/such/file.json': No such file or directory");
}

static void test_file_read_dev_null(void **state)
{
    char err[SM_ERR_MAX] = "", *buf = NULL;
    size_t len = 0;
    (void)state;
    g_test = __func__;
    assert_int_equal(sm_file_read("/dev/null", 1024, &buf, &len, err), SM_ERR_IO);
    assert_string_equal(err, "cannot read '/dev/null': it is a character device; expected a "
                             "regular file");
}

static void test_file_size_text(void **state)
{
    char b[32];
    (void)state;
    g_test = __func__;
    assert_string_equal(sm_file_size_text(0, b, sizeof b), "0 bytes");
    assert_string_equal(sm_file_size_text(1, b, sizeof b), "1 byte");
    assert_string_equal(sm_file_size_text(1023, b, sizeof b), "1023 bytes");
    assert_string_equal(sm_file_size_text(1024, b, sizeof b), "1 KB");
    assert_string_equal(sm_file_size_text(SM_FILE_MAX_CONFIG, b, sizeof b), "4 MB");
    assert_string_equal(sm_file_size_text(SM_FILE_MAX_VOCAB, b, sizeof b), "256 MB");
    assert_string_equal(sm_file_size_text(SM_FILE_MAX_WEIGHTS, b, sizeof b), "64 GB");
    assert_string_equal(sm_file_size_text(2254857830ULL, b, sizeof b), "2.1 GB");
}

static void test_tokenizer_file_fifo(void **state)
{
    fixture *f = *state;
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    g_test = __func__;
    fx_fifo(f, "vocab.txt");
    assert_int_equal(tokenizer_load_file(f->path, 1, &tok, err), SM_ERR_IO);
    assert_null(tok);
    assert_non_null(strstr(err, "it is a FIFO (named pipe)"));
}

static void test_tokenizer_file_dev_zero(void **state)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    (void)state;
    g_test = __func__;
    assert_int_equal(tokenizer_load_file("/dev/zero", 1, &tok, err), SM_ERR_IO);
    assert_null(tok);
    assert_non_null(strstr(err, "'/dev/zero': it is a character device"));
    assert_true(peak_rss_mb() < 1024);
}

static void test_tokenizer_file_oversize(void **state)
{
    fixture *f = *state;
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    g_test = __func__;
    fx_sparse(f, "big.txt", (off_t)257 << 20);
    assert_int_equal(tokenizer_load_file(f->path, 1, &tok, err), SM_ERR_IO);
    assert_non_null(strstr(err, "big.txt' is 257 MB; at most 256 MB is read"));
}

static void test_safetensors_file_fifo(void **state)
{
    fixture *f = *state;
    char err[SM_ERR_MAX] = "";
    safetensors st;
    g_test = __func__;
    fx_fifo(f, "w.safetensors");
    assert_int_equal(safetensors_open_file(f->path, &st, err), SM_ERR_IO);
    assert_non_null(strstr(err, "safetensors: cannot read"));
    assert_non_null(strstr(err, "it is a FIFO (named pipe)"));
    assert_null(st.mapping);
}

/* ---- ext/: sentiment_load, train's "vocab" ----------------------------- */

static char *load_sql(fixture *f)
{
    return sqlite3_mprintf("SELECT sentiment_load('m', '%q')", f->dir);
}

static void expect_sentiment_load_error(fixture *f, const char *want)
{
    sqlite3 *db = open_db();
    char *sql = load_sql(f);
    expect_error(db, sql, want);
    /* nothing registered, and the connection still works */
    expect_error(db, "SELECT sentiment('好', 'm')", "no model named 'm'");
    sqlite3_free(sql);
    sqlite3_close(db);
    assert_true(peak_rss_mb() < 1024);
}

static void test_sentiment_load_config_fifo(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_fifo(f, "config.json");
    expect_sentiment_load_error(f, "config.json': it is a FIFO (named pipe)");
}

static void test_sentiment_load_config_dev_zero(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_link(f, "config.json", "/dev/zero");
    expect_sentiment_load_error(f, "config.json': it is a character device");
}

static void test_sentiment_load_config_directory(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_dir(f, "config.json");
    expect_sentiment_load_error(f, "config.json': it is a directory");
}

static void test_sentiment_load_vocab_oversize(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_sparse(f, "vocab.txt", (off_t)1 << 30);
    expect_sentiment_load_error(f, "vocab.txt' is 1 GB; at most 256 MB is read");
}

static void test_sentiment_load_weights_dev_zero(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_link(f, "model.safetensors", "/dev/zero");
    expect_sentiment_load_error(f, "model.safetensors': it is a character device");
}

/* While one connection is refused a FIFO, another connection's model loads
 * and classifies: no lock is held across a read that could block. */
typedef struct other_conn {
    fixture *f;
    int ok;
} other_conn;

static void *load_in_other_connection(void *p)
{
    other_conn *o = p;
    sqlite3 *db = NULL;
    char *v = NULL;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) return NULL;
    if (sqlite3_exec(db, "SELECT sentiment_config('threads', 1); "
                         "SELECT sentiment_load('tiny', '" TINY_MODEL "')",
                     NULL, NULL, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT sentiment('服务很好', 'tiny')", -1, &st, NULL) ==
                SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
            v = strdup((const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    o->ok = v != NULL;
    free(v);
    sqlite3_close(db);
    return NULL;
}

static void test_sentiment_load_fifo_blocks_no_other_connection(void **state)
{
    fixture *f = *state;
    other_conn o = {f, 0};
    pthread_t th;
    sqlite3 *db = open_db();
    char *sql = load_sql(f);
    g_test = __func__;
    fx_fifo(f, "config.json");
    assert_int_equal(pthread_create(&th, NULL, load_in_other_connection, &o), 0);
    for (int i = 0; i < 20; i++) expect_error(db, sql, "it is a FIFO (named pipe)");
    pthread_join(th, NULL);
    assert_true(o.ok);
    sqlite3_free(sql);
    sqlite3_close(db);
}

static void fn_interrupt_now(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    sqlite3_interrupt(sqlite3_context_db_handle(ctx));
    sqlite3_result_int(ctx, 1);
}

/* An interrupt that arrives before (or during) a load is honoured between
 * files: the load stops with an error and registers nothing. */
static void test_sentiment_load_honours_interrupt(void **state)
{
    fixture *f = *state;
    sqlite3 *db = open_db();
    char *sql = sqlite3_mprintf("SELECT interrupt_now(), sentiment_load('fresh', '%q')", f->dir);
    g_test = __func__;
    /* the scratch directory is new, so the cache cannot answer without a read */
    assert_int_equal(sqlite3_create_function(db, "interrupt_now", 0, SQLITE_UTF8, NULL,
                                             fn_interrupt_now, NULL, NULL),
                     SQLITE_OK);
    expect_error(db, sql, "sentiment_load(): interrupted while loading");
    expect_error(db, "SELECT sentiment('好', 'fresh')", "no model named 'fresh'");
    sqlite3_free(sql);
    sqlite3_close(db);
}

static void expect_train_vocab_error(const char *vocab, const char *want)
{
    sqlite3 *db = open_db();
    char *sql = sqlite3_mprintf("SELECT train('m', body, label, "
                                "json_object('base', 'none', 'vocab', %Q)) "
                                "FROM (SELECT '很好' AS body, 'a' AS label)",
                                vocab);
    expect_error(db, sql, want);
    sqlite3_free(sql);
    sqlite3_close(db);
    assert_true(peak_rss_mb() < 1024);
}

static void test_train_vocab_dev_zero(void **state)
{
    (void)state;
    g_test = __func__;
    expect_train_vocab_error("/dev/zero", "train(): option 'vocab': cannot read '/dev/zero': it "
                                          "is a character device; expected a regular file");
}

static void test_train_vocab_fifo(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_fifo(f, "vocab.txt");
    expect_train_vocab_error(f->path, "vocab.txt': it is a FIFO (named pipe)");
}

static void test_train_vocab_directory(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    expect_train_vocab_error(f->dir, "it is a directory; expected a regular file");
}

static void test_train_vocab_oversize(void **state)
{
    fixture *f = *state;
    g_test = __func__;
    fx_sparse(f, "vocab.txt", (off_t)512 << 20);
    expect_train_vocab_error(f->path, "vocab.txt' is 512 MB; at most 256 MB is read");
}

int main(void)
{
    signal(SIGALRM, on_alarm);
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_load_dir_config_fifo),
        T(test_load_dir_config_dev_zero),
        T(test_load_dir_config_directory),
        T(test_load_dir_config_oversize),
        T(test_load_dir_config_huge),
        T(test_load_dir_config_socket),
        T(test_load_dir_vocab_fifo),
        T(test_load_dir_vocab_dev_zero),
        T(test_load_dir_vocab_oversize),
        T(test_load_dir_vocab_directory),
        T(test_load_dir_weights_fifo),
        T(test_load_dir_weights_dev_zero),
        T(test_load_dir_weights_directory),
        T(test_load_dir_symlinks_to_regular_files_load),
        T(test_load_dir_stop_before_first_file),
        T(test_file_read_exactly_at_cap),
        T(test_file_read_one_byte_over_cap),
        T(test_file_read_grows_past_cap),
        T(test_file_read_missing),
        T(test_file_read_dev_null),
        T(test_file_size_text),
        T(test_tokenizer_file_fifo),
        T(test_tokenizer_file_dev_zero),
        T(test_tokenizer_file_oversize),
        T(test_safetensors_file_fifo),
        T(test_sentiment_load_config_fifo),
        T(test_sentiment_load_config_dev_zero),
        T(test_sentiment_load_config_directory),
        T(test_sentiment_load_vocab_oversize),
        T(test_sentiment_load_weights_dev_zero),
        T(test_sentiment_load_fifo_blocks_no_other_connection),
        T(test_sentiment_load_honours_interrupt),
        T(test_train_vocab_dev_zero),
        T(test_train_vocab_fifo),
        T(test_train_vocab_directory),
        T(test_train_vocab_oversize),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}

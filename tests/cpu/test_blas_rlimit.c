/* test_blas_rlimit.c: under an address-space limit (RLIMIT_AS) the first
 * sentiment() returns, with a correct label or an error that says out of
 * memory, and never spins. OpenBLAS maps a 128 MiB buffer per calling
 * thread on its first large product and, when that mmap fails, retries it
 * forever (about 40,000 failed mmap calls a second); cpu/blas.c computes
 * every product itself while an address-space limit is set.
 *
 * Each case runs in a forked child that has not used OpenBLAS yet (the
 * parent never classifies); the parent kills a child that has not ended
 * after 60 s and fails the test.
 */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu/blas.h"
#include "support/ext_test_util.h"
#include "support/rlimit_test_util.h"

static const char *const k_texts[] = {
    "这家酒店很干净，服务也很周到，下次还会再来",
    "外卖送得太慢了，饭菜都凉了，再也不点了",
};

/* The child: classifies under the limit, writes what it got to fd. Exit
 * 0: correct labels; 1: an out-of-memory error; other: a wrong answer. */
static int child(int limit_mb, int threads, const char *precision, int fd)
{
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = (rlim_t)limit_mb << 20;
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 20;
    sqlite3 *db = NULL;
    sqlite3_auto_extension((void (*)(void))sqlite3_sentiment_init);
    int rc = sqlite3_open(":memory:", &db);
    if (rc != SQLITE_OK) {
        /* not even SQLite fits: that is an out-of-memory too */
        dprintf(fd, "sqlite3_open: %s", sqlite3_errstr(rc));
        return rc == SQLITE_NOMEM ? 1 : 21;
    }
    char sql[1024], *err = NULL;
    snprintf(sql, sizeof sql,
             "SELECT sentiment_config('threads', %d), sentiment_config('precision', '%s')",
             threads, precision);
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        dprintf(fd, "config: %s", err ? err : "?");
        return err && strstr(err, "out of memory") ? 1 : 22;
    }
    /* two texts, then 64 rows in two batches (on two threads, the lanes'
     * threads' first products) */
    snprintf(sql, sizeof sql,
             "SELECT sentiment('%s'), sentiment('%s'), "
             "(SELECT sum(label = CASE id %% 2 WHEN 1 THEN 'positive' ELSE 'negative' END) "
             " FROM classify('WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
             "WHERE i < 64) SELECT i, CASE i %% 2 WHEN 1 THEN ''%s'' ELSE ''%s'' END FROM n'))",
             k_texts[0], k_texts[1], k_texts[0], k_texts[1]);
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        const char *msg = sqlite3_errmsg(db);
        dprintf(fd, "%s", msg);
        return strstr(msg, "out of memory") ? 1 : 23;
    }
    const char *a = (const char *)sqlite3_column_text(st, 0);
    const char *b = (const char *)sqlite3_column_text(st, 1);
    int right = sqlite3_column_int(st, 2);
    dprintf(fd, "%s %s, %d of 64 rows right (%lld products by the plain loops)",
            a ? a : "NULL", b ? b : "NULL", right, blas_fallback_products());
    int ok = a && b && !strcmp(a, "positive") && !strcmp(b, "negative") && right == 64;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok ? 0 : 24;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs one case; returns the child's exit code. */
static int run_case(int limit_mb, int threads, const char *precision)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        _exit(child(limit_mb, threads, precision, fds[1]));
    }
    close(fds[1]);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (now_s() - t0 > 60) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            close(fds[0]);
            fail_msg("RLIMIT_AS %d MB, %d thread(s), precision %s: sentiment() did not return in "
                     "60 s",
                     limit_mb, threads, precision);
        }
        usleep(20000);
    }
    char out[512] = "";
    ssize_t got = read(fds[0], out, sizeof out - 1);
    out[got > 0 ? got : 0] = 0;
    close(fds[0]);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
    print_message("RLIMIT_AS %4d MB, %d thread(s), %-4s: %.2f s, %s: %s\n", limit_mb, threads,
                  precision, now_s() - t0,
                  code == 0 ? "correct" : code == 1 ? "out of memory" : "WRONG", out);
    if (code > 1)
        fail_msg("RLIMIT_AS %d MB, %d thread(s), precision %s: child exit %d: %s", limit_mb,
                 threads, precision, code, out);
    return code;
}

static void test_first_sentiment_returns_under_rlimit_as(void **state)
{
    (void)state;
#ifdef NO_RLIMIT_AS
    print_message("SKIPPED: %s (make test runs it)\n", NO_RLIMIT_AS);
    skip();
#endif
    static const int limits[] = {150, 300, 600, 1000};
    static const char *const precisions[] = {"fp32", "auto"};
    int correct = 0;
    for (size_t p = 0; p < sizeof precisions / sizeof *precisions; p++)
        for (size_t i = 0; i < sizeof limits / sizeof *limits; i++)
            for (int threads = 1; threads <= 2; threads++)
                correct += run_case(limits[i], threads, precisions[p]) == 0;
    /* with 1000 MB there is room for everything: those cases are correct */
    assert_true(correct >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_sentiment_returns_under_rlimit_as),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

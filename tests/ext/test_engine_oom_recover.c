/* test_engine_oom_recover.c: an out-of-memory at a large batch_size does
 * not break the connection: the workspace that could not be made (or the
 * lanes that could not) is not kept at the failed size, so the next query
 * at a batch_size that fits works. Runs in a forked child under an
 * address-space limit (RLIMIT_AS) a little above what the process already
 * maps, so that a batch of 4096 x 32 tokens (about 708 MiB of activations for
 * the built-in model), or a second lane's copy of it, cannot be allocated
 * and one of 16 can.
 */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/ext_test_util.h"
#include "support/rlimit_test_util.h"

/* The process's mapped address space in bytes (/proc/self/statm). */
static size_t mapped_bytes(void)
{
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Runs sql; returns its error text (malloc'd) or NULL when it succeeded. */
static char *run(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    char *out = rc == SQLITE_OK ? NULL : strdup(err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return out;
}

/* The child: 0 when the connection recovered, else a step number. */
static int child(int threads, int headroom_mb)
{
    sqlite3 *db = NULL;
    char sql[128];
    sqlite3_auto_extension((void (*)(void))sqlite3_sentiment_init);
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) return 10;
    snprintf(sql, sizeof sql, "SELECT sentiment_config('threads', %d)", threads);
    char *err = run(db, sql);
    if (!err) err = run(db, "SELECT sentiment_config('progress', 'off')");
    if (!err) err = run(db, "SELECT sentiment_config('max_length', 32)");
    if (!err) err = run(db, "CREATE TABLE big(id INTEGER PRIMARY KEY, body TEXT);"
                            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                            "WHERE i < 5000) INSERT INTO big SELECT i, '第' || i || '条：很好' FROM n;");
    /* the model, the backend and a small workspace, before the limit */
    if (!err) err = run(db, "SELECT count(*) FROM classify('SELECT id, body FROM big WHERE id <= 64', 'default')");
    if (err) {
        fprintf(stderr, "setup: %s\n", err);
        return 11;
    }
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = mapped_bytes() + ((size_t)headroom_mb << 20);
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 12;

    if ((err = run(db, "SELECT sentiment_config('batch_size', 4096)"))) return 13;
    err = run(db, "SELECT count(label) FROM classify('big', 'body')");
    fprintf(stderr, "threads %d, %d MB over what is mapped, batch_size 4096: %s\n", threads,
            headroom_mb, err ? err : "(worked)");
    if (err && !strstr(err, "out of memory")) return 14;
    free(err);
    if ((err = run(db, "SELECT sentiment_config('batch_size', 16)"))) return 15;
    err = run(db, "SELECT count(label) FROM classify('big', 'body')");
    if (err) {
        fprintf(stderr, "batch_size 16 after it: %s\n", err);
        return 16;
    }
    err = run(db, "SELECT count(w) FROM (SELECT sentiment_batch(body) OVER "
                  "(ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS w FROM big)");
    if (err) {
        fprintf(stderr, "sentiment_batch at batch_size 16 after it: %s\n", err);
        return 17;
    }
    /* and a batch size that fits grows the workspace again */
    if ((err = run(db, "SELECT sentiment_config('batch_size', 64)"))) return 18;
    if ((err = run(db, "SELECT count(label) FROM classify('big', 'body')"))) {
        fprintf(stderr, "batch_size 64 after it: %s\n", err);
        return 19;
    }
    sqlite3_close(db);
    return 0;
}

static void check_recovers(int threads, int headroom_mb)
{
#ifdef NO_RLIMIT_AS
    print_message("SKIPPED: %s (make test runs it)\n", NO_RLIMIT_AS);
    (void)threads;
    (void)headroom_mb;
    skip();
#endif
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(child(threads, headroom_mb));
    int status = 0, waited = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (++waited > 1200) { /* 120 s */
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("threads %d, %d MB: the child did not finish in 120 s", threads, headroom_mb);
        }
        usleep(100000);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("threads %d, %d MB: child ended with %s %d", threads, headroom_mb,
                 WIFEXITED(status) ? "exit code" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

/* 400 MB: the 4096-row workspace (about 708 MiB at max_length 32) cannot
 * be made. */
static void test_workspace_does_not_fit(void **state)
{
    (void)state;
    check_recovers(1, 400);
    check_recovers(2, 400);
}

/* 1000 MB: it can, but on two threads the second lane's workspace (made on
 * first use at the same size) cannot; the workspace must not be kept. */
static void test_lane_workspace_does_not_fit(void **state)
{
    (void)state;
    check_recovers(1, 1000);
    check_recovers(2, 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workspace_does_not_fit),
        cmocka_unit_test(test_lane_workspace_does_not_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_c_alloc_faults.c: every C-library allocation can fail, ours and the
 * libraries' (cJSON, jansson, utf8proc, SQLite's, libc's own strdup/fopen).
 *
 * This program defines malloc, calloc, realloc, aligned_alloc,
 * posix_memalign, memalign and free itself (tests/support/alloc_interposer.h), forwarding to glibc's __libc_*
 * functions; an executable's definitions take the place of libc's for every
 * shared library it loads. Once armed with N, the Nth allocation fails.
 * Each operation below runs in a child process with allocation N failing.
 * By default N runs over every value up to 800 (FAULTS_EXHAUSTIVE) and then
 * at a stride that gives about 400 more runs, up to the operation's last
 * allocation (the stride is printed); FAULTS_EXHAUSTIVE=100000 tries every N
 * (about 7300 runs, 20 s; the default keeps make test short). The outcome
 * must be the right result or an error that says memory ran out; never a
 * crash, never an exit, never a different answer, never another error in
 * place of out of memory.
 *
 * Every operation that runs the model is swept twice: with one thread
 * (sentiment_config('threads', 1), as the other extension tests do) and
 * with two, where the thread pool (model/core/thread_pool.c) is created in the
 * child during the operation, so its allocations and the ones inside
 * pthread_create fail too; the work then runs on fewer threads, with the
 * same result. classify runs with batch_size 2, so that its batches run on
 * two lanes, and one text is long enough (128 tokens) that the encoder's
 * ops split across the threads.
 *
 * Under AddressSanitizer (make asan) the sanitizer owns malloc and this
 * interposition cannot work: the test then skips and says so.
 * FAULTS_VERBOSE=1 prints every failing N; FAULTS_STRIDE=1 sweeps every N.
 */
#include "support/ext_test_util.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/errors.h"
#include "cpu/blas.h"
#include "format/config.h"
#include "format/safetensors.h"

#if defined(__SANITIZE_ADDRESS__)
#define NO_INTERPOSE "AddressSanitizer replaces malloc; an interposing allocator cannot run"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_INTERPOSE "AddressSanitizer replaces malloc; an interposing allocator cannot run"
#endif
#endif

/* ---- the interposing allocator ------------------------------------------- */

static int g_threads = 1; /* sentiment_config('threads') of every connection */
static int g_counting;    /* set in the child around the operation */
static long g_countdown; /* > 0: the call that brings it to 0 fails */
static long g_calls;
static int g_failed;

#ifndef NO_INTERPOSE
static int should_fail(void)
{
    if (!__atomic_load_n(&g_counting, __ATOMIC_RELAXED)) return 0;
    __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&g_countdown, __ATOMIC_RELAXED) > 0 &&
        __atomic_sub_fetch(&g_countdown, 1, __ATOMIC_RELAXED) == 0) {
        g_failed = 1;
        return 1;
    }
    return 0;
}

#include "support/alloc_interposer.h"
#endif

/* ---- the operations ------------------------------------------------------ */

/* Each writes its result (or "error: ...") into out. */
typedef void (*op_fn)(char *out, size_t cap);

static void sql_result(sqlite3 *db, const char *sql, char *out, size_t cap)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    size_t n = 0;
    out[0] = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(st) && n < cap; i++) {
            const unsigned char *t = sqlite3_column_text(st, i);
            if (!t && sqlite3_column_type(st, i) != SQLITE_NULL) {
                rc = SQLITE_NOMEM;
                break;
            }
            n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? "|" : "", t ? (const char *)t : "NULL");
        }
        if (rc != SQLITE_ROW) break;
        if (n < cap) n += (size_t)snprintf(out + n, cap - n, ";");
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE)
        snprintf(out, cap, "error: %s", rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
    sqlite3_finalize(st);
}

static sqlite3 *open_conn(char *out, size_t cap)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open(":memory:", &db);
    if (rc != SQLITE_OK) {
        snprintf(out, cap, "error: open: %s", db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT sentiment_config('threads', %d)", g_threads);
    sql_result(db, sql, out, cap);
    if (!strncmp(out, "error", 5)) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

/* The built-in model, loaded and run through SQL. */
static void op_builtin(char *out, size_t cap)
{
    sqlite3 *db = open_conn(out, cap);
    if (!db) return;
    sql_result(db, "SELECT sentiment('这家酒店很干净，服务也很周到'), "
                   "printf('%.5f', sentiment_score('送餐太慢了，饭菜都凉了'))",
               out, cap);
    sqlite3_close(db);
}

/* The built-in model on one text longer than its 128 tokens. */
static void op_long_text(char *out, size_t cap)
{
    sqlite3 *db = open_conn(out, cap);
    if (!db) return;
    sql_result(db, "SELECT printf('%.5f', sentiment_score(replace(printf('%.20c', '_'), '_', "
                   "'房间干净，服务周到，早餐丰富，就是离地铁站有点远。')))",
               out, cap);
    sqlite3_close(db);
}

/* A model directory from disk (config.json, vocab.txt, model.safetensors). */
static void op_fixture_dir(char *out, size_t cap)
{
    sqlite3 *db = open_conn(out, cap);
    if (!db) return;
    sql_result(db, "SELECT sentiment_load('fx', '" TINY_MODEL "')", out, cap);
    if (strncmp(out, "error", 5))
        sql_result(db, "SELECT sentiment_probs('房间很干净', 'fx'), "
                       "sentiment_tokens('酒店 Hello', 'fx')",
                   out, cap);
    sqlite3_close(db);
}

/* An XLM-RoBERTa directory with a tokenizer.json, stored in the database
 * and read back from it. */
static void op_xlmr_dir(char *out, size_t cap)
{
    sqlite3 *db = open_conn(out, cap);
    if (!db) return;
    sql_result(db, "SELECT sentiment_load('x', 'tests/fixtures/models/xlmr_tiny')", out, cap);
    if (strncmp(out, "error", 5)) sql_result(db, "SELECT sentiment_save('s', 'x')", out, cap);
    if (strncmp(out, "error", 5))
        sql_result(db, "SELECT sentiment_probs('The room was clean', 's'), "
                       "sentiment_tokens('très satisfait', 'x')",
                   out, cap);
    sqlite3_close(db);
}

/* classify over a table, with the built-in model. */
static void op_classify(char *out, size_t cap)
{
    sqlite3 *db = open_conn(out, cap);
    if (!db) return;
    /* sql_result runs one statement */
    sql_result(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, body)", out, cap);
    if (strncmp(out, "error", 5))
        sql_result(db, "INSERT INTO t(body) VALUES ('很好'), (NULL), ('太差了，再也不来'), (''), "
                       "('还行吧')",
                   out, cap);
    if (strncmp(out, "error", 5))
        sql_result(db, "SELECT sentiment_config('batch_size', 2)", out, cap);
    if (strncmp(out, "error", 5))
        sql_result(db, "SELECT id, label, printf('%.5f', score) FROM classify('t', 'body')", out,
                   cap);
    sqlite3_close(db);
}

/* A safetensors file and a config.json parsed directly. */
static void op_files(char *out, size_t cap)
{
    char err[SM_ERR_MAX];
    safetensors st;
    int rc = safetensors_open_file(TINY_MODEL "/model.safetensors", &st, err);
    if (rc) {
        snprintf(out, cap, "error: %s", err);
        return;
    }
    size_t n = (size_t)snprintf(out, cap, "%d tensors", st.n_tensors);
    for (int i = 0; i < st.n_tensors && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, ",%s:%lld", st.tensors[i].name,
                              (long long)st.tensors[i].numel);
    safetensors_close(&st);
    FILE *f = fopen(TINY_MODEL "/config.json", "rb");
    if (!f) {
        snprintf(out, cap, "error: out of memory opening config.json");
        return;
    }
    char text[8192];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    bert_config cfg;
    if ((rc = bert_config_parse(text, len, &cfg, err))) {
        snprintf(out, cap, "error: %s", err);
        return;
    }
    if (n < cap)
        snprintf(out + n, cap - n, ";%s %d %d %s", cfg.model_type, cfg.hidden_size,
                 cfg.num_labels, cfg.id2label[cfg.num_labels - 1]);
    bert_config_free(&cfg);
}

static const struct {
    const char *name;
    op_fn fn;
    int threaded; /* runs the model: swept with two threads too */
} k_ops[] = {
    {"safetensors file + config.json", op_files, 0},
    {"model directory via sentiment_load", op_fixture_dir, 1},
    {"tokenizer.json model: load, save, read back", op_xlmr_dir, 0},
    {"built-in model via sentiment()", op_builtin, 1},
    {"built-in model, a 128-token text", op_long_text, 1},
    {"classify() over a table", op_classify, 1},
};

/* ---- the sweep ----------------------------------------------------------- */

#define OUT_CAP 4096

enum { O_UNTOUCHED = 10, O_RIGHT, O_NOMEM, O_OTHER_ERROR, O_WRONG };

/* Runs op k in a child with allocation n failing (0: none); the exit status
 * (or -signal) and, through a pipe, the child's result and allocation count. */
static int run_child(int k, long n, char *out, long *calls)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a crash ends the child; cmocka's handlers would go on there */
        static const int sigs[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
        for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], SIG_DFL);
        close(fd[0]);
        static char res[OUT_CAP];
        g_calls = 0;
        g_failed = 0;
        g_countdown = n;
        __atomic_store_n(&g_counting, 1, __ATOMIC_SEQ_CST);
        k_ops[k].fn(res, sizeof res);
        __atomic_store_n(&g_counting, 0, __ATOMIC_SEQ_CST);
        long c = g_calls;
        if (write(fd[1], &c, sizeof c) != sizeof c || write(fd[1], res, sizeof res) != sizeof res)
            _exit(1);
        _exit(!n || !g_failed ? O_UNTOUCHED : O_RIGHT);
    }
    close(fd[1]);
    *calls = 0;
    memset(out, 0, OUT_CAP);
    if (read(fd[0], calls, sizeof *calls) == sizeof *calls) {
        size_t got = 0;
        ssize_t r;
        while (got < OUT_CAP && (r = read(fd[0], out + got, OUT_CAP - got)) > 0) got += (size_t)r;
    }
    out[OUT_CAP - 1] = 0;
    close(fd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st)) return -WTERMSIG(st);
    return WEXITSTATUS(st);
}

static int says_out_of_memory(const char *s)
{
    return strstr(s, "out of memory") || strstr(s, "Out of memory") ||
           strstr(s, "cannot allocate") || strstr(s, "Cannot allocate memory");
}

static void sweep(int k, long *bad)
{
    char want[OUT_CAP], got[OUT_CAP];
    long calls = 0;
    int verbose = getenv("FAULTS_VERBOSE") != NULL;
    long exhaustive = getenv("FAULTS_EXHAUSTIVE") ? atol(getenv("FAULTS_EXHAUSTIVE")) : 800;
    long stride = getenv("FAULTS_STRIDE") ? atol(getenv("FAULTS_STRIDE")) : 0;

    int st = run_child(k, 0, want, &calls);
    if (st != O_UNTOUCHED || !want[0] || !strncmp(want, "error", 5))
        fail_msg("%s: fails with no failure injected (%d): %s", k_ops[k].name, st, want);
    if (stride <= 0) /* about 400 more runs past the exhaustive part */
        stride = calls > exhaustive ? (calls - exhaustive) / 400 + 1 : 1;
    long c[5] = {0}, runs = 0, crash = 0, died = 0;
    for (long n = 1;; n += n < exhaustive ? 1 : stride) {
        long made;
        st = run_child(k, n, got, &made);
        if (st == O_UNTOUCHED) break;
        runs++;
        int o;
        if (st < 0) {
            crash++;
            print_message("  %s: allocation %ld failing: killed by signal %d\n", k_ops[k].name,
                          n, -st);
            (*bad)++;
            continue;
        }
        if (st != O_RIGHT) {
            died++;
            print_message("  %s: allocation %ld failing: exited with status %d\n",
                          k_ops[k].name, n, st);
            (*bad)++;
            continue;
        }
        if (!strncmp(got, "error", 5))
            o = says_out_of_memory(got) ? 2 : 3;
        else
            o = strcmp(got, want) ? 4 : 1;
        c[o]++;
        if (o >= 3) {
            (*bad)++;
            print_message("  %s: allocation %ld failing: %s: %.300s\n", k_ops[k].name, n,
                          o == 3 ? "an error other than out of memory" : "a wrong result", got);
        } else if (verbose) {
            print_message("  %s: allocation %ld failing: %.200s\n", k_ops[k].name, n, got);
        }
    }
    print_message("%-36s %d thread%s %7ld allocations, %5ld runs (every N to %ld, then every "
                  "%ld): %ld right, %ld out-of-memory errors, %ld other errors, %ld wrong, "
                  "%ld crashes, %ld exits\n",
                  k_ops[k].name, g_threads, g_threads > 1 ? "s" : " ", calls, runs,
                  exhaustive < calls ? exhaustive : calls, stride, c[1], c[2], c[3], c[4], crash,
                  died);
}

static void test_every_c_allocation_can_fail(void **state)
{
    (void)state;
#ifdef NO_INTERPOSE
    print_message("SKIPPED: %s (make test runs it)\n", NO_INTERPOSE);
    skip();
#else
    long bad = 0;
    for (g_threads = 1; g_threads <= 2; g_threads++)
        for (size_t k = 0; k < sizeof k_ops / sizeof *k_ops; k++)
            if (g_threads == 1 || k_ops[k].threaded) sweep((int)k, &bad);
    g_threads = 1;
    assert_int_equal(bad, 0);
#endif
}

int main(void)
{
    /* FAULTS_ONE=k:n runs operation k with allocation n failing, in this
     * process, and prints the result (for a debugger); FAULTS_THREADS=2
     * with it runs that operation on two threads. */
    const char *one = getenv("FAULTS_ONE");
    if (getenv("FAULTS_THREADS")) g_threads = atoi(getenv("FAULTS_THREADS"));
    /* OpenBLAS on one thread: what it does at start-up is done here, once,
     * before any allocation is made to fail. */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    char err[SM_ERR_MAX];
    (void)blas_load(err);
    sqlite3_initialize();
    sqlite3_auto_extension((void (*)(void))sqlite3_sentiment_init);
#ifndef NO_INTERPOSE
    if (one) {
        static char res[OUT_CAP];
        int k = atoi(one);
        g_countdown = atol(strchr(one, ':') ? strchr(one, ':') + 1 : "0");
        g_counting = 1;
        k_ops[k].fn(res, sizeof res);
        g_counting = 0;
        printf("%s, allocation %s failing%s: %s\n", k_ops[k].name, one,
               g_failed ? "" : " (not reached)", res);
        return 0;
    }
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_c_allocation_can_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

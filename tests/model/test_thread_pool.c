/* test_thread_pool.c: the worker threads of model/core/thread_pool.h.
 *
 * - tp_split: contiguous pieces covering [0, n), the first n % parts one
 *   longer (OpenMP's schedule(static)), checked against a count.
 * - tp_run, tp_for_static, tp_for_dynamic: every piece or item exactly
 *   once, with the ranges tp_split gives; no two items of one lane at the
 *   same time; nothing for n <= 0; a thousand pieces on at most 256 threads.
 * - Two pieces really run at the same time (piece 0 waits for piece 1 to
 *   start, with a time-out), so the threads are there.
 * - Nested calls run inline on the thread that makes them, and a call
 *   inside a one-thread call may still use threads.
 * - Eight threads calling at once, thousands of calls each, and 100,000
 *   calls in a row: right sums, no deadlock (a watchdog alarm ends a hang).
 * - Failures, each in a forked child (whose pool the fork handler empties):
 *   pthread_create failing from the first thread, or after one; the pool's
 *   own allocations (aligned_alloc, interposed here) failing; each gives
 *   the same bits as the threaded run (a float sum whose order follows the
 *   split), with tp_run saying how many threads it got; the next call,
 *   with the failure gone, gets them all.
 * - A forked child of a process with workers gets workers of its own.
 * - Workers block SIGINT and SIGTERM (the host's threads take them), not
 *   SIGSEGV (a crash in a worker reaches the host's handler).
 *
 * Under ThreadSanitizer the interposed pthread_create would hide thread
 * creation from the sanitizer: the failure tests then skip, saying so; run
 * it with TSAN_OPTIONS=die_after_fork=0 (the fork tests start threads in
 * the child), e.g. make BUILD=build-tsan OPT=-O1 SAN=-fsanitize=thread
 * build-tsan/tests/test_thread_pool. Helgrind does not model C11 atomics
 * and reports every claim as a race.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/thread_pool.h"

#if defined(__SANITIZE_THREAD__)
#define NO_INTERPOSE "ThreadSanitizer must see every pthread_create"
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NO_INTERPOSE "ThreadSanitizer must see every pthread_create"
#endif
#endif

/* ---- fault injection -------------------------------------------------------- */

/* Calls still allowed to succeed: < 0 any number, 0 none. */
static atomic_int g_create_budget = -1;
static atomic_int g_alloc_budget = -1;
static atomic_int g_creates; /* pthread_create calls that went through */

static int take(atomic_int *budget)
{
    int b = atomic_load(budget);
    while (b > 0 && !atomic_compare_exchange_weak(budget, &b, b - 1)) {
    }
    return b != 0;
}

#ifndef NO_INTERPOSE
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

/* An executable's definitions take the place of libc's: the pool's calls
 * come here and go on to the real ones (found with RTLD_NEXT). */
__attribute__((visibility("default"))) int pthread_create(pthread_t *t, const pthread_attr_t *a,
                                                          void *(*fn)(void *), void *arg)
{
    static create_fn real;
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
    if (!real || !take(&g_create_budget)) return EAGAIN;
    atomic_fetch_add(&g_creates, 1);
    return real(t, a, fn, arg);
}

typedef void *(*aligned_fn)(size_t, size_t);

__attribute__((visibility("default"))) void *aligned_alloc(size_t align, size_t n)
{
    static aligned_fn real;
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "aligned_alloc");
    if (!real || !take(&g_alloc_budget)) {
        errno = ENOMEM;
        return NULL;
    }
    return real(align, n);
}
#endif

/* ---- work ------------------------------------------------------------------- */

enum { MAX_ITEMS = 4096 };

/* Counts every piece (or item) a call runs. */
typedef struct counting {
    atomic_int hits[MAX_ITEMS];
    atomic_int wrong_n; /* pieces told a different nthreads */
    int expect_n;
    int lo[MAX_ITEMS], hi[MAX_ITEMS]; /* tp_for_static: the range of the piece starting at lo */
    atomic_int busy[MAX_ITEMS];       /* tp_for_dynamic: per lane, items running now */
    atomic_int overlap;               /* two items of one lane at once */
    atomic_int bad_lane;
} counting;

static void count_piece(void *ctx, int i, int n)
{
    counting *c = ctx;
    if (n != c->expect_n) atomic_fetch_add(&c->wrong_n, 1);
    atomic_fetch_add(&c->hits[i], 1);
}

static void count_range(void *ctx, int lo, int hi)
{
    counting *c = ctx;
    c->lo[lo] = lo;
    c->hi[lo] = hi;
    for (int i = lo; i < hi; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void count_item(void *ctx, int item, int lane)
{
    counting *c = ctx;
    if (lane < 0 || lane >= c->expect_n) {
        atomic_fetch_add(&c->bad_lane, 1);
        return;
    }
    if (atomic_fetch_add(&c->busy[lane], 1) != 0) atomic_fetch_add(&c->overlap, 1);
    atomic_fetch_add(&c->hits[item], 1);
    for (volatile int k = 0; k < 200; k++) {
    }
    atomic_fetch_sub(&c->busy[lane], 1);
}

static counting *counting_new(int expect_n)
{
    counting *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->expect_n = expect_n;
    for (int i = 0; i < MAX_ITEMS; i++) c->lo[i] = c->hi[i] = -1;
    return c;
}

static void assert_each_once(const counting *c, int n)
{
    for (int i = 0; i < n; i++)
        if (atomic_load(&c->hits[i]) != 1) fail_msg("item %d of %d ran %d times", i, n, c->hits[i]);
    for (int i = n; i < MAX_ITEMS; i++) assert_int_equal(atomic_load(&c->hits[i]), 0);
}

/* A float sum whose order follows the split: piece i sums its tp_split range
 * in order; the pieces' sums are then added in piece order. */
enum { SUM_N = 100003 };
static float g_values[SUM_N];

typedef struct split_sum {
    int n;
    float part[64];
} split_sum;

static void sum_piece(void *ctx, int i, int parts)
{
    split_sum *s = ctx;
    int lo, hi;
    tp_split(s->n, parts, i, &lo, &hi);
    float acc = 0.0f;
    for (int k = lo; k < hi; k++) acc += g_values[k] * (1.0f + 1e-3f * (float)(k % 7));
    s->part[i] = acc;
}

static float split_total(int parts, int *threads)
{
    split_sum s = {SUM_N, {0}};
    int t = tp_run(parts, sum_piece, &s);
    if (threads) *threads = t;
    float total = 0.0f;
    for (int i = 0; i < parts; i++) total += s.part[i];
    return total;
}

/* The same sum computed here, without the pool. */
static float split_total_reference(int parts)
{
    split_sum s = {SUM_N, {0}};
    for (int i = 0; i < parts; i++) sum_piece(&s, i, parts);
    float total = 0.0f;
    for (int i = 0; i < parts; i++) total += s.part[i];
    return total;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Piece 0 waits (up to 10 s) for piece 1 to start: 1 when it did. */
typedef struct meeting {
    atomic_int second_started;
    atomic_int met;
} meeting;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void meet_piece(void *ctx, int i, int n)
{
    meeting *m = ctx;
    (void)n;
    if (i == 1) {
        atomic_store(&m->second_started, 1);
        return;
    }
    if (i != 0) return;
    double end = now_s() + 10.0;
    while (!atomic_load(&m->second_started) && now_s() < end) sched_yield();
    atomic_store(&m->met, atomic_load(&m->second_started));
}

static int pieces_meet(void)
{
    meeting m = {0, 0};
    tp_run(2, meet_piece, &m);
    return atomic_load(&m.met);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_split_is_static_schedule(void **state)
{
    (void)state;
    for (int n = 0; n <= 100; n++)
        for (int parts = 1; parts <= 9; parts++) {
            int expect_lo = 0;
            for (int i = 0; i < parts; i++) {
                int lo, hi;
                tp_split(n, parts, i, &lo, &hi);
                int len = n / parts + (i < n % parts ? 1 : 0);
                assert_int_equal(lo, expect_lo);
                assert_int_equal(hi - lo, len);
                expect_lo = hi;
            }
            assert_int_equal(expect_lo, n);
        }
}

static void test_run_each_piece_once(void **state)
{
    (void)state;
    for (int n = 1; n <= 17; n++) {
        counting *c = counting_new(n);
        int t = tp_run(n, count_piece, c);
        assert_true(t >= 1 && t <= n);
        assert_each_once(c, n);
        assert_int_equal(atomic_load(&c->wrong_n), 0);
        free(c);
    }
    counting *c = counting_new(0);
    assert_int_equal(tp_run(0, count_piece, c), 0);
    assert_int_equal(tp_run(-3, count_piece, c), 0);
    assert_each_once(c, 0);
    /* More pieces than a team has workers. */
    free(c);
    c = counting_new(1000);
    int t = tp_run(1000, count_piece, c);
    assert_true(t >= 2 && t <= 256);
    assert_each_once(c, 1000);
    free(c);
}

static void test_for_static_ranges(void **state)
{
    (void)state;
    const int ns[] = {0, 1, 2, 3, 5, 7, 64, 100, 1001, MAX_ITEMS};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (int nt = 1; nt <= 8; nt++) {
            int n = ns[k];
            counting *c = counting_new(0);
            tp_for_static(nt, n, count_range, c);
            assert_each_once(c, n);
            /* the ranges are tp_split's for min(nt, n) pieces */
            int parts = nt < n ? nt : n;
            for (int i = 0; i < parts; i++) {
                int lo, hi;
                tp_split(n, parts, i, &lo, &hi);
                assert_int_equal(c->lo[lo], lo);
                assert_int_equal(c->hi[lo], hi);
            }
            free(c);
        }
}

static void test_for_dynamic_items(void **state)
{
    (void)state;
    const int ns[] = {0, 1, 2, 3, 9, 100, MAX_ITEMS};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (int nt = 1; nt <= 6; nt++) {
            int n = ns[k];
            counting *c = counting_new(nt < n ? nt : n);
            tp_for_dynamic(nt, n, count_item, c);
            assert_each_once(c, n);
            assert_int_equal(atomic_load(&c->overlap), 0);
            assert_int_equal(atomic_load(&c->bad_lane), 0);
            free(c);
        }
}

static void test_threads_are_real(void **state)
{
    (void)state;
#ifndef NO_INTERPOSE
    assert_int_equal(atomic_load(&g_create_budget), -1);
#endif
    assert_true(pieces_meet());
    meeting m = {0, 0};
    assert_int_equal(tp_run(2, meet_piece, &m), 2);
}

/* Nested calls: piece i of the outer call runs an inner call. */
typedef struct nested {
    atomic_int inner_hits[4][8];
    atomic_int inner_threads_ret[4]; /* what the inner tp_run returned */
    atomic_int other_thread;         /* an inner piece ran on another thread */
    pthread_t outer_thread[4];
    int outer_n, inner_n;
} nested;

typedef struct inner_ctx {
    nested *nest;
    int outer;
} inner_ctx;

static void inner_piece(void *ctx, int i, int n)
{
    inner_ctx *ic = ctx;
    (void)n;
    if (!pthread_equal(pthread_self(), ic->nest->outer_thread[ic->outer]))
        atomic_store(&ic->nest->other_thread, 1);
    atomic_fetch_add(&ic->nest->inner_hits[ic->outer][i], 1);
}

static void outer_piece(void *ctx, int i, int n)
{
    nested *nest = ctx;
    (void)n;
    nest->outer_thread[i] = pthread_self();
    inner_ctx ic = {nest, i};
    atomic_store(&nest->inner_threads_ret[i], tp_run(nest->inner_n, inner_piece, &ic));
}

static void test_nested_calls_run_inline(void **state)
{
    (void)state;
    nested *nest = calloc(1, sizeof *nest);
    assert_non_null(nest);
    nest->outer_n = 4;
    nest->inner_n = 8;
    tp_run(nest->outer_n, outer_piece, nest);
    for (int o = 0; o < 4; o++) {
        assert_int_equal(atomic_load(&nest->inner_threads_ret[o]), 1);
        for (int i = 0; i < 8; i++) assert_int_equal(atomic_load(&nest->inner_hits[o][i]), 1);
    }
    assert_int_equal(atomic_load(&nest->other_thread), 0);
    /* A call of one thread holds no team: the call inside it has threads. */
    memset(nest, 0, sizeof *nest);
    nest->outer_n = 1;
    nest->inner_n = 2;
    tp_run(1, outer_piece, nest);
    assert_int_equal(atomic_load(&nest->inner_threads_ret[0]), 2);
    for (int i = 0; i < 2; i++) assert_int_equal(atomic_load(&nest->inner_hits[0][i]), 1);
    free(nest);
}

/* Each caller thread: many calls of 2-4 pieces, each summing a range. */
typedef struct caller {
    int id, calls, bad;
} caller;

typedef struct range_sum {
    const int *v;
    int n;
    long long part[4];
} range_sum;

static void range_sum_piece(void *ctx, int i, int parts)
{
    range_sum *r = ctx;
    int lo, hi;
    tp_split(r->n, parts, i, &lo, &hi);
    long long s = 0;
    for (int k = lo; k < hi; k++) s += r->v[k];
    r->part[i] = s;
}

static void *caller_main(void *arg)
{
    caller *c = arg;
    int v[257];
    for (int call = 0; call < c->calls; call++) {
        int n = 1 + (call * 37 + c->id * 11) % 257, parts = 2 + (call + c->id) % 3;
        long long want = 0;
        for (int k = 0; k < n; k++) want += v[k] = c->id * 1000 + call + k;
        range_sum r = {v, n, {0}};
        tp_run(parts, range_sum_piece, &r);
        long long got = 0;
        for (int i = 0; i < parts; i++) got += r.part[i];
        if (got != want) c->bad++;
    }
    return NULL;
}

static void test_concurrent_callers(void **state)
{
    (void)state;
    enum { CALLERS = 8 };
    pthread_t th[CALLERS];
    caller c[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        c[i] = (caller){i, 3000, 0};
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < CALLERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(c[i].bad, 0);
    }
}

static void test_many_calls(void **state)
{
    (void)state;
    enum { CALLS = 100000 };
    caller c = {99, CALLS, 0};
    double t0 = now_s();
    caller_main(&c);
    double t = now_s() - t0;
    assert_int_equal(c.bad, 0);
    print_message("  %d calls of 2-4 pieces: %.2f us a call\n", CALLS, t / CALLS * 1e6);
}

static void test_bits_do_not_depend_on_threads(void **state)
{
    (void)state;
    for (int parts = 1; parts <= 8; parts++) {
        int threads;
        float got = split_total(parts, &threads), want = split_total_reference(parts);
        assert_int_equal(bits(got), bits(want));
        if (parts > 1) assert_true(threads > 1);
    }
}

/* ---- failures, in a forked child ------------------------------------------------ */

/* In the child: the sum for `parts` pieces and the threads tp_run got,
 * with the budgets set first. Returns through a pipe. */
typedef struct child_result {
    uint32_t sum_bits[3];
    int threads[3];
    int met;
} child_result;

typedef void (*child_fn)(child_result *r);

static child_result run_in_child(child_fn fn)
{
    int fd[2];
    child_result r;
    memset(&r, 0xff, sizeof r);
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        child_result c;
        memset(&c, 0, sizeof c);
        fn(&c);
        _exit(write(fd[1], &c, sizeof c) == sizeof c ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], &r, sizeof r);
    close(fd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || got != (ssize_t)sizeof r)
        fail_msg("the child ended badly (status %d)", st);
    return r;
}

static void sum_three(child_result *r, int parts)
{
    for (int k = 0; k < 3; k++) r->sum_bits[k] = bits(split_total(parts, &r->threads[k]));
}

static void child_no_threads(child_result *r)
{
    atomic_store(&g_create_budget, 0);
    sum_three(r, 4);
    atomic_store(&g_create_budget, -1);
    r->met = pieces_meet();
}

static void child_one_thread(child_result *r)
{
    atomic_store(&g_create_budget, 1);
    sum_three(r, 4);
    atomic_store(&g_create_budget, -1);
    r->met = pieces_meet();
}

static void child_grow_fails(child_result *r)
{
    r->sum_bits[0] = bits(split_total(2, &r->threads[0])); /* a team of one worker */
    atomic_store(&g_create_budget, 0);
    r->sum_bits[1] = bits(split_total(4, &r->threads[1]));
    atomic_store(&g_create_budget, -1);
    r->sum_bits[2] = bits(split_total(4, &r->threads[2]));
}

static void child_team_alloc_fails(child_result *r)
{
    atomic_store(&g_alloc_budget, 0);
    sum_three(r, 4);
    atomic_store(&g_alloc_budget, -1);
    r->met = pieces_meet();
}

static void child_worker_alloc_fails(child_result *r)
{
    atomic_store(&g_alloc_budget, 1); /* the team, then no worker */
    sum_three(r, 4);
    atomic_store(&g_alloc_budget, -1);
    r->met = pieces_meet();
}

static void child_after_workers(child_result *r)
{
    r->met = pieces_meet();
    sum_three(r, 4);
}

static void test_fork_child_has_workers(void **state)
{
    (void)state;
    assert_true(pieces_meet()); /* the parent has workers */
    child_result r = run_in_child(child_after_workers);
    assert_int_equal(r.met, 1);
    uint32_t want = bits(split_total_reference(4));
    for (int k = 0; k < 3; k++) {
        assert_int_equal(r.sum_bits[k], want);
        assert_true(r.threads[k] > 1);
    }
}

static void test_failures_fall_back(void **state)
{
    (void)state;
#ifdef NO_INTERPOSE
    print_message("SKIPPED: %s; pthread_create and aligned_alloc are not interposed\n",
                  NO_INTERPOSE);
    skip();
#else
    int threads;
    uint32_t want = bits(split_total(4, &threads));
    assert_int_equal(want, bits(split_total_reference(4)));
    assert_true(threads > 1);

    child_result r = run_in_child(child_no_threads);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(r.sum_bits[k], want);
        assert_int_equal(r.threads[k], 1);
    }
    assert_int_equal(r.met, 1); /* later calls get the threads */

    r = run_in_child(child_one_thread);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(r.sum_bits[k], want);
        assert_int_equal(r.threads[k], 2);
    }
    assert_int_equal(r.met, 1);

    r = run_in_child(child_grow_fails);
    assert_int_equal(r.threads[0], 2);
    assert_int_equal(r.threads[1], 2); /* the team could not grow past one worker */
    assert_int_equal(r.threads[2], 4); /* it grows on the next call */
    assert_int_equal(r.sum_bits[1], want);
    assert_int_equal(r.sum_bits[2], want);

    r = run_in_child(child_team_alloc_fails);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(r.sum_bits[k], want);
        assert_int_equal(r.threads[k], 1);
    }
    assert_int_equal(r.met, 1);

    r = run_in_child(child_worker_alloc_fails);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(r.sum_bits[k], want);
        assert_int_equal(r.threads[k], 1);
    }
    assert_int_equal(r.met, 1);
#endif
}

/* The piece that runs on a worker records that thread's signal mask. */
typedef struct mask_probe {
    pthread_t caller;
    atomic_int on_worker, int_blocked, term_blocked, segv_blocked;
} mask_probe;

static void mask_piece(void *ctx, int i, int n)
{
    mask_probe *m = ctx;
    (void)i;
    (void)n;
    if (pthread_equal(pthread_self(), m->caller)) {
        /* busy until the other piece has run on a worker (10 s at most) */
        double end = now_s() + 10.0;
        while (!atomic_load(&m->on_worker) && now_s() < end) sched_yield();
        return;
    }
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    atomic_store(&m->on_worker, 1);
    atomic_store(&m->int_blocked, sigismember(&cur, SIGINT));
    atomic_store(&m->term_blocked, sigismember(&cur, SIGTERM));
    atomic_store(&m->segv_blocked, sigismember(&cur, SIGSEGV));
}

static void test_workers_leave_signals_to_the_host(void **state)
{
    (void)state;
    mask_probe m = {pthread_self(), 0, 0, 0, 0};
    tp_run(2, mask_piece, &m);
    assert_int_equal(atomic_load(&m.on_worker), 1);
    assert_int_equal(atomic_load(&m.int_blocked), 1);
    assert_int_equal(atomic_load(&m.term_blocked), 1);
    assert_int_equal(atomic_load(&m.segv_blocked), 0);
}

static void test_default_threads(void **state)
{
    (void)state;
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    assert_int_equal(tp_default_threads(), CPU_COUNT(&set));
    assert_true(tp_default_threads() >= 1);
}

int main(void)
{
    alarm(600); /* a deadlock ends the run */
    for (int i = 0; i < SUM_N; i++) g_values[i] = 1.0f / (float)(1 + i % 1000) + (float)(i % 3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_is_static_schedule),
        cmocka_unit_test(test_run_each_piece_once),
        cmocka_unit_test(test_for_static_ranges),
        cmocka_unit_test(test_for_dynamic_items),
        cmocka_unit_test(test_threads_are_real),
        cmocka_unit_test(test_nested_calls_run_inline),
        cmocka_unit_test(test_concurrent_callers),
        cmocka_unit_test(test_many_calls),
        cmocka_unit_test(test_bits_do_not_depend_on_threads),
        cmocka_unit_test(test_fork_child_has_workers),
        cmocka_unit_test(test_failures_fall_back),
        cmocka_unit_test(test_workers_leave_signals_to_the_host),
        cmocka_unit_test(test_default_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_registry_threads.c: the process-wide model cache under threads. A
 * slow load of one key does not hold up a load of another key; two threads
 * asking for the same key load it once; a failed load lets the next caller
 * try again. Drives rt_registry_acquire directly with test loaders.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/errors.h"
#include "runtime/registry.h"

#define TINY_MODEL "tests/fixtures/models/bert_tiny"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_release_slow, g_slow_started, g_calls_same, g_fail_next;

static int load_tiny(bert_model **out, char *err)
{
    return bert_model_load_dir(TINY_MODEL, out, err);
}

/* Blocks until the test sets g_release_slow. */
static int load_slow(void *ctx, bert_model **out, char *err)
{
    (void)ctx;
    pthread_mutex_lock(&g_mu);
    g_slow_started = 1;
    pthread_cond_broadcast(&g_cv);
    while (!g_release_slow) pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    return load_tiny(out, err);
}

static int load_fast(void *ctx, bert_model **out, char *err)
{
    (void)ctx;
    return load_tiny(out, err);
}

/* Counts its calls and takes a while, so a second caller arrives during it. */
static int load_counted(void *ctx, bert_model **out, char *err)
{
    (void)ctx;
    pthread_mutex_lock(&g_mu);
    g_calls_same++;
    int fail = g_fail_next;
    g_fail_next = 0;
    pthread_mutex_unlock(&g_mu);
    usleep(200 * 1000);
    if (fail) return sm_error(err, SM_ERR_IO, "test failure");
    return load_tiny(out, err);
}

typedef struct job {
    const char *key;
    rt_loader load;
    rt_model *m;
    int rc, done;
} job;

static void *acquire_job(void *arg)
{
    job *j = arg;
    char err[SM_ERR_MAX];
    j->rc = rt_registry_acquire(j->key, NULL, 0, j->load, NULL, &j->m, err);
    pthread_mutex_lock(&g_mu);
    j->done = 1;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

static void test_slow_load_blocks_only_its_key(void **state)
{
    (void)state;
    job slow = {"test:slow", load_slow, NULL, -1, 0}, fast = {"test:fast", load_fast, NULL, -1, 0};
    pthread_t ts, tf;
    assert_int_equal(pthread_create(&ts, NULL, acquire_job, &slow), 0);
    pthread_mutex_lock(&g_mu);
    while (!g_slow_started) pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    /* while the slow load runs, another key loads and returns */
    assert_int_equal(pthread_create(&tf, NULL, acquire_job, &fast), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&g_mu);
    while (!fast.done)
        if (pthread_cond_timedwait(&g_cv, &g_mu, &until)) break;
    int fast_done = fast.done, slow_done = slow.done;
    g_release_slow = 1;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_join(ts, NULL);
    pthread_join(tf, NULL);
    assert_true(fast_done);
    assert_false(slow_done);
    assert_int_equal(fast.rc, SM_OK);
    assert_int_equal(slow.rc, SM_OK);
    assert_true(rt_registry_is_loaded("test:slow"));
    rt_registry_release(slow.m);
    rt_registry_release(fast.m);
}

static void test_same_key_loads_once(void **state)
{
    (void)state;
    job a = {"test:same", load_counted, NULL, -1, 0}, b = a, c = a;
    pthread_t ta, tb, tc;
    rt_registry_stats before, after;
    rt_registry_stats_get(&before);
    g_calls_same = 0;
    assert_int_equal(pthread_create(&ta, NULL, acquire_job, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, acquire_job, &b), 0);
    assert_int_equal(pthread_create(&tc, NULL, acquire_job, &c), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_join(tc, NULL);
    assert_int_equal(a.rc, SM_OK);
    assert_int_equal(b.rc, SM_OK);
    assert_int_equal(c.rc, SM_OK);
    assert_int_equal(g_calls_same, 1);
    assert_ptr_equal(a.m, b.m);
    assert_ptr_equal(a.m, c.m);
    rt_registry_stats_get(&after);
    assert_int_equal(after.loads, before.loads + 1);
    rt_registry_release(a.m);
    rt_registry_release(b.m);
    rt_registry_release(c.m);
}

static void test_failed_load_is_retried(void **state)
{
    (void)state;
    job a = {"test:flaky", load_counted, NULL, -1, 0}, b = a;
    pthread_t ta, tb;
    g_calls_same = 0;
    g_fail_next = 1;
    assert_int_equal(pthread_create(&ta, NULL, acquire_job, &a), 0);
    usleep(50 * 1000);
    assert_int_equal(pthread_create(&tb, NULL, acquire_job, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    /* the first load failed; the waiter loaded it itself */
    assert_int_equal(g_calls_same, 2);
    assert_int_equal(a.rc, SM_ERR_IO);
    assert_null(a.m);
    assert_int_equal(b.rc, SM_OK);
    assert_non_null(b.m);
    rt_registry_release(b.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_load_blocks_only_its_key),
        cmocka_unit_test(test_same_key_loads_once),
        cmocka_unit_test(test_failed_load_is_retried),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

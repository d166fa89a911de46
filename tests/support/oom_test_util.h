/* oom_test_util.h: a failing-allocation harness for the extension's OOM
 * tests (tests/test_ext_*oom.c).
 *
 * oom_install() swaps SQLite's allocator for one that fails the
 * g_countdown-th allocation from when g_countdown is set (> 0), marking
 * g_failed; g_countdown <= 0 never fails. oom_restore() puts SQLite's own
 * allocator back.
 */
#ifndef OOM_TEST_UTIL_H
#define OOM_TEST_UTIL_H

#include "support/ext_test_util.h"

static sqlite3_mem_methods g_orig;
static int g_countdown; /* > 0: fail when it reaches 0; <= 0: never */
static int g_failed;

static inline void *fail_malloc(int n)
{
    if (g_countdown > 0 && --g_countdown == 0) {
        g_failed = 1;
        return NULL;
    }
    return g_orig.xMalloc(n);
}

static inline void *fail_realloc(void *p, int n)
{
    if (g_countdown > 0 && --g_countdown == 0) {
        g_failed = 1;
        return NULL;
    }
    return g_orig.xRealloc(p, n);
}

static inline void oom_install(void)
{
    sqlite3_mem_methods m;
    sqlite3_shutdown();
    assert_int_equal(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &g_orig), SQLITE_OK);
    m = g_orig;
    m.xMalloc = fail_malloc;
    m.xRealloc = fail_realloc;
    assert_int_equal(sqlite3_config(SQLITE_CONFIG_MALLOC, &m), SQLITE_OK);
    assert_int_equal(sqlite3_initialize(), SQLITE_OK);
}

static inline void oom_restore(void)
{
    sqlite3_shutdown();
    assert_int_equal(sqlite3_config(SQLITE_CONFIG_MALLOC, &g_orig), SQLITE_OK);
    sqlite3_initialize();
}

#endif

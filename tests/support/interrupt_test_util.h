/* interrupt_test_util.h: sqlite3_interrupt from another thread after a
 * delay, and a monotonic clock, for the tests that check how soon long
 * work stops (tests/ext/test_ext_train.c, tests/ext/test_ext_train_wide.c).
 *
 *   interrupter it = {db, 400, NULL, 0};
 *   pthread_create(&th, NULL, interrupt_later, &it);
 *   ... run the statement; it fails with "interrupted" ...
 *   pthread_join(th, NULL);   then now_s() - it.when is how long it took
 */
#ifndef INTERRUPT_TEST_UTIL_H
#define INTERRUPT_TEST_UTIL_H

#include <sqlite3.h>
#include <time.h>
#include <unistd.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct interrupter {
    sqlite3 *db;
    int delay_ms;
    volatile int *started;   /* wait for this to become nonzero first (may be NULL) */
    double when;             /* when sqlite3_interrupt was called */
} interrupter;

static inline void *interrupt_later(void *p)
{
    interrupter *it = p;
    while (it->started && !*it->started) usleep(1000);
    usleep((useconds_t)it->delay_ms * 1000);
    it->when = now_s();
    sqlite3_interrupt(it->db);
    return NULL;
}

#endif

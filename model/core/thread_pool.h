/* thread_pool.h: the CPU engine's worker threads, a small pool of our own
 * in place of OpenMP, so that running out of memory or threads can never
 * end the host process: whatever cannot be had, the work runs on the
 * calling thread instead, with the same results.
 *
 * Work is given as nthreads pieces: tp_run(n, fn, ctx) calls fn(ctx, i, n)
 * once for every piece i in [0, n) and returns when all have returned. The
 * caller runs pieces itself; the pool's workers take the others. Pieces may
 * run at the same time, in any order, on any thread: they must not wait for
 * one another (no barrier inside a piece). What a piece computes must
 * depend only on i and n, never on the thread that runs it; then the result
 * is the same bits however many threads there really were. tp_for_static
 * and tp_for_dynamic are the two usual loops on top of it.
 *
 * Threads. Workers are created on first use and kept for the life of the
 * process, parked (a short spin, then a condition variable) between calls,
 * so a call costs a wake-up, not a thread creation. A team is one caller's
 * set of workers; idle teams wait on a free list. Each caller takes a team
 * of its own for the length of the call (a new one when all are busy, grown
 * when it has fewer workers than the call asks for), so callers on
 * different threads (SQLite connections used from several threads) never
 * share or wait for one another's workers, as with OpenMP, where each
 * calling thread has its own pool. When a team, a worker or its thread
 * cannot be created (malloc or pthread_create fails), the call goes on with
 * the workers it has, down to none: the caller then runs every piece itself,
 * in order. No call ever fails or aborts.
 *
 * Nesting. A call made from inside a piece (on a worker, or on the caller
 * while it holds a team) runs its pieces in order on that thread, inline:
 * no thread ever waits for a team, so nested calls cannot deadlock. A call
 * with nthreads <= 1 runs fn(ctx, 0, 1) directly and holds no team, so
 * calls inside it may still use threads (as an OpenMP region of one thread
 * is inactive).
 *
 * fork(): the child of a process with workers has none of them; a handler
 * registered with pthread_atfork forgets every team in the child, whose
 * next call makes new ones (a fork made while a call is running, from
 * another thread, leaves that call's team to the parent only).
 */
#ifndef SM_THREAD_POOL_H
#define SM_THREAD_POOL_H

#include <stddef.h>

/* One piece of the work: piece ithread of nthreads. */
typedef void (*tp_fn)(void *ctx, int ithread, int nthreads);

/* Calls fn(ctx, i, nthreads) for every i in [0, nthreads) and returns when
 * all have returned. Returns how many threads the pieces were given to (the
 * caller included; each of them may have taken none or several): 1 when the
 * caller ran them alone (nthreads 1, a nested call, or no worker could be
 * had), at most nthreads; 0 when nthreads <= 0 (nothing runs). */
int tp_run(int nthreads, tp_fn fn, void *ctx);

/* The static split of [0, n) into `parts` contiguous pieces (parts >= 1):
 * piece i is [*lo, *hi), the first n % parts pieces one longer; the same
 * for the same n and parts, whatever runs them (OpenMP's schedule(static)). */
void tp_split(int n, int parts, int i, int *lo, int *hi);

/* One range of a loop: items [lo, hi), never empty. */
typedef void (*tp_range_fn)(void *ctx, int lo, int hi);

/* fn over [0, n) split statically into min(nthreads, n) pieces by
 * tp_split, one call per piece. Returns what tp_run returns (0 when
 * n <= 0). */
int tp_for_static(int nthreads, int n, tp_range_fn fn, void *ctx);

/* One item of a loop, run by piece (lane) ithread of the call: no two
 * items of the same ithread ever run at the same time, so ithread may
 * select per-lane scratch. */
typedef void (*tp_item_fn)(void *ctx, int item, int ithread);

/* fn for every item in [0, n), handed out one at a time, in increasing
 * order, to min(nthreads, n) pieces, each taking the next free item when
 * it is done with one (OpenMP's schedule(dynamic)). Which piece runs which
 * item varies from call to call. Returns what tp_run returns (0 when
 * n <= 0). */
int tp_for_dynamic(int nthreads, int n, tp_item_fn fn, void *ctx);

/* The processors this process may run on (sched_getaffinity), else those
 * online; at least 1. What `threads` 0 means. */
int tp_default_threads(void);

#endif

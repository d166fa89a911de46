/* thread_pool.c: the worker threads of thread_pool.h: teams of parked
 * pthreads, the free list of idle teams, and the fallback to the calling
 * thread when a team, a worker or a thread cannot be created.
 *
 * A call publishes its pieces in one 64-bit word of the team, `next`:
 * (pieces << 32) | the next piece to hand out. A thread claims piece i by
 * moving the word from (pieces, i) to (pieces, i + 1) with a compare-and-
 * swap, so every piece is claimed exactly once; a worker that wakes late
 * finds the word used up (or already the next call's, whose piece it then
 * validly claims) and takes nothing. The call reads fn and ctx only after a
 * claim, which orders those reads after the caller's writes. The caller
 * claims pieces too, then waits until `done` counts them all; it never
 * waits for a worker that has claimed nothing, so a worker that is slow to
 * wake costs nothing beyond the caller doing its pieces.
 *
 * Waiting (a worker for a call, the caller for the last piece) spins for
 * TP_SPIN_NS, then yields the core between looks until TP_YIELD_NS, long
 * enough to cover the gap between two threaded ops of a forward pass (a
 * sleeping thread, on a virtual machine an idle virtual CPU, takes tens of
 * microseconds to wake), then sleeps on a condition variable (an event: a
 * sequence number that a post moves on). Yielding rather than spinning
 * leaves the core to whatever else has work when the machine is busy. The
 * sleeper's `sleeping` flag and the poster's sequence number are both
 * sequentially consistent, so a post either is seen before sleeping or
 * sees the sleeper and signals it under the mutex.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Workers of one team, the caller not counted. More pieces than workers
 * + 1 are fine: the threads there are take several each. */
#define TP_MAX_WORKERS 255
/* How long a waiting thread spins before it sleeps: TP_SPIN_NS on the
 * CPU, then until TP_YIELD_NS yielding it (sched_yield) between looks, so
 * that on a busy machine the threads that have work get the core. */
#ifndef TP_SPIN_NS
#define TP_SPIN_NS 50000
#endif
#ifndef TP_YIELD_NS
#define TP_YIELD_NS 2000000
#endif

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

/* ---- events --------------------------------------------------------------- */

/* A sequence number to wait on; one thread waits on an event at a time. */
typedef struct tp_event {
    atomic_uint seq;
    atomic_int sleeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} tp_event;

static int event_init(tp_event *e)
{
    atomic_init(&e->seq, 0);
    atomic_init(&e->sleeping, 0);
    if (pthread_mutex_init(&e->mu, NULL)) return -1;
    if (pthread_cond_init(&e->cv, NULL)) {
        pthread_mutex_destroy(&e->mu);
        return -1;
    }
    return 0;
}

static void event_destroy(tp_event *e)
{
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until e's sequence number is no longer `seen`; returns it. */
static unsigned event_wait(tp_event *e, unsigned seen)
{
    unsigned s;
    uint64_t start = now_ns(), waited = 0;
    for (unsigned i = 1;; i++) {
        if ((s = atomic_load_explicit(&e->seq, memory_order_acquire)) != seen) return s;
        if (waited < TP_SPIN_NS) {
            cpu_relax();
            if (!(i & 63)) waited = now_ns() - start;
        } else {
            sched_yield();
            if ((waited = now_ns() - start) > TP_YIELD_NS) break;
        }
    }
    pthread_mutex_lock(&e->mu);
    atomic_store(&e->sleeping, 1);
    while ((s = atomic_load(&e->seq)) == seen) pthread_cond_wait(&e->cv, &e->mu);
    atomic_store(&e->sleeping, 0);
    pthread_mutex_unlock(&e->mu);
    return s;
}

static void event_post(tp_event *e)
{
    atomic_fetch_add(&e->seq, 1);
    if (atomic_load(&e->sleeping)) {
        pthread_mutex_lock(&e->mu);
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
    }
}

/* ---- teams ---------------------------------------------------------------- */

typedef struct tp_team tp_team;

typedef struct tp_worker {
    tp_event wake; /* posted when the team has a call */
    tp_team *team;
} tp_worker;

struct tp_team {
    atomic_uint_least64_t next; /* (pieces << 32) | next piece to hand out */
    atomic_int done;            /* pieces of this call finished */
    tp_fn fn;                   /* the call's; read only after a claim */
    void *ctx;
    tp_event done_ev; /* posted when done reaches pieces */
    tp_team *next_free;
    int n_workers;
    tp_worker *workers[TP_MAX_WORKERS];
};

/* 1 on a worker, and on a caller while it holds a team: calls run inline.
 * Initial-exec, as libgomp's: a few bytes of the static TLS that glibc
 * keeps for libraries loaded later, so no access goes through
 * __tls_get_addr (whose blocks LeakSanitizer misreads at exit, in threads
 * of a dlopened library). */
static _Thread_local int t_in_pool __attribute__((tls_model("initial-exec")));

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* guards g_free */
static tp_team *g_free;                                    /* idle teams */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_fork_safe; /* the fork handlers are registered: teams may be made */

static void *alloc64(size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

/* Claims the next piece of the team's current call: its index, the call's
 * piece count in *pieces; -1 when none is left. */
static int claim(tp_team *t, int *pieces)
{
    uint_least64_t w = atomic_load_explicit(&t->next, memory_order_acquire);
    for (;;) {
        uint32_t n = (uint32_t)(w >> 32), i = (uint32_t)w;
        if (i >= n) return -1;
        if (atomic_compare_exchange_weak_explicit(&t->next, &w, w + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *pieces = (int)n;
            return (int)i;
        }
    }
}

/* Runs pieces of the team's call until none is left to claim. */
static void run_pieces(tp_team *t)
{
    int n, i;
    while ((i = claim(t, &n)) >= 0) {
        t->fn(t->ctx, i, n);
        if (atomic_fetch_add_explicit(&t->done, 1, memory_order_acq_rel) + 1 == n)
            event_post(&t->done_ev);
    }
}

static void *worker_main(void *arg)
{
    tp_worker *w = arg;
    unsigned seen = 0;
    t_in_pool = 1;
    for (;;) {
        seen = event_wait(&w->wake, seen);
        run_pieces(w->team);
    }
    return NULL;
}

/* A new worker of t with its thread running, or NULL. The worker blocks
 * every signal that is sent to the process, so that the host's own threads
 * get them (SIGINT, SIGTERM, SIGCHLD, ...), and none of those a fault
 * raises in the thread itself, so that a crash there reaches the host's
 * handler (or a sanitizer's). */
static tp_worker *worker_start(tp_team *t)
{
    tp_worker *w = alloc64(sizeof *w);
    if (!w) return NULL;
    w->team = t;
    if (event_init(&w->wake)) {
        free(w);
        return NULL;
    }
    sigset_t all, old;
    pthread_t tid;
    sigfillset(&all);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) sigdelset(&all, faults[i]);
    int masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    int rc = pthread_create(&tid, NULL, worker_main, w);
    if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        event_destroy(&w->wake);
        free(w);
        return NULL;
    }
    pthread_detach(tid);
    return w;
}

static tp_team *team_new(void)
{
    tp_team *t = alloc64(sizeof *t);
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    atomic_init(&t->next, 0);
    atomic_init(&t->done, 0);
    if (event_init(&t->done_ev)) {
        free(t);
        return NULL;
    }
    return t;
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&g_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&g_lock);
}

/* The child has none of the workers: forget every team (leaked, as the
 * threads that used them are gone). */
static void fork_child(void)
{
    g_free = NULL;
    pthread_mutex_init(&g_lock, NULL);
}

static void register_fork_handlers(void)
{
    g_fork_safe = pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
}

/* An idle team with as many workers as it could get, up to `workers`
 * (perhaps none), or NULL when no team can be had. */
static tp_team *team_acquire(int workers)
{
    pthread_once(&g_once, register_fork_handlers);
    if (!g_fork_safe) return NULL;
    pthread_mutex_lock(&g_lock);
    tp_team *t = g_free;
    if (t) g_free = t->next_free;
    pthread_mutex_unlock(&g_lock);
    if (!t && !(t = team_new())) return NULL;
    if (workers > TP_MAX_WORKERS) workers = TP_MAX_WORKERS;
    while (t->n_workers < workers) {
        tp_worker *w = worker_start(t);
        if (!w) break; /* try again on a later call */
        t->workers[t->n_workers++] = w;
    }
    return t;
}

static void team_release(tp_team *t)
{
    pthread_mutex_lock(&g_lock);
    t->next_free = g_free;
    g_free = t;
    pthread_mutex_unlock(&g_lock);
}

/* ---- calls ---------------------------------------------------------------- */

static void run_inline(int nthreads, tp_fn fn, void *ctx)
{
    int was = t_in_pool;
    t_in_pool = 1;
    for (int i = 0; i < nthreads; i++) fn(ctx, i, nthreads);
    t_in_pool = was;
}

int tp_run(int nthreads, tp_fn fn, void *ctx)
{
    if (nthreads <= 0) return 0;
    if (nthreads == 1) {
        fn(ctx, 0, 1);
        return 1;
    }
    if (t_in_pool) {
        run_inline(nthreads, fn, ctx);
        return 1;
    }
    tp_team *t = team_acquire(nthreads - 1);
    int helpers = t ? (t->n_workers < nthreads - 1 ? t->n_workers : nthreads - 1) : 0;
    if (!helpers) {
        if (t) team_release(t);
        run_inline(nthreads, fn, ctx);
        return 1;
    }
    t->fn = fn;
    t->ctx = ctx;
    atomic_store_explicit(&t->done, 0, memory_order_relaxed);
    atomic_store_explicit(&t->next, (uint_least64_t)(uint32_t)nthreads << 32, memory_order_release);
    for (int k = 0; k < helpers; k++) event_post(&t->workers[k]->wake);
    t_in_pool = 1;
    run_pieces(t);
    for (;;) {
        unsigned s = atomic_load(&t->done_ev.seq);
        if (atomic_load_explicit(&t->done, memory_order_acquire) >= nthreads) break;
        event_wait(&t->done_ev, s);
    }
    t_in_pool = 0;
    team_release(t);
    return helpers + 1;
}

void tp_split(int n, int parts, int i, int *lo, int *hi)
{
    int base = n / parts, extra = n % parts;
    *lo = i * base + (i < extra ? i : extra);
    *hi = *lo + base + (i < extra ? 1 : 0);
}

typedef struct static_loop {
    tp_range_fn fn;
    void *ctx;
    int n;
} static_loop;

static void static_piece(void *ctx, int i, int parts)
{
    const static_loop *l = ctx;
    int lo, hi;
    tp_split(l->n, parts, i, &lo, &hi);
    if (hi > lo) l->fn(l->ctx, lo, hi);
}

int tp_for_static(int nthreads, int n, tp_range_fn fn, void *ctx)
{
    if (n <= 0) return 0;
    int parts = nthreads < n ? nthreads : n;
    if (parts <= 1) {
        fn(ctx, 0, n);
        return 1;
    }
    static_loop l = {fn, ctx, n};
    return tp_run(parts, static_piece, &l);
}

typedef struct dynamic_loop {
    tp_item_fn fn;
    void *ctx;
    int n;
    atomic_int next;
} dynamic_loop;

static void dynamic_piece(void *ctx, int lane, int lanes)
{
    dynamic_loop *l = ctx;
    (void)lanes;
    for (;;) {
        int i = atomic_fetch_add_explicit(&l->next, 1, memory_order_relaxed);
        if (i >= l->n) break;
        l->fn(l->ctx, i, lane);
    }
}

int tp_for_dynamic(int nthreads, int n, tp_item_fn fn, void *ctx)
{
    if (n <= 0) return 0;
    int lanes = nthreads < n ? nthreads : n;
    if (lanes < 1) lanes = 1;
    dynamic_loop l = {fn, ctx, n, 0};
    return tp_run(lanes, dynamic_piece, &l);
}

int tp_default_threads(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n < 1024 ? n : 1024) : 1;
}

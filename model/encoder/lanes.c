/* lanes.c: lane sets and the two ways to run on them (lanes.h). */
#include "encoder/lanes.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/thread_pool.h"

int lane_set_grow(lane_set *s, backend *parent, int n, char *err)
{
    if (n <= s->n) return SM_OK;
    if (parent->lanes(parent) < 2)
        return sm_error(err, SM_ERR_UNSUPPORTED, "lanes: the %s backend has none", parent->name);
    backend **be = realloc(s->be, (size_t)n * sizeof *be);
    if (!be) return sm_error(err, SM_ERR_NOMEM, "out of memory creating %d lanes", n);
    s->be = be;
    for (int i = s->n; i < n; i++) {
        int rc = parent->lane_create(parent, &s->be[i], err);
        if (rc) return rc;
        s->n = i + 1;
    }
    return SM_OK;
}

void lane_set_free(lane_set *s)
{
    for (int i = 0; i < s->n; i++) s->be[i]->destroy(s->be[i]);
    free(s->be);
    s->be = NULL;
    s->n = 0;
}

typedef struct run_job {
    lane_fn fn;
    void *ctx;
    pthread_mutex_t lock; /* guards the three below */
    int rc, lane;         /* the lowest failing lane so far and its code */
    char *err;            /* its message */
} run_job;

static void run_piece(void *ctx, int lane, int n)
{
    run_job *j = ctx;
    char lane_err[SM_ERR_MAX];
    lane_err[0] = 0;
    int rc = j->fn(j->ctx, lane, n, lane_err);
    if (!rc) return;
    pthread_mutex_lock(&j->lock);
    if (!j->rc || lane < j->lane) {
        j->rc = rc;
        j->lane = lane;
        if (j->err) memcpy(j->err, lane_err, SM_ERR_MAX);
    }
    pthread_mutex_unlock(&j->lock);
}

int lanes_run(int n, lane_fn fn, void *ctx, char *err)
{
    if (n < 1) return SM_OK;
    run_job j = {fn, ctx, PTHREAD_MUTEX_INITIALIZER, SM_OK, 0, err};
    tp_run(n, run_piece, &j);
    pthread_mutex_destroy(&j.lock);
    return j.rc;
}

typedef struct each_job {
    lane_item_fn fn;
    void *ctx;
    atomic_int rc; /* the first failing item's code; its message in err */
    char *err;
} each_job;

static void each_item(void *ctx, int item, int lane)
{
    each_job *j = ctx;
    if (atomic_load_explicit(&j->rc, memory_order_relaxed)) return;
    char lane_err[SM_ERR_MAX];
    lane_err[0] = 0;
    int rc = j->fn(j->ctx, item, lane, lane_err);
    int none = SM_OK;
    if (rc && atomic_compare_exchange_strong(&j->rc, &none, rc) && j->err)
        memcpy(j->err, lane_err, SM_ERR_MAX);
}

int lanes_for_each(int n_lanes, int n_items, lane_item_fn fn, void *ctx, char *err)
{
    each_job j = {fn, ctx, SM_OK, err};
    tp_for_dynamic(n_lanes, n_items, each_item, &j);
    return atomic_load(&j.rc);
}

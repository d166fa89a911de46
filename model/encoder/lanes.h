/* lanes.h: the backend's lanes (backend.h) as model code runs them.
 *
 * A lane set is the single-lane backends of one parent (lane_create), made
 * on first use and kept. Work runs on them in one of two ways, both on the
 * thread pool (thread_pool.h), with no barrier inside a lane's work:
 *   lanes_run       one piece per lane (the rows of one batch, lane_rows);
 *   lanes_for_each  items handed to whichever lane is free (whole batches).
 * Each lane writes its own error message; the call returns the failing
 * lane's code and message (lanes_run: the lowest-numbered failing lane;
 * lanes_for_each: the first failure, after which no new item starts).
 * Used by inference.c, classifier.c and bert_train_lanes.c. Internal to model/.
 */
#ifndef SM_LANES_H
#define SM_LANES_H

#include "core/backend.h"

typedef struct lane_set {
    int n;        /* lanes made so far */
    backend **be; /* (n) single-lane backends, owned */
} lane_set;

/* Grows s to at least n lanes of parent. On an error s keeps the lanes it
 * had. SM_ERR_UNSUPPORTED when parent has no lanes (lanes() < 2). */
int lane_set_grow(lane_set *s, backend *parent, int n, char *err);
/* Destroys every lane; s is empty afterwards. */
void lane_set_free(lane_set *s);

/* Rows [*lo, *hi) of a batch of B for lane i of n (contiguous, in order). */
static inline void lane_rows(int B, int i, int n, int *lo, int *hi)
{
    *lo = (int)((long)B * i / n);
    *hi = (int)((long)B * (i + 1) / n);
}

/* fn(ctx, lane, n, err) for every lane in [0, n) at once. */
typedef int (*lane_fn)(void *ctx, int lane, int n, char *err);
int lanes_run(int n, lane_fn fn, void *ctx, char *err);

/* fn(ctx, item, lane, err) for every item in [0, n_items), each on the
 * next free of n_lanes lanes: no two items of one lane run at once, so
 * lane may select per-lane scratch. */
typedef int (*lane_item_fn)(void *ctx, int item, int lane, char *err);
int lanes_for_each(int n_lanes, int n_items, lane_item_fn fn, void *ctx, char *err);

#endif

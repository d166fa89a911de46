/* scatter_plan.h: the host-side plan behind a deterministic scatter-add of
 * token rows into table rows (the embedding backward).
 *
 * dst[row_of[i], :] += src[i, :] for i in [0, n) must not depend on thread
 * timing, so no atomics: tokens are grouped by destination row (a stable
 * counting sort, so each group keeps ascending token order), each group is
 * cut into segments of at most seg_max tokens, a kernel sums every segment
 * in order into a partial row, and a second kernel adds the partials of each
 * group, in order, to its destination row. Pure host C, so
 * tests/test_cuda.c checks it on any machine.
 */
#ifndef SM_SCATTER_PLAN_H
#define SM_SCATTER_PLAN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct scatter_plan {
    int *buf;          /* every array below, one allocation (what is uploaded) */
    size_t cap;        /* ints allocated in buf */
    int *count;        /* host scratch: per-row counts, count_cap ints */
    size_t count_cap;
    int n_tokens;      /* n */
    int n_segs;        /* segments, <= n */
    int n_rows;        /* distinct destination rows */
    size_t n_ints;     /* ints of buf in use */
    /* offsets (in ints) of each array inside buf */
    size_t off_order, off_seg_start, off_row, off_row_seg;
} scatter_plan;

/* order[n]: token indices grouped by row, ascending within a group.
 * seg_start[n_segs + 1]: segment s is order[seg_start[s] .. seg_start[s+1]).
 * row[n_rows]: the destination row of group g (ascending).
 * row_seg[n_rows + 1]: group g is segments row_seg[g] .. row_seg[g+1]. */
#define SCATTER_ORDER(p) ((p)->buf + (p)->off_order)
#define SCATTER_SEG_START(p) ((p)->buf + (p)->off_seg_start)
#define SCATTER_ROW(p) ((p)->buf + (p)->off_row)
#define SCATTER_ROW_SEG(p) ((p)->buf + (p)->off_row_seg)

/* Builds the plan for row_of[0..n) (NULL: every token goes to row 0) with
 * segments of at most seg_max tokens. Returns 0, -1 when a row is negative
 * or seg_max < 1, -2 when out of memory. Reuses p's buffers; zero-initialise
 * p before the first call. */
int scatter_plan_build(scatter_plan *p, const int *row_of, int n, int seg_max);
void scatter_plan_free(scatter_plan *p);

#ifdef __cplusplus
}
#endif

#endif

/* scatter_plan.c: builds the grouped, segmented token order of a
 * deterministic scatter-add (see scatter_plan.h). */
#include "scatter_plan.h"

#include <stdlib.h>
#include <string.h>

static int grow(int **p, size_t *cap, size_t need)
{
    if (*cap >= need) return 0;
    size_t n = need + need / 2 + 64;
    int *q = realloc(*p, n * sizeof *q);
    if (!q) return -2;
    *p = q;
    *cap = n;
    return 0;
}

int scatter_plan_build(scatter_plan *p, const int *row_of, int n, int seg_max)
{
    if (n < 0 || seg_max < 1) return -1;
    int mx = 0;
    for (int i = 0; i < n; i++) {
        int r = row_of ? row_of[i] : 0;
        if (r < 0) return -1;
        if (r > mx) mx = r;
    }
    if (grow(&p->count, &p->count_cap, (size_t)mx + 1)) return -2;
    int *count = p->count;
    memset(count, 0, ((size_t)mx + 1) * sizeof *count);
    for (int i = 0; i < n; i++) count[row_of ? row_of[i] : 0]++;

    int groups = 0, segs = 0;
    for (int r = 0; r <= mx; r++)
        if (count[r]) {
            groups++;
            segs += (count[r] + seg_max - 1) / seg_max;
        }
    p->n_tokens = n;
    p->n_segs = segs;
    p->n_rows = groups;
    p->off_order = 0;
    p->off_seg_start = (size_t)n;
    p->off_row = p->off_seg_start + (size_t)segs + 1;
    p->off_row_seg = p->off_row + (size_t)groups;
    p->n_ints = p->off_row_seg + (size_t)groups + 1;
    if (grow(&p->buf, &p->cap, p->n_ints)) return -2;

    int *seg_start = SCATTER_SEG_START(p), *row = SCATTER_ROW(p), *row_seg = SCATTER_ROW_SEG(p);
    /* groups and segments in ascending row order; count[r] becomes the
     * position of row r's next token in order[] */
    int pos = 0, g = 0, s = 0;
    for (int r = 0; r <= mx; r++) {
        int c = count[r];
        if (!c) continue;
        row[g] = r;
        row_seg[g++] = s;
        for (int off = 0; off < c; off += seg_max) seg_start[s++] = pos + off;
        count[r] = pos;
        pos += c;
    }
    seg_start[s] = n;
    row_seg[g] = s;
    int *order = SCATTER_ORDER(p);
    for (int i = 0; i < n; i++) order[count[row_of ? row_of[i] : 0]++] = i;
    return 0;
}

void scatter_plan_free(scatter_plan *p)
{
    if (!p) return;
    free(p->buf);
    free(p->count);
    memset(p, 0, sizeof *p);
}

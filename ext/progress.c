/* progress.c: the progress line long runs print on stderr.
 *
 * Shown only when stderr is a terminal (sentiment_config('progress') 'auto',
 * the default), always with 'on', never with 'off'. At most a few updates a
 * second, one line rewritten in place: rows done, rows/s and, when the total
 * is known, percent and ETA. The line is cleared when the run ends.
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "ext/conn.h"
#include "ext/progress.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sx_progress_begin(sx_progress *p, const sx_conn *c, const char *what, int64_t total)
{
    p->active = c->progress == SX_PROGRESS_ON || (c->progress == SX_PROGRESS_AUTO && isatty(2));
    p->start = p->last = now_s();
    p->done = 0;
    p->total = total;
    p->what = what;
}

void sx_progress_update(sx_progress *p, int64_t done)
{
    double t, rate;
    p->done = done;
    if (!p->active) return;
    t = now_s();
    if (t - p->last < 0.25) return;
    p->last = t;
    rate = done / (t - p->start > 1e-9 ? t - p->start : 1e-9);
    if (p->total > 0) {
        double eta = rate > 0 ? (p->total - done) / rate : 0;
        fprintf(stderr, "\r%s: %lld/%lld rows (%.0f%%), %.0f rows/s, ETA %.0fs   ", p->what,
                (long long)done, (long long)p->total, 100.0 * done / p->total, rate, eta);
    } else {
        fprintf(stderr, "\r%s: %lld rows, %.0f rows/s   ", p->what, (long long)done, rate);
    }
    fflush(stderr);
}

void sx_progress_end(sx_progress *p)
{
    if (p->active && p->last > p->start) {
        fprintf(stderr, "\r%*s\r", 70, "");
        fflush(stderr);
    }
    p->active = 0;
}

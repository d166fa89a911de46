/* progress.h: the progress line long runs print on stderr (progress.c).
 * Room: ext/. Called by classify_vtab.c.
 */
#ifndef EXT_PROGRESS_H
#define EXT_PROGRESS_H

#include <stdint.h>

#include "ext/conn.h"

/* The progress line of one long run (classify over a table). */
typedef struct sx_progress {
    int active;
    double start, last;
    int64_t done, total; /* total < 0: unknown */
    const char *what;
} sx_progress;
void sx_progress_begin(sx_progress *p, const sx_conn *c, const char *what, int64_t total);
void sx_progress_update(sx_progress *p, int64_t done);
void sx_progress_end(sx_progress *p);

#endif

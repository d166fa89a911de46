/* train_status.h: the process-wide list of running train() calls behind
 * the sentiment_training table (train_status.c). Room: ext/. Called by
 * train.c.
 */
#ifndef EXT_TRAIN_STATUS_H
#define EXT_TRAIN_STATUS_H

#include <stdint.h>

/* The process-wide list of running train() calls: begin returns a handle
 * (NULL when out of memory: the run is then not listed), update records a
 * trainer_progress (trainer.h), end removes it. NULL handles are ignored. */
struct trainer_progress;
void *sx_train_status_begin(const char *model, const char *base, int64_t rows);
void sx_train_status_update(void *h, const struct trainer_progress *p);
void sx_train_status_end(void *h);

#endif

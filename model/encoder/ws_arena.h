/* ws_arena.h: what the workspaces (inference.c, bert_train.c, bert_mlm.c)
 * share: float buffers carved out of one backend arena, sized once from a
 * plan, next to one int arena; and TRY_BACKEND, which turns a failed
 * backend call into an error naming it. Internal to model/.
 */
#ifndef SM_WS_ARENA_H
#define SM_WS_ARENA_H

#include <stddef.h>

#include "core/backend.h"
#include "core/errors.h"

/* Where the next buffer goes: base is NULL while a plan is only counted. */
typedef struct ws_carver {
    float *base;
    size_t at;
} ws_carver;

/* The next buffer of n floats (NULL while counting). Each buffer is rounded
 * up to 16 floats (64 bytes). */
float *ws_carve(ws_carver *c, size_t n);

/* Runs plan(ctx, c), which calls ws_carve once per buffer and stores what
 * it returns, first to count (*floats: the arena's size), then, with the
 * float arena allocated on be, to point every buffer into it; then
 * allocates the int arena (n_ints). SM_ERR_NOMEM (no message) when either
 * cannot be had, the caller saying what needed it; what was allocated is
 * left for ws_arena_free. */
int ws_arena_alloc(backend *be, void (*plan)(void *ctx, ws_carver *c), void *ctx, size_t n_ints,
                   float **arena, size_t *floats, int **iarena);
/* Frees both arenas (either may be NULL). */
void ws_arena_free(backend *be, float *arena, int *iarena);

/* Propagates a backend failure: in a function with a backend *be and a
 * char *err, returns the call's code with a message naming the call
 * (errors.h's TRY_OR). */
#define TRY_BACKEND(call) TRY_OR(call, sm_error(err, rc_, "%s backend: %s failed", be->name, #call))

#endif

/* ws_arena.c: carving workspace buffers out of one backend arena in two
 * passes over a plan, one to count and one to point, and the int arena
 * beside it. Owns nothing: the arenas belong to the workspace that asked.
 */
#include "encoder/ws_arena.h"

float *ws_carve(ws_carver *c, size_t n)
{
    float *p = c->base ? c->base + c->at : NULL;
    c->at += (n + 15) & ~(size_t)15;
    return p;
}

int ws_arena_alloc(backend *be, void (*plan)(void *ctx, ws_carver *c), void *ctx, size_t n_ints,
                   float **arena, size_t *floats, int **iarena)
{
    ws_carver c = {NULL, 0};
    plan(ctx, &c);
    *floats = c.at;
    *arena = be->alloc(be, c.at * sizeof(float));
    if (!*arena) return SM_ERR_NOMEM;
    c = (ws_carver){*arena, 0};
    plan(ctx, &c);
    *iarena = be->alloc(be, n_ints * sizeof(int));
    return *iarena ? SM_OK : SM_ERR_NOMEM;
}

void ws_arena_free(backend *be, float *arena, int *iarena)
{
    if (arena) be->free(be, arena);
    if (iarena) be->free(be, iarena);
}

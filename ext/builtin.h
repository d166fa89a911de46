/* builtin.h: the model compiled into sentiment.so, if any (builtin.c).
 * Room: ext/. Called by models.c, models_vtab.c and
 * functions.c (sentiment_debug).
 */
#ifndef EXT_BUILTIN_H
#define EXT_BUILTIN_H

#include <stddef.h>

typedef struct sx_builtin {
    const char *config;
    size_t config_len;
    const char *vocab;
    size_t vocab_len;
    const void *weights;
    size_t weights_len;
} sx_builtin;
/* Fills *b and returns 1; 0 (and an empty *b) when this build has no
 * built-in model. */
int sx_builtin_get(sx_builtin *b);

#endif

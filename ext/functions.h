/* functions.h: a scalar function's model argument, resolved once per
 * statement (functions.c), shared with the other scalar functions (embed.c,
 * explain.c). Room: ext/.
 */
#ifndef EXT_FUNCTIONS_H
#define EXT_FUNCTIONS_H

#include "ext/conn.h"
#include "ext/sqlite_api.h"

/* The model argument argv[i] of a scalar function (the
 * default model when i >= argc), resolved once per statement (auxdata);
 * NULL after setting an error result. sx_model_arg_done hands it back. */
rt_model *sx_model_arg(sqlite3_context *ctx, sx_conn *c, const char *fn, int argc,
                       sqlite3_value **argv, int i, int *cached);
void sx_model_arg_done(sqlite3_context *ctx, rt_model *m, int argc, int i, int cached);

#endif

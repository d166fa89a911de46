/* embed.h: embeddings as SQL values (embed.c), shared with classify's
 * embedding column. Room: ext/.
 */
#ifndef EXT_EMBED_H
#define EXT_EMBED_H

#include "ext/sqlite_api.h"

/* sx_embedding_blob sets C floats as the
 * result, a little-endian float32 BLOB of 4 x C bytes (what sqlite-vec
 * reads). */
void sx_embedding_blob(sqlite3_context *ctx, const float *v, int C);

#endif

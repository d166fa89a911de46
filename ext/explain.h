/* explain.h: token attributions as JSON (explain.c), shared with classify's
 * explanation column. Room: ext/.
 */
#ifndef EXT_EXPLAIN_H
#define EXT_EXPLAIN_H

#include <stddef.h>

#include "ext/conn.h"

/* sentiment_explain's JSON for one text with options (JSON text or NULL):
 * SQLITE_OK with *json (sqlite3_malloc'd; NULL for blank text), or an error
 * naming fn. Shared with classify's explanation column. */
int sx_explain_json(sx_conn *c, const char *fn, rt_model *m, const char *text, size_t len,
                    const char *options, char **json, char **errmsg);

#endif

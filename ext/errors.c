/* errors.c: the error convention of ext/ (written down in errors.h):
 * formatting a "fn: what went wrong" message into a char **errmsg and
 * turning a model-layer status (model/core/errors.h, SM_*) with its err buffer
 * into an SQLite result code and such a message.
 *
 * Owns nothing: each message is sqlite3_mprintf'd and belongs to the
 * caller, who frees it with sqlite3_free.
 */
#include <stdarg.h>

#include "core/errors.h"
#include "ext/errors.h"

int sx_rc_from_sm(int sm_rc)
{
    switch (sm_rc) {
    case SM_OK: return SQLITE_OK;
    case SM_ERR_NOMEM: return SQLITE_NOMEM;
    case SM_ERR_INTERRUPTED: return SQLITE_INTERRUPT;
    /* A bad file, a bad argument, a GPU call: none is SQLite's own I/O,
     * corruption or misuse, which SQLITE_IOERR, SQLITE_CORRUPT and
     * SQLITE_MISUSE would say. */
    default: return SQLITE_ERROR;
    }
}

int sx_fail(char **errmsg, int rc, const char *fn, const char *fmt, ...)
{
    va_list ap;
    char *what, *msg;
    if (!errmsg) return rc;
    /* formatted before the old message is freed: fmt's arguments may be it */
    va_start(ap, fmt);
    what = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    msg = what && fn ? sqlite3_mprintf("%s: %s", fn, what) : what;
    if (msg != what) sqlite3_free(what);
    sqlite3_free(*errmsg);
    *errmsg = msg;
    return msg ? rc : SQLITE_NOMEM;
}

int sx_from_sm(int sm_rc, const char *fn, const char *err, char **errmsg)
{
    int rc = sx_rc_from_sm(sm_rc);
    if (rc == SQLITE_OK) return rc;
    if (!err || !*err)
        err = sm_rc == SM_ERR_NOMEM         ? "out of memory"
              : sm_rc == SM_ERR_INTERRUPTED ? "interrupted"
                                            : "failed";
    return sx_fail(errmsg, rc, fn, "%s", err);
}

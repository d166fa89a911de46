/* errors.c: sm_error(), the one place model/ formats an error message. */
#include "core/errors.h"

#include <stdarg.h>
#include <stdio.h>

int sm_error(char *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, SM_ERR_MAX, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* errors.h: the status codes and error-message convention shared by model/
 * (and by gpu/, which includes it), and TRY, the one way a failed call is
 * passed up.
 *
 * Every fallible function returns an int status (SM_OK on success) and, when
 * given a non-NULL `err` buffer of SM_ERR_MAX bytes, writes one line saying what
 * went wrong, naming the field, tensor or value involved and what was expected.
 * Nothing in model/ calls exit(), abort() or assert() on input a user or a file
 * controls.
 */
#ifndef SM_ERRORS_H
#define SM_ERRORS_H

#define SM_ERR_MAX 512

enum sm_status {
    SM_OK = 0,
    SM_ERR_NOMEM,       /* allocation failed */
    SM_ERR_IO,          /* open/read/mmap/write failed */
    SM_ERR_FORMAT,      /* a file or buffer is malformed (bad JSON, bad tensor, truncated) */
    SM_ERR_INVALID,     /* a caller-supplied argument is out of range */
    SM_ERR_UNSUPPORTED, /* well-formed but not something we implement (e.g. hidden_act) */
    SM_ERR_INTERRUPTED, /* a caller's interrupt callback asked us to stop */
    SM_ERR_DEVICE       /* a backend (GPU) call failed */
};

/* Formats a message into err (if non-NULL) and returns code, so callers can
 * write `return sm_error(err, SM_ERR_FORMAT, "...", ...);`. */
int sm_error(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Returns from the calling function when `call`, an int status, fails:
 * TRY(call) with the call's code as it is (its message, if any, being the
 * call's own); TRY_OR(call, fail) with the expression `fail`, in which rc_
 * is the call's code (ws_arena.h's TRY_BACKEND adds a message with it). */
#define TRY_OR(call, fail)      \
    do {                        \
        int rc_ = (call);       \
        if (rc_) return (fail); \
    } while (0)
#define TRY(call) TRY_OR(call, rc_)

#endif

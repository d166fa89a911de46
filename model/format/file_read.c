/* file_read.c: opening and reading files from outside with a regular-file
 * check and a size cap (see file_read.h for the rules and the caps).
 */
#include "format/file_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"

const char *sm_file_size_text(uint64_t bytes, char *out, size_t cap)
{
    static const char *const units[] = {"KB", "MB", "GB", "TB", "PB", "EB"};
    double v = (double)bytes;
    int u = -1;
    if (bytes < 1024) {
        snprintf(out, cap, "%llu byte%s", (unsigned long long)bytes, bytes == 1 ? "" : "s");
        return out;
    }
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (v == (double)(uint64_t)v) snprintf(out, cap, "%.0f %s", v, units[u]);
    else snprintf(out, cap, "%.1f %s", v, units[u]);
    return out;
}

static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

static int too_large(const char *path, uint64_t size, int grew, uint64_t max_bytes, char *err)
{
    char a[32], b[32];
    return sm_error(err, SM_ERR_IO, "'%s' %s %s; at most %s is read", path,
                    grew ? "grew past" : "is", sm_file_size_text(size, a, sizeof a),
                    sm_file_size_text(max_bytes, b, sizeof b));
}

int sm_file_open(const char *path, uint64_t max_bytes, int *fd, uint64_t *size, char *err)
{
    struct stat sb;
    int f;

    *fd = -1;
    *size = 0;
    if (!path) return sm_error(err, SM_ERR_INVALID, "sm_file_open: NULL path");
    f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        /* a socket cannot be opened at all (ENXIO): say what it is */
        if (e == ENXIO && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
            return sm_error(err, SM_ERR_IO, "cannot read '%s': it is %s; expected a regular file",
                            path, file_kind(sb.st_mode));
        return sm_error(err, SM_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    }
    if (fstat(f, &sb) != 0) {
        int e = errno;
        close(f);
        return sm_error(err, SM_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return sm_error(err, SM_ERR_IO, "cannot read '%s': it is %s; expected a regular file", path,
                        file_kind(sb.st_mode));
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        close(f);
        return too_large(path, (uint64_t)sb.st_size, 0, max_bytes, err);
    }
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return SM_OK;
}

int sm_file_read(const char *path, uint64_t max_bytes, char **buf, size_t *len, char *err)
{
    uint64_t size;
    size_t n = 0, cap;
    char *b = NULL;
    int fd, rc;

    *buf = NULL;
    *len = 0;
    if ((rc = sm_file_open(path, max_bytes, &fd, &size, err))) return rc;
    /* Room for the size fstat gave, one byte more to notice growth, and the
     * terminating NUL; grown (up to max_bytes + 2) only if the file grows
     * or fstat said 0 (files in /proc). */
    cap = (size_t)size + 2;
    for (;;) {
        if (!b || n + 1 >= cap) {
            size_t ncap = b ? cap * 2 : cap;
            if (ncap < 4096) ncap = 4096;
            if (ncap > max_bytes + 2) ncap = (size_t)max_bytes + 2;
            char *nb = realloc(b, ncap);
            if (!nb) {
                rc = sm_error(err, SM_ERR_NOMEM, "out of memory reading '%s' (%zu bytes)", path,
                              ncap);
                goto fail;
            }
            b = nb;
            cap = ncap;
        }
        size_t want = cap - 1 - n;
        if (n + want > max_bytes + 1) want = (size_t)(max_bytes + 1 - n);
        ssize_t got = read(fd, b + n, want);
        if (got < 0) {
            if (errno == EINTR) continue;
            rc = sm_error(err, SM_ERR_IO, "error reading '%s': %s", path, strerror(errno));
            goto fail;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n > max_bytes) {
            rc = too_large(path, n, 1, max_bytes, err);
            goto fail;
        }
    }
    close(fd);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return SM_OK;
fail:
    close(fd);
    free(b);
    return rc;
}

/* fault_vfs.h: a VFS that fails one file operation of SQLite's on demand,
 * for the storage fault-injection tests (tests/ext/test_storage_faults.c).
 *
 * fault_vfs_install() registers it as the default VFS, passing every call
 * through to the VFS that was the default. fault_arm(mode, k) makes the
 * k-th counted operation from then on fail:
 *   FAULT_FULL   the k-th xWrite, xTruncate returns SQLITE_FULL (once)
 *   FAULT_IOERR  the k-th xRead, xWrite, xSync, xTruncate returns an
 *                SQLITE_IOERR_* code (once)
 *   FAULT_BUSY   the k-th xLock and every later one returns SQLITE_BUSY (a
 *                lock another process holds past the busy timeout), until
 *                fault_disarm()
 * fault_hits() says whether the armed failure happened, so a loop over k
 * knows when an operation ran to its end without reaching it.
 */
#ifndef FAULT_VFS_H
#define FAULT_VFS_H

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

enum { FAULT_NONE, FAULT_FULL, FAULT_IOERR, FAULT_BUSY };

static struct {
    sqlite3_vfs *real;
    int mode;
    long count, fail_at, hits;
} g_fault;

typedef struct fault_file {
    sqlite3_file base;
    sqlite3_file *real; /* follows this struct in the same allocation */
} fault_file;

static void fault_arm(int mode, long k)
{
    g_fault.mode = mode;
    g_fault.count = 0;
    g_fault.fail_at = k;
    g_fault.hits = 0;
}

static void fault_disarm(void)
{
    g_fault.mode = FAULT_NONE;
}

static long fault_hits(void)
{
    return g_fault.hits;
}

/* 1 when this operation (of a kind `mode` counts) is to fail. */
static int fault_now(int kind_counts, int sticky)
{
    if (!kind_counts) return 0;
    g_fault.count++;
    if (g_fault.count == g_fault.fail_at || (sticky && g_fault.count > g_fault.fail_at)) {
        g_fault.hits++;
        return 1;
    }
    return 0;
}

#define FF(f) (((fault_file *)(f))->real)

static int ff_close(sqlite3_file *f)
{
    int rc = FF(f)->pMethods ? FF(f)->pMethods->xClose(FF(f)) : SQLITE_OK;
    return rc;
}

static int ff_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
    if (fault_now(g_fault.mode == FAULT_IOERR, 0)) return SQLITE_IOERR_READ;
    return FF(f)->pMethods->xRead(FF(f), p, n, off);
}

static int ff_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
    if (fault_now(g_fault.mode == FAULT_FULL, 0)) return SQLITE_FULL;
    if (fault_now(g_fault.mode == FAULT_IOERR, 0)) return SQLITE_IOERR_WRITE;
    return FF(f)->pMethods->xWrite(FF(f), p, n, off);
}

static int ff_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    if (fault_now(g_fault.mode == FAULT_FULL, 0)) return SQLITE_FULL;
    if (fault_now(g_fault.mode == FAULT_IOERR, 0)) return SQLITE_IOERR_TRUNCATE;
    return FF(f)->pMethods->xTruncate(FF(f), size);
}

static int ff_sync(sqlite3_file *f, int flags)
{
    if (fault_now(g_fault.mode == FAULT_IOERR, 0)) return SQLITE_IOERR_FSYNC;
    return FF(f)->pMethods->xSync(FF(f), flags);
}

static int ff_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return FF(f)->pMethods->xFileSize(FF(f), size);
}

static int ff_lock(sqlite3_file *f, int level)
{
    if (fault_now(g_fault.mode == FAULT_BUSY, 1)) return SQLITE_BUSY;
    return FF(f)->pMethods->xLock(FF(f), level);
}

static int ff_unlock(sqlite3_file *f, int level)
{
    return FF(f)->pMethods->xUnlock(FF(f), level);
}

static int ff_check_reserved(sqlite3_file *f, int *out)
{
    return FF(f)->pMethods->xCheckReservedLock(FF(f), out);
}

static int ff_control(sqlite3_file *f, int op, void *arg)
{
    return FF(f)->pMethods->xFileControl(FF(f), op, arg);
}

static int ff_sector(sqlite3_file *f)
{
    return FF(f)->pMethods->xSectorSize(FF(f));
}

static int ff_device(sqlite3_file *f)
{
    return FF(f)->pMethods->xDeviceCharacteristics(FF(f));
}

static int ff_shm_map(sqlite3_file *f, int pg, int sz, int extend, void volatile **pp)
{
    return FF(f)->pMethods->xShmMap(FF(f), pg, sz, extend, pp);
}

static int ff_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    if ((flags & SQLITE_SHM_LOCK) && fault_now(g_fault.mode == FAULT_BUSY, 1)) return SQLITE_BUSY;
    return FF(f)->pMethods->xShmLock(FF(f), off, n, flags);
}

static void ff_shm_barrier(sqlite3_file *f)
{
    FF(f)->pMethods->xShmBarrier(FF(f));
}

static int ff_shm_unmap(sqlite3_file *f, int del)
{
    return FF(f)->pMethods->xShmUnmap(FF(f), del);
}

static const sqlite3_io_methods k_fault_io = {
    .iVersion = 2,
    .xClose = ff_close,
    .xRead = ff_read,
    .xWrite = ff_write,
    .xTruncate = ff_truncate,
    .xSync = ff_sync,
    .xFileSize = ff_size,
    .xLock = ff_lock,
    .xUnlock = ff_unlock,
    .xCheckReservedLock = ff_check_reserved,
    .xFileControl = ff_control,
    .xSectorSize = ff_sector,
    .xDeviceCharacteristics = ff_device,
    .xShmMap = ff_shm_map,
    .xShmLock = ff_shm_lock,
    .xShmBarrier = ff_shm_barrier,
    .xShmUnmap = ff_shm_unmap,
};

static int fv_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    fault_file *ff = (fault_file *)f;
    (void)vfs;
    ff->real = (sqlite3_file *)(ff + 1);
    memset(ff->real, 0, (size_t)g_fault.real->szOsFile);
    int rc = g_fault.real->xOpen(g_fault.real, name, ff->real, flags, out);
    f->pMethods = ff->real->pMethods ? &k_fault_io : NULL;
    return rc;
}

static int fv_delete(sqlite3_vfs *v, const char *n, int sync)
{
    (void)v;
    return g_fault.real->xDelete(g_fault.real, n, sync);
}

static int fv_access(sqlite3_vfs *v, const char *n, int flags, int *out)
{
    (void)v;
    return g_fault.real->xAccess(g_fault.real, n, flags, out);
}

static int fv_full(sqlite3_vfs *v, const char *n, int cap, char *out)
{
    (void)v;
    return g_fault.real->xFullPathname(g_fault.real, n, cap, out);
}

static void *fv_dlopen(sqlite3_vfs *v, const char *n)
{
    (void)v;
    return g_fault.real->xDlOpen(g_fault.real, n);
}

static void fv_dlerror(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    g_fault.real->xDlError(g_fault.real, n, out);
}

static void (*fv_dlsym(sqlite3_vfs *v, void *h, const char *s))(void)
{
    (void)v;
    return g_fault.real->xDlSym(g_fault.real, h, s);
}

static void fv_dlclose(sqlite3_vfs *v, void *h)
{
    (void)v;
    g_fault.real->xDlClose(g_fault.real, h);
}

static int fv_random(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return g_fault.real->xRandomness(g_fault.real, n, out);
}

static int fv_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return g_fault.real->xSleep(g_fault.real, us);
}

static int fv_time(sqlite3_vfs *v, double *out)
{
    (void)v;
    return g_fault.real->xCurrentTime(g_fault.real, out);
}

static int fv_last_error(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return g_fault.real->xGetLastError ? g_fault.real->xGetLastError(g_fault.real, n, out) : 0;
}

static int fv_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    (void)v;
    return g_fault.real->xCurrentTimeInt64(g_fault.real, out);
}

static sqlite3_vfs g_fault_vfs;

static void fault_vfs_install(void)
{
    g_fault.real = sqlite3_vfs_find(NULL);
    g_fault_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(fault_file) + g_fault.real->szOsFile,
        .mxPathname = g_fault.real->mxPathname,
        .zName = "fault",
        .xOpen = fv_open,
        .xDelete = fv_delete,
        .xAccess = fv_access,
        .xFullPathname = fv_full,
        .xDlOpen = fv_dlopen,
        .xDlError = fv_dlerror,
        .xDlSym = fv_dlsym,
        .xDlClose = fv_dlclose,
        .xRandomness = fv_random,
        .xSleep = fv_sleep,
        .xCurrentTime = fv_time,
        .xGetLastError = fv_last_error,
        .xCurrentTimeInt64 = fv_time64,
    };
    sqlite3_vfs_register(&g_fault_vfs, 1);
}

#endif

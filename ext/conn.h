/* conn.h: one database connection's state, shared by every SQL object
 * registered on it (sentiment.c makes it; sx_conn_unref frees it with the
 * last object), and the helper that registers a file's scalar functions.
 * Room: ext/.
 */
#ifndef EXT_CONN_H
#define EXT_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "ext/sqlite_api.h"
#include "runtime/engine.h"
#include "runtime/registry.h"

/* Longest model name accepted (bytes). */
#define SX_NAME_MAX 128
/* Windows a long text is read in with sentiment_config('long_text', 'windows'). */
#define SX_LONG_TEXT_WINDOWS 8

/* A model registered on this connection by sentiment_load(), or kept in
 * memory by train() when it could not be stored (path NULL). */
typedef struct sx_file_reg {
    char *name;
    char *path;      /* canonical directory path; NULL: in memory */
    rt_model *model; /* loaded at registration, referenced */
    struct sx_file_reg *next;
} sx_file_reg;

/* What a connection last read of a stored model (models.c): the row, the
 * content hash of its bytes (the registry key) and the database's change
 * stamp when it was read; valid while the stamp is unchanged. */
#define SX_STORE_MEMO_MAX 8
#define SX_STORE_KEY_MAX 72 /* "sha256:" + 64 hex digits + NUL */
typedef struct sx_store_memo {
    int64_t rowid, version, bytes; /* bytes: the row's four columns, summed */
    uint32_t data_version;         /* SQLITE_FCNTL_DATA_VERSION of main */
    int64_t changes;               /* sqlite3_total_changes64 */
    uint64_t used;                 /* 0: empty slot */
    char key[SX_STORE_KEY_MAX];
} sx_store_memo;

enum { SX_PROGRESS_AUTO = 0, SX_PROGRESS_OFF = 1, SX_PROGRESS_ON = 2 };

typedef struct sx_conn {
    sqlite3 *db;
    int refs; /* one per registered function / module */
    /* configuration (config.c) */
    char device[32]; /* "auto", "cpu", "cuda", "cuda:N" */
    int threads;     /* 0 = all cores */
    int batch_size;
    int max_length;        /* 0 = the model's maximum */
    int progress;          /* SX_PROGRESS_* */
    int admin_off;         /* sentiment_config('admin_functions', 'off') was called */
    char precision[16];    /* "" or "auto", "fp32", "tf32", "bf16", "bf16-fast", "int8" */
    int long_text_windows; /* 0: long texts truncated; else SX_LONG_TEXT_WINDOWS */
    /* the runtime engine: backend, workspaces, counters (conn_engine.c) */
    rt_engine engine;
    /* models (models.c) */
    sx_file_reg *files;
    sx_store_memo memo[SX_STORE_MEMO_MAX];
    uint64_t memo_tick;
    uint64_t serial; /* names an in-memory database (storage.c) */
} sx_conn;

void sx_conn_ref(sx_conn *c);
void sx_conn_unref(void *c); /* the one destructor */

/* One scalar SQL function of a file's registration table. */
typedef struct sx_func {
    const char *name;
    int nArg;
    int flags; /* SQLITE_UTF8 | ...: SQLITE_DIRECTONLY, SQLITE_INNOCUOUS, ... */
    void (*xFunc)(sqlite3_context *, int, sqlite3_value **);
} sx_func;
/* Registers the n functions of f on db, each holding a reference to c
 * (sx_conn_unref drops it); stops at the first failure. */
int sx_register_funcs(sqlite3 *db, sx_conn *c, const sx_func *f, size_t n);

#endif

/* db_file_util.h: database files for the tests that need a real file (a
 * second connection or process, the journal on disk): removing one with its
 * journal, WAL and shared-memory files, and reading one value from it with
 * a plain connection (no extension), as it is on disk; and running one
 * statement for its first value or its error, without failing the test
 * (for code that runs in a forked child too).
 */
#ifndef DB_FILE_UTIL_H
#define DB_FILE_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

static inline void remove_db(const char *path)
{
    char buf[300];
    static const char *const suffix[] = {"", "-journal", "-wal", "-shm"};
    for (int i = 0; i < 4; i++) {
        snprintf(buf, sizeof buf, "%s%s", path, suffix[i]);
        unlink(buf);
    }
}

/* The first column of sql's first row in the file at path, -1 when there
 * is none (the connection uses the unix VFS whatever the default is). */
static inline int64_t file_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, "unix") == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Runs sql; SQLITE_OK and the first column (malloc'd) in *out, or the code
 * and the message in *out. */
static inline int run_sql(sqlite3 *db, const char *sql, char **out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    *out = NULL;
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        *out = strdup(t ? t : "");
        rc = SQLITE_OK;
    } else {
        *out = strdup(sqlite3_errmsg(db));
        if (rc == SQLITE_DONE) rc = SQLITE_ERROR;
    }
    sqlite3_finalize(st);
    return rc;
}

#endif

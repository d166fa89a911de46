/* store_functions.c: removing, exporting and restoring stored models from
 * SQL.
 *
 *   sentiment_drop(name [, version])   -> INT    removes every stored version
 *                                                of `name` (or only
 *                                                `version`) and its
 *                                                sentiment_train_log rows, in
 *                                                one savepoint; returns the
 *                                                number of versions removed
 *   sentiment_export(name, dir)        -> TEXT   writes the stored model
 *                                                `name` (the latest version,
 *                                                or `name@N`) as a Hugging
 *                                                Face directory: config.json,
 *                                                vocab.txt or tokenizer.json,
 *                                                model.safetensors (and, for a
 *                                                model with a pooling setting,
 *                                                the sentence-transformers
 *                                                modules.json and
 *                                                1_Pooling/config.json);
 *                                                returns dir
 *   sentiment_use(name, version)       -> INT    makes stored version
 *                                                `version` of `name` current
 *                                                again; returns the new
 *                                                version number
 *
 *   SELECT sentiment_drop('hotel', 1);            -- 1
 *   SELECT sentiment_export('hotel', '/tmp/hotel');
 *   SELECT sentiment_load('hotel_copy', '/tmp/hotel');  -- the same logits
 *   SELECT sentiment_use('hotel', 1);  -- version 1 becomes current again
 *
 * All are SQLITE_DIRECTONLY (they write the database, or files).
 *
 * sentiment_drop: an unknown name, a name that is only registered with
 * sentiment_load() (unregister it with sentiment_load(name, NULL)), an
 * unknown version, a read-only database: each an error, and nothing is
 * removed. A plain DELETE FROM sentiment_model_store also removes the
 * deleted versions' log rows (a trigger, see sql/schema.sql).
 *
 * sentiment_export: the version is loaded first (the checks of every load),
 * so a row that does not load is an error and writes nothing. The files are
 * the stored bytes, unchanged. `dir` must not exist (its parent must) or be
 * an empty directory. The files are written and synced in a new directory
 * next to it (`dir.export-<pid>-<n>`), which is then renamed to `dir`: an
 * interrupted export leaves at most that temporary directory, never a
 * `dir` that looks complete and is not.
 *
 * sentiment_use(name, version) copies stored version `version` of `name`
 * as a new latest version (so it is what 'name' means from now on; the
 * history stays append-only) and returns the new version number. Its
 * metrics get "restored_from": version. The version is loaded first (the
 * checks of every load: config, vocab, safetensors): one that does not
 * load is an error and nothing is stored.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "ext/args.h"
#include "ext/conn.h"
#include "ext/errors.h"
#include "ext/models.h"
#include "ext/register.h"
#include "ext/storage.h"

/* A TEXT argument without embedded NUL bytes, else NULL. */
static const char *text_arg(sqlite3_value *v)
{
    const char *t;
    if (sqlite3_value_type(v) != SQLITE_TEXT) return NULL;
    t = (const char *)sqlite3_value_text(v);
    if (!t || (size_t)sqlite3_value_bytes(v) != strlen(t)) return NULL;
    return t;
}

/* ---- sentiment_drop(name [, version]) ---- */

static void fn_drop(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char *fn = "sentiment_drop()";
    char *errmsg = NULL;
    const char *name = text_arg(argv[0]);
    int64_t version = 0, removed = 0;
    int rc;

    if (sx_admin_refused(ctx, c, fn)) return;

    if (sqlite3_value_type(argv[0]) == SQLITE_TEXT && sx_arg_has_nul(argv[0])) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn, "model name contains a NUL byte");
        goto end;
    }
    if (!name || !*name) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "expected a stored model name (TEXT) as the first argument");
        goto end;
    }
    if (argc > 1) {
        if (sqlite3_value_type(argv[1]) != SQLITE_INTEGER || sqlite3_value_int64(argv[1]) < 1) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                         "expected a version number (INTEGER >= 1) as the second argument");
            goto end;
        }
        version = sqlite3_value_int64(argv[1]);
    }
    if (sqlite3_db_readonly(c->db, "main") == 1) {
        rc = sx_fail(&errmsg, SQLITE_READONLY, fn, "the database is read-only");
        goto end;
    }
    rc = sx_store_drop(c->db, name, version, &removed, &errmsg);
    if (rc == SQLITE_NOTFOUND) {
        sx_store_ref latest;
        char *ignored = NULL;
        int stored = sx_store_find_row(c->db, name, 0, &latest, &ignored) == SQLITE_OK;
        sqlite3_free(ignored);
        if (stored)
            rc = sx_fail(&errmsg, rc, fn, "no version %lld of model '%s'; the latest is %lld",
                         (long long)version, name, (long long)latest.version);
        else if (sx_model_source(c, name) == SX_SRC_FILE)
            rc = sx_fail(&errmsg, rc, fn,
                         "model '%s' is registered with sentiment_load(), not stored in this "
                         "database; sentiment_load('%s', NULL) unregisters it",
                         name, name);
        else rc = sx_fail(&errmsg, rc, fn, "no model named '%s' is stored in this database", name);
    } else if (rc != SQLITE_OK && errmsg) {
        rc = sx_fail(&errmsg, rc, fn, "%s", errmsg);
    }
end:
    if (rc == SQLITE_OK) sqlite3_result_int64(ctx, removed);
    else if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
}

/* ---- sentiment_export(name, dir) ---- */

static int write_file(const char *dir, const char *file, const void *p, size_t n, const char *fn,
                      char **errmsg)
{
    char path[4300];
    const char *b = p;
    int fd;
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return sx_fail(errmsg, SQLITE_ERROR, fn, "path too long");
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
        return sx_fail(errmsg, SQLITE_CANTOPEN, fn, "cannot create %s: %s", path, strerror(errno));
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            return sx_fail(errmsg, SQLITE_IOERR, fn, "cannot write %s: %s", path, strerror(e));
        }
        b += w;
        n -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return sx_fail(errmsg, SQLITE_IOERR, fn, "cannot sync %s: %s", path, strerror(e));
    }
    if (close(fd) != 0)
        return sx_fail(errmsg, SQLITE_IOERR, fn, "cannot write %s: %s", path, strerror(errno));
    return SQLITE_OK;
}

static const char *const k_files[] = {"config.json", "vocab.txt", "model.safetensors",
                                      "tokenizer.json"};

/* The sentence-transformers files of a model with a pooling setting. */
static const char *const k_pooling_files[] = {"modules.json", SM_POOLING_DIR "/config.json"};
static const char *const k_pooling_dirs[] = {SM_POOLING_DIR, SM_NORMALIZE_DIR};

static void remove_tmp(const char *tmp)
{
    char path[4300];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, k_files[i]);
        unlink(path);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, k_pooling_files[i]);
        unlink(path);
        snprintf(path, sizeof path, "%s/%s", tmp, k_pooling_dirs[i]);
        rmdir(path);
    }
    rmdir(tmp);
}

/* modules.json, 1_Pooling/config.json and (normalising) an empty
 * 2_Normalize/ in tmp, as sentence-transformers saves a model, when the
 * model has a pooling setting (model/format/pooling.h); nothing otherwise. */
static int write_pooling(const char *tmp, const bert_config *cfg, const char *fn, char **errmsg)
{
    char *modules = NULL, *pooling = NULL, path[4300], err[SM_ERR_MAX];
    int rc;
    if (!cfg->pooling.set) return SQLITE_OK;
    if ((rc = sm_pooling_files(&cfg->pooling, cfg->hidden_size, &modules, &pooling, err)))
        return sx_from_sm(rc, fn, err, errmsg);
    for (int i = 0; i < 1 + cfg->pooling.normalize && !rc; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, k_pooling_dirs[i]);
        if (mkdir(path, 0777) != 0)
            rc = sx_fail(errmsg, SQLITE_CANTOPEN, fn, "cannot create %s: %s", path,
                         strerror(errno));
    }
    if (!rc) rc = write_file(tmp, k_pooling_files[0], modules, strlen(modules), fn, errmsg);
    if (!rc) rc = write_file(tmp, k_pooling_files[1], pooling, strlen(pooling), fn, errmsg);
    free(modules);
    free(pooling);
    return rc;
}

/* SQLITE_OK when dir can be the export's target (absent with an existing
 * parent, or an empty directory), else an error. */
static int check_target(const char *dir, char *parent, size_t cap, const char *fn, char **errmsg)
{
    struct stat sb;
    const char *slash;
    if (lstat(dir, &sb) == 0) {
        DIR *d;
        struct dirent *de;
        int empty = 1;
        if (!S_ISDIR(sb.st_mode))
            return sx_fail(errmsg, SQLITE_ERROR, fn, "'%s' exists and is not a directory", dir);
        d = opendir(dir);
        if (!d)
            return sx_fail(errmsg, SQLITE_CANTOPEN, fn, "cannot open '%s': %s", dir,
                           strerror(errno));
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = 0;
        closedir(d);
        if (!empty)
            return sx_fail(errmsg, SQLITE_ERROR, fn,
                           "'%s' is not empty; expected a new or an empty directory", dir);
    } else if (errno != ENOENT) {
        return sx_fail(errmsg, SQLITE_CANTOPEN, fn, "cannot use '%s': %s", dir, strerror(errno));
    }
    slash = strrchr(dir, '/');
    if (!slash) snprintf(parent, cap, ".");
    else if (slash == dir) snprintf(parent, cap, "/");
    else snprintf(parent, cap, "%.*s", (int)(slash - dir), dir);
    if (stat(parent, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return sx_fail(errmsg, SQLITE_ERROR, fn, "the parent directory '%s' does not exist",
                       parent);
    return SQLITE_OK;
}

static void fn_export(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char *fn = "sentiment_export()";
    const char *spec = text_arg(argv[0]), *dir_arg = text_arg(argv[1]);
    char err[SM_ERR_MAX], base[SX_NAME_MAX + 32], dir[4096], parent[4096], tmp[4200];
    char *errmsg = NULL;
    int64_t version = 0;
    rt_model *m = NULL;
    sx_store_row row;
    sx_store_ref ref;
    int have_row = 0, have_tmp = 0, rc = SQLITE_OK;
    (void)argc;

    if (sx_admin_refused(ctx, c, fn)) return;

    memset(&row, 0, sizeof row);
    for (int i = 0; i < 2; i++)
        if (sqlite3_value_type(argv[i]) == SQLITE_TEXT && sx_arg_has_nul(argv[i])) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn, "%s contains a NUL byte",
                         i ? "directory path" : "model name");
            goto end;
        }
    if (!spec || !*spec || strlen(spec) >= sizeof base) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "expected a stored model name (TEXT) as the first argument");
        goto end;
    }
    if (!dir_arg || !*dir_arg || strlen(dir_arg) >= sizeof dir) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "expected a directory path (TEXT) as the second argument");
        goto end;
    }
    /* name@N picks a version */
    snprintf(base, sizeof base, "%s", spec);
    {
        char *at = strrchr(base, '@');
        if (at && at[1] && strspn(at + 1, "0123456789") == strlen(at + 1) && strlen(at + 1) < 10) {
            version = atoll(at + 1);
            if (version > 0) *at = 0;
        }
    }
    snprintf(dir, sizeof dir, "%s", dir_arg);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = 0;

    /* load it (the checks of every load), then read the same bytes */
    rc = sx_model_acquire_stored(c, fn, base, version, &m, &errmsg);
    if (rc != SQLITE_OK) goto end;
    rc = sx_store_find_row(c->db, base, version, &ref, &errmsg);
    if (rc != SQLITE_OK) {
        if (rc == SQLITE_NOTFOUND) /* deleted since it was loaded */
            rc = sx_fail(&errmsg, rc, fn, "model '%s' changed while it was exported; try again",
                         spec);
        else if (errmsg) rc = sx_fail(&errmsg, rc, fn, "%s", errmsg);
        goto end;
    }
    if ((rc = sx_store_row_open(c->db, ref.rowid, &row, err)) != SM_OK) {
        rc = sx_from_sm(rc, fn, err, &errmsg);
        goto end;
    }
    have_row = 1;
    if (strcmp(row.key, m->key)) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "model '%s' changed while it was exported; try again", spec);
        goto end;
    }
    if ((rc = check_target(dir, parent, sizeof parent, fn, &errmsg)) != SQLITE_OK) goto end;
    for (unsigned n = 0;; n++) {
        snprintf(tmp, sizeof tmp, "%s.export-%ld-%u", dir, (long)getpid(), n);
        if (mkdir(tmp, 0777) == 0) break;
        if (errno != EEXIST || n > 1000) {
            rc = sx_fail(&errmsg, SQLITE_CANTOPEN, fn, "cannot create a directory next to '%s': %s",
                         dir, strerror(errno));
            goto end;
        }
    }
    have_tmp = 1;
    /* a tokenizer.json model has vocab '' (no vocab.txt is written); the
     * loader takes tokenizer.json first, as the stored row did */
    if ((rc = write_file(tmp, k_files[0], row.config, row.config_len, fn, &errmsg)) ||
        ((!row.tokenizer || row.vocab_len) &&
         (rc = write_file(tmp, k_files[1], row.vocab, row.vocab_len, fn, &errmsg))) ||
        (row.tokenizer &&
         (rc = write_file(tmp, k_files[3], row.tokenizer, row.tokenizer_len, fn, &errmsg))) ||
        (rc = write_file(tmp, k_files[2], row.weights, row.weights_len, fn, &errmsg)) ||
        (rc = write_pooling(tmp, &m->bert->cfg, fn, &errmsg)))
        goto end;
    if (rename(tmp, dir) != 0) {
        rc = sx_fail(&errmsg, SQLITE_CANTOPEN, fn, "cannot create '%s': %s", dir,
                     errno == ENOTEMPTY || errno == EEXIST ? "it is no longer empty"
                                                           : strerror(errno));
        goto end;
    }
    have_tmp = 0;
    {
        int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            (void)fsync(fd);
            close(fd);
        }
    }
end:
    if (have_tmp) remove_tmp(tmp);
    if (have_row) sx_store_row_close(&row);
    rt_registry_release(m);
    if (rc == SQLITE_OK) sqlite3_result_text(ctx, dir, -1, SQLITE_TRANSIENT);
    else if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
}

/* ---- sentiment_use(name, version) ---- */

static void fn_use(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char *fn = "sentiment_use()";
    char *errmsg = NULL;
    const char *name;
    sx_store_ref ref;
    int64_t want, version = 0;
    int rc;
    (void)argc;

    if (sx_admin_refused(ctx, c, fn)) return;

    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "expected a stored model name (TEXT) as the first argument");
        goto end;
    }
    if ((rc = sx_arg_name(argv[0], fn, "model name", &name, &errmsg)) != SQLITE_OK) goto end;
    if (sqlite3_value_type(argv[1]) != SQLITE_INTEGER || sqlite3_value_int64(argv[1]) < 1) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "expected a version number (INTEGER >= 1) as the second argument");
        goto end;
    }
    want = sqlite3_value_int64(argv[1]);
    rc = sx_store_find_row(c->db, name, want, &ref, &errmsg);
    if (rc == SQLITE_NOTFOUND) {
        if (sx_store_find_row(c->db, name, 0, &ref, &errmsg) == SQLITE_OK)
            rc = sx_fail(&errmsg, rc, fn, "no version %lld of model '%s'; the latest is %lld",
                         (long long)want, name, (long long)ref.version);
        else /* a read error here says less than this */
            rc = sx_fail(&errmsg, rc, fn, "no model named '%s' is stored in this database", name);
        goto end;
    }
    if (rc != SQLITE_OK) {
        if (errmsg) rc = sx_fail(&errmsg, rc, fn, "%s", errmsg);
        goto end;
    }
    if (sqlite3_db_readonly(c->db, "main") == 1) {
        rc = sx_fail(&errmsg, SQLITE_READONLY, fn, "the database is read-only");
        goto end;
    }
    /* Load (and so verify) the version before it becomes current, inside
     * the savepoint that copies it, so what is copied is what was read. */
    {
        sx_store_txn t;
        char what[SX_NAME_MAX + 16];
        snprintf(what, sizeof what, "model '%s'", name);
        if ((rc = sx_store_txn_begin(c->db, &t, "sentiment_use", &errmsg)) != SQLITE_OK) {
            rc = sx_fail(&errmsg, rc, fn, "cannot store model '%s': %s", name, errmsg);
            goto end;
        }
        rt_model *m = NULL;
        rc = sx_model_acquire_stored(c, fn, name, want, &m, &errmsg);
        if (rc == SQLITE_OK) rc = sx_store_copy(c->db, name, want, &version, &errmsg);
        rt_registry_release(m);
        rc = sx_store_txn_end(c->db, &t, rc, what, &errmsg);
        if (rc != SQLITE_OK) {
            version = 0;
            if (errmsg && strncmp(errmsg, fn, strlen(fn)))
                rc = sx_fail(&errmsg, rc, fn, "%s", errmsg);
        }
    }
end:
    if (rc == SQLITE_OK) sqlite3_result_int64(ctx, version);
    else if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
}

#define SX_DIRECT (SQLITE_UTF8 | SQLITE_DIRECTONLY)

static const sx_func aFunc[] = {
    {"sentiment_drop", 1, SX_DIRECT, fn_drop},
    {"sentiment_drop", 2, SX_DIRECT, fn_drop},
    {"sentiment_export", 2, SX_DIRECT, fn_export},
    {"sentiment_use", 2, SX_DIRECT, fn_use},
};

int sx_register_store_functions(sqlite3 *db, sx_conn *c)
{
    return sx_register_funcs(db, c, aFunc, sizeof aFunc / sizeof *aFunc);
}

/* models.c: from a model name in SQL to a loaded model.
 *
 * A name is looked up, exactly (never by prefix), in this order:
 *   1. models registered on this connection by sentiment_load(name, dir),
 *      and models train() trained but could not store (kept in memory,
 *      path NULL, until stored by train() or sentiment_save(), or dropped
 *      with sentiment_load(name, NULL));
 *   2. models stored in the main database (sentiment_model_store), the
 *      latest version, or version N when written `name@N`;
 *   3. `default`: the built-in model, when this build has one.
 * Registering 'default' with sentiment_load() replaces the built-in model
 * for the connection; a stored model may not be called 'default'.
 *
 * Every model is loaded through the process-wide cache (registry.c) under a
 * key that says what the bytes are: "builtin",
 * "file:<dir>:<file>=<mtime>,<size>,<inode>..." (every file the directory's
 * model is read from, sx_model_dir_key) or, for a stored model, "sha256:<hex>", the SHA-256 of the row's config,
 * vocab, labels, safetensors and tokenizer, computed from the bytes as they
 * are read.
 * So connections share one copy, two databases share a cache entry only
 * when they hold the same bytes (no value a database stores can make it
 * answer with another database's model), and a changed file, a new stored
 * version or an UPDATE of a stored row is a different key: the next
 * statement gets the new bytes, or the error that they do not load. How a
 * connection avoids re-reading a big BLOB for every statement is under
 * "the connection's memo" below. A file model is read once, when it is
 * registered: call sentiment_load() again after its files change.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/errors.h"
#include "ext/args.h"
#include "ext/builtin.h"
#include "ext/conn.h"
#include "ext/errors.h"
#include "ext/models.h"
#include "ext/storage.h"
#include "format/pooling.h"

/* ---- loaders handed to the registry ---- */

typedef struct dir_ctx {
    sqlite3 *db;
    const char *path;
} dir_ctx;

static int dir_stop(void *user)
{
    return sx_db_interrupted(user);
}

/* The registry calls this under its load lock: the files are regular files
 * (file_read.h refuses FIFOs and devices before any read), and an interrupt
 * is honoured between them. */
static int load_dir(void *ctx, bert_model **out, char *err)
{
    dir_ctx *d = ctx;
    return bert_model_load_dir_stoppable(d->path, d->db ? dir_stop : NULL, d->db, out, err);
}

static int load_builtin(void *ctx, bert_model **out, char *err)
{
    sx_builtin b;
    (void)ctx;
    if (!sx_builtin_get(&b)) return sm_error(err, SM_ERR_IO, "no built-in model in this build");
    return bert_model_load_buffers(b.config, b.config_len, b.vocab, b.vocab_len, b.weights,
                                   b.weights_len, out, err);
}

/* A stored row already read (and hashed) by the caller. */
static int load_row(void *ctx, bert_model **out, char *err)
{
    return sx_store_row_load(ctx, out, err);
}

/* A stored row the connection's memo names by its hash: read it again and
 * load it only if its bytes still hash to that key. */
typedef struct memo_ctx {
    sqlite3 *db;
    const sx_store_memo *memo;
} memo_ctx;

static int load_memo_row(void *ctx, bert_model **out, char *err)
{
    memo_ctx *m = ctx;
    sx_store_row row;
    int rc = sx_store_row_open(m->db, m->memo->rowid, &row, err);
    if (rc != SM_OK) return rc;
    if (strcmp(row.key, m->memo->key))
        rc = sm_error(err, SM_ERR_IO, "the stored model changed while it was read; try again");
    else rc = sx_store_row_load(&row, out, err);
    sx_store_row_close(&row);
    return rc;
}

/* ---- the connection's memo of stored rows ----
 *
 * The registry key of a stored model is the SHA-256 of its bytes, and
 * hashing costs what reading does: about 3 ms for a 4 MB model with SHA-NI
 * (18 ms without), 0.3 s (1.8 s) for a 400 MB BERT-base. So a connection
 * hashes a row when it reads it and remembers the hash with the database's
 * change stamp: SQLITE_FCNTL_DATA_VERSION of main, which changes whenever a
 * transaction is committed to the file by this or any other connection or
 * process, and sqlite3_total_changes64, which counts this connection's own
 * INSERT/UPDATE/DELETE rows, committed or not. While both are unchanged the
 * row cannot have changed, so the next statement reuses the hash without
 * reading the BLOB; after any change the row is read and hashed again
 * (models.c never trusts a uid or anything else the database says about
 * itself). A hash taken while main had a write transaction open is not
 * remembered: that transaction may roll back to other bytes without
 * changing either counter (one taken before it began stays valid inside it
 * until the transaction changes a row). So a statement that follows a
 * write in the same transaction hashes the row again: a loop of one-row
 * UPDATEs in one transaction pays the hash per statement. Not seen: sqlite3_blob_write() by this
 * connection inside an open transaction (it counts no change); the next
 * commit is. */

static sx_store_memo *memo_find(sx_conn *c, const sx_store_ref *ref)
{
    for (int i = 0; i < SX_STORE_MEMO_MAX; i++) {
        sx_store_memo *m = &c->memo[i];
        if (m->used && m->rowid == ref->rowid && m->version == ref->version &&
            m->bytes == ref->bytes && m->data_version == ref->data_version &&
            m->changes == ref->changes) {
            m->used = ++c->memo_tick;
            return m;
        }
    }
    return NULL;
}

static void memo_put(sx_conn *c, const sx_store_row *row)
{
    sx_store_memo *slot = &c->memo[0];
    if (row->ref.writing) return;
    for (int i = 0; i < SX_STORE_MEMO_MAX; i++) {
        sx_store_memo *m = &c->memo[i];
        if (m->used && m->rowid == row->ref.rowid) { /* the row's older reading */
            slot = m;
            break;
        }
        if (m->used < slot->used) slot = m;
    }
    slot->rowid = row->ref.rowid;
    slot->version = row->ref.version;
    slot->bytes = row->ref.bytes;
    slot->data_version = row->ref.data_version;
    slot->changes = row->ref.changes;
    snprintf(slot->key, sizeof slot->key, "%s", row->key);
    slot->used = ++c->memo_tick;
}

/* The stored version `version` (0: latest) of name, through the cache:
 * SQLITE_OK with a referenced entry; SQLITE_NOTFOUND without a message;
 * else an error naming fn (the table cannot be read, the row does not
 * load). */
static int acquire_stored(sx_conn *c, const char *fn, const char *base, int64_t version,
                          rt_model **out, char **errmsg)
{
    char err[SM_ERR_MAX];
    char *family = NULL;
    sx_store_ref ref;
    sx_store_memo *memo;
    int src, lrc;

    *out = NULL;
    src = sx_store_find_row(c->db, base, version, &ref, errmsg);
    if (src == SQLITE_NOTFOUND) return src;
    if (src != SQLITE_OK) return *errmsg ? sx_fail(errmsg, src, fn, "%s", *errmsg) : src;
    family = sx_store_family(c, base);
    if (!family) return sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
    memo = memo_find(c, &ref);
    if (memo) {
        /* unchanged since this connection hashed it */
        memo_ctx mc = {c->db, memo};
        lrc = rt_registry_acquire(memo->key, family, ref.version, load_memo_row, &mc, out, err);
    } else {
        sx_store_row row;
        lrc = sx_store_row_open(c->db, ref.rowid, &row, err);
        if (lrc == SM_OK) {
            lrc = rt_registry_acquire(row.key, family, ref.version, load_row, &row, out, err);
            if (lrc == SM_OK) memo_put(c, &row);
            sx_store_row_close(&row);
        }
    }
    sqlite3_free(family);
    if (lrc != SM_OK)
        return sx_fail(errmsg, sx_rc_from_sm(lrc), fn,
                       "cannot load model '%s' version %lld from the database: %s", base,
                       (long long)ref.version, err);
    return SQLITE_OK;
}

/* The latest stored version of name, 0 when there is none (or the store
 * cannot be read: the caller's message says what was asked for). */
static int64_t latest_version(sx_conn *c, const char *name)
{
    sx_store_ref latest;
    char *ignored = NULL;
    int found = sx_store_find_row(c->db, name, 0, &latest, &ignored) == SQLITE_OK;
    sqlite3_free(ignored);
    return found ? latest.version : 0;
}

int sx_model_acquire_stored(sx_conn *c, const char *fn, const char *name, int64_t version,
                            rt_model **out, char **errmsg)
{
    int64_t latest;
    int rc = acquire_stored(c, fn, name, version, out, errmsg);
    if (rc != SQLITE_NOTFOUND) return rc;
    if (version > 0 && (latest = latest_version(c, name)) > 0)
        return sx_fail(errmsg, SQLITE_NOTFOUND, fn,
                       "no version %lld of model '%s'; the latest is %lld", (long long)version,
                       name, (long long)latest);
    return sx_fail(errmsg, SQLITE_NOTFOUND, fn, "no model named '%s' is stored in this database",
                   name);
}

/* ---- names ---- */

int sx_model_name_check(const char *fn, const char *name, int for_store, char **errmsg)
{
    size_t n = strlen(name);
    if (n == 0 || n > SX_NAME_MAX)
        return sx_fail(errmsg, SQLITE_ERROR, fn, "model name '%s' must be 1 to %d bytes", name,
                       SX_NAME_MAX);
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p == '@' || *p < 0x20)
            return sx_fail(errmsg, SQLITE_ERROR, fn,
                           "model name '%s' may not contain '@' or control characters", name);
    if (for_store && !strcmp(name, "default"))
        return sx_fail(errmsg, SQLITE_ERROR, fn,
                       "'default' is reserved for the built-in model; choose another name");
    return SQLITE_OK;
}

char *sx_model_known(sx_conn *c)
{
    sqlite3_str *s = sqlite3_str_new(NULL);
    int count = 0, have_default = 0;
    sx_builtin b;

    for (sx_file_reg *r = c->files; r; r = r->next)
        if (!strcmp(r->name, "default")) have_default = 1;
    if (have_default || sx_builtin_get(&b)) {
        sqlite3_str_appendall(s, "default");
        count++;
    }
    for (sx_file_reg *r = c->files; r; r = r->next)
        if (strcmp(r->name, "default"))
            sqlite3_str_appendf(s, "%s%s", count++ ? ", " : "", r->name);
    sx_store_append_names(c->db, s, &count);
    if (!count) sqlite3_str_appendall(s, "none");
    return sqlite3_str_finish(s);
}

/* Splits "name@N" into base and N (0 when there is no valid suffix). */
static void split_version(const char *name, char *base, size_t cap, int64_t *version)
{
    const char *at = strrchr(name, '@');
    *version = 0;
    if (at && at[1]) {
        int64_t v = 0;
        const char *p = at + 1;
        for (; *p >= '0' && *p <= '9' && v < 1000000000; p++) v = v * 10 + (*p - '0');
        if (!*p && v > 0) {
            *version = v;
            snprintf(base, cap, "%.*s", (int)(at - name), name);
            return;
        }
    }
    snprintf(base, cap, "%s", name);
}

/* The key stamps every file a directory's model may be read from, each by
 * its own modification time, size and inode (so an edit of any one, or a
 * file replaced by another, is a new key): config.json, tokenizer.json,
 * vocab.txt, model.safetensors, modules.json and the Pooling module's
 * config.json that modules.json names (1_Pooling/config.json), which set
 * the embedding's pooling. Only config.json must exist (a missing tokenizer
 * or model.safetensors is the loader's error, which says what to do about
 * it). */
char *sx_model_dir_key(const char *path)
{
    char pool_file[128];
    const char *files[] = {"config.json",       "tokenizer.json", "vocab.txt",
                           "model.safetensors", "modules.json",   pool_file};
    char buf[PATH_MAX + 160];
    sqlite3_str *key = sqlite3_str_new(NULL);
    sm_pooling_files_of_dir(path, pool_file, sizeof pool_file);
    sqlite3_str_appendf(key, "file:%s", path);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        struct stat sb;
        if (!files[i][0]) continue;
        snprintf(buf, sizeof buf, "%s/%s", path, files[i]);
        if (stat(buf, &sb) != 0) {
            if (i == 0 || errno != ENOENT) {
                int e = errno;
                sqlite3_free(sqlite3_str_finish(key));
                errno = e;
                return NULL;
            }
            continue;
        }
        sqlite3_str_appendf(key, ":%s=%lld.%09ld,%lld,%llu", files[i], (long long)sb.st_mtim.tv_sec,
                            (long)sb.st_mtim.tv_nsec, (long long)sb.st_size,
                            (unsigned long long)sb.st_ino);
    }
    if (sqlite3_str_errcode(key) != SQLITE_OK) {
        sqlite3_free(sqlite3_str_finish(key));
        errno = ENOMEM;
        return NULL;
    }
    return sqlite3_str_finish(key);
}

int sx_model_acquire_dir(sqlite3 *db, const char *fn, const char *path, rt_model **out,
                         char **errmsg)
{
    char err[SM_ERR_MAX], canon[PATH_MAX];
    char *key = NULL;
    int rc, lrc;
    struct stat sb;

    *out = NULL;
    errno = 0;
    if (!realpath(path, canon) || stat(canon, &sb) != 0) {
        if (errno == ENOMEM) return sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
        return sx_fail(errmsg, SQLITE_ERROR, fn,
                       "cannot open model directory '%s': no such directory", path);
    }
    if (!S_ISDIR(sb.st_mode))
        return sx_fail(errmsg, SQLITE_ERROR, fn,
                       "'%s' is not a directory; expected a Hugging Face model directory "
                       "(config.json, vocab.txt or tokenizer.json, model.safetensors)",
                       path);
    errno = 0;
    key = sx_model_dir_key(canon);
    if (!key && errno == ENOMEM) /* the files are there; the key's text is not */
        return sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
    if (!key)
        return sx_fail(errmsg, SQLITE_ERROR, fn,
                       "'%s' is not a model directory; expected config.json, vocab.txt or "
                       "tokenizer.json, and model.safetensors in it",
                       path);
    dir_ctx dctx = {db, canon};
    lrc = rt_registry_acquire(key, NULL, 0, load_dir, &dctx, out, err);
    sqlite3_free(key);
    if (lrc == SM_ERR_INTERRUPTED)
        rc = sx_fail(errmsg, SQLITE_INTERRUPT, fn, "interrupted while loading '%s'", path);
    else if (lrc != SM_OK)
        rc = sx_fail(errmsg, sx_rc_from_sm(lrc), fn, "cannot load model from '%s': %s", path, err);
    else rc = SQLITE_OK;
    return rc;
}

/* A registration's entry, freed with what it holds. */
static void reg_free(sx_file_reg *r)
{
    rt_registry_release(r->model);
    sqlite3_free(r->name);
    sqlite3_free(r->path);
    sqlite3_free(r);
}

int sx_model_register(sx_conn *c, const char *fn, const char *name, const char *path, char **errmsg)
{
    sx_file_reg **pp, *r = NULL;
    rt_model *m = NULL;
    char canon[PATH_MAX];
    int rc;

    if ((rc = sx_model_name_check(fn, name, 0, errmsg)) != SQLITE_OK) return rc;
    for (pp = &c->files; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->name, name)) break;
    if (!path) { /* unregister */
        if (!*pp)
            return sx_fail(errmsg, SQLITE_NOTFOUND, fn,
                           "no model named '%s' was registered with sentiment_load()", name);
        r = *pp;
        *pp = r->next;
        reg_free(r);
        return SQLITE_OK;
    }
    if ((rc = sx_model_acquire_dir(c->db, fn, path, &m, errmsg)) != SQLITE_OK) return rc;
    if (!realpath(path, canon)) snprintf(canon, sizeof canon, "%s", path);
    if (*pp) { /* replace */
        r = *pp;
        char *p2 = sqlite3_mprintf("%s", canon);
        if (!p2) goto nomem;
        sqlite3_free(r->path);
        r->path = p2;
        rt_registry_release(r->model);
        r->model = m;
        return SQLITE_OK;
    }
    r = sqlite3_malloc(sizeof *r);
    if (!r) goto nomem;
    r->name = sqlite3_mprintf("%s", name);
    r->path = sqlite3_mprintf("%s", canon);
    if (!r->name || !r->path) {
        r->model = NULL;
        reg_free(r);
        goto nomem;
    }
    r->model = m;
    r->next = NULL;
    *pp = r; /* keep registration order: it is the listing order */
    return SQLITE_OK;
nomem:
    rt_registry_release(m);
    return sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
}

int sx_model_source(sx_conn *c, const char *name)
{
    sx_store_ref ref;
    char *ignored = NULL;
    int found;
    for (sx_file_reg *r = c->files; r; r = r->next)
        if (!strcmp(r->name, name)) return SX_SRC_FILE;
    found = sx_store_find_row(c->db, name, 0, &ref, &ignored) == SQLITE_OK;
    sqlite3_free(ignored);
    return found ? SX_SRC_DATABASE : 0;
}

void sx_model_unregister_all(sx_conn *c)
{
    while (c->files) {
        sx_file_reg *r = c->files;
        c->files = r->next;
        reg_free(r);
    }
}

int sx_model_resolve(sx_conn *c, const char *fn, const char *name, rt_model **out, char **errmsg)
{
    char base[SX_NAME_MAX + 32], err[SM_ERR_MAX];
    char *known = NULL;
    int64_t version = 0, found = 0;
    int rc;
    sx_builtin b;

    *out = NULL;
    if (!name) name = "default";
    if (strlen(name) > SX_NAME_MAX + 16)
        return sx_fail(errmsg, SQLITE_ERROR, fn, "model name is too long (%d bytes at most)",
                       SX_NAME_MAX);
    split_version(name, base, sizeof base, &version);

    /* 1. registered on this connection */
    for (sx_file_reg *r = c->files; r; r = r->next) {
        if (strcmp(r->name, base)) continue;
        if (version > 1)
            return sx_fail(errmsg, SQLITE_ERROR, fn,
                           "model '%s' was loaded from a directory and has only version 1; "
                           "got '%s'",
                           base, name);
        rt_registry_retain(r->model);
        *out = r->model;
        return SQLITE_OK;
    }

    /* 2. stored in the database */
    if (strcmp(base, "default")) {
        rc = acquire_stored(c, fn, base, version, out, errmsg);
        if (rc != SQLITE_NOTFOUND) return rc;
    }

    /* 3. built in */
    if (!strcmp(base, "default") && version <= 1 && sx_builtin_get(&b)) {
        rc = rt_registry_acquire("builtin", NULL, 0, load_builtin, NULL, out, err);
        if (rc != SM_OK)
            return sx_fail(errmsg, sx_rc_from_sm(rc), fn, "cannot load the built-in model: %s",
                           err);
        return SQLITE_OK;
    }

    known = sx_model_known(c);
    if (version > 0) found = latest_version(c, base);
    if (!strcmp(base, "default") && version <= 1)
        rc = sx_fail(errmsg, SQLITE_NOTFOUND, fn,
                     "no built-in model in this build; register one with SELECT "
                     "sentiment_load('default', '/path/to/model_dir') or name a model "
                     "(known: %s)",
                     known ? known : "none");
    else if (found > 0)
        rc = sx_fail(errmsg, SQLITE_NOTFOUND, fn,
                     "no version %lld of model '%s'; the latest is %lld", (long long)version, base,
                     (long long)found);
    else
        rc = sx_fail(errmsg, SQLITE_NOTFOUND, fn, "no model named '%s'; known: %s", name,
                     known ? known : "none");
    sqlite3_free(known);
    return rc;
}

/* ---- models kept in memory (train() results that could not be stored) ---- */

static int load_handed_over(void *ctx, bert_model **out, char *err)
{
    bert_model **pm = ctx;
    (void)err;
    *out = *pm;
    *pm = NULL; /* the registry owns it now, on success or failure */
    return SM_OK;
}

int sx_model_register_memory(sx_conn *c, const char *fn, const char *name, bert_model **model,
                             char **errmsg)
{
    static uint64_t counter; /* unique keys; guarded by the connection's use */
    char err[SM_ERR_MAX];
    char *key = NULL;
    rt_model *e = NULL;
    sx_file_reg *r = NULL, **pp;
    int rc;

    key = sqlite3_mprintf("mem:%p:%llu", (void *)c,
                          (unsigned long long)__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    if (!key) goto nomem;
    rc = rt_registry_acquire(key, NULL, 0, load_handed_over, model, &e, err);
    sqlite3_free(key);
    if (rc != SM_OK) return sx_from_sm(rc, fn, err, errmsg);
    for (pp = &c->files; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->name, name)) break;
    if (*pp) { /* replaces a registration of the same name */
        rt_registry_release((*pp)->model);
        sqlite3_free((*pp)->path);
        (*pp)->path = NULL;
        (*pp)->model = e;
        return SQLITE_OK;
    }
    r = sqlite3_malloc(sizeof *r);
    if (!r || !(r->name = sqlite3_mprintf("%s", name))) {
        sqlite3_free(r);
        rt_registry_release(e);
        goto nomem;
    }
    r->path = NULL;
    r->model = e;
    r->next = NULL;
    *pp = r;
    return SQLITE_OK;
nomem:
    bert_model_free(*model);
    *model = NULL;
    return sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
}

void sx_model_drop_memory(sx_conn *c, const char *name)
{
    for (sx_file_reg **pp = &c->files; *pp; pp = &(*pp)->next) {
        sx_file_reg *r = *pp;
        if (strcmp(r->name, name) || r->path) continue;
        *pp = r->next;
        rt_registry_release(r->model);
        sqlite3_free(r->name);
        sqlite3_free(r);
        return;
    }
}

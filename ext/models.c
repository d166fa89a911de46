/* models.c: from a model name in SQL to a loaded model.
 *
 * A name is looked up, exactly (never by prefix), in this order:
 *   1. models registered on this connection by sentiment_load(name, dir);
 *   2. models stored in the main database (sentiment_model_store), the
 *      latest version, or version N when written `name@N`;
 *   3. `default`: the built-in model, when this build has one.
 * Registering 'default' with sentiment_load() replaces the built-in model
 * for the connection; a stored model may not be called 'default'.
 *
 * Every model is loaded through the process-wide cache (registry.c) under a
 * key that says what the bytes are: "builtin", "file:<dir>:<mtime>:<size>"
 * or "db:<uid>", so connections share one copy and a changed file or a new
 * stored version is a different key. A file model is read once, when it is
 * registered: call sentiment_load() again after its files change.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "errors.h"
#include "sentiment_ext.h"

/* ---- loaders handed to the registry ---- */

static int load_dir(void *ctx, bert_model **out, char *err)
{
    return bert_model_load_dir((const char *)ctx, out, err);
}

static int load_builtin(void *ctx, bert_model **out, char *err)
{
    sx_builtin b;
    (void)ctx;
    if (!sx_builtin_get(&b)) return sm_error(err, SM_ERR_IO, "no built-in model in this build");
    return bert_model_load_buffers(b.config, b.config_len, b.vocab, b.vocab_len, b.weights,
                                   b.weights_len, out, err);
}

typedef struct store_ctx {
    sqlite3 *db;
    const char *uid;
} store_ctx;

static int load_store(void *ctx, bert_model **out, char *err)
{
    store_ctx *s = ctx;
    return sx_store_load(s->db, s->uid, out, err);
}

/* ---- names ---- */

int sx_model_name_check(const char *fn, const char *name, int for_store,
                        char **errmsg)
{
    size_t n = strlen(name);
    if (n == 0 || n > SX_NAME_MAX) {
        *errmsg = sqlite3_mprintf("%s: model name '%s' must be 1 to %d bytes", fn, name,
                                  SX_NAME_MAX);
        return 1;
    }
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (*p == '@' || *p < 0x20) {
            *errmsg = sqlite3_mprintf("%s: model name '%s' may not contain '@' or control "
                                      "characters",
                                      fn, name);
            return 1;
        }
    }
    if (for_store && !strcmp(name, "default")) {
        *errmsg = sqlite3_mprintf("%s: 'default' is reserved for the built-in model; "
                                  "choose another name",
                                  fn);
        return 1;
    }
    return 0;
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
        if (strcmp(r->name, "default")) sqlite3_str_appendf(s, "%s%s", count++ ? ", " : "", r->name);
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

char *sx_model_dir_key(const char *path)
{
    const char *files[] = {"config.json", "vocab.txt", "model.safetensors"};
    char buf[PATH_MAX + 32];
    long long mtime_ns = 0, size = 0;
    for (int i = 0; i < 3; i++) {
        struct stat sb;
        snprintf(buf, sizeof buf, "%s/%s", path, files[i]);
        if (stat(buf, &sb) != 0) return NULL;
        long long t = (long long)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
        if (t > mtime_ns) mtime_ns = t;
        size += (long long)sb.st_size;
    }
    return sqlite3_mprintf("file:%s:%lld:%lld", path, mtime_ns, size);
}

int sx_model_acquire_dir(const char *fn, const char *path, sx_model **out,
                         char **errmsg)
{
    char err[SM_ERR_MAX], canon[PATH_MAX];
    char *key = NULL;
    int rc = 1;
    struct stat sb;

    *out = NULL;
    errno = 0;
    if (!realpath(path, canon) || stat(canon, &sb) != 0) {
        if (errno == ENOMEM)
            *errmsg = sqlite3_mprintf("%s: out of memory", fn);
        else
            *errmsg = sqlite3_mprintf("%s: cannot open model directory '%s': no such directory",
                                      fn, path);
        goto end;
    }
    if (!S_ISDIR(sb.st_mode)) {
        *errmsg = sqlite3_mprintf("%s: '%s' is not a directory; expected a Hugging Face model "
                                  "directory (config.json, vocab.txt, model.safetensors)",
                                  fn, path);
        goto end;
    }
    errno = 0;
    key = sx_model_dir_key(canon);
    if (!key && errno == ENOMEM) { /* the files are there; the key's text is not */
        *errmsg = sqlite3_mprintf("%s: out of memory", fn);
        goto end;
    }
    if (!key) {
        *errmsg = sqlite3_mprintf("%s: '%s' is not a model directory; expected config.json, "
                                  "vocab.txt and model.safetensors in it",
                                  fn, path);
        goto end;
    }
    if (sx_registry_acquire(key, NULL, 0, load_dir, canon, out, err) != SM_OK) {
        *errmsg = sqlite3_mprintf("%s: cannot load model from '%s': %s", fn, path, err);
        goto end;
    }
    rc = 0;
end:
    sqlite3_free(key);
    return rc;
}

int sx_model_register(sx_conn *c, const char *fn, const char *name,
                      const char *path, char **errmsg)
{
    sx_file_reg **pp, *r = NULL;
    sx_model *m = NULL;
    char canon[PATH_MAX];

    if (sx_model_name_check(fn, name, 0, errmsg)) return 1;
    for (pp = &c->files; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->name, name)) break;
    if (!path) { /* unregister */
        if (!*pp) {
            *errmsg = sqlite3_mprintf("%s: no model named '%s' was registered with sentiment_load()",
                                      fn, name);
            return 1;
        }
        r = *pp;
        *pp = r->next;
        sx_registry_release(r->model);
        sqlite3_free(r->name);
        sqlite3_free(r->path);
        sqlite3_free(r);
        return 0;
    }
    if (sx_model_acquire_dir(fn, path, &m, errmsg)) return 1;
    if (!realpath(path, canon)) snprintf(canon, sizeof canon, "%s", path);
    if (*pp) { /* replace */
        r = *pp;
        char *p2 = sqlite3_mprintf("%s", canon);
        if (!p2) goto nomem;
        sqlite3_free(r->path);
        r->path = p2;
        sx_registry_release(r->model);
        r->model = m;
        return 0;
    }
    r = sqlite3_malloc(sizeof *r);
    if (!r) goto nomem;
    r->name = sqlite3_mprintf("%s", name);
    r->path = sqlite3_mprintf("%s", canon);
    if (!r->name || !r->path) {
        sqlite3_free(r->name);
        sqlite3_free(r->path);
        sqlite3_free(r);
        goto nomem;
    }
    r->model = m;
    r->next = NULL;
    *pp = r; /* keep registration order: it is the listing order */
    return 0;
nomem:
    sx_registry_release(m);
    *errmsg = sqlite3_mprintf("%s: out of memory", fn);
    return 1;
}

void sx_model_unregister_all(sx_conn *c)
{
    while (c->files) {
        sx_file_reg *r = c->files;
        c->files = r->next;
        sx_registry_release(r->model);
        sqlite3_free(r->name);
        sqlite3_free(r->path);
        sqlite3_free(r);
    }
}

int sx_model_resolve(sx_conn *c, const char *fn, const char *name,
                     sx_model **out, char **errmsg)
{
    char base[SX_NAME_MAX + 32], err[SM_ERR_MAX];
    char *uid = NULL, *key = NULL, *family = NULL, *known = NULL;
    int64_t version = 0, found = 0;
    int rc = 1, src;
    sx_builtin b;

    *out = NULL;
    if (!name) name = "default";
    if (strlen(name) > SX_NAME_MAX + 16) {
        *errmsg = sqlite3_mprintf("%s: model name is too long (%d bytes at most)", fn, SX_NAME_MAX);
        return 1;
    }
    split_version(name, base, sizeof base, &version);

    /* 1. registered on this connection */
    for (sx_file_reg *r = c->files; r; r = r->next) {
        if (strcmp(r->name, base)) continue;
        if (version > 1) {
            *errmsg = sqlite3_mprintf("%s: model '%s' was loaded from a directory and has only "
                                      "version 1; got '%s'",
                                      fn, base, name);
            return 1;
        }
        sx_registry_retain(r->model);
        *out = r->model;
        return 0;
    }

    /* 2. stored in the database */
    if (strcmp(base, "default")) {
        src = sx_store_find(c->db, base, version, &uid, &found, errmsg);
        if (src == SQLITE_OK) {
            store_ctx ctx = {c->db, uid};
            key = sqlite3_mprintf("db:%s", uid);
            family = sx_store_family(c->db, base);
            if (!key || !family) {
                *errmsg = sqlite3_mprintf("%s: out of memory", fn);
                goto end;
            }
            if (sx_registry_acquire(key, family, found, load_store, &ctx, out, err) != SM_OK) {
                *errmsg = sqlite3_mprintf("%s: cannot load model '%s' version %lld from "
                                          "the database: %s",
                                          fn, base, (long long)found, err);
                goto end;
            }
            rc = 0;
            goto end;
        }
        if (src != SQLITE_NOTFOUND) {
            char *inner = *errmsg;
            *errmsg = sqlite3_mprintf("%s: %s", fn, inner);
            sqlite3_free(inner);
            goto end;
        }
    }

    /* 3. built in */
    if (!strcmp(base, "default") && version <= 1 && sx_builtin_get(&b)) {
        if (sx_registry_acquire("builtin", NULL, 0, load_builtin, NULL, out, err) != SM_OK) {
            *errmsg = sqlite3_mprintf("%s: cannot load the built-in model: %s", fn, err);
            goto end;
        }
        rc = 0;
        goto end;
    }

    known = sx_model_known(c);
    if (version > 0) {
        char *ignored = NULL;
        if (sx_store_find(c->db, base, 0, &uid, &found, &ignored) != SQLITE_OK) found = 0;
        sqlite3_free(ignored);
    }
    if (!strcmp(base, "default") && version <= 1)
        *errmsg = sqlite3_mprintf("%s: no built-in model in this build; register one with "
                                  "SELECT sentiment_load('default', '/path/to/model_dir') "
                                  "or name a model (known: %s)",
                                  fn, known ? known : "none");
    else if (found > 0)
        *errmsg = sqlite3_mprintf("%s: no version %lld of model '%s'; the latest is %lld",
                                  fn, (long long)version, base, (long long)found);
    else
        *errmsg = sqlite3_mprintf("%s: no model named '%s'; known: %s", fn, name,
                                  known ? known : "none");
end:
    sqlite3_free(uid);
    sqlite3_free(key);
    sqlite3_free(family);
    sqlite3_free(known);
    return rc;
}

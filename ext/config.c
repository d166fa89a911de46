/* config.c: sentiment_config(key [, value]), this connection's settings.
 *
 *   SELECT sentiment_config('batch_size');        -- 32: read a setting
 *   SELECT sentiment_config('batch_size', 64);    -- 64: set it, returns it
 *
 * Keys (each connection has its own; they last until it closes):
 *   device      'auto' (default), 'cpu', 'cuda', 'cuda:N'. auto uses the GPU
 *               when the CUDA plugin finds one, else the CPU; cuda without
 *               a GPU is an error, never a silent fall-back. sentiment_device()
 *               says what is in use.
 *   threads     CPU threads, 0 (default) = all cores.
 *   batch_size  rows per encoder call in classify and sentiment_batch,
 *               1..4096, default 32.
 *   max_length  tokens per text including [CLS] and [SEP], 0 (default) =
 *               the model's maximum, else 2..65536 (capped by the model).
 *               Longer texts are truncated and counted.
 *   progress    'auto' (default: a progress line on stderr for long runs
 *               when stderr is a terminal), 'on' (also when it is not),
 *               'off'.
 *
 * Reading a setting works anywhere; setting one (the two-argument form) is
 * SQLITE_DIRECTONLY, so a view or trigger cannot change a connection.
 * Values may be given as INTEGER or as TEXT that is a whole number. A bad
 * key or value is an error naming the key, the value and what is allowed;
 * the setting is left unchanged. Changing device or threads drops the
 * connection's backend and workspaces; they are rebuilt on next use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sentiment_ext.h"

static const char *const k_progress[] = {"auto", "off", "on"};

/* Parses an integer argument; 0 on success. */
static int int_value(sqlite3_value *v, int64_t *out)
{
    switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER:
        *out = sqlite3_value_int64(v);
        return 0;
    case SQLITE_FLOAT: {
        double d = sqlite3_value_double(v);
        if (d != (double)(int64_t)d) return 1;
        *out = (int64_t)d;
        return 0;
    }
    case SQLITE_TEXT: {
        const char *t = (const char *)sqlite3_value_text(v);
        char *end;
        long long x;
        if (!t || !*t) return 1;
        x = strtoll(t, &end, 10);
        if (*end) return 1;
        *out = x;
        return 0;
    }
    default:
        return 1;
    }
}

static void result_setting(sqlite3_context *ctx, sx_conn *c, const char *key)
{
    if (!strcmp(key, "device")) sqlite3_result_text(ctx, c->device, -1, SQLITE_TRANSIENT);
    else if (!strcmp(key, "threads")) sqlite3_result_int(ctx, c->threads);
    else if (!strcmp(key, "batch_size")) sqlite3_result_int(ctx, c->batch_size);
    else if (!strcmp(key, "max_length")) sqlite3_result_int(ctx, c->max_length);
    else sqlite3_result_text(ctx, k_progress[c->progress], -1, SQLITE_STATIC);
}

static void fn_config(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char *fn = "sentiment_config()";
    const char *key = (const char *)sqlite3_value_text(argv[0]);
    const char *shown;
    char *errmsg = NULL;
    int64_t n = 0;

    if (!key || (strcmp(key, "device") && strcmp(key, "threads") && strcmp(key, "batch_size") &&
                 strcmp(key, "max_length") && strcmp(key, "progress"))) {
        errmsg = sqlite3_mprintf("%s: unknown key '%s'; known: device, threads, batch_size, "
                                 "max_length, progress",
                                 fn, key ? key : "NULL");
        goto end;
    }
    if (argc == 1) goto end;
    shown = (const char *)sqlite3_value_text(argv[1]);
    if (!shown) shown = "NULL";

    if (!strcmp(key, "device")) {
        if (sqlite3_value_type(argv[1]) != SQLITE_TEXT || strlen(shown) >= sizeof c->device) {
            errmsg = sqlite3_mprintf("%s: device must be auto, cpu, cuda or cuda:N, got '%s'",
                                     fn, shown);
            goto end;
        }
        if (sx_device_check(fn, shown, &errmsg)) goto end;
        if (strcmp(c->device, shown)) {
            strcpy(c->device, shown);
            sx_engine_reset(c);
        }
    } else if (!strcmp(key, "threads")) {
        if (int_value(argv[1], &n) || n < 0 || n > 1024) {
            errmsg = sqlite3_mprintf("%s: threads must be an integer from 0 (all cores) to "
                                     "1024, got '%s'",
                                     fn, shown);
            goto end;
        }
        if (c->threads != (int)n) {
            c->threads = (int)n;
            sx_engine_reset(c);
        }
    } else if (!strcmp(key, "batch_size")) {
        if (int_value(argv[1], &n) || n < 1 || n > 4096) {
            errmsg = sqlite3_mprintf("%s: batch_size must be an integer from 1 to 4096, got '%s'",
                                     fn, shown);
            goto end;
        }
        c->batch_size = (int)n;
    } else if (!strcmp(key, "max_length")) {
        if (int_value(argv[1], &n) || n < 0 || n == 1 || n > 65536) {
            errmsg = sqlite3_mprintf("%s: max_length must be 0 (the model's maximum) or an "
                                     "integer from 2 to 65536, got '%s'",
                                     fn, shown);
            goto end;
        }
        c->max_length = (int)n;
    } else {
        int i;
        for (i = 0; i < 3; i++)
            if (sqlite3_value_type(argv[1]) == SQLITE_TEXT && !strcmp(shown, k_progress[i])) break;
        if (i == 3) {
            errmsg = sqlite3_mprintf("%s: progress must be auto, on or off, got '%s'", fn, shown);
            goto end;
        }
        c->progress = i;
    }
end:
    if (errmsg) {
        sqlite3_result_error(ctx, errmsg, -1);
        sqlite3_free(errmsg);
    } else {
        result_setting(ctx, c, key);
    }
}

static const struct {
    const char *name;
    int nArg;
    int flags;
    void (*xFunc)(sqlite3_context *, int, sqlite3_value **);
} aFunc[] = {
    {"sentiment_config", 1, SQLITE_UTF8 | SQLITE_INNOCUOUS, fn_config},
    {"sentiment_config", 2, SQLITE_UTF8 | SQLITE_DIRECTONLY, fn_config},
};

int sx_register_config(sqlite3 *db, sx_conn *c)
{
    int rc = SQLITE_OK;
    for (size_t i = 0; i < sizeof aFunc / sizeof aFunc[0] && rc == SQLITE_OK; i++) {
        sx_conn_ref(c);
        rc = sqlite3_create_function_v2(db, aFunc[i].name, aFunc[i].nArg, aFunc[i].flags, c,
                                        aFunc[i].xFunc, NULL, NULL, sx_conn_unref);
    }
    return rc;
}

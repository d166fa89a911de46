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
 *   threads     CPU threads, 0 (default) = all cores this process may run
 *               on (its CPU affinity; tp_default_threads in
 *               model/core/thread_pool.h). The engine's own worker threads,
 *               created on first use and kept; when one cannot be
 *               created the work runs on fewer, with the same results.
 *   batch_size  rows per encoder call in classify and sentiment_batch,
 *               1..4096, default 32.
 *   max_length  tokens per text including [CLS] and [SEP], 0 (default) =
 *               the model's maximum, else 2..65536 (capped by the model).
 *               Longer texts are truncated and counted.
 *   progress    'auto' (default: a progress line on stderr for long runs
 *               when stderr is a terminal), 'on' (also when it is not),
 *               'off'.
 *   precision   how matrix products are computed: 'auto' (default: bf16 on
 *               a GPU, or $SENTIMENT_CUDA_PRECISION when that names one;
 *               on a CPU with AVX512-VNNI int8 for the built-in model
 *               (its accuracy under int8 measured; fp32 for weights that
 *               cannot be quantized) and fp32 for other models; fp32 on
 *               other CPUs),
 *               'fp32' (exact, the reference), 'tf32'
 *               (TF32 tensor cores), 'bf16' (BF16 operands, FP32
 *               accumulation; everything else stays FP32), 'bf16-fast'
 *               (the same converted inside cuBLAS) or 'int8' (CPU only).
 *               On a GPU the change applies to the live backend at once
 *               (sentiment_device() shows it) and to classify, sentiment()
 *               and train() alike.
 *               The CPU takes fp32 (FP32, exact parity with
 *               transformers), auto, bf16 on a CPU with AVX512-BF16 and int8 on
 *               a CPU with AVX512-VNNI. bf16: the encoder's linear layers
 *               use weights rounded once to BF16 with FP32 sums. int8: the
 *               same layers use weights quantized once to INT8 (symmetric,
 *               a scale per output), each token's input quantized on the
 *               fly to 8 bits (its own scale and zero point) and exact
 *               INT32 sums, dequantized in FP32 (cpu/gemm_int8.h); about
 *               2-3 times the FP32 speed of those layers, logits move by
 *               quantization error. Either way one packed copy per model
 *               is shared by all connections, for inference only (train()
 *               stays FP32). bf16 or int8 on a CPU without the
 *               instructions is an error, tf32 and bf16-fast an error
 *               saying a CUDA device is needed; a change drops the
 *               connection's backend and workspaces, rebuilt on next use.
 *               int8 with a CUDA device is an error (as is setting device
 *               cuda while the precision is int8); with device auto the
 *               backend is made to find out, so auto on a machine with a
 *               GPU refuses int8 too.
 *   long_text   how a text longer than max_length is read by sentiment(),
 *               sentiment_score(), sentiment_probs(), classify and
 *               sentiment_batch: 'truncate' (the first max_length tokens) or
 *               'windows' (up to 8 overlapping windows of max_length tokens,
 *               each 5/6 of a window after the last, their logits averaged;
 *               the rest of a longer text is cut). truncated counts texts
 *               longer than one window either way. Embeddings, train() and
 *               sentiment_explain always truncate.
 *   admin_functions  'on' (default) or 'off': off turns this connection's
 *               functions that read or write files, store, drop or train
 *               models or change settings (sentiment_load, sentiment_save,
 *               sentiment_use, sentiment_drop, sentiment_export, train and
 *               the two-argument sentiment_config itself) into an error that
 *               says so, for good: nothing turns them back on in that
 *               connection. For an application that runs SQL it did not
 *               write (Datasette turns them off for its visitors).
 *
 * Reading a setting works anywhere; setting one (the two-argument form) is
 * SQLITE_DIRECTONLY, so a view or trigger cannot change a connection.
 * Values may be given as INTEGER or as TEXT that is a whole number. A bad
 * key or value is an error naming the key, the value and what is allowed;
 * the setting is left unchanged. Changing device or threads drops the
 * connection's backend and workspaces; they are rebuilt on next use (with
 * the precision setting). Setting a GPU-only precision while the device is
 * auto and no backend exists yet makes the backend, to know whether it is a
 * GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/errors.h"
#include "ext/register.h"
#include "runtime/device.h"

static const char *const k_progress[] = {"auto", "off", "on"};

/* 1 when v is a whole number (INTEGER, a REAL without a fraction, TEXT of
 * digits), then in *out. */
static int whole_number(sqlite3_value *v, int64_t *out)
{
    switch (sqlite3_value_type(v)) {
    case SQLITE_INTEGER: *out = sqlite3_value_int64(v); return 1;
    case SQLITE_FLOAT: {
        double d = sqlite3_value_double(v);
        if (d != (double)(int64_t)d) return 0;
        *out = (int64_t)d;
        return 1;
    }
    case SQLITE_TEXT: {
        const char *t = (const char *)sqlite3_value_text(v);
        char *end;
        long long x;
        if (!t || !*t) return 0;
        x = strtoll(t, &end, 10);
        if (*end) return 0;
        *out = x;
        return 1;
    }
    default: return 0;
    }
}

static void result_setting(sqlite3_context *ctx, sx_conn *c, const char *key)
{
    /* NOLINTNEXTLINE(clang-analyzer-core.NonNullParamChecker): a NULL key is an error before */
    if (!strcmp(key, "device")) sqlite3_result_text(ctx, c->device, -1, SQLITE_TRANSIENT);
    else if (!strcmp(key, "threads")) sqlite3_result_int(ctx, c->threads);
    else if (!strcmp(key, "batch_size")) sqlite3_result_int(ctx, c->batch_size);
    else if (!strcmp(key, "max_length")) sqlite3_result_int(ctx, c->max_length);
    else if (!strcmp(key, "precision"))
        sqlite3_result_text(ctx, c->precision[0] ? c->precision : "auto", -1, SQLITE_TRANSIENT);
    else if (!strcmp(key, "admin_functions"))
        sqlite3_result_text(ctx, c->admin_off ? "off" : "on", -1, SQLITE_STATIC);
    else if (!strcmp(key, "long_text"))
        sqlite3_result_text(ctx, c->long_text_windows > 1 ? "windows" : "truncate", -1,
                            SQLITE_STATIC);
    else sqlite3_result_text(ctx, k_progress[c->progress], -1, SQLITE_STATIC);
}

/* sentiment_config('precision', v): validates v, checks it against the
 * device in use (making the backend when device is auto and none exists,
 * to know whether it is a GPU) and applies it to a live GPU backend. */
static int set_precision(sx_conn *c, const char *fn, sqlite3_value *v, const char *shown,
                         char **errmsg)
{
    char desc[sizeof c->engine.desc], err[SM_ERR_MAX];
    int rc;
    if (sqlite3_value_type(v) != SQLITE_TEXT || strlen(shown) >= sizeof c->precision)
        return sx_fail(errmsg, SQLITE_ERROR, fn,
                       "precision must be auto, fp32, tf32, bf16, bf16-fast or int8, got '%s'",
                       shown);
    if ((rc = sx_from_sm(rt_device_precision_check(shown, err), fn, err, errmsg)) != SQLITE_OK)
        return rc;
    /* a CPU-only precision with device auto: make the backend to know
     * whether it is a GPU (which refuses it below) */
    if (!c->engine.be && (!rt_device_precision_cpu_ok(shown) ||
                          (rt_device_precision_cpu_only(shown) && strcmp(c->device, "cpu")))) {
        if (!strcmp(c->device, "cpu"))
            return sx_fail(errmsg, SQLITE_ERROR, fn,
                           "precision '%s' %s; this connection runs on the CPU (device 'cpu')",
                           shown, rt_device_precision_cpu_why(shown));
        if ((rc = sx_engine_backend(c, fn, errmsg)) != SQLITE_OK) return rc;
    }
    if (c->engine.be) {
        /* Which weights the linear layers run may change (and differs per
         * model on the CPU: int8 only for checked models), so compare the
         * backend's choice before and after for both kinds of model. */
        backend *be = c->engine.be;
        int before[2] = {be->linear_pack_kind ? be->linear_pack_kind(be, 0) : 0,
                         be->linear_pack_kind ? be->linear_pack_kind(be, 1) : 0};
        snprintf(desc, sizeof desc, "%s", c->engine.desc);
        rc = rt_device_set_precision(be, shown, desc, sizeof desc, err);
        if ((rc = sx_from_sm(rc, fn, err, errmsg)) != SQLITE_OK) return rc;
        snprintf(c->engine.desc, sizeof c->engine.desc, "%s", desc);
        /* the workspaces hold the other precision's parameters */
        if (be->linear_pack_kind &&
            (be->linear_pack_kind(be, 0) != before[0] || be->linear_pack_kind(be, 1) != before[1]))
            sx_engine_reset(c);
    }
    snprintf(c->precision, sizeof c->precision, "%s", shown);
    return SQLITE_OK;
}

static void fn_config(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char *fn = "sentiment_config()";
    const char *key = (const char *)sqlite3_value_text(argv[0]);
    const char *shown;
    char *errmsg = NULL;
    int64_t n = 0;
    int rc = SQLITE_OK;

    if (sx_arg_has_nul(argv[0])) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn, "key contains a NUL byte");
        goto end;
    }
    if (!key || (strcmp(key, "device") && strcmp(key, "threads") && strcmp(key, "batch_size") &&
                 strcmp(key, "max_length") && strcmp(key, "progress") && strcmp(key, "precision") &&
                 strcmp(key, "admin_functions") && strcmp(key, "long_text"))) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                     "unknown key '%s'; known: device, threads, batch_size, max_length, "
                     "progress, precision, admin_functions, long_text",
                     key ? key : "NULL");
        goto end;
    }
    if (argc == 1) goto end;
    if (sx_admin_refused(ctx, c, fn)) return; /* 'off' is for good */
    shown = (const char *)sqlite3_value_text(argv[1]);
    if (!shown) shown = "NULL";
    if (sx_arg_has_nul(argv[1])) {
        rc = sx_fail(&errmsg, SQLITE_ERROR, fn, "value for '%s' contains a NUL byte", key);
        goto end;
    }

    if (!strcmp(key, "device")) {
        if (sqlite3_value_type(argv[1]) != SQLITE_TEXT || strlen(shown) >= sizeof c->device) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                         "device must be auto, cpu, cuda or cuda:N, got '%s'", shown);
            goto end;
        }
        char err[SM_ERR_MAX];
        if ((rc = sx_from_sm(rt_device_check(shown, err), fn, err, &errmsg)) != SQLITE_OK) goto end;
        if (!strcmp(shown, "cpu") && !rt_device_precision_cpu_ok(c->precision)) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                         "device 'cpu': precision '%s' %s; set "
                         "sentiment_config('precision', 'auto') first",
                         c->precision, rt_device_precision_cpu_why(c->precision));
            goto end;
        }
        if (strncmp(shown, "cuda", 4) == 0 && rt_device_precision_cpu_only(c->precision)) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                         "device '%s': precision '%s' runs on the CPU only; set "
                         "sentiment_config('precision', 'auto') first",
                         shown, c->precision);
            goto end;
        }
        if (strcmp(c->device, shown)) {
            strcpy(c->device, shown);
            sx_engine_reset(c);
        }
    } else if (!strcmp(key, "threads")) {
        if (!whole_number(argv[1], &n) || n < 0 || n > 1024) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                         "threads must be an integer from 0 (all cores) to 1024, got '%s'", shown);
            goto end;
        }
        if (c->threads != (int)n) {
            c->threads = (int)n;
            sx_engine_reset(c);
        }
    } else if (!strcmp(key, "batch_size")) {
        if (!whole_number(argv[1], &n) || n < 1 || n > 4096) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                         "batch_size must be an integer from 1 to 4096, got '%s'", shown);
            goto end;
        }
        c->batch_size = (int)n;
    } else if (!strcmp(key, "max_length")) {
        if (!whole_number(argv[1], &n) || n < 0 || n == 1 || n > 65536) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                         "max_length must be 0 (the model's maximum) or an integer from 2 to "
                         "65536, got '%s'",
                         shown);
            goto end;
        }
        c->max_length = (int)n;
    } else if (!strcmp(key, "precision")) {
        rc = set_precision(c, fn, argv[1], shown, &errmsg);
    } else if (!strcmp(key, "long_text")) {
        if (sqlite3_value_type(argv[1]) != SQLITE_TEXT ||
            (strcmp(shown, "truncate") && strcmp(shown, "windows"))) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn,
                         "long_text must be truncate or windows, got '%s'", shown);
            goto end;
        }
        c->long_text_windows = strcmp(shown, "windows") ? 0 : SX_LONG_TEXT_WINDOWS;
    } else if (!strcmp(key, "admin_functions")) {
        /* 'on' is only what it already is: once off, this branch is not
         * reached (sx_admin_refused above) */
        if (sqlite3_value_type(argv[1]) != SQLITE_TEXT ||
            (strcmp(shown, "off") && strcmp(shown, "on"))) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn, "admin_functions must be on or off, got '%s'",
                         shown);
            goto end;
        }
        c->admin_off = !strcmp(shown, "off");
    } else {
        int i;
        for (i = 0; i < 3; i++)
            if (sqlite3_value_type(argv[1]) == SQLITE_TEXT && !strcmp(shown, k_progress[i])) break;
        if (i == 3) {
            rc = sx_fail(&errmsg, SQLITE_ERROR, fn, "progress must be auto, on or off, got '%s'",
                         shown);
            goto end;
        }
        c->progress = i;
    }
end:
    if (rc == SQLITE_OK) result_setting(ctx, c, key);
    else if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
}

static const sx_func aFunc[] = {
    {"sentiment_config", 1, SQLITE_UTF8 | SQLITE_INNOCUOUS, fn_config},
    {"sentiment_config", 2, SQLITE_UTF8 | SQLITE_DIRECTONLY, fn_config},
};

int sx_register_config(sqlite3 *db, sx_conn *c)
{
    return sx_register_funcs(db, c, aFunc, sizeof aFunc / sizeof *aFunc);
}

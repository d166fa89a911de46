/* train.c: fine-tuning from SQL: the train() aggregate.
 *
 *   SELECT train('hotel', comment, label) FROM labeled_reviews;
 *   SELECT train('emotions', text, emotion,
 *                '{"base":"default","epochs":3,"lr":5e-5,"batch_size":32,
 *                  "max_length":128,"valid_fraction":0.1,"seed":42}') FROM weibo;
 *   SELECT train('scratch', text, label,
 *                '{"base":"none","layers":4,"hidden":256,"heads":4,
 *                  "intermediate":1024,"max_length":128,"epochs":10,"lr":5e-4}')
 *   FROM big_labeled_table;
 *
 * train(model, text, label [, options]) reads every row of its query, fits
 * a model to them and stores the result in this database as a new version
 * of `model` (the sentiment_model_store table, see storage.c). It returns a
 * JSON report:
 *   {"model":"hotel","version":2,"base":"default","head":"kept",
 *    "rows":1000,"skipped":3,"truncated":12,"train_rows":900,"valid_rows":100,
 *    "labels":["negative","positive"],"epochs":3,
 *    "train_loss":[0.52,0.31,0.22],"valid_accuracy":[0.89,0.92,0.91],
 *    "best_epoch":2,"best_accuracy":0.92,"steps":87,"seconds":41.2,
 *    "examples_per_sec":65.5,"device":"cpu: 4 threads, OpenBLAS ..."}
 * The stored model is usable at once: sentiment(text, 'hotel'), classify,
 * sentiment_models (with the report, less model and version, as `metrics`).
 * Earlier versions stay, selectable as 'hotel@1' (sentiment_use() makes one
 * current again: store_functions.c).
 *
 * Rows. `text` is converted as sentiment() converts it; NULL or blank text
 * (it tokenizes to nothing, see functions.c), and a NULL label, skip the
 * row (counted in "skipped").
 * A label is TEXT or INTEGER; an INTEGER label is its decimal text ('0',
 * '1', ...), so sentiment() answers '0'/'1' for such a model. REAL and BLOB
 * labels are errors. Texts are tokenized as they arrive (cut to max_length
 * tokens, counted in "truncated") and only the token ids are kept: about
 * 2 bytes per token plus 16 per row, see the README for rows per GiB. With
 * "base":"none" and no "vocab" the vocabulary is built from the texts, so
 * those texts are kept until the last row has been read.
 *
 * Classes. The distinct labels are the classes. When the base model's head
 * has exactly this label set it is kept (in the base's order), otherwise a
 * fresh head is trained, its labels in order (numeric order when every
 * label was an INTEGER, else byte order). At least 2 distinct labels and
 * TRAIN_MIN_ROWS (8) usable rows are needed. Before the classes are made,
 * option "labels" renames the data's labels; without it, when the data's
 * labels are the INTEGERs 0 and 1 and nothing else and the base's head is
 * exactly negative/positive (the built-in model), 0 is taken as negative
 * and 1 as positive (the convention of the public binary sets), so that
 * head is kept; the report then has "label_map" and "label_map_by"
 * ("convention" or "option").
 *
 * Options: the optional fourth argument, a JSON object (base, epochs, lr,
 * head_lr, labels, batch_size, accumulation, max_length, valid_fraction,
 * seed, weight_decay, warmup_ratio, grad_clip, dropout, group_by_length,
 * wide, and for "base":"none" the shape and vocabulary options). Every key,
 * its range and its default: the header comment of train_options.c.
 *
 * The wide part. With "wide", the rows' texts are kept too, and after the
 * encoder is trained (or, with "epochs": 0, kept as the base has it) a wide
 * part (model/encoder/wide.h) is fitted on the training rows and mixed
 * with the encoder on the validation rows (train_wide.c says how and why);
 * the report gets "wide": {...} with both parts' validation accuracy.
 * Without the option a base's wide part is kept with a kept head ("wide":
 * "kept" in the report) and dropped with a new one.
 *
 * The INT8 check ("int8_check", on by default; the texts are kept for it
 * too): last, the model classifies its validation rows on the CPU in FP32
 * and in INT8 (train_int8.c); the result goes into its config.json and the
 * report's "int8": {...}, and decides whether precision auto runs it in INT8
 * (model/format/int8_check.h).
 *
 * Errors, each before anything is written: an unknown base, a read-only
 * database, one whose write lock cannot be had (checked on the first row,
 * waiting as for the store, below), bad options, fewer than 2 labels or 8
 * rows, a diverging (NaN) loss, sqlite3_interrupt() (Ctrl-C in the shell;
 * training stops before the next micro-batch, well within a second for the
 * models this runs). Storing is one savepoint: the model, its version and
 * its training log are all written or none is (the two tables, when they
 * are missing, are created and committed first, since undoing a schema
 * change would abort the running statement). train() is SQLITE_DIRECTONLY,
 * and must run in a SELECT of its own: SQLite opens no savepoint while a
 * statement writes, so INSERT INTO t SELECT train(...) is an error (raised
 * on the first row). The report stays in sentiment_models.metrics.
 *
 * Waiting for the lock. SQLite calls the busy handler only for a connection
 * that holds no transaction, and train() stores from inside the SELECT that
 * reads its rows, so SQLite alone would fail at once (see "storing: the write
 * lock" below). train() retries for up to PRAGMA busy_timeout ms. If the
 * model still cannot be stored (locked, disk full, ...), it is kept in
 * memory on this connection under its name (sentiment_models source
 * 'memory'; sentiment(x, 'm') uses it) until the connection closes, a later
 * train() stores 'm', sentiment_save() stores it, or sentiment_load('m',
 * NULL) drops it, and the error says so:
 *   train(): model 'm' trained but not stored: database is locked (waited
 *   2000 ms, the busy_timeout); it is usable on this connection as 'm'
 *   (source 'memory' in sentiment_models) until the connection closes;
 *   store it with SELECT sentiment_save('m')
 *
 * Training log. Every optimizer step and every epoch end is recorded in
 * the table sentiment_train_log (created on first use) with the model's
 * name and version:
 *   model, version, kind ('step' or 'epoch'), epoch, step, loss (the step's
 *   mean loss, or the epoch's mean training loss), lr, grad_norm (before
 *   clipping; NULL for 'epoch'), valid_accuracy ('epoch' rows with a split),
 *   examples_per_sec, seconds (since training began)
 * While training runs, sentiment_training (train_status.c) shows each run in
 * the process with its latest step, and a progress line (epoch, step, loss,
 * examples/s, ETA) is printed on stderr when it is a terminal
 * (sentiment_config('progress')).
 *
 * Training runs on this connection's backend (sentiment_config('device'),
 * 'threads'); with the same rows in the same order, the same options and
 * the same thread count the CPU gives the same model bit for bit.
 *
 * Limitation: SQLite calls an aggregate's final step also when the
 * statement fails part-way, from the cleanup of the statement's registers
 * (vdbeaux.c releaseMemArray -> sqlite3VdbeMemFinalize), through the same
 * function the normal end uses (OP_AggFinal -> sqlite3VdbeMemFinalize).
 * In SQLite 3.40 everything the API shows is the same in both calls: the
 * statement is still busy, sqlite3_errcode() is 0 and sqlite3_errmsg()
 * "not an error" (the error is copied to the connection only after the
 * cleanup), the transaction state and sqlite3_aggregate_count() are the
 * same. train() sees its own errors and interrupts and then trains
 * nothing; an error raised elsewhere in the same statement (another
 * function, the source query) while rows are still being read is not
 * visible to it: the rows read before it are trained on and stored, and
 * the stored version's metrics ("rows") say how many.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/errors.h"
#include "encoder/bert_clone.h"
#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/errors.h"
#include "ext/models.h"
#include "ext/register.h"
#include "ext/results.h"
#include "ext/storage.h"
#include "ext/train_status.h"
#include "ext/train_int8.h"
#include "ext/train_options.h"
#include "ext/train_wide.h"
#include "format/file_read.h"
#include "format/safetensors.h"
#include "tokenize/vocab_builder.h"
#include "train/trainer.h"

#define TRAIN_MIN_ROWS 8
#define TRAIN_HEAD_LR 1e-3f

/* ---- the aggregate's state ---------------------------------------------- */

typedef struct tr_state {
    sx_conn *c;
    char name[SX_NAME_MAX + 1];
    sx_train_options o;
    rt_model *base;       /* referenced; NULL with "base":"none" */
    const tokenizer *tok; /* tokenizes rows as they arrive (NULL: kept texts) */
    tokenizer *own_tok;   /* "none" with a vocab file */
    char *vocab_file;     /* its text (malloc'd) */
    size_t vocab_file_len;
    vocab_builder *vb; /* "none" without a vocab file */
    char *texts;       /* the kept texts, back to back (malloc'd) */
    size_t texts_len, texts_cap;
    size_t *text_end; /* per kept row */
    int *text_label;
    int kept_cap;
    train_dataset *ds;
    int *ids; /* max_len scratch */
    int max_len;
    char **labels; /* first-appearance order (sqlite3_malloc'd) */
    int n_labels, cap_labels, all_int, last_label;
    int64_t rows, skipped, truncated;
    float head_lr;       /* what the head was trained at */
    int labels_mapped;   /* 1 by option "labels", 2 by the 0/1 convention */
    sx_wide_report wide; /* option "wide": what the fit did */
    char int8_why[256];  /* the INT8 check's verdict, for the report */
    int failed;
    /* during training */
    sqlite3_stmt *probe;   /* SELECT 1: fails with SQLITE_INTERRUPT after sqlite3_interrupt */
    sx_train_log_row *log; /* for sentiment_train_log */
    int n_log, cap_log;
    int log_failed;
    int progress_on;
    double progress_last;
    void *status; /* train_status.c entry */
} tr_state;

static void state_free(tr_state *s)
{
    if (!s) return;
    rt_registry_release(s->base);
    tokenizer_free(s->own_tok);
    free(s->vocab_file);
    vocab_builder_free(s->vb);
    free(s->texts);
    free(s->text_end);
    free(s->text_label);
    train_dataset_free(s->ds);
    free(s->ids);
    for (int i = 0; i < s->n_labels; i++) sqlite3_free(s->labels[i]);
    sqlite3_free(s->labels);
    sx_train_options_free(&s->o);
    sqlite3_finalize(s->probe);
    free(s->log);
    sx_train_status_end(s->status);
    sqlite3_free(s);
}

/* ---- storing: the write lock ---------------------------------------------
 *
 * train() writes from inside the SELECT that feeds it its rows, and that
 * statement holds a read transaction on the database. SQLite calls the busy
 * handler only for a connection that asks for a lock while it holds no
 * transaction: a reader asking to become the writer gets SQLITE_BUSY at
 * once (btree.c, sqlite3BtreeBeginTrans: a writer that waits for this
 * reader to finish could deadlock with it). So busy_timeout would never
 * apply. train() therefore waits itself: while the write lock is busy it
 * retries, sleeping in the steps of SQLite's default busy handler, until
 * the connection's busy_timeout (PRAGMA busy_timeout) is spent or
 * sqlite3_interrupt() is called. A handler set with sqlite3_busy_handler()
 * cannot be called through SQLite's API (busy_timeout then reads 0): no
 * wait. In WAL mode, once another connection has committed since the
 * statement began reading, its snapshot can never become the writer
 * (SQLITE_BUSY_SNAPSHOT): no wait either.
 *
 * The lock is taken for a moment on the first row (so a database that
 * cannot be written fails before anything is trained) and again to store.
 * Each try is storage.c's (sx_store_probe_write, sx_store_train_begin);
 * waiting between tries is this file's.
 */

static int busy_timeout_ms(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int ms = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA busy_timeout", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        ms = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return ms > 0 ? ms : 0;
}

static int on_interrupt(void *user);

/* Sleeps before the next try after `tries` busy ones; 1 when the timeout is
 * spent or the statement was interrupted (then *why says which). */
static int busy_wait(tr_state *s, int tries, int timeout_ms, int *waited_ms, const char **why)
{
    static const int steps[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100};
    int n = (int)(sizeof steps / sizeof steps[0]);
    int d = tries < n ? steps[tries] : steps[n - 1];
    if (*waited_ms >= timeout_ms) {
        *why = "timeout";
        return 1;
    }
    if (d > timeout_ms - *waited_ms) d = timeout_ms - *waited_ms;
    sqlite3_sleep(d);
    *waited_ms += d;
    if (on_interrupt(s)) {
        *why = "interrupted";
        return 1;
    }
    return 0;
}

/* The reason a busy lock was given up, appended to the SQLite message. */
static char *busy_reason(const char *msg, int ext, int waited_ms, int timeout_ms, const char *why)
{
    if (ext == SQLITE_BUSY_SNAPSHOT)
        return sqlite3_mprintf("%s (another connection wrote to the database after this "
                               "statement began reading it; waiting cannot help)",
                               msg);
    if (why && !strcmp(why, "interrupted"))
        return sqlite3_mprintf("%s (interrupted after waiting %d ms)", msg, waited_ms);
    if (!timeout_ms)
        return sqlite3_mprintf("%s (busy_timeout is 0: not waiting; set PRAGMA busy_timeout)", msg);
    return sqlite3_mprintf("%s (waited %d ms, the busy_timeout)", msg, waited_ms);
}

/* First row: can the model be stored at all? Takes the write lock for a
 * moment (waiting as described above) and gives it back; creates nothing.
 * An error is SQLite's code for the lock or the savepoint that failed. */
static int store_check(tr_state *s, char **errmsg)
{
    sqlite3 *db = s->c->db;
    int timeout = busy_timeout_ms(db), waited = 0, ext, rc, no_savepoint;
    const char *why = NULL;
    char *msg = NULL;
    for (int tries = 0;; tries++) {
        sqlite3_free(msg);
        msg = NULL;
        rc = sx_store_probe_write(db, &no_savepoint, &ext, &msg);
        if (no_savepoint) {
            rc = sx_fail(errmsg, rc, TRAIN_FN,
                         "cannot store model '%s' from inside a statement that writes "
                         "(INSERT ... SELECT train(...) or CREATE TABLE ... AS): run train() "
                         "in a SELECT of its own (%s)",
                         s->name, msg ? msg : sqlite3_errmsg(db));
            sqlite3_free(msg);
            return rc;
        }
        if (rc == SQLITE_OK) {
            sqlite3_free(msg);
            return SQLITE_OK;
        }
        if ((rc & 0xff) != SQLITE_BUSY || ext == SQLITE_BUSY_SNAPSHOT ||
            busy_wait(s, tries, timeout, &waited, &why))
            break;
    }
    {
        char *reason = (rc & 0xff) == SQLITE_BUSY
                           ? busy_reason(msg ? msg : "database is locked", ext, waited, timeout,
                                         why)
                           : sqlite3_mprintf("%s", msg ? msg : sqlite3_errstr(rc));
        rc = sx_fail(errmsg, rc, TRAIN_FN,
                     "model '%s' could not be stored in this database: %s; nothing was trained",
                     s->name, reason ? reason : "out of memory");
        sqlite3_free(reason);
    }
    sqlite3_free(msg);
    return rc;
}

/* First-row setup: name, options, base, tokenizer, dataset. */
static int state_init(tr_state *s, sqlite3_context *ctx, int argc, sqlite3_value **argv,
                      char **errmsg)
{
    char err[SM_ERR_MAX];
    const char *name;
    int vocab_size, rc;

    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                       "expected the name of the model to store (TEXT) as the first argument");
    if ((rc = sx_arg_name(argv[0], TRAIN_FN, "model name", &name, errmsg)) != SQLITE_OK ||
        (rc = sx_model_name_check(TRAIN_FN, name, 1, errmsg)) != SQLITE_OK)
        return rc;
    snprintf(s->name, sizeof s->name, "%s", name);
    if (argc > 3 && sqlite3_value_type(argv[3]) != SQLITE_NULL) {
        const char *opts;
        if (sqlite3_value_type(argv[3]) != SQLITE_TEXT)
            return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                           "options must be a JSON object (TEXT), e.g. '{\"epochs\":3}'");
        if ((rc = sx_arg_name(argv[3], TRAIN_FN, "options text", &opts, errmsg)) != SQLITE_OK ||
            (rc = sx_train_options_parse(opts, &s->o, errmsg)) != SQLITE_OK)
            return rc;
    } else if ((rc = sx_train_options_parse(NULL, &s->o, errmsg)) != SQLITE_OK) {
        return rc;
    }
    if (sqlite3_db_readonly(s->c->db, "main") == 1)
        return sx_fail(errmsg, SQLITE_READONLY, TRAIN_FN,
                       "the database is read-only; model '%s' cannot be stored (open it "
                       "read-write)",
                       s->name);
    (void)ctx;
    /* Storing needs a savepoint, which SQLite refuses while a statement
     * writes (INSERT ... SELECT train(...), CREATE TABLE ... AS), and the
     * write lock: say so now rather than after training. */
    if (!s->probe && sqlite3_prepare_v2(s->c->db, "SELECT 1", -1, &s->probe, NULL) != SQLITE_OK)
        return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
    if ((rc = store_check(s, errmsg)) != SQLITE_OK) return rc;
    if (!s->o.none) {
        char *inner = NULL;
        rc = sx_model_resolve(s->c, TRAIN_FN, s->o.base, &s->base, &inner);
        if (rc == SQLITE_NOTFOUND) {
            char *known = sx_model_known(s->c);
            if (!strcmp(s->o.base, "default"))
                rc = sx_fail(errmsg, rc, TRAIN_FN,
                             "no built-in model in this build to start from; name a base "
                             "model in the options, e.g. '{\"base\":\"hotel\"}' (known: %s), "
                             "or train from scratch with '{\"base\":\"none\"}'",
                             known ? known : "none");
            else
                rc = sx_fail(errmsg, rc, TRAIN_FN,
                             "unknown base model '%s'; known: %s, or \"none\" to train from "
                             "scratch",
                             s->o.base, known ? known : "none");
            sqlite3_free(known);
            sqlite3_free(inner);
            return rc;
        }
        if (rc != SQLITE_OK) { /* the base exists but cannot be loaded */
            sqlite3_free(*errmsg);
            *errmsg = inner;
            return rc;
        }
        int mx = bert_max_length(&s->base->bert->cfg);
        if (s->o.max_length > mx)
            return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                           "option 'max_length' must be %s (%d for base '%s'); got %d",
                           "an integer from 8 to the model's maximum length", mx, s->o.base,
                           s->o.max_length);
        s->max_len = s->o.max_length ? s->o.max_length : (mx < 128 ? mx : 128);
        s->tok = s->base->bert->tok;
    } else {
        s->max_len = s->o.max_length;
        if (s->o.vocab_path) {
            if ((rc = sm_file_read(s->o.vocab_path, SM_FILE_MAX_VOCAB, &s->vocab_file,
                                   &s->vocab_file_len, err)) != SM_OK)
                return sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "option 'vocab': %s", err);
            if ((rc = tokenizer_load_buffer(s->vocab_file, s->vocab_file_len, s->o.do_lower_case,
                                            &s->own_tok, err)) != SM_OK)
                return sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN,
                               "option 'vocab': '%s' is not a usable vocab.txt: %s",
                               s->o.vocab_path, err);
            s->tok = s->own_tok;
        } else if ((rc = vocab_builder_create(s->o.do_lower_case, &s->vb, err)) != SM_OK) {
            return sx_from_sm(rc, TRAIN_FN, err, errmsg);
        }
    }
    if (s->tok) {
        vocab_size = tokenizer_vocab_size(s->tok);
        s->ids = malloc((size_t)s->max_len * sizeof *s->ids);
        if (!s->ids || train_dataset_create(vocab_size, &s->ds, err) != SM_OK)
            return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
    }
    s->all_int = 1;
    s->last_label = -1;
    return SQLITE_OK;
}

/* The index of a label name in *out, adding it when new. */
static int label_index(tr_state *s, const char *label, size_t len, int *out, char **errmsg)
{
    if (s->last_label >= 0 && strlen(s->labels[s->last_label]) == len &&
        !memcmp(s->labels[s->last_label], label, len)) {
        *out = s->last_label;
        return SQLITE_OK;
    }
    for (int i = 0; i < s->n_labels; i++)
        if (strlen(s->labels[i]) == len && !memcmp(s->labels[i], label, len)) {
            *out = s->last_label = i;
            return SQLITE_OK;
        }
    if (s->n_labels >= BERT_MAX_LABELS)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN, "more than %d distinct labels",
                       BERT_MAX_LABELS);
    if (s->n_labels == s->cap_labels) {
        int cap = s->cap_labels ? 2 * s->cap_labels : 8;
        char **p = sqlite3_realloc64(s->labels, (sqlite3_uint64)cap * sizeof *p);
        if (!p) goto nomem;
        s->labels = p;
        s->cap_labels = cap;
    }
    s->labels[s->n_labels] = sqlite3_mprintf("%.*s", (int)len, label);
    if (!s->labels[s->n_labels]) goto nomem;
    *out = s->last_label = s->n_labels++;
    return SQLITE_OK;
nomem:
    return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
}

/* Keeps a row's text for tokenizing once the vocabulary is built: SQLITE_OK
 * or SQLITE_NOMEM. */
static int keep_text(tr_state *s, const char *text, size_t len, int label)
{
    if (s->texts_len + len > s->texts_cap) {
        size_t cap = s->texts_cap ? s->texts_cap : 65536;
        while (cap < s->texts_len + len) cap *= 2;
        char *p = realloc(s->texts, cap);
        if (!p) return SQLITE_NOMEM;
        s->texts = p;
        s->texts_cap = cap;
    }
    if (s->rows >= s->kept_cap) {
        int cap = s->kept_cap ? 2 * s->kept_cap : 1024;
        size_t *e = realloc(s->text_end, (size_t)cap * sizeof *e);
        if (!e) return SQLITE_NOMEM;
        s->text_end = e;
        int *l = realloc(s->text_label, (size_t)cap * sizeof *l);
        if (!l) return SQLITE_NOMEM;
        s->text_label = l;
        s->kept_cap = cap;
    }
    memcpy(s->texts + s->texts_len, text, len);
    s->texts_len += len;
    s->text_end[s->rows] = s->texts_len;
    s->text_label[s->rows] = label;
    return SQLITE_OK;
}

static void train_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    tr_state *s;
    char err[SM_ERR_MAX];
    char *errmsg = NULL;
    const char *text, *label;
    size_t len, label_len;
    int li = -1, n, trunc, rc, first;

    if (sx_admin_refused(ctx, sqlite3_user_data(ctx), TRAIN_FN)) return;
    if (!(s = sx_agg_state(ctx, sizeof *s, &first))) return;
    if (first) {
        s->c = sqlite3_user_data(ctx);
        if (state_init(s, ctx, argc, argv, &errmsg) != SQLITE_OK) goto fail;
    }
    if (s->failed) return;
    {
        /* the model is named once: a name that changes row to row is a
         * mistake (one model is trained), not a choice made on the first */
        const char *again = (const char *)sqlite3_value_text(argv[0]);
        if (sqlite3_value_type(argv[0]) != SQLITE_TEXT || !again || strcmp(again, s->name)) {
            sx_fail(&errmsg, SQLITE_ERROR, TRAIN_FN,
                    "the model name must be the same in every row; got '%s' in row %lld "
                    "after '%s'",
                    again ? again : "NULL", (long long)(s->rows + s->skipped + 1), s->name);
            goto fail;
        }
    }
    if (sx_value_text(argv[1], &text, &len) != SQLITE_OK) goto nomem;
    if (!text || sqlite3_value_type(argv[2]) == SQLITE_NULL) {
        s->skipped++;
        return;
    }
    switch (sqlite3_value_type(argv[2])) {
    case SQLITE_INTEGER: break;
    case SQLITE_TEXT: s->all_int = 0; break;
    default:
        sx_fail(&errmsg, SQLITE_ERROR, TRAIN_FN,
                "a label must be TEXT or INTEGER; got %s in row %lld",
                sqlite3_value_type(argv[2]) == SQLITE_FLOAT ? "a REAL" : "a BLOB",
                (long long)(s->rows + s->skipped + 1));
        goto fail;
    }
    label = (const char *)sqlite3_value_text(argv[2]);
    if (!label) goto nomem;
    label_len = (size_t)sqlite3_value_bytes(argv[2]);
    if (label_len == 0 || label_len >= BERT_LABEL_MAX || memchr(label, 0, label_len)) {
        sx_fail(&errmsg, SQLITE_ERROR, TRAIN_FN,
                "label '%.40s' in row %lld must be 1 to %d bytes of text", label,
                (long long)(s->rows + s->skipped + 1), BERT_LABEL_MAX - 1);
        goto fail;
    }
    if (label_index(s, label, label_len, &li, &errmsg) != SQLITE_OK) goto fail;
    if (s->tok) {
        if ((rc = tokenizer_encode(s->tok, text, len, s->max_len, s->ids, &n, &trunc, err)) !=
                SM_OK ||
            (rc = train_dataset_add(s->ds, s->ids, n, li, err)) != SM_OK) {
            sx_from_sm(rc, TRAIN_FN, err, &errmsg);
            goto fail;
        }
        s->truncated += trunc != 0;
        if ((s->o.wide == 1 || s->o.int8_check) && keep_text(s, text, len, li) != SQLITE_OK)
            goto nomem;
    } else {
        if ((rc = vocab_builder_add(s->vb, text, len, err)) != SM_OK) {
            sx_from_sm(rc, TRAIN_FN, err, &errmsg);
            goto fail;
        }
        if (keep_text(s, text, len, li) != SQLITE_OK) goto nomem;
    }
    s->rows++;
    return;
nomem:
    sx_fail(&errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory after %lld rows", (long long)s->rows);
fail:
    s->failed = 1;
    if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
}

/* ---- during training ---------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int on_interrupt(void *user)
{
    tr_state *s = user;
    sqlite3_reset(s->probe);
    return sqlite3_step(s->probe) == SQLITE_INTERRUPT;
}

static int on_progress(void *user, const trainer_progress *p)
{
    tr_state *s = user;
    if (s->n_log == s->cap_log) {
        int cap = s->cap_log ? 2 * s->cap_log : 256;
        sx_train_log_row *l = realloc(s->log, (size_t)cap * sizeof *l);
        if (!l) {
            s->log_failed = 1;
            return 1;
        }
        s->log = l;
        s->cap_log = cap;
    }
    sx_train_log_row *r = &s->log[s->n_log++];
    r->kind = p->loop.epoch_done;
    r->epoch = p->loop.epoch;
    r->step = p->loop.step;
    r->loss = p->loop.epoch_done ? p->loop.epoch_loss : p->loop.loss;
    r->lr = p->loop.lr;
    r->grad_norm = p->loop.epoch_done ? NAN : (double)p->loop.grad_norm;
    r->valid_accuracy = p->loop.epoch_done ? p->valid_accuracy : NAN;
    r->examples_per_sec = p->loop.examples_per_sec;
    r->seconds = p->loop.elapsed_sec;
    sx_train_status_update(s->status, p);
    if (s->progress_on) {
        double t = now_s();
        if (t - s->progress_last >= 0.25 || p->loop.step == p->loop.total_steps) {
            s->progress_last = t;
            fprintf(stderr,
                    "\rtrain %s: epoch %d/%d, step %ld/%ld, loss %.4f, %.0f examples/s, "
                    "ETA %.0fs   ",
                    s->name, p->loop.epoch, p->loop.epochs, p->loop.step, p->loop.total_steps,
                    r->loss, p->loop.examples_per_sec, p->loop.eta_sec);
            fflush(stderr);
        }
    }
    return 0;
}

/* ---- labels and the head ------------------------------------------------ */

static int cmp_label_text(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_label_int(const void *a, const void *b)
{
    long long x = strtoll(*(const char *const *)a, NULL, 10);
    long long y = strtoll(*(const char *const *)b, NULL, 10);
    return x < y ? -1 : x > y ? 1 : 0;
}

/* ---- learning rates, the report, storing, labels ------------------------ */

/* The encoder's default peak rate under a fresh head on a trained base
 * (option "lr" not given): 5e-5 (the usual BERT-base rate) times
 * (768 / hidden)^2, from 5e-5 to 1e-3: 1e-3 for the 128-wide built-in
 * model, 4.5e-4 at 256, 2e-4 at 384, 5e-5 at 768 and wider. Measured on
 * SMP2020-EWECT (6 emotions, 1 epoch, built-in base): a fresh head needs
 * the encoder to move as well, and a narrow encoder needs a larger rate
 * for it (see the README). A kept head keeps 5e-5. */
static float fresh_head_encoder_lr(int hidden)
{
    double r = 768.0 / (hidden > 0 ? hidden : 768);
    double lr = 5e-5 * r * r;
    if (lr < 5e-5) lr = 5e-5;
    if (lr > 1e-3) lr = 1e-3;
    return (float)lr;
}

/* The head's peak learning rate: the option, else TRAIN_HEAD_LR (or lr when
 * larger) for a fresh head on a trained encoder, else lr. A fresh head
 * starts from random weights and at the encoder's rate barely moves in one
 * epoch; the encoder, already trained, needs the small rate. */
static float train_head_lr(const sx_train_options *o, int kept)
{
    if (o->head_lr > 0) return o->head_lr;
    if (o->none || kept) return o->t.loop.lr;
    return o->t.loop.lr > TRAIN_HEAD_LR ? o->t.loop.lr : TRAIN_HEAD_LR;
}

static void json_num(sqlite3_str *s, double x)
{
    if (isfinite(x)) sqlite3_str_appendf(s, "%.6g", x);
    else sqlite3_str_appendall(s, "null");
}

/* x[0..n) as a JSON array of numbers (null where not finite). */
static void json_nums(sqlite3_str *j, const double *x, int n)
{
    sqlite3_str_appendchar(j, 1, '[');
    for (int i = 0; i < n; i++) {
        if (i) sqlite3_str_appendchar(j, 1, ',');
        json_num(j, x[i]);
    }
    sqlite3_str_appendchar(j, 1, ']');
}

/* x[0..n) as a JSON array of strings. */
static void json_strings(sqlite3_str *j, char *const *x, int n)
{
    sqlite3_str_appendchar(j, 1, '[');
    for (int i = 0; i < n; i++) {
        if (i) sqlite3_str_appendchar(j, 1, ',');
        sx_json_string(j, x[i]);
    }
    sqlite3_str_appendchar(j, 1, ']');
}

/* key (quoted, its colon and any comma before it) and x. */
static void json_key_num(sqlite3_str *j, const char *key, double x)
{
    sqlite3_str_appendall(j, key);
    json_num(j, x);
}

/* "wide": the fit's settings and figures, "kept", or null. */
static void report_wide(sqlite3_str *j, const tr_state *s, const bert_config *cfg)
{
    const sx_wide_report *w = &s->wide;
    sqlite3_str_appendall(j, ",\"wide\":");
    if (!w->done) {
        sqlite3_str_appendall(j, cfg->wide.set ? "\"kept\"" : "null");
        return;
    }
    sqlite3_str_appendf(j, "{\"buckets\":%d,\"ngram_range\":[%d,%d],\"l2\":", cfg->wide.buckets,
                        cfg->wide.ngram_min, cfg->wide.ngram_max);
    json_num(j, w->l2);
    sqlite3_str_appendf(j, ",\"mixed\":%s,\"mix_encoder\":", w->mixed ? "true" : "false");
    json_num(j, w->mix_encoder);
    json_key_num(j, ",\"mix_wide\":", w->mix_wide);
    json_key_num(j, ",\"valid_accuracy_encoder\":", w->valid_encoder);
    json_key_num(j, ",\"valid_accuracy_wide\":", w->valid_wide);
    json_key_num(j, ",\"valid_accuracy\":", w->valid_mixed);
    json_key_num(j, ",\"seconds\":", w->seconds);
    sqlite3_str_appendchar(j, 1, '}');
}

/* "int8": the check's figures (when it ran), whether precision auto runs
 * the model in INT8, and why. */
static void report_int8(sqlite3_str *j, const tr_state *s, const bert_config *cfg)
{
    sqlite3_str_appendall(j, ",\"int8\":{");
    if (cfg->int8_check.set) {
        const sm_int8_check *q = &cfg->int8_check;
        sqlite3_str_appendf(j, "\"rows\":%d,\"accuracy_fp32\":", q->rows);
        json_num(j, q->accuracy_fp32);
        json_key_num(j, ",\"accuracy_int8\":", q->accuracy_int8);
        json_key_num(j, ",\"agreement\":", q->agreement);
        sqlite3_str_appendchar(j, 1, ',');
    }
    sqlite3_str_appendf(j, "\"auto\":%s,\"why\":",
                        sm_int8_check_passes(&cfg->int8_check, NULL, 0) ? "true" : "false");
    sx_json_string(j, s->int8_why);
    sqlite3_str_appendchar(j, 1, '}');
}

/* The report (metrics when version is 0). */
static char *report_json(const tr_state *s, int64_t version, int kept, const bert_config *cfg,
                         const trainer_result *r)
{
    sqlite3_str *j = sqlite3_str_new(NULL);
    sqlite3_str_appendchar(j, 1, '{');
    if (version) {
        sqlite3_str_appendall(j, "\"model\":");
        sx_json_string(j, s->name);
        sqlite3_str_appendf(j, ",\"version\":%lld,", (long long)version);
    }
    sqlite3_str_appendall(j, "\"base\":");
    sx_json_string(j, s->o.base);
    sqlite3_str_appendf(j, ",\"head\":\"%s\"", s->o.none ? "new" : kept ? "kept" : "new");
    sqlite3_str_appendf(j,
                        ",\"rows\":%lld,\"skipped\":%lld,\"truncated\":%lld,"
                        "\"train_rows\":%d,\"valid_rows\":%d,\"labels\":",
                        (long long)s->rows, (long long)s->skipped, (long long)s->truncated,
                        r->n_train, r->n_valid);
    json_strings(j, cfg->id2label, cfg->num_labels);
    /* what each label of the data was trained as, when labels were renamed */
    if (s->labels_mapped == 1) sx_json_label_map(j, s->o.map_from, s->o.map_to, s->o.n_map);
    else if (s->labels_mapped == 2) sx_json_label_map(j, NULL, NULL, 0);
    sqlite3_str_appendf(j, ",\"max_length\":%d,\"epochs\":%d,\"lr\":", s->max_len, r->epochs);
    json_num(j, s->o.t.loop.lr);
    json_key_num(j, ",\"head_lr\":", s->head_lr);
    sqlite3_str_appendall(j, ",\"train_loss\":");
    json_nums(j, r->train_loss, r->epochs);
    sqlite3_str_appendall(j, ",\"valid_accuracy\":");
    json_nums(j, r->valid_accuracy, r->epochs);
    sqlite3_str_appendf(j, ",\"best_epoch\":%d,\"best_accuracy\":", r->best_epoch);
    json_num(j, r->best_accuracy);
    sqlite3_str_appendf(j, ",\"steps\":%ld,\"seconds\":", r->steps);
    json_num(j, r->seconds);
    json_key_num(j, ",\"examples_per_sec\":", r->examples_per_sec);
    report_wide(j, s, cfg);
    report_int8(j, s, cfg);
    sqlite3_str_appendall(j, ",\"device\":");
    sx_json_string(j, s->c->engine.desc);
    sqlite3_str_appendchar(j, 1, '}');
    if (sqlite3_str_errcode(j)) {
        sqlite3_free(sqlite3_str_finish(j));
        return NULL;
    }
    return sqlite3_str_finish(j);
}

/* Tokenizes the kept texts with the new model's tokenizer ("none" with a
 * built vocabulary). */
static int tokenize_kept(tr_state *s, const bert_model *m, char **errmsg)
{
    char err[SM_ERR_MAX];
    int n, trunc, rc;
    size_t start = 0;
    s->ids = malloc((size_t)s->max_len * sizeof *s->ids);
    if (!s->ids || train_dataset_create(tokenizer_vocab_size(m->tok), &s->ds, err) != SM_OK)
        return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
    for (int64_t i = 0; i < s->rows; i++) {
        size_t end = s->text_end[i];
        if ((rc = tokenizer_encode(m->tok, s->texts + start, end - start, s->max_len, s->ids, &n,
                                   &trunc, err)) != SM_OK ||
            (rc = train_dataset_add(s->ds, s->ids, n, s->text_label[i], err)) != SM_OK)
            return sx_from_sm(rc, TRAIN_FN, err, errmsg);
        s->truncated += trunc != 0;
        start = end;
    }
    if (s->o.wide != 1 && !s->o.int8_check) { /* else the wide part or the int8 check reads them */
        free(s->texts);
        s->texts = NULL;
    }
    return SQLITE_OK;
}

/* What the final step makes, step by step; freed in one place (made_free). */
typedef struct tr_made {
    bert_model *m; /* the model trained (NULL once kept in memory) */
    int kept;      /* 1: the base's head was kept */
    char **order;  /* (n_labels) the classes in their stored order */
    trainer_result res;
    /* the model serialised */
    char *config;         /* config.json (malloc'd) */
    const char *tok_name; /* "vocab.txt" or "tokenizer.json" */
    char *tok;            /* its text (malloc'd) */
    size_t tok_len;
    void *weights; /* model.safetensors (malloc'd) */
    size_t weights_len;
    char *labels_js; /* the classes as a JSON array (sqlite3_malloc'd) */
    char *metrics;   /* the report less model and version (sqlite3_malloc'd) */
    /* stored */
    int64_t version;
    char *report; /* train()'s result (sqlite3_malloc'd) */
} tr_made;

static void made_free(tr_made *t, int n_labels)
{
    if (t->order)
        for (int i = 0; i < n_labels; i++) sqlite3_free(t->order[i]);
    sqlite3_free(t->order);
    sqlite3_free(t->labels_js);
    sqlite3_free(t->metrics);
    sqlite3_free(t->report);
    free(t->config);
    free(t->tok);
    free(t->weights);
    trainer_result_free(&t->res);
    bert_model_free(t->m);
}

/* Stores the model and its training log in one savepoint, waiting for the
 * write lock as store_check does; made->version and made->report once
 * committed.
 * SQLITE_OK, or SQLite's code with *errmsg the reason (not naming the
 * function: the caller's message says what was not stored), the database
 * as it was. */
static int store_model(tr_state *s, tr_made *made, char **errmsg)
{
    const char *tok_name = made->tok_name, *tok = made->tok, *config = made->config;
    size_t tok_len = made->tok_len;
    int64_t *version = &made->version;
    char **report = &made->report;
    sqlite3 *db = s->c->db;
    int timeout = busy_timeout_ms(db), waited = 0, ext = SQLITE_OK, rc, committing = 0;
    const char *why = NULL;
    char *msg = NULL;
    for (int tries = 0;; tries++) {
        sx_store_txn t;
        sqlite3_free(msg);
        msg = NULL;
        rc = sx_store_train_begin(db, &t, &ext, &msg);
        if (!t.open) break;
        if (rc == SQLITE_OK) rc = sx_store_txn_alive(db, &msg);
        if (rc == SQLITE_OK)
            rc = sx_store_put(db, s->name, config, strlen(config),
                              strcmp(tok_name, "tokenizer.json") ? tok : NULL, tok_len,
                              strcmp(tok_name, "tokenizer.json") ? NULL : tok, tok_len,
                              made->labels_js, made->metrics, made->weights, made->weights_len,
                              version, &msg);
        if (rc == SQLITE_OK) rc = sx_store_train_log(db, s->name, *version, s->log, s->n_log, &msg);
        if (rc == SQLITE_OK) {
            /* before the commit: nothing may fail after it */
            *report = report_json(s, *version, made->kept, &made->m->cfg, &made->res);
            if (!*report) rc = sx_fail(&msg, SQLITE_NOMEM, NULL, "out of memory");
        }
        if (rc == SQLITE_OK) {
            rc = sx_store_train_commit(db, &t, &msg);
            if (rc == SQLITE_OK) return SQLITE_OK;
            sqlite3_free(*report);
            *report = NULL;
            *version = 0;
            committing = 1;
        }
        sx_store_train_rollback(db, &t);
        if (committing || (rc & 0xff) != SQLITE_BUSY || ext == SQLITE_BUSY_SNAPSHOT ||
            busy_wait(s, tries, timeout, &waited, &why))
            break;
    }
    {
        char *reason = (rc & 0xff) == SQLITE_BUSY && ext != SQLITE_OK
                           ? busy_reason(msg ? msg : "database is locked", ext, waited, timeout,
                                         why)
                           : sqlite3_mprintf("%s", msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(*errmsg);
        *errmsg = reason;
    }
    sqlite3_free(msg);
    return rc;
}

/* Renames the data's labels to the model's: by option "labels", else, on
 * a base whose head is exactly negative/positive, the labels 0 and 1 (the
 * convention of the public binary sets: 1 positive, 0 negative) when they
 * are the whole label set. The classes keep their dataset indices. */
static int map_labels(tr_state *s, char **errmsg)
{
    if (s->o.map_given) {
        for (int i = 0; i < s->n_labels; i++) {
            int j;
            for (j = 0; j < s->o.n_map; j++)
                if (!strcmp(s->o.map_from[j], s->labels[i])) break;
            if (j == s->o.n_map) {
                if (!s->o.n_map) continue; /* {}: the data's labels as they are */
                sqlite3_str *k = sqlite3_str_new(NULL);
                for (j = 0; j < s->o.n_map; j++)
                    sqlite3_str_appendf(k, "%s'%s'", j ? ", " : "", s->o.map_from[j]);
                char *keys = sqlite3_str_finish(k);
                int rc = sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                                 "label '%s' is in the data but not in option 'labels' (which "
                                 "maps %s); map every label of the data",
                                 s->labels[i], keys ? keys : "");
                sqlite3_free(keys);
                return rc;
            }
            char *t = sqlite3_mprintf("%s", s->o.map_to[j]);
            if (!t) goto nomem;
            sqlite3_free(s->labels[i]);
            s->labels[i] = t;
            s->labels_mapped = 1;
        }
        if (s->labels_mapped) s->all_int = 0;
        return SQLITE_OK;
    }
    if (s->o.none || !s->base || s->n_labels != 2 || !s->all_int) return SQLITE_OK;
    const bert_config *cfg = &s->base->bert->cfg;
    if (cfg->num_labels != 2 || bert_config_label_index(cfg, "negative") < 0 ||
        bert_config_label_index(cfg, "positive") < 0)
        return SQLITE_OK;
    int i0 = !strcmp(s->labels[0], "0") ? 0 : !strcmp(s->labels[1], "0") ? 1 : -1;
    int i1 = !strcmp(s->labels[0], "1") ? 0 : !strcmp(s->labels[1], "1") ? 1 : -1;
    if (i0 < 0 || i1 < 0) return SQLITE_OK;
    char *neg = sqlite3_mprintf("negative"), *pos = sqlite3_mprintf("positive");
    if (!neg || !pos) {
        sqlite3_free(neg);
        sqlite3_free(pos);
        goto nomem;
    }
    sqlite3_free(s->labels[i0]);
    sqlite3_free(s->labels[i1]);
    s->labels[i0] = neg;
    s->labels[i1] = pos;
    s->labels_mapped = 2;
    s->all_int = 0;
    return SQLITE_OK;
nomem:
    return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
}

/* "epochs": 0: no training, only the split's sizes for the report (the
 * wide part is fitted on the same split). */
static int split_only(const tr_state *s, const trainer_options *t, trainer_result *res, char *err)
{
    unsigned char *is_valid = malloc((size_t)s->rows + 1);
    int rc = is_valid ? trainer_valid_rows((int)s->rows, t, is_valid, err)
                      : sm_error(err, SM_ERR_NOMEM, "out of memory");
    memset(res, 0, sizeof *res);
    res->best_accuracy = NAN;
    for (int64_t i = 0; !rc && i < s->rows; i++) {
        if (is_valid[i]) res->n_valid++;
        else res->n_train++;
    }
    free(is_valid);
    return rc;
}

/* ---- the final step's steps ---------------------------------------------- */

/* What train() refuses once every row is read, before anything is
 * trained: an interrupt, too few rows or labels, a read-only database. */
static int check_rows_read(tr_state *s, char **errmsg)
{
    sqlite3 *db = s->c->db;
    if (!s->probe && sqlite3_prepare_v2(db, "SELECT 1", -1, &s->probe, NULL) != SQLITE_OK)
        return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
    if (on_interrupt(s))
        return sx_fail(errmsg, SQLITE_INTERRUPT, TRAIN_FN, "interrupted; nothing was stored");
    if (s->rows < TRAIN_MIN_ROWS)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                       "%lld usable rows (%lld skipped for a NULL or empty text or a NULL "
                       "label); need at least %d",
                       (long long)s->rows, (long long)s->skipped, TRAIN_MIN_ROWS);
    if (s->n_labels < 2)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                       "every row has the label '%s'; need at least 2 distinct labels",
                       s->labels[0]);
    if (sqlite3_db_readonly(db, "main") == 1)
        return sx_fail(errmsg, SQLITE_READONLY, TRAIN_FN,
                       "the database is read-only; model '%s' cannot be stored", s->name);
    return SQLITE_OK;
}

/* "base": "none": a model from scratch on the vocab file, or on a
 * vocabulary built from the kept texts. */
static int scratch_model(tr_state *s, bert_model **m, char **errmsg)
{
    char err[SM_ERR_MAX];
    const char *vtext = s->vocab_file;
    size_t vlen = s->vocab_file_len;
    char *built = NULL;
    int n_tokens = 0, rc;
    if (!vtext) {
        if ((rc = vocab_builder_build(s->vb, s->o.vocab_min_count, s->o.vocab_size, &built, &vlen,
                                      &n_tokens, err)) != SM_OK)
            return sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "building the vocabulary: %s", err);
        vtext = built;
    }
    rc = bert_model_create_scratch(&s->o.shape, vtext, vlen, s->o.do_lower_case, s->n_labels,
                                   (const char *const *)s->labels, s->o.t.loop.seed, m, err);
    free(built);
    if (rc != SM_OK)
        return sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "cannot create the model: %s", err);
    return SQLITE_OK;
}

/* The model to train, its head fitted to the labels in dataset order: one
 * from scratch (its rows tokenized now when the vocabulary was built from
 * them), or a copy of the base with its head kept (t->kept) or new.
 * "epochs": 0 trains nothing, so it needs the base's head kept. */
static int prepare_model(tr_state *s, tr_made *t, char **errmsg)
{
    char err[SM_ERR_MAX];
    int rc;
    if (s->o.none) {
        if ((rc = scratch_model(s, &t->m, errmsg)) != SQLITE_OK) return rc;
        if (!s->ds && (rc = tokenize_kept(s, t->m, errmsg)) != SQLITE_OK) return rc;
    } else if ((rc = bert_model_clone(s->base->bert, &t->m, err)) != SM_OK ||
               (rc = trainer_prepare_head(t->m, s->n_labels, (const char *const *)s->labels,
                                          s->o.t.loop.seed, &t->kept, err)) != SM_OK) {
        return sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "cannot prepare base model '%s': %s",
                       s->o.base, err);
    }
    if (s->o.t.loop.epochs == 0 && !t->kept)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                       "option 'epochs' 0 keeps the base's encoder and head, but base '%s' has "
                       "no head for these %d labels; train the encoder too (epochs >= 1)",
                       s->o.base, s->n_labels);
    return SQLITE_OK;
}

/* t->order, the classes as stored: a kept head's in the base's order (the
 * head's rows then go into dataset order for training:
 * bert_model_permute_head replaces id2label, so the order is copied
 * first), else the labels sorted (numerically when all were INTEGERs). */
static int stored_order(tr_state *s, tr_made *t, char **errmsg)
{
    char err[SM_ERR_MAX];
    int rc;
    t->order = sqlite3_malloc64((sqlite3_uint64)s->n_labels * sizeof *t->order);
    if (!t->order) return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
    for (int i = 0; i < s->n_labels; i++) t->order[i] = NULL;
    for (int i = 0; i < s->n_labels; i++) {
        t->order[i] = sqlite3_mprintf("%s", t->kept ? t->m->cfg.id2label[i] : s->labels[i]);
        if (!t->order[i]) return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
    }
    if (!t->kept) {
        qsort(t->order, (size_t)s->n_labels, sizeof *t->order,
              s->all_int ? cmp_label_int : cmp_label_text);
        return SQLITE_OK;
    }
    if ((rc = bert_model_permute_head(t->m, (const char *const *)s->labels, err)) != SM_OK)
        return sx_from_sm(rc, TRAIN_FN, err, errmsg);
    return SQLITE_OK;
}

/* Trains the model (or, with "epochs": 0, only splits the rows) with the
 * learning rates for its head, progress on stderr and in
 * sentiment_training, the log rows in s->log. */
static int run_training(tr_state *s, tr_made *t, char **errmsg)
{
    char err[SM_ERR_MAX];
    trainer_options o = s->o.t;
    int rc;
    o.loop.max_length = s->max_len;
    if (!s->o.lr_given && !s->o.none && !t->kept) {
        s->o.t.loop.lr = fresh_head_encoder_lr(t->m->cfg.hidden_size);
        o.loop.lr = s->o.t.loop.lr;
    }
    o.loop.head_lr = s->head_lr = train_head_lr(&s->o, t->kept);
    o.loop.interrupt = on_interrupt;
    o.progress = on_progress;
    o.loop.user = s;
    s->progress_on = s->c->progress == SX_PROGRESS_ON ||
                     (s->c->progress == SX_PROGRESS_AUTO && isatty(2));
    s->progress_last = now_s();
    s->status = sx_train_status_begin(s->name, s->o.base, (int64_t)s->rows);
    rc = o.loop.epochs ? trainer_run(t->m, s->c->engine.be, s->ds, &o, &t->res, err)
                       : split_only(s, &o, &t->res, err);
    sx_train_status_end(s->status);
    s->status = NULL;
    if (s->progress_on) {
        fprintf(stderr, "\r%*s\r", 100, "");
        fflush(stderr);
    }
    if (rc == SM_ERR_INTERRUPTED && s->log_failed) /* on_progress stopped it */
        return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN,
                       "out of memory for the training log; nothing was stored");
    if (rc != SM_OK)
        return sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "%s; nothing was stored", err);
    return SQLITE_OK;
}

/* The wide part: fitted (option "wide"), dropped ("wide": false), or the
 * base's kept as it is. */
static int fit_wide_part(tr_state *s, tr_made *t, char **errmsg)
{
    bert_model *m = t->m;
    if (s->o.wide == 0 && m->wide) {
        wide_part_free(m->wide);
        m->wide = NULL;
        m->cfg.wide.set = 0;
    }
    if (s->o.wide != 1) return SQLITE_OK;
    sx_wide_rows wr = {s->texts, s->text_end, s->text_label, (int)s->rows};
    return sx_train_fit_wide(&s->o, &wr, s->max_len, m, s->c->engine.be, on_interrupt, s, &s->wide,
                             errmsg);
}

/* The INT8 check of the validation rows (option "int8_check"), or its
 * absence said in the report. */
static int check_int8(tr_state *s, tr_made *t, char **errmsg)
{
    if (!s->o.int8_check) {
        t->m->cfg.int8_check.set = 0;
        snprintf(s->int8_why, sizeof s->int8_why, "not checked (\"int8_check\": false)");
        return SQLITE_OK;
    }
    sx_wide_rows wr = {s->texts, s->text_end, s->text_label, (int)s->rows};
    return sx_train_check_int8(&s->o, &wr, s->max_len, t->m, s->c->threads, on_interrupt, s,
                               s->int8_why, sizeof s->int8_why, errmsg);
}

/* The head's rows back in the stored order (t->order). */
static int head_in_stored_order(tr_made *t, char **errmsg)
{
    char err[SM_ERR_MAX];
    int rc = bert_model_permute_head(t->m, (const char *const *)t->order, err);
    return rc != SM_OK ? sx_from_sm(rc, TRAIN_FN, err, errmsg) : SQLITE_OK;
}

/* The model as the store keeps it: config.json, safetensors, its
 * tokenizer file, the classes as JSON and the metrics. */
static int serialise_model(tr_state *s, tr_made *t, char **errmsg)
{
    char err[SM_ERR_MAX];
    bert_model *m = t->m;
    int rc;
    if ((rc = bert_config_to_json(&m->cfg, &t->config, err)) != SM_OK ||
        (rc = bert_model_save_safetensors(m, ST_F32, &t->weights, &t->weights_len, err)) != SM_OK ||
        (rc = bert_model_tokenizer_file(m, &t->tok_name, &t->tok, &t->tok_len, err)) != SM_OK)
        return sx_fail(errmsg, sx_rc_from_sm(rc), TRAIN_FN, "cannot serialise the model: %s", err);
    sqlite3_str *j = sqlite3_str_new(NULL);
    json_strings(j, m->cfg.id2label, m->cfg.num_labels);
    t->labels_js = sqlite3_str_finish(j);
    t->metrics = report_json(s, 0, t->kept, &m->cfg, &t->res);
    if (!t->labels_js || !t->metrics)
        return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
    return SQLITE_OK;
}

/* Stores the model (unless interrupted first), replacing one kept in
 * memory under its name; when it cannot be stored, keeps it on this
 * connection instead (t->m handed over) and says so. */
static int store_or_keep(tr_state *s, tr_made *t, char **errmsg)
{
    if (on_interrupt(s))
        return sx_fail(errmsg, SQLITE_INTERRUPT, TRAIN_FN, "interrupted; nothing was stored");
    int rc = store_model(s, t, errmsg);
    if (rc == SQLITE_OK) {
        sx_model_drop_memory(s->c, s->name); /* a stored version replaces it */
        return SQLITE_OK;
    }
    /* Trained but not stored: keep the model on this connection. */
    char *reason = *errmsg, *inner = NULL;
    *errmsg = NULL;
    if (sx_model_register_memory(s->c, TRAIN_FN, s->name, &t->m, &inner) == SQLITE_OK) {
        /* the name inside an SQL string literal ('' for '): sx_fail's
         * format is checked as printf's, which has no %q */
        char *quoted = sqlite3_mprintf("%q", s->name);
        rc = sx_fail(errmsg, rc, TRAIN_FN,
                     "model '%s' trained but not stored: %s; it is usable on this "
                     "connection as '%s' (source 'memory' in sentiment_models) until the "
                     "connection closes; store it with SELECT sentiment_save('%s')",
                     s->name, reason ? reason : "out of memory", s->name,
                     quoted ? quoted : s->name);
        sqlite3_free(quoted);
    } else
        rc = sx_fail(errmsg, rc, TRAIN_FN,
                     "model '%s' trained but not stored: %s; it could not be kept in "
                     "memory either: %s",
                     s->name, reason ? reason : "out of memory", inner ? inner : "out of memory");
    sqlite3_free(reason);
    sqlite3_free(inner);
    return rc;
}

/* ---- the final step ----------------------------------------------------- */

static void train_final(sqlite3_context *ctx)
{
    tr_state **pp = sqlite3_aggregate_context(ctx, 0);
    tr_state *s = pp ? *pp : NULL;
    char *errmsg = NULL;
    tr_made t;

    if (!s) {
        sqlite3_result_error(ctx, "train(): no rows; need at least 8 rows with text and label", -1);
        return;
    }
    memset(&t, 0, sizeof t);
    if (!s->failed) { /* else the error is already the statement's */
        int rc = check_rows_read(s, &errmsg);
        if (rc == SQLITE_OK) rc = sx_engine_backend(s->c, TRAIN_FN, &errmsg);
        if (rc == SQLITE_OK) rc = map_labels(s, &errmsg);
        if (rc == SQLITE_OK) rc = prepare_model(s, &t, &errmsg);
        if (rc == SQLITE_OK) rc = stored_order(s, &t, &errmsg);
        if (rc == SQLITE_OK) rc = run_training(s, &t, &errmsg);
        if (rc == SQLITE_OK) rc = fit_wide_part(s, &t, &errmsg);
        if (rc == SQLITE_OK) rc = check_int8(s, &t, &errmsg);
        if (rc == SQLITE_OK) rc = head_in_stored_order(&t, &errmsg);
        if (rc == SQLITE_OK) rc = serialise_model(s, &t, &errmsg);
        if (rc == SQLITE_OK) rc = store_or_keep(s, &t, &errmsg);
        if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
        else if (t.report) {
            /* handed over, not copied: nothing can fail after the commit */
            sx_result_json(ctx, t.report);
            t.report = NULL;
        } else sqlite3_result_error_nomem(ctx);
    }
    sqlite3_free(errmsg);
    made_free(&t, s->n_labels);
    state_free(s);
    *pp = NULL;
}

int sx_register_training(sqlite3 *db, sx_conn *c)
{
    int rc;
    sx_conn_ref(c);
    rc = sqlite3_create_function_v2(db, "train", 3, SQLITE_UTF8 | SQLITE_DIRECTONLY | SX_JSON_FLAGS,
                                    c, NULL, train_step, train_final, sx_conn_unref);
    if (rc == SQLITE_OK) {
        sx_conn_ref(c);
        rc = sqlite3_create_function_v2(db, "train", 4,
                                        SQLITE_UTF8 | SQLITE_DIRECTONLY | SX_JSON_FLAGS, c, NULL,
                                        train_step, train_final, sx_conn_unref);
    }
    if (rc == SQLITE_OK) rc = sx_register_evaluate(db, c);
    if (rc == SQLITE_OK) rc = sx_register_train_status(db, c);
    return rc;
}

/* batch_window.c: sentiment_batch(), automatic batching of any expression.
 *
 *   SELECT id, sentiment_batch(title || ' ' || body)
 *              OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING)
 *   FROM reviews;
 *
 *   SELECT id, sentiment_batch(body, 'hotel')
 *              OVER (PARTITION BY shop ORDER BY id
 *                    ROWS BETWEEN CURRENT ROW AND 63 FOLLOWING)
 *   FROM reviews;
 *
 * Returns the same label as sentiment(expr [, model]) for each row, but
 * classifies rows in batches like classify (which needs a table or a query
 * as text; this works on any expression in any query). It is an aggregate
 * window function: the window frame is the current row and the next N
 * rows; when the current row has not been classified yet, the frame's
 * not-yet-classified rows from the current row on go to the engine, at most
 * one batch of sentiment_config('batch_size') rows per lane of the backend
 * (one per CPU thread) in one call, so each result costs at most about one
 * batch's time, however large the frame (UNBOUNDED FOLLOWING too). Between
 * those calls SQLite runs the query's own opcodes, and each call first
 * checks for interruption (sx_poll: sqlite3_interrupt() or the connection's
 * progress handler, Datasette's time limit), so a long query stops within a
 * batch of being asked to, with SQLITE_INTERRUPT ("interrupted"). N = 255 is
 * a good default; larger N uses more memory (the frame's texts are kept
 * until classified) and does not batch better than batch_size.
 *
 * The frame must be exactly `ROWS BETWEEN CURRENT ROW AND N FOLLOWING` (N
 * >= 0, or UNBOUNDED FOLLOWING to classify a whole partition at once).
 * Other frames would return another row's label. Frames that move row by
 * row differently (ORDER BY without a frame, n PRECEDING ...) are detected
 * and reported as an error ("use OVER (ROWS BETWEEN CURRENT ROW AND 255
 * FOLLOWING)"), as is a call without OVER. One case cannot be detected:
 * SQLite computes a whole-partition frame (`OVER ()`, `OVER (PARTITION BY
 * x)`, UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) once and gives that one
 * value to every row of the partition, which here is the first row's
 * label. Do not use those frames. The model argument is read from
 * the first row. NULL, empty and white-space text give NULL; other values
 * are converted as sentiment() does.
 */
#include <string.h>

#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/models.h"
#include "ext/register.h"
#include "ext/results.h"

static const char *const k_fn = "sentiment_batch()";
static const char *const k_usage =
    "sentiment_batch(): use it as a window function over the current row and the rows after "
    "it: sentiment_batch(text [, model]) OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING)";

enum { ROW_PENDING, ROW_DONE, ROW_NULL };

typedef struct window_row {
    char *text;
    size_t len;
    int state;
    int label;
} window_row;

/* The aggregate context (zeroed by SQLite on first use). */
typedef struct window_ctx {
    rt_model *m;
    window_row *q; /* ring buffer of the frame's rows */
    int head, count, cap;
    sqlite3_int64 steps, values, inverses_since_value;
    int failed;
    sx_poll poll; /* begun at the first engine call, ended in
                                windowFinal: one statement for the whole query,
                                so its opcode count (what the progress
                                handler is called on) accumulates */
    int polling;
} window_ctx;

static window_row *row_at(window_ctx *p, int i)
{
    return &p->q[(p->head + i) % p->cap];
}

static int push(window_ctx *p, char *text, size_t len, int state)
{
    if (p->count == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        window_row *q = sqlite3_malloc64((sqlite3_uint64)cap * sizeof *q);
        if (!q) return SQLITE_NOMEM;
        for (int i = 0; i < p->count; i++) q[i] = *row_at(p, i);
        sqlite3_free(p->q);
        p->q = q;
        p->cap = cap;
        p->head = 0;
    }
    window_row *r = &p->q[(p->head + p->count) % p->cap];
    r->text = text;
    r->len = len;
    r->state = state;
    r->label = -1;
    p->count++;
    return SQLITE_OK;
}

static void fail(sqlite3_context *ctx, window_ctx *p, const char *msg)
{
    if (p) p->failed = 1;
    sqlite3_result_error(ctx, msg, -1);
}

static void windowStep(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    window_ctx *p = sqlite3_aggregate_context(ctx, sizeof *p);
    const char *text;
    char *copy = NULL, *errmsg = NULL;
    size_t len;

    if (!p) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (p->failed) return;
    if (!p->m) {
        const char *name = NULL;
        if (argc > 1) {
            if (sqlite3_value_type(argv[1]) == SQLITE_NULL) {
                fail(ctx, p,
                     "sentiment_batch(): model name is NULL; expected a name from "
                     "sentiment_models, e.g. 'default'");
                return;
            }
            if (sx_arg_name(argv[1], k_fn, "model name", &name, &errmsg) != SQLITE_OK) {
                if (!errmsg) goto nomem;
                fail(ctx, p, errmsg);
                sqlite3_free(errmsg);
                return;
            }
        }
        if (sx_model_resolve(c, k_fn, name, &p->m, &errmsg) != SQLITE_OK) {
            if (!errmsg) goto nomem;
            fail(ctx, p, errmsg);
            sqlite3_free(errmsg);
            return;
        }
    }
    if (sx_value_text(argv[0], &text, &len) != SQLITE_OK) goto nomem;
    if (text) {
        copy = sqlite3_malloc64(len + 1);
        if (!copy) goto nomem;
        memcpy(copy, text, len);
        copy[len] = 0;
    }
    if (push(p, copy, len, copy ? ROW_PENDING : ROW_NULL) != SQLITE_OK) goto nomem;
    p->steps++;
    return;
nomem:
    sqlite3_free(copy);
    p->failed = 1;
    sqlite3_result_error_nomem(ctx);
}

static void windowInverse(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    window_ctx *p = sqlite3_aggregate_context(ctx, sizeof *p);
    (void)argc;
    (void)argv;
    if (!p || p->count == 0) return;
    sqlite3_free(p->q[p->head].text);
    p->q[p->head].text = NULL;
    p->head = (p->head + 1) % p->cap;
    p->count--;
    p->inverses_since_value++;
}

/* Classifies the pending rows of the frame from the current row on, at
 * most one batch per lane of them, in one engine call. */
static int classify_pending(sqlite3_context *ctx, window_ctx *p)
{
    sx_conn *c = sqlite3_user_data(ctx);
    const char **texts = NULL;
    size_t *lens = NULL;
    float *probs = NULL;
    int *idx = NULL, n = 0, rc = SQLITE_NOMEM;
    int K = p->m->bert->cfg.num_labels;
    int bs = c->batch_size > 0 ? c->batch_size : 1;
    int lanes = sx_engine_parallel_batches(c);
    char *errmsg = NULL;

    if (!p->polling) {
        sx_poll_begin(&p->poll, c->db);
        p->polling = 1;
    }
    if (sx_poll_stop(&p->poll)) {
        sqlite3_result_error_code(ctx, SQLITE_INTERRUPT);
        return SQLITE_INTERRUPT;
    }
    int most = lanes > 1 && bs <= p->count / lanes ? bs * lanes : bs;
    if (most > p->count) most = p->count;
    texts = sqlite3_malloc64((sqlite3_uint64)most * sizeof *texts);
    lens = sqlite3_malloc64((sqlite3_uint64)most * sizeof *lens);
    idx = sqlite3_malloc64((sqlite3_uint64)most * sizeof *idx);
    probs = sqlite3_malloc64((sqlite3_uint64)most * K * sizeof *probs);
    if (!texts || !lens || !idx || !probs) {
        sqlite3_result_error_nomem(ctx);
        goto end;
    }
    for (int i = 0; i < p->count && n < most; i++) {
        window_row *r = row_at(p, i);
        if (r->state != ROW_PENDING) continue;
        texts[n] = r->text;
        lens[n] = r->len;
        idx[n++] = i;
    }
    rc = sx_engine_classify(c, k_fn, p->m, texts, lens, n, bs, probs, NULL, &errmsg);
    if (rc != SQLITE_OK) {
        if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
        else sqlite3_result_error_nomem(ctx);
        goto end;
    }
    for (int j = 0; j < n; j++) {
        window_row *r = row_at(p, idx[j]);
        r->label = sx_argmax(probs + (size_t)j * K, K);
        r->state = ROW_DONE;
        sqlite3_free(r->text); /* no longer needed */
        r->text = NULL;
    }
    rc = SQLITE_OK;
end:
    sqlite3_free(texts);
    sqlite3_free(lens);
    sqlite3_free(idx);
    sqlite3_free(probs);
    sqlite3_free(errmsg);
    return rc;
}

static void windowValue(sqlite3_context *ctx)
{
    window_ctx *p = sqlite3_aggregate_context(ctx, sizeof *p);
    window_row *r;

    if (!p) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (p->failed) {
        sqlite3_result_error(ctx, "sentiment_batch(): failed on an earlier row", -1);
        return;
    }
    /* With the frame CURRENT ROW .. N FOLLOWING, exactly one row leaves the
     * frame between two results; anything else is another frame. */
    if (p->values > 0 && p->inverses_since_value != 1) {
        fail(ctx, p, k_usage);
        return;
    }
    p->inverses_since_value = 0;
    p->values++;
    if (p->count == 0 || !p->m) return; /* NULL */
    r = row_at(p, 0);
    if (r->state == ROW_PENDING && classify_pending(ctx, p) != SQLITE_OK) {
        p->failed = 1;
        return;
    }
    if (r->state == ROW_DONE)
        sqlite3_result_text(ctx, p->m->bert->cfg.id2label[r->label], -1, SQLITE_TRANSIENT);
}

/* Also runs for a statement that fails part-way, and for an empty
 * partition, where the context was never allocated. */
static void windowFinal(sqlite3_context *ctx)
{
    window_ctx *p = sqlite3_aggregate_context(ctx, 0);
    if (!p) return;
    if (!p->failed && p->steps > 0 && p->values < p->steps) sqlite3_result_error(ctx, k_usage, -1);
    for (int i = 0; i < p->count; i++) sqlite3_free(row_at(p, i)->text);
    sqlite3_free(p->q);
    p->q = NULL;
    p->count = 0;
    if (p->polling) sx_poll_end(&p->poll);
    p->polling = 0;
    rt_registry_release(p->m);
    p->m = NULL;
}

int sx_register_batch_window(sqlite3 *db, sx_conn *c)
{
    int rc = SQLITE_OK;
    for (int nArg = 1; nArg <= 2 && rc == SQLITE_OK; nArg++) {
        sx_conn_ref(c);
        rc = sqlite3_create_window_function(db, "sentiment_batch", nArg,
                                            SQLITE_UTF8 | SQLITE_INNOCUOUS, c, windowStep,
                                            windowFinal, windowValue, windowInverse, sx_conn_unref);
    }
    return rc;
}

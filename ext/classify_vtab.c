/* classify_vtab.c: classify, batched classification of a table or query.
 *
 * As a table-valued function (eponymous virtual table):
 *
 *   SELECT id, label, score, probs FROM classify('reviews', 'comment');
 *   SELECT id, label FROM classify('reviews', 'comment', 'hotel');
 *   SELECT * FROM classify('SELECT id, title || body FROM reviews WHERE y = 2024');
 *   SELECT * FROM classify('SELECT id, body FROM reviews', 'hotel');
 *   CREATE TABLE review_labels AS
 *       SELECT id, label, score FROM classify('reviews', 'comment');
 *
 * As a persistent virtual table over a source:
 *
 *   CREATE VIRTUAL TABLE labels USING classify(reviews, comment, hotel);
 *   SELECT * FROM labels;                  -- every row, classified in batches
 *   SELECT label FROM labels WHERE id = 7; -- classifies just that row
 *
 * Arguments (hidden columns source, column, model, batch_size, long_text; in
 * CREATE VIRTUAL TABLE the first three, quoted or not):
 *   source      a table name (id = its rowid, text = `column`), or one
 *               query starting with SELECT, WITH or VALUES that returns
 *               exactly two columns, the id and the text. A query source
 *               takes the model as its second argument.
 *   column      the text column of a table source.
 *   model       a model name as for sentiment() (default 'default').
 *   batch_size  rows per encoder call (default sentiment_config('batch_size')).
 *   long_text   'truncate' or 'windows': how a text longer than max_length
 *               is read, for this query (default sentiment_config('long_text')):
 *                 SELECT * FROM classify('reviews', 'comment', 'default', 64, 'windows');
 *                 SELECT * FROM classify('reviews', 'comment') WHERE long_text = 'windows';
 * Hidden-column arguments given in a query take precedence over the ones a
 * persistent table was created with.
 *
 * Columns: id (the source's id value, unchanged, so it joins back), label
 * TEXT, score REAL and probs TEXT (as sentiment(), sentiment_score() and
 * sentiment_probs() would give), truncated INTEGER (1 when the text was cut
 * to max_length), and the hidden column embedding: the text's pooled
 * sentence embedding as sentiment_embed() gives it (a little-endian
 * float32 BLOB, embed.c), computed only when a query names it:
 *
 *   SELECT id, embedding FROM classify('docs', 'body', 'e5');
 *   INSERT INTO vec_docs(rowid, embedding)             -- sqlite-vec
 *       SELECT id, embedding FROM classify('docs', 'body', 'e5');
 *
 * A query that reads embedding and none of label, score and probs runs no
 * classification head, so an encoder without one (a sentence-embedding
 * model) serves it; one that reads both runs the encoder twice per batch.
 * The hidden column explanation is sentiment_explain(text, model)'s JSON
 * (explain.c: each token's span and attribution to the label), computed
 * only when a query names it, row by row after its batch (integrated
 * gradients with the default 32 steps, about 100 passes of the text each):
 *
 *   SELECT id, label, explanation FROM classify('reviews', 'comment') LIMIT 20;
 * Exactly one output row per source row, in source order;
 * a row whose text is NULL, empty or white space has NULL label, score,
 * probs, truncated and embedding. Texts are converted as sentiment() does (numbers as
 * text, blobs as UTF-8 bytes).
 *
 * How it runs: rows are read 4 x batch_size x (CPU threads) at a time and go
 * to the engine in one call, which orders them by length so padding is small
 * and runs one batch of batch_size per thread concurrently; results come
 * back in source order. A progress line (rows, rows/s, ETA)
 * appears on stderr when it is a terminal (sentiment_config('progress')).
 * sqlite3_interrupt() (Ctrl-C in the shell) stops it before the next batch,
 * or inside one (between texts, batches and the wide part's texts), with
 * SQLite's own SQLITE_INTERRUPT "interrupted" either way.
 *
 * Trust. A source is SQL, and SQL decides what runs: writefile(),
 * load_extension(), sentiment_config(..., value), train(). Who wrote it
 * decides what it may do, as SQLite decides for views and triggers:
 *   - Typed by the user (the eponymous form, or a hidden-column argument
 *     such as WHERE source = '...' on a persistent table): trusted, like any
 *     SQL the user runs. It must still be one statement that only reads
 *     (sqlite3_stmt_readonly).
 *   - Stored in a schema (the arguments of CREATE VIRTUAL TABLE, which
 *     anyone who can write the database file can plant with PRAGMA
 *     writable_schema): untrusted. It is prepared by schema_sql.c under an
 *     authorizer that allows reads of ordinary tables and views and calls
 *     of functions that SQLite would allow in a view: never
 *     SQLITE_DIRECTONLY ones, and only SQLITE_INNOCUOUS ones when PRAGMA
 *     trusted_schema is OFF. PRAGMA, ATTACH, writes and virtual tables
 *     (fsdir, another classify table) are refused with an error that says
 *     what the source tried. A stored table name is checked the same way
 *     (it must name an ordinary table or view). This is checked when the
 *     stored source is prepared, at every query.
 * classify is also SQLITE_VTAB_DIRECTONLY, so no view or trigger of a
 * schema can use it (or a persistent classify table) to run a source.
 * Why an authorizer and not a flag: SQLite 3.40 has no way to prepare a
 * statement "as if from DDL"; the authorizer sees every function and table
 * a statement uses, and PRAGMA function_list gives SQLite's own flags for
 * each function, so the rule is the one SQLite applies to views.
 *
 * The same batching for any expression inside any query is the window
 * function sentiment_batch() (batch_window.c):
 *
 *   SELECT id, sentiment_batch(title || body)
 *              OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING)
 *   FROM reviews;
 *
 * Each row gets sentiment()'s label; rows are classified 256 at a time.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Batches read per engine thread per engine call (see "How it runs"). */
#define CLASSIFY_BATCHES_PER_THREAD 4

#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/embed.h"
#include "ext/errors.h"
#include "ext/explain.h"
#include "ext/models.h"
#include "ext/progress.h"
#include "ext/register.h"
#include "ext/results.h"
#include "ext/schema_sql.h"

enum {
    COL_ID,
    COL_LABEL,
    COL_SCORE,
    COL_PROBS,
    COL_TRUNCATED,
    COL_SOURCE, /* hidden columns: the arguments */
    COL_COLUMN,
    COL_MODEL,
    COL_BATCH_SIZE,
    COL_LONG_TEXT,
    COL_EMBEDDING,  /* hidden, but a result: the pooled embedding (embed.c) */
    COL_EXPLANATION /* hidden, a result: sentiment_explain's JSON (explain.c) */
};
#define N_ARGS 5

/* idxNum bits set by xBestIndex, and the order of xFilter's argv:
 *   0x01  source = ?      (hidden column source)
 *   0x02  column = ?      (hidden column column)
 *   0x04  model = ?       (hidden column model)
 *   0x08  batch_size = ?  (hidden column batch_size)
 *   0x10  long_text = ?   (hidden column long_text)
 *   0x20  id = ?          (classify only the matching source row)
 * argv holds the values of the bits that are set, in this order. Bits
 * that take no argument:
 *   0x40  the embedding column is used: pool embeddings
 *   0x80  label, score and probs are unused and embedding is used: run
 *         no head (so an encoder without one serves embedding)
 *   0x100 embedding = a constant that is not a BLOB (a sixth argument):
 *         an error */
#define IDX_SOURCE 0x01
#define IDX_COLUMN 0x02
#define IDX_MODEL 0x04
#define IDX_BATCH 0x08
#define IDX_LONG_TEXT 0x10
#define IDX_ID 0x20
#define IDX_EMBED 0x40
#define IDX_NO_LABELS 0x80
#define IDX_EMBED_ARG 0x100

static const char *const k_fn = "classify()";

typedef struct classify_vtab {
    sqlite3_vtab base;
    sqlite3 *db;
    sx_conn *c;
    char *name;    /* the persistent table's name, or NULL (eponymous) */
    char *args[3]; /* source, column, model of a persistent table, or NULL */
} classify_vtab;

typedef struct classify_cursor {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *src; /* the source query */
    rt_model *m;
    int batch_size;
    int long_text;               /* -1: the connection's setting; else windows (0: truncate) */
    int is_query;                /* source is a SELECT (filter ids in C) */
    sqlite3_value *want_id;      /* id = ? on a query source, or NULL */
    sqlite3_value *args[N_ARGS]; /* argument values, for the hidden columns */
    int src_done, eof;
    sqlite3_int64 rowid;
    /* the current batch */
    int n, pos, cap;
    sqlite3_value **ids;
    char **texts; /* NULL for NULL / blank text */
    size_t *lens;
    float *probs;      /* (n, K) */
    float *emb;        /* (n, C) when embed */
    int labels, embed; /* what the query uses (IDX_NO_LABELS, IDX_EMBED) */
    int *trunc;
    sx_progress progress;
    int64_t done;
} classify_cursor;

/* Removes SQL quoting from a CREATE VIRTUAL TABLE argument, in place. */
static void dequote(char *z)
{
    char q = z[0], end;
    size_t i, j;
    if (q != '\'' && q != '"' && q != '`' && q != '[') return;
    end = q == '[' ? ']' : q;
    for (i = 1, j = 0; z[i]; i++) {
        if (z[i] == end) {
            if (end != ']' && z[i + 1] == end) {
                z[j++] = end;
                i++;
            } else {
                break;
            }
        } else {
            z[j++] = z[i];
        }
    }
    z[j] = 0;
}

/* 1 when the source text is a query rather than a table name. */
static int is_query(const char *s)
{
    static const char *const kw[] = {"select", "with", "values"};
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '(') s++;
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(kw[i]);
        if (!strncasecmp(s, kw[i], n) &&
            !((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
              (s[n] >= '0' && s[n] <= '9') || s[n] == '_'))
            return 1;
    }
    return 0;
}

/* xConnect and xCreate: argv[3..] are the CREATE VIRTUAL TABLE arguments
 * (none for the eponymous table-valued function). */
static int classifyConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                           sqlite3_vtab **ppVtab, char **pzErr)
{
    classify_vtab *v = NULL;
    int rc;

    if (argc > 6)
        return sx_fail(pzErr, SQLITE_ERROR, k_fn,
                       "expected CREATE VIRTUAL TABLE name USING classify(source [, column] "
                       "[, model]), got %d arguments",
                       argc - 3);
    rc = sqlite3_declare_vtab(
        db, "CREATE TABLE x(id, label TEXT, score REAL, probs TEXT, "
            "truncated INTEGER, source HIDDEN, \"column\" HIDDEN, "
            "model HIDDEN, batch_size HIDDEN, long_text HIDDEN, embedding HIDDEN, "
            "explanation HIDDEN)");
    if (rc != SQLITE_OK) return rc;
    v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->db = db;
    v->c = pAux;
    if (argc > 3) {
        v->name = sqlite3_mprintf("%s", argv[2]);
        if (!v->name) {
            rc = SQLITE_NOMEM;
            goto end;
        }
    }
    for (int i = 3; i < argc; i++) {
        v->args[i - 3] = sqlite3_mprintf("%s", argv[i]);
        if (!v->args[i - 3]) {
            rc = SQLITE_NOMEM;
            goto end;
        }
        dequote(v->args[i - 3]);
    }
    sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
    *ppVtab = &v->base;
    v = NULL;
end:
    if (v) {
        for (int i = 0; i < 3; i++) sqlite3_free(v->args[i]);
        sqlite3_free(v->name);
        sqlite3_free(v);
    }
    return rc;
}

/* xDisconnect and xDestroy: no shadow tables, nothing stored. */
static int classifyDisconnect(sqlite3_vtab *pVtab)
{
    classify_vtab *v = (classify_vtab *)pVtab;
    for (int i = 0; i < 3; i++) sqlite3_free(v->args[i]);
    sqlite3_free(v->name);
    sqlite3_free(v);
    return SQLITE_OK;
}

static int classifyOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor)
{
    classify_cursor *cur = sqlite3_malloc(sizeof *cur);
    (void)pVtab;
    if (!cur) return SQLITE_NOMEM;
    memset(cur, 0, sizeof *cur);
    *ppCursor = &cur->base;
    return SQLITE_OK;
}

static void batch_clear(classify_cursor *cur)
{
    for (int i = 0; i < cur->n; i++) {
        sqlite3_value_free(cur->ids[i]);
        sqlite3_free(cur->texts[i]);
        cur->ids[i] = NULL;
        cur->texts[i] = NULL;
    }
    cur->n = cur->pos = 0;
}

/* Frees everything a filter set up; the cursor can be filtered again. */
static void cursor_reset(classify_cursor *cur)
{
    batch_clear(cur);
    sqlite3_free(cur->ids);
    sqlite3_free(cur->texts);
    sqlite3_free(cur->lens);
    sqlite3_free(cur->probs);
    sqlite3_free(cur->emb);
    sqlite3_free(cur->trunc);
    cur->emb = NULL;
    cur->ids = NULL;
    cur->texts = NULL;
    cur->lens = NULL;
    cur->probs = NULL;
    cur->trunc = NULL;
    cur->cap = 0;
    sqlite3_finalize(cur->src);
    cur->src = NULL;
    rt_registry_release(cur->m);
    cur->m = NULL;
    sqlite3_value_free(cur->want_id);
    cur->want_id = NULL;
    for (int i = 0; i < N_ARGS; i++) {
        sqlite3_value_free(cur->args[i]);
        cur->args[i] = NULL;
    }
    sx_progress_end(&cur->progress);
    cur->src_done = cur->eof = 0;
    cur->rowid = 0;
    cur->done = 0;
}

static int classifyClose(sqlite3_vtab_cursor *pCur)
{
    classify_cursor *cur = (classify_cursor *)pCur;
    cursor_reset(cur);
    sqlite3_free(cur);
    return SQLITE_OK;
}

/* Equality of two SQL values as `=` would see them for ids (numbers by
 * value, text and blobs by bytes; NULL equals nothing). */
static int same_id(sqlite3_value *a, sqlite3_value *b)
{
    int ta = sqlite3_value_type(a), tb = sqlite3_value_type(b);
    if (ta == SQLITE_NULL || tb == SQLITE_NULL) return 0;
    if ((ta == SQLITE_INTEGER || ta == SQLITE_FLOAT) &&
        (tb == SQLITE_INTEGER || tb == SQLITE_FLOAT)) {
        if (ta == SQLITE_INTEGER && tb == SQLITE_INTEGER)
            return sqlite3_value_int64(a) == sqlite3_value_int64(b);
        return sqlite3_value_double(a) == sqlite3_value_double(b);
    }
    if (ta != tb) return 0;
    int na = sqlite3_value_bytes(a), nb = sqlite3_value_bytes(b);
    const void *pa = ta == SQLITE_TEXT ? (const void *)sqlite3_value_text(a)
                                       : sqlite3_value_blob(a);
    const void *pb = tb == SQLITE_TEXT ? (const void *)sqlite3_value_text(b)
                                       : sqlite3_value_blob(b);
    return na == nb && (na == 0 || (pa && pb && !memcmp(pa, pb, (size_t)na)));
}

/* Where the cursor's errors go: its table's zErrMsg (sx_fail's errmsg). */
static char **vt_err(classify_cursor *cur)
{
    return &cur->base.pVtab->zErrMsg;
}

/* Hands msg (a message naming classify(), or NULL: out of memory) to the
 * table: SQLITE_ERROR, or SQLITE_NOMEM without a message. */
static int set_error(classify_cursor *cur, char *msg)
{
    sqlite3_vtab *vt = cur->base.pVtab;
    sqlite3_free(vt->zErrMsg);
    vt->zErrMsg = msg;
    return msg ? SQLITE_ERROR : SQLITE_NOMEM;
}

/* Reads the next batch from the source and classifies it. */
static int fill_batch(classify_cursor *cur)
{
    classify_vtab *v = (classify_vtab *)cur->base.pVtab;
    const char **texts = NULL;
    size_t *lens = NULL;
    float *probs = NULL, *emb = NULL;
    int *trunc = NULL, *where = NULL;
    int n_text = 0, rc = SQLITE_OK, K = cur->m->bert->cfg.num_labels, compacted = 0;
    int C = cur->m->bert->cfg.hidden_size;
    char *errmsg = NULL;

    batch_clear(cur);
    while (cur->n < cur->cap && !cur->src_done) {
        int step = sqlite3_step(cur->src);
        if (step == SQLITE_DONE) {
            cur->src_done = 1;
            break;
        }
        if (step != SQLITE_ROW) {
            /* An interrupt (sqlite3_interrupt, or a progress handler's, as
             * Datasette's time limit) ends the statement as it ends any
             * other: SQLITE_INTERRUPT, SQLite's own "interrupted", which is
             * what applications test for. */
            if (step == SQLITE_INTERRUPT) return SQLITE_INTERRUPT;
            return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn, "reading the source failed: %s",
                           sqlite3_errmsg(v->db));
        }
        sqlite3_value *id = sqlite3_column_value(cur->src, 0);
        if (cur->want_id && !same_id(id, cur->want_id)) continue;
        int i = cur->n;
        cur->ids[i] = sqlite3_value_dup(id);
        if (!cur->ids[i]) return SQLITE_NOMEM;
        cur->n++;
        int type = sqlite3_column_type(cur->src, 1);
        const char *t = NULL;
        if (type == SQLITE_BLOB) {
            t = sqlite3_column_blob(cur->src, 1);
        } else if (type != SQLITE_NULL) {
            t = (const char *)sqlite3_column_text(cur->src, 1);
            if (!t) return SQLITE_NOMEM;
        }
        size_t len = (size_t)sqlite3_column_bytes(cur->src, 1);
        if (t && !sx_text_blank(t, len)) {
            cur->texts[i] = sqlite3_malloc64(len + 1);
            if (!cur->texts[i]) return SQLITE_NOMEM;
            memcpy(cur->texts[i], t, len);
            cur->texts[i][len] = 0;
            cur->lens[i] = len;
        }
    }
    for (int i = 0; i < cur->n; i++) n_text += cur->texts[i] != NULL;
    if (n_text == 0) goto end;
    if (n_text == cur->n) { /* the common case: classify in place */
        texts = (const char **)cur->texts;
        lens = cur->lens;
        probs = cur->probs;
        emb = cur->emb;
        trunc = cur->trunc;
    } else { /* compact the non-NULL rows, classify, scatter back */
        compacted = 1;
        texts = sqlite3_malloc64((sqlite3_uint64)n_text * sizeof *texts);
        lens = sqlite3_malloc64((sqlite3_uint64)n_text * sizeof *lens);
        probs = sqlite3_malloc64((sqlite3_uint64)n_text * K * sizeof *probs);
        if (cur->embed) emb = sqlite3_malloc64((sqlite3_uint64)n_text * C * sizeof *emb);
        trunc = sqlite3_malloc64((sqlite3_uint64)n_text * sizeof *trunc);
        where = sqlite3_malloc64((sqlite3_uint64)n_text * sizeof *where);
        if (!texts || !lens || !probs || (cur->embed && !emb) || !trunc || !where) {
            rc = SQLITE_NOMEM;
            goto end;
        }
        for (int i = 0, j = 0; i < cur->n; i++) {
            if (!cur->texts[i]) continue;
            texts[j] = cur->texts[i];
            lens[j] = cur->lens[i];
            where[j++] = i;
        }
    }
    int erc = SQLITE_OK;
    if (cur->labels)
        erc = sx_engine_classify_long(v->c, k_fn, cur->m, texts, lens, n_text, cur->batch_size,
                                      cur->long_text, probs, trunc, &errmsg);
    if (erc == SQLITE_OK && cur->embed)
        erc = sx_engine_embed(v->c, k_fn, cur->m, texts, lens, n_text, cur->batch_size, emb, trunc,
                              &errmsg);
    if (erc == SQLITE_INTERRUPT) {
        /* heard inside the engine: the statement ends as when it is heard
         * reading the source, SQLite's own "interrupted" */
        sqlite3_free(errmsg);
        errmsg = NULL;
        rc = SQLITE_INTERRUPT;
        goto end;
    }
    if (erc != SQLITE_OK) {
        rc = set_error(cur, errmsg);
        errmsg = NULL;
        goto end;
    }
    if (where) {
        for (int j = 0; j < n_text; j++) {
            memcpy(cur->probs + (size_t)where[j] * K, probs + (size_t)j * K,
                   (size_t)K * sizeof *probs);
            if (cur->embed)
                memcpy(cur->emb + (size_t)where[j] * C, emb + (size_t)j * C,
                       (size_t)C * sizeof *emb);
            cur->trunc[where[j]] = trunc[j];
        }
    }
end:
    cur->done += cur->n;
    sx_progress_update(&cur->progress, cur->done);
    if (compacted) {
        sqlite3_free(texts);
        sqlite3_free(lens);
        sqlite3_free(probs);
        sqlite3_free(emb);
        sqlite3_free(trunc);
        sqlite3_free(where);
    }
    sqlite3_free(errmsg);
    return rc;
}

/* SELECT rowid, `column` FROM "table": the column in backquotes, which
 * (unlike double quotes) never fall back to a string literal when the
 * column does not exist. */
static char *select_sql(const char *column, const char *table, int by_id)
{
    sqlite3_str *s = sqlite3_str_new(NULL);
    sqlite3_str_appendall(s, "SELECT rowid, `");
    for (const char *p = column; *p; p++) {
        if (*p == '`') sqlite3_str_appendchar(s, 1, '`');
        sqlite3_str_appendchar(s, 1, *p);
    }
    sqlite3_str_appendf(s, "` FROM \"%w\"%s", table, by_id ? " WHERE rowid = ?1" : "");
    return sqlite3_str_finish(s);
}

/* Number of rows of a table source, for the progress line's ETA. */
static int64_t count_rows(sqlite3 *db, const char *table)
{
    sqlite3_stmt *st = NULL;
    int64_t n = -1;
    char *sql = sqlite3_mprintf("SELECT count(*) FROM \"%w\"", table);
    if (sql && sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return n;
}

/* Prepares SQL built from a persistent table's stored arguments into
 * cur->src, as SQLite would prepare a view's SQL (see "Trust" above). */
static int prepare_stored(classify_cursor *cur, const char *sql)
{
    classify_vtab *v = (classify_vtab *)cur->base.pVtab;
    char *why = NULL;
    int rc = sx_prepare_from_schema(v->db, sql, &cur->src, &why);
    if (rc == SQLITE_NOMEM) return rc;
    if (rc != SQLITE_OK) {
        rc = sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                     "the source stored in table '%s' is not run: %s; SQL stored in a "
                     "database schema may only read ordinary tables and views and call the "
                     "functions a view may call (see PRAGMA trusted_schema)",
                     v->name ? v->name : "?", why);
        sqlite3_free(why);
    }
    return rc;
}

/* ---- xFilter's steps ----------------------------------------------------- */

/* The hidden-column arguments the query gives (argv, in the order of
 * idxNum's bits): each kept in cur->args (the hidden columns show them);
 * source, column and model, where given, replace arg[0..3) (the persistent
 * table's); batch_size and long_text checked into cur; an id = ?
 * constraint into cur->want_id. */
static int read_arguments(classify_cursor *cur, int idxNum, sqlite3_value **argv,
                          const char *arg[3])
{
    int a = 0;
    for (int bit = 0; bit < N_ARGS; bit++) {
        if (!(idxNum & (1 << bit))) continue;
        cur->args[bit] = sqlite3_value_dup(argv[a]);
        if (!cur->args[bit]) return SQLITE_NOMEM;
        if (bit < 3) {
            if (sqlite3_value_type(argv[a]) == SQLITE_NULL) {
                arg[bit] = NULL;
            } else {
                static const char *const what[] = {"source", "column name", "model name"};
                arg[bit] = (const char *)sqlite3_value_text(cur->args[bit]);
                if (!arg[bit]) return SQLITE_NOMEM;
                if (sx_arg_has_nul(cur->args[bit]))
                    return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn, "%s contains a NUL byte",
                                   what[bit]);
            }
        } else if (bit == 4) {
            const char *lt = (const char *)sqlite3_value_text(argv[a]);
            if (sqlite3_value_type(argv[a]) == SQLITE_TEXT && lt && !strcmp(lt, "truncate"))
                cur->long_text = 0;
            else if (sqlite3_value_type(argv[a]) == SQLITE_TEXT && lt && !strcmp(lt, "windows"))
                cur->long_text = SX_LONG_TEXT_WINDOWS;
            else
                return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                               "long_text must be 'truncate' or 'windows', got '%s'",
                               lt ? lt : "NULL");
        } else {
            sqlite3_int64 bs = sqlite3_value_int64(argv[a]);
            if (sqlite3_value_type(argv[a]) != SQLITE_INTEGER || bs < 1 || bs > 4096) {
                const char *shown = (const char *)sqlite3_value_text(argv[a]);
                return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                               "batch_size must be an integer from 1 to 4096, got '%s'",
                               shown ? shown : "NULL");
            }
            cur->batch_size = (int)bs;
        }
        a++;
    }
    if (idxNum & IDX_ID) {
        cur->want_id = sqlite3_value_dup(argv[a]);
        if (!cur->want_id) return SQLITE_NOMEM;
    }
    return SQLITE_OK;
}

/* A query source into cur->src (as stored SQL when it comes from the
 * schema): one statement that only reads and returns two columns. Its
 * second argument, column, is the model: *model (and *model_is_column)
 * when no model is given. */
static int prepare_query_source(classify_cursor *cur, const char *source, const char *column,
                                int from_schema, const char **model, int *model_is_column)
{
    classify_vtab *v = (classify_vtab *)cur->base.pVtab;
    int rc;
    /* classify('SELECT ...', 'model'): the second argument is the model */
    if (column && *model && *column)
        return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                       "a SELECT source takes its text from its second column; pass the "
                       "model as the second argument, got column '%s'",
                       column);
    if (column && !*model) {
        *model = column;
        *model_is_column = 1;
    }
    if (from_schema) {
        if ((rc = prepare_stored(cur, source)) != SQLITE_OK) return rc;
    } else {
        const char *tail = NULL;
        rc = sqlite3_prepare_v2(v->db, source, -1, &cur->src, &tail);
        if (rc != SQLITE_OK)
            return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn, "cannot run the source query: %s",
                           sqlite3_errmsg(v->db));
        while (tail && (*tail == ' ' || *tail == '\t' || *tail == '\n' || *tail == '\r')) tail++;
        if (!sx_sql_tail_empty(tail))
            return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                           "the source must be one query; got more after it: '%s'", tail);
    }
    if (!sqlite3_stmt_readonly(cur->src))
        return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn, "the source query must only read; got '%s'",
                       source);
    if (sqlite3_column_count(cur->src) != 2) {
        int n = sqlite3_column_count(cur->src);
        sqlite3_str *names = sqlite3_str_new(NULL);
        for (int i = 0; i < n; i++)
            sqlite3_str_appendf(names, "%s%s", i ? ", " : "", sqlite3_column_name(cur->src, i));
        char *list = sqlite3_str_finish(names);
        rc = sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                     "the source query must return two columns (id, text); it returns "
                     "%d: %s",
                     n, list ? list : "?");
        sqlite3_free(list);
        return rc;
    }
    return SQLITE_OK;
}

/* A table source into cur->src: its rowid and `column` (only the row
 * id = ? names, when the query has that constraint), as stored SQL when
 * it comes from the schema. */
static int prepare_table_source(classify_cursor *cur, const char *source, const char *column,
                                int from_schema)
{
    classify_vtab *v = (classify_vtab *)cur->base.pVtab;
    char *sql;
    int rc;
    if (!column || !*column)
        return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                       "expected classify('%s', column [, model]): a table source needs "
                       "the text column",
                       source);
    sql = select_sql(column, source, cur->want_id != NULL);
    if (!sql) return SQLITE_NOMEM;
    if (from_schema) {
        rc = prepare_stored(cur, sql);
        sqlite3_free(sql);
        if (rc != SQLITE_OK) return rc;
    } else {
        rc = sqlite3_prepare_v2(v->db, sql, -1, &cur->src, NULL);
        sqlite3_free(sql);
    }
    if (rc != SQLITE_OK) {
        const char *e = sqlite3_errmsg(v->db);
        return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                       "cannot read column '%s' of table '%s': %s%s", column, source, e,
                       strstr(e, "rowid") ? " (a WITHOUT ROWID table needs a SELECT "
                                            "source: classify('SELECT id, text FROM t'))"
                                          : "");
    }
    if (cur->want_id) {
        sqlite3_bind_value(cur->src, 1, cur->want_id);
        sqlite3_value_free(cur->want_id); /* the query filters: no need in C */
        cur->want_id = NULL;
    }
    return SQLITE_OK;
}

/* The model into cur->m; a model name that was a SELECT source's second
 * argument gets a hint when it is unknown. */
static int resolve_model(classify_cursor *cur, const char *model, int model_is_column)
{
    classify_vtab *v = (classify_vtab *)cur->base.pVtab;
    char *errmsg = NULL;
    if (sx_model_resolve(v->c, k_fn, model, &cur->m, &errmsg) == SQLITE_OK) return SQLITE_OK;
    if (model_is_column && errmsg) {
        char *hinted = sqlite3_mprintf("%s (a SELECT source takes the model as its second "
                                       "argument and its text from the query's second "
                                       "column: classify('SELECT id, text FROM t' [, model]))",
                                       errmsg);
        if (hinted) {
            sqlite3_free(errmsg);
            errmsg = hinted;
        }
    }
    return set_error(cur, errmsg);
}

/* The batch buffers: CLASSIFY_BATCHES_PER_THREAD batches per engine thread
 * are read at a time (the engine sorts them by length together, less
 * padding than one batch's worth, and runs one batch per thread
 * concurrently). */
static int alloc_batch(classify_cursor *cur)
{
    classify_vtab *v = (classify_vtab *)cur->base.pVtab;
    char *errmsg = NULL;
    int K = cur->m->bert->cfg.num_labels;
    if (sx_engine_backend(v->c, k_fn, &errmsg) != SQLITE_OK) return set_error(cur, errmsg);
    cur->cap = cur->batch_size * sx_engine_parallel_batches(v->c) * CLASSIFY_BATCHES_PER_THREAD;
    cur->ids = sqlite3_malloc64((sqlite3_uint64)cur->cap * sizeof *cur->ids);
    cur->texts = sqlite3_malloc64((sqlite3_uint64)cur->cap * sizeof *cur->texts);
    cur->lens = sqlite3_malloc64((sqlite3_uint64)cur->cap * sizeof *cur->lens);
    cur->probs = sqlite3_malloc64((sqlite3_uint64)cur->cap * K * sizeof *cur->probs);
    if (cur->embed)
        cur->emb = sqlite3_malloc64((sqlite3_uint64)cur->cap * cur->m->bert->cfg.hidden_size *
                                    sizeof *cur->emb);
    cur->trunc = sqlite3_malloc64((sqlite3_uint64)cur->cap * sizeof *cur->trunc);
    if (!cur->ids || !cur->texts || !cur->lens || !cur->probs || !cur->trunc ||
        (cur->embed && !cur->emb))
        return SQLITE_NOMEM;
    memset(cur->ids, 0, (size_t)cur->cap * sizeof *cur->ids);
    memset(cur->texts, 0, (size_t)cur->cap * sizeof *cur->texts);
    return SQLITE_OK;
}

/* Reads and classifies the next batch; at the source's end, the cursor's. */
static int next_batch(classify_cursor *cur)
{
    int rc = fill_batch(cur);
    if (rc != SQLITE_OK) return rc;
    if (cur->n == 0) {
        cur->eof = 1;
        sx_progress_end(&cur->progress);
    }
    return SQLITE_OK;
}

static int classifyFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr, int argc,
                          sqlite3_value **argv)
{
    classify_cursor *cur = (classify_cursor *)pCur;
    classify_vtab *v = (classify_vtab *)pCur->pVtab;
    const char *arg[3] = {v->args[0], v->args[1], v->args[2]};
    const char *source, *column, *model;
    int rc, model_is_column = 0;
    /* the source comes from the schema when the query does not give one */
    int from_schema = !(idxNum & IDX_SOURCE) && v->args[0] != NULL;
    (void)idxStr;
    (void)argc;

    cursor_reset(cur);
    if (idxNum & IDX_EMBED_ARG)
        return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                       "too many arguments on classify() - max 5 (source, column, model, "
                       "batch_size, long_text); embedding is a result column, not an argument");
    cur->embed = (idxNum & IDX_EMBED) != 0;
    cur->labels = !(idxNum & IDX_NO_LABELS);
    cur->batch_size = v->c->batch_size;
    cur->long_text = -1;
    if ((rc = read_arguments(cur, idxNum, argv, arg)) != SQLITE_OK) return rc;
    source = arg[0];
    column = arg[1];
    model = arg[2];
    if (!source || !*source) {
        return sx_fail(vt_err(cur), SQLITE_ERROR, k_fn,
                       "expected classify(source, column [, model]) with source a table name "
                       "or a SELECT; got %s",
                       source ? "''" : "no source");
    }
    cur->is_query = is_query(source);
    if (cur->is_query) {
        /* a query given in the query replaces a stored table source: the
         * stored column belongs to that table, it is not a model name */
        if (!from_schema && !(idxNum & IDX_COLUMN) && v->args[0] && !is_query(v->args[0]))
            column = NULL;
        rc = prepare_query_source(cur, source, column, from_schema, &model, &model_is_column);
    } else {
        rc = prepare_table_source(cur, source, column, from_schema);
    }
    if (rc != SQLITE_OK) return rc;
    if ((rc = resolve_model(cur, model, model_is_column)) != SQLITE_OK) return rc;
    if ((rc = alloc_batch(cur)) != SQLITE_OK) return rc;
    sx_progress_begin(&cur->progress, v->c, "classify", -1);
    if (cur->progress.active && !cur->is_query && !(idxNum & IDX_ID))
        cur->progress.total = count_rows(v->db, source);
    if ((rc = next_batch(cur)) != SQLITE_OK) return rc;
    cur->rowid = 1;
    return SQLITE_OK;
}

static int classifyNext(sqlite3_vtab_cursor *pCur)
{
    classify_cursor *cur = (classify_cursor *)pCur;
    cur->rowid++;
    if (++cur->pos < cur->n) return SQLITE_OK;
    if (cur->src_done) {
        cur->eof = 1;
        sx_progress_end(&cur->progress);
        return SQLITE_OK;
    }
    return next_batch(cur);
}

static int classifyEof(sqlite3_vtab_cursor *pCur)
{
    return ((classify_cursor *)pCur)->eof;
}

static int classifyColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i)
{
    classify_cursor *cur = (classify_cursor *)pCur;
    int p = cur->pos;
    const bert_config *cfg = cur->m ? &cur->m->bert->cfg : NULL;
    const float *probs;

    if (i == COL_EXPLANATION) {
        /* per row, when read: each is 3 x steps passes of its own text */
        if (!cur->texts[p]) return SQLITE_OK;
        classify_vtab *v = (classify_vtab *)pCur->pVtab;
        char *json = NULL, *errmsg = NULL;
        int rc = sx_explain_json(v->c, k_fn, cur->m, cur->texts[p], cur->lens[p], NULL, &json,
                                 &errmsg);
        if (rc == SQLITE_OK && json) sx_result_json(ctx, json);
        else if (rc != SQLITE_OK) {
            if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
            else sqlite3_result_error_nomem(ctx);
        }
        sqlite3_free(errmsg);
        return SQLITE_OK;
    }
    if (i == COL_EMBEDDING) {
        if (cur->texts[p] && cur->emb) {
            int C = cur->m->bert->cfg.hidden_size;
            sx_embedding_blob(ctx, cur->emb + (size_t)p * C, C);
        }
        return SQLITE_OK;
    }
    if (i >= COL_SOURCE) {
        if (cur->args[i - COL_SOURCE]) sqlite3_result_value(ctx, cur->args[i - COL_SOURCE]);
        return SQLITE_OK;
    }
    if (i == COL_ID) {
        sqlite3_result_value(ctx, cur->ids[p]);
        return SQLITE_OK;
    }
    if (!cur->texts[p] || !cfg) return SQLITE_OK;             /* NULL */
    if (!cur->labels && i != COL_TRUNCATED) return SQLITE_OK; /* not asked for */
    probs = cur->probs + (size_t)p * cfg->num_labels;
    switch (i) {
    case COL_LABEL:
        sqlite3_result_text(ctx, cfg->id2label[sx_argmax(probs, cfg->num_labels)], -1,
                            SQLITE_TRANSIENT);
        break;
    case COL_SCORE: sqlite3_result_double(ctx, sx_score(cfg, probs)); break;
    case COL_PROBS: {
        char *json = sx_probs_json(cfg, probs);
        if (!json) return SQLITE_NOMEM;
        sx_result_json(ctx, json); /* an xColumn subtype reaches json_object() too */
        break;
    }
    case COL_TRUNCATED: sqlite3_result_int(ctx, cur->trunc[p] != 0); break;
    }
    return SQLITE_OK;
}

static int classifyRowid(sqlite3_vtab_cursor *pCur, sqlite_int64 *pRowid)
{
    *pRowid = ((classify_cursor *)pCur)->rowid;
    return SQLITE_OK;
}

/* Plans: every usable `hidden = ?` becomes an argument (see IDX_*); an
 * unusable one makes the plan impossible (SQLITE_CONSTRAINT), so SQLite
 * picks a join order that supplies it. `id = ?` is served (cheaply) but
 * not omitted: SQLite re-checks it. A missing source is reported by
 * xFilter with a message, not by failing the plan. */
static int classifyBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info)
{
    int col_of[N_ARGS + 1] = {-1, -1, -1, -1, -1, -1};
    int mask = 0, n = 0, flags = 0;
    (void)pVtab;

    /* which results the query reads (colUsed: bit i = column i) */
    sqlite3_uint64 labels = (1ull << COL_LABEL) | (1ull << COL_SCORE) | (1ull << COL_PROBS);
    if (info->colUsed & (1ull << COL_EMBEDDING)) {
        flags |= IDX_EMBED;
        if (!(info->colUsed & labels)) flags |= IDX_NO_LABELS;
    }
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        int bit;
        if (c->iColumn == COL_EMBEDDING) {
            /* a constant that is not a BLOB: a fifth argument (classify(s,
             * c, m, 16, 'x')), never an embedding; other constraints on
             * embedding are SQLite's to check */
#if SQLITE_VERSION_NUMBER >= 3038000
            sqlite3_value *rhs = NULL;
            if (c->op == SQLITE_INDEX_CONSTRAINT_EQ &&
                sqlite3_vtab_rhs_value(info, i, &rhs) == SQLITE_OK && rhs &&
                sqlite3_value_type(rhs) != SQLITE_BLOB)
                flags |= IDX_EMBED_ARG;
#endif
            continue;
        }
        if (c->iColumn >= COL_SOURCE) bit = c->iColumn - COL_SOURCE;
        else if (c->iColumn == COL_ID) bit = N_ARGS;
        else continue;
        if (c->op != SQLITE_INDEX_CONSTRAINT_EQ) {
            if (bit < N_ARGS) return SQLITE_CONSTRAINT; /* e.g. source > 'x' */
            continue;
        }
        if (!c->usable) {
            if (bit < N_ARGS) return SQLITE_CONSTRAINT;
            continue;
        }
        if (col_of[bit] < 0) {
            col_of[bit] = i;
            mask |= 1 << bit;
        }
    }
    for (int bit = 0; bit <= N_ARGS; bit++) {
        if (col_of[bit] < 0) continue;
        info->aConstraintUsage[col_of[bit]].argvIndex = ++n;
        info->aConstraintUsage[col_of[bit]].omit = bit < N_ARGS;
    }
    info->idxNum = mask | flags;
    if (mask & IDX_ID) {
        info->estimatedCost = 10;
        info->estimatedRows = 1;
    } else {
        info->estimatedCost = 1e6;
        info->estimatedRows = 100000;
    }
    return SQLITE_OK;
}

static sqlite3_module classifyModule = {
    /* iVersion    */ 0,
    /* xCreate     */ classifyConnect, /* same as xConnect: eponymous and creatable */
    /* xConnect    */ classifyConnect,
    /* xBestIndex  */ classifyBestIndex,
    /* xDisconnect */ classifyDisconnect,
    /* xDestroy    */ classifyDisconnect,
    /* xOpen       */ classifyOpen,
    /* xClose      */ classifyClose,
    /* xFilter     */ classifyFilter,
    /* xNext       */ classifyNext,
    /* xEof        */ classifyEof,
    /* xColumn     */ classifyColumn,
    /* xRowid      */ classifyRowid,
    /* xUpdate     */ 0, /* read-only */
    /* xBegin      */ 0, /* no transactions: nothing is stored */
    /* xSync       */ 0,
    /* xCommit     */ 0,
    /* xRollback   */ 0,
    /* xFindMethod */ 0, /* no overloaded functions */
    /* xRename     */ 0, /* nothing to rename */
    /* xSavepoint  */ 0, /* iVersion 0: no savepoints */
    /* xRelease    */ 0,
    /* xRollbackTo */ 0,
    /* xShadowName */ 0, /* no shadow tables */
};

int sx_register_classify(sqlite3 *db, sx_conn *c)
{
    sx_conn_ref(c);
    return sqlite3_create_module_v2(db, "classify", &classifyModule, c, sx_conn_unref);
}

/* train_status.c: sentiment_training, the train() runs in progress.
 *
 *   SELECT model, epoch, epochs, step, total_steps, loss, eta_seconds
 *   FROM sentiment_training;
 *
 * An eponymous, read-only virtual table with one row per train() call
 * running in this process (any connection, any thread), showing its latest
 * optimizer step; a run disappears when it ends. Query it from another
 * connection while a long train() runs; the finished run's whole history
 * is in the sentiment_train_log table (train.c). Columns:
 *   model, base         the model being trained and what it started from
 *   rows                usable rows read
 *   epoch, epochs       current epoch (1-based) and the number planned
 *   step, total_steps   optimizer steps done and planned
 *   loss                the latest step's mean loss
 *   valid_accuracy      after the latest finished epoch (NULL before one)
 *   examples_per_sec, seconds, eta_seconds
 * Entries live in a process-wide list guarded by a mutex; train() adds,
 * updates and removes its own.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/conn.h"
#include "ext/register.h"
#include "ext/train_status.h"
#include "train/trainer.h"

typedef struct training_entry {
    uint64_t id;
    char model[SX_NAME_MAX + 1];
    char base[SX_NAME_MAX + 32];
    int64_t rows;
    int epoch, epochs;
    long step, total_steps;
    double loss, valid_accuracy, eps, seconds, eta;
    struct training_entry *next;
} training_entry;

static pthread_mutex_t g_ts_lock = PTHREAD_MUTEX_INITIALIZER;
static training_entry *g_ts_head;
static uint64_t g_ts_next = 1;

void *sx_train_status_begin(const char *model, const char *base, int64_t rows)
{
    training_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL; /* the run is just not listed */
    snprintf(e->model, sizeof e->model, "%s", model);
    snprintf(e->base, sizeof e->base, "%s", base);
    e->rows = rows;
    e->loss = e->valid_accuracy = NAN;
    pthread_mutex_lock(&g_ts_lock);
    e->id = g_ts_next++;
    e->next = g_ts_head;
    g_ts_head = e;
    pthread_mutex_unlock(&g_ts_lock);
    return e;
}

void sx_train_status_update(void *h, const trainer_progress *p)
{
    training_entry *e = h;
    if (!e) return;
    pthread_mutex_lock(&g_ts_lock);
    e->epoch = p->loop.epoch;
    e->epochs = p->loop.epochs;
    e->step = p->loop.step;
    e->total_steps = p->loop.total_steps;
    if (p->loop.epoch_done) e->valid_accuracy = p->valid_accuracy;
    else e->loss = p->loop.loss;
    e->eps = p->loop.examples_per_sec;
    e->seconds = p->loop.elapsed_sec;
    e->eta = p->loop.eta_sec;
    pthread_mutex_unlock(&g_ts_lock);
}

void sx_train_status_end(void *h)
{
    training_entry *e = h, **pp;
    if (!e) return;
    pthread_mutex_lock(&g_ts_lock);
    for (pp = &g_ts_head; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&g_ts_lock);
    free(e);
}

/* ---- the virtual table -------------------------------------------------- */

enum {
    COL_MODEL,
    COL_BASE,
    COL_ROWS,
    COL_EPOCH,
    COL_EPOCHS,
    COL_STEP,
    COL_TOTAL,
    COL_LOSS,
    COL_ACC,
    COL_EPS,
    COL_SECONDS,
    COL_ETA
};

typedef struct training_cursor {
    sqlite3_vtab_cursor base;
    training_entry *rows; /* a snapshot, taken in xFilter */
    int n, pos;
} training_cursor;

static int trainingConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                           sqlite3_vtab **ppVtab, char **pzErr)
{
    sqlite3_vtab *v;
    int rc;
    (void)pAux;
    (void)argc;
    (void)argv;
    (void)pzErr;
    rc = sqlite3_declare_vtab(db, "CREATE TABLE x(model TEXT, base TEXT, rows INTEGER, "
                                  "epoch INTEGER, epochs INTEGER, step INTEGER, "
                                  "total_steps INTEGER, loss REAL, valid_accuracy REAL, "
                                  "examples_per_sec REAL, seconds REAL, eta_seconds REAL)");
    if (rc != SQLITE_OK) return rc;
    v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    *ppVtab = v;
    return SQLITE_OK;
}

static int trainingDisconnect(sqlite3_vtab *pVtab)
{
    sqlite3_free(pVtab);
    return SQLITE_OK;
}

static int trainingOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor)
{
    training_cursor *cur = sqlite3_malloc(sizeof *cur);
    (void)pVtab;
    if (!cur) return SQLITE_NOMEM;
    memset(cur, 0, sizeof *cur);
    *ppCursor = &cur->base;
    return SQLITE_OK;
}

static int trainingClose(sqlite3_vtab_cursor *pCur)
{
    sqlite3_free(((training_cursor *)pCur)->rows);
    sqlite3_free(pCur);
    return SQLITE_OK;
}

static int trainingFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr, int argc,
                          sqlite3_value **argv)
{
    training_cursor *cur = (training_cursor *)pCur;
    int n = 0, rc = SQLITE_OK;
    (void)idxNum;
    (void)idxStr;
    (void)argc;
    (void)argv;
    sqlite3_free(cur->rows);
    cur->rows = NULL;
    cur->n = cur->pos = 0;
    pthread_mutex_lock(&g_ts_lock);
    for (training_entry *e = g_ts_head; e; e = e->next) n++;
    if (n) {
        cur->rows = sqlite3_malloc64((sqlite3_uint64)n * sizeof *cur->rows);
        if (!cur->rows) rc = SQLITE_NOMEM;
        /* oldest first */
        for (training_entry *e = g_ts_head; e && cur->rows; e = e->next)
            cur->rows[n - 1 - cur->n++] = *e;
    }
    pthread_mutex_unlock(&g_ts_lock);
    return rc;
}

static int trainingNext(sqlite3_vtab_cursor *pCur)
{
    ((training_cursor *)pCur)->pos++;
    return SQLITE_OK;
}

static int trainingEof(sqlite3_vtab_cursor *pCur)
{
    training_cursor *cur = (training_cursor *)pCur;
    return cur->pos >= cur->n;
}

static void result_real(sqlite3_context *ctx, double x)
{
    if (isfinite(x)) sqlite3_result_double(ctx, x);
}

static int trainingColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i)
{
    training_cursor *cur = (training_cursor *)pCur;
    const training_entry *e = &cur->rows[cur->pos];
    switch (i) {
    case COL_MODEL: sqlite3_result_text(ctx, e->model, -1, SQLITE_TRANSIENT); break;
    case COL_BASE: sqlite3_result_text(ctx, e->base, -1, SQLITE_TRANSIENT); break;
    case COL_ROWS: sqlite3_result_int64(ctx, e->rows); break;
    case COL_EPOCH: sqlite3_result_int(ctx, e->epoch); break;
    case COL_EPOCHS: sqlite3_result_int(ctx, e->epochs); break;
    case COL_STEP: sqlite3_result_int64(ctx, e->step); break;
    case COL_TOTAL: sqlite3_result_int64(ctx, e->total_steps); break;
    case COL_LOSS: result_real(ctx, e->loss); break;
    case COL_ACC: result_real(ctx, e->valid_accuracy); break;
    case COL_EPS: result_real(ctx, e->eps); break;
    case COL_SECONDS: result_real(ctx, e->seconds); break;
    case COL_ETA: result_real(ctx, e->eta); break;
    }
    return SQLITE_OK;
}

static int trainingRowid(sqlite3_vtab_cursor *pCur, sqlite_int64 *pRowid)
{
    training_cursor *cur = (training_cursor *)pCur;
    *pRowid = (sqlite_int64)cur->rows[cur->pos].id;
    return SQLITE_OK;
}

/* One plan: a full scan of a short list (idxNum unused, always 0). */
static int trainingBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info)
{
    (void)pVtab;
    info->idxNum = 0;
    info->estimatedCost = 10;
    info->estimatedRows = 1;
    return SQLITE_OK;
}

static sqlite3_module statusModule = {
    /* iVersion    */ 0,
    /* xCreate     */ 0, /* eponymous only */
    /* xConnect    */ trainingConnect,
    /* xBestIndex  */ trainingBestIndex,
    /* xDisconnect */ trainingDisconnect,
    /* xDestroy    */ trainingDisconnect,
    /* xOpen       */ trainingOpen,
    /* xClose      */ trainingClose,
    /* xFilter     */ trainingFilter,
    /* xNext       */ trainingNext,
    /* xEof        */ trainingEof,
    /* xColumn     */ trainingColumn,
    /* xRowid      */ trainingRowid,
    /* xUpdate     */ 0, /* read-only */
    /* xBegin      */ 0,
    /* xSync       */ 0,
    /* xCommit     */ 0,
    /* xRollback   */ 0,
    /* xFindMethod */ 0,
    /* xRename     */ 0,
    /* xSavepoint  */ 0,
    /* xRelease    */ 0,
    /* xRollbackTo */ 0,
    /* xShadowName */ 0,
};

int sx_register_train_status(sqlite3 *db, sx_conn *c)
{
    (void)c;
    return sqlite3_create_module_v2(db, "sentiment_training", &statusModule, NULL, NULL);
}

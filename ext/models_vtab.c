/* models_vtab.c: sentiment_models, every model this connection can use.
 *
 *   SELECT name, version, source, labels FROM sentiment_models;
 *
 * An eponymous, read-only virtual table; one row per model, in lookup
 * order (models.c): models registered with sentiment_load() (source
 * 'file'; 'memory' for a model train() trained but could not store, see
 * train.c), then every stored version in the main database's
 * sentiment_model_store (source 'database'), then the built-in model as
 * 'default' (source 'builtin', listed only when this build has one and no
 * 'default' was registered). Columns:
 *   name         what to pass as the model argument (`name@version` for an
 *                older database version)
 *   version      1 for builtin and file models; 1, 2, ... in the database
 *   source       'builtin', 'file', 'memory' or 'database'
 *   labels       JSON array of the labels in class-id order; NULL for an
 *                embedding model (kind 'embedding'), whose config.json may
 *                still name labels (LABEL_0, LABEL_1) it has no head for
 *   model_type   'bert', 'ernie', 'roberta' or 'xlm-roberta', as config.json says
 *   layers, hidden_size, heads
 *   max_length   tokens per text (with [CLS]/[SEP]) the model runs with on
 *                this connection: its position table's size, or
 *                sentiment_config('max_length') when that is smaller (a
 *                larger setting is capped per model; this shows the cap)
 *   parameters   number of scalar parameters
 *   created      UTC time a database model was stored, else NULL
 *   path         the directory of a file model, else NULL
 *   loaded       1 when the model is in the process-wide cache now (for a
 *                stored model: the bytes this database last loaded for
 *                that version; an UPDATE of the row is seen when it is
 *                next used)
 *   metrics      JSON a database model was stored with (train()'s report,
 *                see train.c), else NULL
 *   kind         'classifier' (the model has a classification head:
 *                sentiment(), classify's label) or 'embedding' (an encoder
 *                without one, e.g. multilingual-e5-small: sentiment_embed
 *                and classify's embedding only); NULL for a database model,
 *                whose weights listing does not read (using it tells)
 *   wide         the model's wide part (a hashed character n-gram layer
 *                whose logits are added to the encoder's, model/encoder/wide.h):
 *                its settings as config.json's "wide" key holds them, e.g.
 *                {"features": "char_ngrams", "ngram_range": [1, 3],
 *                "buckets": 262144, ...}; NULL for a model without one
 *   cpu_precision what precision 'auto' runs the model with on this
 *                machine's CPU, and why: "int8: held-out accuracy 0.9101 in
 *                int8, 0.9113 in fp32, same label on 99.5% of 812 rows",
 *                "fp32: int8 not checked for this model", "fp32: this CPU
 *                has no AVX512-VNNI (...)" (runtime/device.c; the rule:
 *                model/format/int8_check.h); NULL for an embedding model
 * A stored model whose config cannot be parsed is listed with NULL
 * architecture columns; using it gives the parse error.
 */
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "ext/builtin.h"
#include "ext/conn.h"
#include "ext/errors.h"
#include "ext/register.h"
#include "ext/results.h"
#include "ext/storage.h"
#include "runtime/device.h"

enum {
    COL_NAME,
    COL_VERSION,
    COL_SOURCE,
    COL_LABELS,
    COL_TYPE,
    COL_LAYERS,
    COL_HIDDEN,
    COL_HEADS,
    COL_MAXLEN,
    COL_PARAMS,
    COL_CREATED,
    COL_PATH,
    COL_LOADED,
    COL_METRICS,
    COL_KIND,
    COL_WIDE,
    COL_CPU_PRECISION,
    N_COLS
};

typedef struct models_row {
    char *name, *source, *labels, *type, *created, *path, *metrics, *wide, *cpu_precision;
    sqlite3_int64 version, params;
    int layers, hidden, heads, maxlen, loaded, have_cfg;
    int head; /* 1: a classification head, 0: none (an embedding model), -1: not known */
} models_row;

typedef struct models_vtab {
    sqlite3_vtab base;
    sx_conn *c;
} models_vtab;

typedef struct models_cursor {
    sqlite3_vtab_cursor base;
    models_row *rows;
    int n, cap, pos;
} models_cursor;

static int modelsConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                         sqlite3_vtab **ppVtab, char **pzErr)
{
    models_vtab *v;
    int rc;
    (void)argc;
    (void)argv;
    (void)pzErr;
    rc = sqlite3_declare_vtab(db, "CREATE TABLE x(name TEXT, version INTEGER, source TEXT, "
                                  "labels TEXT, model_type TEXT, layers INTEGER, "
                                  "hidden_size INTEGER, heads INTEGER, max_length INTEGER, "
                                  "parameters INTEGER, created TEXT, path TEXT, loaded INTEGER, "
                                  "metrics TEXT, kind TEXT, wide TEXT, cpu_precision TEXT)");
    if (rc != SQLITE_OK) return rc;
    v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->c = pAux;
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    *ppVtab = &v->base;
    return SQLITE_OK;
}

static int modelsDisconnect(sqlite3_vtab *pVtab)
{
    sqlite3_free(pVtab);
    return SQLITE_OK;
}

static int modelsOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor)
{
    models_cursor *cur = sqlite3_malloc(sizeof *cur);
    (void)pVtab;
    if (!cur) return SQLITE_NOMEM;
    memset(cur, 0, sizeof *cur);
    *ppCursor = &cur->base;
    return SQLITE_OK;
}

static void rows_free(models_cursor *cur)
{
    for (int i = 0; i < cur->n; i++) {
        models_row *r = &cur->rows[i];
        sqlite3_free(r->name);
        sqlite3_free(r->source);
        sqlite3_free(r->labels);
        sqlite3_free(r->type);
        sqlite3_free(r->created);
        sqlite3_free(r->path);
        sqlite3_free(r->metrics);
        sqlite3_free(r->wide);
        sqlite3_free(r->cpu_precision);
    }
    sqlite3_free(cur->rows);
    cur->rows = NULL;
    cur->n = cur->cap = cur->pos = 0;
}

static int modelsClose(sqlite3_vtab_cursor *pCur)
{
    rows_free((models_cursor *)pCur);
    sqlite3_free(pCur);
    return SQLITE_OK;
}

static char *labels_json(const bert_config *cfg)
{
    sqlite3_str *s = sqlite3_str_new(NULL);
    sqlite3_str_appendchar(s, 1, '[');
    for (int i = 0; i < cfg->num_labels; i++) {
        if (i) sqlite3_str_appendchar(s, 1, ',');
        sx_json_string(s, cfg->id2label[i]);
    }
    sqlite3_str_appendchar(s, 1, ']');
    return sqlite3_str_finish(s);
}

/* Appends a row; cfg (may be NULL) fills the architecture columns; head:
 * 1 a classification head, 0 none (no labels are listed), -1 not known;
 * check: the INT8 check auto follows (a loaded model's may be newer than
 * its config's, rt_registry_int8_check), NULL for cfg's. */
static models_row *add_row(models_cursor *cur, const char *name, sqlite3_int64 version,
                           const char *source, const bert_config *cfg, const sm_int8_check *check,
                           sqlite3_int64 params, int head)
{
    models_row *r;
    if (cur->n == cur->cap) {
        int cap = cur->cap ? cur->cap * 2 : 8;
        models_row *grown = sqlite3_realloc64(cur->rows, (sqlite3_uint64)cap * sizeof *grown);
        if (!grown) return NULL;
        cur->rows = grown;
        cur->cap = cap;
    }
    r = &cur->rows[cur->n++];
    memset(r, 0, sizeof *r);
    r->name = sqlite3_mprintf("%s", name);
    r->source = sqlite3_mprintf("%s", source);
    r->version = version;
    r->head = head;
    if (!r->name || !r->source) return NULL;
    if (cfg) {
        r->have_cfg = 1;
        r->labels = head ? labels_json(cfg) : NULL;
        r->type = sqlite3_mprintf("%s", cfg->model_type);
        if ((head && !r->labels) || !r->type) return NULL;
        r->layers = cfg->num_hidden_layers;
        r->hidden = cfg->hidden_size;
        r->heads = cfg->num_attention_heads;
        r->maxlen = bert_max_length(cfg);
        {
            /* what the model runs with here: sentiment_config('max_length')
             * is capped per model */
            int set = ((models_vtab *)cur->base.pVtab)->c->max_length;
            if (set > 0 && set < r->maxlen) r->maxlen = set;
        }
        r->params = params;
        if (cfg->wide.set) {
            char *w = NULL;
            if (sm_wide_config_to_json(&cfg->wide, &w, NULL) != SM_OK) return NULL;
            r->wide = sqlite3_mprintf("%s", w);
            free(w);
            if (!r->wide) return NULL;
        }
        if (head) {
            char why[300];
            rt_device_cpu_auto_precision(strcmp(source, "builtin") ? NULL : "builtin",
                                         check ? check : &cfg->int8_check, why, sizeof why);
            if (!(r->cpu_precision = sqlite3_mprintf("%s", why))) return NULL;
        }
    }
    return r;
}

/* Parameter count a config implies (with a classification head). */
static sqlite3_int64 params_of(const bert_config *cfg)
{
    bert_param_spec *specs = NULL;
    int n = 0;
    size_t total = 0;
    char err[SM_ERR_MAX];
    if (bert_param_table(cfg, 1, &specs, &n, &total, err) != SM_OK) total = 0;
    free(specs);
    return (sqlite3_int64)total;
}

static int add_database_rows(models_cursor *cur, sx_conn *cur_conn)
{
    sqlite3 *db = cur_conn->db;
    sqlite3_stmt *st = NULL;
    int rc;
    char err[SM_ERR_MAX];

    if (!sx_store_exists(db)) return SQLITE_OK;
    if ((rc = sx_store_list(db, &st)) != SQLITE_OK) return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        sqlite3_int64 version = sqlite3_column_int64(st, 1);
        const char *config = (const char *)sqlite3_column_text(st, 3);
        size_t config_len = (size_t)sqlite3_column_bytes(st, 3);
        const char *created = (const char *)sqlite3_column_text(st, 4);
        const char *metrics = (const char *)sqlite3_column_text(st, 5);
        bert_config cfg;
        sm_int8_check check;
        int have = config && bert_config_parse(config, config_len, &cfg, err) == SM_OK;
        /* a version of this database's model in the cache (its key is the
         * hash of the bytes, which listing does not read) */
        char *family = sx_store_family(cur_conn, name ? name : "");
        int loaded = family && rt_registry_is_loaded_version(family, version);
        int measured = family && rt_registry_version_int8_check(family, version, &check);
        sqlite3_free(family);
        models_row *r = add_row(cur, name ? name : "", version, "database", have ? &cfg : NULL,
                                measured ? &check : NULL, have ? params_of(&cfg) : 0, -1);
        if (have) bert_config_free(&cfg);
        if (!r) {
            rc = SQLITE_NOMEM;
            break;
        }
        r->loaded = loaded;
        if (created && !(r->created = sqlite3_mprintf("%s", created))) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (metrics && !(r->metrics = sqlite3_mprintf("%s", metrics))) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int modelsFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr, int argc,
                        sqlite3_value **argv)
{
    models_cursor *cur = (models_cursor *)pCur;
    models_vtab *v = (models_vtab *)pCur->pVtab;
    sx_conn *c = v->c;
    int rc, have_default = 0;
    sx_builtin b;
    (void)idxNum;
    (void)idxStr;
    (void)argc;
    (void)argv;

    rows_free(cur);
    for (sx_file_reg *r = c->files; r; r = r->next) {
        sm_int8_check check = rt_registry_int8_check(r->model);
        models_row *row = add_row(cur, r->name, 1, r->path ? "file" : "memory",
                                  &r->model->bert->cfg, &check,
                                  (sqlite3_int64)bert_model_num_params(r->model->bert),
                                  r->model->bert->has_head != 0);
        if (!row || (r->path && !(row->path = sqlite3_mprintf("%s", r->path)))) return SQLITE_NOMEM;
        row->loaded = 1; /* a registration holds its model */
        if (!strcmp(r->name, "default")) have_default = 1;
    }
    rc = add_database_rows(cur, c);
    if (rc != SQLITE_OK)
        return sx_fail(&pCur->pVtab->zErrMsg, rc, "sentiment_models",
                       "cannot read " SX_STORE_TABLE ": %s", sqlite3_errstr(rc));
    if (!have_default && sx_builtin_get(&b)) {
        bert_config cfg;
        char err[SM_ERR_MAX];
        int have = bert_config_parse(b.config, b.config_len, &cfg, err) == SM_OK;
        models_row *row = add_row(cur, "default", 1, "builtin", have ? &cfg : NULL, NULL,
                                  have ? params_of(&cfg) : 0, 1);
        if (have) bert_config_free(&cfg);
        if (!row) return SQLITE_NOMEM;
        row->loaded = rt_registry_is_loaded("builtin");
    }
    cur->pos = 0;
    return SQLITE_OK;
}

static int modelsNext(sqlite3_vtab_cursor *pCur)
{
    ((models_cursor *)pCur)->pos++;
    return SQLITE_OK;
}

static int modelsEof(sqlite3_vtab_cursor *pCur)
{
    models_cursor *cur = (models_cursor *)pCur;
    return cur->pos >= cur->n;
}

static int modelsColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i)
{
    models_cursor *cur = (models_cursor *)pCur;
    const models_row *r = &cur->rows[cur->pos];
    switch (i) {
    case COL_NAME: sqlite3_result_text(ctx, r->name, -1, SQLITE_TRANSIENT); break;
    case COL_VERSION: sqlite3_result_int64(ctx, r->version); break;
    case COL_SOURCE: sqlite3_result_text(ctx, r->source, -1, SQLITE_TRANSIENT); break;
    case COL_LOADED: sqlite3_result_int(ctx, r->loaded); break;
    case COL_CREATED:
        if (r->created) sqlite3_result_text(ctx, r->created, -1, SQLITE_TRANSIENT);
        break;
    case COL_PATH:
        if (r->path) sqlite3_result_text(ctx, r->path, -1, SQLITE_TRANSIENT);
        break;
    case COL_METRICS:
        if (r->metrics) {
            sqlite3_result_text(ctx, r->metrics, -1, SQLITE_TRANSIENT);
            sqlite3_result_subtype(ctx, SX_JSON_SUBTYPE);
        }
        break;
    case COL_KIND:
        if (r->head >= 0)
            sqlite3_result_text(ctx, r->head ? "classifier" : "embedding", -1, SQLITE_STATIC);
        break;
    default:
        if (!r->have_cfg) break; /* NULL */
        switch (i) {
        case COL_LABELS:
            if (!r->labels) break; /* an embedding model: NULL */
            sqlite3_result_text(ctx, r->labels, -1, SQLITE_TRANSIENT);
            sqlite3_result_subtype(ctx, SX_JSON_SUBTYPE);
            break;
        case COL_TYPE: sqlite3_result_text(ctx, r->type, -1, SQLITE_TRANSIENT); break;
        case COL_LAYERS: sqlite3_result_int(ctx, r->layers); break;
        case COL_HIDDEN: sqlite3_result_int(ctx, r->hidden); break;
        case COL_HEADS: sqlite3_result_int(ctx, r->heads); break;
        case COL_MAXLEN: sqlite3_result_int(ctx, r->maxlen); break;
        case COL_PARAMS: sqlite3_result_int64(ctx, r->params); break;
        case COL_WIDE:
            if (!r->wide) break;
            sqlite3_result_text(ctx, r->wide, -1, SQLITE_TRANSIENT);
            sqlite3_result_subtype(ctx, SX_JSON_SUBTYPE);
            break;
        case COL_CPU_PRECISION:
            if (r->cpu_precision) sqlite3_result_text(ctx, r->cpu_precision, -1, SQLITE_TRANSIENT);
            break;
        }
    }
    return SQLITE_OK;
}

static int modelsRowid(sqlite3_vtab_cursor *pCur, sqlite_int64 *pRowid)
{
    *pRowid = ((models_cursor *)pCur)->pos + 1;
    return SQLITE_OK;
}

/* One plan: a full scan of a short list (idxNum unused, always 0). */
static int modelsBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info)
{
    (void)pVtab;
    info->idxNum = 0;
    info->estimatedCost = 100;
    info->estimatedRows = 10;
    return SQLITE_OK;
}

static sqlite3_module modelsModule = {
    /* iVersion    */ 0,
    /* xCreate     */ 0, /* eponymous only: no CREATE VIRTUAL TABLE */
    /* xConnect    */ modelsConnect,
    /* xBestIndex  */ modelsBestIndex,
    /* xDisconnect */ modelsDisconnect,
    /* xDestroy    */ modelsDisconnect,
    /* xOpen       */ modelsOpen,
    /* xClose      */ modelsClose,
    /* xFilter     */ modelsFilter,
    /* xNext       */ modelsNext,
    /* xEof        */ modelsEof,
    /* xColumn     */ modelsColumn,
    /* xRowid      */ modelsRowid,
    /* xUpdate     */ 0, /* read-only: use sentiment_load / sentiment_save */
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

int sx_register_models_vtab(sqlite3 *db, sx_conn *c)
{
    sx_conn_ref(c);
    return sqlite3_create_module_v2(db, "sentiment_models", &modelsModule, c, sx_conn_unref);
}

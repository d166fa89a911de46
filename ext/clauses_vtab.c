/* clauses_vtab.c: sentiment_clauses(text [, model]), clause-level sentiment
 * as a table-valued function.
 *
 *   SELECT clause, label, round(score, 2) FROM sentiment_clauses('屏幕清晰，电池耐用，就是有点重');
 *   屏幕清晰   positive  0.97
 *   电池耐用   positive  0.95
 *   就是有点重 negative  0.81
 *
 * One row per clause, in text order: idx (from 0), clause, start and end
 * (its span in the text in characters, end exclusive: substr(text, start +
 * 1, end - start) is the clause), label, score (P(positive) for a
 * negative/positive model, else P(label), as sentiment_score), probs (JSON
 * label -> probability). All clauses of a text are classified in one
 * engine call, each as a text of its own. This is clause-level sentiment:
 * the model reads each clause alone; it is not an aspect model trained to
 * link opinions to targets (an opinion whose target is in another clause,
 * "价格？太贵了", is labelled without it).
 *
 * The split rule. A clause ends at sentence or clause punctuation:
 * Chinese 。！？；，：… and line breaks, and the Western . ! ? ; , : when
 * they are not between two digits (3.5, 1,000 and 10:30 stay whole). The
 * enumeration comma 、 and quotation marks do not split (屏幕、电池都好 is
 * one clause). A run of punctuation ends one clause; the punctuation
 * belongs to no clause. White space around a clause is left out of it, and
 * a clause that is blank to the model (tokenizer_text_blank) gives no row.
 * Invalid UTF-8 counts one character per invalid byte. NULL text gives no
 * rows; text without punctuation is one clause.
 */
#include <stdlib.h>
#include <string.h>

#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/models.h"
#include "ext/register.h"
#include "ext/results.h"

enum {
    COL_IDX,
    COL_CLAUSE,
    COL_START,
    COL_END,
    COL_LABEL,
    COL_SCORE,
    COL_PROBS,
    COL_TEXT,
    COL_MODEL
};

typedef struct clauses_clause {
    size_t byte0, byte1; /* in the text */
    int start, end;      /* characters */
} clauses_clause;

typedef struct clauses_vtab {
    sqlite3_vtab base;
    sx_conn *c;
} clauses_vtab;

typedef struct clauses_cursor {
    sqlite3_vtab_cursor base;
    char *text; /* a copy (sqlite3_malloc'd) */
    clauses_clause *clauses;
    float *probs; /* n x K */
    rt_model *m;
    int n, K, pos;
} clauses_cursor;

/* Bytes of the UTF-8 character at s[0..n), 1 for an invalid byte. */
static size_t char_len(const unsigned char *s, size_t n)
{
    size_t k = s[0] < 0x80         ? 1
               : (s[0] >> 5) == 6  ? 2
               : (s[0] >> 4) == 14 ? 3
               : (s[0] >> 3) == 30 ? 4
                                   : 1;
    if (k > n) return 1;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 1;
    return k;
}

static int is_digit_at(const char *t, size_t len, size_t i)
{
    return i < len && t[i] >= '0' && t[i] <= '9';
}

/* 1 when the character of k bytes at t[i] ends a clause. */
static int is_break(const char *t, size_t len, size_t i, size_t k)
{
    static const char *const wide[] = {"。", "！", "？", "；", "，", "：", "…", "\xe2\x80\xa8"};
    if (k == 1) {
        char ch = t[i];
        if (ch == '\n' || ch == '\r') return 1;
        if (ch == '.' || ch == ',' || ch == ':')
            return !(i > 0 && is_digit_at(t, len, i - 1) && is_digit_at(t, len, i + 1));
        return ch == '!' || ch == '?' || ch == ';';
    }
    for (size_t w = 0; w < sizeof wide / sizeof *wide; w++)
        if (strlen(wide[w]) == k && !memcmp(t + i, wide[w], k)) return 1;
    return 0;
}

static int is_space(const char *t, size_t i, size_t k)
{
    return (k == 1 && (t[i] == ' ' || t[i] == '\t' || t[i] == '\f' || t[i] == '\v')) ||
           (k == 3 && !memcmp(t + i, "\xe3\x80\x80", 3)); /* ideographic space */
}

/* Splits t into clauses (the rule above); *out sqlite3_malloc'd. */
static int split(const char *t, size_t len, clauses_clause **out, int *n_out)
{
    clauses_clause *cl = NULL;
    int n = 0, cap = 0, chars = 0, in = 0;
    clauses_clause cur = {0};
    size_t last_end = 0;
    int last_end_chars = 0;
    *out = NULL;
    *n_out = 0;
    for (size_t i = 0; i <= len;) {
        size_t k = i < len ? char_len((const unsigned char *)t + i, len - i) : 0;
        int brk = i == len || is_break(t, len, i, k);
        if (brk) {
            if (in) {
                cur.byte1 = last_end;
                cur.end = last_end_chars;
                if (n == cap) {
                    cap = cap ? 2 * cap : 8;
                    clauses_clause *g = sqlite3_realloc64(cl, (sqlite3_uint64)cap * sizeof *cl);
                    if (!g) {
                        sqlite3_free(cl);
                        return SQLITE_NOMEM;
                    }
                    cl = g;
                }
                cl[n++] = cur;
                in = 0;
            }
            if (i == len) break;
        } else if (!is_space(t, i, k)) {
            if (!in) {
                in = 1;
                cur.byte0 = i;
                cur.start = chars;
            }
            last_end = i + k;
            last_end_chars = chars + 1;
        }
        i += k;
        chars++;
    }
    *out = cl;
    *n_out = n;
    return SQLITE_OK;
}

static int clausesConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                          sqlite3_vtab **ppVtab, char **pzErr)
{
    (void)argc;
    (void)argv;
    (void)pzErr;
    int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(idx INTEGER, clause TEXT, start INTEGER, "
                                      "\"end\" INTEGER, label TEXT, score REAL, probs TEXT, "
                                      "text HIDDEN, model HIDDEN)");
    if (rc != SQLITE_OK) return rc;
    clauses_vtab *v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->c = pAux;
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    *ppVtab = &v->base;
    return SQLITE_OK;
}

static int clausesDisconnect(sqlite3_vtab *pVtab)
{
    sqlite3_free(pVtab);
    return SQLITE_OK;
}

static int clausesOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor)
{
    (void)pVtab;
    clauses_cursor *cur = sqlite3_malloc(sizeof *cur);
    if (!cur) return SQLITE_NOMEM;
    memset(cur, 0, sizeof *cur);
    *ppCursor = &cur->base;
    return SQLITE_OK;
}

static void cursor_reset(clauses_cursor *cur)
{
    sqlite3_free(cur->text);
    sqlite3_free(cur->clauses);
    sqlite3_free(cur->probs);
    rt_registry_release(cur->m);
    cur->text = NULL;
    cur->clauses = NULL;
    cur->probs = NULL;
    cur->m = NULL;
    cur->n = cur->pos = 0;
}

static int clausesClose(sqlite3_vtab_cursor *pCur)
{
    cursor_reset((clauses_cursor *)pCur);
    sqlite3_free(pCur);
    return SQLITE_OK;
}

static int set_error(sqlite3_vtab *v, char *msg, int rc)
{
    sqlite3_free(v->zErrMsg);
    v->zErrMsg = msg;
    return rc;
}

/* idxNum bit 1: text given (argv[0]); bit 2: model given (next argv). */
static int clausesFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr, int argc,
                         sqlite3_value **argv)
{
    clauses_cursor *cur = (clauses_cursor *)pCur;
    clauses_vtab *v = (clauses_vtab *)pCur->pVtab;
    const char *fn = "sentiment_clauses()";
    char *errmsg = NULL;
    const char *text = NULL, *model = NULL;
    size_t len = 0;
    int rc;
    (void)idxStr;
    cursor_reset(cur);
    if (!(idxNum & 1) || argc < 1) return SQLITE_OK;
    if (sx_value_text(argv[0], &text, &len) != SQLITE_OK) return SQLITE_NOMEM;
    if (!text) return SQLITE_OK;
    if (idxNum & 2 && argc > 1) {
        if (sqlite3_value_type(argv[1]) == SQLITE_NULL)
            return set_error(&v->base, sqlite3_mprintf("%s: the model name is NULL", fn),
                             SQLITE_ERROR);
        if ((rc = sx_arg_name(argv[1], fn, "model name", &model, &errmsg)) != SQLITE_OK)
            return set_error(&v->base, errmsg, rc);
    }
    cur->text = sqlite3_malloc64(len + 1);
    if (!cur->text) return SQLITE_NOMEM;
    memcpy(cur->text, text, len);
    cur->text[len] = 0;
    clauses_clause *all = NULL;
    int n_all = 0;
    if ((rc = split(cur->text, len, &all, &n_all)) != SQLITE_OK) return rc;
    /* the clauses the model sees as text */
    int n = 0;
    for (int i = 0; i < n_all; i++)
        if (!tokenizer_text_blank(cur->text + all[i].byte0, all[i].byte1 - all[i].byte0))
            all[n++] = all[i];
    cur->clauses = all;
    cur->n = n;
    if (!n) return SQLITE_OK;
    if ((rc = sx_model_resolve(v->c, fn, model, &cur->m, &errmsg)) != SQLITE_OK)
        return set_error(&v->base, errmsg, rc);
    cur->K = cur->m->bert->cfg.num_labels;
    if (!cur->m->bert->has_head)
        return set_error(&v->base,
                         sqlite3_mprintf("%s: model has no classification head (an embedding "
                                         "model)",
                                         fn),
                         SQLITE_ERROR);
    const char **texts = sqlite3_malloc64((sqlite3_uint64)n * sizeof *texts);
    size_t *lens = sqlite3_malloc64((sqlite3_uint64)n * sizeof *lens);
    cur->probs = sqlite3_malloc64((sqlite3_uint64)n * cur->K * sizeof *cur->probs);
    if (!texts || !lens || !cur->probs) {
        sqlite3_free(texts);
        sqlite3_free(lens);
        return SQLITE_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        texts[i] = cur->text + cur->clauses[i].byte0;
        lens[i] = cur->clauses[i].byte1 - cur->clauses[i].byte0;
    }
    rc = sx_engine_classify(v->c, fn, cur->m, texts, lens, n, 0, cur->probs, NULL, &errmsg);
    sqlite3_free(texts);
    sqlite3_free(lens);
    if (rc != SQLITE_OK) return set_error(&v->base, errmsg, rc);
    return SQLITE_OK;
}

static int clausesNext(sqlite3_vtab_cursor *pCur)
{
    ((clauses_cursor *)pCur)->pos++;
    return SQLITE_OK;
}

static int clausesEof(sqlite3_vtab_cursor *pCur)
{
    clauses_cursor *cur = (clauses_cursor *)pCur;
    return cur->pos >= cur->n;
}

static int clausesColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i)
{
    clauses_cursor *cur = (clauses_cursor *)pCur;
    const clauses_clause *cl = &cur->clauses[cur->pos];
    const float *p = cur->probs ? cur->probs + (size_t)cur->pos * cur->K : NULL;
    const bert_config *cfg = cur->m ? &cur->m->bert->cfg : NULL;
    switch (i) {
    case COL_IDX: sqlite3_result_int(ctx, cur->pos); break;
    case COL_CLAUSE:
        sqlite3_result_text(ctx, cur->text + cl->byte0, (int)(cl->byte1 - cl->byte0),
                            SQLITE_TRANSIENT);
        break;
    case COL_START: sqlite3_result_int(ctx, cl->start); break;
    case COL_END: sqlite3_result_int(ctx, cl->end); break;
    case COL_LABEL:
        sqlite3_result_text(ctx, cfg->id2label[sx_argmax(p, cur->K)], -1, SQLITE_TRANSIENT);
        break;
    case COL_SCORE: sqlite3_result_double(ctx, sx_score(cfg, p)); break;
    case COL_PROBS: sx_result_json(ctx, sx_probs_json(cfg, p)); break;
    case COL_TEXT: sqlite3_result_text(ctx, cur->text, -1, SQLITE_TRANSIENT); break;
    default: break; /* model: NULL */
    }
    return SQLITE_OK;
}

static int clausesRowid(sqlite3_vtab_cursor *pCur, sqlite_int64 *pRowid)
{
    *pRowid = ((clauses_cursor *)pCur)->pos + 1;
    return SQLITE_OK;
}

/* text (required) and model equality constraints, passed in that order. */
static int clausesBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *info)
{
    int text_i = -1, model_i = -1;
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->op != SQLITE_INDEX_CONSTRAINT_EQ) continue;
        if (!c->usable) {
            if (c->iColumn == COL_TEXT || c->iColumn == COL_MODEL) return SQLITE_CONSTRAINT;
            continue;
        }
        if (c->iColumn == COL_TEXT) text_i = i;
        if (c->iColumn == COL_MODEL) model_i = i;
    }
    if (text_i < 0) {
        sqlite3_free(pVtab->zErrMsg);
        pVtab->zErrMsg = sqlite3_mprintf("sentiment_clauses(): expected a text argument, "
                                         "sentiment_clauses(text [, model])");
        return SQLITE_ERROR;
    }
    info->aConstraintUsage[text_i].argvIndex = 1;
    info->aConstraintUsage[text_i].omit = 1;
    info->idxNum = 1;
    if (model_i >= 0) {
        info->aConstraintUsage[model_i].argvIndex = 2;
        info->aConstraintUsage[model_i].omit = 1;
        info->idxNum |= 2;
    }
    info->estimatedCost = 1000;
    info->estimatedRows = 4;
    return SQLITE_OK;
}

static sqlite3_module clausesModule = {
    /* iVersion    */ 0,
    /* xCreate     */ 0, /* eponymous only */
    /* xConnect    */ clausesConnect,
    /* xBestIndex  */ clausesBestIndex,
    /* xDisconnect */ clausesDisconnect,
    /* xDestroy    */ clausesDisconnect,
    /* xOpen       */ clausesOpen,
    /* xClose      */ clausesClose,
    /* xFilter     */ clausesFilter,
    /* xNext       */ clausesNext,
    /* xEof        */ clausesEof,
    /* xColumn     */ clausesColumn,
    /* xRowid      */ clausesRowid,
    /* xUpdate     */ 0,
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

int sx_register_clauses(sqlite3 *db, sx_conn *c)
{
    sx_conn_ref(c);
    return sqlite3_create_module_v2(db, "sentiment_clauses", &clausesModule, c, sx_conn_unref);
}

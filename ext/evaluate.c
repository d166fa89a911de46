/* evaluate.c: a model scored against labeled rows: sentiment_evaluate(text,
 * label [, model [, labels]]), and sentiment_int8_check() with the same
 * arguments (at the end of this comment).
 *
 *   SELECT sentiment_evaluate(comment, label, 'hotel') FROM test_reviews;
 *   SELECT sentiment_evaluate(text, stars, 'default',
 *                             '{"1":"negative","5":"positive"}') FROM t;
 *
 * An aggregate returning JSON:
 *   {"model":"hotel","rows":200,"skipped":1,"unknown_labels":0,
 *    "accuracy":0.915,"macro_f1":0.9149,
 *    "labels":{"negative":{"precision":0.92,"recall":0.91,"f1":0.9149,
 *                          "support":100,"predicted":99}, ...},
 *    "confusion":{"labels":["negative","positive"],"matrix":[[91,9],[8,92]]}}
 * matrix[i][j] counts rows labeled labels[i] that the model predicted as
 * labels[j]. `labels` lists the model's labels in class order, then any
 * label in the data the model does not know, in order of appearance.
 *
 * Labels of the data and of the model. `labels` (JSON object, optional)
 * maps a label of the data to one of the model's: {"0":"negative",
 * "1":"positive"}; a label it does not list is compared as it is. Without
 * it, for a model whose labels are exactly negative and positive (the
 * built-in one), the INTEGER labels 0 and 1 mean negative and positive, the
 * convention of the public binary sets and of train(); the result then
 * says so: "label_map":{"0":"negative","1":"positive"},
 * "label_map_by":"convention" ("option" when `labels` was given).
 * When not one row's label is a label of the model the result is an error
 * naming both label sets and the `labels` argument; when only some are,
 * the JSON has a "warning" saying how many rows and which labels.
 *
 * Rows. Text is converted as sentiment() converts it; a row with NULL or
 * blank text (text that tokenizes to nothing, see functions.c) or a NULL
 * label is skipped and counted in
 * "skipped". A label is compared as text (an INTEGER 1 is '1'). A label
 * the model does not have can never be predicted, so such a row counts as
 * an error in accuracy and in the per-label figures, and in
 * "unknown_labels".
 *
 * Figures, as scikit-learn's classification_report computes them: for each
 * label, precision = correct / predicted and recall = correct / support
 * (0 when the divisor is 0), f1 their harmonic mean (0 when both are 0).
 * macro_f1 is the mean F1 over the labels that occur in the data or in the
 * predictions. With no usable rows, accuracy and macro_f1 are null.
 *
 * A model with a wide part (model/encoder/wide.h) is scored as a whole (its
 * logits are the encoder's plus the wide part's), and the JSON says so:
 * "wide":{"features":"char_ngrams","ngram_range":[1,3],...}, its settings
 * (null for a model without one); train()'s report has each part's own
 * validation accuracy.
 *
 * Texts are buffered and classified EVAL_BATCH (64) at a time, one encoder
 * call per batch, on this connection's device; the model argument is
 * resolved on the first row (default 'default').
 *
 * sentiment_int8_check() reads the rows and labels the same way, but
 * classifies each batch on the CPU with FP32 and with INT8 linear layers
 * (runtime/int8_measure.h, through conn_engine.c) and returns
 *   {"model":"hotel","rows":400,"skipped":0,"unknown_labels":0,
 *    "accuracy_fp32":0.9125,"accuracy_int8":0.9125,"agreement":1,
 *    "auto":true,"why":"held-out accuracy ...","cpu_precision":"int8: ..."}
 * With rows, its figures become the model's INT8 check in the cache
 * (rt_registry_set_int8_check), which precision auto follows from then on
 * (model/format/int8_check.h's rule) and sentiment_save() stores. It is
 * DIRECTONLY and an admin function: it changes what auto runs.
 */
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/errors.h"
#include "ext/models.h"
#include "ext/register.h"
#include "ext/results.h"
#include "runtime/device.h"
#include "runtime/int8_measure.h"
#include "runtime/registry.h"

#define EVAL_BATCH 64
#define EVAL_FN "sentiment_evaluate()"
#define INT8_FN "sentiment_int8_check()"

typedef struct ev_state {
    sx_conn *c;
    const char *fn;     /* EVAL_FN or INT8_FN, for messages */
    rt_int8_measure *q; /* sentiment_int8_check(): the measurement */
    rt_model *m;        /* referenced */
    char *model_name;
    int K;        /* the model's labels */
    char **extra; /* labels the model does not know */
    int n_extra, cap_extra;
    int64_t *conf; /* (K + n_extra) x K, gold x predicted */
    int conf_rows_cap;
    int64_t rows, skipped, unknown;
    char **map_from, **map_to; /* the labels argument */
    int n_map, map_given;
    int conv; /* the 0/1 convention applies (model negative/positive) */
    int conv_used;
    /* the pending batch */
    char *texts[EVAL_BATCH];
    size_t lens[EVAL_BATCH];
    int gold[EVAL_BATCH]; /* label index; >= K for an extra */
    int n;
    float *probs; /* EVAL_BATCH x K */
    int failed;
} ev_state;

static void state_free(ev_state *s)
{
    if (!s) return;
    rt_int8_measure_free(s->q);
    rt_registry_release(s->m);
    sqlite3_free(s->model_name);
    for (int i = 0; i < s->n_extra; i++) sqlite3_free(s->extra[i]);
    for (int i = 0; i < s->n_map; i++) {
        sqlite3_free(s->map_from[i]);
        sqlite3_free(s->map_to[i]);
    }
    sqlite3_free(s->map_from);
    sqlite3_free(s->map_to);
    sqlite3_free(s->extra);
    sqlite3_free(s->conf);
    for (int i = 0; i < s->n; i++) sqlite3_free(s->texts[i]);
    sqlite3_free(s->probs);
    sqlite3_free(s);
}

/* Classifies the pending rows into the confusion matrix, or, for
 * sentiment_int8_check(), into the measurement (a label the model lacks
 * is never right). */
static int flush(ev_state *s, char **errmsg)
{
    int rc;
    if (!s->n) return SQLITE_OK;
    if (s->q) {
        int labels[EVAL_BATCH];
        for (int i = 0; i < s->n; i++) labels[i] = s->gold[i] < s->K ? s->gold[i] : -1;
        rc = sx_engine_int8_add(s->c, s->fn, s->q, (const char *const *)s->texts, s->lens, labels,
                                s->n, errmsg);
    } else {
        rc = sx_engine_classify(s->c, s->fn, s->m, (const char *const *)s->texts, s->lens, s->n, 0,
                                s->probs, NULL, errmsg);
    }
    if (rc != SQLITE_OK) return rc;
    for (int i = 0; i < s->n; i++) {
        if (!s->q)
            s->conf[(size_t)s->gold[i] * s->K + sx_argmax(s->probs + (size_t)i * s->K, s->K)]++;
        sqlite3_free(s->texts[i]);
        s->texts[i] = NULL;
    }
    s->n = 0;
    return SQLITE_OK;
}

/* The labels argument, read with SQLite's json_each. */
static int parse_map(ev_state *s, sqlite3_value *v, char **errmsg)
{
    sqlite3 *db = s->c->db;
    sqlite3_stmt *st = NULL;
    int rc, cap = 0;
    s->map_given = 1;
    if (sqlite3_value_type(v) != SQLITE_TEXT ||
        sqlite3_prepare_v2(db, "SELECT json_type(?1) = 'object'", -1, &st, NULL) != SQLITE_OK)
        goto bad;
    sqlite3_bind_value(st, 1, v);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW || sqlite3_column_int(st, 0) != 1) goto bad;
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT key, value, type FROM json_each(?1)", -1, &st, NULL) !=
        SQLITE_OK)
        goto bad;
    sqlite3_bind_value(st, 1, v);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0);
        const char *t = (const char *)sqlite3_column_text(st, 1);
        const char *type = (const char *)sqlite3_column_text(st, 2);
        if (!k || !t || !type) goto nomem;
        if (strcmp(type, "text") || bert_config_label_index(&s->m->bert->cfg, t) < 0) {
            rc = sx_fail(errmsg, SQLITE_ERROR, s->fn,
                         "labels: '%s' maps to %s%s%s, which is not a label of model '%s'", k,
                         strcmp(type, "text") ? "a JSON " : "'", strcmp(type, "text") ? type : t,
                         strcmp(type, "text") ? "" : "'", s->model_name);
            goto end;
        }
        if (s->n_map == cap) {
            cap = cap ? 2 * cap : 4;
            char **f = sqlite3_realloc64(s->map_from, (sqlite3_uint64)cap * sizeof *f);
            if (f) s->map_from = f;
            char **to = sqlite3_realloc64(s->map_to, (sqlite3_uint64)cap * sizeof *to);
            if (to) s->map_to = to;
            if (!f || !to) goto nomem;
        }
        s->map_from[s->n_map] = sqlite3_mprintf("%s", k);
        s->map_to[s->n_map] = sqlite3_mprintf("%s", t);
        s->n_map++;
        if (!s->map_from[s->n_map - 1] || !s->map_to[s->n_map - 1]) goto nomem;
    }
    if (rc != SQLITE_DONE) goto bad;
    sqlite3_finalize(st);
    return SQLITE_OK;
bad:
    rc = sx_fail(errmsg, SQLITE_ERROR, s->fn,
                 "labels must be a JSON object mapping labels of the data to labels of the "
                 "model, e.g. '{\"0\":\"negative\",\"1\":\"positive\"}'");
    goto end;
nomem:
    rc = sx_fail(errmsg, SQLITE_NOMEM, s->fn, "out of memory");
end:
    sqlite3_finalize(st);
    return rc;
}

/* The model's label a row's label stands for (the label itself if none). */
static const char *map_label(ev_state *s, sqlite3_value *v, const char *label)
{
    for (int i = 0; i < s->n_map; i++)
        if (!strcmp(s->map_from[i], label)) return s->map_to[i];
    if (!s->map_given && s->conv && sqlite3_value_type(v) == SQLITE_INTEGER) {
        sqlite3_int64 x = sqlite3_value_int64(v);
        if (x == 0 || x == 1) {
            s->conv_used = 1;
            return x ? "positive" : "negative";
        }
    }
    return label;
}

/* The row's class in *out: the model's label index, else K + the index of
 * the label among those the model lacks (added when new). */
static int gold_index(ev_state *s, const char *label, int *out, char **errmsg)
{
    int i = bert_config_label_index(&s->m->bert->cfg, label);
    *out = i;
    if (i >= 0) return SQLITE_OK;
    s->unknown++;
    for (i = 0; i < s->n_extra; i++)
        if (!strcmp(s->extra[i], label)) {
            *out = s->K + i;
            return SQLITE_OK;
        }
    if (s->n_extra == s->cap_extra) {
        int cap = s->cap_extra ? 2 * s->cap_extra : 4;
        char **e = sqlite3_realloc64(s->extra, (sqlite3_uint64)cap * sizeof *e);
        int64_t *conf = sqlite3_realloc64(s->conf,
                                          (sqlite3_uint64)(s->K + cap) * s->K * sizeof *conf);
        if (e) s->extra = e;
        if (conf) s->conf = conf;
        if (!e || !conf) goto nomem;
        memset(s->conf + (size_t)(s->K + s->cap_extra) * s->K, 0,
               (size_t)(cap - s->cap_extra) * s->K * sizeof *conf);
        s->cap_extra = cap;
    }
    if (!(s->extra[s->n_extra] = sqlite3_mprintf("%s", label))) goto nomem;
    *out = s->K + s->n_extra++;
    return SQLITE_OK;
nomem:
    return sx_fail(errmsg, SQLITE_NOMEM, s->fn, "out of memory");
}

/* Both aggregates' step: int8 1 for sentiment_int8_check() (FP32 measured
 * against INT8 instead of the confusion matrix filled). */
static void step(sqlite3_context *ctx, int argc, sqlite3_value **argv, int int8)
{
    const char *fn = int8 ? INT8_FN : EVAL_FN;
    ev_state *s;
    char *errmsg = NULL;
    const char *text, *label;
    size_t len;
    int g, first;

    if (int8 && sx_admin_refused(ctx, sqlite3_user_data(ctx), fn)) return;
    if (!(s = sx_agg_state(ctx, sizeof *s, &first))) return;
    if (first) {
        const char *name = NULL;
        s->c = sqlite3_user_data(ctx);
        s->fn = fn;
        if (argc > 2) {
            if (sqlite3_value_type(argv[2]) == SQLITE_NULL) {
                sx_fail(&errmsg, SQLITE_ERROR, s->fn,
                        "model name is NULL; expected a name from sentiment_models, e.g. "
                        "'default'");
                goto fail;
            }
            if (sx_arg_name(argv[2], s->fn, "model name", &name, &errmsg) != SQLITE_OK) goto fail;
        }
        if (sx_model_resolve(s->c, s->fn, name, &s->m, &errmsg) != SQLITE_OK) goto fail;
        s->model_name = sqlite3_mprintf("%s", name ? name : "default");
        s->K = s->m->bert->cfg.num_labels;
        s->probs = sqlite3_malloc64((sqlite3_uint64)EVAL_BATCH * s->K * sizeof *s->probs);
        s->conf = sqlite3_malloc64((sqlite3_uint64)s->K * s->K * sizeof *s->conf);
        if (!s->model_name || !s->probs || !s->conf) goto nomem;
        memset(s->conf, 0, (size_t)s->K * s->K * sizeof *s->conf);
        {
            const bert_config *cfg = &s->m->bert->cfg;
            s->conv = s->K == 2 && bert_config_label_index(cfg, "negative") >= 0 &&
                      bert_config_label_index(cfg, "positive") >= 0;
        }
        if (argc > 3 && sqlite3_value_type(argv[3]) != SQLITE_NULL &&
            parse_map(s, argv[3], &errmsg) != SQLITE_OK)
            goto fail;
        if (int8 && sx_engine_int8_begin(s->c, fn, s->m, &s->q, &errmsg) != SQLITE_OK) goto fail;
    }
    if (s->failed) return;
    if (sx_value_text(argv[0], &text, &len) != SQLITE_OK) goto nomem;
    if (!text || sqlite3_value_type(argv[1]) == SQLITE_NULL) {
        s->skipped++;
        return;
    }
    label = (const char *)sqlite3_value_text(argv[1]);
    if (!label) goto nomem;
    if (gold_index(s, map_label(s, argv[1], label), &g, &errmsg) != SQLITE_OK) goto fail;
    s->texts[s->n] = sqlite3_malloc64(len + 1);
    if (!s->texts[s->n]) goto nomem;
    memcpy(s->texts[s->n], text, len);
    s->texts[s->n][len] = 0;
    s->lens[s->n] = len;
    s->gold[s->n] = g;
    s->n++;
    s->rows++;
    if (s->n == EVAL_BATCH && flush(s, &errmsg) != SQLITE_OK) goto fail;
    return;
nomem:
    sx_fail(&errmsg, SQLITE_NOMEM, s->fn, "out of memory");
fail:
    s->failed = 1;
    if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
}

static void eval_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    step(ctx, argc, argv, 0);
}

static void int8_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    step(ctx, argc, argv, 1);
}

static void json_ratio(sqlite3_str *j, double x)
{
    sqlite3_str_appendf(j, "%.6g", x);
}

/* ---- the final step's steps ---------------------------------------------- */

/* The result of an aggregate that saw no row at all. */
static void result_no_rows(sqlite3_context *ctx)
{
    sqlite3_result_text(ctx,
                        "{\"rows\":0,\"skipped\":0,\"unknown_labels\":0,\"accuracy\":null,"
                        "\"macro_f1\":null,\"labels\":{},\"confusion\":{\"labels\":[],"
                        "\"matrix\":[]}}",
                        -1, SQLITE_STATIC);
    sqlite3_result_subtype(ctx, SX_JSON_SUBTYPE);
}

/* The error when not one row's label is a label of the model: both label
 * sets and how to map them (sqlite3_malloc'd; NULL when out of memory). */
static char *no_known_label_error(const ev_state *s)
{
    sqlite3_str *e = sqlite3_str_new(NULL);
    const bert_config *cfg = &s->m->bert->cfg;
    sqlite3_str_appendf(e, "%s: not one row's label is a label of model '%s' (", s->fn,
                        s->model_name);
    for (int i = 0; i < s->K; i++)
        sqlite3_str_appendf(e, "%s'%s'", i ? ", " : "", cfg->id2label[i]);
    sqlite3_str_appendall(e, "); the data's labels: ");
    for (int i = 0; i < s->n_extra && i < 10; i++)
        sqlite3_str_appendf(e, "%s'%s'", i ? ", " : "", s->extra[i]);
    if (s->n_extra > 10) sqlite3_str_appendf(e, ", ... (%d in all)", s->n_extra);
    sqlite3_str_appendf(e,
                        "; say what they mean with a fourth argument, e.g. "
                        "%.*s(text, label, '%s', '{\"%s\":\"%s\"}')",
                        (int)strlen(s->fn) - 2, s->fn, s->model_name, s->extra[0],
                        cfg->id2label[0]);
    return sqlite3_str_finish(e);
}

/* Label l of the confusion matrix: the model's, then the extra ones. */
static const char *label_name(const ev_state *s, int l)
{
    return l < s->K ? s->m->bert->cfg.id2label[l] : s->extra[l - s->K];
}

/* "model", the counts and "accuracy". */
static void append_counts(sqlite3_str *j, const ev_state *s)
{
    int64_t correct = 0;
    sqlite3_str_appendall(j, "{\"model\":");
    sx_json_string(j, s->model_name);
    for (int i = 0; i < s->K; i++) correct += s->conf[(size_t)i * s->K + i];
    sqlite3_str_appendf(j,
                        ",\"rows\":%lld,\"skipped\":%lld,\"unknown_labels\":%lld,"
                        "\"accuracy\":",
                        (long long)s->rows, (long long)s->skipped, (long long)s->unknown);
    if (s->rows) json_ratio(j, (double)correct / (double)s->rows);
    else sqlite3_str_appendall(j, "null");
}

/* "wide": the model's wide part's settings, or null. */
static void append_wide(sqlite3_str *j, const ev_state *s)
{
    char *w = NULL;
    const sm_wide_config *wc = &s->m->bert->cfg.wide;
    sqlite3_str_appendall(j, ",\"wide\":");
    if (wc->set && sm_wide_config_to_json(wc, &w, NULL) == SM_OK) sqlite3_str_appendall(j, w);
    else sqlite3_str_appendall(j, "null");
    free(w);
}

/* "warning", when some rows have a label the model does not have. */
static void append_warning(sqlite3_str *j, const ev_state *s)
{
    if (!s->unknown) return;
    sqlite3_str_appendf(j,
                        ",\"warning\":\"%lld of %lld rows have a label the model does "
                        "not have (",
                        (long long)s->unknown, (long long)s->rows);
    for (int i = 0; i < s->n_extra && i < 10; i++) {
        /* labels are JSON-escaped through sx_json_string into a scratch string */
        sqlite3_str *q = sqlite3_str_new(NULL);
        sx_json_string(q, s->extra[i]);
        char *lit = sqlite3_str_finish(q);
        size_t n = lit ? strlen(lit) : 0;
        sqlite3_str_appendf(j, "%s%.*s", i ? ", " : "", n >= 2 ? (int)n - 2 : 0,
                            lit ? lit + 1 : "");
        sqlite3_free(lit);
    }
    if (s->n_extra > 10) sqlite3_str_appendf(j, ", ... %d in all", s->n_extra);
    sqlite3_str_appendall(j, "), counted as errors; map labels with the fourth argument\"");
}

/* "label_map" and "label_map_by", when labels were mapped (by the
 * argument or the 0/1 convention). */
static void append_label_map(sqlite3_str *j, const ev_state *s)
{
    if (s->map_given) sx_json_label_map(j, s->map_from, s->map_to, s->n_map);
    else if (s->conv_used) sx_json_label_map(j, NULL, NULL, 0);
}

/* The per-label figures as a JSON object (sqlite3_malloc'd; NULL when out
 * of memory), for the labels that occur in the data or the predictions;
 * their F1 sum and count in *f1_sum and *f1_n. */
static char *per_label_json(const ev_state *s, double *f1_sum, int *f1_n)
{
    int K = s->K, L = K + s->n_extra, listed = 0;
    sqlite3_str *per = sqlite3_str_new(NULL);
    *f1_sum = 0;
    *f1_n = 0;
    sqlite3_str_appendchar(per, 1, '{');
    for (int l = 0; l < L; l++) {
        int64_t tp = l < K ? s->conf[(size_t)l * K + l] : 0, support = 0, predicted = 0;
        for (int p = 0; p < K; p++) support += s->conf[(size_t)l * K + p];
        if (l < K)
            for (int g = 0; g < L; g++) predicted += s->conf[(size_t)g * K + l];
        if (!support && !predicted) continue;
        double prec = predicted ? (double)tp / predicted : 0;
        double rec = support ? (double)tp / support : 0;
        double f1 = prec + rec > 0 ? 2 * prec * rec / (prec + rec) : 0;
        *f1_sum += f1;
        (*f1_n)++;
        if (listed++) sqlite3_str_appendchar(per, 1, ',');
        sx_json_string(per, label_name(s, l));
        sqlite3_str_appendall(per, ":{\"precision\":");
        json_ratio(per, prec);
        sqlite3_str_appendall(per, ",\"recall\":");
        json_ratio(per, rec);
        sqlite3_str_appendall(per, ",\"f1\":");
        json_ratio(per, f1);
        sqlite3_str_appendf(per, ",\"support\":%lld,\"predicted\":%lld}", (long long)support,
                            (long long)predicted);
    }
    sqlite3_str_appendchar(per, 1, '}');
    return sqlite3_str_finish(per);
}

/* "confusion": the labels and the matrix (gold rows, predicted columns). */
static void append_confusion(sqlite3_str *j, const ev_state *s)
{
    int K = s->K, L = K + s->n_extra;
    sqlite3_str_appendall(j, ",\"confusion\":{\"labels\":[");
    for (int l = 0; l < L; l++) {
        if (l) sqlite3_str_appendchar(j, 1, ',');
        sx_json_string(j, label_name(s, l));
    }
    sqlite3_str_appendall(j, "],\"matrix\":[");
    for (int g = 0; g < L; g++) {
        sqlite3_str_appendall(j, g ? ",[" : "[");
        for (int p = 0; p < L; p++)
            sqlite3_str_appendf(j, "%s%lld", p ? "," : "",
                                p < K ? (long long)s->conf[(size_t)g * K + p] : 0LL);
        sqlite3_str_appendchar(j, 1, ']');
    }
    sqlite3_str_appendall(j, "]}");
}

/* The result JSON (sqlite3_malloc'd; NULL when out of memory). */
static char *report_json(const ev_state *s)
{
    sqlite3_str *j = sqlite3_str_new(NULL);
    double f1_sum;
    int f1_n, oom = 0;
    append_counts(j, s);
    append_wide(j, s);
    append_warning(j, s);
    append_label_map(j, s);
    /* per-label figures, in a second string: macro_f1 comes first */
    char *per = per_label_json(s, &f1_sum, &f1_n);
    sqlite3_str_appendall(j, ",\"macro_f1\":");
    if (f1_n) json_ratio(j, f1_sum / f1_n);
    else sqlite3_str_appendall(j, "null");
    sqlite3_str_appendall(j, ",\"labels\":");
    if (per) sqlite3_str_appendall(j, per);
    else oom = 1;
    sqlite3_free(per);
    append_confusion(j, s);
    sqlite3_str_appendchar(j, 1, '}');
    int bad = sqlite3_str_errcode(j) != SQLITE_OK;
    char *out = sqlite3_str_finish(j);
    if (bad || oom) {
        sqlite3_free(out);
        return NULL;
    }
    return out;
}

/* ---- the final step ----------------------------------------------------- */

/* sentiment_int8_check()'s result (sqlite3_malloc'd; NULL when out of
 * memory): the counts, the check's figures (check: this measurement when
 * there were rows; null figures without), whether
 * precision auto may run the model in INT8 and why, and what auto runs on
 * this CPU (sentiment_models.cpu_precision). */
static char *int8_report_json(const ev_state *s, const sm_int8_check *check)
{
    sqlite3_str *j = sqlite3_str_new(NULL);
    char why[300], cpu[400];
    int vetted = rt_device_int8_vetted(s->m->key, check, why, sizeof why);
    rt_device_cpu_auto_precision(s->m->key, check, cpu, sizeof cpu);
    sqlite3_str_appendall(j, "{\"model\":");
    sx_json_string(j, s->model_name);
    sqlite3_str_appendf(j, ",\"rows\":%lld,\"skipped\":%lld,\"unknown_labels\":%lld",
                        (long long)s->rows, (long long)s->skipped, (long long)s->unknown);
    if (s->rows) { /* then check is this measurement */
        sqlite3_str_appendall(j, ",\"accuracy_fp32\":");
        json_ratio(j, check->accuracy_fp32);
        sqlite3_str_appendall(j, ",\"accuracy_int8\":");
        json_ratio(j, check->accuracy_int8);
        sqlite3_str_appendall(j, ",\"agreement\":");
        json_ratio(j, check->agreement);
    } else {
        sqlite3_str_appendall(j, ",\"accuracy_fp32\":null,\"accuracy_int8\":null,"
                                 "\"agreement\":null");
    }
    sqlite3_str_appendf(j, ",\"auto\":%s,\"why\":", vetted ? "true" : "false");
    sx_json_string(j, why);
    sqlite3_str_appendall(j, ",\"cpu_precision\":");
    sx_json_string(j, cpu);
    append_label_map(j, s);
    sqlite3_str_appendchar(j, 1, '}');
    if (sqlite3_str_errcode(j) != SQLITE_OK) {
        sqlite3_free(sqlite3_str_finish(j));
        return NULL;
    }
    return sqlite3_str_finish(j);
}

/* Both aggregates' final step. sentiment_int8_check() with rows makes
 * its measurement the model's INT8 check for the process
 * (rt_registry_set_int8_check), which precision auto then follows. */
static void final(sqlite3_context *ctx, int int8)
{
    ev_state **pp = sqlite3_aggregate_context(ctx, 0);
    ev_state *s = pp ? *pp : NULL;
    char *errmsg = NULL, *json;

    if (!s) {
        if (int8) {
            sqlite3_result_text(ctx,
                                "{\"rows\":0,\"skipped\":0,\"unknown_labels\":0,"
                                "\"accuracy_fp32\":null,\"accuracy_int8\":null,"
                                "\"agreement\":null}",
                                -1, SQLITE_STATIC);
            sqlite3_result_subtype(ctx, SX_JSON_SUBTYPE);
        } else {
            result_no_rows(ctx);
        }
        return;
    }
    if (s->failed) goto end;
    if (flush(s, &errmsg) != SQLITE_OK) goto fail;
    if (s->rows && s->unknown == s->rows) {
        errmsg = no_known_label_error(s);
        goto fail;
    }
    if (s->q) {
        sm_int8_check check = rt_registry_int8_check(s->m);
        if (s->rows) {
            check = rt_int8_measure_result(s->q);
            rt_registry_set_int8_check(s->m, &check);
        }
        json = int8_report_json(s, &check);
    } else {
        json = report_json(s);
    }
    if (json) sx_result_json(ctx, json);
    else sqlite3_result_error_nomem(ctx);
    goto end;
fail:
    if (errmsg) sqlite3_result_error(ctx, errmsg, -1);
    else sqlite3_result_error_nomem(ctx);
    sqlite3_free(errmsg);
end:
    state_free(s);
    *pp = NULL;
}

static void eval_final(sqlite3_context *ctx)
{
    final(ctx, 0);
}

static void int8_final(sqlite3_context *ctx)
{
    final(ctx, 1);
}

int sx_register_evaluate(sqlite3 *db, sx_conn *c)
{
    int rc = SQLITE_OK;
    for (int n = 2; n <= 4 && rc == SQLITE_OK; n++) {
        sx_conn_ref(c);
        rc = sqlite3_create_function_v2(db, "sentiment_evaluate", n,
                                        SQLITE_UTF8 | SQLITE_INNOCUOUS | SX_JSON_FLAGS, c, NULL,
                                        eval_step, eval_final, sx_conn_unref);
        if (rc != SQLITE_OK) break;
        /* it changes what precision auto runs for the model: no
         * INNOCUOUS, so a view or trigger cannot call it */
        sx_conn_ref(c);
        rc = sqlite3_create_function_v2(db, "sentiment_int8_check", n,
                                        SQLITE_UTF8 | SQLITE_DIRECTONLY | SX_JSON_FLAGS, c, NULL,
                                        int8_step, int8_final, sx_conn_unref);
    }
    return rc;
}

/* explain.c: sentiment_explain(text [, model [, options]]), why a text got
 * its label, token by token.
 *
 *   SELECT sentiment_explain('房间很脏，服务也差');
 *   -> {"label":"negative","score":0.97,"method":"integrated_gradients",
 *       "steps":32,"logit":2.41,"baseline_logit":-0.38,"sum":2.79,
 *       "truncated":false,
 *       "tokens":[{"token":"房","start":0,"end":1,"attribution":0.02}, ...]}
 *
 * Each token of the text (no [CLS]/[SEP]) with its span in the text as
 * given (start and end in characters, end exclusive, what substr(text,
 * start + 1, end - start) returns; transformers' offset_mapping) and its
 * attribution to the logit of the label explained: positive pushes toward
 * that label, negative away from it. "sum" is the attributions' total and
 * "logit" - "baseline_logit" what it approximates (the baseline is the text
 * with its tokens replaced by padding; model/train/explain.h has the
 * mathematics). "score" is the label's probability.
 *
 * options, a JSON object (every key optional):
 *   method  "integrated_gradients" (default; "ig") or "gradient_x_input"
 *           ("gxi": one backward pass, a first look at about 1/steps the cost)
 *   steps   integrated gradients' steps, 1..1024, default 32: the sum comes
 *           closer to logit - baseline_logit (the gap shrinks as 1/steps²)
 *   label   the label to explain (a name of the model's labels, or its index);
 *           default the predicted one
 * Text is truncated to max_length tokens as for sentiment() ("truncated"
 * says so; the tokens after the cut are not listed). NULL or blank text
 * gives NULL. A model without a classification head is an error. It runs on
 * the connection's device (a backend that can train: the CPU or CUDA); one
 * call costs about 3 x steps forward passes of the text. It stops, with
 * "interrupted", on sqlite3_interrupt() or the progress handler between
 * passes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "explain.h"
#include "json_in.h"
#include "sentiment_ext.h"

#define EXPLAIN_FN "sentiment_explain()"
#define EXPLAIN_MAX_BATCH 16

typedef struct explain_options {
    explain_method method;
    int steps;
    int label;                /* -1: predicted */
} explain_options;

static int options_parse(const char *text, const bert_config *cfg, explain_options *o,
                         char **errmsg)
{
    json_in_doc *doc = NULL;
    json_in_error jerr;
    int rc = SQLITE_OK;
    o->method = EXPLAIN_INTEGRATED_GRADIENTS;
    o->steps = 32;
    o->label = -1;
    if (!text) return SQLITE_OK;
    if (json_in_parse(text, strlen(text), &doc, &jerr) == SM_ERR_NOMEM)
        return sx_fail(errmsg, SQLITE_NOMEM, EXPLAIN_FN, "out of memory");
    const json_in_value *root = json_in_root(doc);
    if (!json_in_is(root, JSON_IN_OBJECT)) {
        rc = sx_fail(errmsg, SQLITE_ERROR, EXPLAIN_FN,
                     "options must be a JSON object, e.g. '{\"method\":\"gradient_x_input\"}'%s%s",
                     root ? "" : ": ", root ? "" : jerr.reason);
        goto end;
    }
    for (size_t i = 0; i < root->n && rc == SQLITE_OK; i++) {
        const char *key = root->members[i].key;
        const json_in_value *v = &root->members[i].value;
        if (!strcmp(key, "method")) {
            const char *s = json_in_is(v, JSON_IN_STRING) ? v->str : "";
            if (!strcmp(s, "integrated_gradients") || !strcmp(s, "ig"))
                o->method = EXPLAIN_INTEGRATED_GRADIENTS;
            else if (!strcmp(s, "gradient_x_input") || !strcmp(s, "gxi"))
                o->method = EXPLAIN_GRADIENT_X_INPUT;
            else
                rc = sx_fail(errmsg, SQLITE_ERROR, EXPLAIN_FN,
                             "option method must be \"integrated_gradients\" or "
                             "\"gradient_x_input\"");
        } else if (!strcmp(key, "steps")) {
            if (!json_in_is(v, JSON_IN_NUMBER) || !v->is_int || v->i < 1 || v->i > 1024)
                rc = sx_fail(errmsg, SQLITE_ERROR, EXPLAIN_FN,
                             "option steps must be an integer from 1 to 1024");
            else o->steps = (int)v->i;
        } else if (!strcmp(key, "label")) {
            int k = -1;
            if (json_in_is(v, JSON_IN_STRING)) {
                for (int j = 0; j < cfg->num_labels; j++)
                    if (!strcmp(cfg->id2label[j], v->str)) k = j;
            } else if (json_in_is(v, JSON_IN_NUMBER) && v->is_int && v->i >= 0 &&
                       v->i < cfg->num_labels) {
                k = (int)v->i;
            }
            if (k < 0) {
                sqlite3_str *s = sqlite3_str_new(NULL);
                for (int j = 0; j < cfg->num_labels; j++)
                    sqlite3_str_appendf(s, "%s'%s'", j ? ", " : "", cfg->id2label[j]);
                char *names = sqlite3_str_finish(s);
                rc = sx_fail(errmsg, SQLITE_ERROR, EXPLAIN_FN,
                             "option label must be one of the model's labels (%s) or its index "
                             "0..%d", names ? names : "", cfg->num_labels - 1);
                sqlite3_free(names);
            }
            o->label = k;
        } else {
            rc = sx_fail(errmsg, SQLITE_ERROR, EXPLAIN_FN,
                         "unknown option '%s'; known: method, steps, label", key);
        }
    }
end:
    json_in_free(doc);
    return rc;
}

/* The JSON result of one explained text. */
static char *result_json(const bert_config *cfg, const tokenizer *tok, const explain_options *o,
                         const bert_explanation *e, const int *ids, const int *starts,
                         const int *ends, int n_tokens, int truncated)
{
    sqlite3_str *s = sqlite3_str_new(NULL);
    sqlite3_str_appendall(s, "{\"label\":");
    sx_json_string(s, cfg->id2label[e->target]);
    sqlite3_str_appendf(s, ",\"score\":%.6g,\"method\":\"%s\",\"steps\":%d,\"logit\":%.7g,"
                        "\"baseline_logit\":%.7g,\"sum\":%.7g,\"truncated\":%s,\"tokens\":[",
                        (double)e->probs[e->target],
                        o->method == EXPLAIN_INTEGRATED_GRADIENTS ? "integrated_gradients"
                                                                  : "gradient_x_input",
                        o->method == EXPLAIN_INTEGRATED_GRADIENTS ? o->steps : 1,
                        (double)e->logit, (double)e->baseline_logit, e->attr_sum,
                        truncated ? "true" : "false");
    for (int i = 0; i < n_tokens; i++) {
        const char *t = tokenizer_token(tok, ids[i + 1]);
        sqlite3_str_appendall(s, i ? ",{\"token\":" : "{\"token\":");
        sx_json_string(s, t ? t : "[UNK]");
        sqlite3_str_appendf(s, ",\"start\":%d,\"end\":%d,\"attribution\":%.6g}", starts[i + 1],
                            ends[i + 1], (double)e->attr[i + 1]);
    }
    sqlite3_str_appendall(s, "]}");
    if (sqlite3_str_errcode(s)) {
        sqlite3_free(sqlite3_str_finish(s));
        return NULL;
    }
    return sqlite3_str_finish(s);
}

int sx_explain_json(sx_conn *c, const char *fn, sx_model *m, const char *text, size_t len,
                    const char *options, char **json, char **errmsg)
{
    char err[SM_ERR_MAX];
    int *ids = NULL, *starts = NULL, *ends = NULL, n = 0, truncated = 0, rc;
    bert_explainer *x = NULL;
    sx_poll poll;
    explain_options o;
    const bert_model *bm = m->bert;
    const bert_config *cfg = &bm->cfg;

    *json = NULL;
    sx_poll_begin(&poll, NULL);
    if ((rc = options_parse(options, cfg, &o, errmsg)) != SQLITE_OK) goto end;
    if (!bm->has_head) {
        rc = sx_fail(errmsg, SQLITE_ERROR, fn,
                     "model has no classification head (an embedding model): there is no "
                     "label to explain");
        goto end;
    }
    if (tokenizer_text_blank(text, len)) goto end; /* NULL */
    int max_len = sx_engine_max_length(c, bm);
    ids = sqlite3_malloc64((sqlite3_uint64)max_len * sizeof *ids);
    starts = sqlite3_malloc64((sqlite3_uint64)max_len * sizeof *starts);
    ends = sqlite3_malloc64((sqlite3_uint64)max_len * sizeof *ends);
    if (!ids || !starts || !ends) {
        rc = sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
        goto end;
    }
    sx_poll_begin(&poll, c->db);
    rc = tokenizer_encode_offsets(bm->tok, text, len, max_len, ids, starts, ends, &n, &truncated,
                                  sx_poll_stop, &poll, err);
    if (rc == SM_OK && (rc = sx_engine_backend(c, fn, errmsg)) != SQLITE_OK) goto end;
    /* gradient x input: the text and the baseline; integrated gradients:
     * the steps, EXPLAIN_MAX_BATCH at a time */
    int batch = o.method == EXPLAIN_GRADIENT_X_INPUT ? 2
                : o.steps < EXPLAIN_MAX_BATCH       ? o.steps
                                                    : EXPLAIN_MAX_BATCH;
    if (rc == SM_OK) rc = bert_explainer_create(c->be, bm, batch, n, &x, err);
    bert_explanation e;
    if (rc == SM_OK)
        rc = bert_explain(x, ids, n, o.label, o.method, o.steps, sx_poll_stop, &poll, &e, err);
    if (rc != SM_OK) {
        rc = sx_from_sm(rc, fn, err, errmsg);
        goto end;
    }
    c->rows++;
    c->truncated += truncated != 0;
    *json = result_json(cfg, bm->tok, &o, &e, ids, starts, ends, n - 2, truncated);
    if (!*json) rc = sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
end:
    sx_poll_end(&poll);
    bert_explainer_free(x);
    sqlite3_free(ids);
    sqlite3_free(starts);
    sqlite3_free(ends);
    return rc;
}

static void fn_explain(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    sx_conn *c = sqlite3_user_data(ctx);
    char *errmsg = NULL, *json = NULL;
    const char *text;
    size_t len = 0;
    int cached = 0;

    if (sx_value_text(argv[0], &text, &len) != SQLITE_OK) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (!text) return;
    if (argc > 2 && sqlite3_value_type(argv[2]) != SQLITE_NULL &&
        sqlite3_value_type(argv[2]) != SQLITE_TEXT) {
        sqlite3_result_error(ctx, EXPLAIN_FN ": options must be a JSON object (TEXT)", -1);
        return;
    }
    sx_model *m = sx_model_arg(ctx, c, EXPLAIN_FN, argc, argv, 1, &cached);
    if (!m) return;
    int rc = sx_explain_json(c, EXPLAIN_FN, m,
                             text, len, argc > 2 ? (const char *)sqlite3_value_text(argv[2]) : NULL,
                             &json, &errmsg);
    if (rc == SQLITE_OK && json) {
        sx_result_json(ctx, json);
    } else if (rc != SQLITE_OK && errmsg) {
        sqlite3_result_error(ctx, errmsg, -1);
        sqlite3_result_error_code(ctx, rc); /* SQLITE_INTERRUPT stays itself */
    } else if (rc != SQLITE_OK) {
        sqlite3_result_error_nomem(ctx);
    }
    sqlite3_free(errmsg);
    sx_model_arg_done(ctx, m, argc, 1, cached);
}

int sx_register_explain(sqlite3 *db, sx_conn *c)
{
    int rc = SQLITE_OK;
    for (int nargs = 1; nargs <= 3 && rc == SQLITE_OK; nargs++) {
        sx_conn_ref(c);
        rc = sqlite3_create_function_v2(db, "sentiment_explain", nargs,
                                        SQLITE_UTF8 | SQLITE_INNOCUOUS | SX_JSON_FLAGS, c,
                                        fn_explain, NULL, NULL, sx_conn_unref);
    }
    return rc;
}

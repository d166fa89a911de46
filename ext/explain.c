/* explain.c: sentiment_explain(text [, model [, options]]), why a text got
 * its label, token by token.
 *
 *   SELECT sentiment_explain('房间很脏，服务也差');
 *   -> {"text":"房间很脏，服务也差","label":"negative","score":0.97,"method":"integrated_gradients",
 *       "steps":32,"logit":2.41,"baseline_logit":-0.38,"sum":2.79,
 *       "truncated":false,
 *       "tokens":[{"token":"房","start":0,"end":1,"attribution":0.02}, ...]}
 *
 * "text" is the text (its characters as the spans count them: a character
 * of invalid UTF-8 is U+FFFD, so the spans index it as they index the
 * text given). Each token of the text (no [CLS]/[SEP]) with its span in the text as
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
 *
 * A model with a wide part (model/encoder/wide.h): the label, score and
 * logit are the whole model's (the encoder's logits plus the wide part's,
 * as sentiment() classifies), and the baseline's logit is the encoder's
 * baseline plus the wide part's bias (its logit for an empty text). The
 * wide part is linear, so its attributions are exact: each n-gram's term
 * weight[label, bucket] x value, split evenly among its characters, is
 * added to the token that holds each character, and each token also has
 * "wide", its share of that; "wide":{"logit":z,"bias":b,"unassigned":u}
 * gives the wide logit of the label, its bias and the terms of characters
 * in no listed token (white space, text after the cut), so that "sum" =
 * logit - baseline_logit - unassigned, up to the integrated gradients'
 * approximation of the encoder's share.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "ext/args.h"
#include "ext/conn.h"
#include "ext/conn_engine.h"
#include "ext/errors.h"
#include "ext/explain.h"
#include "ext/functions.h"
#include "ext/register.h"
#include "ext/results.h"
#include "format/json_in.h"
#include "tokenize/utf8.h"
#include "train/explain.h"

#define EXPLAIN_FN "sentiment_explain()"
#define EXPLAIN_MAX_BATCH 16

typedef struct explain_options {
    explain_method method;
    int steps;
    int label; /* -1: predicted */
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
                             "0..%d",
                             names ? names : "", cfg->num_labels - 1);
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

/* text[0..len) as a JSON string whose characters are the ones the spans
 * count (tokenizer_encode_offsets: a byte 0xC0..0xFF with the continuation
 * bytes after it is one character, every other byte one): a character that
 * is not one valid code point becomes U+FFFD, a NUL byte \u0000. */
static int one_code_point(const unsigned char *p, size_t n)
{
    int32_t cp;
    return utf8_next(p, n, &cp) == n && cp != 0xFFFD;
}

static void append_text(sqlite3_str *s, const char *text, size_t len)
{
    const unsigned char *t = (const unsigned char *)text;
    sqlite3_str_appendchar(s, 1, '"');
    for (size_t i = 0; i < len;) {
        size_t j = i + 1;
        if (t[i] >= 0xC0)
            while (j < len && (t[j] & 0xC0) == 0x80) j++;
        if (t[i] < 0x80) {
            switch (t[i]) {
            case '"': sqlite3_str_appendall(s, "\\\""); break;
            case '\\': sqlite3_str_appendall(s, "\\\\"); break;
            default:
                if (t[i] < 0x20) sqlite3_str_appendf(s, "\\u%04x", t[i]);
                else sqlite3_str_appendchar(s, 1, (char)t[i]);
            }
        } else if (one_code_point(t + i, j - i)) {
            sqlite3_str_append(s, text + i, (int)(j - i));
        } else {
            sqlite3_str_appendall(s, "\xef\xbf\xbd"); /* U+FFFD */
        }
        i = j;
    }
    sqlite3_str_appendchar(s, 1, '"');
}

/* The wide part's side of an explanation: each token's share (tokens
 * 1..n_tokens of the encoding, by byte spans), the logits and what falls
 * outside every token. */
typedef struct wide_side {
    int on;
    const char *text;
    size_t *b0, *b1; /* (n) token byte spans, in order */
    int n;
    double *share; /* (n) */
    double unassigned;
    double bias; /* the wide part's bias for the label explained */
    float logits[BERT_MAX_LABELS];
} wide_side;

/* Bytes of the character (as SQLite counts them) at text[p]. */
static size_t char_bytes(const unsigned char *t, size_t p, size_t len)
{
    size_t q = p + 1;
    if (t[p] >= 0xC0)
        while (q < len && (t[q] & 0xC0) == 0x80) q++;
    return q - p;
}

/* Each character of [from, to) gets share / characters; the token that
 * holds it takes it. */
static void wide_span(void *arg, size_t from, size_t to, double share)
{
    wide_side *w = arg;
    const unsigned char *t = (const unsigned char *)w->text;
    int chars = 0;
    for (size_t p = from; p < to; p += char_bytes(t, p, to)) chars++;
    if (!chars) return;
    double each = share / chars;
    for (size_t p = from; p < to; p += char_bytes(t, p, to)) {
        int lo = 0, hi = w->n - 1, at = -1; /* the last token starting at or before p */
        while (lo <= hi) {
            int mid = (lo + hi) / 2;
            if (w->b0[mid] <= p) at = mid, lo = mid + 1;
            else hi = mid - 1;
        }
        if (at >= 0 && p < w->b1[at]) w->share[at] += each;
        else w->unassigned += each;
    }
}

/* Byte spans of the tokens whose character spans are starts/ends[1..n]. */
static void token_bytes(const char *text, size_t len, const int *starts, const int *ends, int n,
                        size_t *b0, size_t *b1)
{
    const unsigned char *t = (const unsigned char *)text;
    size_t p = 0;
    int ch = 0;
    for (int i = 0; i < n; i++) {
        int s = starts[i + 1], e = ends[i + 1];
        if (s < ch) p = 0, ch = 0; /* spans that go back: count again */
        while (ch < s && p < len) p += char_bytes(t, p, len), ch++;
        b0[i] = p;
        size_t q = p;
        for (int c = ch; c < e && q < len; c++) q += char_bytes(t, q, len);
        b1[i] = q;
    }
}

/* The JSON result of one explained text. */
static char *result_json(const bert_config *cfg, const tokenizer *tok, const explain_options *o,
                         const bert_explanation *e, const char *text, size_t len, const int *ids,
                         const int *starts, const int *ends, int n_tokens, int truncated,
                         const wide_side *w)
{
    int k = e->target;
    double logit = e->logit, base = e->baseline_logit, sum = e->attr_sum, score = e->probs[k];
    if (w->on) {
        double z[BERT_MAX_LABELS], mx = -INFINITY, tot = 0;
        for (int j = 0; j < cfg->num_labels; j++) {
            z[j] = log((double)(e->probs[j] > 1e-30f ? e->probs[j] : 1e-30f)) + w->logits[j];
            mx = z[j] > mx ? z[j] : mx;
        }
        for (int j = 0; j < cfg->num_labels; j++) tot += exp(z[j] - mx);
        /* cppcheck-suppress uninitvar ; k, the explained label, is below num_labels */
        score = exp(z[k] - mx) / tot;
        logit += w->logits[k];
        base += w->bias;
        for (int i = 0; i < n_tokens; i++) sum += w->share[i];
    }
    sqlite3_str *s = sqlite3_str_new(NULL);
    sqlite3_str_appendall(s, "{\"text\":");
    append_text(s, text, len);
    sqlite3_str_appendall(s, ",\"label\":");
    sx_json_string(s, cfg->id2label[e->target]);
    sqlite3_str_appendf(s,
                        ",\"score\":%.6g,\"method\":\"%s\",\"steps\":%d,\"logit\":%.7g,"
                        "\"baseline_logit\":%.7g,\"sum\":%.7g,\"truncated\":%s,",
                        score,
                        o->method == EXPLAIN_INTEGRATED_GRADIENTS ? "integrated_gradients"
                                                                  : "gradient_x_input",
                        o->method == EXPLAIN_INTEGRATED_GRADIENTS ? o->steps : 1, logit, base, sum,
                        truncated ? "true" : "false");
    if (w->on)
        sqlite3_str_appendf(s, "\"wide\":{\"logit\":%.7g,\"bias\":%.7g,\"unassigned\":%.7g},",
                            (double)w->logits[k], w->bias, w->unassigned);
    sqlite3_str_appendall(s, "\"tokens\":[");
    for (int i = 0; i < n_tokens; i++) {
        const char *t = tokenizer_token(tok, ids[i + 1]);
        double a = e->attr[i + 1] + (w->on ? w->share[i] : 0.0);
        sqlite3_str_appendall(s, i ? ",{\"token\":" : "{\"token\":");
        sx_json_string(s, t ? t : "[UNK]");
        sqlite3_str_appendf(s, ",\"start\":%d,\"end\":%d,\"attribution\":%.6g", starts[i + 1],
                            ends[i + 1], a);
        if (w->on) sqlite3_str_appendf(s, ",\"wide\":%.6g", w->share[i]);
        sqlite3_str_appendchar(s, 1, '}');
    }
    sqlite3_str_appendall(s, "]}");
    if (sqlite3_str_errcode(s)) {
        sqlite3_free(sqlite3_str_finish(s));
        return NULL;
    }
    return sqlite3_str_finish(s);
}

int sx_explain_json(sx_conn *c, const char *fn, rt_model *m, const char *text, size_t len,
                    const char *options, char **json, char **errmsg)
{
    char err[SM_ERR_MAX];
    int *ids = NULL, *starts = NULL, *ends = NULL, n = 0, truncated = 0, rc;
    bert_explainer *x = NULL;
    sx_poll poll;
    explain_options o;
    wide_side side;
    memset(&side, 0, sizeof side);
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
                : o.steps < EXPLAIN_MAX_BATCH        ? o.steps
                                                     : EXPLAIN_MAX_BATCH;
    if (rc == SM_OK) rc = bert_explainer_create(c->engine.be, bm, batch, n, &x, err);
    bert_explanation e;
    if (rc == SM_OK)
        rc = bert_explain(x, ids, n, o.label, o.method, o.steps, sx_poll_stop, &poll, &e, err);
    if (rc == SM_OK && bm->wide) {
        /* the whole model's label: the encoder's logits (log-probabilities,
         * up to a shift) plus the wide part's */
        side.on = 1;
        side.text = text;
        side.n = n - 2;
        rc = wide_add_logits_texts(bm->wide, &text, &len, 1, side.logits, sx_poll_stop, &poll, err);
        int k = 0;
        for (int j = 1; rc == SM_OK && j < cfg->num_labels; j++)
            if (log((double)(e.probs[j] > 1e-30f ? e.probs[j] : 1e-30f)) + side.logits[j] >
                log((double)(e.probs[k] > 1e-30f ? e.probs[k] : 1e-30f)) + side.logits[k])
                k = j;
        if (rc == SM_OK && o.label < 0 && k != e.target)
            rc = bert_explain(x, ids, n, k, o.method, o.steps, sx_poll_stop, &poll, &e, err);
        side.b0 = sqlite3_malloc64((sqlite3_uint64)(side.n + 1) * sizeof *side.b0);
        side.b1 = sqlite3_malloc64((sqlite3_uint64)(side.n + 1) * sizeof *side.b1);
        side.share = sqlite3_malloc64((sqlite3_uint64)(side.n + 1) * sizeof *side.share);
        if (rc == SM_OK && (!side.b0 || !side.b1 || !side.share)) {
            rc = sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
            goto end;
        }
        if (rc == SM_OK) {
            memset(side.share, 0, (size_t)(side.n + 1) * sizeof *side.share);
            token_bytes(text, len, starts, ends, side.n, side.b0, side.b1);
            side.bias = bm->wide->bias[e.target];
            rc = wide_explain(bm->wide, text, len, e.target, side.logits, wide_span, &side,
                              sx_poll_stop, &poll, err);
        }
    }
    if (rc != SM_OK) {
        rc = sx_from_sm(rc, fn, err, errmsg);
        goto end;
    }
    c->engine.rows++;
    c->engine.truncated += truncated != 0;
    *json = result_json(cfg, bm->tok, &o, &e, text, len, ids, starts, ends, n - 2, truncated,
                        &side);
    if (!*json) rc = sx_fail(errmsg, SQLITE_NOMEM, fn, "out of memory");
end:
    sx_poll_end(&poll);
    bert_explainer_free(x);
    sqlite3_free(ids);
    sqlite3_free(starts);
    sqlite3_free(ends);
    sqlite3_free(side.b0);
    sqlite3_free(side.b1);
    sqlite3_free(side.share);
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
    rt_model *m = sx_model_arg(ctx, c, EXPLAIN_FN, argc, argv, 1, &cached);
    if (!m) return;
    int rc = sx_explain_json(c, EXPLAIN_FN, m, text, len,
                             argc > 2 ? (const char *)sqlite3_value_text(argv[2]) : NULL, &json,
                             &errmsg);
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

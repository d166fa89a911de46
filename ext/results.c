/* results.c: turning texts and probabilities into SQL values.
 *
 * What counts as blank input, which label is on top, what `score` means for
 * a model, and the JSON that sentiment_probs() and classify's probs column
 * return, and how JSON results are marked. One definition each, so every
 * function and the virtual table agree row for row.
 */
#include <string.h>
#include <strings.h>

#include <math.h>

#include "ext/results.h"

int sx_text_blank(const char *text, size_t len)
{
    return tokenizer_text_blank(text, len);
}

/* The text argument as bytes in *text, NULL for NULL or blank input.
 * Returns SQLITE_NOMEM when converting the value ran out of memory. */
int sx_value_text(sqlite3_value *v, const char **text, size_t *len)
{
    const char *t;
    int type = sqlite3_value_type(v);
    *text = NULL;
    *len = 0;
    if (type == SQLITE_NULL) return SQLITE_OK;
    if (type == SQLITE_BLOB) {
        t = sqlite3_value_blob(v); /* NULL for a zero-length blob */
    } else {
        t = (const char *)sqlite3_value_text(v);
        if (!t) return SQLITE_NOMEM;
    }
    *len = (size_t)sqlite3_value_bytes(v);
    if (t && !sx_text_blank(t, *len)) *text = t;
    return SQLITE_OK;
}

int sx_argmax(const float *probs, int k)
{
    int best = 0;
    for (int i = 1; i < k; i++)
        if (probs[i] > probs[best]) best = i;
    return best;
}

double sx_score(const bert_config *cfg, const float *probs)
{
    if (cfg->num_labels == 2) {
        for (int i = 0; i < 2; i++)
            if (!strcasecmp(cfg->id2label[i], "positive") &&
                !strcasecmp(cfg->id2label[1 - i], "negative"))
                return probs[i];
    }
    return probs[sx_argmax(probs, cfg->num_labels)];
}

void sx_json_string(sqlite3_str *s, const char *text)
{
    sqlite3_str_appendchar(s, 1, '"');
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        switch (*p) {
        case '"': sqlite3_str_appendall(s, "\\\""); break;
        case '\\': sqlite3_str_appendall(s, "\\\\"); break;
        case '\n': sqlite3_str_appendall(s, "\\n"); break;
        case '\r': sqlite3_str_appendall(s, "\\r"); break;
        case '\t': sqlite3_str_appendall(s, "\\t"); break;
        default:
            if (*p < 0x20) sqlite3_str_appendf(s, "\\u%04x", *p);
            else sqlite3_str_appendchar(s, 1, (char)*p);
        }
    }
    sqlite3_str_appendchar(s, 1, '"');
}

void sx_json_label_map(sqlite3_str *s, char *const *from, char *const *to, int n)
{
    sqlite3_str_appendall(s, ",\"label_map\":{");
    if (!from) {
        sqlite3_str_appendall(s, "\"0\":\"negative\",\"1\":\"positive\"");
    } else {
        for (int i = 0; i < n; i++) {
            if (i) sqlite3_str_appendchar(s, 1, ',');
            sx_json_string(s, from[i]);
            sqlite3_str_appendchar(s, 1, ':');
            sx_json_string(s, to[i]);
        }
    }
    sqlite3_str_appendf(s, "},\"label_map_by\":\"%s\"", from ? "option" : "convention");
}

char *sx_probs_json(const bert_config *cfg, const float *probs)
{
    sqlite3_str *s = sqlite3_str_new(NULL);
    sqlite3_str_appendchar(s, 1, '{');
    for (int i = 0; i < cfg->num_labels; i++) {
        if (i) sqlite3_str_appendchar(s, 1, ',');
        sx_json_string(s, cfg->id2label[i]);
        if (isfinite(probs[i])) sqlite3_str_appendf(s, ":%.6g", (double)probs[i]);
        else /* a model with non-finite weights: JSON has no NaN */
            sqlite3_str_appendall(s, ":null");
    }
    sqlite3_str_appendchar(s, 1, '}');
    return sqlite3_str_finish(s);
}

void sx_result_json(sqlite3_context *ctx, char *json)
{
    if (!json) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_text(ctx, json, -1, sqlite3_free);
    sqlite3_result_subtype(ctx, SX_JSON_SUBTYPE);
}

/* results.h: texts in, results out, shared by the SQL objects (results.c):
 * blank and non-text arguments, the top label and score, JSON results with
 * SQLite's JSON subtype. Room: ext/.
 */
#ifndef EXT_RESULTS_H
#define EXT_RESULTS_H

#include <stddef.h>

#include "encoder/bert.h"
#include "ext/sqlite_api.h"

/* 1 when text is blank: it tokenizes to nothing (tokenizer_text_blank:
 * empty, white space, NUL and other control or format characters such as
 * U+200B and U+FEFF, invalid UTF-8 only, ...). Every function, classify,
 * sentiment_batch, train() and sentiment_evaluate() treat a blank text as
 * NULL, so they agree row for row. */
int sx_text_blank(const char *text, size_t len);
/* A text argument as bytes (*text NULL for NULL or blank input; a BLOB is
 * taken as UTF-8 bytes, numbers as their text). SQLITE_NOMEM on OOM. */
int sx_value_text(sqlite3_value *v, const char **text, size_t *len);
/* Index of the top label (ties -> lowest index). */
int sx_argmax(const float *probs, int k);
/* P(positive) for a positive/negative model, else P(top label). */
double sx_score(const bert_config *cfg, const float *probs);
/* {"label": p, ...} as a sqlite3_malloc'd string. */
char *sx_probs_json(const bert_config *cfg, const float *probs);
/* Appends a JSON string literal. */
void sx_json_string(sqlite3_str *s, const char *text);
/* Appends ,"label_map":{...},"label_map_by":"..." to a report: the n pairs
 * from[i] -> to[i] given by the labels option ("option"), or, when from is
 * NULL, the 0/1 convention {"0":"negative","1":"positive"} ("convention").
 * train() and sentiment_evaluate() report mapped labels this way. */
void sx_json_label_map(sqlite3_str *s, char *const *from, char *const *to, int n);
/* JSON results carry SQLite's JSON subtype ('J', what json1's functions
 * set and read), so json_object('p', sentiment_probs(x)) nests an object,
 * not an escaped string. Functions that return JSON are registered with
 * SX_JSON_FLAGS: SQLITE_RESULT_SUBTYPE where the headers define it (SQLite
 * 3.45 and later, where a function without it may lose the subtype), else
 * nothing. */
#define SX_JSON_SUBTYPE 74
#ifdef SQLITE_RESULT_SUBTYPE
#define SX_JSON_FLAGS SQLITE_RESULT_SUBTYPE
#else
#define SX_JSON_FLAGS 0
#endif
/* Sets json (a sqlite3_malloc'd string, handed over; NULL: out of memory)
 * as the result, with the JSON subtype. */
void sx_result_json(sqlite3_context *ctx, char *json);

#endif

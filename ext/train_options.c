/* train_options.c: the options of train(model, text, label [, options]),
 * their table, their defaults and their checks (train.c runs the
 * aggregate). Owns nothing beyond what sx_train_options holds.
 *
 * Options (a JSON object; every key optional):
 *   base            model to start from, a name as for sentiment() ('default',
 *                   a sentiment_load name, a stored 'name' or 'name@N'), or
 *                   "none" to train from scratch. Default "default".
 *   epochs          1..1000, default 3
 *   lr              peak learning rate, (0, 1); default 5e-5 (5e-4 with "none";
 *                   with a fresh head on a trained base 5e-5 x (768/hidden)^2
 *                   within 5e-5..1e-3: 1e-3 for the built-in model)
 *   head_lr         peak learning rate of the classification head, (0, 1), its
 *                   own AdamW group on the same schedule; default 1e-3 (or lr
 *                   when larger) for a fresh head on a trained base, else lr
 *   labels          {"data label": "model label", ...}: what the data's labels
 *                   mean in the base's terms; every label of the data must be
 *                   a key, no two keys map to one label; {} keeps the data's
 *                   labels as they are. Without it: see Classes in train.c
 *   batch_size      examples per optimizer step, 1..4096, default 32
 *   accumulation    micro-batches per step, 1..batch_size, default 1
 *   max_length      tokens per text with [CLS]/[SEP], 8..the base's maximum,
 *                   default 128 (or the base's maximum when smaller); with
 *                   "none" the model's positions, 8..4096
 *   valid_fraction  held-out share, 0 <= f <= 0.5, default 0.1; 0 keeps the last
 *                   epoch instead of the best
 *   seed            integer >= 0, default 42: split, shuffling, dropout, head
 *   weight_decay    0 <= w < 1, default 0.01
 *   warmup_ratio    0..1, default 0.1
 *   grad_clip       global norm, >= 0 (0 = off), default 1.0
 *   dropout         0 <= p < 1 for every dropout, default the model config's
 *   group_by_length true (default) / false: batches of similar lengths
 *   wide            true, false or an object: fit a wide part (a hashed
 *                   character n-gram linear layer, model/encoder/wide.h) on the
 *                   training rows and mix it with the encoder on the
 *                   validation rows (train.c, "The wide part"); false drops a
 *                   base's wide part. Default: a base's wide part is kept as it
 *                   is when its head is kept, none otherwise. The object's
 *                   keys (all optional): buckets 1..16777216 (262144),
 *                   ngram_range [min, max] within 1..8 ([1, 3]), l2 > 0 (the
 *                   penalty; default chosen on the validation rows among
 *                   1 / (C x training rows), C = 1, 4, 16)
 *   int8_check      true (default) / false: classify the validation rows
 *                   (at most 4000) on the CPU with FP32 and with INT8 linear
 *                   layers and store the result in the model's config.json
 *                   ("int8_check", model/format/int8_check.h), which decides
 *                   whether precision auto runs the model in INT8
 *   epochs 0        (with "wide") keeps the base's encoder and head as they
 *                   are and fits only the wide part: seconds, not minutes
 * With "base":"none" only:
 *   layers 1..48 (4), hidden 8..4096 (256), heads 1..64 (4; divides hidden),
 *   intermediate 8..16384 (4 x hidden), do_lower_case (true),
 *   vocab           path of a vocab.txt to use; else built from the texts:
 *   vocab_min_count 1.. (2): characters and words seen fewer times are left out
 *   vocab_size      5..1000000 (30000): most entries kept
 * An unknown key, a value of the wrong type or out of range is an error
 * naming the option and what it accepts.
 *
 * Every message names train() and the option; the "none"-only options
 * are refused with any other base, since they shape a model from
 * scratch. "max_length" is checked against the base model's maximum
 * later, when the base is known (train.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/errors.h"
#include "ext/errors.h"
#include "ext/train_options.h"
#include "format/json_in.h"

enum { OK_INT, OK_NUM, OK_STR, OK_BOOL, OK_OBJ, OK_WIDE };

static const struct {
    const char *name;
    int kind;
    double lo, hi; /* inclusive, except where noted in check_num */
    int none_only;
    const char *expect;
} k_opts[] = {
    {"base", OK_STR, 0, 0, 0, "a model name or \"none\""},
    {"epochs", OK_INT, 0, 1000, 0, "an integer from 1 to 1000 (0 with \"wide\")"},
    {"lr", OK_NUM, 0, 1, 0, "a number greater than 0 and less than 1"},
    {"head_lr", OK_NUM, 0, 1, 0, "a number greater than 0 and less than 1"},
    {"batch_size", OK_INT, 1, 4096, 0, "an integer from 1 to 4096"},
    {"accumulation", OK_INT, 1, 4096, 0, "an integer from 1 to batch_size"},
    {"max_length", OK_INT, 8, 4096, 0, "an integer from 8 to the model's maximum length"},
    {"valid_fraction", OK_NUM, 0, 0.5, 0, "a number from 0 to 0.5"},
    {"seed", OK_INT, 0, 9.2e18, 0, "an integer >= 0"},
    {"weight_decay", OK_NUM, 0, 1, 0, "a number from 0 to less than 1"},
    {"warmup_ratio", OK_NUM, 0, 1, 0, "a number from 0 to 1"},
    {"grad_clip", OK_NUM, 0, 1e9, 0, "a number >= 0 (0 turns clipping off)"},
    {"dropout", OK_NUM, 0, 1, 0, "a number from 0 to less than 1"},
    {"group_by_length", OK_BOOL, 0, 0, 0, "true or false"},
    {"int8_check", OK_BOOL, 0, 0, 0, "true or false"},
    {"wide", OK_WIDE, 0, 0, 0,
     "true, false or an object such as {\"buckets\": 262144, \"ngram_range\": [1, 3], "
     "\"l2\": 1e-5}"},
    {"labels", OK_OBJ, 0, 0, 0,
     "an object mapping each label in the data to a label of the model, e.g. "
     "{\"0\":\"negative\",\"1\":\"positive\"}, or {} to keep the data's labels"},
    {"layers", OK_INT, 1, 48, 1, "an integer from 1 to 48"},
    {"hidden", OK_INT, 8, 4096, 1, "an integer from 8 to 4096"},
    {"heads", OK_INT, 1, 64, 1, "an integer from 1 to 64"},
    {"intermediate", OK_INT, 8, 16384, 1, "an integer from 8 to 16384"},
    {"do_lower_case", OK_BOOL, 0, 0, 1, "true or false"},
    {"vocab", OK_STR, 0, 0, 1, "the path of a vocab.txt file"},
    {"vocab_min_count", OK_INT, 1, 1e9, 1, "an integer >= 1"},
    {"vocab_size", OK_INT, 5, 1000000, 1, "an integer from 5 to 1000000"},
};
#define N_OPTS ((int)(sizeof k_opts / sizeof k_opts[0]))

static char *known_options(void)
{
    sqlite3_str *s = sqlite3_str_new(NULL);
    for (int i = 0; i < N_OPTS; i++) sqlite3_str_appendf(s, "%s%s", i ? ", " : "", k_opts[i].name);
    return sqlite3_str_finish(s);
}

/* Option "wide" as an object: buckets, ngram_range, l2. */
static int parse_wide(const json_in_value *v, sx_train_options *o, char **errmsg)
{
    char got[64];
    for (size_t m = 0; m < v->n; m++) {
        const char *k = v->members[m].key;
        const json_in_value *x = &v->members[m].value;
        if (!strcmp(k, "buckets")) {
            if (!json_in_is(x, JSON_IN_NUMBER) || !x->is_int || x->i < 1 ||
                x->i > SM_WIDE_MAX_BUCKETS)
                return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                               "option 'wide': 'buckets' must be an integer from 1 to %d; got %s",
                               SM_WIDE_MAX_BUCKETS, json_in_describe(x, got, sizeof got));
            o->wide_cfg.buckets = (int)x->i;
        } else if (!strcmp(k, "ngram_range")) {
            const json_in_value *a = x->items;
            if (!json_in_is(x, JSON_IN_ARRAY) || x->n != 2 || !json_in_is(&a[0], JSON_IN_NUMBER) ||
                !json_in_is(&a[1], JSON_IN_NUMBER) || !a[0].is_int || !a[1].is_int || a[0].i < 1 ||
                a[1].i < a[0].i || a[1].i > SM_WIDE_MAX_NGRAM)
                return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                               "option 'wide': 'ngram_range' must be [min, max] with 1 <= min "
                               "<= max <= %d; got %s",
                               SM_WIDE_MAX_NGRAM, json_in_describe(x, got, sizeof got));
            o->wide_cfg.ngram_min = (int)a[0].i;
            o->wide_cfg.ngram_max = (int)a[1].i;
        } else if (!strcmp(k, "l2")) {
            if (!json_in_is(x, JSON_IN_NUMBER) || !(x->d > 0) || !isfinite(x->d))
                return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                               "option 'wide': 'l2' must be a number greater than 0; got %s",
                               json_in_describe(x, got, sizeof got));
            o->wide_l2 = x->d;
        } else {
            return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                           "option 'wide': unknown key '%s'; known: buckets, ngram_range, l2", k);
        }
    }
    return SQLITE_OK;
}

/* Option "labels": {"data label": "model label", ...}, each 1 to
 * BERT_LABEL_MAX - 1 bytes, no model label twice. */
static int parse_label_map(const json_in_value *v, sx_train_options *o, char **errmsg)
{
    size_t n = v->n;
    o->map_given = 1;
    if (!n) return SQLITE_OK;
    o->map_from = sqlite3_malloc64(n * sizeof *o->map_from);
    o->map_to = sqlite3_malloc64(n * sizeof *o->map_to);
    if (!o->map_from || !o->map_to) goto nomem;
    for (size_t m = 0; m < n; m++) {
        const char *k = v->members[m].key;
        const json_in_value *to = &v->members[m].value;
        const char *t = json_in_is(to, JSON_IN_STRING) ? to->str : NULL;
        size_t tl = t ? to->n : 0;
        if (!*k || strlen(k) >= BERT_LABEL_MAX || !t || !tl || tl >= BERT_LABEL_MAX ||
            strlen(t) != tl)
            return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                           "option 'labels': '%.40s' must map to a label of the model, 1 to %d "
                           "bytes of text",
                           k, BERT_LABEL_MAX - 1);
        for (int i = 0; i < o->n_map; i++)
            if (!strcmp(o->map_to[i], t))
                return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                               "option 'labels': '%s' and '%s' both map to '%s'; map each label "
                               "of the data to a different label",
                               o->map_from[i], k, t);
        o->map_from[o->n_map] = sqlite3_mprintf("%s", k);
        o->map_to[o->n_map] = sqlite3_mprintf("%s", t);
        o->n_map++;
        if (!o->map_from[o->n_map - 1] || !o->map_to[o->n_map - 1]) goto nomem;
    }
    return SQLITE_OK;
nomem:
    return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
}

/* ---- sx_train_options_parse's steps ------------------------------------- */

/* *o cleared, then every option's default. */
static void set_defaults(sx_train_options *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->base, sizeof o->base, "default");
    trainer_options_default(&o->t);
    o->t.loop.epochs = 3;
    o->shape = (bert_shape){4, 256, 4, 0, 128};
    o->do_lower_case = 1;
    o->vocab_min_count = 2;
    o->vocab_size = 30000;
    o->wide = -1;
    o->int8_check = 1;
    sm_wide_config_default(&o->wide_cfg);
}

/* The error for options that are not a JSON object: the user's own text,
 * shown whole characters only (an error message is UTF-8), and why it
 * does not parse (root NULL). */
static int not_an_object(const char *text, const json_in_value *root, const json_in_error *jerr,
                         char **errmsg)
{
    size_t tl = strlen(text), cut = tl > 80 ? 80 : tl;
    int valid = json_in_utf8_valid(text, tl);
    while (valid && cut < tl && ((unsigned char)text[cut] & 0xC0) == 0x80) cut--;
    return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                   "options must be a JSON object, e.g. '{\"epochs\":3}'; got %s%.*s%s%s%s",
                   valid ? "'" : "text that is not valid UTF-8", valid ? (int)cut : 0, text,
                   valid ? (cut < tl ? "...'" : "'") : "", root ? "" : ": ",
                   root ? "" : jerr->reason);
}

/* Option "base", read first: the "none"-only options depend on it. */
static int read_base(const json_in_value *root, sx_train_options *o, char **errmsg)
{
    const json_in_value *v = json_in_get(root, "base");
    if (!v) return SQLITE_OK;
    if (!json_in_is(v, JSON_IN_STRING) || !v->n || v->n >= sizeof o->base)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN, "option 'base' must be %s",
                       k_opts[0].expect);
    snprintf(o->base, sizeof o->base, "%s", v->str);
    o->none = !strcmp(o->base, "none");
    if (o->none) o->t.loop.lr = 5e-4f;
    return SQLITE_OK;
}

/* Option key's row of k_opts in *i, or the error for a key that is unknown
 * or applies only to a model from scratch. */
static int find_option(const char *key, const sx_train_options *o, int *i, char **errmsg)
{
    for (*i = 0; *i < N_OPTS; (*i)++)
        if (!strcmp(k_opts[*i].name, key)) break;
    if (*i == N_OPTS) {
        char *known = known_options();
        int rc = sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN, "unknown option '%s'; known: %s", key,
                         known ? known : "");
        sqlite3_free(known);
        return rc;
    }
    if (k_opts[*i].none_only && !o->none)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                       "option '%s' applies only when training from scratch "
                       "(\"base\": \"none\")",
                       key);
    return SQLITE_OK;
}

/* 1 when v is what option i (named key) accepts, its kind and range, with
 * its number (1/0 for a boolean, 0 for a string or an object) in *x. */
static int value_fits(int i, const char *key, const json_in_value *v, double *x)
{
    *x = 0;
    switch (k_opts[i].kind) {
    case OK_INT:
        if (!json_in_is(v, JSON_IN_NUMBER) || !v->is_int) return 0;
        *x = (double)v->i;
        return *x >= k_opts[i].lo && *x <= k_opts[i].hi;
    case OK_NUM:
        if (!json_in_is(v, JSON_IN_NUMBER)) return 0;
        *x = v->d;
        if (!isfinite(*x) || *x < k_opts[i].lo || *x > k_opts[i].hi) return 0;
        /* open ends */
        if ((!strcmp(key, "lr") || !strcmp(key, "head_lr")) && (*x <= 0 || *x >= 1)) return 0;
        if ((!strcmp(key, "weight_decay") || !strcmp(key, "dropout")) && *x >= 1) return 0;
        return 1;
    case OK_STR: return json_in_is(v, JSON_IN_STRING) && v->n;
    case OK_BOOL:
        if (!json_in_is(v, JSON_IN_TRUE) && !json_in_is(v, JSON_IN_FALSE)) return 0;
        *x = json_in_is(v, JSON_IN_TRUE);
        return 1;
    case OK_OBJ: return json_in_is(v, JSON_IN_OBJECT);
    case OK_WIDE:
        if (!json_in_is(v, JSON_IN_TRUE) && !json_in_is(v, JSON_IN_FALSE) &&
            !json_in_is(v, JSON_IN_OBJECT))
            return 0;
        *x = !json_in_is(v, JSON_IN_FALSE);
        return 1;
    }
    return 1;
}

/* Sets option key to v, whose number is x. */
static int apply_option(const char *key, const json_in_value *v, double x, sx_train_options *o,
                        char **errmsg)
{
    if (!strcmp(key, "epochs")) o->t.loop.epochs = (int)x;
    else if (!strcmp(key, "lr")) {
        o->t.loop.lr = (float)x;
        o->lr_given = 1;
    } else if (!strcmp(key, "head_lr")) o->head_lr = (float)x;
    else if (!strcmp(key, "batch_size")) o->t.loop.batch_size = (int)x;
    else if (!strcmp(key, "accumulation")) o->t.loop.accumulation = (int)x;
    else if (!strcmp(key, "max_length")) o->max_length = (int)x;
    else if (!strcmp(key, "valid_fraction")) o->t.loop.valid_fraction = (float)x;
    else if (!strcmp(key, "seed")) o->t.loop.seed = (uint64_t)v->i;
    else if (!strcmp(key, "weight_decay")) o->t.loop.weight_decay = (float)x;
    else if (!strcmp(key, "warmup_ratio")) o->t.loop.warmup_ratio = (float)x;
    else if (!strcmp(key, "grad_clip")) o->t.loop.grad_clip = (float)x;
    else if (!strcmp(key, "dropout")) o->t.loop.dropout = (float)x;
    else if (!strcmp(key, "group_by_length")) o->t.loop.group_by_length = (int)x;
    else if (!strcmp(key, "int8_check")) o->int8_check = (int)x;
    else if (!strcmp(key, "layers")) o->shape.layers = (int)x;
    else if (!strcmp(key, "hidden")) o->shape.hidden = (int)x;
    else if (!strcmp(key, "heads")) o->shape.heads = (int)x;
    else if (!strcmp(key, "intermediate")) o->shape.intermediate = (int)x;
    else if (!strcmp(key, "do_lower_case")) o->do_lower_case = (int)x;
    else if (!strcmp(key, "vocab_min_count")) o->vocab_min_count = (int)x;
    else if (!strcmp(key, "vocab_size")) o->vocab_size = (int)x;
    else if (!strcmp(key, "labels")) return parse_label_map(v, o, errmsg);
    else if (!strcmp(key, "wide")) {
        o->wide = (int)x;
        if (json_in_is(v, JSON_IN_OBJECT)) return parse_wide(v, o, errmsg);
    } else if (!strcmp(key, "vocab")) {
        o->vocab_path = sqlite3_mprintf("%s", v->str);
        if (!o->vocab_path) return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory");
    }
    return SQLITE_OK;
}

/* Every member of the options object but "base", in order: found, checked
 * and set. */
static int read_options(const json_in_value *root, sx_train_options *o, char **errmsg)
{
    char got[64];
    for (size_t m = 0; m < root->n; m++) {
        const char *key = root->members[m].key;
        const json_in_value *v = &root->members[m].value;
        double x;
        int i, rc;
        if ((rc = find_option(key, o, &i, errmsg)) != SQLITE_OK) return rc;
        if (i == 0) continue; /* base: read_base */
        if (!value_fits(i, key, v, &x))
            return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN, "option '%s' must be %s; got %s", key,
                           k_opts[i].expect, json_in_describe(v, got, sizeof got));
        if ((rc = apply_option(key, v, x, o, errmsg)) != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
}

/* What no single option says: "epochs" 0 needs "wide" and a base,
 * accumulation at most batch_size, heads dividing hidden; then the shape
 * of a model from scratch completed (intermediate, max_length). */
static int check_and_complete(sx_train_options *o, char **errmsg)
{
    if (o->t.loop.epochs == 0 && (o->wide != 1 || o->none))
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                       "option 'epochs' 0 trains no encoder: it needs \"wide\" and a base "
                       "model, to fit only the wide part");
    if (o->t.loop.accumulation > o->t.loop.batch_size)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                       "option 'accumulation' (%d) must not exceed batch_size (%d)",
                       o->t.loop.accumulation, o->t.loop.batch_size);
    if (!o->none) return SQLITE_OK;
    if (o->shape.hidden % o->shape.heads)
        return sx_fail(errmsg, SQLITE_ERROR, TRAIN_FN,
                       "option 'hidden' (%d) must be a multiple of 'heads' (%d)", o->shape.hidden,
                       o->shape.heads);
    if (!o->shape.intermediate) o->shape.intermediate = 4 * o->shape.hidden;
    if (o->max_length) o->shape.max_length = o->max_length;
    o->max_length = o->shape.max_length;
    return SQLITE_OK;
}

int sx_train_options_parse(const char *text, sx_train_options *o, char **errmsg)
{
    json_in_error jerr;
    json_in_doc *doc = NULL;
    const json_in_value *root;
    int rc;

    set_defaults(o);
    if (!text) return SQLITE_OK;
    if (json_in_parse(text, strlen(text), &doc, &jerr) == SM_ERR_NOMEM) /* *doc NULL */
        return sx_fail(errmsg, SQLITE_NOMEM, TRAIN_FN, "out of memory parsing the options");
    root = json_in_root(doc);
    if (!json_in_is(root, JSON_IN_OBJECT)) rc = not_an_object(text, root, &jerr, errmsg);
    else if ((rc = read_base(root, o, errmsg)) == SQLITE_OK &&
             (rc = read_options(root, o, errmsg)) == SQLITE_OK)
        rc = check_and_complete(o, errmsg);
    json_in_free(doc);
    return rc;
}

void sx_train_options_free(sx_train_options *o)
{
    sqlite3_free(o->vocab_path);
    for (int i = 0; i < o->n_map; i++) {
        sqlite3_free(o->map_from[i]);
        sqlite3_free(o->map_to[i]);
    }
    sqlite3_free(o->map_from);
    sqlite3_free(o->map_to);
    o->vocab_path = NULL;
    o->map_from = o->map_to = NULL;
    o->n_map = 0;
}

/* config.c: parses and writes a BERT-family config.json (BERT, ERNIE 3.0,
 * RoBERTa, XLM-RoBERTa): parsed with json_in, written with jansson.
 *
 * Owns the id2label strings of a bert_config. Every value is checked for type
 * and range and every error names the key and what was expected. Integers are
 * JSON integers or reals with an integral value (768.0); "768" is refused.
 * JSON null counts as absent for optional keys. Unknown keys are ignored.
 */
#include "format/config.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "format/json_in.h"

/* ---- label sets ---------------------------------------------------------- */

static void free_labels(char **labels, int n)
{
    for (int i = 0; labels && i < n; i++) free(labels[i]);
    free(labels);
}

typedef struct label_ref {
    const char *name;
    int id;
} label_ref;

static int cmp_label_ref(const void *a, const void *b)
{
    const label_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* Checks n labels: 1..BERT_MAX_LABELS, each non-empty, < BERT_LABEL_MAX
 * bytes, valid UTF-8, unique. `what` prefixes messages; failures give code. */
static int check_labels(int n, const char *const *labels, int code, const char *what, char *err)
{
    if (n < 1 || n > BERT_MAX_LABELS)
        return sm_error(err, code, "%s: %d labels, expected 1..%d", what, n, BERT_MAX_LABELS);
    for (int i = 0; i < n; i++) {
        if (!labels[i] || !labels[i][0])
            return sm_error(err, code, "%s: label %d is empty", what, i);
        if (strlen(labels[i]) >= BERT_LABEL_MAX)
            return sm_error(err, code, "%s: label %d is %zu bytes, at most %d allowed", what, i,
                            strlen(labels[i]), BERT_LABEL_MAX - 1);
        if (!json_in_utf8_valid(labels[i], strlen(labels[i])))
            return sm_error(err, code, "%s: label %d is not valid UTF-8", what, i);
    }
    label_ref *refs = malloc((size_t)n * sizeof *refs);
    if (!refs) return sm_error(err, SM_ERR_NOMEM, "%s: out of memory", what);
    for (int i = 0; i < n; i++) refs[i] = (label_ref){labels[i], i};
    qsort(refs, (size_t)n, sizeof *refs, cmp_label_ref);
    int rc = SM_OK;
    for (int i = 1; i < n && !rc; i++)
        if (strcmp(refs[i - 1].name, refs[i].name) == 0)
            rc = sm_error(err, code,
                          "%s: label '%s' appears twice (ids %d "
                          "and %d); labels must be unique",
                          what, refs[i].name, refs[i - 1].id, refs[i].id);
    free(refs);
    return rc;
}

/* Copies n labels into a new malloc'd array (NULL on out of memory). */
static char **copy_labels(int n, const char *const *labels)
{
    char **out = calloc((size_t)n, sizeof *out);
    for (int i = 0; out && i < n; i++) {
        if (!(out[i] = strdup(labels[i]))) {
            free_labels(out, i);
            return NULL;
        }
    }
    return out;
}

/* Labels LABEL_0..LABEL_{n-1}. */
static char **default_labels(int n)
{
    char **out = calloc((size_t)n, sizeof *out);
    for (int i = 0; out && i < n; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "LABEL_%d", i);
        if (!(out[i] = strdup(buf))) {
            free_labels(out, i);
            return NULL;
        }
    }
    return out;
}

/* ---- public helpers ------------------------------------------------------ */

void bert_config_free(bert_config *cfg)
{
    if (!cfg) return;
    free_labels(cfg->id2label, cfg->num_labels);
    cfg->id2label = NULL;
    cfg->num_labels = 0;
}

void bert_config_init(bert_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->model_type, "bert");
    cfg->vocab_size = 30522;
    cfg->hidden_size = 768;
    cfg->num_hidden_layers = 12;
    cfg->num_attention_heads = 12;
    cfg->intermediate_size = 3072;
    cfg->max_position_embeddings = 512;
    cfg->type_vocab_size = 2;
    cfg->layer_norm_eps = 1e-12f;
    cfg->hidden_dropout_prob = 0.1f;
    cfg->attention_probs_dropout_prob = 0.1f;
    cfg->classifier_dropout = -1.0f;
    cfg->do_lower_case = 1;
    /* On out of memory the config has no labels (num_labels 0). */
    if ((cfg->id2label = default_labels(2))) cfg->num_labels = 2;
}

int bert_config_set_labels(bert_config *cfg, int n, const char *const *labels, char *err)
{
    int rc;
    if (!labels) return sm_error(err, SM_ERR_INVALID, "bert_config_set_labels: labels is NULL");
    if ((rc = check_labels(n, labels, SM_ERR_INVALID, "bert_config_set_labels", err))) return rc;
    char **copy = copy_labels(n, labels);
    if (!copy) return sm_error(err, SM_ERR_NOMEM, "bert_config_set_labels: out of memory");
    free_labels(cfg->id2label, cfg->num_labels);
    cfg->id2label = copy;
    cfg->num_labels = n;
    return SM_OK;
}

int bert_config_is_roberta(const bert_config *cfg)
{
    return strcmp(cfg->model_type, "roberta") == 0 || strcmp(cfg->model_type, "xlm-roberta") == 0;
}

int bert_config_label_index(const bert_config *cfg, const char *label)
{
    if (!cfg || !label || !cfg->id2label) return -1;
    for (int i = 0; i < cfg->num_labels; i++)
        if (cfg->id2label[i] && strcmp(cfg->id2label[i], label) == 0) return i;
    return -1;
}

/* ---- parsing ------------------------------------------------------------- */

/* Renders a JSON value for an error message: "768", 768.5, an array, ... */
static const char *describe(const json_in_value *v, char *buf, size_t cap)
{
    return json_in_describe(v, buf, cap < 64 ? cap : 64);
}

/* The value of key, or NULL when absent or null. */
static const json_in_value *get(const json_in_value *root, const char *key)
{
    const json_in_value *v = json_in_get(root, key);
    return json_in_is(v, JSON_IN_NULL) ? NULL : v;
}

/* Reads integer key into *out, in lo..hi. Absent: error when required, else
 * *out is left as is. */
static int get_int(const json_in_value *root, const char *key, int required, int lo, int hi,
                   int *out, char *err)
{
    char buf[80];
    const char *what = lo == 1   ? "a positive integer"
                       : lo == 0 ? "a non-negative integer"
                                 : "an integer";
    const json_in_value *v = get(root, key);
    double d;
    if (!v) {
        if (required)
            return sm_error(err, SM_ERR_FORMAT, "config.json: '%s' is missing; it must be %s", key,
                            what);
        return SM_OK;
    }
    if (json_in_is(v, JSON_IN_NUMBER) && v->is_int)
        d = (double)v->i; /* exact in the int ranges checked below */
    else if (json_in_is(v, JSON_IN_NUMBER) && floor(v->d) == v->d) d = v->d;
    else
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: '%s' must be %s, "
                        "got %s",
                        key, what, describe(v, buf, sizeof buf));
    if (d < lo || d > hi)
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: '%s' must be "
                        "between %d and %d, got %s",
                        key, lo, hi, describe(v, buf, sizeof buf));
    *out = (int)d;
    return SM_OK;
}

/* Reads an optional number key in [lo, hi] (lo excluded when lo_open). */
static int get_float(const json_in_value *root, const char *key, double lo, int lo_open, double hi,
                     float *out, char *err)
{
    char buf[80];
    const json_in_value *v = get(root, key);
    if (!v) return SM_OK;
    if (!json_in_is(v, JSON_IN_NUMBER))
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: '%s' must be a "
                        "number, got %s",
                        key, describe(v, buf, sizeof buf));
    double d = v->d;
    float f = (float)d;
    if (!(lo_open ? d > lo && f > (float)lo : d >= lo) || !(d <= hi))
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: '%s' must be a "
                        "number in %s%g, %g], got %s",
                        key, lo_open ? "(" : "[", lo, hi, describe(v, buf, sizeof buf));
    *out = f;
    return SM_OK;
}

static int get_bool(const json_in_value *root, const char *key, int *out, char *err)
{
    char buf[80];
    const json_in_value *v = get(root, key);
    if (!v) return SM_OK;
    if (!json_in_is(v, JSON_IN_TRUE) && !json_in_is(v, JSON_IN_FALSE))
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: '%s' must be true "
                        "or false, got %s",
                        key, describe(v, buf, sizeof buf));
    *out = json_in_is(v, JSON_IN_TRUE);
    return SM_OK;
}

static int parse_model_type(const json_in_value *root, bert_config *cfg, char *err)
{
    char buf[80];
    const json_in_value *v = get(root, "model_type");
    if (!v) return SM_OK; /* stays "bert" */
    if (!json_in_is(v, JSON_IN_STRING))
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: 'model_type' must be "
                        "a string, got %s",
                        describe(v, buf, sizeof buf));
    const char *s = v->str;
    if (strcmp(s, "bert") == 0 || strcmp(s, "ernie") == 0 || strcmp(s, "roberta") == 0 ||
        strcmp(s, "xlm-roberta") == 0)
        snprintf(cfg->model_type, sizeof cfg->model_type, "%s", s);
    else
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "config.json: model_type "
                        "'%.100s' is not supported; expected bert, ernie, "
                        "roberta or xlm-roberta",
                        s);
    return SM_OK;
}

static int parse_hidden_act(const json_in_value *root, char *err)
{
    char buf[80];
    const json_in_value *v = get(root, "hidden_act");
    if (!v) return SM_OK;
    if (!json_in_is(v, JSON_IN_STRING))
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: 'hidden_act' must be "
                        "a string, got %s",
                        describe(v, buf, sizeof buf));
    if (strcmp(v->str, "gelu") != 0)
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "config.json: hidden_act "
                        "'%.100s': only 'gelu' (exact erf) is supported",
                        v->str);
    return SM_OK;
}

/* Parses the decimal label id in key ("0", "17"; no sign, no leading zero);
 * -1 when it is not one or is >= n. */
static int label_id(const char *key, int n)
{
    long v = 0;
    if (!key[0] || (key[0] == '0' && key[1])) return -1;
    for (const char *p = key; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v >= n) return -1;
    }
    return (int)v;
}

/* id2label: {"0": "negative", "1": "positive"}, ids exactly 0..n-1. */
static int parse_id2label(const json_in_value *obj, bert_config *cfg, char *err)
{
    int rc = SM_OK;
    char buf[80];
    const char **names = NULL;
    if (!json_in_is(obj, JSON_IN_OBJECT))
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: 'id2label' must be "
                        "an object mapping \"0\", \"1\", ... to label names, "
                        "got %s",
                        describe(obj, buf, sizeof buf));
    size_t n = obj->n;
    if (n < 1 || n > BERT_MAX_LABELS)
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: 'id2label' has %zu "
                        "labels, expected 1..%d",
                        n, BERT_MAX_LABELS);
    if (!(names = calloc(n, sizeof *names)))
        return sm_error(err, SM_ERR_NOMEM, "config.json: out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *key = obj->members[i].key;
        const json_in_value *v = &obj->members[i].value;
        int id = label_id(key, (int)n);
        if (id < 0) {
            rc = sm_error(err, SM_ERR_FORMAT,
                          "config.json: 'id2label' key "
                          "'%.40s' is not a label id 0..%zu",
                          key, n - 1);
            goto fail;
        }
        if (!json_in_is(v, JSON_IN_STRING)) {
            rc = sm_error(err, SM_ERR_FORMAT,
                          "config.json: 'id2label' entry "
                          "'%s' must be a string, got %s",
                          key, describe(v, buf, sizeof buf));
            goto fail;
        }
        names[id] = v->str; /* keys unique: each id once */
    }
    if ((rc = check_labels((int)n, names, SM_ERR_FORMAT, "config.json: 'id2label'", err)))
        goto fail;
    if (!(cfg->id2label = copy_labels((int)n, names))) {
        rc = sm_error(err, SM_ERR_NOMEM, "config.json: out of memory");
        goto fail;
    }
    cfg->num_labels = (int)n;
fail:
    free(names);
    return rc;
}

/* id2label if present, else num_labels (default 2) with LABEL_i names. */
static int parse_labels(const json_in_value *root, bert_config *cfg, char *err)
{
    int rc, n = 0;
    if ((rc = get_int(root, "num_labels", 0, 1, BERT_MAX_LABELS, &n, err))) return rc;
    const json_in_value *obj = get(root, "id2label");
    if (obj) {
        if ((rc = parse_id2label(obj, cfg, err))) return rc;
        if (n && n != cfg->num_labels)
            return sm_error(err, SM_ERR_FORMAT,
                            "config.json: 'num_labels' is "
                            "%d but 'id2label' has %d labels",
                            n, cfg->num_labels);
        return SM_OK;
    }
    if (!n) n = 2;
    if (!(cfg->id2label = default_labels(n)))
        return sm_error(err, SM_ERR_NOMEM, "config.json: out of memory");
    cfg->num_labels = n;
    return SM_OK;
}

/* The encoder's sizes: required integers, in ranges, consistent. */
static int parse_sizes(const json_in_value *root, bert_config *c, char *err)
{
    int rc;
    if ((rc = get_int(root, "vocab_size", 1, 5, 10000000, &c->vocab_size, err)) ||
        (rc = get_int(root, "hidden_size", 1, 1, 65536, &c->hidden_size, err)) ||
        (rc = get_int(root, "num_hidden_layers", 1, 1, 1000, &c->num_hidden_layers, err)) ||
        (rc = get_int(root, "num_attention_heads", 1, 1, 65536, &c->num_attention_heads, err)) ||
        (rc = get_int(root, "intermediate_size", 1, 1, 1 << 20, &c->intermediate_size, err)) ||
        (rc = get_int(root, "max_position_embeddings", 1, 2, 1 << 20, &c->max_position_embeddings,
                      err)) ||
        (rc = get_int(root, "type_vocab_size", 0, 1, 65536, &c->type_vocab_size, err)) ||
        (rc = get_int(root, "pad_token_id", 0, 0, INT_MAX, &c->pad_token_id, err)))
        return rc;
    if (c->hidden_size % c->num_attention_heads != 0)
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: 'hidden_size' %d is "
                        "not divisible by 'num_attention_heads' %d",
                        c->hidden_size, c->num_attention_heads);
    if (c->pad_token_id >= c->vocab_size)
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: 'pad_token_id' %d "
                        "is not below 'vocab_size' %d",
                        c->pad_token_id, c->vocab_size);
    return SM_OK;
}

/* ERNIE 3.0 task-type embeddings. */
static int parse_task_type(const json_in_value *root, bert_config *c, char *err)
{
    int rc, n = -1;
    if ((rc = get_bool(root, "use_task_id", &c->use_task_id, err)) ||
        (rc = get_int(root, "task_type_vocab_size", 0, 0, 65536, &n, err)))
        return rc;
    if (n < 0) n = c->use_task_id ? 3 : 0;
    if (c->use_task_id && n < 1)
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: 'use_task_id' is true "
                        "but 'task_type_vocab_size' is %d; expected >= 1",
                        n);
    c->task_type_vocab_size = n;
    return SM_OK;
}

static int parse_floats(const json_in_value *root, bert_config *c, char *err)
{
    int rc;
    if ((rc = get_float(root, "layer_norm_eps", 0, 1, 1, &c->layer_norm_eps, err)) ||
        (rc = get_float(root, "hidden_dropout_prob", 0, 0, 1, &c->hidden_dropout_prob, err)) ||
        (rc = get_float(root, "attention_probs_dropout_prob", 0, 0, 1,
                        &c->attention_probs_dropout_prob, err)) ||
        (rc = get_float(root, "classifier_dropout", 0, 0, 1, &c->classifier_dropout, err)))
        return rc;
    return SM_OK;
}

static int parse_root(const json_in_value *root, bert_config *c, char *err)
{
    int rc;
    if ((rc = parse_model_type(root, c, err)) || (rc = parse_sizes(root, c, err)) ||
        (rc = parse_hidden_act(root, err)) || (rc = parse_task_type(root, c, err)) ||
        (rc = parse_floats(root, c, err)) ||
        (rc = get_bool(root, "do_lower_case", &c->do_lower_case, err)) ||
        (get(root, "embedding_pooling") &&
         (rc = sm_pooling_from_json(get(root, "embedding_pooling"), &c->pooling, err))) ||
        (get(root, "wide") && (rc = sm_wide_config_from_json(get(root, "wide"), &c->wide, err))) ||
        (get(root, "int8_check") &&
         (rc = sm_int8_check_from_json(get(root, "int8_check"), &c->int8_check, err))))
        return rc;
    c->position_offset = bert_config_is_roberta(c) ? c->pad_token_id + 1 : 0;
    if (c->max_position_embeddings - c->position_offset < 2)
        return sm_error(err, SM_ERR_FORMAT,
                        "config.json: "
                        "'max_position_embeddings' %d leaves no room for "
                        "tokens after the RoBERTa position offset %d",
                        c->max_position_embeddings, c->position_offset);
    return parse_labels(root, c, err);
}

int bert_config_parse(const char *json, size_t len, bert_config *cfg, char *err)
{
    int rc;
    json_in_error jerr;
    json_in_doc *doc = NULL;
    bert_config c;

    memset(cfg, 0, sizeof *cfg);
    bert_config_init(&c);
    bert_config_free(&c); /* labels come from the file or num_labels */
    if (!json) {
        rc = sm_error(err, SM_ERR_INVALID, "config.json: no text");
        goto fail;
    }
    if ((rc = json_in_parse(json, len, &doc, &jerr))) {
        if (rc == SM_ERR_NOMEM) rc = sm_error(err, SM_ERR_NOMEM, "config.json: out of memory");
        else if (jerr.line)
            rc = sm_error(err, SM_ERR_FORMAT,
                          "config.json: invalid JSON (line "
                          "%d, column %d): %s",
                          jerr.line, jerr.column, jerr.reason);
        else rc = sm_error(err, SM_ERR_FORMAT, "config.json: invalid JSON: %s", jerr.reason);
        goto fail;
    }
    const json_in_value *root = json_in_root(doc);
    if (!json_in_is(root, JSON_IN_OBJECT)) {
        rc = sm_error(err, SM_ERR_FORMAT,
                      "config.json: expected a JSON object "
                      "at the top level, got an array");
        goto fail;
    }
    if ((rc = parse_root(root, &c, err))) goto fail;
    *cfg = c;
    json_in_free(doc);
    return SM_OK;
fail:
    bert_config_free(&c);
    json_in_free(doc);
    return rc;
}

/* ---- writing ------------------------------------------------------------- */

/* The shortest decimal that reads back as the same float, as a double, so
 * 0.1f is written "0.1" rather than 0.10000000149011612. */
static double short_double(float f)
{
    char buf[32];
    for (int p = 1; p < 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

static const char *architecture(const char *model_type)
{
    if (strcmp(model_type, "xlm-roberta") == 0) return "XLMRobertaForSequenceClassification";
    if (strcmp(model_type, "roberta") == 0) return "RobertaForSequenceClassification";
    if (strcmp(model_type, "ernie") == 0) return "ErnieForSequenceClassification";
    return "BertForSequenceClassification";
}

/* Adds {"0": name, ...} and {name: 0, ...}; -1 on failure. */
static int add_label_maps(json_t *root, const bert_config *cfg)
{
    json_t *id2 = json_object(), *l2id = json_object();
    int bad = !id2 || !l2id || !cfg->id2label;
    for (int i = 0; !bad && i < cfg->num_labels; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        bad = !cfg->id2label[i] || json_object_set_new(id2, key, json_string(cfg->id2label[i])) ||
              json_object_set_new(l2id, cfg->id2label[i], json_integer(i));
    }
    if (!bad)
        bad = json_object_set(root, "id2label", id2) || json_object_set(root, "label2id", l2id);
    json_decref(id2);
    json_decref(l2id);
    return bad ? -1 : 0;
}

static json_t *build_json(const bert_config *c)
{
    json_t *root = json_pack(
        "{s[s]ss sisisisisisisi sfss sisb sfsf so sb}", "architectures",
        architecture(c->model_type), "model_type", c->model_type, "vocab_size", c->vocab_size,
        "hidden_size", c->hidden_size, "num_hidden_layers", c->num_hidden_layers,
        "num_attention_heads", c->num_attention_heads, "intermediate_size", c->intermediate_size,
        "max_position_embeddings", c->max_position_embeddings, "type_vocab_size",
        c->type_vocab_size, "layer_norm_eps", short_double(c->layer_norm_eps), "hidden_act", "gelu",
        "pad_token_id", c->pad_token_id, "use_task_id", c->use_task_id, "hidden_dropout_prob",
        short_double(c->hidden_dropout_prob), "attention_probs_dropout_prob",
        short_double(c->attention_probs_dropout_prob), "classifier_dropout",
        c->classifier_dropout < 0 ? json_null() : json_real(short_double(c->classifier_dropout)),
        "do_lower_case", c->do_lower_case);
    if (!root) return NULL;
    if ((c->use_task_id || c->task_type_vocab_size) &&
        json_object_set_new(root, "task_type_vocab_size", json_integer(c->task_type_vocab_size))) {
        json_decref(root);
        return NULL;
    }
    if (add_label_maps(root, c)) {
        json_decref(root);
        return NULL;
    }
    if (c->pooling.set &&
        json_object_set_new(root, "embedding_pooling",
                            json_pack("{sssb}", "mode", sm_pool_mode_name(c->pooling.mode),
                                      "normalize", c->pooling.normalize))) {
        json_decref(root);
        return NULL;
    }
    if (c->wide.set) {
        char *text = NULL;
        json_t *w = sm_wide_config_to_json(&c->wide, &text, NULL) ? NULL
                                                                  : json_loads(text, 0, NULL);
        free(text);
        if (!w || json_object_set_new(root, "wide", w)) {
            json_decref(root);
            return NULL;
        }
    }
    if (c->int8_check.set) {
        char *text = NULL;
        json_t *v = sm_int8_check_to_json(&c->int8_check, &text, NULL) ? NULL
                                                                       : json_loads(text, 0, NULL);
        free(text);
        if (!v || json_object_set_new(root, "int8_check", v)) {
            json_decref(root);
            return NULL;
        }
    }
    return root;
}

int bert_config_to_json(const bert_config *cfg, char **out, char *err)
{
    int rc = SM_OK;
    char sub[SM_ERR_MAX];
    char *text = NULL;
    bert_config back;
    json_t *root = NULL;

    memset(&back, 0, sizeof back);
    *out = NULL;
    if (!(root = build_json(cfg))) {
        rc = sm_error(err, SM_ERR_INVALID,
                      "bert_config_to_json: cannot "
                      "encode the config (labels missing or not UTF-8, or out "
                      "of memory)");
        goto fail;
    }
    text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
    char *nl = text ? realloc(text, strlen(text) + 2) : NULL;
    if (!nl) {
        rc = sm_error(err, SM_ERR_NOMEM, "bert_config_to_json: out of memory");
        goto fail;
    }
    text = nl;
    strcat(text, "\n");
    /* jansson 2.14's json_dumps can return truncated text instead of NULL
     * when an allocation fails inside it: text that is not JSON at all is
     * that, not an invalid config */
    {
        json_in_doc *doc = NULL;
        json_in_error jerr;
        int prc = json_in_parse(text, strlen(text), &doc, &jerr);
        json_in_free(doc);
        if (prc != SM_OK) {
            rc = sm_error(err, SM_ERR_NOMEM, "bert_config_to_json: out of memory");
            goto fail;
        }
    }
    /* What we write must read back: check it the way a loader will. */
    if ((rc = bert_config_parse(text, strlen(text), &back, sub))) {
        rc = sm_error(err, SM_ERR_INVALID,
                      "bert_config_to_json: the config "
                      "is not valid: %s",
                      sub);
        goto fail;
    }
    *out = text;
    text = NULL;
fail:
    bert_config_free(&back);
    json_decref(root);
    free(text);
    return rc;
}

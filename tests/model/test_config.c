/* test_config.c: config.json parsing and writing: real BERT, ERNIE 3.0 and
 * RoBERTa configs, id2label variants, every rejected value with its message,
 * label helpers, and parse(to_json(cfg)) == cfg. Run from the repository root.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "format/config.h"

#define assert_contains(haystack, needle)                                     \
    do {                                                                      \
        const char *h_ = (haystack), *n_ = (needle);                          \
        if (!strstr(h_, n_))                                                  \
            fail_msg("expected message containing \"%s\", got \"%s\"", n_,    \
                     h_);                                                     \
    } while (0)

/* bert-base-chinese, as published. */
static const char BERT_JSON[] =
    "{\n"
    "  \"architectures\": [\"BertForMaskedLM\"],\n"
    "  \"attention_probs_dropout_prob\": 0.1,\n"
    "  \"directionality\": \"bidi\",\n"
    "  \"hidden_act\": \"gelu\",\n"
    "  \"hidden_dropout_prob\": 0.1,\n"
    "  \"hidden_size\": 768,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 3072,\n"
    "  \"layer_norm_eps\": 1e-12,\n"
    "  \"max_position_embeddings\": 512,\n"
    "  \"model_type\": \"bert\",\n"
    "  \"num_attention_heads\": 12,\n"
    "  \"num_hidden_layers\": 12,\n"
    "  \"pad_token_id\": 0,\n"
    "  \"pooler_fc_size\": 768,\n"
    "  \"pooler_num_attention_heads\": 12,\n"
    "  \"pooler_num_fc_layers\": 3,\n"
    "  \"pooler_size_per_head\": 128,\n"
    "  \"pooler_type\": \"first_token_transform\",\n"
    "  \"type_vocab_size\": 2,\n"
    "  \"vocab_size\": 21128\n"
    "}\n";

/* ERNIE 3.0 base (zh) converted to the Hugging Face layout. */
static const char ERNIE_JSON[] =
    "{\"attention_probs_dropout_prob\": 0.1, \"hidden_act\": \"gelu\", "
    "\"hidden_dropout_prob\": 0.1, \"hidden_size\": 768, "
    "\"initializer_range\": 0.02, \"max_position_embeddings\": 2048, "
    "\"num_attention_heads\": 12, \"num_hidden_layers\": 12, "
    "\"task_type_vocab_size\": 3, \"type_vocab_size\": 4, "
    "\"use_task_id\": true, \"vocab_size\": 40000, \"layer_norm_eps\": 1e-05, "
    "\"pad_token_id\": 0, \"model_type\": \"ernie\", "
    "\"architectures\": [\"ErnieForMaskedLM\"], \"intermediate_size\": 3072}";

/* A RoBERTa-architecture config (learned positions offset by pad + 1). */
static const char ROBERTA_JSON[] =
    "{\"architectures\": [\"RobertaForSequenceClassification\"], "
    "\"attention_probs_dropout_prob\": 0.1, \"bos_token_id\": 0, "
    "\"classifier_dropout\": null, \"eos_token_id\": 2, "
    "\"hidden_act\": \"gelu\", \"hidden_dropout_prob\": 0.1, "
    "\"hidden_size\": 768, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 3072, \"layer_norm_eps\": 1e-05, "
    "\"max_position_embeddings\": 514, \"model_type\": \"roberta\", "
    "\"num_attention_heads\": 12, \"num_hidden_layers\": 12, "
    "\"pad_token_id\": 1, \"position_embedding_type\": \"absolute\", "
    "\"type_vocab_size\": 1, \"use_cache\": true, \"vocab_size\": 50265, "
    "\"id2label\": {\"0\": \"negative\", \"1\": \"positive\"}, "
    "\"label2id\": {\"negative\": 0, \"positive\": 1}}";

/* A small fine-tuned classifier: the base for the error cases. */
static const char SMALL_JSON[] =
    "{\"model_type\": \"bert\", \"vocab_size\": 100, \"hidden_size\": 32, "
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"intermediate_size\": 64, \"max_position_embeddings\": 64, "
    "\"id2label\": {\"0\": \"negative\", \"1\": \"positive\"}}";

static int parse(const char *json, bert_config *cfg, char *err)
{
    err[0] = 0;
    return bert_config_parse(json, strlen(json), cfg, err);
}

static void assert_config_empty(const bert_config *cfg)
{
    assert_null(cfg->id2label);
    assert_int_equal(cfg->num_labels, 0);
    assert_int_equal(cfg->hidden_size, 0);
}

/* SMALL_JSON with key set to the JSON text value (NULL: key removed). */
static char *small_with(const char *key, const char *value)
{
    json_error_t jerr;
    json_t *root = json_loads(SMALL_JSON, 0, &jerr);
    assert_non_null(root);
    if (value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, &jerr);
        if (!v)
            fail_msg("bad test value %s: %s", value, jerr.text);
        json_object_set_new(root, key, v);
    } else {
        json_object_del(root, key);
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

/* Parsing SMALL_JSON with key = value fails with code and a message
 * containing want; the config is left empty. */
static void expect_error(const char *key, const char *value, int code,
                         const char *want)
{
    char err[SM_ERR_MAX];
    bert_config cfg;
    char *json = small_with(key, value);
    memset(&cfg, 0x5a, sizeof cfg); /* parse must not trust what was there */
    int rc = parse(json, &cfg, err);
    if (rc != code)
        fail_msg("%s = %s: expected code %d, got %d (%s)", key,
                 value ? value : "(absent)", code, rc, err);
    assert_contains(err, want);
    assert_config_empty(&cfg);
    bert_config_free(&cfg);
    free(json);
}

static void expect_ok(const char *key, const char *value, bert_config *cfg)
{
    char err[SM_ERR_MAX];
    char *json = small_with(key, value);
    int rc = parse(json, cfg, err);
    if (rc != SM_OK)
        fail_msg("%s = %s: expected success, got %d (%s)", key,
                 value ? value : "(absent)", rc, err);
    free(json);
}

static void assert_config_equal(const bert_config *a, const bert_config *b)
{
    assert_string_equal(a->model_type, b->model_type);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->hidden_size, b->hidden_size);
    assert_int_equal(a->num_hidden_layers, b->num_hidden_layers);
    assert_int_equal(a->num_attention_heads, b->num_attention_heads);
    assert_int_equal(a->intermediate_size, b->intermediate_size);
    assert_int_equal(a->max_position_embeddings, b->max_position_embeddings);
    assert_int_equal(a->type_vocab_size, b->type_vocab_size);
    assert_int_equal(a->use_task_id, b->use_task_id);
    assert_int_equal(a->task_type_vocab_size, b->task_type_vocab_size);
    assert_int_equal(a->pad_token_id, b->pad_token_id);
    assert_int_equal(a->position_offset, b->position_offset);
    assert_true(a->layer_norm_eps == b->layer_norm_eps);
    assert_true(a->hidden_dropout_prob == b->hidden_dropout_prob);
    assert_true(a->attention_probs_dropout_prob ==
                b->attention_probs_dropout_prob);
    assert_true(a->classifier_dropout == b->classifier_dropout);
    assert_int_equal(a->do_lower_case, b->do_lower_case);
    assert_int_equal(a->num_labels, b->num_labels);
    for (int i = 0; i < a->num_labels; i++)
        assert_string_equal(a->id2label[i], b->id2label[i]);
}

/* to_json, parse back, compare. */
static void assert_roundtrip(const bert_config *cfg)
{
    char err[SM_ERR_MAX];
    char *text = NULL;
    bert_config back;
    int rc = bert_config_to_json(cfg, &text, err);
    if (rc != SM_OK)
        fail_msg("to_json: %d (%s)", rc, err);
    assert_int_equal(parse(text, &back, err), SM_OK);
    assert_config_equal(cfg, &back);
    bert_config_free(&back);
    free(text);
}

/* ---- real configs -------------------------------------------------------- */

static void test_bert(void **state)
{
    (void)state;
    bert_config cfg;
    char err[SM_ERR_MAX];
    assert_int_equal(parse(BERT_JSON, &cfg, err), SM_OK);
    assert_string_equal(cfg.model_type, "bert");
    assert_int_equal(cfg.vocab_size, 21128);
    assert_int_equal(cfg.hidden_size, 768);
    assert_int_equal(cfg.num_hidden_layers, 12);
    assert_int_equal(cfg.num_attention_heads, 12);
    assert_int_equal(cfg.intermediate_size, 3072);
    assert_int_equal(cfg.max_position_embeddings, 512);
    assert_int_equal(cfg.type_vocab_size, 2);
    assert_int_equal(cfg.use_task_id, 0);
    assert_int_equal(cfg.task_type_vocab_size, 0);
    assert_int_equal(cfg.pad_token_id, 0);
    assert_int_equal(cfg.position_offset, 0);
    assert_true(cfg.layer_norm_eps == 1e-12f);
    assert_true(cfg.hidden_dropout_prob == 0.1f);
    assert_true(cfg.attention_probs_dropout_prob == 0.1f);
    assert_true(cfg.classifier_dropout < 0);
    assert_int_equal(cfg.do_lower_case, 1);
    assert_int_equal(cfg.num_labels, 2);
    assert_string_equal(cfg.id2label[0], "LABEL_0");
    assert_string_equal(cfg.id2label[1], "LABEL_1");
    assert_roundtrip(&cfg);
    bert_config_free(&cfg);
    bert_config_free(&cfg);
}

static void test_ernie(void **state)
{
    (void)state;
    bert_config cfg;
    char err[SM_ERR_MAX];
    assert_int_equal(parse(ERNIE_JSON, &cfg, err), SM_OK);
    assert_string_equal(cfg.model_type, "ernie");
    assert_int_equal(cfg.vocab_size, 40000);
    assert_int_equal(cfg.max_position_embeddings, 2048);
    assert_int_equal(cfg.type_vocab_size, 4);
    assert_int_equal(cfg.use_task_id, 1);
    assert_int_equal(cfg.task_type_vocab_size, 3);
    assert_int_equal(cfg.position_offset, 0);
    assert_true(cfg.layer_norm_eps == 1e-5f);
    assert_int_equal(cfg.num_labels, 2);
    assert_roundtrip(&cfg);
    bert_config_free(&cfg);

    /* use_task_id without a size gets the ERNIE default of 3 */
    expect_ok("use_task_id", "true", &cfg);
    assert_int_equal(cfg.use_task_id, 1);
    assert_int_equal(cfg.task_type_vocab_size, 3);
    assert_roundtrip(&cfg);
    bert_config_free(&cfg);

    /* a size without use_task_id is kept, and round trips */
    expect_ok("task_type_vocab_size", "16", &cfg);
    assert_int_equal(cfg.use_task_id, 0);
    assert_int_equal(cfg.task_type_vocab_size, 16);
    assert_roundtrip(&cfg);
    bert_config_free(&cfg);
}

static void test_roberta(void **state)
{
    (void)state;
    bert_config cfg;
    char err[SM_ERR_MAX];
    assert_int_equal(parse(ROBERTA_JSON, &cfg, err), SM_OK);
    assert_string_equal(cfg.model_type, "roberta");
    assert_int_equal(cfg.pad_token_id, 1);
    assert_int_equal(cfg.position_offset, 2);
    assert_int_equal(cfg.max_position_embeddings, 514);
    assert_int_equal(cfg.type_vocab_size, 1);
    assert_true(cfg.classifier_dropout < 0);
    assert_int_equal(cfg.num_labels, 2);
    assert_string_equal(cfg.id2label[1], "positive");
    assert_roundtrip(&cfg);
    bert_config_free(&cfg);

    /* kept as written, so a saved config says XLMRoberta* again */
    expect_ok("model_type", "\"xlm-roberta\"", &cfg);
    assert_string_equal(cfg.model_type, "xlm-roberta");
    assert_true(bert_config_is_roberta(&cfg));
    assert_int_equal(cfg.position_offset, 1); /* pad_token_id 0 + 1 */
    assert_roundtrip(&cfg);
    char *text = NULL;
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_OK);
    assert_non_null(strstr(text, "\"XLMRobertaForSequenceClassification\""));
    assert_non_null(strstr(text, "\"model_type\": \"xlm-roberta\""));
    free(text);
    bert_config_free(&cfg);

    /* a RoBERTa-wwm-ext checkpoint is a BERT: no offset */
    expect_ok("pad_token_id", "3", &cfg);
    assert_int_equal(cfg.position_offset, 0);
    bert_config_free(&cfg);
}

/* Minimal config: every optional key at its default. */
static void test_defaults(void **state)
{
    (void)state;
    bert_config cfg, init;
    expect_ok("model_type", NULL, &cfg);
    bert_config_init(&init);
    assert_string_equal(cfg.model_type, "bert");
    assert_int_equal(cfg.type_vocab_size, init.type_vocab_size);
    assert_true(cfg.layer_norm_eps == init.layer_norm_eps);
    assert_true(cfg.hidden_dropout_prob == init.hidden_dropout_prob);
    assert_true(cfg.attention_probs_dropout_prob ==
                init.attention_probs_dropout_prob);
    assert_true(cfg.classifier_dropout == -1.0f);
    assert_int_equal(cfg.do_lower_case, 1);
    assert_int_equal(cfg.pad_token_id, 0);
    bert_config_free(&cfg);
    bert_config_free(&init);

    /* null means absent for optional keys */
    expect_ok("layer_norm_eps", "null", &cfg);
    assert_true(cfg.layer_norm_eps == 1e-12f);
    bert_config_free(&cfg);

    /* integral reals are integers */
    expect_ok("hidden_size", "32.0", &cfg);
    assert_int_equal(cfg.hidden_size, 32);
    bert_config_free(&cfg);
    expect_ok("vocab_size", "1e3", &cfg);
    assert_int_equal(cfg.vocab_size, 1000);
    bert_config_free(&cfg);

    /* explicit values */
    expect_ok("do_lower_case", "false", &cfg);
    assert_int_equal(cfg.do_lower_case, 0);
    bert_config_free(&cfg);
    expect_ok("classifier_dropout", "0.25", &cfg);
    assert_true(cfg.classifier_dropout == 0.25f);
    bert_config_free(&cfg);
    expect_ok("layer_norm_eps", "1", &cfg);
    assert_true(cfg.layer_norm_eps == 1.0f);
    bert_config_free(&cfg);
    expect_ok("hidden_dropout_prob", "0", &cfg);
    assert_true(cfg.hidden_dropout_prob == 0.0f);
    bert_config_free(&cfg);
}

/* The text is length-delimited: bytes after len are not read. */
static void test_not_nul_terminated(void **state)
{
    (void)state;
    size_t n = strlen(SMALL_JSON);
    char *buf = malloc(n); /* exactly the JSON, no NUL: ASan checks reads */
    memcpy(buf, SMALL_JSON, n);
    bert_config cfg;
    char err[SM_ERR_MAX];
    assert_int_equal(bert_config_parse(buf, n, &cfg, err), SM_OK);
    assert_int_equal(cfg.hidden_size, 32);
    bert_config_free(&cfg);
    assert_int_equal(bert_config_parse(buf, n - 1, &cfg, err), SM_ERR_FORMAT);
    assert_contains(err, "invalid JSON");
    assert_config_empty(&cfg);
    free(buf);

    char two[] = "{\"vocab_size\": 100}{}";
    assert_int_equal(bert_config_parse(two, strlen(two), &cfg, err),
                     SM_ERR_FORMAT);
    assert_contains(err, "invalid JSON");
}

/* ---- labels -------------------------------------------------------------- */

static void test_id2label(void **state)
{
    (void)state;
    bert_config cfg;

    expect_ok("id2label", "{\"2\": \"neutral\", \"0\": \"negative\", "
                          "\"1\": \"positive\"}", &cfg);
    assert_int_equal(cfg.num_labels, 3);
    assert_string_equal(cfg.id2label[0], "negative");
    assert_string_equal(cfg.id2label[1], "positive");
    assert_string_equal(cfg.id2label[2], "neutral");
    assert_int_equal(bert_config_label_index(&cfg, "neutral"), 2);
    assert_int_equal(bert_config_label_index(&cfg, "negative"), 0);
    assert_int_equal(bert_config_label_index(&cfg, "Negative"), -1);
    assert_int_equal(bert_config_label_index(&cfg, NULL), -1);
    assert_int_equal(bert_config_label_index(NULL, "neutral"), -1);
    assert_roundtrip(&cfg);
    bert_config_free(&cfg);

    expect_ok("id2label", "{\"0\": \"负面\", \"1\": \"正面\"}", &cfg);
    assert_string_equal(cfg.id2label[1], "正面");
    assert_int_equal(bert_config_label_index(&cfg, "负面"), 0);
    assert_roundtrip(&cfg);
    bert_config_free(&cfg);

    /* one label, and num_labels that agrees */
    expect_ok("id2label", "{\"0\": \"score\"}", &cfg);
    assert_int_equal(cfg.num_labels, 1);
    bert_config_free(&cfg);

    /* num_labels without id2label */
    char *json = small_with("id2label", NULL);
    json_t *root = json_loads(json, 0, NULL);
    free(json);
    json_object_set_new(root, "num_labels", json_integer(3));
    json = json_dumps(root, 0);
    char err[SM_ERR_MAX];
    assert_int_equal(parse(json, &cfg, err), SM_OK);
    assert_int_equal(cfg.num_labels, 3);
    assert_string_equal(cfg.id2label[2], "LABEL_2");
    bert_config_free(&cfg);
    free(json);
    /* num_labels that agrees with id2label */
    json_object_set_new(root, "num_labels", json_integer(2));
    json_object_set_new(root, "id2label",
                        json_pack("{ssss}", "0", "bad", "1", "good"));
    json = json_dumps(root, 0);
    assert_int_equal(parse(json, &cfg, err), SM_OK);
    assert_string_equal(cfg.id2label[0], "bad");
    bert_config_free(&cfg);
    free(json);
    /* and one that does not */
    json_object_set_new(root, "num_labels", json_integer(3));
    json = json_dumps(root, 0);
    assert_int_equal(parse(json, &cfg, err), SM_ERR_FORMAT);
    assert_contains(err, "'num_labels' is 3 but 'id2label' has 2 labels");
    assert_config_empty(&cfg);
    free(json);
    json_decref(root);

    /* the largest label set, and a label of the longest allowed length */
    json_t *big = json_object();
    for (int i = 0; i < BERT_MAX_LABELS; i++) {
        char k[16], v[32];
        snprintf(k, sizeof k, "%d", i);
        snprintf(v, sizeof v, "class %d", i);
        json_object_set_new(big, k, json_string(v));
    }
    char longest[BERT_LABEL_MAX];
    memset(longest, 'x', BERT_LABEL_MAX - 1);
    longest[BERT_LABEL_MAX - 1] = 0;
    json_object_set_new(big, "7", json_string(longest));
    char *v = json_dumps(big, 0);
    expect_ok("id2label", v, &cfg);
    assert_int_equal(cfg.num_labels, BERT_MAX_LABELS);
    assert_string_equal(cfg.id2label[7], longest);
    assert_string_equal(cfg.id2label[1023], "class 1023");
    assert_int_equal(bert_config_label_index(&cfg, "class 1000"), 1000);
    assert_roundtrip(&cfg);
    bert_config_free(&cfg);
    free(v);
    /* one more label is too many */
    json_object_set_new(big, "1024", json_string("extra"));
    v = json_dumps(big, 0);
    expect_error("id2label", v, SM_ERR_FORMAT, "'id2label' has 1025 labels, "
                                               "expected 1..1024");
    free(v);
    json_decref(big);
}

static void test_id2label_errors(void **state)
{
    (void)state;
    expect_error("id2label", "[\"a\", \"b\"]", SM_ERR_FORMAT,
                 "'id2label' must be an object");
    expect_error("id2label", "{}", SM_ERR_FORMAT, "'id2label' has 0 labels");
    expect_error("id2label", "{\"0\": \"a\", \"2\": \"b\"}", SM_ERR_FORMAT,
                 "'id2label' key '2' is not a label id 0..1");
    expect_error("id2label", "{\"1\": \"a\"}", SM_ERR_FORMAT,
                 "key '1' is not a label id 0..0");
    expect_error("id2label", "{\"0\": \"a\", \"01\": \"b\"}", SM_ERR_FORMAT,
                 "key '01'");
    expect_error("id2label", "{\"0\": \"a\", \"-1\": \"b\"}", SM_ERR_FORMAT,
                 "key '-1'");
    expect_error("id2label", "{\"0\": \"a\", \" 1\": \"b\"}", SM_ERR_FORMAT,
                 "key ' 1'");
    expect_error("id2label", "{\"0\": \"a\", \"x\": \"b\"}", SM_ERR_FORMAT,
                 "key 'x'");
    expect_error("id2label", "{\"0\": \"a\", \"\": \"b\"}", SM_ERR_FORMAT,
                 "key ''");
    expect_error("id2label", "{\"0\": \"a\", \"99999999999999999999\": \"b\"}",
                 SM_ERR_FORMAT, "is not a label id");
    expect_error("id2label", "{\"0\": \"a\", \"1\": 5}", SM_ERR_FORMAT,
                 "'id2label' entry '1' must be a string, got 5");
    expect_error("id2label", "{\"0\": \"a\", \"1\": null}", SM_ERR_FORMAT,
                 "entry '1' must be a string, got null");
    expect_error("id2label", "{\"0\": \"\", \"1\": \"b\"}", SM_ERR_FORMAT,
                 "'id2label': label 0 is empty");
    expect_error("id2label", "{\"0\": \"pos\", \"1\": \"neg\", \"2\": \"pos\"}",
                 SM_ERR_FORMAT, "label 'pos' appears twice (ids 0 and 2)");
    char v[BERT_LABEL_MAX + 40];
    snprintf(v, sizeof v, "{\"0\": \"a\", \"1\": \"%0*d\"}", BERT_LABEL_MAX, 0);
    expect_error("id2label", v, SM_ERR_FORMAT,
                 "label 1 is 128 bytes, at most 127 allowed");
    expect_error("num_labels", "0", SM_ERR_FORMAT,
                 "'num_labels' must be between 1 and 1024, got 0");
    expect_error("num_labels", "1025", SM_ERR_FORMAT, "'num_labels'");
    expect_error("num_labels", "\"2\"", SM_ERR_FORMAT,
                 "'num_labels' must be a positive integer, got \"2\"");
}

static void test_set_labels(void **state)
{
    (void)state;
    bert_config cfg;
    char err[SM_ERR_MAX];
    bert_config_init(&cfg);
    assert_int_equal(cfg.num_labels, 2);
    assert_string_equal(cfg.id2label[0], "LABEL_0");
    assert_string_equal(cfg.id2label[1], "LABEL_1");
    assert_int_equal(bert_config_label_index(&cfg, "LABEL_1"), 1);

    char a[] = "negative", b[] = "positive", c[] = "neutral";
    const char *three[] = {a, b, c};
    assert_int_equal(bert_config_set_labels(&cfg, 3, three, err), SM_OK);
    a[0] = 'X'; /* the config owns copies */
    assert_int_equal(cfg.num_labels, 3);
    assert_string_equal(cfg.id2label[0], "negative");
    assert_int_equal(bert_config_label_index(&cfg, "neutral"), 2);
    assert_roundtrip(&cfg);

    /* failures leave the labels as they were */
    const char *dup[] = {"x", "y", "x"};
    assert_int_equal(bert_config_set_labels(&cfg, 3, dup, err),
                     SM_ERR_INVALID);
    assert_contains(err, "label 'x' appears twice (ids 0 and 2)");
    const char *empty[] = {"x", ""};
    assert_int_equal(bert_config_set_labels(&cfg, 2, empty, err),
                     SM_ERR_INVALID);
    assert_contains(err, "label 1 is empty");
    const char *null[] = {"x", NULL};
    assert_int_equal(bert_config_set_labels(&cfg, 2, null, err),
                     SM_ERR_INVALID);
    assert_contains(err, "label 1 is empty");
    const char *bad_utf8[] = {"x", "\xc3("};
    assert_int_equal(bert_config_set_labels(&cfg, 2, bad_utf8, err),
                     SM_ERR_INVALID);
    assert_contains(err, "label 1 is not valid UTF-8");
    char longest[BERT_LABEL_MAX + 1];
    memset(longest, 'y', BERT_LABEL_MAX);
    longest[BERT_LABEL_MAX] = 0;
    const char *too_long[] = {longest};
    assert_int_equal(bert_config_set_labels(&cfg, 1, too_long, err),
                     SM_ERR_INVALID);
    assert_contains(err, "label 0 is 128 bytes");
    assert_int_equal(bert_config_set_labels(&cfg, 0, three, err),
                     SM_ERR_INVALID);
    assert_contains(err, "0 labels, expected 1..1024");
    assert_int_equal(bert_config_set_labels(&cfg, BERT_MAX_LABELS + 1, three,
                                            err), SM_ERR_INVALID);
    assert_int_equal(bert_config_set_labels(&cfg, 2, NULL, err),
                     SM_ERR_INVALID);
    assert_int_equal(cfg.num_labels, 3);
    assert_string_equal(cfg.id2label[2], "neutral");

    /* on an empty (zeroed) config too */
    bert_config_free(&cfg);
    memset(&cfg, 0, sizeof cfg);
    assert_int_equal(bert_config_set_labels(&cfg, 2, three, err), SM_OK);
    assert_string_equal(cfg.id2label[1], "positive");
    bert_config_free(&cfg);
}

/* ---- errors -------------------------------------------------------------- */

static void test_int_errors(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    bert_config cfg;
    char *json = small_with("hidden_size", "\"768\"");
    assert_int_equal(parse(json, &cfg, err), SM_ERR_FORMAT);
    assert_string_equal(err, "config.json: 'hidden_size' must be a positive "
                             "integer, got \"768\"");
    free(json);

    expect_error("hidden_size", "32.5", SM_ERR_FORMAT,
                 "'hidden_size' must be a positive integer, got 32.5");
    expect_error("hidden_size", "true", SM_ERR_FORMAT,
                 "'hidden_size' must be a positive integer, got true");
    expect_error("hidden_size", "[32]", SM_ERR_FORMAT,
                 "'hidden_size' must be a positive integer, got an array");
    expect_error("hidden_size", "{\"a\": 1}", SM_ERR_FORMAT, "got an object");
    expect_error("hidden_size", "-32", SM_ERR_FORMAT,
                 "'hidden_size' must be between 1 and 65536, got -32");
    expect_error("hidden_size", "0", SM_ERR_FORMAT,
                 "'hidden_size' must be between 1 and 65536, got 0");
    expect_error("hidden_size", "65540", SM_ERR_FORMAT,
                 "'hidden_size' must be between 1 and 65536, got 65540");
    expect_error("hidden_size", "1e300", SM_ERR_FORMAT,
                 "'hidden_size' must be between 1 and 65536");
    expect_error("hidden_size", "9223372036854775807", SM_ERR_FORMAT,
                 "got 9223372036854775807");
    expect_error("hidden_size", NULL, SM_ERR_FORMAT,
                 "'hidden_size' is missing");
    expect_error("hidden_size", "null", SM_ERR_FORMAT,
                 "'hidden_size' is missing");
    expect_error("hidden_size", "\"a very long string value that goes on and "
                                "on and on past sixty characters\"",
                 SM_ERR_FORMAT, "...");
    expect_error("vocab_size", NULL, SM_ERR_FORMAT, "'vocab_size' is missing");
    expect_error("vocab_size", "4", SM_ERR_FORMAT,
                 "'vocab_size' must be between 5 and");
    expect_error("num_hidden_layers", "0", SM_ERR_FORMAT,
                 "'num_hidden_layers' must be between 1 and 1000, got 0");
    expect_error("num_hidden_layers", "1001", SM_ERR_FORMAT,
                 "'num_hidden_layers' must be between 1 and 1000, got 1001");
    expect_error("num_hidden_layers", NULL, SM_ERR_FORMAT,
                 "'num_hidden_layers' is missing");
    expect_error("num_attention_heads", NULL, SM_ERR_FORMAT,
                 "'num_attention_heads' is missing");
    expect_error("num_attention_heads", "5", SM_ERR_FORMAT,
                 "'hidden_size' 32 is not divisible by 'num_attention_heads' 5");
    expect_error("num_attention_heads", "64", SM_ERR_FORMAT,
                 "not divisible");
    expect_error("intermediate_size", "\"x\"", SM_ERR_FORMAT,
                 "'intermediate_size' must be a positive integer, got \"x\"");
    expect_error("intermediate_size", NULL, SM_ERR_FORMAT,
                 "'intermediate_size' is missing");
    expect_error("max_position_embeddings", "1", SM_ERR_FORMAT,
                 "'max_position_embeddings' must be between 2 and");
    expect_error("max_position_embeddings", NULL, SM_ERR_FORMAT,
                 "'max_position_embeddings' is missing");
    expect_error("type_vocab_size", "0", SM_ERR_FORMAT,
                 "'type_vocab_size' must be between 1 and 65536, got 0");
    expect_error("pad_token_id", "-1", SM_ERR_FORMAT,
                 "'pad_token_id' must be between 0 and");
    expect_error("pad_token_id", "1.5", SM_ERR_FORMAT,
                 "'pad_token_id' must be a non-negative integer, got 1.5");
    expect_error("pad_token_id", "100", SM_ERR_FORMAT,
                 "'pad_token_id' 100 is not below 'vocab_size' 100");
    expect_error("task_type_vocab_size", "-3", SM_ERR_FORMAT,
                 "'task_type_vocab_size' must be between 0 and 65536, got -3");
}

static void test_other_errors(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    bert_config cfg;
    char *json = small_with("hidden_act", "\"relu\"");
    assert_int_equal(parse(json, &cfg, err), SM_ERR_UNSUPPORTED);
    assert_string_equal(err, "config.json: hidden_act 'relu': only 'gelu' "
                             "(exact erf) is supported");
    assert_config_empty(&cfg);
    free(json);
    expect_error("hidden_act", "\"gelu_new\"", SM_ERR_UNSUPPORTED,
                 "hidden_act 'gelu_new'");
    expect_error("hidden_act", "1", SM_ERR_FORMAT,
                 "'hidden_act' must be a string, got 1");

    expect_error("model_type", "\"gpt2\"", SM_ERR_UNSUPPORTED,
                 "model_type 'gpt2' is not supported; expected bert, ernie, "
                 "roberta or xlm-roberta");
    expect_error("model_type", "\"BERT\"", SM_ERR_UNSUPPORTED, "'BERT'");
    expect_error("model_type", "7", SM_ERR_FORMAT,
                 "'model_type' must be a string, got 7");

    expect_error("layer_norm_eps", "0", SM_ERR_FORMAT,
                 "'layer_norm_eps' must be a number in (0, 1], got 0");
    expect_error("layer_norm_eps", "-1e-12", SM_ERR_FORMAT, "layer_norm_eps");
    expect_error("layer_norm_eps", "1e-60", SM_ERR_FORMAT,
                 "layer_norm_eps"); /* zero as a float */
    expect_error("layer_norm_eps", "2", SM_ERR_FORMAT, "layer_norm_eps");
    expect_error("layer_norm_eps", "\"1e-12\"", SM_ERR_FORMAT,
                 "'layer_norm_eps' must be a number, got \"1e-12\"");
    expect_error("hidden_dropout_prob", "-0.1", SM_ERR_FORMAT,
                 "'hidden_dropout_prob' must be a number in [0, 1], got -0.1");
    expect_error("attention_probs_dropout_prob", "1.5", SM_ERR_FORMAT,
                 "'attention_probs_dropout_prob' must be a number in [0, 1]");
    expect_error("classifier_dropout", "\"0.1\"", SM_ERR_FORMAT,
                 "'classifier_dropout' must be a number");

    expect_error("use_task_id", "\"yes\"", SM_ERR_FORMAT,
                 "'use_task_id' must be true or false, got \"yes\"");
    expect_error("use_task_id", "1", SM_ERR_FORMAT, "'use_task_id'");
    expect_error("do_lower_case", "\"no\"", SM_ERR_FORMAT,
                 "'do_lower_case' must be true or false");

    /* ERNIE with task ids on but no task-type rows */
    char *j = small_with("use_task_id", "true");
    json_t *root = json_loads(j, 0, NULL);
    free(j);
    json_object_set_new(root, "task_type_vocab_size", json_integer(0));
    j = json_dumps(root, 0);
    json_decref(root);
    assert_int_equal(parse(j, &cfg, err), SM_ERR_FORMAT);
    assert_contains(err, "'use_task_id' is true but 'task_type_vocab_size' "
                         "is 0");
    free(j);

    /* RoBERTa positions need room after the offset */
    j = small_with("model_type", "\"roberta\"");
    root = json_loads(j, 0, NULL);
    free(j);
    json_object_set_new(root, "pad_token_id", json_integer(1));
    json_object_set_new(root, "max_position_embeddings", json_integer(3));
    j = json_dumps(root, 0);
    json_decref(root);
    assert_int_equal(parse(j, &cfg, err), SM_ERR_FORMAT);
    assert_contains(err, "'max_position_embeddings' 3 leaves no room");
    free(j);
}

static void test_bad_json(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    bert_config cfg;
    const char *bad[] = {"", "{", "{\"hidden_size\": }", "nul", "[1, 2]",
                         "\"text\"", "{\"a\": 1} {", "{\"a\": NaN}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&cfg, 0x5a, sizeof cfg);
        int rc = parse(bad[i], &cfg, err);
        if (rc != SM_ERR_FORMAT)
            fail_msg("'%s': got %d (%s)", bad[i], rc, err);
        assert_contains(err, "config.json: ");
        assert_config_empty(&cfg);
    }
    assert_int_equal(parse("[1, 2]", &cfg, err), SM_ERR_FORMAT);
    assert_contains(err, "expected a JSON object at the top level");
    assert_int_equal(parse("{\"a\": 1,\n \"b\": }", &cfg, err),
                     SM_ERR_FORMAT);
    assert_contains(err, "invalid JSON (line 2, column");

    /* duplicate keys are ambiguous: rejected */
    char dup[] = "{\"vocab_size\": 100, \"hidden_size\": 32, "
                 "\"hidden_size\": 64}";
    assert_int_equal(parse(dup, &cfg, err), SM_ERR_FORMAT);
    assert_contains(err, "duplicate");
    assert_contains(err, "hidden_size");

    assert_int_equal(bert_config_parse(NULL, 0, &cfg, err), SM_ERR_INVALID);
    assert_config_empty(&cfg);
    /* a NULL err buffer is allowed */
    assert_int_equal(bert_config_parse("{", 1, &cfg, NULL), SM_ERR_FORMAT);
}

/* ---- writing ------------------------------------------------------------- */

/* "int8_check": read, written back with the same numbers, every value
 * checked, and the rule (model/format/int8_check.h) at its edges. */
static void test_int8_check(void **state)
{
    (void)state;
    char err[SM_ERR_MAX], why[256];
    bert_config cfg, back;
    char *text = NULL;
    char *json = small_with("int8_check", "{\"rows\": 812, \"accuracy_fp32\": 0.9113, "
                                          "\"accuracy_int8\": 0.9101, \"agreement\": 0.995}");
    assert_int_equal(parse(json, &cfg, err), SM_OK);
    free(json);
    assert_int_equal(cfg.int8_check.set, 1);
    assert_int_equal(cfg.int8_check.rows, 812);
    assert_true(cfg.int8_check.agreement == 0.995);
    assert_int_equal(sm_int8_check_passes(&cfg.int8_check, why, sizeof why), 1);
    assert_string_equal(why, "held-out accuracy 0.9101 in int8, 0.9113 in fp32, same label on "
                             "99.5% of 812 rows");
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_OK);
    assert_int_equal(parse(text, &back, err), SM_OK);
    assert_int_equal(back.int8_check.rows, 812);
    assert_true(fabs(back.int8_check.accuracy_int8 - 0.9101) < 1e-9);
    free(text);
    bert_config_free(&back);

    sm_int8_check c = cfg.int8_check;
    c.rows = SM_INT8_CHECK_MIN_ROWS - 1;
    assert_int_equal(sm_int8_check_passes(&c, why, sizeof why), 0);
    assert_contains(why, "too few rows to judge int8: ");
    c = cfg.int8_check;
    c.agreement = 0.989;
    assert_int_equal(sm_int8_check_passes(&c, why, sizeof why), 0);
    assert_contains(why, "int8 changes too many labels: ");
    c = cfg.int8_check;
    c.accuracy_int8 = c.accuracy_fp32 - 0.0031;
    assert_int_equal(sm_int8_check_passes(&c, why, sizeof why), 0);
    assert_contains(why, "int8 loses accuracy: ");
    c.accuracy_int8 = c.accuracy_fp32 - 0.0029;
    assert_int_equal(sm_int8_check_passes(&c, NULL, 0), 1);
    c.set = 0;
    assert_int_equal(sm_int8_check_passes(&c, why, sizeof why), 0);
    assert_string_equal(why, "int8 not checked for this model");
    bert_config_free(&cfg);

    /* a config without one has none */
    assert_int_equal(parse(ROBERTA_JSON, &cfg, err), SM_OK);
    assert_int_equal(cfg.int8_check.set, 0);
    bert_config_free(&cfg);

    expect_error("int8_check", "true", SM_ERR_FORMAT, "'int8_check' must be an object");
    expect_error("int8_check", "{\"rows\": 0, \"accuracy_fp32\": 1, \"accuracy_int8\": 1, "
                               "\"agreement\": 1}",
                 SM_ERR_FORMAT, "'rows' must be an integer of 1 or more, got 0");
    expect_error("int8_check", "{\"rows\": 9, \"accuracy_fp32\": 1.5, \"accuracy_int8\": 1, "
                               "\"agreement\": 1}",
                 SM_ERR_FORMAT, "'accuracy_fp32' 1.5: expected a share from 0 to 1");
    expect_error("int8_check", "{\"rows\": 9, \"accuracy_fp32\": 1, \"agreement\": 1}",
                 SM_ERR_FORMAT, "'accuracy_int8' must be a number, got nothing");
    expect_error("int8_check", "{\"rows\": 9, \"accuracy_fp32\": 1, \"accuracy_int8\": 1, "
                               "\"agreement\": \"all\"}",
                 SM_ERR_FORMAT, "'agreement' must be a number");
}

static void test_to_json(void **state)
{
    (void)state;
    bert_config cfg;
    char err[SM_ERR_MAX];
    char *text = NULL;
    assert_int_equal(parse(ROBERTA_JSON, &cfg, err), SM_OK);
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_OK);
    /* sorted keys, indent 2, short decimal floats, trailing newline */
    assert_contains(text, "{\n  \"architectures\": [\n    "
                          "\"RobertaForSequenceClassification\"\n  ],\n"
                          "  \"attention_probs_dropout_prob\": 0.1,\n");
    assert_contains(text, "\n  \"classifier_dropout\": null,\n");
    assert_contains(text, "\n  \"hidden_act\": \"gelu\",\n");
    assert_contains(text, "\n  \"layer_norm_eps\": 1e-5,\n");
    assert_contains(text, "\n  \"id2label\": {\n    \"0\": \"negative\",\n"
                          "    \"1\": \"positive\"\n  },\n");
    assert_contains(text, "\n  \"label2id\": {\n    \"negative\": 0,\n"
                          "    \"positive\": 1\n  },\n");
    assert_contains(text, "\n  \"model_type\": \"roberta\",\n");
    assert_contains(text, "\n  \"do_lower_case\": true,\n");
    assert_contains(text, "\n  \"use_task_id\": false,\n");
    assert_contains(text, "\n  \"pad_token_id\": 1,\n");
    assert_null(strstr(text, "task_type_vocab_size"));
    size_t n = strlen(text);
    assert_true(n > 2 && text[n - 1] == '\n' && text[n - 2] == '}');
    /* keys in sorted order */
    json_t *root = json_loads(text, 0, NULL);
    assert_non_null(root);
    const char *key, *prev = "";
    json_t *v;
    json_object_foreach(root, key, v) {
        assert_true(strcmp(prev, key) < 0);
        prev = key;
    }
    assert_true(json_real_value(json_object_get(root, "layer_norm_eps")) ==
                1e-5);
    json_decref(root);
    free(text);
    bert_config_free(&cfg);

    /* model types pick the architecture */
    bert_config_init(&cfg);
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_OK);
    assert_contains(text, "\"BertForSequenceClassification\"");
    assert_contains(text, "\"layer_norm_eps\": 1e-12,");
    assert_contains(text, "\"LABEL_0\": 0");
    free(text);
    strcpy(cfg.model_type, "ernie");
    cfg.use_task_id = 1;
    cfg.task_type_vocab_size = 3;
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_OK);
    assert_contains(text, "\"ErnieForSequenceClassification\"");
    assert_contains(text, "\"task_type_vocab_size\": 3,");
    assert_contains(text, "\"use_task_id\": true,");
    free(text);
    bert_config_free(&cfg);
}

static void test_roundtrip_built(void **state)
{
    (void)state;
    bert_config cfg;
    char err[SM_ERR_MAX];
    bert_config_init(&cfg);
    assert_roundtrip(&cfg);

    /* odd float values and every field changed */
    strcpy(cfg.model_type, "roberta");
    cfg.vocab_size = 21128;
    cfg.hidden_size = 312;
    cfg.num_hidden_layers = 4;
    cfg.num_attention_heads = 12;
    cfg.intermediate_size = 1248;
    cfg.max_position_embeddings = 514;
    cfg.type_vocab_size = 1;
    cfg.pad_token_id = 1;
    cfg.position_offset = 2;
    cfg.layer_norm_eps = 1e-7f;
    cfg.hidden_dropout_prob = 0.3333333f;
    cfg.attention_probs_dropout_prob = 0.0f;
    cfg.classifier_dropout = 0.15f;
    cfg.do_lower_case = 0;
    const char *labels[] = {"很差", "一般", "很好", "label with \"quotes\""};
    assert_int_equal(bert_config_set_labels(&cfg, 4, labels, err), SM_OK);
    assert_roundtrip(&cfg);

    /* every float a config may hold reads back bit for bit */
    for (int i = 1; i < 2000; i++) {
        cfg.hidden_dropout_prob = (float)i / 2000.0f;
        cfg.layer_norm_eps = 1e-12f * (float)i * 1.37f;
        assert_roundtrip(&cfg);
    }
    bert_config_free(&cfg);
}

static void test_to_json_invalid(void **state)
{
    (void)state;
    bert_config cfg;
    char err[SM_ERR_MAX];
    char *text = (char *)1;

    bert_config_init(&cfg);
    cfg.num_attention_heads = 5;
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_ERR_INVALID);
    assert_null(text);
    assert_contains(err, "not divisible by 'num_attention_heads' 5");
    cfg.num_attention_heads = 12;
    cfg.hidden_dropout_prob = 2.0f;
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_ERR_INVALID);
    assert_contains(err, "hidden_dropout_prob");
    cfg.hidden_dropout_prob = 0.1f;
    strcpy(cfg.model_type, "gpt2");
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_ERR_INVALID);
    assert_contains(err, "gpt2");
    strcpy(cfg.model_type, "bert");
    bert_config_free(&cfg); /* no labels */
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_ERR_INVALID);
    assert_contains(err, "labels");
}

static void test_free_is_safe(void **state)
{
    (void)state;
    bert_config cfg;
    memset(&cfg, 0, sizeof cfg);
    bert_config_free(&cfg);
    bert_config_free(&cfg);
    bert_config_free(NULL);
    assert_int_equal(bert_config_label_index(&cfg, "x"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert),
        cmocka_unit_test(test_ernie),
        cmocka_unit_test(test_roberta),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_not_nul_terminated),
        cmocka_unit_test(test_id2label),
        cmocka_unit_test(test_id2label_errors),
        cmocka_unit_test(test_set_labels),
        cmocka_unit_test(test_int_errors),
        cmocka_unit_test(test_other_errors),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_int8_check),
        cmocka_unit_test(test_to_json),
        cmocka_unit_test(test_roundtrip_built),
        cmocka_unit_test(test_to_json_invalid),
        cmocka_unit_test(test_free_is_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

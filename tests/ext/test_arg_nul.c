/* test_arg_nul.c: a name or path argument holding a NUL byte is an error
 * that names the function and the argument, in every function that takes
 * one; C string code would otherwise act on the part before the NUL
 * (CAST(x'610062' AS TEXT) stored a model named 'a').
 */
#include "support/ext_test_util.h"

/* 'tiny' NUL 'zz' and the tiny model's directory NUL '/x' */
#define TINY_NUL "CAST(x'74696e79007a7a' AS TEXT)"
#define A_NUL_B "CAST(x'610062' AS TEXT)"
#define DIR_NUL "CAST(CAST('" TINY_MODEL "' AS BLOB) || x'002f78' AS TEXT)"

static int setup(void **state)
{
    sqlite3 *db = open_db();
    load_tiny(db);
    make_reviews(db);
    *state = db;
    return 0;
}

static int teardown(void **state)
{
    sqlite3_close(*state);
    return 0;
}

static void test_sentiment_model_nul(void **state)
{
    expect_error(*state, "SELECT sentiment('很好', " TINY_NUL ")",
                 "sentiment(): model name contains a NUL byte");
}

static void test_sentiment_score_model_nul(void **state)
{
    expect_error(*state, "SELECT sentiment_score('很好', " TINY_NUL ")",
                 "sentiment_score(): model name contains a NUL byte");
}

static void test_sentiment_probs_model_nul(void **state)
{
    expect_error(*state, "SELECT sentiment_probs('很好', " TINY_NUL ")",
                 "sentiment_probs(): model name contains a NUL byte");
}

static void test_sentiment_tokens_model_nul(void **state)
{
    expect_error(*state, "SELECT sentiment_tokens('很好', " TINY_NUL ")",
                 "sentiment_tokens(): model name contains a NUL byte");
}

static void test_sentiment_model_blob_nul(void **state)
{
    expect_error(*state, "SELECT sentiment('很好', x'74696e79007a7a')",
                 "sentiment(): model name contains a NUL byte");
}

static void test_sentiment_batch_model_nul(void **state)
{
    expect_error(*state,
                 "SELECT sentiment_batch(body, " TINY_NUL ") OVER (ORDER BY id ROWS BETWEEN "
                 "CURRENT ROW AND 255 FOLLOWING) FROM t",
                 "sentiment_batch(): model name contains a NUL byte");
}

static void test_classify_model_nul(void **state)
{
    expect_error(*state, "SELECT count(*) FROM classify('t', 'body', " TINY_NUL ")",
                 "classify(): model name contains a NUL byte");
}

static void test_classify_source_nul(void **state)
{
    expect_error(*state, "SELECT count(*) FROM classify(CAST(x'7400787878' AS TEXT), 'body', 'tiny')",
                 "classify(): source contains a NUL byte");
}

static void test_classify_column_nul(void **state)
{
    expect_error(*state,
                 "SELECT count(*) FROM classify('t', CAST(x'626f6479007a' AS TEXT), 'tiny')",
                 "classify(): column name contains a NUL byte");
}

static void test_train_name_nul(void **state)
{
    sqlite3 *db = *state;
    expect_error(db,
                 "SELECT train(" A_NUL_B ", body, 'x', '{\"base\":\"tiny\",\"epochs\":1}') "
                 "FROM t WHERE body <> ''",
                 "train(): model name contains a NUL byte");
    /* and nothing was stored under the cut name */
    expect_error(db, "SELECT sentiment('很好', 'a')", "no model named 'a'");
}

static void test_train_options_nul(void **state)
{
    expect_error(*state,
                 "SELECT train('m', body, 'x', CAST(CAST('{\"base\":\"tiny\"}' AS BLOB) || "
                 "x'00' || CAST('{' AS BLOB) AS TEXT)) FROM t WHERE body <> ''",
                 "train(): options text contains a NUL byte");
}

static void test_train_vocab_option_nul(void **state)
{
    /* JSON "\u0000" in the vocab path is refused by the options parser */
    expect_error(*state,
                 "SELECT train('m', body, 'x', '{\"base\":\"none\",\"vocab\":\"" TINY_MODEL
                 "/vocab.txt\\u0000x\"}') FROM t WHERE body <> ''",
                 "train(): options must be a JSON object");
}

static void test_train_base_option_nul(void **state)
{
    expect_error(*state,
                 "SELECT train('m', body, 'x', '{\"base\":\"tiny\\u0000x\"}') "
                 "FROM t WHERE body <> ''",
                 "train(): options must be a JSON object");
}

static void test_sentiment_load_name_nul(void **state)
{
    sqlite3 *db = *state;
    expect_error(db, "SELECT sentiment_load(" A_NUL_B ", '" TINY_MODEL "')",
                 "sentiment_load(): model name contains a NUL byte");
    expect_error(db, "SELECT sentiment('很好', 'a')", "no model named 'a'");
}

static void test_sentiment_load_unregister_name_nul(void **state)
{
    expect_error(*state, "SELECT sentiment_load(" TINY_NUL ", NULL)",
                 "sentiment_load(): model name contains a NUL byte");
}

static void test_sentiment_load_path_nul(void **state)
{
    sqlite3 *db = *state;
    expect_error(db, "SELECT sentiment_load('p', " DIR_NUL ")",
                 "sentiment_load(): model directory path contains a NUL byte");
    expect_error(db, "SELECT sentiment('很好', 'p')", "no model named 'p'");
}

static void test_sentiment_save_name_nul(void **state)
{
    sqlite3 *db = *state;
    expect_error(db, "SELECT sentiment_save(" A_NUL_B ", 'tiny')",
                 "sentiment_save(): model name contains a NUL byte");
    expect_error(db, "SELECT sentiment('很好', 'a')", "no model named 'a'");
}

static void test_sentiment_save_model_nul(void **state)
{
    expect_error(*state, "SELECT sentiment_save('s', " TINY_NUL ")",
                 "sentiment_save(): model name contains a NUL byte");
}

static void test_sentiment_use_name_nul(void **state)
{
    sqlite3 *db = *state;
    exec_ok(db, "SELECT sentiment_save('a', 'tiny')");
    expect_error(db, "SELECT sentiment_use(" A_NUL_B ", 1)",
                 "sentiment_use(): model name contains a NUL byte");
    assert_int_equal(q_int(db, "SELECT max(version) FROM sentiment_model_store WHERE name = 'a'"),
                     1);
}

static void test_sentiment_evaluate_model_nul(void **state)
{
    expect_error(*state, "SELECT sentiment_evaluate(body, 'positive', " TINY_NUL ") FROM t",
                 "sentiment_evaluate(): model name contains a NUL byte");
}

static void test_sentiment_config_key_nul(void **state)
{
    expect_error(*state, "SELECT sentiment_config(CAST(x'746872656164730078' AS TEXT))",
                 "sentiment_config(): key contains a NUL byte");
}

static void test_sentiment_config_key_nul_set(void **state)
{
    expect_error(*state, "SELECT sentiment_config(CAST(x'746872656164730078' AS TEXT), 1)",
                 "sentiment_config(): key contains a NUL byte");
}

static void test_sentiment_config_value_nul(void **state)
{
    sqlite3 *db = *state;
    expect_error(db, "SELECT sentiment_config('threads', CAST(x'320039' AS TEXT))",
                 "sentiment_config(): value for 'threads' contains a NUL byte");
    expect_text(db, "SELECT sentiment_config('threads')", "1");
}

static void test_sentiment_config_device_nul(void **state)
{
    expect_error(*state, "SELECT sentiment_config('device', CAST(x'6370750063756461' AS TEXT))",
                 "sentiment_config(): value for 'device' contains a NUL byte");
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_sentiment_model_nul),
        T(test_sentiment_score_model_nul),
        T(test_sentiment_probs_model_nul),
        T(test_sentiment_tokens_model_nul),
        T(test_sentiment_model_blob_nul),
        T(test_sentiment_batch_model_nul),
        T(test_classify_model_nul),
        T(test_classify_source_nul),
        T(test_classify_column_nul),
        T(test_train_name_nul),
        T(test_train_options_nul),
        T(test_train_vocab_option_nul),
        T(test_train_base_option_nul),
        T(test_sentiment_load_name_nul),
        T(test_sentiment_load_unregister_name_nul),
        T(test_sentiment_load_path_nul),
        T(test_sentiment_save_name_nul),
        T(test_sentiment_save_model_nul),
        T(test_sentiment_use_name_nul),
        T(test_sentiment_evaluate_model_nul),
        T(test_sentiment_config_key_nul),
        T(test_sentiment_config_key_nul_set),
        T(test_sentiment_config_value_nul),
        T(test_sentiment_config_device_nul),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}

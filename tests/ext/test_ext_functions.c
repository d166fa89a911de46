/* test_ext_functions.c: the scalar SQL functions, sentiment_config and the
 * registered API surface, through the SQLite C API.
 *
 * Uses the tiny random-weight fixture models: labels are compared between
 * functions and against each other, never against hand-picked answers.
 */
#include "cpu/backend_cpu.h"
#include "support/ext_test_util.h"

#include <math.h>


static void test_basic(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    char *label = q_text(db, "SELECT sentiment('这家酒店很干净，服务也很周到', 'tiny')");
    assert_non_null(label);
    assert_true(!strcmp(label, "negative") || !strcmp(label, "positive"));
    /* the label is the top class of the probabilities */
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT CASE WHEN json_extract(p, '$.positive') > json_extract(p, '$.negative') "
             "THEN 'positive' ELSE 'negative' END FROM (SELECT sentiment_probs("
             "'这家酒店很干净，服务也很周到', 'tiny') AS p)");
    expect_text(db, sql, label);
    free(label);
    /* score = P(positive) for a negative/positive model; probs sum to 1 */
    double score = q_double(db, "SELECT sentiment_score('这家酒店很干净，服务也很周到', 'tiny')");
    double pos = q_double(db, "SELECT json_extract(sentiment_probs('这家酒店很干净，服务也很周到', "
                              "'tiny'), '$.positive')");
    double neg = q_double(db, "SELECT json_extract(sentiment_probs('这家酒店很干净，服务也很周到', "
                              "'tiny'), '$.negative')");
    assert_true(fabs(score - pos) < 1e-5);
    assert_true(fabs(pos + neg - 1.0) < 1e-4);
    /* one-argument forms use 'default', which this connection overrides */
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    expect_text(db, "SELECT sentiment('服务很好') = sentiment('服务很好', 'tiny')", "1");
    expect_text(db, "SELECT sentiment_score('服务很好') = sentiment_score('服务很好', 'tiny')", "1");
    expect_text(db, "SELECT sentiment_probs('服务很好') = sentiment_probs('服务很好', 'tiny')", "1");
    sqlite3_close(db);
}

static void test_tokens(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_text(db, "SELECT sentiment_tokens('酒店很好', 'tiny')", "[\"酒\",\"店\",\"很\",\"好\"]");
    expect_text(db, "SELECT json_valid(sentiment_tokens('Hello 酒店！', 'tiny'))", "1");
    assert_true(q_is_null(db, "SELECT sentiment_tokens(NULL, 'tiny')"));
    assert_true(q_is_null(db, "SELECT sentiment_tokens(' ', 'tiny')"));
    sqlite3_close(db);
}

static void test_null_empty_whitespace(void **state)
{
    (void)state;
    static const char *const fns[] = {"sentiment", "sentiment_score", "sentiment_probs",
                                      "sentiment_tokens"};
    static const char *const inputs[] = {"NULL", "''", "'   '", "char(9,10,13)", "char(12288)",
                                         "char(160, 32)", "x''"};
    sqlite3 *db = open_db();
    load_tiny(db);
    for (size_t f = 0; f < 4; f++)
        for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) {
            char sql[128];
            snprintf(sql, sizeof sql, "SELECT %s(%s, 'tiny')", fns[f], inputs[i]);
            if (!q_is_null(db, sql)) fail_msg("not NULL: %s", sql);
        }
    /* NULL in gives NULL even with a model that does not exist */
    assert_true(q_is_null(db, "SELECT sentiment(NULL, 'nope')"));
    sqlite3_close(db);
}

static void test_numbers_and_blobs(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_text(db, "SELECT sentiment_probs(42, 'tiny') = sentiment_probs('42', 'tiny')", "1");
    expect_text(db, "SELECT sentiment_probs(4.5, 'tiny') = sentiment_probs('4.5', 'tiny')", "1");
    /* a blob is UTF-8 bytes: x'e5be88e5a5bd' is 很好 */
    expect_text(db, "SELECT sentiment_probs(x'e5be88e5a5bd', 'tiny') = sentiment_probs('很好', 'tiny')",
                "1");
    sqlite3_close(db);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    static const char *const bad[] = {"x'fffe41'", "CAST(x'ff41e5be88' AS TEXT)", "x'41f4908080'"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT sentiment(%s, 'tiny') IN ('negative', 'positive')", bad[i]);
        expect_text(db, sql, "1");
        snprintf(sql, sizeof sql, "SELECT json_valid(sentiment_tokens(%s, 'tiny'))", bad[i]);
        expect_text(db, sql, "1");
    }
    /* nothing but invalid bytes (or NUL) repairs to U+FFFD, which the
     * tokenizer drops: blank, so NULL (tests/ext/test_contract.c) */
    static const char *const blank[] = {"x'e5be'", "x'c0af80'", "x'eda080'", "x'00'", "x'f4908080'"};
    for (size_t i = 0; i < sizeof blank / sizeof *blank; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT sentiment(%s, 'tiny') IS NULL", blank[i]);
        expect_text(db, sql, "1");
    }
    sqlite3_close(db);
}

static void test_long_text_truncated(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    int64_t before = debug_int(db, "$.connection.truncated");
    /* 100 KB of text */
    expect_text(db, "SELECT sentiment(replace(hex(zeroblob(50000)), '00', '好的'), 'tiny') "
                    "IN ('negative', 'positive')",
                "1");
    assert_int_equal(debug_int(db, "$.connection.truncated"), before + 1);
    /* a short text is not counted */
    exec_ok(db, "SELECT sentiment('好', 'tiny')");
    assert_int_equal(debug_int(db, "$.connection.truncated"), before + 1);
    /* max_length cuts shorter texts too */
    exec_ok(db, "SELECT sentiment_config('max_length', 4)");
    exec_ok(db, "SELECT sentiment('房间干净整洁', 'tiny')");
    assert_int_equal(debug_int(db, "$.connection.truncated"), before + 2);
    sqlite3_close(db);
}

static void test_unknown_model(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    expect_error(db, "SELECT sentiment('x', 'hotle')", "sentiment(): no model named 'hotle'; known: ");
    load_tiny(db);
    /* a registered 'default' hides the built-in one: the same list in any build */
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    expect_error(db, "SELECT sentiment('x', 'hotle')",
                 "sentiment(): no model named 'hotle'; known: default, tiny");
    /* exact names only: no prefix matching */
    expect_error(db, "SELECT sentiment_score('x', 'tin')", "sentiment_score(): no model named 'tin'");
    expect_error(db, "SELECT sentiment_probs('x', 'tiny2')", "sentiment_probs(): no model named 'tiny2'");
    expect_error(db, "SELECT sentiment_tokens('x', 'TINY')", "sentiment_tokens(): no model named 'TINY'");
    expect_error(db, "SELECT sentiment('x', NULL)", "sentiment(): model name is NULL");
    expect_error(db, "SELECT sentiment('x', 'tiny@2')", "has only version 1");
    sqlite3_close(db);
}

static void test_default_model(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    int builtin = (int)q_int(db, "SELECT json_extract(sentiment_debug(), '$.builtin_model')");
    if (builtin) {
        expect_text(db, "SELECT sentiment('这家酒店很干净') IS NOT NULL", "1");
        expect_text(db, "SELECT count(*) FROM sentiment_models WHERE name = 'default' "
                        "AND source = 'builtin'",
                    "1");
    } else {
        expect_error(db, "SELECT sentiment('这家酒店很干净')",
                     "sentiment(): no built-in model in this build; register one with "
                     "SELECT sentiment_load('default', '/path/to/model_dir')");
        expect_text(db, "SELECT count(*) FROM sentiment_models", "0");
    }
    exec_ok(db, "SELECT sentiment_load('default', '" TINY_MODEL "')");
    expect_text(db, "SELECT source FROM sentiment_models WHERE name = 'default'", "file");
    expect_text(db, "SELECT sentiment('x') IS NOT NULL", "1");
    sqlite3_close(db);
}

static void test_wrong_argument_counts(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    expect_error(db, "SELECT sentiment()", "wrong number of arguments to function sentiment()");
    expect_error(db, "SELECT sentiment('a', 'b', 'c')", "wrong number of arguments to function sentiment()");
    expect_error(db, "SELECT sentiment_score()", "wrong number of arguments to function sentiment_score()");
    expect_error(db, "SELECT sentiment_probs(1,2,3)", "wrong number of arguments to function sentiment_probs()");
    expect_error(db, "SELECT sentiment_tokens()", "wrong number of arguments to function sentiment_tokens()");
    expect_error(db, "SELECT sentiment_load('x')", "wrong number of arguments to function sentiment_load()");
    expect_error(db, "SELECT sentiment_save()", "wrong number of arguments to function sentiment_save()");
    expect_error(db, "SELECT sentiment_config()", "wrong number of arguments to function sentiment_config()");
    expect_error(db, "SELECT sentiment_device(1)", "wrong number of arguments to function sentiment_device()");
    expect_error(db, "SELECT sentiment_version(1)", "wrong number of arguments to function sentiment_version()");
    expect_error(db, "SELECT sentiment_debug(1)", "wrong number of arguments to function sentiment_debug()");
    expect_error(db, "SELECT sentiment_batch() OVER ()", "wrong number of arguments to function sentiment_batch()");
    expect_error(db, "SELECT * FROM classify('a', 'b', 'c', 1, 'windows', 2)", "too many arguments on classify()");
    expect_error(db, "SELECT * FROM classify('a', 'b', 'c', 1, 2)", "long_text must be 'truncate' or 'windows', got '2'");
    sqlite3_close(db);
}

static void test_config(void **state)
{
    (void)state;
    sqlite3 *db = open_db_defaults(":memory:");
    expect_text(db, "SELECT sentiment_config('device')", "auto");
    expect_text(db, "SELECT sentiment_config('threads')", "0");
    expect_text(db, "SELECT sentiment_config('batch_size')", "32");
    expect_text(db, "SELECT sentiment_config('max_length')", "0");
    expect_text(db, "SELECT sentiment_config('progress')", "auto");
    expect_text(db, "SELECT sentiment_config('precision')", "auto");
    expect_text(db, "SELECT json_extract(sentiment_debug(), '$.precision')", "auto");
    expect_text(db, "SELECT sentiment_config('batch_size', 64)", "64");
    expect_text(db, "SELECT sentiment_config('batch_size', '7')", "7");
    expect_text(db, "SELECT sentiment_config('batch_size')", "7");
    expect_text(db, "SELECT sentiment_config('max_length', 128)", "128");
    expect_text(db, "SELECT sentiment_config('progress', 'off')", "off");
    expect_text(db, "SELECT sentiment_config('threads', 1)", "1");
    expect_text(db, "SELECT sentiment_device() LIKE 'cpu: 1 thread, %'", "1");
    expect_text(db, "SELECT sentiment_config('device', 'cpu')", "cpu");
    expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %'", "1");
    expect_text(db, "SELECT sentiment_config('device', 'auto')", "auto");
    expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %' OR sentiment_device() LIKE 'cuda:%'", "1");

    expect_error(db, "SELECT sentiment_config('batchsize')",
                 "sentiment_config(): unknown key 'batchsize'; known: device, threads, "
                 "batch_size, max_length, progress, precision, admin_functions, long_text");
    expect_error(db, "SELECT sentiment_config(NULL)", "sentiment_config(): unknown key 'NULL'");
    expect_error(db, "SELECT sentiment_config('batch_size', 0)",
                 "sentiment_config(): batch_size must be an integer from 1 to 4096, got '0'");
    expect_error(db, "SELECT sentiment_config('batch_size', 'lots')", "got 'lots'");
    expect_error(db, "SELECT sentiment_config('batch_size', 2.5)", "got '2.5'");
    expect_error(db, "SELECT sentiment_config('batch_size', NULL)", "got 'NULL'");
    expect_error(db, "SELECT sentiment_config('threads', -1)", "sentiment_config(): threads must be");
    expect_error(db, "SELECT sentiment_config('max_length', 1)", "sentiment_config(): max_length must be");
    expect_error(db, "SELECT sentiment_config('progress', 'yes')",
                 "sentiment_config(): progress must be auto, on or off, got 'yes'");
    expect_error(db, "SELECT sentiment_config('device', 'gpu')",
                 "sentiment_config(): unknown device 'gpu'; expected auto, cpu, cuda or cuda:N");
    expect_error(db, "SELECT sentiment_config('device', 'cuda:x')", "unknown device 'cuda:x'");
    expect_error(db, "SELECT sentiment_config('device', 42)", "device must be auto, cpu, cuda or cuda:N");
    /* no GPU plugin in this build directory: an error, never a fall-back */
    expect_error(db, "SELECT sentiment_config('device', 'cuda')",
                 "sentiment_config(): device 'cuda' is not available: no CUDA support found: ");
    expect_error(db, "SELECT sentiment_config('device', 'cuda:1')", "sentiment_cuda.so not present");
    /* failed sets leave the settings unchanged */
    expect_text(db, "SELECT sentiment_config('batch_size')", "7");
    expect_text(db, "SELECT sentiment_config('device')", "auto");
    sqlite3_close(db);
}

/* sentiment_config('precision'): the names, and what the CPU takes. The
 * test binary finds no CUDA plugin next to it, so every backend here is the
 * CPU, GPU or not. */
static void test_config_precision(void **state)
{
    (void)state;
    sqlite3 *db = open_db_defaults(":memory:");
    load_tiny(db);
    expect_text(db, "SELECT sentiment_config('precision')", "auto");
    expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
    expect_text(db, "SELECT sentiment_config('precision')", "fp32");
    expect_text(db, "SELECT json_extract(sentiment_debug(), '$.precision')", "fp32");
    expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %'", "1");
    expect_text(db, "SELECT sentiment('很好', 'tiny') IS NOT NULL", "1");
    expect_text(db, "SELECT sentiment_config('precision', 'auto')", "auto");

    /* bad names, whatever the device */
    expect_error(db, "SELECT sentiment_config('precision', 'fp16')",
                 "sentiment_config(): precision must be auto, fp32, tf32, bf16, bf16-fast or "
                 "int8, got 'fp16'");
    expect_error(db, "SELECT sentiment_config('precision', 'INT8')", "got 'INT8'");
    expect_error(db, "SELECT sentiment_config('precision', 'BF16')", "got 'BF16'");
    expect_error(db, "SELECT sentiment_config('precision', '')", "got ''");
    expect_error(db, "SELECT sentiment_config('precision', 32)", "precision must be auto, fp32");
    expect_error(db, "SELECT sentiment_config('precision', NULL)", "got 'NULL'");
    expect_error(db, "SELECT sentiment_config('precision', 'bf16-fast-and-more')",
                 "got 'bf16-fast-and-more'");

    /* the CPU: tf32 and bf16-fast say a CUDA device is needed, before a
     * backend exists and on a live one */
    expect_text(db, "SELECT sentiment_config('device', 'cpu')", "cpu");
    expect_error(db, "SELECT sentiment_config('precision', 'tf32')",
                 "sentiment_config(): precision 'tf32' needs a CUDA device; ");
    expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %'", "1");
    expect_error(db, "SELECT sentiment_config('precision', 'tf32')",
                 "precision 'tf32' needs a CUDA device; ");
    expect_error(db, "SELECT sentiment_config('precision', 'bf16-fast')",
                 "precision 'bf16-fast' needs a CUDA device");
    expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
    /* bf16 on the CPU needs AVX512-BF16: then the scores move by BF16
     * rounding only; without it, an error */
    exec_ok(db, "CREATE TEMP TABLE f32 AS SELECT sentiment_score('服务很好', 'tiny') AS v");
    if (backend_cpu_pack_native(BACKEND_PACK_BF16)) {
        expect_text(db, "SELECT sentiment_config('precision', 'bf16')", "bf16");
        expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %, bf16 (AVX512-BF16)'", "1");
        expect_text(db, "SELECT abs(v - sentiment_score('服务很好', 'tiny')) < 5e-3 AND "
                        "v != sentiment_score('服务很好', 'tiny') FROM f32", "1");
        expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
        expect_text(db, "SELECT sentiment_device() LIKE '%bf16%'", "0");
        expect_text(db, "SELECT v = sentiment_score('服务很好', 'tiny') FROM f32", "1");
        /* set before the backend exists, with device auto */
        expect_text(db, "SELECT sentiment_config('device', 'auto')", "auto");
        expect_text(db, "SELECT sentiment_config('precision', 'bf16')", "bf16");
        expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %, bf16 (AVX512-BF16)'", "1");
        expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
    } else {
        print_message("skipped: no AVX512-BF16 (checking the error instead)\n");
        expect_error(db, "SELECT sentiment_config('precision', 'bf16')",
                     "sentiment_config(): precision 'bf16' on the CPU needs AVX512-BF16, which "
                     "this CPU lacks");
        expect_text(db, "SELECT sentiment_config('device', 'auto')", "auto");
        expect_error(db, "SELECT sentiment_config('precision', 'bf16')",
                     "precision 'bf16' on the CPU needs AVX512-BF16");
    }
    /* int8 on the CPU needs AVX512-VNNI: then the scores move by
     * quantization error only; without it, an error */
    expect_text(db, "SELECT sentiment_config('device', 'cpu')", "cpu");
    if (backend_cpu_pack_native(BACKEND_PACK_INT8)) {
        expect_text(db, "SELECT sentiment_config('precision', 'int8')", "int8");
        expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %, int8 (AVX512-VNNI)'", "1");
        expect_text(db, "SELECT json_extract(sentiment_debug(), '$.precision')", "int8");
        expect_text(db, "SELECT abs(v - sentiment_score('服务很好', 'tiny')) < 2e-2 AND "
                        "v != sentiment_score('服务很好', 'tiny') FROM f32", "1");
        expect_text(db, "SELECT count(*) FROM classify('SELECT 1, ''好'' UNION ALL "
                        "SELECT 2, ''服务很差'' UNION ALL SELECT 3, ''还行''', 'tiny')", "3");
        if (backend_cpu_pack_native(BACKEND_PACK_BF16)) { /* int8 -> bf16 swaps the packed weights */
            expect_text(db, "SELECT sentiment_config('precision', 'bf16')", "bf16");
            expect_text(db, "SELECT abs(v - sentiment_score('服务很好', 'tiny')) < 5e-3 FROM f32",
                        "1");
            expect_text(db, "SELECT sentiment_config('precision', 'int8')", "int8");
        }
        expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
        expect_text(db, "SELECT sentiment_device() LIKE '%int8%'", "0");
        /* fp32 runs on the packed AVX-512F kernel (every VNNI CPU has it) */
        expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %, fp32 (AVX-512F kernel)'", "1");
        expect_text(db, "SELECT v = sentiment_score('服务很好', 'tiny') FROM f32", "1");
        /* set before the backend exists, with device auto (the backend is
         * made to see that it is the CPU) */
        expect_text(db, "SELECT sentiment_config('device', 'auto')", "auto");
        expect_text(db, "SELECT sentiment_config('precision', 'int8')", "int8");
        expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %, int8 (AVX512-VNNI)'", "1");
        expect_text(db, "SELECT sentiment_config('threads', 2)", "2");
        expect_text(db, "SELECT sentiment_device() LIKE 'cpu: 2 threads, %, int8 (AVX512-VNNI)'",
                    "1");
        expect_text(db, "SELECT abs(v - sentiment_score('服务很好', 'tiny')) < 2e-2 FROM f32", "1");
        expect_text(db, "SELECT sentiment_config('threads', 0)", "0");
        /* auto on such a CPU: int8 for the built-in model (when this build
         * has one) and checked models, fp32 for every other model */
        expect_text(db, "SELECT sentiment_config('precision', 'auto')", "auto");
        expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %, int8 (AVX512-VNNI) for "
                        "checked models, fp32 (AVX-512F kernel) for others'", "1");
        expect_text(db, "SELECT v = sentiment_score('服务很好', 'tiny') FROM f32", "1");
        if (q_int(db, "SELECT json_extract(sentiment_debug(), '$.builtin_model')")) {
            exec_ok(db, "CREATE TEMP TABLE b AS SELECT sentiment_score('服务很好') AS v");
            expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
            expect_text(db, "SELECT abs(v - sentiment_score('服务很好')) < 2e-2 AND "
                            "v != sentiment_score('服务很好') FROM b", "1");
        }
        expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
    } else {
        print_message("skipped: no AVX512-VNNI (checking the error instead)\n");
        expect_error(db, "SELECT sentiment_config('precision', 'int8')",
                     "sentiment_config(): precision 'int8' needs a CPU with AVX512-VNNI, which "
                     "this CPU lacks");
        expect_text(db, "SELECT sentiment_config('device', 'auto')", "auto");
        expect_error(db, "SELECT sentiment_config('precision', 'int8')",
                     "precision 'int8' needs a CPU with AVX512-VNNI");
        /* auto is then fp32, the same scores */
        expect_text(db, "SELECT sentiment_config('precision', 'auto')", "auto");
        expect_text(db, "SELECT sentiment_device() LIKE '%int8%'", "0");
        expect_text(db, "SELECT v = sentiment_score('服务很好', 'tiny') FROM f32", "1");
        expect_text(db, "SELECT sentiment_config('precision', 'fp32')", "fp32");
    }
    expect_text(db, "SELECT sentiment_device() LIKE 'cpu: %'", "1");
    /* failed sets leave the setting unchanged */
    expect_text(db, "SELECT sentiment_config('precision')", "fp32");
    expect_text(db, "SELECT sentiment_config('precision', 'auto')", "auto");
    sqlite3_close(db);
}

static void test_load_errors(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    expect_error(db, "SELECT sentiment_load('x', '/nonexistent/model')",
                 "sentiment_load(): cannot open model directory '/nonexistent/model': no such directory");
    expect_error(db, "SELECT sentiment_load('x', 'tests/fixtures/vocab.txt')",
                 "sentiment_load(): 'tests/fixtures/vocab.txt' is not a directory");
    expect_error(db, "SELECT sentiment_load('x', 'tests/fixtures')",
                 "sentiment_load(): 'tests/fixtures' is not a model directory; expected config.json");
    expect_error(db, "SELECT sentiment_load(NULL, '" TINY_MODEL "')",
                 "sentiment_load(): expected a model name (TEXT) as the first argument, got NULL");
    expect_error(db, "SELECT sentiment_load('a@1', '" TINY_MODEL "')",
                 "sentiment_load(): model name 'a@1' may not contain '@'");
    expect_error(db, "SELECT sentiment_load('', '" TINY_MODEL "')", "sentiment_load(): model name '' must be");
    expect_error(db, "SELECT sentiment_load('x', 42)", "expected a model directory path (TEXT)");
    expect_error(db, "SELECT sentiment_load('x', NULL)",
                 "sentiment_load(): no model named 'x' was registered with sentiment_load()");
    /* register, replace, unregister */
    expect_text(db, "SELECT sentiment_load('m', '" TINY_MODEL "') LIKE 'm: bert, 2 labels (negative, positive), %'",
                "1");
    expect_text(db, "SELECT sentiment_load('m', '" ERNIE_MODEL "') LIKE 'm: ernie, 3 labels (anger, joy, neutral)%'",
                "1");
    expect_text(db, "SELECT labels FROM sentiment_models WHERE name = 'm'", "[\"anger\",\"joy\",\"neutral\"]");
    expect_text(db, "SELECT sentiment_load('m', NULL)", "m: unregistered");
    expect_text(db, "SELECT count(*) FROM sentiment_models WHERE name = 'm'", "0");
    sqlite3_close(db);
}

static void test_multilabel_score(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('emo', '" ERNIE_MODEL "')");
    /* not a positive/negative model: score is P(top label) */
    expect_text(db, "SELECT abs(sentiment_score('今天很开心', 'emo') - (SELECT max(value) FROM "
                    "json_each(sentiment_probs('今天很开心', 'emo')))) < 1e-6",
                "1");
    expect_text(db, "SELECT sentiment('今天很开心', 'emo') = (SELECT key FROM json_each("
                    "sentiment_probs('今天很开心', 'emo')) ORDER BY value DESC LIMIT 1)",
                "1");
    expect_text(db, "SELECT sentiment('今天很开心', 'emo') IN ('anger', 'joy', 'neutral')", "1");
    sqlite3_close(db);
}

static void test_directonly(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    exec_ok(db, "CREATE VIEW v_load AS SELECT sentiment_load('a', '" TINY_MODEL "')");
    expect_error(db, "SELECT * FROM v_load", "unsafe use of sentiment_load()");
    exec_ok(db, "CREATE TABLE t(x); CREATE TABLE log(v);"
                "CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO log SELECT sentiment_save('h', 'tiny'); END;");
    expect_error(db, "INSERT INTO t VALUES (1)", "unsafe use of sentiment_save()");
    exec_ok(db, "CREATE VIEW v_cfg AS SELECT sentiment_config('device', 'cpu')");
    expect_error(db, "SELECT * FROM v_cfg", "unsafe use of sentiment_config()");
    exec_ok(db, "CREATE VIEW v_cls AS SELECT * FROM classify('t', 'x', 'tiny')");
    expect_error(db, "SELECT * FROM v_cls", "unsafe use of virtual table");
    /* reading is fine in a view */
    exec_ok(db, "CREATE VIEW v_ok AS SELECT sentiment('很好', 'tiny') AS s, sentiment_config('batch_size') AS b");
    expect_text(db, "SELECT b FROM v_ok", "32");
    sqlite3_close(db);
}

static void test_save_errors(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_error(db, "SELECT sentiment_save('default', 'tiny')",
                 "sentiment_save(): 'default' is reserved for the built-in model");
    expect_error(db, "SELECT sentiment_save('a@2', 'tiny')", "sentiment_save(): model name 'a@2' may not contain '@'");
    expect_error(db, "SELECT sentiment_save(NULL, 'tiny')", "sentiment_save(): expected a model name (TEXT)");
    expect_error(db, "SELECT sentiment_save('h', 'nope')", "sentiment_save(): no model named 'nope'");
    /* none of the failures created the table */
    expect_text(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'sentiment_model_store'", "0");
    sqlite3_close(db);
}

static void test_version_debug_device(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    expect_text(db, "SELECT sentiment_version()", "0.1.0");
    expect_text(db, "SELECT json_extract(sentiment_debug(), '$.commit') <> ''", "1");
    expect_text(db, "SELECT json_extract(sentiment_debug(), '$.sqlite') = sqlite_version()", "1");
    expect_text(db, "SELECT json_valid(sentiment_debug())", "1");
    expect_text(db, "SELECT json_extract(sentiment_debug(), '$.version')", "0.1.0");
    expect_text(db, "SELECT json_type(sentiment_debug(), '$.cache.loads')", "integer");
    expect_text(db, "SELECT json_extract(sentiment_debug(), '$.connection.rows')", "0");
    exec_ok(db, "SELECT sentiment_config('device', 'cpu')");
    expect_text(db, "SELECT sentiment_device() LIKE 'cpu: % thread%, OpenBLAS%'", "1");
    expect_text(db, "SELECT json_extract(sentiment_debug(), '$.backend') LIKE 'cpu: %'", "1");
    sqlite3_close(db);
}

/* Every registered name with the test(s) that cover it; the API-surface
 * test fails when the extension registers something not listed here, or a
 * listed name is missing. */
static const struct {
    const char *type; /* "function" or "module" */
    const char *name;
    const char *tested_by;
} k_surface[] = {
    {"function", "sentiment", "test_basic, test_null_empty_whitespace, test_ext_classify"},
    {"function", "sentiment_score", "test_basic, test_multilabel_score"},
    {"function", "sentiment_probs", "test_basic, test_numbers_and_blobs"},
    {"function", "sentiment_tokens", "test_tokens, test_invalid_utf8"},
    {"function", "sentiment_embed", "test_ext_embed, test_pooling"},
    {"function", "sentiment_load", "test_load_errors, test_directonly"},
    {"function", "sentiment_save", "test_save_errors, test_ext_storage"},
    {"function", "sentiment_config", "test_config, test_config_precision"},
    {"function", "sentiment_device", "test_config, test_version_debug_device"},
    {"function", "sentiment_version", "test_version_debug_device"},
    {"function", "sentiment_debug", "test_version_debug_device, test_long_text_truncated"},
    {"function", "sentiment_batch", "test_ext_classify: test_window_*"},
    {"module", "classify", "test_ext_classify"},
    {"module", "sentiment_models", "test_default_model, test_ext_storage"},
    {"function", "sentiment_evaluate", "test_ext_evaluate"},
    {"function", "sentiment_int8_check", "test_ext_int8_check, test_admin_switch"},
    {"function", "sentiment_use", "test_ext_train: test_use_earlier_version"},
    {"function", "sentiment_drop", "test_cache_identity: test_drop, test_drop_bad_input"},
    {"function", "sentiment_export", "test_cache_identity: test_export_*"},
    {"module", "sentiment_training", "test_ext_train: test_training_log_and_status"},
    {"function", "sentiment_explain", "test_ext_explain, test_explain, test_ext_device"},
    {"module", "sentiment_clauses", "test_ext_clauses"},
};

static void test_api_surface(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    size_t n = sizeof k_surface / sizeof *k_surface;
    int *seen = calloc(n, sizeof *seen);
    sqlite3_stmt *st = prepare(db,
                               "SELECT 'function', name FROM pragma_function_list "
                               "WHERE name LIKE 'sentiment%' OR name = 'classify' "
                               "UNION SELECT 'module', name FROM pragma_module_list "
                               "WHERE name LIKE 'sentiment%' OR name = 'classify'");
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(st, 0);
        const char *name = (const char *)sqlite3_column_text(st, 1);
        size_t i;
        for (i = 0; i < n; i++)
            if (!strcmp(k_surface[i].type, type) && !strcmp(k_surface[i].name, name)) break;
        if (i == n) fail_msg("%s %s is registered but has no test listed in k_surface", type, name);
        seen[i] = 1;
    }
    sqlite3_finalize(st);
    for (size_t i = 0; i < n; i++)
        if (!seen[i]) fail_msg("%s %s is listed but not registered", k_surface[i].type, k_surface[i].name);
    free(seen);
    /* DIRECTONLY flags as documented (pragma_function_list.flags 0x80000) */
    expect_text(db, "SELECT group_concat(name, ',') FROM (SELECT DISTINCT name FROM pragma_function_list "
                    "WHERE flags & 0x80000 AND (name LIKE 'sentiment%') ORDER BY name)",
                "sentiment_config,sentiment_drop,sentiment_export,sentiment_int8_check,sentiment_load,"
                "sentiment_save,sentiment_use");
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_null_empty_whitespace),
        cmocka_unit_test(test_numbers_and_blobs),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_long_text_truncated),
        cmocka_unit_test(test_unknown_model),
        cmocka_unit_test(test_default_model),
        cmocka_unit_test(test_wrong_argument_counts),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_config_precision),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_multilabel_score),
        cmocka_unit_test(test_directonly),
        cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_version_debug_device),
        cmocka_unit_test(test_api_surface),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

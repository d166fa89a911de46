/* test_parse_errors.c: an error about bytes that failed to parse gives the
 * position and what was expected, and never quotes the bytes: config.json,
 * a safetensors header and a vocab file, read from a file or stored as
 * BLOBs in a database (model/format/json_in.h gives the position and reason).
 * Every input below carries a secret word; no message may contain it.
 */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/ext_test_util.h"

#include "core/errors.h"
#include "encoder/bert.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "tokenize/tokenizer.h"

#define SHADOW "root:$6$Sup3rS3cret$hash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"

static void expect_no_secret(const char *err, const char *secret)
{
    if (strstr(err, secret)) fail_msg("error quotes the input ('%s'): %s", secret, err);
}

static void expect_config_error(const char *json, size_t len, const char *want,
                                const char *secret)
{
    char err[SM_ERR_MAX] = "";
    bert_config cfg;
    int rc = bert_config_parse(json, len, &cfg, err);
    if (rc != SM_ERR_FORMAT) fail_msg("rc %d, want SM_ERR_FORMAT; err: %s", rc, err);
    if (!strstr(err, want)) fail_msg("error '%s' does not contain '%s'", err, want);
    expect_no_secret(err, secret);
    assert_null(strstr(err, " near "));
}

#define CONFIG_ERR(json, want, secret) expect_config_error(json, sizeof(json) - 1, want, secret)

static void test_config_shadow_file_text(void **state)
{
    (void)state;
    CONFIG_ERR(SHADOW, "config.json: invalid JSON (line 1, column 1): unexpected character; expected a value",
               "root");
    CONFIG_ERR(SHADOW, "invalid JSON", "Sup3r");
}

static void test_config_short_word(void **state)
{
    (void)state;
    CONFIG_ERR("hunter2", "(line 1, column 1): unexpected character; expected a value", "hunter2");
}

static void test_config_bare_word_value(void **state)
{
    (void)state;
    CONFIG_ERR("{\"hidden_size\": hunter2}", "(line 1, column 17): unexpected character; expected a value",
               "hunter");
}

static void test_config_word_on_line_3(void **state)
{
    (void)state;
    CONFIG_ERR("{\n  \"a\": 1,\n  hunter2: 2}", "(line 3, column", "hunter");
}

static void test_config_trailing_text(void **state)
{
    (void)state;
    CONFIG_ERR("{} hunter2", "(line 1, column 4): unexpected content after the JSON value", "hunter");
}

static void test_config_bad_escape(void **state)
{
    (void)state;
    CONFIG_ERR("{\"a\": \"\\q hunter2\"}", "invalid escape", "hunter");
}

static void test_config_bad_unicode_escape(void **state)
{
    (void)state;
    CONFIG_ERR("{\"a\": \"\\uD800\\uzz hunter2\"}", "invalid JSON", "hunter");
    CONFIG_ERR("{\"a\": \"\\uDC01\"}", "(line 1, column 8): \\u escape of a lone low surrogate", "DC01");
}

static void test_config_control_character(void **state)
{
    (void)state;
    CONFIG_ERR("{\"a\": \"x\x01hunter2\"}", "(line 1, column 9): control character in a string", "0x1");
    CONFIG_ERR("{\"a\": \"x\x01hunter2\"}", "invalid JSON", "hunter");
}

static void test_config_invalid_utf8(void **state)
{
    (void)state;
    CONFIG_ERR("{\"a\": \"hunter2\xff\"}", "invalid UTF-8", "0xff");
}

static void test_config_duplicate_key(void **state)
{
    (void)state;
    /* a file that parsed as a JSON object up to it: the key is named */
    CONFIG_ERR("{\"epochs\": 1, \"epochs\": 2}", "duplicate key 'epochs'", "near");
    /* unless it is not short printable ASCII */
    CONFIG_ERR("{\"a\\u0001\": 1, \"a\\u0001\": 2}", "invalid JSON: duplicate key", "\\u0001");
}

static void test_config_unterminated_string(void **state)
{
    (void)state;
    CONFIG_ERR("{\"hunter2", "invalid JSON", "hunter");
}

static void test_config_nul_inside(void **state)
{
    (void)state;
    CONFIG_ERR("{\"a\": 1}\0hunter2", "invalid JSON", "hunter");
}

/* A safetensors file whose 8-byte length is right and whose header is the
 * given text. */
static uint8_t *st_with_header(const char *hdr, size_t *len)
{
    size_t h = strlen(hdr);
    uint8_t *b = calloc(1, 8 + h);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    *len = 8 + h;
    return b;
}

static void expect_st_error(const char *hdr, const char *want, const char *secret)
{
    char err[SM_ERR_MAX] = "";
    safetensors st;
    size_t len;
    uint8_t *b = st_with_header(hdr, &len);
    assert_int_equal(safetensors_open_buffer(b, len, &st, err), SM_ERR_FORMAT);
    if (!strstr(err, want)) fail_msg("error '%s' does not contain '%s'", err, want);
    expect_no_secret(err, secret);
    free(b);
}

static void test_safetensors_header_shadow(void **state)
{
    (void)state;
    expect_st_error(SHADOW, "safetensors: header is not valid JSON (line 1, column 1)",
                    "root");
}

static void test_safetensors_header_bare_word(void **state)
{
    (void)state;
    expect_st_error("{\"w\": hunter2}", "not valid JSON (line 1, column 7): unexpected character; expected a value",
                    "hunter");
}

static void test_safetensors_header_duplicate_key(void **state)
{
    (void)state;
    expect_st_error("{\"w\": {}, \"w\": {}}", "duplicate key 'w'", "near");
}

static void test_vocab_shadow(void **state)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    (void)state;
    assert_int_equal(tokenizer_load_buffer(SHADOW, sizeof SHADOW - 1, 1, &tok, err),
                     SM_ERR_FORMAT);
    expect_no_secret(err, "root");
    expect_no_secret(err, "daemon");
}

static void test_vocab_invalid_utf8_line(void **state)
{
    static const char v[] = "[PAD]\nhunter2\xff\n";
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    (void)state;
    assert_int_equal(tokenizer_load_buffer(v, sizeof v - 1, 1, &tok, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "line 2 is not valid UTF-8"));
    expect_no_secret(err, "hunter");
}

/* ---- through SQL: a model directory, a stored model -------------------- */

static void test_sentiment_load_config_shadow(void **state)
{
    char dir[] = "/tmp/sm_parse_errors_XXXXXX", path[128], cwd[200], target[300];
    sqlite3 *db;
    char *sql, *err = NULL;
    int fd;
    (void)state;
    assert_non_null(mkdtemp(dir));
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(path, sizeof path, "%s/config.json", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, SHADOW, sizeof SHADOW - 1), (ssize_t)(sizeof SHADOW - 1));
    close(fd);
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    snprintf(target, sizeof target, "%s/%s/vocab.txt", cwd, TINY_MODEL);
    assert_int_equal(symlink(target, path), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(target, sizeof target, "%s/%s/model.safetensors", cwd, TINY_MODEL);
    assert_int_equal(symlink(target, path), 0);

    db = open_db();
    sql = sqlite3_mprintf("SELECT sentiment_load('s', '%q')", dir);
    assert_int_not_equal(sqlite3_exec(db, sql, NULL, NULL, &err), SQLITE_OK);
    assert_non_null(err);
    assert_non_null(strstr(err, "config.json: invalid JSON (line 1, column 1)"));
    expect_no_secret(err, "root");
    expect_no_secret(err, "Sup3r");
    sqlite3_free(err);
    sqlite3_free(sql);
    sqlite3_close(db);
    snprintf(target, sizeof target, "rm -rf '%s'", dir);
    assert_int_equal(system(target), 0);
}

static void expect_stored_error(const char *update, const char *want, const char *secret)
{
    sqlite3 *db = open_db();
    char *err = NULL;
    load_tiny(db);
    exec_ok(db, "SELECT sentiment_save('s', 'tiny')");
    exec_ok(db, update);
    assert_int_not_equal(sqlite3_exec(db, "SELECT sentiment('很好', 's')", NULL, NULL, &err),
                         SQLITE_OK);
    assert_non_null(err);
    if (!strstr(err, want)) fail_msg("error '%s' does not contain '%s'", err, want);
    expect_no_secret(err, secret);
    sqlite3_free(err);
    sqlite3_close(db);
}

static void test_stored_config_blob_bare_word(void **state)
{
    (void)state;
    expect_stored_error("UPDATE sentiment_model_store SET config = '{\"hidden_size\": hunter2}'",
                        "config.json: invalid JSON (line 1, column 17): unexpected character; expected a value",
                        "hunter");
}

static void test_stored_config_blob_shadow(void **state)
{
    (void)state;
    expect_stored_error("UPDATE sentiment_model_store SET config = '" SHADOW "'",
                        "config.json: invalid JSON (line 1, column 1)", "root");
}

static void test_stored_safetensors_blob_header(void **state)
{
    (void)state;
    /* 8-byte length 14, then a 14-byte header holding a bare word */
    expect_stored_error("UPDATE sentiment_model_store SET safetensors = "
                        "x'0e00000000000000' || CAST('{\"w\": hunter2}' AS BLOB)",
                        "safetensors: header is not valid JSON (line 1, column 7", "hunter");
}

static void test_stored_vocab_blob_shadow(void **state)
{
    (void)state;
    expect_stored_error("UPDATE sentiment_model_store SET vocab = '" SHADOW "'", "vocab", "root");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_shadow_file_text),
        cmocka_unit_test(test_config_short_word),
        cmocka_unit_test(test_config_bare_word_value),
        cmocka_unit_test(test_config_word_on_line_3),
        cmocka_unit_test(test_config_trailing_text),
        cmocka_unit_test(test_config_bad_escape),
        cmocka_unit_test(test_config_bad_unicode_escape),
        cmocka_unit_test(test_config_control_character),
        cmocka_unit_test(test_config_invalid_utf8),
        cmocka_unit_test(test_config_duplicate_key),
        cmocka_unit_test(test_config_unterminated_string),
        cmocka_unit_test(test_config_nul_inside),
        cmocka_unit_test(test_safetensors_header_shadow),
        cmocka_unit_test(test_safetensors_header_bare_word),
        cmocka_unit_test(test_safetensors_header_duplicate_key),
        cmocka_unit_test(test_vocab_shadow),
        cmocka_unit_test(test_vocab_invalid_utf8_line),
        cmocka_unit_test(test_sentiment_load_config_shadow),
        cmocka_unit_test(test_stored_config_blob_bare_word),
        cmocka_unit_test(test_stored_config_blob_shadow),
        cmocka_unit_test(test_stored_safetensors_blob_header),
        cmocka_unit_test(test_stored_vocab_blob_shadow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

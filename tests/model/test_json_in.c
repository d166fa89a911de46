/* test_json_in.c: the strict parser for outside JSON (model/format/json_in.c):
 * what it accepts, what it refuses and why, exact integers, duplicate keys
 * among a million, nesting depth, UTF-8, lookups and error positions.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "format/json_in.h"

static json_in_doc *parse_ok(const char *text)
{
    json_in_doc *doc = NULL;
    json_in_error e;
    int rc = json_in_parse(text, strlen(text), &doc, &e);
    if (rc != SM_OK)
        fail_msg("'%s': refused (%d): %s", text, rc, e.reason);
    return doc;
}

static void expect_refused(const char *text, size_t len, const char *reason)
{
    json_in_doc *doc = (json_in_doc *)1;
    json_in_error e;
    int rc = json_in_parse(text, len, &doc, &e);
    if (rc != SM_ERR_FORMAT || doc)
        fail_msg("'%.*s': expected SM_ERR_FORMAT, got %d", (int)len, text, rc);
    if (!strstr(e.reason, reason))
        fail_msg("'%.*s': expected a reason with '%s', got '%s'", (int)len, text, reason,
                 e.reason);
}

#define REFUSED(lit, reason) expect_refused(lit, sizeof lit - 1, reason)

static void test_accepts_json(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "{}", "[]", " \t\r\n{ } ", "0", "-0", "\"\"", "null", "true", "false",
        "[1,-2,3.5,1e3,1E-3,-0.0e+1,1.5e300]",
        "{\"a\":{\"b\":[{\"c\":null}]},\"d\":\"\\u00e9\\n\\\"\\\\\\/\\b\\f\\r\\t\"}",
        "[\"\xe4\xb8\xad\xe6\x96\x87\",\"\xf0\x9f\x98\x80\",\"\\ud83d\\ude00\"]",
        "[-9223372036854775808,9223372036854775807]",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        json_in_free(parse_ok(ok[i]));
}

static void test_refuses_bad_syntax(void **state)
{
    (void)state;
    REFUSED("", "end of input");
    REFUSED("   ", "end of input");
    REFUSED("{", "end of input");
    REFUSED("{\"a\":1,}", "string key");
    REFUSED("[1,]", "expected a value");
    REFUSED("[1 2]", "','");
    REFUSED("{\"a\" 1}", "':'");
    REFUSED("{1:2}", "string key");
    REFUSED("{} {}", "after the JSON value");
    REFUSED("{}x", "after the JSON value");
    REFUSED("{}\0", "after the JSON value");
    REFUSED("\xef\xbb\xbf{}", "unexpected character"); /* a byte-order mark */
    REFUSED("\v{}", "unexpected character");
    REFUSED("nul", "unexpected character");
    REFUSED("True", "unexpected character");
    REFUSED("'a'", "unexpected character");
    REFUSED("[NaN]", "unexpected character");
    REFUSED("[Infinity]", "unexpected character");
    /* numbers, strictly */
    REFUSED("[01]", "leading zero");
    REFUSED("[-01]", "leading zero");
    REFUSED("[1.]", "after '.'");
    REFUSED("[.5]", "unexpected character");
    REFUSED("[+1]", "unexpected character");
    REFUSED("[-]", "invalid number");
    REFUSED("[1e]", "exponent");
    REFUSED("[1e+]", "exponent");
    REFUSED("[0x10]", "','");
    REFUSED("[1e999]", "range of a double");
    REFUSED("[9223372036854775808]", "64-bit range");
    REFUSED("[-9223372036854775809]", "64-bit range");
    REFUSED("[1000000000000000000000000000000000000000000000000000000000000000000]",
            "63 characters");
}

static void test_refuses_bad_strings(void **state)
{
    (void)state;
    REFUSED("[\"abc]", "unterminated");
    REFUSED("[\"a\\", "unterminated");
    REFUSED("[\"a\tb\"]", "control character");
    REFUSED("[\"a\nb\"]", "control character");
    REFUSED("[\"a\0b\"]", "control character");
    REFUSED("[\"\\x41\"]", "invalid escape");
    REFUSED("[\"\\'\"]", "invalid escape");
    REFUSED("[\"\\u12\"]", "four hex digits");
    REFUSED("[\"\\u12", "truncated");
    REFUSED("[\"a\\u0000b\"]", "\\u0000");
    REFUSED("{\"k\\u0000\":1}", "\\u0000");
    REFUSED("[\"\\udc00\"]", "lone low surrogate");
    REFUSED("[\"\\ud800\"]", "without its low half");
    REFUSED("[\"\\ud800x\"]", "without its low half");
    REFUSED("[\"\\ud800\\u0041\"]", "without its low half");
    REFUSED("[\"\\ud800\\ud800\"]", "without its low half");
    /* invalid UTF-8: stray continuation, overlong, encoded surrogate, above
     * U+10FFFF, truncated sequences, 0xFF */
    REFUSED("[\"\x80\"]", "UTF-8");
    REFUSED("[\"\xc0\xaf\"]", "UTF-8");
    REFUSED("[\"\xe0\x80\xaf\"]", "UTF-8");
    REFUSED("[\"\xed\xa0\x80\"]", "UTF-8");
    REFUSED("[\"\xf4\x90\x80\x80\"]", "UTF-8");
    REFUSED("[\"\xf0\x8f\xbf\xbf\"]", "UTF-8");
    REFUSED("[\"\xe4\xb8\"]", "UTF-8");
    REFUSED("[\"\xe4\xb8", "UTF-8");
    REFUSED("[\"\xff\"]", "UTF-8");
    REFUSED("{\"\xc3\":1}", "UTF-8");
    assert_true(json_in_utf8_valid("\xe4\xb8\xad", 3));
    assert_false(json_in_utf8_valid("\xe4\xb8", 2));
    assert_false(json_in_utf8_valid("a\0b", 3));
}

static void test_exact_numbers(void **state)
{
    (void)state;
    json_in_doc *doc = parse_ok("[9007199254740993,-9223372036854775808,768.0,1e2,"
                                "0.1,-0,12345678901234567]");
    const json_in_value *a = json_in_root(doc);
    assert_int_equal(a->n, 7);
    /* beyond 2^53, exact, not rounded as a double would be */
    assert_true(a->items[0].is_int);
    assert_true(a->items[0].i == INT64_C(9007199254740993));
    assert_true(a->items[1].is_int && a->items[1].i == INT64_MIN);
    /* written with a fraction or an exponent: not an integer */
    assert_false(a->items[2].is_int);
    assert_true(a->items[2].d == 768.0);
    assert_false(a->items[3].is_int);
    assert_true(a->items[3].d == 100.0);
    assert_false(a->items[4].is_int);
    assert_true(a->items[4].d == 0.1);
    assert_true(a->items[5].is_int && a->items[5].i == 0);
    assert_true(a->items[6].is_int && a->items[6].i == INT64_C(12345678901234567));
    char buf[64];
    assert_string_equal(json_in_describe(&a->items[0], buf, sizeof buf), "9007199254740993");
    assert_string_equal(json_in_describe(&a->items[2], buf, sizeof buf), "768.0");
    assert_string_equal(json_in_describe(&a->items[4], buf, sizeof buf), "0.1");
    json_in_free(doc);
    /* numbers are matched to the text in order, strings with digits between */
    doc = parse_ok("{\"1\":\"-2\\\"3\",\"x\":[4,\"5\"],\"y\":-6.5,\"z\":7}");
    const json_in_value *o = json_in_root(doc);
    assert_true(json_in_get(o, "x")->items[0].i == 4);
    assert_true(json_in_get(o, "y")->d == -6.5);
    assert_true(json_in_get(o, "z")->is_int && json_in_get(o, "z")->i == 7);
    assert_string_equal(json_in_get(o, "1")->str, "-2\"3");
    json_in_free(doc);
}

static void test_strings_and_lookup(void **state)
{
    (void)state;
    json_in_doc *doc = parse_ok("{\"b\":\"\\ud83d\\ude00\\u4e2d\",\"a\":[],\"B\":true,"
                                "\"\xe4\xb8\xad\":null}");
    const json_in_value *o = json_in_root(doc);
    assert_int_equal(o->n, 4);
    /* document order kept for iteration */
    assert_string_equal(o->members[0].key, "b");
    assert_string_equal(o->members[3].key, "\xe4\xb8\xad");
    const json_in_value *b = json_in_get(o, "b");
    assert_string_equal(b->str, "\xf0\x9f\x98\x80\xe4\xb8\xad");
    assert_int_equal(b->n, 7);
    /* lookup is exact, case-sensitive */
    assert_true(json_in_is(json_in_get(o, "B"), JSON_IN_TRUE));
    assert_true(json_in_is(json_in_get(o, "\xe4\xb8\xad"), JSON_IN_NULL));
    assert_null(json_in_get(o, "c"));
    assert_null(json_in_get(&o->members[1].value, "a")); /* not an object */
    json_in_free(doc);
}

static void test_error_position(void **state)
{
    (void)state;
    json_in_doc *doc;
    json_in_error e;
    const char *text = "{\"a\": 1,\n  \"\xe4\xb8\xad\": }";
    assert_int_equal(json_in_parse(text, strlen(text), &doc, &e), SM_ERR_FORMAT);
    assert_int_equal(e.line, 2);
    assert_int_equal(e.column, 8); /* the '}', counting characters */
    /* a reason never quotes the input */
    text = "root:$6$secret";
    assert_int_equal(json_in_parse(text, strlen(text), &doc, &e), SM_ERR_FORMAT);
    assert_null(strstr(e.reason, "root"));
    assert_int_equal(json_in_parse(NULL, 0, &doc, &e), SM_ERR_FORMAT);
}

static void test_depth(void **state)
{
    (void)state;
    char buf[2 * JSON_IN_MAX_DEPTH + 8];
    for (int depth = JSON_IN_MAX_DEPTH; depth <= JSON_IN_MAX_DEPTH + 1; depth++) {
        memset(buf, '[', (size_t)depth);
        memset(buf + depth, ']', (size_t)depth);
        json_in_doc *doc = NULL;
        json_in_error e;
        int rc = json_in_parse(buf, 2 * (size_t)depth, &doc, &e);
        if (depth == JSON_IN_MAX_DEPTH) {
            assert_int_equal(rc, SM_OK);
            json_in_free(doc);
        } else {
            assert_int_equal(rc, SM_ERR_FORMAT);
            assert_non_null(strstr(e.reason, "nested deeper"));
        }
    }
    /* a hostile depth is refused before anything recurses on it */
    size_t n = 1000000;
    char *deep = malloc(n);
    memset(deep, '[', n);
    json_in_doc *doc;
    json_in_error e;
    assert_int_equal(json_in_parse(deep, n, &doc, &e), SM_ERR_FORMAT);
    free(deep);
}

/* A million keys: a duplicate at the end is found, quickly (O(n log n)). */
static void test_duplicates_among_a_million_keys(void **state)
{
    (void)state;
    enum { KEYS = 1000000 };
    size_t cap = (size_t)KEYS * 24 + 32, n = 0;
    char *text = malloc(cap);
    text[n++] = '{';
    for (int i = 0; i < KEYS; i++)
        n += (size_t)sprintf(text + n, "%s\"k%d\":%d", i ? "," : "", i, i);
    size_t open_end = n;
    text[n++] = '}';
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    json_in_doc *doc = NULL;
    json_in_error e;
    assert_int_equal(json_in_parse(text, n, &doc, &e), SM_OK);
    assert_int_equal(json_in_root(doc)->n, KEYS);
    assert_true(json_in_get(json_in_root(doc), "k765432")->i == 765432);
    json_in_free(doc);
    n = open_end + (size_t)sprintf(text + open_end, ",\"k500000\":1}");
    assert_int_equal(json_in_parse(text, n, &doc, &e), SM_ERR_FORMAT);
    assert_null(doc);
    assert_string_equal(e.reason, "duplicate key 'k500000'");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    print_message("two parses of %d keys: %.2f s\n", KEYS, s);
    assert_true(s < 20); /* quadratic would take hours */
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_json),
        cmocka_unit_test(test_refuses_bad_syntax),
        cmocka_unit_test(test_refuses_bad_strings),
        cmocka_unit_test(test_exact_numbers),
        cmocka_unit_test(test_strings_and_lookup),
        cmocka_unit_test(test_error_position),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_duplicates_among_a_million_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

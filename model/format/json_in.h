/* json_in.h: the one parser for JSON that comes from outside (safetensors
 * headers, config.json, train() options): strict, exact, and safe when an
 * allocation fails.
 *
 * Owns the parsed document: one block holding every value, key and string,
 * freed by json_in_free. JSON we write is built elsewhere (jansson, SQLite's
 * sqlite3_str); nothing here writes JSON.
 *
 * Why this parser. jansson, which parsed these bytes before, does not survive
 * a failed allocation. tests/model/test_json_faults.c fails each allocation of a
 * parse in turn (N = 1, 2, ... until the parse completes untouched) over eight
 * inputs (a real safetensors header, a config.json, train options, escapes and
 * surrogates, 60-deep nesting, numbers, 400 keys, a 3000-escape string).
 * Measured with jansson 2.14 and cJSON 1.7.15 (Debian 12):
 *   jansson  4001 failing allocations: 11 "successful" parses that returned
 *            a wrong tree (7 of them on the long string), in every run, and
 *            crashes: lex_scan_string's assert (jansson issue #362) and heap
 *            corruption that glibc aborts on ("malloc(): invalid size"), 0 to
 *            3 per run as the heap is laid out (2 in most runs; 3 under
 *            AddressSanitizer, which sees each corruption); the rest clean
 *            errors
 *   cJSON    3311 failing allocations: 0 crashes, 0 wrong trees, 3311 errors,
 *            nothing leaked
 * So cJSON builds the tree. It is not strict enough on its own, and its NULL
 * does not say whether the input was bad or memory ran out, so a validating
 * pass of our own, which allocates nothing and so cannot fail that way, runs
 * first and decides every question of syntax:
 *   - RFC 8259 grammar exactly: no trailing content, no leading zeros, no
 *     "1.", no byte-order mark, whitespace only space, tab, CR, LF;
 *   - strings are valid UTF-8 (no overlong forms, no encoded surrogates,
 *     nothing above U+10FFFF), have no raw control characters, and escapes
 *     are well formed; \u0000 is refused (every string is a C string), and a
 *     surrogate escape must be a high-low pair;
 *   - nesting is at most JSON_IN_MAX_DEPTH deep;
 *   - numbers: an integer literal (no fraction or exponent) must fit int64
 *     and is kept exactly (cJSON holds only a double, which rounds beyond
 *     2^53); other numbers are doubles and must be finite; a literal is at
 *     most 63 characters (cJSON's limit, stated rather than hit).
 * When that pass accepts and cJSON then fails, memory ran out: the error says
 * so (SM_ERR_NOMEM), never "invalid JSON". The cJSON tree is then copied into
 * one block (json_in_value below), objects get a sorted index for O(log n)
 * lookup, and duplicate keys are refused after an O(n log n) sort (a hostile
 * header may hold a million keys). With the same fault test, json_in gives 0
 * crashes, 0 wrong trees, 0 false errors and 0 leaks; the test fails if that
 * ever changes.
 *
 * cJSON's allocator hooks are process-wide and belong to the host (which may
 * use cJSON too): this library never sets them; only tests do. cJSON also
 * writes a process-wide "last error" on every parse; we never read it, so
 * concurrent parses race only on that unread record.
 */
#ifndef SM_JSON_IN_H
#define SM_JSON_IN_H

#include <stddef.h>
#include <stdint.h>

#define JSON_IN_MAX_DEPTH 64

typedef enum json_in_type {
    JSON_IN_NULL,
    JSON_IN_FALSE,
    JSON_IN_TRUE,
    JSON_IN_NUMBER,
    JSON_IN_STRING,
    JSON_IN_ARRAY,
    JSON_IN_OBJECT
} json_in_type;

typedef struct json_in_value json_in_value;
typedef struct json_in_member json_in_member;

struct json_in_value {
    json_in_type type;
    int is_int; /* NUMBER written as an integer: exactly i */
    int64_t i;
    double d;                /* NUMBER: the value (i converted when is_int) */
    size_t n;                /* STRING: bytes; ARRAY: items; OBJECT: members */
    const char *str;         /* STRING: NUL-terminated UTF-8, no NUL inside */
    json_in_value *items;    /* ARRAY: n items */
    json_in_member *members; /* OBJECT: n members, in document order */
    json_in_member **by_key; /* OBJECT: the same members sorted by key */
};

struct json_in_member {
    const char *key; /* NUL-terminated UTF-8, unique in its object */
    json_in_value value;
};

typedef struct json_in_doc json_in_doc;

/* Why a parse failed: code is SM_ERR_FORMAT (line and column, from 1, of the
 * byte at fault, and a reason that never quotes the input except a duplicate
 * key's name) or SM_ERR_NOMEM. */
typedef struct json_in_error {
    int code;
    int line, column;
    char reason[160];
} json_in_error;

/* Parses len bytes (need not be NUL-terminated). SM_OK and *out, or an error
 * code with *out NULL and e filled. */
int json_in_parse(const char *text, size_t len, json_in_doc **out, json_in_error *e);
const json_in_value *json_in_root(const json_in_doc *doc);
void json_in_free(json_in_doc *doc);

/* The member of obj named key; NULL when absent or obj is not an object. */
const json_in_value *json_in_get(const json_in_value *obj, const char *key);

static inline int json_in_is(const json_in_value *v, json_in_type t)
{
    return v && v->type == t;
}

/* A value for an error message: 768, 32.5, "768", true, null, "an array",
 * "an object"; strings cut to fit cap. Returns buf. */
const char *json_in_describe(const json_in_value *v, char *buf, size_t cap);

/* Whether s[0..n) is valid UTF-8 by the same strict rules (no NUL). */
int json_in_utf8_valid(const char *s, size_t n);

/* Tests only: the allocator for json_in's own block (default: libc). */
void json_in_set_alloc_funcs(void *(*m)(size_t), void (*f)(void *));

#endif

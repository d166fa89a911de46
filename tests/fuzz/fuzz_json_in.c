/* fuzz_json_in.c: libFuzzer target for the strict JSON parser (json_in.c),
 * checked against jansson.
 *
 * When json_in accepts the input, the tree must be well formed (strings
 * valid UTF-8 of their stated length, keys sorted and unique, every member
 * found by lookup, numbers finite, integers exact) and jansson must accept
 * the same bytes and build the same tree. When json_in refuses input that
 * jansson accepts, the reason must be one json_in adds on purpose (nesting
 * depth, a number over 63 characters) or a NUL byte in the input (jansson
 * 2.14 skips NUL bytes between tokens as if they were whitespace). Built by scripts/fuzz.sh; with
 * -DFUZZ_STANDALONE it is a plain program that runs the files named on its
 * command line.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "format/json_in.h"

static void check_tree(const json_in_value *v, int depth)
{
    if (depth > JSON_IN_MAX_DEPTH)
        __builtin_trap();
    switch (v->type) {
    case JSON_IN_NUMBER:
        if (!isfinite(v->d) || (v->is_int && v->d != (double)v->i))
            __builtin_trap();
        break;
    case JSON_IN_STRING:
        if (strlen(v->str) != v->n || !json_in_utf8_valid(v->str, v->n))
            __builtin_trap();
        break;
    case JSON_IN_ARRAY:
        for (size_t i = 0; i < v->n; i++)
            check_tree(&v->items[i], depth + 1);
        break;
    case JSON_IN_OBJECT:
        for (size_t i = 0; i < v->n; i++) {
            const char *k = v->members[i].key;
            if (!json_in_utf8_valid(k, strlen(k)) ||
                json_in_get(v, k) != &v->members[i].value)
                __builtin_trap();
            if (i && strcmp(v->by_key[i - 1]->key, v->by_key[i]->key) >= 0)
                __builtin_trap();
            check_tree(&v->members[i].value, depth + 1);
        }
        break;
    default:
        break;
    }
}

/* Whether json_in's tree and jansson's are the same. */
static int same(const json_in_value *a, const json_t *b)
{
    switch (a->type) {
    case JSON_IN_NULL: return json_is_null(b);
    case JSON_IN_TRUE: return json_is_true(b);
    case JSON_IN_FALSE: return json_is_false(b);
    case JSON_IN_NUMBER:
        if (a->is_int)
            return json_is_integer(b) && json_integer_value(b) == a->i;
        return json_is_real(b) && json_real_value(b) == a->d;
    case JSON_IN_STRING:
        return json_is_string(b) && json_string_length(b) == a->n &&
               memcmp(json_string_value(b), a->str, a->n) == 0;
    case JSON_IN_ARRAY:
        if (!json_is_array(b) || json_array_size(b) != a->n)
            return 0;
        for (size_t i = 0; i < a->n; i++)
            if (!same(&a->items[i], json_array_get(b, i)))
                return 0;
        return 1;
    case JSON_IN_OBJECT:
        if (!json_is_object(b) || json_object_size(b) != a->n)
            return 0;
        for (size_t i = 0; i < a->n; i++) {
            const json_t *m = json_object_get(b, a->members[i].key);
            if (!m || !same(&a->members[i].value, m))
                return 0;
        }
        return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_in_doc *doc = NULL;
    json_in_error e;
    json_error_t jerr;
    int rc = json_in_parse((const char *)data, size, &doc, &e);
    json_t *j = json_loadb((const char *)data, size,
                           JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (rc == SM_OK) {
        if (!doc || e.reason[0])
            __builtin_trap();
        check_tree(json_in_root(doc), 0);
        if (!j || !same(json_in_root(doc), j))
            __builtin_trap(); /* accepted what jansson refuses, or differs */
    } else {
        if (doc || rc != SM_ERR_FORMAT || !e.reason[0])
            __builtin_trap();
        int nul = memchr(data, 0, size) != NULL;
        if (j && !strstr(e.reason, "nested deeper") &&
            !strstr(e.reason, "63 characters") && !nul)
            __builtin_trap(); /* refused what jansson accepts */
    }
    json_decref(j);
    json_in_free(doc);
    return 0;
}

#ifdef FUZZ_STANDALONE
#include "fuzz_standalone.h"
#endif

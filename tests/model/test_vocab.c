/* test_vocab.c: model/tokenize/vocab.c, the vocabulary both tokenizers share.
 *
 * Every lookup is checked against a reference: a linear search over the
 * tokens as the input lists them (for vocab.txt lines, the last id of a
 * token wins, as the Python dict transformers' load_vocab() builds), over
 * seeded random vocabularies of a few thousand tokens (ASCII, multi-byte
 * UTF-8, shared prefixes, tokens longer and shorter than a hash slot's
 * inline key), for every token, for "##" + token split at every byte, and
 * for strings that are not tokens. Then the line rules (\n, \r\n, a lone \r,
 * a last line without an end), the errors (NUL byte, invalid UTF-8, a
 * duplicate piece) with their messages, a clone that outlives its source,
 * and the empty vocabulary.
 *
 * Run from the repository root: ./build/tests/test_vocab
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/rng.h"
#include "tokenize/vocab.h"

#define N_RANDOM 3000
#define MAX_PIECE 24

/* The reference: the last id in names[0..n) whose name is s[0..len), or -1. */
static int ref_lookup(char (*names)[MAX_PIECE + 1], int n, const char *s, size_t len)
{
    int id = -1;
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) id = i;
    return id;
}

/* Random token text: ASCII letters, CJK ideographs (3 bytes) and a few
 * 2- and 4-byte characters, 1..MAX_PIECE bytes; a small alphabet so
 * prefixes and duplicates are common. */
static void random_piece(uint64_t *s, char *out)
{
    static const char *const chars[] = {"a", "b", "c", "#", "中", "文", "é", "😀", "z"};
    size_t n = 0, want = 1 + rng_next(s) % 12;
    while (n < want) {
        const char *c = chars[rng_next(s) % (sizeof chars / sizeof *chars)];
        size_t l = strlen(c);
        if (n + l > MAX_PIECE) break;
        memcpy(out + n, c, l);
        n += l;
    }
    out[n] = '\0';
}

/* Checks v against names[0..n) (the reference) by every way of looking up. */
static void check_against_reference(const vocab *v, char (*names)[MAX_PIECE + 1], int n,
                                    uint64_t seed)
{
    size_t max_bytes = 0;
    assert_int_equal(vocab_size(v), n);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        if (l > max_bytes) max_bytes = l;
        assert_string_equal(vocab_token(v, i), names[i]);
        assert_int_equal(vocab_lookup(v, names[i], l), ref_lookup(names, n, names[i], l));
        /* "##" + the rest, given as prefix and rest at every split. */
        char joined[MAX_PIECE + 3];
        snprintf(joined, sizeof joined, "##%s", names[i]);
        int want = ref_lookup(names, n, joined, l + 2);
        assert_int_equal(vocab_lookup_prefixed(v, "##", 2, names[i], l), want);
        for (size_t k = 0; k <= l + 2; k++)
            assert_int_equal(vocab_lookup_prefixed(v, joined, k, joined + k, l + 2 - k), want);
    }
    assert_int_equal(vocab_max_token_bytes(v), max_bytes);
    assert_null(vocab_token(v, -1));
    assert_null(vocab_token(v, n));
    uint64_t s = seed;
    for (int i = 0; i < 2000; i++) { /* mostly not tokens */
        char q[MAX_PIECE + 1];
        random_piece(&s, q);
        assert_int_equal(vocab_lookup(v, q, strlen(q)), ref_lookup(names, n, q, strlen(q)));
    }
}

static void test_lines_against_reference(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    static char names[N_RANDOM][MAX_PIECE + 1];
    static char text[N_RANDOM * (MAX_PIECE + 2)];
    size_t len = 0;
    uint64_t s = 7;
    int dups = 0;
    for (int i = 0; i < N_RANDOM; i++) {
        random_piece(&s, names[i]);
        dups += ref_lookup(names, i, names[i], strlen(names[i])) >= 0;
        len += (size_t)sprintf(text + len, "%s%s", names[i], i % 3 == 0 ? "\r\n" : "\n");
    }
    print_message("vocab: %d lines, %d repeat an earlier line\n", N_RANDOM, dups);
    assert_true(dups > 100); /* the last-id-wins rule is exercised */
    vocab *v;
    int rc = vocab_from_lines(text, len, &v, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    check_against_reference(v, names, N_RANDOM, 11);

    /* A copy answers the same after its source is gone. */
    vocab *c;
    assert_int_equal(vocab_clone(v, &c, err), SM_OK);
    vocab_free(v);
    check_against_reference(c, names, N_RANDOM, 12);
    vocab_free(c);
}

static void test_pieces_against_reference(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    static char names[N_RANDOM][MAX_PIECE + 1];
    const char *pieces[N_RANDOM];
    uint64_t s = 8;
    int n = 0;
    while (n < N_RANDOM) { /* distinct, as a tokenizer.json model's pieces */
        random_piece(&s, names[n]);
        if (ref_lookup(names, n, names[n], strlen(names[n])) < 0) {
            pieces[n] = names[n];
            n++;
        }
    }
    vocab *v;
    int rc = vocab_from_pieces(pieces, n, &v, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    check_against_reference(v, names, n, 13);
    vocab_free(v);
}

static void test_line_ends(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    /* Python's universal newlines: a, b, (empty), c, d, e, x; the lone \r
     * ends "c"; "x" is the last line, without an end. */
    static const char text[] = "a\nb\r\n\nc\rd\r\ne\nx";
    static const char *const want[] = {"a", "b", "", "c", "d", "e", "x"};
    vocab *v;
    assert_int_equal(vocab_from_lines(text, sizeof text - 1, &v, err), SM_OK);
    assert_int_equal(vocab_size(v), 7);
    for (int i = 0; i < 7; i++) {
        assert_string_equal(vocab_token(v, i), want[i]);
        assert_int_equal(vocab_lookup(v, want[i], strlen(want[i])), i);
    }
    assert_int_equal(vocab_lookup(v, "a\n", 2), -1);
    vocab_free(v);

    /* A final line end adds no empty line; "a\r" is one line, as is "a". */
    static const char *const one[] = {"a", "a\n", "a\r", "a\r\n"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(vocab_from_lines(one[i], strlen(one[i]), &v, err), SM_OK);
        assert_int_equal(vocab_size(v), 1);
        assert_string_equal(vocab_token(v, 0), "a");
        vocab_free(v);
    }
}

static void test_errors_and_empty(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    vocab *v = (vocab *)1;

    assert_int_equal(vocab_from_lines("a\nb\0c\n", 6, &v, err), SM_ERR_FORMAT);
    assert_null(v);
    assert_string_equal(err, "vocab: line 2 holds a NUL byte");
    assert_int_equal(vocab_from_lines("ok\n\xff\xfe\n", 6, &v, err), SM_ERR_FORMAT);
    assert_string_equal(err, "vocab: line 2 is not valid UTF-8");
    assert_int_equal(vocab_from_lines("ok\n\xed\xa0\x80\n", 7, &v, err), SM_ERR_FORMAT);
    assert_string_equal(err, "vocab: line 2 is not valid UTF-8"); /* a surrogate */
    /* U+FFFD written out is a valid token. */
    assert_int_equal(vocab_from_lines("\xef\xbf\xbd", 3, &v, err), SM_OK);
    assert_int_equal(vocab_lookup(v, "\xef\xbf\xbd", 3), 0);
    vocab_free(v);

    const char *dup[] = {"x", "y", "z", "y"};
    assert_int_equal(vocab_from_pieces(dup, 4, &v, err), SM_ERR_FORMAT);
    assert_null(v);
    assert_string_equal(err, "vocab: token 3 is a duplicate of token 1");
    assert_int_equal(vocab_from_pieces(dup, -1, &v, err), SM_ERR_FORMAT);
    assert_string_equal(err, "vocab: -1 tokens is out of range");

    /* Empty: no ids, nothing found, and a copy of nothing. */
    assert_int_equal(vocab_from_lines(NULL, 0, &v, err), SM_OK);
    assert_int_equal(vocab_size(v), 0);
    assert_int_equal(vocab_lookup(v, "", 0), -1);
    assert_int_equal(vocab_lookup(v, "a", 1), -1);
    assert_null(vocab_token(v, 0));
    vocab *c;
    assert_int_equal(vocab_clone(v, &c, err), SM_OK);
    assert_int_equal(vocab_size(c), 0);
    vocab_free(c);
    vocab_free(v);
    assert_int_equal(vocab_from_pieces(NULL, 0, &v, err), SM_OK);
    assert_int_equal(vocab_size(v), 0);
    assert_int_equal(vocab_max_token_bytes(v), 0);
    vocab_free(v);
    vocab_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_against_reference),
        cmocka_unit_test(test_pieces_against_reference),
        cmocka_unit_test(test_line_ends),
        cmocka_unit_test(test_errors_and_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

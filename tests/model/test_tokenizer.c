/* test_tokenizer.c: model/tokenize/tokenizer.c against Hugging Face BertTokenizer.
 *
 * The golden tests run every string of tests/fixtures/tokenizer_golden.tsv
 * (vocab.txt) and tokenizer_golden_unicode.tsv (vocab_unicode.txt), written by
 * tests/fixtures/gen_tokenizer_golden.py with transformers, through both
 * tokenizers (do_lower_case on and off) and tokenizer_encode
 * with max_length 16, and requires the exact ids. The unit tests cover the
 * vocabulary loader (special ids, lookup, errors), truncation, NULL/empty
 * input, a 1 MB text, every single byte and seeded random byte soup.
 *
 * Run from the repository root: ./build/tests/test_tokenizer
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
#include "tokenize/tokenizer.h"

#include "support/golden_ids_util.h"

#define VOCAB_PATH "tests/fixtures/vocab.txt"
#define GOLDEN_PATH "tests/fixtures/tokenizer_golden.tsv"
#define UNICODE_VOCAB_PATH "tests/fixtures/vocab_unicode.txt"
#define UNICODE_GOLDEN_PATH "tests/fixtures/tokenizer_golden_unicode.tsv"
#define GOLDEN_MAX_LENGTH 16

static tokenizer *lower_tok, *cased_tok;

static int setup(void **state)
{
    char err[SM_ERR_MAX] = "";
    (void)state;
    if (tokenizer_load_file(VOCAB_PATH, 1, &lower_tok, err) != SM_OK ||
        tokenizer_load_file(VOCAB_PATH, 0, &cased_tok, err) != SM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", VOCAB_PATH, err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tokenizer_free(lower_tok);
    tokenizer_free(cased_tok);
    return 0;
}

/* ids of a text, in a malloc'd array; *n = count. */
static int *tokenize_all(const tokenizer *tok, const char *s, size_t len, int *n)
{
    char err[SM_ERR_MAX] = "";
    int total = -1;
    assert_int_equal(tokenizer_tokenize(tok, s, len, NULL, 0, &total, err), SM_OK);
    assert_true(total >= 0);
    int *ids = malloc(((size_t)total + 1) * sizeof *ids);
    assert_non_null(ids);
    int again = -1;
    assert_int_equal(tokenizer_tokenize(tok, s, len, ids, total, &again, err), SM_OK);
    assert_int_equal(again, total);
    *n = total;
    return ids;
}

/* ------------------------------------------------------------- golden file */

/* Compares one list; prints both on mismatch. Returns 1 when equal. */
static int same_ids(int index, const char *what, const char *hex,
                    const int *want, int nwant, const int *got, int ngot)
{
    if (nwant == ngot && memcmp(want, got, (size_t)nwant * sizeof *want) == 0)
        return 1;
    fprintf(stderr, "golden string %d (%s) differs, input hex %s\n", index, what, hex);
    print_ids("expected", want, nwant);
    print_ids("got     ", got, ngot);
    return 0;
}

/* Runs one golden file against a lower-casing and a cased tokenizer;
 * returns the number of strings. */
static int run_golden(const char *path, const tokenizer *lower,
                      const tokenizer *cased)
{
    size_t len;
    char *buf = read_file(path, &len);
    int strings = 0, failures = 0;
    assert_non_null(buf);

    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *field[8];
        int nf = 0;
        if (line[0] == '#')
            continue;
        for (char *p = line; nf < 8;) {
            field[nf++] = p;
            p = strchr(p, '\t');
            if (!p)
                break;
            *p++ = '\0';
        }
        assert_int_equal(nf, 8);
        int index = atoi(field[0]);
        const char *hex = field[1];
        size_t hlen = strcmp(hex, "-") == 0 ? 0 : strlen(hex);
        assert_int_equal(hlen % 2, 0);
        char *text = malloc(hlen / 2 + 1);
        assert_non_null(text);
        for (size_t i = 0; i < hlen / 2; i++) {
            int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
            assert_true(hi >= 0 && lo >= 0);
            text[i] = (char)(hi * 16 + lo);
        }
        size_t tlen = hlen / 2;

        int cap = (int)tlen * 4 + 64;
        int *want = malloc((size_t)cap * sizeof *want);
        assert_non_null(want);
        for (int k = 0; k < 2; k++) { /* 0: lower, 1: cased */
            const tokenizer *tok = k == 0 ? lower : cased;
            const char *name = k == 0 ? "do_lower_case" : "cased";
            char err[SM_ERR_MAX] = "";
            int n, nwant = parse_ids(field[2 + k], want, cap);
            assert_true(nwant >= 0);
            int *got = tokenize_all(tok, text, tlen, &n);
            failures += !same_ids(index, name, hex, want, nwant, got, n);
            free(got);

            int enc[GOLDEN_MAX_LENGTH], nenc = -1, trunc = -1;
            nwant = parse_ids(field[4 + 2 * k], want, cap);
            assert_true(nwant >= 0);
            assert_int_equal(tokenizer_encode(tok, text, tlen, GOLDEN_MAX_LENGTH,
                                              enc, &nenc, &trunc, err), SM_OK);
            failures += !same_ids(index, k == 0 ? "encode16 do_lower_case"
                                                : "encode16 cased",
                                  hex, want, nwant, enc, nenc);
            if (trunc != atoi(field[5 + 2 * k])) {
                fprintf(stderr, "golden string %d (%s): truncated %d, expected %s\n",
                        index, name, trunc, field[5 + 2 * k]);
                failures++;
            }
        }
        free(want);
        free(text);
        strings++;
    }
    free(buf);
    fprintf(stderr, "%s: %d strings, %d mismatches\n", path, strings, failures);
    assert_int_equal(failures, 0);
    return strings;
}

static void test_golden(void **state)
{
    (void)state;
    assert_true(run_golden(GOLDEN_PATH, lower_tok, cased_tok) >= 300);
}

/* NFC, lower-casing (final sigma) and accent stripping on a vocab that has
 * every character of a few Unicode blocks, so none of it hides in [UNK]. */
static void test_golden_unicode(void **state)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *lo = NULL, *ca = NULL;
    (void)state;
    assert_int_equal(tokenizer_load_file(UNICODE_VOCAB_PATH, 1, &lo, err), SM_OK);
    assert_int_equal(tokenizer_load_file(UNICODE_VOCAB_PATH, 0, &ca, err), SM_OK);
    assert_true(run_golden(UNICODE_GOLDEN_PATH, lo, ca) >= 500);
    tokenizer_free(lo);
    tokenizer_free(ca);
}

/* ------------------------------------------------------------ vocabulary */

static void test_special_ids(void **state)
{
    (void)state;
    /* The fixture puts them at 0..4, not at BERT's usual 0/100/101/102/103. */
    assert_int_equal(tokenizer_pad_id(lower_tok), 0);
    assert_int_equal(tokenizer_unk_id(lower_tok), 1);
    assert_int_equal(tokenizer_cls_id(lower_tok), 2);
    assert_int_equal(tokenizer_sep_id(lower_tok), 3);
    assert_int_equal(tokenizer_mask_id(lower_tok), 4);
    assert_int_equal(tokenizer_do_lower_case(lower_tok), 1);
    assert_int_equal(tokenizer_do_lower_case(cased_tok), 0);

    /* Anywhere else in a vocab, and [MASK] optional. */
    static const char v[] = "a\n[SEP]\n[UNK]\nb\n[CLS]\n[PAD]\n";
    char err[SM_ERR_MAX] = "";
    tokenizer *t = NULL;
    assert_int_equal(tokenizer_load_buffer(v, sizeof v - 1, 1, &t, err), SM_OK);
    assert_int_equal(tokenizer_vocab_size(t), 6);
    assert_int_equal(tokenizer_sep_id(t), 1);
    assert_int_equal(tokenizer_unk_id(t), 2);
    assert_int_equal(tokenizer_cls_id(t), 4);
    assert_int_equal(tokenizer_pad_id(t), 5);
    assert_int_equal(tokenizer_mask_id(t), -1);

    int ids[8], n = 0, trunc = -1;
    assert_int_equal(tokenizer_encode(t, "a b [MASK]", 10, 8, ids, &n, &trunc, err), SM_OK);
    /* [CLS] a b [UNK]...: "[MASK]" is not in this vocab, so WordPiece fails. */
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], 4);
    assert_int_equal(ids[1], 0);
    assert_int_equal(ids[2], 3);
    assert_int_equal(ids[3], 2);
    assert_int_equal(ids[4], 1);
    assert_int_equal(trunc, 0);
    tokenizer_free(t);
}

static void test_lookup(void **state)
{
    (void)state;
    int n = tokenizer_vocab_size(lower_tok);
    assert_true(n > 2000);
    for (int id = 0; id < n; id++) {
        const char *s = tokenizer_token(lower_tok, id);
        assert_non_null(s);
        assert_int_equal(tokenizer_lookup(lower_tok, s, strlen(s)), id);
    }
    assert_null(tokenizer_token(lower_tok, -1));
    assert_null(tokenizer_token(lower_tok, n));
    assert_string_equal(tokenizer_token(lower_tok, 2), "[CLS]");
    assert_true(tokenizer_lookup(lower_tok, "hotel", 5) > 4);
    assert_true(tokenizer_lookup(lower_tok, "##s", 3) > 4);
    assert_true(tokenizer_lookup(lower_tok, "好", strlen("好")) > 4);
    assert_int_equal(tokenizer_lookup(lower_tok, "hotelx", 6), -1);
    assert_int_equal(tokenizer_lookup(lower_tok, "hote", 4), -1);
    assert_int_equal(tokenizer_lookup(lower_tok, "hotel", 4), -1);
    assert_int_equal(tokenizer_lookup(lower_tok, "", 0), -1);
    assert_int_equal(tokenizer_lookup(lower_tok, NULL, 0), -1);
    assert_int_equal(tokenizer_lookup(lower_tok, "##q", 3), -1); /* left out */
    assert_int_equal(tokenizer_lookup(lower_tok, "嗯", strlen("嗯")), -1);
}

static int load(const char *v, size_t len, tokenizer **t, char *err)
{
    return tokenizer_load_buffer(v, len, 1, t, err);
}

static void test_vocab_errors(void **state)
{
    char err[SM_ERR_MAX];
    tokenizer *t = NULL;
    (void)state;

    static const char no_cls[] = "[PAD]\n[UNK]\n[SEP]\na\n";
    err[0] = '\0';
    assert_int_equal(load(no_cls, sizeof no_cls - 1, &t, err), SM_ERR_FORMAT);
    assert_null(t);
    assert_non_null(strstr(err, "[CLS]"));

    static const char no_sep[] = "[PAD]\n[UNK]\n[CLS]\n";
    assert_int_equal(load(no_sep, sizeof no_sep - 1, &t, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "[SEP]"));
    static const char no_pad[] = "[SEP]\n[UNK]\n[CLS]\n";
    assert_int_equal(load(no_pad, sizeof no_pad - 1, &t, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "[PAD]"));
    static const char no_unk[] = "[SEP]\n[PAD]\n[CLS]\n";
    assert_int_equal(load(no_unk, sizeof no_unk - 1, &t, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "[UNK]"));
    /* Case and surrounding spaces matter, as in HF. */
    static const char near[] = "[pad]\n[UNK]\n[CLS] \n[SEP]\n";
    assert_int_equal(load(near, sizeof near - 1, &t, err), SM_ERR_FORMAT);

    assert_int_equal(load("", 0, &t, err), SM_ERR_FORMAT);
    assert_int_equal(load(NULL, 0, &t, err), SM_ERR_FORMAT);
    assert_int_equal(load(NULL, 3, &t, err), SM_ERR_INVALID);
    assert_int_equal(load("\n\n\n", 3, &t, err), SM_ERR_FORMAT);

    static const char bad_utf8[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nab\xff\n";
    assert_int_equal(load(bad_utf8, sizeof bad_utf8 - 1, &t, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "line 5"));
    /* a NUL inside a token (found by fuzz_vocab): refused, with its line */
    static const char nul_token[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n\"\0\0##D\n";
    assert_int_equal(load(nul_token, sizeof nul_token - 1, &t, err), SM_ERR_FORMAT);
    assert_null(t);
    assert_string_equal(err, "vocab: line 5 holds a NUL byte");

    err[0] = '\0';
    assert_int_equal(tokenizer_load_file("tests/fixtures/no-such-vocab.txt", 1, &t, err),
                     SM_ERR_IO);
    assert_null(t);
    assert_non_null(strstr(err, "no-such-vocab.txt"));
    assert_int_equal(tokenizer_load_file(NULL, 1, &t, err), SM_ERR_INVALID);
}

static void test_vocab_lines(void **state)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *t = NULL;
    (void)state;

    /* "\r\n", lone "\r" (Python universal newlines) and no final newline;
     * a duplicate maps to its later id, as the Python dict does. */
    static const char v[] = "[PAD]\r\n[UNK]\r[CLS]\n[SEP]\n\nab\nab\n##b";
    assert_int_equal(load(v, sizeof v - 1, &t, err), SM_OK);
    assert_int_equal(tokenizer_vocab_size(t), 8);
    assert_int_equal(tokenizer_pad_id(t), 0);
    assert_int_equal(tokenizer_unk_id(t), 1);
    assert_int_equal(tokenizer_cls_id(t), 2);
    assert_int_equal(tokenizer_sep_id(t), 3);
    assert_string_equal(tokenizer_token(t, 4), "");
    assert_int_equal(tokenizer_lookup(t, "", 0), 4);
    assert_int_equal(tokenizer_lookup(t, "ab", 2), 6);
    assert_string_equal(tokenizer_token(t, 5), "ab");
    assert_string_equal(tokenizer_token(t, 7), "##b");

    int ids[8], n = -1;
    assert_int_equal(tokenizer_tokenize(t, "AB abb x", 8, ids, 8, &n, err), SM_OK);
    assert_int_equal(n, 4); /* ab, ab ##b, [UNK] */
    assert_int_equal(ids[0], 6);
    assert_int_equal(ids[1], 6);
    assert_int_equal(ids[2], 7);
    assert_int_equal(ids[3], 1);
    tokenizer_free(t);

    /* A trailing newline adds no empty token; a UTF-8 BOM stays part of
     * the first token (Python reads vocab.txt as "utf-8", not "utf-8-sig"). */
    static const char bom[] = "\xef\xbb\xbf[PAD]\n[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
    assert_int_equal(load(bom, sizeof bom - 1, &t, err), SM_OK);
    assert_int_equal(tokenizer_vocab_size(t), 5);
    assert_int_equal(tokenizer_pad_id(t), 1);
    tokenizer_free(t);
}

/* ------------------------------------------------------------ tokenizing */

static void test_truncation(void **state)
{
    char err[SM_ERR_MAX] = "";
    int ids[64], n = -1, trunc = -1;
    (void)state;
    const int cls = tokenizer_cls_id(lower_tok), sep = tokenizer_sep_id(lower_tok);

    /* 14 ideographs fit max_length 16 exactly; 15 do not. */
    const char *s14 = "好好好好好好好好好好好好好好";
    const char *s15 = "好好好好好好好好好好好好好好好";
    int hao = tokenizer_lookup(lower_tok, "好", strlen("好"));
    assert_int_equal(tokenizer_encode(lower_tok, s14, strlen(s14), 16, ids, &n, &trunc, err), SM_OK);
    assert_int_equal(n, 16);
    assert_int_equal(trunc, 0);
    assert_int_equal(ids[0], cls);
    assert_int_equal(ids[14], hao);
    assert_int_equal(ids[15], sep);
    assert_int_equal(tokenizer_encode(lower_tok, s15, strlen(s15), 16, ids, &n, &trunc, err), SM_OK);
    assert_int_equal(n, 16);
    assert_int_equal(trunc, 1);
    assert_int_equal(ids[15], sep);

    /* max_length 2: only the special tokens. */
    assert_int_equal(tokenizer_encode(lower_tok, "a", 1, 2, ids, &n, &trunc, err), SM_OK);
    assert_int_equal(n, 2);
    assert_int_equal(trunc, 1);
    assert_int_equal(ids[0], cls);
    assert_int_equal(ids[1], sep);
    assert_int_equal(tokenizer_encode(lower_tok, " ", 1, 2, ids, &n, &trunc, err), SM_OK);
    assert_int_equal(n, 2);
    assert_int_equal(trunc, 0);

    assert_int_equal(tokenizer_encode(lower_tok, "a", 1, 1, ids, &n, &trunc, err), SM_ERR_INVALID);
    assert_int_equal(tokenizer_encode(lower_tok, "a", 1, 0, ids, &n, &trunc, err), SM_ERR_INVALID);
    assert_int_equal(tokenizer_encode(lower_tok, "a", 1, 16, NULL, &n, &trunc, err), SM_ERR_INVALID);

    /* A short cap gives a prefix of the full list and the full count. */
    const char *s = "The hotel was clean, 房间很干净！unbelievable";
    int nall;
    int *all = tokenize_all(lower_tok, s, strlen(s), &nall);
    for (int cap = 0; cap <= nall + 1; cap++) {
        int part[64], total = -1;
        memset(part, 0xff, sizeof part);
        assert_int_equal(tokenizer_tokenize(lower_tok, s, strlen(s), part, cap, &total, err), SM_OK);
        assert_int_equal(total, nall);
        for (int i = 0; i < cap && i < nall; i++)
            assert_int_equal(part[i], all[i]);
        if (cap < 64)
            assert_int_equal(part[cap], -1); /* nothing past cap */
        int enc[64];
        if (cap + 2 <= 64) {
            assert_int_equal(tokenizer_encode(lower_tok, s, strlen(s), cap + 2, enc, &n, &trunc, err), SM_OK);
            assert_int_equal(trunc, nall > cap);
            assert_int_equal(n, (nall < cap ? nall : cap) + 2);
            assert_int_equal(enc[0], cls);
            assert_int_equal(enc[n - 1], sep);
            for (int i = 0; i < n - 2; i++)
                assert_int_equal(enc[i + 1], all[i]);
        }
    }
    free(all);
}

static void test_null_and_empty(void **state)
{
    char err[SM_ERR_MAX] = "";
    int ids[4], n = -1, trunc = -1;
    (void)state;

    assert_int_equal(tokenizer_tokenize(lower_tok, NULL, 0, ids, 4, &n, err), SM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tokenizer_tokenize(lower_tok, "", 0, NULL, 0, &n, err), SM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tokenizer_tokenize(lower_tok, "abc", 0, ids, 4, &n, err), SM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tokenizer_tokenize(lower_tok, " \t\r\n\xe3\x80\x80", 7, ids, 4, &n, err), SM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tokenizer_tokenize(lower_tok, "a", 1, ids, 4, NULL, err), SM_OK);

    assert_int_equal(tokenizer_tokenize(lower_tok, NULL, 3, ids, 4, &n, err), SM_ERR_INVALID);
    assert_int_equal(tokenizer_tokenize(lower_tok, "a", 1, NULL, 4, &n, err), SM_ERR_INVALID);
    assert_int_equal(tokenizer_tokenize(lower_tok, "a", 1, ids, -1, &n, err), SM_ERR_INVALID);
    assert_int_equal(tokenizer_tokenize(NULL, "a", 1, ids, 4, &n, err), SM_ERR_INVALID);

    assert_int_equal(tokenizer_encode(lower_tok, NULL, 0, 4, ids, &n, &trunc, err), SM_OK);
    assert_int_equal(n, 2);
    assert_int_equal(trunc, 0);
    assert_int_equal(ids[0], tokenizer_cls_id(lower_tok));
    assert_int_equal(ids[1], tokenizer_sep_id(lower_tok));

    /* The length, not a NUL, ends the text. */
    assert_int_equal(tokenizer_tokenize(lower_tok, "a\0b", 3, ids, 4, &n, err), SM_OK);
    assert_int_equal(n, 2); /* a ##b: the NUL is dropped, joining the word */
    assert_int_equal(ids[0], tokenizer_lookup(lower_tok, "a", 1));
    assert_int_equal(ids[1], tokenizer_lookup(lower_tok, "##b", 3));

    tokenizer_free(NULL);
    assert_int_equal(tokenizer_vocab_size(NULL), 0);
    assert_null(tokenizer_token(NULL, 0));
    assert_int_equal(tokenizer_lookup(NULL, "a", 1), -1);
}

static void test_megabyte(void **state)
{
    char err[SM_ERR_MAX] = "";
    const size_t size = 1 << 20;
    char *s = malloc(size);
    int n, trunc, ids[512];
    (void)state;
    assert_non_null(s);

    /* Mixed reviews, repeated. */
    const char *piece = "这家酒店很干净，The room was CLEAN! café 😀 ";
    size_t pl = strlen(piece), len = 0;
    while (len + pl <= size) {
        memcpy(s + len, piece, pl);
        len += pl;
    }
    int one, reps = (int)(len / pl);
    int *p = tokenize_all(lower_tok, piece, pl, &one);
    free(p);
    int *all = tokenize_all(lower_tok, s, len, &n);
    assert_int_equal(n, one * reps);
    free(all);
    assert_int_equal(tokenizer_encode(lower_tok, s, len, 512, ids, &n, &trunc, err), SM_OK);
    assert_int_equal(n, 512);
    assert_int_equal(trunc, 1);

    /* One word of a million letters: [UNK]; of a million accented letters
     * (the non-ASCII path, heap buffers): [UNK]. */
    memset(s, 'a', size);
    all = tokenize_all(lower_tok, s, size, &n);
    assert_int_equal(n, 1);
    assert_int_equal(all[0], tokenizer_unk_id(lower_tok));
    free(all);
    for (size_t i = 0; i + 1 < size; i += 2) {
        s[i] = '\xc3';
        s[i + 1] = '\x89'; /* É */
    }
    for (int k = 0; k < 2; k++) {
        all = tokenize_all(k ? cased_tok : lower_tok, s, size, &n);
        assert_int_equal(n, 1);
        assert_int_equal(all[0], tokenizer_unk_id(lower_tok));
        free(all);
    }
    /* A million combining marks after one letter (NFC on a long word). */
    s[0] = 'e';
    for (size_t i = 1; i + 1 < size; i += 2) {
        s[i] = '\xcc';
        s[i + 1] = '\x81';
    }
    all = tokenize_all(lower_tok, s, size - 1, &n);
    assert_int_equal(n, 1);
    assert_int_equal(all[0], tokenizer_lookup(lower_tok, "e", 1));
    free(all);
    all = tokenize_all(cased_tok, s, size - 1, &n);
    assert_int_equal(n, 1);
    assert_int_equal(all[0], tokenizer_unk_id(cased_tok));
    free(all);
    /* A million bytes of punctuation: one token each. */
    memset(s, '!', size);
    all = tokenize_all(lower_tok, s, size, &n);
    assert_int_equal(n, (int)size);
    free(all);
    free(s);
}

static void test_every_byte(void **state)
{
    char err[SM_ERR_MAX] = "";
    (void)state;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        for (int k = 0; k < 2; k++) {
            const tokenizer *tok = k ? cased_tok : lower_tok;
            int ids[4] = {-1, -1, -1, -1}, n = -1;
            assert_int_equal(tokenizer_tokenize(tok, &c, 1, ids, 4, &n, err), SM_OK);
            if (b >= 0x80 || b <= 0x20 || b == 0x7f) {
                assert_int_equal(n, 0); /* invalid, control or space */
            } else {
                assert_int_equal(n, 1);
                char lc = (char)(k == 0 && b >= 'A' && b <= 'Z' ? b + 32 : b);
                int want = tokenizer_lookup(tok, &lc, 1);
                if (want < 0)
                    want = tokenizer_unk_id(tok); /* "Q" is left out */
                assert_int_equal(ids[0], want);
            }
        }
    }
}

static uint64_t rng_state;
static uint32_t rnd(void)
{
    return (uint32_t)(rng_next(&rng_state) >> 16);
}

static void test_byte_soup(void **state)
{
    char err[SM_ERR_MAX] = "";
    unsigned char buf[96];
    (void)state;
    /* Random bytes, and random bytes biased towards UTF-8 lead and
     * continuation bytes, '[' and specials: never a crash, and a stable
     * count. */
    static const char *frag[] = {"[CLS]", "[SEP]", "[", "]", "\xe4\xb8", "\xad",
                                 "\xf0\x9f\x98", "\x80", "\xcc\x81", "\xce\xa3",
                                 "\xc4\xb0", "a", " ", "\xef\xbc\x8c"};
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = rnd() % sizeof buf;
        if (iter & 1) {
            for (size_t i = 0; i < len; i++)
                buf[i] = (unsigned char)rnd();
        } else {
            size_t i = 0;
            while (i < len) {
                const char *f = frag[rnd() % (sizeof frag / sizeof frag[0])];
                size_t fl = strlen(f);
                if (i + fl > len)
                    break;
                memcpy(buf + i, f, fl);
                i += fl;
            }
            len = i;
        }
        for (int k = 0; k < 2; k++) {
            const tokenizer *tok = k ? cased_tok : lower_tok;
            int ids[8], n1 = -1, n2 = -1, enc[8], ne = -1, tr = -1;
            assert_int_equal(tokenizer_tokenize(tok, (char *)buf, len, NULL, 0, &n1, err), SM_OK);
            assert_int_equal(tokenizer_tokenize(tok, (char *)buf, len, ids, 8, &n2, err), SM_OK);
            assert_int_equal(n1, n2);
            assert_true(n1 <= (int)len);
            for (int i = 0; i < n2 && i < 8; i++)
                assert_true(ids[i] >= 0 && ids[i] < tokenizer_vocab_size(tok));
            assert_int_equal(tokenizer_encode(tok, (char *)buf, len, 8, enc, &ne, &tr, err), SM_OK);
            assert_int_equal(tr, n1 > 6);
            for (int i = 1; i < ne - 1; i++)
                assert_int_equal(enc[i], ids[i - 1]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_golden_unicode),
        cmocka_unit_test(test_special_ids),
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_vocab_errors),
        cmocka_unit_test(test_vocab_lines),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_null_and_empty),
        cmocka_unit_test(test_megabyte),
        cmocka_unit_test(test_every_byte),
        cmocka_unit_test(test_byte_soup),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

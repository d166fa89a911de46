/* test_tokenizer_json.c: model/tokenize/tokenizer_json.c against the Rust tokenizers
 * library (transformers' XLMRobertaTokenizerFast and BertTokenizerFast).
 *
 * The golden tests run every string of
 * tests/fixtures/tokenizer_json/{unigram,wordpiece}_golden.tsv, written by
 * tests/fixtures/gen_tokenizer_json_golden.py, through the tokenizer.json
 * next to it, without special tokens and through tokenizer_encode with
 * max_length 24, and require the exact ids. The error tests load damaged
 * files, each a named case with the error it must give.
 *
 * Run from the repository root: ./build/tests/test_tokenizer_json
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
#include "tokenize/tokenizer.h"

#include "support/golden_ids_util.h"

#define DIR "tests/fixtures/tokenizer_json/"
#define MAX_LENGTH 24
#define MAX_IDS 8192

static int same(int index, const char *what, const char *hex, const int *want,
                int nw, const int *got, int ng)
{
    if (nw == ng && memcmp(want, got, (size_t)nw * sizeof *want) == 0)
        return 1;
    fprintf(stderr, "golden string %d (%s) differs, input hex %.200s\n", index,
            what, hex);
    print_ids("expected", want, nw);
    print_ids("got     ", got, ng);
    return 0;
}

/* Runs one golden file; returns the number of mismatching strings and sets
 * *count to the number of strings. */
static int run_golden(const char *json_path, const char *tsv_path, int flags,
                      int *count)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    size_t len;
    char *tsv = read_file(tsv_path, &len), *line, *save = NULL;
    static int want[MAX_IDS], got[MAX_IDS], wenc[MAX_LENGTH + 1], genc[MAX_LENGTH];
    int bad = 0;

    assert_non_null(tsv);
    if (tokenizer_load_json_file_flags(json_path, flags, &tok, err) != SM_OK)
        fail_msg("cannot load %s: %s", json_path, err);
    *count = 0;
    for (line = strtok_r(tsv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f[5];
        int nf = 0;
        if (line[0] == '#')
            continue;
        for (char *p = line; nf < 5; nf++) {
            f[nf] = p;
            p = strchr(p, '\t');
            if (!p) {
                nf++;
                break;
            }
            *p++ = '\0';
        }
        assert_int_equal(nf, 5);
        int index = atoi(f[0]);
        size_t hl = strcmp(f[1], "-") ? strlen(f[1]) : 0;
        char *text = malloc(hl / 2 + 1);
        assert_non_null(text);
        for (size_t i = 0; i < hl / 2; i++)
            text[i] = (char)(hexval(f[1][2 * i]) * 16 + hexval(f[1][2 * i + 1]));
        int nw = parse_ids(f[2], want, MAX_IDS), nwe = parse_ids(f[3], wenc, MAX_LENGTH + 1);
        assert_true(nw >= 0 && nwe >= 0);
        int ng = -1, nge = -1, trunc = -1;
        assert_int_equal(tokenizer_tokenize(tok, text, hl / 2, got, MAX_IDS, &ng, err), SM_OK);
        assert_int_equal(tokenizer_encode(tok, text, hl / 2, MAX_LENGTH, genc, &nge,
                                          &trunc, err), SM_OK);
        int ok = same(index, "ids", f[1], want, nw, got, ng) &
                 same(index, "encode", f[1], wenc, nwe, genc, nge);
        if (trunc != atoi(f[4])) {
            fprintf(stderr, "golden string %d: truncated %d, expected %s\n", index,
                    trunc, f[4]);
            ok = 0;
        }
        bad += !ok;
        (*count)++;
        free(text);
    }
    free(tsv);
    tokenizer_free(tok);
    return bad;
}

static void test_golden_unigram(void **state)
{
    int n = 0, bad;
    (void)state;
    bad = run_golden(DIR "unigram/tokenizer.json", DIR "unigram_golden.tsv", 0, &n);
    fprintf(stderr, "unigram golden: %d strings, %d mismatches\n", n, bad);
    assert_true(n >= 1000);
    assert_int_equal(bad, 0);
}

static void test_golden_wordpiece(void **state)
{
    int n = 0, bad;
    (void)state;
    bad = run_golden(DIR "wordpiece/tokenizer.json", DIR "wordpiece_golden.tsv", 0, &n);
    fprintf(stderr, "wordpiece golden: %d strings, %d mismatches\n", n, bad);
    assert_true(n >= 1000);
    assert_int_equal(bad, 0);
}

/* The VARIANTS of the generator: the same strings through edited files
 * (Replace, Strip, Lowercase, Metaspace first / never / no split,
 * RobertaProcessing, an lstrip added token; byte_fallback and NFKC; NFC and
 * a cased BertNormalizer, BertProcessing), ids from the tokenizers library,
 * which parses the scores itself: TOKENIZER_JSON_RUST_SCORES. */
static void test_golden_variants(void **state)
{
    static const char *const names[] = {"unigram_steps", "unigram_bytes",
                                        "wordpiece_cased"};
    int failed = 0;
    (void)state;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char json[256], tsv[256];
        int n = 0, bad;
        snprintf(json, sizeof json, DIR "%s/tokenizer.json", names[i]);
        snprintf(tsv, sizeof tsv, DIR "%s_golden.tsv", names[i]);
        bad = run_golden(json, tsv, TOKENIZER_JSON_RUST_SCORES, &n);
        fprintf(stderr, "%s golden: %d strings, %d mismatches\n", names[i], n, bad);
        failed += bad != 0 || n < 1000;
    }
    assert_int_equal(failed, 0);
}

/* The Unigram golden strings where the two ways of reading the scores
 * disagree (exact Viterbi ties): the default follows transformers 5, the
 * flag the tokenizers library; unigram_steps_golden.tsv has the library's
 * ids for the same strings. */
static void test_rust_scores(void **state)
{
    int n = 0;
    (void)state;
    assert_int_equal(run_golden(DIR "unigram_steps/tokenizer.json",
                                DIR "unigram_steps_golden.tsv",
                                TOKENIZER_JSON_RUST_SCORES, &n), 0);
    assert_true(run_golden(DIR "unigram_steps/tokenizer.json",
                           DIR "unigram_steps_golden.tsv", 0, &n) > 0);
    assert_true(run_golden(DIR "unigram/tokenizer.json", DIR "unigram_golden.tsv",
                           TOKENIZER_JSON_RUST_SCORES, &n) > 0);
}

static void test_special_ids(void **state)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *u = NULL, *w = NULL;
    (void)state;
    assert_int_equal(tokenizer_load_json_file(DIR "unigram/tokenizer.json", &u, err), SM_OK);
    assert_int_equal(tokenizer_load_json_file(DIR "wordpiece/tokenizer.json", &w, err), SM_OK);
    assert_int_equal(tokenizer_cls_id(u), 0);
    assert_int_equal(tokenizer_pad_id(u), 1);
    assert_int_equal(tokenizer_sep_id(u), 2);
    assert_int_equal(tokenizer_unk_id(u), 3);
    assert_int_equal(tokenizer_mask_id(u), tokenizer_vocab_size(u) - 1);
    assert_string_equal(tokenizer_token(u, 0), "<s>");
    assert_int_equal(tokenizer_cls_id(w), 2);
    assert_int_equal(tokenizer_sep_id(w), 3);
    assert_int_equal(tokenizer_pad_id(w), 0);
    assert_int_equal(tokenizer_unk_id(w), 1);
    assert_int_equal(tokenizer_vocab_size(w), 3130);
    /* max_length too small for the template */
    int ids[4], n;
    assert_int_equal(tokenizer_encode(u, "a", 1, 1, ids, &n, NULL, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "max_length is 1"));
    tokenizer_free(u);
    tokenizer_free(w);
}

/* ------------------------------------------------------------ bad files */

typedef struct {
    const char *name;
    const char *json;
    int code;
    const char *message; /* a part of the error text */
} bad_case;

#define WP_OK "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\"," \
              "\"vocab\":{\"[UNK]\":0,\"a\":1}}"

static const bad_case bad_cases[] = {
    {"not JSON", "{\"model\": ", SM_ERR_FORMAT, "not valid JSON"},
    {"empty file", "", SM_ERR_FORMAT, "not valid JSON"},
    {"top level array", "[]", SM_ERR_FORMAT, "top level must be an object"},
    {"missing model", "{\"normalizer\":null}", SM_ERR_FORMAT, "no \"model\""},
    {"model without type", "{\"model\":{\"vocab\":[]}}", SM_ERR_FORMAT,
     "model has no \"type\""},
    {"unknown model type", "{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}",
     SM_ERR_UNSUPPORTED, "model 'BPE' is not supported; supported: WordPiece, Unigram"},
    {"empty Unigram vocab", "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[]}}",
     SM_ERR_FORMAT, "Unigram vocab is empty"},
    {"empty WordPiece vocab", "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
     "\"vocab\":{}}}", SM_ERR_FORMAT, "WordPiece vocab is empty"},
    {"duplicate pieces", "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":"
     "[[\"<unk>\",0],[\"a\",-1],[\"a\",-2]]}}", SM_ERR_FORMAT,
     "token 2 is a duplicate of token 1"},
    {"Unigram entry not a pair", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\"]]}}",
     SM_ERR_FORMAT, "entry 0 is not [piece, score]"},
    {"huge unk id", "{\"model\":{\"type\":\"Unigram\",\"unk_id\":99999999999,"
     "\"vocab\":[[\"a\",0]]}}", SM_ERR_FORMAT, "'unk_id' must be an id in [0, 1)"},
    {"negative unk id", "{\"model\":{\"type\":\"Unigram\",\"unk_id\":-1,"
     "\"vocab\":[[\"a\",0]]}}", SM_ERR_FORMAT, "'unk_id' must be an id"},
    {"negative WordPiece id", "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"a\","
     "\"vocab\":{\"a\":-3}}}", SM_ERR_FORMAT, "WordPiece vocab id must be an id in [0, 1)"},
    {"huge WordPiece id", "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"a\","
     "\"vocab\":{\"a\":0,\"b\":4000000000}}}", SM_ERR_FORMAT, "must be an id in [0, 2)"},
    {"WordPiece id twice", "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"a\","
     "\"vocab\":{\"a\":0,\"b\":0}}}", SM_ERR_FORMAT, "id 0 is given to two tokens"},
    {"WordPiece unk missing", "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
     "\"vocab\":{\"a\":0}}}", SM_ERR_FORMAT, "unk_token '[UNK]' is not in the vocab"},
    {"unsupported normalizer", "{\"normalizer\":{\"type\":\"Prepend\",\"prepend\":\"x\"},"
     WP_OK "}", SM_ERR_UNSUPPORTED, "normalizer 'Prepend' is not supported"},
    {"unsupported normalizer in a Sequence", "{\"normalizer\":{\"type\":\"Sequence\","
     "\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Nmt\"}]}," WP_OK "}",
     SM_ERR_UNSUPPORTED, "normalizer 'Nmt' is not supported"},
    {"unsupported pre-tokenizer", "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"}," WP_OK "}",
     SM_ERR_UNSUPPORTED, "pre_tokenizer 'ByteLevel' is not supported"},
    {"unsupported post-processor", "{\"post_processor\":{\"type\":\"ByteLevel\"},"
     WP_OK "}", SM_ERR_UNSUPPORTED, "post_processor 'ByteLevel' is not supported"},
    {"unsupported Replace regex", "{\"normalizer\":{\"type\":\"Replace\",\"pattern\":"
     "{\"Regex\":\"a|b\"},\"content\":\"\"}," WP_OK "}", SM_ERR_UNSUPPORTED,
     "Replace regex 'a|b' is not supported"},
    {"bad charsmap base64", "{\"normalizer\":{\"type\":\"Precompiled\","
     "\"precompiled_charsmap\":\"AB$=\"}," WP_OK "}", SM_ERR_FORMAT,
     "charsmap is not base64"},
    {"charsmap base64 length", "{\"normalizer\":{\"type\":\"Precompiled\","
     "\"precompiled_charsmap\":\"ABC\"}," WP_OK "}", SM_ERR_FORMAT,
     "not a multiple of 4"},
    /* trie size 16 (EAAAAA== is 10 00 00 00), then only 4 bytes */
    {"truncated trie", "{\"normalizer\":{\"type\":\"Precompiled\","
     "\"precompiled_charsmap\":\"EAAAAAAAAAA=\"}," WP_OK "}", SM_ERR_FORMAT,
     "does not fit its 8-byte blob"},
    {"charsmap without size", "{\"normalizer\":{\"type\":\"Precompiled\","
     "\"precompiled_charsmap\":\"AA==\"}," WP_OK "}", SM_ERR_FORMAT, "has no trie size"},
    {"unknown top-level key", "{\"tokenizer\":1," WP_OK "}", SM_ERR_UNSUPPORTED,
     "top-level key 'tokenizer' is not supported"},
    {"normalized added token", "{\"added_tokens\":[{\"id\":1,\"content\":\"a\","
     "\"normalized\":true}]," WP_OK "}", SM_ERR_UNSUPPORTED,
     "added token 'a' with normalized=true is not supported"},
    {"added token id out of range", "{\"added_tokens\":[{\"id\":7,\"content\":\"a\"}],"
     WP_OK "}", SM_ERR_FORMAT, "added token's 'id' must be an id in [0, 2)"},
    {"template without $A", "{\"post_processor\":{\"type\":\"TemplateProcessing\","
     "\"single\":[],\"special_tokens\":{}}," WP_OK "}", SM_ERR_FORMAT, "has no $A"},
    {"template special without ids", "{\"post_processor\":{\"type\":"
     "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[CLS]\"}},"
     "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{}}," WP_OK "}", SM_ERR_FORMAT,
     "special token '[CLS]' has no ids"},
    {"Metaspace bad scheme", "{\"pre_tokenizer\":{\"type\":\"Metaspace\","
     "\"replacement\":\"_\",\"prepend_scheme\":\"sometimes\"}," WP_OK "}", SM_ERR_FORMAT,
     "prepend_scheme 'sometimes'"},
};

static void test_bad_files(void **state)
{
    (void)state;
    int failed = 0;
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        const bad_case *c = &bad_cases[i];
        char err[SM_ERR_MAX] = "";
        tokenizer *tok = (tokenizer *)1;
        int rc = tokenizer_load_json_buffer(c->json, strlen(c->json), &tok, err);
        if (rc != c->code || tok != NULL || !strstr(err, c->message)) {
            fprintf(stderr, "bad case '%s': rc %d (want %d), error \"%s\" (want "
                    "\"%s\")\n", c->name, rc, c->code, err, c->message);
            failed++;
        }
    }
    assert_int_equal(failed, 0);
}

static void test_bad_paths(void **state)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    (void)state;
    assert_int_equal(tokenizer_load_json_file("tests/fixtures/no/such.json", &tok, err),
                     SM_ERR_IO);
    assert_null(tok);
    assert_int_equal(tokenizer_load_json_file("tests/fixtures", &tok, err), SM_ERR_IO);
    assert_non_null(strstr(err, "directory"));
    assert_int_equal(tokenizer_load_json_file("/dev/zero", &tok, err), SM_ERR_IO);
}

/* A minimal file: WordPiece without normalizer or template. */
static void test_minimal_wordpiece(void **state)
{
    const char *j = "{" WP_OK "}";
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    int ids[8], n = -1, tr = -1;
    (void)state;
    assert_int_equal(tokenizer_load_json_buffer(j, strlen(j), &tok, err), SM_OK);
    assert_int_equal(tokenizer_encode(tok, "a b", 3, 8, ids, &n, &tr, err), SM_OK);
    assert_int_equal(n, 1); /* no pre-tokenizer: "a b" is one word, [UNK] */
    assert_int_equal(ids[0], 0);
    assert_int_equal(tr, 0);
    assert_int_equal(tokenizer_cls_id(tok), -1);
    tokenizer_free(tok);
}

/* A 1 MB word with no length limit, and 1 MB of mixed text through the
 * Unigram fixture: linear time, every id counted. */
static void test_long_inputs(void **state)
{
    const char *j = "{\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"},"
                    "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
                    "\"max_input_chars_per_word\":100000000,"
                    "\"vocab\":{\"[UNK]\":0,\"a\":1,\"##a\":2}}}";
    const size_t n = (size_t)1 << 20;
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    char *text = malloc(n);
    int total = -1, *ids = malloc(64 * sizeof *ids);
    (void)state;
    assert_non_null(text);
    assert_non_null(ids);
    memset(text, 'a', n);
    assert_int_equal(tokenizer_load_json_buffer(j, strlen(j), &tok, err), SM_OK);
    assert_int_equal(tokenizer_tokenize(tok, text, n, ids, 64, &total, err), SM_OK);
    assert_int_equal(total, (int)n);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    tokenizer_free(tok);

    static const char *const parts[] = {"这家酒店很干净，", "the room was clean ",
                                        "👍🏽 ", "ＡＢＣ　", "\t\t"};
    size_t at = 0;
    for (int k = 0; at + 32 < n; k++) {
        size_t l = strlen(parts[k % 5]);
        memcpy(text + at, parts[k % 5], l);
        at += l;
    }
    assert_int_equal(tokenizer_load_json_file(DIR "unigram/tokenizer.json", &tok, err), SM_OK);
    assert_int_equal(tokenizer_tokenize(tok, text, at, ids, 64, &total, err), SM_OK);
    assert_true(total > 100000);
    int enc[32], ne = 0, tr = 0;
    assert_int_equal(tokenizer_encode(tok, text, at, 32, enc, &ne, &tr, err), SM_OK);
    assert_int_equal(ne, 32);
    assert_int_equal(tr, 1);
    assert_int_equal(enc[0], 0);
    assert_int_equal(enc[31], 2);
    tokenizer_free(tok);
    free(text);
    free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_unigram),
        cmocka_unit_test(test_golden_wordpiece),
        cmocka_unit_test(test_golden_variants),
        cmocka_unit_test(test_rust_scores),
        cmocka_unit_test(test_special_ids),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_bad_paths),
        cmocka_unit_test(test_minimal_wordpiece),
        cmocka_unit_test(test_long_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_tokenizer_offsets.c: tokenizer_encode_offsets against transformers'
 * fast tokenizers' offset_mapping.
 *
 * The golden tests run every row of tests/fixtures/offsets/NAME.tsv,
 * written by tests/fixtures/gen_offsets_golden.py (BertTokenizerFast over
 * vocab.txt and vocab_unicode.txt, lower-cased and cased; the tokenizer.json
 * fixtures through PreTrainedTokenizerFast), and require the exact ids,
 * truncation flag and offsets, and the ids and flag of tokenizer_encode.
 * Invalid UTF-8, which has no Python string, is checked against offsets
 * computed by hand from the rule in tokenizer.h, and each span against
 * SQLite's own substr() of the text. Every allocation failing in turn
 * gives SM_ERR_NOMEM or the right answer.
 *
 * Run from the repository root: ./build/tests/test_tokenizer_offsets
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "tokenize/tokenizer.h"
#include "tokenize/tokenizer_json.h"
#include "tokenize/vocab.h"

#include "support/golden_ids_util.h"

/* Allocation faults (test_out_of_memory): the allocation numbered
 * g_fail_at after g_count starts counting fails; -1: none. */
static long g_count = -1, g_fail_at = -1;
static int should_fail(void)
{
    if (g_count < 0)
        return 0;
    return g_count++ == g_fail_at;
}
#if defined(__SANITIZE_ADDRESS__)
#define NO_INTERPOSE "AddressSanitizer replaces malloc"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_INTERPOSE "AddressSanitizer replaces malloc"
#endif
#endif
#ifndef NO_INTERPOSE
#include "support/alloc_interposer.h"
#endif

#define FIX "tests/fixtures/"
#define MAX_LEN 512

typedef struct {
    const char *name;  /* offsets/NAME.tsv */
    const char *path;  /* vocab.txt or tokenizer.json */
    int json, lower;
} golden_case;

static const golden_case goldens[] = {
    {"vocab_lower", FIX "vocab.txt", 0, 1},
    {"vocab_cased", FIX "vocab.txt", 0, 0},
    {"vocab_unicode_lower", FIX "vocab_unicode.txt", 0, 1},
    {"vocab_unicode_cased", FIX "vocab_unicode.txt", 0, 0},
    {"json_unigram", FIX "tokenizer_json/unigram/tokenizer.json", 1, 0},
    {"json_unigram_bytes", FIX "tokenizer_json/unigram_bytes/tokenizer.json", 1, 0},
    {"json_unigram_steps", FIX "tokenizer_json/unigram_steps/tokenizer.json", 1, 0},
    {"json_wordpiece", FIX "tokenizer_json/wordpiece/tokenizer.json", 1, 0},
    {"json_wordpiece_cased", FIX "tokenizer_json/wordpiece_cased/tokenizer.json", 1, 0},
    {"json_xlmr_tiny", FIX "models/xlmr_tiny/tokenizer.json", 1, 0},
};

static tokenizer *load(const char *path, int json, int lower)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    int rc = json ? tokenizer_load_json_file_flags(path, TOKENIZER_JSON_RUST_SCORES, &tok, err)
                  : tokenizer_load_file(path, lower, &tok, err);
    if (rc != SM_OK)
        fail_msg("cannot load %s: %s", path, err);
    return tok;
}

/* "s,e s,e ..." into starts/ends; returns the count, -1 on a bad field. */
static int parse_offsets(const char *f, int *starts, int *ends, int cap)
{
    int n = 0;
    if (strcmp(f, "-") == 0)
        return 0;
    while (*f) {
        char *e1, *e2;
        long a = strtol(f, &e1, 10);
        if (e1 == f || *e1 != ',' || n >= cap)
            return -1;
        long b = strtol(e1 + 1, &e2, 10);
        if (e2 == e1 + 1)
            return -1;
        starts[n] = (int)a;
        ends[n++] = (int)b;
        f = e2;
        while (*f == ' ')
            f++;
    }
    return n;
}

static size_t unhex(const char *hex, char *out)
{
    size_t n = 0;
    if (strcmp(hex, "-") == 0)
        return 0;
    for (const char *p = hex; p[0] && p[1]; p += 2)
        out[n++] = (char)(hexval(p[0]) * 16 + hexval(p[1]));
    return n;
}

/* One golden file; returns the mismatching rows, *rows the rows. */
static int run_golden(const golden_case *g, int *rows)
{
    char path[256], err[SM_ERR_MAX] = "";
    size_t len;
    snprintf(path, sizeof path, FIX "offsets/%s.tsv", g->name);
    char *tsv = read_file(path, &len), *line, *save = NULL;
    static int wid[MAX_LEN + 1], ws[MAX_LEN + 1], we[MAX_LEN + 1];
    static int gid[MAX_LEN], gs[MAX_LEN], ge[MAX_LEN], pid[MAX_LEN];
    static char text[1 << 20];
    int bad = 0;
    tokenizer *tok = load(g->path, g->json, g->lower);

    assert_non_null(tsv);
    *rows = 0;
    for (line = strtok_r(tsv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f[6], *fs = NULL;
        int k = 0;
        if (line[0] == '#')
            continue;
        for (char *t = strtok_r(line, "\t", &fs); t && k < 6; t = strtok_r(NULL, "\t", &fs))
            f[k++] = t;
        assert_int_equal(k, 6);
        size_t tl = unhex(f[1], text);
        int ml = atoi(f[2]), wtr = atoi(f[3]);
        int nw = parse_ids(f[4], wid, MAX_LEN + 1);
        int no = parse_offsets(f[5], ws, we, MAX_LEN + 1);
        assert_true(nw >= 0 && nw == no && ml <= MAX_LEN);
        int n = -1, tr = -1, pn = -1, ptr = -1;
        int rc = tokenizer_encode_offsets(tok, text, tl, ml, gid, gs, ge, &n, &tr, NULL,
                                          NULL, err);
        int prc = tokenizer_encode(tok, text, tl, ml, pid, &pn, &ptr, err);
        (*rows)++;
        int ok = rc == SM_OK && prc == SM_OK && n == nw && tr == wtr && pn == n && ptr == tr &&
                 !memcmp(gid, wid, (size_t)n * sizeof *gid) &&
                 !memcmp(pid, wid, (size_t)n * sizeof *pid) &&
                 !memcmp(gs, ws, (size_t)n * sizeof *gs) &&
                 !memcmp(ge, we, (size_t)n * sizeof *ge);
        if (!ok) {
            if (bad++ < 5) {
                fprintf(stderr, "%s row %s max_length %d differs (rc %d, truncated %d/%d), "
                        "input hex %.120s\n", g->name, f[0], ml, rc, tr, wtr, f[1]);
                print_ids("ids expected", wid, nw);
                print_ids("ids got     ", gid, n);
                print_ids("starts expected", ws, nw);
                print_ids("starts got     ", gs, n);
                print_ids("ends expected", we, nw);
                print_ids("ends got     ", ge, n);
            }
        }
    }
    free(tsv);
    tokenizer_free(tok);
    return bad;
}

static void test_golden(void **state)
{
    int failed = 0;
    (void)state;
    for (size_t i = 0; i < sizeof goldens / sizeof *goldens; i++) {
        int rows = 0, bad = run_golden(&goldens[i], &rows);
        fprintf(stderr, "%s: %d rows, %d mismatches\n", goldens[i].name, rows, bad);
        failed += bad != 0 || rows < 100;
    }
    assert_int_equal(failed, 0);
}

/* The tokenizer.json goldens with the normalizers run over pieces of 1
 * and 7 bytes and segments cut at every place the pipeline allows
 * (tj_set_chunk): the same ids and offsets. */
static void test_golden_chunks(void **state)
{
    static const size_t chunks[] = {1, 7};
    static int wid[MAX_LEN + 1], ws[MAX_LEN + 1], we[MAX_LEN + 1];
    static int gid[MAX_LEN], gs[MAX_LEN], ge[MAX_LEN];
    static char text[1 << 20];
    int failed = 0;
    (void)state;
    for (size_t i = 0; i < sizeof goldens / sizeof *goldens; i++) {
        const golden_case *g = &goldens[i];
        char path[256], err[SM_ERR_MAX] = "", *line, *save = NULL;
        size_t len, jl;
        if (!g->json)
            continue;
        char *json = read_file(g->path, &jl);
        vocab *v = NULL;
        tj_pipeline *tj = NULL;
        tj_special sp;
        assert_non_null(json);
        assert_int_equal(tj_load(json, jl, TJ_RUST_SCORES, &v, &tj, &sp, err), SM_OK);
        free(json);
        snprintf(path, sizeof path, FIX "offsets/%s.tsv", g->name);
        char *tsv = read_file(path, &len);
        assert_non_null(tsv);
        int rows = 0, bad = 0;
        for (line = strtok_r(tsv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            char *f[6], *fs = NULL;
            int k = 0;
            if (line[0] == '#' || rows++ % 3) /* every third row */
                continue;
            for (char *t = strtok_r(line, "\t", &fs); t && k < 6; t = strtok_r(NULL, "\t", &fs))
                f[k++] = t;
            size_t tl = unhex(f[1], text);
            int ml = atoi(f[2]);
            int nw = parse_ids(f[4], wid, MAX_LEN + 1);
            parse_offsets(f[5], ws, we, MAX_LEN + 1);
            for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
                int n = -1, tr = -1;
                tj_set_chunk(tj, chunks[c]);
                int rc = tj_encode_offsets(tj, v, text, tl, ml, gid, gs, ge, &n, &tr, NULL,
                                           NULL, err);
                if (rc != SM_OK || n != nw || memcmp(gid, wid, (size_t)n * sizeof *gid) ||
                    memcmp(gs, ws, (size_t)n * sizeof *gs) ||
                    memcmp(ge, we, (size_t)n * sizeof *ge)) {
                    if (bad++ < 3)
                        fprintf(stderr, "%s row %s, chunk %zu: differs\n", g->name, f[0],
                                chunks[c]);
                }
            }
        }
        fprintf(stderr, "%s in pieces: %d mismatches\n", g->name, bad);
        failed += bad != 0;
        free(tsv);
        tj_free(tj);
        vocab_free(v);
    }
    assert_int_equal(failed, 0);
}

/* SQLite's substr(text, start + 1, end - start) of the text, as hex. */
static void sqlite_substr_hex(sqlite3 *db, const char *text, size_t len, int start, int end,
                              char *out, size_t cap)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT hex(substr(?1, ?2, ?3))", -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, text, (int)len, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, start + 1);
    sqlite3_bind_int(st, 3, end - start);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    snprintf(out, cap, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
}

typedef struct {
    const char *what;
    const char *text; /* bytes */
    int json;         /* 0: vocab.txt lower-cased; 1: tokenizer_json/unigram */
    int n;            /* tokens, framing included; -2: a word's, -1: see below */
    int spans[8][2];
    const char *pieces[8]; /* each span's text as SQLite's substr() gives it, hex */
} invalid_case;

/* Invalid UTF-8: a byte 0xC0..0xFF with the continuation bytes after it is
 * one character, every other byte one (SQLite's length() and substr()). */
static const invalid_case invalid[] = {
    {"a lone 0xFF between ideographs", "\xe5\xa5\xbd\xff\xe8\xaf\x84", 0, 4,
     {{0, 0}, {0, 1}, {2, 3}, {0, 0}}, {"", "E5A5BD", "E8AF84", ""}},
    {"two stray continuation bytes are two characters", "\x80\x80\xe5\xa5\xbd", 0, 3,
     {{0, 0}, {2, 3}, {0, 0}}, {"", "E5A5BD", ""}},
    {"a truncated sequence is one character", "\xe4\xb8\xe5\xa5\xbd", 0, 3,
     {{0, 0}, {1, 2}, {0, 0}}, {"", "E5A5BD", ""}},
    {"a continuation byte after a character joins it", "\xc3\xa9\xa9\xe5\xa5\xbd", 0, 4,
     {{0, 0}, {0, 1}, {1, 2}, {0, 0}}, {"", "C3A9A9", "E5A5BD", ""}},
    {"an overlong pair is one character", "\xe5\xa5\xbd\xc0\xaf\xe8\xaf\x84", 0, 4,
     {{0, 0}, {0, 1}, {2, 3}, {0, 0}}, {"", "E5A5BD", "E8AF84", ""}},
    {"a word joined across a dropped byte spans it", "hotel\xffhotel", 0, -2,
     {{0, 0}, {0, 11}, {0, 0}}, {"", "686F74656CFF686F74656C", ""}},
    {"Unigram: the U+FFFD pieces keep their character", "\xf0\x9f\x98\xe5\xa5\xbd"
     "\xf0\x9f\x98\x80", 1, -1, {{0}}, {NULL}},
};

static void test_invalid_utf8(void **state)
{
    char err[SM_ERR_MAX] = "", hex[256];
    sqlite3 *db = NULL;
    tokenizer *wp = load(FIX "vocab.txt", 0, 1);
    tokenizer *uni = load(FIX "tokenizer_json/unigram/tokenizer.json", 1, 0);
    (void)state;
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
        const invalid_case *c = &invalid[i];
        int ids[64], s[64], e[64], n = 0, tr = 0;
        size_t len = strlen(c->text);
        assert_int_equal(tokenizer_encode_offsets(c->json ? uni : wp, c->text, len, 64, ids, s,
                                                  e, &n, &tr, NULL, NULL, err), SM_OK);
        if (c->n == -2) {
            /* the word's tokens together span spans[1], all of it */
            assert_true(n >= 3);
            assert_int_equal(s[1], c->spans[1][0]);
            assert_int_equal(e[n - 2], c->spans[1][1]);
            sqlite_substr_hex(db, c->text, len, s[1], e[n - 2], hex, sizeof hex);
            assert_string_equal(hex, c->pieces[1]);
            continue;
        }
        if (c->n < 0) {
            /* every span is whole characters of the text: <s> ▁ ... </s>,
             * the emoji last and alone in the last character */
            assert_true(n >= 4);
            for (int k = 1; k < n - 1; k++)
                assert_true(s[k] >= 0 && s[k] < e[k] && e[k] <= 3);
            assert_int_equal(s[n - 2], 2);
            assert_int_equal(e[n - 2], 3);
            sqlite_substr_hex(db, c->text, len, s[n - 2], e[n - 2], hex, sizeof hex);
            assert_string_equal(hex, "F09F9880");
            continue;
        }
        if (n != c->n)
            fail_msg("%s: %d tokens, expected %d", c->what, n, c->n);
        for (int k = 0; k < n; k++) {
            if (s[k] != c->spans[k][0] || e[k] != c->spans[k][1])
                fail_msg("%s: token %d spans %d..%d, expected %d..%d", c->what, k, s[k], e[k],
                         c->spans[k][0], c->spans[k][1]);
            sqlite_substr_hex(db, c->text, len, s[k], e[k], hex, sizeof hex);
            if (strcmp(hex, c->pieces[k]))
                fail_msg("%s: token %d: substr gives %s, expected %s", c->what, k, hex,
                         c->pieces[k]);
        }
    }
    sqlite3_close(db);
    tokenizer_free(wp);
    tokenizer_free(uni);
}

/* NULL starts / ends: tokenizer_encode_stoppable; a stop that answers 1
 * interrupts a long text; framing gets 0, 0. */
static void test_api(void **state)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = load(FIX "vocab.txt", 0, 1);
    int ids[16], ids2[16], s[16], e[16], n = 0, n2 = 0, tr = 0, tr2 = 0;
    (void)state;
    assert_int_equal(tokenizer_encode_offsets(tok, "hello world", 11, 16, ids, NULL, NULL, &n,
                                              &tr, NULL, NULL, err), SM_OK);
    assert_int_equal(tokenizer_encode(tok, "hello world", 11, 16, ids2, &n2, &tr2, err), SM_OK);
    assert_int_equal(n, n2);
    assert_memory_equal(ids, ids2, (size_t)n * sizeof *ids);
    assert_int_equal(tokenizer_encode_offsets(tok, "", 0, 16, ids, s, e, &n, &tr, NULL, NULL,
                                              err), SM_OK);
    assert_int_equal(n, 2);
    assert_int_equal(s[0] | e[0] | s[1] | e[1], 0);
    assert_int_not_equal(tokenizer_encode_offsets(tok, "x", 1, 1, ids, s, e, &n, &tr, NULL,
                                                  NULL, err), SM_OK);

    size_t len = 1 << 20;
    char *big = malloc(len);
    assert_non_null(big);
    int one(void *u);
    memset(big, 1, len); /* control characters: no token, the whole text is read */
    assert_int_equal(tokenizer_encode_offsets(tok, big, len, 16, ids, s, e, &n, &tr, one, NULL,
                                              err), SM_ERR_INTERRUPTED);
    assert_string_equal(err, "interrupted");
    tokenizer_free(tok);
    tok = load(FIX "tokenizer_json/unigram/tokenizer.json", 1, 0);
    assert_int_equal(tokenizer_encode_offsets(tok, big, len, 16, ids, s, e, &n, &tr, one, NULL,
                                              err), SM_ERR_INTERRUPTED);
    for (size_t i = 0; i < len; i++)
        big[i] = i % 6 == 5 ? ' ' : 'a';
    /* a long text: the spans of the last tokens kept are where they are */
    assert_int_equal(tokenizer_encode_offsets(tok, big, len, 16, ids, s, e, &n, &tr, NULL,
                                              NULL, err), SM_OK);
    assert_int_equal(n, 16);
    assert_int_equal(tr, 1);
    assert_int_equal(s[0] | e[0] | s[15] | e[15], 0);
    assert_true(e[14] > 6 && e[14] < 6 * 16);
    free(big);
    tokenizer_free(tok);
}

/* Every allocation of tokenizer_encode_offsets failing in turn: SM_ERR_NOMEM
 * with a message, or the ids and offsets of the run without faults. */
static void test_out_of_memory(void **state)
{
    static const char *const paths[] = {FIX "vocab.txt", FIX "tokenizer_json/unigram/tokenizer.json",
                                        FIX "tokenizer_json/unigram_steps/tokenizer.json",
                                        FIX "tokenizer_json/wordpiece_cased/tokenizer.json"};
    char *text = malloc(64 * 1024);
    size_t len = 0;
    (void)state;
    assert_non_null(text);
    /* a long word that NFC and accent stripping work on, ideographs, a
     * charsmap drop at the start and a ligature */
    const char *parts[] = {"\x01", "Cafe\xcc\x81", "\xef\xac\x81ne ", "\xe5\xa5\xbd\xe8\xaf\x84 "};
    for (int r = 0; r < 300; r++) {
        const char *p = r == 0 ? parts[0] : parts[1 + r % 3];
        memcpy(text + len, p, strlen(p));
        len += strlen(p);
    }
    for (int r = 0; r < 300; r++) { /* a word of 600 code points */
        memcpy(text + len, "E\xcc\x81", 3);
        len += 3;
    }
    for (size_t t = 0; t < sizeof paths / sizeof *paths; t++) {
        tokenizer *tok = load(paths[t], t > 0, 1);
        static int ids[512], s[512], e[512], wids[512], ws[512], we[512];
        int wn = 0, wtr = 0, n, tr, faults = 0;
        char err[SM_ERR_MAX];
        assert_int_equal(tokenizer_encode_offsets(tok, text, len, 512, wids, ws, we, &wn, &wtr,
                                                  NULL, NULL, err), SM_OK);
        for (long k = 0;; k++) {
            err[0] = 0;
            g_fail_at = k;
            g_count = 0;
            int rc = tokenizer_encode_offsets(tok, text, len, 512, ids, s, e, &n, &tr, NULL, NULL,
                                              err);
            long used = g_count;
            g_count = -1;
            if (rc == SM_OK) {
                assert_int_equal(n, wn);
                assert_memory_equal(ids, wids, (size_t)n * sizeof *ids);
                assert_memory_equal(s, ws, (size_t)n * sizeof *s);
                assert_memory_equal(e, we, (size_t)n * sizeof *e);
                if (used <= k)
                    break; /* every allocation has failed once */
                continue;
            }
            assert_int_equal(rc, SM_ERR_NOMEM);
            assert_true(err[0] != 0);
            faults++;
        }
        fprintf(stderr, "%s: %d allocations failed in turn\n", paths[t], faults);
        tokenizer_free(tok);
    }
    free(text);
}

int one(void *u)
{
    (void)u;
    return 1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_golden_chunks),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

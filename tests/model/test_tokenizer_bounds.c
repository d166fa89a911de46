/* test_tokenizer_bounds.c: what tokenizing costs and how it stops.
 *
 *   - Hostile tokenizer.json files, built here: a Unigram piece or a
 *     WordPiece token longer than 1024 bytes is refused at load, naming it;
 *     a piece near that limit, with WordPiece's max_input_chars_per_word at
 *     1e6 and texts without spaces, tokenizes 10,000 characters at a cost
 *     close to 10 times that of 1,000 (the bound is 40: quadratic would be
 *     100), and a text that runs along the long piece finishes.
 *   - The normalizers of a tokenizer.json run over pieces of the text
 *     (tj_set_chunk); pieces of 1 and 7 bytes give the ids of the whole
 *     text on every golden string and on long texts made from them.
 *   - A stop callback: it is asked every few KB, a non-zero answer ends the
 *     call with SM_ERR_INTERRUPTED "interrupted" after little of a 32 MB
 *     text, and a stop that never says stop changes no id.
 *
 * Timing is used only as a ratio with a wide margin, best of five runs.
 * Run from the repository root: ./build/tests/test_tokenizer_bounds
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
#include "tokenize/tokenizer.h"
#include "tokenize/tokenizer_json.h"
#include "tokenize/vocab.h"

#include "support/golden_ids_util.h"

#define DIR "tests/fixtures/tokenizer_json/"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A growable string for building JSON and texts. */
typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void repeat(buf *b, const char *s, size_t times)
{
    for (size_t i = 0; i < times; i++)
        puts_(b, s);
}

static const char *const cjk[] = {"这", "家", "酒", "店", "很", "干",
                                  "净", "服", "务", "也", "周", "到"};
#define N_CJK 12

/* A Unigram tokenizer.json: <unk>, the ideographs above, "酒店", "a", and
 * one long piece: `times` copies of `unit`. */
static char *unigram_json(const char *unit, size_t times)
{
    buf b = {0};
    char tmp[64];
    puts_(&b, "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0]");
    for (int i = 0; i < N_CJK; i++) {
        snprintf(tmp, sizeof tmp, ",[\"%s\",-%d.5]", cjk[i], i + 1);
        puts_(&b, tmp);
    }
    puts_(&b, ",[\"酒店\",-2.0],[\"a\",-4.0],[\"");
    repeat(&b, unit, times);
    puts_(&b, "\",-20.0]]},\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":"
              "\"\\u2581\",\"prepend_scheme\":\"always\",\"split\":true}}");
    return b.p;
}

/* A WordPiece tokenizer.json with max_input_chars_per_word 1e6: the
 * ideographs, each also as "##" continuation, "酒店", and one long token. */
static char *wordpiece_json(const char *unit, size_t times)
{
    buf b = {0};
    char tmp[64];
    int id = 3;
    puts_(&b, "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
              "\"max_input_chars_per_word\":1000000,\"vocab\":{\"[UNK]\":0,"
              "\"[CLS]\":1,\"[SEP]\":2");
    for (int i = 0; i < N_CJK; i++, id += 2) {
        snprintf(tmp, sizeof tmp, ",\"%s\":%d,\"##%s\":%d", cjk[i], id, cjk[i], id + 1);
        puts_(&b, tmp);
    }
    snprintf(tmp, sizeof tmp, ",\"酒店\":%d,\"", id++);
    puts_(&b, tmp);
    repeat(&b, unit, times);
    snprintf(tmp, sizeof tmp, "\":%d}},\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"}}",
             id);
    puts_(&b, tmp);
    return b.p;
}

static tokenizer *load_json(const char *json)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    if (tokenizer_load_json_buffer(json, strlen(json), &tok, err) != SM_OK)
        fail_msg("cannot load: %s", err);
    return tok;
}

/* `chars` ideographs of cjk[], no spaces. */
static char *cjk_text(size_t chars)
{
    buf b = {0};
    for (size_t i = 0; i < chars; i++)
        puts_(&b, cjk[i % N_CJK]);
    return b.p;
}

/* Seconds to tokenize text, best of 5 runs of `reps` calls. */
static double best_time(const tokenizer *tok, const char *text, int reps, int *n_out)
{
    char err[SM_ERR_MAX];
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        double t0 = now();
        for (int r = 0; r < reps; r++)
            assert_int_equal(tokenizer_tokenize(tok, text, strlen(text), NULL, 0, n_out, err),
                             SM_OK);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    return best;
}

/* ------------------------------------------------------------ hostile */

static void expect_refused(const char *json, const char *want)
{
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    int rc = tokenizer_load_json_buffer(json, strlen(json), &tok, err);
    if (rc == SM_OK) {
        tokenizer_free(tok);
        fail_msg("loaded a tokenizer.json that must be refused (%s)", want);
    }
    assert_int_equal(rc, SM_ERR_UNSUPPORTED);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

static void test_long_piece_refused(void **state)
{
    (void)state;
    char *j = unigram_json("a", 60000);
    expect_refused(j, "tokenizer.json: Unigram piece 15 is 60000 bytes long; at most "
                      "1024 are supported");
    free(j);
    j = wordpiece_json("a", 1025);
    expect_refused(j, "tokenizer.json: WordPiece token 28 is 1025 bytes long; at most "
                      "1024 are supported");
    free(j);
    j = unigram_json("a", 1024); /* at the limit: loads */
    tokenizer_free(load_json(j));
    free(j);
}

/* Cost of 10,000 characters against 1,000 for tok, and against 10,000
 * for plain, the same model with a one-character piece for the long one:
 * the long piece may cost a walk along it where the text follows it, not
 * a hash of every prefix of it at every place (the cost before the trie,
 * over 1000 times plain's). */
static void check_linear(const tokenizer *tok, const tokenizer *plain, const char *what)
{
    char *small = cjk_text(1000), *big = cjk_text(10000);
    int ns = 0, nb = 0, np = 0;
    double ts = best_time(tok, small, 10, &ns), tb = best_time(tok, big, 1, &nb) * 10;
    double tp = best_time(plain, big, 1, &np) * 10;
    double ratio = tb / (ts > 1e-9 ? ts : 1e-9), vs_plain = tb / (tp > 1e-9 ? tp : 1e-9);
    printf("%s: 1,000 characters %.3f ms, 10,000 %.3f ms (ratio %.1f); without the "
           "long piece %.3f ms (ratio %.1f)\n", what, ts * 100, tb * 100, ratio, tp * 100,
           vs_plain);
    if (ratio > 40)
        fail_msg("%s: 10,000 characters cost %.1f times 1,000 (linear: 10, "
                 "quadratic: 100)", what, ratio);
    if (vs_plain > 100)
        fail_msg("%s: 10,000 characters cost %.1f times what they cost without the "
                 "long piece", what, vs_plain);
    assert_true(nb > 0 && ns > 0 && np > 0);
    free(small);
    free(big);
}

static void test_unigram_long_piece_linear(void **state)
{
    (void)state;
    /* 336 ideographs, 1008 bytes: the texts here follow it from every
     * twelfth character on */
    char *j = unigram_json("这家酒店很干净服务也周到", 28), *jp = unigram_json("b", 1);
    tokenizer *tok = load_json(j), *plain = load_json(jp);
    check_linear(tok, plain, "Unigram, a 1008-byte piece");
    tokenizer_free(plain);
    free(jp);

    /* A normal text: ▁ then the pieces Viterbi picks; the long piece once
     * when the text is exactly it. */
    int ids[64], n = 0;
    char err[SM_ERR_MAX];
    const char *text = "这家酒店很干净";
    assert_int_equal(tokenizer_tokenize(tok, text, strlen(text), ids, 64, &n, err), SM_OK);
    int want[] = {0, 1, 2, 13, 5, 6, 7};
    assert_int_equal(n, 7);
    assert_memory_equal(ids, want, sizeof want);
    tokenizer_free(tok);
    free(j);
}

static void test_unigram_along_the_piece(void **state)
{
    (void)state;
    /* The text follows the long piece: each place walks up to 1024 bytes. */
    char *j = unigram_json("a", 1024);
    tokenizer *tok = load_json(j);
    buf text = {0};
    repeat(&text, "a", 10000);
    char err[SM_ERR_MAX];
    int n = 0;
    double t0 = now();
    assert_int_equal(tokenizer_tokenize(tok, text.p, text.n, NULL, 0, &n, err), SM_OK);
    double t = now() - t0;
    printf("Unigram, 10,000 bytes along a 1024-byte piece: %.3f s, %d ids\n", t, n);
    if (t > 10)
        fail_msg("10,000 bytes along a 1024-byte piece took %.1f s", t);
    assert_true(n > 0);
    tokenizer_free(tok);
    free(j);
    free(text.p);
}

static void test_wordpiece_long_word_linear(void **state)
{
    (void)state;
    char *j = wordpiece_json("这家酒店很干净服务也周到", 28), *jp = wordpiece_json("b", 1);
    tokenizer *tok = load_json(j), *plain = load_json(jp);
    check_linear(tok, plain, "WordPiece, max_input_chars_per_word 1e6, a 1008-byte token");
    tokenizer_free(plain);
    free(jp);

    int ids[64], n = 0;
    char err[SM_ERR_MAX];
    const char *text = "酒店很干净 这家x";
    assert_int_equal(tokenizer_tokenize(tok, text, strlen(text), ids, 64, &n, err), SM_OK);
    int want[] = {27, 12, 14, 16, 0}; /* 酒店 ##很 ##干 ##净, then [UNK] for 这家x */
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    tokenizer_free(tok);
    free(j);
}

static void test_wordpiece_along_the_token(void **state)
{
    (void)state;
    char *j = wordpiece_json("a", 1024);
    tokenizer *tok = load_json(j);
    buf text = {0};
    repeat(&text, "a", 100000); /* one word, no piece matches: [UNK] */
    char err[SM_ERR_MAX];
    int ids[4], n = 0;
    double t0 = now();
    assert_int_equal(tokenizer_tokenize(tok, text.p, text.n, ids, 4, &n, err), SM_OK);
    double t = now() - t0;
    if (t > 10)
        fail_msg("a 100,000-byte word along a 1024-byte token took %.1f s", t);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 0);
    tokenizer_free(tok);
    free(j);
    free(text.p);
}

/* ------------------------------------------------------------ pieces */

/* The golden strings of a tsv (hex in the second field), decoded. */
static char **golden_strings(const char *tsv_path, int *count)
{
    size_t len;
    char *tsv = read_file(tsv_path, &len), *line, *save = NULL;
    char **out = NULL;
    int n = 0;
    assert_non_null(tsv);
    for (line = strtok_r(tsv, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            continue;
        char *f = strchr(line, '\t');
        assert_non_null(f);
        f++;
        char *e = strchr(f, '\t');
        size_t hl = e ? (size_t)(e - f) : strlen(f);
        if (hl == 1 && f[0] == '-')
            hl = 0;
        char *text = malloc(hl / 2 + 1);
        assert_non_null(text);
        for (size_t i = 0; i < hl / 2; i++)
            text[i] = (char)(hexval(f[2 * i]) * 16 + hexval(f[2 * i + 1]));
        text[hl / 2] = '\0';
        out = realloc(out, (size_t)(n + 1) * sizeof *out);
        assert_non_null(out);
        out[n++] = text;
    }
    free(tsv);
    *count = n;
    return out;
}

/* ids of text through the pipeline with normalizer pieces of `chunk`. */
static int *ids_with_chunk(tj_pipeline *tj, const vocab *v, const char *text, size_t len,
                           size_t chunk, int *n)
{
    char err[SM_ERR_MAX] = "";
    tj_set_chunk(tj, chunk);
    if (tj_tokenize(tj, v, text, len, NULL, 0, n, NULL, NULL, err) != SM_OK)
        fail_msg("tokenize: %s", err);
    int *ids = malloc((size_t)(*n + 1) * sizeof *ids);
    assert_non_null(ids);
    assert_int_equal(tj_tokenize(tj, v, text, len, ids, *n, n, NULL, NULL, err), SM_OK);
    return ids;
}

static int same_for_chunks(tj_pipeline *tj, const vocab *v, const char *text, size_t len)
{
    int nw = 0, bad = 0;
    int *whole = ids_with_chunk(tj, v, text, len, 0, &nw);
    size_t chunks[] = {1, 7, 4096};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        int nc = 0;
        int *cut = ids_with_chunk(tj, v, text, len, chunks[c], &nc);
        if (nc != nw || memcmp(cut, whole, (size_t)nw * sizeof *whole)) {
            fprintf(stderr, "pieces of %zu bytes change the ids of a %zu-byte text "
                    "(%d ids, %d whole)\n", chunks[c], len, nc, nw);
            bad = 1;
        }
        free(cut);
    }
    free(whole);
    return !bad;
}

static void check_chunks(const char *name)
{
    char path[256], err[SM_ERR_MAX] = "";
    size_t len;
    snprintf(path, sizeof path, DIR "%s/tokenizer.json", name);
    char *json = read_file(path, &len);
    assert_non_null(json);
    vocab *v = NULL;
    tj_pipeline *tj = NULL;
    tj_special sp;
    if (tj_load(json, len, 0, &v, &tj, &sp, err) != SM_OK)
        fail_msg("%s: %s", path, err);
    snprintf(path, sizeof path, DIR "%s_golden.tsv", name);
    int count = 0, bad = 0;
    char **strs = golden_strings(path, &count);
    buf all = {0}, spaced = {0};
    for (int i = 0; i < count; i++) {
        bad += !same_for_chunks(tj, v, strs[i], strlen(strs[i]));
        puts_(&all, strs[i]);
        puts_(&spaced, strs[i]);
        puts_(&spaced, i % 3 ? " " : "很好ab");
        free(strs[i]);
    }
    bad += !same_for_chunks(tj, v, all.p, all.n);
    bad += !same_for_chunks(tj, v, spaced.p, spaced.n);
    printf("%s: %d golden strings and two texts of %zu and %zu bytes, in pieces\n", name,
           count, all.n, spaced.n);
    assert_int_equal(bad, 0);
    free(strs);
    free(all.p);
    free(spaced.p);
    free(json);
    tj_free(tj);
    vocab_free(v);
}

static void test_chunks_unigram(void **state)
{
    (void)state;
    check_chunks("unigram");
    check_chunks("unigram_bytes");
    check_chunks("unigram_steps");
}

static void test_chunks_wordpiece(void **state)
{
    (void)state;
    check_chunks("wordpiece");
    check_chunks("wordpiece_cased");
}

/* ------------------------------------------------------------ stopping */

typedef struct {
    long calls, stop_at; /* say stop on call stop_at (0: never) */
} stopper;

static int stop_after(void *user)
{
    stopper *s = user;
    s->calls++;
    return s->stop_at && s->calls >= s->stop_at;
}

static void check_stops(const tokenizer *tok, const char *what)
{
    /* 32 MB: ideographs, Latin words and spaces */
    buf text = {0};
    while (text.n < (32u << 20))
        puts_(&text, "这家酒店很干净，服务也很周到 the room was clean ");
    char err[SM_ERR_MAX] = "";
    int n = -1, ids[8];

    stopper s = {0, 10};
    double t0 = now();
    int rc = tokenizer_tokenize_stoppable(tok, text.p, text.n, NULL, 0, &n, stop_after, &s,
                                          err);
    double t = now() - t0;
    printf("%s: stopped on call %ld after %.3f s\n", what, s.calls, t);
    assert_int_equal(rc, SM_ERR_INTERRUPTED);
    assert_string_equal(err, "interrupted");
    assert_int_equal(s.calls, 10);

    s = (stopper){0, 5};
    rc = tokenizer_encode_stoppable(tok, text.p, text.n, 8, ids, &n, NULL, stop_after, &s,
                                    err);
    /* encode may finish before its 5th check once 8 ids are there */
    assert_true(rc == SM_OK || rc == SM_ERR_INTERRUPTED);

    /* A stop that never says stop: the plain ids, and it is asked about
     * once per 4 KB of text or more often. */
    size_t small = 1u << 20;
    int na = 0, nb = 0;
    s = (stopper){0, 0};
    assert_int_equal(tokenizer_tokenize(tok, text.p, small, NULL, 0, &na, err), SM_OK);
    int *a = malloc((size_t)na * sizeof *a), *b = malloc((size_t)na * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(tokenizer_tokenize(tok, text.p, small, a, na, &na, err), SM_OK);
    assert_int_equal(tokenizer_tokenize_stoppable(tok, text.p, small, b, na, &nb, stop_after,
                                                  &s, err), SM_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    if (s.calls < (long)(small / TOKENIZER_POLL_BYTES / 2))
        fail_msg("%s: asked %ld times in 1 MB", what, s.calls);
    free(a);
    free(b);
    free(text.p);
}

static void test_stop_vocab_txt(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    tokenizer *tok = NULL;
    if (tokenizer_load_file("tests/fixtures/vocab.txt", 1, &tok, err) != SM_OK)
        fail_msg("%s", err);
    check_stops(tok, "vocab.txt");
    tokenizer_free(tok);
}

static void test_stop_tokenizer_json(void **state)
{
    (void)state;
    const char *names[] = {"unigram", "wordpiece"};
    for (int i = 0; i < 2; i++) {
        char path[256], err[SM_ERR_MAX] = "";
        tokenizer *tok = NULL;
        snprintf(path, sizeof path, DIR "%s/tokenizer.json", names[i]);
        if (tokenizer_load_json_file(path, &tok, err) != SM_OK)
            fail_msg("%s: %s", path, err);
        check_stops(tok, names[i]);
        tokenizer_free(tok);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_piece_refused),
        cmocka_unit_test(test_unigram_long_piece_linear),
        cmocka_unit_test(test_unigram_along_the_piece),
        cmocka_unit_test(test_wordpiece_long_word_linear),
        cmocka_unit_test(test_wordpiece_along_the_token),
        cmocka_unit_test(test_chunks_unigram),
        cmocka_unit_test(test_chunks_wordpiece),
        cmocka_unit_test(test_stop_vocab_txt),
        cmocka_unit_test(test_stop_tokenizer_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

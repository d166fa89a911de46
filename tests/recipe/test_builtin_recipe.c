/* test_builtin_recipe.c: the built-in model's recipe code that is not in the
 * library (recipe/): the teacher's soft labels file (writing from
 * TSV, lookups through normalisation, rejection of malformed and hostile
 * files) and the data split (no evaluation text among the training or
 * unlabeled texts; the douban hold-out), the latter on ../shared/data when
 * it is there.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/errors.h"
#include "recipe/reviews.h"
#include "recipe/soft_labels.h"

#define DIR_TEMPLATE "/tmp/sm_recipe_XXXXXX"

static char g_dir[sizeof DIR_TEMPLATE];

static int setup(void **state)
{
    (void)state;
    strcpy(g_dir, DIR_TEMPLATE);
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[64 + sizeof g_dir];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd);
}

static void write_text(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void test_soft_labels_round_trip(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "", tsv[256], bin[256];
    snprintf(tsv, sizeof tsv, "%s/soft.tsv", g_dir);
    snprintf(bin, sizeof bin, "%s/soft.bin", g_dir);
    const char *text = "0.9\t房间很干净\n"
                       "0.000001\t太差了，再也不来\n"
                       "0.25\tＧＯＯＤ  Value\n" /* the same text as below, normalised */
                       "0.75\tgood value\n"
                       "1\t好\n";
    write_text(tsv, text, strlen(text));
    int n = 0;
    assert_int_equal(soft_labels_write_tsv(tsv, bin, &n, err), SM_OK);
    assert_int_equal(n, 4);
    soft_labels s;
    assert_int_equal(soft_labels_load(bin, &s, err), SM_OK);
    assert_int_equal(s.n, 4);
    float p;
    assert_int_equal(soft_labels_find(&s, "房间很干净", &p), 1);
    assert_true(fabsf(p - 0.9f) <= 1.0f / 65535);
    assert_int_equal(soft_labels_find(&s, "房间 很干净", &p), 1); /* white space is ignored */
    assert_int_equal(soft_labels_find(&s, "Good Value", &p), 1);
    assert_true(fabsf(p - 0.25f) <= 1.0f / 65535); /* the first copy wins */
    assert_int_equal(soft_labels_find(&s, "好", &p), 1);
    assert_true(p == 1.0f);
    assert_int_equal(soft_labels_find(&s, "太差了，再也不来", &p), 1);
    assert_true(p < 1e-4f);
    assert_int_equal(soft_labels_find(&s, "没见过的句子", &p), 0);
    soft_labels_free(&s);
    assert_int_equal(s.n, 0);
}

static void test_soft_labels_bad_tsv(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "", tsv[256], bin[256];
    snprintf(tsv, sizeof tsv, "%s/bad.tsv", g_dir);
    snprintf(bin, sizeof bin, "%s/bad.bin", g_dir);
    const char *bad[] = {"0.5 no tab\n", "1.5\ttoo big\n", "nan\tnot a number\n", "\tempty p\n",
                         "0.5x\ttrailing\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int n = -1;
        write_text(tsv, bad[i], strlen(bad[i]));
        assert_int_equal(soft_labels_write_tsv(tsv, bin, &n, err), SM_ERR_FORMAT);
        assert_non_null(strstr(err, "bad.tsv:1"));
        assert_int_equal(n, -1);
    }
    int n;
    assert_int_equal(soft_labels_write_tsv("/nonexistent/soft.tsv", bin, &n, err), SM_ERR_IO);
}

/* Every way a file can lie is refused; none crashes. */
static void test_soft_labels_hostile_files(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "", path[256];
    snprintf(path, sizeof path, "%s/hostile.bin", g_dir);
    unsigned char good[16 + 10 * 2] = {'S', 'M', 'S', 'O', 'F', 'T', '1', '\n', 2, 0, 0, 0, 0, 0, 0, 0};
    good[16] = 1;      /* key 1 */
    good[24] = 2;      /* key 2 */
    good[32] = 0xff;   /* p */
    soft_labels s;
    write_text(path, good, sizeof good);
    assert_int_equal(soft_labels_load(path, &s, err), SM_OK);
    assert_int_equal(s.n, 2);
    soft_labels_free(&s);

    unsigned char bad[sizeof good];
    memcpy(bad, good, sizeof good);
    bad[0] = 'X'; /* magic */
    write_text(path, bad, sizeof bad);
    assert_int_equal(soft_labels_load(path, &s, err), SM_ERR_FORMAT);
    memcpy(bad, good, sizeof good);
    bad[8] = 3; /* more texts than bytes */
    write_text(path, bad, sizeof bad);
    assert_int_equal(soft_labels_load(path, &s, err), SM_ERR_FORMAT);
    memcpy(bad, good, sizeof good);
    bad[11] = 0xff; /* a huge count */
    write_text(path, bad, sizeof bad);
    assert_int_equal(soft_labels_load(path, &s, err), SM_ERR_FORMAT);
    memcpy(bad, good, sizeof good);
    bad[24] = 1; /* a repeated key */
    write_text(path, bad, sizeof bad);
    assert_int_equal(soft_labels_load(path, &s, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "out of order"));
    memcpy(bad, good, sizeof good);
    bad[12] = 1; /* reserved word */
    write_text(path, bad, sizeof bad);
    assert_int_equal(soft_labels_load(path, &s, err), SM_ERR_FORMAT);
    write_text(path, good, 20); /* truncated */
    assert_int_equal(soft_labels_load(path, &s, err), SM_ERR_FORMAT);
    write_text(path, good, 5); /* shorter than the header */
    assert_int_equal(soft_labels_load(path, &s, err), SM_ERR_FORMAT);
    assert_int_equal(soft_labels_load("/nonexistent/soft.bin", &s, err), SM_ERR_IO);
    assert_int_equal(soft_labels_load(g_dir, &s, err), SM_ERR_IO); /* a directory */
    assert_int_equal(s.n, 0);
}

static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* On the real data: no evaluation text (normalised) among the training or
 * unlabeled texts, and the douban hold-out is about 10% of that set. */
static void test_split_has_no_leak(void **state)
{
    (void)state;
    const char *data = "../shared/data";
    if (access("../shared/data/douban_book_review/all.tsv", R_OK)) {
        print_message("skipped: ../shared/data is not here (the split is read at run time)\n");
        skip();
    }
    char err[SM_ERR_MAX] = "";
    review_data d;
    assert_int_equal(reviews_load(data, 0, 0, &d, err), SM_OK);
    soft_labels eval = {0}; /* the keys of every evaluation text, sorted */
    size_t n = 0;
    for (int e = 0; e < REVIEW_EVAL_SETS; e++) n += (size_t)d.eval[e].n;
    eval.key = malloc(n * sizeof *eval.key);
    for (int e = 0; e < REVIEW_EVAL_SETS; e++)
        for (int i = 0; i < d.eval[e].n; i++) eval.key[eval.n++] = soft_labels_key(d.eval[e].rows[i].text);
    qsort(eval.key, (size_t)eval.n, sizeof *eval.key, by_u64);
    int u = 0;
    for (int i = 0; i < eval.n; i++)
        if (!u || eval.key[i] != eval.key[u - 1]) eval.key[u++] = eval.key[i];
    eval.n = u;
    eval.p = calloc((size_t)u, sizeof *eval.p);
    float p;
    int leaks = 0;
    for (int i = 0; i < d.train.n; i++) leaks += soft_labels_find(&eval, d.train.rows[i].text, &p);
    for (int i = 0; i < d.unlabeled.n; i++)
        leaks += soft_labels_find(&eval, d.unlabeled.rows[i].text, &p);
    print_message("split: train %d, unlabeled %d, evaluation %d texts; %d leaks\n", d.train.n,
                  d.unlabeled.n, eval.n, leaks);
    assert_int_equal(leaks, 0);
    assert_string_equal(d.eval_name[4], "douban_book_review (held-out 10%)");
    assert_true(d.eval[4].n > 3500 && d.eval[4].n < 5000);
    assert_int_equal(d.unlabeled_reviews, d.unlabeled.n); /* without unlabeled_zh */
    soft_labels_free(&eval);
    reviews_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soft_labels_round_trip),
        cmocka_unit_test(test_soft_labels_bad_tsv),
        cmocka_unit_test(test_soft_labels_hostile_files),
        cmocka_unit_test(test_split_has_no_leak),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

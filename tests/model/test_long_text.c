/* test_long_text.c: long texts read in windows (model/encoder/classifier.c,
 * bert_text_opts.windows; sentiment_config('long_text'), classify's long_text
 * argument): the windows'
 * probabilities against the softmax of the mean of each window's logits
 * computed here by hand with bert_forward, texts of one window unchanged,
 * the window limit, and the SQL setting.
 */
#include "support/ext_test_util.h"

#include <math.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"

/* A text of n ideographs, one token each in the fixture vocabulary. */
static void ideographs(char *buf, int n)
{
    static const char *const ch[] = {"好", "差", "房", "间", "很", "干", "净", "服", "务", "慢"};
    buf[0] = 0;
    for (int i = 0; i < n; i++) strcat(buf, ch[(i * 7 + i / 3) % 10]);
}

/* softmax(mean over windows of bert_forward's logits), the windows built
 * here from the rule: L = max_length - 2 tokens, each 5/6 of L after the
 * last, the last ending at the text's end. */
static void by_hand(const bert_model *m, backend *be, const char *text, int max_length,
                    float *probs)
{
    char err[SM_ERR_MAX];
    int all[1024], n = 0, cut = 0, K = m->cfg.num_labels;
    assert_int_equal(tokenizer_encode(m->tok, text, strlen(text), 1024, all, &n, &cut, err), SM_OK);
    int L = max_length - 2, S = L * 5 / 6, k = n - 2;
    bert_workspace *ws = NULL;
    assert_int_equal(bert_workspace_create(be, &m->cfg, 1, max_length, &ws, err), SM_OK);
    double sum[8] = {0};
    int windows = 0;
    for (int w0 = 0;; w0 += S) {
        int w1 = w0 + L < k ? w0 + L : k, ids[64], len = w1 - w0 + 2;
        float logits[8];
        ids[0] = all[0];
        memcpy(ids + 1, all + 1 + w0, (size_t)(w1 - w0) * sizeof *ids);
        ids[len - 1] = all[n - 1];
        assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, len, logits, NULL, err),
                         SM_OK);
        for (int j = 0; j < K; j++) sum[j] += logits[j];
        windows++;
        if (w1 == k) break;
    }
    double mx = -1e300, z = 0;
    for (int j = 0; j < K; j++) mx = fmax(mx, sum[j] / windows);
    for (int j = 0; j < K; j++) z += exp(sum[j] / windows - mx);
    for (int j = 0; j < K; j++) probs[j] = (float)(exp(sum[j] / windows - mx) / z);
    bert_workspace_free(ws);
}

static void test_windows_by_hand(void **state)
{
    (void)state;
    char err[SM_ERR_MAX], text[256];
    bert_model *m = NULL;
    backend *be = NULL;
    bert_workspace *ws = NULL;
    assert_int_equal(bert_model_load_dir(TINY_MODEL, &m, err), SM_OK);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 4, 12, &ws, err), SM_OK);
    const int lengths[] = {30, 9, 3, 47};
    for (size_t t = 0; t < sizeof lengths / sizeof *lengths; t++) {
        ideographs(text, lengths[t]);
        const char *texts[1] = {text};
        size_t lens[1] = {strlen(text)};
        float got[8], want[8], cut_probs[8];
        int trunc = -1;
        bert_text_opts o = {NULL, NULL, 8};
        assert_int_equal(bert_classify_texts_opts(m, &m->p, ws, texts, lens, 1, 12, 4, got, &trunc,
                                                  &o, err),
                         SM_OK);
        by_hand(m, be, text, 12, want);
        for (int j = 0; j < m->cfg.num_labels; j++)
            if (fabsf(got[j] - want[j]) > 1e-6f)
                fail_msg("%d tokens: p[%d] %.7g, by hand %.7g", lengths[t], j, got[j], want[j]);
        /* longer than one window (10 tokens) is reported as truncated */
        assert_int_equal(trunc, lengths[t] > 10);
        /* one window: exactly the truncating result */
        int trunc2 = -1;
        assert_int_equal(bert_classify_texts(m, &m->p, ws, texts, lens, 1, 12, 4, cut_probs, &trunc2,
                                             err),
                         SM_OK);
        if (lengths[t] <= 10) assert_memory_equal(got, cut_probs, sizeof(float) * m->cfg.num_labels);
        else assert_int_equal(trunc2, 1);
    }
    bert_workspace_free(ws);
    be->destroy(be);
    bert_model_free(m);
}

/* Beyond the window limit the rest is cut: 2 windows of a 47-token text
 * are the first 2 of its windows, the same as the text cut where they end. */
static void test_window_limit(void **state)
{
    (void)state;
    char err[SM_ERR_MAX], text[256], head[256];
    bert_model *m = NULL;
    backend *be = NULL;
    bert_workspace *ws = NULL;
    assert_int_equal(bert_model_load_dir(TINY_MODEL, &m, err), SM_OK);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 4, 12, &ws, err), SM_OK);
    ideographs(text, 47);
    /* 2 windows of 10 tokens, 8 apart: tokens 0..17 */
    snprintf(head, sizeof head, "%.*s", 18 * 3, text);
    const char *a[1] = {text}, *b[1] = {head};
    size_t la[1] = {strlen(text)}, lb[1] = {strlen(head)};
    float pa[8], pb[8];
    int ta = 0, tb = 0;
    bert_text_opts o = {NULL, NULL, 2};
    assert_int_equal(bert_classify_texts_opts(m, &m->p, ws, a, la, 1, 12, 4, pa, &ta, &o, err), SM_OK);
    assert_int_equal(bert_classify_texts_opts(m, &m->p, ws, b, lb, 1, 12, 4, pb, &tb, &o, err), SM_OK);
    assert_memory_equal(pa, pb, sizeof(float) * m->cfg.num_labels);
    assert_int_equal(ta, 1);
    bert_text_opts bad = {NULL, NULL, 5000};
    assert_int_equal(bert_classify_texts_opts(m, &m->p, ws, a, la, 1, 12, 4, pa, &ta, &bad, err),
                     SM_ERR_INVALID);
    bert_workspace_free(ws);
    be->destroy(be);
    bert_model_free(m);
}

static void test_sql_setting(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    char text[256], sql[1024];
    ideographs(text, 40);
    expect_text(db, "SELECT sentiment_config('long_text')", "truncate");
    expect_error(db, "SELECT sentiment_config('long_text', 'chunks')",
                 "long_text must be truncate or windows, got 'chunks'");
    exec_ok(db, "SELECT sentiment_config('max_length', 12)");
    snprintf(sql, sizeof sql, "SELECT sentiment_probs('%s', 'tiny')", text);
    char *cut = q_text(db, sql);
    expect_text(db, "SELECT sentiment_config('long_text', 'windows')", "windows");
    char *win = q_text(db, sql);
    assert_string_not_equal(cut, win);
    /* classify and sentiment() agree under windows; truncated counts the text */
    snprintf(sql, sizeof sql,
             "SELECT probs = sentiment_probs('%s', 'tiny') AND truncated = 1 FROM "
             "classify('SELECT 1, ''%s''', 'tiny')", text, text);
    expect_text(db, sql, "1");
    free(cut);
    free(win);
    sqlite3_close(db);
}

/* classify's long_text argument overrides the setting for one query, as a
 * fifth argument or a constraint; a bad value is refused. */
static void test_classify_argument(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    char text[256], sql[1024];
    ideographs(text, 40);
    exec_ok(db, "SELECT sentiment_config('max_length', 12)");
    exec_ok(db, "CREATE TABLE r(body TEXT)");
    snprintf(sql, sizeof sql, "INSERT INTO r VALUES ('%s'), ('好')", text);
    exec_ok(db, sql);
    snprintf(sql, sizeof sql, "SELECT sentiment_probs('%s', 'tiny')", text);
    char *cut = q_text(db, sql);
    exec_ok(db, "SELECT sentiment_config('long_text', 'windows')");
    char *win = q_text(db, sql);
    assert_string_not_equal(cut, win);
    /* the setting is windows; the argument says truncate, then windows */
    snprintf(sql, sizeof sql,
             "SELECT probs FROM classify('r', 'body', 'tiny', 8, 'truncate') WHERE id = 1");
    expect_text(db, sql, cut);
    exec_ok(db, "SELECT sentiment_config('long_text', 'truncate')");
    expect_text(db, "SELECT probs FROM classify('r', 'body', 'tiny', 8, 'windows') WHERE id = 1",
                win);
    expect_text(db, "SELECT probs FROM classify('r', 'body', 'tiny') WHERE long_text = 'windows' "
                    "AND id = 1",
                win);
    expect_text(db, "SELECT probs FROM classify('r', 'body', 'tiny') WHERE id = 1", cut);
    /* a short text is the same either way; the hidden column shows the argument */
    expect_text(db, "SELECT count(*) FROM classify('r', 'body', 'tiny', 8, 'windows') a "
                    "JOIN classify('r', 'body', 'tiny') b USING (id) WHERE a.probs = b.probs",
                "1");
    expect_text(db, "SELECT DISTINCT long_text FROM classify('r', 'body', 'tiny', 8, 'windows')",
                "windows");
    expect_error(db, "SELECT * FROM classify('r', 'body', 'tiny', 8, 'chunks')",
                 "classify(): long_text must be 'truncate' or 'windows', got 'chunks'");
    expect_error(db, "SELECT * FROM classify('r', 'body', 'tiny', 8, 3)",
                 "classify(): long_text must be 'truncate' or 'windows', got '3'");
    free(cut);
    free(win);
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows_by_hand),
        cmocka_unit_test(test_window_limit),
        cmocka_unit_test(test_sql_setting),
        cmocka_unit_test(test_classify_argument),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

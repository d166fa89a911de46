/* test_wide.c: the wide part (model/tokenize/ngram_hash.c,
 * model/encoder/wide.c, model/train/wide_fit.c, model/format/wide_config.c)
 * against tests/fixtures/wide (tests/fixtures/gen_wide_golden.py:
 * scikit-learn's murmurhash3_32, HashingVectorizer + TfidfTransformer and
 * LogisticRegression, PyTorch autograd): hashes and buckets, tf-idf
 * features, idf, logits, the loss and its gradient, the L-BFGS fit; the
 * config's round trip and refusals; a model with a wide part saved, loaded
 * and classified (against the encoder's logits plus the wide logits by
 * hand, windows included); corrupt wide tensors; a huge text and a stop.
 */
#include "support/ext_test_util.h"

#include <math.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "encoder/wide.h"
#include "tokenize/ngram_hash.h"
#include "train/wide_fit.h"

#define WIDE_DIR "tests/fixtures/wide/"
#define GB 1024 /* the golden files' buckets */
#define GK 3
#define MAX_TEXTS 16

static int unhex(const char *h, char *out)
{
    int n = 0;
    if (!strcmp(h, "-")) return 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (char)v;
    }
    return n;
}

static sm_wide_config golden_cfg(void)
{
    sm_wide_config c;
    sm_wide_config_default(&c);
    c.buckets = GB;
    return c;
}

/* The golden texts (raw bytes) from features.tsv, with their feature rows. */
typedef struct golden {
    int n;
    char text[MAX_TEXTS][256];
    size_t len[MAX_TEXTS];
    double x[MAX_TEXTS][GB];
} golden;

static golden *read_golden(void)
{
    golden *g = calloc(1, sizeof *g);
    FILE *f = fopen(WIDE_DIR "features.tsv", "r");
    assert_non_null(g);
    assert_non_null(f);
    char line[65536];
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = 0;
        assert_true(g->n < MAX_TEXTS);
        g->len[g->n] = (size_t)unhex(line, g->text[g->n]);
        for (char *p = strtok(tab + 1, " \n"); p; p = strtok(NULL, " \n")) {
            int b;
            double v;
            assert_int_equal(sscanf(p, "%d:%lf", &b, &v), 2);
            g->x[g->n][b] = v;
        }
        g->n++;
    }
    fclose(f);
    return g;
}

static wide_part *golden_part(void)
{
    char err[SM_ERR_MAX];
    sm_wide_config c = golden_cfg();
    wide_part *w = NULL;
    assert_int_equal(wide_part_create(&c, GK, &w, err), SM_OK);
    FILE *f = fopen(WIDE_DIR "idf.txt", "r");
    assert_non_null(f);
    for (int b = 0; b < GB; b++) assert_int_equal(fscanf(f, "%f", &w->idf[b]), 1);
    fclose(f);
    f = fopen(WIDE_DIR "linear.txt", "r");
    assert_non_null(f);
    int K;
    assert_int_equal(fscanf(f, "%d", &K), 1);
    assert_int_equal(K, GK);
    for (int j = 0; j < GK * GB; j++) assert_int_equal(fscanf(f, "%f", &w->weight[j]), 1);
    for (int k = 0; k < GK; k++) assert_int_equal(fscanf(f, "%f", &w->bias[k]), 1);
    fclose(f);
    return w;
}

static void test_hash_golden(void **state)
{
    (void)state;
    FILE *f = fopen(WIDE_DIR "hash.tsv", "r");
    assert_non_null(f);
    char hex[256], key[128];
    long h;
    int b18, b1000, n = 0;
    while (fscanf(f, "%255s %ld %d %d", hex, &h, &b18, &b1000) == 4) {
        int len = unhex(hex, key);
        int32_t got = ngram_murmur3_32(key, (size_t)len, 0);
        if (got != (int32_t)h) fail_msg("murmur3(%s) = %d, sklearn %ld", hex, got, h);
        assert_int_equal(ngram_bucket(got, 1 << 18), b18);
        assert_int_equal(ngram_bucket(got, 1000), b1000);
        n++;
    }
    fclose(f);
    assert_true(n > 200);
    /* the one hash whose absolute value does not fit */
    assert_int_equal(ngram_bucket(INT32_MIN, 1 << 18), (INT32_MAX - ((1 << 18) - 1)) % (1 << 18));
    assert_int_equal(ngram_bucket(-5, 3), 2);
}

static void test_features_golden(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    golden *g = read_golden();
    wide_part *w = golden_part();
    ngram_counts *nc = NULL;
    double val[GB];
    assert_int_equal(ngram_counts_create(&w->cfg, &nc, err), SM_OK);
    for (int i = 0; i < g->n; i++) {
        double x[GB] = {0};
        assert_int_equal(ngram_count_text(&w->cfg, g->text[i], g->len[i], nc, NULL, NULL, err),
                         SM_OK);
        int m = wide_features(w, nc, val);
        for (int t = 0; t < m; t++) x[nc->touched[t]] = val[t];
        for (int b = 0; b < GB; b++)
            if (fabs(x[b] - g->x[i][b]) > 1e-6)
                fail_msg("text %d bucket %d: %.9g, sklearn %.9g", i, b, x[b], g->x[i][b]);
    }
    /* the idf fitted on the same texts */
    wide_part *w2 = NULL;
    sm_wide_config c = golden_cfg();
    assert_int_equal(wide_part_create(&c, GK, &w2, err), SM_OK);
    const char *texts[MAX_TEXTS];
    for (int i = 0; i < g->n; i++) texts[i] = g->text[i];
    assert_int_equal(wide_fit_idf(w2, texts, g->len, g->n, NULL, NULL, err), SM_OK);
    for (int b = 0; b < GB; b++) assert_float_equal(w2->idf[b], w->idf[b], 1e-6);
    wide_part_free(w2);
    ngram_counts_free(nc);
    wide_part_free(w);
    free(g);
}

static void test_logits_golden(void **state)
{
    (void)state;
    char err[SM_ERR_MAX], hex[4096], raw[2048];
    golden *g = read_golden();
    wide_part *w = golden_part();
    FILE *f = fopen(WIDE_DIR "logits.tsv", "r");
    assert_non_null(f);
    const char *texts[MAX_TEXTS];
    for (int i = 0; i < g->n; i++) texts[i] = g->text[i];
    float got[MAX_TEXTS * GK] = {0};
    assert_int_equal(wide_add_logits_texts(w, texts, g->len, g->n, got, NULL, NULL, err), SM_OK);
    for (int i = 0; i < g->n; i++) {
        double want[GK];
        assert_int_equal(fscanf(f, "%4095s %lf %lf %lf", hex, &want[0], &want[1], &want[2]), 4);
        assert_int_equal(unhex(hex, raw), (int)g->len[i]);
        for (int k = 0; k < GK; k++)
            if (fabs(got[i * GK + k] - want[k]) > 1e-5 * (1 + fabs(want[k])))
                fail_msg("text %d logit %d: %.9g, torch %.9g", i, k, got[i * GK + k], want[k]);
    }
    fclose(f);
    wide_part_free(w);
    free(g);
}

static wide_rows *golden_rows(const golden *g, const wide_part *w, int *labels)
{
    char err[SM_ERR_MAX];
    const char *texts[MAX_TEXTS];
    wide_rows *r = NULL;
    for (int i = 0; i < g->n; i++) texts[i] = g->text[i];
    assert_int_equal(wide_rows_make(w, texts, g->len, labels, g->n, NULL, NULL, &r, err), SM_OK);
    return r;
}

static void test_grad_golden(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    golden *g = read_golden();
    wide_part *w = golden_part();
    FILE *f = fopen(WIDE_DIR "grad.txt", "r");
    assert_non_null(f);
    int labels[MAX_TEXTS];
    for (int i = 0; i < g->n; i++) assert_int_equal(fscanf(f, "%d", &labels[i]), 1);
    double l2, want_loss;
    assert_int_equal(fscanf(f, "%lf %lf", &l2, &want_loss), 2);
    wide_rows *r = golden_rows(g, w, labels);
    double *gW = malloc(GK * GB * sizeof *gW), gb[GK], loss;
    assert_int_equal(wide_loss_grad(w, r, NULL, l2, &loss, gW, gb, err), SM_OK);
    assert_float_equal(loss, want_loss, 1e-6 * want_loss);
    for (int j = 0; j < GK * GB; j++) {
        double want;
        assert_int_equal(fscanf(f, "%lf", &want), 1);
        if (fabs(gW[j] - want) > 1e-6 * (1e-3 + fabs(want)))
            fail_msg("dW[%d]: %.9g, torch %.9g", j, gW[j], want);
    }
    for (int k = 0; k < GK; k++) {
        double want;
        assert_int_equal(fscanf(f, "%lf", &want), 1);
        assert_float_equal(gb[k], want, 1e-7);
    }
    fclose(f);
    free(gW);
    wide_rows_free(r);
    wide_part_free(w);
    free(g);
}

/* The L-BFGS fit from zero against LogisticRegression(C): the same
 * minimiser (coefficients; intercepts up to a common shift) and loss. */
static void test_fit_matches_sklearn(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    golden *g = read_golden();
    wide_part *w = golden_part();
    memset(w->weight, 0, GK * GB * sizeof *w->weight);
    memset(w->bias, 0, GK * sizeof *w->bias);
    int labels[MAX_TEXTS];
    FILE *f = fopen(WIDE_DIR "grad.txt", "r");
    for (int i = 0; i < g->n; i++) assert_int_equal(fscanf(f, "%d", &labels[i]), 1);
    fclose(f);
    wide_rows *r = golden_rows(g, w, labels);
    f = fopen(WIDE_DIR "fit.txt", "r");
    assert_non_null(f);
    double C;
    assert_int_equal(fscanf(f, "%lf", &C), 1);
    wide_fit_options o;
    lbfgs_result res;
    wide_fit_options_default(&o);
    o.l2 = 1.0 / (C * g->n);
    o.lbfgs.gtol = 1e-10;
    o.lbfgs.ftol = 0;
    o.lbfgs.max_iter = 2000;
    assert_int_equal(wide_fit(w, r, NULL, &o, &res, err), SM_OK);
    for (int j = 0; j < GK * GB; j++) {
        double want;
        assert_int_equal(fscanf(f, "%lf", &want), 1);
        if (fabs(w->weight[j] - want) > 1e-4 * (1 + fabs(want)))
            fail_msg("W[%d]: %.9g, sklearn %.9g", j, w->weight[j], want);
    }
    double want_b[GK], mw = 0, mg = 0;
    for (int k = 0; k < GK; k++) {
        assert_int_equal(fscanf(f, "%lf", &want_b[k]), 1);
        mw += want_b[k] / GK;
        mg += w->bias[k] / GK;
    }
    for (int k = 0; k < GK; k++) assert_float_equal(w->bias[k] - mg, want_b[k] - mw, 1e-4);
    double want_logloss, loss, acc;
    assert_int_equal(fscanf(f, "%lf", &want_logloss), 1);
    fclose(f);
    const char *texts[MAX_TEXTS];
    for (int i = 0; i < g->n; i++) texts[i] = g->text[i];
    float z[MAX_TEXTS * GK] = {0};
    assert_int_equal(wide_add_logits_texts(w, texts, g->len, g->n, z, NULL, NULL, err), SM_OK);
    wide_score(z, labels, g->n, GK, &loss, &acc);
    assert_float_equal(loss, want_logloss, 1e-5);
    wide_rows_free(r);
    wide_part_free(w);
    free(g);
}

/* The gradient against central differences at a random point, with an
 * offset per row (the encoder's logits in a stacked fit). */
static void test_grad_finite_differences(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    golden *g = read_golden();
    wide_part *w = golden_part();
    int labels[MAX_TEXTS];
    float offset[MAX_TEXTS * GK];
    for (int i = 0; i < g->n; i++) labels[i] = (i * 5) % GK;
    for (int j = 0; j < g->n * GK; j++) offset[j] = (float)((j * 37 % 11) - 5) * 0.3f;
    wide_rows *r = golden_rows(g, w, labels);
    double *gW = malloc(GK * GB * sizeof *gW), gb[GK], f0, fp, fm;
    double *tmp = malloc(GK * GB * sizeof *tmp), tb[GK];
    assert_int_equal(wide_loss_grad(w, r, offset, 0.05, &f0, gW, gb, err), SM_OK);
    const int probe[] = {0, 9, 135, 1023, 1024 + 155, 2 * 1024 + 12, 2 * 1024 + 700};
    for (size_t t = 0; t < sizeof probe / sizeof *probe; t++) {
        float keep = w->weight[probe[t]], h = 1e-2f;
        w->weight[probe[t]] = keep + h;
        assert_int_equal(wide_loss_grad(w, r, offset, 0.05, &fp, tmp, tb, err), SM_OK);
        w->weight[probe[t]] = keep - h;
        assert_int_equal(wide_loss_grad(w, r, offset, 0.05, &fm, tmp, tb, err), SM_OK);
        w->weight[probe[t]] = keep;
        double fd = (fp - fm) / (2.0 * h);
        if (fabs(fd - gW[probe[t]]) > 1e-4 + 1e-3 * fabs(fd))
            fail_msg("dW[%d]: %.9g, finite differences %.9g", probe[t], gW[probe[t]], fd);
    }
    free(tmp);
    free(gW);
    wide_rows_free(r);
    wide_part_free(w);
    free(g);
}

static void test_config_round_trip_and_refusals(void **state)
{
    (void)state;
    char err[SM_ERR_MAX], *text = NULL;
    sm_wide_config c, back;
    sm_wide_config_default(&c);
    c.ngram_min = 2;
    c.ngram_max = 4;
    c.buckets = 1000;
    c.lowercase = 0;
    c.sublinear_tf = 0;
    c.idf = 0;
    c.l2_norm = 0;
    assert_int_equal(sm_wide_config_to_json(&c, &text, err), SM_OK);
    json_in_doc *doc = NULL;
    json_in_error jerr;
    assert_int_equal(json_in_parse(text, strlen(text), &doc, &jerr), SM_OK);
    assert_int_equal(sm_wide_config_from_json(json_in_root(doc), &back, err), SM_OK);
    assert_memory_equal(&c, &back, sizeof c);
    json_in_free(doc);
    free(text);

    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"[1]", "must be an object"},
        {"{\"hash\":\"murmur3_32\",\"ngram_range\":[1,3],\"buckets\":8,\"tf\":\"raw\","
         "\"idf\":true,\"norm\":\"l2\"}", "'features' is missing"},
        {"{\"features\":\"words\",\"hash\":\"murmur3_32\"}", "'features' \"words\" is not supported"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"md5\"}", "'hash' \"md5\" is not supported"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"murmur3_32\",\"ngram_range\":[0,3],"
         "\"buckets\":8,\"tf\":\"raw\",\"idf\":true,\"norm\":\"l2\"}", "ngram_range [0, 3]"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"murmur3_32\",\"ngram_range\":[3,2],"
         "\"buckets\":8,\"tf\":\"raw\",\"idf\":true,\"norm\":\"l2\"}", "ngram_range [3, 2]"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"murmur3_32\",\"ngram_range\":[1,3],"
         "\"buckets\":0,\"tf\":\"raw\",\"idf\":true,\"norm\":\"l2\"}", "'buckets' 0: expected 1..16777216"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"murmur3_32\",\"ngram_range\":[1,3],"
         "\"buckets\":99999999999,\"tf\":\"raw\",\"idf\":true,\"norm\":\"l2\"}",
         "'buckets' 99999999999: expected 1..16777216"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"murmur3_32\",\"ngram_range\":[1,3],"
         "\"buckets\":1.5,\"tf\":\"raw\",\"idf\":true,\"norm\":\"l2\"}", "must be an integer"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"murmur3_32\",\"ngram_range\":[1,3],"
         "\"buckets\":8,\"tf\":\"log\",\"idf\":true,\"norm\":\"l2\"}", "'tf' must be"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"murmur3_32\",\"ngram_range\":[1,3],"
         "\"buckets\":8,\"tf\":\"raw\",\"idf\":\"yes\",\"norm\":\"l2\"}", "'idf' must be true"},
        {"{\"features\":\"char_ngrams\",\"hash\":\"murmur3_32\",\"ngram_range\":[1,3],"
         "\"buckets\":8,\"tf\":\"raw\",\"idf\":true,\"norm\":\"l1\"}", "'norm' must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        doc = NULL;
        assert_int_equal(json_in_parse(bad[i].json, strlen(bad[i].json), &doc, &jerr), SM_OK);
        err[0] = 0;
        assert_int_not_equal(sm_wide_config_from_json(json_in_root(doc), &back, err), SM_OK);
        if (!strstr(err, bad[i].msg)) fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i].msg);
        json_in_free(doc);
    }
}

/* A model's files in memory: config.json and model.safetensors of m. */
static void save_model(const bert_model *m, char **config, void **st, size_t *st_len)
{
    char err[SM_ERR_MAX];
    assert_int_equal(bert_config_to_json(&m->cfg, config, err), SM_OK);
    assert_int_equal(bert_model_save_safetensors(m, 0 /* F32 */, st, st_len, err), SM_OK);
}

static bert_model *with_wide(void)
{
    char err[SM_ERR_MAX];
    bert_model *m = NULL;
    assert_int_equal(bert_model_load_dir(TINY_MODEL, &m, err), SM_OK);
    sm_wide_config c;
    sm_wide_config_default(&c);
    c.buckets = 4099;
    assert_int_equal(wide_part_create(&c, m->cfg.num_labels, &m->wide, err), SM_OK);
    m->cfg.wide = m->wide->cfg;
    for (size_t j = 0; j < (size_t)m->wide->K * c.buckets; j++)
        m->wide->weight[j] = (float)((int)(j * 2654435761u % 2001) - 1000) / 300.0f;
    for (int b = 0; b < c.buckets; b++) m->wide->idf[b] = 1.0f + (float)(b % 7) / 3.0f;
    m->wide->bias[0] = 0.25f;
    return m;
}

static const char *const k_texts[] = {
    "房间很干净服务好", "服务很慢很差", "好好好好好好好好好好好好好好好好好好好好好好好好差差差",
    "间", "Mixed ASCII 文本  two  spaces",
};
#define N_TEXTS ((int)(sizeof k_texts / sizeof *k_texts))

static void classify(const bert_model *m, int windows, float *probs)
{
    char err[SM_ERR_MAX];
    backend *be = NULL;
    bert_workspace *ws = NULL;
    size_t lens[N_TEXTS];
    for (int i = 0; i < N_TEXTS; i++) lens[i] = strlen(k_texts[i]);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 4, 12, &ws, err), SM_OK);
    bert_text_opts o = {NULL, NULL, windows};
    assert_int_equal(bert_classify_texts_opts(m, &m->p, ws, k_texts, lens, N_TEXTS, 12, 4, probs,
                                              NULL, &o, err),
                     SM_OK);
    bert_workspace_free(ws);
    be->destroy(be);
}

/* Saved and loaded back, the model classifies the same; its probabilities
 * are softmax(encoder logits + wide logits), each computed apart, with and
 * without windows (the wide part reads the whole text either way). */
static void test_model_round_trip_and_sum(void **state)
{
    (void)state;
    char err[SM_ERR_MAX], *config = NULL;
    void *st = NULL;
    size_t st_len = 0;
    bert_model *m = with_wide(), *back = NULL;
    int K = m->cfg.num_labels;
    save_model(m, &config, &st, &st_len);
    assert_non_null(strstr(config, "\"wide\""));
    char *vocab = NULL;
    const char *vname;
    size_t vlen;
    assert_int_equal(bert_model_tokenizer_file(m, &vname, &vocab, &vlen, err), SM_OK);
    assert_int_equal(bert_model_load_buffers(config, strlen(config), vocab, vlen, st, st_len,
                                             &back, err),
                     SM_OK);
    assert_non_null(back->wide);
    assert_int_equal(back->wide->cfg.buckets, 4099);
    assert_memory_equal(back->wide->weight, m->wide->weight,
                        (size_t)K * 4099 * sizeof(float));
    assert_memory_equal(back->wide->idf, m->wide->idf, 4099 * sizeof(float));
    assert_int_equal(bert_model_num_params(back), m->n_floats + (size_t)K * 4099 + K + 4099);

    for (int windows = 0; windows <= 8; windows += 8) {
        float p1[N_TEXTS * 8], p2[N_TEXTS * 8], enc[N_TEXTS * 8];
        classify(m, windows, p1);
        classify(back, windows, p2);
        assert_memory_equal(p1, p2, sizeof(float) * N_TEXTS * K);
        /* by hand: the encoder alone (log-probabilities are its logits up
         * to a shift), plus the wide logits */
        wide_part *w = m->wide;
        m->wide = NULL;
        classify(m, windows, enc);
        m->wide = w;
        float z[N_TEXTS * 8] = {0};
        size_t lens[N_TEXTS];
        for (int i = 0; i < N_TEXTS; i++) lens[i] = strlen(k_texts[i]);
        assert_int_equal(wide_add_logits_texts(w, k_texts, lens, N_TEXTS, z, NULL, NULL, err),
                         SM_OK);
        for (int i = 0; i < N_TEXTS; i++) {
            double s = 0, zz[8];
            for (int k = 0; k < K; k++) s += exp(zz[k] = log(enc[i * K + k]) + z[i * K + k]);
            for (int k = 0; k < K; k++)
                if (fabs(exp(zz[k]) / s - p1[i * K + k]) > 1e-5)
                    fail_msg("windows %d text %d p[%d] %.7g, by hand %.7g", windows, i, k,
                             p1[i * K + k], exp(zz[k]) / s);
        }
    }
    free(vocab);
    free(config);
    free(st);
    bert_model_free(back);
    bert_model_free(m);
}

/* Saved with a broken wide part, the model is refused, saying why. */
static void test_corrupt_wide_tensors(void **state)
{
    (void)state;
    char err[SM_ERR_MAX], *config = NULL, *vocab = NULL;
    const char *vname;
    void *st = NULL;
    size_t st_len = 0, vlen;
    bert_model *m = with_wide(), *back = NULL;
    assert_int_equal(bert_model_tokenizer_file(m, &vname, &vocab, &vlen, err), SM_OK);

    /* a NaN weight is refused when saving */
    float keep = m->wide->weight[17];
    m->wide->weight[17] = NAN;
    assert_int_equal(bert_model_save_safetensors(m, 0, &st, &st_len, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "tensor 'wide.weight' has a NaN at element 17"));
    m->wide->weight[17] = keep;

    save_model(m, &config, &st, &st_len);
    /* the config says 4099 buckets; a config that says 4098 does not fit */
    char *p = strstr(config, "\"buckets\": 4099");
    assert_non_null(p);
    p[14] = '8';
    assert_int_not_equal(bert_model_load_buffers(config, strlen(config), vocab, vlen, st, st_len,
                                                 &back, err),
                         SM_OK);
    assert_non_null(strstr(err, "tensor 'wide.weight': expected shape [2, 4098], got [2, 4099]"));
    /* without the wide key, the wide tensors are unexpected */
    char *w = strstr(config, "\"wide\"");
    assert_non_null(w);
    memcpy(w, "\"wid_\"", 6);
    assert_int_not_equal(bert_model_load_buffers(config, strlen(config), vocab, vlen, st, st_len,
                                                 &back, err),
                         SM_OK);
    assert_non_null(strstr(err, "unexpected tensor 'wide."));
    free(config);
    free(st);

    /* a config with a wide part and no wide tensors */
    wide_part *wp = m->wide;
    m->wide = NULL;
    sm_wide_config keepc = m->cfg.wide;
    m->cfg.wide.set = 0;
    save_model(m, &config, &st, &st_len);
    m->cfg.wide = keepc;
    char *fixed = NULL;
    assert_int_equal(bert_config_to_json(&m->cfg, &fixed, err), SM_OK);
    assert_int_not_equal(bert_model_load_buffers(fixed, strlen(fixed), vocab, vlen, st, st_len,
                                                 &back, err),
                         SM_OK);
    assert_non_null(strstr(err, "missing tensor 'wide.weight'"));
    m->wide = wp;
    free(fixed);
    free(config);
    free(st);
    free(vocab);
    bert_model_free(m);
}

static int stop_now(void *user)
{
    (*(int *)user)++;
    return 1;
}

/* A text of 8 MB with invalid bytes is counted in time linear in it, each
 * n-gram once; a stop callback ends it. */
static void test_huge_text_and_stop(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    size_t n = 8u << 20;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++) text[i] = (char)(i % 3 == 2 ? 0xff : 'a' + i % 5);
    sm_wide_config c;
    sm_wide_config_default(&c);
    ngram_counts *nc = NULL;
    assert_int_equal(ngram_counts_create(&c, &nc, err), SM_OK);
    assert_int_equal(ngram_count_text(&c, text, n, nc, NULL, NULL, err), SM_OK);
    uint64_t total = 0;
    for (int t = 0; t < nc->n_touched; t++) total += nc->count[t];
    assert_true(total == 3 * (uint64_t)n - 3); /* n code points: n + (n-1) + (n-2) */
    int calls = 0;
    assert_int_equal(ngram_count_text(&c, text, n, nc, stop_now, &calls, err),
                     SM_ERR_INTERRUPTED);
    assert_int_equal(calls, 1);
    assert_int_equal(nc->n_touched, 0);
    ngram_counts_free(nc);
    free(text);
}

/* The mix: a, c and d recovered from logits made with known ones. */
static void test_mix_fit(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    enum { N = 4000, K = 2 };
    float *enc = malloc(N * K * sizeof *enc), *wide = malloc(N * K * sizeof *wide);
    int *labels = malloc(N * sizeof *labels);
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        double z[K], mx, sum = 0;
        for (int k = 0; k < K; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            enc[i * K + k] = (float)((double)(s >> 11) / 9007199254740992.0 * 6 - 3);
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            wide[i * K + k] = (float)((double)(s >> 11) / 9007199254740992.0 * 6 - 3);
            z[k] = 0.6 * enc[i * K + k] + 1.7 * wide[i * K + k] + (k ? 0.4 : 0.0);
        }
        mx = z[0] > z[1] ? z[0] : z[1];
        for (int k = 0; k < K; k++) sum += exp(z[k] - mx);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) / 9007199254740992.0;
        labels[i] = u < exp(z[0] - mx) / sum ? 0 : 1;
    }
    double a, c, d[K];
    assert_int_equal(wide_fit_mix(enc, wide, labels, N, K, &a, &c, d, err), SM_OK);
    assert_float_equal(a, 0.6, 0.1);
    assert_float_equal(c, 1.7, 0.2);
    assert_float_equal(d[1] - d[0], 0.4, 0.15);
    labels[3] = 5;
    assert_int_equal(wide_fit_mix(enc, wide, labels, N, K, &a, &c, d, err), SM_ERR_INVALID);
    free(labels);
    free(wide);
    free(enc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_golden),
        cmocka_unit_test(test_features_golden),
        cmocka_unit_test(test_logits_golden),
        cmocka_unit_test(test_grad_golden),
        cmocka_unit_test(test_fit_matches_sklearn),
        cmocka_unit_test(test_grad_finite_differences),
        cmocka_unit_test(test_config_round_trip_and_refusals),
        cmocka_unit_test(test_model_round_trip_and_sum),
        cmocka_unit_test(test_corrupt_wide_tensors),
        cmocka_unit_test(test_huge_text_and_stop),
        cmocka_unit_test(test_mix_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

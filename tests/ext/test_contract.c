/* test_contract.c: the promises every function makes about its inputs and
 * results, each bad input a named test.
 *
 *   blank_*       text that tokenizes to nothing (NUL, controls, format
 *                 characters, invalid UTF-8, ...) is NULL everywhere: the
 *                 scalar functions, classify, sentiment_batch, and skipped
 *                 by sentiment_evaluate and train()
 *   not_blank_*   text that does make tokens is still classified, and the
 *                 definition matches what the tokenizer makes
 *   nonfinite_*   a model file with a NaN or infinite weight (F32, F16,
 *                 BF16) is refused at load with the tensor and element;
 *                 such a model is never serialised
 *   json_*        JSON results carry SQLite's JSON subtype, so they nest
 *   precision_*   sentiment_config('precision', ...) on a connection that
 *                 already ran a model takes effect (int8 needs AVX512-VNNI)
 *
 * The model fixtures with bad weights are written by the test into a
 * temporary directory from tests/fixtures/models/bert_tiny.
 */
#include "cpu/backend_cpu.h"
#include "support/ext_test_util.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/rng.h"
#include "encoder/bert.h"
#include "format/safetensors.h"

static void *read_file(const char *path, size_t *len);

/* ------------------------------------------------------------ blank text */

typedef struct blank_case {
    const char *name;
    const char *expr; /* SQL expression for the text */
} blank_case;

static const blank_case k_blank[] = {
    {"blank_nul", "CAST(x'00' AS TEXT)"},
    {"blank_nuls", "CAST(x'000000' AS TEXT)"},
    {"blank_controls", "char(1, 2, 3)"},
    {"blank_vertical_tab_form_feed", "char(11, 12)"},
    {"blank_del", "char(127)"},
    {"blank_c1_control", "char(0x85, 0x9f)"},
    {"blank_zero_width_space", "char(0x200b)"},
    {"blank_zero_width_joiners", "char(0x200c, 0x200d, 0x2060)"},
    {"blank_bom", "char(0xfeff)"},
    {"blank_soft_hyphen", "char(0xad)"},
    {"blank_bidi_marks", "char(0x200e, 0x200f, 0x202e)"},
    {"blank_line_separators", "char(0x2028, 0x2029)"},
    {"blank_private_use", "char(0xe000, 0xf8ff)"},
    {"blank_unassigned", "char(0x0378)"},
    {"blank_replacement_char", "char(0xfffd)"},
    {"blank_invalid_utf8_text", "CAST(x'fffe80' AS TEXT)"},
    {"blank_invalid_utf8_blob", "x'c0afff'"},
    {"blank_nul_blob", "x'0000'"},
    {"blank_zwsp_blob", "x'e2808b'"},
    {"blank_combining_marks_only", "char(0x301, 0x302)"},
    {"blank_mixed_space_and_controls",
     "' ' || char(0, 9, 0x200b, 0x3000, 0xa0) || CAST(x'00' AS TEXT) || char(10)"},
    {"blank_tag_characters", "char(0xe0001, 0xe0041)"},
};
#define N_BLANK (sizeof k_blank / sizeof *k_blank)

/* Runs SELECT <sql> with %s replaced by the case's expression. */
static int is_null_with(sqlite3 *db, const char *fmt, const char *expr)
{
    char sql[1024];
    snprintf(sql, sizeof sql, fmt, expr, expr, expr);
    return q_is_null(db, sql);
}

static void check_null(sqlite3 *db, const char *fmt, const char *expr)
{
    if (!is_null_with(db, fmt, expr)) {
        char sql[1024];
        snprintf(sql, sizeof sql, fmt, expr, expr, expr);
        fail_msg("not NULL: %s", sql);
    }
}

static void test_blank(void **state)
{
    const blank_case *bc = *state;
    const char *x = bc->expr;
    sqlite3 *db = open_db();
    char sql[1024];
    load_tiny(db);

    /* the scalar functions, with the default and a named model */
    check_null(db, "SELECT sentiment(%s)", x);
    check_null(db, "SELECT sentiment(%s, 'tiny')", x);
    check_null(db, "SELECT sentiment_score(%s)", x);
    check_null(db, "SELECT sentiment_score(%s, 'tiny')", x);
    check_null(db, "SELECT sentiment_probs(%s)", x);
    check_null(db, "SELECT sentiment_probs(%s, 'tiny')", x);
    check_null(db, "SELECT sentiment_tokens(%s)", x);
    check_null(db, "SELECT sentiment_tokens(%s, 'tiny')", x);

    /* classify: the row is there, with NULL label, score and probs */
    exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, body)");
    snprintf(sql, sizeof sql, "INSERT INTO t VALUES (1, '服务很好'), (2, %s), (3, '太差了')", x);
    exec_ok(db, sql);
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'tiny')", "3");
    expect_text(db, "SELECT group_concat(id) FROM classify('t', 'body', 'tiny') "
                    "WHERE label IS NULL AND score IS NULL AND probs IS NULL", "2");
    expect_text(db, "SELECT group_concat(id) FROM classify('SELECT id, body FROM t', 'tiny') "
                    "WHERE label IS NULL", "2");
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'tiny') WHERE label IS NOT NULL",
                "2");

    /* the window form */
    expect_text(db, "SELECT group_concat(id) FROM (SELECT id, sentiment_batch(body, 'tiny') "
                    "OVER (ROWS BETWEEN CURRENT ROW AND 255 FOLLOWING) AS l FROM t) "
                    "WHERE l IS NULL", "2");

    /* sentiment_evaluate skips it */
    expect_text(db, "SELECT json_extract(r, '$.rows') || ',' || json_extract(r, '$.skipped') "
                    "FROM (SELECT sentiment_evaluate(body, 'positive', 'tiny') AS r FROM t)",
                "2,1");
    sqlite3_close(db);
}

/* train() skips every blank row and counts it. */
static void test_blank_train_skips(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    char sql[1024];
    load_tiny(db);
    exec_ok(db, "CREATE TABLE d(t, y)");
    exec_ok(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40) "
                "INSERT INTO d SELECT CASE WHEN i % 2 THEN '服务很好' ELSE '太差了' END || i, "
                "CASE WHEN i % 2 THEN 'positive' ELSE 'negative' END FROM n");
    for (size_t i = 0; i < N_BLANK; i++) {
        snprintf(sql, sizeof sql, "INSERT INTO d VALUES (%s, 'positive')", k_blank[i].expr);
        exec_ok(db, sql);
    }
    char *r = q_text(db, "SELECT train('m', t, y, '{\"base\":\"tiny\",\"epochs\":1,\"seed\":3}') "
                         "FROM d");
    assert_non_null(r);
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, '$.rows'), json_extract(?1, '$.skipped')");
    sqlite3_bind_text(st, 1, r, -1, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 40);
    assert_int_equal(sqlite3_column_int(st, 1), (int)N_BLANK);
    sqlite3_finalize(st);
    free(r);
    /* and evaluate over the same rows */
    snprintf(sql, sizeof sql, "SELECT json_extract(sentiment_evaluate(t, y, 'm'), '$.skipped') FROM d");
    assert_int_equal(q_int(db, sql), (int64_t)N_BLANK);
    sqlite3_close(db);
}

/* Text with one character that makes a token is classified. */
static void test_not_blank(void **state)
{
    (void)state;
    static const char *const k_texts[] = {
        "'a'", "'好'", "'[UNK]'", "'e' || char(0x301)", "char(0x1f600)", "char(0, 0x597d, 0)",
        "char(0x200b) || 'x'", "'.'", "char(0x301) || 'a'",
    };
    sqlite3 *db = open_db();
    load_tiny(db);
    for (size_t i = 0; i < sizeof k_texts / sizeof *k_texts; i++) {
        if (is_null_with(db, "SELECT sentiment(%s, 'tiny')", k_texts[i]))
            fail_msg("NULL for %s", k_texts[i]);
        if (is_null_with(db, "SELECT sentiment_tokens(%s, 'tiny')", k_texts[i]))
            fail_msg("no tokens for %s", k_texts[i]);
    }
    /* a NUL inside text is dropped, the rest classified as without it */
    expect_text(db, "SELECT sentiment_probs('服务' || char(0) || '很好', 'tiny') = "
                    "sentiment_probs('服务很好', 'tiny')", "1");
    expect_text(db, "SELECT sentiment_tokens(char(0x200b) || '好' || char(1), 'tiny')", "[\"好\"]");
    sqlite3_close(db);
}

/* The definition, checked against the tokenizer itself: on random strings
 * drawn from characters of every class, tokenizer_text_blank says 1
 * exactly when a lower-casing tokenizer makes no token, and a cased one
 * makes none either unless the text has a combining mark. */
static void test_blank_matches_tokenizer(void **state)
{
    (void)state;
    static const char *const k_pieces[] = {
        "", " ", "\t", "\n", "\r", "\x0b", "\x01", "\x7f", "\xc2\x85", "\xc2\xa0",
        "\xc2\xad", "\xcc\x81", "\xcd\x84", "\xe2\x80\x8b", "\xe2\x80\x8d",
        "\xe2\x80\xa8", "\xe3\x80\x80", "\xef\xbb\xbf", "\xef\xbf\xbd", "\xee\x80\x80",
        "\xff", "\xe5\xbe", "\xc0\xaf", "\xed\xa0\x80", "\xf3\xa0\x80\x81",
        "a", "Z", ".", "[", "[UNK]", "\xe5\xa5\xbd", "\xc3\xa9", "\xf0\x9f\x98\x80",
    };
    const int n_pieces = (int)(sizeof k_pieces / sizeof *k_pieces);
    char err[SM_ERR_MAX], text[256];
    size_t vlen;
    void *vocab = read_file(TINY_MODEL "/vocab.txt", &vlen);
    tokenizer *lower = NULL, *cased = NULL;
    assert_int_equal(tokenizer_load_buffer(vocab, vlen, 1, &lower, err), SM_OK);
    assert_int_equal(tokenizer_load_buffer(vocab, vlen, 0, &cased, err), SM_OK);
    free(vocab);
    uint64_t stream = 0, rng = rng_next(&stream);
    int blanks = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = 0;
        int marks = 0, k = 1 + (int)((rng >> 60) & 7);
        for (int j = 0; j < k; j++) {
            rng = rng_next(&stream);
            /* mostly characters that make no token, so blanks are common */
            int pick = (int)((rng >> 33) % (uint64_t)(iter % 4 ? 25 : n_pieces));
            size_t pl = strlen(k_pieces[pick]);
            memcpy(text + len, k_pieces[pick], pl);
            len += pl;
            marks |= pick == 11 || pick == 12;
        }
        int n_lower = -1, n_cased = -1;
        assert_int_equal(tokenizer_tokenize(lower, text, len, NULL, 0, &n_lower, err), SM_OK);
        assert_int_equal(tokenizer_tokenize(cased, text, len, NULL, 0, &n_cased, err), SM_OK);
        int blank = tokenizer_text_blank(text, len);
        blanks += blank;
        if (blank != (n_lower == 0))
            fail_msg("blank %d but %d tokens (lower-casing) for %zu bytes", blank, n_lower, len);
        if (!marks && blank != (n_cased == 0))
            fail_msg("blank %d but %d tokens (cased) for %zu bytes", blank, n_cased, len);
    }
    assert_true(blanks > 1000);
    tokenizer_free(lower);
    tokenizer_free(cased);
}

/* ------------------------------------------------------ non-finite weights */

static char g_tmp[64];

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Writes g_tmp/<name>/ : the tiny model's config and vocab, and its weights
 * as dtype with element `elem` of tensor `tensor` set to the bit pattern
 * `bits` (F32: 32 bits, F16/BF16: 16). */
static void write_bad_model(const char *name, st_dtype dtype, const char *tensor, size_t elem,
                            uint32_t bits)
{
    char err[SM_ERR_MAX], dir[256], path[320];
    bert_model *m = NULL;
    void *w = NULL;
    size_t w_len = 0, len;
    safetensors st = {0};

    assert_int_equal(bert_model_load_dir(TINY_MODEL, &m, err), SM_OK);
    assert_int_equal(bert_model_save_safetensors(m, dtype, &w, &w_len, err), SM_OK);
    bert_model_free(m);
    assert_int_equal(safetensors_open_buffer(w, w_len, &st, err), SM_OK);
    const st_tensor *t = safetensors_find(&st, tensor);
    if (!t) fail_msg("no tensor %s", tensor);
    assert_true((int64_t)elem < t->numel);
    size_t width = dtype == ST_F32 ? 4 : 2;
    uint8_t *p = (uint8_t *)w + (size_t)(t->data - st.base) + elem * width;
    for (size_t i = 0; i < width; i++) p[i] = (uint8_t)(bits >> (8 * i));
    safetensors_close(&st);

    snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
    assert_int_equal(mkdir(dir, 0700), 0);
    static const char *const k_copy[] = {"config.json", "vocab.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, TINY_MODEL "/%s", k_copy[i]);
        void *b = read_file(path, &len);
        snprintf(path, sizeof path, "%s/%s", dir, k_copy[i]);
        write_file(path, b, len);
        free(b);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, w, w_len);
    free(w);
}

typedef struct nonfinite_case {
    const char *name;
    st_dtype dtype;
    const char *tensor;
    size_t elem;
    uint32_t bits;
    const char *want; /* in the error */
} nonfinite_case;

static const nonfinite_case k_nonfinite[] = {
    {"nonfinite_f32_nan_classifier_weight", ST_F32, "classifier.weight", 17, 0x7FC00000u,
     "tensor 'classifier.weight' has a NaN at element 17"},
    {"nonfinite_f32_inf_encoder_ffn", ST_F32, "bert.encoder.layer.1.intermediate.dense.weight",
     5000, 0x7F800000u,
     "tensor 'bert.encoder.layer.1.intermediate.dense.weight' has an infinite value (+inf) at "
     "element 5000"},
    {"nonfinite_f32_neg_inf_word_embeddings", ST_F32, "bert.embeddings.word_embeddings.weight", 0,
     0xFF800000u,
     "tensor 'bert.embeddings.word_embeddings.weight' has an infinite value (-inf) at element 0"},
    {"nonfinite_f32_signalling_nan_pooler", ST_F32, "bert.pooler.dense.weight", 4095, 0x7F800001u,
     "tensor 'bert.pooler.dense.weight' has a NaN at element 4095"},
    {"nonfinite_f32_negative_nan_bias", ST_F32, "classifier.bias", 1, 0xFFC00000u,
     "tensor 'classifier.bias' has a NaN at element 1"},
    {"nonfinite_f16_nan_classifier_weight", ST_F16, "classifier.weight", 17, 0x7E00u,
     "tensor 'classifier.weight' has a NaN at element 17"},
    {"nonfinite_f16_inf_layernorm", ST_F16, "bert.encoder.layer.0.output.LayerNorm.weight", 63,
     0x7C00u,
     "tensor 'bert.encoder.layer.0.output.LayerNorm.weight' has an infinite value (+inf) at "
     "element 63"},
    {"nonfinite_f16_neg_inf_query", ST_F16, "bert.encoder.layer.0.attention.self.query.weight",
     100, 0xFC00u,
     "tensor 'bert.encoder.layer.0.attention.self.query.weight' has an infinite value (-inf) at "
     "element 100"},
    {"nonfinite_bf16_nan_position_embeddings", ST_BF16,
     "bert.embeddings.position_embeddings.weight", 7, 0x7FC0u,
     "tensor 'bert.embeddings.position_embeddings.weight' has a NaN at element 7"},
    {"nonfinite_bf16_inf_classifier_bias", ST_BF16, "classifier.bias", 0, 0x7F80u,
     "tensor 'classifier.bias' has an infinite value (+inf) at element 0"},
};
#define N_NONFINITE (sizeof k_nonfinite / sizeof *k_nonfinite)

static int tmp_setup(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/sentiment-contract-XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int tmp_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_nonfinite(void **state)
{
    const nonfinite_case *nc = *state;
    char sql[512], err[SM_ERR_MAX];
    bert_model *m = NULL;

    write_bad_model(nc->name, nc->dtype, nc->tensor, nc->elem, nc->bits);
    /* the C loader */
    snprintf(sql, sizeof sql, "%s/%s", g_tmp, nc->name);
    assert_int_equal(bert_model_load_dir(sql, &m, err), SM_ERR_FORMAT);
    assert_null(m);
    if (!strstr(err, nc->want)) fail_msg("'%s' lacks '%s'", err, nc->want);
    /* and from SQL: an error, nothing registered */
    sqlite3 *db = open_db();
    snprintf(sql, sizeof sql, "SELECT sentiment_load('bad', '%s/%s')", g_tmp, nc->name);
    expect_error(db, sql, nc->want);
    expect_error(db, sql, "sentiment_load()");
    expect_text(db, "SELECT count(*) FROM sentiment_models WHERE name = 'bad'", "0");
    expect_error(db, "SELECT sentiment('好', 'bad')", "no model named 'bad'");
    sqlite3_close(db);
}

/* The same files with finite extremes load: the check is for NaN and
 * infinity only. */
static void test_finite_extremes_load(void **state)
{
    (void)state;
    static const struct { const char *name; st_dtype dtype; uint32_t bits; } k[] = {
        {"ok_f32_max", ST_F32, 0x7F7FFFFFu},        /* FLT_MAX */
        {"ok_f32_denormal", ST_F32, 0x00000001u},
        {"ok_f16_max", ST_F16, 0x7BFFu},            /* 65504 */
        {"ok_bf16_neg_max", ST_BF16, 0xFF7Fu},
    };
    sqlite3 *db = open_db();
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        char sql[512];
        write_bad_model(k[i].name, k[i].dtype, "bert.pooler.dense.bias", 3, k[i].bits);
        snprintf(sql, sizeof sql, "SELECT sentiment_load('%s', '%s/%s') IS NOT NULL", k[i].name,
                 g_tmp, k[i].name);
        expect_text(db, sql, "1");
    }
    sqlite3_close(db);
}

/* A model whose weights went non-finite (training that diverged) is never
 * serialised, so neither train() nor sentiment_save() can store it. */
static void test_nonfinite_save_refused(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    bert_model *m = NULL;
    void *w = NULL;
    size_t w_len = 0;
    static const st_dtype k_dt[] = {ST_F32, ST_F16, ST_BF16};

    assert_int_equal(bert_model_load_dir(TINY_MODEL, &m, err), SM_OK);
    m->p.cls_w[5] = NAN;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(bert_model_save_safetensors(m, k_dt[i], &w, &w_len, err), SM_ERR_FORMAT);
        assert_null(w);
        assert_non_null(strstr(err, "tensor 'classifier.weight' has a NaN at element 5"));
    }
    m->p.cls_w[5] = 0.f;
    m->p.layers[1].ffn_out_b[2] = -INFINITY;
    assert_int_equal(bert_model_save_safetensors(m, ST_F32, &w, &w_len, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "tensor 'bert.encoder.layer.1.output.dense.bias' has an "
                                "infinite value (-inf) at element 2"));
    m->p.layers[1].ffn_out_b[2] = 0.f;
    assert_int_equal(bert_model_save_safetensors(m, ST_F32, &w, &w_len, err), SM_OK);
    free(w);
    bert_model_free(m);
}

/* bert_check_finite on its own: every position in a block, and lengths
 * around the block size. */
static void test_nonfinite_check_positions(void **state)
{
    (void)state;
    char err[SM_ERR_MAX], want[64];
    static const size_t k_n[] = {1, 1023, 1024, 1025, 5000};
    for (size_t k = 0; k < sizeof k_n / sizeof *k_n; k++) {
        size_t n = k_n[k];
        float *x = calloc(n, sizeof *x);
        assert_non_null(x);
        assert_int_equal(bert_check_finite("x", x, n, err), SM_OK);
        size_t at[] = {0, n / 2, n - 1};
        for (int j = 0; j < 3; j++) {
            x[at[j]] = NAN;
            assert_int_equal(bert_check_finite("x", x, n, err), SM_ERR_FORMAT);
            snprintf(want, sizeof want, "has a NaN at element %zu", at[j]);
            assert_non_null(strstr(err, want));
            x[at[j]] = 0.f;
        }
        free(x);
    }
    assert_int_equal(bert_check_finite("x", NULL, 0, err), SM_OK);
}

/* ------------------------------------------------------------ JSON subtype */

static void test_json_subtype(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    load_tiny(db);
    expect_text(db, "SELECT json_object('p', sentiment_probs('服务很好', 'tiny')) LIKE "
                    "'{\"p\":{\"negative\":%,\"positive\":%}}'", "1");
    expect_text(db, "SELECT json_object('p', sentiment_probs('服务很好')) LIKE '{\"p\":{%}}'", "1");
    expect_text(db, "SELECT json_object('t', sentiment_tokens('服务', 'tiny'))",
                "{\"t\":[\"服\",\"务\"]}");
    expect_text(db, "SELECT json_array(sentiment_tokens('好', 'tiny'))", "[[\"好\"]]");
    expect_text(db, "SELECT json_type(json_object('d', sentiment_debug()), '$.d')", "object");
    expect_text(db, "SELECT json_object('p', probs) LIKE '{\"p\":{\"negative\":%}}' "
                    "FROM classify('SELECT 1, ''服务很好''', 'tiny')", "1");
    expect_text(db, "SELECT json_object('l', labels) FROM sentiment_models WHERE name = 'tiny'",
                "{\"l\":[\"negative\",\"positive\"]}");
    expect_text(db, "SELECT json_type(json_object('e', sentiment_evaluate(t, 'positive', "
                    "'tiny')), '$.e') FROM (SELECT '服务很好' AS t)", "object");
    /* the empty aggregate too */
    expect_text(db, "SELECT json_type(json_object('e', sentiment_evaluate(t, 'positive', "
                    "'tiny')), '$.e') FROM (SELECT 1 AS t WHERE 0)", "object");
    exec_ok(db, "CREATE TABLE d(t, y)");
    exec_ok(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20) "
                "INSERT INTO d SELECT '服务很好' || i, CASE WHEN i % 2 THEN 'positive' "
                "ELSE 'negative' END FROM n");
    expect_text(db, "SELECT json_type(json_object('r', train('m', t, y, "
                    "'{\"base\":\"tiny\",\"epochs\":1}')), '$.r') FROM d", "object");
    expect_text(db, "SELECT json_type(json_object('m', metrics), '$.m') FROM sentiment_models "
                    "WHERE name = 'm'", "object");
    /* the text itself is unchanged */
    expect_text(db, "SELECT typeof(sentiment_probs('好', 'tiny'))", "text");
    sqlite3_close(db);
}

/* ------------------------------------------------------------ precision */

static char *probs_of(sqlite3 *db, const char *model)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT sentiment_probs('这家酒店很干净，服务也很周到'%s%s%s)",
             model ? ", '" : "", model ? model : "", model ? "'" : "");
    return q_text(db, sql);
}

static void expect_same(const char *what, const char *a, const char *b)
{
    if (strcmp(a, b)) fail_msg("%s: '%s' != '%s'", what, a, b);
}

/* What a fresh connection configured with precision p first answers. */
static char *fresh_probs(const char *precision, const char *model)
{
    char sql[128];
    sqlite3 *db = open_db();
    snprintf(sql, sizeof sql, "SELECT sentiment_config('precision', '%s')", precision);
    exec_ok(db, sql);
    load_tiny(db);
    char *p = probs_of(db, model);
    sqlite3_close(db);
    return p;
}

static void test_precision_switch(void **state)
{
    (void)state;
    if (!backend_cpu_pack_native(BACKEND_PACK_INT8)) {
        print_message("skipped: this CPU has no AVX512-VNNI, so precision int8 is refused "
                      "(test_ext_functions checks that error)\n");
        skip();
    }
    char *int8_tiny = fresh_probs("int8", "tiny");
    char *fp32_tiny = fresh_probs("fp32", "tiny");
    assert_true(strcmp(int8_tiny, fp32_tiny) != 0);

    /* auto (fp32 for a file model) -> int8 after a run: the reported bug */
    sqlite3 *db = open_db();
    load_tiny(db);
    char *a = probs_of(db, "tiny");
    expect_same("auto before the switch", a, fp32_tiny);
    exec_ok(db, "SELECT sentiment_config('precision', 'int8')");
    char *b = probs_of(db, "tiny");
    expect_same("int8 after a run", b, int8_tiny);
    expect_text(db, "SELECT sentiment_device() LIKE '%, int8 (AVX512-VNNI)'", "1");
    /* classify and the window form use the new precision too */
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT probs FROM classify('SELECT 1, ''这家酒店很干净，服务也很周到''', "
                              "'tiny')");
    char *c = q_text(db, sql);
    expect_same("classify after the switch", c, int8_tiny);
    /* and back */
    exec_ok(db, "SELECT sentiment_config('precision', 'auto')");
    char *d = probs_of(db, "tiny");
    expect_same("auto after int8", d, fp32_tiny);
    exec_ok(db, "SELECT sentiment_config('precision', 'int8')");
    free(b);
    b = probs_of(db, "tiny");
    expect_same("int8 again", b, int8_tiny);
    exec_ok(db, "SELECT sentiment_config('precision', 'fp32')");
    free(d);
    d = probs_of(db, "tiny");
    expect_same("fp32 after int8", d, fp32_tiny);
    sqlite3_close(db);
    free(a);
    free(b);
    free(c);
    free(d);

    /* the built-in model: fp32 -> int8 after a run */
    db = open_db();
    if (q_int(db, "SELECT json_extract(sentiment_debug(), '$.builtin_model')")) {
        char *bi_int8 = fresh_probs("int8", NULL), *bi_fp32 = fresh_probs("fp32", NULL);
        exec_ok(db, "SELECT sentiment_config('precision', 'fp32')");
        a = probs_of(db, NULL);
        expect_same("built-in fp32", a, bi_fp32);
        exec_ok(db, "SELECT sentiment_config('precision', 'int8')");
        b = probs_of(db, NULL);
        expect_same("built-in int8 after a run", b, bi_int8);
        exec_ok(db, "SELECT sentiment_config('precision', 'auto')");
        c = probs_of(db, NULL);
        expect_same("built-in auto (int8 on this CPU)", c, bi_int8);
        free(a);
        free(b);
        free(c);
        free(bi_int8);
        free(bi_fp32);
    }
    sqlite3_close(db);
    free(int8_tiny);
    free(fp32_tiny);
}

int main(void)
{
    struct CMUnitTest tests[N_BLANK + N_NONFINITE + 16];
    size_t n = 0;
    for (size_t i = 0; i < N_BLANK; i++)
        tests[n++] = (struct CMUnitTest){k_blank[i].name, test_blank, NULL, NULL,
                                         (void *)&k_blank[i]};
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_blank_train_skips);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_not_blank);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_blank_matches_tokenizer);
    for (size_t i = 0; i < N_NONFINITE; i++)
        tests[n++] = (struct CMUnitTest){k_nonfinite[i].name, test_nonfinite, NULL, NULL,
                                         (void *)&k_nonfinite[i]};
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_finite_extremes_load);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_nonfinite_save_refused);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_nonfinite_check_positions);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_json_subtype);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_precision_switch);
    return _cmocka_run_group_tests("contract", tests, n, tmp_setup, tmp_teardown);
}

/* test_ext_embed.c: sentence embeddings from SQL: sentiment_embed() and
 * classify's embedding column, through the SQLite C API.
 *
 * Checked: the golden embeddings of tests/fixtures/gen_embed_golden.py
 * (transformers + sentence-transformers' pooling) within 1e-4 for every
 * variant, prompt or none, decoded from the BLOB's bytes as little-endian
 * float32 (4 x dim bytes); the batched form (classify over a table, several
 * batch sizes, NULL and blank rows among them) equals one-at-a-time;
 * NULL, blank, invalid UTF-8 and huge text; wrong argument types; stored,
 * saved, exported and fine-tuned models keep their pooling setting.
 */
#include "support/ext_test_util.h"

#include <math.h>
#include <sys/stat.h>

#include "support/embed_test_util.h"

#define TOL 1e-4
#define ENCODER "tests/fixtures/models/bert_encoder"

/* Decodes a little-endian float32 BLOB; returns its element count. */
static int decode(const void *blob, int bytes, float *out, int cap)
{
    const unsigned char *b = blob;
    assert_int_equal(bytes % 4, 0);
    int n = bytes / 4;
    assert_true(n <= cap);
    for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                     (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
        memcpy(&out[i], &u, sizeof u);
    }
    return n;
}

/* The embedding a query's first column holds (a BLOB), decoded. */
static int q_embedding(sqlite3 *db, const char *sql, float *out, int cap)
{
    sqlite3_stmt *st = prepare(db, sql);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) fail_msg("no row: %s\n  %s", sqlite3_errmsg(db), sql);
    if (sqlite3_column_type(st, 0) != SQLITE_BLOB) fail_msg("not a BLOB: %s", sql);
    int n = decode(sqlite3_column_blob(st, 0), sqlite3_column_bytes(st, 0), out, cap);
    sqlite3_finalize(st);
    return n;
}

static double max_diff(const float *a, const float *b, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

/* Every golden row through sentiment_embed(text, model, prompt), texts
 * bound as parameters. */
static void test_golden(void **state)
{
    (void)state;
    static embed_golden g;
    char dir[256], sql[512];
    if (embed_golden_load(&g)) fail_msg("cannot read %s", EMBED_GOLDEN);
    sqlite3 *db = open_db();
    double worst = 0;
    char loaded[32] = "";
    int rows = 0;
    for (int i = 0; i < g.n; i++) {
        const embed_row *r = &g.rows[i];
        if (strcmp(loaded, r->variant)) {
            if (*loaded) embed_dir_remove(dir);
            assert_int_equal(embed_variant_dir(r->variant, r->encoder, dir, sizeof dir), 0);
            snprintf(sql, sizeof sql, "SELECT sentiment_load('v', '%s')", dir);
            exec_ok(db, sql);
            snprintf(loaded, sizeof loaded, "%s", r->variant);
        }
        sqlite3_stmt *st = prepare(db, "SELECT sentiment_embed(?1, 'v', ?2)");
        sqlite3_bind_text(st, 1, r->text, (int)r->text_len, SQLITE_STATIC);
        if (r->prompt_len) sqlite3_bind_text(st, 2, r->prompt, (int)r->prompt_len, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_type(st, 0), SQLITE_BLOB);
        /* 4 bytes per dimension */
        assert_int_equal(sqlite3_column_bytes(st, 0), 4 * r->dim);
        float got[EMBED_MAX_DIM];
        assert_int_equal(decode(sqlite3_column_blob(st, 0), sqlite3_column_bytes(st, 0), got,
                                EMBED_MAX_DIM),
                         r->dim);
        double d = max_diff(got, r->emb, r->dim);
        if (!(d < TOL)) fail_msg("%s row %d: max diff %g", r->variant, i, d);
        worst = d > worst ? d : worst;
        sqlite3_finalize(st);
        rows++;
    }
    embed_dir_remove(dir);
    print_message("sentiment_embed: %d golden rows, max |ours - golden| %.2e\n", rows, worst);
    sqlite3_close(db);
    embed_golden_free(&g);
}

/* The byte layout: element 0 is the first 4 bytes, least significant byte
 * first; the float a sqlite-vec-style reader sees is the one we made. */
static void test_blob_layout(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('enc', '" ENCODER "')");
    expect_text(db, "SELECT typeof(sentiment_embed('好', 'enc'))", "blob");
    expect_text(db, "SELECT length(sentiment_embed('好', 'enc'))", "256");
    float v[64];
    q_embedding(db, "SELECT sentiment_embed('好', 'enc')", v, 64);
    /* byte 0..3 as hex, rebuilt from the float's bits */
    uint32_t u;
    memcpy(&u, &v[0], 4);
    char want[16];
    snprintf(want, sizeof want, "%02X%02X%02X%02X", u & 0xff, (u >> 8) & 0xff, (u >> 16) & 0xff,
             u >> 24);
    expect_text(db, "SELECT hex(substr(sentiment_embed('好', 'enc'), 1, 4))", want);
    /* the default model embeds too (its hidden size) */
    int64_t n = q_int(db, "SELECT length(sentiment_embed('房间很干净'))");
    assert_true(n > 0 && n % 4 == 0);
    sqlite3_close(db);
}

static void test_null_blank_invalid(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('enc', '" ENCODER "')");
    static const char *const blank[] = {"NULL", "''", "'   '", "char(9, 10, 13)", "char(0x200b)",
                                        "char(0xfeff, 0x3000)", "x''", "CAST(x'ff' AS TEXT)",
                                        "x'00'", "char(1, 2, 3)"};
    for (size_t i = 0; i < sizeof blank / sizeof *blank; i++) {
        char sql[160];
        snprintf(sql, sizeof sql, "SELECT sentiment_embed(%s, 'enc')", blank[i]);
        if (!q_is_null(db, sql)) fail_msg("not NULL: %s", sql);
        /* a prompt does not make blank text an embedding */
        snprintf(sql, sizeof sql, "SELECT sentiment_embed(%s, 'enc', 'query: ')", blank[i]);
        if (!q_is_null(db, sql)) fail_msg("not NULL: %s", sql);
        /* NULL text is NULL before the other arguments are looked at */
        snprintf(sql, sizeof sql, "SELECT sentiment_embed(%s, 'nope', 7)", blank[i]);
        if (!q_is_null(db, sql)) fail_msg("not NULL: %s", sql);
    }
    /* invalid UTF-8 is repaired (U+FFFD, dropped as BertTokenizer does) */
    expect_text(db, "SELECT sentiment_embed(CAST('ok' || x'ff' AS TEXT), 'enc') = "
                    "sentiment_embed('ok', 'enc')",
                "1");
    expect_text(db, "SELECT sentiment_embed(x'e5a5bd', 'enc') = sentiment_embed('好', 'enc')", "1");
    /* numbers embed as their text */
    expect_text(db, "SELECT sentiment_embed(42, 'enc') = sentiment_embed('42', 'enc')", "1");
    expect_text(db, "SELECT sentiment_embed(4.5, 'enc') = sentiment_embed('4.5', 'enc')", "1");
    /* huge text: truncated to max_length (64 tokens here), counted */
    int64_t before = debug_int(db, "$.connection.truncated");
    expect_text(db, "SELECT length(sentiment_embed(replace(hex(zeroblob(500000)), '0', '好 '), "
                    "'enc'))",
                "256");
    assert_int_equal(debug_int(db, "$.connection.truncated"), before + 1);
    /* and equals the embedding of its first 62 tokens */
    expect_text(db, "SELECT sentiment_embed(replace(hex(zeroblob(500000)), '0', '好 '), 'enc') = "
                    "sentiment_embed(replace(hex(zeroblob(31)), '0', '好'), 'enc')",
                "1");
    sqlite3_close(db);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('enc', '" ENCODER "')");
    expect_error(db, "SELECT sentiment_embed('好', NULL)",
                 "sentiment_embed(): model name is NULL; expected a name from sentiment_models");
    expect_error(db, "SELECT sentiment_embed('好', 'nope')",
                 "sentiment_embed(): no model named 'nope'; known: ");
    expect_error(db, "SELECT sentiment_embed('好', 'enc' || char(0) || 'x')",
                 "sentiment_embed(): model name contains a NUL byte");
    expect_error(db, "SELECT sentiment_embed('好', 'enc', 5)",
                 "sentiment_embed(): prompt must be TEXT such as 'query: ' (or NULL), got an integer");
    expect_error(db, "SELECT sentiment_embed('好', 'enc', 0.5)",
                 "sentiment_embed(): prompt must be TEXT such as 'query: ' (or NULL), got a real");
    expect_error(db, "SELECT sentiment_embed('好', 'enc', x'71')",
                 "sentiment_embed(): prompt must be TEXT such as 'query: ' (or NULL), got a blob");
    expect_error(db, "SELECT sentiment_embed('好', 'enc', 'q' || char(0) || ': ')",
                 "sentiment_embed(): prompt contains a NUL byte");
    expect_error(db, "SELECT sentiment_embed('好', 'enc', hex(zeroblob(3000)))",
                 "sentiment_embed(): prompt is 6000 bytes; at most 4096 are accepted");
    expect_error(db, "SELECT sentiment_embed()", "wrong number of arguments");
    expect_error(db, "SELECT sentiment_embed('a', 'enc', 'p', 4)", "wrong number of arguments");
    /* a NULL prompt is no prompt; a prompt is text before the text */
    expect_text(db, "SELECT sentiment_embed('好', 'enc', NULL) = sentiment_embed('好', 'enc')", "1");
    expect_text(db, "SELECT sentiment_embed('好', 'enc', 'query: ') = "
                    "sentiment_embed('query: 好', 'enc')",
                "1");
    expect_text(db, "SELECT sentiment_embed('好', 'enc', 'query: ') = sentiment_embed('好', 'enc')",
                "0");
    sqlite3_close(db);
}

/* classify's embedding column equals sentiment_embed row for row, for
 * several batch sizes, with NULL and blank rows in between; NULL rows get
 * NULL. */
static void test_batched_equals_single(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    char dir[256], sql[512];
    assert_int_equal(embed_variant_dir("bert_mean_norm", ENCODER, dir, sizeof dir), 0);
    snprintf(sql, sizeof sql, "SELECT sentiment_load('st', '%s')", dir);
    exec_ok(db, sql);
    int n = make_reviews(db);
    static const char *const batch_sizes[] = {"1", "3", "7", "64"};
    for (int threads = 1; threads <= 2; threads++) {
        snprintf(sql, sizeof sql, "SELECT sentiment_config('threads', %d)", threads);
        exec_ok(db, sql);
        for (size_t b = 0; b < sizeof batch_sizes / sizeof *batch_sizes; b++) {
            double worst = 0;
            int nulls = 0;
            snprintf(sql, sizeof sql,
                     "SELECT c.id, c.embedding, sentiment_embed(t.body, 'st'), c.truncated "
                     "FROM classify('t', 'body', 'st', %s) c JOIN t ON t.id = c.id",
                     batch_sizes[b]);
            sqlite3_stmt *st = prepare(db, sql);
            int rows = 0;
            while (sqlite3_step(st) == SQLITE_ROW) {
                rows++;
                int t1 = sqlite3_column_type(st, 1), t2 = sqlite3_column_type(st, 2);
                assert_int_equal(t1, t2);
                if (t1 == SQLITE_NULL) {
                    assert_int_equal(sqlite3_column_type(st, 3), SQLITE_NULL);
                    nulls++;
                    continue;
                }
                float a[64], s[64];
                assert_int_equal(decode(sqlite3_column_blob(st, 1), sqlite3_column_bytes(st, 1), a, 64), 64);
                assert_int_equal(decode(sqlite3_column_blob(st, 2), sqlite3_column_bytes(st, 2), s, 64), 64);
                double d = max_diff(a, s, 64);
                worst = d > worst ? d : worst;
            }
            sqlite3_finalize(st);
            assert_int_equal(rows, n);
            assert_int_equal(nulls, 4); /* NULL, '', '   ', U+3000 */
            if (!(worst < 1e-5)) fail_msg("batch %s: batched differs by %g", batch_sizes[b], worst);
        }
    }
    /* a query source with the prompt put before the text in SQL: the 16
     * texts as with the prompt argument (a blank text is not blank once
     * the prompt is before it: only the argument keeps it NULL) */
    expect_text(db, "SELECT count(*) FROM classify('SELECT id, ''query: '' || body FROM t', 'st') c "
                    "JOIN t ON t.id = c.id WHERE c.embedding = sentiment_embed(t.body, 'st', 'query: ')",
                "16");
    /* id = ? on a persistent table */
    exec_ok(db, "CREATE VIRTUAL TABLE emb USING classify(t, body, st)");
    expect_text(db, "SELECT embedding = sentiment_embed(body, 'st') FROM emb JOIN t USING (id) "
                    "WHERE id = 5",
                "1");
    /* a headless encoder: embedding alone runs no head; label needs one */
    expect_text(db, "SELECT count(embedding) FROM classify('t', 'body', 'st')", "16");
    expect_error(db, "SELECT label, embedding FROM classify('t', 'body', 'st')",
                 "classify(): the model has no classification head");
    /* a sixth argument is not an embedding */
    expect_error(db, "SELECT * FROM classify('t', 'body', 'st', 4, 'truncate', 'x')",
                 "classify(): too many arguments on classify() - max 5 (source, column, "
                 "model, batch_size, long_text); embedding is a result column, not an argument");
    expect_error(db, "SELECT * FROM classify('t', 'body', 'st', 4, 'windows', 5)",
                 "classify(): too many arguments on classify() - max 5 (source, column, "
                 "model, batch_size, long_text); embedding is a result column, not an argument");
    /* comparing embedding with a BLOB filters, as for any column */
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'st') WHERE embedding = x'00'", "0");
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'st') "
                    "WHERE embedding = sentiment_embed('外卖送得太慢了，饭都凉了，差评。', 'st')",
                "1");
    /* SELECT * does not include it (hidden) */
    expect_text(db, "SELECT count(*) FROM pragma_table_xinfo('emb') WHERE name = 'embedding' AND hidden", "1");
    /* a model with a head: labels and embeddings together */
    load_tiny(db);
    expect_text(db, "SELECT count(*) FROM classify('t', 'body', 'tiny', 4) c JOIN t USING (id) "
                    "WHERE c.label = sentiment(t.body, 'tiny') AND "
                    "c.embedding = sentiment_embed(t.body, 'tiny')",
                "16");
    embed_dir_remove(dir);
    sqlite3_close(db);
}

/* Stored, saved, exported and fine-tuned models keep the setting. */
static void test_store_export_train(void **state)
{
    (void)state;
    char dir[256], sql[1024], out[300];
    assert_int_equal(embed_variant_dir("bert_cls", ENCODER, dir, sizeof dir), 0);
    sqlite3 *db = open_db();
    snprintf(sql, sizeof sql, "SELECT sentiment_load('st', '%s')", dir);
    exec_ok(db, sql);
    exec_ok(db, "SELECT sentiment_load('plain', '" ENCODER "')");
    /* CLS pooling differs from the default mean */
    expect_text(db, "SELECT sentiment_embed('好的', 'st') = sentiment_embed('好的', 'plain')", "0");
    expect_text(db, "SELECT sentiment_save('st_saved', 'st')", "1");
    expect_text(db, "SELECT json_extract(config, '$.embedding_pooling') FROM sentiment_model_store "
                    "WHERE name = 'st_saved'",
                "{\"mode\":\"cls\",\"normalize\":false}");
    expect_text(db, "SELECT sentiment_embed('好的', 'st_saved') = sentiment_embed('好的', 'st')", "1");
    /* a plain model is stored without the key */
    exec_ok(db, "SELECT sentiment_save('plain_saved', 'plain')");
    expect_text(db, "SELECT json_type(config, '$.embedding_pooling') IS NULL FROM "
                    "sentiment_model_store WHERE name = 'plain_saved'",
                "1");

    /* export: modules.json and 1_Pooling/config.json come back; the
     * exported directory loads with the same embeddings */
    snprintf(out, sizeof out, "%s/exported", dir);
    snprintf(sql, sizeof sql, "SELECT sentiment_export('st_saved', '%s')", out);
    exec_ok(db, sql);
    char path[400];
    struct stat sb;
    snprintf(path, sizeof path, "%s/modules.json", out);
    assert_int_equal(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", out);
    assert_int_equal(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/2_Normalize", out);
    assert_int_not_equal(stat(path, &sb), 0); /* not normalised */
    snprintf(sql, sizeof sql, "SELECT sentiment_load('back', '%s')", out);
    exec_ok(db, sql);
    expect_text(db, "SELECT sentiment_embed('好的', 'back') = sentiment_embed('好的', 'st')", "1");
    /* a plain model's export has none of them */
    snprintf(out, sizeof out, "%s/exported_plain", dir);
    snprintf(sql, sizeof sql, "SELECT sentiment_export('plain_saved', '%s')", out);
    exec_ok(db, sql);
    snprintf(path, sizeof path, "%s/modules.json", out);
    assert_int_not_equal(stat(path, &sb), 0);

    /* train(): a new head on the encoder; the result keeps the pooling */
    exec_ok(db, "CREATE TABLE lab(text TEXT, label TEXT)");
    exec_ok(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 24) "
                "INSERT INTO lab SELECT CASE WHEN i % 2 THEN '很好 很满意 ' || i ELSE "
                "'太差 失望 ' || i END, CASE WHEN i % 2 THEN 'good' ELSE 'bad' END FROM n");
    expect_text(db, "SELECT json_extract(train('tuned', text, label, "
                    "'{\"base\":\"st\",\"epochs\":2,\"batch_size\":8}'), '$.rows') FROM lab",
                "24");
    expect_text(db, "SELECT sentiment_probs('很好', 'tuned') LIKE '{\"bad\":%,\"good\":%}'", "1");
    expect_text(db, "SELECT json_extract(config, '$.embedding_pooling') FROM sentiment_model_store "
                    "WHERE name = 'tuned'",
                "{\"mode\":\"cls\",\"normalize\":false}");
    expect_text(db, "SELECT length(sentiment_embed('好的', 'tuned'))", "256");
    /* the encoder was trained: its embeddings moved */
    expect_text(db, "SELECT sentiment_embed('很好', 'tuned') = sentiment_embed('很好', 'st')", "0");
    sqlite3_close(db);
    embed_dir_remove(dir);
}

/* A bad pooling config is refused by sentiment_load with the file named. */
static void test_load_errors(void **state)
{
    (void)state;
    char dir[256], sql[512], path[400];
    assert_int_equal(embed_variant_dir("bert_mean_norm", ENCODER, dir, sizeof dir), 0);
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"pooling_mode_max_tokens\": true}", f);
    fclose(f);
    sqlite3 *db = open_db();
    snprintf(sql, sizeof sql, "SELECT sentiment_load('bad', '%s')", dir);
    expect_error(db, sql, "sentiment_load(): ");
    expect_error(db, sql, "1_Pooling/config.json: pooling mode 'pooling_mode_max_tokens' is not "
                          "supported; supported: pooling_mode_cls_token, pooling_mode_mean_tokens");
    expect_error(db, "SELECT sentiment_embed('x', 'bad')", "no model named 'bad'");
    sqlite3_close(db);
    embed_dir_remove(dir);
}

/* sentiment_models: an encoder without a classification head lists no
 * labels and says it is an embedding model; sentiment() on it says why. */
static void test_models_lists_embedding_model(void **state)
{
    (void)state;
    sqlite3 *db = open_db();
    exec_ok(db, "SELECT sentiment_load('enc', '" ENCODER "')");
    load_tiny(db);
    expect_text(db, "SELECT kind FROM sentiment_models WHERE name = 'enc'", "embedding");
    assert_true(q_is_null(db, "SELECT labels FROM sentiment_models WHERE name = 'enc'"));
    expect_text(db, "SELECT kind FROM sentiment_models WHERE name = 'tiny'", "classifier");
    expect_text(db, "SELECT json_array_length(labels) > 0 FROM sentiment_models WHERE name = 'tiny'",
                "1");
    expect_text(db, "SELECT kind FROM sentiment_models WHERE name = 'default'", "classifier");
    expect_error(db, "SELECT sentiment('好', 'enc')", "no classification head");
    sqlite3_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_blob_layout),
        cmocka_unit_test(test_null_blank_invalid),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_batched_equals_single),
        cmocka_unit_test(test_store_export_train),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_models_lists_embedding_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

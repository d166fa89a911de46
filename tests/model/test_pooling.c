/* test_pooling.c: sentence embeddings in model/ (pooling.h,
 * bert_embed_texts) against transformers and sentence-transformers.
 *
 * tests/fixtures/gen_embed_golden.py recorded, for the two tiny encoders in
 * five variants (plain; mean + Normalize; CLS; mean; CLS + Normalize), the
 * embeddings of seven texts with and without the prompt 'query: ', using
 * sentence-transformers' pooling math on transformers' hidden states (and
 * checked them against SentenceTransformer itself). Ours must match within
 * 1e-4 in batches of several sizes and one text at a time, with the same
 * token ids. Also: the parsers of modules.json, 1_Pooling/config.json and
 * the "embedding_pooling" config key on good and hostile input, reading a
 * model directory (missing files, FIFOs, files over the cap), the pooling
 * arithmetic on hand-made states, and the config round trip.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "format/file_read.h"
#include "format/pooling.h"
#include "support/embed_test_util.h"

#define TOL 1e-4

static const char k_modules_norm[] =
    "[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
    "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
    "{\"idx\":2,\"name\":\"2\",\"path\":\"2_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"}]";

#define T_TRANSFORMER "{\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"}"
#define T_POOLING "{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"}"
#define T_NORMALIZE "{\"path\":\"2_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"}"

/* ---- modules.json -------------------------------------------------------- */

static int modules(const char *json, char *path, int *normalize, char *err)
{
    return sm_pooling_parse_modules(json, strlen(json), path, 64, normalize, err);
}

static void expect_modules_error(const char *json, int code, const char *want)
{
    char err[SM_ERR_MAX] = "", path[64];
    int normalize;
    int rc = modules(json, path, &normalize, err);
    if (rc != code || !strstr(err, want))
        fail_msg("modules.json %s: got %d '%s', want %d '%s'", json, rc, err, code, want);
}

static void test_modules_ok(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "", path[64];
    int normalize = -1;
    assert_int_equal(modules(k_modules_norm, path, &normalize, err), SM_OK);
    assert_string_equal(path, "1_Pooling");
    assert_int_equal(normalize, 1);
    assert_int_equal(modules("[" T_TRANSFORMER "," T_POOLING "]", path, &normalize, err), SM_OK);
    assert_int_equal(normalize, 0);
    /* another directory name, and idx/name/extra keys ignored */
    assert_int_equal(modules("[{\"type\":\"sentence_transformers.models.Transformer\",\"x\":[1]},"
                             "{\"type\":\"sentence_transformers.models.Pooling\",\"path\":\"pool-1.a\"}]",
                             path, &normalize, err),
                     SM_OK);
    assert_string_equal(path, "pool-1.a");
}

static void test_modules_bad(void **state)
{
    (void)state;
    expect_modules_error("{}", SM_ERR_FORMAT, "modules.json: expected an array of modules, got an object");
    expect_modules_error("[", SM_ERR_FORMAT, "modules.json: invalid JSON (line 1, column 2)");
    expect_modules_error("", SM_ERR_FORMAT, "modules.json: invalid JSON");
    expect_modules_error("[]", SM_ERR_UNSUPPORTED, "modules.json: the first module must be "
                                                   "'sentence_transformers.models.Transformer'");
    expect_modules_error("[1]", SM_ERR_FORMAT, "modules.json: module 0 must be an object, got 1");
    expect_modules_error("[{}]", SM_ERR_FORMAT, "modules.json: module 0: 'type' must be a string, got nothing");
    expect_modules_error("[{\"type\":7}]", SM_ERR_FORMAT, "'type' must be a string, got 7");
    expect_modules_error("[" T_TRANSFORMER "]", SM_ERR_UNSUPPORTED,
                         "modules.json: no 'sentence_transformers.models.Pooling' module");
    expect_modules_error("[" T_TRANSFORMER "," T_POOLING ","
                         "{\"path\":\"2_Dense\",\"type\":\"sentence_transformers.models.Dense\"}]",
                         SM_ERR_UNSUPPORTED,
                         "modules.json: module 2 is \"sentence_transformers.models.Dense\"; not "
                         "supported (supported: Transformer, Pooling, Normalize)");
    expect_modules_error("[" T_POOLING "," T_TRANSFORMER "]", SM_ERR_UNSUPPORTED,
                         "module 0: expected one Pooling module right after the Transformer");
    expect_modules_error("[" T_TRANSFORMER "," T_TRANSFORMER "," T_POOLING "]", SM_ERR_UNSUPPORTED,
                         "module 1 is a Transformer; only the first module may be one");
    expect_modules_error("[" T_TRANSFORMER "," T_POOLING "," T_POOLING "]", SM_ERR_UNSUPPORTED,
                         "module 2: expected one Pooling module");
    expect_modules_error("[" T_TRANSFORMER "," T_NORMALIZE "," T_POOLING "]", SM_ERR_UNSUPPORTED,
                         "module 1: a Normalize module is supported only last");
    expect_modules_error("[" T_TRANSFORMER "," T_POOLING "," T_NORMALIZE "," T_NORMALIZE "]",
                         SM_ERR_UNSUPPORTED, "module 2: a Normalize module is supported only last");
    expect_modules_error("[{\"path\":\"0_Transformer\",\"type\":\"sentence_transformers.models.Transformer\"},"
                         T_POOLING "]",
                         SM_ERR_UNSUPPORTED,
                         "the Transformer module's files are in '0_Transformer', not in the model "
                         "directory itself; not supported");
    /* a Pooling path that leaves the directory or is not a name */
    static const char *const bad_paths[] = {"\"../1_Pooling\"", "\"/etc\"", "\"a/b\"", "\"..\"",
                                            "\"\"", "\".\"", "5", "\"1 Pooling\""};
    for (size_t i = 0; i < sizeof bad_paths / sizeof *bad_paths; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "[" T_TRANSFORMER ",{\"path\":%s,\"type\":\"sentence_transformers.models.Pooling\"}]",
                 bad_paths[i]);
        expect_modules_error(json, bad_paths[i][0] == '5' ? SM_ERR_FORMAT : SM_ERR_FORMAT,
                             bad_paths[i][0] == '5' ? "module 1: 'path' must be a string, got 5"
                                                    : "the Pooling module's 'path' must be one "
                                                      "directory name inside the model directory");
    }
    expect_modules_error("[" T_TRANSFORMER ",{\"type\":\"sentence_transformers.models.Pooling\"}]",
                         SM_ERR_FORMAT, "the Pooling module's 'path' must be one directory name");
    /* hostile sizes: many modules, deep nesting, a long path */
    size_t cap = 64 + 20 * 60;
    char *many = malloc(cap);
    strcpy(many, "[");
    for (int i = 0; i < 20; i++) strcat(many, i ? "," T_TRANSFORMER : T_TRANSFORMER);
    strcat(many, "]");
    expect_modules_error(many, SM_ERR_FORMAT, "modules.json: 20 modules; at most 16 are read");
    free(many);
    char deep[400];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 199);
    deep[399] = 0;
    expect_modules_error(deep, SM_ERR_FORMAT, "modules.json: invalid JSON");
    char longp[400];
    char name[201];
    memset(name, 'a', 200);
    name[200] = 0;
    snprintf(longp, sizeof longp,
             "[" T_TRANSFORMER ",{\"path\":\"%s\",\"type\":\"sentence_transformers.models.Pooling\"}]",
             name);
    expect_modules_error(longp, SM_ERR_FORMAT, "the Pooling module's 'path' must be one directory name");
}

/* ---- 1_Pooling/config.json ----------------------------------------------- */

static int pool_config(const char *json, sm_pooling *p, char *err)
{
    sm_pooling_default(p);
    return sm_pooling_parse_config(json, strlen(json), "1_Pooling/config.json", p, err);
}

static void expect_config_error(const char *json, int code, const char *want)
{
    char err[SM_ERR_MAX] = "";
    sm_pooling p;
    int rc = pool_config(json, &p, err);
    if (rc != code || !strstr(err, want))
        fail_msg("1_Pooling/config.json %s: got %d '%s', want %d '%s'", json, rc, err, code, want);
}

static void test_pool_config(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    sm_pooling p;
    assert_int_equal(pool_config("{\"word_embedding_dimension\":384,\"pooling_mode_cls_token\":false,"
                                 "\"pooling_mode_mean_tokens\":true,\"pooling_mode_max_tokens\":false,"
                                 "\"include_prompt\":true}",
                                 &p, err),
                     SM_OK);
    assert_int_equal(p.mode, SM_POOL_MEAN);
    assert_int_equal(p.dim, 384);
    assert_int_equal(pool_config("{\"pooling_mode_cls_token\":true,\"pooling_mode_mean_tokens\":null}",
                                 &p, err),
                     SM_OK);
    assert_int_equal(p.mode, SM_POOL_CLS);
    assert_int_equal(p.dim, 0);

    expect_config_error("[]", SM_ERR_FORMAT, "1_Pooling/config.json: expected a JSON object, got an array");
    expect_config_error("{\"pooling_mode_mean_tokens\":true", SM_ERR_FORMAT,
                        "1_Pooling/config.json: invalid JSON (line 1, column 33): unexpected end of input");
    expect_config_error("{}", SM_ERR_FORMAT,
                        "1_Pooling/config.json: no pooling mode is true; expected "
                        "pooling_mode_cls_token or pooling_mode_mean_tokens");
    expect_config_error("{\"pooling_mode_mean_tokens\":\"yes\"}", SM_ERR_FORMAT,
                        "'pooling_mode_mean_tokens' must be true or false, got \"yes\"");
    expect_config_error("{\"pooling_mode_cls_token\":1}", SM_ERR_FORMAT,
                        "'pooling_mode_cls_token' must be true or false, got 1");
    expect_config_error("{\"pooling_mode_max_tokens\":true}", SM_ERR_UNSUPPORTED,
                        "1_Pooling/config.json: pooling mode 'pooling_mode_max_tokens' is not "
                        "supported; supported: pooling_mode_cls_token, pooling_mode_mean_tokens");
    expect_config_error("{\"pooling_mode_lasttoken\":true}", SM_ERR_UNSUPPORTED,
                        "pooling mode 'pooling_mode_lasttoken' is not supported");
    expect_config_error("{\"pooling_mode_weightedmean_tokens\":true}", SM_ERR_UNSUPPORTED,
                        "pooling mode 'pooling_mode_weightedmean_tokens' is not supported");
    expect_config_error("{\"pooling_mode_mean_sqrt_len_tokens\":true}", SM_ERR_UNSUPPORTED,
                        "pooling mode 'pooling_mode_mean_sqrt_len_tokens' is not supported");
    expect_config_error("{\"pooling_mode_cls_token\":true,\"pooling_mode_mean_tokens\":true,"
                        "\"pooling_mode_max_tokens\":true}",
                        SM_ERR_UNSUPPORTED,
                        "1_Pooling/config.json: several pooling modes are true "
                        "(pooling_mode_cls_token, pooling_mode_mean_tokens, "
                        "pooling_mode_max_tokens): their concatenation is not supported; set "
                        "exactly one");
    expect_config_error("{\"pooling_mode_mean_tokens\":true,\"include_prompt\":false}",
                        SM_ERR_UNSUPPORTED,
                        "'include_prompt' false (pooling without the prompt's tokens) is not "
                        "supported");
    expect_config_error("{\"pooling_mode_mean_tokens\":true,\"include_prompt\":\"no\"}",
                        SM_ERR_FORMAT, "'include_prompt' must be true or false, got \"no\"");
    static const char *const bad_dims[] = {"\"64\"", "0", "-3", "64.5", "65537", "1e300",
                                           "99999999999999999"};
    for (size_t i = 0; i < sizeof bad_dims / sizeof *bad_dims; i++) {
        char json[160], want[160];
        snprintf(json, sizeof json, "{\"pooling_mode_mean_tokens\":true,"
                                    "\"word_embedding_dimension\":%s}", bad_dims[i]);
        snprintf(want, sizeof want, "'word_embedding_dimension' must be an integer from 1 to "
                                    "65536, got %s", bad_dims[i]);
        expect_config_error(json, SM_ERR_FORMAT, i == 5 ? "'word_embedding_dimension' must be "
                                                          "an integer from 1 to 65536, got"
                                                        : want);
    }
}

/* ---- the config.json key ------------------------------------------------- */

static int key_parse(const char *json, sm_pooling *p, char *err)
{
    json_in_doc *doc = NULL;
    json_in_error je;
    assert_int_equal(json_in_parse(json, strlen(json), &doc, &je), SM_OK);
    int rc = sm_pooling_from_json(json_in_root(doc), p, err);
    json_in_free(doc);
    return rc;
}

static void test_config_key(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    sm_pooling p;
    assert_int_equal(key_parse("{\"mode\":\"cls\",\"normalize\":true}", &p, err), SM_OK);
    assert_true(p.set && p.mode == SM_POOL_CLS && p.normalize);
    assert_int_equal(key_parse("{\"mode\":\"mean\"}", &p, err), SM_OK);
    assert_true(p.set && p.mode == SM_POOL_MEAN && !p.normalize);
    assert_int_equal(key_parse("{\"mode\":\"max\"}", &p, err), SM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "config.json: 'embedding_pooling': mode \"max\" is not supported; "
                                "expected \"mean\" or \"cls\""));
    assert_int_equal(key_parse("{\"normalize\":true}", &p, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "'mode' must be \"mean\" or \"cls\", got nothing"));
    assert_int_equal(key_parse("{\"mode\":\"mean\",\"normalize\":1}", &p, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "'normalize' must be true or false, got 1"));
    assert_int_equal(key_parse("\"mean\"", &p, err), SM_ERR_FORMAT);
    assert_non_null(strstr(err, "config.json: 'embedding_pooling' must be an object"));

    /* through bert_config_parse, and written back by bert_config_to_json */
    static const char cfg_json[] =
        "{\"vocab_size\":100,\"hidden_size\":8,\"num_hidden_layers\":1,"
        "\"num_attention_heads\":2,\"intermediate_size\":16,\"max_position_embeddings\":16,"
        "\"embedding_pooling\":{\"mode\":\"cls\",\"normalize\":true}}";
    bert_config cfg, back;
    char *text = NULL;
    assert_int_equal(bert_config_parse(cfg_json, strlen(cfg_json), &cfg, err), SM_OK);
    assert_true(cfg.pooling.set && cfg.pooling.mode == SM_POOL_CLS && cfg.pooling.normalize);
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_OK);
    assert_non_null(strstr(text, "\"embedding_pooling\""));
    assert_int_equal(bert_config_parse(text, strlen(text), &back, err), SM_OK);
    assert_true(back.pooling.set && back.pooling.mode == SM_POOL_CLS && back.pooling.normalize);
    free(text);
    bert_config_free(&back);
    /* without a setting nothing is written */
    cfg.pooling.set = 0;
    assert_int_equal(bert_config_to_json(&cfg, &text, err), SM_OK);
    assert_null(strstr(text, "embedding_pooling"));
    free(text);
    bert_config_free(&cfg);
    static const char bad_cfg[] =
        "{\"vocab_size\":100,\"hidden_size\":8,\"num_hidden_layers\":1,"
        "\"num_attention_heads\":2,\"intermediate_size\":16,\"max_position_embeddings\":16,"
        "\"embedding_pooling\":{\"mode\":\"weightedmean\"}}";
    assert_int_equal(bert_config_parse(bad_cfg, strlen(bad_cfg), &cfg, err), SM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "mode \"weightedmean\" is not supported"));
}

/* The files an export writes read back as the same setting. */
static void test_files_round_trip(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "", path[64];
    for (int mode = 0; mode < 2; mode++)
        for (int norm = 0; norm < 2; norm++) {
            sm_pooling p = {1, (sm_pool_mode)mode, norm, 0}, q;
            char *mj = NULL, *pj = NULL;
            int normalize = -1;
            assert_int_equal(sm_pooling_files(&p, 384, &mj, &pj, err), SM_OK);
            assert_int_equal(sm_pooling_parse_modules(mj, strlen(mj), path, sizeof path,
                                                      &normalize, err),
                             SM_OK);
            assert_string_equal(path, SM_POOLING_DIR);
            assert_int_equal(normalize, norm);
            sm_pooling_default(&q);
            assert_int_equal(sm_pooling_parse_config(pj, strlen(pj), "x", &q, err), SM_OK);
            assert_int_equal(q.mode, mode);
            assert_int_equal(q.dim, 384);
            free(mj);
            free(pj);
        }
}

/* ---- the arithmetic ------------------------------------------------------ */

static void test_pool_math(void **state)
{
    (void)state;
    /* 3 tokens of 2 channels, then padding that must not count */
    const float h[5 * 2] = {1, 2, 3, -4, 5, 8, 1e6f, -1e6f, NAN, NAN};
    float out[2];
    sm_pooling p;
    sm_pooling_default(&p);
    sm_pool_sequence(&p, h, 3, 2, out);
    assert_float_equal(out[0], 3.0f, 1e-7);
    assert_float_equal(out[1], 2.0f, 1e-7);
    p.mode = SM_POOL_CLS;
    sm_pool_sequence(&p, h, 3, 2, out);
    assert_float_equal(out[0], 1.0f, 0);
    assert_float_equal(out[1], 2.0f, 0);
    p.normalize = 1;
    sm_pool_sequence(&p, h, 3, 2, out);
    assert_float_equal(out[0], 1.0 / sqrt(5.0), 1e-7);
    assert_float_equal(out[1], 2.0 / sqrt(5.0), 1e-7);
    p.mode = SM_POOL_MEAN;
    sm_pool_sequence(&p, h, 3, 2, out);
    assert_float_equal(out[0], 3.0 / sqrt(13.0), 1e-7);
    assert_float_equal(out[1], 2.0 / sqrt(13.0), 1e-7);
    /* a zero vector stays zero (norm clamped to 1e-12, as torch) */
    const float z[4] = {0, 0, 0, 0};
    sm_pool_sequence(&p, z, 2, 2, out);
    assert_true(out[0] == 0.0f && out[1] == 0.0f);
}

/* ---- reading a model directory ------------------------------------------- */

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void expect_load_error(const char *dir, const char *want)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(dir, &m, err);
    if (rc == SM_OK || m || !strstr(err, want))
        fail_msg("loading %s: got %d '%s', want '%s'", dir, rc, err, want);
}

static void test_read_dir(void **state)
{
    (void)state;
    char dir[256], path[512], err[SM_ERR_MAX] = "";
    sm_pooling p;
    int found = -1;
    assert_int_equal(embed_variant_dir("bert_plain", "tests/fixtures/models/bert_encoder", dir,
                                       sizeof dir),
                     0);
    /* no modules.json: the default, and the model loads with it */
    assert_int_equal(sm_pooling_read_dir(dir, &p, &found, err), SM_OK);
    assert_int_equal(found, 0);
    assert_true(!p.set && p.mode == SM_POOL_MEAN && !p.normalize);
    bert_model *m = NULL;
    assert_int_equal(bert_model_load_dir(dir, &m, err), SM_OK);
    assert_false(m->cfg.pooling.set);
    bert_model_free(m);

    /* modules.json without its pooling config */
    write_text(dir, "modules.json", k_modules_norm);
    assert_int_equal(sm_pooling_read_dir(dir, &p, &found, err), SM_ERR_IO);
    assert_non_null(strstr(err, "1_Pooling/config.json"));
    expect_load_error(dir, "1_Pooling/config.json': No such file or directory");

    snprintf(path, sizeof path, "%s/1_Pooling", dir);
    assert_int_equal(mkdir(path, 0777), 0);
    write_text(dir, "1_Pooling/config.json", "{\"pooling_mode_cls_token\":true,"
                                             "\"word_embedding_dimension\":64}");
    assert_int_equal(sm_pooling_read_dir(dir, &p, &found, err), SM_OK);
    assert_true(found && p.set && p.mode == SM_POOL_CLS && p.normalize && p.dim == 64);
    assert_int_equal(bert_model_load_dir(dir, &m, err), SM_OK);
    assert_true(m->cfg.pooling.set && m->cfg.pooling.mode == SM_POOL_CLS && m->cfg.pooling.normalize);
    bert_model_free(m);

    /* errors name the file: a dimension that is not the hidden size, bad
     * JSON, an unsupported mode */
    write_text(dir, "1_Pooling/config.json", "{\"pooling_mode_cls_token\":true,"
                                             "\"word_embedding_dimension\":384}");
    expect_load_error(dir, "1_Pooling/config.json: word_embedding_dimension 384, but the "
                           "encoder's hidden_size is 64");
    write_text(dir, "1_Pooling/config.json", "{\"pooling_mode_max_tokens\":true}");
    expect_load_error(dir, "1_Pooling/config.json: pooling mode 'pooling_mode_max_tokens' is "
                           "not supported");
    write_text(dir, "modules.json", "[{\"type\":\"sentence_transformers.models.Transformer\"},"
                                    "{\"type\":\"sentence_transformers.models.Pooling\","
                                    "\"path\":\"../../etc\"}]");
    expect_load_error(dir, "the Pooling module's 'path' must be one directory name");
    write_text(dir, "modules.json", "[{\"type\":\"sentence_transformers.models.Transformer\"},");
    expect_load_error(dir, "modules.json: invalid JSON (line 1, column 54): unexpected end of input");

    /* not a regular file: a directory, a FIFO (never waits for a writer) */
    snprintf(path, sizeof path, "%s/modules.json", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0777), 0);
    expect_load_error(dir, "modules.json': it is a directory; expected a regular file");
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(mkfifo(path, 0666), 0);
    expect_load_error(dir, "modules.json': it is a FIFO (named pipe); expected a regular file");
    assert_int_equal(unlink(path), 0);
    /* over the cap: refused before reading (a sparse file) */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)SM_FILE_MAX_CONFIG + 1), 0);
    close(fd);
    expect_load_error(dir, "modules.json' is 4.0 MB; at most 4 MB is read");
    write_text(dir, "modules.json", k_modules_norm);
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)1 << 31), 0);
    close(fd);
    expect_load_error(dir, "1_Pooling/config.json' is 2 GB; at most 4 MB is read");
    /* a symlink to a regular file is followed */
    assert_int_equal(unlink(path), 0);
    char target[PATH_MAX + 64];
    assert_non_null(getcwd(target, PATH_MAX));
    strcat(target, "/tests/fixtures/pooling/bert_cls/1_Pooling/config.json");
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(bert_model_load_dir(dir, &m, err), SM_OK);
    assert_int_equal(m->cfg.pooling.mode, SM_POOL_CLS);
    bert_model_free(m);
    embed_dir_remove(dir);
}

/* ---- against the golden embeddings --------------------------------------- */

/* Embeds rows [first, first + n) of g (one variant) with batch_size bs;
 * returns the largest difference from the golden values. */
static double embed_rows(const bert_model *m, backend *be, const embed_golden *g, int first,
                         int n, int bs)
{
    char err[SM_ERR_MAX] = "";
    const char *texts[EMBED_MAX_ROWS];
    size_t lens[EMBED_MAX_ROWS];
    char *joined[EMBED_MAX_ROWS];
    int trunc[EMBED_MAX_ROWS], C = m->cfg.hidden_size;
    for (int i = 0; i < n; i++) {
        const embed_row *r = &g->rows[first + i];
        joined[i] = malloc(r->prompt_len + r->text_len + 1);
        memcpy(joined[i], r->prompt, r->prompt_len);
        memcpy(joined[i] + r->prompt_len, r->text, r->text_len + 1);
        texts[i] = joined[i];
        lens[i] = r->prompt_len + r->text_len;
    }
    float *emb = malloc((size_t)n * C * sizeof *emb);
    for (int i = 0; i < n * C; i++) emb[i] = NAN;
    bert_workspace *ws;
    assert_int_equal(bert_workspace_create(be, &m->cfg, bs, bert_max_length(&m->cfg), &ws, err),
                     SM_OK);
    int rc = bert_embed_texts(m, &m->p, ws, texts, lens, n, 0, bs, emb, trunc, err);
    if (rc) fail_msg("bert_embed_texts: %s", err);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const embed_row *r = &g->rows[first + i];
        assert_int_equal(r->dim, C);
        for (int c = 0; c < C; c++) {
            double d = fabs((double)emb[(size_t)i * C + c] - r->emb[c]);
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
        }
        /* the last text is cut to max_length: the golden ids say so */
        assert_int_equal(trunc[i], r->n_ids == bert_max_length(&m->cfg) &&
                                       r->text_len > 200);
        free(joined[i]);
    }
    free(emb);
    bert_workspace_free(ws);
    return worst;
}

static void test_golden(void **state)
{
    (void)state;
    static embed_golden g;
    char err[SM_ERR_MAX] = "", dir[256];
    backend *be1, *be2;
    if (embed_golden_load(&g)) fail_msg("cannot read %s", EMBED_GOLDEN);
    assert_int_equal(backend_cpu_create(1, &be1, err), SM_OK);
    assert_int_equal(backend_cpu_create(2, &be2, err), SM_OK);
    int variants = 0;
    for (int first = 0; first < g.n;) {
        int n = 1;
        while (first + n < g.n && !strcmp(g.rows[first + n].variant, g.rows[first].variant)) n++;
        const embed_row *r0 = &g.rows[first];
        assert_int_equal(embed_variant_dir(r0->variant, r0->encoder, dir, sizeof dir), 0);
        bert_model *m = NULL;
        if (bert_model_load_dir(dir, &m, err)) fail_msg("%s: %s", r0->variant, err);
        assert_int_equal(m->cfg.pooling.set, strcmp(r0->variant, "bert_plain") != 0);
        /* our tokens are transformers' */
        for (int i = first; i < first + n; i++) {
            const embed_row *r = &g.rows[i];
            int ids[EMBED_MAX_IDS], count = 0, cut = 0;
            char *t = malloc(r->prompt_len + r->text_len + 1);
            memcpy(t, r->prompt, r->prompt_len);
            memcpy(t + r->prompt_len, r->text, r->text_len + 1);
            assert_int_equal(tokenizer_encode(m->tok, t, r->prompt_len + r->text_len,
                                              bert_max_length(&m->cfg), ids, &count, &cut, err),
                             SM_OK);
            assert_int_equal(count, r->n_ids);
            assert_memory_equal(ids, r->ids, (size_t)count * sizeof *ids);
            free(t);
        }
        double all = embed_rows(m, be1, &g, first, n, n);
        double by3 = embed_rows(m, be2, &g, first, n, 3); /* lanes: batches run concurrently */
        double single = 0;
        for (int i = 0; i < n; i++) {
            double d = embed_rows(m, be1, &g, first + i, 1, 1);
            single = d > single ? d : single;
        }
        print_message("%-17s %2d texts: max |ours - golden| one batch %.2e, batches of 3 "
                      "%.2e, one by one %.2e\n",
                      r0->variant, n, all, by3, single);
        assert_true(all < TOL);
        assert_true(by3 < TOL);
        assert_true(single < TOL);
        bert_model_free(m);
        embed_dir_remove(dir);
        variants++;
        first += n;
    }
    assert_int_equal(variants, 5);
    be1->destroy(be1);
    be2->destroy(be2);
    embed_golden_free(&g);
}

/* A model with a head embeds too, and the pooling setting leaves its
 * logits alone. */
static void test_head_model_embeds(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    backend *be;
    assert_int_equal(bert_model_load_dir("tests/fixtures/models/bert_tiny", &m, err), SM_OK);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    bert_workspace *ws;
    assert_int_equal(bert_workspace_create(be, &m->cfg, 2, 16, &ws, err), SM_OK);
    const char *texts[2] = {"好", "太差了"};
    size_t lens[2] = {strlen(texts[0]), strlen(texts[1])};
    float emb[2 * 64], probs[4], probs2[4];
    assert_int_equal(bert_classify_texts(m, &m->p, ws, texts, lens, 2, 16, 2, probs, NULL, err), SM_OK);
    assert_int_equal(bert_embed_texts(m, &m->p, ws, texts, lens, 2, 16, 2, emb, NULL, err), SM_OK);
    m->cfg.pooling = (sm_pooling){1, SM_POOL_CLS, 1, 64};
    assert_int_equal(bert_classify_texts(m, &m->p, ws, texts, lens, 2, 16, 2, probs2, NULL, err), SM_OK);
    assert_memory_equal(probs, probs2, sizeof probs);
    float norm = 0;
    assert_int_equal(bert_embed_texts(m, &m->p, ws, texts, lens, 2, 16, 2, emb, NULL, err), SM_OK);
    for (int c = 0; c < 64; c++) norm += emb[c] * emb[c];
    assert_float_equal(norm, 1.0f, 1e-5);
    bert_workspace_free(ws);
    be->destroy(be);
    bert_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modules_ok),
        cmocka_unit_test(test_modules_bad),
        cmocka_unit_test(test_pool_config),
        cmocka_unit_test(test_config_key),
        cmocka_unit_test(test_files_round_trip),
        cmocka_unit_test(test_pool_math),
        cmocka_unit_test(test_read_dir),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_head_model_embeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_xlmr.c: XLM-RoBERTa models with a tokenizer.json, against transformers.
 *
 * tests/fixtures/gen_xlmr_golden.py made models/xlmr_tiny: a random
 * XLMRobertaForSequenceClassification ("roberta." encoder, one token type,
 * pad id 1, the RobertaClassificationHead as classifier.dense and
 * classifier.out_proj, no pooler) with a SentencePiece Unigram
 * tokenizer.json, the ids and logits transformers computed for a padded
 * batch, and train_xlmr, the gradients and 10 AdamW steps PyTorch took on it.
 *
 * Checked here: ids equal; logits within 1e-4, batched and one text at a
 * time; the same through SQL (sentiment_load, sentiment_probs, classify),
 * after storing in a database (the tokenizer.json as a BLOB) and loading
 * back, after sentiment_use, and after sentiment_export (the exported files
 * are the fixture's: the same tensor names and values, the same
 * tokenizer.json); a database made before the tokenizer column existed;
 * the directory variants a loader meets (an XLMRobertaModel encoder with and
 * without a pooler, the pooler + classifier head this project saved before,
 * a pooler or lm_head next to the head, tokenizer.json next to vocab.txt, a
 * BERT whose only tokenizer is a WordPiece tokenizer.json) and the errors
 * for what is missing or not supported; gradients against PyTorch and
 * finite differences with the RoBERTa head's dropout on; train() on the
 * model and on a head-less encoder. tests/fixtures/check_xlmr_export.py
 * loads exported directories into transformers (run by hand: it needs
 * torch).
 */
#include "cpu/backend_cpu.h"
#include "support/ext_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/rng.h"
#include "encoder/bert.h"
#include "format/safetensors.h"
#include "tokenize/tokenizer.h"
#include "train/bert_train.h"
#include "train/optimizer.h"
#include "train/trainer.h"

#define XLMR "tests/fixtures/models/xlmr_tiny"
#define XLMR_TRAIN "tests/fixtures/train_xlmr"
#define TOL 1e-4
#define MAX_TEXTS 16
#define MAX_IDS 64
#define K 3

/* ---- files ---------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

static void put_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void copy_file(const char *from, const char *dir, const char *name)
{
    size_t n;
    char *b = slurp(from, &n);
    put_file(dir, name, b, n);
    free(b);
}

static int has_file(const char *dir, const char *name)
{
    char path[1024];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0;
}

static char *temp_dir(void)
{
    char tmpl[] = "/tmp/sentiment_xlmr_XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    return strdup(tmpl);
}

/* Removes dir and what is in it (files and one level of directories). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[1024];
    if (!d) return;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) != 0) remove_dir(path);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- the golden batch ------------------------------------------------------ */

typedef struct golden {
    int n;
    char *text[MAX_TEXTS];
    size_t text_len[MAX_TEXTS];
    int ids[MAX_TEXTS][MAX_IDS];
    int n_ids[MAX_TEXTS];
    float logits[MAX_TEXTS][K];
} golden;

static int hexval(int c)
{
    return c <= '9' ? c - '0' : (c | 32) - 'a' + 10;
}

static void golden_load(golden *g)
{
    char line[8192];
    FILE *f = fopen(XLMR "/golden.tsv", "r");
    assert_non_null(f);
    memset(g, 0, sizeof *g);
    while (fgets(line, sizeof line, f)) {
        assert_true(g->n < MAX_TEXTS);
        int i = g->n++, k = 0;
        char *hex = strtok(line, "\t"), *ids = strtok(NULL, "\t"), *outs = strtok(NULL, "\t\n");
        assert_non_null(outs);
        size_t hl = strlen(hex);
        g->text[i] = malloc(hl / 2 + 1);
        for (size_t j = 0; j < hl / 2; j++)
            g->text[i][j] = (char)(hexval(hex[2 * j]) * 16 + hexval(hex[2 * j + 1]));
        g->text[i][hl / 2] = 0;
        g->text_len[i] = hl / 2;
        for (char *t = strtok(ids, " "); t; t = strtok(NULL, " ")) {
            assert_true(g->n_ids[i] < MAX_IDS);
            g->ids[i][g->n_ids[i]++] = atoi(t);
        }
        for (char *t = strtok(outs, " "); t; t = strtok(NULL, " ")) {
            assert_true(k < K);
            g->logits[i][k++] = strtof(t, NULL);
        }
        assert_int_equal(k, K);
    }
    fclose(f);
    assert_true(g->n >= 8);
}

static void golden_free(golden *g)
{
    for (int i = 0; i < g->n; i++) free(g->text[i]);
}

static void softmax3(const float *z, double *p)
{
    double m = fmax(fmax(z[0], z[1]), z[2]), s = 0;
    for (int k = 0; k < K; k++) s += p[k] = exp(z[k] - m);
    for (int k = 0; k < K; k++) p[k] /= s;
}

static bert_model *load_dir_ok(const char *dir)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(dir, &m, err);
    if (rc) fail_msg("loading %s: %s", dir, err);
    return m;
}

static void expect_load_error(const char *dir, const char *want)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(dir, &m, err);
    assert_int_not_equal(rc, SM_OK);
    assert_null(m);
    if (!strstr(err, want)) fail_msg("error '%s'\n  does not contain '%s'", err, want);
}

/* Rows [first, first + B) of g through bert_forward as one padded batch:
 * logits (B,K), or with out_proj given the pooled vectors of a head-less
 * model through it (logits = pooled · Wᵀ + b, computed here). Returns the
 * worst |ours - transformers|. */
static double forward_diff(const bert_model *m, const golden *g, int first, int B,
                           const float *out_w, const float *out_b)
{
    char err[SM_ERR_MAX] = "";
    int T = 0, C = m->cfg.hidden_size, lengths[MAX_TEXTS];
    for (int b = 0; b < B; b++) T = g->n_ids[first + b] > T ? g->n_ids[first + b] : T;
    int *ids = calloc((size_t)B * T, sizeof *ids);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            ids[b * T + t] = t < g->n_ids[first + b] ? g->ids[first + b][t] : 1;
        lengths[b] = g->n_ids[first + b];
    }
    backend *be;
    bert_workspace *ws;
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, B, T, &ws, err), SM_OK);
    float *logits = malloc((size_t)B * K * sizeof *logits);
    float *pooled = malloc((size_t)B * C * sizeof *pooled);
    for (int i = 0; i < B * K; i++) logits[i] = NAN;
    int rc = out_w ? bert_forward(&m->cfg, &m->p, ws, ids, lengths, B, T, NULL, pooled, err)
                   : bert_forward(&m->cfg, &m->p, ws, ids, lengths, B, T, logits, NULL, err);
    if (rc) fail_msg("forward: %s", err);
    if (out_w)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < K; k++) {
                double s = out_b[k];
                for (int c = 0; c < C; c++) s += (double)out_w[k * C + c] * pooled[b * C + c];
                logits[b * K + k] = (float)s;
            }
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) {
            double d = fabs((double)logits[b * K + k] - g->logits[first + b][k]);
            if (!(d <= worst)) worst = d;
        }
    free(pooled);
    free(logits);
    free(ids);
    bert_workspace_free(ws);
    be->destroy(be);
    return worst;
}

/* Batched and one at a time, within TOL. */
static void check_parity(const char *what, const bert_model *m, const float *out_w,
                         const float *out_b)
{
    golden g;
    golden_load(&g);
    double batch = forward_diff(m, &g, 0, g.n, out_w, out_b), single = 0;
    for (int i = 0; i < g.n; i++) {
        double d = forward_diff(m, &g, i, 1, out_w, out_b);
        if (!(d <= single)) single = d;
    }
    print_message("%s: max |ours - transformers| batch %.2e, one by one %.2e\n", what, batch,
                  single);
    assert_true(batch <= TOL);
    assert_true(single <= TOL);
    golden_free(&g);
}

/* ---- the fixture ---------------------------------------------------------- */

static void test_parity(void **state)
{
    (void)state;
    bert_model *m = load_dir_ok(XLMR);
    assert_string_equal(m->cfg.model_type, "xlm-roberta");
    assert_true(m->has_head);
    assert_int_equal(m->cfg.type_vocab_size, 1);
    assert_int_equal(m->cfg.position_offset, 2);
    assert_int_equal(bert_max_length(&m->cfg), 40);
    assert_non_null(m->tokenizer_json);
    check_parity("xlmr_tiny", m, NULL, NULL);
    bert_model_free(m);
}

/* Our tokenizer gives transformers' ids; text in, probabilities out. */
static void test_ids_and_end_to_end(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    golden g;
    golden_load(&g);
    bert_model *m = load_dir_ok(XLMR);
    int truncated_seen = 0;
    for (int i = 0; i < g.n; i++) {
        int ids[MAX_IDS], n = 0, trunc = 0;
        assert_int_equal(tokenizer_encode(m->tok, g.text[i], g.text_len[i], 40, ids, &n, &trunc,
                                          err),
                         SM_OK);
        assert_int_equal(n, g.n_ids[i]);
        assert_memory_equal(ids, g.ids[i], (size_t)n * sizeof *ids);
        truncated_seen += trunc;
    }
    assert_int_equal(truncated_seen, 1);

    backend *be;
    bert_workspace *ws;
    assert_int_equal(backend_cpu_create(2, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 4, 40, &ws, err), SM_OK);
    float probs[MAX_TEXTS * K];
    int truncated[MAX_TEXTS];
    assert_int_equal(bert_classify_texts(m, &m->p, ws, (const char *const *)g.text, g.text_len,
                                         g.n, 0, 4, probs, truncated, err),
                     SM_OK);
    double worst = 0;
    for (int i = 0; i < g.n; i++) {
        double want[K];
        softmax3(g.logits[i], want);
        for (int k = 0; k < K; k++) worst = fmax(worst, fabs(probs[i * K + k] - want[k]));
    }
    print_message("end to end: max |p - softmax(transformers)| %.2e\n", worst);
    assert_true(worst <= TOL);
    bert_workspace_free(ws);
    be->destroy(be);
    bert_model_free(m);
    golden_free(&g);
}

/* What we save is what transformers saved: the same names, shapes and
 * values, and a config that names XLMRobertaForSequenceClassification. */
static void check_same_tensors(const void *bytes, size_t len, const char *fixture_path)
{
    char err[SM_ERR_MAX] = "";
    safetensors a, b;
    assert_int_equal(safetensors_open_buffer(bytes, len, &a, err), SM_OK);
    assert_int_equal(safetensors_open_file(fixture_path, &b, err), SM_OK);
    if (a.n_tensors != b.n_tensors) fail_msg("%d tensors, the fixture has %d", a.n_tensors, b.n_tensors);
    for (int i = 0; i < b.n_tensors; i++) {
        const st_tensor *want = &b.tensors[i], *got = safetensors_find(&a, want->name);
        if (!got) fail_msg("tensor '%s' is not saved", want->name);
        assert_int_equal(got->ndim, want->ndim);
        for (int d = 0; d < want->ndim; d++) assert_int_equal(got->shape[d], want->shape[d]);
        assert_int_equal(got->dtype, ST_F32);
        assert_int_equal(want->dtype, ST_F32);
        assert_memory_equal(got->data, want->data, want->nbytes);
    }
    safetensors_close(&a);
    safetensors_close(&b);
}

static void test_save_writes_transformers_names(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = load_dir_ok(XLMR);
    void *bytes;
    size_t len;
    assert_int_equal(bert_model_save_safetensors(m, ST_F32, &bytes, &len, err), SM_OK);
    check_same_tensors(bytes, len, XLMR "/model.safetensors");
    char *cfg;
    assert_int_equal(bert_config_to_json(&m->cfg, &cfg, err), SM_OK);
    assert_non_null(strstr(cfg, "\"XLMRobertaForSequenceClassification\""));
    assert_non_null(strstr(cfg, "\"model_type\": \"xlm-roberta\""));
    assert_non_null(strstr(cfg, "\"type_vocab_size\": 1"));
    /* the tokenizer file: the tokenizer.json it was read from, unchanged */
    const char *name;
    char *tok;
    size_t tok_len, want_len;
    char *want = slurp(XLMR "/tokenizer.json", &want_len);
    assert_int_equal(bert_model_tokenizer_file(m, &name, &tok, &tok_len, err), SM_OK);
    assert_string_equal(name, "tokenizer.json");
    assert_int_equal(tok_len, want_len);
    assert_memory_equal(tok, want, want_len);
    /* and back from memory: config, tokenizer.json, safetensors */
    bert_files f = {cfg, strlen(cfg), NULL, 0, tok, tok_len, bytes, len};
    bert_model *m2 = NULL;
    assert_int_equal(bert_model_load_files(&f, &m2, err), SM_OK);
    assert_int_equal(m2->n_floats, m->n_floats);
    assert_memory_equal(m2->arena, m->arena, m->n_floats * sizeof *m->arena);
    check_parity("xlmr_tiny saved and loaded from memory", m2, NULL, NULL);
    bert_model_free(m2);
    free(want);
    free(tok);
    free(cfg);
    free(bytes);
    bert_model_free(m);
}

/* ---- directory variants ---------------------------------------------------- */

/* A rename of the fixture's tensors: names starting with `from` get `to`
 * instead of it; to NULL drops them. The first matching rule applies. */
typedef struct rename_rule {
    const char *from, *to;
} rename_rule;

typedef struct extra_tensor {
    const char *name;
    int rows, cols; /* cols 0: a vector */
} extra_tensor;

/* Writes dir/model.safetensors: the fixture's tensors renamed by rules,
 * plus extras (values from a fixed formula). */
static void write_weights(const char *dir, const rename_rule *rules, int n_rules,
                          const extra_tensor *extras, int n_extras)
{
    char err[SM_ERR_MAX] = "", path[512];
    safetensors st;
    assert_int_equal(safetensors_open_file(XLMR "/model.safetensors", &st, err), SM_OK);
    st_write_entry *e = calloc((size_t)(st.n_tensors + n_extras), sizeof *e);
    char (*names)[160] = calloc((size_t)(st.n_tensors + n_extras), sizeof *names);
    float **data = calloc((size_t)(st.n_tensors + n_extras), sizeof *data);
    int n = 0;
    for (int i = 0; i < st.n_tensors; i++) {
        const st_tensor *t = &st.tensors[i];
        const char *to = t->name;
        size_t skip = 0;
        int dropped = 0;
        for (int r = 0; r < n_rules; r++)
            if (!strncmp(t->name, rules[r].from, strlen(rules[r].from))) {
                dropped = !rules[r].to;
                to = rules[r].to;
                skip = strlen(rules[r].from);
                break;
            }
        if (dropped) continue;
        if (to == t->name) snprintf(names[n], sizeof names[n], "%s", t->name);
        else snprintf(names[n], sizeof names[n], "%s%s", to, t->name + skip);
        data[n] = malloc((size_t)t->numel * sizeof(float));
        assert_int_equal(st_tensor_to_f32(t, data[n], err), SM_OK);
        e[n] = (st_write_entry){names[n], data[n], t->ndim, {t->shape[0], t->shape[1]}};
        n++;
    }
    for (int j = 0; j < n_extras; j++) {
        size_t numel = (size_t)extras[j].rows * (extras[j].cols ? (size_t)extras[j].cols : 1);
        data[n] = malloc(numel * sizeof(float));
        for (size_t k = 0; k < numel; k++) data[n][k] = (float)(0.01 * sin(0.7 * (double)k + j));
        snprintf(names[n], sizeof names[n], "%s", extras[j].name);
        e[n] = (st_write_entry){names[n], data[n], extras[j].cols ? 2 : 1,
                                {extras[j].rows, extras[j].cols}};
        n++;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(safetensors_write_file(path, e, n, ST_F32, err), SM_OK);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    free(names);
    free(e);
    safetensors_close(&st);
}

/* The fixture's config.json, with model_type replaced when type is given. */
static void write_config(const char *dir, const char *type)
{
    size_t n;
    char *cfg = slurp(XLMR "/config.json", &n);
    if (type) {
        char *at = strstr(cfg, "\"model_type\": \"xlm-roberta\"");
        assert_non_null(at);
        char *out = malloc(n + 64);
        snprintf(out, n + 64, "%.*s\"model_type\": \"%s\"%s", (int)(at - cfg), cfg, type,
                 at + strlen("\"model_type\": \"xlm-roberta\""));
        put_file(dir, "config.json", out, strlen(out));
        free(out);
    } else {
        put_file(dir, "config.json", cfg, n);
    }
    free(cfg);
}

/* A copy of the fixture's tensor (F32), malloc'd. */
static float *fixture_tensor(const char *name)
{
    char err[SM_ERR_MAX] = "";
    safetensors st;
    assert_int_equal(safetensors_open_file(XLMR "/model.safetensors", &st, err), SM_OK);
    const st_tensor *t = safetensors_find(&st, name);
    assert_non_null(t);
    float *x = malloc((size_t)t->numel * sizeof *x);
    assert_int_equal(st_tensor_to_f32(t, x, err), SM_OK);
    safetensors_close(&st);
    return x;
}

/* An XLMRobertaModel encoder as multilingual-e5 ships one: no prefix, the
 * pooler, no head. Its pooler is the fixture's classifier.dense here, so
 * the fixture's out_proj on the pooled vectors gives the golden logits. */
static void test_encoder_with_pooler(void **state)
{
    (void)state;
    char *dir = temp_dir();
    const rename_rule rules[] = {{"roberta.", ""},
                                 {"classifier.dense.", "pooler.dense."},
                                 {"classifier.out_proj.", NULL}};
    write_config(dir, NULL);
    copy_file(XLMR "/tokenizer.json", dir, "tokenizer.json");
    write_weights(dir, rules, 3, NULL, 0);
    bert_model *m = load_dir_ok(dir);
    assert_false(m->has_head);
    float *w = fixture_tensor("classifier.out_proj.weight"), *b = fixture_tensor("classifier.out_proj.bias");
    check_parity("encoder (no prefix, pooler) + the fixture's out_proj", m, w, b);
    /* saved back as an XLMRobertaModel: "roberta." and the pooler */
    char err[SM_ERR_MAX];
    void *bytes;
    size_t len;
    safetensors st;
    assert_int_equal(bert_model_save_safetensors(m, ST_F32, &bytes, &len, err), SM_OK);
    assert_int_equal(safetensors_open_buffer(bytes, len, &st, err), SM_OK);
    assert_non_null(safetensors_find(&st, "roberta.pooler.dense.weight"));
    assert_null(safetensors_find(&st, "classifier.dense.weight"));
    safetensors_close(&st);
    free(bytes);

    /* a new head on it: classifier.dense is new (not the pooler), as
     * transformers builds XLMRobertaForSequenceClassification on it */
    const char *labels[] = {"a", "b"};
    int kept = 1;
    float *pooler = malloc((size_t)m->cfg.hidden_size * m->cfg.hidden_size * sizeof *pooler);
    memcpy(pooler, m->p.pool_w, (size_t)m->cfg.hidden_size * m->cfg.hidden_size * sizeof *pooler);
    assert_int_equal(trainer_prepare_head(m, 2, labels, 5, &kept, err), SM_OK);
    assert_false(kept);
    assert_true(m->has_head);
    size_t CC = (size_t)m->cfg.hidden_size * m->cfg.hidden_size;
    double ss = 0;
    for (size_t i = 0; i < CC; i++) ss += (double)m->p.pool_w[i] * m->p.pool_w[i];
    assert_memory_not_equal(m->p.pool_w, pooler, CC * sizeof *pooler);
    assert_true(fabs(sqrt(ss / (double)CC) - 0.02) < 0.004); /* normal(0, 0.02) */
    for (int c = 0; c < m->cfg.hidden_size; c++) assert_true(m->p.pool_b[c] == 0.0f);
    bert_param_spec *specs;
    int n;
    size_t total;
    assert_int_equal(bert_param_table(&m->cfg, 1, &specs, &n, &total, err), SM_OK);
    assert_string_equal(specs[n - 4].name, "classifier.dense.weight");
    assert_string_equal(specs[n - 1].name, "classifier.out_proj.bias");
    free(specs);
    free(pooler);
    free(w);
    free(b);
    bert_model_free(m);
    remove_dir(dir);
    free(dir);
}

/* Without the pooler (RobertaModel with add_pooling_layer=False, or a
 * converter that drops it) it loads too, and takes a head. */
static void test_encoder_without_pooler(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    char *dir = temp_dir();
    const rename_rule rules[] = {{"roberta.", ""}, {"classifier.", NULL}};
    write_config(dir, NULL);
    copy_file(XLMR "/tokenizer.json", dir, "tokenizer.json");
    write_weights(dir, rules, 2, NULL, 0);
    bert_model *m = load_dir_ok(dir), *full = load_dir_ok(XLMR);
    assert_false(m->has_head);
    /* the encoder is the fixture's, bit for bit */
    bert_param_spec *specs;
    int n;
    size_t total;
    assert_int_equal(bert_param_table(&m->cfg, 0, &specs, &n, &total, err), SM_OK);
    size_t encoder = specs[n - 2].offset; /* everything before the pooler */
    assert_memory_equal(m->arena, full->arena, encoder * sizeof *m->arena);
    free(specs);
    const char *labels[] = {"x", "y", "z"};
    int kept = 1;
    assert_int_equal(trainer_prepare_head(m, 3, labels, 5, &kept, err), SM_OK);
    assert_false(kept);
    assert_non_null(m->p.cls_w);
    bert_model_free(full);
    bert_model_free(m);
    remove_dir(dir);
    free(dir);
}

/* The head this project wrote for RoBERTa before (the pooler and
 * "classifier.weight") loads into the same slots; a pooler or an MLM head
 * next to the head is ignored, as transformers ignores it; any other
 * tensor is an error; model_type "roberta" loads the same tensors. */
static void test_head_variants(void **state)
{
    (void)state;
    char *dir = temp_dir();
    char err[SM_ERR_MAX];
    write_config(dir, NULL);
    copy_file(XLMR "/tokenizer.json", dir, "tokenizer.json");

    const rename_rule legacy[] = {{"classifier.dense.", "roberta.pooler.dense."},
                                  {"classifier.out_proj.", "classifier."}};
    write_weights(dir, legacy, 2, NULL, 0);
    bert_model *m = load_dir_ok(dir);
    assert_true(m->has_head);
    check_parity("pooler + classifier.weight (the older layout)", m, NULL, NULL);
    void *bytes;
    size_t len;
    assert_int_equal(bert_model_save_safetensors(m, ST_F32, &bytes, &len, err), SM_OK);
    check_same_tensors(bytes, len, XLMR "/model.safetensors"); /* saved as transformers' */
    free(bytes);
    bert_model_free(m);

    const extra_tensor beside[] = {{"roberta.pooler.dense.weight", 32, 32},
                                   {"roberta.pooler.dense.bias", 32, 0},
                                   {"lm_head.dense.weight", 32, 32},
                                   {"lm_head.bias", 386, 0}};
    write_weights(dir, NULL, 0, beside, 4);
    m = load_dir_ok(dir);
    check_parity("a pooler and lm_head next to the head", m, NULL, NULL);
    bert_model_free(m);

    const extra_tensor stray[] = {{"roberta.encoder.layer.0.extra.weight", 4, 0}};
    write_weights(dir, NULL, 0, stray, 1);
    expect_load_error(dir, "unexpected tensor 'roberta.encoder.layer.0.extra.weight' for a "
                           "2-layer xlm-roberta model");
    const rename_rule no_dense[] = {{"classifier.dense.", NULL}};
    write_weights(dir, no_dense, 1, NULL, 0);
    expect_load_error(dir, "missing tensor 'classifier.dense.weight'");

    /* RobertaForSequenceClassification: the same names */
    write_weights(dir, NULL, 0, NULL, 0);
    write_config(dir, "roberta");
    m = load_dir_ok(dir);
    assert_string_equal(m->cfg.model_type, "roberta");
    check_parity("model_type roberta", m, NULL, NULL);
    char *cfg;
    assert_int_equal(bert_config_to_json(&m->cfg, &cfg, err), SM_OK);
    assert_non_null(strstr(cfg, "\"RobertaForSequenceClassification\""));
    free(cfg);
    bert_model_free(m);
    remove_dir(dir);
    free(dir);
}

/* tokenizer.json wins over vocab.txt; a BERT whose only tokenizer is a
 * WordPiece tokenizer.json loads and matches its vocab.txt twin. */
static void test_tokenizer_choice(void **state)
{
    (void)state;
    char *dir = temp_dir();
    copy_file(XLMR "/config.json", dir, "config.json");
    copy_file(XLMR "/model.safetensors", dir, "model.safetensors");
    copy_file(XLMR "/tokenizer.json", dir, "tokenizer.json");
    copy_file(TINY_MODEL "/vocab.txt", dir, "vocab.txt"); /* would fail vocab_size */
    copy_file(XLMR "/tokenizer.json", dir, "sentencepiece.bpe.model"); /* never read */
    bert_model *m = load_dir_ok(dir);
    assert_non_null(m->tokenizer_json);
    check_parity("tokenizer.json next to vocab.txt", m, NULL, NULL);
    bert_model_free(m);
    remove_dir(dir);

    /* bert_tiny with tests/fixtures/tokenizer_json/wordpiece/tokenizer.json
     * (BertTokenizerFast over the same vocab.txt, lower-casing) */
    mkdir(dir, 0700);
    copy_file(TINY_MODEL "/config.json", dir, "config.json");
    copy_file(TINY_MODEL "/model.safetensors", dir, "model.safetensors");
    copy_file("tests/fixtures/tokenizer_json/wordpiece/tokenizer.json", dir, "tokenizer.json");
    bert_model *wp = load_dir_ok(dir), *vt = load_dir_ok(TINY_MODEL);
    assert_non_null(wp->tokenizer_json);
    assert_null(vt->tokenizer_json);
    assert_int_equal(tokenizer_vocab_size(wp->tok), tokenizer_vocab_size(vt->tok));
    char err[SM_ERR_MAX];
    size_t gl;
    char *gold = slurp(TINY_MODEL "/golden.tsv", &gl);
    int lines = 0;
    for (char *line = strtok(gold, "\n"); line; line = strtok(NULL, "\n")) {
        char text[4096];
        size_t n = 0;
        for (const char *h = line; *h && *h != '\t'; h += 2) text[n++] = (char)(hexval(h[0]) * 16 + hexval(h[1]));
        int a[128], b[128], na, nb, ta, tb;
        assert_int_equal(tokenizer_encode(wp->tok, text, n, 64, a, &na, &ta, err), SM_OK);
        assert_int_equal(tokenizer_encode(vt->tok, text, n, 64, b, &nb, &tb, err), SM_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, (size_t)na * sizeof *a);
        /* and the golden ids of bert_tiny */
        const char *ids = strchr(line, '\t') + 1;
        for (int i = 0; i < na; i++) {
            assert_int_equal(a[i], atoi(ids));
            ids = strchr(ids, ' ') ? strchr(ids, ' ') + 1 : "";
        }
        lines++;
    }
    assert_true(lines >= 8);
    assert_memory_equal(wp->arena, vt->arena, vt->n_floats * sizeof *vt->arena);
    free(gold);
    bert_model_free(wp);
    bert_model_free(vt);
    remove_dir(dir);
    free(dir);
}

/* What is missing or not supported, said with what to do about it. */
static void test_unsupported_and_missing(void **state)
{
    (void)state;
    char *dir = temp_dir();
    char path[512];
    copy_file(XLMR "/config.json", dir, "config.json");
    copy_file(XLMR "/model.safetensors", dir, "model.safetensors");

    expect_load_error(dir, "has no tokenizer: expected tokenizer.json or vocab.txt");
    put_file(dir, "sentencepiece.bpe.model", "x", 1);
    expect_load_error(dir, "has sentencepiece.bpe.model but no tokenizer.json; make one with: "
                           "python -c \"from transformers import AutoTokenizer; "
                           "AutoTokenizer.from_pretrained('");

    static const char bpe[] =
        "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":null,"
        "\"post_processor\":null,\"decoder\":null,\"model\":{\"type\":\"BPE\",\"dropout\":null,"
        "\"unk_token\":\"<unk>\",\"vocab\":{\"<s>\":0,\"<pad>\":1,\"</s>\":2,\"<unk>\":3,\"a\":4},"
        "\"merges\":[]}}";
    put_file(dir, "tokenizer.json", bpe, strlen(bpe));
    expect_load_error(dir, "tokenizer.json: model 'BPE' is not supported; supported: WordPiece, "
                           "Unigram");

    /* an entry named tokenizer.json that cannot be read is its error,
     * never a fall-back to vocab.txt */
    copy_file(TINY_MODEL "/vocab.txt", dir, "vocab.txt");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    expect_load_error(dir, "tokenizer.json': it is a FIFO (named pipe)");
    unlink(path);
    assert_int_equal(mkdir(path, 0700), 0);
    expect_load_error(dir, "tokenizer.json': it is a directory");
    rmdir(path);
    int fd = open(path, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)300 << 20), 0); /* sparse */
    close(fd);
    expect_load_error(dir, "tokenizer.json' is 300 MB; at most 256 MB is read");
    unlink(path);

    /* more tokens than config.json's vocab_size */
    copy_file(XLMR "/tokenizer.json", dir, "tokenizer.json");
    size_t n;
    char *cfg = slurp(XLMR "/config.json", &n);
    char *at = strstr(cfg, "\"vocab_size\": 386");
    assert_non_null(at);
    memcpy(at, "\"vocab_size\": 300", 17);
    put_file(dir, "config.json", cfg, n);
    free(cfg);
    expect_load_error(dir, "tokenizer.json has 386 tokens but config.json says vocab_size 300");

    /* pytorch_model.bin without model.safetensors */
    copy_file(XLMR "/config.json", dir, "config.json");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    put_file(dir, "pytorch_model.bin", "PK", 2);
    expect_load_error(dir, "has pytorch_model.bin but no model.safetensors; convert it with: "
                           "python -c \"import torch; from safetensors.torch import save_file; ");
    unlink(path);
    expect_load_error(dir, "model.safetensors");

    /* and the same through sentiment_load() */
    sqlite3 *db = open_db();
    char sql[1024];
    snprintf(sql, sizeof sql, "SELECT sentiment_load('m', '%s')", dir);
    expect_error(db, sql, "has pytorch_model.bin but no model.safetensors; convert it with: python -c");
    copy_file(XLMR "/model.safetensors", dir, "model.safetensors");
    put_file(dir, "tokenizer.json", bpe, strlen(bpe));
    expect_error(db, sql, "sentiment_load(): cannot load model from '");
    expect_error(db, sql, "tokenizer.json: model 'BPE' is not supported; supported: WordPiece, Unigram");
    sqlite3_close(db);
    remove_dir(dir);
    free(dir);
}

/* ---- training: PyTorch's gradients, finite differences, the head's dropout */

typedef struct batch {
    int B, T;
    int ids[16 * MAX_IDS];
    int lengths[16];
    int labels[16];
} batch;

static void load_batch(batch *bt)
{
    FILE *f = fopen(XLMR_TRAIN "/batch.txt", "r");
    char line[4096];
    int raw[16][MAX_IDS];
    assert_non_null(f);
    memset(bt, 0, sizeof *bt);
    while (fgets(line, sizeof line, f)) {
        assert_true(bt->B < 16);
        int b = bt->B++, n = 0;
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        bt->labels[b] = atoi(line);
        for (char *t = strtok(tab + 1, " \n"); t; t = strtok(NULL, " \n")) {
            assert_true(n < MAX_IDS);
            raw[b][n++] = atoi(t);
        }
        bt->lengths[b] = n;
        if (n > bt->T) bt->T = n;
    }
    fclose(f);
    for (int b = 0; b < bt->B; b++)
        for (int t = 0; t < bt->T; t++) bt->ids[b * bt->T + t] = t < bt->lengths[b] ? raw[b][t] : 1;
}

typedef struct trainable {
    bert_model *m;
    backend *be;
    bert_train_ws *ws;
    float *grads;
    bert_params g;
} trainable;

static void trainable_init(trainable *tr, int threads, const batch *bt)
{
    char err[SM_ERR_MAX] = "";
    tr->m = load_dir_ok(XLMR);
    assert_int_equal(backend_cpu_create(threads, &tr->be, err), SM_OK);
    assert_int_equal(bert_train_ws_create(tr->be, &tr->m->cfg, bt->B, bt->T, &tr->ws, err), SM_OK);
    tr->grads = calloc(tr->m->n_floats, sizeof *tr->grads);
    assert_int_equal(bert_params_bind(&tr->m->cfg, 1, tr->grads, &tr->g, err), SM_OK);
}

static void trainable_free(trainable *tr)
{
    bert_params_release(&tr->g);
    free(tr->grads);
    bert_train_ws_free(tr->ws);
    tr->be->destroy(tr->be);
    bert_model_free(tr->m);
}

static double fwd_bwd(trainable *tr, const batch *bt, const bert_dropout *drop)
{
    char err[SM_ERR_MAX] = "";
    double loss;
    int rc = bert_train_forward(&tr->m->cfg, &tr->m->p, tr->ws, bt->ids, bt->lengths, bt->labels,
                                bt->B, bt->T, drop, &loss, NULL, err);
    if (rc) fail_msg("%s", err);
    rc = bert_train_backward(&tr->m->cfg, &tr->m->p, &tr->g, tr->ws, 1.0f / (float)bt->B, err);
    if (rc) fail_msg("%s", err);
    return loss / bt->B;
}

/* Every gradient element: |ours - torch| <= 1e-3 * max(|torch|, rms of the
 * tensor, 1e-6 * the largest gradient), as tests/model/test_train.c; except the
 * key biases, whose exact gradient is zero (softmax ignores a constant
 * added to a row): both sides are float rounding of a sum that cancels
 * (1e-8 here, 4e-9 in PyTorch, with this model's larger weights), so ours
 * must be below 1e-6 * the largest gradient, as PyTorch's is. */
static double compare_grads(const bert_model *m, const float *grads)
{
    char err[SM_ERR_MAX] = "";
    safetensors st;
    bert_param_spec *specs;
    int n, bad = 0;
    size_t total;
    assert_int_equal(safetensors_open_file(XLMR_TRAIN "/grads.safetensors", &st, err), SM_OK);
    assert_int_equal(bert_param_table(&m->cfg, 1, &specs, &n, &total, err), SM_OK);
    assert_int_equal(n, st.n_tensors); /* every tensor PyTorch has, no more */
    float **want = calloc((size_t)n, sizeof *want);
    double gmax = 0, worst = 0;
    for (int i = 0; i < n; i++) {
        char name[160];
        bert_checkpoint_name(&m->cfg, specs[i].name, name, sizeof name);
        const st_tensor *t = safetensors_find(&st, name);
        if (!t) fail_msg("no golden gradient '%s'", name);
        assert_int_equal((size_t)t->numel, specs[i].numel);
        want[i] = malloc(specs[i].numel * sizeof **want);
        assert_int_equal(st_tensor_to_f32(t, want[i], err), SM_OK);
        for (size_t k = 0; k < specs[i].numel; k++) gmax = fmax(gmax, fabs(want[i][k]));
    }
    for (int i = 0; i < n; i++) {
        double ss = 0, tw = 0;
        for (size_t k = 0; k < specs[i].numel; k++) ss += (double)want[i][k] * want[i][k];
        double rms = fmax(sqrt(ss / (double)specs[i].numel), 1e-6 * gmax);
        int zero = strstr(specs[i].name, "attention.self.key.bias") != NULL;
        for (size_t k = 0; k < specs[i].numel; k++) {
            double a = grads[specs[i].offset + k], b = want[i][k];
            double rel = zero ? 1e-3 * fmax(fabs(a), fabs(b)) / (1e-6 * gmax)
                              : fabs(a - b) / fmax(fabs(b), rms);
            if (!(rel <= tw)) tw = rel;
        }
        if (!(tw <= 1e-3)) {
            print_error("gradient %s: worst relative difference %.3g\n", specs[i].name, tw);
            bad++;
        }
        if (!(tw <= worst)) worst = tw;
        free(want[i]);
    }
    free(want);
    free(specs);
    safetensors_close(&st);
    if (bad) fail_msg("%d gradient tensors differ from PyTorch", bad);
    return worst;
}

typedef struct golden_losses {
    float lr, wd, clip, beta1, beta2, eps;
    int warmup, steps, n;
    double losses[32], grad_norm;
} golden_losses;

static void load_losses(golden_losses *g)
{
    FILE *f = fopen(XLMR_TRAIN "/losses.txt", "r");
    char line[256];
    assert_non_null(f);
    memset(g, 0, sizeof *g);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "hyper ", 6))
            assert_int_equal(sscanf(line + 6, "%f %f %d %d %f %f %f %f", &g->lr, &g->wd,
                                    &g->warmup, &g->steps, &g->clip, &g->beta1, &g->beta2, &g->eps),
                             8);
        else if (!strncmp(line, "grad_norm ", 10))
            g->grad_norm = strtod(line + 10, NULL);
        else if (g->n < 32)
            g->losses[g->n++] = strtod(line, NULL);
    }
    fclose(f);
    assert_int_equal(g->n, g->steps);
}

static void test_gradients_against_pytorch(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    batch bt;
    golden_losses g;
    trainable tr;
    load_batch(&bt);
    load_losses(&g);
    trainable_init(&tr, 2, &bt);
    double loss = fwd_bwd(&tr, &bt, NULL);
    double worst = compare_grads(tr.m, tr.grads);
    print_message("xlmr gradients: loss %.7f (torch %.7f), worst relative difference %.2e\n", loss,
                  g.losses[0], worst);
    assert_true(fabs(loss - g.losses[0]) <= 1e-4);

    /* 10 AdamW steps, as the script took them */
    trainable_free(&tr);
    trainable_init(&tr, 2, &bt);
    adamw *opt;
    assert_int_equal(adamw_create(tr.be, &tr.m->cfg, 1, &opt, err), SM_OK);
    adamw_hparams h = {g.lr, g.beta1, g.beta2, g.eps, g.wd, g.clip, 0.0f};
    double worst_loss = 0;
    for (int s = 0; s < g.steps; s++) {
        memset(tr.grads, 0, tr.m->n_floats * sizeof *tr.grads);
        double l = fwd_bwd(&tr, &bt, NULL);
        float norm;
        assert_int_equal(adamw_step(opt, tr.m->arena, tr.grads, &h,
                                    lr_linear_schedule(g.lr, s, g.warmup, g.steps), &norm, err),
                         SM_OK);
        if (s == 0) assert_true(fabs(norm - g.grad_norm) <= 1e-4 * g.grad_norm);
        worst_loss = fmax(worst_loss, fabs(l - g.losses[s]));
        if (!(fabs(l - g.losses[s]) <= 1e-4)) fail_msg("step %d: loss %.7f, torch %.7f", s, l, g.losses[s]);
    }
    print_message("xlmr: %d AdamW steps, worst loss difference %.2e (last %.6f)\n", g.steps,
                  worst_loss, g.losses[g.steps - 1]);
    adamw_free(opt);
    trainable_free(&tr);
}

/* RobertaClassificationHead drops out the <s> vector before
 * classifier.dense as well as after the tanh: with only the classifier
 * dropout on, the loss differs from a BERT head's (which has the second
 * only) on the same weights and masks, and not at all without dropout;
 * the backward agrees with finite differences through both masks. */
static void test_head_dropout(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    batch bt;
    trainable tr;
    load_batch(&bt);
    trainable_init(&tr, 1, &bt);
    bert_dropout head_only = {0.0f, 0.0f, 0.3f, 9, 4}, none = {0};
    double l_roberta, l_bert, l0_roberta, l0_bert;
    bert_config as_bert = tr.m->cfg;
    strcpy(as_bert.model_type, "bert");
    as_bert.position_offset = tr.m->cfg.position_offset; /* the same positions */
    const bert_config *cfg = &tr.m->cfg;
    assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels, bt.B,
                                        bt.T, &head_only, &l_roberta, NULL, err), SM_OK);
    assert_int_equal(bert_train_forward(&as_bert, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels,
                                        bt.B, bt.T, &head_only, &l_bert, NULL, err), SM_OK);
    assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels, bt.B,
                                        bt.T, &none, &l0_roberta, NULL, err), SM_OK);
    assert_int_equal(bert_train_forward(&as_bert, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels,
                                        bt.B, bt.T, &none, &l0_bert, NULL, err), SM_OK);
    print_message("head dropout 0.3: loss %.6f (RoBERTa head) vs %.6f (BERT head); none: %.6f, %.6f\n",
                  l_roberta / bt.B, l_bert / bt.B, l0_roberta / bt.B, l0_bert / bt.B);
    assert_true(l0_roberta == l0_bert);
    assert_true(fabs(l_roberta - l_bert) > 1e-4 * fabs(l_bert));

    /* finite differences, every dropout on */
    bert_dropout all = {0.1f, 0.1f, 0.3f, 7, 3};
    fwd_bwd(&tr, &bt, &all);
    bert_param_spec *specs;
    int n, checked = 0;
    size_t total;
    double worst = 0;
    assert_int_equal(bert_param_table(cfg, 1, &specs, &n, &total, err), SM_OK);
    for (int i = 0; i < n; i++) {
        size_t best = 0;
        for (size_t k = 0; k < specs[i].numel; k++)
            if (fabsf(tr.grads[specs[i].offset + k]) > fabsf(tr.grads[specs[i].offset + best])) best = k;
        size_t at = specs[i].offset + best;
        float save = tr.m->arena[at], h = 1e-2f;
        double lp, lm;
        tr.m->arena[at] = save + h;
        assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels,
                                            bt.B, bt.T, &all, &lp, NULL, err), SM_OK);
        tr.m->arena[at] = save - h;
        assert_int_equal(bert_train_forward(cfg, &tr.m->p, tr.ws, bt.ids, bt.lengths, bt.labels,
                                            bt.B, bt.T, &all, &lm, NULL, err), SM_OK);
        tr.m->arena[at] = save;
        double fd = (lp - lm) / bt.B / (2.0 * h), a = tr.grads[at];
        if (!(fabs(a - fd) <= 2e-2 * fabs(fd) + 3e-5))
            fail_msg("d(%s)[%zu]: backward %.7g, finite difference %.7g", specs[i].name, best, a, fd);
        if (fabs(fd) > 1e-3) worst = fmax(worst, fabs(a - fd) / fabs(fd));
        checked++;
    }
    print_message("finite differences with dropout: %d tensors, worst relative %.1e\n", checked,
                  worst);
    free(specs);
    trainable_free(&tr);
}

/* ---- SQL ---------------------------------------------------------------------- */

/* Probabilities of text under model, from sentiment_probs(), and the label. */
static void sql_probs(sqlite3 *db, const char *model, const char *text, size_t len, double *p,
                      char *label, size_t cap)
{
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(j, '$.negative'), json_extract(j, "
                                   "'$.neutral'), json_extract(j, '$.positive'), sentiment(?1, ?2) "
                                   "FROM (SELECT sentiment_probs(?1, ?2) AS j)");
    sqlite3_bind_text(st, 1, text, (int)len, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, model, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_ROW) fail_msg("sentiment_probs: %s", sqlite3_errmsg(db));
    for (int k = 0; k < K; k++) p[k] = sqlite3_column_double(st, k);
    snprintf(label, cap, "%s", (const char *)sqlite3_column_text(st, 3));
    sqlite3_finalize(st);
}

/* Every golden text through sentiment_probs() and sentiment() under model:
 * within TOL of softmax(transformers' logits), the top label. */
static void check_sql_model(sqlite3 *db, const char *model)
{
    static const char *const names[K] = {"negative", "neutral", "positive"};
    golden g;
    golden_load(&g);
    double worst = 0;
    for (int i = 0; i < g.n; i++) {
        double p[K], want[K];
        char label[32];
        sql_probs(db, model, g.text[i], g.text_len[i], p, label, sizeof label);
        softmax3(g.logits[i], want);
        int top = 0;
        for (int k = 0; k < K; k++) {
            worst = fmax(worst, fabs(p[k] - want[k]));
            if (want[k] > want[top]) top = k;
        }
        assert_string_equal(label, names[top]);
    }
    print_message("SQL '%s': max |p - softmax(transformers)| %.2e\n", model, worst);
    assert_true(worst <= TOL);
    golden_free(&g);
}

static void make_golden_table(sqlite3 *db)
{
    golden g;
    golden_load(&g);
    exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT)");
    sqlite3_stmt *st = prepare(db, "INSERT INTO t(id, body) VALUES (?1, ?2)");
    for (int i = 0; i < g.n; i++) {
        sqlite3_bind_int(st, 1, 100 + i);
        sqlite3_bind_text(st, 2, g.text[i], (int)g.text_len[i], SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    golden_free(&g);
}

/* classify() over the golden texts, batched: the same probabilities. */
static void check_classify(sqlite3 *db, const char *model)
{
    golden g;
    golden_load(&g);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT id, json_extract(probs, '$.negative'), json_extract(probs, "
                              "'$.neutral'), json_extract(probs, '$.positive') FROM "
                              "classify('t', 'body', '%s')", model);
    sqlite3_stmt *st = prepare(db, sql);
    int rows = 0;
    double worst = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int i = sqlite3_column_int(st, 0) - 100;
        assert_true(i >= 0 && i < g.n);
        double want[K];
        softmax3(g.logits[i], want);
        for (int k = 0; k < K; k++) worst = fmax(worst, fabs(sqlite3_column_double(st, 1 + k) - want[k]));
        rows++;
    }
    sqlite3_finalize(st);
    assert_int_equal(rows, g.n);
    print_message("classify '%s': max |p - softmax(transformers)| %.2e\n", model, worst);
    assert_true(worst <= TOL);
    golden_free(&g);
}

static void test_sql_load_store_export(void **state)
{
    (void)state;
    char *root = temp_dir(), path[512], sql[1024];
    snprintf(path, sizeof path, "%s/db.sqlite", root);
    sqlite3 *db = open_db_path(path);
    exec_ok(db, "SELECT sentiment_load('x', '" XLMR "')");
    expect_text(db, "SELECT model_type || ' ' || labels FROM sentiment_models WHERE name = 'x'",
                "xlm-roberta [\"negative\",\"neutral\",\"positive\"]");
    check_sql_model(db, "x");
    make_golden_table(db);
    check_classify(db, "x");

    /* stored: the tokenizer.json as a BLOB, vocab empty */
    expect_text(db, "SELECT sentiment_save('stored', 'x')", "1");
    size_t tj_len;
    char *tj = slurp(XLMR "/tokenizer.json", &tj_len);
    sqlite3_stmt *st = prepare(db, "SELECT vocab = '' AND typeof(tokenizer) = 'blob' AND "
                                   "tokenizer = ?1 FROM sentiment_model_store WHERE name = 'stored'");
    sqlite3_bind_blob(st, 1, tj, (int)tj_len, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* a new connection (and process-wide cache entry) reads it back */
    db = open_db_path(path);
    check_sql_model(db, "stored");
    check_classify(db, "stored");
    expect_text(db, "SELECT sentiment_use('stored', 1)", "2");
    check_sql_model(db, "stored@2");
    expect_text(db, "SELECT count(*) FROM sentiment_model_store WHERE tokenizer IS NOT NULL", "2");

    /* exported: config.json, tokenizer.json (the same bytes), the tensors
     * transformers saved; no vocab.txt; it loads back */
    snprintf(path, sizeof path, "%s/export", root);
    snprintf(sql, sizeof sql, "SELECT sentiment_export('stored', '%s')", path);
    expect_text(db, sql, path);
    assert_false(has_file(path, "vocab.txt"));
    char file[600];
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
    size_t got_len;
    char *got = slurp(file, &got_len);
    assert_int_equal(got_len, tj_len);
    assert_memory_equal(got, tj, tj_len);
    free(got);
    snprintf(file, sizeof file, "%s/model.safetensors", path);
    size_t w_len;
    char *w = slurp(file, &w_len);
    check_same_tensors(w, w_len, XLMR "/model.safetensors");
    free(w);
    snprintf(file, sizeof file, "%s/config.json", path);
    char *cfg = slurp(file, NULL);
    assert_non_null(strstr(cfg, "\"XLMRobertaForSequenceClassification\""));
    free(cfg);
    snprintf(sql, sizeof sql, "SELECT sentiment_load('back', '%s')", path);
    exec_ok(db, sql);
    check_sql_model(db, "back");

    /* a row whose tokenizer does not load is an error naming it */
    exec_ok(db, "INSERT INTO sentiment_model_store(name, version, config, vocab, labels, "
                "safetensors, tokenizer) SELECT 'bad', 1, config, '', labels, safetensors, "
                "CAST('{\"model\": 7}' AS BLOB) FROM sentiment_model_store WHERE name = 'stored' "
                "AND version = 1");
    expect_error(db, "SELECT sentiment('好', 'bad')", "tokenizer.json");
    exec_ok(db, "UPDATE sentiment_model_store SET tokenizer = X'' WHERE name = 'bad'");
    expect_error(db, "SELECT sentiment('好', 'bad')", "the tokenizer column is an empty BLOB");
    free(tj);
    sqlite3_close(db);
    remove_dir(root);
    free(root);
}

/* A database made before the tokenizer column: its rows load (vocab.txt
 * models), and storing a tokenizer.json model adds the column. */
static void test_sql_old_database(void **state)
{
    (void)state;
    char *root = temp_dir(), path[512], sql[1024];
    snprintf(path, sizeof path, "%s/old.sqlite", root);
    sqlite3 *db = open_db_path(path);
    load_tiny(db);
    exec_ok(db, "CREATE TABLE sentiment_model_store(\n"
                "  name TEXT NOT NULL,\n"
                "  version INTEGER NOT NULL,\n"
                "  uid TEXT NOT NULL UNIQUE DEFAULT (lower(hex(randomblob(16)))),\n"
                "  config TEXT NOT NULL,\n"
                "  vocab TEXT NOT NULL,\n"
                "  labels TEXT NOT NULL,\n"
                "  metrics TEXT,\n"
                "  created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),\n"
                "  safetensors BLOB NOT NULL,\n"
                "  PRIMARY KEY (name, version)\n"
                ")");
    snprintf(sql, sizeof sql, "ATTACH '%s/new.sqlite' AS n", root);
    exec_ok(db, sql);
    exec_ok(db, "CREATE TABLE n.src(x)");
    sqlite3_close(db);
    /* a vocab.txt row, written as an earlier release wrote it */
    snprintf(sql, sizeof sql, "%s/new.sqlite", root);
    sqlite3 *n = open_db_path(sql);
    load_tiny(n);
    expect_text(n, "SELECT sentiment_save('old', 'tiny')", "1");
    sqlite3_close(n);
    db = open_db_path(path);
    load_tiny(db);
    snprintf(sql, sizeof sql, "ATTACH '%s/new.sqlite' AS n", root);
    exec_ok(db, sql);
    exec_ok(db, "INSERT INTO main.sentiment_model_store(name, version, config, vocab, labels, "
                "safetensors) SELECT name, version, config, vocab, labels, safetensors FROM "
                "n.sentiment_model_store");
    exec_ok(db, "DETACH n");
    expect_text(db, "SELECT count(*) FROM pragma_table_info('sentiment_model_store') WHERE name = "
                    "'tokenizer'", "0");
    expect_text(db, "SELECT sentiment_probs('服务很好', 'old') = sentiment_probs('服务很好', 'tiny')",
                "1");
    exec_ok(db, "SELECT sentiment_load('x', '" XLMR "')");
    expect_text(db, "SELECT sentiment_save('multi', 'x')", "1");
    expect_text(db, "SELECT count(*) FROM pragma_table_info('sentiment_model_store') WHERE name = "
                    "'tokenizer'", "1");
    expect_text(db, "SELECT sentiment_probs('服务很好', 'old') = sentiment_probs('服务很好', 'tiny')",
                "1");
    check_sql_model(db, "multi");
    sqlite3_close(db);
    remove_dir(root);
    free(root);
}

/* Rows to train on: short texts in several languages, three labels. */
static void make_train_table(sqlite3 *db)
{
    static const char *const rows[][2] = {
        {"这家酒店很干净，服务也很周到。", "positive"}, {"非常满意，下次还会再来", "positive"},
        {"The room was clean", "positive"}, {"very happy with it", "positive"},
        {"sehr zufrieden", "positive"}, {"très satisfait", "positive"},
        {"muy contento", "positive"}, {"очень доволен", "positive"},
        {"terrible service", "negative"}, {"客服态度冷淡，退款拖了两个星期。", "negative"},
        {"不推荐", "negative"}, {"I would not recommend it", "negative"},
        {"zu teuer", "negative"}, {"trop cher", "negative"},
        {"demasiado caro", "negative"}, {"слишком дорого", "negative"},
        {"早餐一般", "neutral"}, {"the price is fair", "neutral"},
        {"nicht sehr gut", "neutral"}, {"pas très bon", "neutral"},
        {"no muy bueno", "neutral"}, {"не очень хорошо", "neutral"},
        {"あまり良くない", "neutral"}, {"房间太小了", "neutral"},
    };
    exec_ok(db, "CREATE TABLE d(body TEXT, label TEXT)");
    sqlite3_stmt *st = prepare(db, "INSERT INTO d VALUES (?1, ?2)");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        sqlite3_bind_text(st, 1, rows[i][0], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, rows[i][1], -1, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(st), SQLITE_DONE);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
}

/* The train() report's first and last epoch loss. */
static void check_loss_falls(sqlite3 *db, const char *report)
{
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, '$.train_loss[0]'), "
                                   "json_extract(?1, '$.train_loss[#-1]'), json_extract(?1, '$.head')");
    sqlite3_bind_text(st, 1, report, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    double first = sqlite3_column_double(st, 0), last = sqlite3_column_double(st, 1);
    print_message("train(): loss %.4f -> %.4f, head %s\n", first, last, sqlite3_column_text(st, 2));
    assert_true(last < first);
    sqlite3_finalize(st);
}

/* train() fine-tunes the XLM-R classifier (head kept) and puts a new
 * RobertaClassificationHead on a head-less encoder; both are stored with
 * the tokenizer.json and export as transformers' layout. */
static void test_sql_train(void **state)
{
    (void)state;
    char *root = temp_dir(), sql[1024], enc[512], out[512];
    sqlite3 *db = open_db();
    make_train_table(db);
    exec_ok(db, "SELECT sentiment_load('x', '" XLMR "')");
    char *r = q_text(db, "SELECT train('ft', body, label, '{\"base\":\"x\",\"epochs\":4,"
                         "\"lr\":3e-3,\"seed\":3,\"valid_fraction\":0,\"batch_size\":8}') FROM d");
    check_loss_falls(db, r);
    sqlite3_stmt *st = prepare(db, "SELECT json_extract(?1, '$.head')");
    sqlite3_bind_text(st, 1, r, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "kept");
    sqlite3_finalize(st);
    free(r);
    expect_text(db, "SELECT typeof(tokenizer) || length(vocab) FROM sentiment_model_store WHERE "
                    "name = 'ft'", "blob0");
    expect_text(db, "SELECT sentiment('très satisfait', 'ft') IS NOT NULL", "1");

    /* a head-less encoder without a pooler, as a converted e5 is */
    snprintf(enc, sizeof enc, "%s/encoder", root);
    mkdir(enc, 0700);
    const rename_rule rules[] = {{"roberta.", ""}, {"classifier.", NULL}};
    write_config(enc, NULL);
    copy_file(XLMR "/tokenizer.json", enc, "tokenizer.json");
    write_weights(enc, rules, 2, NULL, 0);
    snprintf(sql, sizeof sql, "SELECT sentiment_load('enc', '%s')", enc);
    exec_ok(db, sql);
    r = q_text(db, "SELECT train('enc_ft', body, label, '{\"base\":\"enc\",\"epochs\":6,"
                   "\"lr\":3e-3,\"seed\":3,\"valid_fraction\":0,\"batch_size\":8}') FROM d");
    check_loss_falls(db, r);
    free(r);
    expect_text(db, "SELECT labels FROM sentiment_models WHERE name = 'enc_ft'",
                "[\"negative\",\"neutral\",\"positive\"]");
    snprintf(out, sizeof out, "%s/enc_ft", root);
    snprintf(sql, sizeof sql, "SELECT sentiment_export('enc_ft', '%s')", out);
    expect_text(db, sql, out);
    char file[600], err[SM_ERR_MAX];
    safetensors sf;
    snprintf(file, sizeof file, "%s/model.safetensors", out);
    assert_int_equal(safetensors_open_file(file, &sf, err), SM_OK);
    assert_non_null(safetensors_find(&sf, "classifier.dense.weight"));
    assert_non_null(safetensors_find(&sf, "classifier.out_proj.weight"));
    assert_non_null(safetensors_find(&sf, "roberta.encoder.layer.1.output.dense.weight"));
    assert_null(safetensors_find(&sf, "roberta.pooler.dense.weight"));
    assert_null(safetensors_find(&sf, "classifier.weight"));
    safetensors_close(&sf);
    assert_true(has_file(out, "tokenizer.json"));
    assert_false(has_file(out, "vocab.txt"));
    /* what the stored model says, the exported directory says */
    snprintf(sql, sizeof sql, "SELECT sentiment_load('enc_back', '%s')", out);
    exec_ok(db, sql);
    expect_text(db, "SELECT count(*) FROM d WHERE sentiment_probs(body, 'enc_ft') IS NOT "
                    "sentiment_probs(body, 'enc_back')", "0");
    sqlite3_close(db);
    remove_dir(root);
    free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_ids_and_end_to_end),
        cmocka_unit_test(test_save_writes_transformers_names),
        cmocka_unit_test(test_encoder_with_pooler),
        cmocka_unit_test(test_encoder_without_pooler),
        cmocka_unit_test(test_head_variants),
        cmocka_unit_test(test_tokenizer_choice),
        cmocka_unit_test(test_unsupported_and_missing),
        cmocka_unit_test(test_gradients_against_pytorch),
        cmocka_unit_test(test_head_dropout),
        cmocka_unit_test(test_sql_load_store_export),
        cmocka_unit_test(test_sql_old_database),
        cmocka_unit_test(test_sql_train),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

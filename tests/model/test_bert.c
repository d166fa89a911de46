/* test_bert.c: the encoder against transformers.
 *
 * tests/fixtures/gen_models.py saved four tiny random models (BERT with a
 * head, ERNIE 3.0 with task-type embeddings, a head-less BERT saved without a
 * prefix, a RoBERTa-position encoder) and the logits or pooler outputs
 * transformers computed for a padded batch of texts. Ours must match within
 * 1e-4, in a batch, one text at a time, and end to end from text through our
 * tokenizer. Also: a batch run as several passes (the CPU's pass_rows)
 * gives the same bits as one pass, and so does a pass without its padding
 * rows or with its last layer for the [CLS] rows only; BF16 and INT8 weights run the
 * attention_bf16 slot in every layer and FP32 ones never; save/load round
 * trips and checkpoints that must not load.
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

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "format/safetensors.h"

#define TOL 1e-4
#define MAX_TEXTS 32
#define MAX_IDS 128

typedef struct golden {
    int n;
    char *text[MAX_TEXTS];
    size_t text_len[MAX_TEXTS];
    int ids[MAX_TEXTS][MAX_IDS];
    int n_ids[MAX_TEXTS];
    float out[MAX_TEXTS][128];
    int n_out;
} golden;

static int hexval(int c)
{
    return c <= '9' ? c - '0' : (c | 32) - 'a' + 10;
}

static void golden_load(const char *model_dir, golden *g)
{
    char path[512], line[65536];
    snprintf(path, sizeof path, "%s/golden.tsv", model_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    memset(g, 0, sizeof *g);
    while (fgets(line, sizeof line, f)) {
        assert_true(g->n < MAX_TEXTS);
        int i = g->n++;
        char *hex = strtok(line, "\t"), *ids = strtok(NULL, "\t"), *outs = strtok(NULL, "\t\n");
        assert_non_null(outs);
        size_t hl = strlen(hex);
        g->text[i] = malloc(hl / 2 + 1);
        for (size_t k = 0; k < hl / 2; k++)
            g->text[i][k] = (char)(hexval(hex[2 * k]) * 16 + hexval(hex[2 * k + 1]));
        g->text[i][hl / 2] = 0;
        g->text_len[i] = hl / 2;
        for (char *tok = strtok(ids, " "); tok; tok = strtok(NULL, " "))
            g->ids[i][g->n_ids[i]++] = atoi(tok);
        int k = 0;
        for (char *tok = strtok(outs, " "); tok; tok = strtok(NULL, " "))
            g->out[i][k++] = strtof(tok, NULL);
        g->n_out = k;
    }
    fclose(f);
}

static void golden_free(golden *g)
{
    for (int i = 0; i < g->n; i++) free(g->text[i]);
}

static bert_model *load(const char *dir)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(dir, &m, err);
    if (rc) print_error("loading %s: %s\n", dir, err);
    assert_int_equal(rc, SM_OK);
    return m;
}

/* Runs texts [first, first+B) of g as one padded batch; returns max |diff|
 * against the golden outputs. Output buffers are poisoned with NaN first so
 * an unwritten element fails. */
static double run_batch(bert_model *m, backend *be, const golden *g, int first, int B)
{
    char err[SM_ERR_MAX] = "";
    int T = 0;
    for (int b = 0; b < B; b++) T = g->n_ids[first + b] > T ? g->n_ids[first + b] : T;
    int *ids = calloc((size_t)B * T, sizeof *ids), lengths[MAX_TEXTS];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            ids[b * T + t] = t < g->n_ids[first + b] ? g->ids[first + b][t]
                                                     : tokenizer_pad_id(m->tok);
        lengths[b] = g->n_ids[first + b];
    }
    bert_workspace *ws;
    assert_int_equal(bert_workspace_create(be, &m->cfg, B, T, &ws, err), SM_OK);
    int K = g->n_out;
    float *out = malloc((size_t)B * K * sizeof *out);
    for (int i = 0; i < B * K; i++) out[i] = NAN;
    int rc = m->has_head ? bert_forward(&m->cfg, &m->p, ws, ids, lengths, B, T, out, NULL, err)
                         : bert_forward(&m->cfg, &m->p, ws, ids, lengths, B, T, NULL, out, err);
    if (rc) print_error("forward: %s\n", err);
    assert_int_equal(rc, SM_OK);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) {
            float v = out[b * K + k];
            assert_false(isnan(v));
            double d = fabs((double)v - g->out[first + b][k]);
            worst = d > worst ? d : worst;
        }
    free(out);
    free(ids);
    bert_workspace_free(ws);
    return worst;
}

static void check_model_parity(const char *dir)
{
    golden g;
    golden_load(dir, &g);
    bert_model *m = load(dir);
    backend *be;
    char err[SM_ERR_MAX];
    assert_int_equal(backend_cpu_create(2, &be, err), SM_OK);

    double batch_diff = run_batch(m, be, &g, 0, g.n);
    double single = 0;
    for (int i = 0; i < g.n; i++) {
        double d = run_batch(m, be, &g, i, 1);
        single = d > single ? d : single;
    }
    print_message("%s: max |ours - transformers| batch %.2e, one by one %.2e\n", dir, batch_diff,
                  single);
    assert_true(batch_diff <= TOL);
    assert_true(single <= TOL);
    be->destroy(be);
    bert_model_free(m);
    golden_free(&g);
}

static void test_bert_tiny_parity(void **state)
{
    (void)state;
    check_model_parity("tests/fixtures/models/bert_tiny");
}

static void test_ernie_tiny_parity(void **state)
{
    (void)state;
    check_model_parity("tests/fixtures/models/ernie_tiny");
}

static void test_bert_encoder_parity(void **state)
{
    (void)state;
    check_model_parity("tests/fixtures/models/bert_encoder");
}

static void test_roberta_encoder_parity(void **state)
{
    (void)state;
    check_model_parity("tests/fixtures/models/roberta_encoder");
}

/* Text -> our tokenizer -> encoder -> softmax equals softmax(HF logits). */
static void check_end_to_end(const char *dir, int batch_size, int threads)
{
    golden g;
    golden_load(dir, &g);
    bert_model *m = load(dir);
    backend *be;
    bert_workspace *ws;
    char err[SM_ERR_MAX] = "";
    assert_int_equal(backend_cpu_create(threads, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, batch_size, bert_max_length(&m->cfg), &ws,
                                           err),
                     SM_OK);
    int K = m->cfg.num_labels;
    float *probs = malloc((size_t)g.n * K * sizeof *probs);
    int truncated[MAX_TEXTS];
    for (int i = 0; i < g.n * K; i++) probs[i] = NAN;
    int rc = bert_classify_texts(m, &m->p, ws, (const char *const *)g.text, g.text_len, g.n, 0,
                                 batch_size, probs, truncated, err);
    if (rc) print_error("classify: %s\n", err);
    assert_int_equal(rc, SM_OK);
    int n_truncated = 0;
    for (int i = 0; i < g.n; i++) {
        double mx = g.out[i][0], sum = 0;
        for (int k = 1; k < K; k++) mx = g.out[i][k] > mx ? g.out[i][k] : mx;
        for (int k = 0; k < K; k++) sum += exp(g.out[i][k] - mx);
        for (int k = 0; k < K; k++) {
            double want = exp(g.out[i][k] - mx) / sum;
            assert_false(isnan(probs[i * K + k]));
            assert_true(fabs(probs[i * K + k] - want) <= TOL);
        }
        n_truncated += truncated[i];
    }
    assert_int_equal(n_truncated, 1); /* the fixture has one over-long text */
    free(probs);
    bert_workspace_free(ws);
    be->destroy(be);
    bert_model_free(m);
    golden_free(&g);
}

static void test_end_to_end(void **state)
{
    (void)state;
    check_end_to_end("tests/fixtures/models/bert_tiny", 4, 1);
    check_end_to_end("tests/fixtures/models/ernie_tiny", 64, 1);
    check_end_to_end("tests/fixtures/models/bert_tiny", 1, 1);
    /* Several batches on a 2-thread backend run concurrently on lanes. */
    check_end_to_end("tests/fixtures/models/bert_tiny", 2, 2);
    check_end_to_end("tests/fixtures/models/ernie_tiny", 3, 3);
}

static void test_no_head_is_an_error(void **state)
{
    (void)state;
    bert_model *m = load("tests/fixtures/models/bert_encoder");
    assert_int_equal(m->has_head, 0);
    backend *be;
    bert_workspace *ws;
    char err[SM_ERR_MAX] = "";
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 1, 8, &ws, err), SM_OK);
    int ids[4] = {2, 10, 11, 3}, len = 4;
    float logits[2];
    assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, 4, logits, NULL, err),
                     SM_ERR_INVALID);
    assert_non_null(strstr(err, "no classification head"));
    /* Too long for the workspace, and an id outside the vocabulary. */
    assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, 9, NULL, logits, err),
                     SM_ERR_INVALID);
    ids[1] = 999999;
    assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, 4, NULL, logits, err),
                     SM_ERR_INVALID);
    assert_non_null(strstr(err, "999999"));
    /* A length of 0, or past the padded width: the same check as
     * training's (encoder_check_tokens), not a read past the batch. */
    ids[1] = 10;
    len = 0;
    assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, 4, NULL, logits, err),
                     SM_ERR_INVALID);
    assert_non_null(strstr(err, "length 0 of example 0 is not in [1, 4]"));
    len = 5;
    assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, 4, NULL, logits, err),
                     SM_ERR_INVALID);
    assert_non_null(strstr(err, "length 5"));
    len = 4;
    float pooled[1024]; /* (1, C) */
    assert_true(m->cfg.hidden_size <= 1024);
    assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, 4, NULL, pooled, err), SM_OK);
    bert_workspace_free(ws);
    be->destroy(be);
    bert_model_free(m);
}

/* The CPU backend's alloc, counting the bytes asked for. */
static void *(*g_cpu_alloc)(backend *be, size_t bytes);
static size_t g_alloc_bytes;

static void *counting_alloc(backend *be, size_t bytes)
{
    g_alloc_bytes += bytes;
    return g_cpu_alloc(be, bytes);
}

/* bert_workspace_bytes is what bert_workspace_create allocates (what
 * runtime/engine.c sizes GPU batches by). */
static void test_workspace_bytes(void **state)
{
    (void)state;
    bert_model *m = load("tests/fixtures/models/bert_tiny");
    backend *cpu;
    char err[SM_ERR_MAX] = "";
    assert_int_equal(backend_cpu_create(1, &cpu, err), SM_OK);
    backend counting = *cpu;
    g_cpu_alloc = cpu->alloc;
    counting.alloc = counting_alloc;
    const int shapes[][2] = {{1, 2}, {3, 17}, {32, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        bert_workspace *ws;
        g_alloc_bytes = 0;
        assert_int_equal(bert_workspace_create(&counting, &m->cfg, shapes[i][0], shapes[i][1], &ws,
                                               err),
                         SM_OK);
        assert_int_equal(g_alloc_bytes,
                         bert_workspace_bytes(&counting, &m->cfg, shapes[i][0], shapes[i][1]));
        bert_workspace_free(ws);
    }
    cpu->destroy(cpu);
    bert_model_free(m);
}

/* A backend's pass_rows for test_passes: g_pass_rows rows, whatever the
 * row's size. */
static int g_pass_rows;
static int fixed_pass_rows(const backend *be, size_t row_bytes)
{
    (void)be, (void)row_bytes;
    return g_pass_rows;
}

/* The golden batch through be with parameters p: logits, pooled outputs
 * and hidden states into the three buffers (B x K, B x C, B x T x C). */
static void forward_all(bert_model *m, const bert_params *p, backend *be, const golden *g, int T,
                        float *logits, float *pooled, float *hidden)
{
    char err[SM_ERR_MAX] = "";
    int B = g->n, *ids = calloc((size_t)B * T, sizeof *ids), lengths[MAX_TEXTS];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++)
            ids[b * T + t] = t < g->n_ids[b] ? g->ids[b][t] : tokenizer_pad_id(m->tok);
        lengths[b] = g->n_ids[b];
    }
    bert_workspace *ws;
    assert_int_equal(bert_workspace_create(be, &m->cfg, B, T, &ws, err), SM_OK);
    assert_int_equal(bert_forward(&m->cfg, p, ws, ids, lengths, B, T, logits, pooled, err), SM_OK);
    assert_int_equal(bert_forward_hidden(&m->cfg, p, ws, ids, lengths, B, T, hidden, err), SM_OK);
    bert_workspace_free(ws);
    free(ids);
}

/* got[0 .. n) against want: bit for bit when bits, else up to float
 * rounding (OpenBLAS's products, whose rounding depends on the rows). */
static void assert_floats(const float *got, const float *want, size_t n, int bits)
{
    if (bits) {
        assert_memory_equal(got, want, n * sizeof *got);
        return;
    }
    for (size_t j = 0; j < n; j++)
        assert_true(fabsf(got[j] - want[j]) <= 1e-5f * (1.0f + fabsf(want[j])));
}

/* The golden texts' longest token count. */
static int longest_text(const golden *g)
{
    int T = 0;
    for (int b = 0; b < g->n; b++) T = g->n_ids[b] > T ? g->n_ids[b] : T;
    return T;
}

/* m's parameters in precision prec: its own for BERT_FP32, else a packed
 * copy made on be into *pp (freed by the caller). */
static const bert_params *params_in(backend *be, bert_model *m, bert_precision prec,
                                    bert_packed_params **pp)
{
    char err[SM_ERR_MAX] = "";
    bert_precision plan[BERT_PACK_N];
    *pp = NULL;
    if (prec == BERT_FP32) return &m->p;
    bert_pack_plan(prec, plan);
    assert_int_equal(bert_params_pack(be, &m->cfg, &m->p, plan, pp, err), SM_OK);
    return &(*pp)->p;
}

/* What the batch tests share: the tiny BERT, its golden texts as one
 * padded batch (B texts of up to T tokens), a one-thread CPU backend, and
 * the sizes of the logits, pooled vectors and hidden states forward_all
 * writes one after another. */
typedef struct tiny_batch {
    golden g;
    bert_model *m;
    backend *cpu;
    int B, T, K, C;
    size_t nl, np, nh, n;
} tiny_batch;

static tiny_batch *tiny_open(void)
{
    const char *dir = "tests/fixtures/models/bert_tiny";
    char err[SM_ERR_MAX] = "";
    tiny_batch *t = calloc(1, sizeof *t);
    assert_non_null(t);
    golden_load(dir, &t->g);
    t->m = load(dir);
    assert_int_equal(backend_cpu_create(1, &t->cpu, err), SM_OK);
    t->B = t->g.n;
    t->T = longest_text(&t->g);
    t->K = t->m->cfg.num_labels;
    t->C = t->m->cfg.hidden_size;
    t->nl = (size_t)t->B * t->K;
    t->np = (size_t)t->B * t->C;
    t->nh = (size_t)t->B * t->T * t->C;
    t->n = t->nl + t->np + t->nh;
    return t;
}

static void tiny_close(tiny_batch *t)
{
    t->cpu->destroy(t->cpu);
    bert_model_free(t->m);
    golden_free(&t->g);
    free(t);
}

/* A backend that bounds a pass's rows (pass_rows) gets a batch as several
 * passes of whole sequences, for passes of one sequence, of several (the
 * last one short) and of more than the batch: with packed weights (FP32,
 * INT8, BF16) the encoder's hidden states are the same bits as one pass's;
 * where a product is OpenBLAS's (the FP32 weights, the pooler and the
 * classifier) the same up to float rounding (its kernels depend on the
 * number of rows). */
static void test_passes(void **state)
{
    (void)state;
    tiny_batch *t = tiny_open();
    backend *cpu = t->cpu;
    bert_model *m = t->m;
    int B = t->B, T = t->T;
    size_t nl = t->nl, np = t->np, nh = t->nh, n = t->n;
    assert_non_null(cpu->pass_rows);
    assert_true(B >= 5);
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    const bert_precision precisions[] = {BERT_FP32, BERT_FP32_PACKED, BERT_INT8, BERT_BF16};
    for (size_t k = 0; k < sizeof precisions / sizeof *precisions; k++) {
        bert_packed_params *pp = NULL;
        const bert_params *p = params_in(cpu, m, precisions[k], &pp);
        backend whole = *cpu;
        whole.pass_rows = NULL;
        forward_all(m, p, &whole, &t->g, T, want, want + nl, want + nl + np);
        const int per_pass[] = {1, 2, 3, B + 1};
        for (size_t i = 0; i < sizeof per_pass / sizeof *per_pass; i++) {
            backend split = *cpu;
            split.pass_rows = fixed_pass_rows;
            g_pass_rows = per_pass[i] * T;
            for (size_t j = 0; j < n; j++) got[j] = NAN;
            forward_all(m, p, &split, &t->g, T, got, got + nl, got + nl + np);
            assert_floats(got, want, nl + np, 0); /* the head: OpenBLAS's products */
            assert_floats(got + nl + np, want + nl + np, nh, pp != NULL);
        }
        bert_packed_params_free(pp);
    }
    free(want);
    free(got);
    tiny_close(t);
}

/* The encoder runs the BF16 products (attention_bf16, or
 * attention_unpadded with bf16 set when the batch has padding, or
 * attention_first with it set for the last layer of a pass that reads the
 * [CLS] rows only) for layers
 * with BF16 or INT8 weights, every layer of every pass, and FP32 ones for
 * FP32 weights (packed or not); without the attention_bf16 slot a
 * reduced-precision model runs FP32 products, whose outputs stay close
 * (the BF16 products round the operands only). */
static int g_bf16_calls;
static int (*g_cpu_attention_bf16)(backend *be, float *out, float *att, const float *qkv,
                                   const int *lengths, int B, int T, int H, int d, float scale);
static int (*g_cpu_attention_unpadded)(backend *be, float *out, float *att, const float *qkv,
                                       const int *lengths, int B, int T, int H, int d,
                                       float scale, int bf16);
static int counting_attention_bf16(backend *be, float *out, float *att, const float *qkv,
                                   const int *lengths, int B, int T, int H, int d, float scale)
{
    g_bf16_calls++;
    return g_cpu_attention_bf16(be, out, att, qkv, lengths, B, T, H, d, scale);
}

static int counting_attention_unpadded(backend *be, float *out, float *att, const float *qkv,
                                       const int *lengths, int B, int T, int H, int d,
                                       float scale, int bf16)
{
    g_bf16_calls += bf16;
    return g_cpu_attention_unpadded(be, out, att, qkv, lengths, B, T, H, d, scale, bf16);
}

static int (*g_cpu_attention_first)(backend *be, float *out, float *att, const float *qkv,
                                    const int *lengths, int B, int T, int H, int d, float scale,
                                    int bf16, int packed);
static int g_first_calls;
static int counting_attention_first(backend *be, float *out, float *att, const float *qkv,
                                    const int *lengths, int B, int T, int H, int d, float scale,
                                    int bf16, int packed)
{
    g_bf16_calls += bf16;
    g_first_calls++;
    return g_cpu_attention_first(be, out, att, qkv, lengths, B, T, H, d, scale, bf16, packed);
}

static void test_reduced_attention(void **state)
{
    (void)state;
    tiny_batch *t = tiny_open();
    backend *cpu = t->cpu;
    bert_model *m = t->m;
    int T = t->T;
    size_t nl = t->nl, np = t->np, n = t->n;
    assert_non_null(cpu->attention_bf16);
    g_cpu_attention_bf16 = cpu->attention_bf16;
    g_cpu_attention_unpadded = cpu->attention_unpadded;
    g_cpu_attention_first = cpu->attention_first;
    float *with = malloc(n * sizeof *with), *without = malloc(n * sizeof *without);
    const bert_precision precisions[] = {BERT_FP32, BERT_FP32_PACKED, BERT_INT8, BERT_BF16};
    for (size_t k = 0; k < sizeof precisions / sizeof *precisions; k++) {
        bert_packed_params *pp = NULL;
        const bert_params *p = params_in(cpu, m, precisions[k], &pp);
        backend counting = *cpu, plain = *cpu;
        counting.attention_bf16 = counting_attention_bf16;
        counting.attention_unpadded = plain.attention_unpadded = counting_attention_unpadded;
        counting.attention_first = plain.attention_first = counting_attention_first;
        plain.attention_bf16 = NULL;
        g_bf16_calls = 0;
        forward_all(m, p, &counting, &t->g, T, with, with + nl, with + nl + np);
        int reduced = precisions[k] == BERT_INT8 || precisions[k] == BERT_BF16;
        /* bert_forward and bert_forward_hidden: one pass each */
        assert_int_equal(g_bf16_calls, reduced ? 2 * m->cfg.num_hidden_layers : 0);
        g_bf16_calls = 0;
        forward_all(m, p, &plain, &t->g, T, without, without + nl, without + nl + np);
        assert_int_equal(g_bf16_calls, 0);
        for (size_t j = 0; j < n; j++)
            if (reduced)
                assert_true(fabsf(with[j] - without[j]) <= 3e-2f * (1.0f + fabsf(without[j])));
            else assert_true(memcmp(&with[j], &without[j], sizeof *with) == 0);
        bert_packed_params_free(pp);
    }
    free(with);
    free(without);
    tiny_close(t);
}

/* An inference batch with padding runs only its real rows (the backend's
 * unpad_rows, pad_rows and attention_unpadded), every pass: with packed
 * weights (FP32, INT8, BF16) the logits, the pooled vectors and the real
 * rows of the hidden states are the same bits as with the padding rows
 * computed, and the padding rows of the hidden states are 0; with FP32
 * weights through OpenBLAS, whose kernels depend on the number of rows,
 * the same up to float rounding. A batch without padding runs as before. */
static int g_unpad_calls;
static int (*g_cpu_unpad_rows)(backend *be, float *x, const int *lengths, int B, int T, int C);
static int counting_unpad_rows(backend *be, float *x, const int *lengths, int B, int T, int C)
{
    g_unpad_calls++;
    return g_cpu_unpad_rows(be, x, lengths, B, T, C);
}

static void test_unpadded_rows(void **state)
{
    (void)state;
    tiny_batch *t = tiny_open();
    backend *cpu = t->cpu;
    bert_model *m = t->m;
    const golden *g = &t->g;
    int B = t->B, T = t->T, K = t->K, C = t->C;
    size_t nl = t->nl, np = t->np, n = t->n;
    assert_true(cpu->unpad_rows && cpu->pad_rows && cpu->attention_unpadded);
    g_cpu_unpad_rows = cpu->unpad_rows;
    int padded_rows = 0;
    for (int b = 0; b < B; b++) padded_rows += g->n_ids[b] < T;
    assert_true(padded_rows >= 2); /* the golden texts differ in length */
    float *unpadded = malloc(n * sizeof *unpadded), *padded = malloc(n * sizeof *padded);
    const bert_precision precisions[] = {BERT_FP32, BERT_FP32_PACKED, BERT_INT8, BERT_BF16};
    for (size_t k = 0; k < sizeof precisions / sizeof *precisions; k++) {
        bert_packed_params *pp = NULL;
        const bert_params *p = params_in(cpu, m, precisions[k], &pp);
        backend counting = *cpu, plain = *cpu;
        counting.unpad_rows = counting_unpad_rows;
        plain.unpad_rows = NULL;
        for (size_t j = 0; j < n; j++) unpadded[j] = padded[j] = NAN;
        g_unpad_calls = 0;
        forward_all(m, p, &counting, g, T, unpadded, unpadded + nl, unpadded + nl + np);
        assert_int_equal(g_unpad_calls, 2); /* bert_forward and bert_forward_hidden */
        forward_all(m, p, &plain, g, T, padded, padded + nl, padded + nl + np);
        const float *hu = unpadded + nl + np, *hp = padded + nl + np;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    size_t i = ((size_t)b * T + t) * C + c;
                    if (t >= g->n_ids[b]) assert_true(hu[i] == 0.0f);
                    else assert_floats(&hu[i], &hp[i], 1, pp != NULL);
                }
        assert_floats(unpadded, padded, nl + np, pp != NULL);
        bert_packed_params_free(pp);
    }
    /* every text alone: no padding, nothing to leave out */
    golden one = *g;
    one.n = 1;
    g_unpad_calls = 0;
    backend counting = *cpu;
    counting.unpad_rows = counting_unpad_rows;
    forward_all(m, &m->p, &counting, &one, one.n_ids[0], unpadded, unpadded + K,
                unpadded + K + C);
    assert_int_equal(g_unpad_calls, 0);
    free(unpadded);
    free(padded);
    tiny_close(t);
}

/* A pass that reads only the [CLS] rows (bert_forward: logits and pooled
 * vectors) runs its last layer for each sequence's first row only (the
 * backend's first_rows and attention_first), on padded rows and without
 * them: with packed weights (FP32, INT8, BF16) the logits and the pooled
 * vectors are the same bits as a pass of every row; with FP32 weights
 * through OpenBLAS the same up to float rounding. bert_forward_hidden,
 * which reads every row, runs every row. */
static void test_cls_rows(void **state)
{
    (void)state;
    tiny_batch *t = tiny_open();
    backend *cpu = t->cpu;
    bert_model *m = t->m;
    int T = t->T;
    size_t nl = t->nl, np = t->np, nh = t->nh, n = t->n;
    assert_true(cpu->first_rows && cpu->attention_first);
    g_cpu_attention_first = cpu->attention_first;
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    const bert_precision precisions[] = {BERT_FP32, BERT_FP32_PACKED, BERT_INT8, BERT_BF16};
    for (size_t k = 0; k < sizeof precisions / sizeof *precisions; k++) {
        bert_packed_params *pp = NULL;
        const bert_params *p = params_in(cpu, m, precisions[k], &pp);
        for (int unpadded = 0; unpadded <= 1; unpadded++) {
            backend whole = *cpu, cls = *cpu;
            whole.first_rows = NULL;
            whole.attention_first = NULL;
            cls.attention_first = counting_attention_first;
            if (!unpadded) whole.unpad_rows = cls.unpad_rows = NULL;
            forward_all(m, p, &whole, &t->g, T, want, want + nl, want + nl + np);
            for (size_t j = 0; j < n; j++) got[j] = NAN;
            g_first_calls = 0;
            forward_all(m, p, &cls, &t->g, T, got, got + nl, got + nl + np);
            assert_int_equal(g_first_calls, 1); /* bert_forward's pass, not the hidden one */
            assert_floats(got, want, nl + np, pp != NULL);
            assert_floats(got + nl + np, want + nl + np, nh, 1);
        }
        bert_packed_params_free(pp);
    }
    free(want);
    free(got);
    tiny_close(t);
}

/* On the CPU a workspace for a batch larger than a pass holds a pass's
 * rows, not the batch's, and the batch runs as passes of whole sequences,
 * on one thread and on lanes: 512 copies of the golden texts each get
 * their text's logits as the golden batch gives them (packed FP32 weights:
 * the encoder's bits; the pooler and classifier are OpenBLAS's, whose
 * rounding depends on the rows). */
static void test_large_batch(void **state)
{
    (void)state;
    tiny_batch *t = tiny_open();
    bert_model *m = t->m;
    const golden *g = &t->g;
    int T = t->T, K = t->K, n = 512;
    char err[SM_ERR_MAX] = "";
    backend whole = *t->cpu;
    whole.pass_rows = NULL;
    assert_true(bert_workspace_bytes(t->cpu, &m->cfg, n, T) * 4 <
                bert_workspace_bytes(&whole, &m->cfg, n, T));
    bert_packed_params *pp = NULL;
    const bert_params *p = params_in(t->cpu, m, BERT_FP32_PACKED, &pp);
    float *want = malloc(t->n * sizeof *want), *logits = malloc((size_t)n * K * sizeof *logits);
    int *ids = malloc((size_t)n * T * sizeof *ids), *lengths = malloc((size_t)n * sizeof *lengths);
    assert_true(want && logits && ids && lengths);
    forward_all(m, p, t->cpu, g, T, want, want + t->nl, want + t->nl + t->np);
    for (int b = 0; b < n; b++) {
        int i = b % g->n;
        for (int k = 0; k < T; k++)
            ids[(size_t)b * T + k] = k < g->n_ids[i] ? g->ids[i][k] : tokenizer_pad_id(m->tok);
        lengths[b] = g->n_ids[i];
    }
    for (int threads = 1; threads <= 2; threads++) {
        backend *be;
        assert_int_equal(backend_cpu_create(threads, &be, err), SM_OK);
        bert_workspace *ws;
        assert_int_equal(bert_workspace_create(be, &m->cfg, n, T, &ws, err), SM_OK);
        for (size_t j = 0; j < (size_t)n * K; j++) logits[j] = NAN;
        assert_int_equal(bert_forward(&m->cfg, p, ws, ids, lengths, n, T, logits, NULL, err),
                         SM_OK);
        for (int b = 0; b < n; b++)
            assert_floats(logits + (size_t)b * K, want + (size_t)(b % g->n) * K, (size_t)K, 0);
        bert_workspace_free(ws);
        be->destroy(be);
    }
    bert_packed_params_free(pp);
    free(want);
    free(logits);
    free(ids);
    free(lengths);
    tiny_close(t);
}

/* Reads a whole file for the buffer-loading tests. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void test_save_load_round_trip(void **state)
{
    (void)state;
    const char *dir = "tests/fixtures/models/ernie_tiny";
    bert_model *m = load(dir);
    char err[SM_ERR_MAX] = "";
    size_t cfg_len, vocab_len;
    char *cfg = slurp("tests/fixtures/models/ernie_tiny/config.json", &cfg_len);
    char *vocab = slurp("tests/fixtures/models/ernie_tiny/vocab.txt", &vocab_len);
    int dtypes[] = {ST_F32, ST_BF16, ST_F16};
    for (size_t i = 0; i < 3; i++) {
        void *bytes;
        size_t len;
        assert_int_equal(bert_model_save_safetensors(m, dtypes[i], &bytes, &len, err), SM_OK);
        bert_model *m2 = NULL;
        int rc = bert_model_load_buffers(cfg, cfg_len, vocab, vocab_len, bytes, len, &m2, err);
        if (rc) print_error("%s\n", err);
        assert_int_equal(rc, SM_OK);
        assert_int_equal(m2->n_floats, m->n_floats);
        assert_int_equal(m2->has_head, 1);
        double tol = dtypes[i] == ST_F32 ? 0.0 : dtypes[i] == ST_BF16 ? 8e-3 : 1e-3;
        for (size_t k = 0; k < m->n_floats; k++) {
            double d = fabs(m->arena[k] - m2->arena[k]);
            if (d > tol * (1 + fabs(m->arena[k]))) fail_msg("param %zu differs by %g", k, d);
        }
        bert_model_free(m2);
        free(bytes);
    }
    free(cfg);
    free(vocab);
    bert_model_free(m);
}

/* Saves the tiny BERT's tensors with one of them changed, then loads. */
static void expect_load_error(const char *cfg_text, const char *drop, const char *add,
                              const char *want)
{
    bert_model *m = load("tests/fixtures/models/bert_tiny");
    char err[SM_ERR_MAX] = "";
    bert_param_spec *specs;
    int n;
    size_t total;
    assert_int_equal(bert_param_table(&m->cfg, 1, &specs, &n, &total, err), SM_OK);
    st_write_entry *e = calloc((size_t)n + 1, sizeof *e);
    char(*names)[128] = calloc((size_t)n + 1, sizeof *names);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!strncmp(specs[i].name, "classifier", 10)) snprintf(names[k], 128, "%s", specs[i].name);
        else snprintf(names[k], 128, "bert.%s", specs[i].name);
        if (drop && !strcmp(names[k], drop)) continue;
        e[k].name = names[k];
        e[k].data = m->arena + specs[i].offset;
        e[k].ndim = specs[i].ndim;
        e[k].shape[0] = specs[i].shape[0];
        e[k].shape[1] = specs[i].shape[1];
        k++;
    }
    if (add) {
        e[k].name = add;
        e[k].data = m->arena;
        e[k].ndim = 1;
        e[k].shape[0] = 4;
        k++;
    }
    uint8_t *bytes;
    size_t len;
    assert_int_equal(safetensors_serialize(e, k, ST_F32, &bytes, &len, err), SM_OK);
    size_t vocab_len;
    char *vocab = slurp("tests/fixtures/vocab.txt", &vocab_len);
    bert_model *m2 = NULL;
    int rc = bert_model_load_buffers(cfg_text, strlen(cfg_text), vocab, vocab_len, bytes, len, &m2,
                                     err);
    assert_int_equal(rc, SM_ERR_FORMAT);
    assert_null(m2);
    if (!strstr(err, want)) fail_msg("error '%s' does not mention '%s'", err, want);
    free(vocab);
    free(bytes);
    free(names);
    free(e);
    free(specs);
    bert_model_free(m);
}

static void test_bad_checkpoints(void **state)
{
    (void)state;
    size_t len;
    char *cfg = slurp("tests/fixtures/models/bert_tiny/config.json", &len);
    expect_load_error(cfg, "bert.encoder.layer.1.output.dense.bias", NULL,
                      "missing tensor 'bert.encoder.layer.1.output.dense.bias'");
    expect_load_error(cfg, NULL, "bert.encoder.layer.7.output.dense.bias",
                      "unexpected tensor 'bert.encoder.layer.7.output.dense.bias'");
    /* A config that disagrees with the tensors: intermediate 128 -> 256. */
    char *wrong = malloc(len + 16);
    char *at = strstr(cfg, "\"intermediate_size\": 128");
    assert_non_null(at);
    snprintf(wrong, len + 16, "%.*s\"intermediate_size\": 256%s", (int)(at - cfg), cfg,
             at + strlen("\"intermediate_size\": 128"));
    expect_load_error(
        wrong, NULL, NULL,
        "tensor 'bert.encoder.layer.0.intermediate.dense.weight': expected shape [256, 64], got [128, 64]");
    free(wrong);
    free(cfg);

    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    assert_int_equal(bert_model_load_dir("tests/fixtures/no-such-model", &m, err), SM_ERR_IO);
    assert_non_null(strstr(err, "no-such-model/config.json"));
    assert_null(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert_tiny_parity),    cmocka_unit_test(test_ernie_tiny_parity),
        cmocka_unit_test(test_bert_encoder_parity), cmocka_unit_test(test_roberta_encoder_parity),
        cmocka_unit_test(test_end_to_end),          cmocka_unit_test(test_no_head_is_an_error),
        cmocka_unit_test(test_workspace_bytes),     cmocka_unit_test(test_passes),
        cmocka_unit_test(test_reduced_attention),   cmocka_unit_test(test_unpadded_rows),
        cmocka_unit_test(test_cls_rows),
        cmocka_unit_test(test_large_batch),
        cmocka_unit_test(test_save_load_round_trip),
        cmocka_unit_test(test_bad_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

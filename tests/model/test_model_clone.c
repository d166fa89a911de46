/* test_model_clone.c: bert_model_clone and bert_model_permute_head
 * (model/encoder/bert_clone.h).
 *
 * A clone must compute exactly as its source and share nothing with it.
 * For the fixture models (a WordPiece BERT classifier, tests/fixtures/train/
 * model; the XLM-R classifier with a tokenizer.json, models/xlmr_tiny; ERNIE
 * with task-type embeddings; a head-less RoBERTa encoder; the BERT one with
 * a sentence-embedding pooling setting) the clone's token ids and logits
 * (last hidden states for the encoder, pooled embeddings for the pooling
 * setting) equal the source's bit for bit over texts written for this test,
 * as do its config.json, its tokenizer file and its safetensors bytes; no
 * pointer of the clone points into the source; a change to the clone's
 * weights leaves the source's logits as they were; and after the source is
 * freed the clone gives the same bits again.
 *
 * permute_head on the 3-label head: logits come out in the new order
 * (each label keeps its logit), labels are renamed; a label that is not
 * in the head, or one named twice, is an error that leaves the model as it
 * was. Out of memory: every allocation of a clone is failed in turn (this
 * program interposes malloc, as test_c_alloc_faults.c does), and each must
 * give SM_ERR_NOMEM and no model; under AddressSanitizer that part skips
 * and says why.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "encoder/bert_clone.h"
#include "format/safetensors.h"

#define TRAIN_MODEL "tests/fixtures/train/model"
#define XLMR "tests/fixtures/models/xlmr_tiny"
#define ERNIE "tests/fixtures/models/ernie_tiny"
#define ROBERTA_ENCODER "tests/fixtures/models/roberta_encoder"
#define MAX_T 48
#define N_TEXTS 6

static const char *const k_texts[N_TEXTS] = {
    "这家酒店很干净，服务也很周到",
    "房间太小了，隔音也不好。",
    "还行吧",
    "The breakfast was cold but the staff were kind.",
    "快递很快，包装完好，下次还会再来买！！",
    "价格 199 元，性价比一般；wifi 信号弱",
};

/* ---- the interposing allocator (as in test_c_alloc_faults.c) ------------- */

#if defined(__SANITIZE_ADDRESS__)
#define NO_INTERPOSE "AddressSanitizer replaces malloc; an interposing allocator cannot run"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NO_INTERPOSE "AddressSanitizer replaces malloc; an interposing allocator cannot run"
#endif
#endif

static long g_countdown; /* > 0: the allocation that brings it to 0 fails */
static int g_failed;

#ifndef NO_INTERPOSE
static int should_fail(void)
{
    if (g_countdown > 0 && --g_countdown == 0) {
        g_failed = 1;
        return 1;
    }
    return 0;
}

#include "support/alloc_interposer.h"
#endif

/* ---- running a model ------------------------------------------------------ */

static bert_model *load(const char *dir)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(dir, &m, err);
    if (rc) print_error("%s: %s\n", dir, err);
    assert_int_equal(rc, SM_OK);
    return m;
}

static bert_model *clone_of(const bert_model *src)
{
    char err[SM_ERR_MAX] = "";
    bert_model *m = (bert_model *)1;
    int rc = bert_model_clone(src, &m, err);
    if (rc) print_error("bert_model_clone: %s\n", err);
    assert_int_equal(rc, SM_OK);
    assert_non_null(m);
    return m;
}

/* What a model makes of k_texts: the ids through its own tokenizer, and
 * logits (B, K) when it has a head, else the last hidden states (B, T, C). */
typedef struct run_out {
    int ids[N_TEXTS * MAX_T];
    int lengths[N_TEXTS];
    int T;
    float *out;
    size_t n_out;
} run_out;

static void run(const bert_model *m, run_out *r)
{
    char err[SM_ERR_MAX] = "";
    backend *be = NULL;
    bert_workspace *ws = NULL;
    int trunc;

    memset(r->ids, 0, sizeof r->ids);
    r->T = 0;
    for (int b = 0; b < N_TEXTS; b++) {
        int ids[MAX_T];
        assert_int_equal(tokenizer_encode(m->tok, k_texts[b], strlen(k_texts[b]), MAX_T, ids,
                                          &r->lengths[b], &trunc, err),
                         SM_OK);
        if (r->lengths[b] > r->T) r->T = r->lengths[b];
        memcpy(r->ids + b * MAX_T, ids, (size_t)r->lengths[b] * sizeof *ids);
    }
    /* packed (B, T), padding with the model's pad id */
    int *packed = malloc((size_t)N_TEXTS * r->T * sizeof *packed);
    assert_non_null(packed);
    for (int b = 0; b < N_TEXTS; b++)
        for (int t = 0; t < r->T; t++)
            packed[b * r->T + t] =
                t < r->lengths[b] ? r->ids[b * MAX_T + t] : m->cfg.pad_token_id;
    r->n_out = m->has_head ? (size_t)N_TEXTS * m->cfg.num_labels
                           : (size_t)N_TEXTS * r->T * m->cfg.hidden_size;
    r->out = malloc(r->n_out * sizeof *r->out);
    assert_non_null(r->out);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, N_TEXTS, r->T, &ws, err), SM_OK);
    int rc = m->has_head ? bert_forward(&m->cfg, &m->p, ws, packed, r->lengths, N_TEXTS, r->T,
                                        r->out, NULL, err)
                         : bert_forward_hidden(&m->cfg, &m->p, ws, packed, r->lengths, N_TEXTS,
                                               r->T, r->out, err);
    if (rc) print_error("forward: %s\n", err);
    assert_int_equal(rc, SM_OK);
    bert_workspace_free(ws);
    be->destroy(be);
    free(packed);
    for (size_t i = 0; i < r->n_out; i++) assert_true(isfinite(r->out[i]));
}

static void run_free(run_out *r)
{
    free(r->out);
    r->out = NULL;
}

/* The same ids and the same bits. */
static void assert_same_run(const run_out *a, const run_out *b)
{
    assert_int_equal(a->T, b->T);
    assert_memory_equal(a->lengths, b->lengths, sizeof a->lengths);
    assert_memory_equal(a->ids, b->ids, sizeof a->ids);
    assert_int_equal(a->n_out, b->n_out);
    for (size_t i = 0; i < a->n_out; i++)
        if (memcmp(&a->out[i], &b->out[i], sizeof a->out[i])) {
            print_error("output %zu: source %.9g, clone %.9g\n", i, a->out[i], b->out[i]);
            fail();
        }
}

/* config.json, the tokenizer file and the safetensors bytes of both. */
static void assert_same_files(const bert_model *a, const bert_model *b)
{
    char err[SM_ERR_MAX] = "";
    char *ca = NULL, *cb = NULL, *ta = NULL, *tb = NULL;
    const char *na = NULL, *nb = NULL;
    size_t la = 0, lb = 0, sa_len = 0, sb_len = 0;
    void *sa = NULL, *sb = NULL;
    assert_int_equal(bert_config_to_json(&a->cfg, &ca, err), SM_OK);
    assert_int_equal(bert_config_to_json(&b->cfg, &cb, err), SM_OK);
    assert_string_equal(ca, cb);
    assert_int_equal(bert_model_tokenizer_file(a, &na, &ta, &la, err), SM_OK);
    assert_int_equal(bert_model_tokenizer_file(b, &nb, &tb, &lb, err), SM_OK);
    assert_string_equal(na, nb);
    assert_int_equal(la, lb);
    assert_memory_equal(ta, tb, la);
    assert_int_equal(bert_model_save_safetensors(a, ST_F32, &sa, &sa_len, err), SM_OK);
    assert_int_equal(bert_model_save_safetensors(b, ST_F32, &sb, &sb_len, err), SM_OK);
    assert_int_equal(sa_len, sb_len);
    assert_memory_equal(sa, sb, sa_len);
    free(ca);
    free(cb);
    free(ta);
    free(tb);
    free(sa);
    free(sb);
}

static int inside(const void *p, const void *base, size_t bytes)
{
    return p && (const char *)p >= (const char *)base && (const char *)p < (const char *)base + bytes;
}

/* No pointer of c is one of m's or points into m's arena; c's views point
 * into c's own arena where m's point into m's. */
static void assert_independent(const bert_model *m, const bert_model *c)
{
    size_t bytes = m->n_floats * sizeof *m->arena;
    assert_ptr_not_equal(c, m);
    assert_ptr_not_equal(c->arena, m->arena);
    assert_ptr_not_equal(c->tok, m->tok);
    assert_ptr_not_equal(c->p.layers, m->p.layers);
    if (m->tokenizer_json) {
        assert_non_null(c->tokenizer_json);
        assert_ptr_not_equal(c->tokenizer_json, m->tokenizer_json);
    } else {
        assert_null(c->tokenizer_json);
    }
    assert_ptr_not_equal(c->cfg.id2label, m->cfg.id2label);
    for (int i = 0; i < m->cfg.num_labels; i++)
        assert_ptr_not_equal(c->cfg.id2label[i], m->cfg.id2label[i]);
    /* every view: at the same offset, in c's arena */
    const float *const mv[] = {m->p.word_emb, m->p.pos_emb, m->p.type_emb, m->p.task_emb,
                               m->p.emb_ln_w, m->p.emb_ln_b, m->p.pool_w, m->p.pool_b,
                               m->p.cls_w, m->p.cls_b};
    const float *const cv[] = {c->p.word_emb, c->p.pos_emb, c->p.type_emb, c->p.task_emb,
                               c->p.emb_ln_w, c->p.emb_ln_b, c->p.pool_w, c->p.pool_b,
                               c->p.cls_w, c->p.cls_b};
    for (size_t i = 0; i < sizeof mv / sizeof mv[0]; i++) {
        if (!mv[i]) {
            assert_null(cv[i]);
            continue;
        }
        assert_true(inside(mv[i], m->arena, bytes));
        assert_true(inside(cv[i], c->arena, bytes));
        assert_int_equal(mv[i] - m->arena, cv[i] - c->arena);
    }
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        const bert_layer_params *a = &m->p.layers[l], *b = &c->p.layers[l];
        assert_int_equal(a->qkv_w - m->arena, b->qkv_w - c->arena);
        assert_int_equal(a->ffn_out_b - m->arena, b->ffn_out_b - c->arena);
        assert_int_equal(a->ln2_b - m->arena, b->ln2_b - c->arena);
        assert_true(inside(b->ln2_b, c->arena, bytes));
    }
}

/* The whole check for one fixture: same bits, same files, independent,
 * a change to the clone does not reach the source, and the clone outlives
 * its source. */
static void check_clone(const char *dir, bert_model *src)
{
    run_out want, got, again;
    bert_model *c = clone_of(src);

    assert_int_equal(c->n_floats, src->n_floats);
    assert_int_equal(c->has_head, src->has_head);
    assert_memory_equal(&c->cfg.pooling, &src->cfg.pooling, sizeof src->cfg.pooling);
    assert_int_equal(tokenizer_vocab_size(c->tok), tokenizer_vocab_size(src->tok));
    assert_int_equal(tokenizer_do_lower_case(c->tok), tokenizer_do_lower_case(src->tok));
    run(src, &want);
    run(c, &got);
    assert_same_run(&want, &got);
    run_free(&got);
    assert_same_files(src, c);
    assert_independent(src, c);

    /* a change to the clone's weights stays in the clone */
    float *w = c->has_head ? c->p.cls_b : c->p.layers[c->cfg.num_hidden_layers - 1].ln2_b;
    float saved = w[0];
    w[0] += 1.0f;
    run(src, &got);
    assert_same_run(&want, &got);
    run_free(&got);
    run(c, &got);
    int changed = memcmp(got.out, want.out, want.n_out * sizeof *want.out) != 0;
    assert_true(changed);
    run_free(&got);
    w[0] = saved;

    /* the source freed: the clone still gives the same bits */
    bert_model_free(src);
    run(c, &again);
    assert_same_run(&want, &again);
    run_free(&again);
    run_free(&want);
    print_message("%s: %d texts, %zu outputs identical, independent of the source\n", dir,
                  N_TEXTS, want.n_out);
    bert_model_free(c);
}

static void test_clone_wordpiece_classifier(void **state)
{
    (void)state;
    bert_model *m = load(TRAIN_MODEL);
    assert_null(m->tokenizer_json);
    assert_int_equal(m->cfg.num_labels, 3);
    check_clone(TRAIN_MODEL, m);
}

static void test_clone_tokenizer_json_classifier(void **state)
{
    (void)state;
    bert_model *m = load(XLMR);
    assert_non_null(m->tokenizer_json);
    assert_true(bert_config_is_roberta(&m->cfg));
    check_clone(XLMR, m);
}

static void test_clone_ernie_task_embeddings(void **state)
{
    (void)state;
    bert_model *m = load(ERNIE);
    assert_true(m->cfg.use_task_id);
    assert_non_null(m->p.task_emb);
    check_clone(ERNIE, m);
}

static void test_clone_headless_encoder(void **state)
{
    (void)state;
    bert_model *m = load(ROBERTA_ENCODER);
    assert_false(m->has_head);
    assert_null(m->p.cls_w);
    check_clone(ROBERTA_ENCODER, m);
}

/* A sentence-embedding setting goes with the clone: same pooled bits. */
static void test_clone_keeps_pooling(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = load(TRAIN_MODEL);
    sm_pooling pool;
    sm_pooling_default(&pool);
    pool.mode = SM_POOL_CLS;
    pool.normalize = 1;
    pool.dim = m->cfg.hidden_size;
    assert_int_equal(bert_model_set_pooling(m, &pool, err), SM_OK);
    bert_model *c = clone_of(m);
    assert_int_equal(c->cfg.pooling.set, 1);
    assert_int_equal(c->cfg.pooling.mode, SM_POOL_CLS);
    assert_int_equal(c->cfg.pooling.normalize, 1);

    size_t lens[N_TEXTS];
    for (int i = 0; i < N_TEXTS; i++) lens[i] = strlen(k_texts[i]);
    const bert_model *both[2] = {m, c};
    float *emb[2];
    for (int k = 0; k < 2; k++) {
        backend *be = NULL;
        bert_workspace *ws = NULL;
        emb[k] = malloc((size_t)N_TEXTS * m->cfg.hidden_size * sizeof *emb[k]);
        assert_non_null(emb[k]);
        assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
        assert_int_equal(bert_workspace_create(be, &both[k]->cfg, N_TEXTS, MAX_T, &ws, err),
                         SM_OK);
        assert_int_equal(bert_embed_texts(both[k], &both[k]->p, ws, k_texts, lens, N_TEXTS,
                                          MAX_T, N_TEXTS, emb[k], NULL, err),
                         SM_OK);
        bert_workspace_free(ws);
        be->destroy(be);
    }
    /* normalised: each row has length 1, so the setting was applied */
    double ss = 0;
    for (int j = 0; j < m->cfg.hidden_size; j++) ss += (double)emb[0][j] * emb[0][j];
    assert_true(fabs(ss - 1.0) < 1e-4);
    assert_memory_equal(emb[0], emb[1], (size_t)N_TEXTS * m->cfg.hidden_size * sizeof *emb[0]);
    free(emb[0]);
    free(emb[1]);
    bert_model_free(m);
    bert_model_free(c);
}

/* ---- permute_head ---------------------------------------------------------- */

static void test_permute_head(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = load(TRAIN_MODEL);
    run_out before, after;
    const char *const order[3] = {"pos", "neg", "neu"};
    int from[3];
    const int K = 3;

    assert_int_equal(m->cfg.num_labels, K);
    for (int j = 0; j < K; j++) {
        from[j] = bert_config_label_index(&m->cfg, order[j]);
        assert_true(from[j] >= 0);
    }
    assert_int_not_equal(from[0], 0); /* a real reordering */
    run(m, &before);
    /* the classes' logits differ, so a wrong order would show */
    for (int b = 0; b < N_TEXTS; b++)
        for (int i = 0; i < K; i++)
            for (int j = i + 1; j < K; j++)
                assert_true(fabsf(before.out[b * K + i] - before.out[b * K + j]) > 1e-4f);

    assert_int_equal(bert_model_permute_head(m, order, err), SM_OK);
    for (int j = 0; j < K; j++) assert_string_equal(m->cfg.id2label[j], order[j]);
    run(m, &after);
    for (int b = 0; b < N_TEXTS; b++)
        for (int j = 0; j < K; j++) {
            float want = before.out[b * K + from[j]], got = after.out[b * K + j];
            /* the same dot products; a BLAS may order a column's sum by
             * where the column falls, hence not bit for bit */
            if (!(fabsf(got - want) <= 1e-6f * (1.0f + fabsf(want)))) {
                print_error("text %d class %d (%s): %.9g, want %.9g\n", b, j, order[j], got,
                            want);
                fail();
            }
        }
    run_free(&after);

    /* an unknown label, and one named twice: errors, nothing changed */
    const char *const bad[3] = {"neg", "pos", "bogus"};
    const char *const twice[3] = {"neg", "pos", "neg"};
    assert_int_equal(bert_model_permute_head(m, bad, err), SM_ERR_INVALID);
    assert_string_equal(err, "label 'bogus' is not in the head");
    assert_int_equal(bert_model_permute_head(m, twice, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "'neg'"));
    for (int j = 0; j < K; j++) assert_string_equal(m->cfg.id2label[j], order[j]);
    run(m, &after);
    for (int b = 0; b < N_TEXTS; b++)
        for (int j = 0; j < K; j++)
            assert_true(fabsf(after.out[b * K + j] - before.out[b * K + from[j]]) <=
                        1e-6f * (1.0f + fabsf(before.out[b * K + from[j]])));
    run_free(&after);

    run_free(&before);
    bert_model_free(m);

    /* a head-less model has nothing to reorder */
    bert_model *e = load(ROBERTA_ENCODER);
    const char *const two[2] = {"LABEL_1", "LABEL_0"};
    assert_int_equal(bert_model_permute_head(e, two, err), SM_ERR_INVALID);
    assert_string_equal(err, "the model has no classification head");
    bert_model_free(e);
}

/* ---- out of memory --------------------------------------------------------- */

static void sweep_clone_faults(const char *dir)
{
    char err[SM_ERR_MAX];
    bert_model *m = load(dir);
    int n = 0;
    for (long fail_at = 1;; fail_at++) {
        bert_model *c = (bert_model *)1;
        g_failed = 0;
        g_countdown = fail_at;
        err[0] = 0;
        int rc = bert_model_clone(m, &c, err);
        g_countdown = 0;
        if (!g_failed) {
            assert_int_equal(rc, SM_OK);
            bert_model_free(c);
            break;
        }
        if (rc != SM_ERR_NOMEM || c || !strstr(err, "out of memory")) {
            print_error("%s: allocation %ld failed: rc %d, model %p, '%s'\n", dir, fail_at, rc,
                        (void *)c, err);
            fail();
        }
        n++;
        assert_true(n < 10000);
    }
    assert_true(n >= 5);
    print_message("%s: each of the clone's %d allocations failed in turn: out of memory, "
                  "no model\n",
                  dir, n);
    bert_model_free(m);
}

static void test_clone_out_of_memory(void **state)
{
    (void)state;
#ifdef NO_INTERPOSE
    print_message("skipped: %s\n", NO_INTERPOSE);
    skip();
#else
    sweep_clone_faults(TRAIN_MODEL);
    sweep_clone_faults(XLMR);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clone_wordpiece_classifier),
        cmocka_unit_test(test_clone_tokenizer_json_classifier),
        cmocka_unit_test(test_clone_ernie_task_embeddings),
        cmocka_unit_test(test_clone_headless_encoder),
        cmocka_unit_test(test_clone_keeps_pooling),
        cmocka_unit_test(test_permute_head),
        cmocka_unit_test(test_clone_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

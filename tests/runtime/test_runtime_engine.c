/* test_runtime_engine.c: runtime/ on its own, with no SQLite connection:
 * the device and precision checks give model/'s codes and messages without
 * a function name (ext/ adds it), the engine's probabilities and embeddings
 * are exactly what the encoder's own calls give on a CPU backend, its
 * counters count, a stop callback ends a run with SM_ERR_INTERRUPTED, a
 * reset drops the backend but keeps the counters, and a workspace grows
 * for a larger batch. The model is the tiny BERT fixture
 * (tests/fixtures/gen_models.py).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/errors.h"
#include "runtime/device.h"
#include "runtime/engine.h"
#include "runtime/registry.h"

#define TINY_MODEL "tests/fixtures/models/bert_tiny"

static int load_tiny(void *ctx, bert_model **out, char *err)
{
    (void)ctx;
    return bert_model_load_dir(TINY_MODEL, out, err);
}

static void test_device_names(void **state)
{
    char err[SM_ERR_MAX];
    (void)state;
    assert_int_equal(rt_device_check("cpu", err), SM_OK);
    assert_int_equal(rt_device_check("auto", err), SM_OK);
    assert_int_equal(rt_device_check("tpu", err), SM_ERR_INVALID);
    assert_string_equal(err, "unknown device 'tpu'; expected auto, cpu, cuda or cuda:N");
    assert_int_equal(rt_device_check("cuda:16", err), SM_ERR_INVALID);
    assert_string_equal(err,
                        "device 'cuda:16' is not supported: at most 16 GPUs (cuda:0 .. cuda:15)");
    assert_int_equal(rt_device_precision_check("fp16", err), SM_ERR_INVALID);
    assert_string_equal(err,
                        "precision must be auto, fp32, tf32, bf16, bf16-fast or int8, got 'fp16'");
    assert_int_equal(rt_device_precision_check("bf16", err), SM_OK);
    /* a GPU-only precision on the CPU: refused when the backend is made */
    backend *be = (backend *)1;
    char desc[128];
    assert_int_equal(rt_device_create("cpu", 1, "tf32", &be, desc, sizeof desc, err),
                     SM_ERR_INVALID);
    assert_null(be);
    assert_non_null(strstr(err, "precision 'tf32' needs a CUDA device"));
    assert_int_equal(rt_device_create("cpu", 1, "fp32", &be, desc, sizeof desc, err), SM_OK);
    assert_non_null(be);
    assert_true(be->host_memory);
    assert_int_equal(strncmp(desc, "cpu: 1 thread", 13), 0);
    be->destroy(be);
}

static int stop_always(void *ctx)
{
    (void)ctx;
    return 1;
}

static void test_engine_matches_encoder(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    rt_model *m = NULL;
    assert_int_equal(rt_registry_acquire("test:runtime-tiny", NULL, 0, load_tiny, NULL, &m, err),
                     SM_OK);
    const char *texts[] = {"hello world", "the room was clean and quiet", "bad", "ok ok ok ok"};
    size_t lens[4];
    for (int i = 0; i < 4; i++) lens[i] = strlen(texts[i]);
    int K = m->bert->cfg.num_labels, C = m->bert->cfg.hidden_size;

    rt_settings s = {"cpu", 1, "fp32", 2, 8, 0};
    rt_engine e;
    memset(&e, 0, sizeof e);
    float probs[4 * 8], emb[4 * 64];
    int trunc[4];
    assert_true(K <= 8 && C <= 64);
    rt_texts in = {texts, lens, 4, 0, -1, NULL, NULL};
    assert_int_equal(rt_engine_classify(&e, &s, m, &in, probs, trunc, err), SM_OK);
    assert_non_null(e.be);
    assert_int_equal(e.rows, 4);
    assert_int_equal(e.truncated, 1); /* 8 tokens hold the long one only in part */
    assert_int_equal(e.not_chinese, 4);
    assert_int_equal(rt_engine_parallel_batches(&e), e.be->lanes(e.be));
    assert_int_equal(rt_engine_max_length(&s, m->bert), 8);

    /* the same texts through the encoder's own calls, on a backend of their
     * own with the parameters the engine chose (packed as its backend's
     * linear_pack_kind asks) */
    const bert_params *p = NULL;
    for (int i = 0; i < RT_MAX_WORKSPACES; i++)
        if (e.ws[i].model == m) p = e.ws[i].params;
    assert_non_null(p);
    backend *be = NULL;
    bert_workspace *ws = NULL;
    float want[4 * 8], want_emb[4 * 64];
    assert_int_equal(rt_device_create_cpu(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->bert->cfg, 2, 8, &ws, err), SM_OK);
    assert_int_equal(bert_classify_texts(m->bert, p, ws, texts, lens, 4, 8, 2, want,
                                         NULL, err),
                     SM_OK);
    assert_memory_equal(probs, want, sizeof(float) * 4 * K);
    assert_int_equal(rt_engine_embed(&e, &s, m, &in, emb, NULL, err), SM_OK);
    assert_int_equal(
        bert_embed_texts(m->bert, p, ws, texts, lens, 4, 8, 2, want_emb, NULL, err),
        SM_OK);
    assert_memory_equal(emb, want_emb, sizeof(float) * 4 * C);
    assert_int_equal(e.rows, 8);

    /* a larger batch grows the model's workspace; the answer is the same */
    rt_texts big = {texts, lens, 4, 4, -1, NULL, NULL};
    assert_int_equal(rt_engine_classify(&e, &s, m, &big, probs, NULL, err), SM_OK);
    assert_int_equal(e.ws[0].model == m || e.ws[1].model == m, 1);
    for (int i = 0; i < 4 * K; i++) assert_float_equal(probs[i], want[i], 1e-6);

    /* a stop: interrupted, nothing counted */
    rt_texts stopped = {texts, lens, 4, 0, -1, stop_always, NULL};
    assert_int_equal(rt_engine_classify(&e, &s, m, &stopped, probs, NULL, err),
                     SM_ERR_INTERRUPTED);
    assert_string_equal(err, "interrupted");
    assert_int_equal(e.rows, 12);

    /* a reset drops the backend and the workspaces, keeps the counters */
    rt_engine_reset(&e);
    assert_null(e.be);
    assert_null(e.ws[0].model);
    assert_int_equal(e.rows, 12);
    assert_int_equal(rt_engine_classify(&e, &s, m, &in, probs, NULL, err), SM_OK);
    assert_memory_equal(probs, want, sizeof(float) * 4 * K);

    rt_engine_reset(&e);
    bert_workspace_free(ws);
    be->destroy(be);
    rt_registry_release(m);
    rt_registry_trim();
}

static void test_engine_refuses_bad_settings(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    rt_model *m = NULL;
    assert_int_equal(rt_registry_acquire("test:runtime-tiny", NULL, 0, load_tiny, NULL, &m, err),
                     SM_OK);
    const char *texts[] = {"hello"};
    size_t lens[] = {5};
    float probs[8];
    rt_settings s = {"cuda:99", 1, "fp32", 2, 0, 0};
    rt_engine e;
    memset(&e, 0, sizeof e);
    rt_texts in = {texts, lens, 1, 0, -1, NULL, NULL};
    assert_int_equal(rt_engine_classify(&e, &s, m, &in, probs, NULL, err), SM_ERR_INVALID);
    assert_string_equal(err,
                        "device 'cuda:99' is not supported: at most 16 GPUs (cuda:0 .. cuda:15)");
    assert_null(e.be);
    assert_int_equal(e.rows, 0);
    /* no texts: nothing to do, no backend made */
    rt_texts none = {texts, lens, 0, 0, -1, NULL, NULL};
    assert_int_equal(rt_engine_classify(&e, &s, m, &none, probs, NULL, err), SM_OK);
    rt_engine_reset(&e);
    rt_registry_release(m);
    rt_registry_trim();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_names),
        cmocka_unit_test(test_engine_matches_encoder),
        cmocka_unit_test(test_engine_refuses_bad_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

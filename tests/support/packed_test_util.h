/* packed_test_util.h: helpers shared by the packed-weight tests
 * (tests/cpu/test_gemm_bf16.c, tests/cpu/test_gemm_int8.c, tests/cpu/test_gemm_f32.c).
 *
 * A seeded random stream (rand32, frand in [-1, 1), rand_floats: a new
 * array the caller frees); load_ids() reads bert_tiny's fixture batch of
 * token ids; pack() packs a model's weights by a plan on a CPU backend
 * that it destroys before returning (packed weights outlive the backend
 * that made them); forward() runs the encoder on a fresh CPU backend with
 * the given parameters (FP32 or packed) and fails the test on an error;
 * argmax() of K logits.
 */
#ifndef PACKED_TEST_UTIL_H
#define PACKED_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"

#define BERT_DIR "tests/fixtures/models/bert_tiny"

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint32_t rand32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static float frand(void)
{
    return (float)(rand32() * (1.0 / 4294967296.0)) * 2.0f - 1.0f;
}

static float *rand_floats(size_t n)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) v[i] = frand();
    return v;
}


static int load_ids(int *ids, int *lengths, int max_n, int T, int pad)
{
    char line[65536];
    FILE *f = fopen(BERT_DIR "/golden.tsv", "r");
    int n = 0;
    assert_non_null(f);
    while (n < max_n && fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t'), *end;
        assert_non_null(tab);
        int t = 0;
        for (char *p = tab + 1; t < T; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            ids[n * T + t++] = (int)v;
            if (*end == '\t') break;
        }
        lengths[n] = t;
        for (; t < T; t++) ids[n * T + t] = pad;
        n++;
    }
    fclose(f);
    return n;
}

static void forward(bert_model *m, const bert_params *p, int threads, const int *ids,
                    const int *lengths, int B, int T, float *logits)
{
    char err[SM_ERR_MAX] = "";
    backend *be;
    bert_workspace *ws;
    assert_int_equal(backend_cpu_create(threads, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, B, T, &ws, err), SM_OK);
    int rc = bert_forward(&m->cfg, p, ws, ids, lengths, B, T, logits, NULL, err);
    if (rc) print_error("forward: %s\n", err);
    assert_int_equal(rc, SM_OK);
    bert_workspace_free(ws);
    be->destroy(be);
}

static bert_packed_params *pack(const bert_model *m, const bert_precision plan[BERT_PACK_N])
{
    char err[SM_ERR_MAX] = "";
    backend *be;
    bert_packed_params *pp = NULL;
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    int rc = bert_params_pack(be, &m->cfg, &m->p, plan, &pp, err);
    if (rc) print_error("pack: %s\n", err);
    assert_int_equal(rc, SM_OK);
    be->destroy(be);
    return pp;
}

static int argmax(const float *v, int K)
{
    int best = 0;
    for (int k = 1; k < K; k++)
        if (v[k] > v[best]) best = k;
    return best;
}


#endif

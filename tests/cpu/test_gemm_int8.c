/* test_gemm_int8.c: the INT8 linear layers (cpu/gemm_int8.c) and INT8
 * inference of the encoder (model/encoder/bert_packed.c).
 *
 * Everywhere: weight quantization of chosen values (per-row scale, ties to
 * even, zero rows, padding, column sums, the packed layout), activation
 * quantization of chosen rows (zero, constant, one-signed, wide ranges,
 * non-finite: each value within half a step), and the plain C kernel
 * against FP32 sgemm within the quantization bound
 *     |out - exact| <= (xs/2) sum|w| + (ws/2) sum|x| + K xs ws / 4
 * (plus float rounding) over R, K, N in {1, 2, 3, 5, 15, 17, 31, 33, 127,
 * 128, 129}, with rows of mixed kinds (uniform, outliers, positive only,
 * zero, constant).
 * With AVX512-VNNI (else they print "skipped: no AVX512-VNNI"): the
 * AVX-512 kernel against the plain C one bit for bit (the same integers,
 * the same float steps) over the same shapes and encoder shapes up to
 * 3072; non-finite rows; column and row splits and the CPU backend's
 * threaded op bit-identical to one call. Then bert_tiny's logits with INT8
 * weights within BERT_TOL of FP32 with the same top class, one batch, on
 * lanes (with the plain C kernel where the CPU lacks VNNI).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "cpu/backend_cpu.h"
#include "cpu/blas.h"
#include "cpu/gemm_int8.h"
#include "encoder/bert.h"
#include "support/packed_test_util.h"

/* |int8 logits - fp32 logits| on bert_tiny (measured 7.5e-4 on the
 * fixture, about 1% of its largest logit, 0.1: the model has random
 * weights; bf16 moves them by 3.1e-4). */
#define BERT_TOL 5e-3

static const int k_sizes[] = {1, 2, 3, 5, 15, 17, 31, 33, 127, 128, 129};
#define N_SIZES (int)(sizeof k_sizes / sizeof *k_sizes)

/* Rows of R x K inputs of mixed kinds, by row: uniform in [-1, 1], wide
 * with an outlier, non-negative (as after GELU, with a small negative
 * tail), all zero, constant, tiny. */
static float *rand_rows(int R, int K)
{
    float *x = rand_floats((size_t)R * K);
    for (int r = 0; r < R; r++) {
        float *row = x + (size_t)r * K;
        switch (r % 6) {
        case 1:
            for (int k = 0; k < K; k++) row[k] *= 30.0f;
            row[rand32() % K] = 400.0f;
            break;
        case 2:
            for (int k = 0; k < K; k++) row[k] = row[k] > -0.17f ? fabsf(row[k]) * 3 : -0.17f;
            break;
        case 3:
            if (r % 12 == 3) memset(row, 0, (size_t)K * sizeof *row);
            break;
        case 4:
            if (r % 12 == 4)
                for (int k = 0; k < K; k++) row[k] = -2.5f;
            break;
        case 5:
            for (int k = 0; k < K; k++) row[k] *= 1e-6f;
            break;
        }
    }
    return x;
}

static int have_vnni(void)
{
    if (gemm_int8_supported()) return 1;
    print_message("skipped: no AVX512-VNNI\n");
    return 0;
}

/* ---- weights ------------------------------------------------------------- */

static void test_pack(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    static const int shapes[][2] = {{1, 1}, {1, 2}, {2, 1}, {17, 15}, {31, 33}, {33, 31},
                                    {129, 127}, {128, 128}, {64, 3}, {768, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s][0], K = shapes[s][1];
        float *W = rand_floats((size_t)N * K);
        if (N > 3) memset(W + (size_t)3 * K, 0, (size_t)K * sizeof *W); /* a zero row */
        gemm_int8_weight *w = NULL;
        assert_int_equal(gemm_int8_pack(W, N, K, &w, err), SM_OK);
        assert_int_equal(w->N, N);
        assert_int_equal(w->K, K);
        assert_int_equal(w->quads, (K + 3) / 4);
        assert_int_equal(w->panels, (N + GEMM_INT8_PANEL - 1) / GEMM_INT8_PANEL);
        assert_int_equal((uintptr_t)w->data % 64, 0);
        for (int n = 0; n < w->panels * GEMM_INT8_PANEL; n++) {
            const float *row = W + (size_t)n * K;
            float amax = 0;
            int32_t sum = 0;
            for (int k = 0; n < N && k < K; k++) amax = fmaxf(amax, fabsf(row[k]));
            for (int k = 0; k < 4 * w->quads; k++) {
                int got = gemm_int8_unpack(w, n, k);
                int want = 0;
                if (n < N && k < K && amax > 0) want = (int)nearbyintf(row[k] * (127.0f / amax));
                assert_int_equal(got, want);
                assert_true(got >= -127 && got <= 127);
                /* within half a step of the weight */
                if (n < N && k < K)
                    assert_true(fabsf(got * w->wscale[n] - row[k]) <= 0.5001f * w->wscale[n]);
                sum += got;
            }
            assert_int_equal(w->colsum[n], sum);
            float ws = n < N ? amax / 127.0f : 0.0f;
            assert_memory_equal(&w->wscale[n], &ws, sizeof ws);
        }
        if (N > 3) {
            assert_true(w->wscale[3] == 0.0f);
            assert_int_equal(w->colsum[3], 0);
        }
        /* the layout vpdpbusd reads: per quad, column c's four values at
         * 4c .. 4c+3 of the panel's 128 bytes */
        assert_int_equal(w->data[0], gemm_int8_unpack(w, 0, 0));
        if (K > 1) assert_int_equal(w->data[1], gemm_int8_unpack(w, 0, 1));
        if (N > 1) assert_int_equal(w->data[4], gemm_int8_unpack(w, 1, 0));
        if (K > 4) assert_int_equal(w->data[4 * GEMM_INT8_PANEL], gemm_int8_unpack(w, 0, 4));
        gemm_int8_free(w);
        free(W);
    }
    /* chosen values: the largest magnitude maps to +-127, ties to even */
    float W[8] = {1.0f, -0.5f, 0.25f, 0.0f, -1.0f, 63.5f / 127.0f, 0.0f, 0.0f};
    gemm_int8_weight *w = NULL;
    assert_int_equal(gemm_int8_pack(W, 1, 8, &w, err), SM_OK);
    static const int want[8] = {127, -64, 32, 0, -127, 64, 0, 0};
    for (int k = 0; k < 8; k++) assert_int_equal(gemm_int8_unpack(w, 0, k), want[k]);
    assert_true(w->wscale[0] == 1.0f / 127.0f);
    assert_int_equal(w->colsum[0], 127 - 64 + 32 - 127 + 64);
    gemm_int8_free(w);
    /* refused */
    w = (gemm_int8_weight *)0x1;
    float one = 1.0f, bad[2] = {1.0f, INFINITY};
    assert_int_equal(gemm_int8_pack(&one, 0, 1, &w, err), SM_ERR_INVALID);
    assert_null(w);
    assert_int_equal(gemm_int8_pack(&one, 1, -1, &w, err), SM_ERR_INVALID);
    assert_int_equal(gemm_int8_pack(&one, 1, GEMM_INT8_MAX_K + 1, &w, err), SM_ERR_INVALID);
    assert_int_equal(gemm_int8_pack(bad, 1, 2, &w, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "not finite"));
    bad[1] = NAN;
    assert_int_equal(gemm_int8_pack(bad, 2, 1, &w, err), SM_ERR_INVALID);
    assert_null(w);
    gemm_int8_free(NULL);
}

/* ---- activations --------------------------------------------------------- */

/* Every value of x within half a step (xs/2) of its dequantized value. */
static void check_row(const float *x, int K)
{
    uint8_t *q = malloc((size_t)K);
    float xs;
    int zero;
    gemm_int8_quantize_row(x, K, q, &xs, &zero);
    assert_true(zero >= 0 && zero <= 255);
    for (int k = 0; k < K; k++) {
        double back = (double)xs * (q[k] - zero);
        if (!(fabs(back - x[k]) <= 0.5001 * xs))
            print_error("K=%d x[%d]=%.9g: q %d zero %d scale %.9g -> %.9g\n", K, k, x[k], q[k],
                        zero, xs, back);
        assert_true(fabs(back - x[k]) <= 0.5001 * xs);
    }
    free(q);
}

static void test_quantize_rows(void **state)
{
    (void)state;
    uint8_t q[8];
    float xs;
    int zero;
    /* all zero: scale 0, every q 0 */
    float zeros[5] = {0, -0.0f, 0, 0, 0};
    gemm_int8_quantize_row(zeros, 5, q, &xs, &zero);
    assert_true(xs == 0.0f);
    assert_int_equal(zero, 0);
    for (int k = 0; k < 5; k++) assert_int_equal(q[k], 0);
    /* a positive constant: range [0, c], exact at 255 */
    float pos[3] = {2.0f, 2.0f, 2.0f};
    gemm_int8_quantize_row(pos, 3, q, &xs, &zero);
    assert_int_equal(zero, 0);
    assert_true(xs == 2.0f / 255.0f);
    for (int k = 0; k < 3; k++) assert_int_equal(q[k], 255);
    /* a negative constant: range [c, 0], zero point 255, exact at 0 */
    float neg[3] = {-3.0f, -3.0f, -3.0f};
    gemm_int8_quantize_row(neg, 3, q, &xs, &zero);
    assert_int_equal(zero, 255);
    for (int k = 0; k < 3; k++) assert_int_equal(q[k], 0);
    /* both signs: 0 is exact (q = zero), the ends map to 0 and 255 */
    float mixed[4] = {-1.0f, 0.0f, 3.0f, 1.0f};
    gemm_int8_quantize_row(mixed, 4, q, &xs, &zero);
    assert_true(xs == 4.0f / 255.0f);
    assert_int_equal(zero, (int)nearbyintf(255.0f / 4.0f));
    assert_int_equal(q[0], 0);
    assert_int_equal(q[1], zero);
    assert_int_equal(q[2], 255);
    check_row(mixed, 4);
    /* non-finite: scale NaN (the outputs become NaN) */
    float inf[3] = {1.0f, INFINITY, 2.0f}, nan[2] = {NAN, 1.0f};
    gemm_int8_quantize_row(inf, 3, NULL, &xs, &zero);
    assert_true(isnan(xs));
    gemm_int8_quantize_row(nan, 2, NULL, &xs, &zero);
    assert_true(isnan(xs));
    float huge[2] = {-3e38f, 3e38f}; /* the range overflows */
    gemm_int8_quantize_row(huge, 2, NULL, &xs, &zero);
    assert_true(isnan(xs));
    /* large and small ranges, one-signed and skewed rows */
    static const float scales[] = {1e-30f, 1e-6f, 1.0f, 1e3f, 1e30f};
    for (size_t s = 0; s < sizeof scales / sizeof *scales; s++)
        for (int K = 1; K <= 300; K += 37) {
            float *x = rand_floats((size_t)K);
            for (int k = 0; k < K; k++) x[k] *= scales[s];
            check_row(x, K);
            for (int k = 0; k < K; k++) x[k] = fabsf(x[k]);
            check_row(x, K);
            for (int k = 0; k < K; k++) x[k] = x[k] * 0.01f - scales[s];
            check_row(x, K);
            free(x);
        }
}

/* ---- products ------------------------------------------------------------ */

/* out from the plain C kernel or the AVX-512 one (through the public entry
 * point), NaN-filled first. */
static void run_kernel(int avx512, float *out, const float *x, const gemm_int8_weight *w,
                       const float *b, int R, int K, int N)
{
    for (size_t i = 0; i < (size_t)R * N; i++) out[i] = NAN;
    if (avx512) assert_int_equal(gemm_int8_linear(out, x, w, b, R, K, N), SM_OK);
    else gemm_int8_linear_scalar(out, x, w, b, R, 0, N);
}

/* One product: the plain C kernel against FP32 sgemm within the
 * quantization bound and, with AVX-512, the kernel against the plain C one
 * bit for bit. Returns the worst error relative to the bound. */
static double check_product(int R, int K, int N, int with_bias, int with_avx512)
{
    char err[SM_ERR_MAX];
    float *x = rand_rows(R, K), *W = rand_floats((size_t)N * K);
    float *b = with_bias ? rand_floats((size_t)N) : NULL;
    float *ref = malloc((size_t)R * N * sizeof *ref), *f32 = malloc((size_t)R * N * sizeof *f32);
    float *got = malloc((size_t)R * N * sizeof *got);
    gemm_int8_weight *w;
    assert_non_null(ref);
    assert_non_null(f32);
    assert_non_null(got);
    for (int n = 0; n < N; n += 5) W[(size_t)n * K] *= 8; /* uneven rows of W */
    assert_int_equal(gemm_int8_pack(W, N, K, &w, err), SM_OK);
    run_kernel(0, ref, x, w, b, R, K, N);
    if (with_avx512) {
        run_kernel(1, got, x, w, b, R, K, N);
        for (size_t i = 0; i < (size_t)R * N; i++)
            if (memcmp(&got[i], &ref[i], sizeof got[i])) {
                print_error("R=%d K=%d N=%d bias=%d [%zu,%zu]: kernel %.9g, plain C %.9g\n", R,
                            K, N, with_bias, i / N, i % N, got[i], ref[i]);
                fail();
            }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < N; n++) f32[(size_t)r * N + n] = b ? b[n] : 0.0f;
    blas_sgemm(0, 1, R, N, K, 1.0f, x, K, W, K, 1.0f, f32, N);
    double worst = 0;
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * K;
        float xs;
        int zero;
        gemm_int8_quantize_row(xr, K, NULL, &xs, &zero);
        for (int n = 0; n < N; n++) {
            const float *wn = W + (size_t)n * K;
            double sx = 0, sw = 0, sxw = fabs(b ? b[n] : 0.0);
            for (int k = 0; k < K; k++) {
                sx += fabs(xr[k]);
                sw += fabs(wn[k]);
                sxw += fabs((double)xr[k] * wn[k]);
            }
            double ws = w->wscale[n];
            double bound = xs / 2 * sw + ws / 2 * sx + K * xs * ws / 4;
            bound = bound * 1.001 + 1e-5 * sxw + 1e-30;
            double d = fabs((double)ref[(size_t)r * N + n] - f32[(size_t)r * N + n]);
            if (!(d <= bound))
                print_error("R=%d K=%d N=%d [%d,%d]: int8 %.9g vs sgemm %.9g (bound %.3g)\n", R,
                            K, N, r, n, ref[(size_t)r * N + n], f32[(size_t)r * N + n], bound);
            assert_true(d <= bound);
            worst = d / bound > worst ? d / bound : worst;
        }
    }
    gemm_int8_free(w);
    free(x);
    free(W);
    free(b);
    free(ref);
    free(f32);
    free(got);
    return worst;
}

static void test_scalar_vs_sgemm(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    assert_int_equal(blas_load(err), SM_OK);
    blas_set_threads(1);
    double worst = 0, d;
    for (int i = 0; i < N_SIZES; i += 2)
        for (int j = 0; j < N_SIZES; j++)
            for (int l = 0; l < N_SIZES; l += 3) {
                d = check_product(k_sizes[i], k_sizes[j], k_sizes[l], (i + j + l) % 2, 0);
                worst = d > worst ? d : worst;
            }
    d = check_product(7, 3072, 33, 1, 0);
    worst = d > worst ? d : worst;
    print_message("worst |int8 - sgemm| / quantization bound: %.3f\n", worst);
    /* the bound is not loose by orders of magnitude: products that ignored
     * the quantization (or quantized far more finely) would sit near 0 */
    assert_true(worst > 0.05);
}

static void test_avx512_vs_scalar(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    if (!have_vnni()) return;
    assert_int_equal(blas_load(err), SM_OK);
    blas_set_threads(1);
    for (int i = 0; i < N_SIZES; i++)
        for (int j = 0; j < N_SIZES; j++)
            for (int l = 0; l < N_SIZES; l++)
                check_product(k_sizes[i], k_sizes[j], k_sizes[l], (i + j + l) % 2, 1);
    /* the encoder's shapes: K past one block of quads (768), N up to 3072,
     * R past one block of rows (96) */
    static const int big[][3] = {{33, 768, 129}, {17, 3072, 33}, {5, 3072, 768},
                                 {129, 768, 31}, {9, 768, 3072}, {100, 385, 97},
                                 {200, 769, 64}, {97, 128, 512}, {3, 1537, 2304}};
    for (size_t s = 0; s < sizeof big / sizeof *big; s++)
        for (int bias = 0; bias < 2; bias++)
            check_product(big[s][0], big[s][1], big[s][2], bias, 1);
}

/* A row with an infinity or NaN gives NaN outputs in that row only, in both
 * kernels; the other rows are those of a product without it. */
static void test_non_finite_rows(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    enum { R = 30, K = 50, N = 40 };
    float *x = rand_rows(R, K), *W = rand_floats((size_t)N * K), *b = rand_floats(N);
    float *clean = malloc(R * N * sizeof *clean), *got = malloc(R * N * sizeof *got);
    gemm_int8_weight *w;
    assert_int_equal(gemm_int8_pack(W, N, K, &w, err), SM_OK);
    for (int avx = 0; avx < 2; avx++) {
        if (avx && !have_vnni()) break;
        run_kernel(avx, clean, x, w, b, R, K, N);
        float saved[3] = {x[4 * K + 7], x[17 * K], x[29 * K + 49]};
        x[4 * K + 7] = INFINITY;
        x[17 * K] = NAN;
        x[29 * K + 49] = -INFINITY;
        run_kernel(avx, got, x, w, b, R, K, N);
        for (int r = 0; r < R; r++)
            for (int n = 0; n < N; n++) {
                float g = got[r * N + n], c = clean[r * N + n];
                if (r == 4 || r == 17 || r == 29) assert_true(isnan(g));
                else assert_memory_equal(&g, &c, sizeof g);
            }
        x[4 * K + 7] = saved[0];
        x[17 * K] = saved[1];
        x[29 * K + 49] = saved[2];
    }
    gemm_int8_free(w);
    free(x);
    free(W);
    free(b);
    free(clean);
    free(got);
}

/* Splitting by columns or rows, and the CPU backend's threaded op, give
 * the bits of one call. */
static void test_splits(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    if (!have_vnni()) return;
    static const int shapes[][3] = {{300, 768, 200}, {7, 768, 2304}, {1000, 64, 192}, {5, 3, 70},
                                    {512, 768, 768}};
    backend *be;
    assert_int_equal(backend_cpu_create(2, &be, err), SM_OK);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int R = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *x = rand_rows(R, K), *W = rand_floats((size_t)N * K), *b = rand_floats((size_t)N);
        size_t n = (size_t)R * N;
        float *one = malloc(n * sizeof *one), *part = malloc(n * sizeof *part);
        gemm_int8_weight *w;
        assert_int_equal(gemm_int8_pack(W, N, K, &w, err), SM_OK);
        assert_int_equal(gemm_int8_linear(one, x, w, b, R, K, N), SM_OK);
        for (int c = 0; c < N; c += 2 * GEMM_INT8_PANEL)
            gemm_int8_linear_cols(part, x, w, b, R, c, c + 2 * GEMM_INT8_PANEL);
        assert_memory_equal(one, part, n * sizeof *one);
        memset(part, 0, n * sizeof *part);
        for (int r = 0; r < R; r += 13)
            gemm_int8_linear_cols(part + (size_t)r * N, x + (size_t)r * K, w, b,
                                  R - r < 13 ? R - r : 13, 0, N);
        assert_memory_equal(one, part, n * sizeof *one);
        memset(part, 0, n * sizeof *part);
        backend_packed *bw;
        assert_int_equal(be->pack_weight(be, BACKEND_PACK_INT8, W, N, K, &bw, err), SM_OK);
        assert_int_equal(bw->kind, BACKEND_PACK_INT8);
        assert_int_equal(be->linear_packed(be, part, x, bw, b, R, K, N), SM_OK);
        assert_memory_equal(one, part, n * sizeof *one);
        assert_int_equal(gemm_int8_linear(part, x, w, b, R, K + 1, N), SM_ERR_INVALID);
        assert_int_equal(be->linear_packed(be, part, x, bw, b, R, K, N + 1), SM_ERR_INVALID);
        backend_packed_free(bw);
        gemm_int8_free(w);
        free(x);
        free(W);
        free(b);
        free(one);
        free(part);
    }
    be->destroy(be);
}

/* ---- the encoder --------------------------------------------------------- */

/* Token ids of the fixture's texts (the second column of golden.tsv),
 * padded to T; returns the count. */
static void test_bert_int8_logits(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    enum { MAXB = 32, T = 64 };
    bert_model *m;
    bert_packed_params *pp;
    bert_precision plan[BERT_PACK_N];
    bert_pack_plan(BERT_INT8, plan);
    assert_int_equal(bert_model_load_dir(BERT_DIR, &m, err), SM_OK);
    pp = pack(m, plan);
    int n_int8 = 0;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        const bert_layer_params *lp = &pp->p.layers[l];
        const backend_packed *pw[BERT_PACK_N] = {lp->qkv_pw, lp->attn_out_pw, lp->ffn_in_pw,
                                                 lp->ffn_out_pw};
        for (int i = 0; i < BERT_PACK_N; i++) {
            int is_int8 = pw[i] && pw[i]->kind == BACKEND_PACK_INT8;
            assert_true(is_int8 == (plan[i] == BERT_INT8));
            assert_true(pw[i] == NULL || is_int8);
            n_int8 += is_int8;
        }
    }
    assert_true(n_int8 >= 3 * m->cfg.num_hidden_layers); /* QKV, attention out, FFN in */
    assert_null(m->p.layers[0].qkv_pw); /* the FP32 parameters are untouched */
    int *ids = malloc(MAXB * T * sizeof *ids), lengths[MAXB], K = m->cfg.num_labels;
    int B = load_ids(ids, lengths, MAXB, T, tokenizer_pad_id(m->tok));
    assert_true(B >= 8);
    float *f32 = malloc((size_t)B * K * sizeof *f32), *i8 = malloc((size_t)B * K * sizeof *i8);
    float *lanes = malloc((size_t)B * K * sizeof *lanes);
    forward(m, &m->p, 1, ids, lengths, B, T, f32);
    forward(m, &pp->p, 1, ids, lengths, B, T, i8);
    forward(m, &pp->p, 2, ids, lengths, B, T, lanes); /* B >= 4: two lanes */
    if (!gemm_int8_supported()) print_message("skipped: no AVX512-VNNI (bert_tiny checked with "
                                              "the plain C kernel)\n");
    double worst = 0, scale = 0, lane_diff = 0;
    int flips = 0;
    for (int i = 0; i < B * K; i++) {
        double d = fabs((double)i8[i] - f32[i]);
        worst = d > worst ? d : worst;
        scale = fabs(f32[i]) > scale ? fabs(f32[i]) : scale;
        d = fabs((double)lanes[i] - i8[i]);
        lane_diff = d > lane_diff ? d : lane_diff;
    }
    for (int b = 0; b < B; b++) {
        const float *l = f32 + b * K;
        int top = argmax(l, K), second = top ? 0 : 1;
        for (int k = 0; k < K; k++)
            if (k != top && l[k] > l[second]) second = k;
        /* a tie closer than the tolerance may legitimately flip */
        if (argmax(i8 + b * K, K) != top && l[top] - l[second] > 2 * BERT_TOL) flips++;
    }
    print_message("bert_tiny, %d texts: max |int8 - fp32| logit %.2e (largest logit %.2e), "
                  "lanes vs one thread %.1e, top class changed %d\n",
                  B, worst, scale, lane_diff, flips);
    assert_true(worst <= BERT_TOL);
    assert_true(worst > 0); /* the INT8 weights were used */
    assert_int_equal(flips, 0);
    assert_true(lane_diff <= 1e-6); /* rows are quantized on their own */
    free(ids);
    free(f32);
    free(i8);
    free(lanes);
    bert_packed_params_free(pp);
    bert_model_free(m);
}

/* int8 weights on a backend without linear_packed are an error, not a crash;
 * a plan mixing precisions runs each matrix as packed. */
static void test_bert_int8_needs_the_op(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m;
    bert_packed_params *pp;
    backend *be;
    bert_workspace *ws;
    bert_precision plan[BERT_PACK_N] = {BERT_FP32, BERT_FP32, BERT_FP32, BERT_INT8};
    assert_int_equal(bert_model_load_dir(BERT_DIR, &m, err), SM_OK);
    pp = pack(m, plan);
    assert_null(pp->p.layers[0].qkv_pw);
    assert_non_null(pp->p.layers[0].ffn_out_pw);
    assert_int_equal(pp->p.layers[0].ffn_out_pw->kind, BACKEND_PACK_INT8);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 1, 8, &ws, err), SM_OK);
    int ids[4] = {2, 10, 11, 3}, len = 4;
    float logits[8], f32[8];
    assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, 4, f32, NULL, err), SM_OK);
    assert_int_equal(bert_forward(&m->cfg, &pp->p, ws, ids, &len, 1, 4, logits, NULL, err),
                     SM_OK);
    assert_true(memcmp(logits, f32, (size_t)m->cfg.num_labels * sizeof *f32) != 0);
    be->linear_packed = NULL;
    assert_int_equal(bert_forward(&m->cfg, &pp->p, ws, ids, &len, 1, 4, logits, NULL, err),
                     SM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "int8"));
    bert_precision bad[BERT_PACK_N] = {BERT_INT8, BERT_INT8, (bert_precision)7, BERT_INT8};
    bert_packed_params *none = (bert_packed_params *)0x1;
    assert_int_equal(bert_params_pack(be, &m->cfg, &m->p, bad, &none, err), SM_ERR_INVALID);
    assert_null(none);
    bert_workspace_free(ws);
    be->destroy(be);
    bert_packed_params_free(pp);
    bert_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_quantize_rows),
        cmocka_unit_test(test_scalar_vs_sgemm),
        cmocka_unit_test(test_avx512_vs_scalar),
        cmocka_unit_test(test_non_finite_rows),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_bert_int8_logits),
        cmocka_unit_test(test_bert_int8_needs_the_op),
    };
    printf("test_gemm_int8: AVX512-VNNI %s\n", gemm_int8_supported() ? "present" : "absent");
    return cmocka_run_group_tests(tests, NULL, NULL);
}

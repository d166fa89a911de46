/* test_gemm_f32.c: the packed FP32 linear layers (cpu/gemm_f32.c) and
 * FP32 inference of the encoder with packed weights (model/encoder/bert_packed.c).
 *
 * Everywhere: the packed layout and its padding; the plain C kernel
 * against a double-precision reference within the error bound of a
 * sequential FP32 sum, (K + 1) u (|b| + sum |x_k w_k|) with u = 2^-24, and
 * against OpenBLAS sgemm within twice that, over ragged R, K, N (1 x 1,
 * 13 x 7, K = 1, 3, 3072, 8200, ...) with and without bias; the worst error seen
 * must also stay near sqrt(K) u, the size of rounding that does not pile
 * up. Non-finite inputs, weights and biases propagate to exactly the rows
 * and columns they touch. With AVX-512F (else they print "skipped: no
 * AVX-512F"): the kernel against the plain C one bit for bit over the same
 * shapes and the encoder's up to 3072; column and row splits and the CPU
 * backend's threaded op bit-identical to one call. Then bert_tiny's logits
 * with packed FP32 weights within 1e-5 of OpenBLAS FP32, one batch and on
 * lanes, and the error when a backend lacks the op.
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
#include "cpu/gemm_f32.h"
#include "encoder/bert.h"
#include "support/packed_test_util.h"

#define U 0x1p-24 /* unit roundoff of FP32 */

static const int k_sizes[] = {1, 2, 3, 7, 12, 13, 16, 17, 31, 32, 33, 97, 128, 129};
#define N_SIZES (int)(sizeof k_sizes / sizeof *k_sizes)

static int have_avx512(void)
{
    if (gemm_f32_supported()) return 1;
    print_message("skipped: no AVX-512F\n");
    return 0;
}

/* ---- weights ------------------------------------------------------------- */

static void test_pack(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    static const int shapes[][2] = {{1, 1}, {1, 2}, {2, 1}, {7, 13}, {31, 33}, {33, 31},
                                    {32, 3}, {129, 127}, {768, 5}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s][0], K = shapes[s][1];
        float *W = rand_floats((size_t)N * K);
        gemm_f32_weight *w = NULL;
        assert_int_equal(gemm_f32_pack(W, N, K, &w, err), SM_OK);
        assert_int_equal(w->N, N);
        assert_int_equal(w->K, K);
        assert_int_equal(w->panels, (N + GEMM_F32_PANEL - 1) / GEMM_F32_PANEL);
        assert_true((uintptr_t)w->data % 64 == 0);
        for (int n = 0; n < w->panels * GEMM_F32_PANEL; n++)
            for (int k = 0; k < K; k++) {
                float got = gemm_f32_unpack(w, n, k), want = n < N ? W[(size_t)n * K + k] : 0;
                assert_memory_equal(&got, &want, sizeof got);
            }
        /* the layout the kernel reads: per k, the panel's 32 columns side by side */
        assert_true(w->data[0] == W[0]);
        if (N > 1) assert_true(w->data[1] == W[K]);
        if (K > 1) assert_true(w->data[GEMM_F32_PANEL] == W[1]);
        if (N > GEMM_F32_PANEL)
            assert_true(w->data[(size_t)K * GEMM_F32_PANEL] == W[(size_t)GEMM_F32_PANEL * K]);
        gemm_f32_free(w);
        free(W);
    }
    /* non-finite weights are kept as they are */
    float odd[3] = {INFINITY, NAN, -0.0f};
    gemm_f32_weight *w = NULL;
    assert_int_equal(gemm_f32_pack(odd, 3, 1, &w, err), SM_OK);
    assert_true(isinf(gemm_f32_unpack(w, 0, 0)) && gemm_f32_unpack(w, 0, 0) > 0);
    assert_true(isnan(gemm_f32_unpack(w, 1, 0)));
    assert_true(signbit(gemm_f32_unpack(w, 2, 0)));
    gemm_f32_free(w);
    /* refused */
    w = (gemm_f32_weight *)0x1;
    float one = 1.0f;
    assert_int_equal(gemm_f32_pack(&one, 0, 1, &w, err), SM_ERR_INVALID);
    assert_null(w);
    assert_int_equal(gemm_f32_pack(&one, 1, -1, &w, err), SM_ERR_INVALID);
    assert_int_equal(gemm_f32_pack(&one, 1, (1 << 24) + 1, &w, err), SM_ERR_INVALID);
    assert_non_null(strstr(err, "out of range"));
    assert_null(w);
    gemm_f32_free(NULL);
}

/* ---- products ------------------------------------------------------------ */

/* out from the plain C kernel or the AVX-512 one (through the public entry
 * point), NaN-filled first. */
static void run_kernel(int avx512, float *out, const float *x, const gemm_f32_weight *w,
                       const float *b, int R, int K, int N)
{
    for (size_t i = 0; i < (size_t)R * N; i++) out[i] = NAN;
    if (avx512) assert_int_equal(gemm_f32_linear(out, x, w, b, R, K, N), SM_OK);
    else gemm_f32_linear_scalar(out, x, w, b, R, 0, N);
}

typedef struct worst {
    double bound;  /* worst |plain C - exact| / ((K + 1) u S) */
    double sqrtk;  /* worst |plain C - exact| / (sqrt(K + 1) u S) */
    double sgemm;  /* worst |plain C - sgemm| / ((K + 1) u S) */
} worst;

/* One product: the plain C kernel against the double-precision reference
 * and sgemm and, with AVX-512, the kernel against the plain C one bit for
 * bit. Inputs of mixed magnitudes (rows scaled by up to 2^10, rows of W by
 * up to 8). */
static void check_product(int R, int K, int N, int with_bias, int with_avx512, worst *wst)
{
    char err[SM_ERR_MAX];
    float *x = rand_floats((size_t)R * K), *W = rand_floats((size_t)N * K);
    float *b = with_bias ? rand_floats((size_t)N) : NULL;
    float *ref = malloc((size_t)R * N * sizeof *ref), *f32 = malloc((size_t)R * N * sizeof *f32);
    float *got = malloc((size_t)R * N * sizeof *got);
    gemm_f32_weight *w;
    assert_non_null(ref);
    assert_non_null(f32);
    assert_non_null(got);
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) x[(size_t)r * K + k] *= (float)(1 << (r % 11));
    for (int n = 0; n < N; n += 5)
        for (int k = 0; k < K; k++) W[(size_t)n * K + k] *= 8;
    assert_int_equal(gemm_f32_pack(W, N, K, &w, err), SM_OK);
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
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * K;
        for (int n = 0; n < N; n++) {
            const float *wn = W + (size_t)n * K;
            double exact = b ? b[n] : 0.0, S = fabs(exact);
            for (int k = 0; k < K; k++) {
                exact += (double)xr[k] * wn[k];
                S += fabs((double)xr[k] * wn[k]);
            }
            double bound = (K + 1) * U / (1 - (K + 1) * U) * S + 1e-37;
            double v = ref[(size_t)r * N + n], d = fabs(v - exact);
            double ds = fabs(v - f32[(size_t)r * N + n]);
            if (!(d <= bound) || !(ds <= 2 * bound))
                print_error("R=%d K=%d N=%d [%d,%d]: f32 %.9g, exact %.9g, sgemm %.9g "
                            "(bound %.3g)\n",
                            R, K, N, r, n, v, exact, f32[(size_t)r * N + n], bound);
            assert_true(d <= bound);
            assert_true(ds <= 2 * bound);
            if (d / bound > wst->bound) wst->bound = d / bound;
            if (d / (sqrt(K + 1.0) * U * S + 1e-37) > wst->sqrtk)
                wst->sqrtk = d / (sqrt(K + 1.0) * U * S + 1e-37);
            if (ds / bound > wst->sgemm) wst->sgemm = ds / bound;
        }
    }
    gemm_f32_free(w);
    free(x);
    free(W);
    free(b);
    free(ref);
    free(f32);
    free(got);
}

/* Ragged and encoder shapes: N up to 3072, R past one block of rows (the
 * block height depends on K: 84 rows at K = 3072, 336 at 768, 60 past
 * 4096; blocks of equal height with a short last one), K up to 3072 and
 * past one block of k (4096: partial sums parked in the output between
 * blocks). */
static const int k_big[][3] = {{1, 1, 1},      {13, 7, 7},     {7, 13, 13},   {5, 1, 40},
                               {40, 3, 5},     {7, 3072, 33},  {33, 768, 129}, {17, 3072, 97},
                               {129, 768, 31}, {9, 768, 3072}, {100, 385, 97}, {200, 769, 64},
                               {97, 128, 512}, {3, 1537, 2304}, {12, 256, 32}, {25, 257, 47},
                               {13, 4500, 40},  {80, 8200, 33}, {200, 3072, 40},
                               {400, 769, 33},  {130, 4500, 70}, {85, 3072, 65}};

static void test_scalar_vs_reference(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    assert_int_equal(blas_load(err), SM_OK);
    blas_set_threads(1);
    worst w = {0, 0, 0};
    for (int i = 0; i < N_SIZES; i += 2)
        for (int j = 0; j < N_SIZES; j++)
            for (int l = 0; l < N_SIZES; l += 3)
                check_product(k_sizes[i], k_sizes[j], k_sizes[l], (i + j + l) % 2, 0, &w);
    for (size_t s = 0; s < sizeof k_big / sizeof *k_big; s += 3)
        check_product(k_big[s][0], k_big[s][1], k_big[s][2], (int)s % 2, 0, &w);
    print_message("worst |f32 - exact|: %.3f of (K+1)u S, %.3f of sqrt(K+1)u S; "
                  "|f32 - sgemm| %.3f of (K+1)u S\n",
                  w.bound, w.sqrtk, w.sgemm);
    /* rounding errors that do not pile up: far inside the worst case */
    assert_true(w.sqrtk <= 2.0);
}

static void test_avx512_vs_scalar(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    if (!have_avx512()) return;
    assert_int_equal(blas_load(err), SM_OK);
    blas_set_threads(1);
    worst w = {0, 0, 0};
    for (int i = 0; i < N_SIZES; i++)
        for (int j = 0; j < N_SIZES; j += 2)
            for (int l = 0; l < N_SIZES; l++)
                check_product(k_sizes[i], k_sizes[j], k_sizes[l], (i + j + l) % 2, 1, &w);
    for (size_t s = 0; s < sizeof k_big / sizeof *k_big; s++)
        for (int bias = 0; bias < 2; bias++)
            check_product(k_big[s][0], k_big[s][1], k_big[s][2], bias, 1, &w);
    assert_true(w.sqrtk <= 2.0);
}

/* NaN or an infinity in an input row, a weight row or the bias reaches the
 * outputs of that row or column only, as IEEE arithmetic says (an infinity
 * alone gives an infinity of its sign, meeting the other sign or a zero
 * weight NaN), in both kernels; every other output keeps its bits. */
static void test_non_finite(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    enum { R = 30, K = 50, N = 40 };
    float *x = rand_floats((size_t)R * K), *W = rand_floats((size_t)N * K), *b = rand_floats(N);
    float *clean = malloc(R * N * sizeof *clean), *got = malloc(R * N * sizeof *got);
    for (int k = 0; k < K; k++) W[9 * K + k] = fabsf(W[9 * K + k]) + 0.1f; /* positive row */
    W[11 * K + 7] = 0.0f;
    gemm_f32_weight *w, *wbad;
    assert_int_equal(gemm_f32_pack(W, N, K, &w, err), SM_OK);
    float *Wbad = malloc((size_t)N * K * sizeof *Wbad);
    memcpy(Wbad, W, (size_t)N * K * sizeof *W);
    Wbad[3 * K + 5] = NAN;
    Wbad[35 * K + 49] = -INFINITY;
    assert_int_equal(gemm_f32_pack(Wbad, N, K, &wbad, err), SM_OK);
    for (int avx = 0; avx < 2; avx++) {
        if (avx && !have_avx512()) break;
        run_kernel(avx, clean, x, w, b, R, K, N);
        /* inputs: NaN in row 17; +inf at column 7 of row 4; -inf in row 29 */
        float saved[3] = {x[4 * K + 7], x[17 * K], x[29 * K + 49]};
        x[4 * K + 7] = INFINITY;
        x[17 * K] = NAN;
        x[29 * K + 49] = -INFINITY;
        run_kernel(avx, got, x, w, b, R, K, N);
        for (int r = 0; r < R; r++)
            for (int n = 0; n < N; n++) {
                float g = got[r * N + n], c = clean[r * N + n];
                if (r == 17) assert_true(isnan(g));
                else if (r == 4 && n == 11) assert_true(isnan(g)); /* inf * 0 */
                else if (r == 4) {
                    float wk = W[(size_t)n * K + 7];
                    assert_true(isinf(g) && (g > 0) == (wk > 0));
                } else if (r == 29) {
                    float wk = W[(size_t)n * K + 49];
                    assert_true(isinf(g) && (g > 0) == (wk < 0));
                } else assert_memory_equal(&g, &c, sizeof g);
            }
        x[4 * K + 7] = saved[0];
        x[17 * K] = saved[1];
        x[29 * K + 49] = saved[2];
        /* two +inf inputs in a row: +inf or -inf where their weights
         * agree in sign (the all-positive weight row 9: +inf), NaN where
         * they do not */
        float x3 = x[2 * K + 3], x4 = x[2 * K + 4];
        x[2 * K + 3] = INFINITY;
        x[2 * K + 4] = INFINITY;
        run_kernel(avx, got, x, w, b, R, K, N);
        for (int n = 0; n < N; n++) {
            float w3 = W[(size_t)n * K + 3], w4 = W[(size_t)n * K + 4], g = got[2 * N + n];
            if ((w3 > 0) != (w4 > 0)) assert_true(isnan(g));
            else assert_true(isinf(g) && (g > 0) == (w3 > 0));
        }
        assert_true(isinf(got[2 * N + 9]) && got[2 * N + 9] > 0);
        x[2 * K + 3] = x3;
        x[2 * K + 4] = x4;
        /* weights: NaN in column 3, -inf in column 35 */
        run_kernel(avx, got, x, wbad, b, R, K, N);
        for (int r = 0; r < R; r++)
            for (int n = 0; n < N; n++) {
                float g = got[r * N + n], c = clean[r * N + n];
                if (n == 3) assert_true(isnan(g));
                else if (n == 35) {
                    float xk = x[(size_t)r * K + 49];
                    assert_true(isinf(g) && (g > 0) == (xk < 0));
                } else assert_memory_equal(&g, &c, sizeof g);
            }
        /* bias: +inf in column 0, NaN in column 39 (the last, a masked lane) */
        float b0 = b[0], b39 = b[39];
        b[0] = INFINITY;
        b[39] = NAN;
        run_kernel(avx, got, x, w, b, R, K, N);
        for (int r = 0; r < R; r++)
            for (int n = 0; n < N; n++) {
                float g = got[r * N + n], c = clean[r * N + n];
                if (n == 0) assert_true(isinf(g) && g > 0);
                else if (n == 39) assert_true(isnan(g));
                else assert_memory_equal(&g, &c, sizeof g);
            }
        b[0] = b0;
        b[39] = b39;
    }
    gemm_f32_free(w);
    gemm_f32_free(wbad);
    free(x);
    free(W);
    free(Wbad);
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
    static const int shapes[][3] = {{300, 768, 200}, {7, 768, 2304}, {1000, 64, 192}, {5, 3, 70},
                                    {512, 768, 768}, {2700, 128, 384}};
    backend *be;
    assert_int_equal(backend_cpu_create(2, &be, err), SM_OK);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int R = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *x = rand_floats((size_t)R * K), *W = rand_floats((size_t)N * K);
        float *b = rand_floats((size_t)N);
        size_t n = (size_t)R * N;
        float *one = malloc(n * sizeof *one), *part = malloc(n * sizeof *part);
        gemm_f32_weight *w;
        assert_int_equal(gemm_f32_pack(W, N, K, &w, err), SM_OK);
        assert_int_equal(gemm_f32_linear(one, x, w, b, R, K, N), SM_OK);
        for (int c = 0; c < N; c += 2 * GEMM_F32_PANEL)
            gemm_f32_linear_cols(part, x, w, b, R, c, c + 2 * GEMM_F32_PANEL);
        assert_memory_equal(one, part, n * sizeof *one);
        memset(part, 0, n * sizeof *part);
        for (int r = 0; r < R; r += 13)
            gemm_f32_linear_cols(part + (size_t)r * N, x + (size_t)r * K, w, b,
                                 R - r < 13 ? R - r : 13, 0, N);
        assert_memory_equal(one, part, n * sizeof *one);
        memset(part, 0, n * sizeof *part);
        backend_packed *bw;
        assert_int_equal(be->pack_weight(be, BACKEND_PACK_F32, W, N, K, &bw, err), SM_OK);
        assert_int_equal(bw->kind, BACKEND_PACK_F32);
        assert_int_equal(be->linear_packed(be, part, x, bw, b, R, K, N), SM_OK);
        assert_memory_equal(one, part, n * sizeof *one);
        if (R <= 300) { /* the plain C kernel: the same bits */
            memset(part, 0, n * sizeof *part);
            gemm_f32_linear_scalar(part, x, w, b, R, 0, N);
            assert_memory_equal(one, part, n * sizeof *one);
        }
        assert_int_equal(gemm_f32_linear(part, x, w, b, R, K + 1, N), SM_ERR_INVALID);
        assert_int_equal(be->linear_packed(be, part, x, bw, b, R, K, N + 1), SM_ERR_INVALID);
        backend_packed_free(bw);
        gemm_f32_free(w);
        free(x);
        free(W);
        free(b);
        free(one);
        free(part);
    }
    be->destroy(be);
}

/* The backend's packed slots refuse what is not theirs: a kind they lack,
 * a packed weight another backend made (a header with another free), a
 * wrong shape; a packed weight outlives the backend that made it. */
static int g_foreign_frees;
static void foreign_free(backend_packed *w)
{
    (void)w;
    g_foreign_frees++;
}

static void test_packed_slots(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    enum { R = 3, K = 40, N = 36 };
    float *x = rand_floats((size_t)R * K), *W = rand_floats((size_t)N * K), want[R * N],
          out[R * N];
    backend *be, *other;
    backend_packed *pw = (backend_packed *)0x1;
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    for (int kind = -1; kind <= 5; kind += 6) {
        assert_int_equal(be->pack_weight(be, kind, W, N, K, &pw, err), SM_ERR_UNSUPPORTED);
        assert_null(pw);
        assert_non_null(strstr(err, "kind"));
    }
    backend_packed foreign = {BACKEND_PACK_F32, foreign_free};
    for (int i = 0; i < R * N; i++) out[i] = 7.0f;
    assert_int_equal(be->linear_packed(be, out, x, &foreign, NULL, R, K, N), SM_ERR_INVALID);
    for (int i = 0; i < R * N; i++) assert_true(out[i] == 7.0f); /* nothing written */
    backend_packed_free(&foreign);
    assert_int_equal(g_foreign_frees, 1);
    backend_packed_free(NULL);

    /* packed on one backend, run on another after the first is gone */
    assert_int_equal(be->pack_weight(be, BACKEND_PACK_F32, W, N, K, &pw, err), SM_OK);
    assert_int_equal(pw->kind, BACKEND_PACK_F32);
    be->destroy(be);
    assert_int_equal(backend_cpu_create(2, &other, err), SM_OK);
    assert_int_equal(other->linear_packed(other, out, x, pw, NULL, R, K, N), SM_OK);
    gemm_f32_weight *w;
    assert_int_equal(gemm_f32_pack(W, N, K, &w, err), SM_OK);
    assert_int_equal(gemm_f32_linear(want, x, w, NULL, R, K, N), SM_OK);
    assert_memory_equal(out, want, sizeof out);
    assert_int_equal(other->linear_packed(other, out, x, pw, NULL, R, K - 1, N), SM_ERR_INVALID);
    assert_int_equal(other->linear_packed(other, out, x, pw, NULL, -1, K, N), SM_ERR_INVALID);
    gemm_f32_free(w);
    backend_packed_free(pw);
    other->destroy(other);
    free(x);
    free(W);
}

/* ---- the encoder --------------------------------------------------------- */

static void test_bert_f32_packed_logits(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    enum { MAXB = 32, T = 64 };
    bert_model *m;
    bert_packed_params *pp;
    bert_precision plan[BERT_PACK_N];
    bert_pack_plan(BERT_FP32_PACKED, plan);
    assert_int_equal(bert_model_load_dir(BERT_DIR, &m, err), SM_OK);
    pp = pack(m, plan);
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        const bert_layer_params *lp = &pp->p.layers[l];
        const backend_packed *pw[BERT_PACK_N] = {lp->qkv_pw, lp->attn_out_pw, lp->ffn_in_pw,
                                                 lp->ffn_out_pw};
        for (int i = 0; i < BERT_PACK_N; i++) {
            assert_non_null(pw[i]);
            assert_int_equal(pw[i]->kind, BACKEND_PACK_F32);
        }
    }
    assert_null(m->p.layers[0].qkv_pw); /* the FP32 parameters are untouched */
    int *ids = malloc(MAXB * T * sizeof *ids), lengths[MAXB], K = m->cfg.num_labels;
    int B = load_ids(ids, lengths, MAXB, T, tokenizer_pad_id(m->tok));
    assert_true(B >= 8);
    float *f32 = malloc((size_t)B * K * sizeof *f32), *pk = malloc((size_t)B * K * sizeof *pk);
    float *lanes = malloc((size_t)B * K * sizeof *lanes);
    forward(m, &m->p, 1, ids, lengths, B, T, f32);
    forward(m, &pp->p, 1, ids, lengths, B, T, pk);
    forward(m, &pp->p, 2, ids, lengths, B, T, lanes); /* B >= 4: two lanes */
    if (!gemm_f32_supported())
        print_message("skipped: no AVX-512F (bert_tiny checked with the plain C kernel)\n");
    double worst = 0, scale = 0, lane_diff = 0;
    for (int i = 0; i < B * K; i++) {
        double d = fabs((double)pk[i] - f32[i]);
        worst = d > worst ? d : worst;
        scale = fabs(f32[i]) > scale ? fabs(f32[i]) : scale;
        d = fabs((double)lanes[i] - pk[i]);
        lane_diff = d > lane_diff ? d : lane_diff;
    }
    print_message("bert_tiny, %d texts: max |packed f32 - sgemm f32| logit %.2e (largest logit "
                  "%.2e), lanes vs one thread %.1e\n",
                  B, worst, scale, lane_diff);
    assert_true(worst <= 1e-5);
    for (int b = 0; b < B; b++) assert_int_equal(argmax(pk + b * K, K), argmax(f32 + b * K, K));
    /* the packed products give each row the same bits whatever the rows
     * around it; the sgemm products left (pooler, classifier) move the
     * unpacked FP32 logits by as much on lanes */
    assert_true(lane_diff <= 1e-6);
    free(ids);
    free(f32);
    free(pk);
    free(lanes);
    bert_packed_params_free(pp);
    bert_model_free(m);
}

/* What FP32 inference runs: packed on a CPU with AVX-512F unless
 * SENTIMENT_FP32_PACKED says otherwise; a backend without linear_packed is
 * an error, not a crash. */
static void test_bert_f32_packed_selection(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    unsetenv("SENTIMENT_FP32_PACKED");
    assert_int_equal(backend_cpu_fp32_packed(), gemm_f32_supported());
    assert_int_equal(backend_cpu_pack_native(BACKEND_PACK_F32), gemm_f32_supported());
    setenv("SENTIMENT_FP32_PACKED", "0", 1);
    assert_int_equal(backend_cpu_fp32_packed(), 0);
    setenv("SENTIMENT_FP32_PACKED", "1", 1);
    assert_int_equal(backend_cpu_fp32_packed(), 1);
    unsetenv("SENTIMENT_FP32_PACKED");

    bert_model *m;
    bert_packed_params *pp;
    backend *be;
    bert_workspace *ws;
    bert_precision plan[BERT_PACK_N] = {BERT_FP32, BERT_FP32_PACKED, BERT_FP32, BERT_FP32};
    assert_int_equal(bert_model_load_dir(BERT_DIR, &m, err), SM_OK);
    pp = pack(m, plan);
    assert_null(pp->p.layers[0].qkv_pw);
    assert_non_null(pp->p.layers[0].attn_out_pw);
    assert_int_equal(pp->p.layers[0].attn_out_pw->kind, BACKEND_PACK_F32);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 1, 8, &ws, err), SM_OK);
    int ids[4] = {2, 10, 11, 3}, len = 4;
    float logits[8], f32[8];
    assert_int_equal(bert_forward(&m->cfg, &m->p, ws, ids, &len, 1, 4, f32, NULL, err), SM_OK);
    assert_int_equal(bert_forward(&m->cfg, &pp->p, ws, ids, &len, 1, 4, logits, NULL, err),
                     SM_OK);
    for (int k = 0; k < m->cfg.num_labels; k++) assert_true(fabsf(logits[k] - f32[k]) <= 1e-5f);
    be->linear_packed = NULL;
    assert_int_equal(bert_forward(&m->cfg, &pp->p, ws, ids, &len, 1, 4, logits, NULL, err),
                     SM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "f32"));
    bert_workspace_free(ws);
    be->destroy(be);
    bert_packed_params_free(pp);
    bert_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_scalar_vs_reference),
        cmocka_unit_test(test_avx512_vs_scalar),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_packed_slots),
        cmocka_unit_test(test_bert_f32_packed_logits),
        cmocka_unit_test(test_bert_f32_packed_selection),
    };
    printf("test_gemm_f32: AVX-512F %s\n", gemm_f32_supported() ? "present" : "absent");
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_gemm_bf16.c: the BF16 linear layers (cpu/gemm_bf16.c) and BF16
 * inference of the encoder (model/encoder/bert_packed.c).
 *
 * Everywhere: BF16 rounding of chosen values (ties to even, NaN, infinity,
 * overflow, every BF16 value round-trips), packing round trips with their
 * zero padding, and the plain C kernel on packed weights against the
 * reference on float weights.
 * With AVX512-BF16 (else they print "skipped: no AVX512-BF16"): the
 * AVX-512 kernel against the reference (same rounding, so only the order of
 * FP32 sums differs: within 1e-5 of sum |x_k w_k|) and against FP32 sgemm
 * (within 1e-2 of it: what BF16 operands cost, at most about 2^-7) over ragged and
 * encoder-sized R, K, N, with and without bias; its rounding of inputs
 * against gemm_bf16_round bit for bit; column and row splits and the CPU
 * backend's threaded op bit-identical to one call; and bert_tiny's logits
 * with BF16 weights within BERT_TOL of FP32 with the same top class, one
 * batch, on lanes, and from text.
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
#include "cpu/blas.h"
#include "cpu/gemm_bf16.h"
#include "encoder/bert.h"
#include "support/packed_test_util.h"

/* |bf16 logits - fp32 logits| on bert_tiny (measured 3.1e-4 on the fixture;
 * a logit of a random-weight model is about 0.1). */
#define BERT_TOL 5e-3

static const int k_sizes[] = {1, 2, 15, 17, 31, 33, 127, 128, 129};
#define N_SIZES (int)(sizeof k_sizes / sizeof *k_sizes)

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static int have_bf16(void)
{
    if (gemm_bf16_supported()) return 1;
    print_message("skipped: no AVX512-BF16\n");
    return 0;
}

/* ---- rounding ------------------------------------------------------------ */

static void test_round_values(void **state)
{
    (void)state;
    static const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f800000, 0x3f80}, /* 1 */
        {0x3f808000, 0x3f80}, /* halfway 1 .. next: ties to even (down) */
        {0x3f818000, 0x3f82}, /* halfway, odd below: ties to even (up) */
        {0x3f808001, 0x3f81}, /* just above halfway */
        {0x3f807fff, 0x3f80}, /* just below halfway */
        {0xbf808000, 0xbf80}, /* the same, negative */
        {0xbf818000, 0xbf82},
        {0x00000000, 0x0000}, /* +0, -0 */
        {0x80000000, 0x8000},
        {0x7f800000, 0x7f80}, /* +inf, -inf */
        {0xff800000, 0xff80},
        {0x7f7fffff, 0x7f80}, /* FLT_MAX rounds up to infinity */
        {0x7f7f7fff, 0x7f7f}, /* the largest that does not */
        {0x7fc00000, 0x7fc0}, /* quiet NaN */
        {0xffc00000, 0xffc0},
        {0x7f800001, 0x7fc0}, /* signalling NaN, payload below BF16: quiet NaN */
        {0x7fffffff, 0x7fff}, /* all-ones payload: must not carry into the sign */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = gemm_bf16_round(from_bits(cases[i].in));
        if (got != cases[i].out)
            print_error("round(0x%08x) = 0x%04x, want 0x%04x\n", cases[i].in, got, cases[i].out);
        assert_int_equal(got, cases[i].out);
    }
    assert_true(isnan(gemm_bf16_to_float(gemm_bf16_round(from_bits(0x7f800001)))));
    assert_true(isnan(gemm_bf16_to_float(gemm_bf16_round(from_bits(0xffffffff)))));
    /* Every BF16 value is a float that rounds to itself. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7fff) > 0x7f80) continue; /* NaN */
        assert_int_equal(gemm_bf16_round(gemm_bf16_to_float((uint16_t)h)), h);
    }
    /* Half a unit in the last place at most: 2^-8 relative. */
    for (int i = 0; i < 100000; i++) {
        float x = frand() * 1000.0f;
        float r = gemm_bf16_to_float(gemm_bf16_round(x));
        assert_true(fabsf(r - x) <= fabsf(x) * (1.0f / 256.0f));
    }
}

/* ---- packing ------------------------------------------------------------- */

static void test_pack_round_trip(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    static const int shapes[][2] = {{1, 1}, {1, 2}, {2, 1}, {17, 15}, {31, 33}, {33, 31},
                                    {129, 127}, {128, 128}, {64, 3}, {768, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s][0], K = shapes[s][1];
        float *W = rand_floats((size_t)N * K);
        gemm_bf16_weight *w = NULL;
        assert_int_equal(gemm_bf16_pack(W, N, K, &w, err), SM_OK);
        assert_int_equal(w->N, N);
        assert_int_equal(w->K, K);
        assert_int_equal(w->pairs, (K + 1) / 2);
        assert_int_equal(w->panels, (N + GEMM_BF16_PANEL - 1) / GEMM_BF16_PANEL);
        assert_int_equal((uintptr_t)w->data % 64, 0);
        for (int n = 0; n < w->panels * GEMM_BF16_PANEL; n++)
            for (int k = 0; k < 2 * w->pairs; k++) {
                float want = n < N && k < K ? gemm_bf16_to_float(gemm_bf16_round(W[(size_t)n * K + k]))
                                            : 0.0f;
                float got = gemm_bf16_unpack(w, n, k);
                assert_memory_equal(&got, &want, sizeof got);
            }
        /* The layout vdpbf16ps reads: per pair, column c's two values at
         * 2c and 2c+1 of the panel's 64. */
        assert_int_equal(w->data[0], gemm_bf16_round(W[0]));
        if (K > 1) assert_int_equal(w->data[1], gemm_bf16_round(W[1]));
        if (N > 1) assert_int_equal(w->data[2], gemm_bf16_round(W[K]));
        if (K > 2) assert_int_equal(w->data[2 * GEMM_BF16_PANEL], gemm_bf16_round(W[2]));
        gemm_bf16_free(w);
        free(W);
    }
    gemm_bf16_weight *w = (gemm_bf16_weight *)0x1;
    float one = 1.0f;
    assert_int_equal(gemm_bf16_pack(&one, 0, 1, &w, err), SM_ERR_INVALID);
    assert_null(w);
    assert_int_equal(gemm_bf16_pack(&one, 1, -1, &w, err), SM_ERR_INVALID);
    gemm_bf16_free(NULL);
}

/* ---- products ------------------------------------------------------------ */

typedef enum { KERNEL_AVX512, KERNEL_SCALAR } kernel_kind;

/* sum |round(x_k) round(w_k)| + |b|, the scale of an output's error. */
static double abs_sum(const float *x, const float *w, const float *b, int n, int K, int rounded)
{
    double s = b ? fabs(b[n]) : 0.0;
    for (int k = 0; k < K; k++) {
        double xk = rounded ? gemm_bf16_to_float(gemm_bf16_round(x[k])) : x[k];
        double wk = rounded ? gemm_bf16_to_float(gemm_bf16_round(w[k])) : w[k];
        s += fabs(xk * wk);
    }
    return s + 1e-30;
}

/* One product both ways: the kernel against gemm_bf16_ref (rel 1e-5) and,
 * when with_sgemm, against FP32 sgemm (rel 1e-2). Returns the worst error
 * relative to sgemm. */
static double check_product(kernel_kind kind, int R, int K, int N, int with_bias, int with_sgemm)
{
    char err[SM_ERR_MAX];
    float *x = rand_floats((size_t)R * K), *W = rand_floats((size_t)N * K);
    float *b = with_bias ? rand_floats((size_t)N) : NULL;
    float *got = malloc((size_t)R * N * sizeof *got), *ref = malloc((size_t)R * N * sizeof *ref);
    float *f32 = malloc((size_t)R * N * sizeof *f32);
    gemm_bf16_weight *w;
    assert_non_null(got);
    assert_non_null(ref);
    assert_non_null(f32);
    assert_int_equal(gemm_bf16_pack(W, N, K, &w, err), SM_OK);
    for (size_t i = 0; i < (size_t)R * N; i++) got[i] = NAN;
    if (kind == KERNEL_AVX512)
        assert_int_equal(gemm_bf16_linear(got, x, w, b, R, K, N), SM_OK);
    else
        gemm_bf16_linear_scalar(got, x, w, b, R, 0, N);
    gemm_bf16_ref(ref, x, W, b, R, K, N);
    double worst = 0;
    if (with_sgemm) {
        for (int r = 0; r < R; r++)
            for (int n = 0; n < N; n++) f32[(size_t)r * N + n] = b ? b[n] : 0.0f;
        blas_sgemm(0, 1, R, N, K, 1.0f, x, K, W, K, 1.0f, f32, N);
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)r * N + n;
            const float *xr = x + (size_t)r * K, *wn = W + (size_t)n * K;
            double d = fabs((double)got[i] - ref[i]) / abs_sum(xr, wn, b, n, K, 1);
            if (!(d <= 1e-5))
                print_error("R=%d K=%d N=%d bias=%d [%d,%d]: %.9g vs reference %.9g\n", R, K, N,
                            with_bias, r, n, got[i], ref[i]);
            assert_true(d <= 1e-5);
            if (with_sgemm) {
                d = fabs((double)got[i] - f32[i]) / abs_sum(xr, wn, b, n, K, 0);
                if (!(d <= 1e-2))
                    print_error("R=%d K=%d N=%d [%d,%d]: %.9g vs sgemm %.9g\n", R, K, N, r, n,
                                got[i], f32[i]);
                assert_true(d <= 1e-2);
                worst = d > worst ? d : worst;
            }
        }
    gemm_bf16_free(w);
    free(x);
    free(W);
    free(b);
    free(got);
    free(ref);
    free(f32);
    return worst;
}

static void test_scalar_vs_reference(void **state)
{
    (void)state;
    for (int i = 0; i < N_SIZES; i += 2)
        for (int j = 0; j < N_SIZES; j++)
            for (int l = 0; l < N_SIZES; l += 3)
                check_product(KERNEL_SCALAR, k_sizes[i], k_sizes[j], k_sizes[l], (i + j + l) % 2, 0);
    check_product(KERNEL_SCALAR, 3, 3072, 33, 1, 0);
}

static void test_avx512_vs_reference(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    if (!have_bf16()) return;
    assert_int_equal(blas_load(err), SM_OK);
    blas_set_threads(1);
    double worst = 0, d;
    for (int i = 0; i < N_SIZES; i++)
        for (int j = 0; j < N_SIZES; j++)
            for (int l = 0; l < N_SIZES; l++) {
                d = check_product(KERNEL_AVX512, k_sizes[i], k_sizes[j], k_sizes[l],
                                  (i + j + l) % 2, 1);
                worst = d > worst ? d : worst;
            }
    /* the encoder's shapes: K past one block of pairs, N up to 3072 */
    static const int big[][3] = {{33, 768, 129}, {17, 3072, 33}, {5, 3072, 768},
                                 {129, 768, 31}, {9, 768, 3072}, {100, 385, 97}};
    for (size_t s = 0; s < sizeof big / sizeof *big; s++)
        for (int bias = 0; bias < 2; bias++) {
            d = check_product(KERNEL_AVX512, big[s][0], big[s][1], big[s][2], bias, 1);
            worst = d > worst ? d : worst;
        }
    print_message("worst |bf16 - sgemm| / sum |x w|: %.2e (bound about 2^-7 = 7.8e-03)\n", worst);
    /* a BF16 kernel that did not round (or rounded FP32 sums) would be
     * far closer to sgemm than this */
    assert_true(worst > 1e-4);
}

/* The kernel rounds its inputs exactly as gemm_bf16_round: with W = 1
 * (K = 1, N = 1) the output is the rounded input. Denormal inputs are left
 * out: vdpbf16ps treats them as zero. */
static void test_avx512_input_rounding(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    if (!have_bf16()) return;
    enum { R = 4099 };
    float one = 1.0f, *x = malloc(R * sizeof *x), *out = malloc(R * sizeof *out);
    gemm_bf16_weight *w;
    assert_int_equal(gemm_bf16_pack(&one, 1, 1, &w, err), SM_OK);
    for (int i = 0; i < R; i++) {
        uint32_t u = rand32();
        if (i < 8) u = (uint32_t[]){0x3f808000, 0x3f818000, 0x7f7fffff, 0x7f800000, 0xff800000,
                                    0x7fc00000, 0x7fffffff, 0xbf818000}[i];
        if ((u & 0x7f800000) == 0) u |= 0x00800000; /* no denormals */
        x[i] = from_bits(u);
    }
    assert_int_equal(gemm_bf16_linear(out, x, w, NULL, R, 1, 1), SM_OK);
    for (int i = 0; i < R; i++) {
        float want = gemm_bf16_to_float(gemm_bf16_round(x[i]));
        if (isnan(want)) {
            assert_true(isnan(out[i]));
        } else {
            if (memcmp(&out[i], &want, sizeof want))
                print_error("x=%08x: kernel %g, want %g\n", *(uint32_t *)&x[i], out[i], want);
            assert_memory_equal(&out[i], &want, sizeof want);
        }
    }
    gemm_bf16_free(w);
    free(x);
    free(out);
}

/* Splitting by columns or rows, and the CPU backend's threaded op, give
 * the bits of one call. */
static void test_splits(void **state)
{
    (void)state;
    char err[SM_ERR_MAX];
    if (!have_bf16()) return;
    static const int shapes[][3] = {{300, 768, 200}, {7, 768, 2304}, {1000, 64, 192}, {5, 3, 70}};
    backend *be;
    assert_int_equal(backend_cpu_create(2, &be, err), SM_OK);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int R = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *x = rand_floats((size_t)R * K), *W = rand_floats((size_t)N * K),
              *b = rand_floats((size_t)N);
        size_t n = (size_t)R * N;
        float *one = malloc(n * sizeof *one), *part = malloc(n * sizeof *part);
        gemm_bf16_weight *w;
        assert_int_equal(gemm_bf16_pack(W, N, K, &w, err), SM_OK);
        assert_int_equal(gemm_bf16_linear(one, x, w, b, R, K, N), SM_OK);
        for (int c = 0; c < N; c += 2 * GEMM_BF16_PANEL)
            gemm_bf16_linear_cols(part, x, w, b, R, c, c + 2 * GEMM_BF16_PANEL);
        assert_memory_equal(one, part, n * sizeof *one);
        memset(part, 0, n * sizeof *part);
        for (int r = 0; r < R; r += 13)
            gemm_bf16_linear_cols(part + (size_t)r * N, x + (size_t)r * K, w, b,
                                  R - r < 13 ? R - r : 13, 0, N);
        assert_memory_equal(one, part, n * sizeof *one);
        memset(part, 0, n * sizeof *part);
        backend_packed *bw;
        assert_int_equal(be->pack_weight(be, BACKEND_PACK_BF16, W, N, K, &bw, err), SM_OK);
        assert_int_equal(bw->kind, BACKEND_PACK_BF16);
        assert_int_equal(be->linear_packed(be, part, x, bw, b, R, K, N), SM_OK);
        assert_memory_equal(one, part, n * sizeof *one);
        assert_int_equal(gemm_bf16_linear(part, x, w, b, R, K + 1, N), SM_ERR_INVALID);
        assert_int_equal(be->linear_packed(be, part, x, bw, b, R, K, N + 1), SM_ERR_INVALID);
        backend_packed_free(bw);
        gemm_bf16_free(w);
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
static void test_bert_bf16_logits(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    enum { MAXB = 32, T = 64 };
    bert_model *m;
    bert_packed_params *bp;
    bert_precision plan[BERT_PACK_N];
    bert_pack_plan(BERT_BF16, plan);
    assert_int_equal(bert_model_load_dir(BERT_DIR, &m, err), SM_OK);
    bp = pack(m, plan);
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        const bert_layer_params *lp = &bp->p.layers[l];
        const backend_packed *pw[BERT_PACK_N] = {lp->qkv_pw, lp->attn_out_pw, lp->ffn_in_pw,
                                                 lp->ffn_out_pw};
        for (int i = 0; i < BERT_PACK_N; i++) {
            assert_non_null(pw[i]);
            assert_int_equal(pw[i]->kind, BACKEND_PACK_BF16);
        }
    }
    assert_int_equal(bp->n_w, BERT_PACK_N * m->cfg.num_hidden_layers);
    assert_null(m->p.layers[0].qkv_pw); /* the FP32 parameters are untouched */
    int *ids = malloc(MAXB * T * sizeof *ids), lengths[MAXB], K = m->cfg.num_labels;
    int B = load_ids(ids, lengths, MAXB, T, tokenizer_pad_id(m->tok));
    assert_true(B >= 8);
    float *f32 = malloc((size_t)B * K * sizeof *f32), *b16 = malloc((size_t)B * K * sizeof *b16);
    float *lanes = malloc((size_t)B * K * sizeof *lanes);
    forward(m, &m->p, 1, ids, lengths, B, T, f32);
    if (gemm_bf16_supported()) {
        forward(m, &bp->p, 1, ids, lengths, B, T, b16);
        forward(m, &bp->p, 2, ids, lengths, B, T, lanes); /* B >= 4: two lanes */
    } else {
        print_message("skipped: no AVX512-BF16 (bert_tiny checked with the plain C kernel)\n");
        forward(m, &bp->p, 1, ids, lengths, B, T, b16);
        memcpy(lanes, b16, (size_t)B * K * sizeof *lanes);
    }
    double worst = 0, scale = 0, lane_diff = 0;
    int flips = 0;
    for (int i = 0; i < B * K; i++) {
        double d = fabs((double)b16[i] - f32[i]);
        worst = d > worst ? d : worst;
        scale = fabs(f32[i]) > scale ? fabs(f32[i]) : scale;
        d = fabs((double)lanes[i] - b16[i]);
        lane_diff = d > lane_diff ? d : lane_diff;
    }
    for (int b = 0; b < B; b++) {
        const float *l = f32 + b * K;
        int top = argmax(l, K), second = top ? 0 : 1;
        for (int k = 0; k < K; k++)
            if (k != top && l[k] > l[second]) second = k;
        /* a tie closer than the tolerance may legitimately flip */
        if (argmax(b16 + b * K, K) != top && l[top] - l[second] > 2 * BERT_TOL) flips++;
    }
    print_message("bert_tiny, %d texts: max |bf16 - fp32| logit %.2e (largest logit %.2e), "
                  "lanes vs one thread %.1e, top class changed %d\n",
                  B, worst, scale, lane_diff, flips);
    assert_true(worst <= BERT_TOL);
    assert_true(worst > 0); /* the BF16 weights were used */
    assert_int_equal(flips, 0);
    assert_true(lane_diff <= 1e-6);
    free(ids);
    free(f32);
    free(b16);
    free(lanes);
    bert_packed_params_free(bp);
    bert_model_free(m);
}

/* bf16 weights on a backend without linear_packed, or packing on one
 * without pack_weight, are an error, not a crash. */
static void test_bert_bf16_needs_the_op(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m;
    bert_packed_params *bp;
    backend *be;
    bert_workspace *ws;
    bert_precision plan[BERT_PACK_N];
    bert_pack_plan(BERT_BF16, plan);
    assert_int_equal(bert_model_load_dir(BERT_DIR, &m, err), SM_OK);
    bp = pack(m, plan);
    assert_int_equal(backend_cpu_create(1, &be, err), SM_OK);
    assert_int_equal(bert_workspace_create(be, &m->cfg, 1, 8, &ws, err), SM_OK);
    be->linear_packed = NULL;
    int ids[4] = {2, 10, 11, 3}, len = 4;
    float logits[8];
    assert_int_equal(bert_forward(&m->cfg, &bp->p, ws, ids, &len, 1, 4, logits, NULL, err),
                     SM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "bf16"));
    bert_packed_params *none = (bert_packed_params *)0x1;
    assert_int_equal(bert_params_pack(be, &m->cfg, &m->p, plan, &none, err),
                     SM_ERR_UNSUPPORTED);
    assert_null(none);
    be->pack_weight = NULL;
    assert_int_equal(bert_params_pack(be, &m->cfg, &m->p, plan, &none, err),
                     SM_ERR_UNSUPPORTED);
    assert_null(none);
    assert_non_null(strstr(err, "no packed weights"));
    bert_workspace_free(ws);
    be->destroy(be);
    bert_packed_params_free(bp);
    bert_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_values),
        cmocka_unit_test(test_pack_round_trip),
        cmocka_unit_test(test_scalar_vs_reference),
        cmocka_unit_test(test_avx512_vs_reference),
        cmocka_unit_test(test_avx512_input_rounding),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_bert_bf16_logits),
        cmocka_unit_test(test_bert_bf16_needs_the_op),
    };
    printf("test_gemm_bf16: AVX512-BF16 %s\n", gemm_bf16_supported() ? "present" : "absent");
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_cuda.c: the CUDA backend (build/sentiment_cuda.so) against the CPU
 * backend, op by op, model by model, and over a 10-step training run.
 *
 * The plugin is dlopen'd through the seam sentiment.so uses
 * ($SENTIMENT_CUDA_PLUGIN, else $BUILD/sentiment_cuda.so, else
 * build/sentiment_cuda.so). Without the plugin or without a GPU the device
 * tests print "skipped: no CUDA device (<why>)" and the test passes.
 *
 * Built with -DSM_CUDA_EMU_TEST (build/tests/test_cuda_emu, part of make
 * test) the same tests run on the plugin compiled for the CUDA emulator
 * (tests/gpu/cuda_emu: $SENTIMENT_CUDA_PLUGIN, else
 * $BUILD/tests/sentiment_cuda_emu.so), twice: with SENTIMENT_CUDA_SYNC=1,
 * and without it with blocks and threads run last to first
 * (SENTIMENT_CUDA_EMU_ORDER=reverse; set SENTIMENT_CUDA_SYNC to run one
 * pass), and every device test
 * also fails when the emulator reported a fault (a barrier or shuffle
 * misuse, memory outside an allocation, bad cuBLAS arguments) that the
 * plugin did not turn into an error. Same shapes, same tolerances.
 * Either way the host-side checks below run everywhere:
 *   - the row-major -> column-major cuBLAS mapping (gpu/gemm_plan.h) against
 *     a plain column-major GEMM,
 *   - the comparison and tolerance-table code of this file,
 *   - the plugin's error paths (bad device index, no device, a CPU backend
 *     handed to the CUDA API, unknown precision).
 *
 * With a GPU: every op of backend.h, forward and backward, runs on both
 * backends from the same fresh random inputs (seed printed; set
 * SENTIMENT_TEST_SEED to repeat one), with outputs poisoned with NaN first
 * so an element the GPU fails to write fails the test. Then the four tiny
 * fixture models' logits (or pooled vectors) from bert_forward, and the
 * losses of 10 AdamW steps with dropout on the training fixture.
 *
 * Tolerance rule: |gpu - cpu| <= tol * max(|cpu|, rms(cpu)) for every
 * compared element (rms over the tensor), and no NaN where the CPU has a
 * number. tol per op and precision (fp32: exact FP32 GEMMs; bf16: GEMM
 * operands rounded to BF16):
 *
 *   op                       fp32     bf16     why
 *   matmul, matmul_batched   2e-5     3e-2     summation order; BF16 operands (8-bit mantissa)
 *   linear                   2e-5     3e-2
 *   linear_backward          2e-5     4e-2     two products and a column sum
 *   attention(_train)        5e-5     4e-2     two products around a softmax
 *   attention_backward       1e-4     6e-2     four products, softmax backward
 *   layernorm                2e-5     -        two-pass statistics, different order
 *   layernorm_backward       1e-4     -        cancellation in the row sums
 *   softmax_masked           2e-5     -        sm_expf (2 ulp) vs expf
 *   gelu, gelu_backward      2e-5     -        sm_erff (1e-6 abs) vs erff
 *   tanh, tanh_backward      1e-5     -
 *   add, scale, embed,       1e-6     -        same arithmetic
 *   split/merge, cls, rows,
 *   dropout, adamw(_step)
 *   embed_backward           1e-5     -        different summation order
 *   cross_entropy(_backward) 1e-6     -        double on both
 *   sumsq                    1e-6     -        double partials, different order
 *   model logits (abs)       1e-4     5e-2     whole forward pass, max |diff|
 *   training loss (rel)      2e-4     5e-2     per step, 10 steps, dropout on
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/rng.h"
#include "cpu/backend_cpu.h"
#include "encoder/bert.h"
#include "train/bert_train.h"
#include "train/optimizer.h"

#include "gpu/gemm_plan.h"
#include "gpu/sentiment_cuda.h"

/* ---- the tolerance table (see the header) ---------------------------------- */

typedef struct tol_entry {
    const char *op;
    double fp32, bf16; /* bf16 < 0: the op does no matrix product */
} tol_entry;

static const tol_entry k_tol[] = {
    {"matmul", 2e-5, 3e-2},
    {"matmul_batched", 2e-5, 3e-2},
    {"linear", 2e-5, 3e-2},
    {"linear_backward", 2e-5, 4e-2},
    {"attention", 5e-5, 4e-2},
    {"attention_train", 5e-5, 4e-2},
    {"attention_backward", 1e-4, 6e-2},
    {"layernorm", 2e-5, -1},
    {"layernorm_backward", 1e-4, -1},
    {"softmax_masked", 2e-5, -1},
    {"gelu", 2e-5, -1},
    {"gelu_backward", 2e-5, -1},
    {"tanh", 1e-5, -1},
    {"tanh_backward", 1e-5, -1},
    {"add", 1e-6, -1},
    {"scale", 1e-6, -1},
    {"embed", 1e-6, -1},
    {"attn_split", 1e-6, -1},
    {"attn_merge", 1e-6, -1},
    {"gather_cls", 1e-6, -1},
    {"scatter_cls", 1e-6, -1},
    {"gather_rows", 1e-6, -1},
    {"scatter_rows", 1e-6, -1},
    {"dropout", 1e-6, -1},
    {"adamw", 1e-6, -1},
    {"adamw_step", 1e-6, -1},
    {"embed_backward", 1e-5, -1},
    {"cross_entropy", 1e-6, -1},
    {"cross_entropy_backward", 1e-6, -1},
    {"distill_loss", 1e-6, -1},
    {"distill_backward", 1e-6, -1},
    {"sumsq", 1e-6, -1},
    {"zero", 0, -1},
    {"model", 1e-4, 5e-2},
    {"train_loss", 2e-4, 5e-2},
};

/* The tolerance of op in the given precision; -1 when the table has none. */
static double tol_of(const char *op, int bf16)
{
    for (size_t i = 0; i < sizeof k_tol / sizeof *k_tol; i++)
        if (!strcmp(k_tol[i].op, op)) {
            if (!bf16) return k_tol[i].fp32;
            return k_tol[i].bf16 >= 0 ? k_tol[i].bf16 : k_tol[i].fp32;
        }
    return -1;
}

/* Compares n elements (where mask is NULL or nonzero) of got against want by
 * the rule above; returns the number of elements out of tolerance and the
 * worst |diff| / scale in *worst. Prints the first few offenders. */
static size_t compare(const char *what, const float *got, const float *want, size_t n,
                      const unsigned char *mask, double tol, double *worst)
{
    double ss = 0;
    size_t m = 0, bad = 0;
    for (size_t i = 0; i < n; i++)
        if ((!mask || mask[i]) && isfinite(want[i])) {
            ss += (double)want[i] * want[i];
            m++;
        }
    double rms = m ? sqrt(ss / (double)m) : 0.0;
    if (rms < 1e-30) rms = 1e-30;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (mask && !mask[i]) continue;
        double w = want[i], g = got[i];
        double scale = fabs(w) > rms ? fabs(w) : rms;
        double e;
        if (isnan(w) && isnan(g)) continue; /* both unwritten: not compared */
        if (!isfinite(g) || !isfinite(w))
            e = INFINITY;
        else
            e = fabs(g - w) / scale;
        if (e > *worst) *worst = e;
        if (!(e <= tol)) {
            if (bad < 5)
                print_message("  %s[%zu]: gpu %.9g cpu %.9g (|diff|/scale %.3g > %.3g)\n", what, i,
                              g, w, e, tol);
            bad++;
        }
    }
    return bad;
}

/* ---- random numbers ----------------------------------------------------------- */

static uint64_t g_rng;

static uint64_t rnd64(void)
{
    return rng_next(&g_rng);
}

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((rnd64() >> 40) / 16777216.0);
}

static int rnd_int(int n)
{
    return (int)(rnd64() % (uint64_t)n);
}

/* ---- the plugin ------------------------------------------------------------------ */

static struct {
    void *handle;
    char path[1024];
    char why[SM_ERR_MAX]; /* why there is no device */
    int devices;
    sentiment_cuda_backend_create_fn create;
    sentiment_cuda_device_count_fn count;
    sentiment_cuda_versions_fn versions;
    /* the emulated plugin's fault count and first message (NULL elsewhere) */
    int (*emu_faults)(void);
    const char *(*emu_first_fault)(void);
} P;

#ifdef SM_CUDA_EMU_TEST
#define PLUGIN_FILE "tests/sentiment_cuda_emu.so"
#else
#define PLUGIN_FILE "sentiment_cuda.so"
#endif

static int plugin_open(void)
{
    const char *env = getenv("SENTIMENT_CUDA_PLUGIN");
    const char *build = getenv("BUILD");
    if (env && *env)
        snprintf(P.path, sizeof P.path, "%s", env);
    else
        snprintf(P.path, sizeof P.path, "%s/" PLUGIN_FILE, build && *build ? build : "build");
    if (access(P.path, R_OK) != 0) {
        snprintf(P.why, sizeof P.why, "the CUDA plugin %.400s was not built: no nvcc, or a sanitizer build",
                 P.path);
        return -1;
    }
    P.handle = dlopen(P.path, RTLD_NOW | RTLD_LOCAL);
    if (!P.handle) {
        snprintf(P.why, sizeof P.why, "cannot load %.200s: %.250s", P.path, dlerror());
        return -1;
    }
#define SYM(field, name)                                                           \
    do {                                                                           \
        *(void **)&P.field = dlsym(P.handle, name);                                \
        if (!P.field) {                                                            \
            snprintf(P.why, sizeof P.why, "%.400s lacks %s", P.path, name);            \
            return -1;                                                             \
        }                                                                          \
    } while (0)
    SYM(create, "sentiment_cuda_backend_create");
    SYM(count, "sentiment_cuda_device_count");
    SYM(versions, "sentiment_cuda_versions");
#undef SYM
    *(void **)&P.emu_faults = dlsym(P.handle, "sentiment_cuda_emu_faults");
    *(void **)&P.emu_first_fault = dlsym(P.handle, "sentiment_cuda_emu_first_fault");
#ifdef SM_CUDA_EMU_TEST
    if (!P.emu_faults || !P.emu_first_fault) {
        snprintf(P.why, sizeof P.why, "%.400s is not the emulated plugin", P.path);
        return -1;
    }
#endif
    char err[SM_ERR_MAX] = "";
    if (P.count(&P.devices, err) != SM_OK) {
        /* the message says "no CUDA device: <why>"; keep the why */
        const char *why = strncmp(err, "no CUDA device: ", 16) ? err : err + 16;
        snprintf(P.why, sizeof P.why, "%s", why);
        P.devices = 0;
    }
    return 0;
}

/* ---- host-side checks (any machine) ------------------------------------------------ */

/* C(m x n, ldc) = alpha op(X) op(Y) + beta C, column-major, as BLAS defines it. */
static void colmajor_gemm(int tx, int ty, int m, int n, int k, float alpha, const float *X,
                          int ldx, const float *Y, int ldy, float beta, float *C, int ldc)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double x = tx ? X[p + (size_t)i * ldx] : X[i + (size_t)p * ldx];
                double y = ty ? Y[j + (size_t)p * ldy] : Y[p + (size_t)j * ldy];
                s += x * y;
            }
            float *c = &C[i + (size_t)j * ldc];
            *c = (float)(alpha * s + (beta != 0.0f ? beta * *c : 0.0));
        }
}

/* The backend.h definition, row-major. */
static void rowmajor_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                          int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int p = 0; p < K; p++) {
                double a = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                double b = tb ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
                s += a * b;
            }
            float *c = &C[(size_t)i * ldc + j];
            *c = (float)(alpha * s + (beta != 0.0f ? beta * *c : 0.0));
        }
}

static void test_gemm_plan(void **state)
{
    (void)state;
    const int M = 7, N = 5, K = 6, batch = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
            int lda = a_cols + 2, ldb = b_cols + 1, ldc = N + 3;
            long long sA = (long long)a_rows * lda + 4, sB = (long long)b_rows * ldb + 1,
                      sC = (long long)M * ldc + 2;
            gemm_plan pl;
            assert_int_equal(gemm_plan_make(ta, tb, M, N, K, lda, sA, ldb, sB, ldc, sC, batch, &pl), 0);
            assert_int_equal(pl.m, N);
            assert_int_equal(pl.n, M);
            assert_int_equal(pl.trans_first, tb);
            assert_int_equal(pl.trans_second, ta);
            /* operands exactly extent long, then NaN guards: reading past the
             * extent would poison the result */
            size_t na = pl.extent_a, nb = pl.extent_b, nc = (size_t)(batch - 1) * sC + (size_t)M * ldc;
            float *A = malloc((na + 16) * sizeof *A), *B = malloc((nb + 16) * sizeof *B);
            float *C1 = malloc(nc * sizeof *C1), *C2 = malloc(nc * sizeof *C2);
            for (size_t i = 0; i < na + 16; i++) A[i] = i < na ? uniform(-1, 1) : NAN;
            for (size_t i = 0; i < nb + 16; i++) B[i] = i < nb ? uniform(-1, 1) : NAN;
            for (size_t i = 0; i < nc; i++) C1[i] = C2[i] = uniform(-1, 1);
            for (int q = 0; q < batch; q++) {
                rowmajor_gemm(ta, tb, M, N, K, 0.5f, A + q * sA, lda, B + q * sB, ldb, 0.25f,
                              C1 + q * sC, ldc);
                colmajor_gemm(pl.trans_first, pl.trans_second, pl.m, pl.n, pl.k, 0.5f,
                              B + q * pl.stride_first, pl.ld_first, A + q * pl.stride_second,
                              pl.ld_second, 0.25f, C2 + q * sC, ldc);
            }
            for (size_t i = 0; i < nc; i++) {
                assert_false(isnan(C2[i]));
                assert_true(fabsf(C1[i] - C2[i]) <= 1e-5f);
            }
            free(A);
            free(B);
            free(C1);
            free(C2);
        }
    gemm_plan pl;
    /* a leading dimension shorter than a stored row, negative sizes */
    assert_int_equal(gemm_plan_make(0, 0, 4, 4, 8, 7, 0, 4, 0, 4, 0, 1, &pl), -1);
    assert_int_equal(gemm_plan_make(0, 1, 4, 4, 8, 8, 0, 7, 0, 4, 0, 1, &pl), -1);
    assert_int_equal(gemm_plan_make(0, 0, 4, 5, 8, 8, 0, 5, 0, 4, 0, 1, &pl), -1);
    assert_int_equal(gemm_plan_make(0, 0, -1, 4, 8, 8, 0, 4, 0, 4, 0, 1, &pl), -1);
    assert_int_equal(gemm_plan_make(0, 0, 4, 4, 8, 8, -1, 4, 0, 4, 0, 2, &pl), -1);
    assert_int_equal(gemm_extent(0, 5, 5, 0, 1), 0);
    assert_int_equal(gemm_extent(3, 5, 8, 100, 2), 2 * 8 + 5 + 100);
}

static void test_tolerance_plumbing(void **state)
{
    (void)state;
    double worst;
    float want[4] = {1.0f, -2.0f, 0.0f, 1e-8f}, got[4];
    memcpy(got, want, sizeof got);
    assert_int_equal(compare("t", got, want, 4, NULL, 0.0, &worst), 0);
    assert_true(worst == 0.0);
    /* scale = max(|want|, rms): rms = sqrt(5/4) ~ 1.118 */
    got[2] = 1.0e-5f;
    assert_int_equal(compare("t", got, want, 4, NULL, 1e-5, &worst), 0);
    assert_int_equal(compare("t", got, want, 4, NULL, 5e-6, &worst), 1);
    got[2] = 0.0f;
    got[1] = -2.0f * (1 + 3e-5f);
    assert_int_equal(compare("t", got, want, 4, NULL, 1e-5, &worst), 1);
    assert_true(worst > 2e-5 && worst < 4e-5);
    /* a poisoned (unwritten) output element fails; a masked one is ignored */
    got[1] = NAN;
    assert_int_equal(compare("t", got, want, 4, NULL, 1.0, &worst), 1);
    unsigned char mask[4] = {1, 0, 1, 1};
    assert_int_equal(compare("t", got, want, 4, mask, 1e-6, &worst), 0);
    got[1] = INFINITY;
    assert_int_equal(compare("t", got, want, 4, NULL, 1.0, &worst), 1);
    /* the table: every op of backend.h has an entry, a typo has none */
    const char *ops[] = {"matmul", "matmul_batched", "linear", "add", "layernorm", "gelu", "tanh",
                         "embed", "attn_split", "attn_merge", "softmax_masked", "attention",
                         "gather_cls", "zero", "scale", "sumsq", "linear_backward",
                         "layernorm_backward", "gelu_backward", "tanh_backward", "dropout",
                         "attention_train", "attention_backward", "embed_backward", "scatter_cls",
                         "cross_entropy", "cross_entropy_backward", "distill_loss",
                         "distill_backward", "adamw", "adamw_step", "gather_rows",
                         "scatter_rows"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        assert_true(tol_of(ops[i], 0) >= 0);
        assert_true(tol_of(ops[i], 1) >= tol_of(ops[i], 0));
    }
    assert_true(tol_of("matmul", 1) > tol_of("matmul", 0));
    assert_true(tol_of("layernorm", 1) == tol_of("layernorm", 0));
    assert_true(tol_of("matmull", 0) < 0);
}

static void test_plugin_errors(void **state)
{
    (void)state;
    if (!P.handle) {
        print_message("skipped: no CUDA device (%s)\n", P.why);
        return;
    }
    char err[SM_ERR_MAX] = "", desc[128] = "x";
    backend *be = (backend *)0x1;
    assert_int_equal(P.create(-1, &be, desc, sizeof desc, err), SM_ERR_INVALID);
    assert_null(be);
    assert_string_equal(desc, "");
    assert_non_null(strstr(err, "cuda:-1"));
    assert_int_equal(P.create(0, NULL, desc, sizeof desc, err), SM_ERR_INVALID);
    int n = -1;
    if (!P.devices) {
        /* the documented message when there is no GPU or no driver */
        err[0] = 0;
        assert_int_equal(P.create(0, &be, desc, sizeof desc, err), SM_ERR_DEVICE);
        assert_null(be);
        assert_true(!strncmp(err, "no CUDA device: ", 16));
        print_message("create(0) without a device: %s\n", err);
        assert_int_equal(P.count(&n, err), SM_ERR_DEVICE);
        assert_int_equal(n, 0);
        assert_true(!strncmp(err, "no CUDA device: ", 16));
        assert_int_equal(P.create(3, &be, desc, sizeof desc, err), SM_ERR_DEVICE);
    } else {
        assert_int_equal(P.count(&n, err), SM_OK);
        assert_int_equal(n, P.devices);
        assert_int_equal(P.create(n, &be, desc, sizeof desc, err), SM_ERR_INVALID);
        assert_null(be);
        assert_non_null(strstr(err, "does not exist"));
        print_message("create(%d): %s\n", n, err);
    }
    int drv = -1, rt = -1, blas = -1;
    assert_int_equal(P.versions(&drv, &rt, &blas, err), SM_OK);
    assert_true(drv >= 0 && rt >= 1000 && blas >= 10000);
    /* the plugin exports create, count and versions only: the rest is the backend table */
    const char *gone[] = {"sentiment_cuda_set_precision", "sentiment_cuda_mem_info",
                          "sentiment_cuda_last_error", "sentiment_cuda_gemm_tflops"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) assert_null(dlsym(P.handle, gone[i]));
}

/* ---- device checks -------------------------------------------------------------------- */

static backend *g_gpu, *g_cpu;
static int g_bf16; /* the GPU backend's precision is bf16 */

#define GPU_OK(call)                                                                        \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ != SM_OK) {                                                                 \
            print_error("%s -> %d: %s\n", #call, rc_, g_gpu->last_error(g_gpu));                 \
            fail();                                                                         \
        }                                                                                   \
    } while (0)
#define CPU_OK(call) assert_int_equal((call), SM_OK)

static void set_precision(const char *name)
{
    char err[SM_ERR_MAX] = "";
    int rc = g_gpu->set_precision(g_gpu, name, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    g_bf16 = !strcmp(name, "bf16");
}

/* A tensor on both backends: h is the CPU backend's (host) copy, d the GPU's. */
typedef struct fbuf {
    size_t n;
    float *h, *d;
} fbuf;

typedef struct ibuf {
    size_t n;
    int *h, *d;
} ibuf;

static fbuf fb_new(size_t n)
{
    fbuf b = {n, malloc((n ? n : 1) * sizeof(float)), g_gpu->alloc(g_gpu, (n ? n : 1) * sizeof(float))};
    assert_non_null(b.h);
    if (!b.d) print_error("alloc: %s\n", g_gpu->last_error(g_gpu));
    assert_non_null(b.d);
    return b;
}

static void fb_push(fbuf *b)
{
    GPU_OK(g_gpu->upload(g_gpu, b->d, b->h, b->n * sizeof(float)));
}

static fbuf fb_rand(size_t n, float amp)
{
    fbuf b = fb_new(n);
    for (size_t i = 0; i < n; i++) b.h[i] = uniform(-amp, amp);
    fb_push(&b);
    return b;
}

/* NaN on both sides: an element an op does not write stays NaN. */
static fbuf fb_poison(size_t n)
{
    fbuf b = fb_new(n);
    for (size_t i = 0; i < n; i++) b.h[i] = NAN;
    fb_push(&b);
    return b;
}

static float *fb_pull(const fbuf *b)
{
    float *out = malloc((b->n ? b->n : 1) * sizeof *out);
    GPU_OK(g_gpu->download(g_gpu, out, b->d, b->n * sizeof(float)));
    GPU_OK(g_gpu->synchronize(g_gpu));
    return out;
}

static void fb_free(fbuf *b)
{
    free(b->h);
    g_gpu->free(g_gpu, b->d);
    memset(b, 0, sizeof *b);
}

static ibuf ib_from(const int *src, size_t n)
{
    ibuf b = {n, malloc((n ? n : 1) * sizeof(int)), g_gpu->alloc(g_gpu, (n ? n : 1) * sizeof(int))};
    assert_non_null(b.h);
    assert_non_null(b.d);
    memcpy(b.h, src, n * sizeof(int));
    GPU_OK(g_gpu->upload(g_gpu, b.d, b.h, n * sizeof(int)));
    return b;
}

static void ib_free(ibuf *b)
{
    free(b->h);
    g_gpu->free(g_gpu, b->d);
    memset(b, 0, sizeof *b);
}

/* The GPU copy of b against the CPU copy, by op's tolerance. */
static void check(const char *op, const char *what, const fbuf *b, const unsigned char *mask)
{
    double tol = tol_of(op, g_bf16), worst;
    assert_true(tol >= 0);
    float *got = fb_pull(b);
    char name[160];
    snprintf(name, sizeof name, "%s %s", op, what);
    size_t bad = compare(name, got, b->h, b->n, mask, tol, &worst);
    print_message("  %-28s %-26s %s worst %.2e (tol %.0e)%s\n", op, what, g_bf16 ? "bf16" : "fp32",
                  worst, tol, bad ? "  FAILED" : "");
    free(got);
    if (bad) print_error("%s %s: %zu elements out of tolerance\n", op, what, bad);
    assert_int_equal(bad, 0);
}

/* ---- matrix products ---- */

static void run_matmul(int ta, int tb, int M, int N, int K, float beta)
{
    int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    int lda = a_cols + 3, ldb = b_cols + 1, ldc = N + 2;
    fbuf A = fb_rand((size_t)a_rows * lda, 1), B = fb_rand((size_t)b_rows * ldb, 1);
    fbuf C = beta != 0.0f ? fb_rand((size_t)M * ldc, 1) : fb_poison((size_t)M * ldc);
    CPU_OK(g_cpu->matmul(g_cpu, ta, tb, M, N, K, 0.75f, A.h, lda, B.h, ldb, beta, C.h, ldc));
    GPU_OK(g_gpu->matmul(g_gpu, ta, tb, M, N, K, 0.75f, A.d, lda, B.d, ldb, beta, C.d, ldc));
    /* the ldc padding is never written */
    unsigned char *mask = malloc(C.n);
    for (size_t i = 0; i < C.n; i++) mask[i] = (int)(i % ldc) < N;
    char what[64];
    snprintf(what, sizeof what, "tA%d tB%d %dx%dx%d b%.1f", ta, tb, M, N, K, beta);
    check("matmul", what, &C, mask);
    free(mask);
    fb_free(&A);
    fb_free(&B);
    fb_free(&C);
}

static void run_matmul_batched(int ta, int tb, int M, int N, int K, int batch)
{
    int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    int lda = a_cols, ldb = b_cols + 2, ldc = N;
    long long sA = (long long)a_rows * lda + 5, sB = (long long)b_rows * ldb, sC = (long long)M * ldc + 3;
    fbuf A = fb_rand((size_t)(sA * batch), 1), B = fb_rand((size_t)(sB * batch), 1);
    fbuf C = fb_rand((size_t)(sC * batch), 1);
    CPU_OK(g_cpu->matmul_batched(g_cpu, ta, tb, M, N, K, 1.0f, A.h, lda, sA, B.h, ldb, sB, 0.5f,
                                 C.h, ldc, sC, batch));
    GPU_OK(g_gpu->matmul_batched(g_gpu, ta, tb, M, N, K, 1.0f, A.d, lda, sA, B.d, ldb, sB, 0.5f,
                                 C.d, ldc, sC, batch));
    char what[64];
    snprintf(what, sizeof what, "tA%d tB%d %dx%dx%d x%d", ta, tb, M, N, K, batch);
    check("matmul_batched", what, &C, NULL);
    fb_free(&A);
    fb_free(&B);
    fb_free(&C);
}

static void run_linear(int R, int K, int N, int bias)
{
    fbuf x = fb_rand((size_t)R * K, 1), W = fb_rand((size_t)N * K, 0.2f), b = fb_rand(N, 1);
    fbuf out = fb_poison((size_t)R * N);
    CPU_OK(g_cpu->linear(g_cpu, out.h, x.h, W.h, bias ? b.h : NULL, R, K, N));
    GPU_OK(g_gpu->linear(g_gpu, out.d, x.d, W.d, bias ? b.d : NULL, R, K, N));
    char what[64];
    snprintf(what, sizeof what, "%dx%d->%d%s", R, K, N, bias ? " +b" : "");
    check("linear", what, &out, NULL);
    fb_free(&x);
    fb_free(&W);
    fb_free(&b);
    fb_free(&out);
}

static void run_linear_backward(int R, int K, int N, int with_din, int acc, int with_db)
{
    fbuf dout = fb_rand((size_t)R * N, 1), in = fb_rand((size_t)R * K, 1), W = fb_rand((size_t)N * K, 0.2f);
    fbuf din = acc ? fb_rand((size_t)R * K, 1) : fb_poison((size_t)R * K);
    fbuf dW = fb_rand((size_t)N * K, 1), db = fb_rand(N, 1);
    CPU_OK(g_cpu->linear_backward(g_cpu, with_din ? din.h : NULL, dW.h, with_db ? db.h : NULL,
                                  dout.h, in.h, W.h, R, K, N, acc));
    GPU_OK(g_gpu->linear_backward(g_gpu, with_din ? din.d : NULL, dW.d, with_db ? db.d : NULL,
                                  dout.d, in.d, W.d, R, K, N, acc));
    char what[64];
    snprintf(what, sizeof what, "%dx%d->%d din%d acc%d", R, K, N, with_din, acc);
    if (with_din) check("linear_backward", what, &din, NULL);
    check("linear_backward", "dW", &dW, NULL);
    check("linear_backward", "db", &db, NULL);
    fb_free(&dout);
    fb_free(&in);
    fb_free(&W);
    fb_free(&din);
    fb_free(&dW);
    fb_free(&db);
}

static void gemm_ops(void)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            run_matmul(ta, tb, 37, 45, 29, 0.0f);
            run_matmul(ta, tb, 37, 45, 29, 0.3f);
            run_matmul_batched(ta, tb, 13, 9, 21, 5);
        }
    run_matmul(0, 1, 256, 384, 512, 0.0f);
    run_matmul(1, 0, 300, 200, 1000, 1.0f);
    run_matmul_batched(0, 1, 64, 64, 32, 48);
    run_linear(50, 72, 96, 1);
    run_linear(50, 72, 96, 0);
    run_linear(3, 768, 2, 1);
    run_linear_backward(50, 72, 96, 1, 0, 1);
    run_linear_backward(50, 72, 96, 1, 1, 1);
    run_linear_backward(65, 40, 24, 0, 0, 0);
    run_linear_backward(700, 64, 48, 1, 0, 1);
}

static void test_gemm_ops_fp32(void **state)
{
    (void)state;
    set_precision("fp32");
    gemm_ops();
}

/* The benchmark's yardstick (gemm_tflops) runs and gives a rate, in each
 * precision (its operands are filled by a kernel template, BF16 or FP32). */
static void test_gemm_tflops(void **state)
{
    (void)state;
    const char *precs[] = {"fp32", "tf32", "bf16", "bf16-fast"};
    for (size_t i = 0; i < sizeof precs / sizeof *precs; i++) {
        char err[SM_ERR_MAX] = "";
        double tf = -1;
        set_precision(precs[i]);
        int rc = g_gpu->gemm_tflops(g_gpu, 96, 80, 64, 2, &tf, err);
        if (rc) print_error("gemm_tflops %s: %s\n", precs[i], err);
        assert_int_equal(rc, SM_OK);
        assert_true(tf > 0 && isfinite(tf));
        print_message("  gemm_tflops %-9s 96x80x64: %.3g TFLOP/s\n", precs[i], tf);
    }
    char err[SM_ERR_MAX] = "";
    double tf;
    assert_int_equal(g_gpu->gemm_tflops(g_gpu, 0, 8, 8, 1, &tf, err), SM_ERR_INVALID);
    set_precision("fp32");
}

static void test_gemm_ops_bf16(void **state)
{
    (void)state;
    set_precision("bf16");
    gemm_ops();
    set_precision("fp32");
}

/* A weight packed as BF16 once on the device (pack_weight from the device
 * copy) against the CPU's BF16 packed weight (both round W and each input
 * row to nearest even, sum in FP32): bf16 linear's tolerance. The packed
 * weight is a copy (zeroing W after packing changes nothing) and, on the
 * emulator, gives the same bits as linear in bf16, which rounds W itself. */
static void run_linear_packed(int R, int K, int N, int bias)
{
    char err[SM_ERR_MAX] = "";
    fbuf x = fb_rand((size_t)R * K, 1), W = fb_rand((size_t)N * K, 0.2f), b = fb_rand(N, 1);
    fbuf out = fb_poison((size_t)R * N);
    backend_packed *wc = NULL, *wg = NULL;
    CPU_OK(g_cpu->pack_weight(g_cpu, BACKEND_PACK_BF16, W.h, N, K, &wc, err));
    GPU_OK(g_gpu->pack_weight(g_gpu, BACKEND_PACK_BF16, W.d, N, K, &wg, err));
    CPU_OK(g_cpu->linear_packed(g_cpu, out.h, x.h, wc, bias ? b.h : NULL, R, K, N));
#ifdef SM_CUDA_EMU_TEST
    fbuf ref = fb_poison((size_t)R * N);
    GPU_OK(g_gpu->linear(g_gpu, ref.d, x.d, W.d, bias ? b.d : NULL, R, K, N));
    float *by_linear = fb_pull(&ref);
    fb_free(&ref);
#endif
    GPU_OK(g_gpu->zero(g_gpu, W.d, W.n * sizeof(float)));
    GPU_OK(g_gpu->linear_packed(g_gpu, out.d, x.d, wg, bias ? b.d : NULL, R, K, N));
    char what[64];
    snprintf(what, sizeof what, "packed %dx%d->%d%s", R, K, N, bias ? " +b" : "");
    check("linear", what, &out, NULL);
#ifdef SM_CUDA_EMU_TEST
    float *got = fb_pull(&out);
    assert_memory_equal(got, by_linear, out.n * sizeof(float));
    free(got);
    free(by_linear);
#endif
    backend_packed_free(wc);
    backend_packed_free(wg);
    fb_free(&x);
    fb_free(&W);
    fb_free(&b);
    fb_free(&out);
}

static void test_linear_packed(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    set_precision("fp32");
    assert_int_equal(g_gpu->linear_pack_kind(g_gpu, 1), 0);
    set_precision("bf16");
    assert_int_equal(g_gpu->linear_pack_kind(g_gpu, 1), BACKEND_PACK_BF16);
    run_linear_packed(50, 72, 96, 1);
    run_linear_packed(1, 768, 2304, 1);
    run_linear_packed(33, 40, 24, 0);

    /* what it refuses: other kinds, bad shapes, weights it did not pack */
    fbuf W = fb_rand(6 * 8, 1), x = fb_rand(2 * 8, 1), out = fb_poison(2 * 6);
    backend_packed *wg = NULL, *wc = NULL;
    assert_int_equal(g_gpu->pack_weight(g_gpu, BACKEND_PACK_INT8, W.d, 6, 8, &wg, err),
                     SM_ERR_UNSUPPORTED);
    assert_null(wg);
    assert_non_null(strstr(err, "bf16"));
    assert_int_equal(g_gpu->pack_weight(g_gpu, BACKEND_PACK_BF16, W.d, 0, 8, &wg, err),
                     SM_ERR_INVALID);
    assert_null(wg);
    GPU_OK(g_gpu->pack_weight(g_gpu, BACKEND_PACK_BF16, W.d, 6, 8, &wg, err));
    CPU_OK(g_cpu->pack_weight(g_cpu, BACKEND_PACK_BF16, W.h, 6, 8, &wc, err));
    assert_int_equal(g_gpu->linear_packed(g_gpu, out.d, x.d, wg, NULL, 2, 6, 8), SM_ERR_INVALID);
    assert_int_equal(g_gpu->linear_packed(g_gpu, out.d, x.d, wc, NULL, 2, 8, 6), SM_ERR_INVALID);
    assert_non_null(strstr(g_gpu->last_error(g_gpu), "not packed by the cuda backend"));
    GPU_OK(g_gpu->linear_packed(g_gpu, out.d, x.d, wg, NULL, 2, 8, 6));
    backend_packed_free(wg);
    backend_packed_free(wc);
    fb_free(&W);
    fb_free(&x);
    fb_free(&out);
    set_precision("fp32");
}

/* ---- elementwise, LayerNorm, softmax, layouts ---- */

static void test_elementwise(void **state)
{
    (void)state;
    set_precision("fp32");
    size_t n = 10007;
    fbuf a = fb_rand(n, 3), b = fb_rand(n, 3), out = fb_poison(n);
    CPU_OK(g_cpu->add(g_cpu, out.h, a.h, b.h, n));
    GPU_OK(g_gpu->add(g_gpu, out.d, a.d, b.d, n));
    check("add", "out", &out, NULL);
    CPU_OK(g_cpu->add(g_cpu, a.h, a.h, b.h, n)); /* out aliasing a */
    GPU_OK(g_gpu->add(g_gpu, a.d, a.d, b.d, n));
    check("add", "in place", &a, NULL);
    fb_free(&out);
    out = fb_poison(n);
    CPU_OK(g_cpu->gelu(g_cpu, out.h, b.h, n));
    GPU_OK(g_gpu->gelu(g_gpu, out.d, b.d, n));
    check("gelu", "out", &out, NULL);
    CPU_OK(g_cpu->tanh(g_cpu, out.h, b.h, n));
    GPU_OK(g_gpu->tanh(g_gpu, out.d, b.d, n));
    check("tanh", "out", &out, NULL);
    fbuf dout = fb_rand(n, 1);
    CPU_OK(g_cpu->gelu_backward(g_cpu, dout.h, dout.h, b.h, n)); /* din aliasing dout */
    GPU_OK(g_gpu->gelu_backward(g_gpu, dout.d, dout.d, b.d, n));
    check("gelu_backward", "in place", &dout, NULL);
    fbuf din = fb_poison(n);
    CPU_OK(g_cpu->tanh_backward(g_cpu, din.h, dout.h, out.h, n));
    GPU_OK(g_gpu->tanh_backward(g_gpu, din.d, dout.d, out.d, n));
    check("tanh_backward", "din", &din, NULL);
    CPU_OK(g_cpu->scale(g_cpu, a.h, n, -0.37f));
    GPU_OK(g_gpu->scale(g_gpu, a.d, n, -0.37f));
    check("scale", "x", &a, NULL);
    CPU_OK(g_cpu->zero(g_cpu, a.h, 777 * sizeof(float)));
    GPU_OK(g_gpu->zero(g_gpu, a.d, 777 * sizeof(float)));
    check("zero", "777 of x", &a, NULL);
    /* sumsq over an odd length */
    size_t big = ((size_t)1 << 20) + 3;
    fbuf x = fb_rand(big, 2), s = fb_poison(1);
    CPU_OK(g_cpu->sumsq(g_cpu, s.h, x.h, big));
    GPU_OK(g_gpu->sumsq(g_gpu, s.d, x.d, big));
    check("sumsq", "2^20+3", &s, NULL);
    fb_free(&x);
    fb_free(&s);
    fb_free(&a);
    fb_free(&b);
    fb_free(&out);
    fb_free(&dout);
    fb_free(&din);
}

static void run_layernorm(int R, int C, int alias)
{
    fbuf x = fb_rand((size_t)R * C, 2), w = fb_rand(C, 1), b = fb_rand(C, 1);
    for (size_t i = 0; i < x.n; i++) x.h[i] += 0.5f; /* a nonzero mean */
    fb_push(&x);
    fbuf out = alias ? x : fb_poison((size_t)R * C), mean = fb_poison(R), rstd = fb_poison(R);
    CPU_OK(g_cpu->layernorm(g_cpu, out.h, mean.h, rstd.h, x.h, w.h, b.h, R, C, 1e-12f));
    GPU_OK(g_gpu->layernorm(g_gpu, out.d, mean.d, rstd.d, x.d, w.d, b.d, R, C, 1e-12f));
    char what[64];
    snprintf(what, sizeof what, "%dx%d%s", R, C, alias ? " in place" : "");
    check("layernorm", what, &out, NULL);
    check("layernorm", "mean", &mean, NULL);
    check("layernorm", "rstd", &rstd, NULL);
    if (!alias) fb_free(&out);
    fb_free(&x);
    fb_free(&w);
    fb_free(&b);
    fb_free(&mean);
    fb_free(&rstd);
}

static void run_layernorm_backward(int R, int C, int alias)
{
    /* the forward's statistics, shared by both sides */
    fbuf x = fb_rand((size_t)R * C, 2), w = fb_rand(C, 1), b = fb_rand(C, 1);
    fbuf y = fb_poison((size_t)R * C), mean = fb_poison(R), rstd = fb_poison(R);
    CPU_OK(g_cpu->layernorm(g_cpu, y.h, mean.h, rstd.h, x.h, w.h, b.h, R, C, 1e-12f));
    fb_push(&mean);
    fb_push(&rstd);
    fbuf dout = fb_rand((size_t)R * C, 1), dw = fb_rand(C, 1), db = fb_rand(C, 1);
    fbuf din = alias ? dout : fb_poison((size_t)R * C);
    CPU_OK(g_cpu->layernorm_backward(g_cpu, din.h, dw.h, db.h, dout.h, x.h, mean.h, rstd.h, w.h, R, C));
    GPU_OK(g_gpu->layernorm_backward(g_gpu, din.d, dw.d, db.d, dout.d, x.d, mean.d, rstd.d, w.d, R, C));
    char what[64];
    snprintf(what, sizeof what, "%dx%d%s", R, C, alias ? " in place" : "");
    check("layernorm_backward", what, &din, NULL);
    check("layernorm_backward", "dw", &dw, NULL);
    check("layernorm_backward", "db", &db, NULL);
    if (!alias) fb_free(&din);
    fb_free(&x);
    fb_free(&w);
    fb_free(&b);
    fb_free(&y);
    fb_free(&mean);
    fb_free(&rstd);
    fb_free(&dout);
    fb_free(&dw);
    fb_free(&db);
}

static void test_layernorm(void **state)
{
    (void)state;
    set_precision("fp32");
    run_layernorm(33, 768, 0);
    run_layernorm(70, 50, 1);
    run_layernorm(5, 1000, 0);
    run_layernorm_backward(33, 768, 0);
    run_layernorm_backward(300, 50, 1);
    run_layernorm_backward(2, 97, 0);
}

static void test_softmax_and_layouts(void **state)
{
    (void)state;
    set_precision("fp32");
    int B = 3, H = 2, T = 13, d = 8, C = H * d;
    int len[3] = {13, 1, 7};
    ibuf lengths = ib_from(len, B);
    fbuf att = fb_rand((size_t)B * H * T * T, 4);
    CPU_OK(g_cpu->softmax_masked(g_cpu, att.h, lengths.h, B, H, T, 0.35f));
    GPU_OK(g_gpu->softmax_masked(g_gpu, att.d, lengths.d, B, H, T, 0.35f));
    check("softmax_masked", "att", &att, NULL);

    fbuf qkv = fb_rand((size_t)B * T * 3 * C, 1);
    fbuf q = fb_poison((size_t)B * T * C), k = fb_poison(q.n), v = fb_poison(q.n);
    CPU_OK(g_cpu->attn_split(g_cpu, q.h, k.h, v.h, qkv.h, B, T, H, d));
    GPU_OK(g_gpu->attn_split(g_gpu, q.d, k.d, v.d, qkv.d, B, T, H, d));
    check("attn_split", "q", &q, NULL);
    check("attn_split", "k", &k, NULL);
    check("attn_split", "v", &v, NULL);
    fbuf merged = fb_poison(q.n);
    CPU_OK(g_cpu->attn_merge(g_cpu, merged.h, v.h, B, T, H, d));
    GPU_OK(g_gpu->attn_merge(g_gpu, merged.d, v.d, B, T, H, d));
    check("attn_merge", "out", &merged, NULL);

    fbuf cls = fb_poison((size_t)B * C);
    CPU_OK(g_cpu->gather_cls(g_cpu, cls.h, merged.h, B, T, C));
    GPU_OK(g_gpu->gather_cls(g_gpu, cls.d, merged.d, B, T, C));
    check("gather_cls", "out", &cls, NULL);
    fbuf dx = fb_poison((size_t)B * T * C);
    CPU_OK(g_cpu->scatter_cls(g_cpu, dx.h, cls.h, B, T, C));
    GPU_OK(g_gpu->scatter_cls(g_gpu, dx.d, cls.d, B, T, C));
    check("scatter_cls", "dx", &dx, NULL);

    /* rows of predicted positions: distinct rows in a random order */
    int N = B * T, M = 11, rows[11];
    for (int i = 0; i < M; i++) {
        int r, dup;
        do {
            r = rnd_int(N);
            dup = 0;
            for (int j = 0; j < i; j++) dup |= rows[j] == r;
        } while (dup);
        rows[i] = r;
    }
    if (g_cpu->gather_rows && g_gpu->gather_rows) {
        ibuf ir = ib_from(rows, M);
        fbuf g = fb_poison((size_t)M * C), sx = fb_poison((size_t)N * C);
        CPU_OK(g_cpu->gather_rows(g_cpu, g.h, merged.h, ir.h, M, C));
        GPU_OK(g_gpu->gather_rows(g_gpu, g.d, merged.d, ir.d, M, C));
        check("gather_rows", "out", &g, NULL);
        CPU_OK(g_cpu->scatter_rows(g_cpu, sx.h, g.h, ir.h, M, N, C));
        GPU_OK(g_gpu->scatter_rows(g_gpu, sx.d, g.d, ir.d, M, N, C));
        check("scatter_rows", "dx", &sx, NULL);
        ib_free(&ir);
        fb_free(&g);
        fb_free(&sx);
    }
    ib_free(&lengths);
    fb_free(&att);
    fb_free(&qkv);
    fb_free(&q);
    fb_free(&k);
    fb_free(&v);
    fb_free(&merged);
    fb_free(&cls);
    fb_free(&dx);
}

/* ---- dropout ---- */

static void test_dropout(void **state)
{
    (void)state;
    set_precision("fp32");
    size_t n = 50021;
    unsigned long long key = rnd64();
    fbuf x = fb_rand(n, 2), out = fb_poison(n);
    CPU_OK(g_cpu->dropout(g_cpu, out.h, x.h, n, 0.0f, key));
    GPU_OK(g_gpu->dropout(g_gpu, out.d, x.d, n, 0.0f, key));
    check("dropout", "p=0 copy", &out, NULL);
    CPU_OK(g_cpu->dropout(g_cpu, out.h, x.h, n, 0.1f, key));
    GPU_OK(g_gpu->dropout(g_gpu, out.d, x.d, n, 0.1f, key));
    check("dropout", "p=0.1", &out, NULL);
    /* the same mask, element for element */
    float *got = fb_pull(&out);
    size_t zeros = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true((got[i] == 0.0f) == (out.h[i] == 0.0f));
        zeros += got[i] == 0.0f;
    }
    free(got);
    assert_true(zeros > n / 20 && zeros < n / 5);
    CPU_OK(g_cpu->dropout(g_cpu, x.h, x.h, n, 0.5f, key + 1)); /* in place */
    GPU_OK(g_gpu->dropout(g_gpu, x.d, x.d, n, 0.5f, key + 1));
    check("dropout", "p=0.5 in place", &x, NULL);
    fb_free(&x);
    fb_free(&out);
}

/* ---- embeddings ---- */

/* embed_backward on both backends for B x T tokens with ids idv (rows of a
 * V-row table) and types tyv (NULL: none; n_types rows), dtask when
 * with_task, positions t + off into a table of T + off + 2 rows. With a
 * negative id, type or position the reference is a plain loop that skips
 * those tokens (the CPU backend leaves them undefined). Then the GPU runs
 * again from the same inputs and must give the same bits. */
static void run_embed_backward(const char *what, int B, int T, int C, const int *idv, int V,
                               const int *tyv, int n_types, int with_task, int off)
{
    int N = B * T, n_pos = T + off + 2, neg = off < 0;
    for (int i = 0; i < N; i++) neg |= idv[i] < 0 || (tyv && tyv[i] < 0);
    ibuf ids = ib_from(idv, N), types = ib_from(tyv ? tyv : idv, N);
    fbuf dout = fb_rand((size_t)N * C, 1);
    fbuf g[4] = {fb_rand((size_t)V * C, 1), fb_rand((size_t)n_pos * C, 1),
                 fb_rand((size_t)n_types * C, 1), fb_rand(C, 1)};
    const char *name[4] = {"dword", "dpos", "dtype", "dtask"};
    float *init[4];
    for (int k = 0; k < 4; k++) {
        init[k] = malloc(g[k].n * sizeof(float));
        memcpy(init[k], g[k].h, g[k].n * sizeof(float));
    }
    if (!neg) {
        CPU_OK(g_cpu->embed_backward(g_cpu, g[0].h, g[1].h, g[2].h, with_task ? g[3].h : NULL,
                                     dout.h, ids.h, tyv ? types.h : NULL, B, T, C, off));
    } else {
        for (int bt = 0; bt < N; bt++) {
            int row[4] = {idv[bt], bt % T + off, tyv ? tyv[bt] : 0, with_task ? 0 : -1};
            for (int k = 0; k < 4; k++)
                for (int c = 0; c < C && row[k] >= 0; c++)
                    g[k].h[(size_t)row[k] * C + c] += dout.h[(size_t)bt * C + c];
        }
    }
    float *first[4];
    for (int run = 0; run < 2; run++) {
        GPU_OK(g_gpu->embed_backward(g_gpu, g[0].d, g[1].d, g[2].d, with_task ? g[3].d : NULL,
                                     dout.d, ids.d, tyv ? types.d : NULL, B, T, C, off));
        for (int k = 0; k < 4; k++) {
            if (run) {
                /* the same bits as the first run */
                float *again = fb_pull(&g[k]);
                if (memcmp(again, first[k], g[k].n * sizeof(float)))
                    print_error("embed_backward %s %s: a second run differs\n", what, name[k]);
                assert_memory_equal(again, first[k], g[k].n * sizeof(float));
                free(again);
                free(first[k]);
                continue;
            }
            char label[80];
            snprintf(label, sizeof label, "%s %s", name[k], what);
            check("embed_backward", label, &g[k], NULL);
            first[k] = fb_pull(&g[k]);
            GPU_OK(g_gpu->upload(g_gpu, g[k].d, init[k], g[k].n * sizeof(float)));
        }
    }
    for (int k = 0; k < 4; k++) {
        free(init[k]);
        fb_free(&g[k]);
    }
    fb_free(&dout);
    ib_free(&ids);
    ib_free(&types);
}

static void test_embed(void **state)
{
    (void)state;
    set_precision("fp32");
    int B = 4, T = 40, C = 48, V = 7, n_pos = T + 2, types_n = 2, off = 2;
    int N = B * T, *idv = malloc(N * sizeof *idv), *tyv = malloc(N * sizeof *tyv);
    for (int i = 0; i < N; i++) {
        idv[i] = rnd_int(V); /* many repeats: row runs longer than one chunk */
        tyv[i] = rnd_int(types_n);
    }
    ibuf ids = ib_from(idv, N), types = ib_from(tyv, N);
    fbuf word = fb_rand((size_t)V * C, 1), pos = fb_rand((size_t)n_pos * C, 1),
         type = fb_rand((size_t)types_n * C, 1), task = fb_rand(C, 1);
    for (int with = 0; with < 2; with++) {
        fbuf out = fb_poison((size_t)N * C);
        CPU_OK(g_cpu->embed(g_cpu, out.h, ids.h, with ? types.h : NULL, word.h, pos.h, type.h,
                            with ? task.h : NULL, B, T, C, off));
        GPU_OK(g_gpu->embed(g_gpu, out.d, ids.d, with ? types.d : NULL, word.d, pos.d, type.d,
                            with ? task.d : NULL, B, T, C, off));
        check("embed", with ? "types, task, offset 2" : "offset 2", &out, NULL);
        fb_free(&out);
    }
    ib_free(&ids);
    ib_free(&types);
    fb_free(&word);
    fb_free(&pos);
    fb_free(&type);
    fb_free(&task);

    /* the backward: 7 ids over 160 tokens, with and without types and dtask */
    run_embed_backward("(ids of 7)", B, T, C, idv, V, NULL, types_n, 0, off);
    run_embed_backward("(types, task)", B, T, C, idv, V, tyv, types_n, 1, off);
    free(idv);
    free(tyv);

    /* one id and one type for 300 tokens (runs over ten chunks of 32); then no
     * types (dtype and dtask both column sums), then a single token */
    N = 300;
    idv = malloc(N * sizeof *idv);
    tyv = malloc(N * sizeof *tyv);
    for (int i = 0; i < N; i++) {
        idv[i] = 5;
        tyv[i] = 1;
    }
    run_embed_backward("(one id)", 3, 100, 40, idv, 9, tyv, 2, 1, 0);
    run_embed_backward("(one id, task)", 3, 100, 40, idv, 9, NULL, 2, 1, 0);
    run_embed_backward("(one token)", 1, 1, 40, idv, 9, tyv, 2, 1, 3);
    free(idv);
    free(tyv);

    /* 122 distinct ids in shuffled order, 136 channels (two thread blocks) */
    N = 122;
    V = 200;
    idv = malloc(V * sizeof *idv);
    tyv = malloc(N * sizeof *tyv);
    for (int i = 0; i < V; i++) idv[i] = i;
    for (int i = V - 1; i > 0; i--) {
        int j = rnd_int(i + 1), t = idv[i];
        idv[i] = idv[j];
        idv[j] = t;
    }
    for (int i = 0; i < N; i++) tyv[i] = rnd_int(3);
    run_embed_backward("(distinct ids)", 2, 61, 136, idv, V, tyv, 3, 0, 5);
    free(idv);
    free(tyv);

    /* 3150 tokens: the sort's stages across thread blocks */
    N = 3150;
    V = 50;
    idv = malloc(N * sizeof *idv);
    tyv = malloc(N * sizeof *tyv);
    for (int i = 0; i < N; i++) {
        idv[i] = i % 700 < 100 ? 7 : rnd_int(V); /* long runs of 7 */
        tyv[i] = rnd_int(2);
    }
    run_embed_backward("(3150 tokens)", 7, 450, 24, idv, V, tyv, 2, 1, 1);
    run_embed_backward("(3150, no types)", 7, 450, 24, idv, V, NULL, 2, 0, 1);

    /* negative ids, types and positions add nothing */
    for (int i = 0; i < 100; i++) {
        idv[i] = i % 9 == 4 ? -1 : idv[i];
        tyv[i] = i % 13 == 2 ? -3 : tyv[i];
    }
    run_embed_backward("(negative rows)", 2, 50, 16, idv, V, tyv, 2, 1, -3);
    free(idv);
    free(tyv);
}

/* ---- attention ---- */

/* mask of att(B,H,T,T) rows i < len[b] (and, with block, columns j < len[b]) */
static unsigned char *att_mask(const int *len, int B, int H, int T, int block)
{
    unsigned char *m = malloc((size_t)B * H * T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++)
                    m[(((size_t)b * H + h) * T + i) * T + j] = i < len[b] && (!block || j < len[b]);
    return m;
}

static void run_attention(int B, int T, int H, int d, const int *len, float p)
{
    int C = H * d;
    float scale = 1.0f / sqrtf((float)d);
    unsigned long long key = rnd64();
    ibuf lengths = ib_from(len, B);
    fbuf qkv = fb_rand((size_t)B * T * 3 * C, 1);
    size_t natt = (size_t)B * H * T * T;
    fbuf out = fb_poison((size_t)B * T * C), att = fb_poison(natt), drop = fb_poison(natt);
    unsigned char *rows = att_mask(len, B, H, T, 0), *block = att_mask(len, B, H, T, 1);
    char what[80];
    snprintf(what, sizeof what, "B%d T%d H%d d%d p%.1f", B, T, H, d, p);
    if (p == 0.0f) {
        CPU_OK(g_cpu->attention(g_cpu, out.h, att.h, qkv.h, lengths.h, B, T, H, d, scale));
        GPU_OK(g_gpu->attention(g_gpu, out.d, att.d, qkv.d, lengths.d, B, T, H, d, scale));
        check("attention", what, &out, NULL);
        check("attention", "probabilities", &att, rows);
        for (size_t i = 0; i < att.n; i++) att.h[i] = NAN;
        fb_push(&att);
        for (size_t i = 0; i < out.n; i++) out.h[i] = NAN;
        fb_push(&out);
    }
    CPU_OK(g_cpu->attention_train(g_cpu, out.h, att.h, drop.h, qkv.h, lengths.h, B, T, H, d,
                                  scale, p, key));
    GPU_OK(g_gpu->attention_train(g_gpu, out.d, att.d, drop.d, qkv.d, lengths.d, B, T, H, d,
                                  scale, p, key));
    check("attention_train", what, &out, NULL);
    /* every row: those of padding queries are 0 (backend.h) */
    check("attention_train", "probabilities", &att, NULL);
    if (p > 0) check("attention_train", "dropped", &drop, block);

    /* backward from each side's own forward; dout nonzero on padding rows */
    fbuf dout = fb_rand((size_t)B * T * C, 1), dqkv = fb_poison(qkv.n), datt = fb_poison(natt);
    CPU_OK(g_cpu->attention_backward(g_cpu, dqkv.h, datt.h, drop.h, dout.h, att.h, qkv.h,
                                     lengths.h, B, T, H, d, scale, p, key));
    GPU_OK(g_gpu->attention_backward(g_gpu, dqkv.d, datt.d, drop.d, dout.d, att.d, qkv.d,
                                     lengths.d, B, T, H, d, scale, p, key));
    check("attention_backward", what, &dqkv, NULL);
    free(rows);
    free(block);
    ib_free(&lengths);
    fb_free(&qkv);
    fb_free(&out);
    fb_free(&att);
    fb_free(&drop);
    fb_free(&dout);
    fb_free(&dqkv);
    fb_free(&datt);
}

static void attention_ops(void)
{
    int len3[3] = {19, 1, 11};
    run_attention(3, 19, 4, 16, len3, 0.0f);
    run_attention(3, 19, 4, 16, len3, 0.1f);
    int len2[2] = {64, 37};
    run_attention(2, 64, 12, 64, len2, 0.0f);
    run_attention(2, 64, 12, 64, len2, 0.1f);
    int len1[1] = {5};
    run_attention(1, 5, 1, 8, len1, 0.0f);
}

static void test_attention_fp32(void **state)
{
    (void)state;
    set_precision("fp32");
    attention_ops();
}

static void test_attention_bf16(void **state)
{
    (void)state;
    set_precision("bf16");
    attention_ops();
    set_precision("fp32");
}

/* ---- loss and optimizer ---- */

static void test_loss_and_adamw(void **state)
{
    (void)state;
    set_precision("fp32");
    int B = 7, K = 5, lab[7];
    for (int b = 0; b < B; b++) lab[b] = rnd_int(K);
    ibuf labels = ib_from(lab, B);
    fbuf logits = fb_rand((size_t)B * K, 6), losses = fb_poison(B), probs = fb_poison((size_t)B * K);
    CPU_OK(g_cpu->cross_entropy(g_cpu, losses.h, probs.h, logits.h, labels.h, B, K));
    GPU_OK(g_gpu->cross_entropy(g_gpu, losses.d, probs.d, logits.d, labels.d, B, K));
    check("cross_entropy", "losses", &losses, NULL);
    check("cross_entropy", "probs", &probs, NULL);
    fbuf dlogits = fb_poison((size_t)B * K);
    CPU_OK(g_cpu->cross_entropy_backward(g_cpu, dlogits.h, probs.h, labels.h, B, K, 1.0f / B));
    GPU_OK(g_gpu->cross_entropy_backward(g_gpu, dlogits.d, probs.d, labels.d, B, K, 1.0f / B));
    check("cross_entropy_backward", "dlogits", &dlogits, NULL);

    /* distillation: soft targets q (rows are distributions), one row without a label */
    lab[2] = -1;
    ibuf dlabels = ib_from(lab, B);
    fbuf q = fb_new((size_t)B * K), probs_t = fb_poison((size_t)B * K);
    for (int b = 0; b < B; b++) {
        float sum = 0;
        for (int k = 0; k < K; k++) sum += q.h[b * K + k] = uniform(0.01f, 1.0f);
        for (int k = 0; k < K; k++) q.h[b * K + k] /= sum;
    }
    fb_push(&q);
    CPU_OK(g_cpu->distill_loss(g_cpu, losses.h, probs.h, probs_t.h, logits.h, dlabels.h, q.h, B, K,
                               2.5f, 0.7f));
    GPU_OK(g_gpu->distill_loss(g_gpu, losses.d, probs.d, probs_t.d, logits.d, dlabels.d, q.d, B, K,
                               2.5f, 0.7f));
    check("distill_loss", "losses", &losses, NULL);
    check("distill_loss", "probs_t", &probs_t, NULL);
    CPU_OK(g_cpu->distill_backward(g_cpu, dlogits.h, probs.h, probs_t.h, dlabels.h, q.h, B, K, 2.5f,
                                   0.7f, 1.0f / B));
    GPU_OK(g_gpu->distill_backward(g_gpu, dlogits.d, probs.d, probs_t.d, dlabels.d, q.d, B, K, 2.5f,
                                   0.7f, 1.0f / B));
    check("distill_backward", "dlogits", &dlogits, NULL);
    fb_free(&q);
    fb_free(&probs_t);
    ib_free(&dlabels);

    /* a vocabulary-sized K (the masked-LM loss), spread over a warp's lanes */
    {
        int VB = 3, VK = 4099, vlab[3] = {0, 4098, 2049};
        ibuf vl = ib_from(vlab, VB);
        fbuf vz = fb_rand((size_t)VB * VK, 6), vloss = fb_poison(VB),
             vp = fb_poison((size_t)VB * VK);
        CPU_OK(g_cpu->cross_entropy(g_cpu, vloss.h, vp.h, vz.h, vl.h, VB, VK));
        GPU_OK(g_gpu->cross_entropy(g_gpu, vloss.d, vp.d, vz.d, vl.d, VB, VK));
        check("cross_entropy", "losses, K 4099", &vloss, NULL);
        check("cross_entropy", "probs, K 4099", &vp, NULL);
        fb_free(&vz);
        fb_free(&vloss);
        fb_free(&vp);
        ib_free(&vl);
    }

    size_t n = 10007;
    fbuf p = fb_rand(n, 1), g = fb_rand(n, 0.1f), m = fb_rand(n, 0.01f), v = fb_new(n);
    for (size_t i = 0; i < n; i++) v.h[i] = uniform(0, 1e-3f);
    fb_push(&v);
    for (int t = 1; t <= 7; t += 6)
        for (int wd = 0; wd < 2; wd++) {
            CPU_OK(g_cpu->adamw(g_cpu, p.h, g.h, m.h, v.h, n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                wd ? 0.01f : 0.0f, t));
            GPU_OK(g_gpu->adamw(g_gpu, p.d, g.d, m.d, v.d, n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                wd ? 0.01f : 0.0f, t));
            char what[32];
            snprintf(what, sizeof what, "t=%d wd=%d p", t, wd);
            check("adamw", what, &p, NULL);
            check("adamw", "m", &m, NULL);
            check("adamw", "v", &v, NULL);
        }

    /* adamw_step: two runs with gaps around them; clipping (coef != 1, below
     * and above 1) scales the runs' gradients only, and nothing outside the
     * runs changes, on either side */
    size_t total = 5000;
    const backend_adamw_run runs[2] = {{100, 2000, 1, 0}, {2500, 2000, 0, 1}};
    for (int k = 0; k < 3; k++) {
        float coef = k == 0 ? 0.5f : (k == 1 ? 1.25f : 1.0f);
        fbuf P = fb_rand(total, 1), G = fb_rand(total, 0.1f), M = fb_rand(total, 0.01f),
             V = fb_new(total);
        for (size_t i = 0; i < total; i++) V.h[i] = uniform(0, 1e-3f);
        fb_push(&V);
        fbuf *all[4] = {&P, &G, &M, &V};
        float *before[4];
        for (int a = 0; a < 4; a++) {
            before[a] = malloc(total * sizeof(float));
            memcpy(before[a], all[a]->h, total * sizeof(float));
        }
        CPU_OK(g_cpu->adamw_step(g_cpu, P.h, G.h, M.h, V.h, runs, 2, total, coef, 1e-3f, 5e-3f,
                                 0.9f, 0.999f, 1e-8f, 0.01f, 3));
        GPU_OK(g_gpu->adamw_step(g_gpu, P.d, G.d, M.d, V.d, runs, 2, total, coef, 1e-3f, 5e-3f,
                                 0.9f, 0.999f, 1e-8f, 0.01f, 3));
        const char *names[4] = {"p", "grads", "m", "v"};
        for (int a = 0; a < 4; a++) {
            char what[48];
            snprintf(what, sizeof what, "coef %.2f %s", coef, names[a]);
            check("adamw_step", what, all[a], NULL);
            float *got = fb_pull(all[a]);
            for (size_t i = 0; i < total; i++) {
                int inside = (i >= 100 && i < 2100) || (i >= 2500 && i < 4500);
                if (inside) continue;
                if (got[i] != before[a][i] || all[a]->h[i] != before[a][i])
                    print_error("adamw_step coef %.2f: %s[%zu] outside the runs changed: cpu %g "
                                "gpu %g, was %g\n",
                                coef, names[a], i, all[a]->h[i], got[i], before[a][i]);
                assert_true(got[i] == before[a][i] && all[a]->h[i] == before[a][i]);
            }
            /* the clipped gradients inside the runs */
            if (a == 1)
                assert_true(all[a]->h[150] == before[a][150] * coef &&
                            got[2600] == before[a][2600] * coef);
            free(got);
            free(before[a]);
            fb_free(all[a]);
        }
    }

    ib_free(&labels);
    fb_free(&logits);
    fb_free(&losses);
    fb_free(&probs);
    fb_free(&dlogits);
    fb_free(&p);
    fb_free(&g);
    fb_free(&m);
    fb_free(&v);
}

/* ---- whole models ---- */

#define MAX_TEXTS 64
#define MAX_IDS 512

static int read_golden_ids(const char *dir, int ids[][MAX_IDS], int *n_ids)
{
    char path[512];
    snprintf(path, sizeof path, "%s/golden.tsv", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char line[1 << 17];
    int n = 0;
    while (n < MAX_TEXTS && fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        char *end = strchr(tab + 1, '\t');
        assert_non_null(end);
        *end = 0;
        n_ids[n] = 0;
        for (char *tok = strtok(tab + 1, " "); tok && n_ids[n] < MAX_IDS; tok = strtok(NULL, " "))
            ids[n][n_ids[n]++] = atoi(tok);
        n++;
    }
    fclose(f);
    return n;
}

/* logits (or pooled vectors for an encoder without a head) of the golden
 * texts as one padded batch on backend be with parameters p */
static float *model_outputs(const bert_model *m, backend *be, const bert_params *p,
                            const int *ids, const int *lengths, int B, int T, int *K)
{
    char err[SM_ERR_MAX] = "";
    bert_workspace *ws;
    int rc = bert_workspace_create(be, &m->cfg, B, T, &ws, err);
    if (rc) print_error("workspace: %s (%s)\n", err, g_gpu->last_error(g_gpu));
    assert_int_equal(rc, SM_OK);
    *K = m->has_head ? m->cfg.num_labels : m->cfg.hidden_size;
    float *out = malloc((size_t)B * *K * sizeof *out);
    for (int i = 0; i < B * *K; i++) out[i] = NAN;
    rc = m->has_head ? bert_forward(&m->cfg, p, ws, ids, lengths, B, T, out, NULL, err)
                     : bert_forward(&m->cfg, p, ws, ids, lengths, B, T, NULL, out, err);
    if (rc) print_error("forward on %s: %s (%s)\n", be->name, err,
                        be == g_gpu ? g_gpu->last_error(g_gpu) : "");
    assert_int_equal(rc, SM_OK);
    bert_workspace_free(ws);
    return out;
}

/* In bf16, the forward pass with the encoder's matrices packed once from
 * the device copy (as runtime/registry.c does for a GPU in bf16): within the
 * model tolerance of the CPU and, on the emulator, the same bits as the
 * unpacked bf16 pass (got). */
static void check_model_packed(const bert_model *m, const bert_params *dev, const int *batch,
                               const int *lengths, int B, int T, const float *want,
                               const float *got)
{
    char err[SM_ERR_MAX] = "";
    bert_precision plan[BERT_PACK_N];
    bert_packed_params *pp = NULL;
    int K;
    bert_pack_plan(BERT_BF16, plan);
    int rc = bert_params_pack(g_gpu, &m->cfg, dev, plan, &pp, err);
    if (rc) print_error("packing: %s (%s)\n", err, g_gpu->last_error(g_gpu));
    assert_int_equal(rc, SM_OK);
    float *packed = model_outputs(m, g_gpu, &pp->p, batch, lengths, B, T, &K);
    double worst = 0;
    for (int i = 0; i < B * K; i++) {
        double e = isfinite(packed[i]) ? fabs((double)packed[i] - want[i]) : INFINITY;
        worst = e > worst ? e : worst;
    }
    print_message("  %-28s %-26s bf16 max |diff| %.2e (tol %.0e)\n", "model, packed weights", "",
                  worst, tol_of("model", 1));
    assert_true(worst <= tol_of("model", 1));
#ifdef SM_CUDA_EMU_TEST
    assert_memory_equal(packed, got, (size_t)B * K * sizeof *packed);
#else
    (void)got;
#endif
    free(packed);
    bert_packed_params_free(pp);
}

static void check_model(const char *dir)
{
    static int ids[MAX_TEXTS][MAX_IDS];
    int n_ids[MAX_TEXTS];
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    int rc = bert_model_load_dir(dir, &m, err);
    if (rc) print_error("%s: %s\n", dir, err);
    assert_int_equal(rc, SM_OK);
    int B = read_golden_ids(dir, ids, n_ids), T = 0;
    for (int b = 0; b < B; b++) T = n_ids[b] > T ? n_ids[b] : T;
    int *batch = malloc((size_t)B * T * sizeof *batch), *lengths = malloc(B * sizeof *lengths);
    for (int b = 0; b < B; b++) {
        lengths[b] = n_ids[b];
        for (int t = 0; t < T; t++)
            batch[b * T + t] = t < n_ids[b] ? ids[b][t] : tokenizer_pad_id(m->tok);
    }
    int K;
    float *want = model_outputs(m, g_cpu, &m->p, batch, lengths, B, T, &K);
    bert_device_params *dp = NULL;
    rc = bert_params_to_backend(g_gpu, m, &dp, err);
    if (rc) print_error("%s: %s (%s)\n", dir, err, g_gpu->last_error(g_gpu));
    assert_int_equal(rc, SM_OK);
    for (int prec = 0; prec < 2; prec++) {
        set_precision(prec ? "bf16" : "fp32");
        float *got = model_outputs(m, g_gpu, &dp->p, batch, lengths, B, T, &K);
        double worst = 0, tol = tol_of("model", g_bf16);
        for (int i = 0; i < B * K; i++) {
            double e = isfinite(got[i]) ? fabs((double)got[i] - want[i]) : INFINITY;
            worst = e > worst ? e : worst;
        }
        print_message("  %-28s %-26s %s max |diff| %.2e (tol %.0e)%s\n", "model", strrchr(dir, '/') + 1,
                      g_bf16 ? "bf16" : "fp32", worst, tol, worst <= tol ? "" : "  FAILED");
        assert_true(worst <= tol);
        if (prec) check_model_packed(m, &dp->p, batch, lengths, B, T, want, got);
        free(got);
        /* one text at a time (T = its own length): a batch of 1 */
        if (!prec) {
            float *one = model_outputs(m, g_gpu, &dp->p, ids[B - 1], &n_ids[B - 1], 1, n_ids[B - 1], &K);
            for (int k = 0; k < K; k++)
                assert_true(fabs((double)one[k] - want[(B - 1) * K + k]) <= tol);
            free(one);
        }
    }
    set_precision("fp32");
    bert_device_params_free(dp);
    free(want);
    free(batch);
    free(lengths);
    bert_model_free(m);
}

static void test_models(void **state)
{
    (void)state;
    check_model("tests/fixtures/models/bert_tiny");
    check_model("tests/fixtures/models/ernie_tiny");
    check_model("tests/fixtures/models/bert_encoder");
    check_model("tests/fixtures/models/roberta_encoder");
}

/* ---- 10 training steps ---- */

#define TRAIN_DIR "tests/fixtures/train"
#define STEPS 10

typedef struct train_batch {
    int B, T;
    int ids[16 * 64], lengths[16], labels[16];
} train_batch;

static void load_train_batch(const bert_model *m, train_batch *bt)
{
    FILE *f = fopen(TRAIN_DIR "/batch.txt", "r");
    assert_non_null(f);
    char line[4096];
    int raw[16][64];
    memset(bt, 0, sizeof *bt);
    while (fgets(line, sizeof line, f)) {
        assert_true(bt->B < 16);
        int b = bt->B++, n = 0;
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        bt->labels[b] = atoi(line);
        for (char *tok = strtok(tab + 1, " \n"); tok; tok = strtok(NULL, " \n")) {
            assert_true(n < 64);
            raw[b][n++] = atoi(tok);
        }
        bt->lengths[b] = n;
        if (n > bt->T) bt->T = n;
    }
    fclose(f);
    for (int b = 0; b < bt->B; b++)
        for (int t = 0; t < bt->T; t++)
            bt->ids[b * bt->T + t] = t < bt->lengths[b] ? raw[b][t] : tokenizer_pad_id(m->tok);
}

/* STEPS AdamW steps with dropout on backend be; losses[s] = mean loss of
 * step s, norms[s] the gradient norm. */
static void train_steps(backend *be, const bert_model *m, const train_batch *bt, double *losses,
                        float *norms)
{
    char err[SM_ERR_MAX] = "";
    size_t bytes = m->n_floats * sizeof(float);
    float *params = be->alloc(be, bytes), *grads = be->alloc(be, bytes);
    assert_non_null(params);
    assert_non_null(grads);
    assert_int_equal(be->upload(be, params, m->arena, bytes), SM_OK);
    bert_params p, g;
    assert_int_equal(bert_params_bind(&m->cfg, 1, params, &p, err), SM_OK);
    assert_int_equal(bert_params_bind(&m->cfg, 1, grads, &g, err), SM_OK);
    adamw *opt;
    assert_int_equal(adamw_create(be, &m->cfg, 1, &opt, err), SM_OK);
    adamw_hparams h;
    adamw_hparams_default(&h);
    h.lr = 1e-3f;
    bert_train_ws *ws;
    int rc = bert_train_ws_create(be, &m->cfg, bt->B, bt->T, &ws, err);
    if (rc) print_error("%s\n", err);
    assert_int_equal(rc, SM_OK);
    bert_dropout drop;
    bert_dropout_from_config(&m->cfg, -1, 1234, &drop);
    for (int s = 0; s < STEPS; s++) {
        double loss;
        drop.step = (uint64_t)s;
        assert_int_equal(be->zero(be, grads, bytes), SM_OK);
        rc = bert_train_forward(&m->cfg, &p, ws, bt->ids, bt->lengths, bt->labels, bt->B, bt->T,
                                &drop, &loss, NULL, err);
        if (!rc) rc = bert_train_backward(&m->cfg, &p, &g, ws, 1.0f / (float)bt->B, err);
        if (!rc)
            rc = adamw_step(opt, params, grads, &h, lr_linear_schedule(h.lr, s, 2, STEPS),
                            &norms[s], err);
        if (rc) print_error("step %d on %s: %s %s\n", s, be->name, err,
                            be == g_gpu ? g_gpu->last_error(g_gpu) : "");
        assert_int_equal(rc, SM_OK);
        losses[s] = loss / bt->B;
    }
    bert_train_ws_free(ws);
    adamw_free(opt);
    bert_params_release(&p);
    bert_params_release(&g);
    be->free(be, params);
    be->free(be, grads);
}

static void test_training_curve(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "";
    bert_model *m = NULL;
    assert_int_equal(bert_model_load_dir(TRAIN_DIR "/model", &m, err), SM_OK);
    train_batch bt;
    load_train_batch(m, &bt);
    double want[STEPS], got[STEPS];
    float nw[STEPS], ng[STEPS];
    train_steps(g_cpu, m, &bt, want, nw);
    for (int prec = 0; prec < 2; prec++) {
        set_precision(prec ? "bf16" : "fp32");
        train_steps(g_gpu, m, &bt, got, ng);
        double tol = tol_of("train_loss", g_bf16), worst = 0;
        for (int s = 0; s < STEPS; s++) {
            double e = fabs(got[s] - want[s]) / fabs(want[s]);
            if (!isfinite(got[s])) e = INFINITY;
            worst = e > worst ? e : worst;
            print_message("  step %2d loss cpu %.6f gpu %.6f  |grad| cpu %.5f gpu %.5f\n", s + 1,
                          want[s], got[s], nw[s], ng[s]);
        }
        print_message("  %-28s %-26s %s worst %.2e (tol %.0e)%s\n", "training", "10 AdamW steps",
                      g_bf16 ? "bf16" : "fp32", worst, tol, worst <= tol ? "" : "  FAILED");
        assert_true(worst <= tol);
    }
    set_precision("fp32");
    assert_true(want[STEPS - 1] < want[0]); /* it learns */
    bert_model_free(m);
}

/* ---- setup ---- */

static int gpu_setup(void **state)
{
    (void)state;
    char err[SM_ERR_MAX] = "", desc[256] = "";
    if (P.create(0, &g_gpu, desc, sizeof desc, err) != SM_OK) {
        print_error("cuda:0: %s\n", err);
        return -1;
    }
    if (backend_cpu_create(2, &g_cpu, err) != SM_OK) {
        print_error("cpu: %s\n", err);
        return -1;
    }
    size_t fr = 0, tot = 0;
    if (g_gpu->mem_info(g_gpu, &fr, &tot) == SM_OK)
        print_message("device: %s, %.1f of %.1f GiB free\n", desc, fr / 1073741824.0,
                      tot / 1073741824.0);
    return 0;
}

/* After each device test: a fault the emulator saw fails the test even
 * when the plugin swallowed the error it caused. */
static int emu_faults_teardown(void **state)
{
    (void)state;
    if (!P.emu_faults || !P.emu_faults()) return 0;
    print_error("the CUDA emulator reported %d fault(s); the first: %s\n", P.emu_faults(),
                P.emu_first_fault());
    return -1;
}

static int gpu_teardown(void **state)
{
    (void)state;
    if (g_gpu) g_gpu->destroy(g_gpu);
    if (g_cpu) g_cpu->destroy(g_cpu);
    g_gpu = g_cpu = NULL;
    return 0;
}

/* test_cuda --versions: what scripts/gpu-check.sh prints first, in a
 * second: the plugin, the CUDA driver, runtime and cuBLAS versions, and the
 * device (or why there is none). Exits 0 with a device, 2 without, 1 when
 * the plugin does not load. */
static int print_versions(void)
{
    if (plugin_open() != 0) {
        printf("plugin: %s: %s\n", P.path, P.why);
        return 1;
    }
    char err[SM_ERR_MAX] = "";
    int drv = 0, rt = 0, blas = 0;
    if (P.versions(&drv, &rt, &blas, err) != SM_OK) {
        printf("plugin: %s: %s\n", P.path, err);
        return 1;
    }
    printf("plugin: %s\n", P.path);
    printf("CUDA driver: %d.%d%s\n", drv / 1000, drv % 1000 / 10, drv ? "" : " (no driver)");
    printf("CUDA runtime: %d.%d\n", rt / 1000, rt % 1000 / 10);
    printf("cuBLAS: %d.%d.%d\n", blas / 10000, blas / 100 % 100, blas % 100);
    if (P.devices < 1) {
        printf("device: none (%s)\n", P.why);
        return 2;
    }
    backend *be = NULL;
    char desc[256] = "";
    if (P.create(0, &be, desc, sizeof desc, err) != SM_OK) {
        printf("device: cuda:0 of %d: %s\n", P.devices, err);
        return 2;
    }
    size_t fr = 0, tot = 0;
    be->mem_info(be, &fr, &tot);
    printf("device: %s (%d device%s), %.1f of %.1f GiB free\n", desc, P.devices,
           P.devices == 1 ? "" : "s", fr / 1073741824.0, tot / 1073741824.0);
    be->destroy(be);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--versions")) return print_versions();
    const char *seed_env = getenv("SENTIMENT_TEST_SEED");
    uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10)
                                          : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    g_rng = seed;
    printf("test_cuda: random seed %llu (SENTIMENT_TEST_SEED repeats it)\n",
           (unsigned long long)seed);
    int have_plugin = plugin_open() == 0;

    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_gemm_plan),
        cmocka_unit_test(test_tolerance_plumbing),
        cmocka_unit_test(test_plugin_errors),
    };
    int failed = cmocka_run_group_tests_name("cuda host-side", host_tests, NULL, NULL);

    if (!have_plugin || P.devices < 1) {
#ifdef SM_CUDA_EMU_TEST
        /* the emulated plugin is built with the test: not finding it is a failure */
        printf("test_cuda_emu: FAILED: no emulated device (%s)\n", P.why);
        return 1;
#endif
        printf("test_cuda: device tests skipped: no CUDA device (%s)\n", P.why);
        fflush(stdout);
        return failed ? 1 : 0;
    }
#define DEVICE_TEST(f) cmocka_unit_test_teardown(f, emu_faults_teardown)
    const struct CMUnitTest gpu_tests[] = {
        DEVICE_TEST(test_gemm_ops_fp32),
        DEVICE_TEST(test_gemm_ops_bf16),
        DEVICE_TEST(test_linear_packed),
        DEVICE_TEST(test_gemm_tflops),
        DEVICE_TEST(test_elementwise),
        DEVICE_TEST(test_layernorm),
        DEVICE_TEST(test_softmax_and_layouts),
        DEVICE_TEST(test_dropout),
        DEVICE_TEST(test_embed),
        DEVICE_TEST(test_attention_fp32),
        DEVICE_TEST(test_attention_bf16),
        DEVICE_TEST(test_loss_and_adamw),
        DEVICE_TEST(test_models),
        DEVICE_TEST(test_training_curve),
    };
#undef DEVICE_TEST
    /* The emulator runs the group with per-op synchronisation and without
     * (the plugin reads SENTIMENT_CUDA_SYNC when a backend is made); on a
     * GPU, and when SENTIMENT_CUDA_SYNC is set, once as the environment says. */
    const char *sync_env = getenv("SENTIMENT_CUDA_SYNC");
    int emu_both = P.emu_faults && !(sync_env && *sync_env);
    for (int pass = 0; pass < (emu_both ? 2 : 1); pass++) {
        char name[96];
        if (emu_both) {
            setenv("SENTIMENT_CUDA_SYNC", pass ? "0" : "1", 1);
            /* the second pass runs blocks and threads last to first */
            if (pass) setenv("SENTIMENT_CUDA_EMU_ORDER", "reverse", 1);
        }
        const char *mode = getenv("SENTIMENT_CUDA_SYNC");
        const char *order = getenv("SENTIMENT_CUDA_EMU_ORDER");
        snprintf(name, sizeof name, "cuda vs cpu%s%s%s", P.emu_faults ? " (emulated)" : "",
                 mode && mode[0] == '1' ? ", SENTIMENT_CUDA_SYNC=1" : ", unsynchronised",
                 P.emu_faults && order && !strcmp(order, "reverse") ? ", threads in reverse order" : "");
        printf("test_cuda: %s\n", name);
        fflush(stdout);
        failed += cmocka_run_group_tests_name(name, gpu_tests, gpu_setup, gpu_teardown);
    }
    if (emu_both) {
        unsetenv("SENTIMENT_CUDA_SYNC");
        unsetenv("SENTIMENT_CUDA_EMU_ORDER");
    }
    return failed ? 1 : 0;
}

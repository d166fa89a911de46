/* backend_cpu.c: the reference backend: OpenBLAS for matrix products, plain C
 * loops for everything else.
 *
 * Threading: we own the parallelism. OpenBLAS (loaded by blas.c) runs single-threaded and each
 * op splits its work across `threads` OpenMP threads (rows of a linear layer,
 * (batch, head) pairs of attention), so there is one pool of threads, not
 * two fighting over the cores. Hot elementwise loops are compiled for several
 * instruction sets with target_clones and picked at run time by the CPU, so
 * the shipped build needs no -march flag. Sums and maxima over a row are
 * vectorised with `omp simd reduction`, which allows the reordering that
 * plain C forbids; results then differ from a sequential sum only in the
 * last bits, well inside the tolerances the tests check.
 */
#include "backend.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "cpu_softmax.h"
#include "errors.h"
#include "fastmath.h"
#include "gemm_bf16.h"
#include "gemm_f32.h"
#include "gemm_int8.h"

#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

typedef struct cpu_ctx {
    int threads;
} cpu_ctx;

static int threads_of(const backend *be)
{
    return ((const cpu_ctx *)be->ctx)->threads;
}

/* Below these sizes an op runs on one thread: starting and joining a team
 * costs more than it saves, and on a busy machine each join can wait a
 * whole scheduler time slice for a descheduled thread. */
#define PARALLEL_MIN_MACS (1 << 23)      /* multiply-adds of a product */
#define PARALLEL_MIN_ELEMENTS (1 << 16)  /* elements of an elementwise op */

/* A loop over threads: an OpenMP region only with two or more. libgomp
 * allocates a new team for every one-thread region (it keeps only larger
 * teams) and exits the process when that allocation fails; one thread runs
 * the loop as it is. */
#define FOR_THREADS_STATIC(nt, ...)                                           \
    do {                                                                      \
        int par_nt_ = (nt);                                                   \
        if (par_nt_ > 1) {                                                    \
            _Pragma("omp parallel for num_threads(par_nt_) schedule(static)") \
            __VA_ARGS__                                                       \
        } else {                                                              \
            __VA_ARGS__                                                       \
        }                                                                     \
    } while (0)
#define FOR_THREADS_DYNAMIC(nt, ...)                                          \
    do {                                                                      \
        int par_nt_ = (nt);                                                   \
        if (par_nt_ > 1) {                                                    \
            _Pragma("omp parallel for num_threads(par_nt_) schedule(dynamic)") \
            __VA_ARGS__                                                       \
        } else {                                                              \
            __VA_ARGS__                                                       \
        }                                                                     \
    } while (0)

int backend_cpu_threads_for(const backend *be, double macs)
{
    return macs < PARALLEL_MIN_MACS ? 1 : threads_of(be);
}

static int threads_for_elements(const backend *be, double n)
{
    return n < PARALLEL_MIN_ELEMENTS ? 1 : threads_of(be);
}

/* ---- memory ------------------------------------------------------------ */

static void *cpu_alloc(backend *be, size_t bytes)
{
    (void)be;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void cpu_free(backend *be, void *p)
{
    (void)be;
    free(p);
}

static int cpu_copy(backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes) memmove(dst, src, bytes);
    return SM_OK;
}

/* ---- matrix products ---------------------------------------------------- */

/* Splits [0, n) into `parts` nearly equal chunks; chunk i is [*lo, *hi). */
static void split_range(int n, int parts, int i, int *lo, int *hi)
{
    int base = n / parts, extra = n % parts;
    *lo = i * base + (i < extra ? i : extra);
    *hi = *lo + base + (i < extra ? 1 : 0);
}

/* C = alpha op(A) op(B) + beta C, split across threads by rows of C (or by
 * columns when there are few rows). With `bias` (N floats), each thread
 * first sets its part of C to the bias broadcast and the product is added
 * to it (beta is then ignored): the fill happens in parallel, next to the
 * product that reads it. */
static int gemm_split(backend *be, int transA, int transB, int M, int N, int K,
                      float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc, const float *bias)
{
    int nt = backend_cpu_threads_for(be, (double)M * N * K);
    int by_rows = M >= 32 * nt || N < 32 * nt;
    if (nt <= 1 || (by_rows ? M : N) < 2) nt = 1;
    if (bias) beta = 1.0f;
    FOR_THREADS_STATIC(nt,
    for (int i = 0; i < nt; i++) {
        int lo, hi;
        split_range(by_rows ? M : N, nt, i, &lo, &hi);
        if (hi <= lo) continue;
        int rows_lo = by_rows ? lo : 0, rows_hi = by_rows ? hi : M;
        int cols_lo = by_rows ? 0 : lo, cols_hi = by_rows ? N : hi;
        if (bias)
            for (int r = rows_lo; r < rows_hi; r++)
                memcpy(C + (size_t)r * ldc + cols_lo, bias + cols_lo,
                       (size_t)(cols_hi - cols_lo) * sizeof *C);
        const float *Ai = A, *Bi = B;
        if (by_rows) Ai = transA ? A + lo : A + (size_t)lo * lda;
        else Bi = transB ? B + (size_t)lo * ldb : B + lo;
        blas_sgemm(transA, transB, rows_hi - rows_lo, cols_hi - cols_lo, K, alpha, Ai, lda,
                   Bi, ldb, beta, C + (size_t)rows_lo * ldc + cols_lo, ldc);
    });
    return SM_OK;
}

static int cpu_matmul(backend *be, int transA, int transB, int M, int N, int K,
                      float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc)
{
    return gemm_split(be, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C,
                      ldc, NULL);
}

static int cpu_matmul_batched(backend *be, int transA, int transB, int M, int N,
                              int K, float alpha, const float *A, int lda,
                              long long strideA, const float *B, int ldb,
                              long long strideB, float beta, float *C, int ldc,
                              long long strideC, int batch)
{
    int nt = backend_cpu_threads_for(be, (double)batch * M * N * K);
    FOR_THREADS_STATIC(nt,
    for (int i = 0; i < batch; i++) {
        blas_sgemm(transA, transB, M, N, K, alpha,
                    A + i * strideA, lda, B + i * strideB, ldb, beta,
                    C + i * strideC, ldc);
    });
    return SM_OK;
}

static int cpu_linear(backend *be, float *out, const float *in, const float *W,
                      const float *b, int R, int K, int N)
{
    return gemm_split(be, 0, 1, R, N, K, 1.0f, in, K, W, K, 0.0f, out, N, b);
}

/* One thread's part of a packed product: output columns [col_lo, col_hi)
 * of rows [0, R) (gemm_bf16_linear_cols, gemm_int8_linear_cols,
 * gemm_f32_linear_cols). */
typedef void (*packed_cols_fn)(float *out, const float *in, const void *W, const float *b,
                               int R, int col_lo, int col_hi);

static void bf16_cols(float *out, const float *in, const void *W, const float *b, int R,
                      int col_lo, int col_hi)
{
    gemm_bf16_linear_cols(out, in, W, b, R, col_lo, col_hi);
}

static void int8_cols(float *out, const float *in, const void *W, const float *b, int R,
                      int col_lo, int col_hi)
{
    gemm_int8_linear_cols(out, in, W, b, R, col_lo, col_hi);
}

static void f32_cols(float *out, const float *in, const void *W, const float *b, int R,
                     int col_lo, int col_hi)
{
    gemm_f32_linear_cols(out, in, W, b, R, col_lo, col_hi);
}

/* A packed weight's product split across threads as gemm_split does: by
 * rows of out, or by panels of `panel` columns when there are few rows. */
static void packed_split(backend *be, packed_cols_fn cols, float *out, const float *in,
                         const void *W, const float *b, int R, int K, int N, int panels,
                         int panel)
{
    int nt = backend_cpu_threads_for(be, (double)R * N * K);
    int by_rows = R >= 32 * nt || panels < 2 * nt;
    if (nt <= 1 || (by_rows ? R : panels) < 2) nt = 1;
    FOR_THREADS_STATIC(nt,
    for (int i = 0; i < nt; i++) {
        int lo, hi;
        split_range(by_rows ? R : panels, nt, i, &lo, &hi);
        if (hi <= lo) continue;
        if (by_rows) cols(out + (size_t)lo * N, in + (size_t)lo * K, W, b, hi - lo, 0, N);
        else cols(out, in, W, b, R, lo * panel, hi * panel);
    });
}

static int cpu_linear_bf16(backend *be, float *out, const float *in,
                           const gemm_bf16_weight *W, const float *b, int R, int K,
                           int N)
{
    if (W->K != K || W->N != N || R < 0) return SM_ERR_INVALID;
    packed_split(be, bf16_cols, out, in, W, b, R, K, N, W->panels, GEMM_BF16_PANEL);
    return SM_OK;
}

static int cpu_linear_int8(backend *be, float *out, const float *in,
                           const gemm_int8_weight *W, const float *b, int R, int K,
                           int N)
{
    if (W->K != K || W->N != N || R < 0) return SM_ERR_INVALID;
    packed_split(be, int8_cols, out, in, W, b, R, K, N, W->panels, GEMM_INT8_PANEL);
    return SM_OK;
}

static int cpu_linear_f32(backend *be, float *out, const float *in, const gemm_f32_weight *W,
                          const float *b, int R, int K, int N)
{
    if (W->K != K || W->N != N || R < 0) return SM_ERR_INVALID;
    packed_split(be, f32_cols, out, in, W, b, R, K, N, W->panels, GEMM_F32_PANEL);
    return SM_OK;
}

/* ---- elementwise ------------------------------------------------------- */

SIMD_CLONES
static void add_span(float *out, const float *a, const float *b, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

SIMD_CLONES
static void gelu_span(float *out, const float *in, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        out[i] = 0.5f * x * (1.0f + sm_erff(x * 0.70710678118654752f));
    }
}

/* Runs span(out + lo, a + lo, b + lo, hi - lo) over [0, n) in parallel. */
#define PARALLEL_SPANS(nt, n, body)                                           \
    do {                                                                      \
        int nt_ = (n) < PARALLEL_MIN_ELEMENTS ? 1 : (nt);                     \
        FOR_THREADS_STATIC(nt_, for (int t_ = 0; t_ < nt_; t_++) {            \
            size_t lo = (n) * t_ / nt_, hi = (n) * (t_ + 1) / nt_;            \
            body;                                                             \
        });                                                                   \
    } while (0)

static int cpu_add(backend *be, float *out, const float *a, const float *b,
                   size_t n)
{
    PARALLEL_SPANS(threads_of(be), n, add_span(out + lo, a + lo, b + lo, hi - lo));
    return SM_OK;
}

static int cpu_gelu(backend *be, float *out, const float *in, size_t n)
{
    PARALLEL_SPANS(threads_of(be), n, gelu_span(out + lo, in + lo, hi - lo));
    return SM_OK;
}

static int cpu_tanh(backend *be, float *out, const float *in, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++) out[i] = tanhf(in[i]);
    return SM_OK;
}

SIMD_CLONES
static void layernorm_row(float *out, float *mean_out, float *rstd_out,
                          const float *x, const float *w, const float *b, int C,
                          float eps)
{
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < C; i++) sum += x[i];
    float mean = sum / C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int i = 0; i < C; i++) {
        float d = x[i] - mean;
        var += d * d;
    }
    float rstd = 1.0f / sqrtf(var / C + eps);
#pragma omp simd
    for (int i = 0; i < C; i++) out[i] = (x[i] - mean) * rstd * w[i] + b[i];
    if (mean_out) *mean_out = mean;
    if (rstd_out) *rstd_out = rstd;
}

static int cpu_layernorm(backend *be, float *out, float *mean, float *rstd,
                         const float *in, const float *w, const float *b, int R,
                         int C, float eps)
{
    int nt = threads_for_elements(be, (double)R * C);
    FOR_THREADS_STATIC(nt,
    for (int r = 0; r < R; r++)
        layernorm_row(out + (size_t)r * C, mean ? mean + r : NULL,
                      rstd ? rstd + r : NULL, in + (size_t)r * C, w, b, C, eps););
    return SM_OK;
}

static int cpu_softmax_masked(backend *be, float *att, const int *lengths,
                              int B, int H, int T, float scale)
{
    int nt = threads_for_elements(be, (double)B * H * T * T);
    FOR_THREADS_STATIC(nt,
    for (int bh = 0; bh < B * H; bh++) {
        int len = lengths[bh / H];
        len = len < 1 ? 1 : (len > T ? T : len);
        float *rows = att + (size_t)bh * T * T;
        for (int t = 0; t < T; t++) cpu_softmax_row(rows + (size_t)t * T, len, T, scale);
    });
    return SM_OK;
}

/* Attention for one (sequence, head): only the len x len block that is not
 * padding is computed. */
static void attention_head(float *out, float *att, const float *qkv, int len,
                           int T, int C, int d, float scale)
{
    const float *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
    blas_sgemm(0, 1, len, len, d, 1.0f, q, 3 * C, k, 3 * C, 0.0f, att, T);
    for (int t = 0; t < len; t++) cpu_softmax_row(att + (size_t)t * T, len, T, scale);
    blas_sgemm(0, 0, len, d, len, 1.0f, att, T, v, 3 * C, 0.0f, out, C);
    for (int t = len; t < T; t++) memset(out + (size_t)t * C, 0, (size_t)d * sizeof *out);
}

static int cpu_attention(backend *be, float *out, float *att, const float *qkv,
                         const int *lengths, int B, int T, int H, int d,
                         float scale)
{
    int C = H * d, nt = backend_cpu_threads_for(be, 2.0 * B * H * T * T * d);
    FOR_THREADS_DYNAMIC(nt,
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        int len = lengths[b] < 1 ? 1 : (lengths[b] > T ? T : lengths[b]);
        attention_head(out + (size_t)b * T * C + (size_t)h * d,
                       att + (size_t)bh * T * T,
                       qkv + (size_t)b * T * 3 * C + (size_t)h * d, len, T, C, d, scale);
    });
    return SM_OK;
}

/* ---- gathers and layout changes --------------------------------------- */

static int cpu_embed(backend *be, float *out, const int *ids, const int *types,
                     const float *word, const float *pos, const float *type,
                     const float *task, int B, int T, int C, int pos_offset)
{
    int nt = threads_for_elements(be, (double)B * T * C);
    FOR_THREADS_STATIC(nt,
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float *w = word + (size_t)ids[bt] * C;
        const float *p = pos + (size_t)(t + pos_offset) * C;
        const float *ty = type + (size_t)(types ? types[bt] : 0) * C;
        float *o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++) o[c] = w[c] + p[c] + ty[c];
        if (task)
            for (int c = 0; c < C; c++) o[c] += task[c];
    });
    return SM_OK;
}

static int cpu_attn_split(backend *be, float *q, float *k, float *v,
                          const float *qkv, int B, int T, int H, int d)
{
    int C = H * d;
    int nt = threads_for_elements(be, (double)B * T * C);
    FOR_THREADS_STATIC(nt,
    for (int bt = 0; bt < B * T; bt++) {
        int b = bt / T, t = bt % T;
        const float *src = qkv + (size_t)bt * 3 * C;
        for (int h = 0; h < H; h++) {
            size_t dst = (((size_t)b * H + h) * T + t) * d;
            memcpy(q + dst, src + h * d, (size_t)d * sizeof *q);
            memcpy(k + dst, src + C + h * d, (size_t)d * sizeof *k);
            memcpy(v + dst, src + 2 * C + h * d, (size_t)d * sizeof *v);
        }
    });
    return SM_OK;
}

static int cpu_attn_merge(backend *be, float *out, const float *in, int B,
                          int T, int H, int d)
{
    int nt = threads_for_elements(be, (double)B * T * H * d);
    FOR_THREADS_STATIC(nt,
    for (int bt = 0; bt < B * T; bt++) {
        int b = bt / T, t = bt % T;
        for (int h = 0; h < H; h++)
            memcpy(out + ((size_t)bt * H + h) * d,
                   in + (((size_t)b * H + h) * T + t) * d,
                   (size_t)d * sizeof *out);
    });
    return SM_OK;
}

static int cpu_gather_cls(backend *be, float *out, const float *x, int B, int T,
                          int C)
{
    (void)be;
    for (int b = 0; b < B; b++)
        memcpy(out + (size_t)b * C, x + (size_t)b * T * C, (size_t)C * sizeof *out);
    return SM_OK;
}

static int cpu_synchronize(backend *be)
{
    (void)be;
    return SM_OK;
}

static void cpu_destroy(backend *be)
{
    if (!be) return;
    free(be->ctx);
    free(be);
}

int backend_cpu_threads(const backend *be)
{
    return threads_of(be);
}

int backend_cpu_create(int threads, backend **out, char *err)
{
    *out = NULL;
    if (threads <= 0) threads = omp_get_num_procs();
    if (threads > 256) return sm_error(err, SM_ERR_INVALID, "threads: %d is more than 256", threads);
    int rc = blas_load(err);
    if (rc) return rc;
    backend *be = calloc(1, sizeof *be);
    cpu_ctx *ctx = calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return sm_error(err, SM_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    ctx->threads = threads;
    /* We split work across threads ourselves; see the file comment. */
    blas_set_threads(1);
    be->name = "cpu";
    be->ctx = ctx;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->matmul = cpu_matmul;
    be->matmul_batched = cpu_matmul_batched;
    be->linear = cpu_linear;
    be->linear_bf16 = cpu_linear_bf16;
    be->linear_int8 = cpu_linear_int8;
    be->linear_f32 = cpu_linear_f32;
    be->add = cpu_add;
    be->layernorm = cpu_layernorm;
    be->gelu = cpu_gelu;
    be->tanh = cpu_tanh;
    be->embed = cpu_embed;
    be->attn_split = cpu_attn_split;
    be->attn_merge = cpu_attn_merge;
    be->softmax_masked = cpu_softmax_masked;
    be->attention = cpu_attention;
    be->gather_cls = cpu_gather_cls;
    be->synchronize = cpu_synchronize;
    be->destroy = cpu_destroy;
    backend_cpu_init_train_ops(be);
    *out = be;
    return SM_OK;
}

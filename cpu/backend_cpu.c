/* backend_cpu.c: the reference backend: OpenBLAS for matrix products, plain C
 * loops for everything else.
 *
 * Threading: we own the parallelism. OpenBLAS (loaded by blas.c) runs
 * single-threaded and each op splits its work into `threads` pieces (rows of
 * a linear layer, (batch, head) pairs of attention) that thread_pool.h's
 * workers run, so there is one pool of threads, not two fighting over the
 * cores. What a piece computes depends only on the split, never on the
 * thread that runs it. Hot elementwise loops are compiled for several
 * instruction sets with target_clones and picked at run time by the CPU, so
 * the shipped build needs no -march flag. Sums and maxima over a row are
 * vectorised with `omp simd reduction` (built with -fopenmp-simd: the
 * directive alone, no OpenMP runtime), which allows the reordering that
 * plain C forbids; results then differ from a sequential sum only in the
 * last bits, well inside the tolerances the tests check.
 */
#include "core/backend.h"
#include "cpu/backend_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "cpu/attention.h"
#include "cpu/blas.h"
#include "cpu/cpu_ctx.h"
#include "cpu/gelu.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_f32.h"
#include "cpu/gemm_int8.h"
#include "cpu/layernorm.h"
#include "cpu/softmax.h"
#include "cpu/train_kernels.h"

#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

int backend_cpu_threads_for(const backend *be, double macs)
{
    return cpu_threads_for(be, macs);
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

/* C = alpha op(A) op(B) + beta C, split across threads by rows of C (or by
 * columns when there are few rows). With `bias` (N floats), each thread
 * first sets its part of C to the bias broadcast and the product is added
 * to it (beta is then ignored): the fill happens in parallel, next to the
 * product that reads it. */
typedef struct gemm_job {
    int transA, transB, M, N, K, lda, ldb, ldc, by_rows;
    float alpha, beta;
    const float *A, *B, *bias;
    float *C;
} gemm_job;

/* Piece i of nt of a gemm_split: rows (or columns) tp_split gives it. */
static void gemm_piece(void *ctx, int i, int nt)
{
    const gemm_job *j = ctx;
    int lo, hi;
    tp_split(j->by_rows ? j->M : j->N, nt, i, &lo, &hi);
    if (hi <= lo) return;
    int rows_lo = j->by_rows ? lo : 0, rows_hi = j->by_rows ? hi : j->M;
    int cols_lo = j->by_rows ? 0 : lo, cols_hi = j->by_rows ? j->N : hi;
    float *C = j->C;
    if (j->bias)
        for (int r = rows_lo; r < rows_hi; r++)
            memcpy(C + (size_t)r * j->ldc + cols_lo, j->bias + cols_lo,
                   (size_t)(cols_hi - cols_lo) * sizeof *C);
    const float *Ai = j->A, *Bi = j->B;
    if (j->by_rows) Ai = j->transA ? j->A + lo : j->A + (size_t)lo * j->lda;
    else Bi = j->transB ? j->B + (size_t)lo * j->ldb : j->B + lo;
    blas_sgemm(j->transA, j->transB, rows_hi - rows_lo, cols_hi - cols_lo, j->K, j->alpha, Ai,
               j->lda, Bi, j->ldb, j->beta, C + (size_t)rows_lo * j->ldc + cols_lo, j->ldc);
}

static int gemm_split(backend *be, int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc, const float *bias)
{
    int nt = cpu_threads_for(be, (double)M * N * K);
    int by_rows = M >= 32 * nt || N < 32 * nt;
    if (nt <= 1 || (by_rows ? M : N) < 2) nt = 1;
    gemm_job j = {transA, transB, M,    N, K, lda, ldb, ldc, by_rows, alpha, bias ? 1.0f : beta,
                  A,      B,      bias, C};
    tp_run(nt, gemm_piece, &j);
    return SM_OK;
}

static int cpu_matmul(backend *be, int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc)
{
    return gemm_split(be, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

typedef struct batched_job {
    int transA, transB, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
    long long strideA, strideB, strideC;
} batched_job;

static void batched_range(void *ctx, int lo, int hi)
{
    const batched_job *j = ctx;
    for (int i = lo; i < hi; i++)
        blas_sgemm(j->transA, j->transB, j->M, j->N, j->K, j->alpha, j->A + i * j->strideA, j->lda,
                   j->B + i * j->strideB, j->ldb, j->beta, j->C + i * j->strideC, j->ldc);
}

static int cpu_matmul_batched(backend *be, int transA, int transB, int M, int N, int K, float alpha,
                              const float *A, int lda, long long strideA, const float *B, int ldb,
                              long long strideB, float beta, float *C, int ldc, long long strideC,
                              int batch)
{
    int nt = cpu_threads_for(be, (double)batch * M * N * K);
    batched_job j = {transA, transB, M, N, K, lda,     ldb,     ldc,
                     alpha,  beta,   A, B, C, strideA, strideB, strideC};
    tp_for_static(nt, batch, batched_range, &j);
    return SM_OK;
}

static int cpu_linear(backend *be, float *out, const float *in, const float *W, const float *b,
                      int R, int K, int N)
{
    return gemm_split(be, 0, 1, R, N, K, 1.0f, in, K, W, K, 0.0f, out, N, b);
}

/* One thread's part of a packed product: output columns [col_lo, col_hi)
 * of rows [0, R) (gemm_bf16_linear_cols, gemm_int8_linear_cols,
 * gemm_f32_linear_cols). */
typedef void (*packed_cols_fn)(float *out, const float *in, const void *W, const float *b, int R,
                               int col_lo, int col_hi);

static void bf16_cols(float *out, const float *in, const void *W, const float *b, int R, int col_lo,
                      int col_hi)
{
    gemm_bf16_linear_cols(out, in, W, b, R, col_lo, col_hi);
}

static void int8_cols(float *out, const float *in, const void *W, const float *b, int R, int col_lo,
                      int col_hi)
{
    gemm_int8_linear_cols(out, in, W, b, R, col_lo, col_hi);
}

static void f32_cols(float *out, const float *in, const void *W, const float *b, int R, int col_lo,
                     int col_hi)
{
    gemm_f32_linear_cols(out, in, W, b, R, col_lo, col_hi);
}

/* A packed weight's product split across threads as gemm_split does: by
 * rows of out, or by panels of `panel` columns when there are few rows. */
typedef struct packed_job {
    packed_cols_fn cols;
    float *out;
    const float *in, *b;
    const void *W;
    int R, K, N, panels, panel, by_rows;
} packed_job;

static void packed_piece(void *ctx, int i, int nt)
{
    const packed_job *j = ctx;
    int lo, hi;
    tp_split(j->by_rows ? j->R : j->panels, nt, i, &lo, &hi);
    if (hi <= lo) return;
    if (j->by_rows)
        j->cols(j->out + (size_t)lo * j->N, j->in + (size_t)lo * j->K, j->W, j->b, hi - lo, 0,
                j->N);
    else j->cols(j->out, j->in, j->W, j->b, j->R, lo * j->panel, hi * j->panel);
}

static void packed_split(backend *be, packed_cols_fn cols, float *out, const float *in,
                         const void *W, const float *b, int R, int K, int N, int panels, int panel)
{
    int nt = cpu_threads_for(be, (double)R * N * K);
    int by_rows = R >= 32 * nt || panels < 2 * nt;
    if (nt <= 1 || (by_rows ? R : panels) < 2) nt = 1;
    packed_job j = {cols, out, in, b, W, R, K, N, panels, panel, by_rows};
    tp_run(nt, packed_piece, &j);
}

/* A packed weight of the CPU backend: the header, then the kernel's own
 * packed struct (by hdr.kind), owned. */
typedef struct cpu_packed {
    backend_packed hdr; /* first: a backend_packed * is a cpu_packed * */
    union {
        gemm_bf16_weight *bf16;
        gemm_int8_weight *int8;
        gemm_f32_weight *f32;
    } w;
} cpu_packed;

static void cpu_packed_free(backend_packed *pw)
{
    cpu_packed *p = (cpu_packed *)pw;
    if (!p) return;
    if (p->hdr.kind == BACKEND_PACK_BF16) gemm_bf16_free(p->w.bf16);
    else if (p->hdr.kind == BACKEND_PACK_INT8) gemm_int8_free(p->w.int8);
    else if (p->hdr.kind == BACKEND_PACK_F32) gemm_f32_free(p->w.f32);
    free(p);
}

static int cpu_pack_weight(backend *be, int kind, const float *W, int N, int K,
                           backend_packed **out, char *err)
{
    (void)be;
    *out = NULL;
    if (kind != BACKEND_PACK_BF16 && kind != BACKEND_PACK_INT8 && kind != BACKEND_PACK_F32)
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "pack_weight: the cpu backend has no packed "
                        "kind %d",
                        kind);
    cpu_packed *p = calloc(1, sizeof *p);
    if (!p) return sm_error(err, SM_ERR_NOMEM, "out of memory packing a weight");
    p->hdr.kind = kind;
    p->hdr.free = cpu_packed_free;
    int rc = kind == BACKEND_PACK_BF16   ? gemm_bf16_pack(W, N, K, &p->w.bf16, err)
             : kind == BACKEND_PACK_INT8 ? gemm_int8_pack(W, N, K, &p->w.int8, err)
                                         : gemm_f32_pack(W, N, K, &p->w.f32, err);
    if (rc) {
        free(p);
        return rc;
    }
    *out = &p->hdr;
    return SM_OK;
}

/* W must be one of ours (its free is cpu_packed_free) of shape (N, K); the
 * product is split across threads by packed_split, whatever the kind. */
static int cpu_linear_packed(backend *be, float *out, const float *in, const backend_packed *W,
                             const float *b, int R, int K, int N)
{
    const cpu_packed *p = (const cpu_packed *)W;
    if (!W || W->free != cpu_packed_free || R < 0) return SM_ERR_INVALID; /* not ours */
    if (W->kind == BACKEND_PACK_BF16) {
        if (p->w.bf16->K != K || p->w.bf16->N != N) return SM_ERR_INVALID;
        packed_split(be, bf16_cols, out, in, p->w.bf16, b, R, K, N, p->w.bf16->panels,
                     GEMM_BF16_PANEL);
    } else if (W->kind == BACKEND_PACK_INT8) {
        if (p->w.int8->K != K || p->w.int8->N != N) return SM_ERR_INVALID;
        packed_split(be, int8_cols, out, in, p->w.int8, b, R, K, N, p->w.int8->panels,
                     GEMM_INT8_PANEL);
    } else if (W->kind == BACKEND_PACK_F32) {
        if (p->w.f32->K != K || p->w.f32->N != N) return SM_ERR_INVALID;
        packed_split(be, f32_cols, out, in, p->w.f32, b, R, K, N, p->w.f32->panels, GEMM_F32_PANEL);
    } else {
        return SM_ERR_INVALID;
    }
    return SM_OK;
}

int backend_cpu_pack_native(int kind)
{
    if (kind == BACKEND_PACK_BF16) return gemm_bf16_supported();
    if (kind == BACKEND_PACK_INT8) return gemm_int8_supported();
    if (kind == BACKEND_PACK_F32) return gemm_f32_supported();
    return 0;
}

int backend_cpu_fp32_packed(void)
{
    const char *env = getenv("SENTIMENT_FP32_PACKED");
    if (env && !strcmp(env, "0")) return 0;
    if (env && !strcmp(env, "1")) return 1;
    return backend_cpu_pack_native(BACKEND_PACK_F32);
}

int backend_cpu_auto_pack_kind(int int8_ok)
{
    if (int8_ok && backend_cpu_pack_native(BACKEND_PACK_INT8)) return BACKEND_PACK_INT8;
    return backend_cpu_fp32_packed() ? BACKEND_PACK_F32 : 0;
}

static int cpu_linear_pack_kind(const backend *be, int int8_ok)
{
    switch (((const cpu_ctx *)be->ctx)->precision) {
    case CPU_PREC_BF16: return BACKEND_PACK_BF16;
    case CPU_PREC_INT8: return BACKEND_PACK_INT8;
    case CPU_PREC_FP32: return backend_cpu_fp32_packed() ? BACKEND_PACK_F32 : 0;
    default: return backend_cpu_auto_pack_kind(int8_ok);
    }
}

static int cpu_device_index(const backend *be)
{
    (void)be;
    return -1;
}

/* ---- elementwise ------------------------------------------------------- */

SIMD_CLONES
static void add_span(float *out, const float *a, const float *b, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* An elementwise op over [0, n): piece t of nt is [n t / nt, n (t+1) / nt). */
typedef struct span_job {
    float *out;
    const float *a, *b;
    size_t n;
} span_job;

static void add_piece(void *ctx, int t, int nt)
{
    const span_job *j = ctx;
    size_t lo = j->n * t / nt, hi = j->n * (t + 1) / nt;
    add_span(j->out + lo, j->a + lo, j->b + lo, hi - lo);
}

static void gelu_piece(void *ctx, int t, int nt)
{
    const span_job *j = ctx;
    size_t lo = j->n * t / nt, hi = j->n * (t + 1) / nt;
    cpu_gelu_span(j->out + lo, j->a + lo, hi - lo);
}

static int cpu_add(backend *be, float *out, const float *a, const float *b, size_t n)
{
    span_job j = {out, a, b, n};
    tp_run(cpu_threads_for_elements(be, (double)n), add_piece, &j);
    return SM_OK;
}

static int cpu_gelu(backend *be, float *out, const float *in, size_t n)
{
    span_job j = {out, in, NULL, n};
    tp_run(cpu_threads_for_elements(be, (double)n), gelu_piece, &j);
    return SM_OK;
}

static int cpu_tanh(backend *be, float *out, const float *in, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++) out[i] = tanhf(in[i]);
    return SM_OK;
}

typedef struct layernorm_job {
    float *out, *mean, *rstd;
    const float *in, *w, *b;
    int C;
    float eps;
} layernorm_job;

static void layernorm_rows(void *ctx, int lo, int hi)
{
    const layernorm_job *j = ctx;
    int C = j->C;
    cpu_layernorm_rows(j->out + (size_t)lo * C, j->mean ? j->mean + lo : NULL,
                       j->rstd ? j->rstd + lo : NULL, j->in + (size_t)lo * C, j->w, j->b, hi - lo,
                       C, j->eps);
}

static int cpu_layernorm(backend *be, float *out, float *mean, float *rstd, const float *in,
                         const float *w, const float *b, int R, int C, float eps)
{
    layernorm_job j = {out, mean, rstd, in, w, b, C, eps};
    tp_for_static(cpu_threads_for_elements(be, (double)R * C), R, layernorm_rows, &j);
    return SM_OK;
}

typedef struct softmax_job {
    float *att;
    const int *lengths;
    int H, T;
    float scale;
} softmax_job;

static void softmax_heads(void *ctx, int lo, int hi)
{
    const softmax_job *j = ctx;
    int H = j->H, T = j->T;
    for (int bh = lo; bh < hi; bh++) {
        int len = j->lengths[bh / H];
        len = len < 1 ? 1 : (len > T ? T : len);
        float *rows = j->att + (size_t)bh * T * T;
        for (int t = 0; t < T; t++) cpu_softmax_row(rows + (size_t)t * T, len, T, j->scale);
    }
}

static int cpu_softmax_masked(backend *be, float *att, const int *lengths, int B, int H, int T,
                              float scale)
{
    softmax_job j = {att, lengths, H, T, scale};
    tp_for_static(cpu_threads_for_elements(be, (double)B * H * T * T), B * H, softmax_heads, &j);
    return SM_OK;
}

/* Attention for one (sequence, head), its first `rows` query rows (len:
 * all of them; att's row stride T): only the len x len block that is not
 * padding is computed, by attention_bf16.c's kernel where bf16 asks for
 * it and it runs, else by attention.c's where it runs, else with two BLAS
 * products. */
static void attention_head(float *out, float *att, const float *qkv, int len, int rows, int T,
                           int C, int d, float scale, int bf16)
{
    const float *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
    if (!(bf16 &&
          cpu_attention_head_bf16_rows(out, C, att, q, k, v, 3 * C, len, T, d, scale, rows)) &&
        !cpu_attention_head_rows(out, C, att, q, k, v, 3 * C, len, T, d, scale, rows)) {
        blas_sgemm(0, 1, rows, len, d, 1.0f, q, 3 * C, k, 3 * C, 0.0f, att, T);
        for (int t = 0; t < rows; t++) cpu_softmax_row(att + (size_t)t * T, len, T, scale);
        blas_sgemm(0, 0, rows, d, len, 1.0f, att, T, v, 3 * C, 0.0f, out, C);
    }
}

/* A sequence's real tokens: lengths[b] clamped to [1, T]. */
static int seq_len(const int *lengths, int b, int T)
{
    return lengths[b] < 1 ? 1 : (lengths[b] > T ? T : lengths[b]);
}

typedef struct attention_job {
    float *out, *att;
    const float *qkv;
    const int *lengths;
    const size_t *starts; /* NULL: padded rows, sequence b's from b T; else its first row */
    int T, H, d;
    float scale;
    int bf16;  /* the products in BF16 (attention_bf16) */
    int first; /* each sequence's first query row only, into out's row b */
} attention_job;

static void attention_item(void *ctx, int bh, int lane)
{
    const attention_job *j = ctx;
    int T = j->T, H = j->H, d = j->d, C = H * d;
    int b = bh / H, h = bh % H;
    int len = seq_len(j->lengths, b, T);
    size_t row = j->starts ? j->starts[b] : (size_t)b * T;
    float *out = j->out + (j->first ? (size_t)b : row) * C + (size_t)h * d;
    (void)lane;
    /* without padding rows the head writes its len rows only (its width:
     * len, which is also its probabilities' row stride); with them, its
     * padding rows are zeroed */
    attention_head(out, j->att + (size_t)bh * T * T, j->qkv + row * 3 * C + (size_t)h * d, len,
                   j->first ? 1 : len, j->starts ? len : T, C, d, j->scale, j->bf16);
    if (!j->first && !j->starts)
        for (int t = len; t < T; t++) memset(out + (size_t)t * C, 0, (size_t)d * sizeof *out);
}

static int run_attention(backend *be, float *out, float *att, const float *qkv, const int *lengths,
                         const size_t *starts, int B, int T, int H, int d, float scale, int bf16,
                         int first)
{
    int nt = cpu_threads_for(be, 2.0 * B * H * T * (first ? 1 : T) * d);
    attention_job j = {out, att, qkv, lengths, starts, T, H, d, scale, bf16, first};
    tp_for_dynamic(nt, B * H, attention_item, &j);
    return SM_OK;
}

static int cpu_attention(backend *be, float *out, float *att, const float *qkv, const int *lengths,
                         int B, int T, int H, int d, float scale)
{
    return run_attention(be, out, att, qkv, lengths, NULL, B, T, H, d, scale, 0, 0);
}

static int cpu_attention_bf16(backend *be, float *out, float *att, const float *qkv,
                              const int *lengths, int B, int T, int H, int d, float scale)
{
    return run_attention(be, out, att, qkv, lengths, NULL, B, T, H, d, scale, 1, 0);
}

/* ---- inference without padding rows, or of the first rows (backend.h) -- */

#define UNPADDED_SEQS 512 /* sequences per attention run: their first rows on the stack */

/* run_attention on packed rows (attention_unpadded's layout), the
 * sequences' first rows on the stack UNPADDED_SEQS at a time. */
static int run_attention_packed(backend *be, float *out, float *att, const float *qkv,
                                const int *lengths, int B, int T, int H, int d, float scale,
                                int bf16, int first)
{
    size_t starts[UNPADDED_SEQS], C = (size_t)H * d;
    for (int b0 = 0; b0 < B; b0 += UNPADDED_SEQS) {
        int n = B - b0 < UNPADDED_SEQS ? B - b0 : UNPADDED_SEQS;
        size_t at = 0;
        for (int b = 0; b < n; b++) {
            starts[b] = at;
            at += (size_t)seq_len(lengths, b0 + b, T);
        }
        int rc = run_attention(be, out, att, qkv, lengths + b0, starts, n, T, H, d, scale, bf16,
                               first);
        if (rc) return rc;
        out += (first ? (size_t)n : at) * C;
        qkv += at * 3 * C;
    }
    return SM_OK;
}

static int cpu_attention_unpadded(backend *be, float *out, float *att, const float *qkv,
                                  const int *lengths, int B, int T, int H, int d, float scale,
                                  int bf16)
{
    return run_attention_packed(be, out, att, qkv, lengths, B, T, H, d, scale, bf16, 0);
}

static int cpu_attention_first(backend *be, float *out, float *att, const float *qkv,
                               const int *lengths, int B, int T, int H, int d, float scale,
                               int bf16, int packed)
{
    if (packed) return run_attention_packed(be, out, att, qkv, lengths, B, T, H, d, scale, bf16, 1);
    return run_attention(be, out, att, qkv, lengths, NULL, B, T, H, d, scale, bf16, 1);
}

/* Each sequence's first row moved to row b, in ascending order: row b's
 * source is at b or below it (b T, or the sum of the lengths before it),
 * so no row is overwritten before it moves. */
static int cpu_first_rows(backend *be, float *x, const int *lengths, int B, int T, int C,
                          int packed)
{
    (void)be;
    size_t at = 0;
    for (int b = 0; b < B; b++) {
        size_t from = packed ? at : (size_t)b * T;
        if (from != (size_t)b) memmove(x + (size_t)b * C, x + from * C, (size_t)C * sizeof *x);
        at += (size_t)seq_len(lengths, b, T);
    }
    return SM_OK;
}

/* x(B,T,C) -> x(R,C): sequence b's rows move down to the end of the ones
 * before it, in order, so no row is overwritten before it moves. */
static int cpu_unpad_rows(backend *be, float *x, const int *lengths, int B, int T, int C)
{
    (void)be;
    size_t at = 0;
    for (int b = 0; b < B; b++) {
        size_t len = (size_t)seq_len(lengths, b, T), from = (size_t)b * T;
        if (from != at) memmove(x + at * C, x + from * C, len * C * sizeof *x);
        at += len;
    }
    return SM_OK;
}

/* x(R,C) -> x(B,T,C): the last sequence first, each moving up to b T and
 * its padding rows set to 0. */
static int cpu_pad_rows(backend *be, float *x, const int *lengths, int B, int T, int C)
{
    (void)be;
    size_t at = 0;
    for (int b = 0; b < B; b++) at += (size_t)seq_len(lengths, b, T);
    for (int b = B - 1; b >= 0; b--) {
        size_t len = (size_t)seq_len(lengths, b, T), to = (size_t)b * T;
        at -= len;
        if (to != at) memmove(x + to * C, x + at * C, len * C * sizeof *x);
        memset(x + (to + len) * C, 0, (T - len) * C * sizeof *x);
    }
    return SM_OK;
}

/* ---- gathers and layout changes --------------------------------------- */

typedef struct embed_job {
    float *out;
    const int *ids, *types;
    const float *word, *pos, *type, *task;
    int T, C, pos_offset;
} embed_job;

SIMD_CLONES
static void embed_rows(void *ctx, int lo, int hi)
{
    const embed_job *j = ctx;
    int T = j->T, C = j->C;
    for (int bt = lo; bt < hi; bt++) {
        int t = bt % T;
        const float *w = j->word + (size_t)j->ids[bt] * C;
        const float *p = j->pos + (size_t)(t + j->pos_offset) * C;
        const float *ty = j->type + (size_t)(j->types ? j->types[bt] : 0) * C;
        float *o = j->out + (size_t)bt * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = w[c] + p[c] + ty[c];
        if (j->task)
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += j->task[c];
    }
}

static int cpu_embed(backend *be, float *out, const int *ids, const int *types, const float *word,
                     const float *pos, const float *type, const float *task, int B, int T, int C,
                     int pos_offset)
{
    embed_job j = {out, ids, types, word, pos, type, task, T, C, pos_offset};
    tp_for_static(cpu_threads_for_elements(be, (double)B * T * C), B * T, embed_rows, &j);
    return SM_OK;
}

/* The heads of attention laid out apart, (B,T,H,d) <-> (B,H,T,d). */
typedef struct heads_job {
    float *q, *k, *v; /* split: out; merge: q is out */
    const float *in;  /* split: qkv (B,T,3C); merge: (B,H,T,d) */
    int T, H, d;
} heads_job;

static void split_rows(void *ctx, int lo, int hi)
{
    const heads_job *j = ctx;
    int T = j->T, H = j->H, d = j->d, C = H * d;
    for (int bt = lo; bt < hi; bt++) {
        int b = bt / T, t = bt % T;
        const float *src = j->in + (size_t)bt * 3 * C;
        for (int h = 0; h < H; h++) {
            size_t dst = (((size_t)b * H + h) * T + t) * d;
            memcpy(j->q + dst, src + h * d, (size_t)d * sizeof *j->q);
            memcpy(j->k + dst, src + C + h * d, (size_t)d * sizeof *j->k);
            memcpy(j->v + dst, src + 2 * C + h * d, (size_t)d * sizeof *j->v);
        }
    }
}

static int cpu_attn_split(backend *be, float *q, float *k, float *v, const float *qkv, int B, int T,
                          int H, int d)
{
    heads_job j = {q, k, v, qkv, T, H, d};
    tp_for_static(cpu_threads_for_elements(be, (double)B * T * H * d), B * T, split_rows, &j);
    return SM_OK;
}

static void merge_rows(void *ctx, int lo, int hi)
{
    const heads_job *j = ctx;
    int T = j->T, H = j->H, d = j->d;
    for (int bt = lo; bt < hi; bt++) {
        int b = bt / T, t = bt % T;
        for (int h = 0; h < H; h++)
            memcpy(j->q + ((size_t)bt * H + h) * d, j->in + (((size_t)b * H + h) * T + t) * d,
                   (size_t)d * sizeof *j->q);
    }
}

static int cpu_attn_merge(backend *be, float *out, const float *in, int B, int T, int H, int d)
{
    heads_job j = {out, NULL, NULL, in, T, H, d};
    tp_for_static(cpu_threads_for_elements(be, (double)B * T * H * d), B * T, merge_rows, &j);
    return SM_OK;
}

static int cpu_gather_cls(backend *be, float *out, const float *x, int B, int T, int C)
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
    return cpu_threads(be);
}

int backend_cpu_precision_ok(const char *name)
{
    if (!name || !*name || !strcmp(name, "auto") || !strcmp(name, "fp32")) return 1;
    if (!strcmp(name, "bf16")) return backend_cpu_pack_native(BACKEND_PACK_BF16);
    if (!strcmp(name, "int8")) return backend_cpu_pack_native(BACKEND_PACK_INT8);
    return 0;
}

const char *backend_cpu_blas(void)
{
    char err[SM_ERR_MAX];
    (void)blas_load(err); /* on failure the description says "not loaded" */
    return blas_describe();
}

static void cpu_describe(const backend *be, char *desc, size_t cap)
{
    int n = cpu_threads(be);
    if (desc && cap)
        snprintf(desc, cap, "cpu: %d thread%s, %s", n, n == 1 ? "" : "s", blas_describe());
}

static int cpu_set_precision(backend *be, const char *name, char *err)
{
    if (backend_cpu_precision_ok(name)) {
        cpu_ctx *ctx = be->ctx;
        ctx->precision = !name || !*name || !strcmp(name, "auto") ? CPU_PREC_AUTO
                         : !strcmp(name, "fp32")                  ? CPU_PREC_FP32
                         : !strcmp(name, "bf16")                  ? CPU_PREC_BF16
                                                                  : CPU_PREC_INT8;
        return SM_OK;
    }
    if (name && !strcmp(name, "bf16"))
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "bf16 on the CPU needs AVX512-BF16, which this CPU lacks");
    if (name && !strcmp(name, "int8"))
        return sm_error(err, SM_ERR_UNSUPPORTED,
                        "int8 needs a CPU with AVX512-VNNI, which this CPU lacks");
    return sm_error(err, SM_ERR_UNSUPPORTED,
                    "the CPU has no precision '%s' (auto, fp32, bf16, int8)",
                    name ? name : "(null)");
}

static int cpu_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes)
{
    (void)be;
    *free_bytes = *total_bytes = 0;
    return SM_ERR_UNSUPPORTED; /* host memory: nothing to size batches by */
}

static const char *cpu_last_error(const backend *be)
{
    (void)be;
    return ""; /* the CPU ops cannot fail */
}

/* A forward pass's rows: PASS_BYTES of activations (cpu_ctx.h). */
static int cpu_pass_rows(const backend *be, size_t row_bytes)
{
    (void)be;
    size_t rows = row_bytes ? PASS_BYTES / row_bytes : PASS_BYTES;
    return rows < 1 ? 1 : rows > (1u << 30) ? 1 << 30 : (int)rows;
}

/* Lanes: one single-threaded CPU backend per thread (backend.h). */
static int cpu_lanes(const backend *be)
{
    return cpu_threads(be);
}

static int cpu_lane_create(backend *be, backend **out, char *err)
{
    (void)be;
    return backend_cpu_create(1, out, err);
}

int backend_cpu_create(int threads, backend **out, char *err)
{
    *out = NULL;
    if (threads <= 0) threads = tp_default_threads();
    if (threads > 256)
        return sm_error(err, SM_ERR_INVALID, "threads: %d is more than 256", threads);
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
    be->host_memory = 1;
    be->lanes = cpu_lanes;
    be->lane_create = cpu_lane_create;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->matmul = cpu_matmul;
    be->matmul_batched = cpu_matmul_batched;
    be->linear = cpu_linear;
    be->pack_weight = cpu_pack_weight;
    be->linear_packed = cpu_linear_packed;
    be->linear_pack_kind = cpu_linear_pack_kind;
    be->device_index = cpu_device_index;
    be->pass_rows = cpu_pass_rows;
    be->add = cpu_add;
    be->layernorm = cpu_layernorm;
    be->gelu = cpu_gelu;
    be->tanh = cpu_tanh;
    be->embed = cpu_embed;
    be->attn_split = cpu_attn_split;
    be->attn_merge = cpu_attn_merge;
    be->softmax_masked = cpu_softmax_masked;
    be->attention = cpu_attention;
    be->attention_bf16 = cpu_attention_bf16;
    be->unpad_rows = cpu_unpad_rows;
    be->pad_rows = cpu_pad_rows;
    be->attention_unpadded = cpu_attention_unpadded;
    be->first_rows = cpu_first_rows;
    be->attention_first = cpu_attention_first;
    be->gather_cls = cpu_gather_cls;
    be->synchronize = cpu_synchronize;
    be->destroy = cpu_destroy;
    be->describe = cpu_describe;
    be->set_precision = cpu_set_precision;
    be->mem_info = cpu_mem_info;
    be->last_error = cpu_last_error;
    backend_cpu_init_train_ops(be);
    *out = be;
    return SM_OK;
}

/* train_ops.c: the CPU versions of the training ops of backend.h
 * (backward passes, dropout, cross-entropy, AdamW, gradient norms).
 *
 * Determinism is the rule here: every sum that crosses rows (bias and
 * LayerNorm gradients, embedding scatter-adds, norms) is split by columns or
 * by fixed chunks, never by whichever thread arrives first, so a training
 * run is bit-for-bit repeatable. Matrix products go through the backend's
 * matmul (OpenBLAS, statically split); per-(sequence, head) attention work is
 * done entirely by one thread. backend_cpu_init_train_ops() fills the table.
 */
#include "core/backend.h"
#include "cpu/cpu_ctx.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/errors.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "cpu/adamw_fused.h"
#include "cpu/fastmath.h"
#include "cpu/train_kernels.h"

#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* Threads for a loop of `work` elements: one for small jobs. */
static int nthreads(const backend *be, size_t work)
{
    return work < 32768 ? 1 : cpu_threads(be);
}

static int cpu_zero(backend *be, void *p, size_t bytes)
{
    (void)be;
    if (bytes) memset(p, 0, bytes);
    return SM_OK;
}

/* Piece t of nt of an elementwise op over n elements: [*lo, *hi). */
static void span_of(size_t n, int t, int nt, size_t *lo, size_t *hi)
{
    *lo = n * t / nt;
    *hi = n * (t + 1) / nt;
}

typedef struct scale_job {
    float *x;
    size_t n;
    float s;
} scale_job;

static void scale_piece(void *ctx, int t, int nt)
{
    const scale_job *j = ctx;
    size_t lo, hi;
    span_of(j->n, t, nt, &lo, &hi);
    for (size_t i = lo; i < hi; i++) j->x[i] *= j->s;
}

static int cpu_scale(backend *be, float *x, size_t n, float s)
{
    scale_job j = {x, n, s};
    tp_run(nthreads(be, n), scale_piece, &j);
    return SM_OK;
}

enum { SUMSQ_CHUNKS = 64 };

typedef struct sumsq_job {
    const float *x;
    size_t n;
    double *part; /* (SUMSQ_CHUNKS) */
} sumsq_job;

static void sumsq_chunks(void *ctx, int c0, int c1)
{
    const sumsq_job *j = ctx;
    for (int c = c0; c < c1; c++) {
        size_t lo = j->n * (size_t)c / SUMSQ_CHUNKS, hi = j->n * (size_t)(c + 1) / SUMSQ_CHUNKS;
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) s += (double)j->x[i] * j->x[i];
        j->part[c] = s;
    }
}

/* 64 fixed chunks summed in double, then added in chunk order: the result
 * does not depend on the thread count. */
static int cpu_sumsq(backend *be, float *out, const float *x, size_t n)
{
    enum { CHUNKS = SUMSQ_CHUNKS };
    double part[CHUNKS];
    sumsq_job j = {x, n, part};
    tp_for_static(nthreads(be, n), CHUNKS, sumsq_chunks, &j);
    double total = 0.0;
    for (int c = 0; c < CHUNKS; c++) total += part[c];
    out[0] = (float)total;
    return SM_OK;
}

/* acc[0..n) += Σ_r rows[r*ld + 0..n) */
SIMD_CLONES
static void sum_rows_span(float *acc, const float *rows, int R, size_t ld, int n)
{
    for (int r = 0; r < R; r++) {
        const float *row = rows + (size_t)r * ld;
#pragma omp simd
        for (int c = 0; c < n; c++) acc[c] += row[c];
    }
}

enum { COLUMN_BLOCK = 256 };

typedef struct column_sums_job {
    float *db;
    const float *dout;
    int R, N;
} column_sums_job;

static void column_sums_blocks(void *ctx, int blk0, int blk1)
{
    const column_sums_job *j = ctx;
    for (int blk = blk0; blk < blk1; blk++) {
        int c0 = blk * COLUMN_BLOCK, c1 = c0 + COLUMN_BLOCK < j->N ? c0 + COLUMN_BLOCK : j->N;
        float acc[COLUMN_BLOCK] = {0};
        sum_rows_span(acc, j->dout + c0, j->R, (size_t)j->N, c1 - c0);
        for (int c = c0; c < c1; c++) j->db[c] += acc[c - c0];
    }
}

/* db(N) += column sums of dout(R,N): columns split across threads, rows
 * summed in order. */
static void column_sums_add(const backend *be, float *db, const float *dout, int R, int N)
{
    int blocks = (N + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
    column_sums_job j = {db, dout, R, N};
    tp_for_static(nthreads(be, (size_t)R * N), blocks, column_sums_blocks, &j);
}

static int cpu_linear_backward(backend *be, float *din, float *dW, float *db, const float *dout,
                               const float *in, const float *W, int R, int K, int N,
                               int accumulate_din)
{
    /* din(R,K) = dout(R,N) · W(N,K) */
    if (din)
        be->matmul(be, 0, 0, R, K, N, 1.0f, dout, N, W, K, accumulate_din ? 1.0f : 0.0f, din, K);
    /* dW(N,K) += dout(R,N)ᵀ · in(R,K) */
    be->matmul(be, 1, 0, N, K, R, 1.0f, dout, N, in, K, 1.0f, dW, K);
    if (db) column_sums_add(be, db, dout, R, N);
    return SM_OK;
}

/* aw(n) += dy * xhat, ab(n) += dy for one row (xhat = (x - mu) * rs). */
SIMD_CLONES
static void ln_param_grads_row(float *aw, float *ab, const float *dy, const float *x, float mu,
                               float rs, int n)
{
#pragma omp simd
    for (int c = 0; c < n; c++) {
        aw[c] += dy[c] * ((x[c] - mu) * rs);
        ab[c] += dy[c];
    }
}

/* dx(C) = rs * (dn - mean(dn) - xhat * mean(dn * xhat)), dn = dy * w, for
 * one row. dx may alias dy. */
SIMD_CLONES
static void ln_input_grad_row(float *dx, const float *dy, const float *x, const float *w, float mu,
                              float rs, int C)
{
    float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
    for (int c = 0; c < C; c++) {
        float dn = dy[c] * w[c];
        s1 += dn;
        s2 += dn * ((x[c] - mu) * rs);
    }
    s1 /= C;
    s2 /= C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - mu) * rs;
        dx[c] = rs * (dy[c] * w[c] - s1 - xhat * s2);
    }
}

enum { LN_BLOCK = 64 };

typedef struct ln_backward_job {
    float *din, *dw, *db;
    const float *dout, *in, *mean, *rstd, *w;
    int R, C;
} ln_backward_job;

/* Pass 1, channel blocks [blk0, blk1): dw += Σ_r dout * xhat, db += Σ_r dout. */
static void ln_param_blocks(void *ctx, int blk0, int blk1)
{
    const ln_backward_job *j = ctx;
    int C = j->C;
    for (int blk = blk0; blk < blk1; blk++) {
        int c0 = blk * LN_BLOCK, c1 = c0 + LN_BLOCK < C ? c0 + LN_BLOCK : C;
        float aw[LN_BLOCK] = {0}, ab[LN_BLOCK] = {0};
        for (int r = 0; r < j->R; r++)
            ln_param_grads_row(aw, ab, j->dout + (size_t)r * C + c0, j->in + (size_t)r * C + c0,
                               j->mean[r], j->rstd[r], c1 - c0);
        for (int c = c0; c < c1; c++) {
            j->dw[c] += aw[c - c0];
            j->db[c] += ab[c - c0];
        }
    }
}

/* Pass 2, rows [lo, hi): din. */
static void ln_input_rows(void *ctx, int lo, int hi)
{
    const ln_backward_job *j = ctx;
    int C = j->C;
    for (int r = lo; r < hi; r++)
        ln_input_grad_row(j->din + (size_t)r * C, j->dout + (size_t)r * C, j->in + (size_t)r * C,
                          j->w, j->mean[r], j->rstd[r], C);
}

static int cpu_layernorm_backward(backend *be, float *din, float *dw, float *db, const float *dout,
                                  const float *in, const float *mean, const float *rstd,
                                  const float *w, int R, int C)
{
    enum { ONE_PASS_MAX = 2048 };
    int nt = nthreads(be, (size_t)R * C);
    if (nt == 1 && C <= ONE_PASS_MAX) {
        /* One pass by rows, the parameter sums in the same order as below
         * (per channel from zero, rows in order, then added). */
        float aw[ONE_PASS_MAX], ab[ONE_PASS_MAX];
        memset(aw, 0, (size_t)C * sizeof *aw);
        memset(ab, 0, (size_t)C * sizeof *ab);
        for (int r = 0; r < R; r++) {
            const float *x = in + (size_t)r * C, *dy = dout + (size_t)r * C;
            ln_param_grads_row(aw, ab, dy, x, mean[r], rstd[r], C);
            ln_input_grad_row(din + (size_t)r * C, dy, x, w, mean[r], rstd[r], C);
        }
        for (int c = 0; c < C; c++) {
            dw[c] += aw[c];
            db[c] += ab[c];
        }
        return SM_OK;
    }
    /* Pass 1, by channel blocks: dw += Σ_r dout * xhat, db += Σ_r dout.
     * It reads dout before pass 2 may overwrite it (din aliasing dout). */
    ln_backward_job j = {din, dw, db, dout, in, mean, rstd, w, R, C};
    tp_for_static(nt, (C + LN_BLOCK - 1) / LN_BLOCK, ln_param_blocks, &j);
    /* Pass 2, by rows. */
    tp_for_static(nt, R, ln_input_rows, &j);
    return SM_OK;
}

SIMD_CLONES
static void gelu_backward_span(float *din, const float *dout, const float *in, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        float cdf = 0.5f * (1.0f + sm_erff(x * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * sm_expf(-0.5f * x * x);
        din[i] = dout[i] * (cdf + x * pdf);
    }
}

typedef struct gelu_backward_job {
    float *din;
    const float *dout, *in;
    size_t n;
} gelu_backward_job;

static void gelu_backward_piece(void *ctx, int t, int nt)
{
    const gelu_backward_job *j = ctx;
    size_t lo, hi;
    span_of(j->n, t, nt, &lo, &hi);
    gelu_backward_span(j->din + lo, j->dout + lo, j->in + lo, hi - lo);
}

static int cpu_gelu_backward(backend *be, float *din, const float *dout, const float *in, size_t n)
{
    gelu_backward_job j = {din, dout, in, n};
    tp_run(nthreads(be, n), gelu_backward_piece, &j);
    return SM_OK;
}

static int cpu_tanh_backward(backend *be, float *din, const float *dout, const float *out, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++) din[i] = dout[i] * (1.0f - out[i] * out[i]);
    return SM_OK;
}

typedef struct dropout_job {
    float *out;
    const float *in;
    size_t n;
    unsigned long long key;
    uint32_t thr;
    float inv;
} dropout_job;

static void dropout_piece(void *ctx, int t, int nt)
{
    const dropout_job *j = ctx;
    size_t lo, hi;
    span_of(j->n, t, nt, &lo, &hi);
    cpu_dropout_span(j->out + lo, j->in + lo, hi - lo, j->key, lo, j->thr, j->inv);
}

static int cpu_dropout(backend *be, float *out, const float *in, size_t n, float p,
                       unsigned long long key)
{
    if (p <= 0.0f) {
        if (out != in) memcpy(out, in, n * sizeof *out);
        return SM_OK;
    }
    dropout_job j = {out, in, n, key, dropout_threshold(p), 1.0f / (1.0f - p)};
    tp_run(nthreads(be, n), dropout_piece, &j);
    return SM_OK;
}

enum { EMBED_BLOCK = 32 };

typedef struct embed_backward_job {
    float *dword, *dpos, *dtype, *dtask;
    const float *dout;
    const int *ids, *types;
    int BT, T, C, pos_offset;
} embed_backward_job;

static void embed_backward_blocks(void *ctx, int blk0, int blk1)
{
    const embed_backward_job *j = ctx;
    int T = j->T, C = j->C;
    for (int blk = blk0; blk < blk1; blk++) {
        int c0 = blk * EMBED_BLOCK, c1 = c0 + EMBED_BLOCK < C ? c0 + EMBED_BLOCK : C;
        for (int bt = 0; bt < j->BT; bt++) {
            int t = bt % T;
            const float *g = j->dout + (size_t)bt * C;
            float *w = j->dword + (size_t)j->ids[bt] * C;
            float *ps = j->dpos + (size_t)(t + j->pos_offset) * C;
            float *ty = j->dtype + (size_t)(j->types ? j->types[bt] : 0) * C;
            for (int c = c0; c < c1; c++) {
                w[c] += g[c];
                ps[c] += g[c];
                ty[c] += g[c];
            }
            if (j->dtask)
                for (int c = c0; c < c1; c++) j->dtask[c] += g[c];
        }
    }
}

/* Channels split across threads; tokens added in order. */
static int cpu_embed_backward(backend *be, float *dword, float *dpos, float *dtype, float *dtask,
                              const float *dout, const int *ids, const int *types, int B, int T,
                              int C, int pos_offset)
{
    embed_backward_job j = {dword, dpos, dtype, dtask, dout, ids, types, B * T, T, C, pos_offset};
    tp_for_static(nthreads(be, (size_t)B * T * C), (C + EMBED_BLOCK - 1) / EMBED_BLOCK,
                  embed_backward_blocks, &j);
    return SM_OK;
}

static int cpu_scatter_cls(backend *be, float *dx, const float *dcls, int B, int T, int C)
{
    (void)be;
    memset(dx, 0, (size_t)B * T * C * sizeof *dx);
    for (int b = 0; b < B; b++)
        memcpy(dx + (size_t)b * T * C, dcls + (size_t)b * C, (size_t)C * sizeof *dx);
    return SM_OK;
}

static int cpu_cross_entropy(backend *be, float *losses, float *probs, const float *logits,
                             const int *labels, int B, int K)
{
    (void)be;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K;
        float *pr = probs + (size_t)b * K;
        double mx = z[0], sum = 0.0;
        for (int k = 1; k < K; k++) mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < K; k++) sum += exp((double)z[k] - mx);
        for (int k = 0; k < K; k++) pr[k] = (float)(exp((double)z[k] - mx) / sum);
        /* cppcheck-suppress invalidFunctionArg ; K >= 1: the largest term is exp(0) = 1 */
        losses[b] = (float)(log(sum) + mx - z[labels[b]]);
    }
    return SM_OK;
}

static int cpu_cross_entropy_backward(backend *be, float *dlogits, const float *probs,
                                      const int *labels, int B, int K, float scale)
{
    (void)be;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++)
            dlogits[(size_t)b * K + k] = scale * (probs[(size_t)b * K + k] -
                                                  (k == labels[b] ? 1.0f : 0.0f));
    return SM_OK;
}

/* softmax(z / T) of one row into out (double sums, as cross_entropy); returns
 * log of the normaliser so that log out[k] = z[k] / T - lse. */
static double softmax_row_t(float *out, const float *z, int K, double T)
{
    double mx = z[0] / T, sum = 0.0;
    for (int k = 1; k < K; k++) mx = z[k] / T > mx ? z[k] / T : mx;
    for (int k = 0; k < K; k++) sum += exp(z[k] / T - mx);
    for (int k = 0; k < K; k++) out[k] = (float)(exp(z[k] / T - mx) / sum);
    /* cppcheck-suppress invalidFunctionArg ; K >= 1: the largest term is exp(0) = 1 */
    return mx + log(sum);
}

static int cpu_distill_loss(backend *be, float *losses, float *probs, float *probs_t,
                            const float *logits, const int *labels, const float *q, int B, int K,
                            float T, float alpha)
{
    (void)be;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K, *qb = q + (size_t)b * K;
        double lse = softmax_row_t(probs + (size_t)b * K, z, K, 1.0);
        double lse_t = softmax_row_t(probs_t + (size_t)b * K, z, K, T);
        double hard = labels[b] >= 0 ? lse - z[labels[b]] : 0.0, kl = 0.0;
        for (int k = 0; k < K; k++)
            if (qb[k] > 0) kl += qb[k] * (log((double)qb[k]) - (z[k] / (double)T - lse_t));
        losses[b] = (float)((1.0 - alpha) * hard + (double)alpha * T * T * kl);
    }
    return SM_OK;
}

static int cpu_distill_backward(backend *be, float *dlogits, const float *probs,
                                const float *probs_t, const int *labels, const float *q, int B,
                                int K, float T, float alpha, float scale)
{
    (void)be;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)b * K + k;
            float hard = labels[b] >= 0 ? probs[i] - (k == labels[b] ? 1.0f : 0.0f) : 0.0f;
            dlogits[i] = scale * ((1.0f - alpha) * hard + alpha * T * (probs_t[i] - q[i]));
        }
    return SM_OK;
}

/* One run of the fused step (adamw_fused.c), which with coef 1 only
 * reads g: the same arithmetic, in one place. */
static int cpu_adamw(backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int t)
{
    backend_adamw_run run = {0, n, 1, 0};
    adamw_cpu_fused(cpu_threads(be), p, (float *)g, m, v, &run, 1, n, 1.0f, lr, lr, beta1, beta2,
                    eps, weight_decay, t);
    return SM_OK;
}

static int cpu_adamw_step(backend *be, float *params, float *grads, float *m, float *v,
                          const backend_adamw_run *runs, int n_runs, size_t total, float coef,
                          float lr, float head_lr, float beta1, float beta2, float eps,
                          float weight_decay, int t)
{
    adamw_cpu_fused(cpu_threads(be), params, grads, m, v, runs, n_runs, total, coef, lr, head_lr,
                    beta1, beta2, eps, weight_decay, t);
    return SM_OK;
}

void backend_cpu_init_train_ops(backend *be)
{
    be->zero = cpu_zero;
    be->scale = cpu_scale;
    be->sumsq = cpu_sumsq;
    be->linear_backward = cpu_linear_backward;
    be->layernorm_backward = cpu_layernorm_backward;
    be->gelu_backward = cpu_gelu_backward;
    be->tanh_backward = cpu_tanh_backward;
    be->dropout = cpu_dropout;
    backend_cpu_init_attn_train_ops(be);
    be->embed_backward = cpu_embed_backward;
    be->scatter_cls = cpu_scatter_cls;
    be->cross_entropy = cpu_cross_entropy;
    be->cross_entropy_backward = cpu_cross_entropy_backward;
    be->distill_loss = cpu_distill_loss;
    be->distill_backward = cpu_distill_backward;
    be->adamw = cpu_adamw;
    be->adamw_step = cpu_adamw_step;
    backend_cpu_init_mlm_ops(be);
}

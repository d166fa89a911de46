/* kernels_train.cu: the CUDA training ops of backend.h (backward passes,
 * dropout, cross-entropy, AdamW, gradient norms).
 *
 * Determinism, as on the CPU: no atomics. Sums across rows are done in
 * fixed chunks and the chunk partials added in order (column sums for bias
 * and LayerNorm gradients, the squared norm); embedding gradients sort the
 * tokens by table row on the device (no host round trip) and sum each
 * row's run in fixed chunks added in order, so every table row adds its
 * tokens in token order. The same inputs give the same bits on the same
 * GPU; against the CPU they agree within the tolerances of
 * tests/gpu/test_cuda.c (the summation order differs).
 *
 * Parameter gradients accumulate (+=), activation gradients are written, as
 * backend.h says.
 */
#include <math.h>

#include "gpu/cuda_ctx.h"
#include "gpu/kernel_util.cuh"

/* ---- elementwise ------------------------------------------------------------------ */

__global__ void k_scale(float *x, size_t n, float s)
{
    GRID_STRIDE(i, n) x[i] *= s;
}

__global__ void k_gelu_backward(float *din, const float *dout, const float *in, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = in[i];
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
        din[i] = dout[i] * (cdf + x * pdf);
    }
}

__global__ void k_tanh_backward(float *din, const float *dout, const float *out, size_t n)
{
    GRID_STRIDE(i, n) din[i] = dout[i] * (1.0f - out[i] * out[i]);
}

static int cuda_scale(backend *be, float *x, size_t n, float s)
{
    ENTER(be);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_scale, grid_for(n, 256), 256, 0, c->stream, x, n, s);
    LAUNCHED(c, "k_scale");
    return SM_OK;
}

static int cuda_gelu_backward(backend *be, float *din, const float *dout, const float *in, size_t n)
{
    ENTER(be);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_gelu_backward, grid_for(n, 256), 256, 0, c->stream, din, dout, in, n);
    LAUNCHED(c, "k_gelu_backward");
    return SM_OK;
}

static int cuda_tanh_backward(backend *be, float *din, const float *dout, const float *out,
                              size_t n)
{
    ENTER(be);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_tanh_backward, grid_for(n, 256), 256, 0, c->stream, din, dout, out, n);
    LAUNCHED(c, "k_tanh_backward");
    return SM_OK;
}

static int cuda_dropout(backend *be, float *out, const float *in, size_t n, float p,
                        unsigned long long key)
{
    ENTER(be);
    return launch_dropout(c, out, in, n, p, key);
}

/* ---- squared norm -------------------------------------------------------------------- */

/* SUMSQ_BLOCKS fixed blocks of 256 threads, each summing a fixed strided
 * share in double and reducing it in a fixed tree; then one thread adds the
 * block partials in order. */
__global__ void k_sumsq_partial(double *partial, const float *x, size_t n)
{
    __shared__ double sh[256];
    double s = 0.0;
    GRID_STRIDE(i, n) s += (double)x[i] * (double)x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void k_sumsq_final(float *out, const double *partial, int nb)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < nb; i++) t += partial[i];
        out[0] = (float)t;
    }
}

static int cuda_sumsq(backend *be, float *out, const float *x, size_t n)
{
    ENTER(be);
    LAUNCH_KERNEL(k_sumsq_partial, SUMSQ_BLOCKS, 256, 0, c->stream, c->sumsq_partial, x, n);
    LAUNCHED(c, "k_sumsq_partial");
    LAUNCH_KERNEL(k_sumsq_final, 1, 32, 0, c->stream, out, c->sumsq_partial, SUMSQ_BLOCKS);
    LAUNCHED(c, "k_sumsq_final");
    return SM_OK;
}

/* ---- column sums ------------------------------------------------------------------------ */

/* Blocks of 32 columns x 8 row lanes; blockIdx.y is a chunk of rows. Each
 * thread sums its rows of the chunk in order, the 8 lanes are added in
 * order, and the chunk's sums go to partial[chunk, col]. */
#define CS_X 32
#define CS_Y 8

__global__ void k_colsum_partial(float *partial, const float *src, int R, int N, int rows_per_chunk)
{
    __shared__ float sh[CS_Y][CS_X + 1];
    int col = blockIdx.x * CS_X + threadIdx.x, chunk = blockIdx.y;
    int r0 = chunk * rows_per_chunk, r1 = min(R, r0 + rows_per_chunk);
    float s = 0.0f;
    if (col < N)
        for (int r = r0 + threadIdx.y; r < r1; r += CS_Y) s += src[(size_t)r * N + col];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < N) {
        float t = 0.0f;
        for (int y = 0; y < CS_Y; y++) t += sh[y][threadIdx.x];
        partial[(size_t)chunk * N + col] = t;
    }
}

/* The same for LayerNorm: sums of dout * xhat (dw) and of dout (db). */
__global__ void k_ln_colsum_partial(float *pw, float *pb, const float *dout, const float *in,
                                    const float *mean, const float *rstd, int R, int C,
                                    int rows_per_chunk)
{
    __shared__ float shw[CS_Y][CS_X + 1], shb[CS_Y][CS_X + 1];
    int col = blockIdx.x * CS_X + threadIdx.x, chunk = blockIdx.y;
    int r0 = chunk * rows_per_chunk, r1 = min(R, r0 + rows_per_chunk);
    float sw = 0.0f, sb = 0.0f;
    if (col < C)
        for (int r = r0 + threadIdx.y; r < r1; r += CS_Y) {
            size_t at = (size_t)r * C + col;
            float dy = dout[at];
            sw += dy * ((in[at] - mean[r]) * rstd[r]);
            sb += dy;
        }
    shw[threadIdx.y][threadIdx.x] = sw;
    shb[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && col < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < CS_Y; y++) {
            tw += shw[y][threadIdx.x];
            tb += shb[y][threadIdx.x];
        }
        pw[(size_t)chunk * C + col] = tw;
        pb[(size_t)chunk * C + col] = tb;
    }
}

/* dst[col] += Σ_chunk partial[chunk, col], chunks in order. */
__global__ void k_colsum_finish(float *dst, const float *partial, int chunks, int N)
{
    GRID_STRIDE(col, (size_t)N)
    {
        float t = 0.0f;
        for (int k = 0; k < chunks; k++) t += partial[(size_t)k * N + col];
        dst[col] += t;
    }
}

/* Chunks of rows for R rows: about 64 rows each, at most 512 chunks. */
static void colsum_chunks(int R, int *chunks, int *rows_per_chunk)
{
    int ch = (R + 63) / 64;
    if (ch > 512) ch = 512;
    if (ch < 1) ch = 1;
    *chunks = ch;
    *rows_per_chunk = (R + ch - 1) / ch;
}

/* db(N) (and db2(N) when non-NULL) += column sums of src(R,N). */
static int colsum_add(cuda_ctx *c, float *db, float *db2, const float *src, int R, int N)
{
    if (R <= 0 || N <= 0) return SM_OK;
    int chunks, rpc;
    colsum_chunks(R, &chunks, &rpc);
    TRY(growbuf_reserve(c, &c->colsum, (size_t)chunks * N * sizeof(float), "column sums"));
    float *partial = (float *)c->colsum.p;
    dim3 grid((unsigned)((N + CS_X - 1) / CS_X), (unsigned)chunks), block(CS_X, CS_Y);
    LAUNCH_KERNEL(k_colsum_partial, grid, block, 0, c->stream, partial, src, R, N, rpc);
    LAUNCHED(c, "k_colsum_partial");
    LAUNCH_KERNEL(k_colsum_finish, grid_for((size_t)N, 256), 256, 0, c->stream, db, partial, chunks,
                  N);
    LAUNCHED(c, "k_colsum_finish");
    if (db2) {
        LAUNCH_KERNEL(k_colsum_finish, grid_for((size_t)N, 256), 256, 0, c->stream, db2, partial,
                      chunks, N);
        LAUNCHED(c, "k_colsum_finish");
    }
    return SM_OK;
}

/* ---- linear and LayerNorm backward ----------------------------------------------------------- */

static int cuda_linear_backward(backend *be, float *din, float *dW, float *db, const float *dout,
                                const float *in, const float *W, int R, int K, int N,
                                int accumulate_din)
{
    ENTER(be);
    /* din(R,K) = dout(R,N) · W(N,K) */
    if (din)
        TRY(cuda_gemm(c, 0, 0, R, K, N, 1.0f, dout, N, 0, W, K, 0, accumulate_din ? 1.0f : 0.0f,
                      din, K, 0, 1));
    /* dW(N,K) += dout(R,N)ᵀ · in(R,K) */
    TRY(cuda_gemm(c, 1, 0, N, K, R, 1.0f, dout, N, 0, in, K, 0, 1.0f, dW, K, 0, 1));
    /* db(N) += column sums of dout */
    if (db) TRY(colsum_add(c, db, NULL, dout, R, N));
    return SM_OK;
}

/* din = rstd * (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat)), one warp per
 * row. din may alias dout: each lane writes only the elements it reads, after
 * the warp's sums are complete. */
__global__ void k_ln_backward_rows(float *din, const float *dout, const float *in,
                                   const float *mean, const float *rstd, const float *w,
                                   long long R, int C)
{
    int lane = threadIdx.x & 31;
    WARP_ROWS(r, R)
    {
        const float *x = in + (size_t)r * C, *dy = dout + (size_t)r * C;
        float *dx = din + (size_t)r * C;
        float mu = mean[r], rs = rstd[r];
        float s1 = 0.0f, s2 = 0.0f;
        for (int i = lane; i < C; i += 32) {
            float dn = dy[i] * w[i];
            s1 += dn;
            s2 += dn * ((x[i] - mu) * rs);
        }
        s1 = warp_sum(s1) / (float)C;
        s2 = warp_sum(s2) / (float)C;
        for (int i = lane; i < C; i += 32) {
            float xhat = (x[i] - mu) * rs;
            dx[i] = rs * (dy[i] * w[i] - s1 - xhat * s2);
        }
    }
}

static int cuda_layernorm_backward(backend *be, float *din, float *dw, float *db, const float *dout,
                                   const float *in, const float *mean, const float *rstd,
                                   const float *w, int R, int C)
{
    ENTER(be);
    if (R <= 0 || C <= 0) return SM_OK;
    /* parameter gradients first: din may overwrite dout */
    int chunks, rpc;
    colsum_chunks(R, &chunks, &rpc);
    TRY(growbuf_reserve(c, &c->colsum, 2 * (size_t)chunks * C * sizeof(float), "column sums"));
    float *pw = (float *)c->colsum.p, *pb = pw + (size_t)chunks * C;
    dim3 grid((unsigned)((C + CS_X - 1) / CS_X), (unsigned)chunks), block(CS_X, CS_Y);
    LAUNCH_KERNEL(k_ln_colsum_partial, grid, block, 0, c->stream, pw, pb, dout, in, mean, rstd, R,
                  C, rpc);
    LAUNCHED(c, "k_ln_colsum_partial");
    LAUNCH_KERNEL(k_colsum_finish, grid_for((size_t)C, 256), 256, 0, c->stream, dw, pw, chunks, C);
    LAUNCHED(c, "k_colsum_finish");
    LAUNCH_KERNEL(k_colsum_finish, grid_for((size_t)C, 256), 256, 0, c->stream, db, pb, chunks, C);
    LAUNCHED(c, "k_colsum_finish");
    LAUNCH_KERNEL(k_ln_backward_rows, row_grid(R), 32 * WARPS, 0, c->stream, din, dout, in, mean,
                  rstd, w, R, C);
    LAUNCHED(c, "k_ln_backward_rows");
    return SM_OK;
}

/* ---- attention backward ------------------------------------------------------------------- */

/* In place on datt(rows, T): dS = scale * P * (dP - Σ_j P dP), one warp per
 * row. Masked keys have P = 0, so summing all T keys equals the CPU's sum
 * over the unmasked ones. */
__global__ void k_softmax_backward(float *datt, const float *att, long long rows, int T,
                                   float scale)
{
    int lane = threadIdx.x & 31;
    WARP_ROWS(r, rows)
    {
        float *dp = datt + (size_t)r * T;
        const float *p = att + (size_t)r * T;
        float s = 0.0f;
        for (int j = lane; j < T; j += 32) s += p[j] * dp[j];
        s = warp_sum(s);
        for (int j = lane; j < T; j += 32) dp[j] = scale * p[j] * (dp[j] - s);
    }
}

/* dq, dk, dv (B,H,T,d) -> dqkv(B,T,3C), rows t >= len written 0. */
__global__ void k_merge_qkv(float *dqkv, const float *dq, const float *dk, const float *dv,
                            const int *lengths, int T, int H, int d, size_t n)
{
    int C = H * d;
    size_t C3 = 3 * (size_t)C;
    GRID_STRIDE(i, n)
    {
        size_t bt = i / C3, b, t;
        int j = (int)(i - bt * C3), which = j / C;
        size_t at = head_index(bt * C + (size_t)(j - which * C), T, H, d, &b, &t);
        const float *src = which == 0 ? dq : (which == 1 ? dk : dv);
        dqkv[i] = (int)t < clamp_len(lengths, (int)b, T) ? src[at] : 0.0f;
    }
}

static int cuda_attention_backward(backend *be, float *dqkv, float *datt, float *att_drop,
                                   const float *dout, const float *att, const float *qkv,
                                   const int *lengths, int B, int T, int H, int d, float scale,
                                   float p, unsigned long long key)
{
    ENTER(be);
    size_t NC = (size_t)B * T * H * d;
    long long TT = (long long)T * T, Td = (long long)T * d;
    int BH = B * H;
    if (!NC) return SM_OK;
    if (p > 0.0f && !att_drop)
        return cu_error(c, SM_ERR_INVALID, "attention_backward: dropout %g needs att_drop",
                        (double)p);
    TRY(growbuf_reserve(c, &c->attn, 7 * NC * sizeof(float), "attention backward"));
    float *q = (float *)c->attn.p, *k = q + NC, *v = k + NC, *dO = v + NC;
    float *dq = dO + NC, *dk = dq + NC, *dv = dk + NC;
    TRY(launch_split_qkv(c, q, k, v, qkv, B, T, H, d));
    /* dO (B,H,T,d) with padding query rows 0: the CPU reads only rows < len */
    TRY(launch_split_heads(c, dO, dout, lengths, B, T, H, d));
    const float *Pv = att;
    if (p > 0.0f) {
        TRY(launch_dropout(c, att_drop, att, (size_t)BH * TT, p, key));
        Pv = att_drop;
    }
    /* dv = Pvᵀ dO; dP = dO vᵀ (into datt) */
    TRY(cuda_gemm(c, 1, 0, T, d, T, 1.0f, Pv, T, TT, dO, d, Td, 0.0f, dv, d, Td, BH));
    TRY(cuda_gemm(c, 0, 1, T, T, d, 1.0f, dO, d, Td, v, d, Td, 0.0f, datt, T, TT, BH));
    /* back through the dropout (same mask), then the softmax */
    if (p > 0.0f) TRY(launch_dropout(c, datt, datt, (size_t)BH * TT, p, key));
    long long rows = (long long)BH * T;
    LAUNCH_KERNEL(k_softmax_backward, row_grid(rows), 32 * WARPS, 0, c->stream, datt, att, rows, T,
                  scale);
    LAUNCHED(c, "k_softmax_backward");
    /* dq = dS k; dk = dSᵀ q */
    TRY(cuda_gemm(c, 0, 0, T, d, T, 1.0f, datt, T, TT, k, d, Td, 0.0f, dq, d, Td, BH));
    TRY(cuda_gemm(c, 1, 0, T, d, T, 1.0f, datt, T, TT, q, d, Td, 0.0f, dk, d, Td, BH));
    size_t n = 3 * NC;
    LAUNCH_KERNEL(k_merge_qkv, grid_for(n, 256), 256, 0, c->stream, dqkv, dq, dk, dv, lengths, T, H,
                  d, n);
    LAUNCHED(c, "k_merge_qkv");
    return SM_OK;
}

/* ---- embeddings ----------------------------------------------------------------------------- */

/* The embedding gradient runs on the device only (no host round trip), with
 * no atomics, each table row adding its tokens in token order:
 *   - position rows (t + pos_offset): one thread per (t, channel) adds the
 *     batch's tokens in order;
 *   - a single row (types NULL; dtask): the column sums of colsum_add;
 *   - word rows (ids) and type rows (types): the tokens are sorted by the
 *     key row << 32 | token (a bitonic sort; the keys are unique, so the
 *     order is the stable one), each chunk of RUN_CHUNK sorted positions
 *     sums the pieces of the row runs it holds, and the position that
 *     starts a run adds its run's pieces in order to the row.
 * A token whose row is negative adds nothing: the position kernel skips
 * it, and its key sorts after every valid row, where the run sums stop. */

#define SORT_TILE 1024 /* keys sorted in shared memory by one block of SORT_TILE / 2 threads */
#define RUN_CHUNK 32   /* sorted positions per chunk of the run sums */
#define RUN_THREADS 128
#define KEY_PAD 0xffffffffffffffffull

/* keys[i] = (unsigned)rows[i] << 32 | i for the n tokens, KEY_PAD up to npow
 * (a power of two). Valid rows give keys below 2^63. */
__global__ void k_row_keys(unsigned long long *keys, const int *rows, int n, size_t npow)
{
    GRID_STRIDE(i, npow)
    {
        keys[i] = i < (size_t)n ? ((unsigned long long)(unsigned)rows[i] << 32) | i : KEY_PAD;
    }
}

/* Puts *a, *b in ascending order (descending when !up). */
__device__ __forceinline__ void bitonic_swap(unsigned long long *a, unsigned long long *b, int up)
{
    unsigned long long x = *a, y = *b;
    if ((x > y) == (up != 0)) {
        *a = y;
        *b = x;
    }
}

/* The bitonic stages (k, j) for k = k0, 2 k0, ... k1 and j = min(k, tile) / 2
 * down to 1, on this block's tile of `tile` keys in shared memory (block:
 * tile / 2 threads, one compared pair each). A pair (i, i + j) is ascending
 * when i & k is 0, i counted over the whole array. */
__global__ void k_bitonic_tile(unsigned long long *keys, int tile, unsigned long long k0,
                               unsigned long long k1)
{
    __shared__ unsigned long long sh[SORT_TILE];
    size_t base = (size_t)blockIdx.x * tile;
    int t = threadIdx.x, half = tile / 2;
    sh[t] = keys[base + t];
    sh[t + half] = keys[base + t + half];
    __syncthreads();
    for (unsigned long long k = k0; k <= k1; k <<= 1)
        for (int j = (k < (unsigned long long)tile ? (int)k : tile) / 2; j > 0; j >>= 1) {
            int i = 2 * j * (t / j) + (t & (j - 1));
            bitonic_swap(&sh[i], &sh[i + j], ((base + i) & k) == 0);
            __syncthreads();
        }
    keys[base + t] = sh[t];
    keys[base + t + half] = sh[t + half];
}

/* One bitonic stage (k, j) across tiles (j >= the tile): one thread per
 * compared pair, pairs = npow / 2. */
__global__ void k_bitonic_stage(unsigned long long *keys, size_t pairs, size_t j, size_t k)
{
    GRID_STRIDE(t, pairs)
    {
        size_t i = 2 * j * (t / j) + (t & (j - 1));
        bitonic_swap(&keys[i], &keys[i + j], (i & k) == 0);
    }
}

/* Sorts keys[0, npow) ascending, npow a power of two: one launch per stage
 * whose pairs span tiles, the rest in shared memory. */
static int sort_keys(cuda_ctx *c, unsigned long long *keys, size_t npow)
{
    if (npow < 2) return SM_OK;
    int tile = npow < SORT_TILE ? (int)npow : SORT_TILE;
    unsigned tiles = (unsigned)(npow / (size_t)tile);
    LAUNCH_KERNEL(k_bitonic_tile, tiles, tile / 2, 0, c->stream, keys, tile, 2ull,
                  (unsigned long long)tile);
    LAUNCHED(c, "k_bitonic_tile");
    for (size_t k = 2 * (size_t)tile; k <= npow; k <<= 1) {
        for (size_t j = k / 2; j >= (size_t)tile; j >>= 1) {
            LAUNCH_KERNEL(k_bitonic_stage, grid_for(npow / 2, 256), 256, 0, c->stream, keys,
                          npow / 2, j, k);
            LAUNCHED(c, "k_bitonic_stage");
        }
        LAUNCH_KERNEL(k_bitonic_tile, tiles, tile / 2, 0, c->stream, keys, tile,
                      (unsigned long long)k, (unsigned long long)k);
        LAUNCHED(c, "k_bitonic_tile");
    }
    return SM_OK;
}

/* For chunk blockIdx.x of the n sorted keys and channel ch: each piece of a
 * row run inside the chunk (a run cut at the chunk's start) is summed in
 * order, part[first position of the piece, ch] = Σ src[token, ch]. Invalid
 * keys (bit 63) end the valid positions. */
__global__ void k_run_pieces(float *part, const float *src, const unsigned long long *keys, int n,
                             int C)
{
    int ch = blockIdx.y * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    int p0 = blockIdx.x * RUN_CHUNK, p1 = min(n, p0 + RUN_CHUNK), p = p0, start = p0;
    unsigned row = (unsigned)(keys[p0] >> 32);
    float acc = 0.0f;
    for (; p < p1; p++) {
        unsigned long long k = keys[p];
        if (k >> 63) break;
        if ((unsigned)(k >> 32) != row) {
            part[(size_t)start * C + ch] = acc;
            acc = 0.0f;
            start = p;
            row = (unsigned)(k >> 32);
        }
        acc += src[(size_t)(unsigned)k * C + ch];
    }
    if (p > start) part[(size_t)start * C + ch] = acc;
}

/* For each position of chunk blockIdx.x that starts a valid run:
 * dst[row, ch] += its piece, then the piece at each following chunk start
 * while the run continues, in order. */
__global__ void k_run_finish(float *dst, const float *part, const unsigned long long *keys, int n,
                             int C)
{
    int ch = blockIdx.y * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    int p0 = blockIdx.x * RUN_CHUNK, p1 = min(n, p0 + RUN_CHUNK);
    for (int p = p0; p < p1; p++) {
        unsigned long long k = keys[p];
        if (k >> 63) break;
        unsigned row = (unsigned)(k >> 32);
        if (p > 0 && (unsigned)(keys[p - 1] >> 32) == row) continue;
        float s = part[(size_t)p * C + ch];
        for (int q = p0 + RUN_CHUNK; q < n && (unsigned)(keys[q] >> 32) == row; q += RUN_CHUNK)
            s += part[(size_t)q * C + ch];
        dst[(size_t)row * C + ch] += s;
    }
}

/* dst[rows[i], :] += src[i, :] for the n token rows of src (n, C); rows is
 * device memory. Tokens with a negative row are skipped. */
static int scatter_rows_add(cuda_ctx *c, float *dst, const float *src, const int *rows, int n,
                            int C)
{
    size_t npow = 1;
    while (npow < (size_t)n) npow <<= 1;
    TRY(growbuf_reserve(c, &c->sort_keys, npow * sizeof(unsigned long long),
                        "embedding gradient sort keys"));
    TRY(growbuf_reserve(c, &c->seg, (size_t)n * C * sizeof(float), "embedding gradient partials"));
    unsigned long long *keys = (unsigned long long *)c->sort_keys.p;
    float *part = (float *)c->seg.p;
    LAUNCH_KERNEL(k_row_keys, grid_for(npow, 256), 256, 0, c->stream, keys, rows, n, npow);
    LAUNCHED(c, "k_row_keys");
    TRY(sort_keys(c, keys, npow));
    dim3 grid((unsigned)((n + RUN_CHUNK - 1) / RUN_CHUNK),
              (unsigned)((C + RUN_THREADS - 1) / RUN_THREADS));
    LAUNCH_KERNEL(k_run_pieces, grid, RUN_THREADS, 0, c->stream, part, src, keys, n, C);
    LAUNCHED(c, "k_run_pieces");
    LAUNCH_KERNEL(k_run_finish, grid, RUN_THREADS, 0, c->stream, dst, part, keys, n, C);
    LAUNCHED(c, "k_run_finish");
    return SM_OK;
}

/* dpos[t + pos_offset, ch] += dout[b, t, ch] for b in order (rows below 0
 * skipped); one thread per (t, ch). */
__global__ void k_pos_backward(float *dpos, const float *dout, int B, int T, int C, int pos_offset)
{
    GRID_STRIDE(i, (size_t)T * C)
    {
        int t = (int)(i / (size_t)C), ch = (int)(i - (size_t)t * C);
        if (t + pos_offset < 0) continue;
        float *d = dpos + (size_t)(t + pos_offset) * C + ch;
        float acc = *d;
        for (int b = 0; b < B; b++) acc += dout[((size_t)b * T + t) * C + ch];
        *d = acc;
    }
}

/* backend.h's embed_backward, with every table row taking its tokens in
 * token order. A token whose row (id, type, or t + pos_offset) is negative
 * adds nothing to that table; rows past the end of a table are not checked. */
static int cuda_embed_backward(backend *be, float *dword, float *dpos, float *dtype, float *dtask,
                               const float *dout, const int *ids, const int *types, int B, int T,
                               int C, int pos_offset)
{
    ENTER(be);
    int n = B * T;
    if (n <= 0 || C <= 0) return SM_OK;
    TRY(scatter_rows_add(c, dword, dout, ids, n, C));
    size_t tc = (size_t)T * C;
    LAUNCH_KERNEL(k_pos_backward, grid_for(tc, 256), 256, 0, c->stream, dpos, dout, B, T, C,
                  pos_offset);
    LAUNCHED(c, "k_pos_backward");
    if (types) TRY(scatter_rows_add(c, dtype, dout, types, n, C));
    /* every token to row 0 of dtype (no types) and of dtask */
    float *single = types ? dtask : dtype, *single2 = types ? NULL : dtask;
    if (single) TRY(colsum_add(c, single, single2, dout, n, C));
    return SM_OK;
}

__global__ void k_scatter_cls(float *dx, const float *dcls, int T, int C, size_t n)
{
    size_t TC = (size_t)T * C;
    GRID_STRIDE(i, n)
    {
        size_t b = i / TC, rem = i - b * TC;
        dx[i] = rem < (size_t)C ? dcls[b * C + rem] : 0.0f;
    }
}

static int cuda_scatter_cls(backend *be, float *dx, const float *dcls, int B, int T, int C)
{
    ENTER(be);
    size_t n = (size_t)B * T * C;
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_scatter_cls, grid_for(n, 256), 256, 0, c->stream, dx, dcls, T, C, n);
    LAUNCHED(c, "k_scatter_cls");
    return SM_OK;
}

/* ---- loss ----------------------------------------------------------------------------------- */

/* Sums and maxima over the 32 lanes of a warp, in double. */
__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_max_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The softmax of a row z(K) / T into out, by one warp: each lane takes
 * every 32nd logit, the maximum and the sum of exponentials are reduced
 * over the warp in double (as the CPU sums in double; the order differs).
 * Returns log Σ exp(z / T) for every lane. */
__device__ static double warp_softmax_row(float *out, const float *z, int K, double T, int lane)
{
    double mx = -HUGE_VAL, sum = 0.0;
    for (int k = lane; k < K; k += 32) mx = fmax(mx, z[k] / T);
    mx = warp_max_d(mx);
    for (int k = lane; k < K; k += 32) sum += exp(z[k] / T - mx);
    sum = warp_sum_d(sum);
    for (int k = lane; k < K; k += 32) out[k] = (float)(exp(z[k] / T - mx) / sum);
    return mx + log(sum);
}

/* One warp per example, so a vocabulary-sized K (the masked-LM loss) is
 * spread over the GPU rather than serial in one thread. */
__global__ void k_cross_entropy(float *losses, float *probs, const float *logits, const int *labels,
                                int B, int K)
{
    int lane = threadIdx.x & 31;
    WARP_ROWS(b, B)
    {
        const float *z = logits + (size_t)b * K;
        double lse = warp_softmax_row(probs + (size_t)b * K, z, K, 1.0, lane);
        if (lane == 0) losses[b] = (float)(lse - z[labels[b]]);
    }
}

__global__ void k_cross_entropy_backward(float *dlogits, const float *probs, const int *labels,
                                         int K, float scale, size_t n)
{
    GRID_STRIDE(i, n)
    {
        size_t b = i / (size_t)K;
        int k = (int)(i - b * (size_t)K);
        dlogits[i] = scale * (probs[i] - (k == labels[b] ? 1.0f : 0.0f));
    }
}

static int cuda_cross_entropy(backend *be, float *losses, float *probs, const float *logits,
                              const int *labels, int B, int K)
{
    ENTER(be);
    if (B <= 0 || K <= 0) return SM_OK;
    LAUNCH_KERNEL(k_cross_entropy, row_grid(B), 32 * WARPS, 0, c->stream, losses, probs, logits,
                  labels, B, K);
    LAUNCHED(c, "k_cross_entropy");
    return SM_OK;
}

static int cuda_cross_entropy_backward(backend *be, float *dlogits, const float *probs,
                                       const int *labels, int B, int K, float scale)
{
    ENTER(be);
    size_t n = (size_t)(B > 0 ? B : 0) * (size_t)(K > 0 ? K : 0);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_cross_entropy_backward, grid_for(n, 256), 256, 0, c->stream, dlogits, probs,
                  labels, K, scale, n);
    LAUNCHED(c, "k_cross_entropy_backward");
    return SM_OK;
}

__global__ void k_distill_loss(float *losses, float *probs, float *probs_t, const float *logits,
                               const int *labels, const float *q, int B, int K, float T,
                               float alpha)
{
    int lane = threadIdx.x & 31;
    WARP_ROWS(b, B)
    {
        const float *z = logits + (size_t)b * K, *qb = q + (size_t)b * K;
        double lse = warp_softmax_row(probs + (size_t)b * K, z, K, 1.0, lane);
        double lse_t = warp_softmax_row(probs_t + (size_t)b * K, z, K, T, lane);
        double kl = 0.0;
        for (int k = lane; k < K; k += 32)
            if (qb[k] > 0) kl += qb[k] * (log((double)qb[k]) - (z[k] / (double)T - lse_t));
        kl = warp_sum_d(kl);
        double hard = labels[b] >= 0 ? lse - z[labels[b]] : 0.0;
        if (lane == 0) losses[b] = (float)((1.0 - alpha) * hard + (double)alpha * T * T * kl);
    }
}

__global__ void k_distill_backward(float *dlogits, const float *probs, const float *probs_t,
                                   const int *labels, const float *q, int K, float T, float alpha,
                                   float scale, size_t n)
{
    GRID_STRIDE(i, n)
    {
        size_t b = i / (size_t)K;
        int k = (int)(i - b * (size_t)K);
        float hard = labels[b] >= 0 ? probs[i] - (k == labels[b] ? 1.0f : 0.0f) : 0.0f;
        dlogits[i] = scale * ((1.0f - alpha) * hard + alpha * T * (probs_t[i] - q[i]));
    }
}

static int cuda_distill_loss(backend *be, float *losses, float *probs, float *probs_t,
                             const float *logits, const int *labels, const float *q, int B, int K,
                             float T, float alpha)
{
    ENTER(be);
    if (B <= 0 || K <= 0) return SM_OK;
    LAUNCH_KERNEL(k_distill_loss, row_grid(B), 32 * WARPS, 0, c->stream, losses, probs, probs_t,
                  logits, labels, q, B, K, T, alpha);
    LAUNCHED(c, "k_distill_loss");
    return SM_OK;
}

static int cuda_distill_backward(backend *be, float *dlogits, const float *probs,
                                 const float *probs_t, const int *labels, const float *q, int B,
                                 int K, float T, float alpha, float scale)
{
    ENTER(be);
    size_t n = (size_t)(B > 0 ? B : 0) * (size_t)(K > 0 ? K : 0);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_distill_backward, grid_for(n, 256), 256, 0, c->stream, dlogits, probs, probs_t,
                  labels, q, K, T, alpha, scale, n);
    LAUNCHED(c, "k_distill_backward");
    return SM_OK;
}

/* ---- AdamW ----------------------------------------------------------------------------------- */

/* coef != 1: the gradient is clipped first (g *= coef, written back), as
 * cpu/adamw_fused.c does it. */
__global__ void k_adamw(float *p, float *g, float *m, float *v, size_t n, float coef, float decay,
                        float step, float bc2_sqrt, float a1, float beta2, float a2, float eps)
{
    GRID_STRIDE(i, n)
    {
        float gi = g[i];
        if (coef != 1.0f) {
            gi *= coef;
            g[i] = gi;
        }
        float pi = p[i] * decay;
        float mi = m[i] + (gi - m[i]) * a1;
        float vi = v[i] * beta2 + gi * gi * a2;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}

/* The AdamW step on n elements, with the gradient first scaled by coef
 * (1: as it is). */
static int adamw_launch(cuda_ctx *c, float *p, float *g, float *m, float *v, size_t n, float coef,
                        float lr, float beta1, float beta2, float eps, float weight_decay, int t)
{
    if (!n) return SM_OK;
    if (t < 1) return cu_error(c, SM_ERR_INVALID, "adamw: step %d (expected >= 1)", t);
    /* the scalars as the CPU (and torch) compute them, in double */
    double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    float decay = weight_decay != 0.0f ? (float)(1.0 - (double)lr * weight_decay) : 1.0f;
    float step = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    LAUNCH_KERNEL(k_adamw, grid_for(n, 256), 256, 0, c->stream, p, g, m, v, n, coef, decay, step,
                  bc2_sqrt, a1, beta2, a2, eps);
    LAUNCHED(c, "k_adamw");
    return SM_OK;
}

static int cuda_adamw(backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int t)
{
    ENTER(be);
    /* coef 1: g is only read */
    return adamw_launch(c, p, (float *)g, m, v, n, 1.0f, lr, beta1, beta2, eps, weight_decay, t);
}

/* The optimizer's step (backend.h): one k_adamw launch per run (a run is a
 * large contiguous range, so a handful of launches per step), each clipping
 * its own gradients first when coef != 1; floats outside the runs are not
 * touched. */
static int cuda_adamw_step(backend *be, float *params, float *grads, float *m, float *v,
                           const backend_adamw_run *runs, int n_runs, size_t total, float coef,
                           float lr, float head_lr, float beta1, float beta2, float eps,
                           float weight_decay, int t)
{
    ENTER(be);
    (void)total;
    for (int i = 0; i < n_runs; i++) {
        const backend_adamw_run *r = &runs[i];
        TRY(adamw_launch(c, params + r->offset, grads + r->offset, m + r->offset, v + r->offset,
                         r->n, coef, r->head ? head_lr : lr, beta1, beta2, eps,
                         r->decay ? weight_decay : 0.0f, t));
    }
    return SM_OK;
}

/* ---- rows of predicted positions (masked-language-model pretraining) ---------------------- */

__global__ void k_gather_rows(float *out, const float *x, const int *rows, int C, size_t n)
{
    GRID_STRIDE(i, n)
    {
        size_t m = i / (size_t)C;
        out[i] = x[(size_t)rows[m] * C + (i - m * (size_t)C)];
    }
}

/* dx[rows[m], :] = dout[m, :]; rows are distinct (backend.h), so no two
 * threads write one element. */
__global__ void k_scatter_rows(float *dx, const float *dout, const int *rows, int C, size_t n)
{
    GRID_STRIDE(i, n)
    {
        size_t m = i / (size_t)C;
        dx[(size_t)rows[m] * C + (i - m * (size_t)C)] = dout[i];
    }
}

static int cuda_gather_rows(backend *be, float *out, const float *x, const int *rows, int M, int C)
{
    ENTER(be);
    size_t n = (size_t)(M > 0 ? M : 0) * (size_t)(C > 0 ? C : 0);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_gather_rows, grid_for(n, 256), 256, 0, c->stream, out, x, rows, C, n);
    LAUNCHED(c, "k_gather_rows");
    return SM_OK;
}

static int cuda_scatter_rows(backend *be, float *dx, const float *dout, const int *rows, int M,
                             int N, int C)
{
    ENTER(be);
    if (N <= 0 || C <= 0) return SM_OK;
    CU(c, cudaMemsetAsync(dx, 0, (size_t)N * C * sizeof(float), c->stream));
    size_t n = (size_t)(M > 0 ? M : 0) * (size_t)C;
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_scatter_rows, grid_for(n, 256), 256, 0, c->stream, dx, dout, rows, C, n);
    LAUNCHED(c, "k_scatter_rows");
    return SM_OK;
}

void cuda_init_train_ops(backend *be)
{
    be->scale = cuda_scale;
    be->sumsq = cuda_sumsq;
    be->linear_backward = cuda_linear_backward;
    be->layernorm_backward = cuda_layernorm_backward;
    be->gelu_backward = cuda_gelu_backward;
    be->tanh_backward = cuda_tanh_backward;
    be->dropout = cuda_dropout;
    be->attention_backward = cuda_attention_backward;
    be->embed_backward = cuda_embed_backward;
    be->scatter_cls = cuda_scatter_cls;
    be->cross_entropy = cuda_cross_entropy;
    be->cross_entropy_backward = cuda_cross_entropy_backward;
    be->distill_loss = cuda_distill_loss;
    be->distill_backward = cuda_distill_backward;
    be->adamw = cuda_adamw;
    be->adamw_step = cuda_adamw_step;
    be->gather_rows = cuda_gather_rows;
    be->scatter_rows = cuda_scatter_rows;
}

/* kernels_infer.cu: the CUDA forward ops of backend.h (elementwise, LayerNorm,
 * embeddings, attention) and the layout/softmax/dropout launchers the
 * training ops share.
 *
 * Kernel shapes, kept simple on purpose: elementwise kernels are grid-stride
 * loops over size_t indices (grids capped at 2^20 blocks); row kernels give
 * one warp to a row (LayerNorm, softmax), 8 rows per 256-thread block, also
 * grid-striding. Every kernel has a CPU twin in cpu/backend_cpu.c and is
 * compared with it by tests/gpu/test_cuda.c.
 *
 * Attention: q, k, v are copied out of qkv(B,T,3C) into per-head blocks
 * (B,H,T,d) so that one strided-batched GEMM covers every (sequence, head)
 * pair: S = q kᵀ (B·H matrices of T x T), a masked softmax, O = P v, and O
 * is merged back into (B,T,C) with padding rows set to 0. The CPU computes
 * only the unpadded len x len block; here the whole T x T block is computed,
 * the masked keys get probability 0 and the padding queries' rows are 0,
 * which gives the same result (and the same att as the CPU's
 * attention_train).
 */
#include <math.h>

#include "core/rng.h"
#include "gpu/cuda_ctx.h"
#include "gpu/kernel_util.cuh"

/* ---- elementwise --------------------------------------------------------------- */

__global__ void k_add(float *out, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void k_gelu(float *out, const float *in, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = in[i];
        out[i] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    }
}

__global__ void k_tanh(float *out, const float *in, size_t n)
{
    GRID_STRIDE(i, n) out[i] = tanhf(in[i]);
}

static int cuda_add(backend *be, float *out, const float *a, const float *b, size_t n)
{
    ENTER(be);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_add, grid_for(n, 256), 256, 0, c->stream, out, a, b, n);
    LAUNCHED(c, "k_add");
    return SM_OK;
}

static int cuda_gelu(backend *be, float *out, const float *in, size_t n)
{
    ENTER(be);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_gelu, grid_for(n, 256), 256, 0, c->stream, out, in, n);
    LAUNCHED(c, "k_gelu");
    return SM_OK;
}

static int cuda_tanh(backend *be, float *out, const float *in, size_t n)
{
    ENTER(be);
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_tanh, grid_for(n, 256), 256, 0, c->stream, out, in, n);
    LAUNCHED(c, "k_tanh");
    return SM_OK;
}

/* ---- LayerNorm ------------------------------------------------------------------ */

/* One warp per row: mean, then the variance around it (two passes, as the
 * CPU), then the output. out may alias in: each lane writes only elements
 * it read, after the whole warp has finished reading (the shuffles). */
__global__ void k_layernorm(float *out, float *mean, float *rstd, const float *in, const float *w,
                            const float *b, long long R, int C, float eps)
{
    int lane = threadIdx.x & 31;
    WARP_ROWS(r, R)
    {
        const float *x = in + (size_t)r * C;
        float *y = out + (size_t)r * C;
        float s = 0.0f;
        for (int i = lane; i < C; i += 32) s += x[i];
        float mu = warp_sum(s) / (float)C;
        float v = 0.0f;
        for (int i = lane; i < C; i += 32) {
            float dd = x[i] - mu;
            v += dd * dd;
        }
        float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
        for (int i = lane; i < C; i += 32) y[i] = (x[i] - mu) * rs * w[i] + b[i];
        if (lane == 0) {
            if (mean) mean[r] = mu;
            if (rstd) rstd[r] = rs;
        }
    }
}

static int cuda_layernorm(backend *be, float *out, float *mean, float *rstd, const float *in,
                          const float *w, const float *b, int R, int C, float eps)
{
    ENTER(be);
    if (R <= 0 || C <= 0) return SM_OK;
    LAUNCH_KERNEL(k_layernorm, row_grid(R), 32 * WARPS, 0, c->stream, out, mean, rstd, in, w, b, R,
                  C, eps);
    LAUNCHED(c, "k_layernorm");
    return SM_OK;
}

/* ---- softmax ---------------------------------------------------------------------- */

/* att(B,H,T,T), one warp per row: softmax of scale * x over keys j < len,
 * 0 for the masked keys j >= len (every row, padding rows included; with
 * zero_pad_rows the rows of padding queries, i >= len, are 0 instead, as
 * the CPU's attention_train leaves them). The branch is the same for every
 * lane of the warp (one row per warp). */
__global__ void k_softmax_masked(float *att, const int *lengths, int H, int T, long long rows,
                                 float scale, int zero_pad_rows)
{
    int lane = threadIdx.x & 31;
    WARP_ROWS(r, rows)
    {
        int b = (int)(r / T / H);
        int len = clamp_len(lengths, b, T);
        float *x = att + (size_t)r * T;
        if (zero_pad_rows && (int)(r % T) >= len) {
            for (int j = lane; j < T; j += 32) x[j] = 0.0f;
            continue;
        }
        float mx = -INFINITY;
        for (int j = lane; j < len; j += 32) mx = fmaxf(mx, x[j]);
        mx = warp_max(mx);
        float s = 0.0f;
        for (int j = lane; j < len; j += 32) {
            float e = expf((x[j] - mx) * scale);
            x[j] = e;
            s += e;
        }
        float inv = 1.0f / warp_sum(s);
        for (int j = lane; j < len; j += 32) x[j] *= inv;
        for (int j = len + lane; j < T; j += 32) x[j] = 0.0f;
    }
}

int launch_softmax_masked(cuda_ctx *c, float *att, const int *lengths, int B, int H, int T,
                          float scale, int zero_pad_rows)
{
    long long rows = (long long)B * H * T;
    if (rows <= 0) return SM_OK;
    LAUNCH_KERNEL(k_softmax_masked, row_grid(rows), 32 * WARPS, 0, c->stream, att, lengths, H, T,
                  rows, scale, zero_pad_rows);
    LAUNCHED(c, "k_softmax_masked");
    return SM_OK;
}

static int cuda_softmax_masked(backend *be, float *att, const int *lengths, int B, int H, int T,
                               float scale)
{
    ENTER(be);
    return launch_softmax_masked(c, att, lengths, B, H, T, scale, 0);
}

/* ---- dropout ----------------------------------------------------------------------- */

/* rng.h's dropout_keep, the CPU's mask bit for bit. */
__global__ void k_dropout(float *out, const float *in, size_t n, unsigned thr, float inv,
                          unsigned long long key)
{
    GRID_STRIDE(i, n) out[i] = dropout_keep(key, i, thr) ? in[i] * inv : 0.0f;
}

int launch_dropout(cuda_ctx *c, float *out, const float *in, size_t n, float p,
                   unsigned long long key)
{
    if (!n) return SM_OK;
    if (p <= 0.0f) {
        if (out != in)
            CU(c, cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
        return SM_OK;
    }
    unsigned thr = dropout_threshold(p);
    float inv = 1.0f / (1.0f - p);
    LAUNCH_KERNEL(k_dropout, grid_for(n, 256), 256, 0, c->stream, out, in, n, thr, inv, key);
    LAUNCHED(c, "k_dropout");
    return SM_OK;
}

/* ---- embeddings and layouts -------------------------------------------------------- */

__global__ void k_embed(float *out, const int *ids, const int *types, const float *word,
                        const float *pos, const float *type, const float *task, int T, int C,
                        int pos_offset, size_t n)
{
    GRID_STRIDE(i, n)
    {
        size_t bt = i / (size_t)C;
        int ch = (int)(i - bt * (size_t)C);
        int t = (int)(bt % (size_t)T);
        float v = word[(size_t)ids[bt] * C + ch] + pos[(size_t)(t + pos_offset) * C + ch] +
                  type[(size_t)(types ? types[bt] : 0) * C + ch];
        if (task) v += task[ch];
        out[i] = v;
    }
}

static int cuda_embed(backend *be, float *out, const int *ids, const int *types, const float *word,
                      const float *pos, const float *type, const float *task, int B, int T, int C,
                      int pos_offset)
{
    ENTER(be);
    size_t n = (size_t)B * T * C;
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_embed, grid_for(n, 256), 256, 0, c->stream, out, ids, types, word, pos, type,
                  task, T, C, pos_offset, n);
    LAUNCHED(c, "k_embed");
    return SM_OK;
}

/* qkv(B,T,3C) -> q, k, v (B,H,T,d); indexed by the source element. */
__global__ void k_split_qkv(float *q, float *k, float *v, const float *qkv, int T, int H, int d,
                            size_t n)
{
    int C = H * d;
    size_t C3 = 3 * (size_t)C;
    GRID_STRIDE(i, n)
    {
        size_t bt = i / C3, b, t;
        int j = (int)(i - bt * C3), which = j / C;
        float *dst = which == 0 ? q : (which == 1 ? k : v);
        dst[head_index(bt * C + (size_t)(j - which * C), T, H, d, &b, &t)] = qkv[i];
    }
}

int launch_split_qkv(cuda_ctx *c, float *q, float *k, float *v, const float *qkv, int B, int T,
                     int H, int d)
{
    size_t n = (size_t)B * T * 3 * H * d;
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_split_qkv, grid_for(n, 256), 256, 0, c->stream, q, k, v, qkv, T, H, d, n);
    LAUNCHED(c, "k_split_qkv");
    return SM_OK;
}

/* in(B,T,C) -> out(B,H,T,d); with lengths, rows t >= len are written 0. */
__global__ void k_split_heads(float *out, const float *in, const int *lengths, int T, int H, int d,
                              size_t n)
{
    GRID_STRIDE(i, n)
    {
        size_t b, t, at = head_index(i, T, H, d, &b, &t);
        out[at] = (int)t < clamp_len(lengths, (int)b, T) ? in[i] : 0.0f;
    }
}

int launch_split_heads(cuda_ctx *c, float *out, const float *in, const int *lengths, int B, int T,
                       int H, int d)
{
    size_t n = (size_t)B * T * H * d;
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_split_heads, grid_for(n, 256), 256, 0, c->stream, out, in, lengths, T, H, d, n);
    LAUNCHED(c, "k_split_heads");
    return SM_OK;
}

/* in(B,H,T,d) -> out(B,T,C); with lengths, rows t >= len are written 0.
 * Indexed by the destination element. */
__global__ void k_merge_heads(float *out, const float *in, const int *lengths, int T, int H, int d,
                              size_t n)
{
    GRID_STRIDE(i, n)
    {
        size_t b, t, at = head_index(i, T, H, d, &b, &t);
        out[i] = (int)t < clamp_len(lengths, (int)b, T) ? in[at] : 0.0f;
    }
}

int launch_merge_heads(cuda_ctx *c, float *out, const float *in, const int *lengths, int B, int T,
                       int H, int d)
{
    size_t n = (size_t)B * T * H * d;
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_merge_heads, grid_for(n, 256), 256, 0, c->stream, out, in, lengths, T, H, d, n);
    LAUNCHED(c, "k_merge_heads");
    return SM_OK;
}

static int cuda_attn_split(backend *be, float *q, float *k, float *v, const float *qkv, int B,
                           int T, int H, int d)
{
    ENTER(be);
    return launch_split_qkv(c, q, k, v, qkv, B, T, H, d);
}

static int cuda_attn_merge(backend *be, float *out, const float *in, int B, int T, int H, int d)
{
    ENTER(be);
    return launch_merge_heads(c, out, in, NULL, B, T, H, d);
}

__global__ void k_gather_cls(float *out, const float *x, int T, int C, size_t n)
{
    GRID_STRIDE(i, n)
    {
        size_t b = i / (size_t)C;
        out[i] = x[b * (size_t)T * C + (i - b * (size_t)C)];
    }
}

static int cuda_gather_cls(backend *be, float *out, const float *x, int B, int T, int C)
{
    ENTER(be);
    size_t n = (size_t)B * C;
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_gather_cls, grid_for(n, 256), 256, 0, c->stream, out, x, T, C, n);
    LAUNCHED(c, "k_gather_cls");
    return SM_OK;
}

/* ---- attention ----------------------------------------------------------------------- */

static int attention_common(cuda_ctx *c, float *out, float *att, float *att_drop, const float *qkv,
                            const int *lengths, int B, int T, int H, int d, float scale, float p,
                            unsigned long long key)
{
    size_t NC = (size_t)B * T * H * d;
    long long TT = (long long)T * T, Td = (long long)T * d;
    if (!NC) return SM_OK;
    TRY(growbuf_reserve(c, &c->attn, 4 * NC * sizeof(float), "attention"));
    float *q = (float *)c->attn.p, *k = q + NC, *v = k + NC, *o = v + NC;
    /* q, k, v (B,H,T,d) */
    TRY(launch_split_qkv(c, q, k, v, qkv, B, T, H, d));
    /* att(B·H: T x T) = q kᵀ; softmax(scale · att) over unmasked keys, the
     * rows of padding queries 0 (backend.h) */
    TRY(cuda_gemm(c, 0, 1, T, T, d, 1.0f, q, d, Td, k, d, Td, 0.0f, att, T, TT, B * H));
    TRY(launch_softmax_masked(c, att, lengths, B, H, T, scale, 1));
    const float *P = att;
    if (p > 0.0f) {
        /* element (b,h,i,j) of att has flat index ((b·H + h)·T + i)·T + j, the
         * index the CPU draws the mask with */
        TRY(launch_dropout(c, att_drop, att, (size_t)B * H * TT, p, key));
        P = att_drop;
    }
    /* o(B·H: T x d) = P v; out(B,T,C) with padding rows 0 */
    TRY(cuda_gemm(c, 0, 0, T, d, T, 1.0f, P, T, TT, v, d, Td, 0.0f, o, d, Td, B * H));
    return launch_merge_heads(c, out, o, lengths, B, T, H, d);
}

static int cuda_attention(backend *be, float *out, float *att, const float *qkv, const int *lengths,
                          int B, int T, int H, int d, float scale)
{
    ENTER(be);
    return attention_common(c, out, att, NULL, qkv, lengths, B, T, H, d, scale, 0.0f, 0);
}

static int cuda_attention_train(backend *be, float *out, float *att, float *att_drop,
                                const float *qkv, const int *lengths, int B, int T, int H, int d,
                                float scale, float p, unsigned long long key)
{
    ENTER(be);
    if (p > 0.0f && !att_drop)
        return cu_error(c, SM_ERR_INVALID, "attention_train: dropout %g needs att_drop", (double)p);
    return attention_common(c, out, att, att_drop, qkv, lengths, B, T, H, d, scale, p, key);
}

void cuda_init_infer_ops(backend *be)
{
    be->add = cuda_add;
    be->layernorm = cuda_layernorm;
    be->gelu = cuda_gelu;
    be->tanh = cuda_tanh;
    be->embed = cuda_embed;
    be->attn_split = cuda_attn_split;
    be->attn_merge = cuda_attn_merge;
    be->softmax_masked = cuda_softmax_masked;
    be->attention = cuda_attention;
    be->attention_train = cuda_attention_train;
    be->gather_cls = cuda_gather_cls;
}

/* attention_train_ops.c: the CPU attention ops of training
 * (attention_train, attention_backward of backend.h).
 *
 * One thread does all the work of one (sequence, head): two small OpenBLAS
 * products each way around the row loops below, which are vectorised
 * (train_kernels.h). Only the len x len block that is not padding is
 * computed. The dropped probabilities are regenerated in the backward from
 * the counter-based mask, not stored. backend_cpu_init_attn_train_ops()
 * fills the table.
 */
#include "core/backend.h"
#include "cpu/cpu_ctx.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/errors.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "cpu/blas.h"
#include "cpu/softmax.h"
#include "cpu/train_kernels.h"

#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

static int clamp_len(int len, int T)
{
    return len < 1 ? 1 : (len > T ? T : len);
}

/* Writes the dropped len x len block of probabilities P (ld T) into Pd:
 * element (i, j) is element base + i*T + j of the mask stream. */
static void drop_block(float *Pd, const float *P, int len, int T, uint64_t base, uint64_t key,
                       uint32_t thr, float inv)
{
    for (int i = 0; i < len; i++)
        cpu_dropout_span(Pd + (size_t)i * T, P + (size_t)i * T, (size_t)len, key,
                         base + (uint64_t)i * T, thr, inv);
}

/* The arguments of both ops, for one (sequence, head) item each. */
typedef struct attn_train_job {
    float *out, *att, *att_drop; /* backward: out is dqkv, att is datt */
    const float *qkv, *dout, *P; /* backward: dout, P the saved probabilities */
    const int *lengths;
    int T, H, d;
    float scale, p, inv;
    uint32_t thr;
    unsigned long long key;
} attn_train_job;

static void attention_train_item(void *ctx, int bh, int lane)
{
    const attn_train_job *j = ctx;
    int T = j->T, H = j->H, d = j->d, C = H * d;
    int b = bh / H, h = bh % H, len = clamp_len(j->lengths[b], T);
    size_t base = (size_t)bh * T * T;
    const float *q = j->qkv + (size_t)b * T * 3 * C + (size_t)h * d;
    const float *k = q + C, *v = q + 2 * C;
    float *P = j->att + base, *o = j->out + (size_t)b * T * C + (size_t)h * d;
    (void)lane;
    /* S(len,len) = q kᵀ; P = softmax(scale S) row by row */
    blas_sgemm(0, 1, len, len, d, 1.0f, q, 3 * C, k, 3 * C, 0.0f, P, T);
    for (int t = 0; t < len; t++) cpu_softmax_row(P + (size_t)t * T, len, T, j->scale);
    for (int t = len; t < T; t++) memset(P + (size_t)t * T, 0, (size_t)T * sizeof *P);
    const float *Pv = P;
    if (j->p > 0.0f) {
        drop_block(j->att_drop + base, P, len, T, base, j->key, j->thr, j->inv);
        Pv = j->att_drop + base;
    }
    /* o(len,d) = P v */
    blas_sgemm(0, 0, len, d, len, 1.0f, Pv, T, v, 3 * C, 0.0f, o, C);
    for (int t = len; t < T; t++) memset(o + (size_t)t * C, 0, (size_t)d * sizeof *o);
}

static int cpu_attention_train(backend *be, float *out, float *att, float *att_drop,
                               const float *qkv, const int *lengths, int B, int T, int H, int d,
                               float scale, float p, unsigned long long key)
{
    int nt = cpu_threads_for(be, 2.0 * B * H * T * T * d);
    attn_train_job j = {out,
                        att,
                        att_drop,
                        qkv,
                        NULL,
                        NULL,
                        lengths,
                        T,
                        H,
                        d,
                        scale,
                        p,
                        p > 0.0f ? 1.0f / (1.0f - p) : 1.0f,
                        dropout_threshold(p),
                        key};
    tp_for_dynamic(nt, B * H, attention_train_item, &j);
    return SM_OK;
}

/* One row of the backward through dropout and softmax, in place on dr:
 * dr = dPd (len); with dropout, dP = dPd * inv where Pd kept (Pd != 0; where
 * P is 0 the choice does not matter: every use is multiplied by P), then
 * dS = scale * P * (dP - Σ P dP). */
SIMD_CLONES
static void softmax_drop_backward_row(float *dr, const float *pr, const float *pd, int len,
                                      float inv, float scale)
{
    if (pd) {
#pragma omp simd
        for (int j = 0; j < len; j++) dr[j] = pd[j] != 0.0f ? dr[j] * inv : 0.0f;
    }
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < len; j++) s += pr[j] * dr[j];
#pragma omp simd
    for (int j = 0; j < len; j++) dr[j] = scale * pr[j] * (dr[j] - s);
}

static void attention_backward_item(void *ctx, int bh, int lane)
{
    const attn_train_job *j = ctx;
    int T = j->T, H = j->H, d = j->d, C = H * d;
    int b = bh / H, h = bh % H, len = clamp_len(j->lengths[b], T);
    size_t base = (size_t)bh * T * T, row0 = (size_t)b * T;
    const float *q = j->qkv + row0 * 3 * C + (size_t)h * d;
    const float *k = q + C, *v = q + 2 * C;
    float *dq = j->out + row0 * 3 * C + (size_t)h * d;
    float *dk = dq + C, *dv = dq + 2 * C;
    const float *dO = j->dout + row0 * C + (size_t)h * d;
    const float *P = j->P + base, *Pv = P;
    float *dP = j->att + base;
    float p = j->p, inv = j->inv, scale = j->scale;
    (void)lane;
    if (p > 0.0f) {
        drop_block(j->att_drop + base, P, len, T, base, j->key, j->thr, inv);
        Pv = j->att_drop + base;
    }
    /* dv(len,d) = Pvᵀ dO; dPv(len,len) = dO vᵀ */
    blas_sgemm(1, 0, len, d, len, 1.0f, Pv, T, dO, C, 0.0f, dv, 3 * C);
    blas_sgemm(0, 1, len, len, d, 1.0f, dO, C, v, 3 * C, 0.0f, dP, T);
    /* through the dropout, then the softmax */
    for (int i = 0; i < len; i++)
        softmax_drop_backward_row(dP + (size_t)i * T, P + (size_t)i * T,
                                  p > 0.0f ? Pv + (size_t)i * T : NULL, len, inv, scale);
    /* dq = dS k; dk = dSᵀ q */
    blas_sgemm(0, 0, len, d, len, 1.0f, dP, T, k, 3 * C, 0.0f, dq, 3 * C);
    blas_sgemm(1, 0, len, d, len, 1.0f, dP, T, q, 3 * C, 0.0f, dk, 3 * C);
    for (int t = len; t < T; t++) {
        float *row = dq + (size_t)t * 3 * C;
        memset(row, 0, (size_t)d * sizeof *row);
        memset(row + C, 0, (size_t)d * sizeof *row);
        memset(row + 2 * C, 0, (size_t)d * sizeof *row);
    }
}

static int cpu_attention_backward(backend *be, float *dqkv, float *datt, float *att_drop,
                                  const float *dout, const float *att, const float *qkv,
                                  const int *lengths, int B, int T, int H, int d, float scale,
                                  float p, unsigned long long key)
{
    int nt = cpu_threads_for(be, 4.0 * B * H * T * T * d);
    attn_train_job j = {dqkv,
                        datt,
                        att_drop,
                        qkv,
                        dout,
                        att,
                        lengths,
                        T,
                        H,
                        d,
                        scale,
                        p,
                        p > 0.0f ? 1.0f / (1.0f - p) : 1.0f,
                        dropout_threshold(p),
                        key};
    tp_for_dynamic(nt, B * H, attention_backward_item, &j);
    return SM_OK;
}

void backend_cpu_init_attn_train_ops(backend *be)
{
    be->attention_train = cpu_attention_train;
    be->attention_backward = cpu_attention_backward;
}

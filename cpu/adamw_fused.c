/* adamw_fused.c: the AdamW step of optimizer.c fused into one pass over
 * the whole arena for the CPU backend: gradient clipping and every run of
 * tensors (each with its weight decay) in a single parallel loop, instead of
 * one fork and join per op and run. It is both the CPU backend's
 * adamw_step and (one run, no clipping) its adamw op. Clipping (coef != 1)
 * scales the gradients of the runs only, written back, as backend.h says.
 * The arithmetic is the CUDA backend's k_adamw in the same order, but not
 * the same bits: compilers may contract the multiply-adds into FMAs (nvcc
 * does by default; GCC may in the AVX-512 clone), so the two agree within
 * rounding (tests/gpu/test_cuda.c's adamw tolerance).
 */
#include "cpu/adamw_fused.h"

#include <math.h>

#include "core/thread_pool.h"

#define SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

SIMD_CLONES
static void adamw_span(float *p, float *g, float *m, float *v, size_t n, float coef, float decay,
                       float step, float bc2_sqrt, float a1, float beta2, float a2, float eps)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float gi = coef != 1.0f ? g[i] * coef : g[i];
        float pi = p[i] * decay;
        float mi = m[i] + (gi - m[i]) * a1;
        float vi = v[i] * beta2 + gi * gi * a2;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step * (mi / denom);
        m[i] = mi;
        v[i] = vi;
        if (coef != 1.0f) g[i] = gi;
    }
}

typedef struct fused_job {
    float *params, *grads, *m, *v;
    const backend_adamw_run *runs;
    int n_runs;
    size_t total;
    float coef, bc2_sqrt, a1, beta2, a2, eps;
    const float *with_decay, *step; /* (2): the encoder's group, the head's */
} fused_job;

/* Piece c of nt: elements [total c / nt, total (c+1) / nt) of every run. */
static void fused_piece(void *ctx, int c, int nt)
{
    const fused_job *j = ctx;
    size_t lo = j->total * c / nt, hi = j->total * (c + 1) / nt;
    for (int r = 0; r < j->n_runs; r++) {
        size_t a = j->runs[r].offset, b = j->runs[r].offset + j->runs[r].n;
        int k = j->runs[r].head != 0;
        a = a > lo ? a : lo;
        b = b < hi ? b : hi;
        if (b <= a) continue;
        adamw_span(j->params + a, j->grads + a, j->m + a, j->v + a, b - a, j->coef,
                   j->runs[r].decay ? j->with_decay[k] : 1.0f, j->step[k], j->bc2_sqrt, j->a1,
                   j->beta2, j->a2, j->eps);
    }
}

void adamw_cpu_fused(int threads, float *params, float *grads, float *m, float *v,
                     const backend_adamw_run *runs, int n_runs, size_t total, float coef, float lr,
                     float head_lr, float beta1, float beta2, float eps, float weight_decay, int t)
{
    /* The scalars as torch computes them (in double), applied in float;
     * index 0 for the encoder's group, 1 for the head's. */
    double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const float lrs[2] = {lr, head_lr};
    float with_decay[2], step[2];
    for (int k = 0; k < 2; k++) {
        with_decay[k] = weight_decay != 0.0f ? (float)(1.0 - (double)lrs[k] * weight_decay) : 1.0f;
        step[k] = (float)(lrs[k] / bc1);
    }
    float bc2_sqrt = (float)sqrt(bc2);
    float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
    fused_job j = {params,   grads, m,     v,  runs, n_runs,     total, coef,
                   bc2_sqrt, a1,    beta2, a2, eps,  with_decay, step};
    tp_run(total < 65536 ? 1 : threads, fused_piece, &j);
}

/* linear_packed.cu: the CUDA backend's packed weights (backend.h's
 * pack_weight, linear_packed, linear_pack_kind): a weight converted to BF16
 * once, on the device, and the linear layer that multiplies by it.
 *
 * In bf16 precision, linear rounds both operands to BF16 on every call, the
 * weight included (a kernel and a full read and write of the weight per
 * product). A packed weight does the weight's half once per upload: the
 * caller (runtime/engine.c through runtime/registry.c) asks linear_pack_kind, packs
 * the model's four per-layer matrices from their device copy and keeps them
 * with the model, shared by every backend of the device. linear_packed then
 * rounds only the input, so it computes the same as linear in bf16: BF16
 * operands, FP32 accumulation, + b.
 *
 * A packed weight owns one device allocation and remembers its device, so it
 * is freed with no backend (backend_packed_free), as the registry frees it.
 */
#define SM_CUDA_PLUGIN_BUILD 1

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_ctx.h"
#include "gpu/kernel_util.cuh"

typedef struct cuda_packed {
    backend_packed hdr; /* kind BACKEND_PACK_BF16, free cuda_packed_free */
    int device;
    int N, K;
    __nv_bfloat16 *w; /* (N,K) row-major, device memory of `device` */
} cuda_packed;

static void cuda_packed_free(backend_packed *bp)
{
    cuda_packed *p = (cuda_packed *)bp;
    if (!p) return;
    if (p->w) {
        int cur = -1;
        if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
        if (cudaSetDevice(p->device) == cudaSuccess) (void)cudaFree(p->w);
        if (cur >= 0 && cur != p->device) (void)cudaSetDevice(cur);
        (void)cudaGetLastError();
    }
    free(p);
}

/* c's error message into err (SM_ERR_MAX bytes), returning rc. */
static int with_err(cuda_ctx *c, int rc, char *err)
{
    if (rc && err) snprintf(err, SM_ERR_MAX, "%s", c->err);
    return rc;
}

static int pack_bf16(cuda_ctx *c, const float *W, int N, int K, cuda_packed *p)
{
    size_t n = (size_t)N * K;
    cudaError_t e = cudaMalloc((void **)&p->w, n * sizeof(__nv_bfloat16));
    if (e != cudaSuccess) {
        p->w = NULL;
        (void)cudaGetLastError();
        return cu_error(c, e == cudaErrorMemoryAllocation ? SM_ERR_NOMEM : SM_ERR_DEVICE,
                        "pack_weight: cannot allocate %.1f MiB for a BF16 weight: %s",
                        n * sizeof(__nv_bfloat16) / 1048576.0, cudaGetErrorString(e));
    }
    TRY(cuda_convert_bf16(c, p->w, W, n));
    /* other backends' streams read it from now on */
    CU(c, cudaStreamSynchronize(c->stream));
    return SM_OK;
}

static int cuda_pack_weight(backend *be, int kind, const float *W, int N, int K,
                            backend_packed **out, char *err)
{
    cuda_ctx *c = ctx_of(be);
    *out = NULL;
    if (kind != BACKEND_PACK_BF16)
        return with_err(c,
                        cu_error(c, SM_ERR_UNSUPPORTED,
                                 "pack_weight: the cuda backend packs bf16 weights only "
                                 "(kind %d asked)",
                                 kind),
                        err);
    if (N <= 0 || K <= 0 || !W)
        return with_err(c, cu_error(c, SM_ERR_INVALID, "pack_weight: a %d x %d weight", N, K), err);
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess)
        return with_err(c, cu_fail(c, e, "cudaSetDevice", __FILE__, __LINE__), err);
    cuda_packed *p = (cuda_packed *)calloc(1, sizeof *p);
    if (!p) return with_err(c, cu_error(c, SM_ERR_NOMEM, "pack_weight: out of host memory"), err);
    p->hdr.kind = BACKEND_PACK_BF16;
    p->hdr.free = cuda_packed_free;
    p->device = c->device;
    p->N = N;
    p->K = K;
    int rc = pack_bf16(c, W, N, K, p);
    if (rc) {
        cuda_packed_free(&p->hdr);
        return with_err(c, rc, err);
    }
    *out = &p->hdr;
    return SM_OK;
}

/* out(R,N) = in(R,K) · Wᵀ + b: the input rounded to BF16 into scratch, one
 * BF16 x BF16 -> FP32 product with the packed weight, then the bias. */
static int cuda_linear_packed(backend *be, float *out, const float *in, const backend_packed *W,
                              const float *b, int R, int K, int N)
{
    ENTER(be);
    if (!W || W->free != cuda_packed_free || W->kind != BACKEND_PACK_BF16)
        return cu_error(c, SM_ERR_INVALID,
                        "linear_packed: the weight was not packed by the cuda backend");
    const cuda_packed *p = (const cuda_packed *)W;
    if (p->N != N || p->K != K || R < 0)
        return cu_error(c, SM_ERR_INVALID,
                        "linear_packed: a %d x %d weight used as %d x %d (%d rows)", p->N, p->K, N,
                        K, R);
    if (p->device != c->device)
        return cu_error(c, SM_ERR_INVALID,
                        "linear_packed: a weight packed on cuda:%d used on cuda:%d", p->device,
                        c->device);
    if (R == 0) return SM_OK;
    gemm_plan pl;
    if (gemm_plan_make(0, 1, R, N, K, K, 0, K, 0, N, 0, 1, &pl))
        return cu_error(c, SM_ERR_INVALID, "linear_packed: invalid shape %d x %d x %d", R, K, N);
    const void *a;
    TRY(cuda_to_bf16(c, &c->bf16_a, in, pl.extent_a, &a));
    TRY(cuda_gemm_typed(c, &pl, 1.0f, a, 0, p->w, 0, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0.0f, out, N,
                        0, 1));
    return cuda_add_bias(c, out, b, R, N);
}

/* BF16 in bf16; else the weights as they are (int8_ok is the CPU's). */
static int cuda_linear_pack_kind(const backend *be, int int8_ok)
{
    (void)int8_ok;
    return ctx_of(be)->precision == PREC_BF16 ? BACKEND_PACK_BF16 : 0;
}

void cuda_init_packed_ops(backend *be)
{
    be->pack_weight = cuda_pack_weight;
    be->linear_packed = cuda_linear_packed;
    be->linear_pack_kind = cuda_linear_pack_kind;
}

/* cuda_ctx.h: state and helpers shared by the CUDA backend's files
 * (backend_cuda.cu: device, memory, matrix products, the device slots and
 * the two exports; kernels_infer.cu: the forward ops; kernels_train.cu: the
 * training ops).
 *
 * Error rule: every CUDA and cuBLAS call is checked, every kernel launch is
 * followed by cudaGetLastError; a failure writes one line into the
 * backend's err (its last_error slot) and the op returns
 * SM_ERR_DEVICE (SM_ERR_NOMEM for memory). Setting SENTIMENT_CUDA_SYNC=1
 * also synchronises after every launch, so an asynchronous fault is
 * reported by the op that caused it.
 */
#ifndef SM_CUDA_BACKEND_H
#define SM_CUDA_BACKEND_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "core/backend.h"
#include "core/errors.h"
#include "gpu/gemm_plan.h"

#define CUDA_CTX_MAGIC 0x43554441u /* "CUDA" */

enum cuda_precision { PREC_FP32 = 0, PREC_TF32, PREC_BF16, PREC_BF16_FAST };

/* A device scratch buffer that grows on demand (never shrinks). */
typedef struct growbuf {
    void *p;
    size_t bytes;
} growbuf;

typedef struct cuda_ctx {
    unsigned magic;
    int device;
    int precision;       /* enum cuda_precision */
    int sync_each_op;    /* SENTIMENT_CUDA_SYNC=1 */
    cudaStream_t stream; /* every op of this backend runs on it */
    cublasHandle_t blas; /* bound to stream */
    char name[256];      /* "NVIDIA H200" */
    int cc_major, cc_minor, sm_count;
    /* pinned staging for uploads and downloads: two buffers used in turn;
     * stage_done[i] is recorded after the copy that reads stage[i] */
    void *stage[2];
    size_t stage_bytes;
    cudaEvent_t stage_done[2];
    int stage_next;
    /* device scratch */
    growbuf bf16_a, bf16_b; /* BF16 copies of GEMM operands */
    growbuf attn;           /* per-head copies of q, k, v, dO, ... */
    growbuf colsum;         /* column-sum partials */
    growbuf seg;            /* embedding gradient partials (a float per token and channel) */
    growbuf sort_keys;      /* embedding gradient sort keys (row << 32 | token) */
    double *sumsq_partial;  /* SUMSQ_BLOCKS doubles */
    char err[SM_ERR_MAX];
} cuda_ctx;

#define SUMSQ_BLOCKS 256

static inline cuda_ctx *ctx_of(const backend *be)
{
    return (cuda_ctx *)be->ctx;
}

/* Records a message in c->err and returns code. */
int cu_error(cuda_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A failed CUDA call: records it (with memory figures for allocation
 * failures) and returns SM_ERR_DEVICE or SM_ERR_NOMEM. */
int cu_fail(cuda_ctx *c, cudaError_t e, const char *what, const char *file, int line);
int blas_fail(cuda_ctx *c, cublasStatus_t s, const char *what, const char *file, int line);
/* After a kernel launch: cudaGetLastError, and with sync_each_op a stream
 * synchronisation. */
int cu_after_launch(cuda_ctx *c, const char *what, const char *file, int line);
/* Makes g at least `bytes` long (contents not kept). */
int growbuf_reserve(cuda_ctx *c, growbuf *g, size_t bytes, const char *what);
void growbuf_release(growbuf *g);

#define CU(c, call)                                                                \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) return cu_fail((c), e_, #call, __FILE__, __LINE__); \
    } while (0)
#define BLAS(c, call)                                                                          \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) return blas_fail((c), s_, #call, __FILE__, __LINE__); \
    } while (0)
#define LAUNCHED(c, what) TRY(cu_after_launch((c), (what), __FILE__, __LINE__))
/* A helper's failure (its message already in c->err) is passed up with
 * errors.h's TRY. */
/* First line of every op: the context, and this thread on its device. */
#define ENTER(be)             \
    cuda_ctx *c = ctx_of(be); \
    CU(c, cudaSetDevice(c->device))

/* Blocks for a grid-stride loop over n items (n > 0). */
static inline unsigned grid_for(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return b > (1u << 20) ? (1u << 20) : (unsigned)b;
}

/* Host memory to and from the device through the pinned staging buffers
 * (stage_upload returns once the host memory may be reused;
 * stage_download once the data is in dst). */
int stage_upload(cuda_ctx *c, void *dst, const void *src, size_t bytes);
int stage_download(cuda_ctx *c, void *dst, const void *src, size_t bytes);

/* C(M,N) = alpha op(A) op(B) + beta C for `batch` matrices (backend.h
 * conventions, row-major) in the backend's precision. */
int cuda_gemm(cuda_ctx *c, int transA, int transB, int M, int N, int K, float alpha, const float *A,
              int lda, long long strideA, const float *B, int ldb, long long strideB, float beta,
              float *C, int ldc, long long strideC, int batch);

/* The same product with operands already in ab_type (CUDA_R_32F or
 * CUDA_R_16BF) and the given compute type: the cuBLAS call(s) for plan pl
 * (gemm_plan.h), batches split as cuBLAS needs. */
int cuda_gemm_typed(cuda_ctx *c, const gemm_plan *pl, float alpha, const void *A, long long strideA,
                    const void *B, long long strideB, cudaDataType_t ab_type,
                    cublasComputeType_t compute, float beta, float *C, int ldc, long long strideC,
                    int batch);
/* dst(n) = src rounded to BF16 (nearest even), queued on the stream. */
int cuda_convert_bf16(cuda_ctx *c, __nv_bfloat16 *dst, const float *src, size_t n);
/* The same into scratch g (grown to fit); *out = g's memory. */
int cuda_to_bf16(cuda_ctx *c, growbuf *g, const float *src, size_t n, const void **out);
/* out(R,N) += b broadcast over rows (b NULL: nothing). */
int cuda_add_bias(cuda_ctx *c, float *out, const float *b, int R, int N);
/* Launchers shared between the forward and training files
 * (kernels_infer.cu). lengths may be NULL (no masking). */
int launch_split_qkv(cuda_ctx *c, float *q, float *k, float *v, const float *qkv, int B, int T,
                     int H, int d);
int launch_split_heads(cuda_ctx *c, float *out, const float *in, const int *lengths, int B, int T,
                       int H, int d);
int launch_merge_heads(cuda_ctx *c, float *out, const float *in, const int *lengths, int B, int T,
                       int H, int d);
int launch_softmax_masked(cuda_ctx *c, float *att, const int *lengths, int B, int H, int T,
                          float scale, int zero_pad_rows);
int launch_dropout(cuda_ctx *c, float *out, const float *in, size_t n, float p,
                   unsigned long long key);

void cuda_init_infer_ops(backend *be);
void cuda_init_train_ops(backend *be);
/* pack_weight (BF16), linear_packed, linear_pack_kind: linear_packed.cu */
void cuda_init_packed_ops(backend *be);

#endif

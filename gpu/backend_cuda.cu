/* backend_cuda.cu: the CUDA backend's device handling, memory, matrix
 * products (cuBLAS) and the functions the plugin exports (sentiment_cuda.h).
 *
 * One backend = one GPU, one stream, one cuBLAS handle bound to that stream,
 * two pinned staging buffers and a few scratch buffers that grow on demand.
 * Device memory from any backend on the same GPU is usable by every other
 * (they share the device's primary context), so model weights uploaded once
 * serve every connection. A backend is used by one thread at a time; each op
 * first makes its device current on the calling thread.
 *
 * Matrix products follow gemm_plan.h: the row-major product of backend.h is
 * the column-major cuBLAS call with the operands swapped. Precision:
 *   fp32       cublasGemmEx, CUBLAS_COMPUTE_32F (no TF32): the reference mode
 *   tf32       the same with CUBLAS_COMPUTE_32F_FAST_TF32
 *   bf16       operands rounded to BF16 by a kernel into scratch, then
 *              BF16 x BF16 -> FP32 with FP32 accumulation
 *   bf16-fast  FP32 operands, CUBLAS_COMPUTE_32F_FAST_16BF
 */
#define SM_CUDA_PLUGIN_BUILD 1

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_ctx.h"
#include "gpu/forward_scratch.h"
#include "gpu/gemm_plan.h"
#include "gpu/kernel_util.cuh"
#include "gpu/sentiment_cuda.h"

/* ---- errors ---------------------------------------------------------------- */

static void put_err(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_err(char *err, const char *fmt, ...)
{
    if (!err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, SM_ERR_MAX, fmt, ap);
    va_end(ap);
}

int cu_error(cuda_ctx *c, int code, const char *fmt, ...)
{
    char msg[SM_ERR_MAX - 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, sizeof c->err, "cuda:%d: %s", c->device, msg);
    return code;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cu_fail(cuda_ctx *c, cudaError_t e, const char *what, const char *file, int line)
{
    int code = e == cudaErrorMemoryAllocation ? SM_ERR_NOMEM : SM_ERR_DEVICE;
    if (e == cudaErrorMemoryAllocation) {
        size_t fr = 0, tot = 0;
        (void)cudaGetLastError();
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) (void)cudaGetLastError();
        return cu_error(c, code, "%s: out of GPU memory (free %.1f MiB of %.1f MiB) at %s:%d", what,
                        fr / 1048576.0, tot / 1048576.0, base_name(file), line);
    }
    (void)cudaGetLastError(); /* clears a non-sticky error */
    return cu_error(c, code, "%s failed: %s (%s) at %s:%d", what, cudaGetErrorString(e),
                    cudaGetErrorName(e), base_name(file), line);
}

int blas_fail(cuda_ctx *c, cublasStatus_t s, const char *what, const char *file, int line)
{
    int code = s == CUBLAS_STATUS_ALLOC_FAILED ? SM_ERR_NOMEM : SM_ERR_DEVICE;
    return cu_error(c, code, "%s failed: %s (%s) at %s:%d", what, cublasGetStatusString(s),
                    cublasGetStatusName(s), base_name(file), line);
}

int cu_after_launch(cuda_ctx *c, const char *what, const char *file, int line)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cu_fail(c, e, what, file, line);
    if (c->sync_each_op) {
        e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) return cu_fail(c, e, what, file, line);
    }
    return SM_OK;
}

/* ---- scratch ----------------------------------------------------------------- */

int growbuf_reserve(cuda_ctx *c, growbuf *g, size_t bytes, const char *what)
{
    if (g->bytes >= bytes) return SM_OK;
    /* the old buffer may still be read by queued work */
    CU(c, cudaStreamSynchronize(c->stream));
    if (g->p) CU(c, cudaFree(g->p));
    g->p = NULL;
    g->bytes = 0;
    size_t want = (bytes + bytes / 4 + 255) & ~(size_t)255;
    if (cudaMalloc(&g->p, want) != cudaSuccess) {
        g->p = NULL;
        (void)cudaGetLastError();
        want = (bytes + 255) & ~(size_t)255; /* no headroom, then */
        if (cudaMalloc(&g->p, want) != cudaSuccess) {
            size_t fr = 0, tot = 0;
            g->p = NULL;
            (void)cudaGetLastError();
            if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) (void)cudaGetLastError();
            return cu_error(c, SM_ERR_NOMEM,
                            "cannot allocate %.1f MiB of scratch for %s: out of memory "
                            "(free %.1f MiB of %.1f MiB)",
                            bytes / 1048576.0, what, fr / 1048576.0, tot / 1048576.0);
        }
    }
    g->bytes = want;
    return SM_OK;
}

void growbuf_release(growbuf *g)
{
    if (g->p) (void)cudaFree(g->p);
    g->p = NULL;
    g->bytes = 0;
}

/* ---- memory ops ---------------------------------------------------------------- */

static void *cuda_alloc(backend *be, size_t bytes)
{
    cuda_ctx *c = ctx_of(be);
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) {
        cu_fail(c, e, "cudaSetDevice", __FILE__, __LINE__);
        return NULL;
    }
    /* cudaMalloc aligns every allocation to 256 bytes itself; the exact
     * size lets a memory checker (compute-sanitizer, the emulator's
     * AddressSanitizer build) see a read past a tensor's end */
    void *p = NULL;
    e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        (void)cudaGetLastError();
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) (void)cudaGetLastError();
        cu_error(c, e == cudaErrorMemoryAllocation ? SM_ERR_NOMEM : SM_ERR_DEVICE,
                 "cannot allocate %.1f MiB: %s (free %.1f MiB of %.1f MiB)", bytes / 1048576.0,
                 cudaGetErrorString(e), fr / 1048576.0, tot / 1048576.0);
        return NULL;
    }
    return p;
}

static void cuda_free(backend *be, void *p)
{
    if (!p) return;
    cuda_ctx *c = ctx_of(be);
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaFree(p);
    if (e != cudaSuccess) cu_fail(c, e, "cudaFree", __FILE__, __LINE__);
}

/* Host to device through the pinned buffers, in chunks: the host memory may
 * be reused as soon as this returns; the copy itself is queued on the
 * stream, ahead of the ops that read it. */
int stage_upload(cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    const char *s = (const char *)src;
    char *d = (char *)dst;
    for (size_t off = 0; off < bytes;) {
        size_t len = bytes - off < c->stage_bytes ? bytes - off : c->stage_bytes;
        int i = c->stage_next;
        c->stage_next ^= 1;
        CU(c, cudaEventSynchronize(c->stage_done[i]));
        memcpy(c->stage[i], s + off, len);
        CU(c, cudaMemcpyAsync(d + off, c->stage[i], len, cudaMemcpyHostToDevice, c->stream));
        CU(c, cudaEventRecord(c->stage_done[i], c->stream));
        off += len;
    }
    return SM_OK;
}

/* Device to host: waits for the stream, so the data is there on return. */
int stage_download(cuda_ctx *c, void *dst, const void *src, size_t bytes)
{
    const char *s = (const char *)src;
    char *d = (char *)dst;
    for (size_t off = 0; off < bytes;) {
        size_t len = bytes - off < c->stage_bytes ? bytes - off : c->stage_bytes;
        CU(c, cudaMemcpyAsync(c->stage[0], s + off, len, cudaMemcpyDeviceToHost, c->stream));
        CU(c, cudaStreamSynchronize(c->stream));
        memcpy(d + off, c->stage[0], len);
        off += len;
    }
    return SM_OK;
}

static int cuda_upload(backend *be, void *dst, const void *src, size_t bytes)
{
    ENTER(be);
    return stage_upload(c, dst, src, bytes);
}

static int cuda_download(backend *be, void *dst, const void *src, size_t bytes)
{
    ENTER(be);
    return stage_download(c, dst, src, bytes);
}

static int cuda_zero(backend *be, void *p, size_t bytes)
{
    ENTER(be);
    if (bytes) CU(c, cudaMemsetAsync(p, 0, bytes, c->stream));
    return SM_OK;
}

static int cuda_synchronize(backend *be)
{
    ENTER(be);
    CU(c, cudaStreamSynchronize(c->stream));
    return SM_OK;
}

/* ---- matrix products ----------------------------------------------------------- */

__global__ void k_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

int cuda_convert_bf16(cuda_ctx *c, __nv_bfloat16 *dst, const float *src, size_t n)
{
    if (!n) return SM_OK;
    LAUNCH_KERNEL(k_to_bf16, grid_for(n, 256), 256, 0, c->stream, dst, src, n);
    LAUNCHED(c, "k_to_bf16");
    return SM_OK;
}

int cuda_to_bf16(cuda_ctx *c, growbuf *g, const float *src, size_t n, const void **out)
{
    TRY(growbuf_reserve(c, g, n * sizeof(__nv_bfloat16), "BF16 matrix operands"));
    TRY(cuda_convert_bf16(c, (__nv_bfloat16 *)g->p, src, n));
    *out = g->p;
    return SM_OK;
}

/* cuBLAS rejects a batch count above 65535 on some versions: split. */
#define MAX_BATCH_PER_CALL 65535

int cuda_gemm_typed(cuda_ctx *c, const gemm_plan *pl, float alpha, const void *A, long long strideA,
                    const void *B, long long strideB, cudaDataType_t ab_type,
                    cublasComputeType_t compute, float beta, float *C, int ldc, long long strideC,
                    int batch)
{
    size_t esz = ab_type == CUDA_R_16BF ? sizeof(__nv_bfloat16) : sizeof(float);
    cublasOperation_t op1 = pl->trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op2 = pl->trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* first operand = B, second = A (gemm_plan.h) */
    const char *first = (const char *)B, *second = (const char *)A;
    if (batch == 1) {
        BLAS(c, cublasGemmEx(c->blas, op1, op2, pl->m, pl->n, pl->k, &alpha, first, ab_type,
                             pl->ld_first, second, ab_type, pl->ld_second, &beta, C, CUDA_R_32F,
                             ldc, compute, CUBLAS_GEMM_DEFAULT));
        return c->sync_each_op ? cu_after_launch(c, "cublasGemmEx", __FILE__, __LINE__) : SM_OK;
    }
    for (int done = 0; done < batch;) {
        int nb = batch - done < MAX_BATCH_PER_CALL ? batch - done : MAX_BATCH_PER_CALL;
        BLAS(c, cublasGemmStridedBatchedEx(c->blas, op1, op2, pl->m, pl->n, pl->k, &alpha,
                                           first + (size_t)done * (size_t)strideB * esz, ab_type,
                                           pl->ld_first, pl->stride_first,
                                           second + (size_t)done * (size_t)strideA * esz, ab_type,
                                           pl->ld_second, pl->stride_second, &beta,
                                           C + (size_t)done * (size_t)strideC, CUDA_R_32F, ldc,
                                           strideC, nb, compute, CUBLAS_GEMM_DEFAULT));
        done += nb;
    }
    return c->sync_each_op ? cu_after_launch(c, "cublasGemmStridedBatchedEx", __FILE__, __LINE__)
                           : SM_OK;
}

int cuda_gemm(cuda_ctx *c, int transA, int transB, int M, int N, int K, float alpha, const float *A,
              int lda, long long strideA, const float *B, int ldb, long long strideB, float beta,
              float *C, int ldc, long long strideC, int batch)
{
    gemm_plan pl;
    if (gemm_plan_make(transA, transB, M, N, K, lda, strideA, ldb, strideB, ldc, strideC, batch,
                       &pl))
        return cu_error(c, SM_ERR_INVALID,
                        "matmul: invalid arguments (transA %d transB %d M %d N %d K %d lda %d "
                        "ldb %d ldc %d batch %d)",
                        transA, transB, M, N, K, lda, ldb, ldc, batch);
    if (M == 0 || N == 0 || batch == 0) return SM_OK;

    cudaDataType_t ab_type = CUDA_R_32F;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    const void *a = A, *b = B;
    switch (c->precision) {
    case PREC_TF32: compute = CUBLAS_COMPUTE_32F_FAST_TF32; break;
    case PREC_BF16_FAST: compute = CUBLAS_COMPUTE_32F_FAST_16BF; break;
    case PREC_BF16:
        if (K > 0) {
            TRY(cuda_to_bf16(c, &c->bf16_a, A, pl.extent_a, &a));
            TRY(cuda_to_bf16(c, &c->bf16_b, B, pl.extent_b, &b));
        }
        ab_type = CUDA_R_16BF;
        break;
    default: break;
    }
    return cuda_gemm_typed(c, &pl, alpha, a, strideA, b, strideB, ab_type, compute, beta, C, ldc,
                           strideC, batch);
}

static int cuda_matmul(backend *be, int transA, int transB, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc)
{
    ENTER(be);
    return cuda_gemm(c, transA, transB, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

static int cuda_matmul_batched(backend *be, int transA, int transB, int M, int N, int K,
                               float alpha, const float *A, int lda, long long strideA,
                               const float *B, int ldb, long long strideB, float beta, float *C,
                               int ldc, long long strideC, int batch)
{
    ENTER(be);
    return cuda_gemm(c, transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C,
                     ldc, strideC, batch);
}

/* out(R,N) += b(N) broadcast over rows */
__global__ void k_add_bias(float *out, const float *b, size_t R, int N)
{
    size_t n = R * (size_t)N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += b[i % (size_t)N];
}

int cuda_add_bias(cuda_ctx *c, float *out, const float *b, int R, int N)
{
    size_t n = (size_t)R * N;
    if (!b || !n) return SM_OK;
    LAUNCH_KERNEL(k_add_bias, grid_for(n, 256), 256, 0, c->stream, out, b, (size_t)R, N);
    LAUNCHED(c, "k_add_bias");
    return SM_OK;
}

static int cuda_linear(backend *be, float *out, const float *in, const float *W, const float *b,
                       int R, int K, int N)
{
    ENTER(be);
    /* out(R,N) = in(R,K) · W(N,K)ᵀ, then + b */
    TRY(cuda_gemm(c, 0, 1, R, N, K, 1.0f, in, K, 0, W, K, 0, 0.0f, out, N, 0, 1));
    return cuda_add_bias(c, out, b, R, N);
}

/* ---- create / destroy ------------------------------------------------------------ */

static void cuda_destroy(backend *be)
{
    if (!be) return;
    cuda_ctx *c = ctx_of(be);
    if (c) {
        if (cudaSetDevice(c->device) != cudaSuccess) (void)cudaGetLastError();
        if (c->stream && cudaStreamSynchronize(c->stream) != cudaSuccess) (void)cudaGetLastError();
        growbuf *bufs[] = {&c->bf16_a, &c->bf16_b, &c->attn, &c->colsum, &c->seg, &c->sort_keys};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) growbuf_release(bufs[i]);
        if (c->sumsq_partial) (void)cudaFree(c->sumsq_partial);
        for (int i = 0; i < 2; i++) {
            if (c->stage[i]) (void)cudaFreeHost(c->stage[i]);
            if (c->stage_done[i]) (void)cudaEventDestroy(c->stage_done[i]);
        }
        if (c->blas) (void)cublasDestroy(c->blas);
        if (c->stream) (void)cudaStreamDestroy(c->stream);
        (void)cudaGetLastError();
        c->magic = 0;
        free(c);
    }
    free(be);
}

static const struct {
    const char *name;
    int prec;
} k_precisions[] = {
    {"fp32", PREC_FP32},
    {"tf32", PREC_TF32},
    {"bf16", PREC_BF16},
    {"bf16-fast", PREC_BF16_FAST},
};

static const char *precision_name(int p)
{
    for (size_t i = 0; i < sizeof k_precisions / sizeof *k_precisions; i++)
        if (k_precisions[i].prec == p) return k_precisions[i].name;
    return "?";
}

static int precision_parse(const char *s)
{
    if (!s) return -1;
    for (size_t i = 0; i < sizeof k_precisions / sizeof *k_precisions; i++)
        if (!strcmp(s, k_precisions[i].name)) return k_precisions[i].prec;
    return -1;
}

static void describe(const cuda_ctx *c, char *desc, size_t cap)
{
    if (desc && cap)
        snprintf(desc, cap, "cuda:%d %s, %s", c->device, c->name, precision_name(c->precision));
}

/* Why there is no device, as one line starting "no CUDA device: ". */
static int count_devices(int *n, char *why)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    *n = 0;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (e == cudaErrorInsufficientDriver)
            put_err(why,
                    "no CUDA device: the NVIDIA driver is missing or older than this "
                    "build's CUDA %d.%d runtime needs (%s)",
                    CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, cudaGetErrorString(e));
        else if (e == cudaErrorNoDevice)
            put_err(why, "no CUDA device: no CUDA-capable GPU is visible (%s)",
                    cudaGetErrorString(e));
        else
            put_err(why, "no CUDA device: cudaGetDeviceCount failed: %s (%s)",
                    cudaGetErrorString(e), cudaGetErrorName(e));
        return SM_ERR_DEVICE;
    }
    if (count < 1) {
        put_err(why, "no CUDA device: the driver reports no GPU");
        return SM_ERR_DEVICE;
    }
    *n = count;
    return SM_OK;
}

extern "C" int sentiment_cuda_device_count(int *count, char *err)
{
    int n = 0;
    int rc = count_devices(&n, err);
    if (count) *count = n;
    return rc;
}

extern "C" int sentiment_cuda_versions(int *driver, int *runtime, int *cublas, char *err)
{
    int d = 0, r = 0, major = 0, minor = 0, patch = 0;
    cudaError_t e = cudaDriverGetVersion(&d);
    if (e == cudaSuccess) e = cudaRuntimeGetVersion(&r);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        put_err(err, "cannot read the CUDA versions: %s (%s)", cudaGetErrorString(e),
                cudaGetErrorName(e));
        return SM_ERR_DEVICE;
    }
    if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
        put_err(err, "cannot read the cuBLAS version");
        return SM_ERR_DEVICE;
    }
    if (driver) *driver = d;
    if (runtime) *runtime = r;
    if (cublas) *cublas = major * 10000 + minor * 100 + patch;
    return SM_OK;
}

/* Finishes creating c; on failure the caller destroys the backend. */
static int setup(cuda_ctx *c, char *err)
{
    cudaDeviceProp prop;
    cudaError_t e;
#define SETUP_CU(call)                                          \
    do {                                                        \
        if ((e = (call)) != cudaSuccess) {                      \
            int rc_ = cu_fail(c, e, #call, __FILE__, __LINE__); \
            put_err(err, "%s", c->err);                         \
            return rc_;                                         \
        }                                                       \
    } while (0)
    SETUP_CU(cudaSetDevice(c->device));
    SETUP_CU(cudaGetDeviceProperties(&prop, c->device));
    snprintf(c->name, sizeof c->name, "%s", prop.name);
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    c->sm_count = prop.multiProcessorCount;
    if (prop.major < 8) {
        put_err(err,
                "cuda:%d %s has compute capability %d.%d; the CUDA backend needs 8.0 "
                "(Ampere) or newer",
                c->device, c->name, prop.major, prop.minor);
        return SM_ERR_UNSUPPORTED;
    }
    SETUP_CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        blas_fail(c, s, "cublasCreate", __FILE__, __LINE__);
        put_err(err, "%s", c->err);
        return SM_ERR_DEVICE;
    }
    if ((s = cublasSetStream(c->blas, c->stream)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
        blas_fail(c, s, "cublasSetStream/cublasSetMathMode", __FILE__, __LINE__);
        put_err(err, "%s", c->err);
        return SM_ERR_DEVICE;
    }
    c->stage_bytes = (size_t)4 << 20;
    for (int i = 0; i < 2; i++) {
        SETUP_CU(cudaHostAlloc(&c->stage[i], c->stage_bytes, cudaHostAllocDefault));
        SETUP_CU(cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming));
    }
    SETUP_CU(cudaMalloc((void **)&c->sumsq_partial, SUMSQ_BLOCKS * sizeof(double)));
#undef SETUP_CU
    return SM_OK;
}

static void cuda_describe(const backend *be, char *desc, size_t cap);
static int cuda_set_precision(backend *be, const char *precision, char *err);
static int cuda_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes);
static const char *cuda_last_error(const backend *be);
static int cuda_gemm_tflops(backend *be, int M, int N, int K, int iters, double *tflops, char *err);

/* One stream is one queue of work: no lanes (backend.h). */
static int cuda_lanes(const backend *be)
{
    (void)be;
    return 1;
}

static size_t cuda_forward_scratch(const backend *be, int batch, int seq, int hidden, int ffn,
                                   int heads)
{
    (void)be;
    return cuda_forward_scratch_bytes(batch, seq, hidden, ffn, heads);
}

static int cuda_device_index(const backend *be)
{
    return ctx_of(be)->device;
}

static int cuda_lane_create(backend *be, backend **out, char *err)
{
    (void)be;
    *out = NULL;
    put_err(err, "lanes: the cuda backend has none");
    return SM_ERR_UNSUPPORTED;
}

extern "C" int sentiment_cuda_backend_create(int device, backend **out, char *desc, size_t desc_cap,
                                             char *err)
{
    int n = 0, rc;
    if (out) *out = NULL;
    if (desc && desc_cap) desc[0] = 0;
    if (!out) {
        put_err(err, "sentiment_cuda_backend_create: out is NULL");
        return SM_ERR_INVALID;
    }
    if (device < 0) {
        put_err(err, "cuda:%d: a device index is 0 or more", device);
        return SM_ERR_INVALID;
    }
    if ((rc = count_devices(&n, err))) return rc;
    if (device >= n) {
        if (n == 1)
            put_err(err, "cuda:%d does not exist: this machine has 1 CUDA device (cuda:0)", device);
        else
            put_err(err,
                    "cuda:%d does not exist: this machine has %d CUDA devices (cuda:0 .. cuda:%d)",
                    device, n, n - 1);
        return SM_ERR_INVALID;
    }
    backend *be = (backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        put_err(err, "out of memory creating the CUDA backend");
        return SM_ERR_NOMEM;
    }
    c->magic = CUDA_CTX_MAGIC;
    c->device = device;
    c->precision = PREC_BF16;
    const char *env = getenv("SENTIMENT_CUDA_PRECISION");
    if (env && precision_parse(env) >= 0) c->precision = precision_parse(env);
    env = getenv("SENTIMENT_CUDA_SYNC");
    c->sync_each_op = env && env[0] == '1';
    be->name = "cuda";
    be->ctx = c;
    be->destroy = cuda_destroy;
    if ((rc = setup(c, err))) {
        cuda_destroy(be);
        return rc;
    }
    be->lanes = cuda_lanes;
    be->lane_create = cuda_lane_create;
    be->forward_scratch_bytes = cuda_forward_scratch;
    be->device_index = cuda_device_index;
    be->describe = cuda_describe;
    be->set_precision = cuda_set_precision;
    be->mem_info = cuda_mem_info;
    be->last_error = cuda_last_error;
    be->gemm_tflops = cuda_gemm_tflops;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->matmul = cuda_matmul;
    be->matmul_batched = cuda_matmul_batched;
    be->linear = cuda_linear;
    be->synchronize = cuda_synchronize;
    be->zero = cuda_zero;
    cuda_init_infer_ops(be);
    cuda_init_train_ops(be);
    cuda_init_packed_ops(be);
    describe(c, desc, desc_cap);
    *out = be;
    return SM_OK;
}

/* ---- the device slots (backend.h) ----------------------------------------------------- */

static void cuda_describe(const backend *be, char *desc, size_t cap)
{
    describe(ctx_of(be), desc, cap);
}

/* "auto" is the default: $SENTIMENT_CUDA_PRECISION when it names one, else
 * bf16 (runtime/device.c passes auto through). */
static int cuda_set_precision(backend *be, const char *precision, char *err)
{
    const char *name = precision;
    if (name && !strcmp(name, "auto")) {
        const char *env = getenv("SENTIMENT_CUDA_PRECISION");
        name = env && precision_parse(env) >= 0 ? env : "bf16";
    }
    int p = precision_parse(name);
    if (p < 0) {
        put_err(err, "precision '%s' is not one of fp32, tf32, bf16, bf16-fast",
                precision ? precision : "(null)");
        return SM_ERR_UNSUPPORTED;
    }
    ctx_of(be)->precision = p;
    return SM_OK;
}

static int cuda_mem_info(backend *be, size_t *free_bytes, size_t *total_bytes)
{
    cuda_ctx *c = ctx_of(be);
    size_t fr = 0, tot = 0;
    *free_bytes = *total_bytes = 0;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaMemGetInfo(&fr, &tot);
    if (e != cudaSuccess) return cu_fail(c, e, "cudaMemGetInfo", __FILE__, __LINE__);
    *free_bytes = fr;
    *total_bytes = tot;
    return SM_OK;
}

static const char *cuda_last_error(const backend *be)
{
    return ctx_of(be)->err;
}

/* ---- the benchmark's yardstick -------------------------------------------------------- */

template <typename T> __global__ void k_fill_hash(T *x, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = (T)(((float)(h & 0xFFFF) / 65536.0f - 0.5f) * 0.1f);
    }
}

static int gemm_rate(cuda_ctx *c, int M, int N, int K, int iters, double *tflops)
{
    int bf16 = c->precision == PREC_BF16;
    size_t esz = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    void *A = NULL, *B = NULL;
    float *C = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    int rc = SM_OK;
    cudaError_t e;
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    float alpha = 1.0f, beta = 0.0f, ms = 0.0f;
    cudaDataType_t ty = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t compute = c->precision == PREC_TF32        ? CUBLAS_COMPUTE_32F_FAST_TF32
                                  : c->precision == PREC_BF16_FAST ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                                   : CUBLAS_COMPUTE_32F;
#define RATE_CU(call)                                      \
    do {                                                   \
        if ((e = (call)) != cudaSuccess) {                 \
            rc = cu_fail(c, e, #call, __FILE__, __LINE__); \
            goto end;                                      \
        }                                                  \
    } while (0)
    RATE_CU(cudaMalloc(&A, na * esz));
    RATE_CU(cudaMalloc(&B, nb * esz));
    RATE_CU(cudaMalloc((void **)&C, nc * sizeof(float)));
    if (bf16) {
        LAUNCH_KERNEL(k_fill_hash<__nv_bfloat16>, grid_for(na, 256), 256, 0, c->stream,
                      (__nv_bfloat16 *)A, na, 1u);
        LAUNCH_KERNEL(k_fill_hash<__nv_bfloat16>, grid_for(nb, 256), 256, 0, c->stream,
                      (__nv_bfloat16 *)B, nb, 2u);
    } else {
        LAUNCH_KERNEL(k_fill_hash<float>, grid_for(na, 256), 256, 0, c->stream, (float *)A, na, 1u);
        LAUNCH_KERNEL(k_fill_hash<float>, grid_for(nb, 256), 256, 0, c->stream, (float *)B, nb, 2u);
    }
    RATE_CU(cudaGetLastError());
    RATE_CU(cudaEventCreate(&t0));
    RATE_CU(cudaEventCreate(&t1));
    /* C(M,N) = A(M,K) · B(N,K)ᵀ row-major: column-major m = N, n = M, B transposed */
    for (int it = -2; it < iters; it++) {
        if (it == 0) RATE_CU(cudaEventRecord(t0, c->stream));
        s = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, ty, K, A, ty, K,
                         &beta, C, CUDA_R_32F, N, compute, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            rc = blas_fail(c, s, "cublasGemmEx", __FILE__, __LINE__);
            goto end;
        }
    }
    RATE_CU(cudaEventRecord(t1, c->stream));
    RATE_CU(cudaEventSynchronize(t1));
    RATE_CU(cudaEventElapsedTime(&ms, t0, t1));
    *tflops = ms > 0 ? 2.0 * M * N * (double)K * iters / (ms * 1e-3) / 1e12 : 0.0;
end:
#undef RATE_CU
    if (t0) (void)cudaEventDestroy(t0);
    if (t1) (void)cudaEventDestroy(t1);
    if (cudaStreamSynchronize(c->stream) != cudaSuccess) (void)cudaGetLastError();
    if (A) (void)cudaFree(A);
    if (B) (void)cudaFree(B);
    if (C) (void)cudaFree(C);
    return rc;
}

static int cuda_gemm_tflops(backend *be, int M, int N, int K, int iters, double *tflops, char *err)
{
    if (M < 1 || N < 1 || K < 1 || iters < 1 || !tflops) {
        put_err(err, "gemm_tflops: M, N, K and iters must be positive");
        return SM_ERR_INVALID;
    }
    cuda_ctx *c = ctx_of(be);
    if (cudaSetDevice(c->device) != cudaSuccess) (void)cudaGetLastError();
    int rc = gemm_rate(c, M, N, K, iters, tflops);
    if (rc) put_err(err, "%s", c->err);
    return rc;
}

/* cublas_v2.h (tests/gpu/cuda_emu): the cuBLAS calls the plugin makes, run by
 * the CUDA emulator (cuda_runtime.h, emu.cpp) on the handle's stream,
 * column-major as cuBLAS defines them, with cuBLAS's argument checks
 * (m, n, k, batch >= 0; lda >= max(1, rows of op(A) as stored), ...) and
 * every operand range checked against the live device allocations. FP32
 * accumulation in k order; CUDA_R_16BF operands are read as BF16;
 * CUBLAS_COMPUTE_32F_FAST_16BF / _FAST_TF32 round FP32 operands to BF16 /
 * TF32 first. */
#ifndef SM_CUDA_EMU_CUBLAS_H
#define SM_CUDA_EMU_CUBLAS_H

#include "cuda_runtime.h"

typedef struct sm_emu_blas *cublasHandle_t;

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUDA_R_32F = 0,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

typedef enum {
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;

typedef enum libraryPropertyType_t { MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2 } libraryPropertyType;
/* the emulator calls itself cuBLAS 13.0.0 */
cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value);
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasGetVersion(cublasHandle_t h, int *version);
const char *cublasGetStatusString(cublasStatus_t s);
const char *cublasGetStatusName(cublasStatus_t s);

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long strideA, const void *B,
                                          cudaDataType_t bt, int ldb, long long strideB,
                                          const void *beta, void *C, cudaDataType_t ct, int ldc,
                                          long long strideC, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo);

#endif

/* sentiment_cuda.h: what the CUDA plugin (build/sentiment_cuda.so) exports.
 *
 * sentiment.so never links CUDA: it dlopens the plugin and looks these
 * symbols up with dlsym (runtime/device.c); the typedefs below are the types to
 * cast them to. Every function returns SM_OK (0) or an error code of
 * errors.h with one line in err (SM_ERR_MAX bytes; err may be NULL).
 *
 *   sentiment_cuda_backend_create(device, &be, desc, cap, err)
 *       A backend (backend.h) on GPU `device` with its own stream, cuBLAS
 *       handle and pinned staging buffers. desc gets what sentiment_device()
 *       shows: "cuda:0 NVIDIA H200, bf16". Errors: SM_ERR_DEVICE with a
 *       message starting "no CUDA device: " when the driver is missing or
 *       reports no GPU; SM_ERR_INVALID "cuda:N does not exist: ..." for an
 *       index out of range; SM_ERR_UNSUPPORTED for a GPU older than compute
 *       capability 8.0. The precision starts as $SENTIMENT_CUDA_PRECISION
 *       when that names one, else bf16. Destroy with be->destroy(be).
 *   sentiment_cuda_device_count(&n, err)
 *       SM_OK and n >= 1, or SM_ERR_DEVICE, n = 0 and the reason in err.
 *   sentiment_cuda_versions(&driver, &runtime, &cublas, err)
 *       The CUDA version the driver supports (cudaDriverGetVersion: 13000
 *       is 13.0; 0 without a driver), the runtime linked into the plugin
 *       (cudaRuntimeGetVersion) and the cuBLAS that was loaded (major *
 *       10000 + minor * 100 + patch). Needs no GPU; SM_ERR_DEVICE when a
 *       query fails. scripts/gpu-check.sh prints them first.
 * The precision (fp32, tf32, bf16, bf16-fast), the memory free, the last
 * error and the GEMM yardstick are slots of the backend itself
 * (set_precision, mem_info, last_error, gemm_tflops in backend.h):
 *       "fp32": exact FP32 GEMMs (the reference mode);
 *       "tf32": FP32 operands on TF32 tensor cores;
 *       "bf16": mixed precision: GEMM operands rounded to BF16, products
 *               accumulated and stored in FP32; everything else (LayerNorm,
 *               softmax, GELU, the loss, AdamW and its FP32 master weights)
 *               stays FP32. BF16 keeps FP32's exponent range, so training
 *               needs no loss scaling.
 *       "bf16-fast": the same products with FP32 operands converted inside
 *               cuBLAS (CUBLAS_COMPUTE_32F_FAST_16BF) instead of by a kernel.
 */
#ifndef SM_SENTIMENT_CUDA_H
#define SM_SENTIMENT_CUDA_H

#include <stddef.h>

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*sentiment_cuda_backend_create_fn)(int device, backend **out, char *desc,
                                                size_t desc_cap, char *err);
typedef int (*sentiment_cuda_device_count_fn)(int *count, char *err);
typedef int (*sentiment_cuda_versions_fn)(int *driver, int *runtime, int *cublas, char *err);

#ifdef SM_CUDA_PLUGIN_BUILD
#define SM_CUDA_EXPORT __attribute__((visibility("default")))
SM_CUDA_EXPORT int sentiment_cuda_backend_create(int device, backend **out, char *desc,
                                                 size_t desc_cap, char *err);
SM_CUDA_EXPORT int sentiment_cuda_device_count(int *count, char *err);
SM_CUDA_EXPORT int sentiment_cuda_versions(int *driver, int *runtime, int *cublas, char *err);
#endif

#ifdef __cplusplus
}
#endif

#endif

/* cuda_runtime.h (tests/gpu/cuda_emu): a CPU emulation of the part of the CUDA
 * runtime, of cuBLAS and of cuda_bf16.h that the plugin (gpu/) uses, so the
 * real gpu/ sources compile with g++ and run on the host
 * (build/tests/sentiment_cuda_emu.so, tested by build/tests/test_cuda_emu).
 *
 * What it models (tests/gpu/cuda_emu/emu.cpp has the details):
 *   - kernels run block by block; the threads of a block run as fibers that
 *     switch only at __syncthreads, __syncwarp and the warp shuffles, so a
 *     thread that exits while others wait at a barrier, barriers reached at
 *     different call sites, a shuffle whose mask names an inactive or exited
 *     lane, and deadlocks are reported as faults naming the kernel;
 *   - streams are deferred queues that run only at synchronisation points
 *     (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
 *     a blocking cudaMemcpy, cudaFree), so a missing synchronisation or a
 *     host buffer reused too early gives wrong data;
 *   - device memory is tracked: every copy, memset, GEMM operand and kernel
 *     pointer argument must lie inside one live allocation of the right
 *     kind; fresh memory is NaN; allocations have the exact size asked for
 *     (AddressSanitizer sees overreads) and, outside AddressSanitizer, NaN
 *     guard zones checked after every kernel (overwrites are faults);
 *   - GEMMs are column-major by cuBLAS's rules with its argument checks.
 * A fault prints "cuda-emu: FAULT ..." on stderr, counts, and makes every
 * later CUDA call fail (a sticky error, as a real device fault does).
 * What it cannot show: the real accumulation order of cuBLAS and of
 * parallel reductions, races between blocks or between threads that do not
 * synchronise (threads run in a fixed order), and speed.
 */
#ifndef SM_CUDA_EMU_RUNTIME_H
#define SM_CUDA_EMU_RUNTIME_H

#ifndef __cplusplus
#error "the CUDA emulator is C++: compile .cu files with g++ -x c++"
#endif

#ifndef SM_CUDA_EMU
#define SM_CUDA_EMU 1
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define CUDART_VERSION 13000

/* ---- the language ------------------------------------------------------------ */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
/* one copy per kernel, shared by the block's threads (blocks run one at a time) */
#define __shared__ static
#define __launch_bounds__(...)

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* Set by the emulator before each switch to a thread. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }

/* Barriers and shuffles: the call site (file, line) is part of the check. */
void sm_emu_syncthreads(const char *file, int line);
void sm_emu_syncwarp(unsigned mask, const char *file, int line);
/* kind: 0 xor, 1 down, 2 up, 3 idx; the value travels as 8 bytes */
uint64_t sm_emu_shfl(int kind, unsigned mask, uint64_t bits, int arg, int width, const char *file,
                     int line);

/* the compiler must not keep __shared__ values in registers across a barrier */
static inline void sm_emu_fence(void) { __asm__ __volatile__("" ::: "memory"); }
static inline unsigned sm_emu_mask_or_all(unsigned m = 0xffffffffu) { return m; }
#define __syncthreads() (sm_emu_syncthreads(__FILE__, __LINE__), sm_emu_fence())
#define __syncwarp(...) \
    (sm_emu_syncwarp(sm_emu_mask_or_all(__VA_ARGS__), __FILE__, __LINE__), sm_emu_fence())
static inline void __threadfence(void) { sm_emu_fence(); }
static inline void __threadfence_block(void) { sm_emu_fence(); }

template <typename T>
static inline T sm_emu_shfl_t(int kind, unsigned mask, T v, int arg, int width, const char *file,
                              int line)
{
    static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = sm_emu_shfl(kind, mask, bits, arg, width, file, line);
    T out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
#define __shfl_xor_sync(mask, v, lm, ...) sm_emu_shfl_t(0, (mask), (v), (lm), sm_emu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, d, ...) sm_emu_shfl_t(1, (mask), (v), (d), sm_emu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, d, ...) sm_emu_shfl_t(2, (mask), (v), (d), sm_emu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_sync(mask, v, src, ...) sm_emu_shfl_t(3, (mask), (v), (src), sm_emu_width(__VA_ARGS__), __FILE__, __LINE__)
static inline int sm_emu_width(int w = 32) { return w; }

/* Atomics: threads of the emulator never run at the same time. */
template <typename T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static inline T atomicSub(T *p, T v) { T o = *p; *p = o - v; return o; }
template <typename T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <typename T> static inline T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
template <typename T> static inline T atomicMin(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }
template <typename T> static inline T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }

/* ---- the runtime ----------------------------------------------------------------- */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef struct sm_emu_stream *cudaStream_t;
typedef struct sm_emu_event *cudaEvent_t;

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventBlockingSync 0x1
#define cudaEventDisableTiming 0x2
#define cudaHostAllocDefault 0x0

typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major, minor;
    int multiProcessorCount;
} cudaDeviceProp;

/* 13.0 for both; SENTIMENT_CUDA_EMU_DRIVER overrides the driver's (0: none) */
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

cudaError_t cudaMalloc(void **p, size_t bytes);
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s = 0);

/* ---- kernel launches (gpu/kernel_util.cuh's LAUNCH_KERNEL) ------------------------------ */

namespace sm_emu {
/* Queues a grid on stream s; body runs one thread (threadIdx etc. set). */
void launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
            std::function<void()> body, std::function<void()> check_args);
/* A fault unless p is NULL or inside a live device allocation. */
void check_kernel_pointer(const char *kernel, int index, const void *p);

template <typename T>
static inline void check_arg(const char *kernel, int index, const T &v)
{
    if constexpr (std::is_pointer<T>::value) check_kernel_pointer(kernel, index, (const void *)v);
    (void)kernel;
    (void)index;
    (void)v;
}

template <typename Tuple, size_t... I>
static inline void check_args(const char *kernel, const Tuple &t, std::index_sequence<I...>)
{
    (check_arg(kernel, (int)I, std::get<I>(t)), ...);
    (void)kernel;
    (void)t;
}
} // namespace sm_emu

template <typename... P, typename... A>
static inline void sm_emu_launch(const char *name, void (*k)(P...), dim3 grid, dim3 block,
                                 size_t smem, cudaStream_t s, A &&...args)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    std::tuple<typename std::decay<P>::type...> t(std::forward<A>(args)...);
    sm_emu::launch(
        name, grid, block, smem, s, [k, t]() { std::apply(k, t); },
        [name, t]() { sm_emu::check_args(name, t, std::index_sequence_for<P...>{}); });
}

/* Faults reported since the process started (tests read it). */
extern "C" int sentiment_cuda_emu_faults(void);
/* The first fault's message ("" when none). */
extern "C" const char *sentiment_cuda_emu_first_fault(void);
/* Forgets faults and the sticky error (tests that plant bugs on purpose). */
extern "C" void sentiment_cuda_emu_clear(void);

#endif

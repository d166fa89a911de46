/* selftest.cpp: the CUDA emulator (tests/gpu/cuda_emu) catches the bugs it is
 * there to catch (build/tests/test_cuda_emu_selftest, part of make test).
 *
 * Small kernels with a bug planted in each, launched through gpu/'s
 * LAUNCH_KERNEL, and for each the fault (or the wrong data) the emulator
 * must give:
 *   - a download read before the stream is synchronised: the data is not
 *     there (a missing cudaStreamSynchronize gives wrong data);
 *   - a pinned upload buffer overwritten before the copy ran: the device
 *     gets the new bytes (an early host-buffer reuse gives wrong data);
 *   - a missing __syncthreads between a store to shared memory and another
 *     thread's read of it: wrong data in thread order and in reverse order
 *     (SENTIMENT_CUDA_EMU_ORDER=reverse);
 *   - barriers at two call sites (divergent __syncthreads);
 *   - a thread that exits while others wait at a barrier;
 *   - a shuffle whose mask names an exited lane, one whose mask names
 *     lanes past the block's last thread, one that leaves the caller out;
 *   - a deadlock (a lane at a barrier that a shuffle waits for);
 *   - a kernel writing one element past its buffer (the guard zones; under
 *     AddressSanitizer the child process dies with ASan's report);
 *   - a host pointer passed to a kernel; a copy past an allocation;
 *   - cuBLAS: lda below its minimum; an operand past its allocation.
 * And the same kernels without the bug compute the right answer, so the
 * checks are not simply always failing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "gpu/kernel_util.cuh"

#if defined(__SANITIZE_ADDRESS__)
#define SELFTEST_ASAN 1
#endif

/* ---- kernels -------------------------------------------------------------------- */

__global__ void k_fill(float *x, size_t n, float v)
{
    GRID_STRIDE(i, n) x[i] = v;
}

/* Writes x[0 .. n], one past the end when `past` is 1. */
__global__ void k_fill_past(float *x, size_t n, int past)
{
    GRID_STRIDE(i, n + (size_t)past) x[i] = 1.0f;
}

/* Block sums of x (blockDim.x threads per block, a power of 2), warp
 * shuffles inside warps and a shared-memory tree across them. */
__global__ void k_block_sum(float *out, const float *x, size_t n)
{
    __shared__ float sh[32];
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    v = warp_sum(v);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < warps; w++) t += sh[w];
        out[blockIdx.x] = t;
    }
}

/* out[i] = the value thread i + 1 (mod 64) stored; `barrier` 0 is the bug:
 * no __syncthreads between the store and the read */
__global__ void k_neighbour(float *out, float salt, int barrier)
{
    __shared__ float sh[64];
    sh[threadIdx.x] = salt + (float)threadIdx.x;
    if (barrier) __syncthreads();
    out[threadIdx.x] = sh[(threadIdx.x + 1) % 64];
}

/* bug: the two halves of the block wait at different barriers */
__global__ void k_divergent_barrier(float *x)
{
    if (threadIdx.x < 16) {
        x[threadIdx.x] = 1.0f;
        __syncthreads();
    } else {
        x[threadIdx.x] = 2.0f;
        __syncthreads();
    }
}

/* bug: thread 5 leaves before the barrier the others wait at */
__global__ void k_early_exit(float *x)
{
    if (threadIdx.x == 5) return;
    x[threadIdx.x] = 1.0f;
    __syncthreads();
}

/* bug: lanes 16.. exit, lanes 0..15 shuffle with a full mask */
__global__ void k_shfl_exited(float *x)
{
    if ((threadIdx.x & 31) >= 16) return;
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}

/* bug (with 16 threads per block): the full mask names lanes 16..31 */
__global__ void k_shfl_inactive(float *x)
{
    x[threadIdx.x] = warp_sum((float)threadIdx.x);
}

/* bug: lane 0 is not in the mask it passes */
__global__ void k_shfl_not_self(float *x)
{
    x[threadIdx.x] = __shfl_down_sync(0xfffffffeu, 1.0f, 1);
}

/* bug: lane 1 waits at a barrier while lane 0 waits for it in a shuffle */
__global__ void k_deadlock(float *x)
{
    if (threadIdx.x == 0)
        x[0] = __shfl_xor_sync(0x3u, 1.0f, 1);
    else
        __syncthreads();
}

/* ---- helpers -------------------------------------------------------------------- */

static cudaStream_t g_s;

static unsigned grid_for(size_t n, unsigned threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

static int setup(void **state)
{
    (void)state;
    sentiment_cuda_emu_clear();
    return cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking) == cudaSuccess ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    sentiment_cuda_emu_clear();
    return 0;
}

/* The emulator reported exactly one fault (or more) whose first message
 * contains `want`; then forgets it. */
static void expect_fault(const char *want)
{
    int n = sentiment_cuda_emu_faults();
    const char *msg = sentiment_cuda_emu_first_fault();
    print_message("  expected fault: %s\n", msg);
    assert_true(n >= 1);
    if (!strstr(msg, want)) print_error("fault '%s' does not mention '%s'\n", msg, want);
    assert_non_null(strstr(msg, want));
    sentiment_cuda_emu_clear();
}

static void expect_no_fault(void)
{
    if (sentiment_cuda_emu_faults()) print_error("unexpected fault: %s\n", sentiment_cuda_emu_first_fault());
    assert_int_equal(sentiment_cuda_emu_faults(), 0);
}

static float *dev_floats(size_t n)
{
    void *p = NULL;
    assert_int_equal(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
    return (float *)p;
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_fresh_memory_is_nan(void **state)
{
    (void)state;
    float *d = dev_floats(8), h[8];
    assert_int_equal(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 8; i++) assert_true(isnan(h[i]));
    assert_int_equal(cudaFree(d), cudaSuccess);
    expect_no_fault();
}

static void test_missing_sync(void **state)
{
    (void)state;
    size_t n = 1000;
    float *d = dev_floats(n), *pinned = NULL;
    assert_int_equal(cudaHostAlloc((void **)&pinned, n * sizeof(float), cudaHostAllocDefault), cudaSuccess);
    for (size_t i = 0; i < n; i++) pinned[i] = -1.0f;
    LAUNCH_KERNEL(k_fill, grid_for(n, 256), 256, 0, g_s, d, n, 3.0f);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost, g_s), cudaSuccess);
    /* the bug: reading pinned now, before cudaStreamSynchronize */
    size_t right = 0;
    for (size_t i = 0; i < n; i++) right += pinned[i] == 3.0f;
    print_message("  before the synchronisation %zu of %zu elements are there\n", right, n);
    assert_int_equal(right, 0);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaSuccess);
    for (size_t i = 0; i < n; i++) assert_true(pinned[i] == 3.0f);
    /* and an event marks how far the stream has run */
    cudaEvent_t e;
    assert_int_equal(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    LAUNCH_KERNEL(k_fill, grid_for(n, 256), 256, 0, g_s, d, n, 4.0f);
    assert_int_equal(cudaEventRecord(e, g_s), cudaSuccess);
    LAUNCH_KERNEL(k_fill, grid_for(n, 256), 256, 0, g_s, d, n, 5.0f);
    assert_int_equal(cudaMemcpyAsync(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost, g_s), cudaSuccess);
    assert_int_equal(cudaEventSynchronize(e), cudaSuccess);
    assert_true(pinned[0] == 3.0f); /* the copy after the event has not run */
    assert_int_equal(cudaStreamSynchronize(g_s), cudaSuccess);
    assert_true(pinned[0] == 5.0f);
    assert_int_equal(cudaEventDestroy(e), cudaSuccess);
    assert_int_equal(cudaFreeHost(pinned), cudaSuccess);
    assert_int_equal(cudaFree(d), cudaSuccess);
    expect_no_fault();
}

static void test_early_host_reuse(void **state)
{
    (void)state;
    size_t n = 64;
    float *d = dev_floats(n), *pinned = NULL, back[64];
    assert_int_equal(cudaHostAlloc((void **)&pinned, n * sizeof(float), 0), cudaSuccess);
    for (size_t i = 0; i < n; i++) pinned[i] = 1.0f;
    assert_int_equal(cudaMemcpyAsync(d, pinned, n * sizeof(float), cudaMemcpyHostToDevice, g_s), cudaSuccess);
    /* the bug: the staging buffer is reused before the copy that reads it ran */
    for (size_t i = 0; i < n; i++) pinned[i] = 2.0f;
    assert_int_equal(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_true(back[0] == 2.0f); /* the device got the second contents */
    /* pageable memory is copied before cudaMemcpyAsync returns, as CUDA does */
    float page[64];
    for (size_t i = 0; i < n; i++) page[i] = 7.0f;
    assert_int_equal(cudaMemcpyAsync(d, page, sizeof page, cudaMemcpyHostToDevice, g_s), cudaSuccess);
    for (size_t i = 0; i < n; i++) page[i] = 8.0f;
    assert_int_equal(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_true(back[0] == 7.0f);
    assert_int_equal(cudaFreeHost(pinned), cudaSuccess);
    assert_int_equal(cudaFree(d), cudaSuccess);
    expect_no_fault();
}

static void test_block_sum_is_right(void **state)
{
    (void)state;
    size_t n = 1000;
    float *x = dev_floats(n), *out = dev_floats(4), h[1000], sums[4];
    for (size_t i = 0; i < n; i++) h[i] = (float)(i % 7);
    assert_int_equal(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice), cudaSuccess);
    LAUNCH_KERNEL(k_block_sum, 4, 256, 0, g_s, out, x, n);
    assert_int_equal(cudaMemcpy(sums, out, sizeof sums, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int b = 0; b < 4; b++) {
        float want = 0;
        for (size_t i = (size_t)b * 256; i < n && i < (size_t)(b + 1) * 256; i++) want += h[i];
        assert_true(sums[b] == want);
    }
    cudaFree(x);
    cudaFree(out);
    expect_no_fault();
}

/* Run in thread order, then last to first: without the barrier some
 * reads see the store of the launch before, in either order. */
static void test_missing_barrier(void **state)
{
    (void)state;
    float *out = dev_floats(64), h[64];
    for (int order = 0; order < 2; order++)
        for (int barrier = 1; barrier >= 0; barrier--) {
            float salt = 1000.0f * (float)(1 + order * 2 + barrier);
            if (order) setenv("SENTIMENT_CUDA_EMU_ORDER", "reverse", 1);
            LAUNCH_KERNEL(k_neighbour, 1, 64, 0, g_s, out, salt, barrier);
            assert_int_equal(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
            unsetenv("SENTIMENT_CUDA_EMU_ORDER");
            int wrong = 0;
            for (int i = 0; i < 64; i++) wrong += h[i] != salt + (float)((i + 1) % 64);
            print_message("  %s order, %s barrier: %d of 64 reads wrong\n",
                          order ? "reverse" : "thread", barrier ? "with the" : "without the", wrong);
            if (barrier)
                assert_int_equal(wrong, 0);
            else
                assert_true(wrong > 0);
        }
    cudaFree(out);
    expect_no_fault();
}

static void test_divergent_barrier(void **state)
{
    (void)state;
    float *x = dev_floats(32);
    LAUNCH_KERNEL(k_divergent_barrier, 1, 32, 0, g_s, x);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorLaunchFailure);
    /* sticky, as a real fault: every later call fails, and says why */
    assert_int_equal(cudaGetLastError(), cudaErrorLaunchFailure);
    assert_non_null(strstr(cudaGetErrorString(cudaErrorLaunchFailure), "k_divergent_barrier"));
    expect_fault("kernel k_divergent_barrier, block (0,0,0): divergent barriers");
    cudaFree(x);
}

static void test_exit_before_barrier(void **state)
{
    (void)state;
    float *x = dev_floats(64);
    LAUNCH_KERNEL(k_early_exit, 1, 32, 0, g_s, x);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorLaunchFailure);
    expect_fault("kernel k_early_exit");
    LAUNCH_KERNEL(k_early_exit, 2, 64, 0, g_s, x);
    assert_int_equal(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    expect_fault("a barrier not reached by every thread");
    cudaFree(x);
}

static void test_shuffle_masks(void **state)
{
    (void)state;
    float *x = dev_floats(64);
    LAUNCH_KERNEL(k_shfl_exited, 1, 64, 0, g_s, x);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorLaunchFailure);
    expect_fault("kernel k_shfl_exited");
    LAUNCH_KERNEL(k_shfl_inactive, 1, 16, 0, g_s, x);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorLaunchFailure);
    expect_fault("which do not exist");
    LAUNCH_KERNEL(k_shfl_not_self, 1, 32, 0, g_s, x);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorLaunchFailure);
    expect_fault("which leaves it out");
    /* and the same reduction with a whole warp is fine */
    LAUNCH_KERNEL(k_shfl_inactive, 2, 32, 0, g_s, x);
    float h[32];
    assert_int_equal(cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 32; i++) assert_true(h[i] == 496.0f);
    expect_no_fault();
    cudaFree(x);
}

static void test_deadlock(void **state)
{
    (void)state;
    float *x = dev_floats(2);
    LAUNCH_KERNEL(k_deadlock, 1, 2, 0, g_s, x);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorLaunchFailure);
    expect_fault("deadlock");
    cudaFree(x);
}

static void test_write_past_end(void **state)
{
    (void)state;
    size_t n = 37;
#ifdef SELFTEST_ASAN
    /* AddressSanitizer stops the process at the write: do it in a child,
     * whose report goes to a file */
    char path[] = "/tmp/cuda_emu_asan_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        float *x = dev_floats(n);
        LAUNCH_KERNEL(k_fill_past, 1, 64, 0, g_s, x, n, 1);
        cudaStreamSynchronize(g_s);
        _exit(0); /* not reached under ASan */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    print_message("  the child that wrote past its buffer exited with status %d\n",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char report[8192] = "";
    ssize_t got = pread(fd, report, sizeof report - 1, 0);
    close(fd);
    unlink(path);
    report[got > 0 ? got : 0] = 0;
    const char *line = strstr(report, "ERROR: AddressSanitizer");
    print_message("  its report: %.*s\n", line ? (int)strcspn(line, "\n") : 0, line ? line : "");
    assert_non_null(strstr(report, "heap-buffer-overflow"));
    assert_non_null(strstr(report, "k_fill_past"));
#else
    float *x = dev_floats(n);
    LAUNCH_KERNEL(k_fill_past, 1, 64, 0, g_s, x, n, 0);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaSuccess);
    expect_no_fault();
    LAUNCH_KERNEL(k_fill_past, 1, 64, 0, g_s, x, n, 1);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorIllegalAddress);
    expect_fault("kernel k_fill_past wrote outside a 148-byte device allocation");
    cudaFree(x);
#endif
}

static void test_bad_pointers(void **state)
{
    (void)state;
    float host[16], *d = dev_floats(16);
    LAUNCH_KERNEL(k_fill, 1, 16, 0, g_s, host, (size_t)16, 1.0f);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorIllegalAddress);
    expect_fault("kernel k_fill: argument 0");
    /* a copy one float longer than the allocation */
    assert_int_equal(cudaMemcpy(host, d, 17 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    expect_fault("cudaMemcpy(DeviceToHost): source");
    assert_int_equal(cudaMemsetAsync(d + 8, 0, 9 * sizeof(float), g_s), cudaErrorInvalidValue);
    expect_fault("cudaMemsetAsync");
    /* freeing twice */
    assert_int_equal(cudaFree(d), cudaSuccess);
    assert_int_equal(cudaFree(d), cudaErrorInvalidValue);
    expect_fault("not the start of a live device allocation");
}

static void test_cublas_checks(void **state)
{
    (void)state;
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSetStream(h, g_s), CUBLAS_STATUS_SUCCESS);
    int m = 3, n = 2, k = 4;
    float *A = dev_floats((size_t)m * k), *B = dev_floats((size_t)k * n), *C = dev_floats((size_t)m * n);
    float ha[12], hb[8], hc[6], one = 1.0f, zero = 0.0f;
    for (int i = 0; i < 12; i++) ha[i] = (float)(i + 1);
    for (int i = 0; i < 8; i++) hb[i] = (float)(i % 3);
    cudaMemcpy(A, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(B, hb, sizeof hb, cudaMemcpyHostToDevice);
    /* column-major C(3x2) = A(3x4) B(4x2); C starts NaN and beta is 0 */
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A, CUDA_R_32F, m, B,
                                  CUDA_R_32F, k, &zero, C, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    cudaMemcpy(hc, C, sizeof hc, cudaMemcpyDeviceToHost);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float want = 0;
            for (int p = 0; p < k; p++) want += ha[i + p * m] * hb[p + j * k];
            assert_true(hc[i + j * m] == want);
        }
    expect_no_fault();
    /* lda below the rows of A */
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A, CUDA_R_32F, m - 1,
                                  B, CUDA_R_32F, k, &zero, C, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_INVALID_VALUE);
    expect_fault("lda 2 < max(1, 3)");
    /* A read as 3 x 5: past its allocation */
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k + 1, &one, A, CUDA_R_32F, m,
                                  B, CUDA_R_32F, k + 1, &zero, C, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cudaStreamSynchronize(g_s), cudaErrorIllegalAddress);
    expect_fault("operand A");
    cublasDestroy(h);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fresh_memory_is_nan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_host_reuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_block_sum_is_right, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_barrier, setup, teardown),
        cmocka_unit_test_setup_teardown(test_divergent_barrier, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_before_barrier, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shuffle_masks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadlock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_past_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_pointers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cublas_checks, setup, teardown),
    };
    return cmocka_run_group_tests_name("cuda emulator: planted bugs", tests, NULL, NULL) ? 1 : 0;
}

/* blas.h: the one matrix-product routine we take from OpenBLAS, loaded at run
 * time with the kernel chosen for this CPU.
 *
 * OpenBLAS picks its kernels when the library is loaded, by CPU model number;
 * on processors newer than the build it falls back to generic SSE3 kernels,
 * 4-8x slower. So we do not link it: on first use we read the CPU's features
 * (AVX-512, AVX2+FMA), set OPENBLAS_CORETYPE to the matching kernel family
 * unless the user already set it, and dlopen libopenblas.so.0. A user's
 * OPENBLAS_CORETYPE always wins.
 *
 * Private to cpu/ (tests and benchmarks may include it; model/ and ext/
 * never do: ext/ asks the CPU backend, backend_cpu_blas).
 */
#ifndef SM_BLAS_H
#define SM_BLAS_H

/* Loads OpenBLAS once per process (thread-safe). */
int blas_load(char *err);
/* Row-major C(M,N) = alpha op(A) op(B) + beta C, as cblas_sgemm. blas_load
 * must have succeeded. A thread whose OpenBLAS buffer (128 MiB, mapped on
 * its first call) cannot be mapped computes it by plain loops instead,
 * never blocking (blas.c). */
void blas_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc);
void blas_set_threads(int n);
/* Products computed by the plain loops because OpenBLAS's buffer did not
 * fit, since the process started. */
long long blas_fallback_products(void);
/* "OpenBLAS 0.3.21 SkylakeX" once loaded, else "OpenBLAS (not loaded)". */
const char *blas_describe(void);

#endif

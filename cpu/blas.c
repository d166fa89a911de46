/* blas.c: loads OpenBLAS at run time with a kernel family that fits the CPU
 * (see blas.h for why) and exposes sgemm. Owns the library handle, which
 * stays loaded for the life of the process.
 *
 * Memory: OpenBLAS maps a buffer of BUFFER_SIZE (128 MiB on x86-64 since
 * 0.3.x: 32 << 22) for each thread that calls it, on that thread's first
 * large product, and when that mmap fails it retries forever (tens of
 * thousands of failed mmap calls a second: under an address-space limit,
 * RLIMIT_AS, the call never returns). So each thread test-maps that much
 * before its first OpenBLAS call, one thread at a time through that call (so
 * two threads cannot both pass the test where one buffer fits); while it
 * cannot, its products are
 * computed here by a plain loop (correct, slower; blas_fallback_products
 * counts them) and the test is repeated on the next call. Under an
 * address-space limit (RLIMIT_AS set) OpenBLAS is not called at all, every
 * product runs in the plain loops: threads' buffers, glibc's rounding of
 * OpenBLAS's malloc and other allocations in between still let a passed
 * test be followed by a failing, endlessly retried allocation about once
 * in twenty runs at 300 MB, and a slow product is better than a hung one. OpenBLAS is
 * loaded with OPENBLAS_NUM_THREADS=1 (unless the user set it; restored
 * after loading), so its own threads, which we never use
 * (openblas_set_num_threads(1)), do not each map a buffer at load time. */
#include "cpu/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "core/errors.h"

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*sgemm_fn)(int order, int transA, int transB, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta, float *C,
                         int ldc);

static struct {
    pthread_once_t once;
    int status;
    char error[SM_ERR_MAX];
    char description[128];
    sgemm_fn sgemm;
    void (*set_threads)(int);
} g_blas = {.once = PTHREAD_ONCE_INIT};

static const char *core_for_this_cpu(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL; /* let OpenBLAS decide */
}

static void load_once(void)
{
    const char *core = getenv("OPENBLAS_CORETYPE");
    if (!core && (core = core_for_this_cpu())) setenv("OPENBLAS_CORETYPE", core, 0);
    int set_threads_env = !getenv("OPENBLAS_NUM_THREADS");
    if (set_threads_env) setenv("OPENBLAS_NUM_THREADS", "1", 0);
    void *lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (set_threads_env) unsetenv("OPENBLAS_NUM_THREADS");
    if (!lib) {
        g_blas.status = sm_error(g_blas.error, SM_ERR_UNSUPPORTED,
                                 "cannot load OpenBLAS (libopenblas.so.0): %s; "
                                 "install the Debian package libopenblas0",
                                 dlerror());
        return;
    }
    g_blas.sgemm = (sgemm_fn)dlsym(lib, "cblas_sgemm");
    g_blas.set_threads = (void (*)(int))dlsym(lib, "openblas_set_num_threads");
    char *(*corename)(void) = (char *(*)(void))dlsym(lib, "openblas_get_corename");
    char *(*config)(void) = (char *(*)(void))dlsym(lib, "openblas_get_config");
    if (!g_blas.sgemm || !g_blas.set_threads) {
        g_blas.status = sm_error(g_blas.error, SM_ERR_UNSUPPORTED,
                                 "libopenblas.so.0 has no cblas_sgemm/openblas_set_num_threads");
        return;
    }
    char version[32] = "";
    if (config) sscanf(config(), "OpenBLAS %31s", version);
    snprintf(g_blas.description, sizeof g_blas.description, "OpenBLAS %s %s", version,
             corename ? corename() : "");
    g_blas.status = SM_OK;
}

int blas_load(char *err)
{
    pthread_once(&g_blas.once, load_once);
    if (g_blas.status) return sm_error(err, g_blas.status, "%s", g_blas.error);
    return SM_OK;
}

/* What OpenBLAS maps per calling thread (its BUFFER_SIZE on x86-64). */
#define BLAS_BUFFER_BYTES ((size_t)32 << 22)

static _Thread_local int t_buffer_ok; /* this thread's OpenBLAS buffer fitted */
static atomic_llong g_fallback_products;
/* Held by a thread from its test-map through its first OpenBLAS call: two
 * threads' test-maps can both succeed where only one buffer fits, and the
 * second OpenBLAS mmap would then retry forever (two lanes starting their
 * first batches at once, under RLIMIT_AS). */
static pthread_mutex_t g_first_call = PTHREAD_MUTEX_INITIALIZER;

/* OpenBLAS asks malloc for BLAS_BUFFER_BYTES + 4 KiB, which glibc serves
 * with an mmap rounded up to 1 MiB and its own header: test that much and
 * a little more, or a test that passes by less than that lets OpenBLAS's
 * malloc fail and retry forever. */
#define BLAS_BUFFER_TEST_BYTES (BLAS_BUFFER_BYTES + ((size_t)4 << 20))

/* 1 when BLAS_BUFFER_TEST_BYTES of address space can be mapped now. */
static int buffer_fits(void)
{
    void *p = mmap(NULL, BLAS_BUFFER_TEST_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    munmap(p, BLAS_BUFFER_TEST_BYTES);
    return 1;
}

/* 1 when the process has an address-space limit (RLIMIT_AS). Read once. */
static int address_space_limited(void)
{
    static atomic_int limited = -1;
    int v = atomic_load_explicit(&limited, memory_order_relaxed);
    if (v < 0) {
        struct rlimit rl;
        v = getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
        atomic_store_explicit(&limited, v, memory_order_relaxed);
    }
    return v;
}

/* Row-major C = alpha op(A) op(B) + beta C by plain loops (beta 0: C is
 * not read, as in BLAS). */
static void loop_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                       int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f) memset(c, 0, (size_t)N * sizeof *c);
        else if (beta != 1.0f)
            for (int j = 0; j < N; j++) c[j] *= beta;
        for (int k = 0; k < K; k++) {
            float a = alpha * (transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
            if (!transB) {
                const float *b = B + (size_t)k * ldb;
                for (int j = 0; j < N; j++) c[j] += a * b[j];
            } else {
                for (int j = 0; j < N; j++) c[j] += a * B[(size_t)j * ldb + k];
            }
        }
    }
}

void blas_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc)
{
    if (address_space_limited()) { /* see the top of this file */
        atomic_fetch_add_explicit(&g_fallback_products, 1, memory_order_relaxed);
        loop_sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int first = !t_buffer_ok;
    if (first) {
        pthread_mutex_lock(&g_first_call);
        if (!(t_buffer_ok = buffer_fits())) {
            pthread_mutex_unlock(&g_first_call);
            atomic_fetch_add_explicit(&g_fallback_products, 1, memory_order_relaxed);
            loop_sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
            return;
        }
    }
    g_blas.sgemm(CBLAS_ROW_MAJOR, transA ? CBLAS_TRANS : CBLAS_NO_TRANS,
                 transB ? CBLAS_TRANS : CBLAS_NO_TRANS, M, N, K, alpha, A, lda, B, ldb, beta, C,
                 ldc);
    if (first) pthread_mutex_unlock(&g_first_call);
}

long long blas_fallback_products(void)
{
    return atomic_load_explicit(&g_fallback_products, memory_order_relaxed);
}

void blas_set_threads(int n)
{
    if (g_blas.set_threads) g_blas.set_threads(n);
}

const char *blas_describe(void)
{
    return g_blas.sgemm ? g_blas.description : "OpenBLAS (not loaded)";
}

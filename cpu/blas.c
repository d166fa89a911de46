/* blas.c: loads OpenBLAS at run time with a kernel family that fits the CPU
 * (see blas.h for why) and exposes sgemm. Owns the library handle, which
 * stays loaded for the life of the process. */
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "errors.h"

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*sgemm_fn)(int order, int transA, int transB, int M, int N,
                         int K, float alpha, const float *A, int lda,
                         const float *B, int ldb, float beta, float *C,
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
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL; /* let OpenBLAS decide */
}

static void load_once(void)
{
    const char *core = getenv("OPENBLAS_CORETYPE");
    if (!core && (core = core_for_this_cpu()))
        setenv("OPENBLAS_CORETYPE", core, 0);
    void *lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
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

void blas_sgemm(int transA, int transB, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta,
                float *C, int ldc)
{
    g_blas.sgemm(CBLAS_ROW_MAJOR, transA ? CBLAS_TRANS : CBLAS_NO_TRANS,
                 transB ? CBLAS_TRANS : CBLAS_NO_TRANS, M, N, K, alpha, A, lda, B,
                 ldb, beta, C, ldc);
}

void blas_set_threads(int n)
{
    if (g_blas.set_threads) g_blas.set_threads(n);
}

const char *blas_describe(void)
{
    return g_blas.sgemm ? g_blas.description : "OpenBLAS (not loaded)";
}

/* bench_gemm_bf16.c: the BF16 linear kernel (model/gemm_bf16.c) against
 * OpenBLAS sgemm on the same shapes, one thread, in the same run.
 *
 * For each R x K x N, out(R,N) = in(R,K) · W(N,K)ᵀ + b, the median of
 * --runs timings of each, GFLOP/s and the ratio, and the largest difference
 * from sgemm relative to the sum of |x_k w_k| (what BF16 operands cost).
 * Not a test: it asserts nothing.
 *
 *   build/bench/bench_gemm_bf16                 the encoder shapes at R=3200
 *   build/bench/bench_gemm_bf16 --shape 3200x768x3072 --runs 9
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blas.h"
#include "errors.h"
#include "gemm_bf16.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 24))) - 0.5f;
}

static int run_shape(int R, int K, int N, int runs)
{
    char err[SM_ERR_MAX];
    float *in = malloc((size_t)R * K * sizeof *in), *W = malloc((size_t)N * K * sizeof *W);
    float *b = malloc((size_t)N * sizeof *b), *o1 = malloc((size_t)R * N * sizeof *o1);
    float *o2 = malloc((size_t)R * N * sizeof *o2);
    double t_sgemm[64], t_bf16[64];
    gemm_bf16_weight *pw = NULL;
    if (!in || !W || !b || !o1 || !o2) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)R * K; i++) in[i] = frand();
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = frand();
    for (int i = 0; i < N; i++) b[i] = frand();
    double t0 = now();
    if (gemm_bf16_pack(W, N, K, &pw, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double t_pack = now() - t0;
    for (int r = 0; r <= runs; r++) { /* run 0 warms up */
        t0 = now();
        for (int i = 0; i < R; i++) memcpy(o1 + (size_t)i * N, b, (size_t)N * sizeof *b);
        blas_sgemm(0, 1, R, N, K, 1.0f, in, K, W, K, 1.0f, o1, N);
        double t1 = now();
        gemm_bf16_linear(o2, in, pw, b, R, K, N);
        double t2 = now();
        if (r) {
            t_sgemm[r - 1] = t1 - t0;
            t_bf16[r - 1] = t2 - t1;
        }
    }
    double worst = 0;
    for (int i = 0; i < R; i += 7)
        for (int n = 0; n < N; n++) {
            double s = fabs(b[n]);
            for (int k = 0; k < K; k++) s += fabs((double)in[(size_t)i * K + k] * W[(size_t)n * K + k]);
            double d = fabs(o1[(size_t)i * N + n] - o2[(size_t)i * N + n]) / s;
            if (d > worst) worst = d;
        }
    qsort(t_sgemm, (size_t)runs, sizeof(double), cmp_double);
    qsort(t_bf16, (size_t)runs, sizeof(double), cmp_double);
    double ts = t_sgemm[runs / 2], tb = t_bf16[runs / 2], fl = 2.0 * R * K * N;
    printf("R=%-5d K=%-5d N=%-5d sgemm %7.1f GFLOP/s  bf16 %7.1f GFLOP/s  ratio %.2fx  "
           "pack %.1f ms  max |diff|/sum|xw| %.1e\n",
           R, K, N, fl / ts * 1e-9, fl / tb * 1e-9, ts / tb, t_pack * 1e3, worst);
    gemm_bf16_free(pw);
    free(in);
    free(W);
    free(b);
    free(o1);
    free(o2);
    return 0;
}

int main(int argc, char **argv)
{
    char err[SM_ERR_MAX];
    int runs = 5, shapes[16][3], n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && n < 16 &&
                   sscanf(argv[++i], "%dx%dx%d", &shapes[n][0], &shapes[n][1], &shapes[n][2]) == 3 &&
                   shapes[n][0] > 0 && shapes[n][1] > 0 && shapes[n][2] > 0) {
            n++;
        } else {
            fprintf(stderr, "usage: %s [--shape RxKxN]... [--runs N]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 1 || runs > 64) runs = 5;
    if (!n) {
        int def[4][3] = {{3200, 768, 2304}, {3200, 768, 768}, {3200, 768, 3072}, {3200, 3072, 768}};
        memcpy(shapes, def, sizeof def);
        n = 4;
    }
    if (blas_load(err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    blas_set_threads(1);
    printf("%s, one thread; bf16 kernel: %s\n", blas_describe(),
           gemm_bf16_supported() ? "AVX512-BF16" : "plain C (no AVX512-BF16 on this CPU)");
    for (int i = 0; i < n; i++)
        if (run_shape(shapes[i][0], shapes[i][1], shapes[i][2], runs)) return 1;
    return 0;
}

/* bench_gemm.c: the packed linear kernels, FP32 (cpu/gemm_f32.c), BF16
 * (cpu/gemm_bf16.c) and INT8 (cpu/gemm_int8.c), against OpenBLAS
 * sgemm on the same shapes, one thread, in the same run.
 *
 * For each R x K x N, out(R,N) = in(R,K) · W(N,K)ᵀ + b, the median of
 * --runs timings of each (they alternate within a run; sgemm's includes
 * the bias copied into the output first, as the CPU backend's linear does),
 * GFLOP/s and the speed-up over sgemm, the time to pack the weight, and the
 * largest difference from sgemm relative to the sum of |x_k w_k| (what the
 * reduced operands cost; rounding order only for f32). A kernel the CPU
 * lacks is skipped (its plain C fall-back is far too slow to be worth
 * timing). Not a test: it asserts nothing.
 *
 *   build/bench/bench_gemm                          the encoder shapes
 *   build/bench/bench_gemm --shape 3200x768x3072 --runs 9 --precision int8
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/errors.h"
#include "core/rng.h"
#include "cpu/blas.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_f32.h"
#include "cpu/gemm_int8.h"

enum { P_BF16 = 1, P_INT8 = 2, P_F32 = 4 };

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

static uint64_t rng_state;
static float frand(void)
{
    return (float)((rng_next(&rng_state) >> 40) * (1.0 / (1 << 24))) - 0.5f;
}

/* Largest |o - ref| / (|b| + sum |x_k w_k|) over every 7th row. */
static double worst_diff(const float *o, const float *ref, const float *in, const float *W,
                         const float *b, int R, int K, int N)
{
    double worst = 0;
    for (int i = 0; i < R; i += 7)
        for (int n = 0; n < N; n++) {
            double s = fabs(b[n]);
            for (int k = 0; k < K; k++) s += fabs((double)in[(size_t)i * K + k] * W[(size_t)n * K + k]);
            double d = fabs(o[(size_t)i * N + n] - ref[(size_t)i * N + n]) / s;
            if (d > worst) worst = d;
        }
    return worst;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

static int run_shape(int R, int K, int N, int runs, int which)
{
    char err[SM_ERR_MAX];
    float *in = malloc((size_t)R * K * sizeof *in), *W = malloc((size_t)N * K * sizeof *W);
    float *b = malloc((size_t)N * sizeof *b), *o1 = malloc((size_t)R * N * sizeof *o1);
    float *o2 = malloc((size_t)R * N * sizeof *o2), *o3 = malloc((size_t)R * N * sizeof *o3);
    float *o4 = malloc((size_t)R * N * sizeof *o4);
    double t_sgemm[64], t_bf16[64], t_int8[64], t_f32[64], pack16 = 0, pack8 = 0, pack32 = 0;
    gemm_bf16_weight *w16 = NULL;
    gemm_int8_weight *w8 = NULL;
    gemm_f32_weight *w32 = NULL;
    if (!gemm_bf16_supported()) which &= ~P_BF16;
    if (!gemm_int8_supported()) which &= ~P_INT8;
    if (!gemm_f32_supported()) which &= ~P_F32;
    if (!in || !W || !b || !o1 || !o2 || !o3 || !o4) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)R * K; i++) in[i] = frand();
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = frand();
    for (int i = 0; i < N; i++) b[i] = frand();
    double t0 = now();
    if ((which & P_BF16) && gemm_bf16_pack(W, N, K, &w16, err)) goto fail;
    pack16 = now() - t0;
    t0 = now();
    if ((which & P_INT8) && gemm_int8_pack(W, N, K, &w8, err)) goto fail;
    pack8 = now() - t0;
    t0 = now();
    if ((which & P_F32) && gemm_f32_pack(W, N, K, &w32, err)) goto fail;
    pack32 = now() - t0;
    for (int r = 0; r <= runs; r++) { /* run 0 warms up */
        t0 = now();
        for (int i = 0; i < R; i++) memcpy(o1 + (size_t)i * N, b, (size_t)N * sizeof *b);
        blas_sgemm(0, 1, R, N, K, 1.0f, in, K, W, K, 1.0f, o1, N);
        double t1 = now();
        if (which & P_BF16) gemm_bf16_linear(o2, in, w16, b, R, K, N);
        double t2 = now();
        if (which & P_INT8) gemm_int8_linear(o3, in, w8, b, R, K, N);
        double t3 = now();
        if (which & P_F32) gemm_f32_linear(o4, in, w32, b, R, K, N);
        double t4 = now();
        if (r) {
            t_sgemm[r - 1] = t1 - t0;
            t_bf16[r - 1] = t2 - t1;
            t_int8[r - 1] = t3 - t2;
            t_f32[r - 1] = t4 - t3;
        }
    }
    double ts = median(t_sgemm, runs), fl = 2.0 * R * K * N;
    printf("R=%-5d K=%-5d N=%-5d sgemm %6.1f GFLOP/s", R, K, N, fl / ts * 1e-9);
    if (which & P_F32) {
        double t = median(t_f32, runs);
        printf(" | f32 %6.1f GFLOP/s %.2fx pack %.1f ms diff %.1e", fl / t * 1e-9, ts / t,
               pack32 * 1e3, worst_diff(o4, o1, in, W, b, R, K, N));
    }
    if (which & P_BF16) {
        double t = median(t_bf16, runs);
        printf(" | bf16 %6.1f GFLOP/s %.2fx pack %.0f ms diff %.1e", fl / t * 1e-9, ts / t,
               pack16 * 1e3, worst_diff(o2, o1, in, W, b, R, K, N));
    }
    if (which & P_INT8) {
        double t = median(t_int8, runs);
        printf(" | int8 %6.1f GOP/s %.2fx pack %.0f ms diff %.1e", fl / t * 1e-9, ts / t,
               pack8 * 1e3, worst_diff(o3, o1, in, W, b, R, K, N));
    }
    printf("\n");
    gemm_bf16_free(w16);
    gemm_int8_free(w8);
    gemm_f32_free(w32);
    free(in);
    free(W);
    free(b);
    free(o1);
    free(o2);
    free(o3);
    free(o4);
    return 0;
fail:
    fprintf(stderr, "%s\n", err);
    return 1;
}

int main(int argc, char **argv)
{
    char err[SM_ERR_MAX];
    int runs = 5, shapes[16][3], n = 0, which = P_F32 | P_BF16 | P_INT8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            const char *p = argv[++i];
            which = !strcmp(p, "f32") ? P_F32 : !strcmp(p, "bf16") ? P_BF16
                    : !strcmp(p, "int8") ? P_INT8 : !strcmp(p, "all") ? P_F32 | P_BF16 | P_INT8 : 0;
            if (!which) {
                fprintf(stderr, "--precision must be f32, bf16, int8 or all\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && n < 16 &&
                   sscanf(argv[++i], "%dx%dx%d", &shapes[n][0], &shapes[n][1], &shapes[n][2]) == 3 &&
                   shapes[n][0] > 0 && shapes[n][1] > 0 && shapes[n][2] > 0) {
            n++;
        } else {
            fprintf(stderr, "usage: %s [--shape RxKxN]... [--runs N] [--precision f32|bf16|int8|all]\n",
                    argv[0]);
            return 2;
        }
    }
    if (runs < 1 || runs > 64) runs = 5;
    if (!n) { /* the built-in model's (hidden 128, FFN 512) at 2700 tokens, then BERT-base's */
        int def[9][3] = {{2700, 128, 384},  {2700, 128, 128},  {2700, 128, 512},
                         {2700, 512, 128},  {3200, 768, 2304}, {3200, 768, 768},
                         {3200, 768, 3072}, {3200, 3072, 768}, {3200, 128, 512}};
        memcpy(shapes, def, sizeof def);
        n = 9;
    }
    if (blas_load(err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    blas_set_threads(1);
    printf("%s, one thread; f32 kernel: %s; bf16 kernel: %s; int8 kernel: %s\n",
           blas_describe(), gemm_f32_supported() ? "AVX-512F" : "none (no AVX-512F on this CPU)",
           gemm_bf16_supported() ? "AVX512-BF16" : "none (no AVX512-BF16 on this CPU)",
           gemm_int8_supported() ? "AVX512-VNNI" : "none (no AVX512-VNNI on this CPU)");
    for (int i = 0; i < n; i++)
        if (run_shape(shapes[i][0], shapes[i][1], shapes[i][2], runs, which)) return 1;
    return 0;
}

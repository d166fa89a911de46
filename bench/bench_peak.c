/* bench_peak.c: the FP32 multiply-add peak of this CPU, what no FP32
 * engine can pass, and with AVX512-VNNI the INT8 one, what no INT8 engine
 * that multiplies with vpdpbusd can pass.
 *
 * Each thread runs 24 independent chains of fused multiply-adds on full
 * vectors (AVX-512F, else AVX2 + FMA, else scalar) with nothing else in
 * the loop: no loads, no stores, enough chains to cover the FMA latency on
 * two ports. GFLOP/s = threads * iterations * 24 * lanes * 2 / seconds,
 * the median of --runs timings per thread count. bench/peers.py prints it
 * beside the engines' rates to give the FP32 ceiling of each workload.
 * INT8: the same with 24 chains of vpdpbusd (64 u8 x s8 multiply-adds
 * into 16 int32 sums each); GOP/s counts a multiply-add as 2 operations,
 * as GFLOP/s does. Not a test: it asserts nothing.
 *
 *   build/bench/bench_peak [--threads 1,2] [--runs 7]
 *
 * Output: one JSON line per thread count,
 *   {"threads": 1, "isa": "avx512f", "gflops": 171.4, "int8_gops": 690.2}
 * ("int8_gops": null without AVX512-VNNI).
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/thread_pool.h"

#define CHAINS 24
#define ITERS 20000000L /* about 0.1 s a run at 3 GHz with AVX-512 */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Each returns a value that depends on every chain, so none is dropped. */
__attribute__((target("avx512f"))) static float fma_loop_avx512(long iters)
{
    __m512 acc[CHAINS], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(-1e-7f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 24
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

/* The chains in assembly: with the intrinsic in a loop over an array, gcc
 * 12 copied every accumulator each iteration (vpdpbusd overwrites its
 * first operand), which measured the copies, not the multiply-adds. */
#define DPBUSD(a) __asm__ volatile("vpdpbusd %1, %2, %0" : "+v"(a) : "v"(y), "v"(x))
__attribute__((target("avx512f,avx512vnni"))) static float vnni_loop(long iters)
{
    __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
    __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
            a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0, a15 = a0,
            a16 = a0, a17 = a0, a18 = a0, a19 = a0, a20 = a0, a21 = a0, a22 = a0, a23 = a0;
    for (long n = 0; n < iters; n++) {
        DPBUSD(a0);
        DPBUSD(a1);
        DPBUSD(a2);
        DPBUSD(a3);
        DPBUSD(a4);
        DPBUSD(a5);
        DPBUSD(a6);
        DPBUSD(a7);
        DPBUSD(a8);
        DPBUSD(a9);
        DPBUSD(a10);
        DPBUSD(a11);
        DPBUSD(a12);
        DPBUSD(a13);
        DPBUSD(a14);
        DPBUSD(a15);
        DPBUSD(a16);
        DPBUSD(a17);
        DPBUSD(a18);
        DPBUSD(a19);
        DPBUSD(a20);
        DPBUSD(a21);
        DPBUSD(a22);
        DPBUSD(a23);
    }
    __m512i s[CHAINS] = {a0,  a1,  a2,  a3,  a4,  a5,  a6,  a7,  a8,  a9,  a10, a11,
                         a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23};
    for (int i = 1; i < CHAINS; i++) s[0] = _mm512_add_epi32(s[0], s[i]);
    return (float)_mm512_reduce_add_epi32(s[0]);
}

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(long iters)
{
    __m256 acc[CHAINS], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(-1e-7f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 24
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
    __m256 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm256_add_ps(s, acc[i]);
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

static float fma_loop_scalar(long iters)
{
    float acc[CHAINS];
    for (int i = 0; i < CHAINS; i++) acc[i] = (float)i;
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < CHAINS; i++) acc[i] = __builtin_fmaf(acc[i], 1.0000001f, -1e-7f);
    float s = 0.0f;
    for (int i = 0; i < CHAINS; i++) s += acc[i];
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One thread's chains: piece i of the run writes its sum to sums[i]. */
typedef struct fma_job {
    int avx512, avx2, vnni; /* vnni: the INT8 loop */
    long iters;
    float *sums;
} fma_job;

static void fma_piece(void *ctx, int i, int n)
{
    const fma_job *j = ctx;
    (void)n;
    j->sums[i] = j->vnni     ? vnni_loop(j->iters)
                 : j->avx512 ? fma_loop_avx512(j->iters)
                 : j->avx2   ? fma_loop_avx2(j->iters)
                             : fma_loop_scalar(j->iters);
}

int main(int argc, char **argv)
{
    const char *threads_list = "1,2";
    int runs = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads_list = argv[i + 1];
        else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_peak: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (runs < 1 || runs > 101) {
        fprintf(stderr, "bench_peak: --runs must be 1..101\n");
        return 2;
    }
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int vnni = avx512 && __builtin_cpu_supports("avx512vnni");
    const char *isa = avx512 ? "avx512f" : avx2 ? "avx2" : "scalar";
    int lanes = avx512 ? 16 : avx2 ? 8 : 1;
    long iters = avx512 || avx2 ? ITERS : ITERS / 8;

    char list[256];
    snprintf(list, sizeof list, "%s", threads_list);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int nt = atoi(tok);
        if (nt < 1 || nt > 256) {
            fprintf(stderr, "bench_peak: bad thread count '%s'\n", tok);
            return 2;
        }
        double gflops[101], gops[101];
        float sums[256];
        volatile float sink = 0.0f;
        for (int int8 = 0; int8 <= vnni; int8++) {
            fma_job job = {avx512, avx2, int8, iters, sums};
            double *rate = int8 ? gops : gflops;
            for (int r = 0; r < runs; r++) {
                double t0 = now();
                if (tp_run(nt, fma_piece, &job) != nt) {
                    fprintf(stderr, "bench_peak: could not start %d threads\n", nt);
                    return 1;
                }
                double t = now() - t0;
                for (int i = 0; i < nt; i++) sink += sums[i];
                /* a vpdpbusd: 16 lanes x 4 multiply-adds */
                rate[r] = nt * (double)iters * CHAINS * (int8 ? 64 : lanes) * 2 / t / 1e9;
            }
            qsort(rate, runs, sizeof *rate, cmp_double);
        }
        printf("{\"threads\": %d, \"isa\": \"%s\", \"gflops\": %.1f, \"int8_gops\": ", nt, isa,
               gflops[runs / 2]);
        if (vnni) printf("%.1f}\n", gops[runs / 2]);
        else printf("null}\n");
        (void)sink;
    }
    return 0;
}

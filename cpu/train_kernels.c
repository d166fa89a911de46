/* train_kernels.c: the vectorised loops of train_kernels.h. */
#include "cpu/train_kernels.h"

#include "core/rng.h"

#define SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx512f", "avx2", "default")))

SIMD_CLONES
void cpu_dropout_span(float *out, const float *in, size_t n, uint64_t key, uint64_t base,
                      uint32_t threshold, float inv)
{
    /* dropout_keep written out without branches so that it vectorises. */
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float v = in[i] * inv;
        uint32_t r = (uint32_t)(rng_element(key, base + i) >> 32);
        out[i] = r >= threshold ? v : 0.0f;
    }
}

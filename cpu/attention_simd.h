/* attention_simd.h: what the two inference attention kernels share
 * (attention.c: FP32 products; attention_bf16.c: BF16 products): the
 * query rows of a block (ATTENTION_SR), the 16 x 16 transpose that lays
 * keys out by dimension (transpose16.h), and the store of a score tile with
 * its rows' running maxima. Private to cpu/; included only where AVX-512
 * intrinsics are compiled.
 */
#ifndef SM_CPU_ATTENTION_SIMD_H
#define SM_CPU_ATTENTION_SIMD_H

#include <immintrin.h>
#include <stddef.h>

#include "cpu/gemm_common.h"
#include "cpu/transpose16.h"

#define ATTENTION_SR 8 /* query rows of a block and of a score tile */

/* A score tile's accumulators acc[r][c] (ATTENTION_SR rows, of which
 * rows are real; NC 1 or 2 vectors of 16 keys from u0, a constant)
 * stored into att (row stride T) for the keys below len; top[r] keeps row
 * r's largest score per lane. A constant loop, so that acc stays in
 * registers. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
attention_store_scores(const int NC, float *att, int T, __m512 acc[ATTENTION_SR][2], int rows,
                       int u0, int len, __m512 top[ATTENTION_SR])
{
    __mmask16 m0, m1; /* the keys below len */
    gemm_panel_masks(len - u0, &m0, &m1);
#pragma GCC unroll 8
    for (int r = 0; r < ATTENTION_SR; r++) {
        __mmask16 live = r < rows ? 0xffff : 0;
        _mm512_mask_storeu_ps(att + (size_t)r * T + u0, m0 & live, acc[r][0]);
        top[r] = _mm512_mask_max_ps(top[r], m0, acc[r][0], top[r]);
        if (NC == 2) {
            _mm512_mask_storeu_ps(att + (size_t)r * T + u0 + 16, m1 & live, acc[r][1]);
            top[r] = _mm512_mask_max_ps(top[r], m1, acc[r][1], top[r]);
        }
    }
}

#endif

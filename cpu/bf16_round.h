/* bf16_round.h: 16 floats rounded to BF16 in AVX-512 registers, the
 * rounding of gemm_bf16_round (to nearest even, a NaN kept a NaN), for
 * the kernels that round their operands to BF16 (gemm_bf16.c,
 * attention_bf16.c). Private to cpu/; included only where AVX-512
 * intrinsics are compiled.
 */
#ifndef SM_CPU_BF16_ROUND_H
#define SM_CPU_BF16_ROUND_H

#include <immintrin.h>

/* Each lane of x rounded to BF16, in the high half of its 32-bit lane
 * (the low half is not zeroed). */
__attribute__((target("avx512f"))) static inline __m512i bf16_round_high(__m512 x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
}

#endif

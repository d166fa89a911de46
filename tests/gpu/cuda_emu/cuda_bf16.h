/* cuda_bf16.h (tests/gpu/cuda_emu): __nv_bfloat16 for the CUDA emulator
 * (cuda_runtime.h): 16 bits, converted from float by rounding to nearest
 * even, as the device's __float2bfloat16 does. */
#ifndef SM_CUDA_EMU_BF16_H
#define SM_CUDA_EMU_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t sm_emu_f2bf_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float sm_emu_bf_bits2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

struct __nv_bfloat16 {
    uint16_t x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : x(sm_emu_f2bf_bits(f)) {}
    operator float() const { return sm_emu_bf_bits2f(x); }
};

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }

#endif

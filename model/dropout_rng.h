/* dropout_rng.h: the counter-based random numbers behind dropout masks.
 *
 * Whether element i of a tensor is kept is a pure function of a 64-bit key
 * and i (splitmix64's finaliser), so the CPU and a GPU draw the same mask
 * with no generator state, and a backward pass regenerates the mask instead
 * of storing it. Keys are derived from (seed, step, site): every dropout
 * site of every optimizer step gets its own stream.
 */
#ifndef SM_DROPOUT_RNG_H
#define SM_DROPOUT_RNG_H

#include <stdint.h>

static inline uint64_t dropout_mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The key of dropout site `site` (< 4096) in micro-step `step`. */
static inline uint64_t dropout_key(uint64_t seed, uint64_t step, uint32_t site)
{
    return dropout_mix64(seed ^ dropout_mix64(step * 4096u + site));
}

/* Drop threshold for probability p in [0, 1): element kept when its 32-bit
 * draw is >= the threshold. */
static inline uint32_t dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t <= 0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

static inline int dropout_keep(uint64_t key, uint64_t i, uint32_t threshold)
{
    return (uint32_t)(dropout_mix64(key + i * 0xD1B54A32D192ED03ull) >> 32) >= threshold;
}

#endif

/* rng.h: the project's random numbers, all from splitmix64.
 *
 * Everything random in the engine is a pure function of a seed and
 * counters, drawn here: initial weights (rng_normal), data orders and masks
 * (rng_next streams keyed by the seed), and dropout. No generator keeps
 * hidden state, so a run repeats to the bit, and the CPU and a GPU draw the
 * same numbers.
 *
 * Element draws: element i of a tensor under a 64-bit key draws
 * rng_element(key, i) (splitmix64's finaliser of key + i times an odd
 * constant): dropout (whether element i is kept, so a backward pass
 * regenerates the mask instead of storing it), the CPU's and the GPU's
 * alike, and the masked-LM's token choices. Dropout keys are derived from
 * (seed, step, site): every dropout site of every optimizer step gets its
 * own stream.
 *
 * This file is the only splitmix64: the tests, the benchmarks and the CUDA
 * kernels draw from it too (RNG_HOST_DEVICE marks what device code calls).
 */
#ifndef SM_RNG_H
#define SM_RNG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Functions CUDA kernels call too: __host__ __device__ under nvcc. The tests'
 * CUDA emulator compiles gpu/ as host C++ (its cuda_runtime.h defines
 * __host__ and __device__ away), so for it, as for C, nothing. */
#ifdef __CUDACC__
#define RNG_HOST_DEVICE __host__ __device__
#else
#define RNG_HOST_DEVICE
#endif

/* splitmix64's increment, the golden ratio's 64 bits. */
#define RNG_GOLDEN 0x9E3779B97F4A7C15ull
/* The odd constant that spreads element indices apart before mixing. */
#define RNG_ELEMENT_STRIDE 0xD1B54A32D192ED03ull

/* splitmix64's finaliser of z + the golden-ratio increment. */
static inline RNG_HOST_DEVICE uint64_t rng_mix64(uint64_t z)
{
    z += RNG_GOLDEN;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The next number of the splitmix64 stream whose state is *s. */
static inline uint64_t rng_next(uint64_t *s)
{
    *s += RNG_GOLDEN;
    return rng_mix64(*s);
}

/* Element i's draw under key. */
static inline RNG_HOST_DEVICE uint64_t rng_element(uint64_t key, uint64_t i)
{
    return rng_mix64(key + i * RNG_ELEMENT_STRIDE);
}

/* The key under which element i draws what element first + i draws under
 * key: a tensor's part starting at element `first` keeps its draws. */
static inline uint64_t rng_element_key(uint64_t key, uint64_t first)
{
    return key + first * RNG_ELEMENT_STRIDE;
}

/* A standard normal draw from the stream *s (Box-Muller on two draws). */
static inline double rng_normal(uint64_t *s)
{
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* x[0, n) = normal(0, stddev) draws from the stream *s, in order. */
static inline void rng_fill_normal(float *x, size_t n, double stddev, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)(rng_normal(s) * stddev);
}

/* The key of dropout site `site` (< 4096) in micro-step `step`. */
static inline uint64_t dropout_key(uint64_t seed, uint64_t step, uint32_t site)
{
    return rng_mix64(seed ^ rng_mix64(step * 4096u + site));
}

/* Drop threshold for probability p in [0, 1): element kept when its 32-bit
 * draw is >= the threshold. */
static inline uint32_t dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t <= 0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* 1 when element i under key is kept (its draw's high 32 bits). */
static inline RNG_HOST_DEVICE int dropout_keep(uint64_t key, uint64_t i, uint32_t threshold)
{
    return (uint32_t)(rng_element(key, i) >> 32) >= threshold;
}

#endif
